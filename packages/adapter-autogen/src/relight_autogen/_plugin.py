"""Registers the AutoGen adapter with relight (entry point ``autogen`` in the ``relight`` group)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from relight.hookspecs import hookimpl
from relight_autogen._adapter import AutoGenAdapter


@hookimpl
def relight_register_adapters(register: Callable[[str, Callable[[], Any]], None]) -> None:
    register(AutoGenAdapter.framework, AutoGenAdapter)
