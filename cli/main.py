"""evidence-ledger: the command line. It parses arguments, calls the public API
(:mod:`evidence_ledger`, its only import from the package), and prints.

Exit codes (every command): 0 success; 1 evidence that fails to verify (a violation, a
tampered or unparseable ledger, note, bundle or export); 2 bad usage or input that is
not evidence. Errors print one line on stderr; ``--verbose`` adds the traceback.
"""

from __future__ import annotations

import collections
import functools
import itertools
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.markup import escape

import evidence_ledger as el
from evidence_ledger.cli import (
    bundles,
    exports,
    guard,
    output,
    query,
    report,
    sessions,
    tlog,
    values,
    witness,
)
from evidence_ledger.cli.options import (
    IndexOpt,
    JsonOpt,
    LedgerOpt,
    MinWitnessesOpt,
    RebuildOpt,
    WitnessKeyOpt,
    open_ledger,
)

app = typer.Typer(
    name="evidence-ledger",
    help="Content-addressed, Merkle-chained evidence ledger for AI agent runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # docstring paragraphs are reflowed, not cut mid-sentence
)

def _version(value: bool) -> None:
    if value:
        typer.echo(f"evidence-ledger {el.__version__} ({el.core_in_use()})")
        raise typer.Exit(0)


@app.callback()
def _root(
    verbose: Annotated[bool, typer.Option("--verbose", help="Show tracebacks on errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True,
                           help="Print the version and the core in use (native or "
                                "pure-Python), and exit.")
    ] = False,
) -> None:
    """Record agent evidence, verify it, and prove it to others."""


@app.command()
def verify(
    ledger: LedgerOpt = None,
    verifier_key: Annotated[
        list[str] | None,
        typer.Option("--verifier-key", metavar="VKEY",
                      help="Trusted C2SP verifier key (repeatable); stored checkpoints must "
                           "be signed by one."),
    ] = None,
    trusted_checkpoint: Annotated[
        list[Path] | None,
        typer.Option("--trusted-checkpoint", metavar="FILE",
                     help="Signed checkpoint kept elsewhere (repeatable); the ledger must "
                          "extend it (rule append_only)."),
    ] = None,
    no_payloads: Annotated[
        bool, typer.Option("--no-payloads", help="Do not re-hash payload files (faster).")
    ] = False,
    witness_key: WitnessKeyOpt = None,
    min_witnesses: MinWitnessesOpt = None,
    json: JsonOpt = False,
) -> None:
    """Check integrity (hashes, links, encoding, payloads), every evidence rule, and the
    stored and trusted signed checkpoints; with --witness-key, the witnesses' cosignatures
    on the latest stored checkpoint.

    A violation that compares two arguments (approval_binding, argument_integrity,
    foreign_interruption) shows what differs between their values (`--json`: its
    `values`), unless `--no-payloads`. Exit 0 when no rule is violated, 1 otherwise.
    """
    book = open_ledger(ledger)
    report = book.verify(verifier_key or [], trusted_checkpoint or [], payloads=not no_payloads,
                         witness_keys=witness_key or [], min_witnesses=min_witnesses)
    compared = [] if no_payloads else book.violation_values(report.violations)
    if json:
        output.print_json({**report.to_json(),
                           "violations": output.violations_json(report.violations, compared)})
    else:
        output.print_report(report, compared)
    raise typer.Exit(0 if report.ok else 1)


@app.command()
def ingest(
    events: Annotated[Path, typer.Argument(help="JSON Lines file, one evidence event a line.")],
    ledger: LedgerOpt = None,
    again: Annotated[bool, typer.Option("--again", help="Ingest a file seen before.")] = False,
    json: JsonOpt = False,
) -> None:
    """Append evidence from any framework (schemas/ingest-event.schema.json), atomically.

    A file where any line fails the schema is rejected whole (exit 2), naming the line.
    """
    result = open_ledger(ledger, create=True).ingest(events, again=again)
    if json:
        output.print_json({
            "file_sha256": "sha256:" + result.file_sha256.hex(), "events": result.events,
            "first_seq": result.first_seq, "last_seq": result.last_seq - 1,
            "marker_seq": result.last_seq,
        })
    else:
        output.stdout.print(
            f"ingested {result.events} events from {events} as seq "
            f"{result.first_seq}..{result.last_seq - 1}; seq {result.last_seq} records the file "
            f"(sha256:{result.file_sha256.hex()})", highlight=False,
        )


@app.command("log")
def log_(
    ledger: LedgerOpt = None,
    kind: Annotated[str | None, typer.Option(help="Only entries of this kind.")] = None,
    call_id: Annotated[str | None, typer.Option("--call-id", help="Only this call_id.")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the last N matches.")] = None,
    json: JsonOpt = False,
) -> None:
    """List entries, newest last."""
    book = open_ledger(ledger)
    # one pass, holding only the rows shown
    rows = list(collections.deque(book.entries(kind=kind, call_id=call_id), maxlen=limit))
    if json:
        output.print_json(rows)
        return
    for row in rows:
        body = row["body"]
        summary = " ".join(
            f"{k}={_log_value(v)}" for k, v in body.items()
            if v not in (None, [], "") and (k in _LOG_FIELDS or (k, row["kind"]) in _LOG_ALSO)
        )
        _print_entry_line(row, summary)


_LOG_FIELDS = frozenset({
    "run_id", "event", "call_id", "agent", "tool", "decision", "approver", "status",
    "item_type", "session_id",
    "by",  # who redacted, repaired or revoked
})
"""The body fields ``log`` shows on an entry's line (in the body's order), where set."""
_LOG_ALSO = frozenset({("digest", "redaction"), ("name", "ingest")})
"""(field, kind): a field ``log`` shows on the lines of that kind only."""


def _log_value(value: object) -> str:
    """A field's value on a ``log`` line: as it is, or as a JSON string when it holds a space,
    ``=`` or ``"`` (so that no value, a ``by`` say, can pose as further fields)."""
    text = str(value)
    if any(c.isspace() or c in '="' for c in text):
        return json.dumps(text, ensure_ascii=False)
    return text


def _print_entry_line(row: dict[str, Any], text: str) -> None:
    """One entry on one line (seq, time, kind, then ``text``), as ``log`` and ``trace``
    print them."""
    output.stdout.print(
        output.plain(f"{row['seq']:>6}  {output.when(row['time'])}  {row['kind']:<13} {text}"),
        highlight=False, markup=False,
    )


_TRACE_LINES = {
    "call": lambda b: f"{b['agent']} called {b['tool']} args {b['args_digest'][:19]}",
    "decision": lambda b: f"{b['decision']} by {b['approver']}" + (" (always)" * b["always"]),
    "execution": lambda b: f"ran, result {str(b['result_digest'])[:19]}"
    + (f" error {b['error']}" if b["error"] else ""),
    "session_item": lambda b: f"{b['op']} {b['item_type']} in session {b['session_id']}",
    "guardrail": lambda b: f"blocked by {b['guardrail']}",
    "tool_policy": lambda b: f"needs_approval={b['needs_approval']} ({b['policy']})",
    "allowed": lambda b: f"guard allowed ({b['mode']}): {b['reason']}",
    "denied": lambda b: f"guard denied ({b['mode']}, {b['code']}): {b['reason']}",
    "revocation": lambda b: f"approvals revoked by {b['by']}: {b['reason']}",
    "approval_signature": lambda b: f"approval signed by {b['approver']} ({b['vkey'][:40]})",
}


def _lineage_line(node: el.StateNode, call_id: str) -> str:
    """One run state: its events, what it still waited for, and what bound to it (this
    call's decisions and executions, and every leg end), each with its seq."""
    parts = [f"{e.event}@{e.seq}" for e in node.events] or ["(no run_state entry)"]
    waiting = [str(i["call_id"]) for i in node.pending]
    if waiting:
        parts.append("pending " + ",".join(waiting))
    for b in node.bound:
        if b.kind == "decision" and b.call_id == call_id:
            parts.append(f"{b.detail} {call_id}@{b.seq}")
        elif b.kind == "execution" and b.call_id == call_id:
            parts.append(f"ran {call_id}@{b.seq}")
        elif b.kind == "run_end":
            parts.append(f"leg {b.detail}@{b.seq}")
    return f"{node.state_id[:12]}  " + "  ".join(parts)


_DEEPEST = 32
"""Run-state depth past which ``trace`` stops indenting (and prints the depth): the text
stays linear in a chain's length."""


def _print_lineage(forest: dict[str, list[el.StateNode]], call_id: str) -> None:
    for run, roots in forest.items():
        output.stdout.print(output.plain(f"run states of run {run}:"), highlight=False,
                            markup=False)
        for root in roots:
            for depth, node in root.walk():
                indent = min(max(depth - 1, 0), _DEEPEST)  # deeper: the depth, in figures
                branch = "  " * indent + (f"└─[{depth}] " if depth > _DEEPEST + 1 else
                                          "└─ " if depth else "")
                output.stdout.print(
                    output.plain(f"  {branch}{_lineage_line(node, call_id)}"),
                    highlight=False, markup=False,
                )


@app.command()
def trace(
    call_id: Annotated[str, typer.Argument(help="The call_id to follow.")],
    ledger: LedgerOpt = None,
    run_id: Annotated[str | None, typer.Option("--run-id", help="Only this run.")] = None,
    index: IndexOpt = None,
    rebuild: RebuildOpt = False,
    show_values: Annotated[
        bool, typer.Option("--values", help="Show arguments, results, items and outputs "
                                            "under each entry (--json: in each entry).")
    ] = False,
    json: JsonOpt = False,
) -> None:
    """One call's chain as a timeline: call, decisions, executions, session items; then
    the run states of its run as a tree (lineage: which state each was derived from), and
    the rules it broke, with what differs between the values a rule compared.

    Found through the DuckDB index (brought up to date first, as for query); the call's
    entries are read back from the log and checked against it. Payloads and checkpoints
    are checked by verify. The index is trusted like any file in the ledger directory: for
    a ledger received from someone else, pass --rebuild.
    """
    book = open_ledger(ledger)
    with output.ProgressBar("indexing") as bar:
        found = book.trace(call_id, run_id=run_id, index=index, rebuild=rebuild, progress=bar)
    timeline = found.timeline()
    compared = book.violation_values(found.violations, trace=found)
    entry_values = book.trace_values(found) if show_values else None
    if json:
        if entry_values is not None:
            for row, named in zip(timeline, entry_values, strict=True):
                row["values"] = [{"what": what, **value.to_json()} for what, value in named]
        output.print_json({
            "call_id": call_id, "entries": timeline,
            "violations": output.violations_json(found.violations,
                                                 compared if show_values else ()),
            "lineage": [
                {"run_id": run, "states": [
                    {**node.to_json(), "depth": depth}
                    for root in roots for depth, node in root.walk()]}
                for run, roots in found.lineage.items()
            ],
        })
        return
    for row in timeline:
        body = row["body"]
        detail = _TRACE_LINES.get(row["kind"], lambda b: "")(body)
        scope = "/".join(body.get("scope") or [])
        _print_entry_line(row, f"{body.get('run_id')}{'/' + scope if scope else ''}  {detail}")
        if entry_values is not None:
            values.print_entry_values(next(entry_values))
    _print_lineage(found.lineage, call_id)
    for v, diff in zip(found.violations, compared, strict=True):
        output.stdout.print(
            f"[red]{escape(v.rule)}[/] at seq {v.seq}: {escape(output.plain(v.detail))}",
            highlight=False,
        )
        if diff is not None:
            values.print_compared(diff)
    if not found.violations:
        output.stdout.print(
            "no rule broken by this call (payloads and checkpoints: verify)",
            highlight=False, markup=False,
        )


@app.command()
def diff(
    a: Annotated[Path, typer.Argument(metavar="A", help="Ledger directory of run A.")],
    b: Annotated[Path, typer.Argument(metavar="B", help="Ledger directory of run B (may be A).")],
    run_a: Annotated[
        str | None,
        typer.Option("--run-a", metavar="RUN",
                     help="Run of A: its id or a unique prefix (default: A's only run)."),
    ] = None,
    run_b: Annotated[
        str | None,
        typer.Option("--run-b", metavar="RUN",
                     help="Run of B: its id or a unique prefix (default: B's only run)."),
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Compare two runs: their call chains without ids or times, side by side, every
    difference named. For stream parity (one scenario with run and run_streamed) and
    before/after (one scenario on two SDK releases).

    Exit 0 when the runs are the same, 1 when they differ (as diff(1)) or when either
    ledger fails integrity (saying which), 2 for bad usage.
    """
    result = el.Ledger(a).diff(run_a, el.Ledger(b), run_b)
    if json:
        output.print_json(result.to_json())
    else:
        output.print_diff(result, str(a), str(b))
    raise typer.Exit(0 if result.equal else 1)


@app.command()
def redact(
    digest: Annotated[
        str, typer.Option("--digest", help="Payload digest, sha256:HEX, or a unique prefix of "
                                           "at least 8 hex digits (sha256: optional).")
    ],
    reason: Annotated[str, typer.Option("--reason", help="Why it is erased (recorded).")],
    ledger: LedgerOpt = None,
    by: Annotated[str | None, typer.Option("--by", help="Who erases it (recorded).")] = None,
    json: JsonOpt = False,
) -> None:
    """Erase one payload (arguments, output, item); every hash and proof still verifies.

    A payload already redacted is refused (exit 2); a redaction interrupted before its
    erase is finished without a second entry.
    """
    done = open_ledger(ledger).redact(digest, reason=reason, by=by)
    digest = "sha256:" + done.digest.hex()
    if json:
        output.print_json({"digest": digest, "redaction_seq": done.seq,
                           "appended": done.appended, "erased": done.erased})
        return
    if not done.appended:
        note = f" (finished the redaction recorded at seq {done.seq})"
    else:
        note = "" if done.erased else " (payload was already gone)"
    output.stdout.print(f"redacted {digest}{note}", markup=False)


@app.command()
def migrate(
    to: Annotated[int, typer.Option(
        "--to", metavar="VERSION",
        help="Format version to migrate to: 2 (payload segments; FORMAT.md).")],
    ledger: LedgerOpt = None,
    json: JsonOpt = False,
) -> None:
    """Rewrite a ledger's payload files (format version 1) into payload segments (2).

    log.bin, every checkpoint and so every proof stay byte for byte as they were; redacted
    payloads stay erased. It holds the writer lock. Safe to interrupt at any point (Ctrl-C,
    kill -9, power loss): the ledger still verifies, and running migrate again finishes the
    job. A ledger already in version 2 is left as it is (exit 0). Exit 1 when a payload
    file is damaged (nothing is committed: run verify), 2 for bad usage.
    """
    with output.ProgressBar("migrating") as bar:
        steps = {"copy": 0, "check": 1, "clean": 2}

        def report(step: str, done: int, total: int) -> None:
            if step in steps:
                at = steps[step] * total + done
                bar(at, at, 3 * total)

        done = el.migrate(open_ledger(ledger).directory, to, progress=report)
    if json:
        output.print_json({
            "ledger": str(done.directory), "from_version": done.from_version,
            "to_version": done.to_version, "changed": done.changed, "copied": done.copied,
            "reused": done.reused, "erased": done.erased, "kept": done.kept,
            "removed": done.removed})
        return
    if not done.changed:
        text = f"{done.directory} is already in format version {done.to_version}: nothing to do"
    elif done.from_version == done.to_version:
        text = (f"finished the migration of {done.directory} to format version "
                f"{done.to_version}: removed {done.removed} payload file(s) left behind")
    else:
        text = (f"migrated {done.directory} to format version {done.to_version}: "
                f"{done.copied} payload file(s) copied into segments"
                + (f", {done.reused} found there already" if done.reused else "")
                + (f", {done.erased} redacted since erased there" if done.erased else "")
                + (f", {done.kept} already in segments with no file and no redaction kept "
                   "(a version-2 writer stored them)" if done.kept else "")
                + "; log.bin and checkpoints unchanged")
    output.stdout.print(text, markup=False, highlight=False)


@app.command()
def demo(
    ledger: Annotated[
        Path, typer.Option("--ledger", help="New or empty directory to record into.")
    ] = Path("demo-ledger"),
) -> None:
    """Record the approval-flow example (examples/approval_flow.py), sign a checkpoint with
    a throwaway key written beside the ledger, print the calls and verify.

    Runs offline with a scripted model: no API key needed.
    """
    done = el.run_demo(ledger)
    report, vkey = done.report, done.key.verifier_key
    output.stdout.print(f"recorded {done.example} into {ledger}", markup=False)
    output.print_chains(done.chains)
    output.stdout.print(
        f"signed checkpoint {done.checkpoint.path} (tree size {report.tree_size}) with the "
        f"throwaway key {done.key.path}\nverifier key: {vkey}", highlight=False, markup=False,
    )
    output.print_report(report)
    output.stdout.print(
        f"check it yourself: evidence-ledger verify --ledger {ledger} --verifier-key {vkey}",
        highlight=False, markup=False,
    )
    raise typer.Exit(0 if report.ok else 1)


for _commands in (tlog, query, exports, sessions, bundles, guard, values, report, witness):
    _commands.register(app)


@functools.cache
def _command() -> Any:
    """The argument parser built from ``app`` (built once: it inspects every command)."""
    return typer.main.get_command(app)


def _usage_error(exc: Exception) -> str | None:
    """The message of an argument-parser error (unknown flag, missing argument), else None.

    Typer raises its own copy of click's ClickException, which has no public import
    path: recognise it by its interface.
    """
    message = getattr(exc, "format_message", None)
    if callable(message) and isinstance(getattr(exc, "exit_code", None), int):
        return str(message())
    return None


def _split_verbose(args: list[str]) -> tuple[bool, list[str]]:
    """Whether ``--verbose`` stands on the line as a flag, and the line without it.

    It is a flag anywhere except as the value of an option that takes one
    (``--reason --verbose``) or after ``--``: those are left as they are.
    """
    verbose, kept = False, []
    takes_value: set[str] = set()
    command = None
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            kept += [arg, *rest]
            break
        if arg == "--verbose":
            verbose = True
            continue
        kept.append(arg)
        if arg in takes_value:
            kept += list(itertools.islice(rest, 1))  # its value, whatever it looks like
        elif command is None and not arg.startswith("-"):
            command = _command().commands.get(arg)
            takes_value = {
                opt for param in getattr(command, "params", ())
                if param.param_type_name == "option" and not param.is_flag and not param.count
                for opt in param.opts
            }
    return verbose, kept


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the app and turn errors into exit codes once.

    ``--verbose`` may stand anywhere on the line. Usage errors exit 2; a
    :class:`LedgerError` exits with its own code; an ``OSError`` no layer turned into one
    (a failed system call: EIO, ENOSPC) exits 1 as a storage error does; anything else is
    an internal error (1).
    """
    verbose, args = _split_verbose(sys.argv[1:] if argv is None else list(argv))
    if sys.stderr is None:  # closed: errors go nowhere, exit codes still tell
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (open for the life of the process)
    if sys.stdout is None:
        output.stderr.print(
            "evidence-ledger: error: standard output is closed (redirect it to a file or to "
            "/dev/null)", highlight=False, markup=False,
        )
        sys.exit(2)
    stdout, sys.stdout = sys.stdout, output.CheckedStdout(sys.stdout)
    try:
        _run(args, verbose)
    finally:
        sys.stdout = stdout


def _system_error(exc: OSError) -> str:
    """One line for a failed system call: what failed, on which file, as the OS says."""
    where = f" on {os.fsdecode(exc.filename)!r}" if exc.filename is not None else ""
    return f"a system call failed{where}: {exc.strerror or exc} (errno {exc.errno})"


def _run(args: list[str], verbose: bool) -> NoReturn:
    try:
        code = _command().main(args=args, prog_name="evidence-ledger", standalone_mode=False)
        sys.stdout.flush()
    except (typer.Abort, KeyboardInterrupt):
        output.stderr.print("evidence-ledger: aborted")
        sys.exit(130)
    except el.LedgerError as exc:
        if verbose:
            traceback.print_exc()
        if isinstance(exc, output.OutputError):
            output.discard_stdout()
        output.stderr.print(f"evidence-ledger: error: {exc}", highlight=False, markup=False)
        sys.exit(exc.exit_code)
    except OSError as exc:  # the system failed a call (EIO, ENOSPC...): not our bug
        if verbose:
            traceback.print_exc()
        output.stderr.print(f"evidence-ledger: error: {_system_error(exc)}", highlight=False,
                            markup=False)
        sys.exit(1)
    except Exception as exc:
        if verbose:
            traceback.print_exc()
        usage = _usage_error(exc)
        if usage == "":  # no command given: the help was printed
            sys.exit(2)
        if usage is not None:
            output.stderr.print(
                f"evidence-ledger: usage error: {usage} (see --help)", highlight=False, markup=False
            )
            sys.exit(2)
        hint = "" if verbose else " (rerun with --verbose)"
        output.stderr.print(
            f"evidence-ledger: internal error: {type(exc).__name__}: {exc}{hint}",
            highlight=False, markup=False,
        )
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
