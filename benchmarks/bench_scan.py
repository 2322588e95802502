"""Benchmark: ``scan_store`` over 10^5 session items (target: under 2 s each).

Builds, in a temporary directory, stores written the way the SDK writes them
(``SQLiteSession.add_items``, file-backed) and a JSON Lines dump of the same items, then
times reading + scanning (median of ``--repeat`` runs):

- ``sqlite, 1 session``: one history of N items;
- ``sqlite, N/100 sessions``: N/100 histories of 100 items;
- ``jsonl, 1 session``: the dump of the first store.

Items cycle user message / function_call / function_call_output / assistant message,
with one orphan output every 1000 items (so findings are built too).

Run:  OPENAI_AGENTS_DISABLE_TRACING=1 .venv/bin/python benchmarks/bench_scan.py [--items N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import SQLiteSession

from benchmarks.common import RUNS, Row
from evidence_ledger.sessions.report import scan_store

TARGET_S = 2.0


def history(n: int, tag: str) -> list[dict[str, Any]]:
    """``n`` items: turns of user / call / output / reply; every 1000th item an orphan."""
    items: list[dict[str, Any]] = []
    for i in range(n):
        turn, step = divmod(i, 4)
        call_id = f"call_{tag}_{turn:08d}"
        if i % 1000 == 999:
            items.append({"type": "function_call_output", "call_id": f"orphan_{tag}_{i}",
                          "output": "updated"})
        elif step == 0:
            items.append({"role": "user", "content": f"please look up record {turn}"})
        elif step == 1:
            items.append({"type": "function_call", "call_id": call_id, "name": "lookup",
                          "arguments": json.dumps({"key": f"k{turn}"}), "id": f"fc_{call_id}"})
        elif step == 2:
            items.append({"type": "function_call_output", "call_id": call_id,
                          "output": f"record k{turn}: " + "x" * 64})
        else:
            items.append({"type": "message", "role": "assistant", "status": "completed",
                          "id": f"msg_{turn}", "content": [
                              {"type": "output_text", "text": f"k{turn} is set",
                               "annotations": []}]})
    return items


async def build_sqlite(path: Path, sessions: dict[str, list[Any]]) -> None:
    for session_id, items in sessions.items():
        session = SQLiteSession(session_id, str(path))
        try:
            await session.add_items(items)
        finally:
            session.close()


def median_of(repeat: int, path: Path) -> tuple[float, int, int]:
    """(median seconds of ``repeat`` scans, items scanned, findings)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        report = scan_store(path)
        times.append(time.perf_counter() - start)
    items = sum(len(s.items) for s in report.contents.sessions)
    return statistics.median(times), items, len(report.all_findings)


def rows(n: int = 100_000, repeat: int = RUNS) -> list[Row]:
    """Rows for ``make bench``: a scan of ``n`` items from a file-backed SQLiteSession
    store (one session) and from a JSON Lines dump of the same items."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        store, dump = Path(tmp, "one.db"), Path(tmp, "one.jsonl")
        single = history(n, "s")
        asyncio.run(build_sqlite(store, {"s": single}))
        dump.write_text("".join(json.dumps({"session_id": "s", "item": item}) + "\n"
                                for item in single), "utf-8")
        for name, path in (("session scan, SQLiteSession store", store),
                           ("session scan, JSONL dump", dump)):
            seconds, items, findings = median_of(repeat, path)
            out.append(Row(operation=name, size=items, ours=seconds, unit="s",
                           target=f"< {TARGET_S:g} s", met=seconds < TARGET_S,
                           note=f"{findings} findings" if name.endswith("store") else ""))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n = args.items
    with tempfile.TemporaryDirectory() as tmp:
        one, many, dump = Path(tmp, "one.db"), Path(tmp, "many.db"), Path(tmp, "one.jsonl")
        single = history(n, "s")
        asyncio.run(build_sqlite(one, {"s": single}))
        asyncio.run(build_sqlite(many, {f"s{k:05d}": history(100, f"s{k}")
                                        for k in range(max(1, n // 100))}))
        dump.write_text("".join(json.dumps({"session_id": "s", "item": item}) + "\n"
                                for item in single), "utf-8")
        worst = 0.0
        for name, path in (("sqlite, 1 session", one),
                           (f"sqlite, {max(1, n // 100)} sessions", many),
                           ("jsonl, 1 session", dump)):
            seconds, items, findings = median_of(args.repeat, path)
            worst = max(worst, seconds)
            print(f"{name:<24} {items:>8} items  {findings:>5} findings  {seconds:6.3f} s  "
                  f"({items / seconds:,.0f} items/s)")
    verdict = "OK" if worst < TARGET_S else "SLOW"
    print(f"{verdict}: worst {worst:.3f} s (target < {TARGET_S} s)")
    return 0 if worst < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
