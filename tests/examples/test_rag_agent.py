"""The RAG agent (OpenAI Agents SDK): two searches then the answer offline, F1 reward, BM25 search, MuSiQue loader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import rag_agent
import rag_data
from rag_scripted import scripted_model

from relight_testing.examples import example_file, run_example


async def test_dev_mode_answers_with_two_searches_of_the_researcher(dev) -> None:
    tasks = rag_data.load("dev")[:6]
    run = await dev(rag_agent.research, tasks, scripted_model)
    assert run.rewards == [1.0] * 6
    assert run.tools() == [("search", "researcher", True)] * 12
    assert [t.role for t in run.transitions] == ["researcher"] * 18, "two searches and the answer per question"


async def test_a_partly_right_answer_earns_its_token_f1(dev) -> None:
    task = {**rag_data.load("dev")[0], "answer": "Lower Example Town"}
    run = await dev(rag_agent.research, [task], scripted_model)
    assert run.rewards == [0.0]
    assert rag_data.f1("the Lower Town", "Lower Example Town") == pytest.approx(0.8)
    assert rag_data.best_f1("Oslo.", ["Christiania", "oslo"]) == 1.0


def test_the_readme_command_runs_offline(tmp_path: Path) -> None:
    rows = run_example(example_file("scenarios/rag_agent/rag_agent.py", near=__file__), cwd=tmp_path)
    assert len(rows) == 6, rows
    assert all("succeeded" in row and "1.000" in row for row in rows), rows


def test_each_hop_finds_its_article_and_the_question_alone_misses_the_second() -> None:
    index = rag_data.index_of(str(rag_data.KB))
    misses = 0
    for line in (rag_data.DATA / "dev.jsonl").read_text().splitlines():
        record = json.loads(line)
        supporting = [p["title"] for p in record["paragraphs"]]
        for hop, title in zip(record["question_decomposition"], supporting, strict=True):
            assert title in [doc.title for doc in index.search(hop["question"], k=3)], hop
        misses += supporting[1] not in [d.title for d in index.search(record["question"], k=3)]
    assert misses > len((rag_data.DATA / "dev.jsonl").read_text().splitlines()) // 2, "one search is not enough"


def test_the_shipped_questions_split_by_subject_and_their_answers_are_in_the_knowledge_base() -> None:
    train, dev_split = rag_data.load("train"), rag_data.load("dev")
    assert len(train) + len(dev_split) >= 200
    assert len(dev_split) >= 40
    assert not {t["question"] for t in train} & {t["question"] for t in dev_split}
    text = rag_data.KB.read_text()
    assert all(t["answer"] in text and t["hops"] == 2 for t in train + dev_split)


def test_the_loader_reads_musique_records_and_searches_their_paragraphs(tmp_path: Path) -> None:
    """A record shaped as musique_ans_v1.0_dev.jsonl ships it; unanswerable ones (musique_full) are skipped."""
    record = {
        "id": "2hop__1_2", "question": "Who founded the company that made the Quattro?",
        "paragraphs": [
            {"idx": 0, "title": "Audi Quattro", "paragraph_text": "The Quattro is a car made by Audi.",
             "is_supporting": True},
            {"idx": 1, "title": "Audi", "paragraph_text": "Audi was founded by August Horch.", "is_supporting": True},
            {"idx": 2, "title": "Oslo", "paragraph_text": "Oslo is the capital of Norway.", "is_supporting": False},
        ],
        "question_decomposition": [
            {"id": 1, "question": "Who made the Quattro?", "answer": "Audi", "paragraph_support_idx": 0},
            {"id": 2, "question": "Who founded #1?", "answer": "August Horch", "paragraph_support_idx": 1},
        ],
        "answer": "August Horch", "answer_aliases": ["Horch"], "answerable": True,
    }  # fmt: skip
    path = tmp_path / "musique_ans_v1.0_dev.jsonl"
    path.write_text(json.dumps(record) + "\n" + json.dumps({**record, "id": "x", "answerable": False}) + "\n")
    (task,) = rag_data.load_musique(path)
    assert (task["answer"], task["aliases"], task["hops"], task["corpus"]) == ("August Horch", ["Horch"], 2, str(path))
    assert rag_data.index_of(task["corpus"]).search("Audi founded")[0].title == "Audi"
    assert len(rag_data.read_documents(path)) == 3, "the repeated record's paragraphs are kept once"


def test_the_loader_names_the_line_and_field_that_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "q", "answer": "a"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: missing the field 'paragraphs'"):
        rag_data.load_musique(path)
