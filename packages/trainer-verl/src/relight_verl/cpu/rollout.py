"""relight-torch's engine as a verl rollout backend: where vLLM serves on GPUs, it serves on the CPU.

verl places rollout servers with a :class:`~verl.workers.rollout.replica.RolloutReplica` (one per
replica, a Ray actor holding the HTTP server) and reaches the server from inside its training
workers with a :class:`~verl.workers.rollout.base.BaseRollout` adapter, through which verl's weight
sync (the ``naive`` checkpoint engine of colocated training) pushes the actor's weights after each
update. This module gives both for relight-torch, registered under the rollout name
:data:`NAME`:

* :class:`RelightTorchServer`: the Ray actor. It loads the model verl trains into a
  :class:`~relight_torch.engine.TorchEngine` and serves it with ``relight_torch.server`` (the
  OpenAI-compatible, vLLM-dialect server relight's gateway forwards to, token ids and logprobs
  included), on the node's address as verl reports vLLM's.
* :class:`RelightTorchReplica`: launches one server per replica, next to its training worker.
* :class:`ServerAdapter`: in each training worker; ``update_weights`` gathers the full tensors
  verl's FSDP engine yields and sends them to the replica's server, which swaps them in between
  two sampling batches (:meth:`~relight_torch.engine.TorchEngine.updating_weights`).

There is nothing to free on the CPU, so ``sleep``/``wake_up`` do nothing; the gateway is paused
and drained by relight around every update, as on GPUs.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Generator, Mapping
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica

from relight_verl.cpu.plugin import ROLLOUT as NAME

__all__ = ["NAME", "RelightTorchReplica", "RelightTorchServer", "ServerAdapter", "served_model_name"]


def served_model_name(config: Any, model_path: str) -> str:
    """The name the server answers to: ``rollout.engine_kwargs.relight_torch.served_model_name``, else the path."""
    engine_kwargs: Mapping[str, Any] = config.engine_kwargs.get(NAME) or {}
    return engine_kwargs.get("served_model_name") or model_path


def _server_name(replica_rank: int) -> str:
    return f"relight_torch_server_{replica_rank}"


class RelightTorchServer:
    """One replica: a relight-torch engine behind ``relight_torch.server``, in a thread of this Ray actor."""

    def __init__(self, model_path: str, name: str, seed: int = 0) -> None:
        import uvicorn

        from relight_torch.engine import TorchEngine
        from relight_torch.server import create_app

        self.engine = TorchEngine.from_pretrained(model_path, name=name, seed=seed)
        self.host = ray.util.get_node_ip_address()
        listener = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        listener.bind((self.host, 0))
        self.port: int = listener.getsockname()[1]
        config = uvicorn.Config(create_app(self.engine), log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [listener]}, name="relight-torch-server", daemon=True
        )
        self._thread.start()

    def get_server_address(self) -> tuple[str, int]:
        return self.host, self.port

    def update_weights(self, named_tensors: list[tuple[str, torch.Tensor]]) -> int:
        """Load the actor's full weights; sampling waits for the swap. Returns the engine's policy version."""
        model = self.engine.model
        state = dict(named_tensors)
        with self.engine.updating_weights():
            missing, unexpected = model.load_state_dict(state, strict=False)
        tied = {"lm_head.weight"} if model.config.tie_word_embeddings else set()
        if unexpected or set(missing) - tied:
            raise KeyError(
                f"the actor's weights do not fit the served model: missing {missing}, unexpected {unexpected}"
            )
        return self.engine.policy_version

    def logprob(self, prompt_ids: list[int], token_ids: list[int]) -> list[float]:
        """Logprobs the served weights give ``token_ids`` after ``prompt_ids`` (how tests see a sync land).

        Read it while nothing updates the weights (between updates, or with the gateway paused).
        """
        ids = torch.tensor([prompt_ids + token_ids])
        with torch.no_grad():
            logits = self.engine.model(ids).logits[0, len(prompt_ids) - 1 : -1]
        chosen = torch.log_softmax(logits.float(), dim=-1).gather(1, torch.tensor(token_ids)[:, None])
        return chosen[:, 0].tolist()

    # What verl's replicas and checkpoint manager ask of every rollout server. On the CPU there is no
    # device memory to free or restore, so each is a no-op: relight's gateway keeps agents away meanwhile.

    def sleep(self) -> None:
        return None

    def wake_up(self) -> None:
        return None

    def wait_for_requests_to_drain(self) -> None:
        return None  # relight's gateway has drained before verl is asked to sleep

    def clear_kv_cache(self) -> None:
        return None

    def release_kv_cache(self) -> None:
        return None

    def resume_kv_cache(self) -> None:
        return None

    def abort_all_requests(self) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}

    def resume_generation(self) -> None:
        return None

    def start_profile(self, **_: Any) -> None:
        return None

    def stop_profile(self) -> None:
        return None


class RelightTorchReplica(RolloutReplica):
    """A relight-torch server per replica, on its training worker's node (hybrid mode, as vLLM's)."""

    async def launch_servers(self) -> None:
        if self.world_size != 1:
            raise ValueError(
                f"the {NAME} rollout serves one process per replica: set tensor, data and pipeline "
                f"parallel sizes of the rollout to 1 (got a world size of {self.world_size})"
            )
        model_path = self.model_config.path  # a local folder or a hub id, as the training workers load it
        name = served_model_name(self.config, model_path)
        node_id = await self.workers[0].__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id())
        server = (
            ray.remote(RelightTorchServer)
            .options(
                name=_server_name(self.replica_rank),
                scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                    node_id=node_id, soft=False
                ),
                num_cpus=0,  # shares its worker's cores, as vLLM shares its worker's GPU
                max_concurrency=8,
            )
            .remote(model_path, name)
        )
        host, port = await server.get_server_address.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def rollout_worker_use_gpu(self) -> bool:
        return False


class ServerAdapter(BaseRollout):
    """Inside a training worker: verl's weight sync sends the FSDP actor's full weights to the replica's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, model_config, device_mesh, *args, **kwargs)
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        self.replica_rank = rank  # one process per replica (RelightTorchReplica checks)
        self._server: Any = None

    def _server_handle(self) -> Any:
        if self._server is None:
            self._server = ray.get_actor(_server_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(
        self,
        weights: Generator[tuple[str, torch.Tensor], None, None],
        wire_format: str = "named_tensors",
        **kwargs: Any,
    ) -> None:
        if wire_format != "named_tensors":
            raise ValueError(
                f"the {NAME} rollout takes full tensors (wire_format 'named_tensors'), not {wire_format!r}"
            )
        if kwargs.get("peft_config") is not None:
            raise ValueError(f"the {NAME} rollout takes merged weights: set actor_rollout_ref.model.lora.merge=true")
        named = [(name, tensor.detach().to("cpu", copy=True)) for name, tensor in weights]
        await self._server_handle().update_weights.remote(named)
