"""Digests of arguments and outputs, as the ledger defines them.

- Arguments digest: SHA-256 of the RFC 8785 (JCS) canonical JSON of the parsed arguments.
  Arguments that are not valid JSON, hold duplicate object keys, NaN or Infinity, or that
  RFC 8785 refuses, are digested as their raw UTF-8 bytes and marked ``form="raw"``.
  Both are hashed as they are produced (:func:`jcs_dump`, :func:`utf8_chunks`): a large
  argument is held once, as its parsed value, never as canonical or raw bytes.
- Output digest: SHA-256 of the persisted ``output`` value: its UTF-8 bytes when it is a
  string, RFC 8785 canonical JSON otherwise (the SDK persists lists of content parts for
  structured tool outputs). Written in pieces too (:func:`write_output`).
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from json.encoder import encode_basestring
from typing import Any, Literal

import rfc8785

ArgsForm = Literal["jcs", "raw"]

CHUNK_CHARS = 1 << 16  # characters of a long string escaped/encoded at a time
_CACHE_SIZE = 1024  # arguments digests remembered, by the SHA-256 of their raw bytes


class _RefusedJSON(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _RefusedJSON(f"duplicate key {key!r}")
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise _RefusedJSON(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # e.g. 1e400: no IEEE 754 double holds it (RFC 8785 §3.2.2.3)
        raise _RefusedJSON(f"number {text[:40]} is beyond IEEE 754 double range")
    return value


def parse_strict_json(text: str) -> Any:
    """Parse JSON text, refusing duplicate keys, NaN/Infinity and numbers that overflow
    an IEEE 754 double (RFC 8259 §4, §6; RFC 8785 §3.2.2.3).

    Raises:
        ValueError: if ``text`` is not strict JSON.
    """
    return json.loads(
        text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants,
        parse_float=_finite,
    )


def canonical_json(value: Any) -> bytes:
    """RFC 8785 canonical JSON bytes of ``value``.

    Raises:
        ValueError: if RFC 8785 refuses the value (for example an integer beyond
            IEEE 754 double precision or a non-string key).
    """
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, RecursionError) as exc:
        raise ValueError(str(exc)) from exc


def utf8_chunks(text: str, chunk: int = CHUNK_CHARS) -> Iterator[bytes]:
    """The UTF-8 bytes of ``text`` (lone surrogates kept, ``surrogatepass``), ``chunk``
    characters at a time (each piece at most ``4 * chunk`` bytes; joined, they equal
    ``text.encode("utf-8", "surrogatepass")``, as UTF-8 encodes each character alone)."""
    for start in range(0, len(text), chunk):
        yield text[start:start + chunk].encode("utf-8", "surrogatepass")


def _dump_str(text: str, write: Callable[[bytes], object]) -> None:
    # RFC 8785 §3.2.2.2 escapes exactly what json's encode_basestring does (", \, the
    # short forms \b \t \n \f \r, other controls as lowercase \u00xx), character by
    # character, so a long string is escaped in pieces. Strict UTF-8 refuses surrogates.
    if len(text) <= CHUNK_CHARS:
        write(encode_basestring(text).encode("utf-8"))
        return
    write(b'"')
    for start in range(0, len(text), CHUNK_CHARS):
        write(encode_basestring(text[start:start + CHUNK_CHARS])[1:-1].encode("utf-8"))
    write(b'"')


def jcs_dump(value: Any, write: Callable[[bytes], object]) -> None:
    """Write the RFC 8785 canonical JSON of ``value`` to ``write``, piece by piece.

    The pieces joined equal ``rfc8785.dumps(value)``; a string goes in pieces of at most
    ``6 * CHUNK_CHARS + 2`` bytes, so canonicalising a value holding a long string costs
    no second copy of it. Objects and arrays are walked here (keys sorted by UTF-16 code
    units); numbers and literals are left to ``rfc8785``.

    Raises:
        ValueError: if RFC 8785 refuses the value (for example an integer beyond
            IEEE 754 double precision, a lone surrogate or a non-string key).
        RecursionError: if it nests deeper than the interpreter's recursion limit.
    """
    if isinstance(value, str):
        _dump_str(value, write)
    elif isinstance(value, dict):
        try:
            items = sorted(value.items(), key=lambda kv: kv[0].encode("utf-16be"))
        except AttributeError:
            raise ValueError("object keys must be strings") from None
        write(b"{")
        for index, (key, inner) in enumerate(items):
            if index:
                write(b",")
            _dump_str(key, write)
            write(b":")
            jcs_dump(inner, write)
        write(b"}")
    elif isinstance(value, (list, tuple)):
        write(b"[")
        for index, inner in enumerate(value):
            if index:
                write(b",")
            jcs_dump(inner, write)
        write(b"]")
    else:
        write(canonical_json(value))


def jcs_sha256(value: Any) -> bytes:
    """SHA-256 (32 bytes) of the RFC 8785 canonical JSON of ``value``, hashed as it is
    written (see :func:`jcs_dump`): the canonical bytes are never held whole.

    Raises:
        ValueError: if RFC 8785 refuses the value.
        RecursionError: if it nests deeper than the interpreter's recursion limit.
    """
    digest = hashlib.sha256()
    jcs_dump(value, digest.update)
    return digest.digest()


@dataclass(frozen=True)
class ArgumentsDigest:
    """The digest of one arguments string.

    Attributes:
        digest: 32-byte SHA-256.
        form: ``"jcs"`` when taken over RFC 8785 canonical JSON, ``"raw"`` when taken
            over the raw UTF-8 bytes because the text was not strict JSON.
        arguments: the arguments as given (str or bytes; not copied).
    """

    digest: bytes
    form: ArgsForm
    arguments: str | bytes = field(repr=False, compare=False)

    @property
    def raw(self) -> bytes:
        """The raw UTF-8 bytes of the arguments string (the payload stored), encoded on
        each access: the payload store streams them instead (see :func:`utf8_chunks`)."""
        if isinstance(self.arguments, bytes):
            return self.arguments
        return self.arguments.encode("utf-8", "surrogatepass")


_cache: OrderedDict[bytes, tuple[bytes, ArgsForm]] = OrderedDict()
_cache_lock = threading.Lock()


def arguments_digest(arguments: str | bytes) -> ArgumentsDigest:
    """Digest a tool call's raw ``arguments`` string (never raises).

    The JSON is parsed once and its canonical form hashed as it is written, the raw
    bytes hashed ``CHUNK_CHARS`` characters at a time: memory beyond the argument itself
    is about one parsed copy. Cached by the SHA-256 of the raw bytes (the last
    ``_CACHE_SIZE`` distinct arguments; the cache holds no argument, so none is kept
    alive): one call's arguments are parsed once for its call, decision, execution and
    session item alike.
    """
    if isinstance(arguments, bytes):
        raw_sha = hashlib.sha256(arguments).digest()
    else:
        hasher = hashlib.sha256()
        for piece in utf8_chunks(arguments):
            hasher.update(piece)
        raw_sha = hasher.digest()
    with _cache_lock:
        found = _cache.get(raw_sha)
        if found is not None:
            _cache.move_to_end(raw_sha)
            return ArgumentsDigest(found[0], found[1], arguments)
    digest, form = _digest(arguments, raw_sha)
    with _cache_lock:
        _cache[raw_sha] = (digest, form)
        if len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return ArgumentsDigest(digest, form, arguments)


def _digest(arguments: str | bytes, raw_sha: bytes) -> tuple[bytes, ArgsForm]:
    """``(digest, form)`` of ``arguments`` whose raw bytes have SHA-256 ``raw_sha``."""
    try:
        # A str is parsed as it is: a lone surrogate can only sit in a JSON string, and
        # strict UTF-8 in jcs_dump refuses it there, as decoding the raw bytes would.
        text = arguments.decode("utf-8") if isinstance(arguments, bytes) else arguments
        return jcs_sha256(parse_strict_json(text)), "jcs"
    except (ValueError, RecursionError):
        return raw_sha, "raw"


def write_output(output: Any, write: Callable[[bytes], object]) -> None:
    """Write the bytes an output digest is taken over to ``write``, piece by piece: the
    UTF-8 of a string (lone surrogates kept, :func:`utf8_chunks`), RFC 8785 canonical
    JSON of anything else (:func:`jcs_dump`). A long output is never copied whole.

    Raises:
        ValueError: if a non-string output cannot be canonicalised by RFC 8785, or nests
            deeper than the interpreter's recursion limit.
    """
    if isinstance(output, str):
        for piece in utf8_chunks(output):
            write(piece)
        return
    try:
        jcs_dump(output, write)
    except RecursionError as exc:
        raise ValueError(f"output nests too deeply: {exc}") from exc


def sha256(data: bytes) -> bytes:
    """SHA-256 of ``data`` (32 bytes)."""
    return hashlib.sha256(data).digest()


def to_text(digest: bytes) -> str:
    """Render a 32-byte digest as ``sha256:<lowercase hex>`` (the JSON output form)."""
    return "sha256:" + digest.hex()


def from_text(text: str) -> bytes:
    """Parse ``sha256:<hex>`` (or bare 64-char hex) into 32 bytes.

    Raises:
        ValueError: if the text is not a SHA-256 digest.
    """
    hexpart = text.removeprefix("sha256:")
    if len(hexpart) != 64:
        raise ValueError(f"not a SHA-256 digest: {text!r}")
    return bytes.fromhex(hexpart)


class PayloadStatus(Enum):
    """What checking one payload against its digest found."""

    OK = "ok"
    MISSING = "missing"
    MISMATCH = "mismatch"
    ERASING = "erasing"  # changed or gone under a redaction cut short (its marker is there)
