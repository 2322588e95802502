"""Compliance exports: ``export`` (every index view to files that stand alone, signed) and
``verify-export`` (checks one without the ledger, or also against it).

Thin: parse arguments, call the public API (``Ledger.export``, ``verify_export``), print.
Errors are :class:`evidence_ledger.LedgerError` types, turned into one line and an exit
code by the handler in :mod:`evidence_ledger.cli.main`. The export's files:
docs/QUERIES.md.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

import evidence_ledger as el
from evidence_ledger.cli import output
from evidence_ledger.cli.options import IndexOpt, JsonOpt, LedgerOpt, open_ledger

__all__ = ["register"]


class ExportFormat(StrEnum):
    parquet = "parquet"
    csv = "csv"
    jsonl = "jsonl"
    otlp_json = "otlp-json"


def export(
    format: Annotated[
        ExportFormat,
        typer.Option("--format", help="File format: parquet, csv or jsonl (a file per view), "
                                      "or otlp-json (the calls as OpenTelemetry traces)."),
    ],
    out: Annotated[Path, typer.Option("--out", help="New (or empty) output directory.")],
    key: Annotated[
        Path,
        typer.Option("--key", metavar="PATH",
                     help="The ledger's checkpoint key: signs the checkpoint and the manifest."),
    ],
    ledger: LedgerOpt = None,
    since: Annotated[
        str | None, typer.Option(help="Only rows at or after T (ISO 8601 UTC, or ns).")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Only rows before T (ISO 8601 UTC, or ns).")
    ] = None,
    index: IndexOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Export every view, one file each (or, as otlp-json, the calls as OpenTelemetry GenAI
    execute_tool spans, one trace per run, in traces.otlp.jsonl), with what checks them
    without the ledger: the log's entries up to the index's tree size (entries.bin), a
    checkpoint of that tree head signed by KEY (checkpoint.note), and manifest.json (every
    file's SHA-256), signed by KEY (manifest.dsse.json). Check it anywhere with
    verify-export."""
    book = open_ledger(ledger)
    signing = el.SigningKey.load(key)
    with output.ProgressBar("exporting") as bar:
        manifest = book.export(
            out, format.value, signing, since=since, until=until, index=index, progress=bar,
        )
    if json_:
        output.print_json({"out": str(out), "signed_by": signing.verifier_key, **manifest})
        return
    rows = sum(f.get("rows", 0) for f in manifest["files"])
    spans = sum(f.get("spans", 0) for f in manifest["files"])
    held = f"{spans} spans" if format is ExportFormat.otlp_json else f"{rows} rows"
    output.stdout.print(
        f"exported {len(manifest['files'])} files ({manifest['tree_size']} entries, {held}) "
        f"to {out} at tree size {manifest['tree_size']}, root hash "
        f"{manifest['root_hash']}, signed by {signing.verifier_key}",
        highlight=False, markup=False,
    )


def verify_export_(
    directory: Annotated[Path, typer.Argument(help="Export directory (holds manifest.json).")],
    verifier_key: Annotated[
        list[str],
        typer.Option("--verifier-key", metavar="VKEY",
                     help="The ledger's C2SP verifier key (repeatable; keygen's .vkey file "
                          "holds it)."),
    ],
    ledger: Annotated[
        Path | None,
        typer.Option("--ledger", metavar="DIR",
                     help="Also check against this ledger: its root at the export's tree "
                          "size must be the export's (default: the export alone)."),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Check an export on its own, no ledger needed: the signature over manifest.json and
    over the checkpoint, every file's SHA-256, the root of the carried entries against the
    checkpoint, and every file's rows derived again from those entries.

    Exit 0 when all match, 1 on any mismatch (each named), 2 for no verifier key or a
    directory without manifest.json.
    """
    with output.ProgressBar("re-deriving") as bar:
        if ledger is None:
            check = el.verify_export(directory, verifier_key, progress=bar)
        else:
            check = open_ledger(ledger).verify_export(directory, verifier_key, progress=bar)
    if json_:
        output.print_json(check.to_json())
    else:
        for problem in check.problems:
            output.stdout.print(f"[red]mismatch[/]: {escape(problem)}", highlight=False)
        if check.ok:
            against = f", as the ledger {check.ledger} has it" if check.ledger else ""
            output.stdout.print(
                f"[green]OK[/]: {len(check.files)} files match at tree size "
                f"{check.tree_size}, root hash {check.root_hash}{escape(against)}, signed by "
                f"{escape(str(check.signed_by))}", highlight=False,
            )
        else:
            output.stdout.print("[red]FAIL[/]")
    raise typer.Exit(0 if check.ok else 1)


def register(app: typer.Typer) -> None:
    """Add ``export`` and ``verify-export`` to ``app``."""
    app.command("export")(export)
    app.command("verify-export")(verify_export_)
