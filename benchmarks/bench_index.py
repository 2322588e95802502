"""Benchmark the DuckDB index: build, no-op check, queries, incremental update, export.

    .venv/bin/python -m benchmarks.bench_index [--entries 1000000] [--dir DIR] [--keep]

Not a test (``make test`` does not run it). :func:`rows` gives the rows for
``benchmarks.run`` over its shared ledgers; run alone, the script builds its own. The
synthetic ledger is written with
:meth:`EvidenceWriter.append` in one ``atomic()`` group per 10k entries, with bodies
built directly (digests stand in for payloads, which the index never reads): call
chains as the recorder writes them (call, decision for gated calls, execution, the
``function_call`` and ``function_call_output`` session items, ``run_end`` every 40
chains) with violations put in on purpose (gated calls run without approval, approvals
never executed, outputs of calls never recorded).

Targets: the index build at 10^6 within 1.5x of its floor with the native core (issue
26), measured in the same run: :func:`build_floor` reads, unpacks, hashes and bulk-loads
the raw entries, with no project code in its pass, no rules and no view columns; a
selective query < 100 ms at 10^6 entries. In ``make bench`` (:func:`rows`) the build
runs on the native core and on the pure-Python core (``EVIDENCE_LEDGER_PURE=1``, one
run, for comparison) against the same floor; every figure is a median (3 runs, the
queries 5) but the export's and the pure build's (one run); run alone, figures are
single wall-clock runs except the queries.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import duckdb
import msgpack
import pyarrow as pa

from benchmarks.common import CORES, RUNS, Fresh, Row, median_time, run_fresh, scaled
from benchmarks.floors import records
from evidence_ledger.format.entries import BODY_FIELDS, decode_entry
from evidence_ledger.format.framing import Record
from evidence_ledger.index.build import CHUNK, update_index
from evidence_ledger.index.export import export_ledger
from evidence_ledger.index.query import run_query
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.tlog.note import Signer

T = TypeVar("T")
GROUP = 10_000
CHAINS_PER_RUN = 40
T0 = 1_741_000_000 * 10**9
SIGNER = Signer.generate("bench.example/index")
"""Signs the exports (the benchmark ledgers have no stored checkpoint to match)."""


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def generate(directory: Path, entries: int) -> int:
    """Append at least ``entries`` entries (whole chains); return how many."""
    writer = EvidenceWriter(Ledger(directory), clock=lambda: 0)
    n = i = 0
    while n < entries:
        with writer.atomic():
            start = n
            while n - start < GROUP and n < entries:
                n += _chain(writer, i, T0 + n * 1_000_000)
                i += 1
    return n


def _chain(w: EvidenceWriter, i: int, t: int) -> int:
    run = f"run-{i // CHAINS_PER_RUN:06d}"
    cid = f"call_{i:09d}"
    ident = {"run_id": run, "scope": [], "call_id": cid}
    args = _digest(f"args {i % 997}")
    gated = i % 2 == 0
    appended = 0

    def add(kind: str, body: dict) -> None:
        nonlocal appended
        unknown = set(body) - set(BODY_FIELDS[kind])
        assert not unknown, unknown
        full = {name: body.get(name) for name in BODY_FIELDS[kind]}  # newer fields: None
        w.append(kind, full, time_ns=t + appended * 1000)
        appended += 1

    if i % 211 != 5:  # every 211th output names a call that was never recorded
        add("call", {**ident, "agent": "billing", "tool": "charge", "args_digest": args,
                     "args_form": "jcs", "args_payload": args, "needs_approval": gated,
                     "response_id": f"resp_{i}"})
    if gated and i % 97 != 0:  # every 97th gated call runs without approval
        add("decision", {**ident, "decision": "approve", "always": False,
                         "approver": f"user{i % 13}@example.com"})
    if i % 101 != 2:  # every 101st approved call is never executed
        add("execution", {**ident, "args_digest": args, "args_form": "jcs",
                          "args_payload": args, "result_digest": _digest(f"result {i}")})
        session = {"run_id": run, "scope": [], "session_id": f"s-{run}", "op": "add"}
        add("session_item", {**session, "item_type": "function_call", "call_id": cid,
                             "item_digest": _digest(f"fc {i}"), "args_digest": args})
        add("session_item", {**session, "item_type": "function_call_output", "call_id": cid,
                             "item_digest": _digest(f"fco {i}"),
                             "output_digest": _digest(f"result {i}")})
    if i % CHAINS_PER_RUN == CHAINS_PER_RUN - 1:
        add("run_end", {"run_id": run, "scope": [], "status": "completed"})
    return appended


def build_floor(ledger: Ledger, target: Path) -> int:
    """The floor of an index build over the same log: per record, read its frame
    (:func:`benchmarks.floors.records`: no project code, so the same floor on either core),
    unpack the MessagePack and take its entry hash; every
    :data:`evidence_ledger.index.build.CHUNK` entries, bulk-load those entries as they are
    into DuckDB (one Arrow table per entry kind) and commit. No canonical-form check, no
    rules, no view columns: the least any index of this log does. The cyclic GC is paused,
    as :func:`update_index` pauses it. Returns the entries loaded (up to a torn tail).

    Raises:
        ValueError: a frame that fails its CRC-32 (the floor reads only intact logs).
    """
    con = duckdb.connect(str(target))
    types: dict[str, pa.DataType] = {}
    pending: dict[str, list[dict]] = {}

    def load() -> None:
        for kind, rows in pending.items():
            types.setdefault(kind, pa.array(rows[:1000]).type)
            con.register("_rows", pa.Table.from_struct_array(pa.array(rows, types[kind])))
            con.execute(f"CREATE TABLE IF NOT EXISTS {kind} AS SELECT * FROM _rows LIMIT 0")
            con.execute(f"INSERT INTO {kind} SELECT * FROM _rows")
            con.unregister("_rows")
        con.execute("COMMIT")
        con.execute("BEGIN TRANSACTION")
        pending.clear()

    n = 0
    enabled = gc.isenabled()
    gc.disable()
    try:
        con.execute("BEGIN TRANSACTION")
        for data in records(ledger.store.path):
            entry = msgpack.unpackb(data)
            entry["hash"] = hashlib.sha256(data).digest()
            pending.setdefault(entry["kind"], []).append(entry)
            n += 1
            if n % CHUNK == 0:
                load()
        load()
    finally:
        con.close()
        if enabled:
            gc.enable()
    return n


def _median_ms(fn: Callable[[], object], runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def _timed(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def run(directory: Path, entries: int) -> list[tuple[str, str, str]]:
    """Run every measurement; return ``(what, figure, target)`` rows."""
    out: list[tuple[str, str, str]] = []
    seconds, made = _timed(lambda: generate(directory, entries))
    ledger = Ledger(directory)
    log_mb = ledger.store.path.stat().st_size / 1e6
    out.append(("generate ledger", f"{made:,} entries, {log_mb:,.1f} MB log.bin in "
                                   f"{seconds:.1f} s", ""))

    sample = [r for _, r in zip(range(50_000), ledger.scan(), strict=False)
              if isinstance(r, Record)]
    decode_s, _ = _timed(lambda: [decode_entry(r.data) for r in sample])
    out.append(("decode_entry alone", f"{len(sample) / decode_s:,.0f} entries/s "
                                      f"({decode_s / len(sample) * 1e6:.1f} us/entry)", ""))

    seconds, _ = _timed(lambda: build_floor(ledger, directory / "floor.duckdb"))
    out.append(("index build floor (build_floor)", f"{made / seconds:,.0f} entries/s", ""))
    seconds, _ = _timed(lambda: update_index(ledger))
    rate = made / seconds
    index_mb = (directory / "index.duckdb").stat().st_size / 1e6
    out.append(("index build (full)", f"{rate:,.0f} entries/s ({seconds:.1f} s; index "
                                      f"{index_mb:,.1f} MB)", ">= 100,000 entries/s"
                + ("  met" if rate >= 100_000 else "  NOT met")))

    out.append(("query, index current: no-op check + tiny SELECT",
                f"{_median_ms(lambda: run_query(ledger, 'SELECT 1')):.1f} ms", ""))
    probe = f"call_{(made // 5 // 2) | 1:09d}"
    selective = (f"SELECT * FROM call_chains WHERE call_id = '{probe}'")
    ms = _median_ms(lambda: run_query(ledger, selective))
    out.append(("selective query on call_chains (one call_id)", f"{ms:.1f} ms",
                "< 100 ms" + ("  met" if ms < 100 else "  NOT met")))
    by_run = "SELECT * FROM calls WHERE run_id = 'run-000123'"
    out.append(("selective query on calls (one run_id)",
                f"{_median_ms(lambda: run_query(ledger, by_run)):.1f} ms", ""))
    gated = ("SELECT run_id, scope, call_id FROM call_chains WHERE needs_approval AND "
             "executed_at IS NOT NULL AND (decision IS NULL OR decided_at > executed_at)")
    found: list[object] = []
    ms = _median_ms(lambda: found.append(run_query(ledger, gated)))
    out.append(("call_chains: gated calls run without approval",
                f"{ms:.1f} ms ({len(found[-1].rows):,} rows)", ""))  # type: ignore[attr-defined]
    statuses = "SELECT status, count(*) FROM call_chains GROUP BY status"
    out.append(("call_chains: count per status (full scan)",
                f"{_median_ms(lambda: run_query(ledger, statuses)):.1f} ms", ""))
    full = "SELECT * FROM call_chains"
    seconds, result = _timed(lambda: run_query(ledger, full))
    out.append(("call_chains: every row into Python",
                f"{seconds * 1000:,.0f} ms ({len(result.rows):,} rows)", ""))

    writer = EvidenceWriter(ledger)
    with writer.atomic():
        for i in range(1000):
            writer.run_end(run_id=f"late-{i}", status="completed", time_ns=T0)
    seconds, _ = _timed(lambda: update_index(ledger))
    out.append(("incremental update, +1,000 entries", f"{seconds:.2f} s (state reload "
                                                      "and save dominate)", ""))

    export_dir = directory / "export"
    seconds, _ = _timed(lambda: export_ledger(ledger, export_dir, "parquet", SIGNER))
    size = sum(p.stat().st_size for p in export_dir.iterdir()) / 1e6
    out.append(("export parquet (index current)", f"{seconds:.1f} s ({size:,.1f} MB)", ""))
    return out


BUILD = """
import sys, time
from pathlib import Path
from evidence_ledger import core_in_use
from evidence_ledger.index.build import update_index
from evidence_ledger.storage.ledger_dir import Ledger
start = time.perf_counter()
update_index(Ledger(sys.argv[1]), Path(sys.argv[2]), rebuild=True)
print(time.perf_counter() - start, core_in_use())
"""

FLOOR = """
import sys, time
from pathlib import Path
from benchmarks.bench_index import build_floor
from evidence_ledger.storage.ledger_dir import Ledger
Path(sys.argv[2]).unlink(missing_ok=True)
start = time.perf_counter()
build_floor(Ledger(sys.argv[1]), Path(sys.argv[2]))
print(time.perf_counter() - start, "build_floor")
"""
"""Each prints the wall seconds of its build alone (imports not counted), then what ran."""

BUILD_RATIO = 1.5
PEAK_MB = 512
FILE_RATIO = 2.0
EXPORT_RUNS = 1
PURE_RUNS = 1
"""Builds on the pure-Python core (a comparison without a target: one, for make bench's
time)."""


def _seconds(build: Fresh) -> tuple[float, str]:
    """(wall seconds, core or "build_floor") that a run of :data:`BUILD` or :data:`FLOOR`
    printed."""
    seconds, what = build.output.strip().splitlines()[-1].split(" ", 1)
    return float(seconds), what


def _builds(directory: Path, index: Path, floor: Path) -> dict[str, list[Fresh]]:
    """:data:`RUNS` floors and as many full builds on the native core, and
    :data:`PURE_RUNS` on the pure-Python core, taking turns, each in a fresh process:
    variant ("floor", "native", "pure") -> its runs."""
    runs: dict[str, list[Fresh]] = {"floor": [], "native": [], "pure": []}
    for turn in range(RUNS):
        runs["floor"].append(run_fresh(FLOOR, str(directory), str(floor)))
        runs["native"].append(run_fresh(BUILD, str(directory), str(index), env=CORES["native"]))
        if turn < PURE_RUNS:
            runs["pure"].append(run_fresh(BUILD, str(directory), str(index), env=CORES["pure"]))
    return runs


def rows(ledgers: dict[int, Path], verify_rates: dict[int, float] | None = None) -> list[Row]:
    """Rows for ``make bench`` (:mod:`benchmarks.run`), per shared ledger: full index
    build on the native core and on the pure-Python core against :func:`build_floor`
    (native and floor medians of 3, each build in a fresh process, taking turns), with the
    verifier's rate over the same log where given, the native build's peak RSS (the
    process and its workers) and index file size against the floor's, a selective query
    (median of 5) and a Parquet export (one run). The index goes to a temporary file, so
    the ledgers stay untouched.

    Args:
        ledgers: entries -> ledger directory.
        verify_rates: entries -> the verifier's entries per CPU-second (native core, no
            payload re-hash) measured in this run by :mod:`benchmarks.bench_verify`; a
            size without one has no "verify" baseline.
    """
    out = []
    for size, directory in sorted(ledgers.items()):
        ledger = Ledger(directory)
        with tempfile.TemporaryDirectory(prefix="bench-index-") as work:
            index = Path(work) / "index.duckdb"
            floor = Path(work) / "floor.duckdb"
            runs = _builds(directory, index, floor)
            floor_s = statistics.median(_seconds(f)[0] for f in runs["floor"])
            big = size >= scaled(1_000_000)
            rate = (verify_rates or {}).get(size)
            verify = {} if rate is None else {"verify (CPU)": rate}
            for variant in ("native", "pure"):
                build_s = statistics.median(_seconds(b)[0] for b in runs[variant])
                core = _seconds(runs[variant][0])[1]
                bar = big and variant == "native" and core == "native core"
                out.append(Row(
                    operation=f"index build (full), {core}", size=size, ours=size / build_s,
                    unit="entries/s", baselines={"build_floor": size / floor_s, **verify},
                    ratio=build_s / floor_s,
                    target=f"native within {BUILD_RATIO}x of build_floor" if bar else "",
                    met=(build_s / floor_s <= BUILD_RATIO) if bar else None,
                    note=f"log.bin {ledger.store.path.stat().st_size / 1e6:,.0f} MB; ratio = "
                    "the floor's rate / ours (build_floor: read, unpack, hash and bulk-load "
                    "the raw entries, no project code in its pass, no rules, one process; "
                    "ours checks records in worker processes); wall time, each build in a "
                    f"fresh process, median of {len(runs[variant])} taking turns with "
                    f"{len(runs['floor'])} floors"
                    + ("; verify = the verifier's rate over the same log (native, no payload "
                       "re-hash, per CPU-second), this run" if verify else ""),
                ))
            builds, floors = runs["native"], runs["floor"]
            peak = max(b.rss_mb + b.children_mb for b in builds)
            worst = max(builds, key=lambda b: b.rss_mb + b.children_mb)
            out.append(Row(
                operation=f"index build peak RSS (process + workers), {_seconds(worst)[1]}",
                size=size, ours=peak,
                unit="MB", baselines={"floor": max(f.rss_mb for f in floors)},
                ratio=peak / max(f.rss_mb for f in floors),
                target=f"< {PEAK_MB} MB" if big else "", met=(peak < PEAK_MB) if big else None,
                note=f"the process's VmHWM {worst.rss_mb:.0f} MB + its largest worker's "
                f"ru_maxrss {worst.children_mb:.0f} MB (RUSAGE_CHILDREN: the largest child, "
                "not the sum of several), the worst of the runs",
            ))
            index_mb, floor_mb = index.stat().st_size / 1e6, floor.stat().st_size / 1e6
            out.append(Row(
                operation="index file size", size=size, ours=index_mb, unit="MB",
                baselines={"floor": floor_mb}, ratio=index_mb / floor_mb,
                target=f"< {FILE_RATIO:g}x the floor's" if big else "",
                met=(index_mb / floor_mb < FILE_RATIO) if big else None,
                note="floor: build_floor's DuckDB file of the raw entries",
            ))
            sql = f"SELECT * FROM call_chains WHERE call_id = 'call_{size // 10:09d}'"
            query_s = median_time(lambda: run_query(ledger, sql, index), 5)  # noqa: B023
            out.append(Row(
                operation="selective query (call_chains, one call_id)", size=size,
                ours=query_s * 1000, unit="ms", target="< 100 ms" if big else "",
                met=(query_s < 0.1) if big else None,
                note="in-process: freshness check, open, query, fetch",
            ))
            export_dir = Path(work) / "export"
            export_s = median_time(
                lambda: export_ledger(
                    ledger, export_dir, "parquet", SIGNER, index=index),  # noqa: B023
                EXPORT_RUNS,
                setup=lambda: shutil.rmtree(export_dir, ignore_errors=True),  # noqa: B023
            )
            mb = sum(p.stat().st_size for p in export_dir.iterdir()) / 1e6
            out.append(Row(
                operation="export parquet (index current)", size=size, ours=mb / export_s,
                unit="MB/s", note=f"{mb:,.1f} MB of Parquet in {export_s:.1f} s, one run "
                "(no target; kept short for make bench's time)",
            ))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, help="where to build (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the ledger afterwards")
    args = parser.parse_args(argv)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="bench-index-"))
    if (directory / "log.bin").exists():
        print(f"{directory} already holds a ledger", file=sys.stderr)
        return 2
    try:
        rows = run(directory, args.entries)
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    width = max(len(r[0]) for r in rows)
    print(f"bench_index, {args.entries:,} entries")
    for what, figure, target in rows:
        print(f"  {what:<{width}}  {figure}" + (f"   [target {target}]" if target else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
