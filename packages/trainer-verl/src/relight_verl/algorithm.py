"""relight's :class:`relight.Algorithm` on verl: FSDP actor (and critic) on Ray, vLLM replicas as upstreams.

::

    algorithm = VerlAlgorithm(VerlConfig.from_file("examples/qwen2.5-coder-1.5b-1gpu.yaml"))
    Trainer(algorithm=algorithm, ...).fit(agent, train, val)

On first use (:meth:`VerlAlgorithm.start`, or :meth:`~VerlAlgorithm.upstreams` which calls it) it
joins or starts Ray, starts verl's workers and vLLM replicas on the GPUs, resumes from a checkpoint
if one is configured, and loads the current weights into vLLM. Each replica is one OpenAI-compatible
upstream of relight's gateway, which keeps a rollout on one replica and asks it for token ids and
logprobs. :meth:`~VerlAlgorithm.update` runs with the gateway paused: the transitions become a verl
batch, vLLM sleeps while verl's workers update the actor (and critic), and verl's weight sync wakes
vLLM with the new policy.

Needs GPUs and ``pip install 'relight-verl[gpu]'``, or runs on the CPU with ``device="cpu"`` and
``pip install 'relight-verl[cpu]'`` plus a vLLM environment (``make install-vllm``): relight starts vLLM's
CPU build there and pushes the actor's weights into it after each update (see :mod:`relight_verl.cpu`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue

from relight.algorithm import UpstreamTarget
from relight.records import Transition
from relight_verl.config import VerlConfig, to_verl_config

if TYPE_CHECKING:
    from relight_verl._ppo_trainer import RelightPPOTrainer
    from relight_verl.metrics import MetricsLog

__all__ = ["VerlAlgorithm", "global_step_folder", "replica_base_url"]


def replica_base_url(address: str) -> str:
    """The OpenAI base URL of a vLLM replica verl reports at ``address`` (``10.0.0.5:8000``, ``[::1]:8000``)."""
    return f"http://{address}/v1"


def global_step_folder(path: Path) -> Path:
    """The ``global_step_N`` folder :meth:`VerlAlgorithm.save` wrote under ``path`` (the latest), or ``path`` itself."""
    latest = path / "latest_checkpointed_iteration.txt"
    folder = path / f"global_step_{latest.read_text().strip()}" if latest.exists() else path
    if not folder.name.startswith("global_step_") or not folder.is_dir():
        raise FileNotFoundError(f"{path} is neither a global_step_N checkpoint nor a folder holding {latest.name}")
    return folder.resolve()


class VerlAlgorithm:
    """Trains a Hugging Face model with verl from relight transitions.

    Args:
        config: the run; or give its fields as keyword arguments (``VerlAlgorithm(model="…")``).
        metrics_file: where each update's metrics go as JSON lines; by default
            ``<checkpoint_dir>/metrics.jsonl``.
    """

    skips_flat_groups = False
    """A group whose rewards are all equal stays in verl's batch (advantage 0, yet counted in the loss's
    token mean and in its entropy and KL terms), so its calls count as trained."""

    def __init__(self, config: VerlConfig | None = None, *, metrics_file: Path | None = None, **fields: Any) -> None:
        if config is not None and fields:
            raise TypeError(f"give a VerlConfig or its fields, not both (got fields {sorted(fields)})")
        config = config if config is not None else VerlConfig.model_validate(fields)
        # Ray workers do not share the driver's working directory: give them an absolute path.
        self.config = config.model_copy(update={"checkpoint_dir": str(Path(config.checkpoint_dir).resolve())})
        self.metrics_file = metrics_file or Path(self.config.checkpoint_dir) / "metrics.jsonl"
        self._lock = threading.Lock()
        self._trainer: RelightPPOTrainer | None = None
        self._upstreams: list[Any] = []
        self._metrics: MetricsLog | None = None
        self._owns_ray = False
        self._last_update_end = 0.0

    @property
    def model(self) -> str:
        return self.config.name

    @property
    def policy_version(self) -> int:
        """Updates applied to the served weights (restored with a checkpoint)."""
        return self._trainer.global_steps if self._trainer is not None else 0

    def start(self) -> None:
        """Start Ray, verl's workers and the vLLM replicas (minutes for a large model); idempotent."""
        with self._lock:
            if self._trainer is not None:
                return
            if self.config.device == "cpu":
                from relight_verl.cpu.plugin import activate

                activate()  # before verl's trainer is imported: some of its modules read the device on import
            from omegaconf import OmegaConf

            from relight_verl._ppo_trainer import RelightPPOTrainer, connect_ray
            from relight_verl.metrics import MetricsLog

            verl_config = to_verl_config(self.config)
            self._owns_ray = connect_ray(verl_config, self.config.ray_address)
            trainer = RelightPPOTrainer(verl_config)
            addresses = trainer.start()
            if self.config.device == "cpu":  # vLLM servers run by this process, each with its upstream
                self._upstreams = [replica.upstream for replica in trainer.replicas()]
            else:
                self._upstreams = [replica_base_url(address) for address in addresses]
            self._metrics = MetricsLog(
                self.metrics_file,
                loggers=self.config.loggers,
                project=self.config.project,
                experiment=self.config.experiment,
                config=OmegaConf.to_container(verl_config, resolve=True),  # type: ignore[arg-type]
            )
            self._last_update_end = time.monotonic()
            self._trainer = trainer

    def upstreams(self) -> Sequence[UpstreamTarget]:
        """The vLLM replicas' OpenAI base URLs (``http://10.0.0.5:8000/v1``; on the CPU, upstreams that send
        each call to the current policy version); starts verl if needed."""
        self.start()
        return list(self._upstreams)

    def resources(self) -> Mapping[str, JsonValue]:
        return {}

    def set_policies(self, policies: Mapping[str, object]) -> None:
        """Refused: verl 0.9 trains and serves one policy per run (README, "Several policies, one per role")."""
        raise TypeError(
            f"VerlAlgorithm trains one policy, not {len(policies)} ({', '.join(policies)}): verl 0.9's actor "
            "holds one LoRA adapter (or one set of full weights) and its vLLM replicas serve that one adapter to "
            "every request (max_loras=1, a fixed adapter id), so calls cannot be served or trained per role. "
            "Train one role with TransitionBuilder(roles=...), or several policies on relight-torch's vLLM "
            "engine (relight_torch.vllm.VLLMGRPO)"
        )

    async def update(self, transitions: Sequence[Transition]) -> Mapping[str, float]:
        """One PPO update on ``transitions`` (the gateway is paused); returns its headline metrics.

        Every metric (verl's ~80) goes to the metrics file and the configured loggers. Runs in a
        worker thread: verl's driver calls block on Ray for the whole update.
        """
        return await asyncio.to_thread(self._update, transitions)

    def _update(self, transitions: Sequence[Transition]) -> dict[str, float]:
        from relight_verl.batch import build_batch
        from relight_verl.metrics import headline, update_metrics

        trainer = self._started()
        config = self.config
        batch, stats = build_batch(
            transitions,
            pad_token_id=trainer.tokenizer.pad_token_id,
            max_prompt_length=config.max_prompt_length,
            max_response_length=config.max_response_length,
            multiple_of=config.mini_batch_size,
        )
        loop_seconds = time.monotonic() - self._last_update_end
        if batch is None:
            metrics = {key: float(value) for key, value in stats.metrics().items()}  # nothing to learn from
        else:
            next_step = trainer.global_steps + 1
            save = config.save_every > 0 and next_step % config.save_every == 0
            batch, verl_metrics, timing = trainer.step(
                batch,
                recompute_old_log_probs=config.recompute_old_logprobs or stats.missing_logprobs > 0,
                save_to=Path(config.checkpoint_dir) if save else None,
            )
            metrics = {key: float(value) for key, value in verl_metrics.items()}
            metrics |= update_metrics(
                batch,
                stats,
                timing=timing,
                n_gpus=config.n_gpus,
                use_critic=trainer.use_critic,
                loop_seconds=loop_seconds,
            )
        assert self._metrics is not None
        self._metrics.log(trainer.global_steps, metrics)
        self._last_update_end = time.monotonic()
        return headline(metrics)

    def save(self, directory: Path) -> None:
        """Write actor (and critic) weights and optimizer state in verl's layout under ``directory``."""
        self._started().save(directory)

    def load(self, directory: Path) -> None:
        """Restore :meth:`save`'s checkpoint (``directory`` or one of its ``global_step_N``) and serve it.

        Before :meth:`start` (a resumed :meth:`relight.Trainer.fit` loads before it asks for upstreams)
        nothing is loaded twice: the checkpoint becomes verl's own ``resume_mode=resume_path``, which
        verl's trainer honours as it starts, instead of whatever ``resume`` said.
        """
        with self._lock:
            if self._trainer is None:
                self.config = self.config.model_copy(update={"resume": global_step_folder(Path(directory))})
                return
        self._started().load(directory)

    def close(self) -> None:
        """Flush the metrics and release the GPUs: ends this driver's Ray job (its workers and replicas).

        On the CPU the vLLM servers this process started stop too. A Ray connection the caller made
        before :meth:`start` is left open. Safe to call twice.
        """
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
        if self._trainer is not None:
            self._trainer.stop_servers()
        if self._trainer is not None and self._owns_ray:
            import ray

            ray.shutdown()
        self._trainer = None
        self._upstreams = []

    def _started(self) -> RelightPPOTrainer:
        self.start()
        assert self._trainer is not None
        return self._trainer
