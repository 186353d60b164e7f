"""A text-to-SQL agent in LangGraph: the Spider scenario of the Agent Lightning paper.

Four nodes, as in the paper's agent: ``write_query`` drafts SQLite from the question and the
schema, ``execute_query`` runs it (a LangChain tool, so the run is a tool span), ``check_query``
reads the query and its result and either says ``THE QUERY IS CORRECT`` or names the mistake,
and ``rewrite_query`` fixes the query from that feedback, looping through execute and check
until the check passes or ``MAX_TURNS`` rewrites are spent (the last rewrite is executed, not
checked: no verdict could change it; a rewrite with no SQL in it keeps the query it was given).
The reward is execution match: 1.0 when the final query returns what the gold query returns.

Trained as one policy, only the writer and the rewriter learn and the checker is left alone
(``TransitionBuilder(roles="write_query|rewrite_query")``). Trained as two policies
(``relight.Trainer(policies=POLICIES)``), the checker is a policy of its own, with a reward of its
own: the share of its verdicts (passed or not) that match whether the query it checked returns the
gold rows, emitted as the reward ``"checker"`` for the role ``check_query``
(``relight.emit_reward(..., role=CHECKER_ROLE)``). relight credits a role's own reward to that role's
calls alone and leaves it out of the rollout's reward, so the writer's credit and the rollout's reward
stay the execution match. Every run also records that accuracy as an annotation (the held-out
figure). The relight-specific lines are ``relight.instrument("langgraph")``, the model's ``base_url``/``api_key``/
``model`` taken from the ``llm`` handle, the returned reward, and the checker's reward and annotation.

Commands (see README.md)::

    python examples/scenarios/sql_agent/sql_agent.py                       # dev mode, scripted model, offline
    python examples/scenarios/sql_agent/sql_agent.py --base-url URL --model NAME   # dev mode, any endpoint
    python examples/scenarios/sql_agent/sql_train.py --out runs/sql        # RL on the CPU with SmolLM2-135M
    python examples/scenarios/sql_agent/sql_train.py --out runs/sql2 --policies 2   # writer and checker, two policies
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any, TypedDict

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import BaseTool, tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from sql_data import execute, execution_match, schema

import relight

MAX_TURNS = 2
"""Rewrites allowed after the first query (a task's ``max_turns`` overrides it)."""
TRAINED_ROLES = "write_query|rewrite_query"
CHECKER_ROLE = "check_query"
POLICIES = {"writer": TRAINED_ROLES, "checker": CHECKER_ROLE}
"""The two policies of ``--policies 2``: the writer and rewriter share one, the checker has its own."""
CHECKER_REWARD = "checker"
"""The name of the checker's own reward and annotation: the share of its verdicts that were right."""
CORRECT = "THE QUERY IS CORRECT"

WRITE_PROMPT = (
    "You write SQLite queries. Given the database schema and a question, reply with one SQL query "
    "in a ```sql``` block and nothing else."
)
CHECK_PROMPT = (
    "You check SQLite queries. Given a question, a query and its result, reply exactly "
    f"'{CORRECT}' if the query answers the question; otherwise say in one line what is wrong."
)
REWRITE_PROMPT = (
    "You fix SQLite queries. Given the schema, the question, a query and feedback on it, reply with "
    "the corrected query in a ```sql``` block and nothing else."
)

_SQL_BLOCK = re.compile(r"```(?:sql)?\s*(.*?)(?:```|$)", re.DOTALL | re.IGNORECASE)
_STATEMENT = re.compile(r"\b(SELECT|WITH)\b", re.IGNORECASE)


class State(TypedDict, total=False):
    question: str
    schema: str
    query: str
    result: str
    feedback: str
    turns: int
    checks: list[tuple[str, bool]]
    """Each query the checker saw, with whether it passed it."""


def extract_query(text: str) -> str:
    """The SQL in a reply: its ```sql``` block, else the reply from its first SELECT/WITH."""
    found = _SQL_BLOCK.search(text)
    if found and found.group(1).strip():
        return found.group(1).strip().rstrip(";")
    start = _STATEMENT.search(text)
    return text[start.start() :].strip().rstrip(";") if start else text.strip()


def sql_tool(db_path: str) -> BaseTool:
    """The tool that runs a query on this task's database and shows its first rows (or the error)."""

    @tool
    def execute_query(query: str) -> str:
        """Run a read-only SQLite query and return its first rows."""
        try:
            rows = execute(db_path, query, limit=10)
        except (sqlite3.Error, sqlite3.Warning) as error:
            return f"Error: {error}"
        return "\n".join(repr(row) for row in rows) if rows else "(no rows)"

    return execute_query


def build_graph(model: ChatOpenAI, db_path: str, *, max_turns: int = MAX_TURNS) -> CompiledStateGraph[Any]:
    """write_query → execute_query → check_query → (rewrite_query → execute_query → …) → end."""
    run_sql = sql_tool(db_path)

    def ask(system: str, *parts: str) -> str:
        reply = model.invoke([SystemMessage(system), HumanMessage("\n\n".join(parts))])
        return str(reply.content)

    def write_query(state: State) -> State:
        reply = ask(WRITE_PROMPT, f"Schema:\n{state['schema']}", f"Question: {state['question']}")
        return {"query": extract_query(reply), "turns": 0}

    def execute_query(state: State) -> State:
        return {"result": str(run_sql.invoke({"query": state["query"]}))}

    def check_query(state: State) -> State:
        reply = ask(
            CHECK_PROMPT,
            f"Question: {state['question']}",
            f"Query:\n{state['query']}",
            f"Result:\n{state['result'][:600]}",
        )
        return {"feedback": reply, "checks": [*state.get("checks", []), (state["query"], passed(reply))]}

    def rewrite_query(state: State) -> State:
        reply = ask(
            REWRITE_PROMPT,
            f"Schema:\n{state['schema']}",
            f"Question: {state['question']}",
            f"Query:\n{state['query']}",
            f"Feedback: {state['feedback']}",
        )
        query = extract_query(reply)
        kept = query if _STATEMENT.search(query) else state["query"]  # "```" or prose: nothing to run
        return {"query": kept, "turns": state.get("turns", 0) + 1}

    def after_execute(state: State) -> str:
        return "check_query" if state.get("turns", 0) < max_turns else END

    def after_check(state: State) -> str:
        return END if passed(state.get("feedback", "")) else "rewrite_query"

    graph = StateGraph(State)
    for node in (write_query, execute_query, check_query, rewrite_query):
        graph.add_node(node.__name__, node)
    graph.add_edge(START, "write_query")
    graph.add_edge("write_query", "execute_query")
    graph.add_conditional_edges("execute_query", after_execute, ["check_query", END])
    graph.add_conditional_edges("check_query", after_check, ["rewrite_query", END])
    graph.add_edge("rewrite_query", "execute_query")
    return graph.compile()


def passed(feedback: str) -> bool:
    """The checker's verdict: whether its reply passes the query."""
    return CORRECT in feedback.upper()


def verdict_accuracy(db_path: str, gold: str, checks: list[tuple[str, bool]]) -> float | None:
    """The share of the checker's verdicts that match whether the query it checked returns the gold rows."""
    if not checks:
        return None
    right = [verdict == execution_match(db_path, query, gold) for query, verdict in checks]
    return sum(right) / len(right)


def chat_model(llm: Any, *, temperature: float = 1.0) -> ChatOpenAI:
    """The agent's model, pointed at relight's gateway for this rollout."""
    return ChatOpenAI(
        base_url=llm.base_url, api_key=llm.api_key, model=llm.model, temperature=temperature, max_tokens=96
    )


relight.instrument("langgraph")


@relight.rollout
async def answer(task: dict[str, Any], llm: Any) -> float:
    """Answer ``task["question"]`` on ``task["db_path"]``; 1.0 when the query's result matches ``task["query"]``'s."""
    model = chat_model(llm, temperature=task.get("temperature", 1.0))
    graph = build_graph(model, task["db_path"], max_turns=task.get("max_turns", MAX_TURNS))
    state = await graph.ainvoke({"question": task["question"], "schema": schema(task["db_path"])})
    accuracy = verdict_accuracy(task["db_path"], task["query"], state.get("checks", []))
    if accuracy is not None:
        relight.emit_annotation({CHECKER_REWARD: accuracy}, name=CHECKER_REWARD)
        relight.emit_reward(accuracy, name=CHECKER_REWARD, role=CHECKER_ROLE)  # the checker's calls' credit alone
    return 1.0 if execution_match(task["db_path"], state["query"], task["query"]) else 0.0


if __name__ == "__main__":
    from sql_data import load
    from sql_scripted import scripted_model

    from relight.scripted import run_dev_example

    run_dev_example(answer, tasks=load("dev")[:6], script=scripted_model)
