"""While a gateway serves, the objects its process held when it started are out of the collector's way.

A gateway's process is long-lived, and most of what it holds when the gateway starts (imported
modules, the model, the store, the web app) lives as long as the process does. CPython's full
collections walk every object the collector tracks, and each one pauses every thread of the
process, calls in flight included: in ``benchmarks/gateway_overhead.py``'s process (~120,000
objects at start) one full collection came every ~2,100 calls and paused 79-85 ms on a quiet
machine, up to 480 ms under load; in a process that has imported torch and transformers (~370,000
objects) one is 170 ms of CPU. Moved to the permanent generation with :func:`gc.freeze`, they are
skipped by every collection, and a full collection walks only what was made since (8-14 ms in the
benchmark). Young collections are unchanged: they never walked the old objects.

Nothing is leaked: garbage is collected before the process's first freeze (one full collection
when its first gateway starts, after the model has loaded; not at every start, which would cost a
test suite ~0.15 s of CPU per gateway), reference counting still frees frozen objects, and when
the last gateway of the process stops, :func:`gc.unfreeze` hands them all back to the collector,
so cycles that were frozen and died meanwhile are collected then. ``RELIGHT_GC_FREEZE=0`` leaves the
collector alone (for a process that manages :func:`gc.freeze` itself, as before a ``fork``).
"""

from __future__ import annotations

import gc
import os
import threading

__all__ = ["freeze", "unfreeze"]

_lock = threading.Lock()
_holders = 0
_collected = False


def freeze() -> bool:
    """Freeze every object tracked now; True if it did (pass it to :func:`unfreeze` when done)."""
    global _holders, _collected
    if os.environ.get("RELIGHT_GC_FREEZE", "1") == "0":
        return False
    with _lock:
        if not _collected:  # frozen garbage would stay for the gateway's life (a loaded model's leftover cycles)
            gc.collect()
            _collected = True
        _holders += 1
        gc.freeze()
    return True


def unfreeze(frozen: bool) -> None:
    """Undo one :func:`freeze` that returned ``frozen``; the last one hands the objects back to the collector."""
    global _holders
    if not frozen:
        return
    with _lock:
        _holders -= 1
        if not _holders:
            gc.unfreeze()
