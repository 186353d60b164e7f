"""The agent API: the one thing a user writes, ``(task, llm) -> reward``.

Decorate a function (sync or async)::

    @relight.rollout
    def agent(task, llm):
        client = openai.OpenAI(base_url=llm.base_url, api_key=llm.api_key)
        answer = client.chat.completions.create(model=llm.model, messages=[...])
        return 1.0 if task["answer"] in answer.choices[0].message.content else 0.0

or subclass :class:`Agent` and implement :meth:`Agent.rollout`. The ``llm`` handle points the
agent's model client (or framework) at the gateway for this one attempt, and carries the resources
published for it (``llm.resources``, see :mod:`relight.resources.reading`). Returning a float
records it as the episode's reward; returning None means the agent emitted its rewards itself
with :func:`relight.emit_reward`.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, cast, overload

from pydantic import JsonValue

from relight.errors import ConfigError

__all__ = ["LLM", "Agent", "FunctionAgent", "load_agent", "rollout"]

RolloutResult = float | None
"""What a rollout returns: the episode reward, or None when rewards were emitted."""


@dataclass(frozen=True, slots=True)
class LLM:
    """Where an agent sends its model calls during one attempt: give these to any OpenAI client."""

    base_url: str
    """``http://127.0.0.1:<port>/rollouts/<rollout_id>/attempts/<attempt_id>/v1``."""
    api_key: str
    """Names the attempt too, for clients that can only be given ``<gateway>/v1``."""
    model: str
    resources: Mapping[str, JsonValue] = field(default_factory=lambda: _NO_RESOURCES)
    """The resources version the attempt runs with (prompt templates by name): ``llm.resources.get("system_prompt",
    SYSTEM_PROMPT)``. Empty when the rollout was pinned to no version; each name read is recorded."""


_NO_RESOURCES: Mapping[str, JsonValue] = MappingProxyType({})


class Agent:
    """An agent relight can run: implement :meth:`rollout`, as a plain or an ``async`` method."""

    @property
    def name(self) -> str:
        return type(self).__name__

    def rollout(self, task: Any, llm: LLM) -> RolloutResult | Awaitable[RolloutResult]:
        """Do the task with the model behind ``llm``; return the reward or None."""
        raise NotImplementedError(f"{type(self).__name__} must implement rollout(task, llm)")

    @property
    def is_async(self) -> bool:
        """Whether :meth:`rollout` is a coroutine function (run as a task; otherwise on a thread)."""
        return inspect.iscoroutinefunction(self.rollout)


class FunctionAgent(Agent):
    """A function made into an :class:`Agent` by :func:`rollout`; still callable as before."""

    def __init__(self, function: Callable[[Any, LLM], Any], *, name: str | None = None) -> None:
        self.function = function
        self._name = name or function.__name__
        functools.update_wrapper(self, function)

    @property
    def name(self) -> str:
        return self._name

    def rollout(self, task: Any, llm: LLM) -> RolloutResult | Awaitable[RolloutResult]:
        return self.function(task, llm)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.function)

    def __call__(self, task: JsonValue, llm: LLM) -> Any:
        return self.function(task, llm)

    def __reduce__(self) -> tuple[Callable[[str, str], Any], tuple[str, str]]:
        """Pickle by reference (module and name), so runner processes import the same agent."""
        return _import_object, (self.function.__module__, self.function.__qualname__)


def _import_object(module: str, qualname: str) -> Any:
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


@overload
def rollout(function: Callable[[Any, LLM], Any], /) -> FunctionAgent: ...
@overload
def rollout(*, name: str | None = None) -> Callable[[Callable[[Any, LLM], Any]], FunctionAgent]: ...
def rollout(
    function: Callable[[Any, LLM], Any] | None = None, /, *, name: str | None = None
) -> FunctionAgent | Callable[[Callable[[Any, LLM], Any]], FunctionAgent]:
    """Make ``function(task, llm) -> float | None`` (sync or async) an agent relight can run."""
    if function is not None:
        return FunctionAgent(function, name=name)
    return functools.partial(FunctionAgent, name=name)


def load_agent(path: str) -> Agent:
    """The agent at ``"package.module:name"``: an :class:`Agent`, an Agent class (made with no arguments) or a function.

    This is how an agent travels to runners on other hosts (``relight runner``, Ray actors): by the
    import path of code installed there, never as pickled code.
    """
    module, colon, qualname = path.partition(":")
    if not colon or not module or not qualname:
        raise ConfigError(f"agent {path!r} must be an import path like my_package.agents:sql_agent")
    try:
        found: object = _import_object(module, qualname)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"cannot import agent {path!r}: {error}") from error
    if isinstance(found, Agent):
        return found
    if isinstance(found, type):
        if issubclass(found, Agent):
            return found()
    elif callable(found):
        return FunctionAgent(cast(Callable[[Any, LLM], Any], found))
    kind = type(cast(Any, found)).__name__
    raise ConfigError(f"agent {path!r} is a {kind}, not an Agent, Agent class or function")
