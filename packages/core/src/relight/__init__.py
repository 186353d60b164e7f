"""relight: reinforcement learning for the agents you already have.

The core: the data model, the store, the gateway, runners, transitions and plugins. Frameworks,
trainers and engines plug in through the ``relight`` entry-point group (see :mod:`relight.hookspecs`).
"""

from relight.agent import LLM, Agent, rollout
from relight.algorithm import Algorithm, UpstreamTarget
from relight.errors import (
    ConfigError,
    InvalidStateError,
    LeaseLostError,
    NotFoundError,
    PluginError,
    RelightError,
    StoreError,
)
from relight.hookspecs import hookimpl
from relight.plugins import open_store, plugin_manager
from relight.policies import Policy
from relight.records import (
    Attempt,
    AttemptStatus,
    Mode,
    Resources,
    Rollout,
    RolloutRequest,
    RolloutStatus,
    Span,
    SpanKind,
    StoreStats,
    Transition,
)
from relight.resources.reading import resource
from relight.runners.runner import Runner
from relight.store import Store
from relight.tracing.context import AttemptRef, attempt_scope, current_attempt
from relight.tracing.instrumentation import Instrumentor, instrument, uninstrument
from relight.tracing.otel import emit_annotation, emit_reward
from relight.tracing.request_role import role
from relight.training.trainer import Trainer
from relight.transitions.builder import TransitionBuilder

__version__ = "0.1.0"

__all__ = [
    "LLM",
    "Agent",
    "Algorithm",
    "Attempt",
    "AttemptRef",
    "AttemptStatus",
    "ConfigError",
    "Instrumentor",
    "InvalidStateError",
    "LeaseLostError",
    "Mode",
    "NotFoundError",
    "PluginError",
    "Policy",
    "RelightError",
    "Resources",
    "Rollout",
    "RolloutRequest",
    "RolloutStatus",
    "Runner",
    "Span",
    "SpanKind",
    "Store",
    "StoreError",
    "StoreStats",
    "Trainer",
    "Transition",
    "TransitionBuilder",
    "UpstreamTarget",
    "__version__",
    "attempt_scope",
    "current_attempt",
    "emit_annotation",
    "emit_reward",
    "hookimpl",
    "instrument",
    "open_store",
    "plugin_manager",
    "resource",
    "role",
    "rollout",
    "uninstrument",
]
