"""relight-torch's plugin: registers its engine and algorithms through the ``relight`` entry point."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import relight


@relight.hookimpl
def relight_register_engines(register: Callable[[str, Callable[..., Any]], None]) -> None:
    from relight_torch.engine import TorchEngine

    register("torch", TorchEngine.from_pretrained)
