"""Shared benchmark plumbing: timing (median of runs), peak memory, result rows.

Figures are ratios against a baseline measured in the same run on the same machine;
nothing here asserts a wall-clock limit.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evidence_ledger.format.core import PURE_VARIABLE

RUNS = 3
REPO = Path(__file__).resolve().parent.parent
SCRATCH = REPO / ".cache" / "bench"
"""Where benchmarks build their ledgers (git-ignored, like all of ``.cache/``)."""
CORES = {"native": {PURE_VARIABLE: ""}, "pure": {PURE_VARIABLE: "1"}}
"""Environment of a fresh process (:func:`run_fresh`) per core: the native core where it is
built (whatever the caller's environment says), or the pure-Python core forced. The process
names the core it ran (``evidence_ledger.core_in_use()``): without cargo both are pure."""


def _trash() -> Path:
    return SCRATCH / f"trash-{os.getpid()}"


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A fresh directory under :data:`SCRATCH`, :func:`discard`-ed on exit."""
    SCRATCH.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=SCRATCH))
    try:
        yield path
    finally:
        discard(path)


def discard(path: Path) -> None:
    """Move ``path`` (under :data:`SCRATCH`) to this process's trash: one rename, however
    many files it holds. :func:`empty_trash` deletes the trash later, off the clock:
    unlinking the 10^5-10^6 payload files of a large ledger takes minutes on a disk that
    discards freed blocks, and would otherwise land inside the next timed run."""
    if path.exists():
        _trash().mkdir(parents=True, exist_ok=True)
        path.rename(_trash() / f"{path.name}-{time.monotonic_ns()}")


def empty_trash() -> int | None:
    """Delete the trash in a detached ``rm -rf`` that outlives this process; its pid (None
    when there is nothing to delete)."""
    if not _trash().exists():
        return None
    proc = subprocess.Popen(
        ["rm", "-rf", str(_trash())], start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return proc.pid


@dataclass
class Row:
    """One line of the results table.

    Attributes:
        operation: what was measured.
        size: problem size (entries, items, calls).
        ours: our figure, in ``unit``.
        unit: e.g. ``entries/s``, ``MB``, ``ms``, ``bytes``.
        baselines: name -> figure in the same unit, measured in the same run.
        ratio: ours / first baseline (or the reverse where lower is better; see ``note``).
        target: the target the issue sets, as text.
        met: whether the target is met (None when there is no target).
        note: how to read the ratio, or what was left out.
    """

    operation: str
    size: int
    ours: float
    unit: str
    baselines: dict[str, float] = field(default_factory=dict)
    ratio: float | None = None
    target: str = ""
    met: bool | None = None
    note: str = ""


def median_time(
    fn: Callable[[], Any], runs: int = RUNS, setup: Callable[[], Any] | None = None
) -> float:
    """Median wall time of ``fn()`` over ``runs`` runs, in seconds (``setup`` untimed)."""
    times = []
    for _ in range(runs):
        if setup is not None:
            setup()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def scaled(entries: int) -> int:
    """``entries``, or a hundredth of it (at least 1,000) when ``BENCH_SMOKE=1``: a quick
    run of the harness at small sizes (``python -m benchmarks.run --smoke``)."""
    return max(1_000, entries // 100) if os.environ.get("BENCH_SMOKE") == "1" else entries


@dataclass
class Fresh:
    """What :func:`run_fresh` measured of one fresh process.

    Attributes:
        seconds: wall time of the code (imports included, interpreter start-up not).
        rss_mb: the process's peak RSS (``VmHWM``), MB.
        children_mb: peak RSS of its largest waited-for child (``ru_maxrss`` of
            ``RUSAGE_CHILDREN``), MB; 0 without children.
        output: what the code printed.
    """

    seconds: float
    rss_mb: float
    children_mb: float
    output: str


def run_fresh(code: str, *args: str, env: Mapping[str, str] | None = None) -> Fresh:
    """Run ``python -c code args`` in a fresh process (cwd: the repository) and measure it;
    ``env`` is set over this process's environment (e.g. a :data:`CORES` value).

    Peak RSS is the process's ``VmHWM`` (reset by exec), not its own ``ru_maxrss``, which
    Linux carries over from the forking parent.

    Raises:
        RuntimeError: if the process fails (with the end of its stderr).
    """
    wrapper = (
        "import resource, sys, time\n"
        "start = time.perf_counter()\n"
        f"exec(compile({code!r}, 'bench', 'exec'))\n"
        "elapsed = time.perf_counter() - start\n"
        "hwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM'))\n"
        "kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print('\\nBENCH', elapsed, int(hwm.split()[1]) / 1024, kids / 1024)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", wrapper, *args], capture_output=True, text=True, cwd=REPO,
        env={**os.environ, **(env or {})},
    )
    if done.returncode:
        raise RuntimeError(f"benchmark process failed ({done.returncode}): "
                           + "\n".join(done.stderr.splitlines()[-5:]))
    head, _, last = done.stdout.rpartition("\nBENCH ")
    seconds, rss, children = map(float, last.split())
    return Fresh(seconds, rss, children, head)


def peak_rss_mb(code: str, *args: str) -> tuple[float, float]:
    """Run ``python -c code args`` in a fresh process; return (seconds, peak RSS in MB)
    (see :func:`run_fresh`)."""
    done = run_fresh(code, *args)
    return done.seconds, done.rss_mb


def print_table(rows: list[Row], machine: str) -> None:
    """Print the results as one markdown table (README quotes it)."""
    print(f"machine: {machine}")
    print("| operation | size | ours | baseline(s) | ratio | target | met |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        base = ", ".join(f"{k} {_fmt(v)}" for k, v in r.baselines.items()) or "—"
        ratio = "—" if r.ratio is None else f"{r.ratio:.2f}x"
        met = {None: "—", True: "yes", False: "**no**"}[r.met]
        print(f"| {r.operation} | {r.size:,} | {_fmt(r.ours)} {r.unit} | {base} | {ratio} "
              f"| {r.target or '—'} | {met} |")
    notes = [f"- {r.operation}, {r.size:,}: {r.note}" for r in rows if r.note]
    if notes:
        print("\n" + "\n".join(notes))


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"


def write_results(rows: list[Row], machine: str, path: Path) -> None:
    """Write ``rows`` to ``path`` as JSON."""
    path.write_text(json.dumps({"machine": machine, "rows": [asdict(r) for r in rows]}, indent=2))
