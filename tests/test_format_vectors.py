"""Known-answer vectors for our own formats (``tests/vectors/evidence-ledger/``), walked as data.

Each file is one case (or, under ``digests/``, one kind of digest) with a ``description``;
FORMAT.md ("Test vectors for our own formats") lists them. These tests check every vector
against the current code, on both cores where the native one is built (``tests/cores.py``):
entries decode and re-encode to the same bytes and hashes,
frames scan as recorded, digests, keys and signatures come out byte for byte, bundles
verify with the recorded verdict, and every negative case is refused with the recorded
error. The last test re-runs the checked-in generator and compares every byte, so a format
change cannot slip through: regenerate with
``.venv/bin/python tests/vectors/evidence-ledger/generate.py`` and review the diff.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from evidence_ledger.bundle.verify import (
    BundleEntryError,
    BundleError,
    BundleFormatError,
    BundleLinkError,
    BundlePayloadError,
    BundleProofError,
    BundleSignatureError,
    BundleVerdictError,
    verify_bundle,
)
from evidence_ledger.format import digests, encoding
from evidence_ledger.format.entries import (
    KINDS,
    ZERO_HASH,
    Entry,
    decode_checked,
    decode_entry,
    entry_hash,
    entry_json,
)
from evidence_ledger.format.errors import EncodingError, LedgerError
from evidence_ledger.format.framing import frame
from evidence_ledger.tlog.checkpoint import (
    Checkpoint,
    CheckpointFormatError,
    CheckpointOriginError,
    verify_checkpoint,
)
from evidence_ledger.tlog.merkle import CompactRange, leaf_hash, root_of_leaves
from evidence_ledger.tlog.note import (
    InvalidSignatureError,
    MalformedNoteError,
    Signer,
    UnverifiedNoteError,
    Verifier,
    sign_note,
)

VECTORS = Path(__file__).parent / "vectors" / "evidence-ledger"
GENERATOR = VECTORS / "generate.py"


@functools.cache
def _generator() -> Any:
    """The vector generator, loaded from its file (its folder name is not importable)."""
    spec = importlib.util.spec_from_file_location("evidence_ledger_vector_generator", GENERATOR)
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    return generator

ERRORS: dict[str, type[LedgerError]] = {
    cls.__name__: cls
    for cls in (
        EncodingError, MalformedNoteError, InvalidSignatureError, UnverifiedNoteError,
        CheckpointFormatError, CheckpointOriginError, BundleFormatError, BundleSignatureError,
        BundleEntryError, BundleProofError, BundleLinkError, BundlePayloadError,
        BundleVerdictError,
    )
}
"""The error classes a negative vector may name (``error``), by name."""


def _load(rel: str | Path) -> dict[str, Any]:
    return json.loads((VECTORS / rel).read_text())


def _cases(folder: str, pattern: str = "*.json") -> list[Path]:
    return sorted((VECTORS / folder).glob(pattern))


def _ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


ENTRIES = _cases("entries")
INVALID_ENTRIES = _cases("entries-invalid")
FRAMES = _cases("frames")
CHECKPOINT_NEGATIVES = _cases("checkpoints", "invalid-*.json")
BUNDLES = [p for p in _cases("bundles", "*.json")
           if not p.name.endswith(".dsse.json") and not p.name.startswith("invalid-")]
BUNDLE_NEGATIVES = [p for p in _cases("bundles", "invalid-*.json")
                    if not p.name.endswith(".dsse.json")]
ARGUMENTS = _load("digests/arguments.json")["cases"]
OUTPUTS = _load("digests/outputs.json")["cases"]


def test_the_vector_set_is_there():
    """Guards the parametrised tests below against walking an empty folder."""
    assert len(ENTRIES) >= len(KINDS)
    assert INVALID_ENTRIES and FRAMES and CHECKPOINT_NEGATIVES and BUNDLE_NEGATIVES
    assert {p.stem for p in BUNDLES} == {"call-call_1", "run-run_2", "all"}
    for path in VECTORS.rglob("*.json"):
        if not path.name.endswith(".dsse.json"):
            assert _load(path.relative_to(VECTORS))["description"], path


# -- entries ------------------------------------------------------------------------------


def _typed(value: Any) -> Any:
    """The entry value a vector's JSON form stands for: ``sha256:<hex>`` is bin 32."""
    if isinstance(value, str) and value.startswith("sha256:") and len(value) == 71:
        return bytes.fromhex(value[7:])
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    return value


@pytest.mark.usefixtures("core")
@pytest.mark.parametrize("path", ENTRIES, ids=_ids(ENTRIES))
def test_entry_vector(path: Path):
    vector = _load(path.relative_to(VECTORS))
    data = bytes.fromhex(vector["entry_hex"])
    form = vector["entry"]

    # encode: the JSON form gives exactly these bytes, by the entry encoder and the generic one
    typed = _typed(form)
    entry = Entry(typed["seq"], typed["prev"], typed["kind"], typed["time"], typed["body"],
                  tuple(typed["refs"]))
    assert entry.to_bytes() == data
    assert encoding.encode({"v": 1, **typed}) == data

    # decode: the bytes give exactly this entry (and are canonical)
    decoded = decode_entry(data)
    assert decode_checked(data) == decoded
    assert decoded.kind == vector["kind"] == path.stem.split("-", 1)[1]
    assert entry_json(decoded, entry_hash(data)) == {
        **form, "hash": vector["entry_hash"]}
    assert encoding.decode(data) == {"v": 1, **typed}

    assert "sha256:" + entry_hash(data).hex() == vector["entry_hash"]
    assert _b64(leaf_hash(data)) == vector["leaf_hash"]


@pytest.mark.usefixtures("core")
def test_entries_are_one_chained_log_covering_every_kind():
    vectors = [_load(p.relative_to(VECTORS)) for p in ENTRIES]
    assert {v["kind"] for v in vectors} == set(KINDS)
    previous = ZERO_HASH
    for seq, vector in enumerate(vectors):
        entry = decode_entry(bytes.fromhex(vector["entry_hex"]))
        assert (entry.seq, entry.prev) == (seq, previous)
        previous = entry_hash(bytes.fromhex(vector["entry_hex"]))


@pytest.mark.usefixtures("core")
@pytest.mark.parametrize("path", INVALID_ENTRIES, ids=_ids(INVALID_ENTRIES))
def test_invalid_entry_vector(path: Path):
    vector = _load(path.relative_to(VECTORS))
    data = bytes.fromhex(vector["entry_hex"])
    source = bytes.fromhex(_load(vector["derived_from"])["entry_hex"])
    assert data != source
    with pytest.raises(EncodingError) as caught:
        decode_entry(data)
    assert type(caught.value) is ERRORS[vector["error"]]
    assert vector["error_contains"] in str(caught.value)


# -- Merkle tree and frames ---------------------------------------------------------------


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 section 2.1.1 MTH, written out recursively (a reference, not our fast tree)."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)  # largest power of two below n
    return hashlib.sha256(b"\x01" + _mth(leaves[:k]) + _mth(leaves[k:])).digest()


@pytest.mark.usefixtures("core")
def test_merkle_tree_vector():
    vector = _load("merkle/tree.json")
    leaves = []
    for item in vector["leaves"]:
        data = bytes.fromhex(_load(item["entry"])["entry_hex"])
        assert decode_entry(data).seq == item["seq"] == len(leaves)
        leaves.append(leaf_hash(data))
        assert _b64(leaves[-1]) == item["leaf_hash"]
    assert [r["size"] for r in vector["roots"]] == list(range(len(leaves) + 1))
    tree = CompactRange()
    for item in vector["roots"]:
        size = item["size"]
        if size:
            tree.append(leaves[size - 1])
        assert _b64(tree.root()) == _b64(_mth(leaves[:size])) == item["root"]
    assert vector["tree_size"] == len(leaves)
    assert _b64(root_of_leaves(leaves)) == vector["root"]
    assert vector["root"] == vector["roots"][-1]["root"]


@pytest.mark.usefixtures("core")
@pytest.mark.parametrize("path", FRAMES, ids=_ids(FRAMES))
def test_frame_vector(path: Path):
    vector = _load(path.relative_to(VECTORS))
    log = bytes.fromhex(vector["log_hex"])
    assert _generator().scan_json(log) == vector["scan"]
    records = [item.get("record") for item in vector["scan"]]
    if records and all(r is not None and r["crc_ok"] for r in records):
        # a clean log: framing the records again (all but the last "more follows") gives it
        datas = [bytes.fromhex(r["data_hex"]) for r in records]
        assert b"".join(
            frame(d, more=i < len(datas) - 1) for i, d in enumerate(datas)
        ) == log


@pytest.mark.usefixtures("core")
def test_one_frame_vector_fields():
    vector = _load("frames/one-frame.json")
    log = bytes.fromhex(vector["log_hex"])
    data = bytes.fromhex(_load(vector["entry"])["entry_hex"])
    assert log == frame(data, more=vector["more_follows"])
    assert log[:4].hex() == vector["word_hex"] == f"{len(data):08x}"
    assert (log[4:8].hex(), log[-4:].hex()) == (vector["word_crc32_hex"],
                                                vector["record_crc32_hex"])


# -- digests ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ARGUMENTS, ids=[c["name"] for c in ARGUMENTS])
def test_arguments_digest_vector(case: dict[str, Any]):
    raw = bytes.fromhex(case["arguments_utf8_hex"])
    assert raw.decode("utf-8") == case["arguments"]
    result = digests.arguments_digest(case["arguments"])
    assert (result.form, "sha256:" + result.digest.hex()) == (case["form"], case["digest"])
    assert case["form"] == case["name"].split("-", 1)[0]
    if case["form"] == "jcs":
        canonical = bytes.fromhex(case["canonical_utf8_hex"])
        assert digests.canonical_json(digests.parse_strict_json(case["arguments"])) == canonical
        assert "sha256:" + hashlib.sha256(canonical).hexdigest() == case["digest"]
    else:
        assert "canonical_utf8_hex" not in case
        assert "sha256:" + hashlib.sha256(raw).hexdigest() == case["digest"]


@pytest.mark.parametrize("case", OUTPUTS, ids=[c["name"] for c in OUTPUTS])
def test_output_digest_vector(case: dict[str, Any]):
    pieces: list[bytes] = []
    digests.write_output(case["output"], pieces.append)
    assert b"".join(pieces).hex() == case["bytes_hex"]
    assert "sha256:" + hashlib.sha256(b"".join(pieces)).hexdigest() == case["digest"]


# -- keys and checkpoints -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["ledger", "other"])
def test_key_vector(name: str):
    vector = _load(f"keys/{name}.json")
    signer = Signer(vector["name"], bytes.fromhex(vector["seed_hex"]))
    assert signer.public_key.hex() == vector["public_key_hex"]
    assert f"{signer.key_id:08x}" == vector["key_id_hex"]
    assert signer.skey == vector["private_key"]
    assert signer.verifier.vkey == vector["verifier_key"]
    assert Signer.from_skey(vector["private_key"]).public_key == signer.public_key
    assert Verifier.from_vkey(vector["verifier_key"]) == signer.verifier


def test_signed_checkpoint_vector():
    vector = _load("checkpoints/signed.json")
    key = _load(vector["key"])
    tree = _load("merkle/tree.json")
    note = vector["note"].encode("utf-8")
    verified = verify_checkpoint(note, [Verifier.from_vkey(vector["verifier_key"])])
    cp = verified.checkpoint
    assert (cp.origin, cp.size, _b64(cp.root)) == (
        vector["origin"], vector["tree_size"], vector["root"])
    assert (cp.size, _b64(cp.root)) == (tree["tree_size"], tree["root"])
    assert Checkpoint(cp.origin, cp.size, cp.root).to_text() == vector["text"]
    signer = Signer(key["name"], bytes.fromhex(key["seed_hex"]))
    assert sign_note(vector["text"], [signer]) == note  # Ed25519 is deterministic
    assert note.decode("utf-8").endswith(vector["signature_line"] + "\n")
    assert verified.note.verified[0].signature.hex() == vector["signature_hex"]


@pytest.mark.parametrize("path", CHECKPOINT_NEGATIVES, ids=_ids(CHECKPOINT_NEGATIVES))
def test_invalid_checkpoint_vector(path: Path):
    vector = _load(path.relative_to(VECTORS))
    verifier = Verifier.from_vkey(vector["verifier_key"])
    with pytest.raises(LedgerError) as caught:
        verify_checkpoint(vector["note"].encode("utf-8"), [verifier])
    assert type(caught.value) is ERRORS[vector["error"]]
    assert vector["error_contains"] in str(caught.value)


# -- bundles ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", BUNDLES, ids=_ids(BUNDLES))
def test_bundle_vector(path: Path):
    vector = _load(path.relative_to(VECTORS))
    data = (VECTORS / vector["bundle"]).read_bytes()
    assert "sha256:" + hashlib.sha256(data).hexdigest() == vector["bundle_sha256"]
    verified = verify_bundle(data, [Verifier.from_vkey(vector["verifier_key"])])
    assert verified.to_json() == vector["expected"]
    assert verified.selection.to_json() == vector["selection"]
    assert (verified.payloads is not None) == vector["include_payloads"]
    assert verified.checkpoint_note == _load("checkpoints/signed.json")["note"]
    entries = {_load(p.relative_to(VECTORS))["entry_hex"] for p in ENTRIES}
    assert all(e.data.hex() in entries for e in verified.entries)


@pytest.mark.parametrize("path", BUNDLE_NEGATIVES, ids=_ids(BUNDLE_NEGATIVES))
def test_invalid_bundle_vector(path: Path):
    vector = _load(path.relative_to(VECTORS))
    data = (VECTORS / vector["bundle"]).read_bytes()
    with pytest.raises(BundleError) as caught:
        verify_bundle(data, [Verifier.from_vkey(vector["verifier_key"])])
    assert type(caught.value) is ERRORS[vector["error"]]
    assert caught.value.what == vector["error_what"]
    assert vector["error_contains"] in caught.value.detail


# -- the generator ------------------------------------------------------------------------


def test_generator_reproduces_the_checked_in_vectors(tmp_path: Path):
    """Like python-tuf's generated_data check: a format change must show up as a diff."""
    generator = _generator()
    written = generator.generate(tmp_path)
    fresh = {p.relative_to(tmp_path).as_posix(): p.read_bytes() for p in written}
    checked_in = {
        p.relative_to(VECTORS).as_posix(): p.read_bytes()
        for sub in generator.SUBDIRS for p in (VECTORS / sub).rglob("*") if p.is_file()
    }
    hint = "regenerate: .venv/bin/python tests/vectors/evidence-ledger/generate.py, review"
    assert sorted(fresh) == sorted(checked_in), hint
    changed = sorted(name for name in fresh if fresh[name] != checked_in[name])
    assert not changed, f"{hint}; differing files: {changed}"


def test_a_bundle_signed_before_a_rule_was_added_still_verifies():
    """``tests/data/bundle-before-output-not-persisted.dsse.json``: ``bundles/all.dsse.json``
    as generated before ``output_not_persisted`` existed (its verdict does not list it)."""
    data = (Path(__file__).parent / "data" / "bundle-before-output-not-persisted.dsse.json"
            ).read_bytes()
    vector = _load("bundles/all.json")
    verified = verify_bundle(data, [Verifier.from_vkey(vector["verifier_key"])])
    assert "output_not_persisted" not in verified.to_json()["verdict"]["rules"]
    assert "output_not_persisted" in vector["expected"]["verdict"]["rules"]


def test_the_index_and_exports_take_every_entry_kind(tmp_path):
    """The vector ledger holds every kind: the DuckDB index and an export read each one
    (an ``approval_signature``'s ``decision_hash`` is bytes, a ``decision``'s ``decision``
    text: a body field typed by name once broke the index here)."""
    from evidence_ledger.api.handle import Ledger as Handle
    from evidence_ledger.api.keys import SigningKey

    _generator()._write_ledger(tmp_path / "ledger")
    handle = Handle(tmp_path / "ledger")
    kinds = handle.query("SELECT DISTINCT kind FROM entries", index=str(tmp_path / "i.duckdb"))
    assert {row[0] for row in kinds.rows} == set(KINDS)
    key = SigningKey.generate(tmp_path / "k.key", "example.com/vectors")
    handle.export(tmp_path / "out", format="jsonl", key=key, index=str(tmp_path / "i.duckdb"))
    assert handle.verify_export(tmp_path / "out", key.verifier_key).ok
