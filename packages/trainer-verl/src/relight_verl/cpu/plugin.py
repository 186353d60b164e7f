"""relight-verl's ``verl.plugins`` entry point: verl imports it while ``import verl`` runs, in every process.

verl's plugin API is registration by import, so this module's import is its whole job, and it is
kept cheap: only when ``VERL_PLATFORM=cpu`` selects the CPU does it load the platform, add the
``relight_vllm`` rollout backend and register verl's FSDP engines for the CPU device (verl
registers them for ``cuda`` and ``npu`` only). verl swallows a plugin's import errors, so failures
here are logged as warnings instead of hiding.
"""

from __future__ import annotations

import importlib
import logging
import os
import warnings
from typing import Any

__all__ = ["ROLLOUT", "activate", "ray_options", "register"]

logger = logging.getLogger(__name__)

ROLLOUT = "relight_vllm"
"""The rollout backend (``actor_rollout_ref.rollout.name``) that serves with a vLLM server relight runs."""
_ROLLOUT_MODULE = "relight_verl.cpu.rollout"


def register() -> None:
    """Register the CPU platform, the vLLM rollout and the CPU FSDP engines with verl; idempotent."""
    from relight_verl.cpu import platform  # first: verl's engine modules ask for the platform on import

    _gloo_process_groups()  # before verl's workers module binds the function
    with warnings.catch_warnings():
        # verl's notices (optional engines that are not installed, a Ray API Ray marks deprecated).
        warnings.simplefilter("ignore")
        from verl.workers.engine.base import EngineRegistry
        from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead
        from verl.workers.rollout import base as rollout_base
        from verl.workers.rollout.replica import RolloutReplicaRegistry

    _unpinned_offload()
    engines = EngineRegistry._engines  # pyright: ignore[reportPrivateUsage]
    for model_type, engine in (("language_model", FSDPEngineWithLMHead), ("value_model", FSDPEngineWithValueHead)):
        if platform.NAME not in engines.get(model_type, {}).get("fsdp", {}):
            EngineRegistry.register(model_type=model_type, backend=["fsdp", "fsdp2"], device=platform.NAME)(engine)
    # By name: the rollout module imports verl, and this runs inside verl's own import.
    rollout_base._ROLLOUT_REGISTRY[(ROLLOUT, "async")] = f"{_ROLLOUT_MODULE}.ServerAdapter"  # pyright: ignore[reportPrivateUsage]
    RolloutReplicaRegistry.register(ROLLOUT, lambda: importlib.import_module(_ROLLOUT_MODULE).VLLMReplica)


def _gloo_process_groups() -> None:
    """verl's training workers join ``cpu:gloo,<device>:<backend>``, which torch refuses for device ``cpu``
    (a device named twice): make gloo alone the default. Only the backend string changes."""
    import verl.utils.distributed as distributed

    original = distributed.initialize_global_process_group_ray
    if getattr(original, "relight_gloo", False):
        return

    def initialize_global_process_group_ray(timeout_second: int | None = None, backend: str | None = None) -> None:
        original(timeout_second=timeout_second, backend=backend or "gloo")

    initialize_global_process_group_ray.relight_gloo = True  # type: ignore[attr-defined]
    distributed.initialize_global_process_group_ray = initialize_global_process_group_ray


def _unpinned_offload() -> None:
    """verl's FSDP2 engine gives forward-only models (the reference policy) ``CPUOffloadPolicy(pin_memory=True)``;
    pinning needs an accelerator. On the CPU the policy stays, unpinned: "offloaded" parameters are where they were."""
    from torch.distributed.fsdp import CPUOffloadPolicy
    from verl.workers.engine.fsdp import transformer_impl

    class UnpinnedCPUOffloadPolicy(CPUOffloadPolicy):
        def __init__(self, pin_memory: bool = False) -> None:
            super().__init__(pin_memory=False)

    if transformer_impl.CPUOffloadPolicy is CPUOffloadPolicy:
        transformer_impl.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy


def activate() -> None:
    """Make this process's verl use the CPU platform, whatever it detected before, and register the rest.

    The driver calls it before importing verl's trainer; Ray workers get ``VERL_PLATFORM=cpu`` from
    :func:`ray_options` and register on import.
    """
    from verl.plugin.platform import get_platform, set_platform

    from relight_verl.cpu.platform import NAME, CPUPlatform

    os.environ["VERL_PLATFORM"] = NAME
    register()
    if get_platform().device_name != "cpu":
        set_platform(CPUPlatform())


def ray_options(kwargs: dict[str, Any], *, processes: int, local: bool) -> dict[str, Any]:
    """``ray.init`` keyword arguments for a CPU run: every process gets ``VERL_PLATFORM=cpu``.

    A local Ray also declares one :data:`~relight_verl.cpu.platform.RAY_RESOURCE` per training
    process (a cluster joined with ``ray start`` must declare them itself: ``--resources``).
    """
    from relight_verl.cpu.platform import NAME, RAY_RESOURCE

    runtime_env = dict(kwargs.get("runtime_env") or {})
    runtime_env["env_vars"] = {**(runtime_env.get("env_vars") or {}), "VERL_PLATFORM": NAME}
    options = {**kwargs, "runtime_env": runtime_env}
    if local:
        options["resources"] = {**(options.get("resources") or {}), RAY_RESOURCE: processes}
    return options


if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    try:
        register()
    except Exception:  # verl would drop it silently
        logger.warning("relight-verl could not register verl's CPU platform", exc_info=True)
        raise
