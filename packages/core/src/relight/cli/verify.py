"""``relight verify``: check a store for what training relies on (see :mod:`relight.integrity`); non-zero when wrong."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from relight.cli._common import (
    AddCommand,
    add_json_option,
    add_store_option,
    output_console,
    print_json,
    store_url,
    with_store,
)
from relight.errors import ConfigError
from relight.integrity import IntegrityReport, verify_store
from relight.otlp.imported_calls import TemplateRetokenizer
from relight.store import Store

__all__ = ["register", "verify"]

PROBLEMS_FOUND = 1
"""The exit status when the store holds a problem (as when it cannot be read at all)."""


def register(add_command: AddCommand) -> None:
    parser = add_command(
        "verify",
        help="check a store's integrity, like fsck for training data",
        description=(
            "Read every rollout, attempt and span of a store (writing nothing) and check what training relies on: "
            "every succeeded rollout has its reward, every span's attempt exists, no span is stored twice, every LLM "
            "call's token ids and logprobs are whole and its transition builds again exactly; with --tokenizer, every "
            "imported call's exactness is checked again. Prints each kind of finding with its count and example ids; "
            f"exits {PROBLEMS_FOUND} when any is a problem."
        ),
    )
    add_store_option(parser)
    parser.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="re-check imported calls with this model's tokenizer and chat template (a local folder or cached name)",
    )
    add_json_option(parser)
    parser.set_defaults(run=verify)


def verify(args: argparse.Namespace) -> int:
    url = store_url(args)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        raise ConfigError(f"there is no SQLite store at {url.removeprefix('sqlite:///')!r}")  # opening would make one
    retokenizer = TemplateRetokenizer.for_model(args.tokenizer) if args.tokenizer else None

    async def check(store: Store) -> IntegrityReport:
        return await verify_store(store, retokenizer=retokenizer)

    report = with_store(args, check)
    if args.json:
        print_json({"store": url, **report.as_json()})
    else:
        _print(report, url)
    return 0 if report.clean else PROBLEMS_FOUND


def _print(report: IntegrityReport, url: str) -> None:
    console = output_console()
    checked = (
        f"{report.rollouts} rollout(s), {report.attempts} attempt(s), {report.spans} span(s), "
        f"{report.llm_calls} LLM call(s) rebuilt, {report.imported_calls_rechecked} imported call(s) re-checked"
    )
    if report.findings:
        table = Table(title=f"relight verify {url}", title_justify="left")
        for column in ("finding", "kind", "count", "examples", "meaning"):
            table.add_column(column, justify="right" if column == "count" else "left")
        for finding in sorted(report.findings.values(), key=lambda f: (f.severity != "problem", f.kind)):
            style = "red" if finding.severity == "problem" else "yellow"
            table.add_row(
                finding.kind,
                f"[{style}]{finding.severity}[/]",
                str(finding.count),
                "\n".join(finding.examples),
                finding.meaning,
            )
        console.print(table)
    verdict = "[green]clean[/]" if report.clean else f"[red]{len(report.problems)} kind(s) of problem[/]"
    console.print(f"{verdict}: {checked}", highlight=False)
