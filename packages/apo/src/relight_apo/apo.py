"""APO: better prompts for an unchanged agent, found by an optimiser model reading the agent's own rollouts.

::

    apo = APO(
        {"system_prompt": SYSTEM_PROMPT},                           # the prompts the agent reads, by resource name
        optimizer=Optimizer(base_url="https://api.openai.com/v1", model="gpt-4.1-mini"),
        base_url="http://127.0.0.1:8000/v1", model="Qwen/Qwen2.5-1.5B-Instruct",   # the agent's own model
        budget=300,                                                  # rollouts in all
    )
    relight.Trainer(algorithm=apo).fit(agent, train_tasks, val_tasks)
    apo.best                                                         # the prompts found: Trainer(resources=apo.best)

The agent reads each prompt where it builds it (``relight.resource("system_prompt", default=SYSTEM_PROMPT)``
or ``llm.resources``); nothing else about it changes. Each prompt version APO tries is published as a
resources version, every rollout is pinned to the version it runs with, and the run folder,
dashboard, ``relight show --prompts`` and ``relight export --format prompt`` show them like policy versions.

**The search.** The seed prompts are measured on every validation task. Then each round:

1. draws a parent from the per-task Pareto front of the versions measured on validation
   (:mod:`relight_apo.frontier`), and the next ``minibatch`` training tasks (shuffled once per pass);
2. runs the parent on them and shows the optimiser the lowest- and highest-rewarded runs; it answers
   with a critique and the whole new text of one prompt (the prompts that may change take turns):
   :mod:`relight_apo.proposal`, where a reply that is not a usable prompt is sent back with the reason;
3. publishes the candidate and runs it on the same tasks. Only a candidate whose minibatch reward beats
   its parent's goes on to validation: a cheap gate that spends the validation rollouts on candidates
   that have shown something;
4. adds a validated candidate to the front, and publishes it as the best when its mean validation
   reward is above the best's so far.

The best is chosen on the validation tasks alone, never on a minibatch, and only a strictly higher
mean replaces it: no candidate is published as the best with a validation reward below its parent's
(the parent is among those it had to beat). The search ends when the budget cannot pay for another
round (two minibatches), or after ``rounds`` rounds.

**Budget and cost.** ``budget`` counts the agent's rollouts, training and validation alike (the seed's
validation, two minibatches a round, a validation per candidate that passes the gate); what the
optimiser's calls cost is counted apart (``optimizer_input_tokens``, ``optimizer_output_tokens``,
``optimizer_cost_usd`` given its prices).

**Rewards.** Whatever the agent returns or emits, plus the trainer's group rewards: a judge
(``Trainer(group_rewards=[Judge(..., mode="score")])``) grades each rollout. Use its ``score`` mode: a
ranking is relative to the rollouts judged together, and APO compares versions judged at different
times. A rollout that fails (after its retries) scores 0.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Mapping, Sequence

from pydantic import JsonValue

from relight import semconv
from relight.errors import ConfigError, RelightError
from relight.gateway import OpenAIUpstream, Upstream
from relight.records import Mode, Rollout, RolloutRequest, RolloutStatus, SpanKind
from relight.resources.prompts import PROMPT_ITEM
from relight.rewards.render import render_rollout
from relight.training.search import SearchRun
from relight.transitions.builder import last_attempt_spans
from relight_apo.frontier import best, pick_parent
from relight_apo.optimizer import Optimizer
from relight_apo.prompts import Prompt, prompts_of
from relight_apo.proposal import REASONS, Proposal, Reason, Run, propose
from relight_apo.state import Candidate, Pending, SearchState, digest

__all__ = ["APO"]


class APO:
    """Automatic prompt optimisation as a :class:`relight.training.search.SearchAlgorithm` (see the module docstring).

    Args:
        prompts: the prompts to optimise, by the resource name the agent reads them under: each a seed
            text, or a :class:`relight_apo.Prompt` (frozen, a length limit, the placeholders to keep).
        optimizer: the model that critiques and edits them (:class:`relight_apo.Optimizer`).
        base_url: the OpenAI-compatible endpoint of the agent's own model (a hosted API, a local vLLM).
        model: the agent's model name there; ``llm.model`` carries it to the agent.
        api_key: for ``base_url``.
        vllm: ask the endpoint for vLLM's token ids (see :class:`relight.gateway.OpenAIUpstream`); None finds out.
        budget: the agent's rollouts the search may run, validation included.
        minibatch: training tasks a round runs the parent and the candidate on.
        rounds: stop after this many rounds even with budget left; None: when the budget is spent.
        show: runs of the parent the optimiser is shown each round, half the lowest-rewarded, half the highest.
        show_chars: characters of each run it is shown (see :func:`relight.rewards.render_rollout`).
        max_tries: replies asked for per round before a proposal that is no usable prompt is dropped.
        perfect: a parent that scores this on every minibatch task is not edited that round (nothing to
            learn from); None edits it anyway.
        seed: of the parent and minibatch draws: the same seed, tasks and rewards make the same search.
    """

    def __init__(
        self,
        prompts: Mapping[str, str | Prompt],
        *,
        optimizer: Optimizer,
        base_url: str,
        model: str,
        api_key: str | None = None,
        vllm: bool | None = None,
        budget: int = 200,
        minibatch: int = 4,
        rounds: int | None = None,
        show: int = 4,
        show_chars: int = 3000,
        max_tries: int = 3,
        perfect: float | None = 1.0,
        seed: int = 0,
    ) -> None:
        self.prompts = prompts_of(prompts)
        self.optimizer = optimizer
        self.base_url = base_url
        self._model = model
        self.api_key = api_key
        self.vllm = vllm
        for name, value in (("budget", budget), ("minibatch", minibatch), ("show", show), ("max_tries", max_tries)):
            if value < 1:
                raise ConfigError(f"{name} must be at least 1, got {value}")
        if rounds is not None and rounds < 1:
            raise ConfigError(f"rounds must be at least 1 or None, got {rounds}")
        self.budget = budget
        self.minibatch = minibatch
        self.rounds = rounds
        self.show = show
        self.show_chars = show_chars
        self.max_tries = max_tries
        self.perfect = perfect
        self.seed = seed
        self.state: SearchState | None = None
        """Where the last search stands (its prompt versions, scores and costs); None before one ran."""

    @property
    def model(self) -> str:
        return self._model

    @property
    def settings(self) -> dict[str, JsonValue]:
        """How the search is set up, for run.json, ``relight compare`` and experiment trackers."""
        return {
            "optimizer": self.optimizer.model,
            "optimizer_base_url": self.optimizer.base_url,
            "prompts": list(self.prompts),
            "frozen": [name for name, prompt in self.prompts.items() if prompt.frozen],
            "budget": self.budget,
            "minibatch": self.minibatch,
            "rounds": self.rounds,
            "show": self.show,
            "max_tries": self.max_tries,
            "perfect": self.perfect,
            "seed": self.seed,
        }

    @property
    def editable(self) -> list[str]:
        """The prompts the search may edit, in the order they take turns."""
        return [name for name, prompt in self.prompts.items() if not prompt.frozen]

    def upstreams(self) -> Sequence[Upstream]:
        return [OpenAIUpstream(self.base_url, vllm=self.vllm, api_key=self.api_key)]

    @property
    def best(self) -> dict[str, JsonValue] | None:
        """The best prompts found, as resources to keep fixed (``Trainer(resources=apo.best)``); None before a search.

        Each prompt by its name, and the item ``relight.prompt`` saying which prompt version they are, so the
        rollouts of a later run record it beside their policy version.
        """
        if self.state is None or self.state.best is None:
            return None
        chosen = self.state.candidates[self.state.best]
        return {**self._items(chosen), PROMPT_ITEM: {**self._lineage(chosen), "version": chosen.version}}

    # -- the search ------------------------------------------------------------------------------

    async def search(
        self, run: SearchRun, train: Sequence[JsonValue], val: Sequence[JsonValue]
    ) -> Mapping[str, JsonValue]:
        """Run the search on ``run`` (see the module docstring); returns what the run's summary adds."""
        if not val:
            raise ConfigError("APO keeps the prompts that do best on the validation tasks: give fit() val_dataset")
        fingerprint = {
            "prompts": digest({name: prompt.text for name, prompt in self.prompts.items()}),
            "validation tasks": digest(list(val)),
            "seed": str(self.seed),
        }
        restored = run.restored.state if run.restored is not None else None
        state = SearchState.from_json(restored, fingerprint) if restored else SearchState(fingerprint)
        self.state = state
        if state.best is None:
            if self.budget < len(val) + 2 * self.minibatch:
                raise ConfigError(
                    f"budget {self.budget} cannot pay for the seed's validation ({len(val)} rollouts) and one round "
                    f"({2 * self.minibatch}): give at least {len(val) + 2 * self.minibatch}"
                )
            await self._measure_seed(run, val)
        while self._affordable(state):
            await self._round(run, state, state.round + 1, train, val)
        return self._summary(state)

    def _affordable(self, state: SearchState) -> bool:
        """Whether another round fits: its two minibatches within the budget, its number within ``rounds``."""
        if self.rounds is not None and state.round >= self.rounds:
            return False
        return state.spent + 2 * self.minibatch <= self.budget

    async def _measure_seed(self, run: SearchRun, val: Sequence[JsonValue]) -> None:
        """Publish the seed prompts and validate them; checkpointed once published (step -1: before step 0)."""
        state = self._state
        if state.seed is None:
            seed = Candidate(version=-1, prompts={name: prompt.text for name, prompt in self.prompts.items()})
            seed.version = (await run.publish(self._version_items(seed))).version
            state.candidates[seed.version] = seed
            state.seed = seed.version
            run.checkpoint(-1, state.to_json())
        seed = state.candidates[state.seed]
        rollouts = await self._validate(run, seed, val, step=0, label="seed")
        await self._check_read(run, rollouts)
        state.spent += len(rollouts)
        state.best = seed.version
        await run.publish(self._selected_items(seed, 0))
        run.record(
            "val",
            {
                "step": 0,
                "val_reward_mean": seed.val_mean or 0.0,
                "val_completed_rate": _completed(rollouts),
                "prompt_version": seed.version,
            },
        )
        run.checkpoint(0, state.to_json())

    async def _round(
        self, run: SearchRun, state: SearchState, round_: int, train: Sequence[JsonValue], val: Sequence[JsonValue]
    ) -> None:
        """One round (see the module docstring), checkpointed at its end and after each step that cannot be redone."""
        began = time.perf_counter()
        pending = state.pending if state.pending is not None and state.pending.round == round_ else None
        if pending is not None:  # a killed run had drawn them already
            parent, name = state.candidates[pending.parent], pending.name
        else:
            parent = state.candidates[pick_parent(state.scores(), random.Random(f"{self.seed}-round{round_}"))]
            name = self.editable[(round_ - 1) % len(self.editable)]
        batch = self._batch(round_, len(train))
        parent_rollouts = await run.run(
            self._requests(run, parent.version, [train[i] for i in batch], round_, "parent", batch, Mode.TRAIN),
            f"round {round_}: prompt v{parent.version} on {len(batch)} training task(s)",
        )
        parent_scores = _scores(await run.returns(parent_rollouts))
        spent = len(parent_rollouts)
        row: dict[str, float] = {"step": round_, "parent_version": parent.version}
        if self.perfect is not None and min(parent_scores) >= self.perfect:
            state.counts["rounds_skipped"] += 1
            run.note(f"relight-apo: round {round_}: v{parent.version} scored {self.perfect:g} on every task; no edit")
            self._finish(run, state, round_, spent, row | {"reward_mean": _mean(parent_scores)}, began)
            return
        proposal = await self._proposal(run, state, round_, parent, name, parent_rollouts, parent_scores)
        row |= {"parent_minibatch_reward": _mean(parent_scores)}
        if proposal.text is None:
            state.counts["candidates_dropped"] += 1
            state.counts[f"candidates_dropped_{proposal.dropped}"] += 1
            run.warn(
                f"relight-apo: round {round_}: no usable prompt in {proposal.tries} repl(ies) of the optimiser "
                f"(last: {proposal.dropped}); the candidate is dropped"
            )
            self._finish(run, state, round_, spent, row | {"reward_mean": _mean(parent_scores)}, began)
            return
        child = await self._publish_child(run, state, round_, parent, proposal)
        child_rollouts = await run.run(
            self._requests(run, child.version, [train[i] for i in batch], round_, "child", batch, Mode.TRAIN),
            f"round {round_}: candidate v{child.version} on the same task(s)",
        )
        child_scores = _scores(await run.returns(child_rollouts))
        spent += len(child_rollouts)
        child.minibatch = _mean(child_scores)
        state.candidates[child.version] = child
        row |= {
            "prompt_version": child.version,
            "candidate_minibatch_reward": child.minibatch,
            "reward_mean": _mean(parent_scores + child_scores),
        }
        if sum(child_scores) <= sum(parent_scores):
            state.counts["candidates_rejected"] += 1
        elif state.spent + spent + len(val) > self.budget:
            state.counts["candidates_unvalidated"] += 1
            run.note(
                f"relight-apo: round {round_}: v{child.version} passed the minibatch gate; no budget to validate it"
            )
        else:
            validation = await self._validate(run, child, val, step=round_, label="val")
            spent += len(validation)
            state.counts["candidates_validated"] += 1
            row["candidate_val_reward"] = child.val_mean or 0.0
            await self._select(run, state, child, round_)
        self._finish(run, state, round_, spent, row, began)

    async def _proposal(
        self,
        run: SearchRun,
        state: SearchState,
        round_: int,
        parent: Candidate,
        name: str,
        rollouts: Sequence[Rollout],
        scores: Sequence[float],
    ) -> Proposal:
        """The optimiser's proposal for this round: the one a killed run had received already, else a new one."""
        pending = state.pending
        if pending is not None and pending.round == round_:
            dropped: Reason | None = next((reason for reason in REASONS if reason == pending.dropped), None)
            return Proposal(pending.name, pending.text, pending.critique, dropped, pending.tries)
        shown = await self._runs(run, rollouts, scores)
        others = {other: parent.prompts[other] for other in self.prompts if other != name}
        proposal = await propose(
            self.optimizer,
            name,
            self.prompts[name],
            parent.prompts[name],
            shown,
            others,
            state.usage,
            max_tries=self.max_tries,
        )
        state.counts["candidates_tried"] += 1
        state.pending = Pending(
            round_, parent.version, name, proposal.text, proposal.critique, proposal.dropped, proposal.tries
        )
        run.checkpoint(round_ - 1, state.to_json())
        return proposal

    async def _publish_child(
        self, run: SearchRun, state: SearchState, round_: int, parent: Candidate, proposal: Proposal
    ) -> Candidate:
        """The candidate as a published version: the one a killed run had published, else published now."""
        assert proposal.text is not None
        assert state.pending is not None
        child = Candidate(
            version=-1,
            prompts={**parent.prompts, proposal.name: proposal.text},
            parent=parent.version,
            round=round_,
            edited=proposal.name,
            critique=proposal.critique,
        )
        if state.pending.child is not None:
            child.version = state.pending.child
            return child
        child.version = (await run.publish(self._version_items(child))).version
        state.pending.child = child.version
        run.checkpoint(round_ - 1, state.to_json())
        return child

    async def _select(self, run: SearchRun, state: SearchState, child: Candidate, round_: int) -> None:
        """Publish ``child`` as the best when its mean validation reward is above the best's so far."""
        chosen = best(state.scores())
        if chosen == state.best:
            return
        assert chosen == child.version, "only the candidate just validated can become the best"
        state.best = chosen
        await run.publish(self._selected_items(child, round_))
        run.note(
            f"relight-apo: round {round_}: v{child.version} is the best so far (validation "
            f"{child.val_mean:.3f}; its parent v{child.parent} had {_val(state, child.parent):.3f})"
        )

    def _finish(
        self, run: SearchRun, state: SearchState, round_: int, spent: int, row: dict[str, float], began: float
    ) -> None:
        """Record the round's metrics, then checkpoint its end."""
        state.round, state.spent, state.pending = round_, state.spent + spent, None
        chosen = state.candidates[state.best] if state.best is not None else None
        counts = {f"candidates_{what}": 0 for what in ("tried", "dropped", "rejected", "validated", "unvalidated")}
        counts |= {f"candidates_dropped_{reason}": 0 for reason in REASONS}
        row |= {
            "best_prompt_version": chosen.version if chosen else -1,
            "best_val_reward": (chosen.val_mean or 0.0) if chosen else 0.0,
            **{key: float(value) for key, value in (counts | dict(state.counts)).items()},
            "rollouts": state.spent,
            "budget_left": self.budget - state.spent,
            **{f"optimizer_{key}": value for key, value in state.usage.as_dict().items() if key != "cost_usd"},
            **({"optimizer_cost_usd": state.usage.cost_usd} if self.optimizer.prices_known else {}),
            "time_round_s": time.perf_counter() - began,
            **run.reward_metrics(),
        }
        run.record("train", row)
        if chosen is not None:
            run.record(
                "val", {"step": round_, "val_reward_mean": chosen.val_mean or 0.0, "prompt_version": chosen.version}
            )
        run.checkpoint(round_, state.to_json())

    # -- rollouts --------------------------------------------------------------------------------

    async def _validate(
        self, run: SearchRun, candidate: Candidate, val: Sequence[JsonValue], *, step: int, label: str
    ) -> list[Rollout]:
        """Run ``candidate`` on every validation task; its scores go into it. Returns the rollouts."""
        indices = list(range(len(val)))
        rollouts = await run.run(
            self._requests(run, candidate.version, val, step, label, indices, Mode.VAL),
            f"validation of prompt v{candidate.version} on {len(val)} task(s)",
        )
        candidate.val = _scores(await run.returns(rollouts))
        return rollouts

    def _requests(
        self,
        run: SearchRun,
        version: int,
        tasks: Sequence[JsonValue],
        step: int,
        name: str,
        indices: Sequence[int],
        mode: Mode,
    ) -> list[RolloutRequest]:
        """One rollout per task pinned to ``version``, each with an id the same in a resumed run (``r3-child-t5``)."""
        return [
            RolloutRequest(
                input=task,
                mode=mode,
                resources_version=version,
                max_attempts=run.max_attempts,
                metadata={"step": step, "apo": name, "task": index},
                rollout_id=run.rollout_id(f"r{step}-{name}-t{index}"),
            )
            for task, index in zip(tasks, indices, strict=True)
        ]

    def _batch(self, round_: int, tasks: int) -> list[int]:
        """Round ``round_``'s training tasks: the next ``minibatch`` of passes over them, each pass shuffled anew."""
        size = min(self.minibatch, tasks)
        start = (round_ - 1) * size
        chosen: list[int] = []
        for position in range(start, start + size):
            epoch, index = divmod(position, tasks)
            order = list(range(tasks))
            random.Random(f"{self.seed}-epoch{epoch}").shuffle(order)
            chosen.append(order[index])
        return chosen

    async def _runs(self, run: SearchRun, rollouts: Sequence[Rollout], scores: Sequence[float]) -> list[Run]:
        """The runs the optimiser is shown: the lowest-rewarded first, then the highest, ``show`` in all."""
        order = sorted(range(len(rollouts)), key=lambda index: scores[index])
        low = order[: math.ceil(self.show / 2)]
        high = [index for index in reversed(order) if index not in low][: self.show - len(low)]
        shown: list[Run] = []
        for index in [*low, *reversed(high)]:
            rollout = rollouts[index]
            spans = await last_attempt_spans(run.store, rollout.rollout_id)
            rendered = render_rollout(rollout.rollout_id, spans, max_chars=self.show_chars)
            error = _last_line(rollout.error) if rollout.status is not RolloutStatus.SUCCEEDED else None
            shown.append(Run(rendered, scores[index], error))
        return shown

    async def _check_read(self, run: SearchRun, rollouts: Sequence[Rollout]) -> None:
        """ConfigError unless some rollout read each prompt APO edits (an agent that never reads one learns nothing)."""
        succeeded = [rollout for rollout in rollouts if rollout.status is RolloutStatus.SUCCEEDED]
        if not succeeded:
            errors = {_last_line(rollout.error) for rollout in rollouts}
            raise RelightError(
                "every validation rollout of the seed prompts failed, so there is nothing to improve from; check the "
                f"agent with Trainer().dev(...) first. The errors: {'; '.join(sorted(errors))}"
            )
        read: set[str] = set()
        for rollout in succeeded:
            for span in await last_attempt_spans(run.store, rollout.rollout_id):
                name = span.attributes.get(semconv.RESOURCE_NAME)
                if span.kind is SpanKind.ANNOTATION and isinstance(name, str):
                    read.add(name)
        unread = [name for name in self.editable if name not in read]
        if unread:
            raise ConfigError(
                f"the agent never read the prompt(s) {', '.join(map(repr, unread))}, so no edit could change what it "
                f"does: read each where the agent builds it, relight.resource({unread[0]!r}, default=...) or "
                f"llm.resources.get({unread[0]!r}, ...)"
            )

    # -- what is published -------------------------------------------------------------------------

    def _items(self, candidate: Candidate) -> dict[str, JsonValue]:
        return {name: candidate.prompts[name] for name in self.prompts}

    def _lineage(self, candidate: Candidate) -> dict[str, JsonValue]:
        return {
            "names": list(self.prompts),
            "frozen": [name for name, prompt in self.prompts.items() if prompt.frozen],
            "parent": candidate.parent,
            "round": candidate.round,
            "edited": candidate.edited,
            "critique": candidate.critique,
        }

    def _version_items(self, candidate: Candidate) -> dict[str, JsonValue]:
        """A candidate as its resources version: its prompts and where they came from."""
        return {**self._items(candidate), PROMPT_ITEM: self._lineage(candidate)}

    def _selected_items(self, candidate: Candidate, round_: int) -> dict[str, JsonValue]:
        """A candidate published again as the best after round ``round_``, with the measure it was chosen on."""
        selected: dict[str, JsonValue] = {"round": round_, "val_reward": candidate.val_mean}
        return {
            **self._items(candidate),
            PROMPT_ITEM: {**self._lineage(candidate), "version": candidate.version, "selected": selected},
        }

    def _summary(self, state: SearchState) -> dict[str, JsonValue]:
        chosen = state.candidates[state.best] if state.best is not None else None
        seed = state.candidates[state.seed] if state.seed is not None else None
        return {
            "best_prompt_version": chosen.version if chosen else None,
            "best_val_reward": chosen.val_mean if chosen else None,
            "seed_val_reward": seed.val_mean if seed else None,
            "rounds": state.round,
            "rollouts": state.spent,
            "budget": self.budget,
            "candidates": {key: value for key, value in sorted(state.counts.items())},
            "optimizer": {key: value for key, value in state.usage.as_dict().items()},
        }

    @property
    def _state(self) -> SearchState:
        assert self.state is not None
        return self.state


def _scores(returns: Sequence[float | None]) -> list[float]:
    """Each rollout's score: its return, 0 for one that failed."""
    return [value if value is not None else 0.0 for value in returns]


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _completed(rollouts: Sequence[Rollout]) -> float:
    return sum(r.status is RolloutStatus.SUCCEEDED for r in rollouts) / len(rollouts) if rollouts else 0.0


def _val(state: SearchState, version: int | None) -> float:
    candidate = state.candidates.get(version) if version is not None else None
    return (candidate.val_mean or 0.0) if candidate is not None else 0.0


def _last_line(error: str | None) -> str:
    lines = (error or "").strip().splitlines()
    return lines[-1] if lines else "no error recorded"
