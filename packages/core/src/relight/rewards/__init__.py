"""Rewards computed after a group finishes: a judge model, or any other :class:`GroupReward`.

See :mod:`relight.rewards.group` for how group rewards enter training and
:mod:`relight.rewards.judge` for the judge, its modes and its rules for bad replies.
"""

from relight.rewards.group import GroupReward, GroupRewards, GroupScores, Sample, Usage, group_reward
from relight.rewards.judge import DEFAULT_RUBRIC, Judge, JudgeReplyError, parse_reply, rank_rewards
from relight.rewards.render import RenderedRollout, render_rollout

__all__ = [
    "DEFAULT_RUBRIC",
    "GroupReward",
    "GroupRewards",
    "GroupScores",
    "Judge",
    "JudgeReplyError",
    "RenderedRollout",
    "Sample",
    "Usage",
    "group_reward",
    "parse_reply",
    "rank_rewards",
    "render_rollout",
]
