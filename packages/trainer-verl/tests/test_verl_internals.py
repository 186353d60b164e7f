"""The verl internals relight_verl._ppo_trainer relies on are still there, read from verl's source.

This reads the installed verl's source instead of importing it (the GPU path's imports need
verl's ``vllm``/``fsdp`` extras), so when a new verl in the pinned range renames one of these, this
test says which, in seconds. The CPU mode (``relight_verl.cpu``) imports what it uses and is
checked by running it (``test_cpu_e2e``).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest


def classes_in(module: str) -> dict[str, ast.ClassDef]:
    """The classes a verl module defines, read without importing it (its package imports Ray)."""
    spec = importlib.util.find_spec("verl")
    assert spec is not None
    assert spec.origin is not None
    path = Path(spec.origin).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    tree = ast.parse(path.read_text())
    return {node.name: node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}


def methods_of(module: str, name: str) -> set[str]:
    node = classes_in(module)[name]
    return {item.name for item in node.body if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)}


def attributes_set_by(module: str, name: str, method: str) -> set[str]:
    (function,) = (item for item in classes_in(module)[name].body if getattr(item, "name", None) == method)
    return {
        target.attr
        for node in ast.walk(function)
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
    }


@pytest.mark.parametrize(
    ("module", "name", "needed"),
    [
        (
            "verl.trainer.ppo.ray_trainer",
            "RayPPOTrainer",
            {
                "__init__",
                "_create_dataloader",
                "init_workers",
                "_load_checkpoint",
                "_balance_batch",
                "_compute_old_log_prob",
                "_compute_ref_log_prob",
                "_compute_values",
                "_update_critic",
                "_update_actor",
            },
        ),
        (
            "verl.trainer.main_ppo_v0",
            "BaseTaskRunner",
            {"add_actor_rollout_worker", "add_critic_worker", "init_resource_pool_mgr"},
        ),
        ("verl.checkpoint_engine.base", "CheckpointEngineManager", {"sleep_replicas", "update_weights"}),
        ("verl.workers.rollout.llm_server", "LLMServerManager", {"get_addresses", "get_replicas"}),
        ("verl.workers.engine_workers", "ActorRolloutRefWorker", {"save_checkpoint", "load_checkpoint"}),
        ("verl.workers.engine_workers", "TrainingWorker", {"save_checkpoint", "load_checkpoint"}),
    ],
)
def test_the_methods_we_call_exist(module: str, name: str, needed: set[str]) -> None:
    assert needed <= methods_of(module, name), f"{module}.{name} lacks {sorted(needed - methods_of(module, name))}"


def test_verls_worker_setup_leaves_the_handles_we_read() -> None:
    module = "verl.trainer.ppo.ray_trainer"
    made = attributes_set_by(module, "RayPPOTrainer", "init_workers")
    assert {"actor_rollout_wg", "critic_wg", "llm_server_manager", "checkpoint_manager"} <= made
    made = attributes_set_by(module, "RayPPOTrainer", "__init__")
    assert {"tokenizer", "use_critic", "use_reference_policy", "kl_ctrl_in_reward"} <= made
