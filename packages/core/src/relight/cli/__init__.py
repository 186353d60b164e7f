"""The ``relight`` command line: look into a store, and serve one over HTTP.

Each command group is a module here with a ``register(add_command)`` function; add a group by
writing its module and naming it in :data:`COMMAND_GROUPS`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rich.console import Console

from relight import __version__
from relight.cli import (
    compare,
    dashboard,
    export,
    otlp,
    replay,
    rescore,
    rollouts,
    runner,
    serve,
    stats,
    store,
    verify,
)
from relight.cli._common import exit_status
from relight.errors import RelightError

__all__ = ["COMMAND_GROUPS", "main"]

COMMAND_GROUPS = (rollouts, stats, verify, store, export, runner, dashboard, otlp, compare, rescore, replay, serve)

_DESCRIPTION = """\
Reinforcement learning for the agents you already have.

These commands look into a store (the rollouts, attempts and spans of a run), check its integrity
(relight verify), serve one over HTTP, run an agent's rollouts on any host (relight runner), and
receive OpenTelemetry GenAI traces as rollouts (relight otlp serve). A store is named by URL:
sqlite:///runs/store.db (a file relative to the working directory; sqlite:////abs/store.db, with
four slashes, is absolute), postgresql://user@host/db (a PostgreSQL database),
http://host:port (a store server) or memory://. Commands take it from --store, or from
RELIGHT_STORE when that is not given.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="relight", description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"relight {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for group in COMMAND_GROUPS:
        group.register(commands.add_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (0 on success, 1 on an error relight explains, 2 on bad input for
    the commands that say so)."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except RelightError as error:
        Console(stderr=True).print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)
        return exit_status(args, error)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
