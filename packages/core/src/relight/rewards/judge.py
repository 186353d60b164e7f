"""A judge model that scores a group's rollouts: rewards without writing a reward function.

``Judge(rubric, base_url=..., model=...)`` is a :class:`relight.rewards.GroupReward`: once a GRPO
group has finished, it shows the group's rollouts (rendered from their spans by
:mod:`relight.rewards.render`: the task, each rollout's messages, tool calls and results and final
answer, trimmed to ``max_chars``) to a model behind any OpenAI-compatible endpoint (a hosted API, a
local vLLM, relight-torch's server) in one chat call, and turns its reply into rewards::

    judge = Judge("The answer must name the city's weather and nothing else.", base_url=URL, model="judge")
    Trainer(algorithm, group_rewards=[judge]).fit(agent, tasks)

Two modes, both one call per group:

* ``"rank"`` (RULER's design: comparing is easier for a model than grading, and GRPO only needs the
  order): the judge gives each rollout a rank, 1 the best; equally good rollouts share a rank. A
  rollout's reward is the share of the others it beats, a tie counting half:
  ``(wins + ties / 2) / (n - 1)``, from 1.0 (beats all) to 0.0 (beaten by all); a group ranked all
  equal gets 0.5 each, which is no signal. A single rollout to judge gets 1.0 without a call.
* ``"score"``: the judge grades each rollout against the rubric from 0 to 10; its reward is the grade / 10.

Each reward is multiplied by ``weight`` and written as a reward span named ``judge``, so it adds to
the agent's own reward, if any. A ``gate`` (a function of the :class:`RenderedRollout`, e.g. "the
final answer parses") keeps rollouts that fail it from the judge: they get ``gated_reward`` (times
``weight``) and are judged no further. The judge's reason for each rollout is kept as an annotation
span (``annotation judge``) beside the reward.

Replies, and what is done with them:

* A reply must be one JSON object (a fenced code block is accepted) naming every rollout exactly
  once, with an integer rank from 1 to n or a grade from 0 to 10. Anything else (prose, a refusal,
  a missing or extra rollout, an out-of-range value) is malformed: the judge is asked again, told
  what was wrong, up to ``max_tries`` calls in all.
* An HTTP error or a call that takes longer than ``timeout`` seconds is tried again the same way.
* After ``max_tries`` failed calls the group gets no judge reward at all (never a made-up score):
  each rollout's note says why (``malformed``, ``timeout``, ``http_error``) and the group is counted
  in ``judge_groups_no_signal``. A judge that hangs costs a group at most ``max_tries × timeout``
  seconds, and the asynchronous loop goes on training other groups meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import httpx
from pydantic import JsonValue

from relight.errors import ConfigError
from relight.hookspecs import hookimpl
from relight.rewards.group import GroupReward, GroupScores, Sample, Usage
from relight.rewards.render import DEFAULT_MAX_CHARS, RenderedRollout, render_rollout, task_text

__all__ = ["DEFAULT_RUBRIC", "Judge", "JudgeReplyError", "parse_reply", "rank_rewards"]

DEFAULT_RUBRIC = (
    "A rollout that does what the task asks scores higher than one that does not. Between rollouts that "
    "both do it, the one that is more correct, complete and direct scores higher. A rollout that makes "
    "things up or gives no answer scores lowest."
)

Mode = Literal["rank", "score"]

_INSTRUCTIONS: dict[str, str] = {
    "rank": (
        "You judge the work of an AI agent. You are shown one task and {n} attempts at it by the agent, "
        "labelled {labels}. Compare the attempts with each other by the rubric and rank them: rank 1 is the "
        "best; attempts that are equally good share a rank.\n"
        'Reply with one JSON object and nothing else: {{"ranking": [{{"id": "A", "rank": 1, "reason": "one '
        'sentence"}}, ...]}} with every attempt exactly once.'
    ),
    "score": (
        "You judge the work of an AI agent. You are shown one task and {n} attempts at it by the agent, "
        "labelled {labels}. Grade each attempt by the rubric from 0 (worst) to 10 (best).\n"
        'Reply with one JSON object and nothing else: {{"scores": [{{"id": "A", "score": 7, "reason": "one '
        'sentence"}}, ...]}} with every attempt exactly once.'
    ),
}


class JudgeReplyError(ValueError):
    """A judge's reply that cannot be turned into rewards; the message says what was wrong, for the next try."""


@dataclass(frozen=True, slots=True)
class _Verdict:
    value: float
    """The rank (1 = best) or the grade (0-10)."""
    reason: str


class Judge:
    """Scores a group's rollouts with a judge model behind an OpenAI-compatible endpoint (see the module docstring).

    Args:
        rubric: what a good rollout is, in plain language.
        base_url: the endpoint's OpenAI base URL (``https://api.openai.com/v1``, ``http://127.0.0.1:8000/v1``).
        model: the judge model's name there.
        api_key: sent as a bearer token; ``RELIGHT_JUDGE_API_KEY``, then ``OPENAI_API_KEY`` by default.
        mode: ``"rank"`` (relative, RULER-style) or ``"score"`` (absolute grades against the rubric).
        weight: multiplies the judge's reward before it adds to the agent's own.
        gate: rollouts for which it returns False are not judged and get ``gated_reward``.
        gated_reward: the reward (before ``weight``) of a rollout the gate keeps out.
        max_tries: calls per group at most, the first included, before the group is left without signal.
        timeout: seconds one call may take.
        max_chars: characters of each rollout the judge sees (see :mod:`relight.rewards.render`).
        temperature: the judge's sampling temperature.
        max_tokens: the longest reply asked for.
        extra_body: more fields for the request body (``{"response_format": {"type": "json_object"}}``).
        concurrency: judge calls in flight at once, over all groups.
        name: names its reward and annotation spans and its metrics.
    """

    def __init__(
        self,
        rubric: str = DEFAULT_RUBRIC,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        mode: Mode = "rank",
        weight: float = 1.0,
        gate: Callable[[RenderedRollout], bool] | None = None,
        gated_reward: float = 0.0,
        max_tries: int = 3,
        timeout: float = 60.0,
        max_chars: int = DEFAULT_MAX_CHARS,
        temperature: float = 0.0,
        max_tokens: int = 1024,
        extra_body: Mapping[str, Any] | None = None,
        concurrency: int = 8,
        name: str = "judge",
    ) -> None:
        if mode not in _INSTRUCTIONS:
            raise ConfigError(f"mode must be 'rank' or 'score', got {mode!r}")
        if max_tries < 1:
            raise ConfigError(f"max_tries must be at least 1, got {max_tries}")
        if not timeout > 0:
            raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if not rubric.strip():
            raise ConfigError("rubric is empty; say in plain language what a good rollout is")
        self.rubric = rubric.strip()
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key or os.environ.get("RELIGHT_JUDGE_API_KEY") or os.environ.get("OPENAI_API_KEY")
        self.mode: Mode = mode
        self.weight = weight
        self.gate = gate
        self.gated_reward = gated_reward
        self.max_tries = max_tries
        self.timeout = timeout
        self.max_chars = max_chars
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra_body = dict(extra_body or {})
        self._name = name
        self.concurrency = concurrency
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        """One semaphore per event loop: a Judge may serve several ``fit()`` calls, each on a loop of its own."""

    @property
    def name(self) -> str:
        return self._name

    async def score(self, group_id: str, task: JsonValue, samples: Sequence[Sample]) -> GroupScores:
        """Judge one group's rollouts: one call (more when a reply is malformed or late), then rewards."""
        rendered = [render_rollout(s.rollout.rollout_id, s.spans, max_chars=self.max_chars) for s in samples]
        judged = [r for r in rendered if self.gate is None or self.gate(r)]
        rewards: dict[str, float] = {}
        notes: dict[str, dict[str, JsonValue]] = {}
        for r in rendered:
            if r not in judged:
                rewards[r.rollout_id] = self.gated_reward * self.weight
                notes[r.rollout_id] = {"judge": self.model, "gated": True, "reward": rewards[r.rollout_id]}
        if not judged:
            return GroupScores(rewards, notes)
        if self.mode == "rank" and len(judged) == 1:
            only = judged[0].rollout_id
            rewards[only] = self.weight
            notes[only] = {"judge": self.model, "reason": "the only rollout to judge", "reward": self.weight}
            return GroupScores(rewards, notes)
        labels = [_label(index) for index in range(len(judged))]
        messages = self.messages(task, judged, labels)
        usage = Usage()
        failure, detail = "malformed", ""
        for attempt in range(self.max_tries):
            if attempt:
                usage.retries += 1
            try:
                reply = await self._call(messages, usage)
            except (TimeoutError, httpx.TimeoutException):
                failure, detail = "timeout", f"no reply within {self.timeout} s"
                continue
            except httpx.HTTPError as error:
                failure, detail = "http_error", f"{type(error).__name__}: {error}"
                continue
            try:
                verdicts = parse_reply(reply, labels, self.mode)
            except JudgeReplyError as error:
                failure, detail = "malformed", str(error)
                messages = [*messages, {"role": "assistant", "content": reply}, _correction(error, self.mode)]
                continue
            values = rank_rewards([verdicts[label].value for label in labels]) if self.mode == "rank" else None
            for index, (label, r) in enumerate(zip(labels, judged, strict=True)):
                verdict = verdicts[label]
                base = values[index] if values is not None else verdict.value / 10.0
                rewards[r.rollout_id] = base * self.weight
                notes[r.rollout_id] = {
                    "judge": self.model,
                    "mode": self.mode,
                    "label": label,
                    self.mode: verdict.value,
                    "reward": rewards[r.rollout_id],
                    "reason": verdict.reason,
                    "group_size": len(judged),
                }
            return GroupScores(rewards, notes, usage)
        for r in rendered:  # the gated too: the group as a whole gets no judge reward
            notes[r.rollout_id] = {"judge": self.model, "no_signal": failure, "detail": detail, "tries": self.max_tries}
        return GroupScores({}, notes, usage, failure=failure)

    def messages(
        self, task: JsonValue, judged: Sequence[RenderedRollout], labels: Sequence[str]
    ) -> list[dict[str, str]]:
        """The judge's chat: its instructions, then the rubric, the task and each rollout under its label."""
        system = _INSTRUCTIONS[self.mode].format(n=len(judged), labels=", ".join(labels))
        parts = [f"Rubric:\n{self.rubric}", f"Task:\n{task_text(task)}"]
        parts += [f"=== Attempt {label} ===\n{r.text}" for label, r in zip(labels, judged, strict=True)]
        return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]

    async def _call(self, messages: Sequence[Mapping[str, str]], usage: Usage) -> str:
        """One chat completion within ``timeout`` seconds; its text. Counts the call, tokens and time in ``usage``."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            **self.extra_body,
        }
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        slots = self._slots.setdefault(asyncio.get_running_loop(), asyncio.Semaphore(self.concurrency))
        async with slots:
            began = time.perf_counter()
            usage.calls += 1
            try:
                async with asyncio.timeout(self.timeout), httpx.AsyncClient(timeout=self.timeout) as client:
                    response = await client.post(f"{self.base_url}/chat/completions", json=body, headers=headers)
                    response.raise_for_status()
                    payload: Any = response.json()
            finally:
                usage.latency_s += time.perf_counter() - began
        if not isinstance(payload, dict):
            raise httpx.DecodingError("the judge's endpoint answered with something other than a JSON object")
        reply = cast(dict[str, Any], payload)
        counted = cast(dict[str, Any], reply.get("usage") or {})
        usage.input_tokens += int(counted.get("prompt_tokens") or 0)
        usage.output_tokens += int(counted.get("completion_tokens") or 0)
        try:
            return str(reply["choices"][0]["message"].get("content") or "")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise httpx.DecodingError("the judge's endpoint answered with no choices[0].message") from None


def parse_reply(reply: str, labels: Sequence[str], mode: Mode) -> dict[str, _Verdict]:
    """Each label's rank or grade and reason, from a judge's reply; raises JudgeReplyError saying what is wrong."""
    data = _json_object(reply)
    key, field = ("ranking", "rank") if mode == "rank" else ("scores", "score")
    entries: Any = data.get(key)
    if not isinstance(entries, list):
        raise JudgeReplyError(f'the reply has no "{key}" list')
    verdicts: dict[str, _Verdict] = {}
    for entry in cast(list[Any], entries):
        if not isinstance(entry, dict):
            raise JudgeReplyError(f'each item of "{key}" must be an object with "id", "{field}" and "reason"')
        item = cast(dict[str, Any], entry)
        label = str(item.get("id", "")).strip()
        if label not in labels:
            raise JudgeReplyError(f"the reply names attempt {label!r}; the attempts are {', '.join(labels)}")
        if label in verdicts:
            raise JudgeReplyError(f"the reply names attempt {label} twice")
        verdicts[label] = _Verdict(_value(item.get(field), field, len(labels)), str(item.get("reason") or ""))
    missing = [label for label in labels if label not in verdicts]
    if missing:
        raise JudgeReplyError(f"the reply leaves out attempt(s) {', '.join(missing)}")
    return verdicts


def rank_rewards(ranks: Sequence[float]) -> list[float]:
    """Each rank's reward: the share of the others it beats (rank 1 is best), a tie counting half."""
    if len(ranks) == 1:
        return [1.0]
    return [
        (sum(other > mine for other in ranks) + 0.5 * (sum(other == mine for other in ranks) - 1)) / (len(ranks) - 1)
        for mine in ranks
    ]


def _value(raw: Any, field: str, n: int) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise JudgeReplyError(f'"{field}" must be a number, got {raw!r}')
    if field == "rank" and (raw != int(raw) or not 1 <= raw <= n):
        raise JudgeReplyError(f'"rank" must be a whole number from 1 to {n}, got {raw!r}')
    if field == "score" and not 0 <= raw <= 10:
        raise JudgeReplyError(f'"score" must be from 0 to 10, got {raw!r}')
    return float(raw)


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def _json_object(reply: str) -> dict[str, Any]:
    fenced = _FENCE.search(reply)
    text = fenced.group(1) if fenced else reply
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise JudgeReplyError("the reply holds no JSON object")
    try:
        data: Any = json.loads(text[start : end + 1])
    except ValueError as error:
        raise JudgeReplyError(f"the reply's JSON does not parse: {error}") from None
    if not isinstance(data, dict):
        raise JudgeReplyError("the reply's JSON is not an object")
    return cast(dict[str, Any], data)


def _correction(error: JudgeReplyError, mode: Mode) -> dict[str, str]:
    shape = (
        '{"ranking": [{"id": ..., "rank": ..., "reason": ...}]}'
        if mode == "rank"
        else ('{"scores": [{"id": ..., "score": ..., "reason": ...}]}')
    )
    return {"role": "user", "content": f"That reply cannot be used: {error}. Reply again with only {shape}."}


def _label(index: int) -> str:
    """A, B, …, Z, then A2, B2, …: short labels no model confuses with a rank or a grade."""
    letter, round_ = chr(ord("A") + index % 26), index // 26
    return letter if round_ == 0 else f"{letter}{round_ + 1}"


@hookimpl
def relight_register_group_rewards(register: Callable[[str, Callable[..., GroupReward]], None]) -> None:
    register("judge", Judge)
