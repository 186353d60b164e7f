"""Transitions as JSON lines: one :class:`relight.Transition` a line, for SFT, offline RL or another trainer."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import IO

from relight.records import Transition

__all__ = ["read_jsonl", "write_jsonl"]


def write_jsonl(transitions: Iterable[Transition], destination: str | Path | IO[str]) -> int:
    """Write one transition per line (for SFT or offline RL); returns how many were written."""
    if isinstance(destination, str | Path):
        with Path(destination).open("w", encoding="utf-8") as file:
            return write_jsonl(transitions, file)
    count = 0
    for transition in transitions:
        destination.write(transition.model_dump_json() + "\n")
        count += 1
    return count


def read_jsonl(source: str | Path) -> list[Transition]:
    """Transitions written by :func:`write_jsonl`, validated."""
    with Path(source).open(encoding="utf-8") as file:
        return [Transition.model_validate_json(line) for line in file if line.strip()]
