"""The engine: a transformers model served in-process, :class:`TorchEngine`.

:mod:`~relight_torch.engine.torch_engine` batches calls continuously (:mod:`~relight_torch.engine.running_batch`),
reuses the keys and values of prompts that start alike (:mod:`~relight_torch.engine.prefix_cache`) and lets
weight updates in between two generation steps (:mod:`~relight_torch.engine.weights_gate`). Requests become
prompts through the model's chat template (:mod:`~relight_torch.engine.chat`), tool calls are parsed from
hermes blocks (:mod:`~relight_torch.engine.tool_calls`), and forced tool calls and JSON output are decoded
under a grammar (:mod:`~relight_torch.engine.constrained_decoding`). ``python -m relight_torch.server``
serves it alone over HTTP.
"""

from relight_torch.engine.torch_engine import TorchEngine

__all__ = ["TorchEngine"]
