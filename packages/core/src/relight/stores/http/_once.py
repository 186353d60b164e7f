"""Request ids: a retried record, claim, finish or publish is answered with the first try's reply, not done twice.

A client retries when a reply did not reach it, which says nothing about whether the server acted.
Records, claims, finishes and publishes carry a request id (``Idempotency-Key``); the server keeps the reply of
each of the latest ones and gives a retry the same reply. A retry that arrives while the first try is
still running waits for it. Only successful replies are kept: a try that failed is simply done again.
The memory is the server process's, so a retry that reaches a restarted server acts again; the
client treats that case itself where it matters (finishing an attempt already finished, recording
rollouts already recorded).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from fastapi.responses import Response

__all__ = ["RequestMemory"]


class RequestMemory:
    """The replies to the last ``size`` requests that carried an id."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._replies: OrderedDict[str, asyncio.Future[Response]] = OrderedDict()

    async def once(self, request_id: str | None, act: Callable[[], Awaitable[Response]]) -> Response:
        """``act()``'s reply; for a ``request_id`` seen before, the reply its first try gave."""
        if not request_id:
            return await act()
        while (earlier := self._replies.get(request_id)) is not None:
            try:
                return _copy(await asyncio.shield(earlier))
            except Exception:  # the first try failed, and is forgotten: do it here
                if self._replies.get(request_id) is earlier:
                    del self._replies[request_id]
        reply: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._replies[request_id] = reply
        while len(self._replies) > self.size:
            self._replies.popitem(last=False)
        try:
            response = await act()
        except BaseException as error:
            self._forget(request_id, reply)
            reply.set_exception(error if isinstance(error, Exception) else RuntimeError("the request was cancelled"))
            reply.exception()  # retrieved, so asyncio does not log it when nobody waited
            raise
        if response.status_code >= 400:
            self._forget(request_id, reply)
        reply.set_result(response)
        return response

    def _forget(self, request_id: str, reply: asyncio.Future[Response]) -> None:
        if self._replies.get(request_id) is reply:
            del self._replies[request_id]


def _copy(response: Response) -> Response:
    return Response(response.body, status_code=response.status_code, media_type=response.media_type)
