"""Hostile input costs no memory in proportion to its size: each reader streams and checks
its limit before it reads past it. Each case runs in a fresh process and compares its peak
RSS with the same process given a small, valid input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.workload import build_ledger
from tests.helpers import DATA, ingest, run_cli

_PEAK = """
import sys
from pathlib import Path
{body}
print(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM")))
"""


def peak_rss_kb(body: str, *args: str) -> tuple[int, str]:
    """Peak RSS (KiB, ``VmHWM``: ``ru_maxrss`` may count the parent's before ``exec``) of a
    fresh interpreter that runs ``body`` (``sys.argv[1:]`` = ``args``), and the last line
    it printed before the figure."""
    done = subprocess.run([sys.executable, "-c", _PEAK.format(body=body), *args],
                          capture_output=True, text=True, timeout=600, check=True)
    *said, peak = done.stdout.strip().splitlines()
    return int(peak), said[-1] if said else ""


_INGEST = """
from evidence_ledger import Ledger, LedgerError
try:
    Ledger(sys.argv[1], create=True).ingest(sys.argv[2])
    print("ingested")
except LedgerError as exc:
    print(exc)
"""


@pytest.mark.parametrize(("name", "fill", "expected"), [
    ("one 256 MiB line", None, "longer than the limit of 16777216 bytes"),
    ("32 MiB of blank lines", b"\n", "no events"),
])
def test_ingest_reads_a_huge_input_in_bounded_memory(tmp_path, name, fill, expected):
    small, huge = tmp_path / "small.jsonl", tmp_path / "huge.jsonl"
    small.write_bytes((DATA / "rules" / "valid.jsonl").read_bytes())
    if fill is None:
        with open(huge, "wb") as fh:  # zeros, no newline: one line (sparse, read as zeros)
            fh.truncate(256 << 20)
    else:
        huge.write_bytes(fill * (32 << 20))
    base, said = peak_rss_kb(_INGEST, str(tmp_path / "L1"), str(small))
    assert said == "ingested"
    peak, said = peak_rss_kb(_INGEST, str(tmp_path / "L2"), str(huge))
    assert expected in said, said
    assert peak - base < 48 << 10, (name, base, peak)  # was the input's size, or more


_VERIFY = """
import time
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.verify.audit import verify_ledger
report = verify_ledger(Ledger(Path(sys.argv[1])), payloads=False)
print(report.ok, report.tree_size, any("torn tail" in n for n in report.notices))
"""


_NEXT_WRITE = """
from evidence_ledger.record.writer import EvidenceWriter
writer = EvidenceWriter(sys.argv[1])
writer.run_end(run_id="next", status="completed")
print(writer.size)
"""


def test_verify_of_a_log_with_a_1_gib_zero_tail_holds_its_memory(tmp_path):
    """A 10^5-entry log, then the same log with 1 GiB of zeros after it (sparse, as a
    crash on some file systems leaves it): ``verify``'s peak RSS within 1.2x, and the
    next writer's, which cuts the tail into ``torn/`` (it read it whole before)."""
    build_ledger(tmp_path / "L", 100_000)
    written, said = peak_rss_kb(_NEXT_WRITE, str(tmp_path / "L"))
    assert said == "100001"
    base, said = peak_rss_kb(_VERIFY, str(tmp_path / "L"))
    assert said == "True 100001 False"
    with open(tmp_path / "L" / "log.bin", "r+b") as log:
        log.truncate(log.seek(0, 2) + (1 << 30))
    peak, said = peak_rss_kb(_VERIFY, str(tmp_path / "L"))
    assert said == "True 100001 True"
    assert peak <= 1.2 * base, (base, peak)
    cut, said = peak_rss_kb(_NEXT_WRITE, str(tmp_path / "L"))  # the next writer cuts it
    assert said == "100002" and cut <= 1.2 * written, (written, cut)
    (torn,) = (tmp_path / "L" / "torn").iterdir()
    kept = torn.stat()
    assert kept.st_size == 1 << 30 and kept.st_blocks * 512 < 1 << 20  # kept, as holes


def test_the_peak_helper_sees_memory_a_process_holds():
    """The helper above can fail: a process that holds 64 MiB peaks that much higher."""
    base, _ = peak_rss_kb("print('small')")
    peak, said = peak_rss_kb("held = bytearray(64 << 20)\nheld[::4096] = b'x' * (16 << 10)\n"
                             "print('big')")
    assert said == "big" and peak - base >= 60 << 10, (base, peak)


_VERIFY_EXPORT = """
from evidence_ledger import LedgerError, verify_export
try:
    check = verify_export(sys.argv[1], sys.argv[2])
    print(check.ok, *check.problems, sep="|")
except LedgerError as exc:
    print(exc)
"""


def _keyed_export(tmp_path) -> tuple[Path, str]:
    """An export (JSON Lines) of a small ledger and its verifier key."""
    ingest(tmp_path / "L")
    key = tmp_path / "k.key"
    vkey = run_cli("keygen", "--origin", "example.com/log", "--out", str(key)).out.strip()
    done = run_cli("export", "--ledger", str(tmp_path / "L"), "--format", "jsonl", "--out",
                   str(tmp_path / "out"), "--key", str(key))
    assert done.code == 0, done.err
    return tmp_path / "out", vkey


def test_verify_export_refuses_a_huge_manifest_unread(tmp_path):
    """Regression (hostile-input audit): ``manifest.json`` was read whole, whatever its
    size."""
    out, vkey = _keyed_export(tmp_path)
    with open(out / "manifest.json", "wb") as fh:
        fh.truncate(512 << 20)  # sparse
    peak, said = peak_rss_kb(_VERIFY_EXPORT, str(out), vkey)
    assert "larger than the largest export manifest" in said, said
    assert peak < 256 << 10, peak


def test_verify_export_streams_the_entries_file(tmp_path):
    """``entries.bin`` is hashed and scanned 1 MiB at a time: 512 MiB more of it (zeros,
    as a torn tail) costs no memory."""
    out, vkey = _keyed_export(tmp_path)
    base, said = peak_rss_kb(_VERIFY_EXPORT, str(out), vkey)
    assert said == "True", said
    with open(out / "entries.bin", "r+b") as fh:
        fh.truncate(fh.seek(0, 2) + (512 << 20))  # sparse
    peak, said = peak_rss_kb(_VERIFY_EXPORT, str(out), vkey)
    assert said.startswith("False|entries.bin: SHA-256 ") and said.endswith(
        f"|entries.bin: {512 << 20} bytes after its last whole entry"), said
    assert peak <= 1.2 * base, (base, peak)
