"""Make the C allocator give freed tensors back to the system, so an update's resident peak is its live tensors.

torch allocates CPU tensors with glibc's ``malloc``. glibc serves blocks above its mmap threshold
(128 KiB at first) with their own ``mmap`` and unmaps them when freed, but each time such a block
is freed it raises the threshold to that block's size, up to 32 MiB. After the first large tensor
of an update is freed, every activation, gradient and temporary under 32 MiB comes from the heap,
whose freed space is kept for reuse and, scattered between live blocks, never returned. Measured
on one GRPO update of SmolLM2-135M (``benchmarks/update_memory.py``): 1.2 GB of live tensors at
its peak, 3.6 GB resident, and 2.4 GB freed but kept by the second update (5.1 GB resident).

Setting the threshold once stops it moving (``mallopt(M_MMAP_THRESHOLD)``; ``MALLOC_MMAP_THRESHOLD_``
in the environment does the same): every block from 1 MiB up is mapped and unmapped on its own.
The same update then peaked at 2.3 GB resident, with under 0.05 GB freed and kept. Elsewhere than
glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging

__all__ = ["MMAP_THRESHOLD", "return_freed_tensors"]

MMAP_THRESHOLD = 1 << 20
"""Blocks of at least this many bytes are mapped on their own and given back when freed."""
_M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter number (``malloc.h``)."""

log = logging.getLogger(__name__)


@functools.cache
def return_freed_tensors() -> bool:
    """Fix glibc's mmap threshold at :data:`MMAP_THRESHOLD` for this process; False where there is no glibc.

    Process-wide and done once: the learner calls it when it is made.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    if mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1:
        log.warning("mallopt(M_MMAP_THRESHOLD, %d) failed: freed tensors may stay resident", MMAP_THRESHOLD)
        return False
    return True
