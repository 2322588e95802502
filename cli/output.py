"""Printing for the CLI: rich tables for people, JSON for scripts."""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import os
import re
import sys
import threading
from collections.abc import Sequence
from typing import Any, BinaryIO, TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

import evidence_ledger as el


class OutputError(el.UsageError):
    """Standard output cannot be written: closed, a reader that stopped (broken pipe), a
    full device. Not evidence: exit 2."""


class CheckedStdout:
    """A text stream (``sys.stdout``) whose failed writes and flushes raise
    :class:`OutputError` naming the reason; everything else is the stream's own."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise OutputError(_unwritten(exc)) from exc

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise OutputError(_unwritten(exc)) from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _unwritten(exc: OSError) -> str:
    return (f"cannot write standard output: {exc.strerror or exc} (the command ran; only its "
            "output is lost)")


def discard_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so that what is left in the stream's buffer
    is not written (and does not fail again) when the interpreter exits."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())  # type: ignore[union-attr]
        os.close(devnull)


_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # reorder what a terminal shows
_CONTROLS = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_BIDI}]")
_BREAKS = re.compile(f"[\\x00-\\x08\\x0a-\\x1f\\x7f-\\x9f\\u2028\\u2029{_BIDI}]")


def _escaped(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def plain(line: str) -> str:
    """``line`` kept on one line: control characters and line breaks in it (a ledger's
    strings: tool names, ids) shown as escapes (``\\n``, ``\\x1b``), so no string can
    forge a line of output."""
    return _BREAKS.sub(_escaped, line)


class _Console(Console):
    """A rich console that shows control characters of the strings it prints as escapes
    (``\\x1b``): strings from a ledger reach the terminal, and no escape sequence in
    them is obeyed. Newlines and tabs stay (see :func:`plain` for one-line records)."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(_CONTROLS.sub(_escaped, text), **kwargs)


# Piped or redirected output keeps whole table rows instead of wrapping at 80 columns.
_WIDTH = None if sys.stdout is not None and sys.stdout.isatty() else 200  # None: closed
stdout = _Console(soft_wrap=True, width=_WIDTH, emoji=False)  # ":skull:" stays as it is
stderr = _Console(stderr=True, soft_wrap=True, width=_WIDTH, emoji=False)


def width() -> int:
    """Columns ``query`` lays its rows out in: ``COLUMNS`` when it is set (also when the
    output is no terminal), else the console's (the terminal's; 200 for a pipe or file)."""
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else stdout.width


PROGRESS_THRESHOLD = 100_000
"""Entries a job must pass before it shows a progress bar (and only on a terminal)."""


class ProgressBar:
    """Progress on stderr (a :data:`evidence_ledger.index.build.Progress` callback), started only
    on a
    terminal, at the first report of a job that will pass :data:`PROGRESS_THRESHOLD`
    entries (its entries so far, scaled by the share of the work done). Once all is read,
    the label says the job is finishing (rows, checkpoint, state). Use as a context
    manager: the bar is removed on exit."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.progress: Progress | None = None
        self.task: Any = None

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def __call__(self, entries: int, done: int, total: int) -> None:
        if self.progress is None:
            expected = entries * total // done if done else entries
            if expected < PROGRESS_THRESHOLD or not stderr.is_terminal:
                return
            self.progress = Progress(
                TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                TimeRemainingColumn(), console=stderr, transient=True,
            )
            self.progress.start()
            self.task = self.progress.add_task(self.label, total=total)
        label = f"{self.label} (finishing)" if done >= total else self.label
        self.progress.update(self.task, completed=done, total=total, description=label)


DEEP_STACK = 1 << 30
"""Stack (bytes of address space, committed only as used) of the thread that writes JSON
nested deeper than the interpreter's recursion limit allows (a run-state chain as long as
the log: ``trace --json``)."""


def print_json(value: Any) -> None:
    """Write ``value`` as one JSON document on stdout, however deeply it is nested."""
    try:
        text = json.dumps(value, indent=2, ensure_ascii=False)
    except RecursionError:
        text = _dumps_deep(value)
    sys.stdout.write(text + "\n")


def _dumps_deep(value: Any) -> str:
    """``json.dumps`` in a thread with a :data:`DEEP_STACK` stack, the recursion limit
    raised to what that stack holds (one level of nesting costs well under 1 KiB)."""
    out: list[str] = []
    failure: list[BaseException] = []

    def dump() -> None:
        try:
            out.append(json.dumps(value, indent=2, ensure_ascii=False))
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    limit, size = sys.getrecursionlimit(), threading.stack_size(DEEP_STACK)
    sys.setrecursionlimit(DEEP_STACK // 1024)
    try:
        worker = threading.Thread(target=dump)
        worker.start()
        worker.join()
    finally:
        sys.setrecursionlimit(limit)
        threading.stack_size(size)
    if failure:
        raise failure[0]
    return out[0]


_UNSAFE_IN_JSON = re.compile(f"[\\x7f-\\x9f\\u2028\\u2029\\ud800-\\udfff{_BIDI}]")


def json_text(value: Any) -> str:
    """``value`` as indented JSON for a terminal: characters that control or reorder what a
    terminal shows written as ``\\uXXXX`` escapes (still the same JSON)."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


RAW_CHUNK = 1 << 20
"""Bytes per read when copying a payload to standard output."""


def write_bytes(stream: BinaryIO) -> None:
    """Copy ``stream`` to standard output as bytes, :data:`RAW_CHUNK` at a time (never
    whole).

    Raises:
        OutputError: if standard output cannot be written.
        OSError: if ``stream`` cannot be read.
    """
    sys.stdout.flush()
    target = sys.stdout.buffer
    for chunk in iter(lambda: stream.read(RAW_CHUNK), b""):
        try:
            target.write(chunk)
        except OSError as exc:
            raise OutputError(_unwritten(exc)) from exc
    try:
        target.flush()
    except OSError as exc:
        raise OutputError(_unwritten(exc)) from exc


_EPOCH = dt.datetime(1970, 1, 1)


def when(ns: int | None) -> str:
    """ISO 8601 UTC time (ms, ``Z``, as ``query`` prints times) of ``ns`` nanoseconds
    since the epoch, or '—'."""
    if ns is None:
        return "—"
    moment = _EPOCH + dt.timedelta(microseconds=ns // 1000)  # exact: no float on the way
    return moment.isoformat(timespec="milliseconds") + "Z"


def short(digest: bytes) -> str:
    """``sha256:`` and the first 12 hex digits of a digest."""
    return "sha256:" + digest.hex()[:12]


def compared_lines(diff: el.ValueDiff) -> list[str]:
    """What a violation's two compared values are and what differs between them, for
    people: a heading naming both sides, then the diff lines (or what a side that cannot
    be shown is)."""
    expected, got = diff.roles
    return [f"values ({expected} -> {got}):", *(f"  {line}" for line in diff.summary())]


def violations_json(findings: Sequence[el.Finding], values: Sequence[el.ValueDiff | None],
                    ) -> list[dict[str, Any]]:
    """The JSON of each finding, with ``values`` (the :class:`ValueDiff` of the finding at
    the same place, when there is one: ``Ledger.violation_values``)."""
    return [{**f.to_json(), "values": diff.to_json()} if diff else f.to_json()
            for f, diff in itertools.zip_longest(findings, values[: len(findings)])]


def print_report(report: el.Report, values: Sequence[el.ValueDiff | None] = ()) -> None:
    """Readable verdict: tree head, notices, then violations ordered by seq, each with the
    values it compared (``values``, one per violation, as ``Ledger.violation_values``
    gives them) under its detail."""
    stdout.print(f"tree size {report.tree_size}   root hash {report.to_json()['root_hash']}")
    for notice in report.notices:
        stdout.print(f"[yellow]notice[/]: {escape(notice)}", highlight=False)
    if report.ok:
        stdout.print(f"[green]OK[/]: {len(report.rules)} rules, no violation")
        return
    table = Table(title=f"{len(report.violations)} violation(s)", title_justify="left")
    for column in ("seq", "rule", "run", "scope", "call_id", "detail"):
        table.add_column(column, overflow="fold")
    for v, compared in itertools.zip_longest(report.violations, values):
        detail = "\n".join([v.detail, *(compared_lines(compared) if compared else [])])
        table.add_row(
            "—" if v.seq is None else str(v.seq), f"[red]{escape(v.rule)}[/]",
            *(escape(text) for text in (
                v.run_id or "—", "/".join(v.scope) or "—", v.call_id or "—", detail
            )),
        )
    stdout.print(table)
    stdout.print("[red]FAIL[/]")


def print_chains(rows: list[el.CallChain]) -> None:
    """One line per call: tool, arguments digest, decision and approver, executed, persisted."""
    table = Table(title="calls", title_justify="left")
    for column in ("run", "call (scope/call_id)", "tool", "arguments", "decision", "executed",
                   "persisted", "status"):
        table.add_column(column, overflow="fold")
    for r in rows:
        if r.decision is None:
            decided = "—" if not r.needs_approval else "[yellow]none[/]"
        else:
            decided = escape(f"{r.decision}{' (always)' if r.sticky else ''} by {r.approver}")
        status = r.status if not r.violations else f"[red]{', '.join(r.violations)}[/]"
        table.add_row(
            escape(r.run_id[:12]), escape("/".join((*r.scope, r.call_id))), escape(r.tool),
            short(r.args_digest), decided, "yes" if r.status == "executed" else "no",
            str(r.persisted), status,
        )
    if any(r.scope for r in rows):
        table.caption = ("persisted: session items holding the call's output; a nested "
                         "(agent-as-tool) call's output goes to its agent's run, not the session")
        table.caption_justify = "left"
    stdout.print(table)


def _fact(facts: Any, field: str) -> str:
    """One fact of a call as the diff table shows it ('—': the run has no such call)."""
    if facts is None:
        return "—"
    value = facts.to_json()[field]
    if field == "arguments":
        return value.removeprefix("sha256:")[:12]
    if field == "results":
        return ", ".join(v.removeprefix("sha256:")[:12] for v in value) or "none"
    if isinstance(value, list):
        return ", ".join(value) or "none"
    if isinstance(value, bool):
        return str(value).lower()
    return "none" if value is None else str(value)


DIFF_FIELDS = ("arguments", "decision", "ran_in", "persisted", "violations")
DIFF_ROWS = 60
"""Past this many calls the diff table shows only the calls that differ."""
"""The facts of a call the diff table shows (``--json`` has them all)."""


def print_diff(diff: el.RunDiff, a: str, b: str) -> None:
    """The two runs (of ledgers ``a`` and ``b``) side by side, one row per call (the
    differing facts in red, ``A | B``), then every difference named, then the verdict."""
    for side, where, run, elsewhere in (("A", a, diff.run_a, diff.elsewhere_a),
                                        ("B", b, diff.run_b, diff.elsewhere_b)):
        stdout.print(f"{side}: {escape(where)}, run {escape(run)}", highlight=False)
        if elsewhere:
            stdout.print(f"[yellow]notice[/]: ledger {side} holds {elsewhere} violation(s) "
                         "of other runs (run verify)", highlight=False)
    table = Table(title="calls (A | B where they differ; ran_in: the leg each execution ran "
                  "in, fresh or the run's N-th run state)", title_justify="left")
    table.add_column("call", overflow="fold")
    for field in DIFF_FIELDS:
        table.add_column(field, overflow="fold")
    differing = {(d.what, d.field) for d in diff.differences}
    names = [*diff.a, *(n for n in diff.b if n not in diff.a)]
    if len(names) > DIFF_ROWS:  # a long run: the calls that differ only
        involved = {d.what for d in diff.differences}
        shown = [n for n in names if n in involved]
        table.caption = (f"{len(names) - len(shown)} call(s) the same in both not shown "
                         "(--json has every call)")
        table.caption_justify = "left"
        names = shown
    for name in names:
        in_a, in_b = diff.a.get(name), diff.b.get(name)
        cells = []
        for field in DIFF_FIELDS:
            one, other = _fact(in_a, field), _fact(in_b, field)
            text = escape(one if one == other else f"{one} | {other}")
            cells.append(f"[red]{text}[/]" if (name, field) in differing or in_a is None
                         or in_b is None else text)
        table.add_row(escape(name), *cells)
    stdout.print(table)
    if diff.equal:
        stdout.print("[green]SAME[/]: the runs made the same calls, with the same evidence")
        return
    stdout.print(f"{len(diff.differences)} difference(s):")
    for difference in diff.differences:
        stdout.print(f"  {escape(str(difference))}", highlight=False)
    stdout.print("[red]DIFFER[/]")
