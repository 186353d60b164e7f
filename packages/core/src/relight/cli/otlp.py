"""``relight otlp serve``: receive OpenTelemetry GenAI traces over OTLP/HTTP and store them as rollouts."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal

from rich.console import Console

from relight.cli._common import AddCommand, add_store_option, store_url
from relight.plugins import open_store
from relight.records import Mode
from relight.stores.http.client import TOKEN_ENV


def register(add_command: AddCommand) -> None:
    group = add_command(
        "otlp", help="receive GenAI traces over OTLP", description="Turn exported OpenTelemetry traces into rollouts."
    )
    actions = group.add_subparsers(title="actions", metavar="ACTION", required=True)
    serve = actions.add_parser(
        "serve",
        help="serve /v1/traces, /v1/logs and /v1/metrics (OTLP/HTTP, protobuf and JSON) until interrupted",
        description="Receive OpenTelemetry traces from any OTLP/HTTP exporter and store each trace (or session) "
        "as a rollout, its GenAI calls mapped to relight's LLM spans (GenAI conventions, OpenInference, "
        "OpenLLMetry) and the GenAI events sent as log records joined to them; metrics are answered and "
        "counted. Nothing accepted is dropped: spans before a trace's first LLM call wait in the store. Any "
        "store works, the one a training run uses included: imported rollouts never enter its queue. Prints "
        "the traces endpoint once listening.",
    )
    add_store_option(serve)
    serve.add_argument("--host", default="127.0.0.1", help="interface to bind (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=4318, help="port (default: 4318, OTLP/HTTP's; 0 picks a free one)")
    serve.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV),
        help=f"bearer token exporters must send (default: ${TOKEN_ENV}); required beyond loopback",
    )
    serve.add_argument("--session-attribute", metavar="NAME", help="group traces by this attribute (session.id)")
    serve.add_argument("--group-attribute", metavar="NAME", help="the attribute naming the task, for GRPO groups")
    serve.add_argument("--reward-attribute", metavar="NAME", help="a span attribute holding the rollout's reward")
    serve.add_argument("--reward-event", metavar="NAME", help="a span event holding a reward (user feedback)")
    serve.add_argument(
        "--reward-event-attribute", metavar="NAME", default="score", help="the event attribute read (default: score)"
    )
    serve.add_argument("--mode", choices=[m.value for m in Mode], default="train", help="imported rollouts' mode")
    serve.add_argument(
        "--max-body-bytes", type=int, metavar="N", help="refuse bodies over N bytes with 413 (default: 16 MiB)"
    )
    serve.set_defaults(run=serve_otlp_command)


def serve_otlp_command(args: argparse.Namespace) -> int:
    from relight.otlp import DEFAULT_MAX_BODY_BYTES, ImportOptions, serve_otlp
    from relight.stores.http.server import check_exposure

    check_exposure(args.host, args.token)
    url = store_url(args)
    options = ImportOptions(
        session_attribute=args.session_attribute,
        group_attribute=args.group_attribute,
        reward_attribute=args.reward_attribute,
        reward_event=args.reward_event,
        reward_event_attribute=args.reward_event_attribute,
        mode=Mode(args.mode),
    )
    console = Console()

    def announce(endpoint: str) -> None:
        console.print(f"receiving OTLP traces into {url} at {endpoint}", highlight=False, soft_wrap=True)

    async def serve_until_signalled() -> None:
        """Serve until SIGINT or SIGTERM, then close the store: a terminated receiver exits cleanly."""
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for stop in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(stop, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await serve_otlp(
                open_store(url),
                options,
                host=args.host,
                port=args.port,
                max_body_bytes=args.max_body_bytes or DEFAULT_MAX_BODY_BYTES,
                token=args.token,
                on_ready=announce,
            )

    asyncio.run(serve_until_signalled())
    return 0
