"""Credit assignment: how an episode's rewards are shared among the LLM calls that earned them.

A credit assigner is a function from an :class:`Episode` (its calls in order, the rewards and tool
results recorded during it) to one reward per call. Assigners are made by factories registered
by name through the ``relight_register_credit_assigners`` hook, the built-ins below included::

    assign = relight.plugins.registry("credit_assigners").make("discounted", gamma=0.9)
    rewards = assign(episode)

(:class:`relight.TransitionBuilder` does this with its ``credit`` and ``credit_options``.)

Built-ins (``R`` is the episode's return: the sum of its rewards):

* ``identical``: every call gets ``R`` (LightningRL's default).
* ``discounted``: call ``i`` of ``n`` gets ``R * gamma ** (n - 1 - i)``: later calls, nearer the
  outcome, get more.
* ``per_step``: a reward goes to the call it follows (the last call that ended before it was
  emitted; the first call if none had); with ``gamma``, each call gets its discounted reward-to-go.
* ``air``: automatic intermediate rewards: a base assigner's credit plus, for each tool the call
  led to, ``success`` or ``failure`` according to the tool span's ``relight.tool.success``.

A role may have rewards of its own (``relight.emit_reward(value, role="check_query")``: an
:class:`Event` whose ``role`` is set). Every built-in then credits the calls of such a role as an
episode of their own: those calls alone, with the rewards naming their role; the other calls share
the rewards naming no role, so the episode's outcome never reaches a role that has its own reward.
:func:`by_reward_role` gives an assigner of a plugin the same rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from relight.errors import ConfigError
from relight.hookspecs import hookimpl

__all__ = [
    "Call",
    "CreditAssigner",
    "Episode",
    "Event",
    "air_credit",
    "by_reward_role",
    "discounted_credit",
    "identical_credit",
    "per_step_credit",
]


@dataclass(frozen=True, slots=True)
class Call:
    """One LLM call of the episode, in the order the calls were made."""

    role: str | None
    start_time: int
    """Nanoseconds since the epoch."""
    end_time: int


@dataclass(frozen=True, slots=True)
class Event:
    """Something recorded during the episode at ``time`` (ns): a reward, or a tool's outcome."""

    time: int
    value: float
    name: str = ""
    role: str | None = None


@dataclass(frozen=True, slots=True)
class Episode:
    """What credit assignment sees of one finished attempt."""

    calls: Sequence[Call]
    rewards: Sequence[Event]
    """Rewards emitted (or returned) during the attempt; those with a ``role`` are that role's own."""
    tools: Sequence[Event]
    """Tool runs; ``value`` is 1.0 for a success, 0.0 for a failure."""

    @property
    def total_reward(self) -> float:
        return sum(event.value for event in self.rewards)


CreditAssigner = Callable[[Episode], list[float]]
"""One reward per call of the episode, in order."""


def by_reward_role(assign: CreditAssigner) -> CreditAssigner:
    """``assign`` applied apart to the calls of each role that has rewards of its own, and to the rest.

    The calls of a role some reward names form an episode of their own with those rewards; every
    other call shares the rewards naming no role. Without rewards naming a role it is ``assign``.
    """

    def split(episode: Episode) -> list[float]:
        aimed = {event.role for event in episode.rewards if event.role is not None}
        if not aimed:
            return assign(episode)
        members: dict[str | None, list[int]] = {}
        for index, call in enumerate(episode.calls):
            members.setdefault(call.role if call.role in aimed else None, []).append(index)
        credit = [0.0] * len(episode.calls)
        for role, indices in members.items():
            part = Episode(
                [episode.calls[index] for index in indices],
                [event for event in episode.rewards if event.role == role],
                episode.tools,
            )
            for index, value in zip(indices, assign(part), strict=True):
                credit[index] = value
        return credit

    return split


def identical_credit() -> CreditAssigner:
    """Every call gets the episode's return."""

    def assign(episode: Episode) -> list[float]:
        return [episode.total_reward] * len(episode.calls)

    return by_reward_role(assign)


def discounted_credit(gamma: float = 0.9) -> CreditAssigner:
    """Call ``i`` of ``n`` gets ``R * gamma ** (n - 1 - i)``."""
    _check_gamma(gamma)

    def assign(episode: Episode) -> list[float]:
        last = len(episode.calls) - 1
        return [episode.total_reward * gamma ** (last - index) for index in range(len(episode.calls))]

    return by_reward_role(assign)


def per_step_credit(gamma: float | None = None) -> CreditAssigner:
    """Each reward goes to the call it follows; with ``gamma``, each call gets its discounted reward-to-go."""
    if gamma is not None:
        _check_gamma(gamma)

    def assign(episode: Episode) -> list[float]:
        immediate = _attribute(episode.calls, episode.rewards)
        if gamma is None:
            return immediate
        to_go, running = [0.0] * len(immediate), 0.0
        for index in reversed(range(len(immediate))):
            running = immediate[index] + gamma * running
            to_go[index] = running
        return to_go

    return by_reward_role(assign)


def air_credit(base: CreditAssigner | None = None, success: float = 0.1, failure: float = -0.1) -> CreditAssigner:
    """``base``'s credit (``identical`` by default) plus ``success``/``failure`` for each tool run a call led to.

    A tool's outcome goes to the call that led to it whatever its role; rewards naming a role are
    ``base``'s to credit (every built-in base follows :func:`by_reward_role`).
    """
    assign_base = base or identical_credit()

    def assign(episode: Episode) -> list[float]:
        outcomes = [Event(tool.time, success if tool.value else failure, tool.name) for tool in episode.tools]
        return [b + t for b, t in zip(assign_base(episode), _attribute(episode.calls, outcomes), strict=True)]

    return assign


def _attribute(calls: Sequence[Call], events: Sequence[Event]) -> list[float]:
    """Sum each event into the last call that ended before it (the first call when none had)."""
    credit = [0.0] * len(calls)
    if not calls:
        return credit
    for event in events:
        owner = 0
        for index, call in enumerate(calls):
            if call.end_time <= event.time:
                owner = index
        credit[owner] += event.value
    return credit


def _check_gamma(gamma: float) -> None:
    if not 0.0 <= gamma <= 1.0:
        raise ConfigError(f"gamma must be between 0 and 1, got {gamma!r}")


@hookimpl
def relight_register_credit_assigners(
    register: Callable[[str, Callable[..., CreditAssigner]], None], lookup: Callable[..., CreditAssigner]
) -> None:
    def air(base: str = "identical", success: float = 0.1, failure: float = -0.1, **options: float) -> CreditAssigner:
        """``air`` by name: its base named too, made with the remaining ``options``."""
        return air_credit(lookup(base, **options), success, failure)

    register("identical", identical_credit)
    register("discounted", discounted_credit)
    register("per_step", per_step_credit)
    register("air", air)
