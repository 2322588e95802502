"""Proofs from the tree cache in O(log n), checked against roots the cache cannot forge
(ledger/storage/checked_proofs.py, root_record.py; issue 25).

Every proof is compared with the naive RFC 9162 tree of tests/test_proofs.py; what the
proof says it was checked against is asserted word for word; "O(log n)" is asserted by
counting the bytes the process reads (never by the clock).
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import evidence_ledger as el
from evidence_ledger.format.framing import Record
from evidence_ledger.storage import checked_proofs
from evidence_ledger.storage.fsutil import file_lock
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.tree_store import TiledTree, TreeStore
from evidence_ledger.tlog.merkle import leaf_hash
from evidence_ledger.tlog.proof_verify import verify_inclusion
from evidence_ledger.tlog.proofs import inclusion_proof
from evidence_ledger.tlog.verified_nodes import VerifiedNodes
from tests.helpers import forge_entry, run_cli, run_end_ledger
from tests.test_proofs import (
    LEAVES,
    PROPERTY,
    _fails,
    _flip,
    naive_mth,
    naive_path,
    naive_proof,
)


def _leaves(book: Path) -> list[bytes]:
    return [leaf_hash(r.data) for r in Ledger(book).scan() if isinstance(r, Record)]


def _root_doc(book: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((book / "tree" / "root.json").read_text())


def _read_bytes() -> int:
    """Bytes this process has read through read(2)-like calls so far (Linux rchar)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_one_session_matches_the_naive_tree_as_the_log_grows(tmp_path):
    """One LedgerProofs, reused while the log grows across tile boundaries: every proof
    equals the naive RFC 9162 one, at the current size and at older ones."""
    book = run_end_ledger(tmp_path / "l", 1)
    proofs = el.LedgerProofs(book)
    sizes = [1, 2, 3, 5, 8, 255, 256, 257, 300, 511, 513, 700]
    for size in sizes:
        have = len(_leaves(book))
        if size > have:
            run_end_ledger(book, size - have, start=have)
        leaves = _leaves(book)
        for seq in sorted({0, size // 3, size - 1}):
            proof = proofs.inclusion_proof(seq)
            assert (proof.tree_size, proof.root) == (size, naive_mth(leaves))
            assert proof.leaf_hash == leaves[seq]
            assert list(proof.proof) == naive_path(seq, leaves)
        for old in sorted({1, size // 2 or 1, size}):
            older = proofs.inclusion_proof(old - 1, old)
            assert list(older.proof) == naive_path(old - 1, leaves[:old])
            assert older.root == naive_mth(leaves[:old])
            cons = proofs.consistency_proof(old)
            assert list(cons.proof) == naive_proof(old, leaves)
            assert (cons.root1, cons.root2) == (naive_mth(leaves[:old]), naive_mth(leaves))
        assert _root_doc(book)["size"] == size  # the recorded root follows the log


def test_a_proof_reads_o_log_n_bytes_once_the_root_is_recorded(tmp_path):
    """The CLI path reads a few KB however long the log is: the first proof recomputes
    the root (one pass), later ones read O(log n) nodes and one entry."""
    book = run_end_ledger(tmp_path / "l", 20_000)
    log_bytes = (book / "log.bin").stat().st_size
    assert run_cli("inclusion", "--ledger", str(book), "--seq", "1").code == 0  # records
    for seq in ("0", "12345", "19999"):
        before = _read_bytes()
        done = run_cli("inclusion", "--ledger", str(book), "--seq", seq, "--json")
        read = _read_bytes() - before
        assert done.code == 0 and done.err == "", done
        assert read < 64 * 1024 < log_bytes // 40, (read, log_bytes)
        before = _read_bytes()
        done = run_cli("consistency", "--ledger", str(book), "--from", "777", "--json")
        assert done.code == 0 and _read_bytes() - before < 64 * 1024


def test_the_command_line_proof_loads_neither_the_whole_api_nor_cryptography(tmp_path):
    book = run_end_ledger(tmp_path / "l", 10)
    code = ("import sys\nfrom evidence_ledger.cli.main import main\n"
            f"try:\n    main(['inclusion', '--ledger', {str(book)!r}, '--seq', '3'])\n"
            "except SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
            "print(sorted(m for m in sys.modules if m == 'evidence_ledger.api.handle' or "
            "m.startswith(('cryptography', 'evidence_ledger.verify', 'evidence_ledger.record',"
            " 'duckdb'))))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_appended_entries_extend_the_recorded_root(tmp_path):
    book = run_end_ledger(tmp_path / "l", 300)
    first = run_cli("inclusion", "--ledger", str(book), "--seq", "5", "--json")
    assert json.loads(first.out)["checked_against"] == [
        "root recomputed from log.bin (tree size 300); recorded in tree/root.json"]
    recorded = _root_doc(book)
    run_end_ledger(book, 40, start=300)
    result = run_cli("inclusion", "--ledger", str(book), "--seq", "320", "--json")
    doc = json.loads(result.out)
    when = _when(recorded["recorded_ns"])
    assert doc["checked_against"] == [
        f"root recorded in tree/root.json (tree size 300, {when}) and 40 entries read from "
        "log.bin since; the new root recorded"]
    leaves = _leaves(book)
    assert base64.b64decode(doc["root"]) == naive_mth(leaves)
    assert _root_doc(book)["size"] == 340 and _root_doc(book)["peaks"] != recorded["peaks"]


def _when(ns: int) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def test_a_writer_holding_the_lock_leaves_the_root_unrecorded_but_the_proof_checked(tmp_path):
    book = run_end_ledger(tmp_path / "l", 50)
    with file_lock(book / "writer.lock", timeout=0):
        result = run_cli("inclusion", "--ledger", str(book), "--seq", "7", "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc["checked_against"] == [
        "root recomputed from log.bin (tree size 50); not recorded (a writer holds the "
        "ledger's lock)"]
    verify_inclusion(7, 50, _leaves(book)[7], [base64.b64decode(h) for h in doc["proof"]],
                     naive_mth(_leaves(book)))
    assert not (book / "tree" / "root.json").exists()


def _signed(tmp_path: Path, entries: int = 40) -> tuple[Path, str, str]:
    book = run_end_ledger(tmp_path / "l", entries)
    key = tmp_path / "k.key"
    vkey = run_cli("keygen", "--origin", "example.com/log", "--out", str(key)).out.strip()
    assert run_cli("checkpoint", "--ledger", str(book), "--key", str(key)).code == 0
    return book, str(key), vkey


def test_proofs_name_the_checkpoint_and_whether_its_signature_was_verified(tmp_path):
    book, _, vkey = _signed(tmp_path)
    run_end_ledger(book, 10, start=40)
    key_id = vkey.split("+")[1]
    plain = json.loads(run_cli("inclusion", "--ledger", str(book), "--seq", "3",
                               "--json").out)
    assert plain["checked_against"] == [
        "checkpoint 00000001 (tree size 40; signature not checked: no --verifier-key)",
        "root recomputed from log.bin (tree size 50); recorded in tree/root.json"]
    signed = run_cli("consistency", "--ledger", str(book), "--from", "40",
                     "--verifier-key", vkey, "--json")
    assert json.loads(signed.out)["checked_against"][0] == (
        f"checkpoint 00000001 (tree size 40; signature verified: example.com/log+{key_id})")
    other = run_cli("keygen", "--origin", "example.com/log", "--out",
                    str(tmp_path / "other.key")).out.strip()
    refused = run_cli("inclusion", "--ledger", str(book), "--seq", "3",
                      "--verifier-key", other)
    assert refused.code == 1 and refused.out == "", refused
    assert refused.err.startswith("evidence-ledger: error: checkpoint 00000001 does not "
                                  "verify: "), refused.err


@pytest.mark.parametrize("appended", [0, 30])
def test_a_log_forged_below_a_checkpoint_is_refused(tmp_path, appended):
    """No recorded root yet: the root recomputed from the forged log does not extend the
    signed checkpoint (equal sizes: compared; larger: a consistency proof), so nothing is
    proven, whatever the cache says."""
    book, _, vkey = _signed(tmp_path)
    run_end_ledger(book, appended, start=40)
    forge_entry(book, 3, lambda data: data.replace(b"r3", b"r9"))
    result = run_cli("inclusion", "--ledger", str(book), "--seq", "20", "--verifier-key", vkey)
    assert result.code == 1 and result.out == "", result
    error = result.err.splitlines()[-1]
    assert error.startswith("evidence-ledger: error: ") and (
        "contradicts checkpoint 00000001 (tree size 40; signature verified") in error, error
    assert error.endswith("nothing is proven (run verify)"), error
    assert not (book / "tree" / "root.json").exists()


def test_a_session_catches_nodes_tampered_while_it_is_open(tmp_path):
    """A library handle keeps nodes.bin mapped; bytes changed under it make the next proof
    fail its check: the cache is rebuilt (one notice) and the proof is right."""
    book = run_end_ledger(tmp_path / "l", 600)
    notices: list[str] = []
    handle = el.Ledger(book)
    leaves = _leaves(book)
    assert list(handle.inclusion_proof(300, notice=notices.append).proof) == naive_path(
        300, leaves)
    nodes = book / "tree" / "nodes.bin"
    with open(nodes, "r+b") as fh:  # in place: the mapping sees it
        data = bytearray(fh.read())
        for at in range(0, len(data), 32):
            data[at] ^= 0x80
        fh.seek(0)
        fh.write(data)
    for seq in (17, 300, 599):
        assert list(handle.inclusion_proof(seq, notice=notices.append).proof) == naive_path(
            seq, leaves)
    assert len(notices) == 1 and notices[0].startswith("the tree store "), notices
    assert "rebuilt it from the log" in notices[0]
    assert handle.consistency_proof(5, notice=notices.append).proof == tuple(
        naive_proof(5, leaves))


def test_an_unreadable_recorded_root_is_recomputed_with_a_notice(tmp_path):
    book = run_end_ledger(tmp_path / "l", 30)
    assert run_cli("inclusion", "--ledger", str(book), "--seq", "1").code == 0
    (book / "tree" / "root.json").write_text('{"version": 1, "size": 30}')
    result = run_cli("inclusion", "--ledger", str(book), "--seq", "1", "--json")
    assert result.code == 0, result.err
    assert result.err == ("notice: tree/root.json unreadable ('end_offset'); recomputing the "
                          "root from log.bin\n")
    assert _root_doc(book)["size"] == 30  # recorded again


@PROPERTY
@given(data=st.data(), size=st.integers(1, 600))
def test_remembered_nodes_accept_exactly_what_the_verifier_accepts(data, size):
    """A VerifiedNodes that has seen earlier proofs (some tampered) accepts a proof exactly
    when verify_inclusion does, whatever it remembers."""
    tree = TiledTree.from_leaf_hashes(LEAVES[:size])
    root = tree.root()
    nodes = VerifiedNodes(size, root, limit=data.draw(st.sampled_from([3, 40, 1 << 16])))
    for _ in range(data.draw(st.integers(1, 12), label="proofs")):
        index = data.draw(st.integers(0, size - 1), label="index")
        leaf, proof = LEAVES[index], inclusion_proof(tree, index, size)
        if proof and data.draw(st.booleans(), label="tamper"):
            at = data.draw(st.integers(0, len(proof) - 1), label="element")
            proof = [*proof[:at], _flip(proof[at], data.draw(st.integers(0, 255))),
                     *proof[at + 1:]]
        elif data.draw(st.booleans(), label="tamper leaf"):
            leaf = _flip(leaf, data.draw(st.integers(0, 255)))
        assert _fails(partial(verify_inclusion, index, size, leaf, proof, root)) == _fails(
            partial(nodes.check_inclusion, index, leaf, proof))


def test_a_repeated_library_call_reuses_the_loaded_tree(tmp_path, monkeypatch):
    """On one handle, while log.bin is unchanged, a proof neither reloads the cache nor
    re-reads the recorded root or the checkpoints: one stat decides (structural count)."""
    book = run_end_ledger(tmp_path / "l", 300)
    handle = el.Ledger(book)
    handle.inclusion_proof(1)
    calls: list[str] = []
    for name in ("update", "rebuild"):
        original = getattr(TreeStore, name)
        monkeypatch.setattr(TreeStore, name, lambda self, _o=original, _n=name: (
            calls.append(_n), _o(self))[1])
    read_root = checked_proofs.read_recorded_root
    monkeypatch.setattr(checked_proofs, "read_recorded_root",
                        lambda book: (calls.append("root"), read_root(book))[1])
    leaves = _leaves(book)
    for seq in (0, 7, 299, 7):
        assert handle.inclusion_proof(seq).leaf_hash == leaves[seq]
    assert handle.consistency_proof(9).root1 == naive_mth(leaves[:9])
    assert calls == []
    run_end_ledger(book, 1, start=300)  # the log grew: the next proof loads again
    assert handle.inclusion_proof(300).tree_size == 301 and calls == ["root", "update"]


def test_a_bad_verifier_key_is_one_line_on_stderr(tmp_path):
    """Once: the usage error was followed by "Exception ignored in CheckedProofs.__del__"
    and a traceback (the key was parsed before the object had its files' attribute)."""
    book = run_end_ledger(tmp_path / "l", 20)
    for key in ("garbage", "other.example/x+12345678+AQID"):
        done = subprocess.run(
            [sys.executable, "-m", "evidence_ledger.cli.main", "inclusion", "--ledger",
             str(book), "--seq", "3", "--verifier-key", key],
            capture_output=True, text=True, check=False, timeout=120)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith("evidence-ledger: error: "), done.stderr
