"""The learner: one optimizer step over any number of samples, whatever the loss.

:class:`Learner` (:mod:`~relight_torch.learner.learner`) runs the step in micro-batches that fit a token
budget, over batches laid out as the engine samples them (:mod:`~relight_torch.learner.packing`), with the
optimizers of :mod:`~relight_torch.learner.optimizers` and the C allocator told to give freed tensors back
(:mod:`~relight_torch.learner.allocator`). :class:`LearnerProcess` (:mod:`~relight_torch.learner.process`)
is the same learner in a process of its own. What to learn (the per-token loss) is the algorithm's.
"""

from relight_torch.learner.learner import Learner, Sample
from relight_torch.learner.process import LearnerProcess

__all__ = ["Learner", "LearnerProcess", "Sample"]
