"""The policy a vLLM server samples and relight-torch's learner trains, and the push from one to the other.

:class:`VLLMPolicy` holds what relight-torch's algorithms train (a float32 transformers model, with peft
LoRA adapters by default, and its tokenizer) and the vLLM server that serves it: one relight starts from
the vLLM environment (:class:`~relight_torch.vllm.server.VLLMServer`), or one the user runs (``url``).

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

Both pushes are :class:`~relight_torch.vllm.serving.VLLMServing`'s, which relight-verl's CPU mode shares.
A restarted server gets the current version loaded again before any call reaches it. Sampling is in
bfloat16 (vLLM) and learning in float32: :class:`VLLMGRPO` corrects every sample with truncated importance
sampling, since the engine is never the learner's own forward pass.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from relight.algorithm import UpstreamTarget
from relight_torch.grpo import GRPO
from relight_torch.models import model_name
from relight_torch.vllm.server import VLLMServer, VLLMServerOptions
from relight_torch.vllm.serving import VLLMServing, with_tool_rendering
from relight_torch.vllm.upstream import VLLMUpstream

__all__ = ["VLLMGRPO", "LoraOptions", "VLLMPolicy"]


@dataclass(frozen=True)
class LoraOptions:
    """The LoRA adapters the learner trains (peft's ``LoraConfig``); the rank must not pass the server's
    ``max_lora_rank``."""

    rank: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: Sequence[str] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class VLLMPolicy:
    """A policy trained here and served by vLLM. Pass it to :class:`VLLMGRPO` (or ``relight.algorithm("grpo",
    model, engine="vllm")``).

    Args:
        model: A Hugging Face folder (``relight_torch.models.smollm2()``); vLLM and the learner both load it.
        lora: The adapters to train; None trains and pushes every weight.
        url: The base URL of a vLLM server the user runs (``http://host:8000/v1``), started with the same
            model, ``--enable-lora``, ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` and, for full weights,
            ``VLLM_SERVER_DEV_MODE=1``, and reading the same file system. None starts one.
        server: How relight starts its server (ignored with ``url``).
        python: The vLLM environment's interpreter (see :func:`~relight_torch.vllm.server.vllm_python`).
        work_dir: Where pushed versions are written (a temporary folder by default).
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
        self.server_options = options = with_tool_rendering(options, str(self.tokenizer.chat_template or ""))
        if lora is not None and lora.rank > self.server_options.max_lora_rank:
            raise ValueError(
                f"lora.rank={lora.rank} exceeds the server's max_lora_rank={self.server_options.max_lora_rank}"
            )
        self.python = python
        self.work_dir = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="relight-vllm-"))
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

    def _learner_model(self) -> PreTrainedModel:
        base = AutoModelForCausalLM.from_pretrained(self.folder, dtype=torch.float32)
        base.eval()
        if self.lora is None:
            return base
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError as error:  # pragma: no cover - peft is a dependency of relight-torch
            raise ImportError("LoRA training needs peft: `pip install peft`") from error
        config = LoraConfig(
            r=self.lora.rank,
            lora_alpha=self.lora.alpha,
            lora_dropout=self.lora.dropout,
            target_modules=list(self.lora.target_modules),
            task_type="CAUSAL_LM",
        )
        return get_peft_model(base, config)  # type: ignore[return-value]

    # -- serving ---------------------------------------------------------------------------------

    @property
    def server(self) -> VLLMServer | None:
        """The server relight runs (None before :meth:`start`, or attached to the user's)."""
        return self.serving.server

    @property
    def served_name(self) -> str:
        return self.serving.served_name

    def start(self) -> VLLMUpstream:
        """Start the server (unless attached to ``url``) and return the gateway's upstream; idempotent."""
        if self.serving.started:
            return self.serving.upstream
        upstream = self.serving.start()
        if self.policy_version > 0:  # resumed from a checkpoint before the server ran
            self._push(self.policy_version)
        return upstream

    @property
    def upstream(self) -> VLLMUpstream:
        return self.start()

    @property
    def root_url(self) -> str:
        self.start()
        return self.serving.root_url

    def close(self) -> None:
        """Stop the server relight started; the user's own server is left running."""
        self.serving.close()

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
        self._push(self.policy_version + 1)
        self.policy_version += 1
        self.push_seconds.append(time.perf_counter() - started)

    def _push(self, version: int) -> None:
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


class VLLMGRPO(GRPO):
    """:class:`~relight_torch.GRPO` (or REINFORCE++) with the policy served by vLLM.

    Truncated importance sampling corrects every sample, not only stale ones: vLLM samples in bfloat16
    with its own kernels, so the recorded logprobs are never the learner's (see ``logprob_delta_*`` and
    ``tis_clipped_fraction`` in the metrics).

    Args:
        policy: What is trained and where it is served.
        live_updates: Update while the policy serves calls, which asynchronous training
            (``Trainer(max_staleness=k)``) then does without pausing the gateway. True only with LoRA:
            the learner never trains what vLLM serves (vLLM holds its own copy), and a push loads the new
            adapter beside the old one, so a call finishes on the adapter it started on (its span records
            that version) while new calls go to the new one. A full-weight reload replaces the weights under
            every call in flight, so it is always done with the gateway paused.
        options: :class:`~relight_torch.GRPO`'s (``lr``, ``clip``, ``tis_cap``, …).
    """

    engine_numerics_differ = True

    def __init__(self, policy: VLLMPolicy, *, live_updates: bool = False, **options: Any) -> None:
        if options.get("learner_process"):
            raise ValueError("VLLMGRPO trains beside the server: learner_process does not apply")
        if live_updates and policy.lora is None:
            raise ValueError(
                "live_updates=True needs LoRA (VLLMPolicy(lora=LoraOptions(...))): a full-weight reload replaces "
                "the weights under the calls in flight, so it is done with the gateway paused"
            )
        self.policy = policy
        super().__init__(policy, **options)  # type: ignore[arg-type]  # VLLMPolicy has what GRPO uses of an engine
        self.live_updates = live_updates

    @contextmanager
    def changing_weights(self) -> Iterator[None]:
        """Around an update: the learner's model is trained in place (vLLM serves its own copy), then pushed."""
        with self.policy.updating_weights():
            yield

    def upstreams(self) -> Sequence[UpstreamTarget | VLLMUpstream]:  # type: ignore[override]
        return [self.policy.start()]

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.policy.model.save_pretrained(directory / "policy")
        state = {
            "learner": self.learner.state_dict(),
            "policy_version": self.policy_version,
            "rng": self.rng.getstate(),
        }
        torch.save(state, directory / "trainer_state.pt")

    def load(self, directory: Path) -> None:
        state = torch.load(directory / "trainer_state.pt", weights_only=False)
        weights = directory / "policy"
        if self.policy.lora is not None:
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            set_peft_model_state_dict(self.policy.model, load_file(weights / "adapter_model.safetensors"))
        else:
            loaded = AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32)
            self.policy.model.load_state_dict(loaded.state_dict())
        self.learner.load_state_dict(state["learner"])
        self.rng.setstate(state["rng"])
        self.policy.policy_version = int(state["policy_version"])
        if self.policy.serving.started and self.policy.policy_version > 0:
            self.policy._push(self.policy.policy_version)

    def close(self) -> None:
        self.policy.close()
