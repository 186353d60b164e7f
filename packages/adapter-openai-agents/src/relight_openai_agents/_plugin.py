"""Announces the adapter to relight's plugin manager (entry point ``openai_agents``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import relight
from relight_openai_agents._adapter import OpenAIAgentsAdapter


@relight.hookimpl
def relight_register_adapters(register: Callable[[str, Callable[[], Any]], None]) -> None:
    register(OpenAIAgentsAdapter.framework, OpenAIAgentsAdapter)
