"""The one module that touches verl's internals: verl's PPO trainer, stepped one relight batch at a time.

verl's ``RayPPOTrainer`` builds everything a PPO step needs on Ray (the FSDP actor, reference and
critic workers, the vLLM replicas and the checkpoint engine that syncs weights into them) and then
runs its own loop: prompts from a dataset, generation by verl's agent loop, one update. relight
brings its own rollouts, made by unchanged agents through the gateway, so :class:`RelightPPOTrainer`
keeps verl's setup and per-step methods and replaces the loop with :meth:`RelightPPOTrainer.step`,
which does for one batch what ``RayPPOTrainer.fit`` does after generation.

What it relies on in verl 0.9.x (check these when moving the pin):

* ``verl.trainer.main_ppo_v0.BaseTaskRunner``: role → worker-class mapping and resource pools,
  the same calls ``main_ppo`` makes.
* ``RayPPOTrainer`` (v0; verl 0.9 marks it deprecated for the v1 trainer, whose TransferQueue the
  base package does not install and whose loop owns generation too):

  - overrides ``_create_dataloader`` (there is no dataset);
  - calls ``init_workers``, ``_load_checkpoint``, ``_balance_batch``, ``_compute_old_log_prob``,
    ``_compute_ref_log_prob``, ``_compute_values``, ``_update_critic``, ``_update_actor``;
  - reads ``actor_rollout_wg``, ``critic_wg``, ``use_critic``, ``use_reference_policy``,
    ``kl_ctrl_in_reward``, ``llm_server_manager`` (its ``get_addresses``, ``get_replicas``),
    ``checkpoint_manager``, ``global_steps``.
* ``CheckpointEngineManager.sleep_replicas`` / ``update_weights``: vLLM frees the GPU while the
  actor trains and gets the new weights back by verl's own weight-sync path.
* The worker groups' ``save_checkpoint`` / ``load_checkpoint``, laid out as verl lays them out
  (``global_step_N/actor``, ``global_step_N/critic``, ``latest_checkpointed_iteration.txt``), so
  verl's resume logic finds relight's checkpoints and the other way round.

On GPUs this path needs verl's ``vllm``/``fsdp`` extras (the ``gpu`` tests). With ``trainer.device=cpu``
it runs on the CPU through :mod:`relight_verl.cpu` (vLLM's CPU build, started by relight, serving; after
verl's weight sync each replica loads the weights it wrote), which the slow ``test_cpu_e2e`` test drives
end to end.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import ray
from omegaconf import DictConfig, OmegaConf, open_dict
from verl import DataProto
from verl.trainer.constants_ppo import get_ppo_ray_runtime_env
from verl.trainer.ppo.core_algos import agg_loss
from verl.trainer.ppo.utils import Role, need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config
from verl.utils.debug import marked_timer
from verl.utils.metric import reduce_metrics

from relight_verl.advantages import compute_advantages
from relight_verl.asynchronous import correct_off_policy

with warnings.catch_warnings():
    # Import-time notices from verl itself (a Ray API Ray marks deprecated, optional engines such as
    # torchtitan that are not installed): theirs to fix, and nothing a relight user can act on.
    warnings.simplefilter("ignore")
    from verl.trainer.main_ppo_v0 import BaseTaskRunner
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer, apply_kl_penalty

__all__ = ["RelightPPOTrainer", "connect_ray"]

LATEST = "latest_checkpointed_iteration.txt"


def connect_ray(config: DictConfig, address: str | None) -> bool:
    """Join the Ray cluster at ``address`` (``"auto"``, ``"host:6379"``) or start a local one.

    Workers get verl's runtime environment (tokenizer, NCCL and vLLM settings) either way. Returns
    False when this process was connected to Ray already (by its caller), True when it connects here.
    """
    if ray.is_initialized():
        return False
    # As verl's main_ppo does it: verl's defaults, then the config's ray_kwargs.ray_init on top.
    init = config.ray_kwargs.get("ray_init", {})
    runtime_env = OmegaConf.merge(get_ppo_ray_runtime_env(config), init.get("runtime_env", {}))
    kwargs: dict[str, Any] = OmegaConf.to_container(OmegaConf.create({**init, "runtime_env": runtime_env}))  # type: ignore[assignment]
    if config.trainer.device == "cpu":
        from relight_verl.cpu.plugin import ray_options

        processes = config.trainer.nnodes * config.trainer.n_gpus_per_node
        kwargs = ray_options(kwargs, processes=processes, local=address is None)
    ray.init(address=address, **kwargs)
    return True


def _resource_pools(runner: BaseTaskRunner, config: DictConfig) -> Any:
    manager = runner.init_resource_pool_mgr(config)
    if config.trainer.device != "cpu":
        return manager
    from relight_verl.cpu.resources import on_cpu

    return on_cpu(manager)


class RelightPPOTrainer(RayPPOTrainer):
    """verl's PPO machinery on Ray, without verl's data loader and rollout loop."""

    def __init__(self, config: DictConfig) -> None:
        OmegaConf.resolve(config)
        validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
        runner = BaseTaskRunner()
        _, worker_group_cls = runner.add_actor_rollout_worker(config)
        runner.add_critic_worker(config)
        model = omega_conf_to_dataclass(config.actor_rollout_ref.model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # RayPPOTrainer's deprecation notice (see above)
            super().__init__(
                config=config,
                tokenizer=model.tokenizer,
                processor=model.processor,
                role_worker_mapping=runner.role_worker_mapping,
                resource_pool_manager=_resource_pools(runner, config),
                ray_worker_group_cls=worker_group_cls,
            )
        self.algorithm = omega_conf_to_dataclass(config.algorithm)
        self.global_steps = 0

    def _create_dataloader(self, *_: Any, **__: Any) -> None:
        """relight feeds batches; only the schedule length verl's optimizers read is set here."""
        steps = self.config.trainer.total_training_steps
        self.total_training_steps = steps if steps is not None else -1
        if steps is not None:
            with open_dict(self.config):
                self.config.actor_rollout_ref.actor.optim.total_training_steps = steps
                self.config.critic.optim.total_training_steps = steps

    def start(self) -> list[str]:
        """Start the workers and vLLM replicas, resume if configured, and serve the current weights.

        Returns the replicas' addresses as verl reports them (``host:port``, ``[v6]:port``).
        """
        self.init_workers()  # ends with the replicas asleep
        self._load_checkpoint()  # honours trainer.resume_mode / resume_from_path; sets global_steps
        self._sync_weights()
        return list(self.llm_server_manager.get_addresses())

    def replicas(self) -> list[Any]:
        """verl's rollout replicas (a :class:`~relight_verl.cpu.rollout.VLLMReplica` each on the CPU)."""
        return list(self.llm_server_manager.get_replicas())

    def _sync_weights(self) -> None:
        """verl's weight sync from the actor to the replicas; on the CPU, then each replica's vLLM server
        loads what the sync wrote (:mod:`relight_verl.cpu.rollout`)."""
        self.checkpoint_manager.update_weights(self.global_steps)
        if self.config.trainer.device == "cpu":
            from relight_verl.cpu.rollout import serve_written_weights

            serve_written_weights(self.replicas(), self.global_steps)

    def stop_servers(self) -> None:
        """Stop the vLLM servers this process runs (the CPU's); verl's own replicas end with Ray."""
        for replica in self.replicas():
            stop = getattr(replica, "stop", None)
            if stop is not None:
                stop()

    def step(
        self, batch: DataProto, *, recompute_old_log_probs: bool, save_to: Path | None = None
    ) -> tuple[DataProto, dict[str, Any], dict[str, float]]:
        """One PPO update on ``batch`` with the replicas asleep, then the new weights served.

        With ``save_to`` the new weights are also saved there, while the replicas still sleep.
        Returns the batch (advantages and the rest filled in), verl's metrics and the stage timings.
        """
        self.global_steps += 1
        metrics: dict[str, Any] = {}
        timing: dict[str, float] = {}
        config = self.config
        with marked_timer("step", timing):
            with marked_timer("sleep_replicas", timing):
                self.checkpoint_manager.sleep_replicas()
            batch.meta_info["temperature"] = config.actor_rollout_ref.rollout.temperature
            if config.trainer.balance_batch:
                self._balance_batch(batch, metrics=metrics)
            if recompute_old_log_probs or "old_log_probs" not in batch.batch:
                batch = self._recompute_old_log_probs(batch, metrics, timing)
                batch, correction = correct_off_policy(batch, config.algorithm)  # asynchronous training's TIS
                metrics.update(correction)
            if self.use_reference_policy:
                with marked_timer(str(Role.RefPolicy), timing):
                    batch = batch.union(self._compute_ref_log_prob(batch))
            if self.use_critic:
                with marked_timer("values", timing):
                    batch = batch.union(self._compute_values(batch))
            with marked_timer("adv", timing):
                if config.algorithm.use_kl_in_reward:
                    batch, kl_metrics = apply_kl_penalty(
                        batch, kl_ctrl=self.kl_ctrl_in_reward, kl_penalty=config.algorithm.kl_penalty
                    )
                    metrics.update(kl_metrics)
                compute_advantages(batch, self.algorithm)
            if self.use_critic:
                with marked_timer("update_critic", timing):
                    metrics.update(reduce_metrics(self._update_critic(batch).meta_info["metrics"]))
            if config.trainer.critic_warmup <= self.global_steps:
                with marked_timer("update_actor", timing):
                    metrics.update(reduce_metrics(self._update_actor(batch).meta_info["metrics"]))
            if save_to is not None:
                with marked_timer("save_checkpoint", timing):
                    self._save_asleep(save_to)
            with marked_timer("update_weights", timing):
                self._sync_weights()
        return batch, metrics, timing

    def _recompute_old_log_probs(
        self, batch: DataProto, metrics: dict[str, Any], timing: dict[str, float]
    ) -> DataProto:
        """The actor's own logprobs as the PPO anchor (verl's "decoupled" mode), with its entropy."""
        if "old_log_probs" in batch.batch:
            batch.pop(batch_keys=["old_log_probs"])
        with marked_timer("old_log_prob", timing):
            old, mfu = self._compute_old_log_prob(batch)
        actor = self.config.actor_rollout_ref.actor
        entropy = agg_loss(
            loss_mat=old.batch.pop("entropys"),
            loss_mask=batch.batch["response_mask"],
            loss_agg_mode=actor.loss_agg_mode,
            loss_scale_factor=actor.loss_scale_factor,
        )
        metrics.update({"actor/entropy": entropy.item(), "perf/mfu/actor_infer": mfu})
        batch = batch.union(old)
        if "rollout_log_probs" in batch.batch:
            from verl.utils.debug.metrics import calculate_debug_metrics

            metrics.update(calculate_debug_metrics(batch))  # how far vLLM's logprobs are from the actor's
        return batch

    # -- checkpoints, in verl's layout ------------------------------------------------------------

    def save(self, root: Path) -> Path:
        """Save actor (and critic) under ``root/global_step_N``; the replicas sleep meanwhile.

        On the CPU nothing sleeps and the served weights are already these: the vLLM servers go on
        serving (the gateway may have resumed), with nothing pushed again.
        """
        if self.config.trainer.device == "cpu":
            return self._save_asleep(root)
        self.checkpoint_manager.sleep_replicas()
        folder = self._save_asleep(root)
        self._sync_weights()
        return folder

    def _save_asleep(self, root: Path) -> Path:
        root.mkdir(parents=True, exist_ok=True)
        folder = root / f"global_step_{self.global_steps}"
        trainer = self.config.trainer
        self.actor_rollout_wg.save_checkpoint(
            str(folder / "actor"), None, self.global_steps, max_ckpt_to_keep=trainer.max_actor_ckpt_to_keep
        )
        if self.use_critic:
            self.critic_wg.save_checkpoint(
                str(folder / str(Role.Critic)),
                None,
                self.global_steps,
                max_ckpt_to_keep=trainer.max_critic_ckpt_to_keep,
            )
        (root / LATEST).write_text(str(self.global_steps))
        return folder

    def load(self, path: Path) -> None:
        """Load ``path`` (a ``global_step_N`` folder, or a root holding several: the latest) and serve it."""
        folder = path / f"global_step_{(path / LATEST).read_text().strip()}" if (path / LATEST).exists() else path
        if not folder.name.startswith("global_step_"):
            raise FileNotFoundError(f"{path} is neither a global_step_N checkpoint nor a folder holding {LATEST}")
        self.checkpoint_manager.sleep_replicas()
        self.actor_rollout_wg.load_checkpoint(str(folder / "actor"))
        if self.use_critic:
            self.critic_wg.load_checkpoint(str(folder / str(Role.Critic)))
        self.global_steps = int(folder.name.removeprefix("global_step_"))
        self._sync_weights()
