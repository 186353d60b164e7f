"""What a recipe's run reports beyond the trainer's metrics, read back from its store once it has finished.

The scenario benchmarks compare runs by these figures (``scenario.json``): LLM calls and generated tokens of
the training rollouts, each figure the agent annotated and each role's credited reward in the first
validation and the last (before and after RL), the tokens each update trained on, and the peak memory.
"""

from __future__ import annotations

import collections
import json
import resource
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import relight
from relight import semconv
from relight.records import Mode, RolloutStatus, SpanKind, Transition
from relight.store import Store
from relight.transitions.builder import TransitionBuilder

__all__ = ["TokenCount", "generation_counts", "held_out_by_role", "held_out_figures", "peak_rss_gb"]


class TokenCount:
    """Counts the prompt and response tokens each update trains on."""

    def __init__(self) -> None:
        self.tokens = 0

    def __call__(self, transitions: Sequence[Transition], metrics: Mapping[str, float]) -> None:
        self.tokens += sum(len(t.prompt_token_ids) + len(t.response_token_ids) for t in transitions)


async def generation_counts(store_path: Path) -> dict[str, int]:
    """LLM calls and generated tokens of the training rollouts, read back from the store."""
    store: Store = relight.open_store(f"sqlite:///{store_path}")
    calls = tokens = 0
    try:
        for rollout in await store.list_rollouts(mode=Mode.TRAIN):
            if rollout.status is not RolloutStatus.SUCCEEDED:
                continue
            for span in await store.query_spans(rollout.rollout_id):
                if span.kind is SpanKind.LLM:
                    calls += 1
                    tokens += int(span.attributes.get(semconv.GEN_AI_USAGE_OUTPUT_TOKENS) or 0)  # type: ignore[arg-type]
    finally:
        await store.close()
    return {"calls": calls, "tokens": tokens}


async def held_out_figures(store_path: Path, names: Sequence[str], size: int) -> dict[str, dict[str, float]]:
    """Each named figure's mean over the first validation's rollouts and over the last's (``before``, ``after``),
    from the annotations the agent recorded (``relight.emit_annotation({name: value})``).

    Validations run ``size`` held-out tasks each; their rollouts are told apart by the order they were made in.
    """
    if not names or size == 0:
        return {}
    store: Store = relight.open_store(f"sqlite:///{store_path}")
    values: dict[str, list[list[float]]] = {name: [] for name in names}
    try:
        rollouts = sorted(await store.list_rollouts(mode=Mode.VAL), key=lambda r: r.created_at)
        for rollout in rollouts:
            found: dict[str, list[float]] = {name: [] for name in names}
            for span in await store.query_spans(rollout.rollout_id):
                if span.kind is not SpanKind.ANNOTATION:
                    continue
                payload = json.loads(str(span.attributes.get(semconv.ANNOTATION) or "{}"))
                for name in names:
                    if isinstance(payload, dict) and isinstance(payload.get(name), int | float):
                        found[name].append(float(payload[name]))
            for name, seen in found.items():
                values[name].append(seen)
    finally:
        await store.close()
    return {
        name: {"before": _mean_of_all(per_rollout[:size]), "after": _mean_of_all(per_rollout[-size:])}
        for name, per_rollout in values.items()
    }


async def held_out_by_role(store_path: Path, builder: TransitionBuilder, size: int) -> dict[str, dict[str, float]]:
    """Each role's held-out reward in the first validation and the last (``before``, ``after``): the credit
    ``builder`` gives the role's calls (a role's own reward where the agent emits one, else the episode's),
    averaged over the role's calls of each rollout, then over the rollouts the role took part in."""
    if size == 0:
        return {}
    store: Store = relight.open_store(f"sqlite:///{store_path}")
    try:
        rollouts = sorted(await store.list_rollouts(mode=Mode.VAL), key=lambda r: r.created_at)
        phases = {"before": rollouts[:size], "after": rollouts[-size:]}
        found: dict[str, dict[str, float]] = collections.defaultdict(dict)
        for phase, chosen in phases.items():
            per_rollout: dict[str, list[float]] = collections.defaultdict(list)
            for rollout in chosen:
                credit: dict[str, list[float]] = collections.defaultdict(list)
                for transition in await builder.from_store(store, [rollout]):
                    credit[transition.role or "(no role)"].append(transition.reward)
                for role, rewards in credit.items():
                    per_rollout[role].append(sum(rewards) / len(rewards))
            for role, means in per_rollout.items():
                found[role][phase] = sum(means) / len(means)
    finally:
        await store.close()
    return dict(found)


def _mean_of_all(groups: Sequence[Sequence[float]]) -> float:
    flat = [value for group in groups for value in group]
    return sum(flat) / len(flat) if flat else float("nan")


def peak_rss_gb() -> float:
    """This process's peak resident memory (Linux reports kilobytes, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 30) if sys.platform == "darwin" else peak / (1 << 20)
