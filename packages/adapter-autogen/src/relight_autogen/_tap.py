"""Read a logger's records without changing what the application's logging shows."""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["LogTap"]


class LogTap(logging.Filter):
    """Hands every record of one logger, down to ``level``, to ``on_record``.

    AutoGen reports LLM and tool calls as log records (at INFO and DEBUG), which it only makes when
    its logger is open at that level. A handler there would also make every handler up the tree
    start printing them; as a filter on the logger, the tap sees each record first and then lets on
    only what the logger's own level let through before.
    """

    def __init__(self, logger_name: str, level: int, on_record: Callable[[logging.LogRecord], None]) -> None:
        super().__init__()
        self._logger = logging.getLogger(logger_name)
        self._level = level
        self._on_record = on_record
        self._saved_level = logging.NOTSET

    def attach(self) -> None:
        self._saved_level = self._logger.level
        self._logger.setLevel(min(self._level, self._logger.getEffectiveLevel()))
        self._logger.addFilter(self)

    def detach(self) -> None:
        self._logger.removeFilter(self)
        self._logger.setLevel(self._saved_level)

    def filter(self, record: logging.LogRecord) -> bool:
        self._on_record(record)
        return record.levelno >= self._passing_level()

    def _passing_level(self) -> int:
        if self._saved_level != logging.NOTSET:
            return self._saved_level
        parent = self._logger.parent
        return parent.getEffectiveLevel() if parent is not None else logging.WARNING
