"""A scripted stand-in for the SQL agent's model: offline dev mode, tests, and warm-start demonstrations.

It knows the shipped benchmark's gold queries by question. The writer gets every other question
wrong on purpose (a misspelt table), so the loop runs: the query fails, the checker says so, the
rewriter answers with the gold query, and the checker passes it. :func:`script` without mistakes
writes the gold query at once (demonstrations for the warm start).
"""

from __future__ import annotations

import functools
import re
import zlib

from sql_data import SPLIT_FILES, load

from relight.testing.upstream import Reply, Script, ScriptRequest


@functools.cache
def _gold() -> dict[str, str]:
    return {task["question"]: task["query"] for split in SPLIT_FILES for task in load(split)}


def _question(text: str) -> str:
    found = re.search(r"Question: (.*)", text)
    return found.group(1).strip() if found else ""


def _misspelt(query: str) -> str:
    return re.sub(r"\bFROM (\w+)", r"FROM \1s", query, count=1)


def script(*, mistakes: bool) -> Script:
    """The three roles, played from the gold queries; ``mistakes``: the writer errs on every other question."""

    def reply(request: ScriptRequest) -> Reply | str:
        gold = _gold().get(_question(request.last_user), "SELECT 1")
        if "You write SQLite" in request.system:
            wrong = mistakes and zlib.crc32(request.last_user.encode()) % 2 == 0
            return f"```sql\n{_misspelt(gold) if wrong else gold}\n```"
        if "You check SQLite" in request.system:
            result = request.last_user.rsplit("Result:\n", 1)[-1]
            return f"The query fails: {result}" if result.startswith("Error") else "THE QUERY IS CORRECT"
        if "You fix SQLite" in request.system:
            return f"```sql\n{gold}\n```"
        return "I can only write SQL."

    return reply


scripted_model = script(mistakes=True)
