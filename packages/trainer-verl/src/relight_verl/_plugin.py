"""relight plugin: registers the ``verl`` algorithm. Importing it loads neither verl nor torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import relight


def _verl_algorithm(*args: Any, **kwargs: Any) -> Any:
    from relight_verl.algorithm import VerlAlgorithm

    return VerlAlgorithm(*args, **kwargs)


@relight.hookimpl
def relight_register_algorithms(register: Callable[[str, Callable[..., Any]], None]) -> None:
    register("verl", _verl_algorithm)
