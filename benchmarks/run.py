"""``make bench``: every benchmark in one run, one table, ``benchmarks/results.json``.

Ledgers of 10^4, 10^5 and 10^6 realistic entries (see :mod:`benchmarks.workload`) are
built once and shared, so growth with n shows across rows. Each figure is a median of
at least 3 runs; every ratio compares figures measured in this same run.

Usage: python -m benchmarks.run [--max-entries N] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks import (
    bench_append,
    bench_bundle,
    bench_guard,
    bench_index,
    bench_proofs,
    bench_recording,
    bench_scan,
    bench_verify,
)
from benchmarks.common import REPO, Row, empty_trash, print_table, scratch, write_results
from benchmarks.workload import build_ledger


def machine() -> str:
    """One line naming the machine the figures come from."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}")


def main(argv: list[str] | None = None) -> int:
    """Run the suites, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-entries", type=int, default=1_000_000)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--sizes", type=int, nargs="*", default=None,
                        help="ledger sizes to build (default 10^4, 10^5, 10^6 up to --max-entries)")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    finally:
        pid = empty_trash()
        if pid:
            print(f"deleting the benchmark ledgers in the background (rm pid {pid})",
                  file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    sizes = args.sizes or [n for n in (10_000, 100_000, 1_000_000) if n <= args.max_entries]
    rows: list[Row] = []
    with scratch("run-") as work:
        ledgers: dict[int, Path] = {}
        for size in sizes:
            start = time.perf_counter()
            ledgers[size] = build_ledger(work / f"l{size}", size).ledger.directory
            print(f"built a {size:,}-entry ledger in {time.perf_counter() - start:.0f} s",
                  file=sys.stderr)
        suites: dict[str, Callable[[], list[Row]]] = {
            "append": lambda: bench_append.rows(),
            "verify": lambda: bench_verify.rows(ledgers),
            "proofs": lambda: bench_proofs.rows({n: p for n, p in ledgers.items() if n >= 100_000}),
            "recording": bench_recording.rows,
            "guard": bench_guard.rows,
            "index": lambda: bench_index.rows(
                {n: p for n, p in ledgers.items() if n >= 100_000},
                {r.size: r.ours for r in rows if r.operation == "verify, no payload re-hash"},
            ),
            "bundle": lambda: bench_bundle.rows(ledgers),
            "scan": bench_scan.rows,
        }
        for name, suite in suites.items():
            if args.only and name not in args.only:
                continue
            start = time.perf_counter()
            rows += suite()
            print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
        host = machine()
        print_table(rows, host)
        write_results(rows, host, REPO / "benchmarks" / "results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
