"""Errors the gateway answers with, in OpenAI's shape so every client library reports them properly."""

from __future__ import annotations

from typing import Any

from relight.gateway.overflow import ContextOverflow

__all__ = ["GatewayError", "UpstreamError", "error_body"]


class GatewayError(Exception):
    """A request the gateway refuses or cannot serve; becomes an HTTP error with an OpenAI error body."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}
        self.overflow: ContextOverflow | None = None
        """Set when the request did not fit the model's context (``code`` is ``context_length_exceeded``)."""
        self.recorded = False
        """Whether the call's LLM span already tells this failure (else the app records the refusal)."""

    def body(self) -> dict[str, Any]:
        return error_body(self.status_code, self.message, param=self.param, code=self.code)


class UpstreamError(Exception):
    """The model server failed: it answered with an error (``status_code``) or not at all (None).

    A 4xx is the request's fault and reaches the client as that 4xx (naming ``param``); anything
    else is the server's, and becomes a 502.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        param: str | None = None,
        overflow: ContextOverflow | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.param = param
        self.overflow = overflow
        """What did not fit the context, when the server said so (an in-process engine's
        :class:`~relight.engine.ContextLengthError`); HTTP servers' messages are read by the gateway."""


def error_body(status_code: int, message: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    kind = (
        "invalid_request_error"
        if status_code < 500
        else "upstream_error"
        if status_code in (502, 504)
        else "server_error"
    )
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
