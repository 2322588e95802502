"""Full ``verify`` against the floor, with peak memory, at 10^5 and 10^6 entries.

Floor: read the same log, and per record: check the frame, decode the MessagePack,
re-encode it for the canonical-form check, and take the two hashes (entry hash and
leaf hash), with no rules. Ours: everything ``evidence-ledger verify`` does (integrity,
chain, tree, stored checkpoints, all rules), with and without re-hashing payload files.
Each figure runs in a fresh process (peak RSS is that process's ru_maxrss).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.common import RUNS, Row, peak_rss_mb, scratch

FLOOR = """
import hashlib, sys, msgpack
from evidence_ledger.storage.log_store import FileLogStore
from pathlib import Path
n = 0
for item in FileLogStore(Path(sys.argv[1])).scan():
    data = item.data
    value = msgpack.unpackb(data, raw=False)
    assert msgpack.packb(value, use_bin_type=True) == data
    hashlib.sha256(data).digest(); hashlib.sha256(b"\\0" + data).digest()
    n += 1
"""

OURS = """
import sys
from evidence_ledger.verify.audit import verify_ledger
from evidence_ledger.storage.ledger_dir import Ledger
report = verify_ledger(Ledger(sys.argv[1]), payloads=sys.argv[2] == "1")
assert report.ok, report.violations[:1]
"""


CPU = """
import sys, time
from evidence_ledger.verify.audit import verify_ledger
from evidence_ledger.storage.ledger_dir import Ledger
start = time.process_time()
report = verify_ledger(Ledger(sys.argv[1]), payloads=False)
assert report.ok, report.violations[:1]
print(time.process_time() - start)
"""


def _cpu_seconds(path: Path) -> float:
    done = subprocess.run([sys.executable, "-c", CPU, str(path)], capture_output=True,
                          text=True, check=True)
    return float(done.stdout.split()[-1])


def zero_tail_rows(path: Path, size: int) -> list[Row]:
    """``verify`` (no payload re-hash) of the log at ``path`` alone and with 1 GiB of
    zeros after it (a sparse tail, and one written out): CPU seconds, medians of
    interleaved runs; the log is copied, the ledger at ``path`` left as it is."""
    with scratch("zero-tail-") as work:
        plain, sparse, written = work / "plain", work / "sparse", work / "written"
        for folder in (plain, sparse, written):
            folder.mkdir()
            shutil.copyfile(path / "log.bin", folder / "log.bin")
        with open(sparse / "log.bin", "r+b") as log:
            log.truncate(log.seek(0, 2) + (1 << 30))
        with open(written / "log.bin", "ab") as log:
            for _ in range(1024):
                log.write(bytes(1 << 20))
        times: dict[Path, list[float]] = {plain: [], sparse: [], written: []}
        for _ in range(RUNS):
            for folder, seconds in times.items():
                seconds.append(_cpu_seconds(folder))
        base = statistics.median(times[plain])
        out = []
        for label, folder in (("sparse", sparse), ("written out", written)):
            ours = statistics.median(times[folder])
            out.append(Row(
                operation=f"verify with a 1 GiB zero tail ({label}), CPU", size=size,
                ours=ours, unit="s", baselines={"same log, no tail": base},
                ratio=ours / base, target="within 1.5x", met=ours / base <= 1.5,
                note="no payload re-hash; the tail is recognised a read at a time "
                     "(holes skipped with SEEK_DATA)",
            ))
        return out


def _median(code: str, *args: str) -> tuple[float, float]:
    runs = [peak_rss_mb(code, *args) for _ in range(RUNS)]
    return statistics.median(t for t, _ in runs), max(m for _, m in runs)


def rows(ledgers: dict[int, Path]) -> list[Row]:
    """Rows per ledger size: verify with payload re-hash, without, and peak RSS."""
    out = []
    for size, path in sorted(ledgers.items()):
        floor_s, floor_mb = _median(FLOOR, str(path))
        bare_s, bare_mb = _median(OURS, str(path), "0")
        # re-hashing every payload file (4 per call chain) is I/O-bound: measured up to 10^5
        # only, to keep `make bench` within its time budget
        full_s, full_mb = _median(OURS, str(path), "1") if size <= 100_000 else (0.0, 0.0)
        target = "within 2x of the floor" if size >= 1_000_000 else ""
        for label, seconds in (
            ("verify, all checks", full_s), ("verify, no payload re-hash", bare_s)
        ):
            if not seconds:
                continue
            ratio = seconds / floor_s
            out.append(Row(
                operation=label, size=size, ours=size / seconds, unit="entries/s",
                baselines={"floor": size / floor_s}, ratio=ratio, target=target,
                met=(ratio <= 2) if target else None,
                note="ratio = floor rate / our rate" if label.endswith("checks") else "",
            ))
        out.append(Row(
            operation="verify peak RSS", size=size, ours=max(full_mb, bare_mb), unit="MB",
            baselines={"floor": floor_mb}, ratio=max(full_mb, bare_mb) / floor_mb,
            target="< 256 MB at 10^6" if size >= 1_000_000 else "",
            met=(max(full_mb, bare_mb) < 256) if size >= 1_000_000 else None,
        ))
        if size == 100_000:
            out += zero_tail_rows(path, size)
    return out
