"""Proof building and the tiled hash store, cross-checked against a naive RFC 9162.

The naive implementation below is a line-by-line transcription of RFC 9162 §2.1
(MTH, PATH, PROOF/SUBPROOF) over a list of leaf hashes; the fast tree (tiles, stored
subtree hashes) must agree with it everywhere, including across tile boundaries.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import evidence_ledger.storage.tree_store as tree_store_module
from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.log_proofs import prove_consistency, prove_inclusion
from evidence_ledger.storage.tree_store import TiledTree, TreeStore
from evidence_ledger.tlog.merkle import leaf_hash
from evidence_ledger.tlog.proof_verify import ProofError, verify_consistency, verify_inclusion
from evidence_ledger.tlog.proofs import consistency_proof, inclusion_proof, tree_root
from evidence_ledger.tlog.tiles import TileBuilder, tile_path
from tests.helpers import forge_entry, run_cli, run_end_ledger

KAT = json.loads((Path(__file__).parent / "vectors" / "kat-extracted.json").read_text())

# -- a naive RFC 9162 §2.1 over leaf hashes ------------------------------------------


def _h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def naive_mth(leaves: list[bytes]) -> bytes:
    """MTH(D[n]) of RFC 9162 §2.1.1, with leaves already hashed."""
    n = len(leaves)
    if n == 0:
        return _h(b"")
    if n == 1:
        return leaves[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return _h(b"\x01" + naive_mth(leaves[:k]) + naive_mth(leaves[k:]))


def naive_path(m: int, leaves: list[bytes]) -> list[bytes]:
    """PATH(m, D[n]) of RFC 9162 §2.1.3.1."""
    n = len(leaves)
    if n == 1:
        return []
    k = 1
    while k * 2 < n:
        k *= 2
    if m < k:
        return [*naive_path(m, leaves[:k]), naive_mth(leaves[k:])]
    return [*naive_path(m - k, leaves[k:]), naive_mth(leaves[:k])]


def naive_subproof(m: int, leaves: list[bytes], b: bool) -> list[bytes]:
    """SUBPROOF(m, D[n], b) of RFC 9162 §2.1.4.1."""
    n = len(leaves)
    if m == n:
        return [] if b else [naive_mth(leaves)]
    k = 1
    while k * 2 < n:
        k *= 2
    if m <= k:
        return [*naive_subproof(m, leaves[:k], b), naive_mth(leaves[k:])]
    return [*naive_subproof(m - k, leaves[k:], False), naive_mth(leaves[:k])]


def naive_proof(m: int, leaves: list[bytes]) -> list[bytes]:
    """PROOF(m, D[n]) of RFC 9162 §2.1.4.1."""
    return naive_subproof(m, leaves, True)


LEAVES = [_h(i.to_bytes(8, "big")) for i in range(70_000)]
BIG = TiledTree.from_leaf_hashes(LEAVES)  # three tile levels: 273 full level-0 tiles


# -- the fast tree against the naive one ---------------------------------------------


@pytest.mark.parametrize(
    "size", [*range(1, 70), 127, 128, 129, 255, 256, 257, 511, 512, 513, 767, 1000, 1024, 1025]
)
def test_roots_match_naive(size):
    tree = TiledTree.from_leaf_hashes(LEAVES[:size])
    want = naive_mth(LEAVES[:size])
    assert tree.root() == want
    assert BIG.root(size) == want  # the same prefix, read from a larger tree's tiles
    assert tree_root(tree, size) == want


def test_roots_match_naive_above_two_tile_levels():
    for size in (65_535, 65_536, 65_537, 70_000):
        assert BIG.root(size) == naive_mth(LEAVES[:size]), size


@pytest.mark.parametrize("size", range(1, 34))
def test_every_small_proof_matches_naive(size):
    tree = TiledTree.from_leaf_hashes(LEAVES[:size])
    leaves = LEAVES[:size]
    for index in range(size):
        assert inclusion_proof(tree, index, size) == naive_path(index, leaves)
    for size1 in range(1, size + 1):
        assert consistency_proof(tree, size1, size) == naive_proof(size1, leaves)


@pytest.mark.parametrize(
    "index, size",
    [
        (0, 257),
        (255, 256),
        (256, 257),
        (300, 513),
        (1023, 1025),
        (65_535, 65_537),
        (69_999, 70_000),
    ],
)
def test_proofs_across_tile_boundaries_match_naive(index, size):
    leaves = LEAVES[:size]
    assert inclusion_proof(BIG, index, size) == naive_path(index, leaves)
    assert consistency_proof(BIG, index + 1, size) == naive_proof(index + 1, leaves)


def test_proof_generation_checks_its_preconditions():
    tree = TiledTree.from_leaf_hashes(LEAVES[:10])
    for index, size in [(-1, 5), (5, 5), (0, 0), (3, 11)]:
        with pytest.raises(UsageError):
            inclusion_proof(tree, index, size)
    for size1, size2 in [(0, 5), (6, 5), (3, 11)]:
        with pytest.raises(UsageError):
            consistency_proof(tree, size1, size2)
    with pytest.raises(UsageError, match="want"):
        tree.node(2, 2)  # leaves 8..11: not complete in a tree of 10


class CountingSource:
    """A HashSource that counts node reads."""

    def __init__(self, tree: TiledTree) -> None:
        self.tree, self.size, self.reads = tree, tree.size, 0

    def node(self, level: int, index: int) -> bytes:
        self.reads += 1
        return self.tree.node(level, index)


@pytest.mark.parametrize("index", [0, 12_345, 65_536, 69_999])
def test_a_proof_reads_log_n_stored_hashes(index):
    src = CountingSource(BIG)
    proof = inclusion_proof(src, index, BIG.size)
    # at most one right-border sibling is not a perfect subtree: it costs popcount(n) reads
    assert src.reads <= len(proof) + BIG.size.bit_count()
    assert src.reads <= 2 * BIG.size.bit_length()
    src.reads = 0
    consistency_proof(src, index + 1, BIG.size)
    assert src.reads <= 2 * BIG.size.bit_length()


# -- tiles: c2sp.org/tlog-tiles known answers ------------------------------------------


def test_tile_paths_match_the_spec():
    for index, want in KAT["tlog_tiles_paths"]["index_encoding"].items():
        assert tile_path(0, int(index)) == f"tile/0/{want}"
    assert tile_path(1, 0) == "tile/1/000"
    assert tile_path(0, 1000) == "tile/0/x001/000"
    assert tile_path(2, 5, width=17) == "tile/2/005.p/17"
    for bad in [(-1, 0), (64, 0), (0, -1)]:
        with pytest.raises(UsageError):
            tile_path(*bad)
    with pytest.raises(UsageError):
        tile_path(0, 0, width=256)


@pytest.mark.parametrize("size", [256, 70_000])
def test_tile_counts_match_the_spec(size):
    written: list[tuple[int, int]] = []
    builder = TileBuilder(write_tile=lambda level, index, data: written.append((level, index)))
    for leaf in LEAVES[:size]:
        builder.append(leaf)
    widths = [len(p) // 32 for p in builder.partials()]
    kat = KAT["tlog_tiles_paths"][f"tree_size_{size}"]
    full = {level: sum(1 for lv, _ in written if lv == level) for level in range(3)}
    assert full[0] == kat["full_level0_tiles"]
    assert full[1] == kat.get("full_level1_tiles", 0)
    assert widths[0] == kat.get("partial_level0_width", 0)
    assert widths[1] == kat["partial_level1_width"]
    assert (widths[2] if len(widths) > 2 else 0) == kat.get("partial_level2_width", 0)
    # every full tile is written once, in order within its level
    assert sorted(written) == sorted(set(written))


# -- property: every proof verifies; any flipped bit fails -------------------------------

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _flip(value: bytes, bit: int) -> bytes:
    out = bytearray(value)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def _fails(check) -> bool:
    try:
        check()
    except ProofError:
        return True
    return False


def _shape(index: int, size: int) -> tuple[int, int]:
    """(inner, border) of an audit path: the only way the verifier uses the tree size."""
    inner = (index ^ (size - 1)).bit_length()
    return inner, (index >> inner).bit_count()


@PROPERTY
@given(data=st.data(), size=st.integers(1, 2000))
def test_generated_inclusion_proofs_verify_and_any_flipped_bit_fails(data, size):
    tree = TiledTree.from_leaf_hashes(LEAVES[:size])
    index = data.draw(st.integers(0, size - 1), label="index")
    leaf, root = LEAVES[index], tree.root()
    proof = inclusion_proof(tree, index, size)
    verify_inclusion(index, size, leaf, proof, root)

    bit = data.draw(st.integers(0, 255), label="bit")
    assert _fails(lambda: verify_inclusion(index, size, leaf, proof, _flip(root, bit)))
    assert _fails(lambda: verify_inclusion(index, size, _flip(leaf, bit), proof, root))
    if proof:
        at = data.draw(st.integers(0, len(proof) - 1), label="element")
        bad = [*proof[:at], _flip(proof[at], bit), *proof[at + 1 :]]
        assert _fails(lambda: verify_inclusion(index, size, leaf, bad, root))
    int_bit = data.draw(st.integers(0, 11), label="int bit")
    assert _fails(lambda: verify_inclusion(index ^ (1 << int_bit), size, leaf, proof, root))
    # RFC 9162 roots do not commit to the tree size (the signed checkpoint does): a
    # flipped size passes exactly when the audit path keeps its shape, and only then.
    size2 = size ^ (1 << int_bit)
    passes = not _fails(lambda: verify_inclusion(index, size2, leaf, proof, root))
    assert passes == (index < size2 and _shape(index, size2) == _shape(index, size))


@PROPERTY
@given(data=st.data(), size2=st.integers(1, 2000))
def test_generated_consistency_proofs_verify_and_any_flipped_bit_fails(data, size2):
    tree = TiledTree.from_leaf_hashes(LEAVES[:size2])
    size1 = data.draw(st.integers(1, size2), label="size1")
    root1, root2 = tree.root(size1), tree.root()
    proof = consistency_proof(tree, size1, size2)
    verify_consistency(size1, size2, proof, root1, root2)
    assert proof == consistency_proof(BIG, size1, size2)  # same proof from a larger tree

    bit = data.draw(st.integers(0, 255), label="bit")
    assert _fails(lambda: verify_consistency(size1, size2, proof, _flip(root1, bit), root2))
    assert _fails(lambda: verify_consistency(size1, size2, proof, root1, _flip(root2, bit)))
    if proof:
        at = data.draw(st.integers(0, len(proof) - 1), label="element")
        bad = [*proof[:at], _flip(proof[at], bit), *proof[at + 1 :]]
        assert _fails(lambda: verify_consistency(size1, size2, bad, root1, root2))
    int_bit = data.draw(st.integers(0, 11), label="int bit")
    assert _fails(lambda: verify_consistency(size1 ^ (1 << int_bit), size2, proof, root1, root2))
    flipped = size2 ^ (1 << int_bit)
    passes = not _fails(lambda: verify_consistency(size1, flipped, proof, root1, root2))
    same_shape = size1 < flipped and _shape(size1 - 1, flipped) == _shape(size1 - 1, size2)
    assert passes == (size1 < size2 and same_shape)


# -- the hash store of a real ledger -------------------------------------------------



def _log_leaves(path: Path) -> list[bytes]:
    return [leaf_hash(item.data) for item in Ledger(path).scan()]  # type: ignore[union-attr]


def _tree_files(path: Path) -> dict[str, bytes]:
    root = path / "tree"
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "lock"
    }


def test_store_matches_naive_and_updates_incrementally(tmp_path, monkeypatch):
    book = run_end_ledger(tmp_path / "l", 300)
    tree = TreeStore(book).update()
    assert tree.size == 300
    assert tree.root() == naive_mth(_log_leaves(book))
    assert (book / "tree" / "tile" / "0" / "000").stat().st_size == 8192

    hashed: list[bytes] = []
    real = tree_store_module.leaf_hash

    def counting(data: bytes) -> bytes:
        hashed.append(data)
        return real(data)

    monkeypatch.setattr(tree_store_module, "leaf_hash", counting)
    run_end_ledger(book, 5, start=300)
    tree = TreeStore(book).update()
    assert tree.size == 305
    assert len(hashed) == 1 + 5  # the last covered entry is re-checked, then only new ones
    assert tree.root() == naive_mth(_log_leaves(book))
    hashed.clear()
    assert TreeStore(book).update().size == 305
    assert len(hashed) == 1


def test_store_is_derived_data_deleting_it_gives_the_same_bytes(tmp_path):
    book = run_end_ledger(tmp_path / "l", 600)
    TreeStore(book).update()
    run_end_ledger(book, 100, start=600)
    TreeStore(book).update()
    before = _tree_files(book)
    proof = prove_inclusion(book, 123)
    shutil.rmtree(book / "tree")
    TreeStore(book).update()
    assert _tree_files(book) == before
    assert prove_inclusion(book, 123) == proof
    assert "tile/0/001" in before and "state.json" in before


def test_ledger_proofs_verify(tmp_path):
    book = run_end_ledger(tmp_path / "l", 40)
    leaves = _log_leaves(book)
    for seq in (0, 17, 39):
        p = prove_inclusion(book, seq)
        assert (p.tree_size, p.leaf_hash) == (40, leaves[seq])
        verify_inclusion(seq, p.tree_size, p.leaf_hash, list(p.proof), p.root)
        assert list(p.proof) == naive_path(seq, leaves)
    p = prove_inclusion(book, 5, tree_size=9)
    verify_inclusion(5, 9, leaves[5], list(p.proof), naive_mth(leaves[:9]))
    c = prove_consistency(book, 13)
    assert (c.size1, c.size2) == (13, 40)
    verify_consistency(13, 40, list(c.proof), c.root1, c.root2)
    assert c.to_json()["root1"] and set(c.to_json()) == {
        "size1",
        "size2",
        "root1",
        "root2",
        "proof",
    }
    assert set(p.to_json()) == {"leafIdx", "treeSize", "leafHash", "root", "proof"}
    for bad in [lambda: prove_inclusion(book, 40), lambda: prove_inclusion(book, 3, 41)]:
        with pytest.raises(UsageError):
            bad()
    for bad in [lambda: prove_consistency(book, 0), lambda: prove_consistency(book, 5, 41)]:
        with pytest.raises(UsageError):
            bad()
    with pytest.raises(UsageError, match="no ledger"):
        prove_inclusion(tmp_path / "nothing", 0)


def _truncate_to(book: Path, entries: int) -> None:
    records = list(Ledger(book).scan())
    with open(book / "log.bin", "r+b") as fh:
        fh.truncate(records[entries - 1].end)  # type: ignore[union-attr]


def test_store_refuses_a_log_rolled_back_or_rewritten_under_it(tmp_path):
    book = run_end_ledger(tmp_path / "l", 50)
    TreeStore(book).update()
    _truncate_to(book, 30)
    with pytest.raises(EvidenceError, match="no longer matches the tree store at seq 49"):
        TreeStore(book).update()

    other = run_end_ledger(tmp_path / "other", 60, start=1000)
    shutil.copy(other / "log.bin", book / "log.bin")
    with pytest.raises(EvidenceError, match="rewritten or rolled back"):
        prove_inclusion(book, 3)
    shutil.rmtree(book / "tree")  # the remedy the message names
    assert TreeStore(book).update().root() == naive_mth(_log_leaves(other))


def test_inclusion_rereads_the_leaf_from_the_log(tmp_path):
    book = run_end_ledger(tmp_path / "l", 300)
    TreeStore(book).update()
    # Rewrite the entry's run_id in place (same length) and fix its CRC: a careful forger.
    forge_entry(book, 260, lambda data: data.replace(b"r260", b"r999"))
    with pytest.raises(EvidenceError, match="entry 260 in the log no longer matches"):
        prove_inclusion(book, 260)
    prove_inclusion(book, 259)


def test_damaged_store_files_are_reported_not_trusted(tmp_path):
    book = run_end_ledger(tmp_path / "l", 300)
    TreeStore(book).update()
    (book / "tree" / "tile" / "0" / "000").write_bytes(b"short")
    # Proofs read the level arrays; a tile is checked when it is read (to be served).
    with pytest.raises(EvidenceError, match="8192"):
        TreeStore(book).tile(0, 0)
    state = json.loads((book / "tree" / "state.json").read_text())
    partials = [base64.b64decode(p) for p in state["partial_tiles"]]
    tiles_only = TiledTree(
        300, partials, lambda level, index: (book / "tree" / tile_path(level, index)).read_bytes()
    )
    with pytest.raises(EvidenceError, match="8192"):
        inclusion_proof(tiles_only, 3, 300)
    with open(book / "tree" / "nodes.bin", "r+b") as fh:
        fh.truncate(100 * 32)
    with pytest.raises(EvidenceError, match=r"nodes\.bin is 3200 bytes.*delete"):
        prove_inclusion(book, 3)
    (book / "tree" / "state.json").write_text("{not json")
    with pytest.raises(EvidenceError, match=r"state.*unreadable"):
        TreeStore(book).update()


def test_store_never_touches_the_log(tmp_path):
    book = run_end_ledger(tmp_path / "l", 20)
    before = (book / "log.bin").read_bytes(), os.stat(book / "log.bin").st_mtime_ns
    prove_consistency(book, 3)
    assert ((book / "log.bin").read_bytes(), os.stat(book / "log.bin").st_mtime_ns) == before


def test_a_proof_at_ten_million_entries_reads_a_few_tiles():
    """Tiles for 10M leaves are synthesised on demand: the proof must touch O(log n) of them."""
    size = 10_000_000
    reads: list[tuple[int, int]] = []

    def read_tile(level: int, index: int) -> bytes:
        reads.append((level, index))
        return _h(b"%d/%d" % (level, index)) * 256

    partials = [_h(b"partial %d" % level) * ((size >> (8 * level)) & 255) for level in range(3)]
    tree = TiledTree(size, partials, read_tile)
    proof = inclusion_proof(tree, 1_234_567, size)
    assert len(proof) == (size - 1).bit_length()
    assert len(set(reads)) <= 2 * size.bit_length() // 8 + 4  # a few tiles per tile level
    reads.clear()
    consistency_proof(tree, 9_876_543, size)
    assert len(set(reads)) <= 2 * size.bit_length() // 8 + 4


@pytest.mark.parametrize("corrupt", [
    lambda doc: "[" * 100_000 + "]" * 100_000,  # nested past the JSON parser's recursion
    lambda doc: json.dumps({**doc, "last_offset": 2**63 - 1}),  # past any file offset
    lambda doc: json.dumps({**doc, "last_offset": 2**63}),  # past a C long
], ids=["deep-nesting", "offset-2^63-1", "offset-2^63"])
def test_a_corrupt_state_file_is_rebuilt_with_a_notice(tmp_path, corrupt):
    book = run_end_ledger(tmp_path / "l", 300)
    TreeStore(book).update()
    state = book / "tree" / "state.json"
    state.write_text(corrupt(json.loads(state.read_text())))
    done = run_cli("inclusion", "--ledger", str(book), "--seq", "3", "--json")
    assert done.code == 0, done.err
    printed = json.loads(done.out)
    assert printed.pop("checked_against") == [
        "root recomputed from log.bin (tree size 300); recorded in tree/root.json"]
    assert printed == prove_inclusion(book, 3).to_json()
    assert done.err.startswith("notice: the tree store ") and "rebuilt it" in done.err
