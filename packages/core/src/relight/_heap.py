"""While a gateway serves, the objects its process held when it started are out of the collector's way.

A gateway's process is long-lived, and most of what it holds when the gateway starts (imported
modules, the model, the store, the web app) lives as long as the process does. CPython's full
collections walk every object the collector tracks, and each one pauses every thread of the
process, calls in flight included: in ``benchmarks/gateway_overhead.py``'s process (~120,000
objects at start) one full collection came every ~2,100 calls and paused 80 ms on a quiet machine,
480 ms under load; a trainer's process, holding torch and a model, has many more objects. Moved to
the permanent generation with :func:`gc.freeze`, they are skipped by every collection, and a full
collection walks only what was made since (8-12 ms there). Young collections are unchanged: they
never walked the old objects.

Nothing is leaked: reference counting still frees frozen objects, and when the last gateway of the
process stops, :func:`gc.unfreeze` hands them all back to the collector, so garbage that was frozen
(cycles alive at start that died meanwhile) is collected then. ``RELIGHT_GC_FREEZE=0`` leaves the
collector alone (for a process that manages :func:`gc.freeze` itself, as before a ``fork``).
"""

from __future__ import annotations

import gc
import os
import threading

__all__ = ["freeze", "unfreeze"]

_lock = threading.Lock()
_holders = 0


def freeze() -> bool:
    """Freeze every object tracked now; True if it did (pass it to :func:`unfreeze` when done)."""
    global _holders
    if os.environ.get("RELIGHT_GC_FREEZE", "1") == "0":
        return False
    with _lock:
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
