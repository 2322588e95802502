"""``verify`` peak memory at 10^6 and 10^7 entries, above the interpreter's own.

Issue 25: the library call's peak RSS at 10^6 and at 10^7 entries within 1.5x of each
other, and under 64 MB above the baseline: a fresh interpreter that has imported the
package and what ``verify_ledger`` imports, nothing else (``VmHWM``; median of 3).

Each ledger is the workload of :mod:`benchmarks.workload` written as frames and cached
(:mod:`benchmarks.ledger_cache`); ``verify_ledger(..., payloads=False)`` runs once per size
in a fresh process (10^7 entries take minutes: one run, not a median; a peak is a
maximum, not a spread). Without payload re-hash, as the ``verify``
rows at 10^6: no payload is read, so the 10^7 ledger need not hold them (see
``PAYLOADS_UP_TO`` in :mod:`benchmarks.ledger_cache`).

Run alone: ``python -m benchmarks.run --only verify_memory`` (``--smoke``: 10^4, 10^5).
"""

from __future__ import annotations

import statistics

from benchmarks.common import RUNS, Row, run_fresh, scaled
from benchmarks.ledger_cache import cached_ledger

SIZES = (1_000_000, 10_000_000)
ABOVE_MB = 64
SPREAD = 1.5

IMPORTS = """
import sys
import evidence_ledger
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.verify.audit import verify_ledger
"""

VERIFY = IMPORTS + """
report = verify_ledger(Ledger(sys.argv[1]), payloads=False)
assert report.ok, report.violations[:1]
"""


def rows() -> list[Row]:
    """The two peak-RSS rows (one per size) and their ratio row."""
    small, large = (scaled(n) for n in SIZES)
    base = statistics.median(run_fresh(IMPORTS).rss_mb for _ in range(RUNS))
    peaks: dict[int, float] = {}
    out = []
    for size in (small, large):
        done = run_fresh(VERIFY, str(cached_ledger(size)))
        peaks[size] = done.rss_mb
        above = done.rss_mb - base
        out.append(Row(
            operation="verify peak RSS above the baseline (library call)", size=size,
            ours=above, unit="MB", baselines={"baseline (package imported)": base},
            ratio=done.rss_mb / base, target=f"< {ABOVE_MB} MB above", met=above < ABOVE_MB,
            note=f"peak {done.rss_mb:.0f} MB, one run, {size / done.seconds:,.0f} entries/s, "
                 "no payload re-hash; ratio = peak / baseline",
        ))
    ratio = peaks[large] / peaks[small]
    out.append(Row(
        operation="verify peak RSS, larger log against smaller", size=large, ours=peaks[large],
        unit="MB", baselines={f"at {small:,}": peaks[small]}, ratio=ratio,
        target=f"within {SPREAD}x", met=ratio <= SPREAD,
    ))
    return out
