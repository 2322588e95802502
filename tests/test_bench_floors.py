"""The benchmarks' minimal floors do the work they stand for: the verify floor reads every
entry of a log and reaches the verifier's own Merkle root, stops at a torn tail as the
verifier does, and refuses damage; the index build floor loads every entry. Neither
imports the package (a floor must not move with the core in use)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench_index import build_floor
from benchmarks.floors import verify_floor
from benchmarks.ledger_cache import write
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.verify.audit import verify_ledger


def _ledger(tmp_path: Path, entries: int) -> Path:
    write(tmp_path / "ledger", entries, stored_up_to=0)
    return tmp_path / "ledger"


@pytest.mark.parametrize("entries", [1, 2, 7, 64, 301])
def test_verify_floor_reaches_the_verifiers_root(tmp_path: Path, entries: int) -> None:
    path = _ledger(tmp_path, entries)
    report = verify_ledger(Ledger(path), payloads=False)
    assert report.ok
    assert verify_floor(path / "log.bin") == (entries, report.root_hash)


def test_verify_floor_stops_at_a_torn_tail(tmp_path: Path) -> None:
    path = _ledger(tmp_path, 50)
    whole = verify_floor(path / "log.bin")
    with open(path / "log.bin", "ab") as log:
        log.write((path / "log.bin").read_bytes()[:40])  # a header and part of a record
    assert verify_floor(path / "log.bin") == whole == (50, verify_ledger(
        Ledger(path), payloads=False).root_hash)


@pytest.mark.parametrize(("offset", "message"), [
    (1, "a frame header fails its CRC-32"),  # the first frame's length word
    (20, "a record fails its CRC-32"),  # inside the first record
])
def test_verify_floor_refuses_damage(tmp_path: Path, offset: int, message: str) -> None:
    log = _ledger(tmp_path, 5) / "log.bin"
    data = bytearray(log.read_bytes())
    data[offset] ^= 0x01
    log.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=message):
        verify_floor(log)


def test_build_floor_loads_every_entry(tmp_path: Path) -> None:
    path = _ledger(tmp_path, 301)
    assert build_floor(Ledger(path), tmp_path / "floor.duckdb") == 301


def test_the_floors_import_no_project_code() -> None:
    code = ("import sys, benchmarks.floors; "
            "print(sorted(m for m in sys.modules if m.startswith('evidence_ledger')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parent.parent)
    assert done.stdout.strip() == "[]"
