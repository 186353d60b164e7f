"""The name a model folder is served under, and how a folder is given one.

:func:`model_name` is the one its ``config.json`` gives (``_name_or_path``, the hub id a model downloaded
from the hub carries, which :func:`~relight_torch.models.smollm2` and relight-torch's checkpoints write
too), else the folder's own name.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["model_name", "name_model"]


def model_name(folder: str | os.PathLike[str]) -> str:
    """The name a Hugging Face folder's model goes by: its config's ``_name_or_path`` unless that is a path.

    ``save_pretrained`` leaves the field out, so a folder saved by transformers (a ``hf`` folder, a
    checkpoint saved by hand) is named after itself; :func:`name_model` gives one a name.
    """
    config = Path(folder) / "config.json"
    named = json.loads(config.read_text()).get("_name_or_path") if config.is_file() else None
    if isinstance(named, str) and named and not named.startswith((".", "/", "~")) and not Path(named).exists():
        return named
    return Path(folder).resolve().name


def name_model(folder: str | os.PathLike[str], name: str) -> None:
    """Write ``name`` into the folder's ``config.json`` as ``_name_or_path``, for :func:`model_name`.

    The new file replaces the old at once, so a process loading the folder meanwhile reads one or the other.
    """
    config = Path(folder) / "config.json"
    fresh = config.with_name(f".config.json.{os.getpid()}")
    fresh.write_text(json.dumps({**json.loads(config.read_text()), "_name_or_path": name}, indent=2) + "\n")
    fresh.replace(config)
