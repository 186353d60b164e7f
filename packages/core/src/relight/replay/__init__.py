"""Replaying a recorded rollout: the agent runs again against exactly the answers the model gave then.

``relight replay ROLLOUT_ID --store URL -- module:agent`` (or :func:`replay`) reads the rollout's attempt from
the store, serves its recorded answers in order from a scripted model, and runs the agent in this process on
the same task, handed the base URL as relight always hands it. A request the recording does not hold (the
agent changed, or is not deterministic) is the divergence, reported at the first differing call with both
requests; the replay's spans are compared with the recording's, ids and times aside.
"""

from relight.replay.recording import RecordedExchange, Recording, read_recording
from relight.replay.run import ReplayResult, replay
from relight.replay.script import Divergence, ReplayScript
from relight.replay.spans import span_differences

__all__ = [
    "Divergence",
    "RecordedExchange",
    "Recording",
    "ReplayResult",
    "ReplayScript",
    "read_recording",
    "replay",
    "span_differences",
]
