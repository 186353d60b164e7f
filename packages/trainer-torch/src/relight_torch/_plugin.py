"""relight-torch's plugin: how ``relight serve`` and ``relight export-model`` handle the runs it trained.

Importing it imports no torch: :mod:`relight_torch.trained_policy` loads when a run is served or exported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from relight.hookspecs import hookimpl


def _trained_policies() -> Any:
    from relight_torch.trained_policy import TorchPolicyCheckpoints

    return TorchPolicyCheckpoints()


@hookimpl
def relight_register_trained_policies(register: Callable[[str, Callable[[], Any]], None]) -> None:
    register("relight_torch", _trained_policies)
