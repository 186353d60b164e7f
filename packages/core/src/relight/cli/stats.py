"""``relight stats``: how many rollouts, attempts, spans and resources versions a store holds."""

from __future__ import annotations

import argparse

from rich.table import Table

from relight.cli._common import (
    AddCommand,
    add_json_option,
    add_store_option,
    output_console,
    print_json,
    styled_status,
    with_store,
)
from relight.records import StoreStats
from relight.store import Store


def register(add_command: AddCommand) -> None:
    parser = add_command(
        "stats",
        help="count what a store holds",
        description="Count a store's rollouts and attempts by status, its spans and its resources versions.",
    )
    add_store_option(parser)
    add_json_option(parser)
    parser.set_defaults(run=show_stats)


def show_stats(args: argparse.Namespace) -> int:
    async def read(store: Store) -> StoreStats:
        return await store.stats()

    stats = with_store(args, read)
    if args.json:
        print_json(stats.model_dump(mode="json"))
        return 0
    console = output_console()
    for title, counts in (("rollouts", stats.rollouts_by_status), ("attempts", stats.attempts_by_status)):
        table = Table(title=f"{title}: {sum(counts.values())}", title_justify="left")
        table.add_column("status")
        table.add_column("count", justify="right")
        for status, count in sorted(counts.items()):
            table.add_row(styled_status(status), str(count))
        console.print(table)
    console.print(f"spans: {stats.spans}")
    console.print(f"resources versions: {stats.resources_versions}")
    for key, value in stats.extra.items():
        console.print(f"[dim]{key}: {value}[/]", highlight=False)
    return 0
