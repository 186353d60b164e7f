"""Training recipes: a run's whole course, from a framework agent to a trained policy and its figures.

:mod:`~relight_torch.recipes.warm_start_grpo` is what each example under ``examples/`` trains with: a warm
start on the agent's own scripted runs, then GRPO through ``relight.Trainer.fit``.
"""
