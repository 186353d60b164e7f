"""Retrying transient failures: bounded attempts, exponential backoff with full jitter.

Clients of relight's servers (the HTTP store, the runner's claim loop, a PostgreSQL store) meet
the same faults: a connection the server closed while it sat idle, a server restarting, a
network blip. One small policy object says how often and how patiently to try again, so every
caller backs off the same way and a fleet of runners does not hammer a server that is coming
back all in the same instant (the jitter spreads them out).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from relight.errors import ConfigError

__all__ = ["RetryPolicy", "retry_async"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How to retry: up to ``attempts`` tries, waiting a random time in ``[0, min(cap, base * 2**n)]`` before try n+1.

    The defaults ride out a store server restart of several seconds (10 tries: at most ~26 s of waiting,
    ~13 s on average).
    ``RetryPolicy(attempts=1)`` never retries.
    """

    attempts: int = 10
    base_seconds: float = 0.1
    cap_seconds: float = 5.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigError(f"RetryPolicy.attempts must be at least 1, got {self.attempts}")
        for name in ("base_seconds", "cap_seconds"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"RetryPolicy.{name} must be a finite number >= 0, got {value!r}")

    def delay(self, retry: int) -> float:
        """The wait before retry number ``retry`` (0 for the first retry): full jitter under the capped exponential."""
        return random.uniform(0.0, min(self.cap_seconds, self.base_seconds * 2.0**retry))


async def retry_async(
    call: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    transient: Callable[[BaseException], bool],
    what: str = "call",
    on_retry: Callable[[BaseException], None] | None = None,
) -> T:
    """Await ``call()``, calling it again after a backoff while it raises an error ``transient`` accepts.

    The last error is raised once ``policy.attempts`` tries have failed; errors that are not
    transient are raised at once.
    """
    retry = 0
    while True:
        try:
            return await call()
        except Exception as error:
            if retry + 1 >= policy.attempts or not transient(error):
                raise
            if on_retry is not None:
                on_retry(error)
            wait = policy.delay(retry)
            logger.debug(
                "relight: %s failed (%r); try %d of %d in %.2f s", what, error, retry + 2, policy.attempts, wait
            )
            retry += 1
            await asyncio.sleep(wait)
