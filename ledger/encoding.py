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

from typing import Any

import msgpack

from .errors import EncodingError

MAX_DEPTH = 32
"""Deepest nesting of maps and arrays allowed inside one entry."""

_packer_options = {"use_bin_type": True, "autoreset": True}


def _canonical(value: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise EncodingError(f"nesting deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, (bool, str, bytes)):
        return value
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:
            raise EncodingError(f"integer {value} does not fit in 64 bits")
        return value
    if isinstance(value, float):
        raise EncodingError("floats are not allowed in entries")
    if isinstance(value, (list, tuple)):
        return [_canonical(item, depth + 1) for item in value]
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise EncodingError(f"map key {key!r} is not a string")
        ordered = sorted(value.items(), key=lambda kv: msgpack.packb(kv[0], use_bin_type=True))
        return {k: _canonical(v, depth + 1) for k, v in ordered}
    raise EncodingError(f"type {type(value).__name__} cannot be encoded")


def encode(value: Any) -> bytes:
    """Encode ``value`` (None, bool, int, str, bytes, list, dict with str keys) canonically.

    Returns the unique canonical MessagePack byte string.

    Raises:
        EncodingError: for floats, non-str keys, integers outside 64 bits, unknown types,
            or nesting deeper than :data:`MAX_DEPTH`.
    """
    return msgpack.packb(_canonical(value, 0), **_packer_options)


def _refuse_ext(code: int, data: bytes) -> Any:
    raise EncodingError(f"extension type {code} is not allowed")


def decode(data: bytes) -> Any:
    """Decode canonical MessagePack ``data`` and prove it is canonical.

    Raises:
        EncodingError: if the bytes are not one complete MessagePack value, hold a float
            or extension type, invalid UTF-8, or are not the canonical encoding of the
            value they hold.
    """
    try:
        value = msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=True,
            use_list=True,
            ext_hook=_refuse_ext,
        )
    except EncodingError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types on bad input
        raise EncodingError(f"not a MessagePack value: {exc}") from exc
    if encode(value) != data:
        raise EncodingError("not the canonical encoding of its value")
    return value
