"""relight-apo: automatic prompt optimisation for an unchanged agent, from the rollouts relight records.

``relight.Trainer(algorithm=APO(prompts, optimizer=Optimizer(...), base_url=..., model=...)).fit(agent,
train, val)`` improves the prompts the agent reads (``relight.resource(name, default=...)``) with an
optimiser model at any OpenAI-compatible endpoint, and keeps the version that does best on validation.
See :mod:`relight_apo.apo` for the search and its rules.
"""

from relight_apo.apo import APO
from relight_apo.optimizer import Optimizer, OptimizerError, Usage
from relight_apo.prompts import Prompt, placeholders

__all__ = ["APO", "Optimizer", "OptimizerError", "Prompt", "Usage", "placeholders"]
