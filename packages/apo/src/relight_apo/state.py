"""Where a search stands, as JSON: every prompt version it tried, what each scored, what it spent, the round under way.

The trainer keeps the last state a search checkpointed (``search_state.json``, see
:mod:`relight.training.search`) and hands it back when a killed run is started again. A search
checkpoints at the end of the seed's validation and of every round, and inside a round after each
step that cannot simply be done again: the optimiser's reply (another call would answer otherwise,
and cost tokens again) and the publication of the candidate it proposed (its resources version is
what the round's rollouts are pinned to). The rollouts need no checkpoint: their ids are made from
the round, so running a round again finds those already run in the store.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from pydantic import JsonValue

from relight.errors import ConfigError
from relight_apo.optimizer import Usage

__all__ = ["Candidate", "Pending", "SearchState", "digest"]

SCHEMA = 1


def digest(value: object) -> str:
    """A short fingerprint of JSON-able ``value`` (the validation tasks, the seed prompts)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


@dataclass(slots=True)
class Candidate:
    """A prompt version the search tried: its prompts, where it came from, what it scored."""

    version: int
    prompts: dict[str, str]
    parent: int | None = None
    round: int = 0
    edited: str | None = None
    critique: str | None = None
    minibatch: float | None = None
    """Its mean reward on the minibatch of the round that made it (None for the seed)."""
    val: list[float] | None = None
    """Its score on each validation task, in the tasks' order; None when it did not pass the minibatch gate."""

    @property
    def val_mean(self) -> float | None:
        return sum(self.val) / len(self.val) if self.val else None


@dataclass(slots=True)
class Pending:
    """A round under way: the optimiser's reply, once it came, and the version its candidate was published as."""

    round: int
    parent: int
    name: str
    text: str | None = None
    critique: str | None = None
    dropped: str | None = None
    tries: int = 0
    child: int | None = None


@dataclass(slots=True)
class SearchState:
    """Everything a search needs to go on: see the module docstring."""

    fingerprint: dict[str, str]
    """Digests of what the search was started with (seed prompts, validation tasks, seed of the draws)."""
    round: int = 0
    """The last round finished (0: only the seed was measured)."""
    spent: int = 0
    """Rollouts run so far (training and validation): what the budget counts."""
    seed: int | None = None
    best: int | None = None
    candidates: dict[int, Candidate] = field(default_factory=dict[int, Candidate])
    usage: Usage = field(default_factory=Usage)
    counts: Counter[str] = field(default_factory=Counter[str])
    pending: Pending | None = None

    def scores(self) -> dict[int, list[float]]:
        """The validated versions' scores per validation task: what the front and the best are drawn from."""
        return {version: c.val for version, c in self.candidates.items() if c.val is not None}

    def to_json(self) -> dict[str, JsonValue]:
        return cast(
            dict[str, JsonValue],
            {
                "schema": SCHEMA,
                "fingerprint": self.fingerprint,
                "round": self.round,
                "spent": self.spent,
                "seed": self.seed,
                "best": self.best,
                "candidates": [asdict(c) for c in self.candidates.values()],
                "usage": self.usage.as_dict(),
                "counts": dict(self.counts),
                "pending": asdict(self.pending) if self.pending is not None else None,
            },
        )

    @classmethod
    def from_json(cls, saved: Mapping[str, JsonValue], fingerprint: Mapping[str, str]) -> SearchState:
        """The state a killed run saved; ConfigError when it was started with other prompts, tasks or seed."""
        data = cast(dict[str, Any], saved)
        if data.get("schema") != SCHEMA:
            raise ConfigError(
                f"the saved search state has schema {data.get('schema')!r}; this relight-apo reads {SCHEMA}"
            )
        differences = [
            key
            for key in sorted(set(fingerprint) | set(data["fingerprint"]))
            if data["fingerprint"].get(key) != fingerprint.get(key)
        ]
        if differences:
            raise ConfigError(
                "cannot resume the search: it was started with other "
                + ", ".join(differences)
                + "; run it with what it started with, or give another run_dir to start a new search"
            )
        pending = cast(dict[str, Any] | None, data.get("pending"))
        counts = cast(dict[str, int], data.get("counts") or {})
        return cls(
            fingerprint=dict(fingerprint),
            round=int(data["round"]),
            spent=int(data["spent"]),
            seed=data.get("seed"),
            best=data.get("best"),
            candidates={int(c["version"]): Candidate(**c) for c in cast(Sequence[dict[str, Any]], data["candidates"])},
            usage=Usage.of(data.get("usage") or {}),
            counts=Counter({str(key): int(value) for key, value in counts.items()}),
            pending=Pending(**pending) if pending is not None else None,
        )
