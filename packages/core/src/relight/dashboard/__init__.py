"""``relight dashboard``: see what the agent did and why each call was (not) trained, in a browser.

Runs and reward curves that update live, a filterable list of rollouts, and each rollout's span
tree, LLM calls and tokens coloured by logprob, over any store. ``Trainer.fit(..., dashboard=True)``
serves it beside a run; ``relight dashboard --store URL`` serves it alone.
"""

from relight.dashboard.app import create_app
from relight.dashboard.catalog import Catalog
from relight.dashboard.server import DEFAULT_PORT, Dashboard, decoder_of

__all__ = ["DEFAULT_PORT", "Catalog", "Dashboard", "create_app", "decoder_of"]
