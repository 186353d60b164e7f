"""The gateway's counts since it started, for progress lines and for tests."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GatewayStats"]


@dataclass(slots=True)
class GatewayStats:
    """Counts since the gateway started."""

    calls: int = 0
    failed: int = 0
    retokenized: int = 0
    """Calls whose token ids the gateway made from the text (the upstream gave none)."""
    untrainable: int = 0
    """Calls recorded without token ids: no upstream ids and no retokenizer."""
    late: int = 0
    """Calls that ended after their attempt had ended; not recorded (the attempt's record is closed)."""
    refused: int = 0
    """Requests the gateway refused itself (bad input, no attempt key, an attempt not running, a prompt past
    the context); those of a running attempt are recorded as failed LLM spans, and counted in ``failed`` too."""
    capped: int = 0
    """Calls whose output budget was capped at what the context left (``relight.max_tokens_capped``)."""
