"""Subscribe relight's listener to CrewAI's event bus, and unsubscribe it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from relight.tracing.instrumentation import Instrumentor

if TYPE_CHECKING:
    from relight_crewai._listener import EventListener

__all__ = ["CrewAIAdapter"]


class CrewAIAdapter(Instrumentor):
    """Records CrewAI's LLM calls and tool uses inside rollout attempts."""

    framework = "crewai"
    _listener: EventListener | None = None

    def _instrument(self) -> None:
        try:
            from relight_crewai._listener import EventListener
        except ImportError as error:
            raise ImportError("relight-crewai needs CrewAI: pip install crewai") from error
        self._listener = EventListener(self.framework)
        self._listener.attach()

    def _uninstrument(self) -> None:
        if self._listener is not None:
            self._listener.detach()
            self._listener = None

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until CrewAI's event handlers have run, so every span of a finished run is recorded.

        ``Crew.kickoff`` does this itself before it returns; call it after a bare ``Agent.kickoff``
        or a run that raised. False if ``timeout`` (seconds) ran out first.
        """
        if self._listener is None:
            return True
        from crewai.events import crewai_event_bus

        return crewai_event_bus.flush(timeout)
