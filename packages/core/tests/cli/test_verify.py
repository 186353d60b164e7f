"""``relight verify`` on the store a scripted training run left, clean, then on copies damaged one way each (by SQL
on the SQLite file, or through the store's own API): every damage found and named, the exit status 1. It reads
every backend through the store protocol alone, and writes nothing."""

import asyncio
import io
import json
import shutil
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from relight import Trainer, semconv
from relight.cli import main
from relight.integrity import verify_store
from relight.records import AttemptStatus, RolloutStatus, Span, SpanKind
from relight.scripted import ScriptedUpstream
from relight.store import Store
from relight.stores.http.server import running_server
from relight.stores.memory import InMemoryStore
from relight.stores.sqlite import SqliteStore
from relight_testing.agents import three_calls
from relight_testing.algorithms import RecordingAlgorithm
from relight_testing.postgres import PostgresServer, postgres_unavailable


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.delenv("RELIGHT_STORE", raising=False)


async def train(store: Store | str, run_dir: Path) -> None:
    """Two steps of a scripted fit (three LLM calls and a returned reward per rollout), validated before and after:
    gateway spans with token ids and logprobs, rewards, and the updates' records of what they trained."""
    async with ScriptedUpstream() as upstream:
        trainer = Trainer(
            RecordingAlgorithm(upstream),
            store=store,
            batch_size=1,
            n_samples=2,
            run_dir=run_dir,
            console=Console(file=io.StringIO()),
        )
        await trainer.afit(three_calls, [{"text": "a"}, {"text": "b"}], [{"text": "v"}])


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("clean") / "run"
    asyncio.run(train(f"sqlite:///{run_dir / 'store.db'}", run_dir))
    return run_dir / "store.db"


def copy_of(clean: Path, tmp_path: Path) -> Path:
    copied = tmp_path / "store.db"
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{clean}{suffix}").exists():
            shutil.copy(f"{clean}{suffix}", f"{copied}{suffix}")
    return copied


def verify(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    status = main(["verify", "--store", f"sqlite:///{path}", "--json"])
    return status, json.loads(capsys.readouterr().out)


def test_a_store_a_training_run_left_is_clean(clean: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--store", f"sqlite:///{clean}"]) == 0
    printed = capsys.readouterr().out
    assert "clean: 6 rollout(s)" in printed  # 2 steps of 2 rollouts, and validation before and after
    status, report = verify(clean, capsys)
    assert (status, report["clean"], report["problems"]) == (0, True, {})
    assert report["checked"]["llm_calls"] == 6 * 3  # every call rebuilt exactly
    assert report["notices"] == {}


# -- damage, one kind per copy ----------------------------------------------------------------------------------


def edit_spans(path: Path, pick: Callable[[dict[str, Any]], bool], change: Callable[[dict[str, Any]], Any]) -> str:
    """Apply ``change`` to the stored JSON of the first span ``pick`` takes (None deletes it); returns its place."""
    with sqlite3.connect(path) as db:
        for sequence_id, data in db.execute("SELECT sequence_id, data FROM spans ORDER BY sequence_id").fetchall():
            span = json.loads(data)
            if not pick(span):
                continue
            changed = change(span)
            if changed is None:
                db.execute("DELETE FROM spans WHERE sequence_id = ?", (sequence_id,))
                db.execute("UPDATE counters SET value = value - 1 WHERE name = 'spans'")
            else:
                db.execute(
                    "UPDATE spans SET data = ?, attempt_id = ? WHERE sequence_id = ?",
                    (json.dumps(changed), changed["attempt_id"], sequence_id),
                )
            return f"{span['rollout_id']}/{span['attempt_id']}"
    raise AssertionError("no span to damage")


def kind(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda span: span["attributes"].get(semconv.SPAN_KIND) == name


def llm_call(span: dict[str, Any]) -> bool:
    return kind("llm")(span) and semconv.PROMPT_TOKEN_IDS in span["attributes"]


def with_attributes(**changes: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(span: dict[str, Any]) -> dict[str, Any]:
        return {**span, "attributes": {**span["attributes"], **{k.replace("__", "."): v for k, v in changes.items()}}}

    return change


def edit_attribute(name: str, edit: Callable[[Any], Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda span: {**span, "attributes": {**span["attributes"], name: edit(span["attributes"][name])}}


def _trained(span: dict[str, Any]) -> bool:
    return span["name"] == "relight.trained"


def drop_a_trained_call(path: Path) -> str:
    """Delete an LLM span an update's record names."""
    with sqlite3.connect(path) as db:
        rows = [json.loads(data) for (data,) in db.execute("SELECT data FROM spans")]
    named = next(span for span in rows if _trained(span))["attributes"]["relight.trained.span_ids"][0]
    return edit_spans(path, lambda span: span["span_id"] == named, lambda span: None)


def fail_a_succeeded_attempt(path: Path) -> str:
    with sqlite3.connect(path) as db:
        rollout_id, attempt_id, data = db.execute(
            "SELECT rollout_id, attempt_id, data FROM attempts WHERE status = 'succeeded' LIMIT 1"
        ).fetchone()
        attempt = {**json.loads(data), "status": AttemptStatus.FAILED.value}
        db.execute(
            "UPDATE attempts SET status = 'failed', data = ? WHERE rollout_id = ? AND attempt_id = ?",
            (json.dumps(attempt), rollout_id, attempt_id),
        )
    return rollout_id


def drop_a_rollout(path: Path) -> str:
    """Delete a rollout's row (and its attempts): its spans stay, held by no rollout."""
    with sqlite3.connect(path) as db:
        (rollout_id,) = db.execute("SELECT rollout_id FROM rollouts LIMIT 1").fetchone()
        db.execute("DELETE FROM rollouts WHERE rollout_id = ?", (rollout_id,))
        db.execute("DELETE FROM attempts WHERE rollout_id = ?", (rollout_id,))
    return "spans"


def delete_a_training_reward(path: Path) -> str:
    with sqlite3.connect(path) as db:
        training = {rollout_id for (rollout_id,) in db.execute("SELECT rollout_id FROM rollouts WHERE mode = 'train'")}
    return edit_spans(path, lambda s: kind("reward")(s) and s["rollout_id"] in training, lambda s: None)


def truncate(values: list[Any]) -> list[Any]:
    return values[:-1]


DAMAGES: dict[str, tuple[Callable[[Path], str], str]] = {
    "a reward deleted": (delete_a_training_reward, "reward_missing"),
    "a reward made text": (
        lambda p: edit_spans(p, kind("reward"), with_attributes(relight__reward="lots")),
        "reward_invalid",
    ),
    "a span moved to an attempt that does not exist": (
        lambda p: edit_spans(p, kind("llm"), lambda s: {**s, "attempt_id": s["attempt_id"] + "9"}),
        "span_without_attempt",
    ),
    "a rollout deleted, its spans left": (drop_a_rollout, "span_without_rollout"),
    "a succeeded attempt marked failed": (fail_a_succeeded_attempt, "status_inconsistent"),
    "token ids made text": (
        lambda p: edit_spans(p, llm_call, edit_attribute(semconv.PROMPT_TOKEN_IDS, lambda ids: [str(i) for i in ids])),
        "token_ids_malformed",
    ),
    "a logprob lost": (
        lambda p: edit_spans(p, llm_call, edit_attribute(semconv.RESPONSE_LOGPROBS, truncate)),
        "logprobs_misaligned",
    ),
    "a logprob made text": (
        lambda p: edit_spans(p, llm_call, edit_attribute(semconv.RESPONSE_LOGPROBS, lambda lps: ["x", *lps[1:]])),
        "transition_mismatch",
    ),
    "a token count changed": (
        lambda p: edit_spans(p, llm_call, edit_attribute(semconv.GEN_AI_USAGE_INPUT_TOKENS, lambda n: n + 1)),
        "usage_mismatch",
    ),
    "a trained call deleted": (drop_a_trained_call, "trained_call_missing"),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_each_damage_is_found_and_named(
    clean: Path, tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    copied = copy_of(clean, tmp_path)
    make, expected = DAMAGES[damage]
    where = make(copied)
    status, report = verify(copied, capsys)
    assert status == 1
    assert report["clean"] is False
    assert expected in report["problems"], report["problems"]
    found = report["problems"][expected]
    assert found["count"] >= 1
    assert any(where in example for example in found["examples"]), (where, found)
    assert main(["verify", "--store", f"sqlite:///{copied}"]) == 1  # and the table names it
    assert expected in capsys.readouterr().out


def test_a_reward_a_group_reward_withheld_for_a_reason_is_a_notice(clean: Path, tmp_path: Path) -> None:
    copied = copy_of(clean, tmp_path)
    why = {"no_signal": "malformed"}
    where = edit_spans(
        copied,
        kind("reward"),
        lambda s: {**s, "name": "annotation judge", "attributes": {"relight.span.kind": "annotation",
                                                                    "relight.annotation": json.dumps(why)}},
    )  # fmt: skip

    async def check() -> None:
        store = SqliteStore(copied)
        try:
            report = await verify_store(store)
        finally:
            await store.close()
        assert report.clean
        assert report.notices["no_reward_explained"].examples == [f"{where}: annotation judge: malformed"]

    asyncio.run(check())


# -- every backend, through the protocol alone -------------------------------------------------------------------


async def a_call_stored_twice(store: Store) -> str:
    """Through the store's own API: one LLM call of a rollout stored again in another rollout's attempt."""
    rollouts = [r for r in await store.list_rollouts() if r.status is RolloutStatus.SUCCEEDED]
    first, second = rollouts[0], rollouts[1]
    call = next(s for s in await store.query_spans(first.rollout_id) if s.kind is SpanKind.LLM)
    (attempt,) = [a for a in await store.list_attempts(second.rollout_id) if a.status is AttemptStatus.SUCCEEDED]
    copy = call.model_copy(
        update={"rollout_id": second.rollout_id, "attempt_id": attempt.attempt_id, "sequence_id": None}
    )
    await store.add_spans([Span.model_validate(copy.model_dump())])
    return f"{second.rollout_id}/{attempt.attempt_id}/{call.span_id}"


@pytest.fixture(params=["memory", "sqlite", "http", "postgresql"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Store, str]]:
    """A store of each backend, and the URL ``relight verify`` opens it by (None where only code can reach it)."""
    if request.param == "memory":
        store = InMemoryStore()
        yield store, ""
        await store.close()
    elif request.param == "sqlite":
        store = SqliteStore(tmp_path / "store.db")
        yield store, f"sqlite:///{tmp_path / 'store.db'}"
        await store.close()
    elif request.param == "http":
        store = InMemoryStore()
        with running_server(store) as url:
            yield store, url
        await store.close()
    else:
        if reason := postgres_unavailable():
            pytest.skip(reason)
        from relight.stores.postgres import PostgresStore

        with PostgresServer() as server:
            url = server.create_database()
            store = PostgresStore.from_url(url)
            yield store, url
            await store.close()


async def test_every_backend_is_checked_through_the_protocol_and_nothing_is_written(
    backend: tuple[Store, str], tmp_path: Path
) -> None:
    store, url = backend
    await train(store, tmp_path / "run")
    before = (await store.stats(), [await store.query_spans(r.rollout_id) for r in await store.list_rollouts()])
    if url:  # the command line opens it by URL, in a thread of its own (it runs its own event loop)
        assert await asyncio.to_thread(main, ["verify", "--store", url]) == 0
    report = await verify_store(store)
    assert report.clean, report.problems
    after = (await store.stats(), [await store.query_spans(r.rollout_id) for r in await store.list_rollouts()])
    assert after[1] == before[1]
    assert (after[0].spans, after[0].rollouts_by_status) == (before[0].spans, before[0].rollouts_by_status)
    where = await a_call_stored_twice(store)
    damaged = await verify_store(store)
    assert not damaged.clean
    assert any(example.startswith(where) for example in damaged.problems["duplicate_span"].examples)
    if url:
        assert await asyncio.to_thread(main, ["verify", "--store", url]) == 1


def test_a_store_that_is_not_there_is_an_error_not_a_new_empty_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", "--store", f"sqlite:///{tmp_path / 'typo.db'}"]) == 1
    assert "there is no SQLite store" in capsys.readouterr().err
    assert not (tmp_path / "typo.db").exists()
