"""A trainer's settings, validated once: what :class:`relight.Trainer` is given and both loops read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from pydantic import JsonValue

from relight.errors import ConfigError
from relight.gateway import Retokenizer
from relight.rewards.group import GroupReward
from relight.runners.remote import RemoteRunners
from relight.store import DEFAULT_LEASE_SECONDS, Store
from relight.tracking import ExperimentLogger
from relight.transitions.builder import TransitionBuilder

__all__ = ["GatewayOptions", "TrainerOptions"]

_RUN_ITEMS = frozenset({"model", "policy_version", "policy_versions", "relight.transitions", "relight.policy_metrics"})
"""Resources items a run publishes itself (the model's name, policy versions, how calls become transitions)."""


class GatewayOptions(TypedDict, total=False):
    """How the trainer's gateway is set up (see :class:`relight.gateway.Gateway`)."""

    host: str
    port: int
    retokenizer: Retokenizer
    max_body_bytes: int
    default_max_tokens: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainerOptions:
    """Every setting of a :class:`relight.Trainer` but its algorithm; the arguments are documented there.

    One object for both training loops: the synchronous loop ignores what only staleness needs, and
    the asynchronous one what only dynamic sampling needs.
    """

    store: Store | str | None = None
    n_runners: int = 1
    runner_process: bool = False
    runners: RemoteRunners | None = None
    concurrency: int = 16
    batch_size: int = 8
    n_samples: int = 4
    epochs: int = 1
    val_every: int | None = None
    val_before_fit: bool | None = None
    transitions: TransitionBuilder = field(default_factory=TransitionBuilder)
    max_attempts: int = 3
    timeout: float | None = None
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    heartbeat_seconds: float | None = None
    max_runner_restarts: int = 3
    checkpoint_dir: Path | None = None
    max_staleness: int | None = None
    group_timeout: float | None = None
    resample_stale: bool = False
    gateway: GatewayOptions = field(default_factory=lambda: GatewayOptions())
    run_dir: Path | None = None
    progress_every: float = 30.0
    dynamic_sampling: int = 0
    loggers: tuple[ExperimentLogger | str, ...] | None = None
    """None: the trackers ``RELIGHT_LOGGERS`` names (see :mod:`relight.tracking`); ``()``: none."""
    group_rewards: tuple[GroupReward, ...] = ()
    resources: Mapping[str, JsonValue] = field(default_factory=dict[str, JsonValue])

    def __post_init__(self) -> None:
        for name, value in (
            ("n_runners", self.n_runners),
            ("batch_size", self.batch_size),
            ("n_samples", self.n_samples),
        ):
            if value < 1:
                raise ConfigError(f"{name} must be at least 1, got {value}")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ConfigError(f"max_staleness must be 0 or more, got {self.max_staleness}")
        for name in self.resources:
            if not name or name in _RUN_ITEMS:
                raise ConfigError(
                    f"resources cannot be named {name!r}: "
                    + ("give each a name" if not name else "the run publishes that item itself")
                )
        if self.group_timeout is not None and not self.group_timeout > 0:
            raise ConfigError(f"group_timeout must be a positive number of seconds or None, got {self.group_timeout}")
