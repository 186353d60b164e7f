"""vLLM as verl's rollout backend on the CPU: relight-torch's vLLM server code, fed by verl's weight sync.

verl places rollout servers with a :class:`~verl.workers.rollout.replica.RolloutReplica` and reaches
them from inside its training workers with a :class:`~verl.workers.rollout.base.BaseRollout` adapter,
through which verl's weight sync (the ``naive`` checkpoint engine of colocated training) hands over the
actor's weights after each update. This module gives both, registered under the rollout name
:data:`NAME`:

* :class:`VLLMReplica`, in the driver: starts one vLLM OpenAI server per replica from the vLLM
  environment (``.venv-vllm``) with :class:`relight_torch.vllm.VLLMServing`, the code relight-torch
  serves its own policies with (restarted if it dies, stopped with the run), and is the gateway's
  :class:`~relight_torch.vllm.VLLMUpstream` for it.
* :class:`ServerAdapter`, in each training worker: ``update_weights`` writes the tensors verl's FSDP
  engine yields to a folder, full weights as safetensors (or, when the actor trains LoRA adapters and
  does not merge them, the adapter in peft's format).
* :func:`serve_written_weights`, in the driver once verl's sync has returned: each replica serves that
  folder as the new policy version, full weights through vLLM's ``reload_weights``, an adapter hot-loaded
  under its version's name (:meth:`relight_torch.vllm.VLLMServing.push_full` / ``push_adapter``).

vLLM has no sleep mode on the CPU and nothing to free there, so ``sleep``/``wake_up`` do nothing; the
gateway is paused and drained by relight around every update, as on GPUs. Where this differs from the
GPU path, and why, is in the package's README ("On the CPU").
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any

import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica

from relight_verl.cpu.plugin import ROLLOUT as NAME

__all__ = ["NAME", "ServerAdapter", "VLLMReplica", "engine_options", "serve_written_weights", "weights_folder"]

_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
"""The ranks vLLM's ``--max-lora-rank`` takes."""
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def engine_options(config: Any) -> Mapping[str, Any]:
    """``rollout.engine_kwargs.relight_vllm``: ``served_model_name``, ``weights_dir``, ``dtype``, ``kv_cache_gib``."""
    return config.engine_kwargs.get(NAME) or {}


def weights_folder(config: Any, replica_rank: int) -> Path:
    """Where the worker of replica ``replica_rank`` writes the weights its server is to serve next."""
    root = engine_options(config).get("weights_dir")
    if not root:
        raise ValueError(f"set actor_rollout_ref.rollout.engine_kwargs.{NAME}.weights_dir (VerlConfig does)")
    return Path(root) / f"replica-{replica_rank}"


class VLLMReplica(RolloutReplica):
    """A vLLM server per replica, run by this (the driver's) process; one training worker per replica."""

    serving: Any = None
    """The replica's :class:`relight_torch.vllm.VLLMServing` once :meth:`launch_servers` ran."""

    async def launch_servers(self) -> None:
        if self.world_size != 1:
            raise ValueError(
                f"the {NAME} rollout serves one process per replica: set tensor, data and pipeline "
                f"parallel sizes of the rollout to 1 (got a world size of {self.world_size})"
            )
        from transformers import AutoTokenizer

        from relight_torch.vllm import VLLMServerOptions, VLLMServing
        from relight_torch.vllm.policy_serving import with_tool_rendering

        options = engine_options(self.config)
        model = _model_folder(self.model_config)
        name = options.get("served_model_name") or self.model_config.path
        folder = weights_folder(self.config, self.replica_rank)
        folder.parent.mkdir(parents=True, exist_ok=True)
        server = VLLMServerOptions(
            dtype=options.get("dtype", "float32"),
            max_model_len=int(self.config.max_model_len or 4096),
            max_lora_rank=_server_lora_rank(int(_field(self.model_config, "lora_rank") or 0)),
            kv_cache_gib=int(options.get("kv_cache_gib", 1)),
            seed=int(options.get("seed", 0)),
        )
        server = with_tool_rendering(server, str(AutoTokenizer.from_pretrained(model).chat_template or ""))
        self.serving = VLLMServing(
            model, name=name, options=server, log_path=folder.parent / f"vllm-server-{self.replica_rank}.log"
        )
        upstream = await asyncio.to_thread(self.serving.start)
        self._server_address = upstream.name.removeprefix("http://").removesuffix("/v1")
        self.servers = []  # no Ray actor: verl's sleep/wake/abort calls have nothing to reach

    @property
    def upstream(self) -> Any:
        """The gateway's :class:`~relight_torch.vllm.VLLMUpstream` for this replica's server."""
        return self.serving.upstream

    def serve(self, version: int) -> None:
        """Serve what this replica's worker wrote (see :class:`ServerAdapter`) as policy ``version``."""
        folder = weights_folder(self.config, self.replica_rank) / f"v{version}"
        if (folder / "adapter_config.json").is_file():
            self.serving.push_adapter(version, folder)
        elif (folder / "config.json").is_file():
            self.serving.push_full(version, folder)
        else:
            raise FileNotFoundError(f"the training worker wrote no weights for version {version} to {folder}")

    def stop(self) -> None:
        """Stop the server and delete the weights written for it; safe to call twice."""
        if self.serving is not None:
            self.serving.close()
        shutil.rmtree(weights_folder(self.config, self.replica_rank), ignore_errors=True)

    def rollout_worker_use_gpu(self) -> bool:
        return False


def serve_written_weights(replicas: list[Any], version: int) -> None:
    """After verl's weight sync returned: every :class:`VLLMReplica` serves its worker's folder as ``version``."""
    for replica in replicas:
        if isinstance(replica, VLLMReplica):
            replica.serve(version)


def _field(config: Any, key: str) -> Any:
    """A field of verl's model config, whether a DictConfig (the driver's) or verl's dataclass (a worker's)."""
    return config.get(key, None) if hasattr(config, "get") else getattr(config, key, None)


def _model_folder(model_config: Any) -> str:
    """The local folder verl loads the model from (a hub id's local copy, or the path itself)."""
    return str(_field(model_config, "local_path") or _field(model_config, "path"))


def _server_lora_rank(rank: int) -> int:
    """vLLM's ``--max-lora-rank`` for adapters of ``rank``: the smallest it takes, 16 at least."""
    for allowed in _LORA_RANKS:
        if allowed >= max(rank, 16):
            return allowed
    raise ValueError(f"lora_rank={rank} exceeds the largest rank vLLM serves ({_LORA_RANKS[-1]})")


class ServerAdapter(BaseRollout):
    """Inside a training worker: verl's weight sync writes the FSDP actor's weights where its replica serves them."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, model_config, device_mesh, *args, **kwargs)
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        self.replica_rank = rank  # one process per replica (VLLMReplica checks)
        self.is_leader_rank = True

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(
        self,
        weights: Generator[tuple[str, torch.Tensor], None, None],
        wire_format: str = "named_tensors",
        peft_config: Any = None,
        base_sync_done: bool = True,
        global_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        if wire_format != "named_tensors":
            raise ValueError(
                f"the {NAME} rollout takes full tensors (wire_format 'named_tensors'), not {wire_format!r}"
            )
        if global_steps is None:
            raise ValueError(f"the {NAME} rollout names each version by verl's global step; none was given")
        # Every rank draws every tensor: drawing one gathers it across the training processes.
        named = {name: tensor.detach().to("cpu", copy=True).contiguous() for name, tensor in weights}
        if peft_config is not None and not base_sync_done:
            return  # the base weights, which LoRA leaves as they are: the server loaded them at start
        folder = weights_folder(self.config, self.replica_rank) / f"v{global_steps}"
        writing = folder.with_name(f"{folder.name}.writing")
        shutil.rmtree(writing, ignore_errors=True)
        writing.mkdir(parents=True)
        if peft_config is not None:
            _write_adapter(writing, named, peft_config)
        else:
            _write_full(writing, named, Path(_model_folder(self.model_config)))
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(writing, folder)  # the driver never sees half a version


def _write_full(folder: Path, tensors: dict[str, torch.Tensor], model: Path) -> None:
    """Full weights as one safetensors file, beside the model's own config and tokenizer files (a
    restarted server starts from this folder)."""
    from safetensors.torch import save_file

    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    for path in model.iterdir():
        if path.is_file() and not path.name.endswith(_WEIGHT_SUFFIXES) and not path.name.endswith(".index.json"):
            shutil.copy2(path, folder / path.name)


def _write_adapter(folder: Path, tensors: dict[str, torch.Tensor], peft_config: Mapping[str, Any]) -> None:
    """A peft adapter folder: ``adapter_config.json`` and ``adapter_model.safetensors``, as peft saves one.

    verl hands the adapter's config over as ``LoraConfig.to_dict()``; peft makes it a config again.
    """
    from peft import PeftConfig
    from safetensors.torch import save_file

    PeftConfig.from_peft_type(**peft_config).save_pretrained(str(folder))
    save_file(tensors, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
