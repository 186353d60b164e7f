"""What :meth:`relight.Trainer.dev` reports: how each task went, as a row when it ends and a table at the end.

A dev run checks the wiring before any training: did each rollout succeed, what reward did it
record, which agents (roles) made its LLM calls, which tools they ran and how those went, who
handed off to whom, which resources it read from which version (``relight.resource``), and were the calls
trainable (exact token ids and logprobs), only retokenized
from text, or not trainable at all. Rows wrap to the console's width (80 columns included) and
never cut a rollout id or an error: the id is what ``relight show ID --store URL`` looks up.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.table import Table

from relight import semconv
from relight.records import Rollout, RolloutStatus, Span, SpanKind
from relight.store import Store
from relight.transitions.builder import episode_return, last_attempt_spans

__all__ = ["DevResult", "ToolRun", "dev_result", "dev_row", "dev_table"]


@dataclass(frozen=True, slots=True)
class ToolRun:
    """One tool run of a dev rollout."""

    name: str
    role: str | None
    error: str | None = None
    """The tool's error, None when it succeeded."""


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
    roles: dict[str, int] = field(default_factory=dict[str, int])
    """LLM calls by the role (agent, node) the adapter named; calls no adapter named are not counted."""
    tools: list[ToolRun] = field(default_factory=list[ToolRun])
    handoffs: list[tuple[str, str]] = field(default_factory=list[tuple[str, str]])
    """``(from role, to role)`` in the order they happened."""
    call_errors: list[str] = field(default_factory=list[str])
    """Why each failed call failed, as the gateway recorded it."""
    resources: dict[str, int | None] = field(default_factory=dict[str, int | None])
    """Each resource the agent read: the resources version it came from, None where its default stood in."""

    @property
    def trainable_calls(self) -> int:
        """Calls with the token ids and logprobs the upstream sampled."""
        return self.calls - self.failed_calls - self.retokenized_calls - self.untrainable_calls


async def dev_result(store: Store, rollout: Rollout) -> DevResult:
    """Read a finished rollout's last attempt from ``store``: its reward, calls, roles, tools and handoffs."""
    spans = sorted(await last_attempt_spans(store, rollout.rollout_id), key=lambda s: s.start_time)
    calls = [span for span in spans if span.kind is SpanKind.LLM]
    answered = [span for span in calls if span.status_code != "ERROR"]
    roles = Counter(
        str(s.attributes[semconv.ROLE]) for s in spans if s.kind is SpanKind.ROLE and semconv.ROLE in s.attributes
    )
    return DevResult(
        rollout=rollout,
        reward=episode_return(spans),
        calls=len(calls),
        failed_calls=len(calls) - len(answered),
        retokenized_calls=sum(span.attributes.get(semconv.RETOKENIZED) is True for span in answered),
        untrainable_calls=sum(semconv.RESPONSE_TOKEN_IDS not in span.attributes for span in answered),
        roles=dict(roles),
        tools=[_tool_run(span) for span in spans if span.kind is SpanKind.TOOL],
        handoffs=[
            (str(span.attributes.get(semconv.HANDOFF_FROM)), str(span.attributes.get(semconv.HANDOFF_TO)))
            for span in spans
            if span.kind is SpanKind.HANDOFF
        ],
        call_errors=[_call_error(span) for span in calls if span.status_code == "ERROR"],
        resources=_resources_read(spans),
    )


def _resources_read(spans: Sequence[Span]) -> dict[str, int | None]:
    """The resources an attempt read (see :mod:`relight.resources.reading`): name → version, None for the default."""
    read: dict[str, int | None] = {}
    for span in spans:
        name = span.attributes.get(semconv.RESOURCE_NAME)
        if span.kind is SpanKind.ANNOTATION and isinstance(name, str):
            version = span.attributes.get(semconv.RESOURCES_VERSION)
            published = span.attributes.get(semconv.RESOURCE_SOURCE) == "published" and isinstance(version, int)
            read[name] = version if published and isinstance(version, int) else None
    return read


def _read(result: DevResult) -> str:
    """``system_prompt v3, planner_prompt default``: what each resource read came from."""
    return ", ".join(
        f"{name} {'default' if version is None else f'v{version}'}" for name, version in result.resources.items()
    )


def _call_error(span: Span) -> str:
    """``400 'messages' is required``: the status the gateway or upstream answered, and the first line of why."""
    status = span.attributes.get(semconv.HTTP_STATUS) or span.attributes.get(semconv.UPSTREAM_STATUS)
    reason = (span.status_message or str(span.attributes.get(semconv.ERROR_TYPE, "the call failed"))).strip()
    reason = reason.splitlines()[0] if reason else "the call failed"
    reason = reason if len(reason) <= 120 else reason[:119] + "…"
    return f"{status} {reason}" if status is not None else reason


def _tool_run(span: Span) -> ToolRun:
    role = span.attributes.get(semconv.ROLE)
    failed = span.status_code == "ERROR" or span.attributes.get(semconv.TOOL_SUCCESS) is False
    return ToolRun(
        name=str(span.attributes.get(semconv.GEN_AI_TOOL_NAME) or span.name),
        role=str(role) if role is not None else None,
        error=(span.status_message or "failed") if failed else None,
    )


def _status(rollout: Rollout) -> str:
    style = "green" if rollout.status is RolloutStatus.SUCCEEDED else "red"
    return f"[{style}]{rollout.status.value}[/]"


def _agents(result: DevResult) -> str:
    """``triage 1, math 2; tools calculator ✓; handoffs triage→math`` (empty parts left out)."""
    parts: list[str] = []
    if result.roles:
        parts.append(", ".join(f"{role} {count}" for role, count in result.roles.items()))
    if result.tools:
        runs = Counter((tool.name, tool.error is None) for tool in result.tools)
        parts.append(
            "tools "
            + ", ".join(f"{name} {'✓' if ok else '✗'}{f'×{n}' if n > 1 else ''}" for (name, ok), n in runs.items())
        )
    if result.handoffs:
        parts.append("handoffs " + ", ".join(f"{a}→{b}" for a, b in result.handoffs))
    return "; ".join(parts) or "—"


def _errors(result: DevResult) -> str:
    errors = (
        [f"{result.failed_calls} failed call(s): {'; '.join(dict.fromkeys(result.call_errors))}"]
        if result.failed_calls
        else []
    )
    errors += [f"tool {tool.name}: {tool.error}" for tool in result.tools if tool.error is not None]
    if result.rollout.error:
        errors.append(result.rollout.error.strip().splitlines()[-1])
    return "; ".join(errors)


def dev_row(result: DevResult) -> Table:
    """One finished rollout as it is printed when it ends: its id, status and reward, then what it did."""
    rollout = result.rollout
    table = Table.grid(padding=(0, 1))
    table.add_column(no_wrap=True, style="bold")
    table.add_column(overflow="fold")
    reward = "—" if result.reward is None else f"{result.reward:.3f}"
    table.add_row(
        "rollout", f"{rollout.rollout_id}  {_status(rollout)}  reward {reward}  attempts {rollout.attempt_count}"
    )
    table.add_row("task", str(rollout.input))
    table.add_row("calls", f"{result.calls} ({_token_counts([result])})")
    table.add_row("agents", _agents(result))
    if result.resources:
        table.add_row("reads", _read(result))  # the resources it read; a label no longer than "rollout"
    if errors := _errors(result):
        table.add_row("errors", f"[red]{errors}[/]")
    return table


def dev_table(results: Sequence[DevResult], *, store: str | None = None) -> Table:
    """One row a task: rollout, status, reward, calls and how trainable, agents, tools and handoffs, errors.

    Every column folds rather than cuts, so ids and errors stay whole at any width.
    """
    table = Table(title="relight dev", title_justify="left")
    for column in ("rollout", "status", "reward", "calls", "agents, tools, handoffs", "errors"):
        table.add_column(
            column,
            justify="right" if column in ("reward", "calls") else "left",
            overflow="fold",
            min_width=len(column) if column in ("status", "reward", "calls") else None,
        )
    for result in results:
        rollout = result.rollout
        table.add_row(
            rollout.rollout_id,
            _status(rollout),
            "—" if result.reward is None else f"{result.reward:.3f}",
            f"{result.calls}",
            _agents(result),
            _errors(result),
        )
    caption = [f"all {len(results)} tasks: {_token_counts(results)}"]
    read = {read for result in results if (read := _read(result))}
    if read:
        caption.append("resources read: " + "; ".join(sorted(read)))
    if store is not None:
        caption.append(f"store: {store}  (relight show ROLLOUT --store {store})")
    table.caption = "\n".join(caption)
    table.caption_justify = "left"
    return table


def _token_counts(results: Sequence[DevResult]) -> str:
    """How trainable the calls were: exact ids and logprobs, retokenized, or not trainable at all."""
    counts = (
        (sum(r.trainable_calls for r in results), "trainable", "green"),
        (sum(r.retokenized_calls for r in results), "retokenized", "yellow"),
        (sum(r.untrainable_calls for r in results), "untrainable", "red"),
        (sum(r.failed_calls for r in results), "failed", "red"),
    )
    return ", ".join(f"[{style}]{count} {label}[/]" for count, label, style in counts if count) or "none"
