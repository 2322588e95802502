"""``report``: a picture of a run, one self-contained HTML file (from a ledger, or from a
proof bundle alone).

Thin: parse arguments, call the public API (``Ledger.report``, ``report_bundle``), print
one line (or ``--json``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import evidence_ledger as el
from evidence_ledger.cli import output
from evidence_ledger.cli.options import JsonOpt, LedgerOpt, open_ledger

__all__ = ["register"]


def report_command(
    out: Annotated[
        Path, typer.Option("--out", metavar="FILE", help="HTML file to write.")
    ],
    ledger: LedgerOpt = None,
    run_id: Annotated[
        str | None,
        typer.Option("--run-id", metavar="ID",
                     help="Show this run (its id or a unique prefix); with --call-id, only "
                          "that call in this run."),
    ] = None,
    call_id: Annotated[
        str | None, typer.Option("--call-id", metavar="ID", help="Show this call's chain.")
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Show the whole log.")] = False,
    bundle: Annotated[
        Path | None,
        typer.Option("--bundle", metavar="FILE",
                     help="Report a proof bundle instead, from what it alone carries (needs "
                          "--verifier-key)."),
    ] = None,
    verifier_key: Annotated[
        list[str] | None,
        typer.Option("--verifier-key", metavar="VKEY",
                     help="Verifier key (repeatable) the checkpoint is checked with; for "
                          "--bundle, the ledger's key."),
    ] = None,
    no_values: Annotated[
        bool,
        typer.Option("--no-values",
                     help="Leave every payload value out (arguments, outputs, items): the "
                          "file holds digests only, for sharing outside the team."),
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace FILE if it exists.")] = False,
    json: JsonOpt = False,
) -> None:
    """Write one self-contained HTML page (no script, nothing fetched) showing a run: the
    verdict, the signed checkpoint, a timeline per run (call, decisions, executions,
    session items; nested agent-as-tool calls indented), each violation at its place,
    the run-state lineage, and the values (click to expand; redacted ones never shown).

    Exit 0 when written, whatever the verdict it shows; 1 for a bundle that is not
    authentic; 2 for bad usage (an existing FILE without --force, FILE inside the
    ledger, an unknown run or call).
    """
    if bundle is not None:
        if run_id is not None or call_id is not None or all_:
            raise el.UsageError("--bundle reports what the bundle selected; drop --run-id, "
                                "--call-id and --all")
        if not verifier_key:
            raise el.UsageError("--bundle needs --verifier-key (the ledger's verifier key)")
        done = el.report_bundle(bundle, verifier_key, out, values=not no_values, force=force)
    else:
        book = open_ledger(ledger)
        with output.ProgressBar("reading") as bar:
            done = book.report(out, run_id=run_id, call_id=call_id, whole_log=all_,
                               verifier_keys=verifier_key or [], values=not no_values,
                               force=force, progress=bar)
    if json:
        output.print_json(done.to_json())
        return
    m = done.model
    verdict = "PASS (no violation)" if m.ok else f"FAIL ({m.violations} violation(s))"
    output.stdout.print(
        output.plain(f"wrote {done.path} ({done.size} bytes): {m.selection}, "
                     f"{m.calls} call(s), {m.entries} entries, {verdict}; values {m.values}"),
        highlight=False, markup=False,
    )


def register(app: typer.Typer) -> None:
    """Add ``report`` to ``app``."""
    app.command("report")(report_command)
