"""The demo: a calculator agent learns to use its tool, with RL on the CPU, through the whole of relight.

``python -m relight_torch.demo --out DIR`` (what ``make demo`` runs); see :mod:`relight_torch.demo.run`.
"""
