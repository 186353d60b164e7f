"""verl's resource pools on the CPU: its availability check counts ``GPU``/``NPU`` by name, so count ours."""

from __future__ import annotations

import dataclasses

import ray
from verl.single_controller.ray.base import ResourcePoolManager

from relight_verl.cpu.platform import RAY_RESOURCE

__all__ = ["CPUResourcePoolManager", "on_cpu"]


class CPUResourcePoolManager(ResourcePoolManager):
    """verl's :class:`ResourcePoolManager`, checking for :data:`RAY_RESOURCE` slots instead of GPUs."""

    def _check_resource_available(self) -> None:
        available = sum(
            node.get(RAY_RESOURCE, 0) for node in ray._private.state.available_resources_per_node().values()
        )  # pyright: ignore[reportPrivateUsage]
        wanted = self.get_n_gpus()
        if available < wanted:
            raise ValueError(
                f"the Ray cluster has {available:g} '{RAY_RESOURCE}' slots and verl wants {wanted} training "
                "processes: "
                f"start Ray with resources={{'{RAY_RESOURCE}': {wanted}}} (ray start --resources)"
            )


def on_cpu(manager: ResourcePoolManager) -> CPUResourcePoolManager:
    """The same pools as ``manager``, checked against the CPU slots."""
    fields = {field.name: getattr(manager, field.name) for field in dataclasses.fields(manager)}
    return CPUResourcePoolManager(**fields)
