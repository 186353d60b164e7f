import json
from pathlib import Path

import pytest

from relight.records import Transition
from relight_torch.algorithms.sft import SFT, conversation_samples, read_conversations, transition_samples
from relight_torch.demo.calculator import TOOLS, demonstration, problems
from relight_torch.engine.torch_engine import TorchEngine


def test_sft_lowers_the_loss_on_its_demonstrations(engine: TorchEngine) -> None:
    conversations = [{"messages": demonstration(p, use_tool=True), "tools": TOOLS} for p in problems(16, seed=0)]
    samples = conversation_samples(engine.tokenizer, conversations)
    sft = SFT(engine, lr=3e-3)
    before = sft.loss(samples)
    losses = sft.fit(samples, steps=30, batch_size=8, warmup=5)
    assert len(losses) == 30
    assert sft.loss(samples) < 0.7 * before
    assert engine.policy_version == 1  # the whole fit is one change of the served weights


def test_sft_learns_only_what_the_assistant_said(engine: TorchEngine) -> None:
    (conversation,) = [{"messages": demonstration(p, use_tool=True), "tools": TOOLS} for p in problems(1, seed=0)]
    samples = conversation_samples(engine.tokenizer, [conversation])
    assert len(samples) == 2  # the tool call, then the answer
    for sample in samples:
        said = engine.tokenizer.decode(sample.response_ids)
        assert "<|user|>" not in said
        assert "<|tool|>" not in said
        assert said.endswith("<|end|>")


async def test_as_an_algorithm_it_imitates_the_transitions_that_earned_enough(engine: TorchEngine) -> None:
    def transition(text: str, reward: float) -> Transition:
        return Transition(
            rollout_id="ro",
            attempt_id="at",
            group_id="g",
            step=0,
            prompt_token_ids=[5, 6],
            response_token_ids=engine.tokenizer.encode(text),
            reward=reward,
        )

    good, bad = transition("84", 1.0), transition("19", 0.0)
    assert [s.response_ids for s in transition_samples([good, bad], min_reward=0.5)] == [good.response_token_ids]
    sft = SFT(engine, min_reward=0.5)
    metrics = await sft.update([good, bad])
    assert metrics["sft_samples"] == 1
    assert sft.policy_version == 1
    assert await sft.update([bad]) == {"sft_samples": 0.0}
    assert sft.policy_version == 1


def test_conversations_come_from_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "demos.jsonl"
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    path.write_text(json.dumps({"messages": messages, "tools": TOOLS}) + "\n\n" + json.dumps(messages) + "\n")
    first, second = read_conversations(path)
    assert first["tools"] == TOOLS
    assert second == {"messages": messages}
    path.write_text(json.dumps(messages) + '\n{"prompt": "no messages"}\n')
    with pytest.raises(ValueError, match=r"demos\.jsonl:2"):
        read_conversations(path)
