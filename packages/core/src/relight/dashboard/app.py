"""The dashboard's web app: a page, its static files, and a read-only JSON API over a store.

- ``GET /`` the single page (runs, rollouts, one rollout), ``/static/...`` its script, style and
  the vendored uPlot charting library: nothing is fetched from elsewhere and nothing is built.
- ``GET /api/overview``, ``/api/curves``, ``/api/prompts`` (a prompt optimisation run's prompt versions,
  each with its parent, validation reward, critique and diff), ``/api/rollouts`` (filtered, paged by
  keyset cursors ``before``/``after`` or by ``offset``),
  ``/api/rollouts/{id}`` and ``/api/events`` (server-sent events: one ``change`` whenever the
  catalog or the compared run folders move, so the page refetches without a reload).
- ``GET /api/runs``: the compared run folders (:mod:`relight.dashboard.compared`), when it was given some.
  Without a store the store's routes answer 404, saying so.

There are only GET routes: the dashboard never changes a store. Errors are JSON in the store
server's shape, ``{"error": <class>, "detail": <what was wrong>}``: 404 for an unknown rollout or
path, 405 for another method, 422 naming the query parameter that was wrong, 401 without the token.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from relight.dashboard.catalog import Catalog, row_json
from relight.dashboard.compared import ComparedRuns
from relight.dashboard.detail import Decoder, rollout_detail
from relight.dashboard.reasons import both, reason_filter
from relight.errors import NotFoundError, RelightError
from relight.records import Mode, Resources, RolloutStatus
from relight.resources.prompts import prompt_diff, prompt_versions
from relight.stores.http._wire import status_of
from relight.summaries import SummaryFilter
from relight.transitions.builder import TransitionBuilder
from relight.transitions.verdicts import Reason

__all__ = ["STATIC", "create_app"]

logger = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
TOKEN_COOKIE = "relight_dashboard_token"
_KEEPALIVE_SECONDS = 15.0


class ListQuery(BaseModel):
    """The rollout list's query string; an unknown parameter is refused, so a typo is not a silent no-op."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: RolloutStatus | None = None
    mode: Mode | None = None
    group_id: str | None = None
    role: str | None = None
    step: int | None = None
    policy_version: int | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    min_attempts: Annotated[int | None, Field(ge=0)] = None
    reason: Reason | None = None
    before: str | None = None
    """The next page: rollouts older than this one (a keyset cursor, as fast deep in the list as at its top)."""
    after: str | None = None
    """The page before: the rollouts just newer than this one."""
    offset: Annotated[int, Field(ge=0)] = 0
    limit: Annotated[int, Field(ge=1, le=500)] = 50

    def where(self, builder: TransitionBuilder, roles: set[str]) -> SummaryFilter:
        """The store's filter: these fields, and the summaries a reason applies to (see :mod:`.reasons`)."""
        where = SummaryFilter(
            statuses=None if self.status is None else [self.status],
            mode=self.mode,
            group_id=self.group_id,
            roles=None if self.role is None else [self.role],
            step=self.step,
            policy_version=self.policy_version,
            min_reward=self.min_reward,
            max_reward=self.max_reward,
            min_attempts=self.min_attempts,
            before=self.before,
            after=self.after,
        )
        return where if self.reason is None else both(where, reason_filter(self.reason, builder, roles))


def create_app(
    catalog: Catalog | None,
    *,
    decode: Decoder | None = None,
    token: str | None = None,
    closing: asyncio.Event | None = None,
    live: bool = True,
    runs: ComparedRuns | None = None,
) -> Starlette:
    """The dashboard over ``catalog``'s store and the ``runs`` it compares (either may be absent).

    Args:
        decode: turns token ids into text for the token view; without one the view shows ids.
        token: when set, every request needs it (``Authorization: Bearer``, the ``?token=`` the
            printed URL carries, or the cookie that sets).
        closing: set when the server is about to stop, so event streams end instead of holding it.
        live: False serves a snapshot: the page opens no event stream (``?live=0`` asks for the same), so a
            headless browser's screenshot returns once the page is drawn.
        runs: the run folders of the compare page.
    """
    stopping = closing or asyncio.Event()
    page = _page(live=live, store=catalog is not None, runs=runs is not None)

    def store_catalog() -> Catalog:
        if catalog is None:
            raise NotFoundError("this dashboard shows run folders only: serve it with --store URL to see a store")
        return catalog

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html") if page is None else HTMLResponse(page)

    async def compared(request: Request) -> Response:
        if runs is None:
            raise NotFoundError("this dashboard compares no run folders: serve it with --runs DIR...")
        return JSONResponse(runs.comparison())

    async def overview(request: Request) -> Response:
        catalog = store_catalog()
        stats = await catalog.store.stats()
        return JSONResponse(
            {
                "stats": stats.model_dump(mode="json"),
                "rollouts": catalog.count,
                "pending": catalog.pending,
                "version": catalog.version,
                "roles": _described_roles(catalog.builder),
                "policies": {name: policy.describe() for name, policy in (catalog.builder.policies or {}).items()}
                or None,
                "live": live,
                "decoded": decode is not None,
                "reasons": [reason.value for reason in Reason],
            }
        )

    async def curves(request: Request) -> Response:
        catalog = store_catalog()
        return JSONResponse({"points": catalog.curves(), "version": catalog.version})

    prompts = _PromptVersions(store_catalog)

    async def rollouts(request: Request) -> Response:
        catalog = store_catalog()
        query = ListQuery.model_validate(dict(request.query_params))
        where = query.where(catalog.builder, catalog.roles)
        page = await catalog.page(where, offset=query.offset, limit=query.limit)
        return JSONResponse(
            {
                "total": page.total,
                "offset": page.offset,
                "limit": query.limit,
                "rows": [row_json(summary, catalog.builder) for summary in page.rows],
                "pending": catalog.pending,
            }
        )

    async def rollout(request: Request) -> Response:
        catalog = store_catalog()
        detail = await rollout_detail(catalog.store, catalog.builder, request.path_params["rollout_id"], decode)
        return JSONResponse(detail)

    async def events(request: Request) -> Response:
        followed = [source for source in (catalog, runs) if source is not None]
        return StreamingResponse(
            _changes(followed, stopping), media_type="text/event-stream", headers={"cache-control": "no-cache"}
        )

    # Plain Starlette: a handful of read-only JSON routes and a page need no request models.
    app = Starlette(
        routes=[
            Route("/", index),
            Route("/api/overview", overview),
            Route("/api/curves", curves),
            Route("/api/prompts", prompts.route),
            Route("/api/rollouts", rollouts),
            Route("/api/rollouts/{rollout_id:path}", rollout),
            Route("/api/events", events),
            Route("/api/runs", compared),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ],
        exception_handlers={
            HTTPException: _http_error,
            RelightError: _relight_error,
            ValidationError: _invalid_query,
            Exception: _unexpected,
        },
    )
    if token:
        app.add_middleware(_TokenGuard, token=token)
    return app


def _page(*, live: bool, store: bool, runs: bool) -> str | None:
    """The page with what this dashboard serves marked on its body (a snapshot, no store, run folders); None
    for the plain page of a live store."""
    if live and store and not runs:
        return None
    facts = {"live": live, "store": store, "runs": runs}
    marks = " ".join(f'data-{name}="{"on" if value else "off"}"' for name, value in facts.items())
    return (STATIC / "index.html").read_text(encoding="utf-8").replace("<body>", f"<body {marks}>", 1)


async def _changes(followed: Sequence[Catalog | ComparedRuns], stopping: asyncio.Event) -> AsyncIterator[str]:
    """``change`` events as the catalog's or the run folders' version moves, comments to keep the connection
    open between them. The version sent is their sum: each only grows, so the sum moves whenever either does."""
    seen = -1
    while not stopping.is_set():
        version = sum(source.version for source in followed)
        if version != seen:
            seen = version
            pending = next((source.pending for source in followed if isinstance(source, Catalog)), 0)
            yield f"event: change\ndata: {json.dumps({'version': seen, 'pending': pending})}\n\n"
            continue
        waits = [
            asyncio.ensure_future(source.wait_change(source.version, timeout=_KEEPALIVE_SECONDS, stop=stopping))
            for source in followed
        ]
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        if not any(task.result() for task in done if not task.cancelled()):
            yield ": keep-alive\n\n"


def _error(status: int, error: str, detail: str, headers: Mapping[str, str] | None = None) -> Response:
    return JSONResponse({"error": error, "detail": detail}, status_code=status, headers=headers)


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    names = {404: "NotFound", 405: "MethodNotAllowed"}
    detail = {
        404: f"no such page or API route: {request.url.path}",
        405: f"the dashboard is read-only: {request.method} is not allowed on {request.url.path}, only GET",
    }.get(error.status_code, str(error.detail))
    return _error(error.status_code, names.get(error.status_code, "HTTPError"), detail, error.headers)


async def _relight_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, RelightError)
    return _error(status_of(error), type(error).__name__, str(error))


async def _invalid_query(request: Request, error: Exception) -> Response:
    assert isinstance(error, ValidationError)
    problems: list[dict[str, Any]] = [
        {"loc": list(p["loc"]), "msg": p["msg"], "type": p["type"]}
        for p in error.errors(include_url=False, include_context=False)
    ]
    detail = "; ".join(f"{'.'.join(map(str, p['loc']))}: {p['msg']}" for p in problems)
    return JSONResponse({"error": "ValidationError", "detail": detail, "errors": problems}, status_code=422)


async def _unexpected(request: Request, error: Exception) -> Response:
    logger.exception("the dashboard failed to answer %s", request.url.path)
    return _error(500, type(error).__name__, f"the dashboard failed to answer {request.url.path}: {error}")


class _TokenGuard:
    """Refuses requests without the dashboard's token (401, JSON); ``?token=`` sets a cookie for the page's calls."""

    def __init__(self, app: ASGIApp, *, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        given = request.query_params.get("token")
        authorization = request.headers.get("authorization", "")
        bearer = authorization.removeprefix("Bearer ") if authorization.startswith("Bearer ") else None
        offered = [given, request.cookies.get(TOKEN_COOKIE), bearer]
        if not any(value and hmac.compare_digest(value.encode(), self.token.encode()) for value in offered):
            detail = (
                "this dashboard needs its token: open the URL it printed (…?token=…) or send 'Authorization: Bearer'"
            )
            await _error(401, "Unauthorized", detail, {"www-authenticate": "Bearer"})(scope, receive, send)
            return
        if given is None:
            await self.app(scope, receive, send)
            return

        async def send_with_cookie(message: Any) -> None:
            if message["type"] == "http.response.start":
                cookie = f"{TOKEN_COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict"
                message = {**message, "headers": [*message["headers"], (b"set-cookie", cookie.encode())]}
            await send(message)

        await self.app(scope, receive, send_with_cookie)


class _PromptVersions:
    """A prompt optimisation run's prompt versions as the page shows them, read again only when the store has moved."""

    def __init__(self, catalog: Callable[[], Catalog]) -> None:
        self.catalog = catalog
        """The store's catalog (a 404 without a store)."""
        self._read: dict[int, Resources] = {}
        """Resources versions read so far (a version never changes)."""
        self._rows: tuple[int, list[dict[str, object]]] = (-1, [])

    async def route(self, request: Request) -> Response:
        """``GET /api/prompts``."""
        catalog = self.catalog()
        return JSONResponse({"versions": await self.rows(catalog), "version": catalog.version})

    async def rows(self, catalog: Catalog) -> list[dict[str, object]]:
        """Each version of ``catalog``'s store, its fields and its diff against its parent."""
        if self._rows[0] != catalog.version:
            at = catalog.version
            versions = await prompt_versions(catalog.store, read=self._read)
            by_number = {version.version: version for version in versions}
            rows: list[dict[str, object]] = [
                {
                    **asdict(version),
                    "diff": prompt_diff(parent.prompts, version.prompts)
                    if (parent := by_number.get(version.parent if version.parent is not None else -1))
                    else None,
                }
                for version in versions
            ]
            self._rows = (at, rows)
        return self._rows[1]


def _described_roles(builder: TransitionBuilder) -> str | list[str] | None:
    """The role filter the verdicts use, as the page shows it: a regular expression or the exact roles."""
    roles = builder.roles
    if roles is None or isinstance(roles, str):
        return roles
    if isinstance(roles, re.Pattern):
        return roles.pattern
    return list(roles)
