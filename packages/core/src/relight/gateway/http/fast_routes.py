"""The routes every LLM call takes, served without Starlette's middleware and router.

Starlette runs each request through two middlewares, two exception-handling wrappers and a router
that tries the regex of each of its twelve routes in turn: a tenth of the gateway's CPU per call,
on the path of every call an agent makes. :class:`HotRoutes` recognises the chat and completions
paths (at the root and under ``/rollouts/{rollout_id}/attempts/{attempt_id}``) by splitting the
path, and calls the same handler with the same error answers as Starlette would. Every other
request, and any path it does not recognise exactly (a trailing slash, another method), goes to
the Starlette app unchanged, so its answers (405, 404, redirects) are Starlette's own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

__all__ = ["ErrorHandler", "HotRoutes"]

Handler = Callable[[Request], Awaitable[Response]]
ErrorHandler = Callable[[Request, Exception], Awaitable[Response]]


class HotRoutes:
    """An ASGI app: ``routes`` (POST handlers by path) served directly, everything else by ``app``.

    Args:
        app: the Starlette app that serves every route, the hot ones included; its ``state`` is the
            handlers' (``request.app``).
        routes: the hot POST routes, by their path at the root (``/v1/chat/completions``).
        error_handlers: the app's exception handlers, by exception class; an exception with none
            gets ``internal_error``'s answer and is raised on, for the server to log, as Starlette does.
    """

    def __init__(
        self,
        app: Starlette,
        routes: Mapping[str, Handler],
        error_handlers: Mapping[type[Exception], ErrorHandler],
        internal_error: ErrorHandler,
    ) -> None:
        self.app = app
        self._routes = dict(routes)
        self._error_handlers = dict(error_handlers)
        self._internal_error = internal_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        matched = self._match(scope) if scope["type"] == "http" and scope["method"] == "POST" else None
        if matched is None:
            await self.app(scope, receive, send)
            return
        handler, scope["path_params"] = matched
        scope["app"] = self.app
        request = Request(scope, receive)
        try:
            response = await handler(request)
        except Exception as error:
            answer = self._handler_for(error)
            await (await (answer or self._internal_error)(request, error))(scope, receive, send)
            if answer is None:
                raise
            return
        await response(scope, receive, send)

    def _match(self, scope: Scope) -> tuple[Handler, dict[str, Any]] | None:
        """The handler and path parameters of a hot route, or None for any other path."""
        if scope.get("root_path"):
            return None
        path: str = scope["path"]
        handler = self._routes.get(path)
        if handler is not None:
            return handler, {}
        if not path.startswith("/rollouts/"):
            return None
        parts = path.split("/", 5)  # "", "rollouts", rollout_id, "attempts", attempt_id, "v1/…"
        if len(parts) != 6 or parts[3] != "attempts" or not parts[2] or not parts[4]:
            return None
        _, _, rollout_id, _, attempt_id, rest = parts
        handler = self._routes.get("/" + rest)
        if handler is None:
            return None
        return handler, {"rollout_id": rollout_id, "attempt_id": attempt_id}

    def _handler_for(self, error: Exception) -> ErrorHandler | None:
        for kind in type(error).__mro__:
            if kind is not Exception and kind in self._error_handlers:
                return self._error_handlers[kind]
        return None
