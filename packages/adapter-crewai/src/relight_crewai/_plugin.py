"""Announces the adapter to relight's plugin manager (entry point ``crewai``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import relight
from relight_crewai._adapter import CrewAIAdapter


@relight.hookimpl
def relight_register_adapters(register: Callable[[str, Callable[[], Any]], None]) -> None:
    register(CrewAIAdapter.framework, CrewAIAdapter)
