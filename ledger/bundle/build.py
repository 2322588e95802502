"""Build signed, offline-verifiable proof bundles from a ledger (``evidence-ledger prove``).

A bundle holds the evidence chains of a selection (one call id, one run, or the whole
log) with an inclusion proof for each entry against one signed checkpoint, and the
verdict of the ledger's verifier on them, as an in-toto Statement v1 in a DSSE envelope
signed with the ledger's Ed25519 checkpoint key. :mod:`evidence_ledger.bundle.verify` documents
the format and verifies it without the ledger.

What goes in (the *closure* of a selection), so that re-running the evidence rules over
the bundled entries gives exactly the full ledger's verdict on the selection:

- the selection's own entries: every entry naming the call id (and run) or the run;
- every entry naming one of the selection's call ids (a run state's interruptions name
  theirs), from any run (approvals of the same call in another run, items another run
  persisted to a shared session, the call another run made that a state waits on, the
  states of any run that wait on one of them);
- the ``run_end``, ``run_state`` and static ``tool_policy`` entries and the sticky
  (``always``) decisions of the selection's runs, with the ``call`` entries those
  decisions were made on;
- the ``clear`` operations of the sessions the selection persisted items to (or another
  run persisted an item of one of its calls to), and the first item each run persisted to
  them (an output is traced through the runs that wrote into its
  session);
- the ``run_state`` entries of any other run whose states bundled entries name, every
  ``call`` entry a bundled entry ``refs``, and the ``redaction`` entries of the payloads
  bundled entries name.

Payloads (arguments, outputs, session items) are bundled only when asked: by default
a bundle carries digests only, so no personal data leaves by accident.

The bundle is verified with :func:`evidence_ledger.bundle.verify.verify_bundle` before it is
returned: a ledger that cannot give an authentic bundle (damaged, or changed under its
checkpoint) raises instead.
"""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidence_ledger.bundle.verify import (
    ABSENCE_SIGNED,
    ABSENCE_WHOLE_LOG,
    BUNDLE_FORMAT_VERSION,
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    PROOF_INCLUSION,
    PROOF_WHOLE_LOG,
    BundleError,
    Selection,
    VerifiedBundle,
    absence_statement,
    finding_in_selection,
    verify_bundle,
)
from evidence_ledger.format.entries import PAYLOAD_FIELDS, Entry, decode_entry, entry_hash
from evidence_ledger.format.errors import EncodingError, EvidenceError, StorageError, UsageError
from evidence_ledger.format.framing import Damage, Record
from evidence_ledger.record.checkpointing import create_checkpoint
from evidence_ledger.storage.checkpoint_store import CheckpointStore, StoredCheckpoint
from evidence_ledger.storage.fsutil import close_fd
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.tree_store import TreeStore
from evidence_ledger.tlog.checkpoint import Checkpoint, verify_checkpoint
from evidence_ledger.tlog.dsse import in_toto_statement, sign_envelope
from evidence_ledger.tlog.merkle import leaf_hash
from evidence_ledger.tlog.note import Signer
from evidence_ledger.tlog.proof_verify import verify_inclusion
from evidence_ledger.tlog.proofs import inclusion_proof
from evidence_ledger.verify.audit import verify_ledger
from evidence_ledger.verify.findings import INTEGRITY
from evidence_ledger.verify.records import Report

__all__ = ["Bundle", "build_bundle", "select_entries", "sign_statement", "write_bundle"]

ATTEMPTS = 3
"""How often to re-sign when writers append while a bundle is built."""

Records = Callable[[], Iterable[tuple[int, bytes]]]
"""A function returning the log's ``(seq, entry bytes)`` in order, each time it is called."""


@dataclass(frozen=True)
class Bundle:
    """A built bundle.

    Attributes:
        data: the bundle file's bytes (the DSSE envelope as JSON, UTF-8, ending in ``\\n``).
        verified: the result of verifying ``data`` with the signing key.
        checkpoint: the stored checkpoint the entries are proven against.
        checkpoint_reused: True when that checkpoint was already stored (not signed now).
    """

    data: bytes
    verified: VerifiedBundle
    checkpoint: StoredCheckpoint
    checkpoint_reused: bool


# -- selection ----------------------------------------------------------------------------


def _needles(values: Iterable[str]) -> tuple[bytes, ...]:
    return tuple(v.encode("utf-8") for v in values if v)


def _mentions(data: bytes, needles: Sequence[bytes]) -> bool:
    """Whether ``data`` may name one of ``needles`` (a cheap pre-filter: MessagePack
    stores a string as its UTF-8 bytes, so an entry naming it contains them)."""
    return any(n in data for n in needles)


def _payload_digests(entry: Entry) -> set[bytes]:
    return {d for name in PAYLOAD_FIELDS if isinstance(d := entry.body.get(name), bytes)}


def _states_named(entries: Iterable[Entry]) -> set[str]:
    """Run-state ids that ``entries`` name (a decision's, execution's or leg end's
    ``run_state``, a state's ``parent``) but whose ``run_state`` entries are not among them."""
    named: set[str] = set()
    recorded: set[str] = set()
    for entry in entries:
        body = entry.body
        if entry.kind == "run_state":
            recorded.add(body["state_id"])
            if isinstance(body["parent"], str):
                named.add(body["parent"])
        elif isinstance(body.get("run_state"), str):
            named.add(body["run_state"])
    return named - recorded


def select_entries(records: Records, selection: Selection) -> list[tuple[int, bytes, Entry]]:
    """The entries of ``selection`` and the context its verdict depends on, by seq.

    See the module docstring for the closure. Reads the log two or three times
    (``records()`` is called once per pass); a cheap byte pre-filter skips decoding
    entries that cannot name a run, session or call id of interest.

    Args:
        records: returns ``(seq, entry bytes)`` of the log, in order, on every call.
        selection: what to select.

    Returns:
        ``(seq, entry bytes, decoded entry)`` tuples in seq order.

    Raises:
        UsageError: if no entry belongs to the selection.
        EvidenceError: if an entry does not decode.
    """

    def decoded(needles: Sequence[bytes] | None) -> Iterator[tuple[int, bytes, Entry]]:
        for seq, data in records():
            if needles is None or _mentions(data, needles):
                try:
                    yield seq, data, decode_entry(data)
                except EncodingError as exc:
                    raise EvidenceError(f"log damaged at seq {seq}: {exc}") from exc

    if selection.mode == "all":
        return list(decoded(None))

    # Pass 1: the selection's own entries, and the runs, sessions and call ids they name.
    runs: set[str] = set()
    sessions: set[str] = set()
    call_ids: set[str] = set()
    item_sessions: dict[str, set[str]] = {}  # call id -> sessions holding an item of it
    for _seq, _data, entry in decoded(_needles([selection.call_id or selection.run_id or ""])):
        body = entry.body
        if entry.kind == "session_item" and isinstance(body.get("call_id"), str):
            item_sessions.setdefault(body["call_id"], set()).add(body["session_id"])
        if selection.matches(body):
            runs.add(body["run_id"])
            if isinstance(body.get("session_id"), str):
                sessions.add(body["session_id"])
            if isinstance(body.get("call_id"), str):
                call_ids.add(body["call_id"])
            for pending in body.get("interruptions") or ():  # a run state's: its calls
                call_ids.add(pending["call_id"])
    if not runs:
        raise UsageError(f"no entry belongs to {selection.describe()}")
    for call_id in call_ids:  # another run's item of one of these calls: its session too
        sessions |= item_sessions.get(call_id, set())

    # Pass 2: the selection and its context (see the module docstring).
    chosen: dict[int, tuple[bytes, Entry]] = {}
    run_calls: dict[int, tuple[bytes, Entry]] = {}  # calls of the runs, maybe needed
    writers: set[tuple[str, str | None]] = set()  # (session, run) whose first item is chosen
    sticky_calls: set[tuple[str, str]] = set()
    redactions: list[tuple[int, bytes, Entry]] = []
    needles = (*_needles(sorted(runs | sessions | call_ids)), b"redaction")
    for seq, data, entry in decoded(needles):
        body, kind = entry.body, entry.kind
        run_id = body.get("run_id")
        if (
            selection.matches(body)
            or body.get("call_id") in call_ids
            or any(p["call_id"] in call_ids for p in body.get("interruptions") or ())
            or (kind == "session_item" and body["op"] == "clear" and body["session_id"] in sessions)
            or (kind == "session_item" and body["session_id"] in sessions
                and (body["session_id"], run_id) not in writers)  # a run writing into it
        ):
            chosen[seq] = (data, entry)
            if kind == "session_item":
                writers.add((body["session_id"], run_id))
        elif kind == "redaction":
            redactions.append((seq, data, entry))
        elif run_id not in runs:
            continue
        elif kind in ("run_end", "run_state") or (
            kind == "tool_policy" and body["call_id"] is None
        ):
            chosen[seq] = (data, entry)
        elif kind == "decision" and body["always"]:
            chosen[seq] = (data, entry)
            sticky_calls.add((run_id, body["call_id"]))
        elif kind == "call":
            run_calls[seq] = (data, entry)
    for seq, (data, entry) in run_calls.items():
        if (entry.body["run_id"], entry.body["call_id"]) in sticky_calls:
            chosen[seq] = (data, entry)

    # Further passes, when needed: calls named by refs and not chosen yet, and the
    # run_state entries of every state a chosen entry names, with their ancestors (the
    # lineage decides whether a decision holds in a leg), until nothing is missing.
    while True:
        hashes = {entry_hash(data) for data, _ in chosen.values()}
        wanted = {ref for _, entry in chosen.values() for ref in entry.refs} - hashes
        states = _states_named(entry for _, entry in chosen.values())
        if not wanted and not states:
            break
        state_needles = _needles(sorted(states))
        added = False
        for seq, data in records():
            if seq in chosen:
                continue
            if entry_hash(data) in wanted:
                chosen[seq], added = (data, decode_entry(data)), True
            elif _mentions(data, state_needles):
                entry = decode_entry(data)
                if entry.kind == "run_state" and entry.body["state_id"] in states:
                    chosen[seq], added = (data, entry), True
        if not added:
            break  # named but never recorded: the rules treat such lineage as unknown

    named: set[bytes] = set()
    for _, entry in chosen.values():
        named |= _payload_digests(entry)
    for seq, data, entry in redactions:
        if entry.body["digest"] in named:
            chosen[seq] = (data, entry)
    return [(seq, *chosen[seq]) for seq in sorted(chosen)]


# -- building -----------------------------------------------------------------------------


def _whole_entries(ledger: Ledger) -> int:
    """Entries in the log before any torn tail or damage (frames read, nothing decoded)."""
    count = 0
    for item in ledger.scan():
        if not isinstance(item, Record):
            break
        count += 1
    return count


def _records(ledger: Ledger, size: int) -> Records:
    def read() -> Iterator[tuple[int, bytes]]:
        if size == 0:
            return
        for item in ledger.scan():
            if isinstance(item, Damage):
                raise EvidenceError(f"log damaged at seq {item.index}: {item.reason}")
            if not isinstance(item, Record) or not item.crc_ok:
                raise EvidenceError(
                    f"log damaged or short at seq {getattr(item, 'index', '?')} (run verify)"
                )
            yield item.index, item.data
            if item.index + 1 >= size:
                return

    return read


def _checkpoint(
    ledger: Ledger, signer: Signer, report: Report
) -> tuple[StoredCheckpoint, bool]:
    """The latest stored checkpoint if this key signed it and it is the head ``report``
    verified; else a new one of that head, signed now (no second pass over the log
    unless the report found the log itself damaged)."""
    latest = CheckpointStore(ledger).latest()
    if latest is not None:
        try:
            cp = verify_checkpoint(latest.data, [signer.verifier]).checkpoint
        except EvidenceError:
            cp = None
        if cp is not None and (cp.size, cp.root) == (report.tree_size, report.root_hash):
            return latest, True
    intact = not any(f.rule == INTEGRITY for f in report.violations)
    return create_checkpoint(ledger, [signer], head=report if intact else None), False


def _inclusion_proofs(
    ledger: Ledger, entries: Sequence[tuple[int, bytes, Entry]], cp: Checkpoint
) -> dict[int, list[bytes]]:
    """seq -> inclusion proof of that entry in the tree of checkpoint ``cp``, each checked
    against the checkpoint's root (RFC 9162 §2.1.3.2). The ``tree/`` store they are read
    from is a cache: when a proof from it does not verify, it is rebuilt from the log and
    the proofs made again.

    Raises:
        EvidenceError: if proofs from the rebuilt store still do not verify.
    """
    store = TreeStore(ledger)
    for tree in (store.update, store.rebuild):
        try:
            built = tree()
            proofs = {seq: inclusion_proof(built, seq, cp.size) for seq, _, _ in entries}
            for seq, data, _ in entries:
                verify_inclusion(seq, cp.size, leaf_hash(data), proofs[seq], cp.root)
        except (EvidenceError, UsageError):  # a damaged store (one claiming another tree
            continue  # size than the checked checkpoint's), or a proof that does not verify
        return proofs
    raise EvidenceError(
        f"no inclusion proof from {ledger.directory} verifies against checkpoint tree size "
        f"{cp.size} (the log changed under it?); run verify"
    )


def _verdict(
    report: Report, selection: Selection, seqs: frozenset[int]
) -> dict[str, Any]:
    violations = [f for f in report.violations if finding_in_selection(f, selection, seqs)]
    return {
        "ok": not violations,
        "rules": list(report.rules),
        "violations": [f.to_json() for f in violations],
    }


def _payloads(ledger: Ledger, entries: Sequence[tuple[int, bytes, Entry]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for _seq, _data, entry in entries:
        for digest in sorted(_payload_digests(entry)):
            key = "sha256:" + digest.hex()
            if key not in out and (blob := ledger.payloads.get(digest)) is not None:
                out[key] = base64.b64encode(blob).decode("ascii")
    return out


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def build_bundle(
    ledger: Ledger | str | os.PathLike[str] | None,
    signer: Signer,
    selection: Selection,
    *,
    include_payloads: bool = False,
) -> Bundle:
    """Build, sign and verify a proof bundle for ``selection``.

    Selects the entries (:func:`select_entries`), runs the ledger's full verifier
    (:func:`evidence_ledger.verify.audit.verify_ledger` with the key's verifier key, re-hashing the
    payloads the selected entries name), signs a checkpoint of the tree head it verified
    with ``signer`` (or reuses the latest stored one when this key signed that very
    head), proves each entry against the checkpoint, and signs the statement (DSSE,
    keyid = the verifier key string).

    Args:
        ledger: the ledger or its directory.
        signer: the ledger's checkpoint key (see :func:`evidence_ledger.storage.keys.load_signer`).
        selection: one call id (optionally in one run), one run, or the whole log.
        include_payloads: bundle the payload bytes (arguments, outputs, items) of the
            bundled entries; default digests only.

    Returns:
        The :class:`Bundle`; ``data`` is the file to write.

    Raises:
        UsageError: no ledger, an empty one, a selection nothing belongs to, or a key
            whose name differs from the ledger's checkpoint origin.
        EvidenceError: the log is damaged or changed under a checkpoint, or kept growing
            through every attempt, or the built bundle does not verify.
        StorageError: the checkpoint cannot be stored.
    """
    book = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
    book.require_exists()
    vkey = signer.verifier.vkey
    whole_log = selection.mode == "all"
    for _attempt in range(ATTEMPTS):
        size = _whole_entries(book)
        if size == 0:
            raise UsageError(f"the ledger at {book.directory} is empty: nothing to prove")
        entries = select_entries(_records(book, size), selection)
        # the payloads of the bundled entries are re-hashed; the verdict is about them
        wanted = True if whole_log else set().union(*(_payload_digests(e) for *_, e in entries))
        report = verify_ledger(book, [vkey], payloads=wanted)
        if report.tree_size != size:
            continue  # the log grew meanwhile: select again
        stored, reused = _checkpoint(book, signer, report)
        cp = verify_checkpoint(stored.data, [signer.verifier]).checkpoint
        if cp.size == size:
            break
    else:
        raise EvidenceError(
            f"the ledger grew while the bundle was built ({ATTEMPTS} attempts); try again"
        )
    if report.root_hash != cp.root:
        raise EvidenceError(
            f"the log no longer has the root of checkpoint {stored.path} at tree size "
            f"{cp.size}: it was changed after it was signed (run verify)"
        )

    proofs = {} if whole_log else _inclusion_proofs(book, entries, cp)
    items: list[dict[str, Any]] = []
    for seq, data, _entry in entries:
        item: dict[str, Any] = {"seq": seq, "data": _b64(data)}
        if not whole_log:
            item["proof"] = [_b64(h) for h in proofs[seq]]
        items.append(item)
    seqs = frozenset(seq for seq, _, _ in entries)
    payload = in_toto_statement(
        ((f"entry/{seq}", entry_hash(data)) for seq, data, _ in entries),
        PREDICATE_TYPE,
        {
            "format_version": BUNDLE_FORMAT_VERSION,
            "selection": selection.to_json(),
            "checkpoint": stored.data.decode("utf-8"),
            "proof_form": PROOF_WHOLE_LOG if whole_log else PROOF_INCLUSION,
            "entries": items,
            "payloads": _payloads(book, entries) if include_payloads else None,
            "verdict": _verdict(report, selection, seqs),
            "absence": {
                "proven": whole_log,
                "basis": ABSENCE_WHOLE_LOG if whole_log else ABSENCE_SIGNED,
                "statement": absence_statement(whole_log, cp.size),
            },
        },
    )
    data = sign_statement(payload, signer)
    try:
        verified = verify_bundle(data, [signer.verifier])
    except BundleError as exc:
        raise EvidenceError(
            f"the bundle built from {book.directory} does not verify ({exc}); run verify"
        ) from exc
    return Bundle(data, verified, stored, reused)


def sign_statement(payload: bytes, signer: Signer, payload_type: str = PAYLOAD_TYPE) -> bytes:
    """Wrap ``payload`` (statement JSON bytes) in a DSSE envelope signed by ``signer``
    (:func:`evidence_ledger.tlog.dsse.sign_envelope`; its keyid is the signer's verifier
    key string).

    Returns:
        The envelope as indented JSON, UTF-8, ending in a newline (a bundle file).
    """
    return sign_envelope(payload, signer, payload_type)


def write_bundle(path: str | os.PathLike[str], data: bytes, private: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically (temporary file, fsync, rename).

    Args:
        path: the output file; an existing file is never replaced.
        data: the bundle bytes.
        private: create it with mode 0600 (a bundle carrying payloads); else 0644
            (both less the umask).

    Raises:
        UsageError: if the directory does not exist, or the path exists already.
        StorageError: if the file cannot be written.
    """
    target = Path(path)
    refuse_existing(target)
    if not target.parent.is_dir():
        raise UsageError(f"cannot write {target}: no directory {target.parent}")
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            close_fd(fd)
        os.link(tmp, target)  # fails if the target appeared meanwhile: never replaced
    except FileExistsError as exc:
        raise UsageError(f"{target} exists; choose another --out") from exc
    except OSError as exc:
        raise StorageError(f"cannot write {target}: {exc.strerror or exc}") from exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return target


def refuse_existing(target: Path) -> None:
    """Raise :class:`UsageError` if ``target`` exists (an output is never replaced)."""
    if target.exists() or target.is_symlink():
        raise UsageError(f"{target} exists; choose another --out")
