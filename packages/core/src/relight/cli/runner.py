"""``relight runner``: run an agent's rollouts on any host, against a store server and a gateway.

The runner is the same :class:`relight.Runner` a trainer runs in-process, so it fails and
recovers the same way: a crashed agent fails its attempt, a runner that dies loses nothing (its
leases expire and the store hands those rollouts to another runner). SIGTERM or Ctrl-C stops it
gracefully: it claims nothing more and exits once its attempts have finished, or after
``--grace-seconds``, when it fails the rest so that they are retried at once; a second signal exits
at once, leaving what still runs to its leases. While it runs it prints a health line every ``--health-seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time

from rich.console import Console

from relight._internal import event_loop
from relight.agent import Agent, load_agent
from relight.cli._common import AddCommand, add_store_option, store_url
from relight.errors import ConfigError, NotFoundError
from relight.plugins import open_store
from relight.records import Mode
from relight.runners.runner import Runner, RunnerStats
from relight.store import DEFAULT_LEASE_SECONDS, Store

__all__ = ["register", "run_runner"]

GATEWAY_ENV = "RELIGHT_GATEWAY"

_DESCRIPTION = """\
Run AGENT's rollouts here: claim them from the store, point the agent's model calls at the
gateway, report spans and outcomes back. Start as many as you like, on as many hosts: they
share the work through the store.

  relight runner --store http://store-host:8765 --gateway http://gateway-host:8000 \\
      --concurrency 32 my_package.agents:sql_agent

AGENT is an import path, module:name, of an agent installed on this host: a @relight.rollout
function, an Agent, or an Agent class (made with no arguments). The current directory is on
the import path. A store token comes from RELIGHT_STORE_TOKEN.

SIGTERM or Ctrl-C: claim nothing more, let running attempts finish (at most --grace-seconds, then
fail them so that other runners retry them), then exit 0. A second signal exits at once; attempts
left behind are retried by other runners when their leases expire. Exits 1 when the store or agent
cannot be opened.
"""


def register(add_command: AddCommand) -> None:
    parser = add_command(
        "runner",
        help="run an agent's rollouts on this host against a store and a gateway",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("agent", metavar="AGENT", help="the agent, as module:name (e.g. my_package.agents:sql_agent)")
    add_store_option(parser)
    parser.add_argument(
        "--gateway",
        metavar="URL",
        default=os.environ.get(GATEWAY_ENV),
        help=f"the gateway's root URL, http://host:port (default: ${GATEWAY_ENV})",
    )
    parser.add_argument(
        "--model",
        help="the model name agents are told to use (default: the 'model' the trainer published to the store)",
    )
    parser.add_argument("--concurrency", type=int, default=16, metavar="N", help="rollouts at once (default: 16)")
    parser.add_argument(
        "--lease-seconds",
        type=float,
        default=DEFAULT_LEASE_SECONDS,
        metavar="S",
        help=f"each attempt's lease, renewed every third of it (default: {DEFAULT_LEASE_SECONDS:g})",
    )
    parser.add_argument("--timeout", type=float, metavar="S", help="fail an attempt that runs past S seconds")
    parser.add_argument("--mode", choices=[m.value for m in Mode], help="claim only train or only val rollouts")
    parser.add_argument("--worker-id", help="how attempts name this runner (default: host, pid and a random part)")
    parser.add_argument(
        "--grace-seconds",
        type=float,
        default=60.0,
        metavar="S",
        help="after SIGTERM, wait at most S seconds for running attempts, then fail them (default: 60)",
    )
    parser.add_argument(
        "--health-seconds",
        type=float,
        default=10.0,
        metavar="S",
        help="print a health line every S seconds; 0 for none (default: 10)",
    )
    parser.set_defaults(run=run_runner)


def run_runner(args: argparse.Namespace) -> int:
    if not args.gateway:
        raise ConfigError(f"no gateway given: pass --gateway URL or set {GATEWAY_ENV}")
    if args.grace_seconds < 0 or args.health_seconds < 0:
        raise ConfigError("--grace-seconds and --health-seconds must be >= 0")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` would: the user's own modules import
    agent = load_agent(args.agent)
    return event_loop.run(_serve(args, agent, store_url(args)))


async def _serve(args: argparse.Namespace, agent: Agent, url: str) -> int:
    console = Console(stderr=True, soft_wrap=True, highlight=False)
    store = open_store(url)
    try:
        model = args.model or await _published_model(store)
        runner = Runner(
            agent,
            store,
            gateway_url=args.gateway,
            model=model,
            concurrency=args.concurrency,
            lease_seconds=args.lease_seconds,
            timeout=args.timeout,
            mode=Mode(args.mode) if args.mode else None,
            worker_id=args.worker_id,
            stop_grace_seconds=args.grace_seconds,
        )
        running = asyncio.create_task(runner.run())
        stopping = asyncio.Event()
        _on_signals(runner, running, stopping, console)
        console.print(
            f"runner {runner.worker_id} ready: agent {args.agent}, store {url}, gateway {args.gateway}, "
            f"model {model}, concurrency {args.concurrency}"
        )
        health = asyncio.create_task(_health(runner, args.health_seconds, console))
        try:
            await running
        except asyncio.CancelledError:
            if not stopping.is_set():  # cancelled by a second signal: leave; anything else goes on up
                raise
        finally:
            health.cancel()
        console.print(f"runner {runner.worker_id} stopped: {_health_line(runner.stats)}")
        return 0
    finally:
        await store.close()


def _on_signals(runner: Runner, running: asyncio.Task[RunnerStats], stopping: asyncio.Event, console: Console) -> None:
    """First SIGTERM/SIGINT: stop claiming and start the grace period. Second: abandon what still runs."""
    loop = asyncio.get_running_loop()

    def handle(signum: int) -> None:
        if stopping.is_set():
            console.print(f"runner {runner.worker_id}: {signal.Signals(signum).name} again, leaving now")
            running.cancel()
            return
        console.print(f"runner {runner.worker_id}: {signal.Signals(signum).name}, finishing running attempts")
        stopping.set()
        runner.stop()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, handle, signum)


async def _published_model(store: Store) -> str:
    """The ``model`` the trainer published with its resources, for runners started without ``--model``."""
    try:
        resources = await store.get_resources()
    except NotFoundError:
        raise ConfigError("no --model given and the store has no published resources to take it from") from None
    model = resources.items.get("model")
    if not isinstance(model, str) or not model:
        raise ConfigError(f"no --model given and resources version {resources.version} name no 'model'")
    return model


async def _health(runner: Runner, every: float, console: Console) -> None:
    if every <= 0:
        return
    while True:
        await asyncio.sleep(every)
        console.print(f"{time.strftime('%H:%M:%S')} runner {runner.worker_id}: {_health_line(runner.stats)}")


def _health_line(stats: RunnerStats) -> str:
    done = stats.succeeded + stats.failed + stats.timed_out + stats.lost
    return (
        f"running {stats.claimed - done}, claimed {stats.claimed}, succeeded {stats.succeeded}, "
        f"failed {stats.failed}, timed out {stats.timed_out}, lost {stats.lost}"
    )
