"""Append throughput against its floor: the same bytes written, hashed and synced.

Modes: one durable group per entry, and group commit (batches of :data:`GROUP` entries,
like Tessera's batching). The ledger's figure is :func:`benchmarks.workload.build_ledger`
in that mode. The floor (Python, ``os`` and ``hashlib``, no project code) writes the same
bytes in the same groups into the two files of the segment layout (issue 25): per group,
the log frames of its entries to ``log.bin`` and the bytes of the payloads they store for
the first time to one segment file, a SHA-256 of each payload and of each entry, then one
``fdatasync`` of each file written in the group.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from benchmarks.common import Row, discard, median_time, scaled, scratch
from benchmarks.workload import build_ledger
from evidence_ledger.format.entries import PAYLOAD_FIELDS, decode_entry
from evidence_ledger.format.framing import Record
from evidence_ledger.storage.ledger_dir import Ledger

GROUP = 256
TARGETS = {1: 1.5, GROUP: 2.0}
"""Group size -> how many times the floor's time the ledger may take (issue 25)."""

Written = tuple[bytes, bytes, list[bytes]]
"""One entry as appended: its frame in the log, its record bytes, and the payloads it
stores first."""


def _same_bytes(directory: Path) -> list[Written]:
    """Per entry, in order: its frame, its record bytes and the payloads it names for the
    first time, as the ledger holds them."""
    ledger = Ledger(directory)
    log = ledger.store.path.read_bytes()
    seen: set[bytes] = set()
    out = []
    for item in ledger.scan():
        assert isinstance(item, Record)
        body = decode_entry(item.data).body
        fresh = []
        for field in PAYLOAD_FIELDS:
            digest = body.get(field)
            if isinstance(digest, bytes) and digest not in seen:
                seen.add(digest)
                payload = ledger.payloads.get(digest)
                assert payload is not None, f"payload {digest.hex()} missing"
                fresh.append(payload)
        out.append((log[item.offset : item.end], item.data, fresh))
    return out


def _floor(directory: Path, written: list[Written], group: int) -> None:
    directory.mkdir(exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    log = os.open(directory / "log.bin", flags, 0o644)
    segment = os.open(directory / "segment", flags, 0o644)
    try:
        for start in range(0, len(written), group):
            frames, payloads = [], []
            for framed, data, fresh in written[start : start + group]:
                for payload in fresh:
                    hashlib.sha256(payload).digest()
                    payloads.append(payload)
                hashlib.sha256(data).digest()
                frames.append(framed)
            if payloads:
                os.write(segment, b"".join(payloads))
                os.fdatasync(segment)
            os.write(log, b"".join(frames))
            os.fdatasync(log)
    finally:
        os.close(log)
        os.close(segment)


def _bytes_under(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def _measure(entries: int, group: int) -> tuple[float, float, str]:
    """(our seconds, floor seconds, what each wrote), medians."""
    with scratch("append-") as work:
        ours = median_time(
            lambda: build_ledger(work / "l", entries, group),
            setup=lambda: discard(work / "l"),
        )
        written = _same_bytes(work / "l")
        floor = median_time(lambda: _floor(work / "floor", written, group))
        sizes = (f"{_bytes_under(work / 'l') / entries:.0f} B per entry in the ledger's "
                 f"files, {_bytes_under(work / 'floor') / entries:.0f} B in the floor's")
    return ours, floor, sizes


def rows(entries_grouped: int = 100_000, entries_single: int = 10_000) -> list[Row]:
    """Rows for both durability modes."""
    out = []
    for mode, entries, group in (
        ("append, sync per entry", scaled(entries_single), 1),
        (f"append, group commit ({GROUP})", scaled(entries_grouped), GROUP),
    ):
        ours, floor, sizes = _measure(entries, group)
        ratio = ours / floor
        out.append(Row(
            operation=mode, size=entries, ours=entries / ours, unit="entries/s",
            baselines={"floor": entries / floor}, ratio=ratio,
            target=f"within {TARGETS[group]}x of the floor", met=ratio <= TARGETS[group],
            note="ratio = floor rate / our rate; floor: same bytes in the same groups to "
                 f"log.bin and one segment file, fdatasync of each file written; {sizes}",
        ))
    return out
