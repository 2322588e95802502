"""Verify a proof bundle offline: bundle bytes and verifier keys in, a verdict out (pure).

A proof bundle (``evidence-ledger prove``) is one JSON file: a DSSE envelope
(secure-systems-lab/dsse v1.0) whose payload is an in-toto Statement v1 whose predicate
carries ledger entries, their inclusion proofs, the signed checkpoint they are proven
against, and the verdict of the ledger's verifier on them. ``schemas/bundle.schema.json``
describes all three layers. Abbreviated::

    envelope   {"payloadType": "application/vnd.in-toto+json",
                "payload": base64(statement JSON),
                "signatures": [{"keyid": str (optional), "sig": base64(Ed25519)}, ...]}
    statement  {"_type": "https://in-toto.io/Statement/v1",
                "subject": [{"name": "entry/<seq>", "digest": {"sha256": "<hex>"}}, ...],
                "predicateType": "https://evidence-ledger.dev/bundle/v1",
                "predicate": {...}}
    predicate  {"format_version": 1,
                "selection": {"mode": "call" | "run" | "all", "run_id": str | null,
                              "call_id": str | null},
                "checkpoint": "<c2sp.org/tlog-checkpoint signed note, as text>",
                "proof_form": "rfc9162-inclusion" | "whole-log",
                "entries": [{"seq": int, "data": base64(entry bytes),
                             "proof": [base64(32 bytes), ...]}, ...],
                "payloads": null | {"sha256:<hex>": base64(payload bytes)},
                "verdict": {"ok": bool, "rules": [str], "violations": [finding]},
                "absence": {"proven": bool, "basis": "signed-verdict" | "whole-log",
                            "statement": str}}

Each ``proof`` is the RFC 9162 §2.1.3 audit path of the entry's leaf in the checkpoint's
tree; with the checkpoint it is exactly a ``c2sp.org/tlog-proof@v1`` (``index <seq>``, the
hashes one per line, a blank line, the checkpoint): :func:`tlog_proof_text` writes it.
``whole-log`` bundles (``--all``) carry every entry ``0 .. N-1`` and no per-entry proof:
the root recomputed from all N leaves must equal the checkpoint's.

:func:`verify_bundle` checks, in order, and stops at the first failure:

1. the file is JSON within the limits, the envelope well-formed;
2. the DSSE signature over PAE(payloadType, payload) by one of the given keys, whatever
   the signatures' ``keyid`` hints say (:func:`evidence_ledger.tlog.dsse.check_envelope`),
   and the payload type;
3. the statement and predicate are well-formed;
4. the checkpoint is signed by the same key (c2sp.org/signed-note), its origin the key name;
5. per entry: the subject digest is SHA-256 of the entry bytes, the inclusion proof leads
   from its leaf hash to the checkpoint root (or, whole-log, all leaves give the root),
   the bytes decode as a canonical entry with that seq;
6. hash links: ``prev`` of every entry whose predecessor is bundled (and of seq 0), and
   every ``ref`` names a bundled ``call`` entry with a smaller seq;
7. payloads, when included: each is named by a bundled entry and hashes to its digest;
8. the verdict: the evidence rules (:mod:`evidence_ledger.verify.rules`) re-run over the bundled
entries,
   restricted to the selection, find exactly the rule violations the signed verdict
   claims. Claims no bundle can recompute (``integrity`` of the ledger's payload store,
   checkpoint audit rules) are reported as resting on the signature; the verdict may
   name only rules of the ledger's verifier (:data:`LEDGER_RULES`), and claim
   violations only of rules it lists as run;
9. the absence claim matches the form (only a whole-log bundle proves absence), and its
   statement is word for word the one :func:`absence_statement` gives for that form and
   the checkpoint's tree size.

What a bundle proves: each bundled entry is leaf ``seq`` of the log's tree of size N,
signed by the ledger key; the links between them hold. Absence (no other execution,
decision or session item for the selection anywhere in the log) cannot be proven by a
subset: it rests on the verdict the ledger key signed for tree size N, and the
``absence`` field says so. A whole-log bundle proves absence too.

This module reads no files and imports no ledger storage code; every failure raises a
:class:`BundleError` (an :class:`~evidence_ledger.format.errors.EvidenceError`, exit code 1) whose
``what`` names the part that failed.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from securesystemslib.dsse import Envelope
from securesystemslib.signer import Signature

from evidence_ledger.format.entries import (
    PAYLOAD_FIELDS,
    ZERO_HASH,
    Entry,
    decode_entry,
    entry_hash,
)
from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.tlog import merkle
from evidence_ledger.tlog.checkpoint import Checkpoint, verify_checkpoint
from evidence_ledger.tlog.dsse import (
    PAYLOAD_TYPE,
    STATEMENT_TYPE,
    EnvelopeSignatureError,
    check_envelope,
)
from evidence_ledger.tlog.note import Verifier
from evidence_ledger.tlog.proof_verify import verify_inclusion
from evidence_ledger.verify.findings import (
    CHECKPOINT_RULES,
    FOREIGN_INTERRUPTION,
    GUARD_RULES,
    INTEGRITY,
    OUTPUT_NOT_PERSISTED,
    PAYLOAD_MISSING,
    RULES,
    Finding,
)
from evidence_ledger.verify.rules import CallState, RuleEngine

__all__ = [
    "ABSENCE_SIGNED",
    "ABSENCE_WHOLE_LOG",
    "BUNDLE_FORMAT_VERSION",
    "ENGINE_RULES",
    "LEDGER_RULES",
    "MAX_BUNDLE_BYTES",
    "PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "PROOF_INCLUSION",
    "PROOF_WHOLE_LOG",
    "STATEMENT_TYPE",
    "BundleEntry",
    "BundleEntryError",
    "BundleError",
    "BundleFormatError",
    "BundleLinkError",
    "BundlePayloadError",
    "BundleProofError",
    "BundleSignatureError",
    "BundleVerdictError",
    "Selection",
    "VerifiedBundle",
    "absence_statement",
    "finding_in_selection",
    "tlog_proof_text",
    "verify_bundle",
]

PREDICATE_TYPE = "https://evidence-ledger.dev/bundle/v1"
BUNDLE_FORMAT_VERSION = 1
PROOF_INCLUSION = "rfc9162-inclusion"
PROOF_WHOLE_LOG = "whole-log"
ABSENCE_SIGNED = "signed-verdict"
ABSENCE_WHOLE_LOG = "whole-log"
MAX_BUNDLE_BYTES = 1 << 30
"""Largest bundle file accepted, in bytes (a whole-log bundle of ~2.5 million entries)."""
MAX_SIGNATURES = 16
"""Most DSSE signatures an envelope may carry."""
ENGINE_RULES = tuple(rule for rule in RULES if rule != INTEGRITY)
"""The rules a bundle's entries alone let a verifier re-run
(:class:`~evidence_ledger.verify.rules.RuleEngine`)."""
COVERED_RULES = tuple(rule for rule in ENGINE_RULES
                      if rule not in (OUTPUT_NOT_PERSISTED, FOREIGN_INTERRUPTION))
"""The rules every signed verdict covers: the engine's rules when bundle format 1 was
defined. A rule added since is re-run only when the verdict lists it, so that a bundle
signed before it existed still verifies (its verdict then says nothing about it)."""
LEDGER_RULES = (*RULES, PAYLOAD_MISSING, *GUARD_RULES, *CHECKPOINT_RULES)
"""Every rule the ledger's verifier can run (:func:`evidence_ledger.verify.audit.verify_ledger`),
in its order: the evidence rules, ``payload_missing``, the guard audit's and the checkpoint
audit's."""

MODES = ("call", "run", "all")
_PAYLOAD_KEY = re.compile(r"sha256:[0-9a-f]{64}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_ENVELOPE_KEYS = frozenset({"payload", "payloadType", "signatures"})
_STATEMENT_KEYS = frozenset({"_type", "subject", "predicateType", "predicate"})
_PREDICATE_KEYS = frozenset({
    "format_version", "selection", "checkpoint", "proof_form", "entries", "payloads",
    "verdict", "absence",
})
_FINDING_KEYS = frozenset({"rule", "run_id", "scope", "call_id", "seq", "detail"})


# -- errors ---------------------------------------------------------------------------


class BundleError(EvidenceError):
    """A bundle that is not authentic or does not parse (exit code 1).

    Attributes:
        what: the part that failed, e.g. ``"envelope signature"``, ``"checkpoint"``,
            ``"entry/12"``, ``"inclusion proof of entry/12"``, ``"verdict"``.
        detail: one line saying what was found and what was wanted.
    """

    def __init__(self, what: str, detail: str) -> None:
        what, detail = _printable(what), _printable(detail)
        super().__init__(f"bundle not authentic: {what}: {detail}")
        self.what = what
        self.detail = detail


def _printable(text: str) -> str:
    """``text`` with every non-printable character (controls, lone surrogates) escaped."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in text)


def _show(value: Any) -> str:
    """A short, safe rendering of an untrusted JSON value for an error message."""
    if type(value) is str:
        return repr(value[:60])
    if type(value) is int:
        return str(value)[:20]
    return _type_name(value)


class BundleFormatError(BundleError):
    """Bytes that are not a well-formed bundle (JSON, envelope, statement or predicate)."""


class BundleSignatureError(BundleError):
    """The DSSE signature or the checkpoint signature does not verify with the given keys."""


class BundleEntryError(BundleError):
    """A bundled entry whose bytes do not match its subject digest or do not decode."""


class BundleProofError(BundleError):
    """An inclusion proof (or the whole-log root) that does not lead to the checkpoint root."""


class BundleLinkError(BundleError):
    """A broken hash link between bundled entries (``prev`` or ``refs``)."""


class BundlePayloadError(BundleError):
    """A bundled payload that is not named by an entry or does not match its digest."""


class BundleVerdictError(BundleError):
    """A signed verdict that the bundled entries contradict."""


def _fail(what: str, detail: str) -> NoReturn:
    raise BundleFormatError(what, detail)


# -- typed reading of untrusted JSON ----------------------------------------------------


def _reject_constant(name: str) -> NoReturn:
    raise BundleFormatError("json", f"{name} is not allowed")


def _reject_float(text: str) -> NoReturn:
    raise BundleFormatError("json", f"number {text[:20]!r} is not an integer")


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise BundleFormatError("json", f"duplicate key {key[:40]!r}")
        obj[key] = value
    return obj


def _loads(data: bytes, what: str) -> Any:
    """Strict JSON: UTF-8, no duplicate keys, no floats, NaN or Infinity.

    Raises:
        BundleFormatError: for anything else (including nesting too deep to parse).
    """
    if len(data) > MAX_BUNDLE_BYTES:
        _fail(what, f"{len(data)} bytes, want <= {MAX_BUNDLE_BYTES}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleFormatError(what, f"not UTF-8 at byte {exc.start}") from exc
    try:
        return json.loads(
            text, object_pairs_hook=_unique_object, parse_constant=_reject_constant,
            parse_float=_reject_float,
        )
    except RecursionError as exc:
        raise BundleFormatError(what, "JSON nested too deeply") from exc
    except BundleFormatError as exc:
        raise BundleFormatError(what, exc.detail) from exc
    except ValueError as exc:  # JSONDecodeError, or an integer too long to convert
        raise BundleFormatError(what, f"not JSON ({str(exc)[:80]})") from exc


def _obj(value: Any, what: str, keys: frozenset[str],
         optional: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``value`` as an object holding exactly ``keys`` and any of ``optional``."""
    if type(value) is not dict:
        _fail(what, f"is {_type_name(value)}, want an object")
    if not keys <= value.keys() <= keys | optional:
        missing, extra = sorted(keys - value.keys()), sorted(value.keys() - keys - optional)
        detail = "; ".join(
            part for part in (
                f"missing {', '.join(missing)}" if missing else "",
                f"unexpected {', '.join(k[:40] for k in extra[:5])}" if extra else "",
            ) if part
        )
        _fail(what, f"fields differ from the schema ({detail})")
    return value


def _type_name(value: Any) -> str:
    return {
        dict: "an object", list: "an array", str: "a string", int: "an integer",
        bool: "a boolean", type(None): "null",
    }.get(type(value), type(value).__name__)


def _str(value: Any, what: str) -> str:
    if type(value) is not str:
        _fail(what, f"is {_type_name(value)}, want a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        _fail(what, "holds a lone surrogate (not UTF-8)")
    return value


def _opt_str(value: Any, what: str) -> str | None:
    return None if value is None else _str(value, what)


def _int(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:
        _fail(what, f"is {_type_name(value)}, want a non-negative integer")
    return value


def _bool(value: Any, what: str) -> bool:
    if type(value) is not bool:
        _fail(what, f"is {_type_name(value)}, want a boolean")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if type(value) is not list:
        _fail(what, f"is {_type_name(value)}, want an array")
    return value


def _b64(value: Any, what: str, size: int | None = None) -> bytes:
    """Canonical standard base64 (RFC 4648 §4) of ``size`` bytes when given."""
    text = _str(value, what)
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise BundleFormatError(what, "is not base64") from exc
    if base64.b64encode(raw).decode("ascii") != text:
        _fail(what, "is not canonical base64")
    if size is not None and len(raw) != size:
        _fail(what, f"is {len(raw)} bytes, want {size}")
    return raw


# -- selection --------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """Which evidence chains a bundle is about.

    Attributes:
        mode: ``"call"`` (one call id, optionally in one run), ``"run"`` (one run) or
            ``"all"`` (the whole log).
        run_id: the run (required for ``run``, optional for ``call``, None for ``all``).
        call_id: the model's call id (required for ``call``, else None).
    """

    mode: str
    run_id: str | None = None
    call_id: str | None = None

    def __post_init__(self) -> None:
        valid = (
            (self.mode == "call" and self.call_id is not None)
            or (self.mode == "run" and self.run_id is not None and self.call_id is None)
            or (self.mode == "all" and self.run_id is None and self.call_id is None)
        )
        if not valid:
            raise UsageError(
                f"invalid selection {self.mode!r} (run_id {self.run_id!r}, call_id "
                f"{self.call_id!r}): want a call id, a run id, or all"
            )

    def matches(self, body: dict[str, Any]) -> bool:
        """True when an entry with ``body`` belongs to the selection itself (its seeds)."""
        if self.mode == "all":
            return True
        if self.mode == "run":
            return body.get("run_id") == self.run_id
        named = body.get("call_id") == self.call_id or any(  # a state waiting on the call
            p.get("call_id") == self.call_id for p in body.get("interruptions") or ())
        return named and (self.run_id is None or body.get("run_id") == self.run_id)

    def selects(self, finding: Finding) -> bool:
        """True when ``finding`` concerns a call identity in the selection."""
        return self.selects_call(finding.run_id, finding.call_id)

    def selects_call(self, run_id: str | None, call_id: str | None) -> bool:
        """True when the call identity ``(run_id, any scope, call_id)`` is selected."""
        if self.mode == "all":
            return True
        if self.mode == "run":
            return run_id == self.run_id
        return call_id == self.call_id and (self.run_id is None or run_id == self.run_id)

    def describe(self) -> str:
        """One line, e.g. ``call c-update in run r1``."""
        if self.mode == "all":
            return "the whole log"
        if self.mode == "run":
            return f"run {self.run_id}"
        return f"call {self.call_id}" + (f" in run {self.run_id}" if self.run_id else "")

    def to_json(self) -> dict[str, Any]:
        """``{"mode", "run_id", "call_id"}``."""
        return {"mode": self.mode, "run_id": self.run_id, "call_id": self.call_id}

    @classmethod
    def from_json(cls, value: Any, what: str = "selection") -> Selection:
        """Parse :meth:`to_json` output.

        Raises:
            BundleFormatError: if it is not a valid selection.
        """
        obj = _obj(value, what, frozenset({"mode", "run_id", "call_id"}))
        mode = _str(obj["mode"], f"{what}.mode")
        if mode not in MODES:
            _fail(f"{what}.mode", f"{mode[:40]!r} is not one of {', '.join(MODES)}")
        run_id = _opt_str(obj["run_id"], f"{what}.run_id")
        call_id = _opt_str(obj["call_id"], f"{what}.call_id")
        try:
            return cls(mode, run_id, call_id)
        except UsageError as exc:
            raise BundleFormatError(what, str(exc)) from exc


def finding_in_selection(finding: Finding, selection: Selection, seqs: frozenset[int]) -> bool:
    """True when a verifier finding belongs in the verdict of a bundle for ``selection``.

    That is: it concerns a selected call identity, or it names no call identity and either
    concerns a bundled entry (``seq`` in ``seqs``) or the whole log (``seq`` None, e.g. a
    checkpoint audit rule).
    """
    if selection.selects(finding):
        return True
    if finding.run_id is None and finding.call_id is None:
        return finding.seq is None or finding.seq in seqs
    return False


def absence_statement(whole_log: bool, tree_size: int) -> str:
    """The ``absence.statement`` text of a bundle (what it proves about absence)."""
    if whole_log:
        return (
            f"The bundle holds every entry of the log up to tree size {tree_size}, so "
            "absence is proven too: verify-proof re-runs the evidence rules over all of them."
        )
    return (
        "Each bundled entry is proven to be in the log, at its seq, at tree size "
        f"{tree_size}. Absence (no other execution, decision or session item for the "
        "selection elsewhere in the log) cannot be proven by a subset: it rests on this "
        f"verdict, signed by the ledger key for tree size {tree_size}."
    )


# -- results ----------------------------------------------------------------------------


@dataclass(frozen=True)
class BundleEntry:
    """One bundled entry, proven.

    Attributes:
        seq: leaf index.
        data: the canonical entry bytes.
        entry: the decoded entry.
        hash: its entry hash, SHA-256(data), 32 bytes.
        proof: its audit path (32-byte hashes; empty for whole-log bundles).
    """

    seq: int
    data: bytes
    entry: Entry
    hash: bytes
    proof: tuple[bytes, ...]


@dataclass(frozen=True)
class VerifiedBundle:
    """A bundle that verified (see :func:`verify_bundle`).

    Attributes:
        signer: the verifier key (C2SP string) that signed the envelope and checkpoint.
        checkpoint: the signed tree head the entries are proven against.
        checkpoint_note: the signed note, as it is in the bundle (UTF-8 text).
        selection: what the bundle is about.
        proof_form: :data:`PROOF_INCLUSION` or :data:`PROOF_WHOLE_LOG`.
        entries: bundled entries, by seq.
        prev_links, ref_links: how many ``prev`` and ``refs`` links were checked.
        payloads: payload digest -> bytes, or None when the bundle has digests only.
        missing_payloads: digests named by bundled entries but not bundled (redacted or
            missing in the ledger), when payloads are included.
        verdict: the violations the signed verdict claims, in its order.
        rules: the rules the ledger's verifier ran.
        recomputed: the rule violations re-derived from the bundled entries (they equal
            the claimed ones of :data:`ENGINE_RULES`).
        signed_only: claimed violations no bundle can recompute (ledger integrity of
            payload files, checkpoint audits): they rest on the signature.
        uncovered: violations the bundled entries show of rules the signed verdict does not
            list (a verdict signed before those rules existed, or one re-signed without
            them): the signature claims nothing about them; shown so that no one takes
            their absence from the verdict for a clean record.
        absence_proven: True only for whole-log bundles.
        absence: the ``absence.statement`` text.
        calls: the selected calls as the rules saw them, by seq.
    """

    signer: str
    checkpoint: Checkpoint
    checkpoint_note: str
    selection: Selection
    proof_form: str
    entries: tuple[BundleEntry, ...]
    prev_links: int
    ref_links: int
    payloads: dict[bytes, bytes] | None
    missing_payloads: tuple[bytes, ...]
    verdict: tuple[Finding, ...]
    rules: tuple[str, ...]
    recomputed: tuple[Finding, ...]
    signed_only: tuple[Finding, ...]
    absence_proven: bool
    absence: str
    calls: tuple[CallState, ...]
    uncovered: tuple[Finding, ...] = ()

    @property
    def ok(self) -> bool:
        """True when the verdict carries no violation."""
        return not self.verdict

    @property
    def recomputed_rules(self) -> tuple[str, ...]:
        """The rules of the signed verdict that :func:`verify_bundle` re-ran over the
        bundled entries (those of :data:`ENGINE_RULES` it lists); the others' claims rest on
        the signature."""
        return tuple(rule for rule in self.rules if rule in ENGINE_RULES)

    @property
    def not_in_verdict(self) -> tuple[str, ...]:
        """The rules of :data:`LEDGER_RULES` that neither the signed verdict lists nor
        :func:`verify_bundle` re-runs (:data:`ENGINE_RULES`; what they find unlisted is
        :attr:`uncovered`), in that order: the guard audit's, which read payloads (``prove``
        re-hashes only the bundled ones). ``verify`` on the ledger runs them."""
        return tuple(rule for rule in LEDGER_RULES
                     if rule not in self.rules and rule not in ENGINE_RULES)

    @property
    def whole_log(self) -> bool:
        """True when the bundle holds the whole log (root recomputed from every leaf; no
        inclusion paths)."""
        return self.proof_form == PROOF_WHOLE_LOG

    def entry(self, seq: int) -> BundleEntry | None:
        """The bundled entry ``seq``, or None (binary search: entries are in seq order)."""
        i = bisect.bisect_left(self.entries, seq, key=lambda e: e.seq)
        if i < len(self.entries) and self.entries[i].seq == seq:
            return self.entries[i]
        return None

    def tlog_proof(self, seq: int) -> str:
        """The ``c2sp.org/tlog-proof@v1`` text of bundled entry ``seq``.

        Raises:
            UsageError: if ``seq`` is not bundled or the bundle is whole-log (no paths).
        """
        item = self.entry(seq)
        if item is None or self.proof_form != PROOF_INCLUSION:
            raise UsageError(f"entry {seq} has no inclusion proof in this bundle")
        return tlog_proof_text(seq, item.proof, self.checkpoint_note)

    def to_json(self) -> dict[str, Any]:
        """The ``verify-proof --json`` output."""
        return {
            "authentic": True,
            "signed_by": self.signer,
            "origin": self.checkpoint.origin,
            "tree_size": self.checkpoint.size,
            "root_hash": base64.b64encode(self.checkpoint.root).decode("ascii"),
            "selection": self.selection.to_json(),
            "proof_form": self.proof_form,
            "entries": [
                {"seq": e.seq, "kind": e.entry.kind, "hash": "sha256:" + e.hash.hex()}
                for e in self.entries
            ],
            "links": {"prev": self.prev_links, "refs": self.ref_links},
            "payloads": {
                "included": self.payloads is not None,
                "verified": len(self.payloads or {}),
                "missing": ["sha256:" + d.hex() for d in self.missing_payloads],
            },
            "verdict": {
                "ok": self.ok,
                "rules": list(self.rules),
                "violations": [f.to_json() for f in self.verdict],
                "recomputed": [f.to_json() for f in self.recomputed],
                "signed_only": [f.to_json() for f in self.signed_only],
                "uncovered": [f.to_json() for f in self.uncovered],
                "not_in_verdict": list(self.not_in_verdict),
            },
            "absence": {"proven": self.absence_proven, "statement": self.absence},
        }


def tlog_proof_text(seq: int, proof: Sequence[bytes], checkpoint_note: str) -> str:
    """``c2sp.org/tlog-proof@v1`` text: header, ``index``, hashes, blank line, checkpoint."""
    hashes = "".join(base64.b64encode(h).decode("ascii") + "\n" for h in proof)
    return f"c2sp.org/tlog-proof@v1\nindex {seq}\n{hashes}\n{checkpoint_note}"


# -- verification -----------------------------------------------------------------------


def _envelope(data: bytes) -> Envelope:
    doc = _obj(_loads(data, "bundle"), "envelope", _ENVELOPE_KEYS)
    payload = _b64(doc["payload"], "envelope.payload")
    payload_type = _str(doc["payloadType"], "envelope.payloadType")
    sigs = _list(doc["signatures"], "envelope.signatures")
    if not 1 <= len(sigs) <= MAX_SIGNATURES:
        _fail("envelope.signatures", f"has {len(sigs)} signatures, want 1 to {MAX_SIGNATURES}")
    signatures: dict[str, Signature] = {}
    for i, raw in enumerate(sigs):
        what = f"envelope.signatures[{i}]"
        sig = _obj(raw, what, frozenset({"sig"}), optional=frozenset({"keyid"}))
        keyid = _str(sig.get("keyid", ""), f"{what}.keyid")  # a hint (DSSE): may be left out
        value = _b64(sig["sig"], f"{what}.sig")
        signatures[str(i)] = Signature(keyid, value.hex())  # key ids may repeat (empty)
    return Envelope(payload, payload_type, signatures)


def _check_dsse(envelope: Envelope, verifiers: Sequence[Verifier]) -> set[str]:
    """Verify the DSSE signature; return the vkeys that signed."""
    try:
        return check_envelope(envelope, verifiers)
    except EnvelopeSignatureError as exc:
        raise BundleSignatureError("envelope signature", exc.detail) from exc


def _finding(value: Any, what: str) -> Finding:
    obj = _obj(value, what, _FINDING_KEYS)
    scope = tuple(_str(s, f"{what}.scope") for s in _list(obj["scope"], f"{what}.scope"))
    seq = obj["seq"]
    return Finding(
        rule=_str(obj["rule"], f"{what}.rule"),
        seq=None if seq is None else _int(seq, f"{what}.seq"),
        detail=_str(obj["detail"], f"{what}.detail"),
        run_id=_opt_str(obj["run_id"], f"{what}.run_id"),
        scope=scope,
        call_id=_opt_str(obj["call_id"], f"{what}.call_id"),
    )


def _finding_key(f: Finding) -> tuple[Any, ...]:
    return (f.rule, f.seq, f.run_id, f.scope, f.call_id, f.detail)


def _describe(f: Finding) -> str:
    call = f", call {f.call_id}" if f.call_id else ""
    return f"{f.rule} at seq {f.seq}{call} ({f.detail})"


@dataclass(frozen=True)
class _Predicate:
    selection: Selection
    checkpoint_note: str
    proof_form: str
    entries: list[tuple[int, bytes, tuple[bytes, ...]]]
    payloads: dict[bytes, bytes] | None
    verdict_ok: bool
    rules: tuple[str, ...]
    verdict: tuple[Finding, ...]
    absence_proven: bool
    absence_basis: str
    absence: str


def _predicate(value: Any) -> _Predicate:
    p = _obj(value, "predicate", _PREDICATE_KEYS)
    version = p["format_version"]
    if type(version) is not int or version != BUNDLE_FORMAT_VERSION:
        _fail("predicate.format_version", f"{_show(version)}, want {BUNDLE_FORMAT_VERSION}")
    selection = Selection.from_json(p["selection"], "predicate.selection")
    note = _str(p["checkpoint"], "predicate.checkpoint")
    proof_form = _str(p["proof_form"], "predicate.proof_form")
    if proof_form not in (PROOF_INCLUSION, PROOF_WHOLE_LOG):
        _fail("predicate.proof_form", f"{proof_form[:40]!r} is not a known proof form")
    if (proof_form == PROOF_WHOLE_LOG) != (selection.mode == "all"):
        _fail("predicate.proof_form", f"{proof_form} does not go with selection {selection.mode}")
    entry_keys = frozenset({"seq", "data", "proof"} if proof_form == PROOF_INCLUSION
                           else {"seq", "data"})
    entries = []
    for i, raw in enumerate(_list(p["entries"], "predicate.entries")):
        what = f"predicate.entries[{i}]"
        item = _obj(raw, what, entry_keys)
        seq = _int(item["seq"], f"{what}.seq")
        data = _b64(item["data"], f"{what}.data")
        proof = tuple(
            _b64(h, f"{what}.proof[{j}]", merkle.HASH_SIZE)
            for j, h in enumerate(_list(item.get("proof", []), f"{what}.proof"))
        )
        entries.append((seq, data, proof))
    payloads: dict[bytes, bytes] | None = None
    if p["payloads"] is not None:
        if type(p["payloads"]) is not dict:
            _fail("predicate.payloads", f"is {_type_name(p['payloads'])}, want an object or null")
        payloads = {}
        for key, blob in p["payloads"].items():
            if not _PAYLOAD_KEY.fullmatch(key):
                _fail("predicate.payloads", f"key {key[:80]!r} is not sha256:<64 hex>")
            payloads[bytes.fromhex(key[7:])] = _b64(blob, f"predicate.payloads[{key}]")
    verdict = _obj(p["verdict"], "predicate.verdict", frozenset({"ok", "rules", "violations"}))
    rules = tuple(
        _str(r, "predicate.verdict.rules")
        for r in _list(verdict["rules"], "predicate.verdict.rules")
    )
    findings = tuple(
        _finding(f, f"predicate.verdict.violations[{i}]")
        for i, f in enumerate(_list(verdict["violations"], "predicate.verdict.violations"))
    )
    absence = _obj(
        p["absence"], "predicate.absence", frozenset({"proven", "basis", "statement"})
    )
    return _Predicate(
        selection=selection, checkpoint_note=note, proof_form=proof_form, entries=entries,
        payloads=payloads, verdict_ok=_bool(verdict["ok"], "predicate.verdict.ok"), rules=rules,
        verdict=findings, absence_proven=_bool(absence["proven"], "predicate.absence.proven"),
        absence_basis=_str(absence["basis"], "predicate.absence.basis"),
        absence=_str(absence["statement"], "predicate.absence.statement"),
    )


def _subjects(value: Any) -> list[tuple[str, str]]:
    out = []
    for i, raw in enumerate(_list(value, "statement.subject")):
        what = f"statement.subject[{i}]"
        subject = _obj(raw, what, frozenset({"name", "digest"}))
        digest = _obj(subject["digest"], f"{what}.digest", frozenset({"sha256"}))
        hexd = _str(digest["sha256"], f"{what}.digest.sha256")
        if not _HEX64.fullmatch(hexd):
            _fail(f"{what}.digest.sha256", "is not 64 lowercase hex digits")
        out.append((_str(subject["name"], f"{what}.name"), hexd))
    return out


def _statement(payload: bytes) -> tuple[list[tuple[str, str]], _Predicate]:
    statement = _obj(_loads(payload, "statement"), "statement", _STATEMENT_KEYS)
    if statement["_type"] != STATEMENT_TYPE:
        _fail("statement._type", f"{_show(statement['_type'])}, want {STATEMENT_TYPE}")
    if statement["predicateType"] != PREDICATE_TYPE:
        _fail(
            "statement.predicateType",
            f"{_show(statement['predicateType'])}, want {PREDICATE_TYPE}",
        )
    return _subjects(statement["subject"]), _predicate(statement["predicate"])


def _check_checkpoint(
    note: str, verifiers: Sequence[Verifier], dsse_signers: set[str]
) -> Checkpoint:
    try:
        verified = verify_checkpoint(note.encode("utf-8"), verifiers)
    except UsageError:
        raise  # ambiguous verifier keys: the caller's mistake
    except EvidenceError as exc:
        raise BundleSignatureError("checkpoint", str(exc)) from exc
    signed = {
        v.vkey for v in verifiers
        for s in verified.note.verified if (s.name, s.key_id) == (v.name, v.key_id)
    }
    if not signed & dsse_signers:
        raise BundleSignatureError(
            "checkpoint", "signed by another key than the envelope (want one ledger key for both)"
        )
    return verified.checkpoint


def _check_entries(
    pred: _Predicate, subjects: list[tuple[str, str]], cp: Checkpoint
) -> list[BundleEntry]:
    if not pred.entries:
        _fail("predicate.entries", "is empty")
    if len(subjects) != len(pred.entries):
        raise BundleEntryError(
            "statement.subject",
            f"{len(subjects)} subjects for {len(pred.entries)} entries (want one per entry)",
        )
    out: list[BundleEntry] = []
    last = -1
    tree = merkle.CompactRange() if pred.proof_form == PROOF_WHOLE_LOG else None
    for (seq, data, proof), (name, hexd) in zip(pred.entries, subjects, strict=True):
        what = f"entry/{seq}"
        if seq <= last:
            raise BundleEntryError(what, f"out of order or repeated (after entry/{last})")
        if seq >= cp.size:
            raise BundleEntryError(what, f"beyond the checkpoint's tree size {cp.size}")
        if tree is not None and seq != last + 1:
            raise BundleProofError("whole log", f"entry/{last + 1} is missing")
        last = seq
        digest = entry_hash(data)
        if name != what:
            raise BundleEntryError(what, f"its subject is named {name[:60]!r}, want {what!r}")
        if hexd != digest.hex():
            raise BundleEntryError(
                what, f"subject digest sha256:{hexd} does not match the entry bytes "
                f"(sha256:{digest.hex()})",
            )
        leaf = merkle.leaf_hash(data)
        if tree is not None:
            tree.append(leaf)
        else:
            try:
                verify_inclusion(seq, cp.size, leaf, proof, cp.root)
            except EvidenceError as exc:
                raise BundleProofError(f"inclusion proof of {what}", str(exc)) from exc
        try:
            entry = decode_entry(data)
        except EvidenceError as exc:
            raise BundleEntryError(what, f"does not decode: {exc}") from exc
        if entry.seq != seq:
            raise BundleEntryError(what, f"the entry says seq {entry.seq}")
        out.append(BundleEntry(seq, data, entry, digest, proof))
    if tree is not None:
        if tree.size != cp.size:
            raise BundleProofError(
                "whole log", f"{tree.size} entries, the checkpoint's tree has {cp.size}"
            )
        if tree.root() != cp.root:
            raise BundleProofError(
                "whole log",
                f"root mismatch: calculated {base64.b64encode(tree.root()).decode()}, want "
                f"{base64.b64encode(cp.root).decode()}",
            )
    return out


def _check_links(entries: list[BundleEntry]) -> tuple[int, int]:
    by_hash = {e.hash: e for e in entries}
    prev_links = ref_links = 0
    previous: BundleEntry | None = None
    for e in entries:
        what = f"entry/{e.seq}"
        if e.seq == 0:
            if e.entry.prev != ZERO_HASH:
                raise BundleLinkError(what, "prev of the first entry is not 32 zero bytes")
            prev_links += 1
        elif previous is not None and previous.seq == e.seq - 1:
            if e.entry.prev != previous.hash:
                raise BundleLinkError(
                    what, f"prev sha256:{e.entry.prev.hex()[:16]}… is not the hash of "
                    f"entry/{previous.seq} (sha256:{previous.hash.hex()[:16]}…)",
                )
            prev_links += 1
        for ref in e.entry.refs:
            target = by_hash.get(ref)
            if target is None or target.entry.kind != "call" or target.seq >= e.seq:
                raise BundleLinkError(
                    what, f"ref sha256:{ref.hex()[:16]}… names no bundled call entry before it"
                )
            ref_links += 1
        previous = e
    return prev_links, ref_links


def _check_payloads(
    payloads: dict[bytes, bytes] | None, entries: list[BundleEntry]
) -> tuple[bytes, ...]:
    if payloads is None:
        return ()
    named: dict[bytes, int] = {}
    for e in entries:
        for name in PAYLOAD_FIELDS:
            digest = e.entry.body.get(name)
            if isinstance(digest, bytes):
                named.setdefault(digest, e.seq)
    for digest, blob in payloads.items():
        if digest not in named:
            raise BundlePayloadError(
                f"payload sha256:{digest.hex()}", "is named by no bundled entry"
            )
        if hashlib.sha256(blob).digest() != digest:
            raise BundlePayloadError(
                f"payload sha256:{digest.hex()}",
                f"its bytes hash to sha256:{hashlib.sha256(blob).hexdigest()} (entry/"
                f"{named[digest]} names it)",
            )
    return tuple(d for d in named if d not in payloads)


def _check_verdict(
    pred: _Predicate, entries: list[BundleEntry]
) -> tuple[tuple[Finding, ...], tuple[Finding, ...], tuple[Finding, ...], tuple[CallState, ...]]:
    if pred.verdict_ok != (not pred.verdict):
        raise BundleVerdictError(
            "verdict",
            f"says ok={str(pred.verdict_ok).lower()} with {len(pred.verdict)} violation(s)",
        )
    for rule in pred.rules:
        if rule not in LEDGER_RULES:
            raise BundleVerdictError("verdict", f"lists {_show(rule)}, not a rule of the "
                                     "ledger's verifier")
    if len(set(pred.rules)) != len(pred.rules):
        raise BundleVerdictError("verdict", "lists a rule twice")
    missing_rules = [r for r in COVERED_RULES if r not in pred.rules]
    if missing_rules:
        raise BundleVerdictError("verdict", f"does not cover the rules {', '.join(missing_rules)}")
    for f in pred.verdict:
        if f.rule not in pred.rules:
            raise BundleVerdictError(
                "verdict", f"claims a violation of {_show(f.rule)}, a rule the verifier did not run"
            )
    seqs = frozenset(e.seq for e in entries)
    for f in pred.verdict:
        if not finding_in_selection(f, pred.selection, seqs):
            raise BundleVerdictError(
                "verdict", f"claims {_describe(f)}, outside {pred.selection.describe()}"
            )
    engine = RuleEngine()
    for e in entries:
        engine.feed(e.entry)
    shown_all = [f for f in engine.findings if pred.selection.selects(f)]
    recomputed = tuple(f for f in shown_all if f.rule in pred.rules)
    uncovered = tuple(f for f in shown_all if f.rule not in pred.rules)
    claimed = Counter(_finding_key(f) for f in pred.verdict if f.rule in ENGINE_RULES)
    shown = Counter(_finding_key(f) for f in recomputed)
    for f in recomputed:
        if shown[_finding_key(f)] > claimed[_finding_key(f)]:
            raise BundleVerdictError(
                "verdict",
                f"the bundled entries show {_describe(f)}, which the signed verdict does not claim",
            )
    for f in pred.verdict:
        if claimed[_finding_key(f)] > shown[_finding_key(f)]:
            raise BundleVerdictError(
                "verdict", f"claims {_describe(f)}, which the bundled entries do not show"
            )
    signed_only = tuple(f for f in pred.verdict if f.rule not in ENGINE_RULES)
    calls = tuple(
        sorted(
            (c for c in engine.calls.values() if pred.selection.selects_call(c.key[0], c.key[2])),
            key=lambda c: c.seq,
        )
    )
    return recomputed, signed_only, uncovered, calls


def verify_bundle(data: bytes, verifiers: Sequence[Verifier]) -> VerifiedBundle:
    """Verify a proof bundle offline (see the module docstring for every check).

    Args:
        data: the bundle file's bytes (JSON, at most :data:`MAX_BUNDLE_BYTES`).
        verifiers: trusted ledger keys; one of them must have signed both the DSSE
            envelope and the checkpoint.

    Returns:
        The verified bundle; its ``verdict`` may carry violations (a bundle that proves
        a violation is a good bundle).

    Raises:
        BundleError: (a subclass naming what failed) if the bundle does not parse or
            is not authentic; never any other error for any input bytes.
        UsageError: if no verifier key is given, or two given keys are ambiguous.
    """
    if not verifiers:
        raise UsageError("at least one --verifier-key is needed to verify a bundle")
    envelope = _envelope(data)
    signers = _check_dsse(envelope, verifiers)
    if envelope.payload_type != PAYLOAD_TYPE:
        _fail("envelope.payloadType", f"{envelope.payload_type[:60]!r}, want {PAYLOAD_TYPE}")
    subjects, pred = _statement(envelope.payload)
    cp = _check_checkpoint(pred.checkpoint_note, verifiers, signers)
    entries = _check_entries(pred, subjects, cp)
    prev_links, ref_links = _check_links(entries)
    if pred.selection.mode != "all" and not any(
        pred.selection.matches(e.entry.body) for e in entries
    ):
        raise BundleEntryError(
            "selection", f"no bundled entry belongs to {pred.selection.describe()}"
        )
    missing = _check_payloads(pred.payloads, entries)
    recomputed, signed_only, uncovered, calls = _check_verdict(pred, entries)
    whole_log = pred.proof_form == PROOF_WHOLE_LOG
    if pred.absence_proven != whole_log or pred.absence_basis != (
        ABSENCE_WHOLE_LOG if whole_log else ABSENCE_SIGNED
    ):
        raise BundleVerdictError(
            "absence",
            f"claims proven={str(pred.absence_proven).lower()} ({pred.absence_basis[:40]}); "
            + ("a whole-log bundle proves absence" if whole_log
               else "a subset of the log cannot prove absence"),
        )
    if pred.absence != absence_statement(whole_log, cp.size):
        raise BundleVerdictError(
            "absence", "the statement is not the one a bundle of this form and tree size carries"
        )
    signer = sorted(signers)[0]
    return VerifiedBundle(
        signer=signer, checkpoint=cp, checkpoint_note=pred.checkpoint_note,
        selection=pred.selection, proof_form=pred.proof_form, entries=tuple(entries),
        prev_links=prev_links, ref_links=ref_links, payloads=pred.payloads,
        missing_payloads=missing, verdict=pred.verdict, rules=pred.rules,
        recomputed=recomputed, signed_only=signed_only, uncovered=uncovered,
        absence_proven=pred.absence_proven,
        absence=pred.absence, calls=calls,
    )
