"""Random ids for spans and traces, made fast and never repeated across a fork or a resumed run."""

from __future__ import annotations

import os
import random

__all__ = ["random_hex"]

_IDS = random.Random()
"""Seeded from the OS once, and again in a forked child. Not the module's generator: a checkpoint
restores that one (a resumed run replays its draws), which would hand out the interrupted run's ids again."""
os.register_at_fork(after_in_child=_IDS.seed)


def random_hex(digits: int) -> str:
    """A random id of ``digits`` hex digits. Not ``secrets``: an OS call per id stalls behind the GIL
    when agent threads are busy, and ids need to be unique, not unguessable (OpenTelemetry's choice too)."""
    return f"{_IDS.getrandbits(digits * 4):0{digits}x}"
