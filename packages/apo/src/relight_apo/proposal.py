"""One textual-gradient step: show the optimiser the agent's runs, get a critique and an edited prompt, check it.

The optimiser sees the prompt being improved and the runs of the agent with it on the round's
minibatch, rendered as the judge reads them (:func:`relight.rewards.render_rollout`: the task as the
agent got it, its messages, tool calls and results, its final answer), each with the reward it earned,
the lowest-rewarded first and then the highest. It answers with a critique (what in the instructions
led to the low rewards, what the high ones did right: the textual gradient) and then the whole new
prompt in one fenced block. A reply without a fence is taken whole as the new text (as GEPA reads its
optimiser's replies): a small optimiser model often forgets the fence, and a reply that is no prompt is
still caught by the checks below and, in the end, by the minibatch and validation gates.

A reply is usable when the new text is not empty, fits the prompt's length limit, keeps every
placeholder the agent fills in (``{question}``) and changes something. One that is not is answered
with what was wrong and the optimiser tries again, up to ``max_tries`` replies in all; after that the
proposal is dropped and counted by its last reason (:data:`REASONS`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from relight.rewards.render import RenderedRollout
from relight_apo.optimizer import Optimizer, Usage
from relight_apo.prompts import Prompt

__all__ = ["REASONS", "Proposal", "Reason", "Run", "messages", "propose", "read_reply"]

Reason = Literal["empty", "too_long", "missing_variables", "unchanged"]
REASONS: tuple[Reason, ...] = ("empty", "too_long", "missing_variables", "unchanged")
"""Why a reply is not a usable prompt; each is counted as ``candidates_dropped_<reason>`` when it drops one."""

_SYSTEM = (
    "You improve the instructions of an AI agent. You are shown its current instructions and runs of the agent "
    "that followed them, each with the reward it earned (higher is better). Find what in the instructions led "
    "to the low rewards and what the high-reward runs did right, then rewrite the instructions so that the agent "
    "does better on tasks like these. Keep what works. Say things the agent can act on; do not address the tasks "
    "one by one."
)
_FENCE = re.compile(r"```(.*?)```", re.DOTALL)
_OPENING = re.compile(r"```")
_LANGUAGE = re.compile(r"[\w+-]*\n")
"""A fence's language tag (```text), taken off the block when a line follows it."""


@dataclass(frozen=True, slots=True)
class Run:
    """One run of the agent the optimiser is shown: the rollout as the judge renders it, and its reward."""

    rendered: RenderedRollout
    reward: float
    error: str | None = None
    """Why the rollout failed (the last line of its error); None when it ran to the end."""


@dataclass(frozen=True, slots=True)
class Proposal:
    """What a round's optimiser call gave: the new text of one prompt and the critique behind it, or why none."""

    name: str
    text: str | None
    critique: str | None = None
    dropped: Reason | None = None
    """Why no usable prompt came after every try; None when ``text`` is one."""
    tries: int = 1


class ReplyError(ValueError):
    """A reply that is not a usable prompt; ``reason`` counts it, the message tells the optimiser what to fix."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason: Reason = reason


def messages(
    name: str, prompt: Prompt, current: str, runs: Sequence[Run], others: Mapping[str, str]
) -> list[dict[str, str]]:
    """The optimiser's chat: what to do, the current text of prompt ``name``, and the runs, lowest reward first."""
    parts = [f'The agent\'s instructions are kept in the prompt "{name}". Its current text:\n```\n{current}\n```']
    if prompt.variables:
        placeholders = ", ".join("{" + variable + "}" for variable in prompt.variables)
        parts.append(
            f"The agent fills in the placeholders {placeholders} when it runs: the new text must keep each of "
            "them, written exactly so."
        )
    if others:
        shown = "\n\n".join(f'"{other}":\n```\n{text}\n```' for other, text in others.items())
        parts.append(f"The agent also follows these prompts, which stay as they are:\n{shown}")
    for index, run in enumerate(runs, start=1):
        failed = f"\n[the run failed] {run.error}" if run.error else ""
        parts.append(f"=== Run {index}: reward {run.reward:g} ===\n{run.rendered.text}{failed}")
    parts.append(
        "First write your critique: in a few sentences, what in the instructions led to the low rewards and what "
        "the high-reward runs did right. Then write the complete new text of the prompt, improved, in one ``` "
        f"block, in at most {prompt.max_chars} characters."
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def read_reply(reply: str, prompt: Prompt, current: str) -> tuple[str, str | None]:
    """The new text and the critique before it, from a reply; ReplyError saying what makes it unusable.

    The new text is the first ``` block; after a fence that is never closed, what follows it; without a fence,
    the whole reply (then there is no critique).
    """
    found = _FENCE.search(reply) or _OPENING.search(reply)
    if found is None:
        text, critique = reply.strip(), None
    else:
        block = found.group(1) if found.re is _FENCE else reply[found.end() :]
        tag = _LANGUAGE.match(block)
        text = (block[tag.end() :] if tag else block).strip()
        critique = reply[: found.start()].strip() or None
    if not text:
        raise ReplyError("empty", "the reply holds no new text of the prompt")
    if len(text) > prompt.max_chars:
        raise ReplyError("too_long", f"the new text is {len(text)} characters long; at most {prompt.max_chars} fit")
    missing = [variable for variable in prompt.variables or () if "{" + variable + "}" not in text]
    if missing:
        names = ", ".join("{" + variable + "}" for variable in missing)
        raise ReplyError("missing_variables", f"the new text leaves out {names}, which the agent fills in")
    if text == current.strip():
        raise ReplyError("unchanged", "the new text is the current one; change what the critique found")
    return text, critique


async def propose(
    optimizer: Optimizer,
    name: str,
    prompt: Prompt,
    current: str,
    runs: Sequence[Run],
    others: Mapping[str, str],
    usage: Usage,
    *,
    max_tries: int,
) -> Proposal:
    """Ask for an edit of prompt ``name`` until a reply is usable or ``max_tries`` replies were not.

    Raises :class:`relight_apo.optimizer.OptimizerError` when the endpoint cannot answer.
    """
    chat = messages(name, prompt, current, runs, others)
    reason: Reason = "empty"
    for attempt in range(1, max_tries + 1):
        reply = await optimizer.complete(chat, usage)
        try:
            text, critique = read_reply(reply, prompt, current)
        except ReplyError as error:
            reason = error.reason
            chat += [
                {"role": "assistant", "content": reply},
                {
                    "role": "user",
                    "content": f"That reply cannot be used: {error}. Reply again: your critique, then the complete "
                    "new text of the prompt in one ``` block.",
                },
            ]
            continue
        return Proposal(name, text, critique, tries=attempt)
    return Proposal(name, None, dropped=reason, tries=max_tries)
