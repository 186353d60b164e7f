"""The dashboard's compare page: run folders read again whenever their files change.

``relight dashboard --runs DIR...`` names run folders, or folders of them (``runs/``, where a run started
later appears by itself). The page shows :func:`relight.run_folders.compare_runs` of them; a folder that cannot be
read (another relight's layout, a run.json cut short) is listed with the reason instead of stopping the
page. :meth:`ComparedRuns.refresh` looks at the files' sizes and times only, so following a live run costs a
few ``stat`` calls a second; :attr:`ComparedRuns.version` moves when anything changed, as the store
catalog's does, and the page follows it the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from pydantic import JsonValue

from relight.errors import RunFolderError
from relight.run_folders.compare import compare_runs
from relight.run_folders.snapshot import METRICS_FILE, RUN_FILE, SUMMARY_FILE, RunSnapshot, find_runs, read_run

__all__ = ["ComparedRuns"]

Stamp = tuple[tuple[str, int, int], ...]


class ComparedRuns:
    """The run folders under ``paths`` (each a run folder or a folder of them), compared on request."""

    def __init__(self, paths: Sequence[str | Path]) -> None:
        self.paths = [Path(path) for path in paths]
        find_runs(self.paths)  # a path that holds no run folder is refused now, not on the first page
        self.version = 0
        """Bumped whenever a run folder appears or one's files change."""
        self._stamp: Stamp = ()
        self._moved = asyncio.Event()

    def comparison(self) -> dict[str, JsonValue]:
        """:meth:`relight.run_folders.RunComparison.to_json` of the folders as they are now, and those that
        cannot be read."""
        readable: list[RunSnapshot] = []
        unreadable: list[JsonValue] = []
        for path in find_runs(self.paths):
            try:
                readable.append(read_run(path))
            except RunFolderError as error:
                unreadable.append({"path": str(path), "error": str(error)})
        shown: dict[str, JsonValue] = (
            compare_runs(readable).to_json() if readable else {"runs": [], "differing": {}, "shared": {}}
        )
        return {**shown, "unreadable": unreadable, "version": self.version}

    def refresh(self) -> bool:
        """Look for new run folders and changed files; returns whether anything moved (and bumps :attr:`version`)."""
        stamp = self._read_stamp()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        self.version += 1
        self._moved.set()
        self._moved = asyncio.Event()
        return True

    async def wait_change(self, seen: int, *, timeout: float, stop: asyncio.Event) -> bool:
        """Sleep until :attr:`version` moves past ``seen``, ``stop`` is set or ``timeout`` passes; True if it moved."""
        if self.version == seen:
            waits = [asyncio.ensure_future(self._moved.wait()), asyncio.ensure_future(stop.wait())]
            try:
                await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
        return self.version != seen

    def _read_stamp(self) -> Stamp:
        try:
            folders = find_runs(self.paths)
        except RunFolderError:  # a folder removed while shown: the page says so on its next read
            return ()
        stamp: list[tuple[str, int, int]] = []
        for folder in folders:
            for name in (RUN_FILE, METRICS_FILE, SUMMARY_FILE):
                try:
                    facts = (folder / name).stat()
                except OSError:
                    continue
                stamp.append((str(folder / name), facts.st_mtime_ns, facts.st_size))
        return tuple(stamp)
