"""Transitions: what a finished rollout's spans become, and why each call was or was not trained.

The builder (:mod:`.builder`) joins LLM calls with their roles (:mod:`.role_join`) and rewards; credit rules
(:mod:`.credit`) share an episode's reward among its calls; :mod:`.verdicts` says for every call why
it did or did not become a sample, :mod:`.drops` records rollouts that were never trained on, and
:mod:`.trained_calls` records which calls an update learned from; :mod:`.jsonl` writes transitions out
and reads them back.
"""

from relight.transitions.builder import TransitionBuilder, episode_return, last_attempt_spans, role_matches
from relight.transitions.jsonl import read_jsonl, write_jsonl

__all__ = [
    "TransitionBuilder",
    "episode_return",
    "last_attempt_spans",
    "read_jsonl",
    "role_matches",
    "write_jsonl",
]
