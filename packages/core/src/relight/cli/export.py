"""``relight export``: a store's finished rollouts as transitions or SFT conversations in JSONL, or its best prompt.

``--format prompt`` writes the prompts a prompt optimisation run chose (or ``--prompt-version N``) as one
JSON object, to keep them fixed in a later run: ``Trainer(resources=json.load(open(path)))``.

Rollouts imported from OpenTelemetry traces (``relight otlp serve``) carry text, not token ids:
``--tokenizer`` retokenizes them with the policy's chat template (see :mod:`relight.otlp.imported_calls`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import IO

from pydantic import JsonValue
from rich.console import Console

from relight.cli._common import AddCommand, add_store_option, with_store
from relight.cli._verdicts import add_builder_options, builder_for, left_out, training_summary
from relight.errors import NotFoundError
from relight.otlp.imported_calls import ImportedRollout, TemplateRetokenizer, chat_records, explain_imported
from relight.otlp.importer import SOURCE
from relight.records import Mode, Rollout, Transition
from relight.resources.prompts import PROMPT_ITEM, exported_prompts
from relight.store import Store
from relight.transitions.builder import TransitionBuilder, episode_return, last_attempt_spans
from relight.transitions.jsonl import write_jsonl
from relight.transitions.verdicts import Reason, RolloutVerdict


def register(add_command: AddCommand) -> None:
    parser = add_command(
        "export",
        help="write transitions or SFT conversations as JSONL",
        description=(
            "Turn the store's finished rollouts into transitions (one LLM call each: prompt and response "
            "token ids, logprobs, credited reward, role, group) and write them as JSON lines; or, with "
            "--format chat, one conversation per call ({messages, tools, role, reward}) for supervised fine-tuning."
        ),
    )
    add_store_option(parser)
    parser.add_argument("--out", "-o", metavar="PATH", default="-", help="the JSONL file (default: standard output)")
    parser.add_argument(
        "--format",
        choices=["transitions", "chat", "prompt"],
        default="transitions",
        help="transitions (token ids), chat (OpenAI messages, as relight-torch's SFT reads them) or prompt (the best "
        "prompt version of a prompt optimisation run, one JSON object)",
    )
    parser.add_argument(
        "--prompt-version", type=int, metavar="N", help="with --format prompt: this prompt version instead of the best"
    )
    parser.add_argument("--mode", choices=[m.value for m in Mode], help="only train or only val rollouts")
    parser.add_argument("--credit", default="identical", help="credit assigner: identical, discounted, per_step, air")
    parser.add_argument("--gamma", type=float, help="the discount of discounted and per_step credit")
    parser.add_argument("--group-by-role", action="store_true", help="group by task and role rather than by task")
    parser.add_argument(
        "--min-reward", type=float, metavar="R", help="keep only calls credited at least R (unrewarded ones left out)"
    )
    parser.add_argument(
        "--tokenizer",
        metavar="MODEL",
        help="retokenize imported traces with this model's tokenizer and chat template (a local folder or cached name)",
    )
    add_builder_options(parser)
    parser.set_defaults(run=export)


def export(args: argparse.Namespace) -> int:
    if args.format == "prompt":
        return export_prompt(args)
    options = {} if args.gamma is None else {"gamma": args.gamma}
    retokenizer = TemplateRetokenizer.for_model(args.tokenizer) if args.tokenizer else None

    async def build(store: Store) -> tuple[TransitionBuilder, list[ImportedRollout], list[RolloutVerdict]]:
        builder = await builder_for(store, args, credit=args.credit, group_by_role=args.group_by_role, **options)
        rollouts = await store.list_rollouts(mode=Mode(args.mode) if args.mode else None)
        finished = [rollout for rollout in rollouts if rollout.is_finished]
        imported = [r for r in finished if r.metadata.get("source") == SOURCE]
        traced = [r for r in finished if r.metadata.get("source") != SOURCE]
        judged = await explain_imported(store, builder, retokenizer, imported)
        judged += [await _explain(store, builder, rollout) for rollout in traced]
        trained = [await builder.explain(store, rollout) for rollout in traced]
        return builder, judged, trained

    builder, judged, trained = with_store(args, build)
    verdicts = [item.verdict for item in judged]
    destination: IO[str] | str = sys.stdout if args.out == "-" else args.out
    console = Console(stderr=True)
    if args.format == "chat":  # conversations need text, not token ids: the chat export judges the text
        chats = chat_records(
            judged, roles=builder.roles, min_reward=args.min_reward, include_inexact=builder.include_inexact
        )
        count = _write_records(chats.records, destination)
        reasons = ", ".join(f"{n} {why}" for why, n in chats.skipped.most_common())
        console.print(
            f"wrote {count} conversation(s)" + (f"; calls left out: {reasons}" if reasons else ""),
            highlight=False,
            soft_wrap=True,
        )
        _explain_inexact(console, verdicts)
        return 0
    transitions = (t for item in judged for t in item.transitions)
    count = write_jsonl(_rewarded(transitions, args.min_reward), destination)
    reasons = left_out(verdicts)
    console.print(
        f"wrote {count} transition(s)"
        + (f"; calls left out: {reasons}" if reasons else "")
        + (f"; {training_summary(trained)}" if trained else ""),
        highlight=False,
        soft_wrap=True,
    )
    _explain_inexact(console, verdicts)
    if retokenizer is None and any(
        call.reason is Reason.NO_TOKEN_IDS
        for item in judged
        if item.verdict.rollout.metadata.get("source") == SOURCE
        for call in item.verdict.calls
    ):
        console.print("imported traces carry no token ids: pass --tokenizer MODEL to retokenize them", highlight=False)
    return 0


def _explain_inexact(console: Console, verdicts: Iterable[RolloutVerdict], examples: int = 3) -> None:
    """Why calls were left out as inexact, each distinct reason once with how many calls and an example call."""
    seen: dict[str, list[str]] = {}
    for verdict in verdicts:
        for call in verdict.calls:
            if call.reason is Reason.INEXACT:
                seen.setdefault(call.detail, []).append(f"{verdict.rollout.rollout_id} span {call.span.span_id}")
    for detail, calls in list(seen.items())[:examples]:
        console.print(f"  {len(calls)} inexact: {detail} (e.g. {calls[0]})", highlight=False, soft_wrap=True)
    if len(seen) > examples:
        console.print(
            f"  … and {len(seen) - examples} other reason(s); relight show ROLLOUT_ID says each", highlight=False
        )


def export_prompt(args: argparse.Namespace) -> int:
    """The best prompt version (or ``--prompt-version``) as one JSON object of resources."""

    async def read(store: Store) -> dict[str, JsonValue] | None:
        return await exported_prompts(store, args.prompt_version)

    found = with_store(args, read)
    if found is None:
        which = f"prompt version {args.prompt_version}" if args.prompt_version is not None else "best prompt version"
        raise NotFoundError(f"the store holds no {which}: it holds no run of prompt optimisation that chose one")
    text = json.dumps(found, ensure_ascii=False, indent=2) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w", encoding="utf-8") as file:
            file.write(text)
    lineage = found.get(PROMPT_ITEM)
    version = lineage.get("version") if isinstance(lineage, dict) else None
    Console(stderr=True).print(f"wrote prompt version {version}", highlight=False)
    return 0


async def _explain(store: Store, builder: TransitionBuilder, rollout: Rollout) -> ImportedRollout:
    verdict = await builder.explain(store, rollout, training=False)
    return ImportedRollout(verdict, episode_return(await last_attempt_spans(store, rollout.rollout_id)))


def _rewarded(transitions: Iterable[Transition], min_reward: float | None) -> Iterable[Transition]:
    return (t for t in transitions if min_reward is None or t.reward >= min_reward)


def _write_records(records: Iterable[object], destination: IO[str] | str) -> int:
    if isinstance(destination, str):
        with open(destination, "w", encoding="utf-8") as file:
            return _write_records(records, file)
    count = 0
    for record in records:
        destination.write(json.dumps(record, ensure_ascii=False) + "\n")
        count += 1
    return count
