"""``tree/state.json``, the tree store's commit point: its fields and their JSON form.

Bytes in, bytes out: :mod:`evidence_ledger.storage.tree_store` reads the file, replaces it
atomically (write, fsync, rename) and says what an unreadable one means. The document::

    {"version": 2, "size": n, "end_offset": int, "last_offset": int,
     "last_leaf": b64, "partial_tiles": [b64, ...]}

with hashes in standard base64. ``size`` says how much of ``nodes.bin`` and
``offsets.bin`` is valid; ``partial_tiles[L]`` is the partial tile at level ``L`` (see
:mod:`evidence_ledger.tlog.tiles`). A version-1 document (a store of tiles only) is
still read, so that the next update can check it against the log and rebuild it.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from evidence_ledger.format.errors import EvidenceError

__all__ = ["EMPTY_STATE", "LEGACY_VERSIONS", "STATE_VERSION", "StateFormatError", "TreeState"]

STATE_VERSION = 2
"""The layout :class:`TreeState` describes: a node file, offsets of every entry, tiles."""
LEGACY_VERSIONS = (1,)
"""Older layouts still read (tiles only, offsets of every 256th entry): rebuilt by the
next update."""


class StateFormatError(EvidenceError):
    """Bytes that are not a state document of a version this code reads."""


@dataclass(frozen=True)
class TreeState:
    """What the store covers, as committed.

    Attributes:
        size: entries covered (leaves of the stored tree).
        end_offset: byte offset in ``log.bin`` just past the last covered entry's frame.
        last_offset: byte offset in ``log.bin`` of the last covered entry's frame (0
            when ``size`` is 0).
        last_leaf: leaf hash of that entry, 32 bytes (empty when ``size`` is 0).
        partials: ``partials[L]`` is the partial tile at level ``L``, the
            ``(size >> 8L) & 255`` rightmost level-``L`` hashes, concatenated.
        version: the layout of the store (:data:`STATE_VERSION`, or one of
            :data:`LEGACY_VERSIONS` for a store that the next update rebuilds).
    """

    size: int
    end_offset: int
    last_offset: int
    last_leaf: bytes
    partials: tuple[bytes, ...]
    version: int = STATE_VERSION

    def to_json(self) -> bytes:
        """The document (see the module docstring), ASCII with a trailing newline; always
        written as :data:`STATE_VERSION`."""
        doc = {
            "version": STATE_VERSION,
            "size": self.size,
            "end_offset": self.end_offset,
            "last_offset": self.last_offset,
            "last_leaf": base64.b64encode(self.last_leaf).decode("ascii"),
            "partial_tiles": [base64.b64encode(p).decode("ascii") for p in self.partials],
        }
        return json.dumps(doc, indent=1).encode("ascii") + b"\n"

    @classmethod
    def from_json(cls, data: bytes) -> TreeState:
        """Parse a document written by :meth:`to_json` (or a version-1 one).

        Raises:
            StateFormatError: if ``data`` is not JSON, lacks a field, has a field of the
                wrong type (sizes and offsets are non-negative integers, hashes base64)
                or an unknown version; the message says which.
        """
        try:
            doc: Any = json.loads(data)
            version = doc.get("version")
            if version != STATE_VERSION and version not in LEGACY_VERSIONS:
                raise ValueError(f"version {version!r}, want {STATE_VERSION}")
            return cls(
                size=_nonneg(doc["size"]),
                end_offset=_nonneg(doc["end_offset"]),
                last_offset=_nonneg(doc["last_offset"]),
                last_leaf=base64.b64decode(doc["last_leaf"], validate=True),
                partials=tuple(base64.b64decode(p, validate=True) for p in doc["partial_tiles"]),
                version=version,
            )
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error,
                RecursionError) as exc:  # RecursionError: JSON nested past the parser's depth
            raise StateFormatError(str(exc) or type(exc).__name__) from exc


def _nonneg(value: Any) -> int:
    """``value`` if it is an int in [0, 2^63) (a size or a file offset, which the OS holds
    as a signed 64-bit integer), else ValueError."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
        raise ValueError(f"{value!r} is not a non-negative 64-bit integer")
    return value


EMPTY_STATE = TreeState(0, 0, 0, b"", ())
"""The state of a store that covers nothing (no ``state.json`` yet)."""
