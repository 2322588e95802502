"""One call's evidence, found through the index: what ``trace`` prints.

The index (:mod:`evidence_ledger.index.build`, brought up to date first) names the entries of the
runs that hold the call, the rules the call broke (its ``violations`` rows: the verifier's own
findings) and where those entries lie in the log (``log_blocks``). The entries are then read from
the log itself, a block at a time (at most :data:`evidence_ledger.index.build.BLOCK` records to
reach one), and each is held to its CRC-32, its canonical decoding, its ``seq``, the entry hash the
index holds, and its run and call. A record that differs means the index does not match the log (a
damaged index: the default one is rebuilt). The rest of the log is not read, and the rows not read
back are trusted as the index is: payloads, checkpoints and the records indexed before are
``verify``'s job. The ledger's ``redaction`` entries are read back the same way (a person
shown the call's values is told which were erased), and the rules are run again over the
entries of the call's runs to learn which digests a violation compared (the index keeps
its sentence only).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import duckdb

from evidence_ledger.format.entries import Entry, entry_json
from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.format.framing import Damage, Record
from evidence_ledger.index.build import Progress
from evidence_ledger.index.db import digest_text, one_line
from evidence_ledger.index.query import DamagedIndexError, raise_if_damaged, read_index
from evidence_ledger.storage.ledger_dir import Ledger, decode_record
from evidence_ledger.verify.findings import (
    APPROVAL_BINDING,
    ARGUMENT_INTEGRITY,
    FOREIGN_INTERRUPTION,
    Finding,
)
from evidence_ledger.verify.lineage import StateNode, run_state_forest
from evidence_ledger.verify.rules import RuleEngine

__all__ = ["CallTrace", "trace_call"]


@dataclass(frozen=True)
class CallTrace:
    """The evidence of one ``call_id``.

    Attributes:
        entries: ``(entry, 32-byte entry hash)`` of every entry naming the call, in seq
            order.
        violations: the rules the call broke, in the order the verifier found them
            (its ``violations`` rows as :class:`~evidence_ledger.verify.findings.Finding`,
            with the digests a rule compared when the rules find them again in the
            entries of the call's runs).
        lineage: run id -> its run states as trees
        (:func:`evidence_ledger.verify.lineage.run_state_forest`
            of every entry of the runs that hold the call).
        tree_size: entries the index held.
        redactions: every ``redaction`` entry of the ledger, in seq order.
    """

    entries: list[tuple[Entry, bytes]]
    violations: list[Finding]
    lineage: dict[str, list[StateNode]]
    tree_size: int
    redactions: list[Entry] = field(default_factory=list)

    def timeline(self) -> list[dict[str, Any]]:
        """The entries as JSON objects, in seq order (as ``Ledger.entries`` gives them)."""
        return [entry_json(entry, hash_) for entry, hash_ in self.entries]


@dataclass(frozen=True)
class _Found:
    """What the index says of a call: every entry of its runs (seq, entry hash text,
    whether it names the call), the log blocks, the violations, the tree size, the runs."""

    entries: list[tuple[int, str, bool]]
    blocks: list[tuple[int, int]]
    violations: list[Finding]
    tree_size: int
    runs: frozenset[str]
    redactions: list[tuple[int, str]]


_OWN = "call_id = $call_id AND ($run_id::VARCHAR IS NULL OR run_id = $run_id)"


class _Mismatch(Exception):
    """The index names a record the log does not hold as the index says."""


def trace_call(
    ledger: Ledger,
    call_id: str,
    run_id: str | None = None,
    index: str | os.PathLike[str] | None = None,
    *,
    rebuild: bool = False,
    progress: Progress | None = None,
) -> CallTrace:
    """The entries, violations and run-state lineage of ``call_id``.

    When a record the index names is not in the log as the index holds it (its position,
    CRC-32, decoding, seq, entry hash, run or call), the index is treated as damaged
    (:class:`~evidence_ledger.index.query.DamagedIndexError`): the default index is rebuilt, which
    reads the whole log again and stops at a damaged record (EvidenceError).

    Args:
        ledger: the ledger.
        call_id: the call to follow (every run and scope that holds it, unless ``run_id``).
        run_id: only this run.
        index: the index file (default: the ledger's index in the user's cache,
            :mod:`evidence_ledger.index.location`).
        rebuild: rebuild the index from the log first.
        progress: see :data:`evidence_ledger.index.build.Progress` (while the index is brought up
        to date).

    Raises:
        UsageError: if no entry names the call (in ``run_id``), or the index cannot be
            read or written; DamagedIndexError for an index named by ``index`` that does
            not match the log.
        EvidenceError: if the log fails integrity while indexing.
    """
    if not all(_is_utf8(text) for text in (call_id, run_id or "")):
        _no_entry(call_id, run_id)  # entries hold UTF-8 strings only
    return read_index(
        ledger, lambda con, path: _trace(ledger, con, path, call_id, run_id), index,
        rebuild=rebuild, progress=progress,
    )


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: bytes of a command line that are not UTF-8
        return False
    return True


def _no_entry(call_id: str, run_id: str | None) -> NoReturn:
    where = f" in run {run_id!r}" if run_id is not None else ""
    raise UsageError(f"no entry names call_id {call_id!r}{where}")


def _trace(
    ledger: Ledger, con: duckdb.DuckDBPyConnection, path: Path, call_id: str,
    run_id: str | None,
) -> CallTrace:
    found = _find(con, path, call_id, run_id)
    if not any(own for _, _, own in found.entries):
        _no_entry(call_id, run_id)
    try:
        read = _read_entries(ledger, [(seq, hash_) for seq, hash_, _ in found.entries],
                             found.blocks)
        own = [_owned(pair, mine, found.runs, call_id, run_id)
               for pair, (_, _, mine) in zip(read, found.entries, strict=True)]
        redactions = _read_entries(ledger, found.redactions, found.blocks)
        if any(entry.kind != "redaction" for entry, _ in redactions):
            raise _Mismatch("an entry the index holds as a redaction is not one")
    except _Mismatch as exc:
        raise DamagedIndexError(
            f"index {path} does not match the log ({exc}); run again with --rebuild"
        ) from exc
    return CallTrace([pair for pair, mine in zip(read, own, strict=True) if mine],
                     _compared(found.violations, [e for e, _ in read]),
                     run_state_forest(e for e, _ in read), found.tree_size,
                     [entry for entry, _ in redactions])


_COMPARING = frozenset({APPROVAL_BINDING, ARGUMENT_INTEGRITY, FOREIGN_INTERRUPTION})
"""Rules whose findings carry the two digests they compared (``Finding.compared``)."""


def _compared(violations: list[Finding], entries: list[Entry]) -> list[Finding]:
    """``violations`` (the index's rows), each of a rule of :data:`_COMPARING` with the
    digests it compared, from the rules run again over ``entries`` (every entry of the
    call's runs); a finding they do not find again keeps none."""
    if not any(v.rule in _COMPARING for v in violations):
        return violations
    engine = RuleEngine()
    for entry in entries:
        engine.feed(entry)
    compared = {(f.rule, f.seq, f.run_id, f.scope, f.call_id): f.compared
                for f in engine.findings if f.compared is not None}
    return [dataclasses.replace(v, compared=compared.get(
        (v.rule, v.seq, v.run_id, v.scope, v.call_id))) for v in violations]


def _owned(
    pair: tuple[Entry, bytes], mine: bool, runs: frozenset[str], call_id: str,
    run_id: str | None,
) -> bool:
    """Whether the entry names the call, as the index says (else :class:`_Mismatch`);
    it must be of one of the call's runs too."""
    body = pair[0].body
    names = body.get("call_id") == call_id and run_id in (None, body.get("run_id"))
    if names != mine or body.get("run_id") not in runs:
        raise _Mismatch(f"seq {pair[0].seq} is not of the call or runs the index says")
    return mine


def _find(con: duckdb.DuckDBPyConnection, path: Path, call_id: str, run_id: str | None) -> _Found:
    params = {"call_id": call_id, "run_id": run_id}
    try:
        entries = con.execute(
            f"SELECT seq, entry_hash, coalesce({_OWN}, false), run_id FROM entries WHERE run_id IN "
            f"(SELECT run_id FROM entries WHERE {_OWN}) ORDER BY seq", params,
        ).fetchall()
        blocks = con.execute(
            "SELECT first_seq, log_offset FROM log_blocks ORDER BY first_seq").fetchall()
        violations = con.execute(
            f"SELECT rule, seq, detail, run_id, scope, call_id FROM violations WHERE {_OWN} "
            "ORDER BY finding_no", params,
        ).fetchall()
        (tree_size,) = con.execute("SELECT tree_size FROM ledger_index").fetchone() or (0,)
        redactions = con.execute(
            "SELECT seq, entry_hash FROM entries WHERE kind = 'redaction' ORDER BY seq"
        ).fetchall()
    except duckdb.Error as exc:
        raise_if_damaged(exc, path)
        raise UsageError(f"cannot read index {path}: {one_line(exc)}") from exc
    return _Found(
        [(seq, hash_, own) for seq, hash_, own, _ in entries], [tuple(b) for b in blocks],
        [Finding(rule, seq, detail, run, tuple(scope), call)
         for rule, seq, detail, run, scope, call in violations],
        int(tree_size), frozenset(run for _, _, own, run in entries if own),
        [(seq, hash_) for seq, hash_ in redactions],
    )


def _read_entries(
    ledger: Ledger, wanted: Sequence[tuple[int, str]], blocks: Sequence[tuple[int, int]]
) -> list[tuple[Entry, bytes]]:
    """Read the records at the wanted seqs (ascending, each with the entry hash the index
    holds, as ``sha256:`` text), each read starting at the last block at or before one.

    Raises:
        _Mismatch: naming the first record not found as the index holds it.
    """
    starts = [first for first, _ in blocks]
    out: list[tuple[Entry, bytes]] = []
    while len(out) < len(wanted):
        seq = wanted[len(out)][0]
        block = bisect.bisect_right(starts, seq) - 1
        if block < 0:
            raise _Mismatch(f"no log position for seq {seq}")
        first, offset = blocks[block]
        end = starts[block + 1] if block + 1 < len(starts) else math.inf
        reason = "the log ends before it"
        try:
            for item in ledger.store.scan(offset, first):
                if not isinstance(item, Record):
                    reason = item.reason if isinstance(item, Damage) else reason
                    break
                if item.index == seq:
                    out.append(_checked(item, wanted[len(out)][1]))
                    if len(out) == len(wanted) or (seq := wanted[len(out)][0]) >= end:
                        break
        except (OSError, ValueError, EvidenceError) as exc:  # an offset out of the file
            raise _Mismatch(f"seq {seq}: {exc}") from exc
        if len(out) < len(wanted) and wanted[len(out)][0] == seq and seq < end:
            raise _Mismatch(f"cannot read seq {seq}: {reason}")
    return out


def _checked(record: Record, want: str) -> tuple[Entry, bytes]:
    """The entry of ``record`` and its hash, held to its CRC-32, canonical decoding, seq and
    the entry hash the index holds (``want``).

    Raises:
        EvidenceError: if it fails its CRC-32 or decoding.
        _Mismatch: if its seq or entry hash is not the index's.
    """
    entry, hash_ = decode_record(record)
    if entry.seq != record.index or digest_text(hash_) != want:
        raise _Mismatch(f"seq {record.index} is not the entry the index holds")
    return entry, hash_
