"""The scripted model of a replay: the recorded answers, in order, to the requests the recording made.

Each request the agent sends is matched with the first recorded call not yet answered whose request is the
same (its messages, or prompt, and its tools), so calls an agent makes concurrently are answered as they
were however they interleave now. A request that matches none is the replay's **divergence**: the agent
asked something the recording never answered. It is kept (:attr:`ReplayScript.divergence`, the first one
only) with the recorded request it should have matched, the first one not yet answered, and answered with
an HTTP 409 error so that the agent stops there rather than running on against nothing.
"""

from __future__ import annotations

import difflib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import JsonValue

from relight.replay.recording import RecordedExchange
from relight.scripted.scripts import Reply, ScriptError, ScriptRequest

__all__ = ["DIVERGED_STATUS", "Divergence", "ReplayScript"]

DIVERGED_STATUS = 409
"""What the scripted model answers a request the recording never answered."""


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first request of the replay that the recording does not hold."""

    call: int
    """Which call of the replay it was, from 1."""
    expected: RecordedExchange | None
    """The recorded call it should have been (the first not yet answered); None when every one was answered."""
    request: JsonValue
    """What the agent sent instead: its messages (or prompt)."""
    tools: JsonValue

    def explain(self) -> str:
        """The divergence in words, with a diff of the recorded request against the replayed one."""
        if self.expected is None:
            return (
                f"call {self.call}: the agent made more calls than the recording's {self.call - 1}; it sent\n"
                + _pretty(self.request)
            )
        changed = [
            what
            for what, same in (
                ("messages", _same(self.expected.request, self.request)),
                ("tools", _same(self.expected.tools, self.tools)),
            )
            if not same
        ]
        lines = [f"call {self.call}: the agent's request differs from the recording's call {self.expected.index + 1}"]
        lines.append(f"(its {' and '.join(changed)})")
        for what, recorded, replayed in (
            ("messages", self.expected.request, self.request),
            ("tools", self.expected.tools, self.tools),
        ):
            if what in changed:
                lines += difflib.unified_diff(
                    _pretty(recorded).splitlines(),
                    _pretty(replayed).splitlines(),
                    fromfile=f"recorded call {self.expected.index + 1} ({what})",
                    tofile=f"replayed call {self.call} ({what})",
                    lineterm="",
                )
        return "\n".join(lines)


class ReplayScript:
    """Answers the replay's requests with the recorded replies (see the module docstring)."""

    def __init__(self, exchanges: Sequence[RecordedExchange]) -> None:
        self.exchanges = tuple(exchanges)
        self.answered: list[int] = []
        """The recorded calls answered so far, in the order they were asked for."""
        self.divergence: Divergence | None = None
        self._lock = threading.Lock()
        self._calls = 0

    @property
    def unanswered(self) -> list[RecordedExchange]:
        return [exchange for exchange in self.exchanges if exchange.index not in self.answered]

    def __call__(self, request: ScriptRequest) -> Reply | str:
        asked = request.body.get("messages") if request.endpoint == "chat" else request.body.get("prompt")
        tools = request.body.get("tools")
        with self._lock:
            self._calls += 1
            if self.divergence is not None:  # the agent goes on after its first divergence: answer nothing more
                raise ScriptError(DIVERGED_STATUS, "the replay has diverged already: " + self.divergence.explain())
            waiting = self.unanswered
            match = next((e for e in waiting if _same(e.request, asked) and _same(e.tools, tools)), None)
            if match is None:
                self.divergence = Divergence(self._calls, waiting[0] if waiting else None, asked, tools)
                raise ScriptError(
                    DIVERGED_STATUS, "the replay diverged from the recording: " + self.divergence.explain()
                )
            self.answered.append(match.index)
        if match.failed:
            raise ScriptError(match.status or 500, match.error or "the recorded call failed")
        return match.reply


def _same(recorded: object, replayed: object) -> bool:
    """Equal as JSON (an absent list of tools and an empty one alike)."""
    return _canonical(recorded) == _canonical(replayed)


def _canonical(value: object) -> str:
    return json.dumps(value or None, sort_keys=True, ensure_ascii=False)


def _pretty(value: object) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
