"""``relight replay``: run an agent again against exactly what the model answered in a recorded rollout."""

from __future__ import annotations

import argparse
import os
import sys

from relight._internal import event_loop
from relight.agent import load_agent
from relight.cli._common import (
    AddCommand,
    add_json_option,
    add_store_option,
    format_reward,
    output_console,
    print_json,
    refuse_bad_input_with_2,
    store_url,
)
from relight.errors import ConfigError
from relight.plugins import open_store
from relight.replay.run import ReplayResult, replay

__all__ = ["register"]

DIVERGED = 1
"""The exit status of a replay that left the recording."""

_DESCRIPTION = """\
Run AGENT again on a recorded rollout's task, against a scripted model that returns exactly the answers
the model gave then, in order (text, tool calls, token ids, logprobs): step through your own code, check a
changed tool or reward, or reproduce a failure, deterministically.

  relight replay r1a2b3c4-step3-task0-s1 --store sqlite:///runs/<run>/store.db -- my_package.agents:sql_agent

AGENT is an import path, module:name, as relight runner takes it (the working directory is on the import
path); it runs here, in this process, and gets the gateway's base URL, key and model as in training.
The replay's spans go to --replay-store (an in-memory store by default), never into --store, which is only
read; they are compared with the recording's, ids and times aside.

Exits 0 when the agent made exactly the recorded calls, 1 when it diverged (a request the recording does
not hold, shown against the recorded one as a diff, or fewer or more calls), 2 on bad input (no such
rollout or attempt, an agent that does not import).
"""


def register(add_command: AddCommand) -> None:
    parser = add_command(
        "replay",
        help="run an agent again against a rollout's recorded model answers",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("rollout_id", metavar="ROLLOUT_ID", help="the recorded rollout")
    parser.add_argument("agent", metavar="AGENT", help="the agent, as module:name (e.g. my_package.agents:sql_agent)")
    add_store_option(parser)
    parser.add_argument("--attempt", metavar="ID", help="which attempt to replay (default: the rollout's last)")
    parser.add_argument(
        "--replay-store",
        metavar="URL",
        default="memory://",
        help="where the replay's spans go (default: memory://, kept for the comparison only)",
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, metavar="S", help="fail the agent after S seconds (default: 300)"
    )
    add_json_option(parser)
    refuse_bad_input_with_2(parser)
    parser.set_defaults(run=run_replay)


def run_replay(args: argparse.Namespace) -> int:
    source_url = store_url(args)
    if args.replay_store == source_url:
        raise ConfigError(f"--replay-store is --store ({source_url}): a replay never writes into the store it reads")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` would: the user's own modules import
    agent = load_agent(args.agent)

    async def run() -> ReplayResult:
        source, into = open_store(source_url), open_store(args.replay_store)
        try:
            return await replay(
                source, args.rollout_id, agent, into=into, attempt_id=args.attempt, timeout=args.timeout
            )
        finally:
            await into.close()
            await source.close()

    result = event_loop.run(run())
    if args.json:
        print_json(_json(result))
    else:
        _print(result, args.agent)
    return DIVERGED if result.diverged else 0


def _print(result: ReplayResult, agent: str) -> None:
    console = output_console()
    recording = result.recording
    total = len(recording.exchanges)
    answered = total - len(result.unanswered) if result.divergence is None else None
    console.print(
        f"replayed rollout {recording.rollout.rollout_id} (attempt {recording.attempt_id}) with {agent} as "
        f"{result.rollout.rollout_id}: "
        + (f"{answered} of {total} recorded call(s) answered" if answered is not None else f"{total} recorded call(s)"),
        highlight=False,
        soft_wrap=True,
    )
    console.print(
        f"status {result.rollout.status.value} (recorded: {recording.rollout.status.value}); "
        f"reward {format_reward(result.reward_after)} (recorded: {format_reward(result.reward_before)})",
        highlight=False,
        soft_wrap=True,
    )
    if result.divergence is not None:
        console.print("[bold red]diverged[/] at " + result.divergence.explain(), highlight=False, soft_wrap=True)
    elif result.unanswered:
        left = ", ".join(str(exchange.index + 1) for exchange in result.unanswered)
        console.print(
            f"[bold red]diverged[/]: the agent ended before the recorded call(s) {left}",
            highlight=False,
            soft_wrap=True,
        )
    if result.differences:
        console.print(f"spans: {len(result.differences)} difference(s) from the recording:", highlight=False)
        for difference in result.differences:
            console.print(f"  {difference}", highlight=False, soft_wrap=True)
    else:
        console.print("spans: the same as recorded, ids and times aside", highlight=False)
    if result.rollout.error:
        console.print(f"the agent's error:\n{result.rollout.error}", highlight=False, soft_wrap=True)


def _json(result: ReplayResult) -> dict[str, object]:
    divergence = result.divergence
    return {
        "rollout_id": result.recording.rollout.rollout_id,
        "attempt_id": result.recording.attempt_id,
        "replay_id": result.rollout.rollout_id,
        "diverged": result.diverged,
        "divergence": None
        if divergence is None
        else {
            "call": divergence.call,
            "recorded_call": divergence.expected.index + 1 if divergence.expected is not None else None,
            "explanation": divergence.explain(),
        },
        "unanswered": [exchange.index + 1 for exchange in result.unanswered],
        "status": result.rollout.status.value,
        "recorded_status": result.recording.rollout.status.value,
        "reward": result.reward_after,
        "recorded_reward": result.reward_before,
        "span_differences": list(result.differences),
        "error": result.rollout.error,
    }
