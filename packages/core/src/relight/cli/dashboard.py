"""``relight dashboard``: serve the web dashboard of a store until interrupted."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import signal
from typing import Any

from rich.console import Console

from relight.cli._common import AddCommand, add_store_option, store_url
from relight.dashboard.compared import ComparedRuns
from relight.dashboard.detail import Decoder
from relight.dashboard.server import DEFAULT_PORT, Dashboard
from relight.errors import ConfigError
from relight.plugins import open_store
from relight.store import Store
from relight.stores.http.client import TOKEN_ENV
from relight.transitions.builder import TransitionBuilder
from relight.transitions.run_config import latest_items


def register(add_command: AddCommand) -> None:
    parser = add_command(
        "dashboard",
        help="see runs, rollouts, span trees and token logprobs in a browser",
        description="Serve a read-only web dashboard of a store: reward curves that update while a run trains, "
        "a filterable list of rollouts, and each rollout's attempts, span tree, LLM calls with tokens coloured "
        "by logprob, and why each call was or was not trained. With --runs, a compare page too: run folders' "
        "reward and validation curves overlaid, the settings that differ and their final figures (--runs alone "
        "serves that page without a store). Prints the URL once listening. A token is required to bind beyond "
        "127.0.0.1.",
    )
    add_store_option(parser)
    parser.add_argument(
        "--runs",
        nargs="+",
        metavar="DIR",
        help="run folders to compare, or folders of them (runs/: runs started later appear by themselves)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT}; 0 picks one)")
    parser.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV),
        help=f"token visitors must give (default: ${TOKEN_ENV}); required beyond loopback",
    )
    parser.add_argument(
        "--role",
        metavar="REGEX",
        help="judge calls with this role filter instead of the one the run published (the default)",
    )
    parser.add_argument(
        "--include-failed",
        action="store_true",
        default=None,
        help="judge failed rollouts as trained too (default: as the run did)",
    )
    parser.add_argument(
        "--include-inexact",
        action="store_true",
        default=None,
        help="judge calls whose token ids are not exactly the call as trained too (default: as the run did)",
    )
    parser.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="a Hugging Face tokenizer folder to decode token ids with (needs transformers); by default the "
        "tokenizer the run published, else the model's where transformers finds it on this machine",
    )
    parser.add_argument(
        "--no-live",
        action="store_true",
        help="serve a snapshot: the page opens no event stream, so a headless browser's screenshot returns",
    )
    parser.set_defaults(run=serve_dashboard)


def serve_dashboard(args: argparse.Namespace) -> int:
    """Serve until SIGINT (Ctrl-C) or SIGTERM, then stop and close the store; exit status 0."""
    runs = ComparedRuns(args.runs) if args.runs else None
    url = store_url(args) if args.store or runs is None else None
    amended = args.role is not None or args.include_failed is not None or args.include_inexact is not None
    builder = (
        TransitionBuilder(
            roles=args.role, include_failed=bool(args.include_failed), include_inexact=bool(args.include_inexact)
        )
        if amended
        else None
    )
    console = Console()

    async def serve() -> None:
        stop = asyncio.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):  # the loop's own handlers: stop cleanly on either
            asyncio.get_running_loop().add_signal_handler(signum, stop.set)
        store = open_store(url) if url is not None else None
        try:
            decode = (
                _load_tokenizer(args.tokenizer)
                if args.tokenizer
                else await run_decoder(store)
                if store is not None
                else None
            )
            dashboard = Dashboard(
                store,
                host=args.host,
                port=args.port,
                builder=builder,
                decode=decode,
                token=args.token,
                live=not args.no_live,
                runs=runs,
            )
            async with dashboard:
                shown = " and ".join(
                    what
                    for what in (url, f"{len(args.runs)} run folder path(s)" if runs is not None else None)
                    if what is not None
                )
                console.print(f"dashboard of {shown} at {dashboard.url}", highlight=False, soft_wrap=True)
                await stop.wait()
        finally:
            if store is not None:
                await store.close()

    asyncio.run(serve())
    return 0


def _load_tokenizer(path: str, *, local_only: bool = False) -> Decoder:
    """A tokenizer's ``decode``, through transformers when it is installed (the core does not depend on it)."""
    try:
        transformers = importlib.import_module("transformers")
    except ImportError as error:
        raise ConfigError("--tokenizer needs the transformers package (pip install transformers)") from error
    try:
        tokenizer: Any = transformers.AutoTokenizer.from_pretrained(path, local_files_only=local_only)
    except (OSError, ValueError) as error:
        raise ConfigError(f"--tokenizer {path!r} is not a tokenizer folder transformers can load: {error}") from error
    return lambda ids: str(tokenizer.decode(list(ids)))


async def run_decoder(store: Store) -> Decoder | None:
    """The ``decode`` of the tokenizer the run published (``tokenizer`` among its resources: a folder, a name
    or a tokenizer's JSON), else of its model's where transformers finds it here; None when neither loads."""
    items = await latest_items(store)
    published = items.get("tokenizer")
    if isinstance(published, dict) and isinstance(text := published.get("json"), str):
        try:
            tokenizers: Any = importlib.import_module("tokenizers")
            tokenizer: Any = tokenizers.Tokenizer.from_str(text)
        except Exception:  # no tokenizers library, or JSON of a version it cannot read: show ids
            return None
        return lambda ids: str(tokenizer.decode(list(ids), skip_special_tokens=False))
    for candidate in (published, items.get("model")):
        if isinstance(candidate, str) and candidate:
            try:
                return _load_tokenizer(candidate, local_only=True)
            except ConfigError:
                continue
    return None
