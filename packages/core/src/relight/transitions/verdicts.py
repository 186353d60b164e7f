"""Why each LLM call did or did not become a training sample: the one place that says so.

Users of agent RL ask why a batch ended up with no training rows and why a call they can see in a
trace was never learned from. A call is *trained* only when its transition entered an update that
changed the weights, as the trainer recorded in the store (:mod:`relight.transitions.trained_calls`);
every other call carries the reason it was not. :meth:`relight.TransitionBuilder.explain` answers with a
:class:`RolloutVerdict`: for every LLM span of the rollout, the transition it became or the
:class:`Reason` it did not, decided by the same code that builds the transitions a trainer gets.
``relight show``, ``relight export`` and ``relight dashboard`` all print these verdicts, so the
terminal and the browser agree.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from relight.records import Rollout, Span, SpanKind, Transition

__all__ = ["CallVerdict", "Note", "Reason", "RolloutVerdict", "call_numbers"]


class Reason(StrEnum):
    """Why a call did not become a training sample."""

    NOT_FINISHED = "not finished"
    """The rollout is still queued or running; its calls are judged once it ends."""
    CANCELLED = "cancelled rollout"
    FAILED_ROLLOUT = "failed rollout"
    """The rollout failed every attempt; trained only with ``include_failed``."""
    STALE = "dropped for staleness"
    """An asynchronous trainer dropped its group: a call was more than ``max_staleness`` versions behind."""
    AGED_OUT = "aged out"
    """An asynchronous trainer cancelled its group, unfinished when it could no longer be trained in time."""
    RETRIED_ATTEMPT = "retried attempt"
    """The call belongs to an attempt that did not count: a later attempt of the rollout replaced it."""
    VALIDATION = "validation rollout"
    """Validation rollouts measure the policy; the trainer never learns from them."""
    FAILED_CALL = "failed call"
    """The gateway recorded the call as an error (the upstream failed or refused it)."""
    FILTERED_ROLE = "filtered role"
    """The call's role is not one the role filter trains."""
    NO_POLICY = "no policy"
    """In a run with several policies, no policy names the call's role: the base model served it."""
    FROZEN_POLICY = "frozen policy"
    """The policy that names the call's role is frozen: it serves its calls and never learns from them."""
    OTHER_POLICY = "served by another policy"
    """Its role's policy did not serve it (the gateway could not tell the role when the call arrived, so
    the base model did): its tokens are not that policy's to learn from."""
    NO_TOKEN_IDS = "no token ids"
    """The upstream gave no token ids and nothing retokenized the call: it is untrainable."""
    INEXACT = "inexact tokens"
    """Its token ids, made from its record, are not exactly the call (text, tool calls or tools missing or not
    rendered; see :class:`relight.chat.Inexact`): left out unless the builder keeps them (``include_inexact``)."""
    NO_SIGNAL = "group without signal"
    """Its group's rewards were all equal: a group-relative algorithm (GRPO) learns nothing from it and skips it."""
    UPDATE_SKIPPED = "update skipped"
    """It entered an update that left the weights as they were (every group of the batch was without signal)."""
    NOT_UPDATED = "not in an update"
    """It could be trained, but no update has used it: the run stopped first, or no trainer ran on this store."""


class Note(StrEnum):
    """Something worth knowing about a call that was trained."""

    RETOKENIZED = "retokenized"
    """The upstream gave no token ids; the gateway tokenized the text, which may differ from what was sampled."""
    INEXACT = "inexact tokens"
    """Its token ids are not exactly the call, and the builder keeps such calls (``include_inexact``)."""
    TRUNCATED = "truncated"
    """The response stopped at its token limit (finish reason ``length``), so it may be cut mid-answer."""


@dataclass(frozen=True, slots=True)
class CallVerdict:
    """One LLM call and what became of it."""

    span: Span
    step: int | None
    """The call's index among its attempt's successful calls (the transition's ``step``, from 0); None for a
    failed call. People see calls numbered by :func:`call_numbers` instead."""
    role: str | None
    reward: float | None
    """The reward credit assignment gave the call; None where none was assigned (a failed call)."""
    transition: Transition | None
    """The training sample the call became; None when it became none, or was judged without building it."""
    reason: Reason | None
    """Why it was not trained; None when it was."""
    detail: str = ""
    """The reason in words, naming what decided it (the role filter, the error)."""
    notes: tuple[Note, ...] = ()
    policy: str | None = None
    """In a run with several policies, the policy that names the call's role (None: none does, or a run of one)."""

    @property
    def trained(self) -> bool:
        return self.reason is None

    @classmethod
    def left_out(
        cls,
        span: Span,
        reason: Reason,
        detail: str,
        *,
        step: int | None = None,
        role: str | None = None,
        reward: float | None = None,
        policy: str | None = None,
    ) -> CallVerdict:
        """A call that became no training sample, and why."""
        return cls(span, step, role, reward, None, reason, detail, policy=policy)


@dataclass(frozen=True, slots=True)
class RolloutVerdict:
    """A rollout's calls, each with its fate."""

    rollout: Rollout
    attempt_id: str | None
    """The attempt whose calls count (the last succeeded one, or a failed rollout's last); None before any."""
    reason: Reason | None
    """A reason that holds for the whole rollout (failed, validation, not finished); None when calls decide."""
    calls: list[CallVerdict]

    @property
    def transitions(self) -> list[Transition]:
        return [call.transition for call in self.calls if call.transition is not None]

    def reasons(self) -> Counter[Reason]:
        """How many calls were left out for each reason."""
        return Counter(call.reason for call in self.calls if call.reason is not None)

    def summary(self) -> str:
        """``3 of 4 calls trained; 1 filtered role`` — one line for a terminal."""
        trained = sum(call.trained for call in self.calls)
        text = f"{trained} of {len(self.calls)} call(s) trained"
        left_out = "; ".join(f"{count} {reason.value}" for reason, count in sorted(self.reasons().items()))
        notes = Counter(note for call in self.calls for note in call.notes)
        noted = "; ".join(f"{count} {note.value}" for note, count in sorted(notes.items()))
        return text + (f"; left out: {left_out}" if left_out else "") + (f"; notes: {noted}" if noted else "")


def call_numbers(spans: Iterable[Span]) -> dict[str, int]:
    """The number of each LLM call wherever people see calls: from 1, in the order made, within its attempt.

    Every LLM call counts, a failed one too, so ``call 2`` is one call in ``relight show`` (its verdicts and
    its ``--text``) and on the dashboard. Keyed by span id.
    """
    calls = sorted(
        (span for span in spans if span.kind is SpanKind.LLM),
        key=lambda span: (span.start_time, span.sequence_id or 0),
    )
    counts: Counter[str] = Counter()
    numbers: dict[str, int] = {}
    for span in calls:
        counts[span.attempt_id] += 1
        numbers[span.span_id] = counts[span.attempt_id]
    return numbers
