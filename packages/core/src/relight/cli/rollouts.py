"""``relight rollouts`` lists a store's rollouts; ``relight show`` draws one rollout's attempts and spans (or, with
``--prompts``, a run's prompt versions: :mod:`relight.cli.prompts`)."""

from __future__ import annotations

import argparse
import json

from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from relight import semconv
from relight.cli._common import (
    AddCommand,
    add_json_option,
    add_store_option,
    format_reward,
    output_console,
    print_json,
    styled_status,
    with_store,
)
from relight.cli._verdicts import add_builder_options, builder_for, verdict_tree
from relight.cli.conversation import print_conversations
from relight.cli.prompts import show_prompts
from relight.errors import ConfigError, NotFoundError
from relight.otlp.imported_calls import prepare_spans
from relight.otlp.importer import SOURCE
from relight.records import Attempt, Mode, Resources, Rollout, RolloutStatus, Span, SpanKind
from relight.resources.prompts import PROMPT_ITEM, prompt_of
from relight.store import Store
from relight.summaries import SummaryFilter
from relight.transitions.builder import TransitionBuilder, episode_return, last_attempt_spans


def register(add_command: AddCommand) -> None:
    listing = add_command(
        "rollouts",
        help="list rollouts with their status and reward",
        description="List rollouts in the order they were queued, with the reward of each one's last attempt "
        "(the sum of its reward spans).",
    )
    add_store_option(listing)
    listing.add_argument("--status", type=RolloutStatus, choices=list(RolloutStatus), help="only rollouts with it")
    listing.add_argument("--mode", type=Mode, choices=list(Mode), help="only train or only val rollouts")
    listing.add_argument("--group", metavar="GROUP_ID", help="only rollouts of this group (task)")
    listing.add_argument("--limit", type=int, default=50, metavar="N", help="show at most N (default: 50)")
    listing.add_argument("--offset", type=int, default=0, metavar="N", help="skip the first N")
    add_json_option(listing)
    listing.set_defaults(run=list_rollouts)

    show = add_command(
        "show",
        help="draw one rollout's attempts and spans as a tree, or a run's prompt versions",
        description="Draw a rollout: the resources version it ran with (its prompt and policy versions), each "
        "attempt, and under it the attempt's spans nested by parent, with their kind, role, reward and token "
        "counts; then each LLM call with the reason it was or was not trained (judged with the role filter the "
        "run published; --role judges with another). With --prompts instead of a rollout: every prompt version "
        "of a prompt optimisation run, its parent, validation reward and diff.",
    )
    show.add_argument("rollout_id", metavar="ROLLOUT_ID", nargs="?")
    show.add_argument(
        "--prompts", action="store_true", help="the run's prompt versions: parent, validation reward, diff"
    )
    add_store_option(show)
    add_builder_options(show)
    add_json_option(show)
    show.add_argument("--text", action="store_true", help="print each LLM call's messages and response in full")
    show.set_defaults(run=show_rollout)


def list_rollouts(args: argparse.Namespace) -> int:
    async def read(store: Store) -> tuple[list[tuple[Rollout, float | None]], int]:
        rollouts = await store.list_rollouts(
            status=args.status, mode=args.mode, group_id=args.group, limit=args.limit, offset=args.offset
        )
        where = SummaryFilter(
            statuses=[args.status] if args.status is not None else None, mode=args.mode, group_id=args.group
        )
        total = (await store.list_summaries(where, limit=1)).total
        rows = [(rollout, episode_return(await last_attempt_spans(store, rollout.rollout_id))) for rollout in rollouts]
        return rows, total

    rows, total = with_store(args, read)
    if args.json:
        for rollout, reward in rows:
            print_json({**rollout.model_dump(mode="json"), "reward": reward})
        return 0
    console = output_console()
    full = not console.is_terminal
    table = Table(title=_page_title(len(rows), total, args), title_justify="left")
    table.add_column("id", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("mode", no_wrap=True)
    table.add_column("group", overflow="fold")
    table.add_column("attempts", justify="right", no_wrap=True)
    table.add_column("reward", justify="right", no_wrap=True)
    table.add_column("error", overflow="fold", ratio=1)
    for rollout, reward in rows:
        table.add_row(
            rollout.rollout_id,
            styled_status(rollout.status.value),
            rollout.mode.value,
            rollout.group_id,
            f"{rollout.attempt_count}/{rollout.max_attempts}",
            format_reward(reward),
            _gist(rollout.error, full=full),
        )
    console.print(table)
    return 0


def show_rollout(args: argparse.Namespace) -> int:
    if args.prompts:
        return show_prompts(args)
    if args.rollout_id is None:
        raise ConfigError("relight show needs a ROLLOUT_ID, or --prompts for a run's prompt versions")

    async def read(store: Store) -> tuple[Rollout, list[Attempt], list[Span], TransitionBuilder, Resources | None]:
        rollout = await store.get_rollout(args.rollout_id)
        attempts, spans = await store.list_attempts(rollout.rollout_id), await store.query_spans(rollout.rollout_id)
        return rollout, attempts, spans, await builder_for(store, args), await _resources(store, rollout)

    rollout, attempts, spans, builder, resources = with_store(args, read)
    judged = prepare_spans(spans, None) if rollout.metadata.get("source") == SOURCE else spans
    if args.json:
        print_json(
            {
                "rollout": rollout.model_dump(mode="json"),
                "attempts": [attempt.model_dump(mode="json") for attempt in attempts],
                "spans": [span.model_dump(mode="json") for span in spans],
            }
        )
        return 0
    console = output_console()
    if args.text:
        print_conversations(console, attempts, judged)
    else:
        tree = rollout_tree(rollout, attempts, spans, full=not console.is_terminal)
        if resources is not None:
            tree.children.insert(1, Tree(f"[dim]resources[/] {versions_label(resources)}"))
        console.print(tree)
    console.print(verdict_tree(builder.explain_spans(rollout, attempts, judged)))
    return 0


async def _resources(store: Store, rollout: Rollout) -> Resources | None:
    """The resources version the rollout was pinned to; None when it was pinned to none (or the store lost it)."""
    if rollout.resources_version is None:
        return None
    try:
        return await store.get_resources(rollout.resources_version)
    except NotFoundError:
        return None


def versions_label(resources: Resources) -> str:
    """``v5: policy version 2, prompt version 3 (system_prompt)``: what the rollout ran with."""
    parts: list[str] = []
    if isinstance(policy := resources.items.get("policy_version"), int):
        parts.append(f"policy version {policy}")
    prompt = prompt_of(resources)
    if prompt is not None:
        item = resources.items[PROMPT_ITEM]
        names = item.get("names") if isinstance(item, dict) else None
        shown = f" ({', '.join(map(str, names))})" if isinstance(names, list) else ""
        parts.append(f"prompt version {prompt}{shown}")
    return f"v{resources.version}" + (": " + ", ".join(parts) if parts else "")


def rollout_tree(rollout: Rollout, attempts: list[Attempt], spans: list[Span], *, full: bool = False) -> Tree:
    """A rollout, its attempts, and each attempt's spans nested under their parents (``full``: texts uncut)."""
    tree = Tree(
        f"[bold]rollout {rollout.rollout_id}[/]  {styled_status(rollout.status.value)}  {rollout.mode.value}  "
        f"group {rollout.group_id}  reward {format_reward(_reward_of_last(attempts, spans))}"
    )
    text = json.dumps(rollout.input, ensure_ascii=False)
    tree.add(f"[dim]input[/] {text if full else _short(text)}")
    by_attempt: dict[str, list[Span]] = {}
    for span in spans:
        by_attempt.setdefault(span.attempt_id, []).append(span)
    for attempt in attempts:
        took = f"{attempt.finished_at - attempt.started_at:.2f} s" if attempt.finished_at is not None else "running"
        branch = tree.add(
            f"[bold]attempt {attempt.number}[/] {attempt.attempt_id}  {styled_status(attempt.status.value)}  "
            f"worker {attempt.worker_id}  {took}"
            + (f"  [red]{_gist(attempt.error, full=full)}[/]" if attempt.error else "")
        )
        _add_spans(branch, by_attempt.pop(attempt.attempt_id, []), full)
    for attempt_id, orphans in by_attempt.items():
        _add_spans(tree.add(f"[bold]spans of {attempt_id}[/] [dim](no such attempt)[/]"), orphans, full)
    return tree


def _reward_of_last(attempts: list[Attempt], spans: list[Span]) -> float | None:
    if not attempts:
        return None
    return episode_return(span for span in spans if span.attempt_id == attempts[-1].attempt_id)


def _add_spans(branch: Tree, spans: list[Span], full: bool) -> None:
    ids = {span.span_id for span in spans}
    children: dict[str | None, list[Span]] = {}
    for span in spans:
        children.setdefault(span.parent_id if span.parent_id in ids else None, []).append(span)

    def add(parent: Tree, parent_id: str | None) -> None:
        for span in children.get(parent_id, []):
            add(parent.add(span_label(span, full=full)), span.span_id)

    add(branch, None)


def span_label(span: Span, *, full: bool = False) -> str:
    """One line about a span: name, kind and what RL cares about (role, the policy that served a call, reward,
    tokens, time, error)."""
    attributes = span.attributes
    parts = [f"{span.name} [cyan]\\[{span.kind.value}][/]"]
    if (role := attributes.get(semconv.ROLE)) is not None:
        parts.append(f"role [magenta]{role}[/]")
    if (policy := attributes.get(semconv.POLICY)) is not None:
        parts.append(f"served by policy [bold magenta]{policy}[/]")
    elif attributes.get(semconv.POLICY_UNROUTED) is True:
        parts.append("served by the base model [yellow](role unknown when it arrived)[/]")
    if (reward := attributes.get(semconv.REWARD)) is not None:
        aimed = attributes.get(semconv.REWARD_ROLE)
        parts.append(f"reward [bold]{reward}[/]" + (f" for role [magenta]{aimed}[/]" if aimed else ""))
    prompt = _token_count(span, semconv.GEN_AI_USAGE_INPUT_TOKENS, semconv.PROMPT_TOKEN_IDS)
    response = _token_count(span, semconv.GEN_AI_USAGE_OUTPUT_TOKENS, semconv.RESPONSE_TOKEN_IDS)
    if prompt is not None or response is not None:
        parts.append(f"tokens {prompt if prompt is not None else '?'}→{response if response is not None else '?'}")
    if (handed := attributes.get(semconv.HANDOFF_TO)) is not None:
        parts.append(f"{attributes.get(semconv.HANDOFF_FROM)} → [magenta]{handed}[/]")
    for key, label in ((semconv.GEN_AI_TOOL_CALL_ARGUMENTS, "arguments"), (semconv.GEN_AI_TOOL_CALL_RESULT, "result")):
        if isinstance(value := attributes.get(key), str):
            parts.append(f"{label} {escape(value if full else _short(value))}")
    parts.append(f"[dim]{(span.end_time - span.start_time) / 1e6:.1f} ms[/]")
    if span.status_code == "ERROR":
        parts.append(f"[red]error {escape(_gist(span.status_message, full=full) or '')}[/]")
    if span.kind is SpanKind.ANNOTATION and isinstance(note := attributes.get(semconv.ANNOTATION), str):
        parts.append(escape(note if full else _short(note, 160)))
    return "  ".join(parts)


def _token_count(span: Span, usage_key: str, ids_key: str) -> int | None:
    usage = span.attributes.get(usage_key)
    if isinstance(usage, int):
        return usage
    ids = span.attributes.get(ids_key)
    return len(ids) if isinstance(ids, list) else None


def _gist(error: str | None, *, full: bool = False) -> str:
    """The last line of an error: for a traceback, the line that says what went wrong (cut unless ``full``)."""
    lines = (error or "").strip().splitlines()
    if not lines:
        return ""
    return lines[-1] if full else _short(lines[-1])


def _page_title(shown: int, total: int, args: argparse.Namespace) -> str:
    """``50 of 72 rollout(s) (1-50; --offset 50 for the next page)``, or ``72 rollout(s)`` when all are shown."""
    if shown == total and args.offset == 0:
        return f"{total} rollout(s)"
    first, last = args.offset + 1, args.offset + shown
    more = args.offset + shown < total
    hint = f"; --offset {last} for the next page, --limit N for longer pages" if more else ""
    return (
        f"{shown} of {total} rollout(s) ({first}-{last}{hint})"
        if shown
        else f"none of {total} rollout(s) at --offset {args.offset}"
    )


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
