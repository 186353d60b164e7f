"""A customer-support agent with no reward function: a judge model ranks each group's replies instead.

A bike shop's support agent answers a customer's question from the shop's handbook, in plain
Python with the ``openai`` client. It returns no reward: there is no programmatic way to say
whether a reply was good. Training gives it one through :class:`relight.rewards.Judge`, which shows
a group's replies to a judge model with the rubric below and turns its ranking into rewards
(``support_train.py``). The only relight-specific lines are the ``llm`` handle and the decorator.
"""

from __future__ import annotations

import json
import re
from typing import Any

from openai import AsyncOpenAI

import relight
from relight.scripted import ScriptRequest, run_dev_example

HANDBOOK = (
    "Returns: unused items within 30 days, with the receipt, for a full refund. "
    "Repairs: a basic service costs 40 euros and takes 2 days. "
    "Delivery: free above 100 euros, otherwise 8 euros; 3 to 5 working days. "
    "Warranty: frames 5 years, parts 1 year. Opening hours: Tuesday to Saturday, 9 to 18."
)
SYSTEM_PROMPT = f"You answer customers of a bike shop in at most two sentences, using only this handbook. {HANDBOOK}"

RUBRIC = (
    "The best reply answers the customer's exact question with the right fact from the shop's handbook "
    f"({HANDBOOK}), politely and in at most two sentences. A reply with a wrong or made-up fact, or one that "
    "does not answer the question, is worse than any reply that answers it correctly."
)

TASKS = [
    "Can I return a helmet I bought two weeks ago? I never used it.",
    "How much does a basic bike service cost?",
    "How long does a repair take?",
    "Is delivery free for a 60 euro order?",
    "How long is the warranty on the frame?",
    "Are you open on Mondays?",
    "I bought a bell 45 days ago and don't like it. Can I return it?",
    "How many days does delivery take?",
    "What is the warranty on the gears?",
    "What time do you close on Saturday?",
    "Do I pay for delivery on a 150 euro order?",
    "Can I get a refund without a receipt?",
]


@relight.rollout
async def support(task: str, llm: Any) -> None:
    """One rollout: answer the customer. No reward is returned; the judge gives it."""
    async with AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
        await client.chat.completions.create(
            model=llm.model,
            messages=[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task}],
            max_tokens=64,
        )


# -- offline stand-ins ----------------------------------------------------------------------------


def scripted_model(request: ScriptRequest) -> str:
    """What a scripted policy answers, so the app runs offline."""
    if "return" in request.last_user.lower():
        return "Unused items can be returned within 30 days with the receipt for a full refund."
    return "Thank you for asking! Please see our handbook."


def scripted_judge(request: ScriptRequest) -> str:
    """A judge that prefers replies quoting a number from the handbook (for offline runs and tests)."""
    user = next(str(m.get("content")) for m in request.messages if m.get("role") == "user")
    attempts = re.findall(r"=== Attempt (\w+) ===\n(.*?)(?=\n=== Attempt |\Z)", user, re.S)
    facts = {label: bool(re.search(r"\d", text.split("[final answer]")[-1])) for label, text in attempts}
    ranking = [
        {"id": label, "rank": 1 if facts[label] else 2, "reason": "quotes the handbook" if facts[label] else "vague"}
        for label in facts
    ]
    return json.dumps({"ranking": ranking})


if __name__ == "__main__":
    run_dev_example(support, tasks=TASKS[:3], script=scripted_model)
