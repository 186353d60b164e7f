"""relight for CrewAI: which agent made each LLM call, and the tools it used.

Usage::

    import relight

    relight.instrument("crewai")  # or relight_crewai.CrewAIAdapter().instrument()

Give the crew's agents an ``LLM(model="openai/<llm.model>", base_url=llm.base_url, api_key=llm.api_key)``
and kick the crew off as usual. A listener on ``crewai_event_bus`` records inside each rollout attempt:

- a role span per LLM call (``LLMCallStartedEvent`` to ``LLMCallCompletedEvent`` or
  ``LLMCallFailedEvent``, paired by ``call_id``), with the agent's ``role``, the response id that
  ties it to the gateway's record, and the request messages;
- a tool span per tool use, failed when the tool raised or reported a failure.

CrewAI runs event handlers on a thread pool; ``Crew.kickoff`` waits for them before it returns,
and :meth:`CrewAIAdapter.flush` does the same after other runs.
"""

from relight_crewai._adapter import CrewAIAdapter

__all__ = ["CrewAIAdapter"]
