"""The calculator agent: an ordinary tool-calling loop with the ``openai`` client, nothing relight-specific.

relight hands it ``llm`` (the gateway's base URL for this attempt, an API key and the model
name); everything else is what one would write without relight. The task says how to sample
(``temperature``), so the same agent serves training (sampling) and evaluation (greedy), and may
say how slow the tool is (``tool_seconds``: each call then takes a random 0 to that many seconds, as
a remote tool would; ``benchmarks/async_training.py`` uses it to give rollouts a long tail).
"""

from __future__ import annotations

import asyncio
import json
import random
import ssl
from typing import Any

import httpx
from openai import AsyncOpenAI

import relight
from relight_torch.demo.calculator import TOOLS, answer_reward, calculate

__all__ = ["MAX_TURNS", "calculator_agent"]

MAX_TURNS = 3
"""Model calls per episode: at most two rounds of tool use, then an answer."""

_TLS = ssl.create_default_context()
"""One TLS context for every client: building one per client (the default) costs ~20 ms of CPU each."""


@relight.rollout
async def calculator_agent(task: dict[str, Any], llm: relight.LLM) -> float:
    """Answer ``task["question"]``, using the calculator when the model asks for it; 1.0 for the right number."""
    messages: list[Any] = [{"role": "user", "content": task["question"]}]
    http = httpx.AsyncClient(verify=_TLS, timeout=120)
    async with AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, http_client=http, max_retries=0) as client:
        for _ in range(MAX_TURNS):
            reply = await client.chat.completions.create(
                model=llm.model,
                messages=messages,
                tools=TOOLS,  # type: ignore[arg-type]
                temperature=task.get("temperature", 1.0),
                max_tokens=48,
            )
            message = reply.choices[0].message
            if not message.tool_calls:
                return answer_reward(message.content, task["answer"])
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                if task.get("tool_seconds"):
                    await asyncio.sleep(random.uniform(0.0, task["tool_seconds"]))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": _run_tool(call)})
    return 0.0


def _run_tool(call: Any) -> str:
    if call.function.name != "calculator":
        return f"error: there is no tool named {call.function.name!r}"
    try:
        arguments = json.loads(call.function.arguments)
    except json.JSONDecodeError:
        return "error: the arguments are not JSON"
    expression = arguments.get("expression") if isinstance(arguments, dict) else None
    return calculate(str(expression)) if expression is not None else "error: missing 'expression'"
