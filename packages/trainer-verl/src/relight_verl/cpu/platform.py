"""verl on the CPU: a platform for verl's platform plugin API, with gloo for every collective.

verl reaches the accelerator only through ``verl.plugin.platform.get_platform()`` (device name,
``torch.<device>`` module, collective backend, the Ray resource that stands for one device).
:class:`CPUPlatform` answers those questions for the CPU, so verl's own Ray workers, FSDP engine
and checkpoints run unchanged on machines without a GPU. It is selected with ``VERL_PLATFORM=cpu``
(never by auto-detection, so a GPU machine with relight-verl installed keeps CUDA).

Each training process (verl's "GPU") is one unit of the Ray resource :data:`RAY_RESOURCE`, which
:func:`relight_verl._ppo_trainer.connect_ray` declares when it starts a local Ray for a CPU run.
"""

from __future__ import annotations

import resource
from contextlib import nullcontext
from types import ModuleType
from typing import Any

import psutil
import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

__all__ = ["NAME", "RAY_RESOURCE", "CPUPlatform", "cpu_device_module"]

NAME = "cpu"
"""The value of ``VERL_PLATFORM`` that selects this platform."""
RAY_RESOURCE = "cpu_device"
"""The Ray resource one training process takes, as a GPU would on a GPU machine."""


def _peak_rss() -> int:
    """Peak resident memory of this process in bytes (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _rss() -> int:
    return psutil.Process().memory_info().rss


def _mem_get_info(device: Any = None) -> tuple[int, int]:
    memory = psutil.virtual_memory()
    return memory.available, memory.total


def cpu_device_module() -> ModuleType:
    """``torch.cpu`` with what verl also asks of ``torch.cuda``: memory figures, RNG state, no-op cache calls.

    Memory figures are this process's resident memory (peak and current), so verl's
    ``perf/max_memory_allocated_gb`` metrics report what a CPU run really used.
    """
    module = ModuleType("relight_verl.cpu.device")
    for name in dir(torch.cpu):
        if not name.startswith("_"):
            setattr(module, name, getattr(torch.cpu, name))
    extras: dict[str, Any] = {
        "empty_cache": lambda: None,
        "ipc_collect": lambda: None,
        "reset_peak_memory_stats": lambda device=None: None,
        "set_per_process_memory_fraction": lambda fraction, device=None: None,
        "memory_allocated": lambda device=None: _rss(),
        "memory_reserved": lambda device=None: _rss(),
        "max_memory_allocated": lambda device=None: _peak_rss(),
        "max_memory_reserved": lambda device=None: _peak_rss(),
        "mem_get_info": _mem_get_info,
        "get_rng_state": lambda device="cpu": torch.get_rng_state(),
        "set_rng_state": lambda state, device="cpu": torch.set_rng_state(state),
        "manual_seed": torch.manual_seed,
        "manual_seed_all": torch.manual_seed,
        "get_device_name": lambda device=None: "cpu",
    }
    for name, value in extras.items():
        setattr(module, name, value)
    return module


@PlatformRegistry.register(platform=NAME)
class CPUPlatform(PlatformBase):
    """The CPU as verl's accelerator: torch's CPU device, gloo collectives, one Ray resource per process."""

    def __init__(self) -> None:
        self._module = cpu_device_module()

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return self._module

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # only ever chosen by VERL_PLATFORM=cpu, never over a GPU

    def current_device(self) -> Any:
        return "cpu"  # verl moves tensors to it (``.to(get_device_id())``): an index would mean cuda:<index>

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "RELIGHT_VERL_VISIBLE_CPUS"  # nothing reads it: every process sees the whole CPU

    def nvtx_range(self, msg: str) -> Any:
        return nullcontext()

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return RAY_RESOURCE

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
