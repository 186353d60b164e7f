"""Serving and exporting the policy a relight-torch run trained: ``relight serve`` and ``relight export-model``.

A run's checkpoint (``checkpoints/step-<n>``) holds its policy in one of three layouts, by the engine it
trained on:

- **TorchEngine** (:class:`~relight_torch.GRPO`, :class:`~relight_torch.SFT`): the whole model and its
  tokenizer, ``save_pretrained``'s folder;
- **vLLM, one policy** (``VLLMGRPO``): ``policy/``, the LoRA adapter in peft's format (or, with
  ``lora=None``, the full weights without a tokenizer) over the base model the run started from, whose
  folder run.json names (``algorithm.base_model``);
- **vLLM, several policies**: ``policies/<name>/adapter``, one LoRA adapter per policy.

Serving takes the engine the run trained on (``auto``): vLLM gets the base model with the adapters loaded as
LoRA modules (``--lora-modules``), the policy answering to the model name the run's agents asked for and the
base to ``<name>-base``, or the full weights; TorchEngine gets a merged copy of the weights. Exporting writes a
folder transformers, vLLM and TRL load unchanged: the whole model (LoRA merged into the base with peft where
asked, ``--merge``; the adapter alone, with the base it needs named, where not) and the tokenizer, whose chat
template is the one the policy was served with in training (a model whose own template renders no tools,
SmolLM2's, gets the hermes rendering both engines use).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relight.errors import ConfigError, RunFolderError
from relight.run_folders.snapshot import relight_version
from relight.trained import EngineChoice, ExportedModel, RunCheckpoint, ServedPolicy

__all__ = ["TorchPolicyCheckpoints"]

_RELIGHT_FILES = frozenset({"trainer_state.pt", "relight_checkpoint.json"})
"""What a TorchEngine checkpoint holds beside the Hugging Face folder: the optimizer, RNGs and relight's manifest."""
EXPORT_RECORD = "relight_export.json"
"""Where an exported folder says which run, step and policy version it came from."""


@dataclass(frozen=True)
class _Layout:
    """Where a checkpoint's weights are, and what they need."""

    full: Path | None = None
    """A folder of whole weights (with its tokenizer when ``base`` is None)."""
    adapters: dict[str, Path] = field(default_factory=dict[str, Path])
    """LoRA adapters by the model name they serve under."""
    base: Path | None = None
    """The base model folder: what adapters apply to, and where the tokenizer of bare weights is."""

    @property
    def standalone(self) -> bool:
        """Whole weights with their own tokenizer: a Hugging Face folder as it is."""
        return self.full is not None and self.base is None


class TorchPolicyCheckpoints:
    """:class:`relight.trained.PolicyCheckpoints` for relight-torch's runs (see the module docstring)."""

    @contextlib.contextmanager
    def serve(
        self, checkpoint: RunCheckpoint, *, host: str, port: int, engine: EngineChoice, dtype: str | None
    ) -> Iterator[ServedPolicy]:
        layout = _layout(checkpoint)
        chosen = _engine(checkpoint, engine)
        if chosen == "vllm":
            with _serve_vllm(checkpoint, layout, host=host, port=port, dtype=dtype) as served:
                yield served
            return
        with _serve_torch(checkpoint, layout, host=host, port=port) as served:
            yield served

    def export(self, checkpoint: RunCheckpoint, out: Path, *, merge: bool, policy: str | None) -> ExportedModel:
        if out.exists() and any(out.iterdir()):
            raise ConfigError(f"--out {out} is not empty: export into a new folder (nothing is overwritten)")
        layout = _layout(checkpoint)
        partial = out.with_name(f".{out.name}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        try:
            exported = _export(checkpoint, layout, partial, merge=merge, policy=policy)
            record = {
                "run": str(checkpoint.run.path),
                "run_id": checkpoint.run.run_id,
                "step": checkpoint.step,
                "policy_version": checkpoint.policy_version,
                "model": checkpoint.model,
                "policy": policy,
                "merged": exported.merged,
                "relight_version": relight_version(),
            }
            (partial / EXPORT_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
            if out.exists():
                out.rmdir()
            partial.rename(out)  # a folder that is there is whole
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        return ExportedModel(out, exported.merged, exported.what)


# -- layouts -----------------------------------------------------------------------------------------


def _layout(checkpoint: RunCheckpoint) -> _Layout:
    path = checkpoint.path
    if (path / "config.json").is_file():
        return _Layout(full=path)
    if (path / "policy").is_dir():
        folder = path / "policy"
        base = _base(checkpoint, folder)
        if (folder / "adapter_config.json").is_file():
            return _Layout(adapters={checkpoint.model: folder}, base=base)
        return _Layout(full=folder, base=base)
    if (path / "policies").is_dir():
        adapters = {child.name: child / "adapter" for child in sorted((path / "policies").iterdir())}
        return _Layout(adapters=adapters, base=_base(checkpoint, next(iter(adapters.values()))))
    raise RunFolderError(
        f"checkpoint {path} holds no weights relight-torch wrote (no config.json, policy/ or policies/)"
    )


def _base(checkpoint: RunCheckpoint, adapter: Path) -> Path:
    """The base model folder the run started from: run.json's ``algorithm.base_model``, else the adapter's."""
    named = checkpoint.run.settings.get("algorithm.base_model")
    if not isinstance(named, str) and (adapter / "adapter_config.json").is_file():
        named = json.loads((adapter / "adapter_config.json").read_text()).get("base_model_name_or_path")
    if not isinstance(named, str) or not named:
        raise RunFolderError(
            f"the run in {checkpoint.run.path} does not say which base model its checkpoint {checkpoint.path} "
            "applies to (run.json has no algorithm.base_model)"
        )
    base = Path(named)
    if not (base / "config.json").is_file():
        raise RunFolderError(
            f"the base model the run trained from, {base}, is not a Hugging Face folder here: the checkpoint's "
            "weights apply to it (copy it to that path, or export on the machine that trained)"
        )
    return base


def _engine(checkpoint: RunCheckpoint, engine: EngineChoice) -> str:
    from relight_torch.vllm import vllm_python

    if engine == "auto":
        trained_on = checkpoint.run.settings.get("algorithm.engine")
        return "vllm" if trained_on == "vllm" and vllm_python() is not None else "torch"
    if engine == "vllm" and vllm_python() is None:
        raise ConfigError(
            "--engine vllm needs the vLLM environment: `make install-vllm` makes .venv-vllm, or point "
            "$RELIGHT_VLLM_PYTHON at an interpreter with vLLM (--engine torch serves with relight-torch's own engine)"
        )
    return engine


# -- serving -----------------------------------------------------------------------------------------


@contextlib.contextmanager
def _serve_vllm(
    checkpoint: RunCheckpoint, layout: _Layout, *, host: str, port: int, dtype: str | None
) -> Iterator[ServedPolicy]:
    from relight_torch.vllm import VLLMServer, VLLMServerOptions

    if host not in ("127.0.0.1", "localhost"):
        raise ConfigError(
            f"--host {host}: relight's vLLM server listens on 127.0.0.1 only (its weight-loading routes are on); "
            "serve with --engine torch to listen elsewhere, or put a proxy in front of it"
        )
    with tempfile.TemporaryDirectory(prefix="relight-serve-") as scratch:
        name = checkpoint.model
        if layout.adapters:
            assert layout.base is not None
            folder, served_name = layout.base, f"{name}-base"
            modules = [f"{model}={adapter}" for model, adapter in layout.adapters.items()]
            rank = max(_lora_rank(adapter) for adapter in layout.adapters.values())
            extra = ["--lora-modules", *modules]
        else:
            folder = _standalone(checkpoint, layout, Path(scratch) / "model")
            served_name, rank, extra = name, 16, []
        options = VLLMServerOptions(
            dtype=dtype or str(checkpoint.run.settings.get("algorithm.dtype") or "bfloat16"),
            max_lora_rank=max(16, rank),
            max_loras=max(2, len(layout.adapters)),
            chat_template=_tool_template(folder),
            extra_args=extra,
        )
        server = VLLMServer(
            folder, served_name=served_name, options=options, port=port or None, log_path=Path(scratch) / "vllm.log"
        )
        server.start()
        try:
            yield ServedPolicy(server.base_url, next(iter(layout.adapters), name), "vllm")
        finally:
            server.stop()


@contextlib.contextmanager
def _serve_torch(checkpoint: RunCheckpoint, layout: _Layout, *, host: str, port: int) -> Iterator[ServedPolicy]:
    from relight._internal.server import AsgiServer
    from relight_torch import TorchEngine
    from relight_torch.server import create_app

    if len(layout.adapters) > 1:
        raise ConfigError(
            f"the run trained {len(layout.adapters)} policies ({', '.join(layout.adapters)}): relight-torch's own "
            "engine serves one set of weights; serve them with --engine vllm, or export one with --policy"
        )
    with tempfile.TemporaryDirectory(prefix="relight-serve-") as scratch:
        folder = _standalone(checkpoint, layout, Path(scratch) / "model")
        engine = TorchEngine.from_pretrained(folder, name=checkpoint.model)
        if checkpoint.policy_version is not None:
            engine.policy_version = checkpoint.policy_version  # what its answers report, as in training
        try:
            with contextlib.ExitStack() as serving:
                try:
                    server = serving.enter_context(AsgiServer(create_app(engine), host=host, port=port))
                except (OSError, SystemExit) as error:  # uvicorn exits when it cannot bind
                    raise ConfigError(
                        f"cannot serve on {host}:{port}: the address is taken or not this machine's "
                        "(--port 0 picks a free port)"
                    ) from error
                try:
                    yield ServedPolicy(f"{server.url}/v1", checkpoint.model, "torch")
                finally:
                    engine.abandon()  # a request still generating ends now rather than holding the stop
        finally:
            engine.close()


def _standalone(checkpoint: RunCheckpoint, layout: _Layout, scratch: Path) -> Path:
    """A folder of whole weights with their tokenizer: the checkpoint's own, or one merged into ``scratch``."""
    if layout.standalone:
        assert layout.full is not None
        return layout.full
    scratch.mkdir(parents=True)
    _export(checkpoint, layout, scratch, merge=True, policy=next(iter(layout.adapters), None))
    return scratch


# -- exporting ---------------------------------------------------------------------------------------


def _export(checkpoint: RunCheckpoint, layout: _Layout, out: Path, *, merge: bool, policy: str | None) -> ExportedModel:
    if layout.full is not None:
        _copy_weights(layout.full, out)
        if layout.base is not None:
            _save_tokenizer(layout.base, out)
        return ExportedModel(out, False, "full weights and tokenizer")
    adapter = _adapter(layout, policy)
    assert layout.base is not None
    if not merge:
        for file in adapter.iterdir():
            if file.is_file():
                shutil.copy2(file, out / file.name)
        _save_tokenizer(layout.base, out)
        return ExportedModel(out, False, f"a LoRA adapter (peft) for the base model in {layout.base}, and tokenizer")
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(layout.base, dtype=torch.float32)
    merged: Any = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    merged.save_pretrained(out)
    _name(out, policy if len(layout.adapters) > 1 and policy else checkpoint.model)
    _save_tokenizer(layout.base, out)
    generation = layout.base / "generation_config.json"
    if generation.is_file() and not (out / "generation_config.json").exists():
        shutil.copy2(generation, out / generation.name)
    return ExportedModel(out, True, "the LoRA adapter merged into the base weights, and tokenizer")


def _adapter(layout: _Layout, policy: str | None) -> Path:
    if policy is not None:
        if policy not in layout.adapters:
            raise ConfigError(f"--policy {policy!r}: the run's policies are {', '.join(layout.adapters)}")
        return layout.adapters[policy]
    if len(layout.adapters) > 1:
        raise ConfigError(f"the run trained several policies: name one with --policy ({', '.join(layout.adapters)})")
    return next(iter(layout.adapters.values()))


def _copy_weights(folder: Path, out: Path) -> None:
    for file in folder.iterdir():
        if file.is_file() and file.name not in _RELIGHT_FILES:
            shutil.copy2(file, out / file.name)


def _save_tokenizer(base: Path, out: Path) -> None:
    """The base model's tokenizer, with the chat template the policy was served with in training."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    template = _tool_template(base)
    if template is not None:
        tokenizer.chat_template = Path(template).read_text(encoding="utf-8")
    tokenizer.save_pretrained(out)


def _tool_template(folder: Path) -> str | None:
    """The hermes ChatML template file where ``folder``'s own chat template renders no tools (SmolLM2's), as
    the run's vLLM server and relight-torch's engine render them; None where its own does."""
    from transformers import AutoTokenizer

    import relight_torch.vllm

    if "tools" in str(AutoTokenizer.from_pretrained(folder).chat_template or ""):
        return None
    return str(Path(relight_torch.vllm.__file__).with_name("chatml_tools.jinja"))


def _lora_rank(adapter: Path) -> int:
    return int(json.loads((adapter / "adapter_config.json").read_text()).get("r", 16))


def _name(folder: Path, name: str) -> None:
    """The model name in config.json's ``_name_or_path``, as relight-torch names the folders it saves."""
    config = folder / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "_name_or_path": name}, indent=2) + "\n")
