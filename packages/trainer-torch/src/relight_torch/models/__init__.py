"""The models relight-torch serves and trains: the name a model folder goes by, SmolLM2, the tiny model.

``from relight_torch.models import smollm2`` gives SmolLM2-135M-Instruct as a local Hugging Face folder
(:mod:`relight_torch.models.smollm2`); :func:`model_name` and :func:`name_model` are the name a folder is
served under (:mod:`relight_torch.models.naming`). The tiny model built on the spot for tests and the demo
is :mod:`relight_torch.models.tiny` (also ``relight_torch.tiny_engine``); it is not imported here, as it
imports torch and the engine.
"""

from relight_torch.models.naming import model_name, name_model
from relight_torch.models.smollm2 import SMOLLM2_HUB_ID, ModelUnavailable, cache_root, smollm2

__all__ = ["SMOLLM2_HUB_ID", "ModelUnavailable", "cache_root", "model_name", "name_model", "smollm2"]
