"""What :meth:`relight.Trainer.dev` reports: how each task went, and the table it prints.

A dev run checks the wiring before any training: did each rollout succeed, what reward did it
record, how many LLM calls went through the gateway, and were those calls trainable (exact token
ids and logprobs), only retokenized from text, or not trainable at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.table import Table

from relight import semconv
from relight.models import Rollout, RolloutStatus, Span, SpanKind
from relight.store import Store
from relight.transitions import episode_return, last_attempt_spans

__all__ = ["DevResult", "dev_result", "dev_table"]


@dataclass(frozen=True, slots=True)
class DevResult:
    """How one task went in :meth:`relight.Trainer.dev`."""

    rollout: Rollout
    reward: float | None
    """The sum of the rewards its last attempt recorded; None when it recorded none."""
    calls: int
    """LLM calls its last attempt made through the gateway."""
    failed_calls: int
    retokenized_calls: int = 0
    """Calls whose token ids the gateway made from the text (the upstream gave none): trainable, without logprobs."""
    untrainable_calls: int = 0
    """Answered calls recorded without token ids: training cannot use them."""
    last_call_error: str | None = None
    """Why the last failed call failed (a refusal by the gateway, an upstream error), for the errors column."""

    @property
    def trainable_calls(self) -> int:
        """Calls with the token ids and logprobs the upstream sampled."""
        return self.calls - self.failed_calls - self.retokenized_calls - self.untrainable_calls


async def dev_result(store: Store, rollout: Rollout) -> DevResult:
    """Read a finished rollout's last attempt from ``store``: its reward and how its calls went."""
    spans = await last_attempt_spans(store, rollout.rollout_id)
    calls = [span for span in spans if span.kind is SpanKind.LLM]
    answered = [span for span in calls if span.status_code != "ERROR"]
    failed = [span for span in calls if span.status_code == "ERROR"]
    return DevResult(
        rollout=rollout,
        reward=episode_return(spans),
        calls=len(calls),
        failed_calls=len(calls) - len(answered),
        retokenized_calls=sum(span.attributes.get(semconv.RETOKENIZED) is True for span in answered),
        untrainable_calls=sum(semconv.RESPONSE_TOKEN_IDS not in span.attributes for span in answered),
        last_call_error=_call_error(failed[-1]) if failed else None,
    )


def _call_error(span: Span) -> str:
    status = span.attributes.get(semconv.HTTP_STATUS) or span.attributes.get(semconv.UPSTREAM_STATUS)
    reason = (span.status_message or str(span.attributes.get(semconv.ERROR_TYPE, "error"))).strip().splitlines()[0]
    reason = reason if len(reason) <= 120 else reason[:119] + "…"
    return f"{status} {reason}" if status is not None else reason


def dev_table(results: Sequence[DevResult]) -> Table:
    """One row a task: rollout, task, status, attempts, reward, calls, how trainable they were, errors."""
    table = Table(title="relight dev", title_justify="left")
    for column in ("rollout", "task", "status", "attempts", "reward", "calls", "tokens", "errors"):
        # Ids, statuses and numbers are never cut (a narrow terminal wraps the task, tokens and errors instead).
        table.add_column(
            column,
            justify="right" if column in ("attempts", "reward", "calls") else "left",
            no_wrap=column not in ("task", "tokens", "errors"),
        )
    for result in results:
        rollout = result.rollout
        task = str(rollout.input)
        errors = [f"{result.failed_calls} failed call(s)"] if result.failed_calls else []
        if result.last_call_error:
            errors[-1] += f", the last: {result.last_call_error}"
        if rollout.error:
            errors.append(rollout.error.strip().splitlines()[-1])
        style = "green" if rollout.status is RolloutStatus.SUCCEEDED else "red"
        table.add_row(
            rollout.rollout_id,
            task if len(task) <= 40 else task[:39] + "…",
            f"[{style}]{rollout.status.value}[/]",
            str(rollout.attempt_count),
            "—" if result.reward is None else f"{result.reward:.3f}",
            str(result.calls),
            _token_counts([result]),
            "; ".join(errors),
        )
    if len(results) > 1:
        table.caption = f"all {len(results)} tasks: {_token_counts(results)}"
    return table


def _token_counts(results: Sequence[DevResult]) -> str:
    """How trainable the calls were: exact ids and logprobs, retokenized, or not trainable at all."""
    counts = (
        (sum(r.trainable_calls for r in results), "trainable", "green"),
        (sum(r.retokenized_calls for r in results), "retokenized", "yellow"),
        (sum(r.untrainable_calls for r in results), "untrainable", "red"),
    )
    return ", ".join(f"[{style}]{count} {label}[/]" for count, label, style in counts if count) or "—"
