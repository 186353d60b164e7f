"""relight-apo from its wheel: a two-round search of an agent's prompt, scripted agent model and optimiser.

The agent and the optimiser's script use httpx and the core's scripted model only, so nothing beyond
the wheels' own requirements is installed.
"""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path

import httpx
from rich.console import Console

import relight
import relight_apo
from relight.plugins import registry
from relight.scripted import ScriptedUpstream, ScriptRequest

assert Path(relight_apo.__file__).is_relative_to(sys.prefix), f"relight_apo from {relight_apo.__file__}, not the wheel"
assert registry("algorithms").get("apo") is relight_apo.APO, "the plugin registers APO as 'apo'"

SEED = "Answer with one word."


def agent_model(request: ScriptRequest) -> str:
    return "right" if "CHECK" in request.system else "wrong"


def optimizer_model(request: ScriptRequest) -> str:
    return "The agent never checks its answer.\n```\nAnswer with one word. CHECK it first.\n```"


@relight.rollout
async def agent(task, llm):  # type: ignore[no-untyped-def]
    system = relight.resource("system_prompt", default=SEED)
    async with httpx.AsyncClient() as client:
        reply = await client.post(
            f"{llm.base_url}/chat/completions",
            headers={"Authorization": f"Bearer {llm.api_key}"},
            json={
                "model": llm.model,
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": task}],
            },
        )
    return 1.0 if reply.json()["choices"][0]["message"]["content"] == "right" else 0.0


with (
    ScriptedUpstream(agent_model) as model,
    ScriptedUpstream(optimizer_model) as optimizer,
    tempfile.TemporaryDirectory() as run,
):
    apo = relight_apo.APO(
        {"system_prompt": SEED},
        optimizer=relight_apo.Optimizer(base_url=optimizer.base_url, model="optimizer"),
        base_url=model.base_url,
        model="agent",
        budget=20,
        minibatch=2,
        rounds=2,
    )
    relight.Trainer(algorithm=apo, run_dir=run, console=Console(file=io.StringIO())).fit(agent, ["a", "b"], ["c", "d"])
assert apo.best is not None, "the search chose no prompt"
assert "CHECK" in str(apo.best["system_prompt"]), apo.best
print("relight-apo smoke test passed")
