"""A LangGraph agent written as LangGraph users write it, made trainable by relight.

Three roles answer an arithmetic question: a ``planner`` node, a ``researcher`` subgraph (LangGraph's
prebuilt ReAct agent with a calculator tool, whose LLM node is the role ``researcher/agent``) and a
``writer`` node. The only relight-specific lines are ``relight.instrument("langgraph")``, the model's
``base_url``/``api_key``/``model`` taken from the ``llm`` handle, the returned reward, and each role's
prompt read as a resource (``relight.resource("planner_prompt", default=PLANNER_PROMPT)``), so a prompt
optimisation (relight-apo) can improve it without touching the graph.

Run it in dev mode (no training) against a scripted model on 127.0.0.1, or any OpenAI-compatible
endpoint::

    python examples/frameworks/langgraph/research_graph.py
    python examples/frameworks/langgraph/research_graph.py --base-url http://localhost:8000/v1 --model NAME
"""

from __future__ import annotations

import ast
import operator
import re
import warnings
from typing import Any

from langchain_core.messages import SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import create_react_agent
from langgraph.warnings import LangGraphDeprecatedSinceV10

import relight
from relight.scripted import Reply, ScriptRequest, ToolCall, run_dev_example

# create_react_agent's successor, langchain.agents.create_agent, needs langchain-core >= 1.7.3.
warnings.filterwarnings("ignore", category=LangGraphDeprecatedSinceV10)

PLANNER_PROMPT = "You are the planner. Say in one line how to answer the question."
RESEARCHER_PROMPT = "You are the researcher. Use the calculator for every computation."
WRITER_PROMPT = "You are the writer. Give the final answer as 'Answer: <number>'."

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / and parentheses."""

    def evaluate(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](evaluate(node.left), evaluate(node.right))
        raise ValueError(f"not arithmetic: {ast.unparse(node)}")

    value = evaluate(ast.parse(expression, mode="eval").body)
    return str(int(value) if value == int(value) else value)


def build_graph(model: ChatOpenAI) -> CompiledStateGraph[Any]:
    """planner → researcher (ReAct subgraph with the calculator) → writer."""

    def planner(state: MessagesState) -> dict[str, Any]:
        prompt = relight.resource("planner_prompt", default=PLANNER_PROMPT)
        return {"messages": [model.invoke([SystemMessage(prompt), *state["messages"]])]}

    def writer(state: MessagesState) -> dict[str, Any]:
        prompt = relight.resource("writer_prompt", default=WRITER_PROMPT)
        return {"messages": [model.invoke([SystemMessage(prompt), *state["messages"]])]}

    graph = StateGraph(MessagesState)
    graph.add_node("planner", planner)
    researcher_prompt = relight.resource("researcher_prompt", default=RESEARCHER_PROMPT)
    graph.add_node("researcher", create_react_agent(model, [calculator], prompt=researcher_prompt))
    graph.add_node("writer", writer)
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "researcher")
    graph.add_edge("researcher", "writer")
    graph.add_edge("writer", END)
    return graph.compile()


def chat_model(llm: Any, *, streaming: bool = False) -> ChatOpenAI:
    """The graph's model, pointed at relight's gateway for this rollout."""
    return ChatOpenAI(base_url=llm.base_url, api_key=llm.api_key, model=llm.model, streaming=streaming)


def score(answer: str, expected: float) -> float:
    """1.0 when the final answer states the expected number, else 0.0."""
    found = re.search(r"Answer:\s*(-?[\d.]+)", answer)
    return 1.0 if found is not None and float(found.group(1)) == expected else 0.0


relight.instrument("langgraph")


@relight.rollout
async def research(task: dict[str, Any], llm: Any) -> float:
    """One rollout: run the graph on ``task["question"]`` and reward a correct ``task["answer"]``."""
    result = await build_graph(chat_model(llm)).ainvoke({"messages": [("user", task["question"])]})
    return score(result["messages"][-1].content, task["answer"])


# -- dev mode -------------------------------------------------------------------------------------

TASKS = [
    {"question": "What is 17 * 23?", "answer": 391},
    {"question": "What is 1024 / 8 - 28?", "answer": 100},
    {"question": "What is (6 + 9) * 12?", "answer": 180},
]


def scripted_model(request: ScriptRequest) -> Reply | str:
    """What a scripted model answers each role, so the graph runs offline: a stand-in for the policy."""
    if "planner" in request.system:
        return "Compute the expression with the calculator, then state the result."
    if "researcher" in request.system:
        if request.tool_results:
            return f"The result is {request.tool_results[-1]}."
        expression = re.search(r"What is (.+)\?", request.last_user)
        return Reply(tool_calls=[ToolCall("calculator", {"expression": expression.group(1) if expression else "0"})])
    results = [re.search(r"The result is (\S+)\.", str(m.get("content") or "")) for m in request.messages]
    found = [result.group(1) for result in results if result is not None]
    return f"Answer: {found[-1] if found else 'unknown'}"


if __name__ == "__main__":
    run_dev_example(research, tasks=TASKS, script=scripted_model)
