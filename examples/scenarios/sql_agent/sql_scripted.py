"""A scripted stand-in for the SQL agent's model: offline dev mode, tests, and warm-start demonstrations.

It knows the shipped benchmark's gold queries by question. The writer gets every other question
wrong on purpose (a misspelt table), so the loop runs: the query fails, the checker says so, the
rewriter answers with the gold query, and the checker passes it. :func:`script` without mistakes
writes the gold query at once; with ``doubts`` its checker doubts every other right query, so the
rewriter answers too (the warm start's demonstrations of both trained roles: with SmolLM2 as the
checker, which is never trained, most queries are rewritten, right or not).
"""

from __future__ import annotations

import functools
import re
import zlib

from sql_data import SPLIT_FILES, load

from relight.scripted import Reply, Script, ScriptRequest


@functools.cache
def _gold() -> dict[str, str]:
    return {task["question"]: task["query"] for split in SPLIT_FILES for task in load(split)}


def _question(text: str) -> str:
    found = re.search(r"Question: (.*)", text)
    return found.group(1).strip() if found else ""


def _misspelt(query: str) -> str:
    return re.sub(r"\bFROM (\w+)", r"FROM \1s", query, count=1)


def script(*, mistakes: bool, doubts: bool = False) -> Script:
    """The three roles, played from the gold queries.

    ``mistakes``: the writer errs on every other question. ``doubts``: the checker never passes the
    other questions' queries (so they are rewritten ``MAX_TURNS`` times, each time to the gold query).
    """

    def reply(request: ScriptRequest) -> Reply | str:
        question = _question(request.last_user)
        gold = _gold().get(question, "SELECT 1")
        half = zlib.crc32(question.encode()) % 2 == 0  # every other question
        if "You write SQLite" in request.system:
            return f"```sql\n{_misspelt(gold) if mistakes and half else gold}\n```"
        if "You check SQLite" in request.system:
            result = request.last_user.rsplit("Result:\n", 1)[-1]
            if result.startswith("Error"):
                return f"The query fails: {result}"
            return "The query may miss a condition of the question." if doubts and not half else "THE QUERY IS CORRECT"
        if "You fix SQLite" in request.system:
            return f"```sql\n{gold}\n```"
        return "I can only write SQL."

    return reply


scripted_model = script(mistakes=True)
