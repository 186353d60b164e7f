"""Failures inside relight's own instrumentation: counted, logged once, never raised into the user's code.

Recording is a side job: a bug in a hook, a tracer that fails or a full span buffer must cost a span,
not the user's rollout or the gateway's answer. Every hook relight installs (OpenTelemetry span
processors, framework callbacks, reward and annotation emitters) reports its failures here. The first
failure at each place is logged with its traceback; later ones only counted, so a hook that fails on
every call does not flood the log. :func:`hook_failures` tells how many there were, per place.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

__all__ = ["hook_failed", "hook_failures"]

logger = logging.getLogger("relight")

_lock = threading.Lock()
_failures: Counter[str] = Counter()


def hook_failed(where: str) -> None:
    """Count a failure at ``where``; call it in the ``except`` block (the first one logs the traceback)."""
    with _lock:
        _failures[where] += 1
        first = _failures[where] == 1
    if first:
        logger.exception(
            "relight: %s failed; the application goes on unaffected (later failures here are only counted: "
            "relight.tracing.hook_failures.hook_failures())",
            where,
        )


def hook_failures() -> dict[str, int]:
    """How many times each place in relight's instrumentation has failed in this process."""
    with _lock:
        return dict(_failures)
