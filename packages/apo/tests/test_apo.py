"""APO against a scripted optimiser and the scripted agent model: rounds, selection, publication, bad replies.

The world (apo_world.py) makes each prompt's reward known in advance, so the tests hold the search to
what it must do: keep the better prompt, never publish one that scored worse on validation than its
parent, send unusable replies back, drop and count what never becomes usable, and stop with a clear
error, losing nothing, when the optimiser's endpoint refuses.
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from rich.console import Console

import relight
from relight.errors import ConfigError
from relight.records import Mode, RolloutStatus
from relight.resources.prompts import PROMPT_ITEM, PromptVersion, best_prompts, prompt_versions
from relight.rewards import Judge
from relight.scripted import ScriptedUpstream, ScriptError, ScriptRequest
from relight.stores.sqlite import SqliteStore
from relight_apo import APO, Optimizer, OptimizerError, Prompt
from relight_testing.algorithms import RecordingAlgorithm


def read_store(run_dir: Path) -> tuple[list[PromptVersion], list[Any], dict[str, Any] | None]:
    """The run's prompt versions, its rollouts and its latest best, read back from its SQLite store."""

    async def read() -> tuple[list[PromptVersion], list[Any], dict[str, Any] | None]:
        store = SqliteStore(run_dir / "store.db")
        try:
            chosen = await best_prompts(store)
            return await prompt_versions(store), await store.list_rollouts(), chosen.items if chosen else None
        finally:
            await store.close()

    return asyncio.run(read())


def best(apo: APO, name: str) -> Any:
    """The best prompts' ``name`` after a search."""
    assert apo.best is not None, "the search found no best"
    return apo.best[name]


def rows(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [row for row in map(json.loads, lines) if row["kind"] == kind]


def test_the_search_keeps_the_better_prompt_and_never_publishes_one_worse_than_its_parent(
    world: ModuleType, tmp_path: Path
) -> None:
    apo, history = world.fit(tmp_path, world.ScriptedOptimizer())
    assert best(apo, "system_prompt") == world.S4
    versions, rollouts, chosen = read_store(tmp_path)
    by_text = {v.prompts["system_prompt"]: v for v in versions}
    overfit = by_text[world.S1]
    assert (overfit.val_reward, overfit.val_rollouts, overfit.selected) == (0.25, 4, ()), (
        "S1 beat its parent on the minibatch, was validated, scored below it and was not published"
    )
    assert by_text[world.SEED].val_reward == 0.5
    assert by_text[world.S4].val_reward == 1.0
    published = sorted((v for v in versions if v.selected), key=lambda v: min(v.selected))
    assert [v.prompts["system_prompt"] for v in published] == [world.SEED, world.S3, world.S4]
    for version in published[1:]:
        parent = next(v for v in versions if v.version == version.parent)
        assert (version.val_reward or 0.0) > (parent.val_reward or 0.0)
    assert chosen is not None
    assert chosen["system_prompt"] == world.S4
    assert chosen[PROMPT_ITEM]["version"] == by_text[world.S4].version
    # Every rollout ran with a version of the prompts, and the budget counts every one of them.
    assert all(rollout.resources_version is not None for rollout in rollouts)
    assert history[-1]["rollouts"] == len(rollouts) <= 60
    assert sum(r.mode is Mode.VAL for r in rollouts) == 4 * 4, "the seed and three candidates, once each"
    best_so_far = [row["best_val_reward"] for row in rows(tmp_path, "train")]
    assert best_so_far == sorted(best_so_far)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "finished"
    assert (summary["seed_val_reward"], summary["best_val_reward"]) == (0.5, 1.0)
    assert (summary["initial_val_reward_mean"], summary["final_val_reward_mean"]) == (0.5, 1.0)


def test_a_reply_that_is_no_usable_prompt_is_sent_back_with_the_reason(world: ModuleType, tmp_path: Path) -> None:
    asked: list[ScriptRequest] = []
    plan = {world.SEED: [world.reply_with("Rules: ADD MUL"), world.reply_with(world.S3)]}
    optimizer = world.ScriptedOptimizer(plan)

    def recording(request: ScriptRequest) -> str:
        asked.append(request)
        return optimizer(request)

    apo, _ = world.fit(tmp_path, recording, rounds=1)
    assert len(asked) == 2
    correction = str(asked[1].messages[-1]["content"])
    assert "leaves out {topic}, which the agent fills in" in correction
    assert best(apo, "system_prompt") == world.S3
    (row,) = rows(tmp_path, "train")
    assert (row["candidates_tried"], row["candidates_dropped"], row["optimizer_calls"]) == (1, 0, 2)


def test_replies_that_never_make_a_usable_prompt_drop_the_candidate_and_are_counted(
    world: ModuleType, tmp_path: Path
) -> None:
    bad = [
        "I would rather not.",
        world.reply_with(""),
        world.reply_with(world.SEED + " " + "Be thorough. " * 400),
        world.reply_with(world.SEED),
    ]
    apo, _ = world.fit(tmp_path, world.ScriptedOptimizer({world.SEED: bad}), rounds=2, max_tries=4)
    first, second = rows(tmp_path, "train")
    assert first["candidates_dropped"] == 1
    assert first["candidates_dropped_unchanged"] == 1, "counted by the last reason"
    assert (second["candidates_tried"], second["candidates_dropped"]) == (2, 2)
    assert "prompt_version" not in first, "no candidate was published"
    versions, _, _ = read_store(tmp_path)
    assert [v.prompts["system_prompt"] for v in versions] == [world.SEED]
    assert best(apo, "system_prompt") == world.SEED


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_optimiser_that_cannot_be_reached_fails_the_round_clearly_and_the_rerun_loses_nothing(
    world: ModuleType, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with ScriptedUpstream(world.agent_model) as model:
        apo = world.make_apo(url, model.base_url)
        trainer = relight.Trainer(algorithm=apo, run_dir=tmp_path, console=Console(file=io.StringIO()))
        with pytest.raises(OptimizerError, match=f"the optimiser at {url} .* could not be reached after 1 call"):
            trainer.fit(world.agent, world.TRAIN, world.VAL)
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "failed"
    _, before, _ = read_store(tmp_path)
    assert len(before) == 4 + 3, "the seed's validation and round 1's parent minibatch were measured"

    apo, _ = world.fit(tmp_path, world.ScriptedOptimizer())
    assert best(apo, "system_prompt") == world.S4
    _, after, _ = read_store(tmp_path)
    world.fit(tmp_path.with_name(tmp_path.name + "-fresh"), world.ScriptedOptimizer())
    _, uninterrupted, _ = read_store(tmp_path.with_name(tmp_path.name + "-fresh"))
    assert len(after) == len(uninterrupted), "no rollout was run twice"
    assert all(r.attempt_count == 1 for r in after)
    assert [row["kind"] for row in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines())][:2] == [
        "val",
        "resume",
    ]


def test_an_optimiser_that_refuses_the_request_is_not_asked_again(world: ModuleType, tmp_path: Path) -> None:
    calls: list[int] = []

    def refusing(request: ScriptRequest) -> str:
        calls.append(1)
        raise ScriptError(401, "invalid API key")

    with ScriptedUpstream(world.agent_model) as model, ScriptedUpstream(refusing) as optimizer:
        apo = APO(
            {"system_prompt": world.SEED},
            optimizer=Optimizer(base_url=optimizer.base_url, model="optimizer", retries=3),
            base_url=model.base_url,
            model="agent",
            budget=30,
            minibatch=3,
        )
        trainer = relight.Trainer(algorithm=apo, run_dir=tmp_path, console=Console(file=io.StringIO()))
        with pytest.raises(OptimizerError, match=r"refused the request: HTTP 401.*invalid API key"):
            trainer.fit(world.agent, world.TRAIN, world.VAL)
    assert len(calls) == 1


def test_several_prompts_take_turns_and_a_frozen_one_never_changes(world: ModuleType, tmp_path: Path) -> None:
    plan = {**world.PLAN, "Be brief.": [world.reply_with("Be brief and exact.")]}
    prompts = {"system_prompt": world.SEED, "style": "Be brief.", "tone": Prompt("Be kind.", frozen=True)}
    apo, _ = world.fit(tmp_path, world.ScriptedOptimizer(plan), prompts=prompts, rounds=4)
    versions, _, _ = read_store(tmp_path)
    edits = [v.edited for v in versions if v.edited is not None]
    assert edits[:2] == ["system_prompt", "style"], "the prompts that may change take turns"
    assert all(v.prompts["tone"] == "Be kind." for v in versions)
    assert "tone" not in edits
    assert best(apo, "tone") == "Be kind."


def test_an_agent_that_never_reads_the_prompt_is_refused_with_how_to_read_it(world: ModuleType, tmp_path: Path) -> None:
    @relight.rollout
    def ignores_resources(task: dict[str, Any], llm: relight.LLM) -> float:
        return 0.0

    with ScriptedUpstream(world.agent_model) as model, ScriptedUpstream(world.ScriptedOptimizer()) as optimizer:
        apo = world.make_apo(optimizer.base_url, model.base_url)
        trainer = relight.Trainer(algorithm=apo, run_dir=tmp_path, console=Console(file=io.StringIO()))
        with pytest.raises(ConfigError, match=r"never read the prompt\(s\) 'system_prompt'.*relight.resource"):
            trainer.fit(ignores_resources, world.TRAIN, world.VAL)


@relight.rollout
async def judged(task: dict[str, Any], llm: relight.LLM) -> None:
    """The world's agent, leaving the reward to the judge: it emits none."""
    import apo_world

    await apo_world.agent.function(task, llm)


def grades(request: ScriptRequest) -> str:
    """A judge that grades 10 when the final answer is the task's, else 0."""
    text = request.last_user
    task = json.loads(text.split("Task:\n", 1)[1].split("\n\n", 1)[0])
    answer = text.rsplit("[final answer] ", 1)[1].strip()
    return json.dumps({"scores": [{"id": "A", "score": 10 if answer == task["answer"] else 0, "reason": "-"}]})


def test_the_judge_can_be_the_reward_the_search_compares(world: ModuleType, tmp_path: Path) -> None:
    with (
        ScriptedUpstream(world.agent_model) as model,
        ScriptedUpstream(world.ScriptedOptimizer()) as optimizer,
        ScriptedUpstream(grades) as judge_model,
    ):
        apo = world.make_apo(optimizer.base_url, model.base_url)
        judge = Judge("The answer is right.", base_url=judge_model.base_url, model="judge", mode="score")
        trainer = relight.Trainer(
            algorithm=apo, run_dir=tmp_path, group_rewards=[judge], console=Console(file=io.StringIO())
        )
        trainer.fit(judged, world.TRAIN, world.VAL)
    assert best(apo, "system_prompt") == world.S4
    train_rows = rows(tmp_path, "train")
    assert sum(row.get("judge_calls", 0) for row in train_rows) > 0


def test_apo_then_rl_with_the_prompt_fixed_records_both_versions_on_every_rollout(
    world: ModuleType, tmp_path: Path
) -> None:
    apo, _ = world.fit(tmp_path / "apo", world.ScriptedOptimizer())
    assert apo.best is not None
    with ScriptedUpstream(world.agent_model, model="agent") as policy:
        algorithm = RecordingAlgorithm(policy)
        trainer = relight.Trainer(
            algorithm=algorithm,
            resources=apo.best,
            run_dir=tmp_path / "rl",
            batch_size=3,
            n_samples=2,
            console=Console(file=io.StringIO()),
        )
        trainer.fit(world.agent, world.TRAIN, world.VAL)

    async def read() -> list[tuple[int | None, Any, Any]]:
        store = SqliteStore(tmp_path / "rl" / "store.db")
        try:
            found = []
            for rollout in await store.list_rollouts():
                assert rollout.status is RolloutStatus.SUCCEEDED
                items = (await store.get_resources(rollout.resources_version)).items
                found.append((rollout.resources_version, items["policy_version"], items[PROMPT_ITEM]["version"]))
            return found
        finally:
            await store.close()

    found = asyncio.run(read())
    assert {prompt for _, _, prompt in found} == {apo.best[PROMPT_ITEM]["version"]}
    assert {policy for _, policy, _ in found} == {0, 1}, "rollouts before and after the one update"


def test_a_candidate_that_does_worse_than_its_parent_on_the_minibatch_is_not_validated(
    world: ModuleType, tmp_path: Path
) -> None:
    plan = {world.S1: [world.reply_with(world.SEED)]}  # CAPS → ADD: 2 of the 3 training tasks → none
    apo, _ = world.fit(tmp_path, world.ScriptedOptimizer(plan), prompts={"system_prompt": world.S1}, rounds=1)
    (row,) = rows(tmp_path, "train")
    assert (row["candidate_minibatch_reward"], row["parent_minibatch_reward"]) == (0.0, pytest.approx(2 / 3))
    assert (row["candidates_rejected"], row["candidates_validated"]) == (1, 0)
    versions, rollouts, _ = read_store(tmp_path)
    assert [v.val_rollouts for v in versions] == [4, 0], "validation rollouts were spent on the seed alone"
    assert row["rollouts"] == len(rollouts) == 4 + 3 + 3
    assert best(apo, "system_prompt") == world.S1
