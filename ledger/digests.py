"""Digests of arguments and outputs, as the ledger defines them.

- Arguments digest: SHA-256 of the RFC 8785 (JCS) canonical JSON of the parsed arguments.
  Arguments that are not valid JSON, hold duplicate object keys, NaN or Infinity, or that
  RFC 8785 refuses, are digested as their raw UTF-8 bytes and marked ``form="raw"``.
- Output digest: SHA-256 of the persisted ``output`` value: its UTF-8 bytes when it is a
  string, RFC 8785 canonical JSON otherwise (the SDK persists lists of content parts for
  structured tool outputs).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

import rfc8785

ArgsForm = Literal["jcs", "raw"]


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


def parse_strict_json(text: str) -> Any:
    """Parse JSON text, refusing duplicate keys and NaN/Infinity (RFC 8259 §4, §6).

    Raises:
        ValueError: if ``text`` is not strict JSON.
    """
    return json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants)


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


@dataclass(frozen=True)
class ArgumentsDigest:
    """The digest of one arguments string.

    Attributes:
        digest: 32-byte SHA-256.
        form: ``"jcs"`` when taken over RFC 8785 canonical JSON, ``"raw"`` when taken
            over the raw UTF-8 bytes because the text was not strict JSON.
        raw: the raw UTF-8 bytes of the arguments string (stored as a payload).
    """

    digest: bytes
    form: ArgsForm
    raw: bytes


@functools.lru_cache(maxsize=1024)
def arguments_digest(arguments: str | bytes) -> ArgumentsDigest:
    """Digest a tool call's raw ``arguments`` string (never raises).

    Cached: one call's arguments are digested for its call, decision, execution and
    session item alike.
    """
    raw = arguments if isinstance(arguments, bytes) else arguments.encode("utf-8", "surrogatepass")
    try:
        canonical = canonical_json(parse_strict_json(raw.decode("utf-8")))
    except (ValueError, RecursionError):
        return ArgumentsDigest(hashlib.sha256(raw).digest(), "raw", raw)
    return ArgumentsDigest(hashlib.sha256(canonical).digest(), "jcs", raw)


def output_bytes(output: Any) -> bytes:
    """The bytes an output digest is taken over (UTF-8 for str, RFC 8785 otherwise).

    Raises:
        ValueError: if a non-string output cannot be canonicalised by RFC 8785.
    """
    if isinstance(output, str):
        return output.encode("utf-8", "surrogatepass")
    return canonical_json(output)


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
