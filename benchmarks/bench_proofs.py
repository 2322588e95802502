"""Inclusion and consistency proofs: ours against pymerkle 7, same leaves, same run.

Ours: :func:`ledger.proofs.prove_inclusion` / ``prove_consistency`` as the CLI calls
them (the tile store brought up to date first, then O(log n) tile reads), and the pure
verifier. pymerkle 7 (GPL; a benchmark-only dependency, never imported by the package):
an ``InmemoryTree`` holding the same entries. Proof size is the audit path in bytes.
"""

from __future__ import annotations

import random
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import Row
from ledger.log import Ledger
from ledger.proof_verify import verify_consistency, verify_inclusion
from ledger.proofs import prove_consistency, prove_inclusion
from ledger.store import Record

SAMPLES = 300


def _per_op(fn: Callable[[int], object], args: list[int]) -> float:
    """Median-free mean seconds per call over ``args`` (one timed loop)."""
    start = time.perf_counter()
    for a in args:
        fn(a)
    return (time.perf_counter() - start) / len(args)


def _pymerkle_tree(ledger: Path):  # type: ignore[no-untyped-def]
    from pymerkle import InmemoryTree

    tree = InmemoryTree(algorithm="sha256")
    for item in Ledger(ledger).scan():
        assert isinstance(item, Record)
        tree.append_entry(item.data)
    return tree


def rows(ledgers: dict[int, Path]) -> list[Row]:
    """Rows per ledger size: inclusion and consistency proof generation and verification."""
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from pymerkle import verify_consistency as pm_verify_consistency
    from pymerkle import verify_inclusion as pm_verify_inclusion

    out = []
    for size, path in sorted(ledgers.items()):
        book = Ledger(path)
        prove_inclusion(book, 0)  # bring the tile store up to date (timed separately below)
        rng = random.Random(size)
        seqs = [rng.randrange(size) for _ in range(SAMPLES)]
        olds = [rng.randrange(1, size) for _ in range(SAMPLES)]
        build_start = time.perf_counter()
        pm = _pymerkle_tree(path)
        pm_build = time.perf_counter() - build_start
        pm_root = pm.get_state(size)

        ours_incl = _per_op(lambda s: prove_inclusion(book, s), seqs)
        pm_incl = _per_op(lambda s: pm.prove_inclusion(s + 1, size), seqs)
        proofs = {s: prove_inclusion(book, s) for s in seqs[:50]}
        pm_proofs = {s: pm.prove_inclusion(s + 1, size) for s in seqs[:50]}
        ours_vi = _per_op(
            lambda s: verify_inclusion(s, size, proofs[s].leaf_hash, list(proofs[s].proof),
                                       proofs[s].root), list(proofs))
        pm_vi = _per_op(lambda s: pm_verify_inclusion(pm.get_leaf(s + 1), pm_root, pm_proofs[s]),
                        list(pm_proofs))
        ours_cons = _per_op(lambda m: prove_consistency(book, m, size), olds)
        pm_cons = _per_op(lambda m: pm.prove_consistency(m, size), olds)
        cproofs = {m: prove_consistency(book, m, size) for m in olds[:50]}
        pm_cproofs = {m: pm.prove_consistency(m, size) for m in olds[:50]}
        ours_vc = _per_op(
            lambda m: verify_consistency(m, size, list(cproofs[m].proof), cproofs[m].root1,
                                         cproofs[m].root2), list(cproofs))
        pm_vc = _per_op(
            lambda m: pm_verify_consistency(pm.get_state(m), pm_root, pm_cproofs[m]),
            list(pm_cproofs))
        proof_bytes = sum(32 * len(p.proof) for p in proofs.values()) / len(proofs)
        for op, ours, theirs, target in (
            ("inclusion proof generation", ours_incl, pm_incl, ">= 10x pymerkle"),
            ("inclusion proof verification", ours_vi, pm_vi, ">= pymerkle"),
            ("consistency proof generation", ours_cons, pm_cons, ""),
            ("consistency proof verification", ours_vc, pm_vc, ""),
        ):
            speedup = theirs / ours
            need = 10.0 if target.startswith(">= 10x") else 1.0 if target else None
            out.append(Row(
                operation=op, size=size, ours=1 / ours, unit="proofs/s",
                baselines={"pymerkle 7": 1 / theirs}, ratio=speedup,
                target=target if size >= 1_000_000 or not target.startswith(">= 10x") else "",
                met=None if need is None else speedup >= need,
                note="ratio = our rate / pymerkle's (higher is better)"
                if op.startswith("inclusion proof gen") else "",
            ))
        out.append(Row(operation="inclusion proof size", size=size, ours=proof_bytes,
                       unit="bytes", note=f"pymerkle tree build took {pm_build:.1f} s"))
    return out
