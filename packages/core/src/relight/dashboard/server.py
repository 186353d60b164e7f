"""Serving the dashboard: beside a training run (on its event loop) or alone (``relight dashboard``).

A :class:`Dashboard` serves the app and keeps its catalog current with a light poll of the store
(new rollouts by offset, unfinished ones in one ``wait(timeout=0)``), and the run folders it compares
with a look at their files, once a second by default: the page learns of changes through server-sent
events, so it never reloads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Iterable
from types import TracebackType
from typing import Any, Self

from rich.console import Console

from relight._internal.server import AsgiServer
from relight.dashboard.app import create_app
from relight.dashboard.catalog import Catalog
from relight.dashboard.compared import ComparedRuns
from relight.dashboard.detail import Decoder
from relight.errors import RelightError
from relight.store import Store
from relight.stores.http.server import check_exposure
from relight.transitions.builder import TransitionBuilder

__all__ = ["DEFAULT_PORT", "Dashboard", "beside_run", "decoder_of"]

logger = logging.getLogger(__name__)

DEFAULT_PORT = 8765


class Dashboard:
    """The dashboard of ``store`` on ``host:port`` while the ``async with`` block runs.

    Args:
        store: the store whose runs, rollouts and calls it shows; None shows only the compared ``runs``.
        runs: run folders to compare on the compare page (see :mod:`relight.dashboard.compared`).
        builder: judges calls as the run does (role filter, credit, ``include_failed``).
        decode: token ids to text for the token view (see :func:`decoder_of`).
        token: required beyond loopback, as for the store server.
        interval: seconds between two polls of the store.
        live: False serves a snapshot page that opens no event stream (see :func:`create_app`).

    Without a ``builder``, calls are judged with the role filter the run published
    (:func:`relight.transitions.run_config.builder_of_run`), read again as the store changes.
    """

    def __init__(
        self,
        store: Store | None,
        *,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        builder: TransitionBuilder | None = None,
        decode: Decoder | None = None,
        token: str | None = None,
        interval: float = 1.0,
        live: bool = True,
        runs: ComparedRuns | None = None,
    ) -> None:
        check_exposure(host, token)
        if store is None and runs is None:
            raise ValueError("a dashboard shows a store, run folders, or both: give store or runs")
        self.catalog = Catalog(store, builder) if store is not None else None
        self.runs = runs
        self.token = token
        self.interval = interval
        self._closing = asyncio.Event()
        self._server = AsgiServer(
            create_app(self.catalog, decode=decode, token=token, closing=self._closing, live=live, runs=runs),
            host=host,
            port=port,
        )
        self._follower: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        """Where to open it (with the token, when there is one)."""
        return self._server.url + "/" + (f"?token={self.token}" if self.token else "")

    async def start(self) -> None:
        self._closing.clear()
        await self._server.start()
        self._follower = asyncio.create_task(self._follow(), name="relight-dashboard-poll")

    async def stop(self) -> None:
        """Stop polling, end the event streams and stop serving; safe to call twice."""
        self._closing.set()
        follower, self._follower = self._follower, None
        if follower is not None:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
        await self._server.stop()

    async def _follow(self) -> None:
        failing = False
        while True:
            if self.runs is not None:
                self.runs.refresh()
            try:
                if self.catalog is not None:
                    await self.catalog.refresh()
                failing = False
            except RelightError as error:  # the store went away for a while: say so once, keep trying
                if not failing:
                    logger.warning("the dashboard could not read the store: %s", error)
                failing = True
            await asyncio.sleep(self.interval)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


def decoder_of(candidates: Iterable[Any]) -> Decoder | None:
    """The ``decode`` of the first candidate that has a tokenizer (an engine's ``.tokenizer``) or is one."""
    for candidate in candidates:
        tokenizer = getattr(candidate, "tokenizer", candidate)
        decode = getattr(tokenizer, "decode", None)
        if callable(decode):
            return lambda ids: str(decode(list(ids)))
    return None


@contextlib.asynccontextmanager
async def beside_run(
    store: Store, builder: TransitionBuilder, upstreams: Iterable[Any], console: Console
) -> AsyncGenerator[Dashboard]:
    """The dashboard of a run's store on a free loopback port while the run lasts; prints its URL.

    Tokens are decoded with the tokenizer of the first upstream that has one (an in-process engine).
    """
    async with Dashboard(store, port=0, builder=builder, decode=decoder_of(upstreams)) as dashboard:
        console.print(f"dashboard: [link={dashboard.url}]{dashboard.url}[/link]", highlight=False)
        yield dashboard
