"""relight-torch's algorithms: :class:`GRPO` (and REINFORCE++) and :class:`SFT`, each a :class:`relight.Algorithm`.

What they share, the engine that serves the policy, a learner and checkpoints, is
:class:`~relight_torch.algorithms.policy_algorithm.PolicyAlgorithm`. GRPO's parts: the advantage
estimators (:mod:`~relight_torch.algorithms.advantages`), the per-token losses
(:mod:`~relight_torch.algorithms.objectives`), the off-policy correction of stale samples
(:mod:`~relight_torch.algorithms.offpolicy`) and the anchor of samples recorded without logprobs
(:mod:`~relight_torch.algorithms.anchors`). :mod:`~relight_torch.algorithms.checkpoint` writes and reads a
trained policy in the Hugging Face layout.
"""

from relight_torch.algorithms.grpo import GRPO
from relight_torch.algorithms.sft import SFT

__all__ = ["GRPO", "SFT"]
