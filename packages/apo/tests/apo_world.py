"""A small world where a prompt's words decide the reward: the scripted agent model, a scripted optimiser, an APO run.

The agent answers three kinds of task (add, multiply, shout); the scripted model answers a kind right
only when the agent's system prompt names its rule (``ADD``, ``MUL``, ``CAPS``). The scripted
optimiser proposes known edits of each prompt it is shown, some better, some worse:

    S0 "… Rules: ADD"  (the seed: validation 0.5)
      → S1 "… Rules: CAPS"      better than S0 on the training minibatch, worse on validation (0.25)
          → S2 "… Rules: CAPS MUL"   (its first reply drops the {topic} placeholder and is sent back)
      → S3 "… Rules: ADD MUL"   (0.75)
          → S4 "… Rules: ADD MUL CAPS"  (1.0)

Run as a script it is one ``fit`` in a run folder, for the tests that kill it and start it again::

    python apo_world.py RUN_DIR [--hold-round N] [--hold-child N]

``--hold-round N``: the optimiser's call of round N prints ``HOLDING optimiser N`` and never returns;
``--hold-child N``: the candidate's first rollout in round N prints ``HOLDING child N`` and never ends.
The last line printed is a JSON object: the best prompt and what the optimiser served.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import openai
from rich.console import Console

import relight
from relight.scripted import ScriptedUpstream, ScriptRequest
from relight_apo import APO, Optimizer

SEED = "You answer {topic} questions. Rules: ADD"
S1 = "You answer {topic} questions. Rules: CAPS"
S2 = "You answer {topic} questions. Rules: CAPS MUL"
S3 = "You answer {topic} questions. Rules: ADD MUL"
S4 = "You answer {topic} questions. Rules: ADD MUL CAPS"
RULES = {"add": "ADD", "mul": "MUL", "cap": "CAPS"}

TRAIN = [
    {"question": "Shout hello", "answer": "HELLO"},
    {"question": "Shout otter", "answer": "OTTER"},
    {"question": "Multiply 6 and 7", "answer": "42"},
]
VAL = [
    {"question": "Add 2 and 3", "answer": "5"},
    {"question": "Add 10 and 4", "answer": "14"},
    {"question": "Multiply 3 and 5", "answer": "15"},
    {"question": "Shout sea", "answer": "SEA"},
]

_HOLD_CHILD: list[int] = []


def answer(question: str) -> tuple[str, str]:
    """The task's kind and its right answer."""
    if question.startswith("Shout "):
        return "cap", question.removeprefix("Shout ").upper()
    a, b = (int(n) for n in re.findall(r"\d+", question))
    return ("add", str(a + b)) if question.startswith("Add") else ("mul", str(a * b))


def agent_model(request: ScriptRequest) -> str:
    """Right only where the system prompt names the task's rule."""
    kind, right = answer(request.last_user)
    return right if RULES[kind] in request.system.split("Rules:")[-1].split() else "I do not know"


@relight.rollout
async def agent(task: dict[str, Any], llm: relight.LLM) -> float:
    """One call; its system prompt is the published ``system_prompt`` with ``{topic}`` filled in."""
    rollout = llm.base_url.split("/rollouts/", 1)[1].split("/", 1)[0]
    if _HOLD_CHILD and f"-r{_HOLD_CHILD[0]}-child-t0" in rollout:
        print(f"HOLDING child {_HOLD_CHILD[0]}", flush=True)
        threading.Event().wait()
    rules = relight.resource("system_prompt", default=SEED).replace("{topic}", "arithmetic and shouting")
    # Two more prompts, for the tests of several: what they say does not change the reward.
    system = " ".join([relight.resource("style", default=""), relight.resource("tone", default=""), rules])
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        reply = await client.chat.completions.create(
            model=llm.model,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": task["question"]}],
        )
    return 1.0 if reply.choices[0].message.content == task["answer"] else 0.0


def reply_with(text: str, critique: str = "The rules leave out a kind of task.") -> str:
    return f"Critique: {critique}\n\n```\n{text}\n```"


PLAN: dict[str, list[str]] = {
    SEED: [reply_with(S1), reply_with(S3)],
    S1: [reply_with("Rules: CAPS MUL"), reply_with(S2)],
    S3: [reply_with(S4)],
}
"""The optimiser's replies to each prompt it is shown, in turn (the last one again once they run out)."""


def current_text(request: ScriptRequest) -> str:
    """The prompt the optimiser is asked to improve: the first fenced block of the first user message."""
    first = next(str(m.get("content")) for m in request.messages if m.get("role") == "user")
    found = re.search(r"```\n(.*?)\n```", first, re.DOTALL)
    assert found is not None, first
    return found.group(1)


class ScriptedOptimizer:
    """Replies from a plan keyed by the prompt shown; counts what it served. ``hold_round``: hang that call."""

    def __init__(self, plan: Mapping[str, Sequence[str]] | None = None, *, hold_round: int | None = None) -> None:
        self.plan = dict(plan if plan is not None else PLAN)
        self.hold_round = hold_round
        self.shown: list[str] = []
        """The prompt of each first call of a proposal (retries send the same conversation on)."""
        self.calls = 0
        self._asked: dict[str, int] = {}

    def __call__(self, request: ScriptRequest) -> str:
        self.calls += 1
        text = current_text(request)
        if request.turn == 0:  # a new proposal, not a retry of one
            self.shown.append(text)
            if self.hold_round is not None and len(self.shown) == self.hold_round:
                print(f"HOLDING optimiser {self.hold_round}", flush=True)
                threading.Event().wait()
        replies = self.plan.get(text) or [reply_with(text)]
        index = self._asked.get(text, 0)
        self._asked[text] = index + 1
        return replies[min(index, len(replies) - 1)]


def make_apo(optimizer_url: str, agent_url: str, **options: Any) -> APO:
    settings: dict[str, Any] = {"budget": 60, "minibatch": 3, "seed": 0, "rounds": 8} | options
    prompts = settings.pop("prompts", {"system_prompt": SEED})
    return APO(
        prompts,
        optimizer=Optimizer(base_url=optimizer_url, model="optimizer", retries=0),
        base_url=agent_url,
        model="agent",
        **settings,
    )


def fit(run_dir: Path, optimizer: Callable[[ScriptRequest], str], **options: Any) -> tuple[APO, list[dict[str, float]]]:
    """One ``fit`` of :func:`agent` with APO in ``run_dir``, against a scripted agent model and ``optimizer``."""
    with ScriptedUpstream(agent_model) as model, ScriptedUpstream(optimizer) as scripted_optimizer:
        apo = make_apo(scripted_optimizer.base_url, model.base_url, **options)
        # Short leases: a rollout a killed run held is taken up again in seconds.
        trainer = relight.Trainer(
            algorithm=apo, run_dir=run_dir, lease_seconds=3.0, console=Console(file=io.StringIO())
        )
        history = trainer.fit(agent, TRAIN, VAL)
    return apo, history


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--hold-round", type=int)
    parser.add_argument("--hold-child", type=int)
    args = parser.parse_args(argv)
    if args.hold_child is not None:
        _HOLD_CHILD.append(args.hold_child)
    optimizer = ScriptedOptimizer(hold_round=args.hold_round)
    apo, history = fit(args.run_dir, optimizer)
    assert apo.best is not None
    print(json.dumps({"best": apo.best["system_prompt"], "shown": optimizer.shown, "rounds": len(history)}))


if __name__ == "__main__":
    sys.exit(main())
