"""Ledger entries: the content-addressed, hash-chained records of evidence.

An entry is a canonical MessagePack map (see :mod:`evidence_ledger.format.encoding` and FORMAT.md)::

    {"v": 1, "seq": int, "prev": bin(32), "kind": str, "time": int (ns, UTC),
     "refs": [bin(32), ...], "body": {...}}

``seq`` is the entry's leaf index in the Merkle tree; ``prev`` is the entry hash of
entry ``seq - 1`` (32 zero bytes for the first); ``refs`` are entry hashes of earlier
entries this one links to. The entry hash is SHA-256 over the entry bytes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any, NamedTuple

import msgpack

from evidence_ledger.format import core, encoding
from evidence_ledger.format.errors import EncodingError

FORMAT_VERSION = 1
ZERO_HASH = bytes(32)

Check = Callable[[Any], bool]


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _opt_str(v: Any) -> bool:
    return v is None or isinstance(v, str)


def _bool(v: Any) -> bool:
    return isinstance(v, bool)


def _opt_bool(v: Any) -> bool:
    return v is None or isinstance(v, bool)


def _hash(v: Any) -> bool:
    return isinstance(v, bytes) and len(v) == 32


def _opt_hash(v: Any) -> bool:
    return v is None or _hash(v)


def _scope(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(s, str) for s in v)


def _opt_scope(v: Any) -> bool:
    return v is None or _scope(v)


_BASE64_64 = re.compile(r"[A-Za-z0-9+/]{86}==")


def _signature(v: Any) -> bool:
    """A 64-byte Ed25519 signature in standard base64 (88 characters)."""
    return isinstance(v, str) and _BASE64_64.fullmatch(v) is not None


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


class _OneOf:
    """Check: the value is one of ``values``."""

    def __init__(self, *values: str | None) -> None:
        self.values = values

    def __call__(self, v: Any) -> bool:
        return v in self.values


_one_of = _OneOf

_INTERRUPTION: dict[str, Check] = {
    "call_id": _str, "tool": _opt_str, "agent": _opt_str, "scope": _opt_scope,
    "args_digest": _opt_hash,
}


def _interruptions(v: Any) -> bool:
    """A list of pending interruptions, each exactly the fields of ``_INTERRUPTION``."""
    return isinstance(v, list) and all(
        isinstance(i, dict) and i.keys() == _INTERRUPTION.keys()
        and all(check(i[name]) for name, check in _INTERRUPTION.items())
        for i in v
    )


_CALL_ID = {"run_id": _str, "scope": _scope, "call_id": _str}

_GUARD: dict[str, Check] = {
    **_CALL_ID, "agent": _str, "tool": _str, "args_digest": _hash,
    "mode": _one_of("enforce", "observe"), "code": _str, "reason": _str,
    "policy_digest": _hash, "run_state": _opt_str, "message_digest": _opt_hash,
}
"""The body of the guard's ``allowed`` and ``denied`` entries."""

BODY_FIELDS: dict[str, dict[str, Check]] = {
    "tool_policy": {
        "run_id": _str, "scope": _scope, "agent": _str, "tool": _str,
        "needs_approval": _bool, "policy": _one_of("static", "callable"), "call_id": _opt_str,
    },
    "call": {
        **_CALL_ID, "agent": _str, "tool": _str, "args_digest": _hash,
        "args_form": _one_of("jcs", "raw"), "args_payload": _hash,
        "needs_approval": _opt_bool, "response_id": _opt_str,
    },
    "decision": {
        **_CALL_ID, "decision": _one_of("approve", "reject"), "always": _bool,
        "approver": _str, "reason": _opt_str, "message_digest": _opt_hash,
        "args_digest": _opt_hash, "args_form": _one_of(None, "jcs", "raw"),
        "agent": _opt_str, "tool": _opt_str, "run_state": _opt_str,
    },
    "execution": {
        **_CALL_ID, "agent": _opt_str, "tool": _opt_str, "args_digest": _hash,
        "args_form": _one_of("jcs", "raw"), "args_payload": _hash,
        "result_digest": _opt_hash, "error": _opt_str, "run_state": _opt_str,
    },
    "session_item": {
        "run_id": _str, "scope": _scope, "session_id": _str,
        "op": _one_of("add", "pop", "clear"), "item_type": _opt_str, "call_id": _opt_str,
        "item_digest": _opt_hash, "output_digest": _opt_hash, "args_digest": _opt_hash,
    },
    "guardrail": {
        **_CALL_ID, "guardrail": _str, "message_digest": _opt_hash,
        "agent": _opt_str, "tool": _opt_str,
    },
    "run_end": {
        "run_id": _str, "scope": _scope,
        "status": _one_of("completed", "interrupted", "failed"), "run_state": _opt_str,
    },
    "run_state": {
        "run_id": _str, "state_id": _str, "parent": _opt_str,
        "event": _one_of(
            "to_state", "to_json", "loaded", "resume", "decided", "adopted", "ended",
        ),
        "digest": _opt_hash, "interruptions": _interruptions,
    },
    "ingest": {"file_sha256": _hash, "lines": _count, "name": _str},
    "session_repair": {
        **_CALL_ID, "repair_id": _str, "session_id": _str, "store": _str, "backup": _opt_str,
        "tool": _str, "args_digest": _hash, "item_digest": _hash, "position": _count,
        "history_digest": _opt_hash, "by": _str,
    },
    "redaction": {"digest": _hash, "reason": _str, "by": _opt_str},
    "policy": {"run_id": _str, "policy_digest": _hash},
    "allowed": _GUARD,
    "denied": _GUARD,
    "revocation": {"run_id": _opt_str, "call_id": _str, "by": _str, "reason": _str},
    "approval_signature": {
        **_CALL_ID, "decision_hash": _hash, "approver": _str, "vkey": _str,
        "signature": _signature,
    },
}
"""Every kind's body fields and their checks (the JSON Schemas in ``schemas/entry-bodies/``
describe the same fields; a test keeps the two in step)."""

KINDS = tuple(BODY_FIELDS)
"""Entry kinds this format version defines."""

CONTEXT_APPROVER = "run_context"
"""The ``approver`` of a ``decision`` the recorder did not see being made but read off the
SDK's run context when the SDK ran the call: an approval the app made on the context itself
or on a run state it did not give the recorder (``verify`` names each in a notice)."""

PAYLOAD_FIELDS = (
    "args_payload", "result_digest", "message_digest", "item_digest", "output_digest",
    "history_digest", "policy_digest",
)
"""Body fields that name a payload in the payload store by its SHA-256."""

_FIELDS = frozenset({"v", "seq", "prev", "kind", "time", "refs", "body"})
_TOP_ORDER = encoding.canonical_order(_FIELDS)


class Entry(NamedTuple):
    """One decoded entry.

    Attributes:
        seq: leaf index, 0-based (entries).
        prev: entry hash of the previous entry, 32 bytes (zeros for seq 0).
        kind: one of :data:`KINDS`.
        time: nanoseconds since the Unix epoch, UTC.
        refs: entry hashes (32 bytes each) of earlier entries this one links to.
        body: kind-specific map (str keys; values without floats).
    """

    seq: int
    prev: bytes
    kind: str
    time: int
    body: dict[str, Any]
    refs: tuple[bytes, ...] = ()

    def to_bytes(self) -> bytes:
        """Canonical bytes of this entry.

        Every field is checked first (the body against its kind's fields), so the map
        can be packed in the canonical key order known in advance, without the generic
        walk of :func:`evidence_ledger.format.encoding.encode` (a test holds the two to the same
        bytes).

        Raises:
            EncodingError: if a field is missing, extra or of the wrong type.
        """
        _expect(type(self.seq) is int and 0 <= self.seq < 2**64, "bad seq")
        _expect(_hash(self.prev), "prev is not 32 bytes")
        _expect(type(self.time) is int and 0 <= self.time < 2**64, "bad time")
        _expect(all(_hash(r) for r in self.refs), "a ref is not 32 bytes")
        check_body(self.kind, self.body)
        body = {name: _ordered_maps(self.body[name]) for name in _BODY_ORDER[self.kind]}
        return encoding.pack_ordered({  # keys in canonical order: shorter first, then bytes
            "v": FORMAT_VERSION, "seq": self.seq, "body": body, "kind": self.kind,
            "prev": self.prev, "refs": list(self.refs), "time": self.time,
        })


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return "sha256:" + value.hex() if len(value) == 32 else value.hex()
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    return value


def entry_json(entry: Entry, hash_: bytes) -> dict[str, Any]:
    """JSON form of an entry: digests and hashes as ``sha256:<lowercase hex>``."""
    return {
        "seq": entry.seq,
        "hash": "sha256:" + hash_.hex(),
        "prev": "sha256:" + entry.prev.hex(),
        "kind": entry.kind,
        "time": entry.time,
        "refs": ["sha256:" + r.hex() for r in entry.refs],
        "body": _json_value(entry.body),
    }


def entry_hash_reference(data: bytes) -> bytes:
    """Entry hash: SHA-256 of the entry's canonical bytes (32 bytes)."""
    return hashlib.sha256(data).digest()


entry_hash = entry_hash_reference if core.native is None else core.native.entry_hash
"""Entry hash: :func:`entry_hash_reference`, on the core in use."""


def _expect(cond: bool, message: str) -> None:
    if not cond:
        raise EncodingError(message)


_BODY_KEYS = {kind: frozenset(fields) for kind, fields in BODY_FIELDS.items()}
_BODY_ORDER = {kind: encoding.canonical_order(fields) for kind, fields in BODY_FIELDS.items()}
_BODY_CHECKS = {kind: tuple(fields.items()) for kind, fields in BODY_FIELDS.items()}
_MAP_FIELDS = {
    kind: tuple(name for name, check in fields.items() if check is _interruptions)
    for kind, fields in BODY_FIELDS.items()
}
"""Per kind, the body fields that hold maps (lists of them) and so need an order check."""


def _ordered_maps(value: Any) -> Any:
    """A body value with the maps inside a list put in canonical key order."""
    if type(value) is list and any(type(item) is dict for item in value):
        return [
            {k: item[k] for k in encoding.canonical_order(item)} if type(item) is dict else item
            for item in value
        ]
    return value


def _maps_in_order(value: Any) -> bool:
    """True unless ``value`` is a list holding a map whose keys are out of canonical order."""
    return type(value) is not list or all(
        type(item) is not dict or tuple(item) == encoding.canonical_order(item) for item in value
    )


def check_body(kind: str, body: dict[str, Any]) -> None:
    """Check that ``body`` has exactly the fields of ``kind``, each of the right type.

    Raises:
        EncodingError: naming the first field that is missing, extra or wrong.
    """
    keys = _BODY_KEYS.get(kind)
    if keys is None:
        raise EncodingError(f"unknown kind {kind!r}")
    if body.keys() != keys:
        raise EncodingError(
            f"{kind} body fields {sorted(body, key=repr)} != {sorted(keys)}"
        )
    for name, check in _BODY_CHECKS[kind]:
        if not check(body[name]):
            raise EncodingError(f"{kind} body field {name!r} has a bad value")


def _header_problem(
    version: Any, seq: Any, prev: Any, time: Any, refs: Any, body: Any, kind: Any
) -> str:
    """The first thing wrong with an entry's top-level fields, as one line."""
    checks = [
        (type(version) is int and version == FORMAT_VERSION, f"unknown format version {version!r}"),
        (type(seq) is int and seq >= 0, "bad seq"),
        (type(prev) is bytes and len(prev) == 32, "prev is not 32 bytes"),
        (type(time) is int and time >= 0, "bad time"),
        (type(refs) is list and all(_hash(r) for r in refs), "a ref is not 32 bytes"),
    ]
    return next((message for ok, message in checks if not ok), "bad kind or body")


def decode_entry_reference(data: bytes) -> Entry:
    """Parse and check canonical entry bytes.

    Raises:
        EncodingError: if the bytes are not canonical MessagePack, or the map lacks a
            field, has an unknown one, or a field has the wrong type or length.
    """
    value = encoding.decode(data, schema_checked=True)
    if type(value) is not dict or tuple(value) != _TOP_ORDER:
        raise EncodingError(
            "entry is not a map of exactly v, seq, body, kind, prev, refs, time in that order"
        )
    version, seq, body, kind, prev, refs, time = value.values()
    if not (
        type(version) is int and version == FORMAT_VERSION
        and type(seq) is int and seq >= 0
        and type(prev) is bytes and len(prev) == 32
        and type(time) is int and time >= 0
        and type(refs) is list and all(type(r) is bytes and len(r) == 32 for r in refs)
        and type(body) is dict and type(kind) is str
    ):
        raise EncodingError(_header_problem(version, seq, prev, time, refs, body, kind))
    check_body(kind, body)
    _expect(tuple(body) == _BODY_ORDER[kind], f"{kind} body fields are not in canonical order")
    for name in _MAP_FIELDS[kind]:
        _expect(_maps_in_order(body[name]), f"a map in {kind} body field {name!r} is out of order")
    return Entry(seq, prev, kind, time, body, tuple(refs))


_CHECK_CODES: dict[Check, str] = {
    _str: "str", _opt_str: "opt_str", _bool: "bool", _opt_bool: "opt_bool", _hash: "hash",
    _opt_hash: "opt_hash", _scope: "scope", _opt_scope: "opt_scope", _signature: "signature",
    _count: "count",
}


def native_fields(fields: dict[str, Check]) -> list[tuple[str, str, Any]]:
    """Body fields as the native core takes them: ``(name, check code, argument)``, the code
    a check function's name without its underscore; the argument the allowed values of a
    ``one_of`` check, the fields of a ``maps`` check (a list of maps: ``_interruptions``),
    else None.

    Raises:
        KeyError: for a check the native core does not know.
    """
    out: list[tuple[str, str, Any]] = []
    for name, check in fields.items():
        if isinstance(check, _OneOf):
            out.append((name, "one_of", check.values))
        elif check is _interruptions:
            out.append((name, "maps", native_fields(_INTERRUPTION)))
        else:
            out.append((name, _CHECK_CODES[check], None))
    return out


_compiled: Any = core.compiled
native_schema: Any = (None if core.compiled is None else core.compiled.EntrySchema(
    {kind: native_fields(fields) for kind, fields in BODY_FIELDS.items()}, Entry))
""":data:`BODY_FIELDS` and :class:`Entry` on the native core (None where it is not built)."""


def decode_entry_native(data: bytes) -> Entry:
    """:func:`decode_entry_reference` on the native core: the same entries accepted, the
    same value; whatever it refuses goes to the reference, which raises its own error."""
    try:
        return native_schema.decode(data)
    except (_compiled.NotCanonical, TypeError):  # TypeError: a buffer that is not bytes
        return decode_entry_reference(data)


decode_entry = decode_entry_reference if core.native is None else decode_entry_native
"""Parse and check canonical entry bytes: :func:`decode_entry_reference`, on the core in use.

Raises:
    EncodingError: if the bytes are not canonical MessagePack, or the map lacks a field,
        has an unknown one, or a field has the wrong type or length.
"""


def decode_checked(data: bytes) -> Entry:
    """Decode entry bytes that :func:`decode_entry` has already accepted, without checking
    them again (a third of its time: for a second pass over checked records).

    Raises:
        Whatever the unpacker (msgpack's, or the native core's NotCanonical) or tuple
        unpacking raises on bytes that were never checked;
        a caller holding such bytes must call :func:`decode_entry`.
    """
    _, seq, body, kind, prev, refs, time = _unpack_checked(data).values()
    return Entry(seq, prev, kind, time, body, tuple(refs))


_unpack_checked = msgpack.unpackb if core.native is None else core.native.decode
"""Unpacks bytes :func:`decode_entry` accepted (the native decoder accepts them all)."""
