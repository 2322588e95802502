"""``make bench``: every benchmark in one run, one table, ``benchmarks/results.json``.

Ledgers of 10^5 and 10^6 realistic entries (see :mod:`benchmarks.workload`) are shared
by the suites, so growth with n shows across rows: each is a copy, made when the first
suite that needs it runs, of a ledger written as frames and cached across runs
(:mod:`benchmarks.ledger_cache`: the writer's entries byte for byte but for their times,
payloads through the payload store). ``verify_memory`` reads cached ledgers of 10^6 and
10^7 entries in place. Each figure is a median of at
least 3 runs unless its note says otherwise; every ratio compares figures measured in
this same run.

Usage: python -m benchmarks.run [--max-entries N] [--sizes N ...] [--only SUITE ...]
[--smoke]. ``--smoke`` runs every suite at a hundredth of its sizes (a check of the
harness, not a measurement).
"""

from __future__ import annotations

import argparse
import dataclasses
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
    bench_verify_memory,
)
from benchmarks.common import (
    REPO,
    SCRATCH,
    Row,
    empty_trash,
    print_table,
    scaled,
    scratch,
    write_results,
)
from benchmarks.ledger_cache import working_copy


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
    parser.add_argument("--only", nargs="*", default=None, choices=SUITES, metavar="SUITE",
                        help=f"run only these suites, of: {', '.join(SUITES)}")
    parser.add_argument("--sizes", type=int, nargs="*", default=None,
                        help="shared ledger sizes (default 10^5, 10^6 up to --max-entries)")
    parser.add_argument("--smoke", action="store_true",
                        help="every size divided by 100 (sets BENCH_SMOKE=1): a harness check")
    args = parser.parse_args(argv)
    if args.smoke:
        os.environ["BENCH_SMOKE"] = "1"
    try:
        return _run(args)
    finally:
        pid = empty_trash()
        if pid:
            print(f"deleting the benchmark ledgers in the background (rm pid {pid})",
                  file=sys.stderr)


SUITES = ("append", "verify", "verify_memory", "proofs", "inclusion_cli", "recording",
          "guard", "index", "bundle", "scan")


def _run(args: argparse.Namespace) -> int:
    sizes = args.sizes or [scaled(n) for n in (100_000, 1_000_000)
                           if scaled(n) <= args.max_entries]
    rows: list[Row] = []
    with scratch("run-") as work:
        built: dict[int, Path] = {}

        def ledgers(smallest: int = 0) -> dict[int, Path]:
            """The shared ledgers of at least ``smallest`` entries, built on first use."""
            for size in sizes:
                if size >= smallest and size not in built:
                    start = time.perf_counter()
                    built[size] = working_copy(size, work / f"l{size}")
                    print(f"copied a cached {size:,}-entry ledger in "
                          f"{time.perf_counter() - start:.0f} s", file=sys.stderr)
            return {n: p for n, p in built.items() if n >= smallest}

        largest = max(sizes)
        suites: dict[str, Callable[[], list[Row]]] = {
            "append": lambda: bench_append.rows(),
            "verify": lambda: bench_verify.rows(ledgers()),
            "verify_memory": bench_verify_memory.rows,
            "proofs": lambda: bench_proofs.rows(ledgers(largest)),
            "inclusion_cli": lambda: bench_proofs.cli_rows(largest, ledgers(largest)[largest]),
            "recording": bench_recording.rows,
            "guard": bench_guard.rows,
            "index": lambda: bench_index.rows(ledgers(largest), bench_verify.native_rates(rows)),
            "bundle": lambda: bench_bundle.rows(ledgers()),
            "scan": lambda: bench_scan.rows(scaled(100_000)),
        }
        assert tuple(suites) == SUITES
        for name, suite in suites.items():
            if args.only and name not in args.only:
                continue
            start = time.perf_counter()
            rows += suite()
            print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
        host = machine()
        if args.smoke:  # sizes a hundredth of the targets': nothing is judged
            print("smoke run (--smoke): every size a hundredth of make bench's; the targets "
                  "are not judged", file=sys.stderr)
            rows = [dataclasses.replace(r, met=None, target=f"({r.target}: not judged)"
                                        if r.target else "") for r in rows]
        print_table(rows, host)
        write_results(rows, host, SCRATCH / "results-smoke.json" if args.smoke
                      else REPO / "benchmarks" / "results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
