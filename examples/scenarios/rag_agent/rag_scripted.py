"""A scripted stand-in for the researcher's model: offline dev mode, tests, and warm-start demonstrations.

It knows each shipped question's decomposition: it searches for the name of the first hop's
subject (the title of its supporting article, which the question names), then for the name the
first article gave (the first hop's answer, the second article's title), then answers. A name
alone is the shortest query that finds its article first (BM25 ranks every hop's article top), and
copying a name from the question or from an article is what a small model can learn from a few
demonstrations; sub-questions ("Who created The Selul Garden?") find the same articles in longer
calls. For a question it does not know it answers without searching.
"""

from __future__ import annotations

import functools
import json

from rag_data import DATA, SPLITS

from relight.scripted import Reply, ScriptRequest, ToolCall


@functools.cache
def _hops() -> dict[str, tuple[list[str], str]]:
    hops: dict[str, tuple[list[str], str]] = {}
    for split in SPLITS:
        for line in (DATA / f"{split}.jsonl").read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            articles = [record["paragraphs"][h["paragraph_support_idx"]] for h in record["question_decomposition"]]
            hops[record["question"]] = ([article["title"] for article in articles], record["answer"])
    return hops


def scripted_model(request: ScriptRequest) -> Reply | str:
    """The researcher: one search per hop, by name, then the answer."""
    names, answer = _hops().get(request.last_user, ([], "unknown"))
    searched = sum(1 for m in request.messages if m.get("role") == "tool")
    if searched < len(names):
        return Reply(tool_calls=[ToolCall("search", {"query": names[searched]})])
    return f"Answer: {answer}"
