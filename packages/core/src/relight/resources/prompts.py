"""A run's prompt versions read back from its store: each one's prompts, parent, edit, diff and validation reward.

An algorithm that improves prompts (relight-apo's APO) publishes every prompt version it tries as a
resources version, the prompts under their own names beside the item ``relight.prompt``
(:data:`PROMPT_ITEM`), which says where the version came from::

    {"names": ["system_prompt"], "parent": 3, "round": 2, "edited": "system_prompt", "critique": "..."}

``names`` are the resources that are prompts, ``parent`` the prompt version it was edited from (None
for the seed), ``edited`` the prompt the edit changed. When a version is chosen as the best so far it is
published once more, as a new resources version holding the same prompts, with ``version`` (the prompt
version it is) and ``selected`` (``{"round": r, "val_reward": x}``: after which round, on what measure)
added: the latest resources version is then the best prompt, for whatever reads the latest. A later
run that keeps that prompt fixed (``Trainer(resources=best)``) publishes the same item with every
policy version, so each of its rollouts says which prompt version and which policy version made it.

A prompt version is known by the resources version it was first published as; its validation reward
is the mean return of the validation rollouts pinned to it (0 for a succeeded one without a reward), so
it is read from the rollouts themselves, not from what the algorithm said. A validation rollout that
failed (after its retries) scores 0: a prompt that breaks the agent is as bad as a wrong answer.
"""

from __future__ import annotations

import difflib
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import cast

from pydantic import JsonValue

from relight.errors import NotFoundError
from relight.records import Mode, Resources, RolloutStatus
from relight.store import Store
from relight.summaries import SummaryFilter

__all__ = [
    "PROMPT_ITEM",
    "PromptVersion",
    "best_prompts",
    "exported_prompts",
    "prompt_diff",
    "prompt_of",
    "prompt_versions",
]

PROMPT_ITEM = "relight.prompt"

_PAGE = 500


@dataclass(frozen=True, slots=True)
class PromptVersion:
    """One prompt version of a run: its prompts and where they came from, and how it did on validation."""

    version: int
    """The resources version it was first published as."""
    prompts: dict[str, str]
    parent: int | None = None
    round: int = 0
    edited: str | None = None
    """The prompt an edit changed; None for the seed."""
    critique: str | None = None
    """What the optimiser said was wrong with the parent, which the edit answered."""
    val_reward: float | None = None
    """The mean return of its validation rollouts; None when none finished."""
    val_rollouts: int = 0
    selected: tuple[int, ...] = ()
    """The rounds after which it was published as the best so far."""
    published: tuple[int, ...] = field(default_factory=tuple[int, ...])
    """Every resources version that holds it (the first, then each republication as the best)."""


def prompt_of(resources: Resources) -> int | None:
    """The prompt version a resources version holds: its own number, or the one it republishes; None without prompts."""
    item = resources.items.get(PROMPT_ITEM)
    if not isinstance(item, dict):
        return None
    republished = item.get("version")
    return republished if isinstance(republished, int) else resources.version


async def prompt_versions(store: Store, *, read: dict[int, Resources] | None = None) -> list[PromptVersion]:
    """Every prompt version in ``store``, oldest first, with its validation reward (empty when there are none).

    ``read`` keeps the resources versions read, for a caller that asks again (a version never changes).
    """
    read = {} if read is None else read
    try:
        latest = (await store.get_resources()).version
    except NotFoundError:
        return []
    found: dict[int, PromptVersion] = {}
    for number in range(latest + 1):
        if number not in read:
            try:
                read[number] = await store.get_resources(number)
            except NotFoundError:
                continue
        resources = read[number]
        version = prompt_of(resources)
        if version is None:
            continue
        item = cast(dict[str, JsonValue], resources.items[PROMPT_ITEM])
        known = found.get(version) or _version(version, resources.items, item)
        selected = item.get("selected")
        rounds = (*known.selected, _int(selected.get("round"))) if isinstance(selected, dict) else known.selected
        found[version] = replace(known, selected=rounds, published=(*known.published, number))
    if not found:
        return []
    returns = await _val_returns(store)
    for version, known in found.items():
        rewards = [value for number in known.published for value in returns.get(number, [])]
        mean = statistics.fmean(rewards) if rewards else None
        found[version] = replace(known, val_reward=mean, val_rollouts=len(rewards))
    return [found[version] for version in sorted(found)]


async def best_prompts(store: Store) -> Resources | None:
    """The latest resources version published as the best prompts (``selected``); None when there is none."""
    try:
        latest = (await store.get_resources()).version
    except NotFoundError:
        return None
    for number in range(latest, -1, -1):
        try:
            resources = await store.get_resources(number)
        except NotFoundError:
            continue
        item = resources.items.get(PROMPT_ITEM)
        if isinstance(item, dict) and "selected" in item:
            return resources
    return None


async def exported_prompts(store: Store, version: int | None = None) -> dict[str, JsonValue] | None:
    """Prompt version ``version`` (by default the best: the latest published as ``selected``) as resources to keep
    fixed in a later run (``Trainer(resources=...)``): each prompt by its name, and :data:`PROMPT_ITEM` naming the
    version. None when the store holds no such version."""
    if version is None:
        chosen = await best_prompts(store)
        version = prompt_of(chosen) if chosen is not None else None
        if version is None:
            return None
    found = next((known for known in await prompt_versions(store) if known.version == version), None)
    if found is None:
        return None
    lineage: dict[str, JsonValue] = {
        "names": list(found.prompts),
        "version": found.version,
        "parent": found.parent,
        "round": found.round,
        "edited": found.edited,
    }
    return {**found.prompts, PROMPT_ITEM: lineage}


def prompt_diff(before: Mapping[str, str], after: Mapping[str, str]) -> str:
    """A unified diff of each prompt that differs (by name), parent first; empty when none does."""
    parts: list[str] = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name, ""), after.get(name, "")
        if old != new:
            lines = difflib.unified_diff(
                old.splitlines(), new.splitlines(), fromfile=f"{name} (parent)", tofile=name, lineterm=""
            )
            parts.append("\n".join(lines))
    return "\n".join(parts)


def _version(version: int, items: Mapping[str, JsonValue], item: Mapping[str, JsonValue]) -> PromptVersion:
    names = item.get("names")
    prompts = {
        str(name): str(items[str(name)])
        for name in (cast(list[JsonValue], names) if isinstance(names, list) else [])
        if str(name) in items
    }
    parent, edited, critique = item.get("parent"), item.get("edited"), item.get("critique")
    return PromptVersion(
        version=version,
        prompts=prompts,
        parent=parent if isinstance(parent, int) else None,
        round=_int(item.get("round")),
        edited=edited if isinstance(edited, str) else None,
        critique=critique if isinstance(critique, str) else None,
    )


def _int(value: JsonValue) -> int:
    return value if isinstance(value, int) else 0


async def _val_returns(store: Store) -> dict[int, list[float]]:
    """By resources version, the returns of its finished validation rollouts (0 for a failed one, or a succeeded one
    without a reward), read in one pass over the validation summaries."""
    returns: dict[int, list[float]] = {}
    offset = 0
    while True:
        page = await store.list_summaries(SummaryFilter(mode=Mode.VAL), limit=_PAGE, offset=offset)
        for summary in page.rows:
            rollout = summary.rollout
            if rollout.resources_version is None or not rollout.is_finished:
                continue
            if rollout.status is not RolloutStatus.CANCELLED:
                succeeded = rollout.status is RolloutStatus.SUCCEEDED
                returns.setdefault(rollout.resources_version, []).append((summary.reward or 0.0) if succeeded else 0.0)
        offset += len(page.rows)
        if len(page.rows) < _PAGE:
            return returns
