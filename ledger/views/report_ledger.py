"""The report of a ledger directory: the entries of the selection, read in one pass over
``log.bin`` after the verifier's, with their payloads and the latest signed checkpoint.

The verifier's report (passed in) gives the findings and the call states; this pass
gives the selected entries (at most :data:`~evidence_ledger.views.report_model.MAX_ENTRIES`
kept), every ``redaction`` entry (a redacted value is never read) and the run-state
lineage of the runs shown. A damaged record ends the pass: the verifier's ``integrity``
findings say where, and the report shows them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from evidence_ledger.bundle.verify import Selection
from evidence_ledger.format.entries import Entry
from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.storage.checkpoint_store import CheckpointStore
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.tlog.checkpoint import parse_checkpoint
from evidence_ledger.tlog.note import NoteError, Verifier, open_note, parse_note
from evidence_ledger.verify.findings import Finding
from evidence_ledger.verify.lineage import run_state_forest
from evidence_ledger.verify.records import Report
from evidence_ledger.views.report_model import (
    MAX_ENTRIES,
    CheckpointView,
    ReportModel,
    ValueSource,
    b64,
    build_report,
)
from evidence_ledger.views.values import PREVIEW_BYTES, redactions_of

__all__ = ["Progress", "ledger_report", "pick_run"]

Progress = Callable[[int, int, int], None]
"""``progress(entries_done, entries_done, entries_total)`` as the log is read."""


def pick_run(report: Report, wanted: str) -> str:
    """The run ``wanted`` names: itself when a run with calls has that id, else the one
    run with calls whose id starts with it, else ``wanted`` as it is (checked later).

    Raises:
        UsageError: if ``wanted`` starts several runs' ids (the message names five).
    """
    runs = {key[0] for key in report.calls}
    if wanted in runs:
        return wanted
    found = sorted(run for run in runs if run.startswith(wanted))
    if len(found) > 1:
        more = f" and {len(found) - 5} more" if len(found) > 5 else ""
        raise UsageError(f"--run-id {wanted!r} starts {len(found)} runs' ids "
                         f"({', '.join(found[:5])}{more}): give more of it")
    return found[0] if found else wanted


def ledger_report(
    book: Ledger,
    report: Report,
    selection: Selection,
    verifier_keys: Sequence[str],
    *,
    values: bool,
    made_at: int,
    progress: Progress | None = None,
) -> ReportModel:
    """The report of ``selection`` of ``book``, verified as ``report`` says.

    Args:
        book: the ledger directory.
        report: the verifier's report on it (with ``verifier_keys``).
        selection: what to show; a run id must be whole (see :func:`pick_run`).
        verifier_keys: C2SP verifier key strings the latest checkpoint is checked with.
        values: read payload values (at most ``PREVIEW_BYTES`` each); False leaves every
            value out.
        made_at: when (ns since the epoch, UTC), for the header.
        progress: told as entries are read.

    Raises:
        UsageError: if no entry is of the selected run or names the selected call.
    """
    runs = _lineage_runs(report, selection)
    kept: list[Entry] = []
    left_out = 0
    redactions: list[Entry] = []
    some_runs: list[str] = []

    def walk() -> Iterator[Entry]:  # the pass: kept entries aside, lineage entries on
        nonlocal left_out
        for entry in _readable(book):
            if progress is not None and entry.seq % 4096 == 0:
                progress(entry.seq, entry.seq, report.tree_size)
            if entry.kind == "redaction":
                redactions.append(entry)
            run = entry.body.get("run_id")
            if isinstance(run, str) and len(some_runs) < 6 and run not in some_runs:
                some_runs.append(run)
            if selection.matches(entry.body):
                if len(kept) < MAX_ENTRIES:
                    kept.append(entry)
                else:
                    left_out += 1
            if runs is None or run in runs:
                yield entry

    lineage = run_state_forest(walk())
    if not kept and selection.mode != "all":
        shown = ", ".join(some_runs[:5]) + (" …" if len(some_runs) > 5 else "")
        what = (f"no entry of run {selection.run_id!r}" if selection.mode == "run"
                else f"no entry names call_id {selection.call_id!r}"
                + (f" in run {selection.run_id!r}" if selection.run_id else ""))
        raise UsageError(f"{what} (runs: {shown or 'none'})")
    findings, elsewhere = _findings(report.violations, selection)
    read = (lambda digest: book.payloads.get(digest, PREVIEW_BYTES)) if values else None
    return build_report(
        source=f"ledger {book.directory}", selection=selection, made_at=made_at,
        entries=kept, left_out=left_out, findings=findings, elsewhere=elsewhere,
        calls=report.calls.values(), lineage=lineage,
        values=ValueSource(read, redactions_of(redactions)), checkpoint=_checkpoint(book, report,
                                                                     verifier_keys),
        tree_size=report.tree_size, notices=report.notices,
        values_mode="included" if values else "left out",
    )


def _readable(book: Ledger) -> Iterator[Entry]:
    """The log's entries up to the first damaged record (the verifier reports it)."""
    try:
        for entry, _ in book.entries():
            yield entry
    except EvidenceError:
        return


def _lineage_runs(report: Report, selection: Selection) -> set[str | None] | None:
    """The runs whose run states the report draws (None: every run)."""
    if selection.mode == "all":
        return None
    if selection.mode == "run":
        return {selection.run_id}
    return {key[0] for key in report.calls if selection.selects_call(key[0], key[2])} | {
        f.run_id for f in report.violations if f.call_id is not None and selection.selects(f)}


def _findings(violations: Sequence[Finding], selection: Selection,
              ) -> tuple[list[tuple[Finding, str | None]], int]:
    """The violations the report shows (the selection's and the ledger-wide ones), and how
    many others the log holds."""
    shown: list[tuple[Finding, str | None]] = [
        (f, None) for f in violations if f.run_id is None or selection.selects(f)]
    return shown, len(violations) - len(shown)


def _checkpoint(book: Ledger, report: Report, verifier_keys: Sequence[str],
                ) -> CheckpointView | None:
    """The latest stored checkpoint, its signers, and whether one of ``verifier_keys``
    signed it; None when the ledger has none."""
    store = CheckpointStore(book)
    try:
        stored = store.latest()
    except EvidenceError as exc:
        return _malformed(str(store.directory), report.tree_size, str(exc))
    if stored is None:
        return None
    where = f"{stored.path.parent.name}/{stored.path.name}"
    try:
        note = parse_note(stored.data)
        cp = parse_checkpoint(note.text)
    except EvidenceError as exc:
        return _malformed(where, report.tree_size, str(exc))
    signature, problem = "unchecked", None
    verified_by: tuple[str, ...] = ()
    if verifier_keys:
        verifiers = {(v.name, v.key_id): v for v in map(Verifier.from_vkey, verifier_keys)}
        try:
            opened = open_note(stored.data, list(verifiers.values()))
            signature = "verified"
            verified_by = tuple(verifiers[(s.name, s.key_id)].vkey for s in opened.verified)
        except NoteError as exc:
            signature, problem = "failed", str(exc)
    if cp.size > report.tree_size:
        against = "ahead"
    else:
        against = "matches" if report.roots.get(cp.size) == cp.root else "differs"
    return CheckpointView(
        cp.origin, cp.size, b64(cp.root),
        tuple((s.name, f"{s.key_id:08x}") for s in note.signatures), signature, verified_by,
        against, where, report.tree_size, problem)


def _malformed(where: str, log_size: int, problem: str) -> CheckpointView:
    return CheckpointView("?", 0, "", (), "failed", (), "malformed", where, log_size, problem)
