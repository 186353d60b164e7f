"""Tracing: how the spans of a rollout reach the store.

The span processor and emitters (:mod:`.otel`), batched delivery (:mod:`.batcher`), the attempt a
piece of code belongs to (:mod:`.context`), role and tool spans for adapters (:mod:`.roles`), the
guard that keeps relight's hooks from breaking the user's agent (:mod:`.hook_failures`), the path
by which rewards reach the store whatever else fails (:mod:`.rewards`) and the switch for framework
adapters (:mod:`.instrumentation`).
"""

from relight.tracing.otel import (
    StoreSpanProcessor,
    emit_annotation,
    emit_reward,
    install,
    otel_to_span,
    route_attempt,
    tracer,
    uninstall,
)

__all__ = [
    "StoreSpanProcessor",
    "emit_annotation",
    "emit_reward",
    "install",
    "otel_to_span",
    "route_attempt",
    "tracer",
    "uninstall",
]
