"""A trainer's settings, declared and checked once: :class:`relight.Trainer`'s keyword arguments are these fields.

``Trainer(algorithm, batch_size=8, ...)`` takes exactly the fields of :class:`TrainerOptions` (a
:class:`relight.Trainer` *is* its options, plus the algorithm), so a setting is named, typed, given its
default and documented here alone, and checked when the trainer is made rather than at the first step.
Both training loops, dev mode and the services a run starts read them from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import TypedDict

from pydantic import JsonValue
from rich.console import Console

from relight.errors import ConfigError
from relight.gateway import Retokenizer
from relight.rewards.group import GroupReward, GroupRewards
from relight.runners.remote import RemoteRunners
from relight.store import DEFAULT_LEASE_SECONDS, Store
from relight.tracking import ExperimentLogger
from relight.transitions.builder import PolicyMap, TransitionBuilder

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


@dataclass(frozen=True, eq=False)
class TrainerOptions:
    """Every setting of a :class:`relight.Trainer` but its algorithm: the trainer's keyword arguments.

    One object for both training loops: the synchronous loop ignores what only staleness needs, and
    the asynchronous one what only dynamic sampling needs.
    """

    _: KW_ONLY
    store: Store | str | None = None
    """A store, or a URL for :func:`relight.open_store` (``sqlite:////abs/path.db``: four slashes for an
    absolute path). By default ``fit`` keeps one in its run folder (``store.db``) and ``dev`` one in a
    ``runs/dev-<date>-<time>/`` folder."""
    n_runners: int = 1
    """Runner processes; 1 runs the agent in this process unless ``runner_process``. With processes, a
    store that lives in this process is served to them over HTTP on loopback."""
    runner_process: bool = False
    """Run the one runner of ``n_runners=1`` in a process of its own, as more runners always are (and as
    Agent Lightning runs its one runner by default): the agent and its client then use another core than
    the gateway, the store and the algorithm, and the agent must be importable there (see
    :class:`relight.runners.processes.RunnerProcesses`). In this process by default: nothing to pickle,
    one process to debug."""
    runners: RemoteRunners | None = None
    """Runners beyond this machine instead, e.g. ``RayRunners(8)`` (:mod:`relight.runners.ray_actors`);
    give them a store they can reach (``http://`` of ``relight store serve``) and a gateway host they can
    reach (``gateway={"host": "0.0.0.0"}``)."""
    concurrency: int = 16
    """Rollouts running at once in each runner."""
    batch_size: int = 8
    """Tasks per training step."""
    n_samples: int = 4
    """Rollouts per task in a step (one group)."""
    epochs: int = 1
    """Passes over the training tasks."""
    val_every: int | None = None
    """Validate every this many steps (and after training); None: only after."""
    val_before_fit: bool | None = None
    """Validate once more before the first update (step 0), so the run reports a before-figure it measured
    (``initial_val_reward_mean``); Agent Lightning's ``val_before_train``. None (the default) does whenever
    validation tasks are given; False never does, and the run then reports no before-figure."""
    transitions: TransitionBuilder = field(default_factory=TransitionBuilder)
    """How rollouts become transitions (role filter, credit, groups)."""
    policies: PolicyMap | None = None
    """Several policies in one run, one per role (see :mod:`relight.policies`): each name maps to a
    :class:`relight.Policy` or to its roles as a role filter takes them
    (``{"writer": "write_query|rewrite_query", "checker": "check_query"}``). The gateway serves each call
    by its role's policy, and each transition names the policy that trains it; a role no policy names is
    served by the base model and not trained. The algorithm learns them through its
    ``set_policies(policies)`` before it serves; one without that method cannot train several policies
    (TypeError). Once the trainer is made this holds the run's policies by name, whether given here or
    to ``transitions``; None for a run of one policy."""
    max_attempts: int = 3
    """Tries per rollout before it fails."""
    timeout: float | None = None
    """Seconds one attempt may run; None for no limit (dev mode's own limit when None: ``DEV_TIMEOUT``)."""
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    """How long an attempt stays a runner's without a heartbeat; a runner that dies holds its rollouts this
    long at most (a runner process that dies fails them at once on noticing)."""
    heartbeat_seconds: float | None = None
    """How often runners renew leases; a third of ``lease_seconds`` by default."""
    max_runner_restarts: int = 3
    """Runner processes that die are restarted this many times in all; ``fit()`` fails once none is left."""
    checkpoint_dir: str | Path | None = None
    """Where ``algorithm.save`` writes after each step (``step-<n>``, every one kept); by default the run
    folder's ``checkpoints/``, which keeps the last two. Each is written under a temporary name and
    renamed once whole."""
    max_staleness: int | None = None
    """None trains synchronously; ``k`` trains asynchronously, never on a transition more than ``k`` policy
    versions behind (see :mod:`relight.training.async_loop`; 0 behaves as synchronous)."""
    group_timeout: float | None = None
    """In asynchronous training, seconds after which an unfinished group is cancelled."""
    resample_stale: bool = False
    """In asynchronous training, sample a group dropped as too stale again (else it is only counted)."""
    gateway: GatewayOptions = field(default_factory=GatewayOptions)
    """How the gateway listens and retokenizes."""
    console: Console = field(default_factory=Console)
    """Where tables and progress go."""
    run_dir: str | Path | None = None
    """The run folder of ``fit`` (see :mod:`relight.training.run_folder`); ``runs/<date>-<time>`` by
    default. A folder holding a run that did not finish is resumed (:mod:`relight.training.resume`): run
    the same command again to take up a killed run."""
    progress_every: float = 30.0
    """Seconds between progress lines when the console is not a terminal."""
    dynamic_sampling: int = 0
    """At most this many extra rounds per step that sample again the tasks whose group has no learning
    signal (all rewards equal), as DAPO does; 0 never does (see :mod:`relight.training.dynamic_sampling`)."""
    loggers: Sequence[ExperimentLogger | str] | None = None
    """Experiment trackers that get every metric ``fit`` writes, with the run's configuration: objects
    (:class:`relight.tracking.WandbLogger`, ``MlflowLogger``, ``TensorBoardLogger``) or names a plugin
    registered (``"wandb"``, ``"mlflow"``, ``"tensorboard"``); None: those ``RELIGHT_LOGGERS`` names (see
    :mod:`relight.tracking`); ``()``: none."""
    group_rewards: Sequence[GroupReward] = ()
    """Rewards that score each finished training group together before it is trained on, such as a judge
    model (:class:`relight.rewards.Judge`); their rewards add to the agent's own and their costs join each
    step's metrics (see :mod:`relight.rewards.group`)."""
    resources: Mapping[str, JsonValue] | None = None
    """Named resources the agent reads (``llm.resources``, :func:`relight.resource`; see
    :mod:`relight.resources.reading`), such as the prompt a prompt optimisation found, published with every
    version ``fit`` and ``dev`` run with, so each rollout records the one it read."""

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
        resources = dict(self.resources or {})
        for name in resources:
            if not name or name in _RUN_ITEMS:
                raise ConfigError(
                    f"resources cannot be named {name!r}: "
                    + ("give each a name" if not name else "the run publishes that item itself")
                )
        if self.group_timeout is not None and not self.group_timeout > 0:
            raise ConfigError(f"group_timeout must be a positive number of seconds or None, got {self.group_timeout}")
        # Settings given in a looser form are kept in one form from here on (a frozen object, hence setattr).
        transitions = self.transitions if self.policies is None else self.transitions.with_policies(self.policies)
        object.__setattr__(self, "transitions", transitions)
        object.__setattr__(self, "policies", transitions.policies)
        object.__setattr__(self, "checkpoint_dir", _path(self.checkpoint_dir))
        object.__setattr__(self, "run_dir", _path(self.run_dir))
        object.__setattr__(self, "loggers", tuple(self.loggers) if self.loggers is not None else None)
        object.__setattr__(self, "group_rewards", tuple(self.group_rewards))
        object.__setattr__(self, "resources", resources)
        GroupRewards(self.group_rewards)  # distinct names, checked now rather than at the first step


def _path(value: str | Path | None) -> Path | None:
    return Path(value) if value is not None else None
