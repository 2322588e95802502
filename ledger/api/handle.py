"""The public handle on one ledger directory: every command of the CLI that reads or writes
a ledger is one method of :class:`Ledger`.

Keys are passed one way everywhere: signing keys as :class:`~evidence_ledger.SigningKey`,
verifier keys as their C2SP strings. Files the caller names (events, trusted
checkpoints, session stores) are paths; what a method returns is a plain value object.
Methods that need the ``[query]`` extra (DuckDB, pyarrow) import it when called and raise
:class:`~evidence_ledger.api.extras.MissingExtraError` (exit 2) when it is missing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from evidence_ledger.api.extras import load
from evidence_ledger.api.keys import SigningKey, signing_keys
from evidence_ledger.api.keys import verifier_keys as verifier_key_strings
from evidence_ledger.api.proofs import LedgerProofs, ledger_directory
from evidence_ledger.format.entries import KINDS, entry_json
from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.format.times import time_ns
from evidence_ledger.record.checkpointing import create_checkpoint
from evidence_ledger.record.decisions import approve_call, revoke_call
from evidence_ledger.record.ingest import IngestResult, ingest_file
from evidence_ledger.record.redact import Redaction, redact
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.sessions.apply_store import apply_store_repair
from evidence_ledger.sessions.evidence import load_evidence
from evidence_ledger.sessions.markers import pending_repair_notices, settle_pending
from evidence_ledger.sessions.plan import RepairPlan, plan_repair
from evidence_ledger.sessions.record import RepairResult
from evidence_ledger.sessions.stores import MESSAGES_TABLE, read_store
from evidence_ledger.storage.checkpoint_store import StoredCheckpoint
from evidence_ledger.storage.files import read_input, refuse_inside
from evidence_ledger.storage.fsutil import reading
from evidence_ledger.storage.keys import refuse_key_inside
from evidence_ledger.tlog.cosignature import WitnessPolicy
from evidence_ledger.tlog.note import MAX_NOTE_BYTES
from evidence_ledger.tlog.witness_protocol import Witness
from evidence_ledger.verify.audit import verify_ledger
from evidence_ledger.verify.compare import (
    RunDiff,
    compare_runs,
    run_facts,
    run_legs,
    run_rules,
)
from evidence_ledger.verify.findings import Finding
from evidence_ledger.verify.records import Report
from evidence_ledger.views.payloads import (
    CheckedReader,
    payload_digest,
    value_by_prefix,
    values_for_findings,
    values_of_entries,
)
from evidence_ledger.views.values import Value, ValueDiff

if TYPE_CHECKING:
    from evidence_ledger.api.reports import ReportFile
    from evidence_ledger.bundle.build import Bundle
    from evidence_ledger.index.export_check import ExportCheck
    from evidence_ledger.index.query import QueryResult
    from evidence_ledger.index.trace import CallTrace
    from evidence_ledger.tlog.proofs import ConsistencyProof, InclusionProof

__all__ = ["Ledger", "Progress", "SessionRepair"]

Progress = Callable[[int, int, int], None]
"""``progress(entries_done, bytes_done, bytes_total)``, called as the index is brought up to
date (or an export re-derived): for a progress bar."""

Source = str | os.PathLike[str]


class Ledger:
    """A ledger directory (``log.bin``, ``payloads/``, ``checkpoints/``; see FORMAT.md).

    Args:
        directory: its path; None means ``$EVIDENCE_LEDGER``, else ``./.evidence``.
        create: the caller will write (``ingest``): the directory need not hold a ledger
            yet, and is created by the first append. Else it must hold one.

    Raises:
        UsageError: if the path exists and is not a directory, (unless ``create``) holds
            no ledger, or (``create``) cannot be made. Nothing is created either way.
    """

    def __init__(self, directory: Source | None = None, *, create: bool = False) -> None:
        book = ledger_directory(directory)
        if not create:
            book.require_exists()
        else:
            _refuse_uncreatable(book.directory)
        self._book = book
        self._proofs: dict[tuple[str, ...], LedgerProofs] = {}

    @property
    def directory(self) -> Path:
        """The ledger directory."""
        return self._book.directory

    def __repr__(self) -> str:
        return f"Ledger({str(self.directory)!r})"

    # -- reading ---------------------------------------------------------------------

    def entries(self, *, kind: str | None = None, call_id: str | None = None,
                ) -> Iterator[dict[str, Any]]:
        """The entries, oldest first, as JSON objects (FORMAT.md "Entries": ``seq``,
        ``hash`` and ``prev`` as ``sha256:<hex>``, ``time`` in ns, ``kind``, ``body``),
        one pass over ``log.bin`` holding one entry at a time.

        Args:
            kind: only entries of this kind (one of ``KINDS``).
            call_id: only entries whose body names this ``call_id``.

        Raises:
            UsageError: for an unknown kind, or (when the log is read to its end) if no
                entry names ``call_id``.
            EvidenceError: at the first damaged record (run :meth:`verify` for all).
        """
        if kind is not None and kind not in KINDS:  # at the call, not at the first next()
            raise UsageError(f"unknown kind {kind!r}; kinds: {', '.join(KINDS)}")
        return self._entries(kind, call_id)

    def _entries(self, kind: str | None, call_id: str | None) -> Iterator[dict[str, Any]]:
        named = call_id is None
        for entry, hash_ in self._book.entries():
            if call_id is not None and entry.body.get("call_id") != call_id:
                continue
            named = True
            if kind is None or entry.kind == kind:
                yield entry_json(entry, hash_)
        if not named:
            raise UsageError(f"no entry names call_id {call_id!r}")

    def verify(
        self,
        verifier_keys: str | Sequence[str] = (),
        trusted_checkpoints: Source | Sequence[Source] = (),
        *,
        payloads: bool = True,
        witness_keys: str | Sequence[str] = (),
        min_witnesses: int | None = None,
    ) -> Report:
        """Verify the whole ledger: integrity of every record, every evidence rule, the
        stored checkpoints and the trusted ones; one pass over ``log.bin``.

        Args:
            verifier_keys: C2SP verifier key strings; stored checkpoints must be signed by
                one (none: signatures are not checked, and a notice says so).
            trusted_checkpoints: paths of signed checkpoints kept elsewhere: the ledger
                must extend each (rule ``append_only``).
            payloads: re-hash every payload file against its digest.
            witness_keys: witnesses' cosignature verifier keys (type 0x04); with them, the
                latest stored checkpoint must carry valid cosignatures by
                ``min_witnesses`` of them (default 1; rule ``witness_quorum``).
            min_witnesses: how many of ``witness_keys`` must have cosigned.

        Returns:
            The report (``schemas/verify-report.schema.json`` via ``to_json()``);
            ``report.ok`` is False on any violation. Notices include session repairs a
            crash left unrecorded.

        Raises:
            UsageError: for a malformed verifier or witness key, an unreadable trusted
                checkpoint, or ``min_witnesses`` without keys or out of ``1..len(keys)``.
            TypeError: for a verifier key that is not a string.
            EvidenceError: if the log cannot be read.
        """
        trusted = [read_input(path, largest=MAX_NOTE_BYTES, what="signed note")
                   for path in _paths(trusted_checkpoints)]
        keys = verifier_key_strings(verifier_keys)
        witnesses = WitnessPolicy.from_keys(verifier_key_strings(witness_keys), min_witnesses)
        report = verify_ledger(self._book, keys, trusted, payloads=payloads,
                               witnesses=witnesses)
        report.notices.extend(pending_repair_notices(self._book))
        return report

    def trace(
        self,
        call_id: str,
        *,
        run_id: str | None = None,
        index: Source | None = None,
        rebuild: bool = False,
        progress: Progress | None = None,
    ) -> CallTrace:
        """One call's entries, the rules it broke and its runs' run-state lineage, found
        through the DuckDB index (needs ``[query]``); see ``evidence_ledger.index.trace``.

        Raises:
            UsageError: if no entry names the call, or the index cannot be used.
            EvidenceError: if the log fails integrity while indexing.
        """
        _text(call_id, "call_id")
        _text(run_id, "run_id", optional=True)
        trace = load("evidence_ledger.index.trace", "query", "trace")
        result: CallTrace = trace.trace_call(
            self._book, call_id, run_id, index, rebuild=rebuild, progress=progress
        )
        return result

    def value(self, digest: str) -> Value:
        """The value a digest names: a payload, or the arguments an arguments digest names
        (a call's, or those an approver was shown), by its ``sha256:<hex>`` or a unique
        prefix of at least 8 hex digits (``sha256:`` optional); one pass over the log (see
        :func:`evidence_ledger.views.payloads.value_by_prefix`).

        Returns:
            A :class:`Value` (at most 1 MiB of its bytes, ``cut`` beyond, with its
            ``size``): ``present``; ``redacted`` (who, when, why); ``missing`` (gone
            without a redaction entry: lost evidence); ``damaged`` (the bytes do not
            hash to the digest).

        Raises:
            UsageError: for a malformed digest, one no entry or payload names, an
                ambiguous prefix (the message names the matches), or an arguments digest
                whose arguments the ledger does not hold.
            EvidenceError: at a damaged record of the log.
        """
        _text(digest, "digest")
        return value_by_prefix(self._book, digest)

    @contextlib.contextmanager
    def open_payload(self, digest: str) -> Iterator[BinaryIO]:
        """The payload file a digest (or a unique prefix of one) names, open for binary
        reading, to be streamed whole (``show --raw``); closed on leaving the context. A
        prefix takes one pass over the log. The bytes are hashed as they are read: the
        read that reaches the end raises :class:`EvidenceError` when they do not have the
        digest (changed since :meth:`value` checked them).

        Raises:
            UsageError: for a malformed or ambiguous digest, or one no payload file holds
                (redacted or missing: see :meth:`value`).
        """
        _text(digest, "digest")
        found = payload_digest(self._book, digest)
        fd = self._book.payloads.open(found)
        if fd is None:
            raise UsageError(f"no payload file holds sha256:{found.hex()}")
        with reading(fd) as stream:
            yield cast(BinaryIO, CheckedReader(stream, found))

    def violation_values(self, findings: Sequence[Finding], *, trace: CallTrace | None = None,
                         ) -> list[ValueDiff | None]:
        """For each of ``findings`` (in order), the two argument values its rule compared
        and what differs between them (:class:`ValueDiff`: at most 6 diff lines, each value
        read bounded, redacted ones named as such), or None for a finding that compares no
        values (``Finding.compared`` is None). Read with one pass over the log (only when a
        finding compares values; it stops quietly at a damaged record, which ``verify``
        reports) or, given the ``trace`` the findings came from, from its entries alone."""
        if trace is not None:
            values = values_of_entries(self._book.payloads, (e for e, _ in trace.entries),
                                       trace.redactions)
        else:
            values = values_for_findings(self._book, findings)
        return [values.diff(f) for f in findings]

    def trace_values(self, trace: CallTrace) -> Iterator[list[tuple[str, Value]]]:
        """For each entry of ``trace`` (in its order), what it names in words
        (``arguments``, ``arguments shown``, ``result``, ``item``, ``output``, ...) with each
        value, read when the entry is reached (bounded: at most 1 MiB of each held); the log
        is not read again."""
        values = values_of_entries(self._book.payloads, (e for e, _ in trace.entries),
                                   trace.redactions)
        return (values.of_entry(entry) for entry, _ in trace.entries)

    def inclusion_proof(
        self, seq: int, tree_size: int | None = None, *,
        notice: Callable[[str], None] | None = None, verifier_keys: str | Sequence[str] = (),
    ) -> InclusionProof:
        """An RFC 9162 §2.1.3 inclusion proof of entry ``seq`` (0-based leaf index) in the
        tree of ``tree_size`` entries (default: the current size), taken from the ``tree/``
        cache and checked against the root of ``log.bin`` recorded in ``tree/root.json``
        and the latest stored checkpoint (signed by one of ``verifier_keys`` when given);
        a cache that fails is rebuilt (``notice`` is told). Repeated calls reuse the
        loaded tree (see :class:`~evidence_ledger.api.proofs.LedgerProofs`).

        Raises:
            UsageError: unless ``0 <= seq < tree_size <= size``.
            EvidenceError: if the log is damaged or contradicts the recorded root or the
                checkpoint, or the checkpoint does not verify with ``verifier_keys``.
        """
        proofs = self._proofs_for(verifier_keys, notice)
        return proofs.inclusion_proof(seq, tree_size)

    def consistency_proof(
        self, old_size: int, new_size: int | None = None, *,
        notice: Callable[[str], None] | None = None, verifier_keys: str | Sequence[str] = (),
    ) -> ConsistencyProof:
        """An RFC 9162 §2.1.4 consistency proof from tree size ``old_size`` to ``new_size``
        (default: the current size), checked as :meth:`inclusion_proof` says.

        Raises:
            UsageError: unless ``0 < old_size <= new_size <= size``.
            EvidenceError: as :meth:`inclusion_proof`.
        """
        proofs = self._proofs_for(verifier_keys, notice)
        return proofs.consistency_proof(old_size, new_size)

    def _proofs_for(self, keys: str | Sequence[str],
                    notice: Callable[[str], None] | None) -> LedgerProofs:
        """The :class:`LedgerProofs` kept for ``keys``, telling ``notice``."""
        wanted = tuple(verifier_key_strings(keys))
        proofs = self._proofs.get(wanted)
        if proofs is None:
            proofs = self._proofs[wanted] = LedgerProofs(self.directory,
                                                         verifier_keys=wanted)
        proofs.set_notice(notice)
        return proofs

    def report(
        self,
        out: Source,
        *,
        run_id: str | None = None,
        call_id: str | None = None,
        whole_log: bool = False,
        verifier_keys: str | Sequence[str] = (),
        values: bool = True,
        force: bool = False,
        progress: Progress | None = None,
    ) -> ReportFile:
        """Write an HTML report of one run (``run_id`` alone: its id, or a unique prefix of
        the id of a run that made calls), one call's chain (``call_id``, optionally in the
        run ``run_id``) or the whole log (``whole_log``): one self-contained page (nothing
        fetched, no script) with the verdict, the latest signed checkpoint (checked with
        ``verifier_keys``), a timeline per run (calls, decisions, executions, session
        items; nested scopes indented), each violation at its place, the run-state
        lineage, and the payload values (redacted ones never; none at all unless
        ``values``). Verifies the ledger first (as :meth:`verify`), then reads the log
        once more (``progress`` follows that).

        Returns:
            The file written; ``.model.ok`` is False when a violation is shown.

        Raises:
            UsageError: for no or a conflicting selection, a run or call no entry names,
                an existing ``out`` (unless ``force``) or one inside the ledger directory,
                or a malformed verifier key.
            StorageError: if the file cannot be written.
        """
        from evidence_ledger.api.reports import report_ledger

        return report_ledger(self._book, self.verify, out, run_id=run_id, call_id=call_id,
                             whole_log=whole_log, verifier_keys=verifier_keys, values=values,
                             force=force, progress=progress)

    # -- SQL (the [query] extra) ------------------------------------------------------

    def update_index(
        self, *, index: Source | None = None, rebuild: bool = False,
        progress: Progress | None = None,
    ) -> int:
        """Bring the DuckDB index (default: the ledger's own under
        ``$XDG_CACHE_HOME/evidence-ledger/index/``, never in the ledger) up to date with the
        log; returns the tree size it holds (entries).

        Raises:
            UsageError: if the index cannot be read or written.
            EvidenceError: if the log fails integrity.
        """
        build = load("evidence_ledger.index.build", "query", "the index")
        size: int = build.update_index(
            self._book, index, rebuild=rebuild, progress=progress
        ).tree_size
        return size

    def query(
        self, sql_or_name: str, *, params: Mapping[str, object] | None = None,
        index: Source | None = None, rebuild: bool = False, progress: Progress | None = None,
    ) -> QueryResult:
        """Run one read-only SQL statement (``SELECT``), or a named audit query (see
        :func:`evidence_ledger.named_queries`), over the index, brought up to date first;
        tables and columns: docs/QUERIES.md.

        Args:
            sql_or_name: SQL, or the name of a named query (a single word that names none
                is refused).
            params: the named query's parameters, name -> value (text, or an int for an
                ``INTEGER`` one; the others take their defaults); for SQL, the values of
                its ``$name`` parameters. Always bound as prepared-statement parameters.

        Raises:
            UsageError: for an unknown query name, a parameter the query does not take,
                lacks or cannot take (one line naming what is valid), a statement that is
                not one read-only query, or an unusable index.
            EvidenceError: if the log fails integrity.
            TypeError: for a parameter value of another Python type.
        """
        query = load("evidence_ledger.index.query", "query", "query")
        result: QueryResult = query.run_query(
            self._book, sql_or_name, index, params=params, rebuild=rebuild, progress=progress
        )
        return result

    def export(
        self,
        out: Source,
        format: str,
        key: SigningKey,
        *,
        since: str | int | None = None,
        until: str | int | None = None,
        index: Source | None = None,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """Export every view of the index (``parquet``, ``csv`` or ``jsonl``), or its calls
        as OpenTelemetry traces (``otlp-json``: ``traces.otlp.jsonl``), into the new
        or empty directory ``out``, with the log's entries up to the index's tree size, a
        checkpoint of that tree head signed by ``key`` (not stored in ``checkpoints/``),
        and ``manifest.json`` listing every file's SHA-256, signed by ``key`` in
        ``manifest.dsse.json``: :func:`evidence_ledger.verify_export` checks it without the
        ledger. The index is brought up to date first (``progress`` follows that, then the
        files).

        Args:
            key: the ledger's checkpoint key (its name is the origin of the stored
                checkpoints).
            since, until: only rows with ``since <= time < until`` (ISO 8601 UTC text, or
                ns since the epoch).

        Returns:
            The manifest (tree size, root hash, each file's name, rows, entries or spans, and
            SHA-256).

        Raises:
            UsageError: for a bad time, a non-empty ``out`` or one inside the ledger
                directory, an unusable index, or a key kept inside the ledger directory or
                named otherwise than the stored checkpoints' origin.
            EvidenceError: if the log fails integrity or contradicts a stored checkpoint.
        """
        (key,) = signing_keys(key)
        refuse_inside(self.directory, out, "the export directory")
        refuse_key_inside(self.directory, key.path)
        since_ns = None if since is None else time_ns(since)
        until_ns = None if until is None else time_ns(until)
        export = load("evidence_ledger.index.export", "query", "export")
        self.update_index(index=index, progress=progress)
        manifest: dict[str, Any] = export.export_ledger(
            self._book, out, format, key.signer, since=since_ns, until=until_ns, index=index,
            progress=progress,
        )
        return manifest

    def diff(self, run_id: str | None, other: Ledger, other_run_id: str | None = None,
             ) -> RunDiff:
        """Compare run ``run_id`` of this ledger (A) with run ``other_run_id`` of ``other``
        (B; may be this ledger): their call chains without ids or times, side by side, every
        difference named (:mod:`evidence_ledger.verify.compare`). Reads each ledger twice
        (the verifier's pass, payloads not re-hashed: ``verify`` checks those; then its
        run's legs).

        Args:
            run_id, other_run_id: a run id, or a unique prefix of one; None: the ledger's
                only run that made calls.

        Raises:
            UsageError: a run that names none (or several) of the ledger's runs, or None for
                a ledger with several runs (the message lists them).
            EvidenceError: if either ledger fails integrity (the message says which).
        """
        sides = []
        for name, book, wanted in (("A", self, run_id), ("B", other, other_run_id)):
            report = verify_ledger(book._book, payloads=False)
            broken = [f for f in report.violations if f.rule == "integrity"]
            if broken:
                raise EvidenceError(f"ledger {name} ({book.directory}) fails integrity: "
                                    f"{broken[0].detail} (run verify)")
            run = _pick_run(name, book.directory, {key[0] for key in report.calls}, wanted)
            legs, ends = run_legs((entry for entry, _ in book._book.entries()), run)
            sides.append((run, run_facts(report.calls.values(), run, legs),
                          run_rules(report.violations, run), report.violations, ends))
        (run_a, a, rules_a, all_a, ends_a), (run_b, b, rules_b, all_b, ends_b) = sides
        return dataclasses.replace(
            compare_runs(a, b, rules_a, rules_b, ends_a, ends_b), run_a=run_a, run_b=run_b,
            elsewhere_a=sum(f.run_id not in (run_a, run_b) for f in all_a),
            elsewhere_b=sum(f.run_id not in (run_a, run_b) for f in all_b))

    def verify_export(self, directory: Source, verifier_keys: str | Sequence[str], *,
                      progress: Progress | None = None) -> ExportCheck:
        """:func:`evidence_ledger.verify_export` of an export, and also against this ledger:
        its root at the export's tree size must be the export's (``check.ok``)."""
        from evidence_ledger.api.offline import verify_export

        return verify_export(directory, verifier_keys, ledger=self, progress=progress)

    # -- writing ---------------------------------------------------------------------

    def ingest(self, events: Source, *, again: bool = False) -> IngestResult:
        """Append a JSON Lines file of evidence events (``schemas/ingest-event.schema.json``)
        as one atomic group, then an ``ingest`` entry holding the file's SHA-256.

        Raises:
            IngestError: (a UsageError) naming the first line that fails; nothing is
                appended. Also if the same file was ingested before, unless ``again``.
            StorageError: if the append fails (nothing acknowledged is lost).
        """
        return ingest_file(EvidenceWriter(self._book), Path(events), again=again)

    def redact(self, digest: str, *, reason: str, by: str | None = None) -> Redaction:
        """Erase one payload (``sha256:<64 hex>``, or a unique prefix of at least 8 hex
        digits, resolved first with one pass over the log) after recording a ``redaction``
        entry naming its whole digest; every entry hash, proof and checkpoint still
        verifies.

        Raises:
            UsageError: for a malformed digest, an ambiguous prefix or one no payload has,
                or a payload already redacted.
        """
        _text(digest, "digest")
        _text(reason, "reason")
        _text(by, "by", optional=True)
        _named(reason, "reason", blank=True)
        _named(by, "by", blank=True)
        payload = payload_digest(self._book, digest)
        return redact(EvidenceWriter(self._book), payload, reason, by)

    def revoke(self, call_id: str, *, by: str, reason: str, run_id: str | None = None) -> int:
        """Revoke every approval of the recorded call ``call_id`` made so far (a
        ``revocation`` entry, durable on return); return the entry's seq. A recorder's guard
        then denies the call's tool, also on a ``RunState`` approved before (see
        docs/ENFORCEMENT.md).

        Raises:
            UsageError: if no run recorded ``call_id`` (in ``run_id``), or several did and
                ``run_id`` is None.
        """
        for value, name in ((call_id, "call_id"), (by, "by"), (reason, "reason")):
            _text(value, name)
            _named(value, name)
        _text(run_id, "run_id", optional=True)
        _named(run_id, "run_id")
        self._book.require_exists()
        return revoke_call(EvidenceWriter(self._book), call_id, by=by, reason=reason,
                           run_id=run_id)

    def approve(self, call_id: str, *, by: str, key: SigningKey, reason: str | None = None,
                run_id: str | None = None) -> int:
        """Approve the recorded call ``call_id`` as ``by``, signed with ``key`` (the approver's
        Ed25519 key: an ``approve`` decision and its ``approval_signature``, durable on
        return); return the decision's seq. The app still applies the approval to its
        ``RunState``; a guard whose policy names ``key``'s verifier key for ``by`` counts it.

        Raises:
            UsageError: as :meth:`revoke`.
        """
        for value, name in ((call_id, "call_id"), (by, "by")):
            _text(value, name)
            _named(value, name)
        _text(reason, "reason", optional=True)
        _text(run_id, "run_id", optional=True)
        _named(reason, "reason", blank=True)
        _named(run_id, "run_id")
        self._book.require_exists()
        refuse_key_inside(self.directory, key.path)
        return approve_call(EvidenceWriter(self._book), call_id, by=by, signer=key.signer,
                            reason=reason, run_id=run_id)

    def checkpoint(self, keys: SigningKey | Sequence[SigningKey], *,
                   witnesses: Sequence[Witness] = ()) -> StoredCheckpoint:
        """Sign the current tree head as a C2SP checkpoint (one signature line per key; the
        first key's name is the origin), have each witness cosign it (c2sp.org/tlog-witness),
        store it in ``checkpoints/`` with the cosignatures obtained, and return it.

        A witness that refuses or cannot be reached leaves no cosignature; the checkpoint
        is stored all the same, and its ``witnesses`` say what each one answered.

        Raises:
            UsageError: for no key, a key kept inside the ledger directory, an origin
                that differs from the stored checkpoints', or a witness key that is not a
                cosignature key.
            EvidenceError: if the log is damaged or does not extend the latest checkpoint.
        """
        keys = signing_keys(keys)
        self._book.require_exists()  # a checkpoint signs a log
        for key in keys:
            refuse_key_inside(self.directory, key.path)
        return create_checkpoint(self._book, [key.signer for key in keys],
                                 witnesses=witnesses)

    def prove(
        self,
        out: Source,
        key: SigningKey,
        *,
        call_id: str | None = None,
        run_id: str | None = None,
        whole_log: bool = False,
        include_payloads: bool = False,
    ) -> Bundle:
        """Write a signed, offline-verifiable proof bundle (an in-toto Statement in a DSSE
        envelope) of one call's chain (``call_id``, optionally in ``run_id``), one run
        (``run_id``) or the whole log, with inclusion proofs against a checkpoint signed by
        ``key`` and the verifier's verdict.

        Raises:
            UsageError: for no selection or a conflicting one, an existing ``out`` or one
                inside the ledger directory, or a key inside the ledger directory.
            EvidenceError: if the log is damaged.
        """
        from evidence_ledger.bundle.build import build_bundle, refuse_existing, write_bundle
        from evidence_ledger.bundle.verify import Selection

        (key,) = signing_keys(key)
        _text(call_id, "call_id", optional=True)
        _text(run_id, "run_id", optional=True)
        if whole_log and (call_id is not None or run_id is not None):
            raise UsageError(
                "--all proves the whole log (whole_log); drop --call-id and --run-id"
            )
        if whole_log:
            selection = Selection("all")
        elif call_id is not None:
            selection = Selection("call", run_id, call_id)
        elif run_id is not None:
            selection = Selection("run", run_id)
        else:
            raise UsageError(
                "say what to prove: --call-id ID [--run-id R], --run-id ID, or --all "
                "(call_id, run_id or whole_log)"
            )
        refuse_existing(Path(out))
        refuse_inside(self.directory, out, "the bundle")
        refuse_key_inside(self.directory, key.path)
        bundle = build_bundle(self._book, key.signer, selection,
                              include_payloads=include_payloads)
        write_bundle(out, bundle.data, private=include_payloads)
        return bundle

    def repair_sessions(
        self,
        source: Source,
        *,
        session_id: str | None = None,
        messages_table: str = MESSAGES_TABLE,
        settle: bool = False,
    ) -> SessionRepair:
        """Plan the repair of a session store's orphan outputs from this ledger's evidence
        (each missing ``function_call`` rebuilt from its recorded call and exact arguments).

        Args:
            source: a ``SQLiteSession`` file, or a JSON Lines dump (plan only).
            settle: first settle repairs a crash left half-recorded (writes the ledger;
                for :meth:`SessionRepair.apply`). False: read only.

        Raises:
            UsageError: for an unreadable store, or ``settle`` on a JSON Lines dump.
            EvidenceError: if the log is damaged.
        """
        writer = EvidenceWriter(self._book)
        contents = read_store(source, session_id=session_id, messages_table=messages_table)
        if settle and contents.format != "sqlite":
            raise UsageError(
                f"{source}: a JSON Lines dump can be planned but not repaired in place"
            )
        settled = []
        if contents.format == "sqlite":
            settled = settle_pending(source, writer, apply=settle)
            if settle:  # settling may have changed the store: read it again
                contents = read_store(source, session_id=session_id,
                                      messages_table=messages_table)
        plan = plan_repair(contents, load_evidence(self._book), self._book.payloads.get)
        return SessionRepair(plan, settled, writer)


def _pick_run(side: str, directory: Path, runs: set[str], wanted: str | None) -> str:
    """The run of ``runs`` (those of ledger ``side`` at ``directory`` that made calls) that
    ``wanted`` names (a run id or a unique prefix; None: the only one)."""
    if wanted == "":
        raise UsageError(f"--run-{side.lower()} is empty: give a run id or a prefix of one")
    found = [wanted] if wanted in runs else sorted(
        r for r in runs if wanted is None or r.startswith(wanted))
    if len(found) == 1:
        return found[0]
    shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
    if not found:
        what = "no run made calls" if wanted is None else f"no run starts with {wanted!r}"
        raise UsageError(f"ledger {side} ({directory}): {what}")
    option = f"--run-{side.lower()}"
    raise UsageError(f"ledger {side} ({directory}) holds {len(found)} runs"
                     f"{'' if wanted is None else f' starting with {wanted!r}'} ({shown}): "
                     f"name one with {option}")


@dataclass
class SessionRepair:
    """A planned repair of one session store (:meth:`Ledger.repair_sessions`).

    Attributes:
        plan: the insertions and refusals, per session (``schemas/repair-plan.schema.json``).
        settled: one line per leftover repair marker that was settled.
    """

    plan: RepairPlan
    settled: list[str]
    _writer: EvidenceWriter

    def apply(self, by: str, backup: Source | None = None) -> RepairResult:
        """Carry the plan out on the SQLite store in one transaction, after a backup copy
        (default ``<store>.<repair_id>.bak``), and record a ``session_repair`` entry per
        inserted item.

        Raises:
            UsageError: if ``by`` is empty, or the plan refuses an orphan output.
            StorageError: if the ledger append fails after the store changed (the marker in
                ``repairs/`` says so; the next repair settles it).
        """
        _text(by, "by")
        if not by.strip():
            raise UsageError("--apply needs --by NAME (who repairs; it is recorded)")
        if self.plan.refusals:
            raise UsageError("the plan refuses an orphan output; nothing to apply")
        return apply_store_repair(self.plan, self._writer, by=by, backup=backup)


def _text(value: Any, name: str, optional: bool = False) -> None:
    """Raise TypeError unless ``value`` is a ``str`` (or None when ``optional``)."""
    if not (isinstance(value, str) or (optional and value is None)):
        raise TypeError(f"{name} is a str, not {type(value).__name__}")


def _named(value: str | None, name: str, blank: bool = False) -> None:
    """Raise UsageError if ``value`` is not valid UTF-8 text (a lone surrogate, as a shell
    passes bytes that are not UTF-8) or, unless ``blank``, is empty or only blanks (a
    decision names who made it, what and why). None passes."""
    if value is None:
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{name} is not valid UTF-8 text") from None
    if not blank and not value.strip():
        raise UsageError(f"{name} must not be empty")


def _paths(sources: Source | Sequence[Source]) -> list[Source]:
    """One path, or several, as a list."""
    if isinstance(sources, str | os.PathLike):
        return [sources]
    return list(sources)


def _refuse_uncreatable(directory: Path) -> None:
    """Raise :class:`UsageError` when ``directory`` does not exist and cannot be made: its
    nearest existing ancestor is not a directory, or is not writable."""
    if os.path.lexists(directory):
        return
    ancestor = directory.absolute().parent
    while not os.path.lexists(ancestor) and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UsageError(f"cannot create {directory}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise UsageError(f"cannot create {directory}: {ancestor} is not writable")

