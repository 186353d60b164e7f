"""Which groups have no signal (a policy's group, with several policies), what sampling again does about it,
and the warning of a step without signal, which says what can help given the rewards it saw."""

from collections.abc import Sequence

from relight.records import Rollout, RolloutRequest, RolloutStatus, Transition
from relight.training.dynamic_sampling import flat_groups, no_signal_warning, sample_until_signal


def transition(group: str, reward: float, policy: str | None = None, rollout_id: str | None = None) -> Transition:
    return Transition(
        rollout_id=rollout_id or f"{group}-{reward}",
        attempt_id="a",
        group_id=group,
        policy=policy,
        step=0,
        prompt_token_ids=[1],
        response_token_ids=[2],
        reward=reward,
    )


def test_when_every_reward_is_equal_the_warning_names_what_changes_the_policy() -> None:
    text = no_signal_warning(3, [transition("g1", 0.0), transition("g2", 0.0)], dynamic_sampling=0)
    assert text.startswith("step 3: all 2 group(s) have equal rewards")
    assert "every call's reward is 0" in text
    for hint in ("warm start on demonstrations", "graded reward", "force_first_tool_call"):
        assert hint in text
    assert "dynamic_sampling" not in text  # sampling again cannot help when nothing ever differs


def test_when_groups_differ_from_each_other_sampling_again_may_help() -> None:
    text = no_signal_warning(1, [transition("g1", 0.0), transition("g2", 1.0)], dynamic_sampling=0)
    assert "dynamic_sampling=N" in text


def test_a_group_is_flat_per_policy() -> None:
    """One task's group: the checker's rewards are equal, the writer's differ."""
    transitions = [
        transition("g", 0.0, "writer"),
        transition("g", 1.0, "writer"),
        transition("g", 0.5, "checker"),
        transition("g", 0.5, "checker"),
    ]
    assert flat_groups(transitions) == {("checker", "g")}
    assert flat_groups([transition("g", 1.0), transition("g", 1.0)]) == {(None, "g")}
    text = no_signal_warning(2, [transition("g", 1.0, "writer"), transition("g", 0.0, "checker")], dynamic_sampling=1)
    assert text.startswith("step 2: all 2 group(s) have equal rewards")


async def test_a_task_is_sampled_again_when_no_policys_group_of_it_has_signal() -> None:
    """Each policy's group is flat although the task's rewards differ between the policies."""
    runs: list[list[str | None]] = []

    async def run(requests: Sequence[RolloutRequest]) -> list[Rollout]:
        runs.append([r.rollout_id for r in requests])
        return [
            Rollout(rollout_id=r.rollout_id or "r", input=r.input, group_id=r.group_id, status=RolloutStatus.SUCCEEDED)
            for r in requests
        ]

    async def build(rollouts: Sequence[Rollout]) -> list[Transition]:
        return [
            transition(r.group_id, reward, policy, rollout_id=r.rollout_id)
            for r in rollouts
            for policy, reward in (("writer", 1.0), ("checker", 0.0))
        ]

    request = RolloutRequest(input="task", group_id="g", rollout_id="t")
    _, _, rounds = await sample_until_signal([request], run, build, rounds=2)
    assert (rounds, runs) == (2, [["t"], ["t-r1"], ["t-r2"]])
