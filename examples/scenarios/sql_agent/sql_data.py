"""A small Spider-like text-to-SQL benchmark, written by this project, in Spider's own layout.

Spider (Yu et al., 2018) cannot be downloaded here, so ``data/`` holds five SQLite databases of
different domains (:mod:`sql_domains`) with questions and gold SQL at Spider's four difficulty
levels, split ``train``/``dev`` (a quarter of each template's instances go to ``dev``). The layout
is Spider's: ``train_spider.json`` and ``dev.json`` (``db_id``, ``question``, ``query``, plus our
``difficulty``) and ``database/<db_id>/schema.sql``. :func:`load_spider` reads it, and the real
Spider folder when a user has one (then ``database/<db_id>/<db_id>.sqlite`` is used as it is).
A database that ships only ``schema.sql`` is built once into ``~/.cache/relight/sql_agent``.

Regenerate the shipped files with ``python examples/scenarios/sql_agent/sql_data.py``.
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

from sql_domains import DOMAINS, Domain

DATA = Path(__file__).parent / "data"
SPLIT_FILES = {"train": ("train_spider.json", "train.json"), "dev": ("dev.json",)}
CACHE = Path.home() / ".cache" / "relight" / "sql_agent"
MAX_STEPS = 1_000_000
"""SQLite virtual-machine steps a query may take before it is interrupted (a runaway cross join)."""


def load_spider(root: str | Path, split: str) -> list[dict[str, Any]]:
    """Tasks of a Spider-layout folder: ``{"db_id", "question", "query", "difficulty", "db_path"}``.

    Raises:
        ValueError: an unknown split, or a record without ``db_id``, ``question`` or ``query``.
        FileNotFoundError: the split's file, or a database it names, is missing.
    """
    root = Path(root)
    if split not in SPLIT_FILES:
        raise ValueError(f"split must be one of {sorted(SPLIT_FILES)}, got {split!r}")
    found = next((root / name for name in SPLIT_FILES[split] if (root / name).is_file()), None)
    if found is None:
        raise FileNotFoundError(f"no {' or '.join(SPLIT_FILES[split])} in {root}")
    tasks: list[dict[str, Any]] = []
    for index, record in enumerate(json.loads(found.read_text(encoding="utf-8"))):
        for field in ("db_id", "question", "query"):
            if field not in record:
                raise ValueError(f"{found}[{index}]: missing the field {field!r}")
        tasks.append(
            {
                "db_id": record["db_id"],
                "question": record["question"],
                "query": record["query"],
                "difficulty": record.get("difficulty", "unknown"),
                "db_path": str(database_path(root, record["db_id"])),
            }
        )
    return tasks


def load(split: str) -> list[dict[str, Any]]:
    """The shipped benchmark's ``train`` or ``dev`` split."""
    return load_spider(DATA, split)


def database_path(root: Path, db_id: str) -> Path:
    """The SQLite file of ``db_id``: Spider's own, or one built from its ``schema.sql`` into the cache."""
    folder = root / "database" / db_id
    own = folder / f"{db_id}.sqlite"
    if own.is_file():
        return own
    schema = folder / "schema.sql"
    if not schema.is_file():
        raise FileNotFoundError(f"database {db_id!r}: neither {own} nor {schema} exists")
    script = schema.read_text(encoding="utf-8")
    built = CACHE / f"{db_id}-{hashlib.sha256(script.encode()).hexdigest()[:12]}.sqlite"
    if not built.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        partial = built.with_suffix(f".{random.randrange(1 << 30)}.tmp")
        with sqlite3.connect(partial) as connection:
            connection.executescript(script)
        connection.close()
        partial.replace(built)
    return built


def schema(db_path: str | Path) -> str:
    """The database's ``CREATE TABLE`` statements: what the agent is shown."""
    with _ReadOnly(db_path) as connection:
        rows = connection.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL").fetchall()
    return "\n".join(f"{sql};" for (sql,) in rows)


def execute(db_path: str | Path, query: str, *, limit: int = 50) -> list[tuple[Any, ...]]:
    """Run ``query`` read-only and return up to ``limit`` rows; raises sqlite3.Error for bad SQL."""
    with _ReadOnly(db_path) as connection:
        return connection.execute(query).fetchmany(limit)


def execution_match(db_path: str | Path, predicted: str, gold: str) -> bool:
    """Whether ``predicted`` returns the rows ``gold`` returns (in order when gold orders them).

    Spider's execution accuracy: result sets compared as multisets, floats rounded; a query that
    fails or runs away is simply wrong.
    """
    try:
        with _ReadOnly(db_path) as connection:
            got = [_normal(row) for row in connection.execute(predicted).fetchall()]
            want = [_normal(row) for row in connection.execute(gold).fetchall()]
    except (sqlite3.Error, sqlite3.Warning):
        return False
    return got == want if "order by" in gold.lower() else Counter(got) == Counter(want)


def _normal(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(round(value, 4) if isinstance(value, float) else value for value in row)


class _ReadOnly:
    def __init__(self, db_path: str | Path) -> None:
        self.connection = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, check_same_thread=False)
        steps = [0]

        def guard() -> int:
            steps[0] += 1
            return 1 if steps[0] > MAX_STEPS // 1000 else 0

        self.connection.set_progress_handler(guard, 1000)

    def __enter__(self) -> sqlite3.Connection:
        return self.connection

    def __exit__(self, *exc: object) -> None:
        self.connection.close()


# -- writing the shipped benchmark -------------------------------------------------------------


def _sql_literal(value: Any) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def _script(domain: Domain) -> str:
    lines = [domain.ddl.strip()]
    for table, rows in domain.rows.items():
        lines += [f"INSERT INTO {table} VALUES ({', '.join(map(_sql_literal, row))});" for row in rows]
    return "\n".join(lines) + "\n"


def write(seed: int = 0) -> dict[str, int]:
    """Write every database's ``schema.sql`` and the two splits; returns how many questions each has."""
    rng = random.Random(f"sql-{seed}")
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "dev": []}
    for make in DOMAINS:
        domain = make(rng)
        folder = DATA / "database" / domain.db_id
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "schema.sql").write_text(_script(domain), encoding="utf-8")
        db_path = database_path(DATA, domain.db_id)
        for template in domain.templates:
            for index, values in enumerate(template.params(domain.rows)):
                query = template.query.format(**values)
                if not execute(db_path, query, limit=1):
                    continue  # a question whose answer is empty teaches nothing
                record = {
                    "db_id": domain.db_id,
                    "question": template.question.format(**values),
                    "query": query,
                    "difficulty": template.level,
                }
                splits["dev" if index % 4 == 3 or (index == 0 and rng.random() < 0.2) else "train"].append(record)
    for split, records in splits.items():
        path = DATA / SPLIT_FILES[split][0]
        path.write_text(json.dumps(records, indent=1) + "\n", encoding="utf-8")
    return {split: len(records) for split, records in splits.items()}


if __name__ == "__main__":
    print(write())
