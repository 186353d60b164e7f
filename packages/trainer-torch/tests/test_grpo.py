import asyncio
import math

import pytest
import torch

from relight.engine import GenerationRequest, SamplingParams
from relight.records import Transition
from relight.transitions.trained_calls import ReportsAdvantages
from relight_testing.torch_updates import QUESTION, answers, final_gradients
from relight_torch.algorithms.advantages import episode_weights, grpo_advantages, reinforce_pp_advantages
from relight_torch.algorithms.grpo import GRPO, LossType
from relight_torch.learner.learner import Sample
from relight_torch.models.tiny import tiny_engine


def total_logprobs(algorithm: GRPO, transitions: list[Transition]) -> list[float]:
    samples = [Sample(t.prompt_token_ids, t.response_token_ids) for t in transitions]
    return [sum(row) for row in algorithm.learner.logprobs(samples)]


def test_grpo_advantages_by_hand() -> None:
    # group a: mean 0.5, unbiased std sqrt(1/3); group b has one member: scored against mean 0, std 1 (as verl).
    advantages = grpo_advantages([1.0, 0.0, 1.0, 0.0, 3.0], ["a", "a", "a", "a", "b"])
    expected = [math.sqrt(3) / 2, -math.sqrt(3) / 2] * 2 + [3.0]
    assert torch.allclose(advantages, torch.tensor(expected), atol=1e-5)
    assert grpo_advantages([2.0, 2.0], ["a", "a"]).tolist() == [0.0, 0.0]
    assert grpo_advantages([1.0, 0.0], ["a", "a"], scale_rewards="none").tolist() == [0.5, -0.5]
    # "batch": each group's mean, the whole batch's deviation (of [1, 0, 3, 5]: unbiased std sqrt(131/12)).
    batch = grpo_advantages([1.0, 0.0, 3.0, 5.0], ["a", "a", "b", "b"], scale_rewards="batch")
    deviation = float(torch.tensor([1.0, 0.0, 3.0, 5.0]).std()) + 1e-6
    assert batch.tolist() == pytest.approx([a / deviation for a in (0.5, -0.5, -1.0, 1.0)])


def test_episode_advantages_and_weights_by_hand() -> None:
    # One right episode of one call, one wrong episode of three calls: over the episodes the mean is
    # 0.5 and the unbiased std sqrt(1/2); over the transitions it would be 0.25 and 0.5.
    advantages = grpo_advantages([1.0, 0.0, 0.0, 0.0], ["a"] * 4, episode_ids=["r", "w", "w", "w"])
    assert torch.allclose(advantages, torch.tensor([1.0, -1.0, -1.0, -1.0]) * math.sqrt(0.5), atol=1e-5)
    assert grpo_advantages([1.0, 0.0, 0.0, 0.0], ["a"] * 4).tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-5)
    # Episodes of 2 and 3 + 3 tokens: the average episode has 4, so 4/2 and 4/6.
    assert episode_weights(["r", "w", "w"], [2, 3, 3]) == pytest.approx([2.0, 2 / 3, 2 / 3])
    with pytest.raises(ValueError, match="episode_ids"):
        grpo_advantages([1.0, 0.0], ["a", "a"], episode_ids=["r"])


def test_the_grpo_loss_type_gives_a_long_wrong_episode_no_more_weight_than_a_short_right_one() -> None:
    with tiny_engine(seed=0) as engine:
        transitions = answers(engine, ["84", "19", "1234567", "1234567"], [1.0, 0.0, 0.0, 0.0])
    # The wrong episode "ro-1" made three calls, the last two long: one answer, three transitions.
    transitions = [t.model_copy(update={"rollout_id": "ro-0" if i == 0 else "ro-1"}) for i, t in enumerate(transitions)]

    def pushes(loss_type: LossType) -> tuple[float, float]:
        samples = GRPO(engine, loss_type=loss_type).samples(transitions)
        weighted = [s.advantage * s.loss_weight * len(s.response_ids) for s in samples]
        return weighted[0], sum(weighted[1:])

    up, down = pushes("grpo")
    assert up == pytest.approx(-down)  # each episode's tokens together weigh alike
    up, down = pushes("dapo")
    assert -down > 2 * up  # per token, the long wrong episode outweighs the right one


def test_the_former_option_names_still_work_with_a_deprecation_warning() -> None:
    with tiny_engine(seed=0) as engine:
        with pytest.warns(DeprecationWarning, match="per_episode"):
            assert GRPO(engine, per_episode=True).loss_type == "grpo"
        with pytest.warns(DeprecationWarning, match="scale_by_std"):
            assert GRPO(engine, scale_by_std=False).scale_rewards == "none"
        with pytest.warns(DeprecationWarning, match="clip"):
            loss = GRPO(engine, clip=0.1).loss
        assert (loss.epsilon, loss.epsilon_high) == (0.1, 0.1)
        with pytest.warns(DeprecationWarning, match="kl_coef"):
            assert GRPO(engine, kl_coef=0.5).loss.beta == 0.5
        with pytest.warns(DeprecationWarning, match="scale_by_std"):
            assert grpo_advantages([1.0, 0.0], ["a", "a"], scale_by_std=False).tolist() == [0.5, -0.5]
        with pytest.raises(ValueError, match="max_completion_length"):
            GRPO(engine, loss_type="dr_grpo")
        with pytest.raises(ValueError, match="scale_rewards"):
            GRPO(engine, estimator="reinforce++", scale_rewards="none")
        with pytest.raises(ValueError, match="loss_type"):
            GRPO(engine, loss_type="sapo")  # type: ignore[arg-type]


def test_reinforce_pp_advantages_by_hand() -> None:
    # Baseline: [0.5, -0.5] in group a; b has one member, kept as is (verl's rule); then whitened over
    # the 2 + 1 + 1 response tokens, with an unbiased variance.
    advantages = reinforce_pp_advantages([1.0, 0.0, 5.0], ["a", "a", "b"], [2, 1, 1])
    centred = torch.tensor([0.5, -0.5, 5.0]) - (2 * 0.5 - 0.5 + 5.0) / 4
    variance = (centred**2 * torch.tensor([2.0, 1.0, 1.0])).sum() / 3
    assert torch.allclose(advantages, centred / variance.sqrt(), atol=1e-5)


@pytest.mark.parametrize("estimator", ["grpo", "reinforce++"])
def test_one_step_moves_rewarded_answers_up_and_the_others_down(estimator: str) -> None:
    with tiny_engine(seed=0) as engine:
        transitions = answers(engine, ["84", "19", "84.", "42"], [1.0, 0.0, 1.0, 0.0])
        algorithm = GRPO(engine, estimator=estimator, lr=1e-3)  # type: ignore[arg-type]
        before = total_logprobs(algorithm, transitions)
        metrics = algorithm.learn(transitions)
        after = total_logprobs(algorithm, transitions)
    assert metrics["first_ratio"] == pytest.approx(1.0, abs=1e-5)  # the recorded logprobs are the policy's own
    assert metrics["time_learner_s"] > 0  # the update's parts, timed
    assert metrics["time_serve_weights_s"] >= 0
    moved = [b - a for a, b in zip(before, after, strict=True)]
    assert [m > 0 for m in moved] == [True, False, True, False]


def test_micro_batches_give_the_same_gradient_as_one_batch() -> None:
    gradients = []
    for budget in (16, 100_000):  # one row per pass, or everything at once
        with tiny_engine(seed=0) as engine:
            transitions = answers(engine, ["84", "19", "1234567", "42"], [1.0, 0.0, 1.0, 0.5])
            with final_gradients(engine.model) as final:
                GRPO(engine, token_budget=budget).learn(transitions)
            gradients.append(torch.cat([gradient.flatten() for gradient in final]))
    assert torch.allclose(gradients[0], gradients[1], rtol=1e-4, atol=1e-7)


def test_the_kl_penalty_starts_at_zero_and_holds_the_policy_near_the_reference() -> None:
    drift = {}
    for beta in (0.0, 2.0):
        with tiny_engine(seed=0) as engine:
            transitions = answers(engine, ["84", "19"], [1.0, 0.0])
            algorithm = GRPO(engine, lr=3e-3, beta=beta)
            start = total_logprobs(algorithm, transitions)
            steps = [algorithm.learn(transitions) for _ in range(6)]
            drift[beta] = sum(abs(a - b) for a, b in zip(start, total_logprobs(algorithm, transitions), strict=True))
            if beta:
                assert steps[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # the policy starts as the reference
                assert steps[-1]["kl"] > 0
                assert algorithm.loss.reference is not None
                assert not any(p.requires_grad for p in algorithm.loss.reference.parameters())
    assert drift[2.0] < drift[0.0]


async def test_an_update_is_served_at_once_under_the_next_policy_version() -> None:
    with tiny_engine(seed=0) as engine:
        algorithm = GRPO(engine, lr=1e-2)
        greedy = SamplingParams(temperature=0, max_tokens=6)
        request = GenerationRequest(model=engine.name, messages=QUESTION, sampling=greedy)
        first = await engine.generate(request)
        metrics = await algorithm.update(answers(engine, ["84", "19"], [1.0, 0.0]))
        second = await engine.generate(request)
    assert (first.policy_version, second.policy_version, algorithm.policy_version) == (0, 1, 1)
    assert first.response_logprobs != second.response_logprobs
    assert metrics["off_policy_transitions"] == 0


def test_advantages_are_reported_per_transition_for_the_dashboard() -> None:
    with tiny_engine(seed=0) as engine:
        transitions = answers(engine, ["84", "12", "84", "7"], [1.0, 0.0, 1.0, 0.0])
        algorithm = GRPO(engine)
        assert isinstance(algorithm, ReportsAdvantages)
        expected = grpo_advantages([t.reward for t in transitions], [t.group_id for t in transitions])
        assert algorithm.advantages(transitions) == pytest.approx(expected.tolist())


def test_transitions_without_response_tokens_are_not_trainable() -> None:
    with tiny_engine(seed=0) as engine:
        (transition,) = answers(engine, ["84"], [1.0])
        empty = transition.model_copy(update={"response_token_ids": [], "response_logprobs": []})
        with pytest.raises(ValueError, match="response tokens"):
            GRPO(engine).learn([empty])


def test_update_runs_off_the_event_loop() -> None:
    with tiny_engine(seed=0) as engine:
        algorithm = GRPO(engine)
        transitions = answers(engine, ["84", "19"], [1.0, 0.0])

        async def update_while_ticking() -> int:
            ticks = 0

            async def tick() -> None:
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0)

            ticker = asyncio.create_task(tick())
            await algorithm.update(transitions)
            ticker.cancel()
            return ticks

        assert asyncio.run(update_while_ticking()) > 1


def test_calls_recorded_without_logprobs_are_anchored_to_the_policy_before_the_update() -> None:
    """Retokenized calls carry no logprobs; over two epochs their update must be the one exact logprobs give."""
    weights = []
    for recorded in (True, False):
        with tiny_engine(seed=0) as engine:
            transitions = answers(engine, ["84", "19", "84.", "42"], [1.0, 0.0, 1.0, 0.0])
            if not recorded:  # as the gateway stores a call it retokenized
                retokenized = {"response_logprobs": None, "retokenized": True}
                transitions = [t.model_copy(update=retokenized) for t in transitions]
            metrics = GRPO(engine, lr=1e-2, epochs=2, epsilon=0.05).learn(transitions)
            weights.append(torch.cat([p.detach().flatten() for p in engine.model.parameters()]))
            assert metrics["samples_without_logprobs"] == (0 if recorded else 4)
    assert torch.allclose(weights[0], weights[1], atol=1e-6)
