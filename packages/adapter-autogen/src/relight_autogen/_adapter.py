"""The AutoGen adapter: relight's taps on AutoGen's event loggers, attached and detached."""

from __future__ import annotations

from typing import TYPE_CHECKING

from relight.tracing.instrumentation import Instrumentor

if TYPE_CHECKING:
    from relight_autogen._recorder import Recorder

__all__ = ["AutoGenAdapter"]


class AutoGenAdapter(Instrumentor):
    """Records the agent behind every model client call and tool run of AutoGen AgentChat."""

    framework = "autogen"
    _recorder: Recorder | None = None

    def _instrument(self) -> None:
        from relight_autogen._recorder import Recorder

        self._recorder = Recorder()
        self._recorder.attach()

    def _uninstrument(self) -> None:
        if self._recorder is not None:
            self._recorder.detach()
            self._recorder = None
