"""relight for LangGraph (and plain LangChain): which node made each LLM call, without touching your graph.

Switch it on once, before running the graph::

    import relight

    relight.instrument("langgraph")  # or relight_langgraph.LangGraphAdapter().instrument()

From then on every chat model, LLM and tool run that LangChain starts inside a rollout attempt is
recorded through LangChain's own callback system (a configure hook, so no ``callbacks=[...]`` at
call sites): one role span per LLM call, whose role is the LangGraph node (``writer``) or its path
inside subgraphs (``researcher/agent``), and one tool span per tool run, tagged with the role whose
LLM call asked for it. Point the model at relight's gateway as usual:
``ChatOpenAI(base_url=llm.base_url, api_key=llm.api_key, model=llm.model)``. Token ids come from
the gateway; the adapter only says who spoke. Outside LangGraph the role is the model's run name
(``model.with_config(run_name="critic")``).

Sync, async and streaming runs work alike; callbacks run inline on the caller's thread or task, so
many rollouts in one process keep their spans apart. An error inside the handler is logged and
never reaches the graph. ``relight.uninstrument("langgraph")`` switches it off.
"""

from relight_langgraph._adapter import LangGraphAdapter

__all__ = ["LangGraphAdapter"]
