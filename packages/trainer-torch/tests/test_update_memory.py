"""Token logprobs made a chunk of the vocabulary-wide logits at a time, and groups without signal left out:
both must leave the update exactly what it was (to float rounding), only cheaper."""

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from relight.records import Transition
from relight_testing.torch_updates import final_gradients
from relight_torch.algorithms.grpo import GRPO
from relight_torch.algorithms.objectives import PolicyGradientLoss
from relight_torch.learner.learner import Learner, Sample
from relight_torch.learner.optimizers import step_dropping_gradients
from relight_torch.learner.packing import pack, response_logprobs, token_logprobs
from relight_torch.models.tiny import tiny_engine


def rows(vocab: int, count: int, seed: int = 0) -> list[Sample]:
    """Prompts and responses of different lengths (so both paddings are exercised), advantages of both signs."""
    generator = torch.Generator().manual_seed(seed)

    def ids(length: int) -> list[int]:
        return torch.randint(3, vocab, (length,), generator=generator).tolist()

    return [Sample(ids(5 + 3 * i), ids(2 + 5 * (i % 4)), advantage=(-1.0) ** i * (0.5 + i / 10)) for i in range(count)]


def loss_and_gradient(model: torch.nn.Module, samples: list[Sample], chunk: int | None) -> tuple[float, torch.Tensor]:
    learner = Learner(copy.deepcopy(model), pad_id=0, logprob_chunk=chunk)  # type: ignore[arg-type]
    learner.optimizer.param_groups[0]["lr"] = 0.0
    with final_gradients(learner.model) as gradients:
        metrics = learner.update(samples, PolicyGradientLoss())
    return metrics["loss"], torch.cat([gradient.flatten() for gradient in gradients])


@pytest.mark.parametrize("chunk", [1, 7, 512])
def test_chunked_logprobs_and_loss_equal_the_whole_vocabulary_ones(chunk: int) -> None:
    with tiny_engine(seed=0) as engine:
        model = engine.model
        samples = rows(model.config.vocab_size, 6)
        batch = pack([s.prompt_ids for s in samples], [s.response_ids for s in samples], pad_id=engine.pad_id)
        with torch.no_grad():
            whole = response_logprobs(model, batch, chunk_tokens=None)
            chunked = response_logprobs(model, batch, chunk_tokens=chunk)
        assert torch.allclose(chunked, whole, atol=1e-5)
        assert bool((chunked[batch.response_mask == 0] == 0).all())
        whole_loss, whole_gradient = loss_and_gradient(model, samples, None)
        loss, gradient = loss_and_gradient(model, samples, chunk)
    assert loss == pytest.approx(whole_loss, abs=1e-5)
    assert torch.allclose(gradient, whole_gradient, atol=1e-5)


@pytest.mark.slow
def test_the_same_loss_and_output_layer_gradient_on_smollm2(smollm2_path: Path) -> None:
    """A real 49k vocabulary with tied embeddings: the output layer's gradient is the one chunking changes."""
    model = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
    samples = rows(model.config.vocab_size, 3)
    batch = pack([s.prompt_ids for s in samples], [s.response_ids for s in samples], pad_id=0)
    results = []
    for chunk in (None, 16):
        model.zero_grad(set_to_none=True)
        loss, _ = PolicyGradientLoss()(response_logprobs(model, batch, chunk_tokens=chunk), batch, samples)
        loss.backward()
        results.append((loss.item(), model.get_output_embeddings().weight.grad.clone()))
    (whole_loss, whole_gradient), (loss, gradient) = results
    assert loss == pytest.approx(whole_loss, abs=1e-5)
    difference = float((gradient - whole_gradient).abs().max() / whole_gradient.abs().max())
    assert difference < 1e-4, f"the gradients differ by {difference:.2e} of the largest"


@pytest.mark.parametrize("chunk", [1, 3, 64])
def test_the_chunked_backward_gives_autograds_gradients_for_rows_weights_and_bias(chunk: int) -> None:
    """The hand-written backward (logits made again, turned into their gradient in place) against autograd's."""
    generator = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(6, 23).double()
    hidden = torch.randn(10, 6, dtype=torch.float64, generator=generator, requires_grad=True)
    targets = torch.randint(0, 23, (10,), generator=generator)
    upstream = torch.randn(10, dtype=torch.float64, generator=generator)
    expected = torch.log_softmax(head(hidden), -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    wanted = torch.autograd.grad(expected, [hidden, head.weight, head.bias], upstream)
    scores = token_logprobs(hidden, targets, head, chunk_tokens=chunk)
    got = torch.autograd.grad(scores, [hidden, head.weight, head.bias], upstream.float())
    assert torch.allclose(scores.double(), expected, atol=1e-6)
    for mine, theirs in zip(got, wanted, strict=True):
        assert torch.allclose(mine.double(), theirs, atol=1e-6)


def test_the_optimizer_step_drops_each_gradient_and_moves_the_weights_as_one_step_would() -> None:
    torch.manual_seed(0)
    models = [torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 3)) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    whole, dropping = (torch.optim.AdamW(m.parameters(), lr=0.1, weight_decay=0.01) for m in models)
    for step in range(2):  # the first step allocates AdamW's state, the second uses it
        for model in models:
            model(torch.full((2, 4), step + 1.0)).square().sum().backward()
        whole.step()
        step_dropping_gradients(dropping)
        assert all(p.grad is None for p in models[1].parameters())
        whole.zero_grad(set_to_none=True)
    assert dropping.param_groups[0]["params"] == list(models[1].parameters())
    for moved, expected in zip(models[1].parameters(), models[0].parameters(), strict=True):
        assert torch.equal(moved, expected)
        assert all(torch.equal(dropping.state[moved][k], whole.state[expected][k]) for k in whole.state[expected])


def test_8bit_moments_take_the_float32_first_step_and_stay_close_after_it() -> None:
    """AdamW8bit's first step is AdamW's (its moments are quantised after they are used); later ones stay near it."""
    with tiny_engine(seed=0) as engine:
        samples = rows(engine.model.config.vocab_size, 6)
        learners = [Learner(copy.deepcopy(engine.model), pad_id=0, optimizer=name) for name in ("adamw", "adamw8bit")]
        starting = [p.detach().clone() for p in engine.model.parameters()]
        for step in range(3):
            for learner in learners:
                learner.update(samples, PolicyGradientLoss())
            full, low = ([p.detach() for p in learner.model.parameters()] for learner in learners)
            moved = torch.cat([(p - q).flatten() for p, q in zip(full, starting, strict=True)])
            apart = torch.cat([(p - q).flatten() for p, q in zip(full, low, strict=True)])
            # Measured: 0 after the first step, then 1.3% and 1.5% of how far float32 AdamW moved the weights.
            assert float(apart.norm() / moved.norm()) < (1e-6 if step == 0 else 0.05), step
        state = learners[1].optimizer.state[learners[1].model.get_input_embeddings().weight]
        assert state["state1"].dtype == state["state2"].dtype == torch.uint8  # a byte per value, not four


def test_an_unknown_optimizer_is_refused_by_name() -> None:
    refusal = "optimizer must be one of 'adamw', 'adamw8bit'; got 'sgd'"
    with tiny_engine(seed=0) as engine, pytest.raises(ValueError, match=refusal):
        Learner(engine.model, pad_id=0, optimizer="sgd")  # type: ignore[arg-type]


def resident_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads the resident set from /proc")
def test_a_learner_makes_freed_tensors_leave_the_resident_set() -> None:
    """glibc keeps freed blocks under its (rising) mmap threshold in the heap; the learner fixes the threshold."""
    with tiny_engine(seed=0) as engine:
        Learner(engine.model, pad_id=0)
    torch.ones(4 << 20).sum()  # a freed 16 MiB block: unfixed, glibc's threshold would rise past 8 MiB blocks
    before = resident_bytes()
    blocks = [torch.ones(2 << 20) for _ in range(48)]  # 48 blocks of 8 MiB, written
    del blocks[:-1]  # all but the last (which would pin an unfixed heap's top)
    assert resident_bytes() - before < 64 << 20


def test_token_logprobs_refuses_an_empty_chunk() -> None:
    with pytest.raises(ValueError, match="chunk_tokens must be at least 1, got 0"):
        token_logprobs(torch.zeros(2, 4), torch.zeros(2, dtype=torch.long), torch.nn.Linear(4, 8), chunk_tokens=0)


def transitions(samples: list[Sample], rewards: list[float], groups: list[str]) -> list[Transition]:
    return [
        Transition(
            rollout_id=f"ro-{i}",
            attempt_id=f"at-{i}",
            group_id=group,
            step=0,
            prompt_token_ids=list(s.prompt_ids),
            response_token_ids=list(s.response_ids),
            reward=reward,
            policy_version=0,
        )
        for i, (s, reward, group) in enumerate(zip(samples, rewards, groups, strict=True))
    ]


def test_groups_without_signal_never_reach_the_forward_pass_and_the_step_is_unchanged() -> None:
    with tiny_engine(seed=0) as engine:
        samples = rows(engine.model.config.vocab_size, 6)
        batch = transitions(samples, [1.0, 0.0, 1.0, 2.0, 2.0, 2.0], ["a", "a", "a", "flat", "flat", "flat"])
        reference = copy.deepcopy(engine.model)
        seen: list[int] = []
        engine.model.get_decoder().register_forward_hook(
            lambda _module, _args, kwargs, _output: seen.append(kwargs["input_ids"].shape[0]), with_kwargs=True
        )
        algorithm = GRPO(engine)
        with final_gradients(engine.model) as trained:
            metrics = algorithm.learn(batch)
        # The same gradient without leaving anything out: every sample, advantages of the whole batch.
        with final_gradients(reference) as expected:
            Learner(reference, pad_id=engine.pad_id).update(algorithm.samples(batch), algorithm.loss)
        assert len(trained) == len(expected) == len(list(reference.parameters()))
        for gradient, wanted in zip(trained, expected, strict=True):
            assert torch.allclose(gradient, wanted, atol=1e-6)
    assert sum(seen) == 3  # the flat group's three rows were never scored
    assert (metrics["groups_skipped"], engine.policy_version) == (1.0, 1)


def test_a_batch_without_signal_changes_nothing() -> None:
    with tiny_engine(seed=0) as engine:
        samples = rows(engine.model.config.vocab_size, 4)
        before = [p.detach().clone() for p in engine.model.parameters()]
        metrics = GRPO(engine).learn(transitions(samples, [0.0] * 4, ["a", "a", "b", "b"]))
        unchanged = all(torch.equal(p, q) for p, q in zip(engine.model.parameters(), before, strict=True))
    assert (metrics["update_skipped"], metrics["groups_skipped"], engine.policy_version) == (1.0, 2.0, 0)
    assert unchanged


_ALLOCATOR_SETTING = """
import sys
from relight_torch.algorithms.grpo import GRPO
from relight_torch.learner.allocator import return_freed_tensors
from relight_torch.models.tiny import tiny_engine
with tiny_engine(seed=0) as engine:
    GRPO(engine, return_freed_memory=sys.argv[1] == "yes")
    print(return_freed_tensors.cache_info().currsize)
"""


@pytest.mark.parametrize(("return_freed_memory", "allocator_set"), [("yes", "1"), ("no", "0")])
def test_returning_freed_memory_to_the_system_is_the_learners_choice(
    return_freed_memory: str, allocator_set: str
) -> None:
    """A fresh process each: the allocator setting is process-wide and made once."""
    done = subprocess.run(
        [sys.executable, "-c", _ALLOCATOR_SETTING, return_freed_memory],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == allocator_set
