"""Generate the evidence-ledger known-answer vectors in this folder (see FORMAT.md, "Test
vectors for our own formats").

Run from the project root::

    .venv/bin/python tests/vectors/evidence-ledger/generate.py          # rewrite them here
    .venv/bin/python tests/vectors/evidence-ledger/generate.py OUT_DIR  # write them elsewhere

Everything is fixed: two Ed25519 keys from fixed seeds (Ed25519 signatures are
deterministic, RFC 8032 §5.1.6), entry times from a fixed clock, fixed ids and
arguments; a ledger is written with :class:`EvidenceWriter` in a temporary directory and
read back. The same code therefore writes the same bytes: ``tests/test_format_vectors.py``
re-runs :func:`generate` and compares every file, so a change of any format (entries,
frames, digests, notes, bundles) fails a test until the vectors are regenerated and the
change is reviewed. JSON files are written with sorted keys, two-space indents, ASCII
only, and a trailing newline; bundle files (``*.dsse.json``) exactly as
:func:`evidence_ledger.bundle.build.build_bundle` gives them.

Conventions inside the files: entry hashes and digests are ``sha256:<lowercase hex>``
(in an ``entry`` object, every such value is a MessagePack ``bin`` of 32 bytes; all other
values map to MessagePack as JSON types suggest: integers, strings, null = nil, lists,
maps); Merkle hashes (leaf hashes, roots, proofs) are standard base64; raw bytes are
lowercase hex (``*_hex``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack

from evidence_ledger.bundle.build import build_bundle, sign_statement
from evidence_ledger.bundle.verify import BundleError, Selection, verify_bundle
from evidence_ledger.format import digests
from evidence_ledger.format.entries import KINDS, decode_entry, entry_hash, entry_json
from evidence_ledger.format.errors import LedgerError
from evidence_ledger.format.framing import MORE_FLAG, Damage, Record, TornTail, scan_bytes
from evidence_ledger.record.checkpointing import create_checkpoint
from evidence_ledger.record.redact import redact
from evidence_ledger.record.writer import EvidenceWriter, Interruption
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.tlog.checkpoint import Checkpoint, verify_checkpoint
from evidence_ledger.tlog.merkle import EMPTY_ROOT, CompactRange, leaf_hash
from evidence_ledger.tlog.note import Signer, sign_note

HERE = Path(__file__).resolve().parent
SUBDIRS = ("keys", "entries", "entries-invalid", "merkle", "frames", "digests", "checkpoints",
           "bundles")
"""The folders :func:`generate` writes (and :func:`main` empties before writing in place)."""

ORIGIN = "vectors.evidence-ledger.example/log"
LEDGER_SEED = hashlib.sha256(b"evidence-ledger test vectors: ledger key").digest()
OTHER_SEED = hashlib.sha256(b"evidence-ledger test vectors: another key").digest()
T0 = 1_767_225_600_000_000_000
"""2026-01-01T00:00:00Z in ns; entry ``n`` is written at ``T0 + n`` seconds."""

LEDGER_KEY = Signer(ORIGIN, LEDGER_SEED)
OTHER_KEY = Signer(ORIGIN, OTHER_SEED)  # same name, another key: another key ID
APPROVER_KEY = Signer("alice@example.com", hashlib.sha256(
    b"evidence-ledger test vectors: approver key").digest())


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _sha(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def _dump(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=True) + "\n").encode("ascii")


def _raised(call: Callable[[], object], fragment: str) -> LedgerError:
    """The error ``call()`` raises: it must raise one of ours, saying ``fragment``."""
    try:
        call()
    except LedgerError as exc:
        assert fragment in str(exc), (fragment, str(exc))
        return exc
    raise AssertionError(f"a negative vector was accepted: want an error saying {fragment!r}")


def _key_json(seed: bytes, role: str) -> dict[str, Any]:
    signer = Signer(ORIGIN, seed)
    return {
        "description": role,
        "name": signer.name,
        "seed_hex": seed.hex(),
        "public_key_hex": signer.public_key.hex(),
        "key_id_hex": f"{signer.key_id:08x}",
        "private_key": signer.skey,
        "verifier_key": signer.verifier.vkey,
    }


# -- the ledger -------------------------------------------------------------------------------


class _Clock:
    """Entry times: ``T0``, ``T0 + 1 s``, ... one per append."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> int:
        self.n += 1
        return T0 + (self.n - 1) * 1_000_000_000


ARGS_1 = '{"units": "metric", "city": "Paris"}'
ARGS_2 = "to=bob@example.com; subject=lunch"  # not JSON: digested raw
ARGS_3 = '{"city":"Oslo"}'
STATE_1 = "00000000000000000000000000000001"
SCOPE_2 = ("ask_mailer:call_0",)


def _write_ledger(directory: Path) -> Ledger:
    """One ledger of 26 entries holding every entry kind: run_1 is clean, run_2 executes a
    call its callable policy gated and nobody approved (an ``approval_binding`` violation a
    bundle must carry), run_3 runs under a guard policy. 26 leaves: the checkpoint's tree is
    not a perfect one."""
    ledger = Ledger(directory)
    w = EvidenceWriter(ledger, clock=_Clock())
    w.tool_policy(run_id="run_1", agent="assistant", tool="get_weather", needs_approval=True)
    w.call(run_id="run_1", call_id="call_1", agent="assistant", tool="get_weather",
           arguments=ARGS_1, needs_approval=True, response_id="resp_1")
    w.run_state(run_id="run_1", state_id=STATE_1, event="to_state",
                state={"current_turn": 1, "pending": ["call_1"]},
                interruptions=[Interruption("call_1", "get_weather", "assistant", (), ARGS_1)])
    w.decision(run_id="run_1", call_id="call_1", decision="approve", approver="alice@example.com",
               reason="looks fine", arguments=ARGS_1, agent="assistant", tool="get_weather",
               run_state=STATE_1)
    w.execution(run_id="run_1", call_id="call_1", arguments=ARGS_1, agent="assistant",
                tool="get_weather", result="18 C, clear", run_state=STATE_1)
    with w.atomic():  # one group of two frames, the first with "more follows"
        w.session_item(run_id="run_1", session_id="sess_1", item={
            "type": "function_call", "call_id": "call_1", "name": "get_weather",
            "arguments": ARGS_1})
        w.session_item(run_id="run_1", session_id="sess_1", item={
            "type": "function_call_output", "call_id": "call_1", "output": "18 C, clear"})
    w.call(run_id="run_1", call_id="call_2", agent="mailer", tool="send_email",
           arguments=ARGS_2, scope=SCOPE_2, needs_approval=False)
    w.guardrail(run_id="run_1", call_id="call_2", guardrail="no_email", scope=SCOPE_2,
                message="Sending email is not allowed.", agent="mailer", tool="send_email")
    w.run_end(run_id="run_1", status="completed", run_state=STATE_1)
    redact(w, digests.sha256(ARGS_2.encode()), reason="erasure request", by="dpo@example.com")
    w.ingest_marker(file_sha256=digests.sha256(b'{"kind":"call"}\n'), lines=1,
                    name="events.jsonl")
    w.session_repair(repair_id="repair_1", session_id="sess_2", store="sessions/sess_2.json",
                     item={"type": "function_call", "call_id": "call_1", "name": "get_weather",
                           "arguments": ARGS_1},
                     position=0, run_id="run_1", by="evidence-ledger repair-session")
    w.call(run_id="run_2", call_id="call_3", agent="assistant", tool="get_weather",
           arguments=ARGS_3, needs_approval=None)  # a callable policy decides, just below
    w.tool_policy(run_id="run_2", agent="assistant", tool="get_weather", needs_approval=True,
                  policy="callable", call_id="call_3")
    w.execution(run_id="run_2", call_id="call_3", arguments=ARGS_3, agent="assistant",
                tool="get_weather", result={"temp_c": 4})
    w.run_end(run_id="run_2", status="completed")
    _guarded_run(w)
    return ledger


POLICY = b"""version = 1
[[tools]]
match = "get_weather"
approvers = ["alice@example.com"]
signed = true
[keys]
"alice@example.com" = "%s"
""" % APPROVER_KEY.verifier.vkey.encode()
"""The guard policy of run_3 (a payload of the vector ledger)."""


def _guarded_run(w: EvidenceWriter) -> None:
    """run_3, under :data:`POLICY`: call_4 approved with a signature, allowed and run, its
    approval then revoked; call_5 denied, never approved (9 entries: leaves 17 to 25)."""
    w.policy(run_id="run_3", text=POLICY)
    w.call(run_id="run_3", call_id="call_4", agent="assistant", tool="get_weather",
           arguments=ARGS_3, needs_approval=True)
    made = w.decision(run_id="run_3", call_id="call_4", decision="approve",
                      approver="alice@example.com", arguments=ARGS_3)
    w.approval_signature(decision=made, signer=APPROVER_KEY)
    guarded = {"run_id": "run_3", "scope": (), "agent": "assistant", "tool": "get_weather",
               "arguments": ARGS_3, "mode": "enforce",
               "policy_digest": hashlib.sha256(POLICY).digest(), "run_state": None}
    w.guard(allowed=True, call_id="call_4", code="approved",
            reason="approved by alice@example.com (seq 19)", **guarded)
    w.execution(run_id="run_3", call_id="call_4", arguments=ARGS_3, agent="assistant",
                tool="get_weather", result={"temp_c": 4})
    w.revocation(call_id="call_4", by="bob@example.com", reason="approved by mistake",
                 run_id="run_3")
    w.call(run_id="run_3", call_id="call_5", agent="assistant", tool="get_weather",
           arguments=ARGS_3, needs_approval=True)
    w.guard(allowed=False, call_id="call_5", code="no_approval",
            reason="no approval of call_5 in the ledger", message="Tool execution was not "
            "approved.", **guarded)


# -- entries ------------------------------------------------------------------------------------


def _entry_files(records: list[Record]) -> Iterator[tuple[str, dict[str, Any]]]:
    for record in records:
        entry = decode_entry(record.data)
        form = entry_json(entry, entry_hash(record.data))
        del form["hash"]
        yield f"entries/{entry.seq:02d}-{entry.kind}.json", {
            "description": (
                f"A {entry.kind} entry, leaf {entry.seq} of the vector ledger: its canonical "
                "MessagePack bytes, entry hash SHA-256(bytes) and RFC 9162 leaf hash "
                "SHA-256(0x00 || bytes). Encode `entry` (sha256:<hex> values are bin 32) and "
                "get `entry_hex`; decode `entry_hex` and get `entry`."
            ),
            "kind": entry.kind,
            "entry": form,
            "entry_hex": record.data.hex(),
            "entry_hash": "sha256:" + entry_hash(record.data).hex(),
            "leaf_hash": _b64(leaf_hash(record.data)),
        }


def _once(data: bytes, old: bytes, new: bytes) -> bytes:
    assert data.count(old) == 1, (old, data.count(old))
    return data.replace(old, new)


def _invalid_entries(records: list[Record]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Byte-level tamperings of valid entries, each refused by ``decode_entry``."""
    first, call = records[0].data, records[1].data
    value = msgpack.unpackb(first)
    swapped = dict(reversed(list(value.items())))
    body_reordered = dict(value, body=dict(reversed(list(value["body"].items()))))
    extra = dict(value, body={**value["body"], "zzz": None})
    e0, e1 = "entries/00-tool_policy.json", "entries/01-call.json"
    canonical = "not the canonical encoding"
    cases: list[tuple[str, str, str, bytes, str]] = [
        ("seq-long-form-uint16", e0, "seq 0 written as uint16 (0xcd 0x0000), not a fixint",
         _once(first, b"\xa3seq\x00", b"\xa3seq\xcd\x00\x00"), canonical),
        ("kind-long-form-str8", e0, "the kind written as str8 (0xd9), not a fixstr",
         _once(first, b"\xabtool_policy", b"\xd9\x0btool_policy"), canonical),
        ("map-long-form-map16", e0, "the top-level map written as map16 (0xde 0x0007), not a "
         "fixmap", b"\xde\x00\x07" + first[1:], canonical),
        ("keys-out-of-order", e0, "the top-level keys in reverse order",
         msgpack.packb(swapped, use_bin_type=True), "entry is not a map of exactly v, seq"),
        ("body-keys-out-of-order", e0, "the body keys in reverse order",
         msgpack.packb(body_reordered, use_bin_type=True),
         "body fields are not in canonical order"),
        ("body-extra-field", e0, "the body with a field its kind does not define",
         msgpack.packb(extra, use_bin_type=True), "tool_policy body fields"),
        ("prev-str-not-bin", e0, "prev (32 zero bytes) written as str8 (0xd9), not bin8 (0xc4)",
         _once(first, b"\xa4prev\xc4\x20", b"\xa4prev\xd9\x20"), "prev is not 32 bytes"),
        ("time-float64", e0, "time written as a float64 (0xcb) of the same value",
         _once(first, b"\xa4time\xcf" + T0.to_bytes(8, "big"),
               b"\xa4time\xcb" + msgpack.packb(float(T0))[1:]), "bad time"),
        ("time-ext-type", e0, "time written as a fixext8 (0xd7, type 1) extension value",
         _once(first, b"\xa4time\xcf", b"\xa4time\xd7\x01"), "extension type 1 is not allowed"),
        ("version-2", e0, "format version v = 2",
         _once(first, b"\xa1v\x01", b"\xa1v\x02"), "unknown format version 2"),
        ("kind-unknown", e0, "kind 'tool_pulicy' (same length), not a kind of this version",
         _once(first, b"\xabtool_policy", b"\xabtool_pulicy"), "unknown kind 'tool_pulicy'"),
        ("trailing-byte", e0, "one byte (0xc0, nil) after the map", first + b"\xc0",
         "not a MessagePack value"),
        ("truncated", e1, "the last byte cut off", call[:-1], "not a MessagePack value"),
        ("digest-31-bytes", e1, "args_digest a bin8 of 31 bytes (its last byte dropped)",
         _short_digest(call), "call body field 'args_digest' has a bad value"),
    ]
    for name, src, what, data, fragment in cases:
        exc = _raised(lambda data=data: decode_entry(data), fragment)
        yield f"entries-invalid/{name}.json", {
            "description": f"Not a canonical entry: {what}. A decoder must refuse it.",
            "derived_from": src,
            "entry_hex": data.hex(),
            "error": type(exc).__name__,
            "error_contains": fragment,
        }


def _short_digest(data: bytes) -> bytes:
    """``data`` with its ``args_digest`` cut to 31 bytes (the map still parses)."""
    key = b"\xabargs_digest\xc4\x20"
    start = data.index(key) + len(key)
    return data[: start - 1] + b"\x1f" + data[start : start + 31] + data[start + 32 :]


# -- Merkle tree and frames -------------------------------------------------------------------


def _tree(records: list[Record], names: list[str]) -> dict[str, Any]:
    tree = CompactRange()
    roots = [{"size": 0, "root": _b64(EMPTY_ROOT)}]
    leaves = []
    for record, name in zip(records, names, strict=True):
        leaf = leaf_hash(record.data)
        tree.append(leaf)
        leaves.append({"seq": record.index, "entry": name, "leaf_hash": _b64(leaf)})
        roots.append({"size": tree.size, "root": _b64(tree.root())})
    return {
        "description": (
            "RFC 9162 section 2.1.1 Merkle tree hashes of the vector ledger's entries, in seq "
            "order: each leaf hash is SHA-256(0x00 || entry bytes), and `roots` gives MTH of the "
            "first `size` leaves for every size 0..N (size 0: SHA-256 of nothing)."
        ),
        "leaves": leaves,
        "roots": roots,
        "tree_size": tree.size,
        "root": _b64(tree.root()),
    }


def scan_json(log: bytes) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in scan_bytes(log):
        if isinstance(item, Record):
            out.append({"record": {"index": item.index, "offset": item.offset,
                                   "data_hex": item.data.hex(), "crc_ok": item.crc_ok}})
        elif isinstance(item, Damage):
            out.append({"damage": {"index": item.index, "offset": item.offset,
                                   "reason": item.reason}})
        else:
            assert isinstance(item, TornTail)
            out.append({"torn_tail": {"offset": item.offset, "length": item.length,
                                      "records": item.records}})
    return out


def _frames(log: bytes, records: list[Record]) -> Iterator[tuple[str, dict[str, Any]]]:
    def case(name: str, what: str, data: bytes, **extra: Any) -> tuple[str, dict[str, Any]]:
        return f"frames/{name}.json", {
            "description": what, "log_hex": data.hex(), "scan": scan_json(data), **extra}

    first = log[: records[1].offset]
    group_at = next(r for r in records if r.data and _word(log, r.offset) & MORE_FLAG)
    group = log[group_at.offset : records[group_at.index + 2].offset]
    record_bytes = records[0].data
    yield case(
        "one-frame", "The first frame of log.bin, a group of one record: word (bit 31 clear, "
        "bits 0-30 the record length), CRC-32 of the word, the entry bytes, CRC-32 of them; "
        "all big-endian.", first, entry="entries/00-tool_policy.json",
        word_hex=first[:4].hex(), word_crc32_hex=first[4:8].hex(),
        record_crc32_hex=first[-4:].hex(), more_follows=False)
    yield case(
        "atomic-group-of-two", "Two frames appended as one atomic group (two session_item "
        "entries): the first has bit 31 ('more follows') set in its word, the last not. The "
        "scan starts at offset 0 and index 0, so offsets and indexes are relative to this "
        "excerpt.", group)
    yield case("empty-log", "An empty log: no records, no torn tail.", b"")
    yield case(
        "torn-tail-half-frame", "The first frame cut off before its record CRC (a crash mid-"
        "append): a torn tail, not damage.", first[:-4])
    yield case(
        "torn-tail-unfinished-group", "Only the first frame of an atomic group ('more follows' "
        "set, no last frame): its record is not read; it is a torn tail of one record.",
        group[: records[group_at.index + 1].offset - group_at.offset])
    yield case(
        "zero-filled-tail", "A complete frame followed by 16 zero bytes (a crash that "
        "extended the file): a torn tail, not damage.", first + bytes(16))
    bad_word = bytearray(first)
    bad_word[3] ^= 0x01
    yield case(
        "word-bit-flip", "Bit 0 of the first frame's word flipped: the header fails its CRC-32, "
        "which is damage (nothing after it can be read).", bytes(bad_word))
    bad_record = bytearray(first)
    bad_record[8 + len(record_bytes) // 2] ^= 0x80
    yield case(
        "record-bit-flip", "One bit of the record flipped: the frame still reads, but the "
        "record fails its CRC-32 (crc_ok false).", bytes(bad_record))
    too_long = (MORE_FLAG - 1).to_bytes(4, "big")
    yield case(
        "length-too-large", "A header whose CRC-32 checks but whose length (2^31 - 1) exceeds "
        "the 16 MiB record limit: damage.",
        too_long + zlib.crc32(too_long).to_bytes(4, "big") + bytes(8))


def _word(log: bytes, offset: int) -> int:
    return int.from_bytes(log[offset : offset + 4], "big")


# -- digests ----------------------------------------------------------------------------------


ARGUMENT_CASES = [
    ("jcs-keys-sorted", "Object keys re-ordered and whitespace dropped (RFC 8785 section "
     "3.2.3).", ARGS_1),
    ("jcs-numbers", "Numbers in their ECMAScript shortest form (RFC 8785 section 3.2.2.3): "
     "1.0 -> 1, 1e2 -> 100, -0.0 -> 0, 1e21 -> 1e+21, 5e-7 -> 5e-7.",
     '{"n": [1.0, 1e2, -0.0, 0.1, 1e21, 5e-7, -12]}'),
    ("jcs-utf16-key-order", "Keys sorted by UTF-16 code units, not code points: U+1F600 "
     "(D83D DE00) sorts before U+FB01; non-ASCII kept as UTF-8, controls escaped.",
     '{"\\ufb01": 1, "\\ud83d\\ude00": 2, "\\u00e9": "caf\\u00e9\\n\\u0001"}'),
    ("jcs-scalar", "A top-level string is JSON too.", '"just a string"'),
    ("raw-not-json", "Not JSON: digested as its raw UTF-8 bytes.", ARGS_2),
    ("raw-duplicate-key", "Duplicate object keys: not strict JSON, digested raw.",
     '{"a": 1, "a": 2}'),
    ("raw-nan", "NaN is not JSON: digested raw.", '{"x": NaN}'),
    ("raw-number-overflow", "1e400 overflows an IEEE 754 double: digested raw.",
     '{"x": 1e400}'),
    ("raw-integer-beyond-double", "An integer beyond 2^53 that RFC 8785 (the rfc8785 package) "
     "refuses to canonicalise: digested raw.", '{"x": 9007199254740993}'),
    ("raw-lone-surrogate", "A JSON string escaping a lone surrogate: strict UTF-8 cannot "
     "encode it, so RFC 8785 refuses it: digested raw.", '["\\ud800"]'),
    ("raw-trailing-comma", "A trailing comma: not JSON, digested raw.", '{"a": 1,}'),
]

OUTPUT_CASES = [
    ("string", "A string output: SHA-256 of its UTF-8 bytes (not of a JSON string).",
     "18 C, clear"),
    ("string-looks-like-json", "A string holding JSON is still hashed as its UTF-8 bytes.",
     '{"b": 1, "a": 2}'),
    ("content-parts", "A structured output (a list of content parts): RFC 8785 JSON.",
     [{"type": "output_text", "text": "18 C"}, {"type": "output_image", "image_url": "x"}]),
    ("object", "An object output: RFC 8785 JSON.", {"temp_c": 4}),
]


def _digests() -> Iterator[tuple[str, dict[str, Any]]]:
    cases = []
    for name, what, text in ARGUMENT_CASES:
        result = digests.arguments_digest(text)
        raw = text.encode("utf-8")
        case = {"name": name, "description": what, "arguments": text,
                "arguments_utf8_hex": raw.hex(), "form": result.form,
                "digest": "sha256:" + result.digest.hex()}
        if result.form == "jcs":
            canonical = digests.canonical_json(digests.parse_strict_json(text))
            assert hashlib.sha256(canonical).digest() == result.digest
            case["canonical_utf8_hex"] = canonical.hex()
        else:
            assert hashlib.sha256(raw).digest() == result.digest
        cases.append(case)
    yield "digests/arguments.json", {
        "description": (
            "Arguments digests (FORMAT.md, Identity and digests): SHA-256 of the RFC 8785 "
            "canonical JSON of the parsed arguments (form jcs), or of their raw UTF-8 bytes "
            "when they are not strict JSON or RFC 8785 refuses them (form raw). `arguments` "
            "is the raw string as the model sent it (its bytes in arguments_utf8_hex)."
        ),
        "cases": cases,
    }
    outputs = []
    for name, what, value in OUTPUT_CASES:
        pieces: list[bytes] = []
        digests.write_output(value, pieces.append)
        data = b"".join(pieces)
        outputs.append({"name": name, "description": what, "output": value,
                        "bytes_hex": data.hex(), "digest": _sha(data)})
    yield "digests/outputs.json", {
        "description": (
            "Output digests: SHA-256 of a persisted output's UTF-8 bytes when it is a string, "
            "of its RFC 8785 canonical JSON otherwise (`bytes_hex` is what is hashed). An "
            "execution's result_digest is taken the same way."
        ),
        "cases": outputs,
    }


# -- checkpoints --------------------------------------------------------------------------------


def _checkpoints(note: bytes, size: int, root: bytes) -> Iterator[tuple[str, dict[str, Any]]]:
    text = Checkpoint(ORIGIN, size, root).to_text()
    assert sign_note(text, [LEDGER_KEY]) == note
    verify_checkpoint(note, [LEDGER_KEY.verifier])
    sig_line = note.decode("utf-8").split("\n")[-2]
    yield "checkpoints/signed.json", {
        "description": (
            "The vector ledger's checkpoint: a c2sp.org/tlog-checkpoint body (origin, tree "
            "size, base64 root) in a c2sp.org/signed-note signed with the fixed Ed25519 key "
            "keys/ledger.json. Ed25519 is deterministic: signing `text` with the seed gives "
            "exactly `note`."
        ),
        "key": "keys/ledger.json",
        "verifier_key": LEDGER_KEY.verifier.vkey,
        "origin": ORIGIN,
        "tree_size": size,
        "root": _b64(root),
        "text": text,
        "note": note.decode("utf-8"),
        "signature_line": sig_line,
        "signature_hex": base64.b64decode(sig_line.rsplit(" ", 1)[1])[4:].hex(),
    }
    good = note.decode("utf-8")
    mine, other = LEDGER_KEY.verifier, OTHER_KEY.verifier
    signed = "correctly signed by the ledger key"
    cases: list[tuple[str, str, str, Any, str]] = [
        ("modified-root", "The root line replaced, the signature kept.",
         good.replace(_b64(root), _b64(hashlib.sha256(b"another root").digest())), mine,
         "invalid signature by key"),
        ("modified-signature-bit", "One bit of the signature flipped.", _flip_sig(good), mine,
         "invalid signature by key"),
        ("other-key", "Verified with another key of the same name (keys/other.json).", good,
         other, "no signature by a given verifier key"),
        ("missing-final-newline", "The last newline removed.", good[:-1], mine,
         "missing final newline"),
        ("trailing-garbage", "A line of garbage after the signature line.", good + "x\n",
         mine, "signature line 2 does not start with"),
        ("no-blank-line", "The blank line before the signatures removed.",
         good.replace("\n\n", "\n"), mine, "no blank line before the signatures"),
        ("size-leading-zero", f"Tree size written with a leading zero, {signed}.",
         sign_note(f"{ORIGIN}\n0{size}\n{_b64(root)}\n", [LEDGER_KEY]).decode(), mine,
         "is not a decimal uint64 without leading zeros"),
        ("root-31-bytes", f"A 31-byte root, {signed}.",
         sign_note(f"{ORIGIN}\n{size}\n{_b64(root[:31])}\n", [LEDGER_KEY]).decode(), mine,
         "is 31 bytes, want 32"),
        ("origin-not-key-name", f"A checkpoint whose origin is not the key's name, {signed}.",
         sign_note(f"another.example/log\n{size}\n{_b64(root)}\n", [LEDGER_KEY]).decode(),
         mine, "checkpoint origin 'another.example/log'"),
    ]
    for name, what, data, verifier, fragment in cases:
        exc = _raised(lambda data=data, verifier=verifier: verify_checkpoint(
            data.encode("utf-8"), [verifier]), fragment)
        yield f"checkpoints/invalid-{name}.json", {
            "description": f"{what} verify_checkpoint must refuse it.",
            "derived_from": "checkpoints/signed.json",
            "note": data,
            "verifier_key": verifier.vkey,
            "error": type(exc).__name__,
            "error_contains": fragment,
        }


def _flip_sig(note: str) -> str:
    head, _, line = note[:-1].rpartition("\n")
    prefix, _, b64 = line.rpartition(" ")
    raw = bytearray(base64.b64decode(b64))
    raw[10] ^= 0x01
    return f"{head}\n{prefix} {_b64(bytes(raw))}\n"


# -- bundles ------------------------------------------------------------------------------------


BUNDLES = [
    ("call-call_1", "The evidence chain of call_1 in run_1 (approved, executed, persisted), "
     "with inclusion proofs and the payloads; its verdict is clean.",
     Selection("call", "run_1", "call_1"), True),
    ("run-run_2", "Run run_2, whose gated call_3 ran without an approval: the bundle proves "
     "an approval_binding violation (a good bundle that carries a bad verdict).",
     Selection("run", "run_2"), False),
    ("all", "The whole log (whole-log proof form, digests only): every entry 0..N-1 and no "
     "per-entry proof; absence is proven too.", Selection("all"), False),
]


def _resign(bundle: bytes, edit: Callable[[dict[str, Any]], None]) -> bytes:
    """``bundle`` with its statement edited by ``edit`` and signed again by the ledger key."""
    envelope = json.loads(bundle)
    statement = json.loads(base64.b64decode(envelope["payload"]))
    edit(statement)
    payload = json.dumps(statement, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    return sign_statement(payload, LEDGER_KEY)


def _bundles(ledger: Ledger) -> Iterator[tuple[str, bytes | dict[str, Any]]]:
    made: dict[str, bytes] = {}
    for name, what, selection, payloads in BUNDLES:
        bundle = build_bundle(ledger, LEDGER_KEY, selection, include_payloads=payloads)
        assert bundle.checkpoint_reused
        made[name] = bundle.data
        yield f"bundles/{name}.dsse.json", bundle.data
        yield f"bundles/{name}.json", {
            "description": (
                f"{what} Built by build_bundle with the fixed key keys/ledger.json; "
                f"verify_bundle(bundle, [verifier_key]).to_json() gives `expected`."
            ),
            "bundle": f"bundles/{name}.dsse.json",
            "bundle_sha256": _sha(bundle.data),
            "selection": selection.to_json(),
            "include_payloads": payloads,
            "verifier_key": LEDGER_KEY.verifier.vkey,
            "expected": bundle.verified.to_json(),
        }

    def flip_proof(statement: dict[str, Any]) -> None:
        proof = statement["predicate"]["entries"][0]["proof"]
        raw = bytearray(base64.b64decode(proof[0]))
        raw[3] ^= 0x08
        proof[0] = _b64(bytes(raw))

    def hide_violation(statement: dict[str, Any]) -> None:
        statement["predicate"]["verdict"].update(ok=True, violations=[])

    def flip_entry(statement: dict[str, Any]) -> None:
        item = statement["predicate"]["entries"][0]
        raw = bytearray(base64.b64decode(item["data"]))
        raw[-1] ^= 0x01
        item["data"] = _b64(bytes(raw))

    def swap_payload(statement: dict[str, Any]) -> None:
        payloads = statement["predicate"]["payloads"]
        first = sorted(payloads)[0]
        payloads[first] = _b64(b"not the payload")

    call, run2 = made["call-call_1"], made["run-run_2"]
    sig_flipped, copy_flipped = json.loads(call), json.loads(call)
    raw = bytearray(base64.b64decode(sig_flipped["signatures"][0]["sig"]))
    raw[0] ^= 0x01
    for signature in sig_flipped["signatures"]:  # the one signature, under both key ids
        signature["sig"] = _b64(bytes(raw))
    copy_flipped["signatures"][1]["sig"] = _b64(bytes(raw))
    resigned = "the statement signed again by the ledger key"
    negatives: list[tuple[str, str, str, bytes, Signer, str]] = [
        ("other-key", "call-call_1", "The call bundle verified with another key of the same "
         "name (keys/other.json).", call, OTHER_KEY, "not by the given key"),
        ("modified-signature-bit", "call-call_1", "One bit of the DSSE signature flipped "
         "(in both its copies: under securesystemslib's key id and under none).",
         (json.dumps(sig_flipped, indent=2) + "\n").encode(), LEDGER_KEY,
         "does not verify over the DSSE PAE"),
        ("modified-signature-copy-bit", "call-call_1", "One bit flipped in the copy of the "
         "DSSE signature under an empty key id only: the other copy still verifies.",
         (json.dumps(copy_flipped, indent=2) + "\n").encode(), LEDGER_KEY,
         "the envelope was changed"),
        ("resigned-proof-bit-flip", "call-call_1", "One bit of the first entry's first proof "
         f"hash flipped, {resigned}.", _resign(call, flip_proof), LEDGER_KEY, "root mismatch"),
        ("resigned-entry-bit-flip", "call-call_1", "The last bit of the first entry's bytes "
         f"flipped, {resigned}.", _resign(call, flip_entry), LEDGER_KEY,
         "does not match the entry bytes"),
        ("resigned-payload-swapped", "call-call_1", f"A payload replaced by other bytes, "
         f"{resigned}.", _resign(call, swap_payload), LEDGER_KEY, "its bytes hash to"),
        ("resigned-verdict-hides-violation", "run-run_2", "The verdict rewritten to ok with no "
         f"violation, {resigned}: the bundled entries still show it.",
         _resign(run2, hide_violation), LEDGER_KEY, "which the signed verdict does not claim"),
    ]
    for name, src, what, data, key, fragment in negatives:
        exc = _raised(lambda data=data, key=key: verify_bundle(data, [key.verifier]), fragment)
        assert isinstance(exc, BundleError)
        path = f"bundles/{src}.dsse.json"
        if data is not call:
            path = f"bundles/invalid-{name}.dsse.json"
            yield path, data
        yield f"bundles/invalid-{name}.json", {
            "description": f"{what} verify_bundle must refuse it.",
            "derived_from": f"bundles/{src}.json",
            "bundle": path,
            "verifier_key": key.verifier.vkey,
            "error": type(exc).__name__,
            "error_what": exc.what,
            "error_contains": fragment,
        }


# -- all of it ----------------------------------------------------------------------------------


def vectors() -> dict[str, bytes]:
    """Every vector file: relative path -> bytes."""
    files: dict[str, bytes] = {}

    def put(items: Iterator[tuple[str, Any]]) -> None:
        for name, value in items:
            assert name not in files, name
            files[name] = value if isinstance(value, bytes) else _dump(value)

    put(iter([("keys/ledger.json", _key_json(LEDGER_SEED, "The ledger's checkpoint and bundle "
                                              "key (C2SP signed-note Ed25519 key strings).")),
              ("keys/other.json", _key_json(OTHER_SEED, "Another key with the same name (so "
                                             "another key ID), for negative cases."))]))
    with tempfile.TemporaryDirectory(prefix="evidence-ledger-vectors-") as tmp:
        ledger = _write_ledger(Path(tmp) / "ledger")
        log = (ledger.directory / "log.bin").read_bytes()
        records = [item for item in scan_bytes(log) if isinstance(item, Record)]
        assert len(records) == sum(1 for _ in scan_bytes(log))
        entry_files = list(_entry_files(records))
        assert {body["kind"] for _, body in entry_files} == set(KINDS)
        put(iter(entry_files))
        put(_invalid_entries(records))
        tree = _tree(records, [name for name, _ in entry_files])
        put(iter([("merkle/tree.json", tree)]))
        put(_frames(log, records))
        put(_digests())
        stored = create_checkpoint(ledger, [LEDGER_KEY])
        put(_checkpoints(stored.data, tree["tree_size"], base64.b64decode(tree["root"])))
        put(_bundles(ledger))
    return files


def generate(out: Path) -> list[Path]:
    """Write every vector file under ``out``; return their paths."""
    written = []
    for name, data in sorted(vectors().items()):
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else HERE
    if out.resolve() == HERE:
        for sub in SUBDIRS:  # no stale case survives a regeneration
            shutil.rmtree(HERE / sub, ignore_errors=True)
    written = generate(out)
    print(f"wrote {len(written)} files under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
