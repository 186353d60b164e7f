"""What the commands share: the ``--store`` option, opening the store, and reading spans."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from typing import TypeVar

from rich.console import Console

from relight.errors import ConfigError, NotFoundError
from relight.plugins import open_store
from relight.store import Store

T = TypeVar("T")

STORE_ENV = "RELIGHT_STORE"

AddCommand = Callable[..., argparse.ArgumentParser]
"""``add_parser`` of the ``relight`` subcommands: ``add_command(name, help=..., description=...)``."""


def add_store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        default=os.environ.get(STORE_ENV),
        help="the store: sqlite:///path.db, postgresql://user@host/db, http://host:port or memory:// "
        f"(default: ${STORE_ENV})",
    )


def store_url(args: argparse.Namespace) -> str:
    url: str | None = args.store
    if not url:
        raise ConfigError(f"no store given: pass --store URL or set {STORE_ENV}, e.g. sqlite:///runs/store.db")
    return url


def with_store(args: argparse.Namespace, use: Callable[[Store], Awaitable[T]]) -> T:
    """Open the store named on the command line, run ``use`` with it, and close it."""

    async def run() -> T:
        store = open_store(store_url(args))
        try:
            return await use(store)
        finally:
            await store.close()

    return asyncio.run(run())


BAD_INPUT_STATUS = 2
"""The exit status of a command that refuses bad input (a folder that is no run folder, a rollout the store does
not hold, a reward that does not import) in the commands that say so; argparse's own for a bad command line."""


def refuse_bad_input_with_2(parser: argparse.ArgumentParser) -> None:
    """Make the command exit :data:`BAD_INPUT_STATUS` on a :class:`ConfigError` or :class:`NotFoundError`, so a
    script tells bad input from a failure of the work itself (1)."""
    parser.set_defaults(bad_input_status=BAD_INPUT_STATUS)


def write_plot(args: argparse.Namespace, path: str | None, draw: Callable[[str], object], said: str) -> None:
    """Draw the command's plot to ``path`` (none when None) and say ``said`` and where (not with ``--json``).

    A plot that cannot be drawn (too little data) is said on stderr, and is an error only when ``--png``
    asked for it.
    """
    if path is None:
        return
    try:
        written = draw(path)
    except ConfigError as error:
        if args.png:
            raise
        Console(stderr=True).print(f"no plot: {error}", highlight=False, soft_wrap=True)
        return
    if not args.json:
        output_console().print(f"{said} {written}", highlight=False, soft_wrap=True)


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (one object per line) for scripts")


def output_console() -> Console:
    """The console for a command's output. Piped or redirected it is as wide as the content, so ids and
    errors are never cut or wrapped (a script greps whole ids); on a terminal it fits the terminal."""
    console = Console()
    return console if console.is_terminal else Console(width=1_000_000)


def print_json(value: object) -> None:
    """One JSON object on its own line of standard output, whole."""
    print(json.dumps(value, ensure_ascii=False, default=str), flush=True)


def format_reward(reward: float | None) -> str:
    return "–" if reward is None else f"{reward:g}"


STATUS_STYLES = {
    "queued": "cyan",
    "running": "yellow",
    "succeeded": "green",
    "failed": "red",
    "timed_out": "red",
    "expired": "red",
    "cancelled": "dim",
}


def styled_status(status: str) -> str:
    return f"[{STATUS_STYLES.get(status, 'default')}]{status}[/]"


def exit_status(args: argparse.Namespace, error: Exception) -> int:
    """The status a command exits with after ``error``: :data:`BAD_INPUT_STATUS` for bad input where the command
    asked for it (:func:`refuse_bad_input_with_2`), 1 otherwise."""
    if isinstance(error, ConfigError | NotFoundError):
        return int(getattr(args, "bad_input_status", 1))
    return 1
