"""A scripted stand-in for the researcher's model: offline dev mode, tests, and warm-start demonstrations.

It knows each shipped question's decomposition: it searches for the first hop's question, then
for the second hop's (which names the first hop's answer), then answers. For a question it does
not know it answers without searching.
"""

from __future__ import annotations

import functools
import json

from rag_data import DATA, SPLITS

from relight.testing.upstream import Reply, ScriptRequest, ToolCall


@functools.cache
def _hops() -> dict[str, tuple[list[str], str]]:
    hops: dict[str, tuple[list[str], str]] = {}
    for split in SPLITS:
        for line in (DATA / f"{split}.jsonl").read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            hops[record["question"]] = ([h["question"] for h in record["question_decomposition"]], record["answer"])
    return hops


def scripted_model(request: ScriptRequest) -> Reply | str:
    """The researcher: one search per hop, then the answer."""
    questions, answer = _hops().get(request.last_user, ([], "unknown"))
    searched = sum(1 for m in request.messages if m.get("role") == "tool")
    if searched < len(questions):
        return Reply(tool_calls=[ToolCall("search", {"query": questions[searched]})])
    return f"Answer: {answer}"
