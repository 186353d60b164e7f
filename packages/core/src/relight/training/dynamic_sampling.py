"""Learning signal: which groups of transitions a group-relative algorithm can learn from.

GRPO (and REINFORCE++, which subtracts the group mean first) gives every transition of a group
whose rewards are all equal an advantage of exactly zero: such a group costs a forward and a
backward pass and teaches nothing. Algorithms skip those groups before the forward pass; the
trainer counts them, warns when a whole step has none with signal, and can sample a flat task
again (dynamic sampling, as DAPO does) so its group gets a chance to differ.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from relight.records import Rollout, RolloutRequest, Transition
from relight.transitions.learning_signal import flat_groups, group_key

__all__ = ["flat_groups", "no_signal_warning", "sample_until_signal"]


async def sample_until_signal(
    requests: Sequence[RolloutRequest],
    run: Callable[[Sequence[RolloutRequest]], Awaitable[list[Rollout]]],
    build: Callable[[Sequence[Rollout]], Awaitable[list[Transition]]],
    *,
    rounds: int = 0,
) -> tuple[list[Rollout], list[Transition], int]:
    """Run ``requests``, then run again the tasks whose group has no signal, at most ``rounds`` more times.

    A task sampled again keeps its ``group_id``, so its new samples join its group: the group grows
    until its rewards differ (a hard task that succeeded once in sixteen tries teaches something).
    With several policies a task has learned something when any policy's group of it has signal.
    Returns every rollout, their transitions, and the rounds of resampling taken.
    """
    rollouts = await run(requests)
    transitions = await build(rollouts)
    for taken in range(rounds):
        with_any_signal = {group_key(t) for t in transitions} - flat_groups(transitions)
        task_of = {rollout.rollout_id: rollout.group_id for rollout in rollouts}
        learned = {task_of.get(t.rollout_id) for t in transitions if group_key(t) in with_any_signal}
        again = [_again(request, taken + 1) for request in requests if request.group_id not in learned]
        if not again:
            return rollouts, transitions, taken
        more = await run(again)
        rollouts += more
        transitions += await build(more)
    return rollouts, transitions, rounds


def _again(request: RolloutRequest, round_: int) -> RolloutRequest:
    """The request sampled once more: a rollout of its own, named after the round when the first had a name."""
    if request.rollout_id is None:
        return request
    return request.model_copy(update={"rollout_id": f"{request.rollout_id}-r{round_}"})


def no_signal_warning(step: int, transitions: Sequence[Transition], *, dynamic_sampling: int) -> str:
    """What to tell a user whose step has no group with signal: why, and what can help given the rewards seen.

    Sampling again (dynamic sampling) helps only when some samples of a task can differ; when every
    reward of the step is the same (a 0/1 reward the agent never earns), the policy itself must
    change first, so the warning names what changes it.
    """
    groups = len({group_key(t) for t in transitions})
    rewards = {round(t.reward, 9) for t in transitions}
    text = f"step {step}: all {groups} group(s) have equal rewards, so there is no learning signal this step"
    if len(rewards) == 1:
        (reward,) = rewards
        return (
            f"{text}: every call's reward is {reward:g}. What can help: a warm start on demonstrations "
            "(relight_torch.SFT on good transcripts), a graded reward (partial credit instead of 0/1), "
            "forcing the first tool call (force_first_tool_call on relight_torch's server or tiny_engine), "
            "or easier tasks"
        )
    hint = "" if dynamic_sampling else "; Trainer(dynamic_sampling=N) samples flat tasks again"
    return f"{text} (GRPO skips such groups){hint}"
