"""The ``relight`` command line, run as ``main(argv)`` on a real SQLite store, and ``store serve`` as a process."""

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from relight import semconv
from relight.cli import main
from relight.records import AttemptStatus, Rollout, RolloutRequest
from relight.stores.http import HttpStore
from relight.stores.sqlite import SqliteStore
from relight_testing.store import SETTLE, make_span


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("RELIGHT_STORE", raising=False)
    monkeypatch.delenv("RELIGHT_STORE_TOKEN", raising=False)


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/runs/store.db"


@pytest.fixture
def rollouts(store_url: str) -> list[Rollout]:
    """A store with one succeeded rollout (rewards 1 + 0.5), one failed and one queued."""

    async def fill() -> list[Rollout]:
        store = SqliteStore.from_url(store_url)
        await store.enqueue(
            [
                RolloutRequest(input={"question": "2+2?"}, group_id="task-1", rollout_id="ro-good"),
                RolloutRequest(input="b", group_id="task-1", max_attempts=1, rollout_id="ro-bad"),
                RolloutRequest(input="c", mode="val", rollout_id="ro-later"),
            ]
        )
        claimed = await store.claim("worker-1")
        assert claimed is not None
        aid = claimed[1].attempt_id
        role = {semconv.SPAN_KIND: "role", semconv.ROLE: "planner"}
        llm = {semconv.SPAN_KIND: "llm", semconv.PROMPT_TOKEN_IDS: [1, 2, 3, 4], semconv.GEN_AI_USAGE_OUTPUT_TOKENS: 7}
        await store.add_spans(
            [
                make_span("ro-good", aid, "s1", name="agent planner", attributes=role),
                make_span("ro-good", aid, "s2", name="chat tiny", attributes=llm).model_copy(
                    update={"parent_id": "s1"}
                ),
                *(
                    make_span("ro-good", aid, f"r{i}", name="reward", attributes=_reward(value))
                    for i, value in enumerate((1.0, 0.5))
                ),
            ]
        )
        await store.finish_attempt("ro-good", aid, AttemptStatus.SUCCEEDED)
        claimed = await store.claim("worker-2")
        assert claimed is not None
        error = "Traceback (most recent call last):\n  ...\nValueError: the agent gave up"
        await store.finish_attempt("ro-bad", claimed[1].attempt_id, AttemptStatus.FAILED, error=error)
        result = await store.list_rollouts()
        await store.close()
        return result

    return asyncio.run(fill())


def _reward(value: float) -> dict[str, object]:
    return {semconv.SPAN_KIND: "reward", semconv.REWARD: value}


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def test_help_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for command in ("rollouts", "show", "stats", "store"):
        assert command in out
    assert "RELIGHT_STORE" in out


def test_rollouts_lists_status_reward_and_error(
    rollouts: list[Rollout], store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(["rollouts", "--store", store_url], capsys)
    assert status == 0
    lines = {line.split()[1]: line for line in out.splitlines() if line.startswith("│ ro-")}
    assert set(lines) == {"ro-good", "ro-bad", "ro-later"}
    assert all(word in lines["ro-good"].split() for word in ("succeeded", "train", "task-1", "1/3", "1.5"))
    assert "ValueError: the agent gave up" in lines["ro-bad"]
    assert all(word in lines["ro-later"].split() for word in ("queued", "val", "0/3", "–"))


def test_rollouts_filters(rollouts: list[Rollout], store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    _, failed, _ = run(["rollouts", "--store", store_url, "--status", "failed"], capsys)
    _, val, _ = run(["rollouts", "--store", store_url, "--mode", "val"], capsys)
    _, limited, _ = run(["rollouts", "--store", store_url, "--limit", "1", "--offset", "1"], capsys)
    assert ("ro-bad" in failed, "ro-good" in failed) == (True, False)
    assert ("ro-later" in val, "ro-bad" in val) == (True, False)
    assert "1 of 3 rollout(s) (2-2; --offset 2 for the next page" in limited  # a page, and how to get the rest
    assert "ro-bad" in limited


def test_show_draws_attempts_and_nested_spans(
    rollouts: list[Rollout], store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(["show", "ro-good", "--store", store_url], capsys)
    assert status == 0
    lines = out.splitlines()
    assert "rollout ro-good" in lines[0]
    assert "reward 1.5" in lines[0]
    assert '{"question": "2+2?"}' in out
    attempt = next(line for line in lines if "attempt 1" in line)
    role = next(line for line in lines if "agent planner" in line)
    llm = next(line for line in lines if "chat tiny" in line)
    assert "worker-1" in attempt
    assert "[role]" in role
    assert "role planner" in role
    assert "[llm]" in llm
    assert "tokens 4→7" in llm
    indent = [len(line) - len(line.lstrip("│├└─ ")) for line in (attempt, role, llm)]
    assert indent == sorted(indent)
    assert len(set(indent)) == 3
    assert sum("[reward]" in line for line in lines) == 2


def test_a_roles_own_reward_is_shown_on_its_span_and_left_out_of_the_rollouts(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def fill() -> None:
        store = SqliteStore.from_url(store_url)
        await store.enqueue([RolloutRequest(input="q", rollout_id="ro-roles")])
        claimed = await store.claim("worker-1")
        assert claimed is not None
        aimed = {**_reward(0.25), semconv.REWARD_ROLE: "check_query"}
        spans = [make_span("ro-roles", claimed[1].attempt_id, "r0", name="reward", attributes=_reward(1.0))]
        spans.append(make_span("ro-roles", claimed[1].attempt_id, "r1", name="reward checker", attributes=aimed))
        await store.add_spans(spans)
        await store.finish_attempt("ro-roles", claimed[1].attempt_id, AttemptStatus.SUCCEEDED)
        await store.close()

    asyncio.run(fill())
    _, listed, _ = run(["rollouts", "--store", store_url], capsys)
    (row,) = [line for line in listed.splitlines() if line.startswith("│ ro-roles")]
    assert row.split()[row.split().index("1/3") + 2] == "1", "the rollout's reward is the agent's own"
    _, shown, _ = run(["show", "ro-roles", "--store", store_url], capsys)
    assert "reward 1" in shown.splitlines()[0]
    assert "1.25" not in shown
    assert "reward 0.25 for role check_query" in shown


def test_stats_counts(rollouts: list[Rollout], store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(["stats", "--store", store_url], capsys)
    assert status == 0
    assert "rollouts: 3" in out
    assert "attempts: 2" in out
    assert "spans: 4" in out


def test_the_store_comes_from_the_environment(
    rollouts: list[Rollout], store_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELIGHT_STORE", store_url)
    status, out, _ = run(["stats"], capsys)
    assert status == 0
    assert "rollouts: 3" in out


def test_errors_are_explained(rollouts: list[Rollout], store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(["show", "ro-missing", "--store", store_url], capsys)
    assert (status, "rollout 'ro-missing' does not exist") == (1, err.removeprefix("error: ").strip())
    status, _, err = run(["stats"], capsys)
    assert status == 1
    assert "pass --store URL or set RELIGHT_STORE" in err
    status, _, err = run(["store", "serve", "--store", store_url, "--host", "0.0.0.0", "--port", "0"], capsys)
    assert status == 1
    assert "without a token" in err


def test_store_serve_shares_a_store_until_terminated(
    rollouts: list[Rollout], store_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    command = [sys.executable, "-m", "relight.cli", "store", "serve", "--store", store_url, "--port", "0"]
    env = {**os.environ, "RELIGHT_STORE_TOKEN": "s3cret"}
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as server:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith(f"serving {store_url} at http://127.0.0.1:"), line + server.communicate()[1]
        url = line.split()[-1]

        async def remote_stats() -> int:
            client = HttpStore(url, token="s3cret")
            try:
                return (await client.stats()).spans
            finally:
                await client.close()

        assert asyncio.run(remote_stats()) == 4
        status, out, _ = run(["rollouts", "--store", url], capsys)
        assert status == 1  # no token
        monkeypatch.setenv("RELIGHT_STORE_TOKEN", "s3cret")
        status, out, _ = run(["rollouts", "--store", url], capsys)
        assert status == 0
        assert "ro-good" in out
        server.send_signal(signal.SIGTERM)
        assert server.wait(SETTLE) == 0


def test_every_listing_prints_json_that_parses_back(
    rollouts: list[Rollout], store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run(["rollouts", "--store", store_url, "--json"], capsys)
    listed = {row["rollout_id"]: row for row in map(json.loads, out.splitlines())}
    assert set(listed) == {"ro-good", "ro-bad", "ro-later"}
    assert (listed["ro-good"]["reward"], listed["ro-good"]["status"]) == (1.5, "succeeded")
    assert listed["ro-bad"]["error"].startswith("Traceback (most recent call last):")
    _, out, _ = run(["stats", "--store", store_url, "--json"], capsys)
    assert json.loads(out)["spans"] == 4
    _, out, _ = run(["show", "ro-good", "--store", store_url, "--json"], capsys)
    shown = json.loads(out)
    assert shown["rollout"]["rollout_id"] == "ro-good"
    assert len(shown["attempts"]) == 1
    assert {span["name"] for span in shown["spans"]} >= {"agent planner", "chat tiny"}


def test_piped_output_never_cuts_ids_or_errors(
    store_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    long_id = "ro-" + "9299" * 12
    error = "RuntimeError: upstream failure (engine answered 502): " + "the model server went away " * 4

    async def fill() -> None:
        store = SqliteStore.from_url(store_url)
        await store.enqueue([RolloutRequest(input="x", max_attempts=1, rollout_id=long_id)])
        claimed = await store.claim("w")
        assert claimed is not None
        await store.finish_attempt(long_id, claimed[1].attempt_id, AttemptStatus.FAILED, error=error)
        await store.close()

    asyncio.run(fill())
    _, out, _ = run(["rollouts", "--store", store_url], capsys)
    assert long_id in out
    assert error.strip() in out
    _, out, _ = run(["show", long_id, "--store", store_url], capsys)
    assert error.strip() in out


def test_show_text_prints_what_the_model_was_asked_and_answered(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    asked = [{"role": "system", "content": "Write SQL."}, {"role": "user", "content": "How many users signed up?"}]
    answered = [{"role": "assistant", "content": "SELECT count(*) FROM users;"}]

    async def fill() -> None:
        store = SqliteStore.from_url(store_url)
        await store.enqueue([RolloutRequest(input="q", rollout_id="ro-sql")])
        claimed = await store.claim("w")
        assert claimed is not None
        attributes = {
            semconv.SPAN_KIND: "llm",
            semconv.GEN_AI_INPUT_MESSAGES: json.dumps(asked),
            semconv.GEN_AI_OUTPUT_MESSAGES: json.dumps(answered),
        }
        role = {semconv.SPAN_KIND: "role", semconv.ROLE: "write_query"}
        await store.add_spans(
            [
                make_span("ro-sql", claimed[1].attempt_id, "s1", name="agent write_query", attributes=role),
                make_span("ro-sql", claimed[1].attempt_id, "s2", name="chat", attributes=attributes).model_copy(
                    update={"parent_id": "s1"}
                ),
            ]
        )
        await store.finish_attempt("ro-sql", claimed[1].attempt_id, AttemptStatus.SUCCEEDED)
        await store.close()

    asyncio.run(fill())
    status, out, _ = run(["show", "ro-sql", "--store", store_url, "--text"], capsys)
    assert status == 0
    lines = out.splitlines()
    assert "── call 1  role write_query  (chat)" in lines
    assert "system: Write SQL." in lines
    assert "user: How many users signed up?" in lines
    assert "answer: SELECT count(*) FROM users;" in lines
