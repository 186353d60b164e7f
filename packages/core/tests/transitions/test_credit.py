"""Credit assignment, each strategy against rewards worked out by hand."""

from collections.abc import Callable
from typing import Any

import pytest

from relight.errors import ConfigError, NotFoundError
from relight.hookspecs import hookimpl
from relight.plugins import plugin_manager, reset_plugins
from relight.transitions.builder import credit_assigner
from relight.transitions.credit import Call, CreditAssigner, Episode, Event

# Three calls; a reward of 0.5 after the first and of 1.0 after the last: the return R is 1.5.
CALLS = [Call("a", 0, 10), Call("b", 20, 30), Call("a", 40, 50)]
REWARDS = [Event(15, 0.5), Event(55, 1.0)]
# A tool succeeds after the first call; after the second, one fails and one succeeds.
TOOLS = [Event(12, 1.0, "search"), Event(35, 0.0, "fetch"), Event(36, 1.0, "search")]
EPISODE = Episode(CALLS, REWARDS, TOOLS)


@pytest.mark.parametrize(
    ("name", "options", "expected"),
    [
        ("identical", {}, [1.5, 1.5, 1.5]),
        # R * gamma ** (n - 1 - i) with gamma 0.5: 1.5/4, 1.5/2, 1.5
        ("discounted", {"gamma": 0.5}, [0.375, 0.75, 1.5]),
        ("discounted", {"gamma": 1.0}, [1.5, 1.5, 1.5]),
        # each reward to the call it follows
        ("per_step", {}, [0.5, 0.0, 1.0]),
        # rewards-to-go with gamma 0.5: c2 = 1.0; c1 = 0 + 0.5 * 1.0; c0 = 0.5 + 0.5 * 0.5
        ("per_step", {"gamma": 0.5}, [0.75, 0.5, 1.0]),
        # identical plus +0.1 per tool success, -0.2 per failure: c0 +0.1, c1 -0.2 + 0.1, c2 nothing
        ("air", {"success": 0.1, "failure": -0.2}, [1.6, 1.4, 1.5]),
        ("air", {"base": "discounted", "gamma": 0.5, "success": 0.1, "failure": -0.2}, [0.475, 0.65, 1.5]),
    ],
)
def test_builtin_strategies(name: str, options: dict[str, Any], expected: list[float]) -> None:
    assert credit_assigner(name, **options)(EPISODE) == pytest.approx(expected)


def test_a_reward_before_any_call_ended_goes_to_the_first_call() -> None:
    episode = Episode(CALLS, [Event(5, 2.0), Event(45, 1.0)], [])
    assert credit_assigner("per_step")(episode) == [2.0, 1.0, 0.0]


def test_an_episode_without_calls_gets_no_credit() -> None:
    for name in ("identical", "discounted", "per_step", "air"):
        assert credit_assigner(name)(Episode([], REWARDS, TOOLS)) == []


def test_bad_names_and_options_are_refused_clearly() -> None:
    with pytest.raises(NotFoundError, match="known: air, discounted, identical, per_step"):
        credit_assigner("nope")
    with pytest.raises(ConfigError, match="gamma must be between 0 and 1"):
        credit_assigner("discounted", gamma=1.5)
    with pytest.raises(ConfigError, match="does not take the options"):
        credit_assigner("identical", gamma=0.5)


class LastCallOnly:
    """A third-party strategy: the whole return to the last call."""

    @hookimpl
    def relight_register_credit_assigners(self, register: Callable[[str, Callable[..., CreditAssigner]], None]) -> None:
        def factory() -> CreditAssigner:
            return lambda episode: [0.0] * (len(episode.calls) - 1) + [episode.total_reward]

        register("last_call", factory)


def test_a_plugin_registers_its_own_strategy() -> None:
    reset_plugins()
    try:
        plugin_manager().register(LastCallOnly())
        assert credit_assigner("last_call")(EPISODE) == [0.0, 0.0, 1.5]
    finally:
        reset_plugins()


# A writer, a checker, the writer again; the agent's outcome (1.0) at the end, and the checker's own
# reward (0.25, naming its role) just after its call.
ROLE_CALLS = [Call("write", 0, 10), Call("check", 20, 30), Call("write", 40, 50)]
ROLE_REWARDS = [Event(32, 0.25, "checker", role="check"), Event(55, 1.0)]


@pytest.mark.parametrize(
    ("name", "options", "expected"),
    [
        # the checker's calls form an episode of their own; the writer's share the outcome alone
        ("identical", {}, [1.0, 0.25, 1.0]),
        # the writer's two calls are discounted between themselves: 1.0 * 0.5, 1.0
        ("discounted", {"gamma": 0.5}, [0.5, 0.25, 1.0]),
        ("per_step", {}, [0.0, 0.25, 1.0]),
        ("per_step", {"gamma": 0.5}, [0.5, 0.25, 1.0]),
        # a tool's outcome still goes to the call that led to it: the checker's call led to a success
        ("air", {"success": 0.1}, [1.0, 0.35, 1.0]),
    ],
)
def test_a_roles_own_reward_reaches_its_calls_only(name: str, options: dict[str, Any], expected: list[float]) -> None:
    episode = Episode(ROLE_CALLS, ROLE_REWARDS, [Event(35, 1.0, "run_sql")])
    assert credit_assigner(name, **options)(episode) == pytest.approx(expected)


def test_a_role_without_rewards_of_its_own_shares_the_outcome() -> None:
    episode = Episode(ROLE_CALLS, [Event(55, 1.0), Event(56, 3.0, role="somebody_else")], [])
    assert credit_assigner("identical")(episode) == [1.0, 1.0, 1.0]


def test_when_every_call_has_its_own_reward_the_outcome_reaches_none() -> None:
    episode = Episode([Call("check", 0, 10)], [Event(12, 0.5, role="check"), Event(15, 1.0)], [])
    assert credit_assigner("identical")(episode) == [0.5]
