"""Public test vectors for RFC 9162 proofs, walked as data (see tests/vectors/SOURCES.md).

One parametrised test reads every inclusion and consistency probe of
transparency-dev/merkle ``testdata/`` (196 files): happy paths must verify, every
tampered probe (``modified-proof[0]-bit-@3``, ``swapped-roots``, ``trailing-garbage``
...) must be rejected with a :class:`ProofError` whose message says what was wanted.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from evidence_ledger.storage.tree_store import TiledTree
from evidence_ledger.tlog.checkpoint import parse_checkpoint
from evidence_ledger.tlog.merkle import leaf_hash, node_hash
from evidence_ledger.tlog.note import Verifier, open_note
from evidence_ledger.tlog.proof_verify import (
    ProofError,
    ProofPreconditionError,
    ProofSizeError,
    RootMismatchError,
    verify_consistency,
    verify_inclusion,
)
from evidence_ledger.tlog.proofs import consistency_proof, inclusion_proof, tree_root

VECTORS = Path(__file__).parent / "vectors"
TESTDATA = VECTORS / "transparency-dev-merkle" / "testdata"
KAT = json.loads((VECTORS / "kat-extracted.json").read_text())
PROBES = sorted(TESTDATA.rglob("*.json"))
PROBE_IDS = [str(p.relative_to(TESTDATA)) for p in PROBES]

def _b(text: str) -> bytes:
    return base64.b64decode(text)


def _verify_probe(probe: dict) -> None:
    proof = [_b(h) for h in probe["proof"] or []]
    if "leafIdx" in probe:
        verify_inclusion(
            probe["leafIdx"], probe["treeSize"], _b(probe["leafHash"]), proof, _b(probe["root"])
        )
    else:
        verify_consistency(
            probe["size1"], probe["size2"], proof, _b(probe["root1"]), _b(probe["root2"])
        )


def test_every_vector_file_is_walked():
    assert len(PROBES) == 196
    assert sum(1 for p in PROBE_IDS if p.startswith("inclusion/")) == 98


@pytest.mark.parametrize("path", PROBES, ids=PROBE_IDS)
def test_vector(path: Path):
    probe = json.loads(path.read_text())
    if not probe["wantErr"]:
        _verify_probe(probe)
        return
    with pytest.raises(ProofError) as caught:
        _verify_probe(probe)
    message = str(caught.value)
    assert "\n" not in message
    assert "want" in message, message  # got/want, e.g. "proof has 4 hashes, want 3"


RFC_LEAVES = [bytes.fromhex(h) for h in KAT["rfc6962_hashing"]["rfc6962_test_leaves_hex"]]
RFC_TREE = TiledTree.from_leaf_hashes(leaf_hash(d) for d in RFC_LEAVES)


@pytest.mark.parametrize("path", [p for p in PROBES if p.name == "happy-path.json"], ids=str)
def test_we_generate_the_published_happy_path_proofs(path: Path):
    """The base trees are the 8 RFC 6962 test leaves: our prover must give the same proof."""
    probe = json.loads(path.read_text())
    want = [_b(h) for h in probe["proof"] or []]
    if "leafIdx" in probe:
        idx, size = probe["leafIdx"], probe["treeSize"]
        assert inclusion_proof(RFC_TREE, idx, size) == want
        assert tree_root(RFC_TREE, size) == _b(probe["root"])
        assert leaf_hash(RFC_LEAVES[idx]) == _b(probe["leafHash"])
    else:
        size1, size2 = probe["size1"], probe["size2"]
        assert consistency_proof(RFC_TREE, size1, size2) == want
        assert tree_root(RFC_TREE, size1) == _b(probe["root1"])
        assert tree_root(RFC_TREE, size2) == _b(probe["root2"])


def test_rfc6962_known_answer_hashes():
    """Each value can be reproduced with a shell one-liner, given in the comment."""
    kat = KAT["rfc6962_hashing"]
    # printf '' | sha256sum
    assert hashlib.sha256(b"").hexdigest() == kat["empty_tree_root_hex"]
    assert TiledTree.from_leaf_hashes([]).root().hex() == kat["empty_tree_root_hex"]
    # printf '\x00' | sha256sum
    assert leaf_hash(b"").hex() == kat["leaf_hash_of_empty_hex"]
    # printf '\x00L123456' | sha256sum
    assert leaf_hash(b"L123456").hex() == kat["leaf_hash_of_L123456_hex"]
    # printf '\x01N123N456' | sha256sum
    assert node_hash(b"N123", b"N456").hex() == kat["node_hash_N123_N456_hex"]
    for size, want in enumerate(kat["roots_for_sizes_1_to_8_hex"], 1):
        assert RFC_TREE.root(size).hex() == want, size


def test_rekor_v2_inclusion_proof_verifies_against_its_signed_checkpoint():
    """A real Rekor v2 (Sigstore staging) entry: leaf 645 of 646, checkpoint-signed root."""
    bundle = json.loads(
        (VECTORS / "sigstore-python" / "staging-rekor-v2.txt.sigstore.json").read_text()
    )
    entry = bundle["verificationMaterial"]["tlogEntries"][0]
    proof = entry["inclusionProof"]
    note = open_note(
        proof["checkpoint"]["envelope"].encode(),
        [Verifier.from_vkey(KAT["rekor_v2_checkpoint"]["vkey_derived"])],
    )
    checkpoint = parse_checkpoint(note.text)
    assert checkpoint.size == int(proof["treeSize"]) == 646
    leaf = leaf_hash(_b(entry["canonicalizedBody"]))
    verify_inclusion(
        int(proof["logIndex"]),
        checkpoint.size,
        leaf,
        [_b(h) for h in proof["hashes"]],
        checkpoint.root,
    )
    tampered = bytearray(leaf)
    tampered[0] ^= 1
    with pytest.raises(ProofError, match="root mismatch"):
        verify_inclusion(
            645, 646, bytes(tampered), [_b(h) for h in proof["hashes"]], checkpoint.root
        )


def test_preconditions_and_mismatches_say_got_and_want():
    root = RFC_TREE.root(8)
    with pytest.raises(
        ProofPreconditionError, match=r"want 0 <= index < size, got index 8, size 8"
    ):
        verify_inclusion(8, 8, root, [], root)
    with pytest.raises(ProofPreconditionError, match="from the empty tree is meaningless"):
        verify_consistency(0, 0, [], root, root)
    with pytest.raises(
        ProofPreconditionError, match=r"want 0 < size1 <= size2, got size1 3, size2 2"
    ):
        verify_consistency(3, 2, [], root, root)
    with pytest.raises(ProofSizeError, match="proof has 1 hash, want 0") as size_error:
        verify_consistency(4, 4, [root], root, root)
    assert (size_error.value.got, size_error.value.want) == (1, 0)
    proof = inclusion_proof(RFC_TREE, 2, 8)
    with pytest.raises(RootMismatchError) as mismatch:
        verify_inclusion(2, 8, leaf_hash(RFC_LEAVES[2]), proof, RFC_TREE.root(7))
    assert mismatch.value.which == "root"
    assert mismatch.value.expected == RFC_TREE.root(7)
    assert mismatch.value.calculated == root
