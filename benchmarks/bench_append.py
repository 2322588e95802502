"""Append throughput against the floor: the same bytes written and hashed, same fsyncs.

Modes: one durable group per entry (log fsync, plus one payload sync when the entry
names payloads), and group commit (batches of 256 entries, one log fsync and one payload
sync per batch, like Tessera's batching).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from benchmarks.common import Row, discard, median_time, scratch
from benchmarks.workload import build_ledger
from evidence_ledger.format.framing import Record
from evidence_ledger.storage.ledger_dir import Ledger

GROUP = 256


def _same_bytes(directory: Path) -> list[bytes]:
    """Per entry: its payload bytes then its entry bytes, as the ledger wrote them."""
    ledger = Ledger(directory)
    out = []
    for item in ledger.scan():
        assert isinstance(item, Record)
        payloads = [p for p in (ledger.payloads.get(d) for d in _digests(item.data)) if p]
        out.append(b"".join(payloads) + item.data)
    return out


def _digests(data: bytes) -> list[bytes]:
    from evidence_ledger.format.entries import PAYLOAD_FIELDS, decode_entry

    body = decode_entry(data).body
    return [body[f] for f in PAYLOAD_FIELDS if isinstance(body.get(f), bytes)]


def _floor(path: Path, blobs: list[bytes], group: int) -> None:
    with open(path, "wb") as fh:
        fd = fh.fileno()
        for start in range(0, len(blobs), group):
            for blob in blobs[start : start + group]:
                hashlib.sha256(blob).digest()
                os.write(fd, blob)
            os.fsync(fd)


def _measure(entries: int, group: int) -> tuple[float, float, float]:
    """(our seconds, floor seconds, bytes per entry incl. payloads), medians."""
    with scratch("append-") as work:
        ours = median_time(
            lambda: build_ledger(work / "l", entries, group),
            setup=lambda: discard(work / "l"),
        )
        blobs = _same_bytes(work / "l")
        floor = median_time(lambda: _floor(work / "floor.bin", blobs, group))
    return ours, floor, sum(map(len, blobs)) / entries


def rows(entries_grouped: int = 100_000, entries_single: int = 10_000) -> list[Row]:
    """Rows for both durability modes."""
    out = []
    for mode, entries, group in (
        ("append, fsync per entry", entries_single, 1),
        (f"append, group commit ({GROUP})", entries_grouped, GROUP),
    ):
        ours, floor, size = _measure(entries, group)
        ratio = ours / floor
        out.append(Row(
            operation=mode, size=entries, ours=entries / ours, unit="entries/s",
            baselines={"floor": entries / floor}, ratio=ratio,
            target="within 3x of the floor", met=ratio <= 3,
            note=f"ratio = floor rate / our rate; {size:.0f} B per entry incl. payloads",
        ))
    return out
