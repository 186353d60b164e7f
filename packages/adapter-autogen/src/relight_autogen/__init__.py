"""relight for AutoGen AgentChat: which agent made each LLM call, without touching your agents.

Switch it on once, before running the agents::

    import relight

    relight.instrument("autogen")  # or relight_autogen.AutoGenAdapter().instrument()

From then on every model client call that AutoGen makes inside a rollout attempt becomes a role span
whose role is the agent's name (a team's participant, or a standalone ``AssistantAgent``), and every
tool an AgentChat agent runs becomes a tool span with its success. Point the model client at
relight's gateway as usual:
``OpenAIChatCompletionClient(model=llm.model, base_url=llm.base_url, api_key=llm.api_key, model_info=...)``.

The adapter reads AutoGen's own event loggers (``autogen_core.EVENT_LOGGER_NAME`` and AgentChat's),
through a filter that leaves what your logging configuration prints as it was. Non-streaming calls
carry their response id, which joins the gateway's record of the call; streamed ones
(``model_client_stream=True``) join by their request messages. An error inside the adapter is
logged and never reaches the agent. ``relight.uninstrument("autogen")`` switches it off.
"""

from relight_autogen._adapter import AutoGenAdapter

__all__ = ["AutoGenAdapter"]
