"""The Agents SDK's default trace exporter, switched off while relight records and back on after.

By default the SDK sends every trace to OpenAI's tracing backend; without ``OPENAI_API_KEY`` (the
usual case when the agent's model is relight's gateway) it prints "OPENAI_API_KEY is not set,
skipping trace export" several times per rollout, and with a key it uploads training rollouts
nobody asked to upload. relight records the spans it needs itself, so while it is instrumented the
SDK's default processor (:func:`agents.tracing.processors.default_processor`) is taken out of the
SDK's processor list, saying so once; :func:`restore` puts it back where it was. Processors the
user added stay as they are.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["restore", "switch_off"]

logger = logging.getLogger("relight_openai_agents")

_removed: list[tuple[int, Any]] = []
"""(position, processor) of the default processor while it is out."""
_told = False


def _processors() -> list[Any] | None:
    """The SDK's processors, in order; None where this SDK version keeps them elsewhere."""
    from agents.tracing import get_trace_provider

    multi: Any = getattr(get_trace_provider(), "_multi_processor", None)
    processors: Any = getattr(multi, "_processors", None)
    return list(processors) if isinstance(processors, list | tuple) else None


def switch_off() -> None:
    """Take the SDK's default (OpenAI) exporter out of its processors; safe to call twice."""
    global _told
    from agents.tracing import set_trace_processors
    from agents.tracing.processors import default_processor

    processors = _processors()
    if _removed or processors is None:
        return
    default = default_processor()
    kept = [processor for processor in processors if processor is not default]
    if len(kept) == len(processors):
        return
    _removed.append((processors.index(default), default))
    set_trace_processors(kept)
    if not _told:
        _told = True
        logger.warning(
            "relight: the Agents SDK's default trace export to OpenAI is off while relight records its spans "
            "(relight.uninstrument('openai_agents') turns it back on)"
        )


def restore() -> None:
    """Put the default exporter back where it was; safe to call twice."""
    from agents.tracing import set_trace_processors

    processors = _processors()
    if not _removed or processors is None:
        return
    position, default = _removed.pop()
    processors.insert(min(position, len(processors)), default)
    set_trace_processors(processors)
