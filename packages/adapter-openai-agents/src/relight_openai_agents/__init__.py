"""relight for the OpenAI Agents SDK: which agent made each LLM call, and the tools it ran.

Usage::

    import relight

    relight.instrument("openai_agents")  # or relight_openai_agents.OpenAIAgentsAdapter().instrument()

Point the agents' model client at the gateway (``AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key)``)
and run them as usual. A tracing processor records inside each rollout attempt:

- a role span per model call (``OpenAIChatCompletionsModel`` or ``OpenAIResponsesModel``) naming the agent
  that made it; a handoff switches the role, an agent run as a tool nests (``triage/researcher``);
- a tool span per function tool call, with its arguments and result, failed (with the error) when it raised;
- a handoff span per handoff (``triage`` → ``math``).

While relight records, the SDK's default trace exporter (which uploads traces to OpenAI, and
without ``OPENAI_API_KEY`` prints "skipping trace export" on every run) is switched off, which is
said once in the log; ``uninstrument()`` switches it back on. Processors you added keep running.

Responses API calls carry the response id, which ties them to the gateway's record exactly;
Chat Completions calls carry their request messages, and the SDK's tracing must include data
(the default; ``RunConfig.trace_include_sensitive_data``) for them to be matched by content rather
than by order. Tracing must stay enabled: ``set_tracing_disabled(True)`` or
``OPENAI_AGENTS_DISABLE_TRACING`` silence this adapter too.
"""

from relight_openai_agents._adapter import OpenAIAgentsAdapter

__all__ = ["OpenAIAgentsAdapter"]
