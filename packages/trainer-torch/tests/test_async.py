"""Asynchronous training's parts in relight-torch: updates without a stop and off-policy correction.

A call spanning an update is tested through the gateway in ``tests/test_async_torch_engine.py``.
"""

import asyncio
import copy
import math
import threading
from typing import Any

import torch

from relight.engine import GenerationRequest, SamplingParams
from relight.records import Transition
from relight_testing.torch_updates import QUESTION, answers
from relight_torch.algorithms.grpo import GRPO
from relight_torch.algorithms.objectives import PolicyGradientLoss
from relight_torch.algorithms.offpolicy import correct_stale_samples, update_weight_metrics, weigh_in_the_update
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.learner.learner import Learner, Sample


async def test_a_live_update_trains_a_copy_while_the_engine_keeps_serving(engine: TorchEngine) -> None:
    algorithm = GRPO(engine, lr=1e-2, live_updates=True)
    transitions = answers(engine, ["84", "19"], [1.0, 0.0])
    greedy = SamplingParams(temperature=0, max_tokens=6)
    request = GenerationRequest(model=engine.name, messages=QUESTION, sampling=greedy)
    before = await engine.generate(request)
    served_during_update = threading.Event()
    loop = asyncio.get_running_loop()

    def serve_while_learning(*_: Any) -> None:
        if not served_during_update.is_set():  # the learner's first forward: the engine must still answer
            generation = asyncio.run_coroutine_threadsafe(engine.generate(request), loop).result(timeout=60)
            assert generation.policy_version == 0
            served_during_update.set()

    # The learner runs the backbone and the output layer in chunks, never the whole model: hook the embeddings.
    hook = algorithm.learner.model.get_input_embeddings().register_forward_hook(serve_while_learning)
    try:
        await algorithm.update(transitions)
    finally:
        hook.remove()
    assert served_during_update.is_set()
    after = await engine.generate(request)
    assert (before.policy_version, after.policy_version, algorithm.policy_version) == (0, 1, 1)
    for served, trained in zip(engine.model.parameters(), algorithm.learner.model.parameters(), strict=True):
        assert torch.equal(served, trained)
        assert served.data_ptr() != trained.data_ptr()


def _stale(transition: Transition, behaviour: list[float]) -> Transition:
    return transition.model_copy(update={"response_logprobs": behaviour, "policy_version": 0})


def test_stale_samples_get_decoupled_ppo_against_the_current_policy_and_truncated_weights(
    engine: TorchEngine,
) -> None:
    learner = Learner(engine.model, pad_id=engine.pad_id)
    fresh, stale = answers(engine, ["84", "19"], [1.0, 0.0])
    fresh = fresh.model_copy(update={"policy_version": 3})
    current = stale.response_logprobs or []
    # The behaviour policy liked the first token far less than the current one (weight e^2 > cap 1.5),
    # and the others a little more (weights e^-0.1, kept).
    behaviour = [current[0] - 2.0, *(lp + 0.1 for lp in current[1:])]
    transitions = [fresh, _stale(stale, behaviour)]
    samples = [Sample(t.prompt_token_ids, t.response_token_ids, 1.0, t.response_logprobs) for t in transitions]
    corrected, metrics = correct_stale_samples(samples, transitions, learner, version=3, cap=1.5)
    assert corrected[0] == samples[0]
    weights = corrected[1].weights
    assert weights is not None
    assert weights[0] == 1.5
    assert all(math.isclose(w, math.exp(-0.1), rel_tol=1e-3) for w in weights[1:])
    assert torch.allclose(torch.tensor(corrected[1].old_logprobs), torch.tensor(current), atol=1e-5)
    assert metrics["tis_samples"] == 1
    assert math.isclose(metrics["tis_clipped_fraction"], 1 / len(current))
    assert (metrics["sample_staleness_mean"], metrics["sample_staleness_max"]) == (1.5, 3)


def test_grpo_corrects_stale_samples_by_default_and_leaves_on_policy_ones_alone(engine: TorchEngine) -> None:
    on_policy = answers(engine, ["84", "19"], [1.0, 0.0])
    algorithm = GRPO(engine, lr=1e-2)
    assert algorithm.learn(on_policy)["tis_samples"] == 0
    stale = answers(engine, ["84", "19"], [1.0, 0.0])  # sampled at version 0, trained at version 1
    metrics = algorithm.learn(stale)
    assert metrics["tis_samples"] == 2
    assert metrics["sample_staleness_max"] == 1
    assert GRPO(engine, tis_cap=None).learn(stale)["off_policy_transitions"] == 2


def test_an_engine_with_other_numerics_gets_every_sample_corrected_and_its_mismatch_measured(
    engine: TorchEngine,
) -> None:
    """vLLM samples in bfloat16: even at the current version its logprobs are not the learner's."""
    learner = Learner(engine.model, pad_id=engine.pad_id)
    (transition,) = answers(engine, ["84"], [1.0])
    current = transition.response_logprobs or []
    engine_logprobs = [lp + 0.05 for lp in current]  # the engine's numerics, a little off
    transitions = [transition.model_copy(update={"response_logprobs": engine_logprobs})]
    samples = [Sample(t.prompt_token_ids, t.response_token_ids, 1.0, t.response_logprobs) for t in transitions]
    untouched, metrics = correct_stale_samples(samples, transitions, learner, version=0, cap=2.0)
    assert (untouched, metrics["tis_samples"]) == (samples, 0)
    corrected, metrics = correct_stale_samples(samples, transitions, learner, version=0, cap=2.0, every_sample=True)
    assert metrics["tis_samples"] == 1
    assert all(math.isclose(w, math.exp(-0.05), rel_tol=1e-3) for w in corrected[0].weights or [])
    assert math.isclose(metrics["logprob_delta_abs_mean"], 0.05, rel_tol=1e-3)
    assert math.isclose(metrics["logprob_delta_abs_max"], 0.05, rel_tol=1e-3)
    assert metrics["is_ratio_max"] < 1
    assert metrics["is_ratio_std"] < 1e-3


def test_an_update_of_one_step_weighs_samples_in_its_own_forward_pass_as_a_separate_pass_would(
    engine: TorchEngine,
) -> None:
    """The proximal policy of a one-step update is the one it starts from: taking the anchor and the
    truncated weights from the step's forward pass gives the step and the metrics a pass of their own gives."""
    fresh, stale = answers(engine, ["84", "19"], [1.0, 0.0])
    transitions = [
        fresh.model_copy(update={"response_logprobs": [lp + 0.05 for lp in fresh.response_logprobs or []]}),
        _stale(stale, [lp - (2.0 if i == 0 else -0.1) for i, lp in enumerate(stale.response_logprobs or [])]),
    ]
    samples = [
        Sample(t.prompt_token_ids, t.response_token_ids, advantage, t.response_logprobs)
        for t, advantage in zip(transitions, [1.0, -1.0], strict=True)
    ]
    separate = Learner(copy.deepcopy(engine.model), pad_id=engine.pad_id, lr=1e-2)
    corrected, expected = correct_stale_samples(samples, transitions, separate, version=0, cap=1.5, every_sample=True)
    step = separate.update(corrected, PolicyGradientLoss())
    folded = Learner(copy.deepcopy(engine.model), pad_id=engine.pad_id, lr=1e-2)
    weighed, metrics = weigh_in_the_update(samples, transitions, version=0, every_sample=True)
    assert all(s.old_logprobs is None and s.behaviour_logprobs is not None for s in weighed)
    update = folded.update(weighed, PolicyGradientLoss(tis_cap=1.5))
    metrics |= update_weight_metrics(update, every_sample=True)
    assert not {"tis_tokens", "is_ratio_sq"} & update.keys(), "the loss's sums are taken out of the update's metrics"
    assert math.isclose(update["loss"], step["loss"], rel_tol=1e-5), "the same weighted loss"
    assert metrics.keys() == expected.keys()
    for name, value in expected.items():
        assert math.isclose(metrics[name], value, rel_tol=1e-4, abs_tol=1e-6), name
    assert metrics["tis_clipped_fraction"] > 0
    moved = [not torch.equal(a, b) for a, b in zip(engine.model.parameters(), folded.model.parameters(), strict=True)]
    assert any(moved)
    for a, b in zip(separate.model.parameters(), folded.model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), "the same step"
