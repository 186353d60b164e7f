"""Registers the LangGraph adapter with relight (entry point ``langgraph`` in the ``relight`` group)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from relight.hookspecs import hookimpl
from relight_langgraph._adapter import LangGraphAdapter


@hookimpl
def relight_register_adapters(register: Callable[[str, Callable[[], Any]], None]) -> None:
    register(LangGraphAdapter.framework, LangGraphAdapter)
