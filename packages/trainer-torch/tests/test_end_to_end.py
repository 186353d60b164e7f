"""A few GRPO iterations through the whole of relight: Trainer.fit → runner → the demo's openai agent →
gateway → engine; spans → SQLite store → transitions → GRPO → new weights served."""

import io
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.console import Console

import relight
from relight.engine import Generation, GenerationRequest
from relight.records import Transition
from relight_torch.algorithms.grpo import GRPO
from relight_torch.demo.agent import calculator_agent
from relight_torch.demo.calculator import problems
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.models.tiny import tiny_model, tiny_tokenizer


class RecordingEngine(TorchEngine):
    """The real engine, keeping a copy of every generation it returns."""

    generations: list[Generation]

    async def generate(self, request: GenerationRequest) -> Generation:
        generation = await super().generate(request)
        self.generations.append(generation)
        return generation


async def test_transitions_carry_exactly_what_the_engine_sampled(tmp_path: Path) -> None:
    tokenizer = tiny_tokenizer()
    engine = RecordingEngine(tiny_model(tokenizer, seed=0), tokenizer)
    engine.generations = []
    batches: list[list[Transition]] = []

    def keep(transitions: Sequence[Transition], metrics: Mapping[str, float]) -> None:
        batches.append(list(transitions))

    algorithm = GRPO(engine, lr=1e-3, callbacks=[keep])
    store = relight.open_store(f"sqlite:///{tmp_path / 'store.db'}")
    trainer = relight.Trainer(
        algorithm, store=store, batch_size=2, n_samples=3, concurrency=6, console=Console(file=io.StringIO())
    )
    tasks = [{**p.as_task(), "temperature": 1.0} for p in problems(6, seed=0)]
    try:
        history = await trainer.afit(calculator_agent, tasks)
    finally:
        await store.close()
        engine.close()

    versions = [0] + [int(row["policy_version"]) for row in history]
    for row, before, after in zip(history, versions[:-1], versions[1:], strict=True):  # steps without signal: skipped
        assert after - before == (row["groups_no_signal"] < row["groups"])
    sampled = {(tuple(g.prompt_token_ids), tuple(g.response_token_ids)): g for g in engine.generations}
    transitions = [t for batch in batches for t in batch]
    assert len(transitions) == len(engine.generations)  # every call became one transition, none twice
    for iteration, batch in enumerate(batches):
        assert len({t.rollout_id for t in batch}) == 6
        for transition in batch:
            generation = sampled[(tuple(transition.prompt_token_ids), tuple(transition.response_token_ids))]
            assert transition.response_logprobs == generation.response_logprobs
            assert transition.policy_version == generation.policy_version == versions[iteration]
            assert transition.reward in (0.0, 1.0)
