"""The warning of a step without signal says what can help, given the rewards it saw."""

from relight.records import Transition
from relight.training.learning_signal import no_signal_warning


def transition(group: str, reward: float) -> Transition:
    return Transition(
        rollout_id=f"{group}-{reward}",
        attempt_id="a",
        group_id=group,
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
