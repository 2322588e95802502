"""The stored tree levels (``tree/nodes.bin``): layout, agreement, updates, damage.

``nodes.bin`` holds every complete perfect subtree of the RFC 9162 tree in post-order.
Checked here against the naive RFC 9162 §2.1 tree of ``tests/test_proofs.py`` and
against the tiles; built incrementally in many small updates it must be byte-identical
to a fresh build; leftovers of an update that never committed are trimmed; a short
file is reported; a proof at 10^7 leaves reads O(log n) stored hashes and hashes
nothing once the right edge is known.
"""

from __future__ import annotations

import json
import shutil

import pytest

import evidence_ledger.storage.tree_store as tree_store_module
import evidence_ledger.tlog.proofs as proofs_module
from evidence_ledger.format.errors import EvidenceError, StorageError, UsageError
from evidence_ledger.format.framing import Frame
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.log_proofs import (
    prove_consistency,
    prove_inclusion,
    prove_inclusions,
)
from evidence_ledger.storage.tree_store import TiledTree, TreeStore
from evidence_ledger.tlog.merkle import node_hash
from evidence_ledger.tlog.proof_verify import verify_consistency, verify_inclusion
from evidence_ledger.tlog.proofs import Prover, consistency_proof, inclusion_proof
from evidence_ledger.tlog.tiles import TileBuilder, node_count, node_position, tile_path
from tests.helpers import run_end_ledger
from tests.test_proofs import (
    LEAVES,
    _h,
    _log_leaves,
    _tree_files,
    naive_mth,
    naive_path,
    naive_proof,
)

BOUNDARY_SIZES = [*range(1, 40), 63, 64, 65, 255, 256, 257, 511, 512, 513, 1023, 1024, 1025]


def _levels_by_pairs(leaves: list[bytes]) -> list[list[bytes]]:
    """Level h = the hashes of the complete perfect subtrees of height h, by pairing
    level h - 1 (RFC 9162 §2.1.1 node hash); the tree's level arrays."""
    levels = [list(leaves)]
    while len(levels[-1]) > 1:
        below = levels[-1]
        levels.append([node_hash(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)])
    return levels


def _post_order(size: int) -> list[tuple[int, int]]:
    """Every complete perfect subtree ``(height, index)`` of a tree of ``size`` leaves,
    ordered by the leaf count at which it completes, then lowest first."""
    nodes = [(h, k) for h in range(size.bit_length()) for k in range(size >> h)]
    return sorted(nodes, key=lambda hk: ((hk[1] + 1) << hk[0], hk[0]))


def _nodes_file(tree: TiledTree) -> bytes:
    return b"".join(tree.node(h, k) for h, k in _post_order(tree.size))


# -- layout --------------------------------------------------------------------------


def test_node_position_is_the_post_order_index():
    order = _post_order(5000)
    assert [node_position(h, k) for h, k in order] == list(range(len(order)))
    for size in range(0, 5000, 7):
        assert node_count(size) == len(_post_order(size)) == 2 * size - size.bit_count()


@pytest.mark.parametrize("size", BOUNDARY_SIZES)
def test_every_node_matches_the_naive_tree(size):
    leaves = LEAVES[:size]
    tree = TiledTree.from_leaf_hashes(leaves)
    levels = _levels_by_pairs(leaves)
    for h, k in _post_order(size):
        want = naive_mth(leaves[k << h : (k + 1) << h])
        assert levels[h][k] == want
        assert tree.node(h, k) == want, (h, k)
    assert len(_post_order(size)) == node_count(size)


def test_nodes_match_pairwise_levels_above_two_tile_levels():
    leaves = LEAVES[:65_537]
    tree = TiledTree.from_leaf_hashes(leaves)
    for h, level in enumerate(_levels_by_pairs(leaves)):
        for k in (0, 1, len(level) // 2, len(level) - 2, len(level) - 1):
            if 0 <= k < len(level):
                assert tree.node(h, k) == level[k], (h, k)


@pytest.mark.parametrize("size", [256, 511, 513, 65_536, 65_793])
def test_nodes_match_the_tiles(size):
    tiles: dict[tuple[int, int], bytes] = {}
    builder = TileBuilder(write_tile=lambda lv, i, data: tiles.__setitem__((lv, i), data))
    for leaf in LEAVES[:size]:
        builder.append(leaf)
    nodes = builder.take_nodes()
    assert len(nodes) == 32 * node_count(size)
    tree = TiledTree(size, builder.partials(), tiles.__getitem__, lambda: nodes)
    for (level, index), data in tiles.items():
        height = 8 * level
        want = b"".join(tree.node(height, 256 * index + i) for i in range(256))
        assert data == want, tile_path(level, index)
    for level, partial in enumerate(builder.partials()):
        count = size >> (8 * level)
        first = count - len(partial) // 32
        assert partial == b"".join(tree.node(8 * level, k) for k in range(first, count))


def test_a_builder_resumed_from_partials_or_peaks_gives_the_same_nodes():
    whole = TileBuilder()
    for leaf in LEAVES[:1500]:
        whole.append(leaf)
    nodes = whole.take_nodes()
    for cut in (1, 255, 256, 700, 1024, 1499):
        first = TileBuilder()
        for leaf in LEAVES[:cut]:
            first.append(leaf)
        head = first.take_nodes()
        tree = TiledTree(cut, first.partials(), lambda lv, i: b"", lambda head=head: head)
        heights = [h for h in range(cut.bit_length() - 1, -1, -1) if cut >> h & 1]
        peaks = [tree.node(h, (cut >> h) - 1) for h in heights]
        for resumed in (
            TileBuilder(cut, first.partials()),
            TileBuilder(cut, first.partials(), peaks=peaks),
        ):
            for leaf in LEAVES[cut:1500]:
                resumed.append(leaf)
            assert head + resumed.take_nodes() == nodes, cut
            assert resumed.partials() == whole.partials()
    with pytest.raises(EvidenceError, match="subtree roots"):
        TileBuilder(3, [LEAVES[0] * 3], peaks=[LEAVES[0]])


# -- proofs from the stored nodes ----------------------------------------------------------


@pytest.mark.parametrize("size", [1, 2, 3, 255, 256, 257, 1000, 1025])
def test_prover_matches_naive_at_every_size_it_is_asked(size):
    leaves = LEAVES[:size]
    prover = Prover(TiledTree.from_leaf_hashes(LEAVES[:1025]))  # one prover, many sizes
    step = max(1, size // 40)
    for index in range(0, size, step):
        assert prover.inclusion(index, size) == naive_path(index, leaves)
    for size1 in range(1, size + 1, step):
        assert prover.consistency(size1, size) == naive_proof(size1, leaves)
    assert prover.root(size) == naive_mth(leaves)
    with pytest.raises(UsageError):
        prover.inclusion(size, size)
    with pytest.raises(UsageError):
        prover.consistency(0, size)
    with pytest.raises(UsageError):
        prover.inclusion(0, 1026)


class _SyntheticNodes:
    """The node file of a tree of ``size`` leaves, synthesised on read; counts reads."""

    def __init__(self, size: int) -> None:
        self.length = 32 * node_count(size)
        self.reads: list[int] = []

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, span: slice) -> bytes:
        self.reads.append(span.start)
        return _h(b"node %d" % span.start)


def test_a_proof_at_ten_million_entries_reads_log_n_hashes_and_hashes_nothing(monkeypatch):
    size = 10_000_000
    nodes = _SyntheticNodes(size)

    def no_tiles(level: int, index: int) -> bytes:
        raise AssertionError("a proof must not read tiles when the node file is there")

    partials = [b"\0" * 32 * ((size >> (8 * level)) & 255) for level in range(3)]
    tree = TiledTree(size, partials, no_tiles, lambda: nodes)  # type: ignore[arg-type,return-value]
    hashed: list[int] = []
    real = proofs_module.node_hash

    def counting(left: bytes, right: bytes) -> bytes:
        hashed.append(1)
        return real(left, right)

    monkeypatch.setattr(proofs_module, "node_hash", counting)
    prover = Prover(tree)
    prover.root(size)  # computes and keeps the right-edge hashes for this size
    for index in (1_234_567, 8_388_607, 8_388_608, 9_999_999):
        nodes.reads.clear()
        hashed.clear()
        proof = prover.inclusion(index, size)
        inner = (index ^ (size - 1)).bit_length()
        assert len(proof) == inner + (index >> inner).bit_count() <= 2 * size.bit_length()
        assert len(nodes.reads) <= len(proof)  # one stored hash per proof hash, at most
        assert not hashed
    for size1 in (1, 9_876_543, 8_388_608, 9_999_999):
        nodes.reads.clear()
        hashed.clear()
        proof = prover.consistency(size1, size)
        assert len(nodes.reads) <= len(proof) <= 2 * size.bit_length()
        assert not hashed


# -- the store on disk ---------------------------------------------------------------


def test_store_nodes_match_naive_and_tiles(tmp_path):
    book = run_end_ledger(tmp_path / "l", 600)
    tree = TreeStore(book).update()
    leaves = _log_leaves(book)
    data = (book / "tree" / "nodes.bin").read_bytes()
    assert data == _nodes_file(TiledTree.from_leaf_hashes(leaves))
    levels = _levels_by_pairs(leaves)
    for h, k in _post_order(600):
        assert data[32 * node_position(h, k) :][:32] == levels[h][k] == tree.node(h, k)
    for index in (0, 1):
        tile = (book / "tree" / tile_path(0, index)).read_bytes()
        assert tile == b"".join(levels[0][256 * index : 256 * index + 256])
    offsets = (book / "tree" / "offsets.bin").read_bytes()
    records = list(Ledger(book).scan())
    assert offsets == b"".join(r.offset.to_bytes(8, "big") for r in records)  # type: ignore[union-attr]


def test_many_small_updates_equal_a_fresh_build(tmp_path):
    book = tmp_path / "l"
    done = 0
    sizes = [1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 1, 1, 30, 200, 7, 255, 1, 256, 3, 40]
    for count in sizes:
        run_end_ledger(book, count, start=done)
        done += count
        tree = TreeStore(book).update()
        assert tree.size == done
        assert tree.root() == naive_mth(_log_leaves(book))
    incremental = _tree_files(book)
    shutil.rmtree(book / "tree")
    TreeStore(book).update()
    assert _tree_files(book) == incremental
    assert len(incremental["nodes.bin"]) == 32 * node_count(done)
    assert {"tile/0/000", "tile/0/001", "tile/0/002", "tile/0/003"} <= set(incremental)


def test_an_update_that_finds_nothing_new_takes_no_lock_and_writes_nothing(tmp_path, monkeypatch):
    book = run_end_ledger(tmp_path / "l", 40)
    TreeStore(book).update()
    before = _tree_files(book)
    stamp = (book / "tree" / "state.json").stat().st_mtime_ns

    def no_lock(self):  # type: ignore[no-untyped-def]
        raise AssertionError("the store was locked although nothing changed")

    monkeypatch.setattr(TreeStore, "_lock", no_lock)
    for seq in (0, 39):
        assert prove_inclusion(book, seq).tree_size == 40
    assert TreeStore(book).update().size == 40
    assert _tree_files(book) == before
    assert (book / "tree" / "state.json").stat().st_mtime_ns == stamp
    monkeypatch.undo()
    run_end_ledger(book, 1, start=40)
    assert TreeStore(book).update().size == 41


def test_leftovers_of_an_update_that_never_committed_are_trimmed(tmp_path, monkeypatch):
    book = run_end_ledger(tmp_path / "l", 300)
    TreeStore(book).update()
    run_end_ledger(book, 250, start=300)

    def crash(self, state):  # type: ignore[no-untyped-def]
        raise StorageError("simulated crash before the state was committed")

    monkeypatch.setattr(TreeStore, "_write_state", crash)
    with pytest.raises(StorageError, match="simulated crash"):
        TreeStore(book).update()
    monkeypatch.undo()
    state = json.loads((book / "tree" / "state.json").read_text())
    assert state["size"] == 300  # not committed: the files have bytes past it
    assert (book / "tree" / "nodes.bin").stat().st_size > 32 * node_count(300)
    with open(book / "tree" / "offsets.bin", "ab") as fh:
        fh.write(b"\xff" * 5)  # a torn append
    assert prove_inclusion(book, 299).tree_size == 550  # caught up, leftovers trimmed
    committed = _tree_files(book)
    shutil.rmtree(book / "tree")
    TreeStore(book).update()
    assert _tree_files(book) == committed


def test_a_short_node_or_offsets_file_is_reported(tmp_path):
    book = run_end_ledger(tmp_path / "l", 300)
    TreeStore(book).update()
    nodes = book / "tree" / "nodes.bin"
    full = nodes.read_bytes()
    nodes.write_bytes(full[:-32])
    with pytest.raises(EvidenceError, match=r"nodes\.bin is \d+ bytes, want at least .*delete"):
        prove_inclusion(book, 7)
    with pytest.raises(EvidenceError, match=r"nodes\.bin is \d+ bytes, want at least .*delete"):
        prove_consistency(book, 7)
    run_end_ledger(book, 1, start=300)
    with pytest.raises(EvidenceError, match=r"nodes\.bin is \d+ bytes, want \d+ .*delete"):
        TreeStore(book).update()  # the update refuses to append to it
    nodes.unlink()
    with pytest.raises(EvidenceError, match=r"nodes\.bin is 0 bytes.*delete"):
        TreeStore(book).update()
    shutil.rmtree(book / "tree")
    TreeStore(book).update()
    offsets = book / "tree" / "offsets.bin"
    offsets.write_bytes(offsets.read_bytes()[:-8])
    run_end_ledger(book, 1, start=301)
    with pytest.raises(EvidenceError, match=r"offsets\.bin is \d+ bytes.*delete"):
        TreeStore(book).update()


def test_a_version_1_store_is_rebuilt_after_the_usual_check(tmp_path):
    book = run_end_ledger(tmp_path / "l", 600)
    TreeStore(book).update()
    fresh = _tree_files(book)
    tree = book / "tree"

    def make_v1() -> None:
        state = json.loads((tree / "state.json").read_text())
        state["version"] = 1
        (tree / "state.json").write_text(json.dumps(state))
        (tree / "nodes.bin").unlink()
        records = list(Ledger(book).scan())
        sparse = b"".join(r.offset.to_bytes(8, "big") for r in records[::256])  # type: ignore[union-attr]
        (tree / "offsets.bin").write_bytes(sparse)

    make_v1()
    assert TreeStore(book).snapshot().root() == naive_mth(_log_leaves(book))  # tiles only
    assert prove_inclusion(book, 555).tree_size == 600
    assert _tree_files(book) == fresh

    make_v1()
    other = run_end_ledger(tmp_path / "other", 600, start=5000)
    shutil.copy(other / "log.bin", book / "log.bin")
    with pytest.raises(EvidenceError, match="no longer matches the tree store at seq 599"):
        TreeStore(book).update()


def test_prove_inclusions_matches_one_at_a_time(tmp_path):
    book = run_end_ledger(tmp_path / "l", 300)
    seqs = [299, 0, 17, 17, 256, 255]
    many = prove_inclusions(book, seqs)
    assert many == [prove_inclusion(book, s) for s in seqs]
    assert [p.leaf_index for p in many] == seqs
    for p in many:
        verify_inclusion(p.leaf_index, p.tree_size, p.leaf_hash, list(p.proof), p.root)
    older = prove_inclusions(book, [3, 4], tree_size=5)
    assert [p.proof for p in older] == [
        tuple(naive_path(i, _log_leaves(book)[:5])) for i in (3, 4)
    ]
    assert prove_inclusions(book, []) == []
    with pytest.raises(UsageError, match="got seq 300"):
        prove_inclusions(book, [1, 300])
    with pytest.raises(UsageError, match="larger than the ledger"):
        prove_inclusions(book, [1], tree_size=301)
    c = prove_consistency(book, 100)
    verify_consistency(100, 300, list(c.proof), c.root1, c.root2)
    tree = TreeStore(book).update()
    assert list(c.proof) == consistency_proof(tree, 100, 300)
    assert inclusion_proof(tree, 17, 300) == list(many[2].proof)


def test_log_leaves_read_every_entry_in_o1(tmp_path, monkeypatch):
    book = run_end_ledger(tmp_path / "l", 300)
    store = TreeStore(book)
    store.update()
    walked: list[int] = []
    real = tree_store_module.read_frame

    def counting(fd: int, offset: int, skip: int = 0) -> Frame | None:
        walked.append(skip)
        return real(fd, offset, skip)

    monkeypatch.setattr(tree_store_module, "read_frame", counting)
    assert list(store.log_leaves(range(300))) == _log_leaves(book)
    assert set(walked) == {0}  # every entry found from its own offset
    assert store.entry_offset(299)[1] == 299


def test_one_proof_reads_by_position_and_many_proofs_map_the_node_file(tmp_path, monkeypatch):
    book = run_end_ledger(tmp_path / "l", 700)
    reference = Prover(TiledTree.from_leaf_hashes(_log_leaves(book)))
    mapped: list[int] = []
    real = tree_store_module.NodeFile.map

    def counting(self):  # type: ignore[no-untyped-def]
        mapped.append(1)
        return real(self)

    monkeypatch.setattr(tree_store_module.NodeFile, "map", counting)
    for seq in (0, 350, 699):
        assert prove_inclusion(book, seq).proof == tuple(reference.inclusion(seq, 700))
    assert not mapped  # a single proof costs a few dozen positioned reads, no mapping
    prover = Prover(TreeStore(book).update())
    for seq in range(0, 700, 7):
        assert prover.inclusion(seq, 700) == reference.inclusion(seq, 700)
        assert prover.consistency(seq + 1, 700) == reference.consistency(seq + 1, 700)
    assert mapped == [1]  # mapped once, when the tree had been read often enough
