"""The policy a vLLM server samples and relight-torch's learner trains, and the push from one to the other.

:class:`VLLMPolicy` holds what relight-torch's algorithms train (a float32 transformers model, with peft
LoRA adapters by default, and its tokenizer) and the vLLM server that serves it: one relight starts from
the vLLM environment (:class:`~relight_torch.vllm.server_process.VLLMServer`), or one the user runs (``url``).

After each update the new version is pushed, with the gateway paused and drained (the trainer pauses it
around every update) or, for LoRA with ``VLLMGRPO(live_updates=True)`` in asynchronous training, while
calls go on:

- **LoRA** (the default): the adapter is saved (``save_pretrained``, peft's own format) and loaded into
  the running server under a name of its own, ``<label>-v<n>`` (``/v1/load_lora_adapter``); the gateway's
  upstream sends new calls to it, and the previous version's adapter is unloaded once no call uses it.
  vLLM reads a 135M model's rank-16 adapter in well under a second.
- **Full weights** (``lora=None``): the model is saved as safetensors and vLLM reloads them in place
  (``collective_rpc("reload_weights", weights_path=...)``); the folder becomes the one the server starts
  from, so a restarted server serves the latest version too.

**Several policies** (``relight.Trainer(policies=...)``, one per role): each policy is a peft LoRA adapter
of its own on the shared base weights, pushed as ``<policy>@v<n>`` with its own version, and trained by
its own optimizer on its own calls only
(:meth:`~relight_torch.vllm.grpo.VLLMGRPO.set_policies`). A policy at version 0 is served
by the base model itself (a fresh LoRA adapter changes nothing: peft starts its B matrices at zero), and
so is a frozen policy, which is never trained.

Both pushes are :class:`~relight_torch.vllm.policy_serving.VLLMServing`'s, which relight-verl's CPU mode shares.

A restarted server gets the current version loaded again before any call reaches it. Sampling is in
bfloat16 (vLLM) and learning in float32: :class:`~relight_torch.vllm.grpo.VLLMGRPO`, the algorithm that
trains it, corrects every sample with truncated importance sampling, since the engine is never the
learner's own forward pass.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import JsonValue
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from relight_torch.models.naming import model_name
from relight_torch.vllm.policy_serving import VLLMServing, with_tool_rendering
from relight_torch.vllm.server_process import VLLMServer, VLLMServerOptions
from relight_torch.vllm.upstream import VLLMUpstream

__all__ = ["LoraOptions", "PolicyAdapter", "VLLMPolicy"]


@dataclass(frozen=True)
class LoraOptions:
    """The LoRA adapters the learner trains (peft's ``LoraConfig``); the rank must not pass the server's
    ``max_lora_rank``."""

    rank: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: Sequence[str] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    layers: Sequence[int] | None = None
    """The decoder layers that get adapters (peft's ``layers_to_transform``); None: every layer. On a CPU
    the top few are the affordable choice: the layers below them then run forward only in an update."""

    def config(self) -> Any:
        """peft's ``LoraConfig`` for these options."""
        try:
            from peft import LoraConfig
        except ImportError as error:  # pragma: no cover - peft is a dependency of relight-torch
            raise ImportError("LoRA training needs peft: `pip install peft`") from error
        return LoraConfig(
            r=self.rank,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=list(self.target_modules),
            layers_to_transform=list(self.layers) if self.layers is not None else None,
            task_type="CAUSAL_LM",
        )


@dataclass
class PolicyAdapter:
    """One policy's LoRA adapter among several on the shared base weights (see :meth:`VLLMPolicy.add_policies`)."""

    name: str
    """The policy's name: what the gateway asks for on its calls, and the served adapters' prefix."""
    peft_name: str
    """The adapter's name inside the peft model (peft's names cannot hold every character a policy's may)."""
    frozen: bool
    version: int = 0
    pushed: Path | None = None
    """The folder of the version vLLM serves (None at version 0: the base model serves it)."""


class VLLMPolicy:
    """A policy trained here and served by vLLM. Pass it to :class:`~relight_torch.vllm.grpo.VLLMGRPO`.

    Args:
        model: A Hugging Face folder (``relight_torch.models.smollm2()``); vLLM and the learner both load it.
        lora: The adapters to train; None trains and pushes every weight.
        url: The base URL of a vLLM server the user runs (``http://host:8000/v1``), started with the same
            model, ``--enable-lora``, ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` and, for full weights,
            ``VLLM_SERVER_DEV_MODE=1``, and reading the same file system. None starts one.
        server: How relight starts its server (ignored with ``url``).
        python: The vLLM environment's interpreter (see :func:`~relight_torch.vllm.server_process.vllm_python`).
        work_dir: Where pushed versions are written (a temporary folder by default: :meth:`close` removes the
            versions it holds and leaves the server's log).
        label: The adapters' name prefix (``policy-v3``).
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        lora: LoraOptions | None = LoraOptions(),
        url: str | None = None,
        server: VLLMServerOptions | None = None,
        python: str | os.PathLike[str] | None = None,
        work_dir: str | os.PathLike[str] | None = None,
        label: str = "policy",
        seed: int = 0,
    ) -> None:
        self.folder = Path(model)
        if not (self.folder / "config.json").is_file():
            raise ValueError(f"model={str(model)!r} is not a Hugging Face folder (no config.json)")
        self.name = model_name(self.folder)
        self.label = label
        self.lora = lora
        self.url = url
        self.tokenizer = AutoTokenizer.from_pretrained(self.folder)
        options = server or VLLMServerOptions(seed=seed)
        # SmolLM2's ChatML renders no tools: serve it with the hermes rendering TorchEngine uses.
        self.server_options = with_tool_rendering(options, str(self.tokenizer.chat_template or ""))
        if lora is not None and lora.rank > self.server_options.max_lora_rank:
            raise ValueError(
                f"lora.rank={lora.rank} exceeds the server's max_lora_rank={self.server_options.max_lora_rank}"
            )
        self.python = python
        self.work_dir = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="relight-vllm-"))
        self._own_work_dir = work_dir is None
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.model: PreTrainedModel = self._learner_model()
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.tokenizer.eos_token_id)
        self.generator = torch.Generator().manual_seed(seed)
        self.policy_version = 0
        self.push_seconds: list[float] = []
        """Wall time of each push, from the update's end to the new version serving."""
        self.serving = VLLMServing(
            self.folder,
            name=self.name,
            url=url,
            options=self.server_options,
            python=python,
            log_path=self.work_dir / "vllm-server.log",
            label=label,
        )
        self.adapters: dict[str, PolicyAdapter] = {}
        """One LoRA adapter per policy, when the run names several (:meth:`add_policies`)."""

    def _learner_model(self) -> PreTrainedModel:
        base = AutoModelForCausalLM.from_pretrained(self.folder, dtype=torch.float32)
        base.eval()
        if self.lora is None:
            return base
        from peft import get_peft_model

        return get_peft_model(base, self.lora.config())  # type: ignore[return-value]

    # -- several policies ------------------------------------------------------------------------

    def add_policies(self, frozen: Mapping[str, bool]) -> None:
        """Give each policy (name -> frozen) a LoRA adapter of its own on the shared base weights.

        Replaces the single adapter (peft's ``"default"``), which must not have been trained yet; the
        server, if not started, gets room for two versions of every policy in a batch (``max_loras``).
        Idempotent for the same policies.
        """
        wanted = dict(frozen)
        if self.adapters:
            if {name: a.frozen for name, a in self.adapters.items()} == wanted:
                return
            raise ValueError(f"the policies are set once per VLLMPolicy: {sorted(self.adapters)}, not {sorted(wanted)}")
        if not wanted:
            raise ValueError("policies is empty: name at least one policy")
        if self.lora is None:
            raise ValueError(
                "several policies need LoRA adapters, one per policy: VLLMPolicy(lora=None) trains one set of "
                "full weights"
            )
        if self.policy_version > 0:
            raise ValueError("set the policies before the first update: this policy's adapter was already trained")
        for index, (name, is_frozen) in enumerate(wanted.items()):
            peft_name = f"policy{index}"
            self.model.add_adapter(peft_name, self.lora.config())  # type: ignore[operator]
            self.adapters[name] = PolicyAdapter(name, peft_name, is_frozen)
        self.model.set_adapter(next(iter(self.adapters.values())).peft_name)  # type: ignore[operator]
        self.model.delete_adapter("default")  # type: ignore[operator]
        if not self.serving.started and self.url is None:
            slots = max(self.server_options.max_loras, 2 * len(self.adapters))
            self.server_options = dataclasses.replace(self.server_options, max_loras=slots)
            self.serving.options = self.server_options
        if self.serving.started:
            for adapter in self.adapters.values():
                self.serving.upstream.route(0, self.name, policy=adapter.name)

    @property
    def policy_versions(self) -> dict[str, int]:
        """Each policy's version (empty without :meth:`add_policies`)."""
        return {name: adapter.version for name, adapter in self.adapters.items()}

    def adapter_parameters(self, policy: str) -> list[torch.nn.Parameter]:
        """The weights of ``policy``'s adapter: what its optimizer steps."""
        marker = f".{self.adapters[policy].peft_name}."
        return [parameter for name, parameter in self.model.named_parameters() if marker in name]

    @contextmanager
    def training(self, policy: str) -> Iterator[None]:
        """``policy``'s adapter is the model's active one in the block (forward passes and gradients)."""
        self.model.set_adapter(self.adapters[policy].peft_name)  # type: ignore[operator]
        yield

    @contextmanager
    def updating_policy(self, policy: str) -> Iterator[None]:
        """Around one policy's update (the gateway paused): its new adapter serves, one version up, after."""
        yield
        self.push_policy(policy)

    def push_policy(self, policy: str) -> None:
        """Serve ``policy``'s current adapter as its next version."""
        adapter = self.adapters[policy]
        self.start()
        started = time.perf_counter()
        self.push_adapter_version(adapter, adapter.version + 1)
        adapter.version += 1
        self.push_seconds.append(time.perf_counter() - started)

    def push_adapter_version(self, adapter: PolicyAdapter, version: int) -> None:
        """Serve ``adapter``'s current weights as its ``version`` (again, after a checkpoint is loaded)."""
        self.start()
        served = f"{adapter.name}@v{version}"
        folder = self.work_dir / served
        self.save_adapter(adapter.name, folder)
        # In place: a server the user runs may hold this version already, from the run this one resumes.
        self.serving.push_adapter(version, folder, name=served, policy=adapter.name, inplace=True)
        adapter.pushed = folder

    def save_adapter(self, policy: str, folder: Path) -> None:
        """Write ``policy``'s adapter to ``folder`` in peft's format (what vLLM and ``PeftModel`` load)."""
        peft_name = self.adapters[policy].peft_name
        saving = folder.with_name(f".{folder.name}.saving")
        shutil.rmtree(saving, ignore_errors=True)
        self.model.save_pretrained(saving, selected_adapters=[peft_name])
        shutil.rmtree(folder, ignore_errors=True)
        (saving / peft_name).rename(folder)  # peft saves a named adapter in a folder of that name
        shutil.rmtree(saving, ignore_errors=True)

    def load_adapter(self, policy: str, folder: Path) -> None:
        """Set ``policy``'s adapter to the one :meth:`save_adapter` wrote in ``folder``."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        weights = load_file(folder / "adapter_model.safetensors")
        set_peft_model_state_dict(self.model, weights, adapter_name=self.adapters[policy].peft_name)

    # -- serving ---------------------------------------------------------------------------------

    @property
    def server(self) -> VLLMServer | None:
        """The server relight runs (None before :meth:`start`, or attached to the user's)."""
        return self.serving.server

    @property
    def served_name(self) -> str:
        return self.serving.served_name

    @property
    def settings(self) -> dict[str, JsonValue]:
        """What the run's run.json records of the policy (``relight serve`` and ``export-model`` read it back): the
        engine, the base model folder the adapters apply to, the LoRA options and the serving precision."""
        lora = self.lora
        return {
            "engine": "vllm",
            "base_model": str(self.folder.resolve()),
            "lora": None
            if lora is None
            else {
                "rank": lora.rank,
                "alpha": lora.alpha,
                "dropout": lora.dropout,
                "target_modules": list(lora.target_modules),
                "layers": list(lora.layers) if lora.layers is not None else None,
            },
            "dtype": self.server_options.dtype,
        }

    def start(self) -> VLLMUpstream:
        """Start the server (unless attached to ``url``) and return the gateway's upstream; idempotent."""
        if self.serving.started:
            return self.serving.upstream
        upstream = self.serving.start()
        if self.policy_version > 0:  # resumed from a checkpoint before the server ran
            self.push_version(self.policy_version)
        for adapter in self.adapters.values():
            if adapter.version > 0:
                self.push_adapter_version(adapter, adapter.version)
            else:
                upstream.route(0, self.name, policy=adapter.name)
        return upstream

    @property
    def upstream(self) -> VLLMUpstream:
        return self.start()

    @property
    def root_url(self) -> str:
        self.start()
        return self.serving.root_url

    def close(self) -> None:
        """Stop the server relight started (the user's own server is left running) and remove the versions
        pushed into a temporary work folder (a real model's full weights are half a gigabyte each)."""
        self.serving.close()
        if self._own_work_dir:
            for path in self.work_dir.iterdir() if self.work_dir.is_dir() else ():
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)

    # -- pushing ---------------------------------------------------------------------------------

    @contextmanager
    def updating_weights(self) -> Iterator[None]:
        """Around an update (the gateway paused): the new weights serve, one version up, once the block ends."""
        yield
        self.push()

    def push(self) -> None:
        """Serve the learner's current weights as the next policy version."""
        self.start()
        started = time.perf_counter()
        self.push_version(self.policy_version + 1)
        self.policy_version += 1
        self.push_seconds.append(time.perf_counter() - started)

    def push_version(self, version: int) -> None:
        """Serve the learner's current weights as ``version`` (again, after a checkpoint is loaded)."""
        self.start()
        if self.lora is not None:
            folder = self.work_dir / self.serving.adapter_name(version)
            self.model.save_pretrained(folder)
            self.serving.push_adapter(version, folder)
        else:
            folder = self.work_dir / f"full-v{version}"
            self.model.save_pretrained(folder, safe_serialization=True)
            self.tokenizer.save_pretrained(folder)
            self.serving.push_full(version, folder)
