"""relight-verl from its wheel: a verl config composed from a VerlConfig, and transitions built into a verl batch."""

from __future__ import annotations

import sys
from pathlib import Path

import relight_verl
from relight.records import Transition
from relight_verl import VerlConfig, to_verl_config
from relight_verl.batch import build_batch

assert Path(relight_verl.__file__).is_relative_to(sys.prefix), f"imported from {relight_verl.__file__}"

config = to_verl_config(VerlConfig(model="Qwen/Qwen2.5-0.5B-Instruct"))
assert config.actor_rollout_ref.model.path == "Qwen/Qwen2.5-0.5B-Instruct", config.actor_rollout_ref.model.path

transitions = [
    Transition.model_validate(
        {
            "rollout_id": f"ro-{index}",
            "attempt_id": "at-1",
            "group_id": "task-1",
            "step": 0,
            "prompt_token_ids": [5, 6, 7],
            "response_token_ids": [8, 9][: 1 + index % 2],
            "response_logprobs": [-0.1, -0.2][: 1 + index % 2],
            "reward": float(index % 2),
        }
    )
    for index in range(4)
]
batch, stats = build_batch(transitions, pad_token_id=0, max_prompt_length=8, max_response_length=4)
assert batch is not None, stats
assert len(batch) == 4, stats
assert {"prompts", "responses", "attention_mask"} <= set(batch.batch.keys()), batch.batch.keys()
print("verl batch of", len(batch), "rows:", sorted(batch.batch.keys()))
print("relight-verl smoke test passed")
