"""A knowledge base of invented facts, two-hop questions over it, a BM25 search, and a MuSiQue loader.

MuSiQue (Trivedi et al., 2022) composes single-hop questions into multi-hop ones whose answer
needs every hop. Here the project writes its own: countries, cities, people, works and companies
that do not exist (so the model cannot answer from memory), one short article each in
``data/kb.jsonl``, and questions of five kinds whose answer sits in a second article that only
the first one names (the author of a work → where the author was born). Articles also carry
distractor facts, so the second search needs the first one's answer. Questions are split
``train``/``dev`` by their subject entity; both files are in MuSiQue's format, so
:func:`load_musique` reads them exactly as it reads ``musique_ans_v1.0_dev.jsonl``.

Search is SQLite's FTS5 with its BM25 ranking, from the standard library.

Regenerate the shipped files with ``python examples/scenarios/rag_agent/rag_data.py``.
"""

from __future__ import annotations

import functools
import json
import random
import re
import sqlite3
import string
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
KB = DATA / "kb.jsonl"
SPLITS = ("train", "dev")

SYLLABLES = ["val", "dor", "kes", "tri", "mon", "bel", "zan", "or", "vik", "lum", "pel", "sar", "ten",
             "qua", "ris", "hal", "nor", "ev", "tal", "bra", "cor", "mir", "sel", "dun", "fen", "gar",
             "ost", "rin", "ul", "wen"]  # fmt: skip
PROFESSIONS = ["novelist", "painter", "composer", "architect", "chemist", "poet"]
WORK_KINDS = {"novelist": "novel", "painter": "painting", "composer": "symphony", "architect": "bridge design",
              "chemist": "treatise", "poet": "poem cycle"}  # fmt: skip
INDUSTRIES = ["shipping", "textiles", "printing", "glassworks", "railways", "optics"]


@dataclass(frozen=True, slots=True)
class Document:
    title: str
    text: str


def _word(rng: random.Random, parts: int, used: set[str]) -> str:
    while True:
        word = "".join(rng.choice(SYLLABLES) for _ in range(parts)).capitalize()
        if word not in used and len(word) > 3:
            used.add(word)
            return word


def build(seed: int = 0) -> tuple[list[Document], list[dict[str, Any]]]:
    """The articles, and the two-hop questions in MuSiQue's format (before the split)."""
    rng = random.Random(f"rag-{seed}")
    used: set[str] = set()
    countries = [_word(rng, 2, used) + "ia" for _ in range(10)]
    cities = [_word(rng, 2, used) for _ in range(30)]
    rivers = [_word(rng, 2, used) for _ in range(12)]
    city_country = {city: countries[i % len(countries)] for i, city in enumerate(cities)}
    capital = {country: next(c for c in cities if city_country[c] == country) for country in countries}
    city_river = {city: rng.choice(rivers) for city in cities}
    people = [f"{_word(rng, 2, used)} {_word(rng, 2, used)}" for _ in range(48)]
    person = {
        name: {"born": rng.choice(cities), "lived": rng.choice(cities), "year": rng.randint(1780, 1960),
               "job": PROFESSIONS[i % len(PROFESSIONS)]}
        for i, name in enumerate(people)
    }  # fmt: skip
    works = {}
    for name in people:
        for _ in range(2):
            title = f"The {_word(rng, 2, used)} {rng.choice(['Garden', 'Letters', 'Tide', 'Lantern', 'Hours'])}"
            works[title] = {"by": name, "year": person[name]["year"] + rng.randint(22, 60)}
    companies = {
        f"{_word(rng, 2, used)} {rng.choice(['Works', 'Company', 'Brothers', 'Guild'])}": {
            "founder": rng.choice(people), "seat": rng.choice(cities), "industry": rng.choice(INDUSTRIES)}
        for _ in range(24)
    }  # fmt: skip
    docs = [
        Document(c, f"{c} is a country. Its capital is {capital[c]}. Its largest river is {rng.choice(rivers)}.")
        for c in countries
    ]
    docs += [
        Document(c, f"{c} is a city in {city_country[c]}, on the river {city_river[c]}. "
                 f"It was founded in {rng.randint(900, 1700)}.")
        for c in cities
    ]  # fmt: skip
    docs += [
        Document(n, f"{n} (born {p['year']}) was a {p['job']}. {n} was born in {p['born']} "
                 f"and later lived and worked in {p['lived']}.")
        for n, p in person.items()
    ]  # fmt: skip
    docs += [
        Document(t, f"{t} is a {WORK_KINDS[person[w['by']]['job']]} by {w['by']}, completed in {w['year']}.")
        for t, w in works.items()
    ]
    docs += [
        Document(c, f"{c} is a {v['industry']} firm founded by {v['founder']}. Its seat is in {v['seat']}.")
        for c, v in companies.items()
    ]
    questions: list[dict[str, Any]] = []

    def ask(subject: str, question: str, hops: list[tuple[str, str, str]]) -> None:
        """``hops``: (single-hop question, its answer, the title of the article that holds it)."""
        questions.append({"subject": subject, "question": question, "hops": hops})

    for title, work in works.items():
        author = work["by"]
        ask(
            title,
            f"In which city was the creator of {title} born?",
            [(f"Who created {title}?", author, title), (f"Where was {author} born?", person[author]["born"], author)],
        )
    for name, info in person.items():
        born = info["born"]
        ask(
            name,
            f"In which country was {name} born?",
            [(f"Where was {name} born?", born, name), (f"In which country is {born}?", city_country[born], born)],
        )
        ask(
            name,
            f"On which river lies the city where {name} was born?",
            [(f"Where was {name} born?", born, name), (f"On which river is {born}?", city_river[born], born)],
        )
    for company, info in companies.items():
        founder = info["founder"]
        ask(
            company,
            f"In what year was the founder of {company} born?",
            [
                (f"Who founded {company}?", founder, company),
                (f"When was {founder} born?", str(person[founder]["year"]), founder),
            ],
        )
    for city in cities:
        country = city_country[city]
        if capital[country] != city:
            ask(city, f"What is the capital of the country where {city} lies?",
                [(f"In which country is {city}?", country, city), (f"What is the capital of {country}?",
                                                                    capital[country], country)])  # fmt: skip
    return docs, questions


def _musique(index: int, item: dict[str, Any], docs: dict[str, Document]) -> dict[str, Any]:
    """One question in MuSiQue's record shape; its paragraphs are the two supporting articles."""
    titles = [hop[2] for hop in item["hops"]]
    return {
        "id": f"2hop__{index}",
        "paragraphs": [
            {"idx": i, "title": t, "paragraph_text": docs[t].text, "is_supporting": True} for i, t in enumerate(titles)
        ],
        "question": item["question"],
        "question_decomposition": [
            {"id": j, "question": q, "answer": a, "paragraph_support_idx": j}
            for j, (q, a, _) in enumerate(item["hops"])
        ],
        "answer": item["hops"][-1][1],
        "answer_aliases": [],
        "answerable": True,
    }


def write(seed: int = 0) -> dict[str, int]:
    """Write ``kb.jsonl`` and the MuSiQue-format splits; returns each split's size."""
    docs, questions = build(seed)
    DATA.mkdir(exist_ok=True)
    KB.write_text("".join(json.dumps({"title": d.title, "text": d.text}) + "\n" for d in docs), encoding="utf-8")
    by_title = {d.title: d for d in docs}
    rng = random.Random(f"rag-split-{seed}")
    subjects = sorted({q["subject"] for q in questions})
    dev_subjects = set(rng.sample(subjects, len(subjects) // 5))
    sizes: dict[str, int] = {}
    for split in SPLITS:
        chosen = [q for q in questions if (q["subject"] in dev_subjects) == (split == "dev")]
        lines = [json.dumps(_musique(i, q, by_title)) for i, q in enumerate(chosen)]
        (DATA / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        sizes[split] = len(lines)
    return sizes


# -- reading ------------------------------------------------------------------------------------


def load_musique(path: str | Path, *, corpus: str | Path | None = None) -> list[dict[str, Any]]:
    """Tasks from a MuSiQue JSONL file: ``{"id", "question", "answer", "aliases", "corpus", "hops"}``.

    ``corpus`` is what the search tool searches: a JSONL of ``{"title", "text"}`` articles; by
    default the file's own paragraphs (all of its questions' paragraphs, as MuSiQue ships them).
    Unanswerable questions (``answerable: false``) are skipped.

    Raises:
        ValueError: a line is not JSON or lacks ``question``, ``answer`` or ``paragraphs``.
    """
    tasks: list[dict[str, Any]] = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{number}: not JSON: {error}") from None
        for field in ("question", "answer", "paragraphs"):
            if field not in record:
                raise ValueError(f"{path}:{number}: missing the field {field!r}")
        if record.get("answerable") is False:
            continue
        tasks.append(
            {
                "id": str(record.get("id", number)),
                "question": record["question"],
                "answer": record["answer"],
                "aliases": list(record.get("answer_aliases") or []),
                "hops": len(record.get("question_decomposition") or []),
                "corpus": str(corpus or path),
            }
        )
    return tasks


def load(split: str) -> list[dict[str, Any]]:
    """The shipped ``train`` or ``dev`` questions, searching the shipped knowledge base."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    return load_musique(DATA / f"{split}.jsonl", corpus=KB)


def read_documents(path: str | Path) -> list[Document]:
    """Articles from a ``{"title", "text"}`` JSONL file, or every distinct paragraph of a MuSiQue file."""
    docs: dict[tuple[str, str], Document] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        paragraphs = record.get("paragraphs", [record])
        for p in paragraphs:
            doc = Document(p["title"], p.get("paragraph_text", p.get("text", "")))
            docs[(doc.title, doc.text)] = doc
    return list(docs.values())


class SearchIndex:
    """BM25 search over articles with SQLite FTS5, in memory; safe to share between threads."""

    def __init__(self, documents: Sequence[Document]) -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute("CREATE VIRTUAL TABLE docs USING fts5(title, text, tokenize = 'porter unicode61')")
        self._db.executemany("INSERT INTO docs VALUES (?, ?)", [(d.title, d.text) for d in documents])

    def search(self, query: str, k: int = 3) -> list[Document]:
        """The ``k`` best articles for ``query`` (its words OR-ed, ranked by BM25)."""
        words = re.findall(r"\w+", query.lower())
        if not words:
            return []
        match = " OR ".join(f'"{w}"' for w in words)
        with self._lock:
            rows = self._db.execute(
                "SELECT title, text FROM docs WHERE docs MATCH ? ORDER BY bm25(docs) LIMIT ?", (match, k)
            ).fetchall()
        return [Document(title, text) for title, text in rows]


@functools.cache
def index_of(corpus: str) -> SearchIndex:
    """The search index of a corpus file, built once per process."""
    return SearchIndex(read_documents(corpus))


# -- scoring (MuSiQue's answer metrics) --------------------------------------------------------


def normalize(text: str) -> list[str]:
    """SQuAD's answer normalisation: lower case, no punctuation or articles, split on spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return [w for w in text.split() if w not in ("a", "an", "the")]


def f1(predicted: str, gold: str) -> float:
    """Token F1 between a predicted and a gold answer."""
    got, want = normalize(predicted), normalize(gold)
    common = sum((Counter(got) & Counter(want)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(got), common / len(want)
    return 2 * precision * recall / (precision + recall)


def best_f1(predicted: str, answers: Sequence[str]) -> float:
    return max(f1(predicted, answer) for answer in answers)


if __name__ == "__main__":
    print(write())
