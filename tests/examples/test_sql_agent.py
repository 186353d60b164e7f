"""The SQL agent (LangGraph): its write-check-rewrite loop offline, role filter, execution match and loaders."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import sql_agent
import sql_data
from sql_scripted import script

from relight import semconv
from relight.records import SpanKind
from relight.scripted import Reply, ScriptRequest
from relight.transitions.builder import TransitionBuilder
from relight_testing.examples import example_file, run_example

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


async def test_the_loop_rewrites_a_failing_query_and_only_write_and_rewrite_are_trained(dev) -> None:
    tasks = sql_data.load("dev")[:8]
    run = await dev(sql_agent.answer, tasks, script(mistakes=True), roles=sql_agent.TRAINED_ROLES)
    assert run.rewards == [1.0] * 8
    calls = run.roles(SpanKind.ROLE)
    rewrites = calls.count("rewrite_query")
    assert 0 < rewrites < 8, "the scripted writer errs on some questions, not all"
    assert calls.count("write_query") == 8
    assert calls.count("check_query") == 8 + rewrites, "every query, first or rewritten, is checked"
    assert sorted(t.role or "" for t in run.transitions) == sorted(["write_query"] * 8 + ["rewrite_query"] * rewrites)
    assert {t.step for t in run.transitions if t.role == "rewrite_query"} == {2}, "check is a step, just not trained"
    tools = run.tools()
    assert len(tools) == 8 + rewrites
    assert {(name, ok) for name, _, ok in tools} == {("execute_query", True)}


async def test_a_rewrite_without_sql_keeps_the_query_and_the_last_rewrite_is_not_checked(dev) -> None:
    """What SmolLM2 does as checker and rewriter once the writer's format is learnt: doubts, then an empty block."""
    writer = script(mistakes=False)

    def model(request: ScriptRequest) -> str | Reply:
        if "You fix SQLite" in request.system:
            return "```"
        if "You check SQLite" in request.system:
            return "```sql"
        return writer(request)

    tasks = [{**task, "max_turns": 1} for task in sql_data.load("dev")[:2]]
    run = await dev(sql_agent.answer, tasks, model, roles=sql_agent.TRAINED_ROLES)
    assert run.rewards == [1.0, 1.0], "the writer's right query stands"
    assert sorted(run.roles(SpanKind.ROLE)) == sorted(["write_query", "check_query", "rewrite_query"] * 2)
    assert len(run.tools()) == 4, "both queries of each question ran"


async def test_a_query_that_returns_other_rows_earns_nothing(dev) -> None:
    task = {**sql_data.load("dev")[0], "query": "SELECT 'something else'"}
    run = await dev(sql_agent.answer, [task], script(mistakes=False))
    assert run.rewards == [0.0]


@pytest.mark.parametrize(
    ("verdict", "accuracy", "roles"),
    [
        ("THE QUERY IS CORRECT", 1.0, {"write_query", "check_query"}),
        ("The query is wrong.", 0.0, {"write_query", "check_query", "rewrite_query"}),
    ],
)
async def test_a_trained_checker_is_rewarded_for_verdicts_that_match_the_execution_match(
    dev, verdict: str, accuracy: float, roles: set[str]
) -> None:
    """Two policies: the checker's reward (right verdicts' share, a reward of its role) reaches its calls alone;
    the writer's, the rewriter's and the rollout's stay the execution match. The writer's query is right, so
    passing it is the right verdict."""
    writer = script(mistakes=False)

    def model(request: ScriptRequest) -> str | Reply:
        if "You check SQLite" in request.system:
            return verdict
        if "You fix SQLite" in request.system:
            return "```"  # keeps the right query
        return writer(request)

    tasks = [{**task, "max_turns": 1} for task in sql_data.load("dev")[:2]]
    run = await dev(sql_agent.answer, tasks, model)
    builder = TransitionBuilder(policies=sql_agent.POLICIES)
    for result in run.results:
        assert result.reward == 1.0, "the checker's reward stays out of the rollout's"
        spans = [span for span in run.spans if span.rollout_id == result.rollout.rollout_id]
        own = [span for span in spans if span.kind is SpanKind.REWARD and semconv.REWARD_ROLE in span.attributes]
        assert [(s.attributes[semconv.REWARD], s.attributes[semconv.REWARD_ROLE]) for s in own] == [
            (accuracy, "check_query")
        ]
        transitions = builder.from_spans(result.rollout, spans[0].attempt_id, spans)
        assert {t.role for t in transitions} == roles
        for transition in transitions:
            checker = transition.role == "check_query"
            assert transition.policy == ("checker" if checker else "writer")
            assert transition.reward == (accuracy if checker else 1.0)
        notes = [span for span in spans if span.kind is SpanKind.ANNOTATION]
        assert [json.loads(str(span.attributes[semconv.ANNOTATION])) for span in notes] == [{"checker": accuracy}]


async def test_the_checkers_reward_never_counts_in_the_rollouts_and_its_accuracy_is_recorded(dev) -> None:
    run = await dev(sql_agent.answer, sql_data.load("dev")[:1], script(mistakes=False))
    assert run.rewards == [1.0], "the rollout's reward stays the execution match"
    notes = [span for span in run.spans if span.kind is SpanKind.ANNOTATION]
    assert len(notes) == 1


def test_the_readme_command_runs_offline(tmp_path: Path) -> None:
    rows = run_example(example_file("scenarios/sql_agent/sql_agent.py", near=__file__), cwd=tmp_path)
    assert len(rows) == 6, rows
    assert all("succeeded" in row and "1.000" in row for row in rows), rows


def test_execution_match_compares_results_as_spider_does() -> None:
    db = sql_data.load("dev")[0]["db_path"]
    table = sql_data.execute(db, "SELECT name FROM sqlite_master WHERE type = 'table' LIMIT 1")[0][0]
    gold = f"SELECT count(*) FROM {table}"
    assert sql_data.execution_match(db, f"select COUNT(*) from {table}", gold)
    assert not sql_data.execution_match(db, f"SELECT count(*) + 1 FROM {table}", gold)
    assert not sql_data.execution_match(db, "SELECT nonsense FROM nowhere", gold)
    assert not sql_data.execution_match(db, f"DELETE FROM {table}", gold), "the database is opened read-only"
    runaway = f"SELECT count(*) FROM {table} a, {table} b, {table} c, {table} d, {table} e"
    assert not sql_data.execution_match(db, runaway, gold), "a runaway query is interrupted"
    assert sql_data.execution_match(db, f"SELECT {1.00001}", "SELECT 1.0"), "floats are rounded"


def test_order_matters_only_when_the_gold_query_orders() -> None:
    db = sql_data.load("dev")[0]["db_path"]
    values = "SELECT 1 UNION ALL SELECT 2"
    assert sql_data.execution_match(db, "SELECT 2 UNION ALL SELECT 1", values)
    assert not sql_data.execution_match(db, "SELECT 1 AS x UNION SELECT 2 ORDER BY x DESC", f"{values} ORDER BY 1")


@pytest.mark.parametrize(
    ("reply", "query"),
    [
        ("```sql\nSELECT a FROM t;\n```", "SELECT a FROM t"),
        ("Here it is: SELECT a FROM t", "SELECT a FROM t"),
        ("```\nSELECT 1", "SELECT 1"),
    ],
)
def test_the_query_is_taken_from_the_reply(reply: str, query: str) -> None:
    assert sql_agent.extract_query(reply) == query


def test_the_shipped_benchmark_has_every_level_in_both_splits_and_every_gold_query_returns_rows() -> None:
    train, dev_split = sql_data.load("train"), sql_data.load("dev")
    assert len(train) + len(dev_split) >= 250
    assert (
        {t["difficulty"] for t in train} == {t["difficulty"] for t in dev_split} == {"easy", "medium", "hard", "extra"}
    )
    assert len({t["db_id"] for t in train}) == 5
    assert not {(t["db_id"], t["question"]) for t in train} & {(t["db_id"], t["question"]) for t in dev_split}
    for task in train + dev_split:
        assert sql_data.execute(task["db_path"], task["query"], limit=1), task


def test_the_loader_reads_the_real_spider_layout(tmp_path: Path) -> None:
    """train_spider.json and database/<db_id>/<db_id>.sqlite, with Spider's own record fields."""
    folder = tmp_path / "database" / "pets_1"
    folder.mkdir(parents=True)
    with sqlite3.connect(folder / "pets_1.sqlite") as connection:
        connection.executescript("CREATE TABLE pets (petid INTEGER, pettype TEXT); INSERT INTO pets VALUES (1, 'dog');")
    connection.close()
    record = {"db_id": "pets_1", "query": "SELECT count(*) FROM pets", "query_toks": [], "query_toks_no_value": [],
              "question": "How many pets are there?", "question_toks": [], "sql": {}}  # fmt: skip
    (tmp_path / "train_spider.json").write_text(json.dumps([record]))
    (tmp_path / "dev.json").write_text(json.dumps([record]))
    (task,) = sql_data.load_spider(tmp_path, "train")
    assert task["db_path"] == str(folder / "pets_1.sqlite")
    assert task["difficulty"] == "unknown"
    assert sql_data.execute(task["db_path"], task["query"]) == [(1,)]
    assert "CREATE TABLE pets" in sql_data.schema(task["db_path"])
    assert len(sql_data.load_spider(tmp_path, "dev")) == 1


def test_the_loader_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="split must be one of"):
        sql_data.load_spider(tmp_path, "test")
    with pytest.raises(FileNotFoundError, match=r"dev\.json"):
        sql_data.load_spider(tmp_path, "dev")
    (tmp_path / "dev.json").write_text(json.dumps([{"db_id": "x", "question": "q"}]))
    with pytest.raises(ValueError, match=r"dev\.json\[0\]: missing the field 'query'"):
        sql_data.load_spider(tmp_path, "dev")
