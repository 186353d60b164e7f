"""relight from its wheel: dev mode through the gateway against the scripted model, and the CLI.

The agent uses httpx, a dependency of relight itself, so nothing beyond the wheel's own requirements
is installed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

import relight
from relight.scripted import run_dev_example, turns

assert Path(relight.__file__).is_relative_to(sys.prefix), f"relight imported from {relight.__file__}, not the wheel"


@relight.rollout
async def agent(task, llm):  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient() as client:
        answer = await client.post(
            f"{llm.base_url}/chat/completions",
            headers={"Authorization": f"Bearer {llm.api_key}"},
            json={"model": llm.model, "messages": [{"role": "user", "content": task["question"]}]},
        )
    return 1.0 if task["answer"] in answer.json()["choices"][0]["message"]["content"] else 0.0


[[result]] = run_dev_example(agent, tasks=[{"question": "2 + 2?", "answer": "4"}], script=turns("4"), argv=[])
assert result.reward == 1.0, result
assert result.calls == 1, result
assert result.untrainable_calls == 0, result
relight_cli = Path(sys.executable).with_name("relight")
print(subprocess.run([relight_cli, "--version"], check=True, capture_output=True, text=True).stdout.strip())
print("relight smoke test passed")
