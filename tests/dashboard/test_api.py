"""Every endpoint of the dashboard, served for real, over a store a real short training run filled."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import relight
from relight import semconv
from relight.dashboard import Dashboard, decoder_of
from relight.errors import ConfigError
from relight.records import Mode, RolloutRequest, RolloutStatus
from relight.store import Store
from relight.transitions.builder import episode_return, last_attempt_spans
from relight.transitions.verdicts import Reason


@pytest.fixture
async def store(trained: Any) -> AsyncIterator[Store]:
    opened = relight.open_store(trained.url)
    yield opened
    await opened.close()


@pytest.fixture
async def client(store: Store, trained: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with Dashboard(store, port=0, builder=trained.builder, decode=decoder_of([trained.engine])) as dashboard:
        await dashboard.catalog.refresh()
        async with httpx.AsyncClient(base_url=dashboard.url, timeout=30) as http:
            yield http


async def get(client: httpx.AsyncClient, path: str, **params: Any) -> Any:
    response = await client.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


async def test_the_page_and_its_static_files_are_served(client: httpx.AsyncClient) -> None:
    page = await client.get("/")
    assert page.status_code == 200
    assert "relight dashboard" in page.text
    for path in ("/static/app.js", "/static/style.css", "/static/vendor/uplot/uPlot.iife.min.js"):
        response = await client.get(path)
        assert response.status_code == 200, path
        assert len(response.content) > 1000, path


async def test_overview_counts_what_the_store_holds(client: httpx.AsyncClient, store: Store) -> None:
    overview = await get(client, "/api/overview")
    stats = await store.stats()
    assert overview["stats"]["spans"] == stats.spans
    assert overview["rollouts"] == sum(stats.rollouts_by_status.values()) == len(await store.list_rollouts())
    assert (overview["pending"], overview["roles"], overview["decoded"]) == (0, "solver", True)


async def test_curves_give_the_rewards_the_trainer_reported(client: httpx.AsyncClient, trained: Any) -> None:
    points = {p["policy_version"]: p for p in (await get(client, "/api/curves"))["points"]}
    steps = [row for row in trained.history if "reward_mean" in row]
    validations = [row for row in trained.history if "val_reward_mean" in row]
    # A step samples with the version the step before it made; the version rises only when weights change.
    sampled_with, version = {}, 0
    for row in steps:
        sampled_with[int(row["step"])] = version
        version = int(row["policy_version"])
    assert sorted(points) == sorted({*sampled_with.values(), version})
    for sampled in set(sampled_with.values()):
        rows = [row for row in steps if sampled_with[int(row["step"])] == sampled]
        point = points[sampled]
        assert point["steps"] == [int(row["step"]) for row in rows]
        assert point["train_rollouts"] == sum(row["rollouts"] for row in rows)
        assert point["rollouts_per_s"] > 0
        if len(rows) == 1:
            assert point["train_reward"] == pytest.approx(rows[0]["reward_mean"])
        if all(row.get("update_skipped") == 1.0 for row in rows):  # an update that changed nothing trained nothing
            assert point["trained_calls"] == 0
            assert point["dropped"][Reason.UPDATE_SKIPPED] == sum(row["transitions"] for row in rows)
        elif all(row["groups_no_signal"] == 0 for row in rows):
            assert point["trained_calls"] == sum(row["transitions"] for row in rows)
    after = {0: 0, **{int(row["step"]): int(row["policy_version"]) for row in steps}}
    for row in validations:  # validation after step s runs the version step s left
        served = [other for other in validations if after[int(other["step"])] == after[int(row["step"])]]
        expected = statistics.fmean(other["val_reward_mean"] for other in served)
        assert points[after[int(row["step"])]]["val_reward"] == pytest.approx(expected)
    first = points[0]
    assert first["failed"] == trained.samples  # the task that always fails, in step 1: two calls on each try
    assert first["dropped"][Reason.FILTERED_ROLE] > 0
    assert first["dropped"][Reason.FAILED_ROLLOUT] == trained.samples * 2
    assert first["dropped_calls"] == sum(first["dropped"].values())
    # the retried task's first tries and the failing task's first tries: named, their calls on the rollout pages
    assert first["retried_attempts"] == trained.samples * 2


async def test_the_list_filters_by_every_field(client: httpx.AsyncClient, store: Store, trained: Any) -> None:
    everything = await get(client, "/api/rollouts", limit=500)
    rollouts = await store.list_rollouts()
    assert everything["total"] == len(rollouts)
    assert [row["rollout_id"] for row in everything["rows"]] == [r.rollout_id for r in reversed(rollouts)]
    rewards = {r.rollout_id: episode_return(await last_attempt_spans(store, r.rollout_id)) for r in rollouts}
    assert {row["rollout_id"]: row["reward"] for row in everything["rows"]} == rewards

    async def ids(**query: Any) -> set[str]:
        page = await get(client, "/api/rollouts", limit=500, **query)
        assert page["total"] == len(page["rows"])
        return {row["rollout_id"] for row in page["rows"]}

    assert await ids(status="failed") == {r.rollout_id for r in rollouts if r.status is RolloutStatus.FAILED}
    assert len(await ids(status="failed")) == trained.samples
    assert await ids(mode="val") == {r.rollout_id for r in rollouts if r.mode is Mode.VAL}
    group = rollouts[0].group_id
    assert await ids(group_id=group) == {r.rollout_id for r in rollouts if r.group_id == group}
    assert await ids(step=2) == {r.rollout_id for r in rollouts if r.metadata.get("step") == 2}
    assert await ids(policy_version=1) == {r.rollout_id for r in rollouts if r.resources_version == 1}
    assert await ids(min_attempts=2) == {r.rollout_id for r in rollouts if r.attempt_count >= 2}
    assert await ids(min_reward=0.5) == {i for i, reward in rewards.items() if reward is not None and reward >= 0.5}
    assert await ids(max_reward=0.5) == {i for i, reward in rewards.items() if reward is not None and reward <= 0.5}
    roles = {
        r.rollout_id: {s.attributes.get(semconv.ROLE) for s in await last_attempt_spans(store, r.rollout_id)}
        for r in rollouts
    }
    assert await ids(role="critic") == {i for i, named in roles.items() if "critic" in named}
    assert await ids(role="nobody") == set()
    assert await ids(reason="failed rollout") == await ids(status="failed")
    assert await ids(reason="retried attempt") == set()  # the list judges each rollout's last attempt
    assert await ids(reason="validation rollout") == await ids(mode="val")
    assert await ids(mode="train", status="succeeded") <= await ids(reason="filtered role")


async def test_the_lists_reasons_are_what_the_spans_say(client: httpx.AsyncClient, store: Store, trained: Any) -> None:
    """The list reads reasons off the store's summaries; judging every rollout's spans must agree."""
    rows = {row["rollout_id"]: row for row in (await get(client, "/api/rollouts", limit=500))["rows"]}
    judged: dict[str, dict[str, int]] = {}
    for rollout in await store.list_rollouts():
        attempts = await store.list_attempts(rollout.rollout_id)
        spans = await store.query_spans(rollout.rollout_id)
        verdict = trained.builder.explain_spans(rollout, attempts[-1:], spans)
        judged[rollout.rollout_id] = {reason.value: count for reason, count in verdict.reasons().items()}
        assert rows[rollout.rollout_id]["trained"] == sum(call.trained for call in verdict.calls)
        assert rows[rollout.rollout_id]["calls"] == len(verdict.calls)
    assert {rollout_id: row["reasons"] for rollout_id, row in rows.items()} == judged
    seen = {reason for reasons in judged.values() for reason in reasons}
    assert seen >= {Reason.FAILED_ROLLOUT, Reason.VALIDATION, Reason.FILTERED_ROLE}
    for reason in Reason:
        page = await get(client, "/api/rollouts", limit=500, reason=reason.value)
        assert {row["rollout_id"] for row in page["rows"]} == {i for i, r in judged.items() if reason in r}, reason


async def test_pages_cover_the_list_once(client: httpx.AsyncClient) -> None:
    total = (await get(client, "/api/rollouts", limit=1))["total"]
    seen: list[str] = []
    for offset in range(0, total, 7):
        page = await get(client, "/api/rollouts", offset=offset, limit=7)
        assert (page["total"], page["offset"], page["limit"]) == (total, offset, 7)
        seen += [row["rollout_id"] for row in page["rows"]]
    assert len(seen) == len(set(seen)) == total
    assert (await get(client, "/api/rollouts", offset=total))["rows"] == []


async def test_cursor_pages_walk_the_list_as_offsets_do_and_back(client: httpx.AsyncClient) -> None:
    where = {"status": "succeeded", "limit": 4}
    by_cursor = [await get(client, "/api/rollouts", **where)]
    by_offset = [await get(client, "/api/rollouts", offset=o, **where) for o in range(0, by_cursor[0]["total"], 4)]
    while (last := by_cursor[-1])["offset"] + len(last["rows"]) < last["total"]:
        by_cursor.append(await get(client, "/api/rollouts", before=last["rows"][-1]["rollout_id"], **where))
    assert len(by_cursor) > 2
    assert [(p["offset"], p["rows"]) for p in by_cursor] == [(p["offset"], p["rows"]) for p in by_offset]
    for earlier, later in itertools.pairwise(by_cursor):
        back = await get(client, "/api/rollouts", after=later["rows"][0]["rollout_id"], **where)
        assert (back["offset"], back["rows"]) == (earlier["offset"], earlier["rows"])


async def test_a_rollout_page_has_its_attempts_span_tree_calls_and_tokens(
    client: httpx.AsyncClient, store: Store, trained: Any
) -> None:
    (retried,) = [r for r in await store.list_rollouts(status=RolloutStatus.SUCCEEDED) if r.attempt_count == 2][:1]
    detail = await get(client, f"/api/rollouts/{retried.rollout_id}")
    assert detail["rollout"]["rollout_id"] == retried.rollout_id
    assert [a["status"] for a in detail["attempts"]] == ["failed", "succeeded"]
    assert "fails on purpose" in detail["attempts"][0]["error"]

    spans = await store.query_spans(retried.rollout_id, detail["attempts"][1]["attempt_id"])
    tree = detail["attempts"][1]["spans"]
    assert sorted(node["span_id"] for node in tree) == sorted(span.span_id for span in spans)
    by_id = {span.span_id: span for span in spans}
    depth = {node["span_id"]: node["depth"] for node in tree}
    for node in tree:  # depth-first: each span after its parent, one level below it
        parent = by_id[node["span_id"]].parent_id
        expected = depth[parent] + 1 if parent in by_id else 0
        assert node["depth"] == expected
        if parent in by_id:
            assert [n["span_id"] for n in tree].index(parent) < tree.index(node)
    assert {node["kind"] for node in tree} >= {"role", "llm", "reward"}
    assert all(node["start_ms"] >= 0 and node["duration_ms"] >= 0 for node in tree)

    verdict = await trained.builder.explain(store, retried)
    calls = detail["calls"]
    assert [(c["span_id"], c["reason"], c["trained"]) for c in calls] == [
        (v.span.span_id, v.reason.value if v.reason else None, v.trained) for v in verdict.calls
    ]
    solver = next(c for c in calls if c["role"] == "solver" and c["attempt_id"] == verdict.attempt_id)
    critic = next(c for c in calls if c["role"] == "critic" and c["attempt_id"] == verdict.attempt_id)
    assert critic["reason"] == Reason.FILTERED_ROLE
    assert "solver" in critic["detail"]
    # Trained only if an update that changed the weights learned from it (the tiny model's equal rewards skip it).
    assert solver["reason"] in (None, Reason.UPDATE_SKIPPED, Reason.NO_SIGNAL)
    if solver["trained"]:
        assert solver["group_id"] == retried.group_id
    assert solver["reward"] == detail["reward"]
    span = next(s for s in spans if s.span_id == solver["span_id"])
    ids = span.attributes[semconv.RESPONSE_TOKEN_IDS]
    assert [t["id"] for t in solver["tokens"]] == ids
    assert [t["logprob"] for t in solver["tokens"]] == span.attributes[semconv.RESPONSE_LOGPROBS]
    tokenizer = trained.engine.tokenizer
    assert isinstance(ids, list)
    assert [t["text"] for t in solver["tokens"]] == [tokenizer.decode([i]) for i in ids]
    assert solver["messages"][0]["role"] == "user"
    assert solver["prompt_tokens"] > 0
    assert {c["reason"] for c in calls if c["attempt_id"] != verdict.attempt_id} == {Reason.RETRIED_ATTEMPT}
    assert detail["verdict"]["summary"] == verdict.summary()


async def test_without_a_tokenizer_the_token_view_has_ids(store: Store, trained: Any) -> None:
    async with Dashboard(store, port=0, builder=trained.builder) as dashboard, httpx.AsyncClient() as http:
        rollout = (await store.list_rollouts(status=RolloutStatus.SUCCEEDED, limit=1))[0]
        detail = (await http.get(f"{dashboard.url}api/rollouts/{rollout.rollout_id}")).json()
    assert detail["decoded"] is False
    assert all(t["text"] is None and isinstance(t["id"], int) for c in detail["calls"] for t in c["tokens"])


@pytest.mark.parametrize(
    ("path", "status", "error", "names"),
    [
        ("/api/rollouts/ro-nope", 404, "NotFoundError", "ro-nope"),
        ("/api/rollouts?before=ro-gone", 404, "NotFoundError", "before='ro-gone'"),
        ("/api/rollouts?limit=0", 422, "ValidationError", "limit"),
        ("/api/rollouts?status=finished", 422, "ValidationError", "status"),
        ("/api/rollouts?reason=bored", 422, "ValidationError", "reason"),
        ("/api/rollouts?min_reward=high", 422, "ValidationError", "min_reward"),
        ("/api/rollouts?colour=red", 422, "ValidationError", "colour"),
        ("/api/nothing", 404, "NotFound", "/api/nothing"),
    ],
)
async def test_bad_requests_get_a_specific_json_error(
    client: httpx.AsyncClient, path: str, status: int, error: str, names: str
) -> None:
    response = await client.get(path)
    assert response.status_code == status
    body = response.json()
    assert body["error"] == error
    assert names in body["detail"]


async def test_the_dashboard_is_read_only(client: httpx.AsyncClient) -> None:
    for method in ("POST", "PUT", "DELETE"):
        response = await client.request(method, "/api/rollouts")
        assert response.status_code == 405
        assert response.json()["error"] == "MethodNotAllowed"


async def test_a_token_guards_it_and_is_required_beyond_loopback(store: Store) -> None:
    with pytest.raises(ConfigError, match="without a token"):
        Dashboard(store, host="0.0.0.0", port=0)
    async with Dashboard(store, port=0, token="s3cret") as dashboard, httpx.AsyncClient() as http:
        base = dashboard.url.split("?")[0]
        refused = await http.get(f"{base}api/overview")
        assert refused.status_code == 401
        assert refused.json()["error"] == "Unauthorized"
        assert (await http.get(f"{base}api/overview", headers={"authorization": "Bearer wrong"})).status_code == 401
        assert (await http.get(f"{base}api/overview", headers={"authorization": "Bearer s3cret"})).status_code == 200
        page = await http.get(dashboard.url)  # the printed URL carries the token and leaves a cookie
        assert page.status_code == 200
        assert "relight_dashboard_token" in page.headers["set-cookie"]
        assert (await http.get(f"{base}api/overview")).status_code == 200  # the cookie now


async def test_events_announce_changes_as_the_store_moves(tmp_path: Path) -> None:
    live = relight.open_store(f"sqlite:///{tmp_path / 'live.db'}")
    try:
        async with (
            Dashboard(live, port=0, interval=0.05) as dashboard,
            httpx.AsyncClient(timeout=30) as http,
            http.stream("GET", f"{dashboard.url}api/events") as stream,
        ):
            assert stream.headers["content-type"].startswith("text/event-stream")
            events = aiter(stream.aiter_lines())
            first = await _next_event(events)
            await live.enqueue([RolloutRequest(input="new")])
            second = await _next_event(events)
            assert second["version"] > first["version"]
            rows = (await http.get(f"{dashboard.url}api/rollouts")).json()["rows"]
            assert [row["status"] for row in rows] == ["queued"]
    finally:
        await live.close()


async def _next_event(lines: AsyncIterator[str]) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        async for line in lines:
            if line.startswith("data: "):
                return json.loads(line[len("data: ") :])
        raise AssertionError("the event stream ended")

    return await asyncio.wait_for(read(), timeout=30)


def test_the_command_serves_until_interrupted(trained: Any) -> None:
    command = [sys.executable, "-m", "relight.cli", "dashboard", "--store", trained.url, "--port", "0"]
    env = {**os.environ, "COLUMNS": "300"}
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as server:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith(f"dashboard of {trained.url} at http://127.0.0.1:"), line
        url = line.split(" at ", 1)[1].strip()
        overview = httpx.get(f"{url}api/overview", timeout=30).json()
        assert overview["stats"]["spans"] > 0
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=60) == 0


def test_show_and_export_give_the_dashboards_reasons(trained: Any, tmp_path: Any) -> None:
    async def pick() -> tuple[str, str]:
        store = relight.open_store(trained.url)
        try:
            retried = [r for r in await store.list_rollouts(status=RolloutStatus.SUCCEEDED) if r.attempt_count == 2]
            verdict = await trained.builder.explain(store, retried[0])
            return retried[0].rollout_id, verdict.summary()
        finally:
            await store.close()

    rollout_id, summary = asyncio.run(pick())
    assert "1 filtered role; 2 retried attempt" in summary
    env = {**os.environ, "COLUMNS": "300"}
    show = subprocess.run(  # no --role: the run's own filter, read from the store
        [sys.executable, "-m", "relight.cli", "show", rollout_id, "--store", trained.url],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    assert "not trained: filtered role" in show
    assert "not trained: retried attempt" in show
    assert f"training {summary}" in show
    export = subprocess.run(
        [
            sys.executable,
            "-m",
            "relight.cli",
            "export",
            "--store",
            trained.url,
            "--role",
            "solver",
            "--mode",
            "train",
            "--out",
            str(tmp_path / "t.jsonl"),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stderr
    assert "filtered role" in export
    assert "failed rollout" in export


async def test_the_command_decodes_with_the_tokenizer_the_run_published(store: Store, trained: Any) -> None:
    """``relight dashboard`` without ``--tokenizer``: relight-torch published its tokenizer with the policy."""
    from relight.cli.dashboard import run_decoder

    decode = await run_decoder(store)
    assert decode is not None
    ids = trained.engine.tokenizer.encode("What is 2 * 5?")
    assert decode(ids) == trained.engine.tokenizer.decode(ids)
