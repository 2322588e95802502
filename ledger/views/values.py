"""Payload values for people: a digest named by a prefix, a payload shown as JSON (or as
redacted, never as missing), and what differs between two argument values.

Pure: the caller hands in the digests it knows, the payload bytes it read (from a ledger's
``payloads/`` or a proof bundle) and the ``redaction`` entries. Read by ``show``,
``trace --values``, violation details and the HTML report.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Literal

from evidence_ledger.format.digests import parse_strict_json
from evidence_ledger.format.entries import Entry
from evidence_ledger.format.errors import UsageError
from evidence_ledger.verify.findings import (
    APPROVAL_BINDING,
    ARGUMENT_INTEGRITY,
    FOREIGN_INTERRUPTION,
    Finding,
)

__all__ = [
    "COMPARED_ROLES",
    "MIN_PREFIX_HEX",
    "PREVIEW_BYTES",
    "Redaction",
    "Value",
    "ValueDiff",
    "argument_payloads",
    "digest_prefix",
    "pick_digest",
    "preview",
    "redactions_of",
    "value_diff",
]

MIN_PREFIX_HEX = 8
"""Shortest digest prefix accepted (hex digits): 32 bits, so that a prefix a person copies
from a table names one payload of a ledger of millions with room to spare."""

PREVIEW_BYTES = 1 << 20
"""Most payload bytes read to show a value inline (1 MiB); a larger payload is shown cut,
and ``show --raw`` streams it whole."""

_HEX = re.compile(r"[0-9a-f]*")


def digest_prefix(text: str) -> str:
    """The lowercase hex digits of a digest or a prefix of one: ``sha256:0a8b3c4d``,
    ``0A8B3C4D`` or a whole ``sha256:<64 hex>``.

    Raises:
        UsageError: for fewer than :data:`MIN_PREFIX_HEX` or more than 64 hex digits, or
            anything but hex after an optional ``sha256:``.
    """
    hex_ = text.strip().lower().removeprefix("sha256:")
    if not _HEX.fullmatch(hex_) or not MIN_PREFIX_HEX <= len(hex_) <= 64:
        raise UsageError(
            f"{text[:80]!r} is not a digest: give sha256:<hex>, at least "
            f"{MIN_PREFIX_HEX} and at most 64 hex digits")
    return hex_


def pick_digest(prefix: str, known: Iterable[bytes], what: str = "payload") -> bytes:
    """The one digest of ``known`` (32 bytes each) whose hex starts with ``prefix`` (from
    :func:`digest_prefix`); ``what`` names the digests ``known`` holds, for the error.

    Raises:
        UsageError: if none does, or several do (the message names up to five).
    """
    found = sorted({d for d in known if d.hex().startswith(prefix)})
    if len(found) == 1:
        return found[0]
    if not found:
        raise UsageError(f"no {what} digest of this ledger starts with sha256:{prefix}")
    shown = ", ".join("sha256:" + d.hex() for d in found[:5])
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    raise UsageError(f"sha256:{prefix} is ambiguous, it matches {len(found)} digests: "
                     f"{shown}{more}; give more digits")


@dataclass(frozen=True)
class Redaction:
    """Who erased a payload, when and why: its ``redaction`` entry.

    Attributes:
        seq: the entry's seq.
        time_ns: its time, ns since the epoch (UTC).
        by: who redacted it (None when the entry names no one).
        reason: why.
    """

    seq: int
    time_ns: int
    by: str | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        """``{"seq", "time_ns", "by", "reason"}``."""
        return {"seq": self.seq, "time_ns": self.time_ns, "by": self.by,
                "reason": self.reason}


def redactions_of(entries: Iterable[Entry]) -> dict[bytes, Redaction]:
    """Digest -> the first ``redaction`` entry that erased it, from ``entries`` (any order
    of any kinds; others are skipped)."""
    found: dict[bytes, Redaction] = {}
    for entry in entries:
        if entry.kind == "redaction":
            found.setdefault(entry.body["digest"], Redaction(
                entry.seq, entry.time, entry.body.get("by"), entry.body["reason"]))
    return found


@dataclass(frozen=True)
class Value:
    """One payload as a person sees it.

    Attributes:
        digest: its SHA-256 (32 bytes).
        state: ``present`` (bytes at hand), ``redacted`` (erased by ``redaction``; never
            shown), ``withheld`` (not at hand: a bundle without payloads, or a report made
            with ``--no-values``), ``missing`` (gone with no redaction entry: lost),
            ``unrecorded`` (an arguments digest whose arguments the ledger never held:
            those an approver was shown, recorded before the ledger kept a copy) or
            ``damaged`` (the stored bytes do not hash to ``digest``; never shown).
        data: the bytes (at most :data:`PREVIEW_BYTES` of them when ``cut``), when present.
        cut: ``data`` is the first :data:`PREVIEW_BYTES` bytes of a larger payload.
        redaction: the redaction, when redacted.
        size: bytes of the whole payload, when its file was found (else None).
        args_digest: the arguments digest (32 bytes) this value was asked for by, when it
            is the value of arguments: the payload named by that digest, or the arguments
            payload of an entry with that digest (else None).
    """

    digest: bytes
    state: Literal["present", "redacted", "withheld", "missing", "unrecorded", "damaged"]
    data: bytes | None = None
    cut: bool = False
    redaction: Redaction | None = None
    size: int | None = None
    args_digest: bytes | None = None

    @classmethod
    def of(cls, digest: bytes, data: bytes | None, redactions: dict[bytes, Redaction],
           *, withheld: bool = False) -> Value:
        """The value of ``digest`` given its bytes as read (None: not found; more than
        :data:`PREVIEW_BYTES` bytes: kept cut) and the redactions of the ledger or bundle.
        ``withheld``: bytes were not looked for; a redacted payload still says so."""
        if digest in redactions:
            return cls(digest, "redacted", redaction=redactions[digest])
        if withheld:
            return cls(digest, "withheld")
        if data is None:
            return cls(digest, "missing")
        cut = len(data) > PREVIEW_BYTES
        return cls(digest, "present", data[:PREVIEW_BYTES] if cut else data, cut)

    @property
    def text(self) -> str:
        """``sha256:<hex>``."""
        return "sha256:" + self.digest.hex()

    def parsed(self) -> Any:
        """The payload as JSON when it is a whole strict-JSON UTF-8 document whose strings
        are Unicode text, else its text (invalid UTF-8 replaced; a ``\\ud800`` escape of a
        lone surrogate, which no output can encode, stays the escape it is), else None when
        there are no bytes."""
        if self.data is None:
            return None
        text = self.data.decode("utf-8", errors="replace")
        if not self.cut:
            try:
                value = parse_strict_json(text)
                json.dumps(value, ensure_ascii=False).encode("utf-8")
            except (ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
                pass
            else:
                return value
        return text

    def describe(self) -> str:
        """One phrase for a value that cannot be shown: ``redacted by alice at seq 9:
        GDPR erasure``, ``not in this bundle``, ``missing (no redaction entry)``; for a
        present value, its size."""
        if self.state == "redacted" and self.redaction is not None:
            who = f" by {self.redaction.by}" if self.redaction.by else ""
            return f"redacted{who} at seq {self.redaction.seq}: {self.redaction.reason}"
        if self.state == "withheld":
            return "value not included"
        if self.state == "missing":
            return "missing (no redaction entry erased it)"
        if self.state == "unrecorded":
            return "not recorded (the ledger holds its digest only)"
        if self.state == "damaged":
            return "damaged: the stored bytes do not match the digest (run verify)"
        size = len(self.data or b"")
        return f"{size}+ bytes" if self.cut else f"{size} bytes"

    def to_json(self) -> dict[str, Any]:
        """``{"digest", "state", "value"?, "cut"?, "redaction"?, "size"?,
        "args_digest"?}``; ``value`` is the parsed JSON (or text) of a present payload;
        ``size`` (bytes) and ``args_digest`` only when known."""
        out: dict[str, Any] = {"digest": self.text, "state": self.state}
        if self.state == "present":
            out["value"] = self.parsed()
            out["cut"] = self.cut
        if self.redaction is not None:
            out["redaction"] = self.redaction.to_json()
        if self.size is not None:
            out["size"] = self.size
        if self.args_digest is not None:
            out["args_digest"] = "sha256:" + self.args_digest.hex()
        return out

    def preview(self, width: int) -> str:
        """One line of at most ``width`` characters (>= 2): the value as compact JSON
        (:func:`preview`) when present, else :meth:`describe`."""
        if self.state != "present":
            return preview(self.describe(), width)
        return preview(self.parsed(), width)


COMPARED_ROLES = {
    APPROVAL_BINDING: ("shown to the approver", "called"),
    ARGUMENT_INTEGRITY: ("called", "executed"),
    FOREIGN_INTERRUPTION: ("waited on by the run state", "called by its own run"),
}
"""Rule -> what its :attr:`Finding.compared` digests are, ``(expected, got)``, in words."""


@dataclass(frozen=True)
class ValueDiff:
    """The two argument values a violation compared, and what differs between them.

    Attributes:
        rule: the rule (a key of :data:`COMPARED_ROLES`).
        expected, got: the values of :attr:`Finding.compared` (what an approver was shown
            or the call had; what the call had or ran).
        lines: :func:`value_diff` of the two, when both are present (else empty).
    """

    rule: str
    expected: Value
    got: Value
    lines: tuple[str, ...]

    @classmethod
    def of(cls, finding: Finding, expected: Value, got: Value, *, max_lines: int = 6,
           ) -> ValueDiff:
        """The diff of ``finding`` (whose ``compared`` is not None) given the two values
        read for its digests; at most ``max_lines`` diff lines."""
        whole = all(v.state == "present" and not v.cut for v in (expected, got))
        lines = value_diff(expected.parsed(), got.parsed(), max_lines=max_lines) if whole else []
        return cls(finding.rule, expected, got, tuple(lines))

    @property
    def roles(self) -> tuple[str, str]:
        """What ``expected`` and ``got`` are, in words (:data:`COMPARED_ROLES`)."""
        return COMPARED_ROLES.get(self.rule, ("expected", "got"))

    def summary(self) -> list[str]:
        """Lines for people: the diff lines, or, when a side cannot be shown, what each
        side is (``shown to the approver: redacted by bob at seq 9: ...``)."""
        if self.lines:
            return list(self.lines)
        return [f"{role}: " + (f"{value.describe()}, too large to compare" if value.cut
                               else value.describe())
                for role, value in zip(self.roles, (self.expected, self.got), strict=True)
                if value.state != "present" or value.cut] or ["the two values are equal as JSON"]

    def to_json(self) -> dict[str, Any]:
        """``{"expected": {"role", **Value.to_json()}, "got": {...}, "diff": [line]}``."""
        sides = zip(("expected", "got"), self.roles, (self.expected, self.got), strict=True)
        return {**{name: {"role": role, **value.to_json()} for name, role, value in sides},
                "diff": list(self.lines)}


def argument_payloads(entries: Iterable[Entry], wanted: AbstractSet[bytes] | None = None,
                      ) -> dict[bytes, bytes]:
    """Arguments digest -> the payload holding those arguments (``args_payload``, 32 bytes
    each), from the ``call`` and ``execution`` entries of ``entries`` (others skipped);
    only the digests in ``wanted`` when given (memory: one pair per wanted digest)."""
    found: dict[bytes, bytes] = {}
    for entry in entries:
        if entry.kind in ("call", "execution"):
            args = entry.body["args_digest"]
            if wanted is None or args in wanted:
                found.setdefault(args, entry.body["args_payload"])
    return found


def preview(value: Any, width: int) -> str:
    """``value`` as compact one-line JSON (a string as it is), cut to ``width``
    characters with a trailing ``…``; ``width`` >= 2."""
    text = value if isinstance(value, str) else json.dumps(
        value, ensure_ascii=False, separators=(",", ":"))
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 1] + "…"


def value_diff(expected: Any, got: Any, *, max_lines: int = 6, width: int = 60) -> list[str]:
    """What differs between two JSON values, one line per difference, as JSON paths:
    ``$.amount: 1 -> 999999``, ``$.note: added "x"``, ``$.memo: removed "y"``; at most
    ``max_lines`` lines (the last says how many more), each value cut to ``width``
    characters. Equal values give no lines. ``expected`` is what the approver was shown,
    ``got`` what the call had."""
    lines = list(_differences("$", expected, got, width))
    if len(lines) > max_lines:
        rest = len(lines) - (max_lines - 1)
        lines = [*lines[: max_lines - 1], f"… and {rest} more differences"]
    return lines


def _differences(path: str, a: Any, b: Any, width: int) -> Iterator[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() | b.keys()):
            sub = f"{path}.{key}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) \
                else f"{path}[{json.dumps(key, ensure_ascii=False)}]"
            if key not in b:
                yield f"{sub}: removed {_shown(a[key], width)}"
            elif key not in a:
                yield f"{sub}: added {_shown(b[key], width)}"
            else:
                yield from _differences(sub, a[key], b[key], width)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _differences(f"{path}[{i}]", x, y, width)
    elif a != b or type(a) is not type(b):
        yield f"{path}: {_shown(a, width)} -> {_shown(b, width)}"


def _shown(value: Any, width: int) -> str:
    return preview(json.dumps(value, ensure_ascii=False) if isinstance(value, str) else value,
                   width)
