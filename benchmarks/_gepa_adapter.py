"""GEPA's reference implementation driving a relight agent: a ``GEPAAdapter`` and its reflection model.

``gepa.optimize(seed_candidate, trainset, valset, adapter=RelightAdapter(runs), reflection_lm=Reflector(...))``
evolves the prompts the agent reads as resources. GEPA's candidate (a name → text mapping) is published
as a resources version and each task runs once pinned to it, through :class:`_agent_runs.AgentRuns`
(the gateway, runner and store of a relight run). Its reflective dataset holds each run rendered as
relight's APO shows it to its optimiser (:func:`relight.rewards.render_rollout`) with its reward, so the
two optimisers read the same evidence; GEPA's own proposer and prompt write the edits.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
from _agent_runs import AgentRuns, Outcome
from gepa.core.adapter import EvaluationBatch
from pydantic import JsonValue

from relight.rewards.render import task_text

__all__ = ["Reflector", "RelightAdapter"]


class RelightAdapter:
    """GEPA's adapter protocol (``evaluate``, ``make_reflective_dataset``) over a relight agent."""

    propose_new_texts = None
    """GEPA's own proposer, with its own reflection prompt, writes the edits."""

    def __init__(self, runs: AgentRuns) -> None:
        self.runs = runs

    def evaluate(
        self, batch: list[JsonValue], candidate: dict[str, str], capture_traces: bool = False
    ) -> EvaluationBatch[Outcome, float]:
        outcomes = self.runs.run(batch, candidate)
        rewards = [outcome.reward for outcome in outcomes]
        return EvaluationBatch(
            outputs=rewards,
            scores=rewards,
            trajectories=[*outcomes] if capture_traces else None,
        )

    def make_reflective_dataset(
        self, candidate: dict[str, str], eval_batch: EvaluationBatch[Outcome, float], components_to_update: list[str]
    ) -> Mapping[str, Sequence[Mapping[str, Any]]]:
        outcomes = eval_batch.trajectories or []
        records = [
            {
                "Inputs": task_text(outcome.task),
                "Generated Outputs": outcome.rendered.text,
                "Feedback": f"reward {outcome.reward:g}"
                + (f"; the run failed: {outcome.error}" if outcome.error else ""),
            }
            for outcome in outcomes
        ]
        return {name: records for name in components_to_update}


class Reflector:
    """GEPA's reflection model: a chat completion at an OpenAI-compatible endpoint, its tokens and time counted."""

    def __init__(self, base_url: str, model: str, *, temperature: float = 1.0, max_tokens: int = 1024) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.calls = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.seconds = 0.0

    def __call__(self, prompt: str | list[dict[str, Any]]) -> str:
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        began = time.perf_counter()
        reply = httpx.post(
            f"{self.base_url}/chat/completions",
            json={
                "model": self.model,
                "messages": messages,
                "temperature": self.temperature,
                "max_tokens": self.max_tokens,
            },
            timeout=600,
        )
        self.seconds += time.perf_counter() - began
        reply.raise_for_status()
        body = reply.json()
        self.calls += 1
        self.input_tokens += int(body.get("usage", {}).get("prompt_tokens") or 0)
        self.output_tokens += int(body.get("usage", {}).get("completion_tokens") or 0)
        return str(body["choices"][0]["message"].get("content") or "")
