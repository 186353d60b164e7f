"""``relight store serve``: share a store with other processes and machines over HTTP."""

from __future__ import annotations

import argparse
import asyncio
import os

from rich.console import Console

from relight.cli._common import AddCommand, add_store_option, store_url
from relight.plugins import open_store
from relight.stores.http._wire import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_POLL_SECONDS
from relight.stores.http.client import TOKEN_ENV


def register(add_command: AddCommand) -> None:
    group = add_command("store", help="serve a store over HTTP", description="Work with a store as a whole.")
    actions = group.add_subparsers(title="actions", metavar="ACTION", required=True)
    serve = actions.add_parser(
        "serve",
        help="serve a store over HTTP until interrupted",
        description="Serve a store (a SQLite file or a PostgreSQL database) over HTTP, so runners, gateways and "
        "trainers in other processes or on other machines share it: they open it as http://HOST:PORT. Prints the "
        "URL once listening. A token is required to bind beyond 127.0.0.1.",
    )
    add_store_option(serve)
    serve.add_argument("--host", default="127.0.0.1", help="interface to bind (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="port (default: 8765; 0 picks a free one)")
    serve.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV),
        help=f"bearer token clients must send (default: ${TOKEN_ENV}); required beyond loopback",
    )
    serve.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        metavar="N",
        help=f"refuse request bodies over N bytes with 413 (default: {DEFAULT_MAX_BODY_BYTES})",
    )
    serve.add_argument(
        "--max-poll-seconds",
        type=float,
        default=DEFAULT_MAX_POLL_SECONDS,
        metavar="S",
        help=f"hold a long-poll request (claim, wait) at most S seconds (default: {DEFAULT_MAX_POLL_SECONDS:g})",
    )
    serve.set_defaults(run=serve_store)


def serve_store(args: argparse.Namespace) -> int:
    from uvicorn.loops.auto import auto_loop_factory

    from relight.stores.http.server import check_exposure, serve

    url = store_url(args)
    check_exposure(args.host, args.token)
    console = Console()

    def announce(served_at: str) -> None:
        console.print(f"serving {url} at {served_at}", highlight=False, soft_wrap=True)

    serving = serve(
        open_store(url),
        host=args.host,
        port=args.port,
        token=args.token,
        on_ready=announce,
        max_body_bytes=args.max_body_bytes,
        max_poll_seconds=args.max_poll_seconds,
    )
    with asyncio.Runner(loop_factory=auto_loop_factory()) as runner:  # uvloop where installed, as uvicorn does
        runner.run(serving)
    return 0
