"""``relight show --prompts``: a run's prompt versions, each with its parent, validation reward and diff.

A run of prompt optimisation (relight-apo) publishes every prompt version it tries; this lists them
oldest first, with the round that made each one, the prompt its edit changed, its validation reward
(the mean return of its validation rollouts in the store, with how many there were) and the rounds
after which it was chosen as the best, then each one's diff against its parent and the critique that
led to it. ``--json`` prints one object per version instead.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from relight.cli._common import format_reward, output_console, print_json, with_store
from relight.resources.prompts import PromptVersion, prompt_diff, prompt_versions
from relight.store import Store

__all__ = ["print_prompt_versions", "show_prompts"]


def show_prompts(args: argparse.Namespace) -> int:
    async def read(store: Store) -> list[PromptVersion]:
        return await prompt_versions(store)

    versions = with_store(args, read)
    if args.json:
        for version in versions:
            print_json(asdict(version))
        return 0
    console = output_console()
    if not versions:
        console.print("no prompt versions in this store: it holds no run of prompt optimisation", highlight=False)
        return 0
    print_prompt_versions(console, versions)
    return 0


def print_prompt_versions(console: Console, versions: list[PromptVersion]) -> None:
    """The table of versions, then each edited one's critique and diff against its parent."""
    table = Table(title=f"{len(versions)} prompt version(s)", title_justify="left")
    for column in ("version", "parent", "round", "edited", "val reward", "val rollouts", "best after round"):
        table.add_column(column, justify="right" if column not in ("edited",) else "left", no_wrap=True)
    for version in versions:
        table.add_row(
            f"v{version.version}",
            f"v{version.parent}" if version.parent is not None else "seed",
            str(version.round),
            version.edited or "–",
            format_reward(version.val_reward),
            str(version.val_rollouts),
            ", ".join(map(str, version.selected)) or "–",
        )
    console.print(table)
    by_number = {version.version: version for version in versions}
    for version in versions:
        parent = by_number.get(version.parent) if version.parent is not None else None
        if parent is None:
            continue
        console.print(f"\n[bold]v{version.version}[/] from v{parent.version} (round {version.round})", highlight=False)
        if version.critique:
            console.print(f"[dim]critique:[/] {escape(version.critique)}", highlight=False)
        for line in prompt_diff(parent.prompts, version.prompts).splitlines():
            style = "green" if line.startswith("+") else "red" if line.startswith("-") else "dim"
            console.print(f"[{style}]{escape(line)}[/]", highlight=False, soft_wrap=True)
