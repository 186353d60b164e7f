"""The synchronous loop reads each step's batch when the step begins, after the previous step's update.

That is the contract a curriculum rests on (relight_torch.curriculum.SignalCurriculum): a training set whose
items are drawn as they are first read can choose later batches from what earlier updates were given.
Real trainer, runner, gateway, openai client and scripted server."""

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, overload

import openai
from rich.console import Console

from relight import Trainer
from relight.agent import LLM, rollout
from relight.models import Mode
from relight.stores.memory import InMemoryStore
from relight.testing.algorithms import RecordingAlgorithm
from relight.testing.upstream import ScriptedUpstream


@rollout
async def echo(task: Mapping[str, Any], llm: LLM) -> float:
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        await client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task["text"]}])
    return 1.0


class DrawnOnRead(Sequence[dict[str, str]]):
    """Six tasks; each read of a slice notes how many updates the algorithm had made by then."""

    def __init__(self, algorithm: RecordingAlgorithm) -> None:
        self.algorithm = algorithm
        self.reads: list[tuple[int, int]] = []
        """(first position read, updates made before the read)."""

    def __len__(self) -> int:
        return 6

    @overload
    def __getitem__(self, index: int) -> dict[str, str]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, str]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, str] | list[dict[str, str]]:
        positions = range(*index.indices(6)) if isinstance(index, slice) else range(index, index + 1)
        self.reads.append((positions[0], len(self.algorithm.batches)))
        tasks = [{"text": f"after {len(self.algorithm.batches)} updates"} for _ in positions]
        return tasks if isinstance(index, slice) else tasks[0]


async def test_each_steps_batch_is_read_after_the_previous_update(tmp_path: Path) -> None:
    store = InMemoryStore()
    async with ScriptedUpstream() as upstream:
        algorithm = RecordingAlgorithm(upstream)
        dataset = DrawnOnRead(algorithm)
        trainer = Trainer(
            algorithm, store=store, batch_size=2, n_samples=2, run_dir=tmp_path, console=Console(file=io.StringIO())
        )  # fmt: skip
        await trainer.afit(echo, dataset)
    assert dataset.reads == [(0, 0), (2, 1), (4, 2)]
    ran = sorted(str(r.input["text"]) for r in await store.list_rollouts(mode=Mode.TRAIN))  # type: ignore[index]
    assert ran == [f"after {n} updates" for n in (0, 1, 2) for _ in range(4)]
