"""relight-apo's plugin: APO registered as the algorithm ``"apo"``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from relight.hookspecs import hookimpl
from relight_apo.apo import APO


@hookimpl
def relight_register_algorithms(register: Callable[[str, Callable[..., Any]], None]) -> None:
    register("apo", APO)
