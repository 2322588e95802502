"""``verify`` against its minimal floor, native core and pure-Python core side by side.

Floor: :func:`benchmarks.floors.verify_floor`, no project code: read ``log.bin`` 1 MiB at
a time, check each frame, unpack the MessagePack, take the entry hash, the leaf hash and
the interior hashes of the tree's compact range. Ours: the library call
``verify_ledger(..., payloads=False)`` (integrity, canonical form, chain, tree, stored
checkpoints, all rules) on the native core and, at 10^6, on the pure-Python core
(``EVIDENCE_LEDGER_PURE=1``); at 10^5 also with every payload file re-hashed (native). At
10^6 also the native call with the rule engine switched off (its ``feed`` a no-op): the
part of verify the native core covers (frames, canonical form and entry checks, hashes,
chain, tree), so the rows show how the gap to the floor splits.

Each figure is the CPU time (``time.process_time``) of the call alone, in a fresh
process; the variants take turns, :data:`~benchmarks.common.RUNS` rounds, medians. Every
row names the core its process reported. Issue 26's targets, at 10^6: the native core
within 1.5x of the floor, the pure core no worse than 4.1x. The peak RSS row is the native
runs' ``VmHWM`` against the floor's.
"""

from __future__ import annotations

import shutil
import statistics
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import CORES, RUNS, Fresh, Row, run_fresh, scaled, scratch

FLOOR = """
import sys, time
from pathlib import Path
from benchmarks.floors import verify_floor
start = time.process_time()
verify_floor(Path(sys.argv[1]) / "log.bin")
print(time.process_time() - start, "minimal floor")
"""

OURS = """
import sys, time
from evidence_ledger import core_in_use
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.verify.audit import verify_ledger
if sys.argv[3:] == ["no rules"]:  # what verify costs without the rule engine
    from evidence_ledger.verify.rules import RuleEngine
    RuleEngine.feed = lambda self, entry: None
start = time.process_time()
report = verify_ledger(Ledger(sys.argv[1]), payloads=sys.argv[2] == "1")
assert report.ok, report.violations[:1]
print(time.process_time() - start, core_in_use())
"""
"""Each prints the CPU seconds of its work alone (imports not counted), then what ran."""

NATIVE_RATIO = 1.5
PURE_RATIO = 4.1
PEAK_MB = 256
BARE = "verify, no payload re-hash"


def _cpu(run: Fresh) -> tuple[float, str]:
    """(CPU seconds, core) that a run of :data:`FLOOR` or :data:`OURS` printed."""
    seconds, core = run.output.strip().splitlines()[-1].split(" ", 1)
    return float(seconds), core


def _verify(path: Path, core: str = "native", payloads: bool = False,
            rules: bool = True) -> Fresh:
    return run_fresh(OURS, str(path), "1" if payloads else "0",
                     *(() if rules else ("no rules",)), env=CORES[core])


def zero_tail_rows(path: Path, size: int) -> list[Row]:
    """``verify`` (no payload re-hash, native core) of the log at ``path`` alone and with
    1 GiB of zeros after it (a sparse tail, and one written out): CPU seconds, medians of
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
                seconds.append(_cpu(_verify(folder))[0])
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


def _target(variant: str, core: str, big: bool) -> tuple[str, float | None]:
    """(target text, the ratio it allows) of a row: at 10^6 only, and the native target
    only for a process that did run the native core."""
    if not big or variant in ("all checks", "no rules"):
        return "", None
    if variant == "pure":
        return f"pure no worse than {PURE_RATIO}x the floor", PURE_RATIO
    if core == "native core":
        return f"native within {NATIVE_RATIO}x of the floor", NATIVE_RATIO
    return "", None


def rows(ledgers: dict[int, Path]) -> list[Row]:
    """Rows per ledger size: verify (no payload re-hash) on each core against the minimal
    floor, with payload re-hash at 10^5, and peak RSS."""
    out = []
    for size, path in sorted(ledgers.items()):
        big = size >= scaled(1_000_000)
        plan: dict[str, Callable[[], Fresh]] = {
            "floor": lambda: run_fresh(FLOOR, str(path)),  # noqa: B023
            "native": lambda: _verify(path),  # noqa: B023
        }
        if big:  # the pure path at 10^6 only (issue 26), to keep make bench's time
            plan["pure"] = lambda: _verify(path, "pure")  # noqa: B023
            plan["no rules"] = lambda: _verify(path, rules=False)  # noqa: B023
        else:  # re-hashing every payload file (4 per call chain) is I/O-bound: 10^5 only
            plan["all checks"] = lambda: _verify(path, payloads=True)  # noqa: B023
        runs: dict[str, list[Fresh]] = {variant: [] for variant in plan}
        for _ in range(RUNS):
            for variant, run in plan.items():
                runs[variant].append(run())
        cpu = {variant: statistics.median(_cpu(r)[0] for r in done)
               for variant, done in runs.items()}
        floor_rate = size / cpu["floor"]
        for variant in [v for v in plan if v != "floor"]:
            core = _cpu(runs[variant][0])[1]
            ratio = cpu[variant] / cpu["floor"]
            target, allowed = _target(variant, core, big)
            label = {"all checks": "verify, all checks",
                     "no rules": f"{BARE}, the rule engine switched off"}.get(variant, BARE)
            out.append(Row(
                operation=f"{label}, {core}, CPU", size=size, ours=size / cpu[variant],
                unit="entries/CPU-s", baselines={"minimal floor": floor_rate}, ratio=ratio,
                target=target, met=None if allowed is None else ratio <= allowed,
                note="ratio = floor rate / our rate; CPU seconds of the library call in a "
                f"fresh process, median of {RUNS} taking turns with the floor; 10^8 entries "
                f"at this rate: {10**8 * cpu[variant] / size / 60:,.0f} CPU-minutes",
            ))
        native = [r.rss_mb for variant in ("native", "all checks") for r in runs.get(variant, [])]
        floor_mb = max(r.rss_mb for r in runs["floor"])
        out.append(Row(
            operation=f"verify peak RSS, {_cpu(runs['native'][0])[1]}", size=size,
            ours=max(native), unit="MB", baselines={"minimal floor": floor_mb},
            ratio=max(native) / floor_mb, target=f"< {PEAK_MB} MB at 10^6" if big else "",
            met=(max(native) < PEAK_MB) if big else None,
        ))
        if size == 100_000:
            out += zero_tail_rows(path, size)
    return out


def native_rates(rows: list[Row]) -> dict[int, float]:
    """Entries per CPU-second of ``verify`` (no payload re-hash) on the native core, per
    size, from :func:`rows` (what the index suite compares its build with)."""
    return {r.size: r.ours for r in rows if r.operation == f"{BARE}, native core, CPU"}
