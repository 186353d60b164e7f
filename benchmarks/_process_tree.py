"""What a process and every process under it use: peak memory (summed PSS and RSS) and CPU time.

A training run is several processes (a vLLM server under the trainer, TRL's one process with its threads), so
its memory and CPU are the tree's. Memory is sampled in a thread every ``every`` seconds as the sum of each
process's proportional set size (PSS: a page several processes map, such as the torch libraries each of them
loads, is divided among them, so it counts once in the sum) and of their resident sizes (RSS, which counts a
shared page once per process that maps it: an upper bound).
"""

from __future__ import annotations

import threading

import psutil

__all__ = ["TreePeak", "tree_cpu_seconds"]


def _tree(root: psutil.Process) -> list[psutil.Process]:
    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_cpu_seconds(pid: int | None = None) -> float:
    """User and system CPU seconds of process ``pid`` (this one by default) and of its descendants alive now."""
    total = 0.0
    for process in _tree(psutil.Process(pid)):
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


class TreePeak:
    """The peak memory of a process and all its descendants, sampled in a thread: summed PSS and summed RSS."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        self.root = psutil.Process(pid)
        self.every = every
        self.peak_pss = 0
        self.peak_rss = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.wait(self.every):
            processes = _tree(self.root)
            if not processes:
                return
            pss = rss = 0
            for process in processes:
                try:
                    memory = process.memory_full_info()
                except psutil.NoSuchProcess:
                    continue
                pss += memory.pss
                rss += memory.rss
            self.peak_pss = max(self.peak_pss, pss)
            self.peak_rss = max(self.peak_rss, rss)

    def stop(self) -> tuple[float, float]:
        """The peaks in GiB: summed PSS, summed RSS."""
        self._done.set()
        self._thread.join()
        return self.peak_pss / 2**30, self.peak_rss / 2**30
