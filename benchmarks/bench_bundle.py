"""Proof-bundle size for one call chain in a large ledger (digests only), and its cost.

Builds the synthetic ledger of :mod:`benchmarks.workload` (call, approval, execution, two
session items per chain; a ``run_end`` every 40 chains), then proves one gated call chain
from the middle of the log with ``build_bundle`` (signing a checkpoint, running the full
verifier, selecting the chain's closure, proving each entry) and verifies the bundle.

Target (issue 4): the bundle of one call chain at 10^6 entries is under 16 KiB. Baseline:
the chain's entry bytes alone (what any bundle must carry), so the ratio is the overhead of
proofs, subjects, checkpoint, verdict, JSON and DSSE base64. ``prove`` is timed as the
median of 3 up to :data:`TIMED_UP_TO` entries, ``verify-proof`` as the median of 21 (the
ledger build is not timed).

Run: ``python -m benchmarks.bench_bundle [--entries 100000 1000000]``.
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path

from benchmarks.common import RUNS, Row, empty_trash, median_time, print_table, scratch
from benchmarks.workload import CHAINS_PER_RUN, build_ledger
from evidence_ledger.bundle.build import Bundle, build_bundle
from evidence_ledger.bundle.verify import Selection, verify_bundle
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.tlog.note import Signer

TARGET_BYTES = 16 * 1024
CHAIN_ENTRIES = 5  # a gated chain: call, decision, execution, two session items


def _chains(entries: int) -> int:
    """Whole chains in a ledger of ``entries`` entries (about 5.5 entries each)."""
    per_run = CHAINS_PER_RUN * CHAIN_ENTRIES - CHAINS_PER_RUN // 2 + 1
    return entries * CHAINS_PER_RUN // per_run


TIMED_UP_TO = 100_000
"""``prove`` is timed (median of 3) up to this size; above it one build gives the bundle
size (exact, the same every run), and the time, one verifier pass with payload re-hash,
shows in the verify rows."""


def measure(entries: int, directory: Path) -> list[Row]:
    """Prove one call chain of the ``entries``-entry ledger in ``directory``."""
    middle = _chains(entries) // 2 // 2 * 2  # even chains are gated (see workload)
    call_id = f"call_{middle:09d}"
    signer = Signer.generate("bench.example/ledger")
    built: list[Bundle] = []

    def prove() -> None:
        built.append(build_bundle(Ledger(directory), signer, Selection("call", None, call_id)))

    timed = entries <= TIMED_UP_TO
    prove_s = median_time(prove, RUNS if timed else 1)
    bundle = built[-1]
    verify_ms = median_time(lambda: verify_bundle(bundle.data, [signer.verifier]), 21) * 1000
    verified = verify_bundle(bundle.data, [signer.verifier])
    size = len(bundle.data)
    chain = sum(len(e.data) for e in verified.entries)
    kinds = ", ".join(e.entry.kind for e in verified.entries)
    out = [
        Row(
            operation="proof bundle, one call chain, digests only", size=entries,
            ours=size, unit="bytes", baselines={"entry bytes alone": chain},
            ratio=size / chain, target="< 16 KiB", met=size < TARGET_BYTES,
            note=(f"{len(verified.entries)} entries ({kinds}); tree size "
                  f"{verified.checkpoint.size}, {len(verified.entries[0].proof)} hashes per "
                  "inclusion proof; ratio = bundle / entry bytes"),
        ),
        Row(operation="verify-proof (offline)", size=entries, ours=verify_ms, unit="ms",
            note="median of 21"),
    ]
    if timed:
        out.insert(1, Row(
            operation="prove (full verify, checkpoint, select, proofs, sign)", size=entries,
            ours=prove_s, unit="s",
            note="one verifier pass with payload re-hash, then the chain's proofs",
        ))
    return out


def rows(ledgers: dict[int, Path]) -> list[Row]:
    """Rows for each shared ledger (size -> directory, built by ``build_ledger``).

    The bundle's size is exact, so it is measured once; ``prove`` signs a checkpoint in
    the ledger (which the other suites ignore).
    """
    out: list[Row] = []
    for n, directory in sorted(ledgers.items()):
        out += measure(n, directory)
    return out


def _built(entries: tuple[int, ...]) -> list[Row]:
    out: list[Row] = []
    for n in entries:
        with scratch("bundle-") as work:
            build_ledger(work / "ledger", n)
            out += measure(n, work / "ledger")
    empty_trash()
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, nargs="+", default=[100_000],
                        help="ledger sizes (entries); e.g. 100000 1000000")
    args = parser.parse_args()
    print_table(_built(tuple(args.entries)), f"{platform.machine()} {platform.python_version()}")
