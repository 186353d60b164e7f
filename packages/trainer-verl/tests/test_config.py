"""The relight config maps onto verl's Hydra config, and verl's own loader and config classes accept it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf
from pydantic import ValidationError
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config
from verl.workers.config import FSDPActorConfig, FSDPCriticConfig, HFModelConfig, RolloutConfig

from relight_verl.config import VerlConfig, to_verl_config

EXAMPLES = sorted((Path(__file__).parents[1] / "examples").glob("*.yaml"))


def accepted_by_verl(config: DictConfig) -> None:
    """What verl's ``main_ppo`` does with a config before it starts any worker."""
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    assert isinstance(omega_conf_to_dataclass(config.algorithm), AlgoConfig)
    assert isinstance(omega_conf_to_dataclass(config.actor_rollout_ref.actor), FSDPActorConfig)
    assert isinstance(omega_conf_to_dataclass(config.actor_rollout_ref.rollout), RolloutConfig)


def test_every_field_lands_where_verl_reads_it(tmp_path: Path) -> None:
    config = VerlConfig(
        model="/models/My Model's copy",
        served_model_name="coder",
        nnodes=2,
        n_gpus_per_node=4,
        tensor_parallel_size=2,
        mini_batch_size=32,
        micro_batch_size_per_gpu=2,
        max_prompt_length=1000,
        max_response_length=500,
        algorithm="rloo",
        temperature=0.7,
        lr=3e-6,
        lora_rank=16,
        kl_coef=0.01,
        save_every=5,
        resume=tmp_path / "global_step_40",
        loggers=("console", "tensorboard"),
    )
    verl = to_verl_config(config)
    actor, rollout = verl.actor_rollout_ref.actor, verl.actor_rollout_ref.rollout
    assert verl.actor_rollout_ref.model.path == "/models/My Model's copy"
    assert rollout.engine_kwargs.vllm.served_model_name == "coder"
    assert (verl.trainer.nnodes, verl.trainer.n_gpus_per_node, rollout.tensor_model_parallel_size) == (2, 4, 2)
    assert (actor.ppo_mini_batch_size, actor.ppo_micro_batch_size_per_gpu, rollout.n) == (32, 2, 1)
    assert (rollout.prompt_length, rollout.response_length, rollout.max_model_len) == (1000, 500, 1500)
    assert verl.algorithm.adv_estimator == "rloo"
    assert rollout.temperature == pytest.approx(0.7)
    assert (rollout.agent.num_workers, verl.reward.num_workers) == (1, 1)  # verl's own loops stay idle
    assert actor.optim.lr == pytest.approx(3e-6)
    assert verl.actor_rollout_ref.model.lora_rank == 16
    assert (actor.use_kl_loss, actor.kl_loss_coef) == (True, 0.01)
    assert verl.trainer.save_freq == 5
    assert verl.trainer.resume_mode == "resume_path"
    assert verl.trainer.resume_from_path == str(tmp_path / "global_step_40")
    assert list(verl.trainer.logger) == ["console", "tensorboard"]
    assert verl.critic.enable is False
    assert need_reference_policy(verl)


@pytest.mark.parametrize("algorithm", ["grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gae"])
def test_verl_accepts_the_config_for_every_estimator(tiny_model: Path, algorithm: str) -> None:
    # (No LoRA here: verl checks a LoRA rank against the installed vLLM, which a CPU machine lacks.)
    config = VerlConfig(model=str(tiny_model), algorithm=algorithm, kl_coef=0.001)  # type: ignore[arg-type]
    verl = to_verl_config(config)
    accepted_by_verl(verl)
    model = omega_conf_to_dataclass(verl.actor_rollout_ref.model)
    assert isinstance(model, HFModelConfig)
    assert model.architectures == ["Qwen2ForCausalLM"]
    assert need_critic(verl) == (algorithm == "gae")
    if algorithm == "gae":
        assert isinstance(omega_conf_to_dataclass(verl.critic), FSDPCriticConfig)


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_example_configs_are_accepted_by_verl(path: Path) -> None:
    config = VerlConfig.from_file(path)
    accepted_by_verl(to_verl_config(config))


def test_the_examples_are_the_ones_the_readme_promises() -> None:
    one_gpu, two_nodes = (VerlConfig.from_file(path) for path in EXAMPLES)
    assert (one_gpu.model, one_gpu.n_gpus) == ("Qwen/Qwen2.5-Coder-1.5B-Instruct", 1)
    assert (two_nodes.nnodes, two_nodes.n_gpus_per_node, two_nodes.ray_address) == (2, 8, "auto")


def test_overrides_pass_through_and_win() -> None:
    config = VerlConfig(
        model="m",
        overrides=("actor_rollout_ref.rollout.enforce_eager=true", "actor_rollout_ref.actor.optim.lr=2e-5"),
    )
    verl = to_verl_config(config)
    assert verl.actor_rollout_ref.rollout.enforce_eager is True
    assert verl.actor_rollout_ref.actor.optim.lr == pytest.approx(2e-5)


def test_an_override_verl_does_not_know_is_refused_by_name() -> None:
    config = VerlConfig(model="m", overrides=("actor_rollout_ref.actor.no_such_option=1",))
    with pytest.raises(ConfigCompositionException, match="no_such_option"):
        to_verl_config(config)


def test_the_composed_config_round_trips_through_yaml(tmp_path: Path) -> None:
    verl = to_verl_config(VerlConfig(model="m"))
    path = tmp_path / "verl.yaml"
    OmegaConf.save(verl, path)
    assert OmegaConf.load(path).actor_rollout_ref.model.path == "m"


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"n_gpus_per_node": 8, "mini_batch_size": 12}, "mini_batch_size"),
        ({"n_gpus_per_node": 4, "tensor_parallel_size": 3, "mini_batch_size": 12}, "tensor_parallel_size"),
        ({"device": "cpu", "n_gpus_per_node": 2, "tensor_parallel_size": 2}, "tensor_parallel_size"),
        ({"device": "tpu"}, "device"),
        ({"algorithm": "ppo"}, "algorithm"),
        ({"lr": 0}, "lr"),
        ({"no_such_field": 1}, "no_such_field"),
    ],
)
def test_bad_values_are_refused_by_field_name(fields: dict[str, object], named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        VerlConfig.model_validate({"model": "m", **fields})


@pytest.mark.parametrize("algorithm", ["grpo", "gae"])
def test_the_cpu_mode_is_accepted_by_verl_and_serves_with_vllm(
    tiny_model: Path, algorithm: str, tmp_path: Path
) -> None:
    config = VerlConfig(
        model=str(tiny_model),
        served_model_name="tiny",
        algorithm=algorithm,
        device="cpu",
        checkpoint_dir=str(tmp_path),
    )
    verl = to_verl_config(config)
    accepted_by_verl(verl)
    rollout = verl.actor_rollout_ref.rollout
    served = rollout.engine_kwargs.relight_vllm
    assert (verl.trainer.device, rollout.name, served.served_model_name, served.weights_dir) == (
        "cpu",
        "relight_vllm",
        "tiny",
        str(tmp_path / "served-weights"),
    )
    assert verl.actor_rollout_ref.actor.strategy == verl.actor_rollout_ref.ref.strategy == "fsdp2"
    assert verl.critic.strategy == "fsdp2"
    assert not verl.actor_rollout_ref.model.use_remove_padding
    assert verl.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
