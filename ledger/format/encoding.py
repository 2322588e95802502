"""Canonical MessagePack: one value, exactly one byte form.

Rules (see FORMAT.md):

- map keys are strings, sorted by their encoded bytes (bytewise, like RFC 8785 sorts by
  code units, but over the MessagePack encoding of each key);
- integers use the shortest MessagePack form; ``str`` and ``bin`` are kept apart;
- floats, extension types and non-string map keys are refused;
- nesting is bounded (:data:`MAX_DEPTH`).

:func:`decode` re-encodes what it parsed and compares bytes, so any non-canonical input
(unsorted or duplicate keys, long integer forms, ``str`` where ``bin`` belongs) is refused.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable
from typing import Any

import msgpack

from evidence_ledger.format import core
from evidence_ledger.format.errors import EncodingError

MAX_DEPTH = 32
"""Deepest nesting of maps and arrays allowed inside one entry."""

_packers = threading.local()


def _pack(value: Any) -> bytes:
    """``msgpack.packb(value, use_bin_type=True)`` with this thread's packer, made once
    (``packb`` builds a packer per call: a third of the time of packing an entry)."""
    try:
        packer = _packers.packer
    except AttributeError:
        packer = _packers.packer = msgpack.Packer(use_bin_type=True)
    return packer.pack(value)


@functools.lru_cache(maxsize=8192)
def _key_bytes(key: str) -> bytes:
    return _pack(key)


_PLAIN = (type(None), bool, str, bytes)


def _canonical(value: Any, depth: int) -> Any:
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is int:
        if not -(2**63) <= value < 2**64:
            raise EncodingError(f"integer {value} does not fit in 64 bits")
        return value
    if depth >= MAX_DEPTH:
        raise EncodingError(f"nesting deeper than {MAX_DEPTH} levels")
    if kind is dict:
        try:
            keys = sorted(value, key=_key_bytes)
        except TypeError as exc:
            raise EncodingError(f"a map key is not a string: {exc}") from exc
        if not all(type(k) is str for k in keys):
            raise EncodingError("map keys must be strings")
        return {k: _canonical(value[k], depth + 1) for k in keys}
    if kind is list or kind is tuple:
        return [_canonical(item, depth + 1) for item in value]
    if isinstance(value, float):
        raise EncodingError("floats are not allowed in entries")
    if isinstance(value, bool):  # subclasses, e.g. str or int enums
        return bool(value)
    if isinstance(value, int):
        return _canonical(int(value), depth)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, dict):
        return _canonical(dict(value), depth)
    if isinstance(value, (list, tuple)):
        return _canonical(list(value), depth)
    raise EncodingError(f"type {type(value).__name__} cannot be encoded")


def encode(value: Any) -> bytes:
    """Encode ``value`` (None, bool, int, str, bytes, list, dict with str keys) canonically.

    Returns the unique canonical MessagePack byte string.

    Raises:
        EncodingError: for floats, non-str keys, integers outside 64 bits, unknown types,
            or nesting deeper than :data:`MAX_DEPTH`.
    """
    return _pack(_canonical(value, 0))


def canonical_order(keys: Iterable[str]) -> tuple[str, ...]:
    """``keys`` sorted as a canonical map orders them (by their encoded bytes)."""
    return tuple(sorted(keys, key=_key_bytes))


def pack_ordered(value: dict[str, Any]) -> bytes:
    """Pack a map whose keys (and nested maps' keys) are already in canonical order and
    whose values are already canonical (no floats, ints within 64 bits).

    The caller vouches for both (as :meth:`evidence_ledger.format.entries.Entry.to_bytes` does after
    checking every field); the top-level key order is checked here.

    Raises:
        EncodingError: if the top-level keys are not in canonical order.
    """
    if tuple(value) != canonical_order(value):
        raise EncodingError("map keys are not in canonical order")
    return _pack(value)


def _refuse_ext(code: int, data: bytes) -> Any:
    raise EncodingError(f"extension type {code} is not allowed")


def _sorted_pairs(pairs: list[tuple[Any, Any]]) -> dict[str, Any]:
    previous = b""
    for key, _ in pairs:
        if type(key) is not str:
            raise EncodingError(f"map key {key!r} is not a string")
        encoded = _key_bytes(key)
        if encoded <= previous:
            raise EncodingError("map keys are not in canonical order (or repeat)")
        previous = encoded
    return dict(pairs)


def _too_deep(value: Any, depth: int) -> bool:
    """True if a map or array of ``value`` lies at depth :data:`MAX_DEPTH` or deeper (the
    top level is depth 0), which :func:`encode` refuses."""
    kind = type(value)
    if kind is not dict and kind is not list:
        return False
    if depth >= MAX_DEPTH:
        return True
    children = value.values() if kind is dict else value
    return any(_too_deep(child, depth + 1) for child in children)


def _has_float(value: Any) -> bool:
    if type(value) is float:
        return True
    if type(value) is dict:
        return any(_has_float(v) for v in value.values())
    if type(value) is list:
        return any(_has_float(v) for v in value)
    return False


def decode_reference(data: bytes, *, schema_checked: bool = False) -> Any:
    """Decode canonical MessagePack ``data`` and prove it is canonical.

    Map keys are checked for canonical order while parsing; the value is then re-encoded
    and compared byte for byte (which catches long integer and string forms).

    Raises:
        EncodingError: if the bytes are not one complete MessagePack value, hold a float
            or extension type, invalid UTF-8, nesting deeper than :data:`MAX_DEPTH` (as
            :func:`encode` refuses; with ``schema_checked`` the layout bounds it), or are
            not the canonical encoding of the value they hold. (Entry bodies are
            further held to their typed fields by
            :func:`evidence_ledger.format.entries.check_body`.)

    Args:
        schema_checked: the caller checks every value's type and every map's key order
            itself against a known layout (as :func:`evidence_ledger.format.entries.decode_entry`
            does), so the per-map order check and the walk that looks for floats are skipped.
    """
    try:
        value = msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=False,
            use_list=True,
            object_pairs_hook=None if schema_checked else _sorted_pairs,
            ext_hook=_refuse_ext,
        )
    except EncodingError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types on bad input
        raise EncodingError(
            f"not a MessagePack value: {str(exc) or type(exc).__name__}"
        ) from exc
    if not schema_checked and _too_deep(value, 0):
        raise EncodingError(f"nesting deeper than {MAX_DEPTH} levels")
    if not schema_checked and (b"\xca" in data or b"\xcb" in data) and _has_float(value):
        raise EncodingError("floats are not allowed in entries")
    try:
        again = _pack(value)
    except (ValueError, OverflowError) as exc:  # e.g. nesting beyond msgpack's limit
        raise EncodingError(f"cannot re-encode: {exc}") from exc
    if again != data:
        raise EncodingError("not the canonical encoding of its value")
    return value


_compiled: Any = core.compiled


def decode_native(data: bytes, *, schema_checked: bool = False) -> Any:
    """:func:`decode_reference` on the native core.

    The compiled decoder accepts exactly what the reference accepts without
    ``schema_checked`` (with it, a subset), giving the same value; whatever it refuses goes
    to the reference, which raises its own error (or, with ``schema_checked``, may return
    the value), so errors and their messages are the reference's.
    """
    try:
        return _compiled.decode(data)
    except (_compiled.NotCanonical, TypeError):  # TypeError: a buffer that is not bytes
        return decode_reference(data, schema_checked=schema_checked)


decode = decode_reference if core.native is None else decode_native
"""Decode canonical MessagePack: :func:`decode_reference`, on the core in use."""

