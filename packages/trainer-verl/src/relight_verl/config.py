"""The relight-side configuration of a verl run, and its mapping onto verl's Hydra config.

verl is configured by a large Hydra tree (``verl/trainer/config/ppo_trainer.yaml``). Most of it
has sane defaults; what a relight user must choose fits in :class:`VerlConfig`, a typed, validated
model. :meth:`VerlConfig.hydra_overrides` turns it into Hydra override strings, and
:func:`to_verl_config` composes verl's own ``ppo_trainer`` config with them, so the result is
exactly what ``python -m verl.trainer.main_ppo key=value ...`` would have built. Anything
:class:`VerlConfig` does not name passes through :attr:`VerlConfig.overrides`, applied last.

Relight decides how many rollouts to run per task, so verl's ``rollout.n`` is always 1 here and
batch sizes count transitions (one LLM call each), not prompts.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:
    from omegaconf import DictConfig

__all__ = ["Estimator", "VerlConfig", "to_verl_config"]

Estimator = Literal["grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gae"]
"""verl's advantage estimators that relight drives; ``gae`` is PPO with a critic."""


class VerlConfig(BaseModel):
    """What a verl training run needs from the user; every other verl setting keeps verl's default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(min_length=1)
    """A Hugging Face model id or a local directory (the same on every node)."""
    served_model_name: str | None = None
    """The name agents put in ``model``; defaults to :attr:`model`."""

    # -- cluster -------------------------------------------------------------------------------
    nnodes: int = Field(default=1, ge=1)
    n_gpus_per_node: int = Field(default=1, ge=1)
    ray_address: str | None = None
    """``None`` starts a local Ray; ``"auto"`` or ``"host:6379"`` joins a cluster made with ``ray start``."""
    device: Literal["cuda", "cpu"] = "cuda"
    """``cpu`` runs verl's trainer, FSDP workers and weight sync on the CPU (gloo collectives), with a
    vLLM server relight starts from the vLLM environment serving rollouts (one per training process):
    a debugging and CI mode for small models (see :mod:`relight_verl.cpu`). ``n_gpus_per_node`` then
    counts training processes."""
    tensor_parallel_size: int = Field(default=1, ge=1)
    """GPUs per vLLM replica; each replica is one gateway upstream."""
    gpu_memory_utilization: float = Field(default=0.5, gt=0, le=1)
    """Share of GPU memory vLLM may take while it serves (it sleeps while the actor trains)."""
    temperature: float = Field(default=1.0, gt=0)
    """The temperature agents sample with. The actor scores tokens at it, so the ratio to the
    sampling logprobs is only right when agents use it too (OpenAI clients default to 1.0)."""

    # -- batches and lengths ------------------------------------------------------------------
    mini_batch_size: int = Field(default=16, ge=1)
    """Transitions per optimizer step, over all GPUs. A batch is padded to a multiple of it."""
    micro_batch_size_per_gpu: int = Field(default=4, ge=1)
    """Transitions per forward/backward pass on one GPU (gradient accumulation makes up the rest)."""
    ppo_epochs: int = Field(default=1, ge=1)
    max_prompt_length: int = Field(default=2048, ge=1)
    """Longer prompts are dropped from training (and counted), never truncated."""
    max_response_length: int = Field(default=1024, ge=1)

    # -- algorithm ----------------------------------------------------------------------------
    algorithm: Estimator = "grpo"
    lr: float = Field(default=1e-6, gt=0)
    critic_lr: float = Field(default=1e-5, gt=0)
    """Only used by ``gae``."""
    lora_rank: int = Field(default=0, ge=0)
    """0 trains every weight; >0 trains LoRA adapters of this rank on all linear layers."""
    lora_alpha: int = Field(default=16, ge=1)
    clip_ratio: float = Field(default=0.2, gt=0)
    kl_coef: float = Field(default=0.0, ge=0)
    """Weight of a KL-to-reference loss; >0 loads a reference policy."""
    entropy_coeff: float = Field(default=0.0, ge=0)
    gamma: float = Field(default=1.0, ge=0, le=1)
    lam: float = Field(default=1.0, ge=0, le=1)
    norm_adv_by_std: bool = True
    """GRPO: divide by the group's standard deviation (False is Dr. GRPO)."""
    recompute_old_logprobs: bool = False
    """False trains against the logprobs vLLM sampled with; True recomputes them with the actor first."""
    param_offload: bool = False
    optimizer_offload: bool = False
    gradient_checkpointing: bool = True

    # -- checkpoints, validation, logging ------------------------------------------------------
    checkpoint_dir: str = "checkpoints/relight"
    save_every: int = Field(default=0, ge=0)
    """Save every N updates, inside the update while vLLM sleeps; 0 saves only when asked to."""
    resume: Literal["auto", "disable"] | Path = "auto"
    """``auto`` resumes from the latest checkpoint under :attr:`checkpoint_dir`, or give a ``global_step_N`` folder."""
    total_updates: int | None = Field(default=None, ge=1)
    """Sets verl's learning-rate schedule length; None keeps the learning rate constant."""
    loggers: tuple[str, ...] = ("console",)
    """verl tracking backends: console, wandb, tensorboard, mlflow, swanlab, …"""
    project: str = "relight"
    experiment: str = "run"

    overrides: tuple[str, ...] = ()
    """Hydra overrides for anything else (``actor_rollout_ref.rollout.enforce_eager=true``), applied last."""

    @model_validator(mode="after")
    def _fits_the_cluster(self) -> Self:
        gpus = self.nnodes * self.n_gpus_per_node
        if self.mini_batch_size % gpus:
            raise ValueError(
                f"mini_batch_size ({self.mini_batch_size}) must be a multiple of the number of GPUs "
                f"(nnodes × n_gpus_per_node = {gpus}), so each GPU gets whole transitions"
            )
        if self.n_gpus_per_node % self.tensor_parallel_size:
            raise ValueError(
                f"n_gpus_per_node ({self.n_gpus_per_node}) must be a multiple of "
                f"tensor_parallel_size ({self.tensor_parallel_size})"
            )
        if self.device == "cpu" and self.tensor_parallel_size != 1:
            raise ValueError(
                f"tensor_parallel_size ({self.tensor_parallel_size}) must be 1 with device 'cpu': "
                "one vLLM server serves each training process"
            )
        return self

    @property
    def n_gpus(self) -> int:
        return self.nnodes * self.n_gpus_per_node

    @property
    def name(self) -> str:
        """The model name the vLLM servers answer to."""
        return self.served_model_name or self.model

    @classmethod
    def from_file(cls, path: str | Path) -> Self:
        """Load a YAML file of :class:`VerlConfig` fields (see ``examples/`` of this package)."""
        import yaml

        data = yaml.safe_load(Path(path).read_text())
        return cls.model_validate(data)

    def hydra_overrides(self) -> list[str]:
        """This config as Hydra override strings over verl's ``ppo_trainer`` config."""
        actor = "actor_rollout_ref.actor"
        rollout = "actor_rollout_ref.rollout"
        micro = self.micro_batch_size_per_gpu
        settings: dict[str, object] = {
            "trainer.use_v1": False,
            "trainer.nnodes": self.nnodes,
            "trainer.n_gpus_per_node": self.n_gpus_per_node,
            "trainer.project_name": self.project,
            "trainer.experiment_name": self.experiment,
            "trainer.logger": list(self.loggers),
            "trainer.default_local_dir": self.checkpoint_dir,
            "trainer.save_freq": self.save_every or -1,
            "trainer.resume_mode": "resume_path" if isinstance(self.resume, Path) else self.resume,
            "trainer.resume_from_path": str(self.resume) if isinstance(self.resume, Path) else None,
            "trainer.total_training_steps": self.total_updates,
            "data.train_batch_size": self.mini_batch_size,
            "data.max_prompt_length": self.max_prompt_length,
            "data.max_response_length": self.max_response_length,
            "algorithm.adv_estimator": self.algorithm,
            "algorithm.gamma": self.gamma,
            "algorithm.lam": self.lam,
            "algorithm.norm_adv_by_std_in_grpo": self.norm_adv_by_std,
            "actor_rollout_ref.model.path": self.model,
            "actor_rollout_ref.model.lora_rank": self.lora_rank,
            "actor_rollout_ref.model.lora_alpha": self.lora_alpha,
            "actor_rollout_ref.model.enable_gradient_checkpointing": self.gradient_checkpointing,
            f"{actor}.optim.lr": self.lr,
            f"{actor}.ppo_mini_batch_size": self.mini_batch_size,
            f"{actor}.ppo_micro_batch_size_per_gpu": micro,
            f"{actor}.ppo_epochs": self.ppo_epochs,
            f"{actor}.clip_ratio": self.clip_ratio,
            f"{actor}.clip_ratio_low": self.clip_ratio,
            f"{actor}.clip_ratio_high": self.clip_ratio,
            f"{actor}.use_kl_loss": self.kl_coef > 0,
            f"{actor}.kl_loss_coef": self.kl_coef,
            f"{actor}.entropy_coeff": self.entropy_coeff,
            f"{actor}.calculate_entropy": True,
            f"{actor}.fsdp_config.param_offload": self.param_offload,
            f"{actor}.fsdp_config.optimizer_offload": self.optimizer_offload,
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": micro,
            f"{rollout}.name": "vllm",
            f"{rollout}.n": 1,
            f"{rollout}.calculate_log_probs": True,
            f"{rollout}.temperature": self.temperature,
            # verl's own agent loop and reward workers stay idle (relight's runners do that work): one each.
            f"{rollout}.agent.num_workers": 1,
            "reward.num_workers": 1,
            f"{rollout}.tensor_model_parallel_size": self.tensor_parallel_size,
            f"{rollout}.gpu_memory_utilization": self.gpu_memory_utilization,
            f"{rollout}.log_prob_micro_batch_size_per_gpu": micro,
            f"{rollout}.max_model_len": self.max_prompt_length + self.max_response_length,
            f"++{rollout}.engine_kwargs.vllm.served_model_name": self.name,
            "critic.enable": self.algorithm == "gae",
            "critic.model.path": self.model,
            "critic.optim.lr": self.critic_lr,
            "critic.ppo_micro_batch_size_per_gpu": micro,
        }
        if self.device == "cpu":
            settings |= _cpu_settings(self.name, Path(self.checkpoint_dir) / "served-weights")
        return [f"{key}={_hydra_value(value)}" for key, value in settings.items()] + list(self.overrides)


def _cpu_settings(name: str, weights_dir: Path) -> dict[str, object]:
    """What verl needs to run on the CPU: vLLM's CPU build serving, FSDP2 over gloo, no CUDA-only kernels.

    FSDP2 (``fully_shard``) runs on CPU tensors, FSDP1 does not; attention is PyTorch's SDPA instead
    of flash-attention, sequences stay padded (verl's padding removal feeds flash-attention), nothing
    is compiled, and parameters stay in float32, the precision vLLM serves in here. The training
    workers write each version's weights under ``weights_dir`` for the servers to load.
    """
    actor = "actor_rollout_ref.actor"
    engine = "++actor_rollout_ref.rollout.engine_kwargs.relight_vllm"
    return {
        "trainer.device": "cpu",
        "actor_rollout_ref.rollout.name": "relight_vllm",
        f"{engine}.served_model_name": name,
        f"{engine}.weights_dir": str(weights_dir),
        f"{actor}.strategy": "fsdp2",
        "critic.strategy": "fsdp2",
        "actor_rollout_ref.model.use_remove_padding": False,
        "critic.model.use_remove_padding": False,
        "++actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
        "++critic.model.override_config.attn_implementation": "sdpa",
        f"{actor}.use_torch_compile": False,
        f"{actor}.fsdp_config.use_torch_compile": False,
        f"{actor}.fsdp_config.dtype": "float32",
        "++actor_rollout_ref.ref.fsdp_config.dtype": "float32",
        f"++{actor}.fsdp_config.mixed_precision.param_dtype": "fp32",
    }


def to_verl_config(config: VerlConfig) -> DictConfig:
    """Compose verl's own ``ppo_trainer`` Hydra config with ``config``'s overrides.

    Raises hydra's ``ConfigCompositionException`` naming the key when an override does not fit
    verl's schema (a misspelt key in :attr:`VerlConfig.overrides`, say).
    """
    import verl.trainer.config
    from hydra import compose, initialize_config_dir

    config_dir = Path(verl.trainer.config.__file__).parent
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name="ppo_trainer", overrides=config.hydra_overrides())


def _hydra_value(value: object) -> str:
    """Render a value in Hydra's override grammar; strings are quoted so paths and names survive."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot pass a non-finite number ({value!r}) to verl")
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace("'", "\\'")
        return f"'{escaped}'"
    if isinstance(value, list):
        return "[" + ",".join(_hydra_value(item) for item in value) + "]"  # type: ignore[reportUnknownVariableType]
    raise TypeError(f"cannot render {value!r} as a Hydra override value")
