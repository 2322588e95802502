"""Hostile files inside the ledger directory, from an adversarial trial.

Each input once made a command print a proof that does not verify (a tampered ``tree/``
cache), hang (a FIFO or a symlink to ``/dev/zero`` where a file is read), or pass a
ledger that lost evidence (a payload deleted without a ``redaction`` entry).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evidence_ledger.format.entries import PAYLOAD_FIELDS
from evidence_ledger.format.errors import EvidenceError
from evidence_ledger.format.framing import Damage, Record, TornTail, frame, scan_bytes
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage import log_proofs
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.tree_store import TreeStore
from evidence_ledger.tlog.merkle import leaf_hash
from evidence_ledger.tlog.proof_verify import verify_consistency, verify_inclusion
from evidence_ledger.tlog.tiles import node_count
from tests.fuzzing import FUZZ
from tests.helpers import DATA, default_index, forge_entry, format1, ingest, run_cli
from tests.test_proofs import naive_mth


@contextlib.contextmanager
def deadline(seconds: int = 20) -> Iterator[None]:
    """Fail (instead of hanging the suite) if the block runs longer than ``seconds``."""

    def expire(signum, frame):  # type: ignore[no-untyped-def]
        raise TimeoutError(f"still running after {seconds} s: the command hangs")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def cli(*args: str):  # type: ignore[no-untyped-def]
    with deadline():
        return run_cli(*args)


def _book(path: Path, entries: int = 300) -> Path:
    writer = EvidenceWriter(path)
    with writer.atomic():
        for i in range(entries):
            writer.run_end(run_id=f"r{i}", status="completed")
    return path


def _leaves(book: Path) -> list[bytes]:
    return [leaf_hash(item.data) for item in Ledger(book).scan()]  # type: ignore[union-attr]


def _b64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def _check_inclusion(book: Path, seq: int, result) -> None:  # type: ignore[no-untyped-def]
    """The proof printed verifies against the root recomputed from the log."""
    assert result.code == 0, (result.code, result.err)
    doc = json.loads(result.out)
    leaves = _leaves(book)
    size = doc["treeSize"]
    assert _b64(doc["root"]) == naive_mth(leaves[:size])
    assert _b64(doc["leafHash"]) == leaves[seq]
    verify_inclusion(seq, size, leaves[seq], [_b64(h) for h in doc["proof"]],
                     naive_mth(leaves[:size]))


def _check_consistency(book: Path, size1: int, result) -> None:  # type: ignore[no-untyped-def]
    assert result.code == 0, (result.code, result.err)
    doc = json.loads(result.out)
    leaves = _leaves(book)
    root1, root2 = naive_mth(leaves[:size1]), naive_mth(leaves[: doc["size2"]])
    assert (_b64(doc["root1"]), _b64(doc["root2"])) == (root1, root2)
    verify_consistency(size1, doc["size2"], [_b64(h) for h in doc["proof"]], root1, root2)


def _tree_files(book: Path) -> dict[str, bytes]:
    root = book / "tree"
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and p.name != "lock"
    }


# -- 1. inclusion and consistency never trust the tree/ cache ----------------------------


def test_a_tampered_node_file_never_yields_a_wrong_proof(tmp_path):
    book = _book(tmp_path / "l", 21)
    assert cli("inclusion", "--ledger", str(book), "--seq", "3").code == 0
    clean = _tree_files(book)
    assert cli("inclusion", "--ledger", str(book), "--seq", "3").err == ""  # no notice
    nodes = book / "tree" / "nodes.bin"
    rebuilt = 0
    for position in range(node_count(21)):
        data = bytearray(clean["nodes.bin"])
        data[32 * position + 7] ^= 0x40
        nodes.write_bytes(bytes(data))
        result = cli("inclusion", "--ledger", str(book), "--seq", "3", "--json")
        _check_inclusion(book, 3, result)
        if result.err:
            rebuilt += 1
            assert result.err.count("\n") == 1 and "rebuilt" in result.err, result.err
            assert _tree_files(book) == clean
        nodes.write_bytes(bytes(data))
        result = cli("consistency", "--ledger", str(book), "--from", "5", "--json")
        _check_consistency(book, 5, result)
        assert _tree_files(book) == clean or not result.err
    assert rebuilt >= 5  # every node on the path and every peak was caught


def test_prove_rebuilds_a_tampered_tree_cache_and_its_bundle_verifies(tmp_path):
    book, key, vkey = _keyed(tmp_path)
    call_id = run_cli("log", "--ledger", str(book), "--kind", "call", "--json").out
    call_id = json.loads(call_id)[0]["body"]["call_id"]
    assert cli("inclusion", "--ledger", str(book), "--seq", "0").code == 0  # cache built
    nodes = book / "tree" / "nodes.bin"
    damaged = bytearray(nodes.read_bytes())
    for position in range(0, len(damaged), 32):
        damaged[position] ^= 0x01  # every node hash wrong
    nodes.write_bytes(bytes(damaged))
    out = tmp_path / "b.json"
    made = cli("prove", "--ledger", str(book), "--call-id", call_id, "--key", str(key),
               "--out", str(out))
    assert made.code == 0, made.err
    checked = cli("verify-proof", str(out), "--verifier-key", vkey)
    assert checked.code == 0, checked.err
    assert nodes.read_bytes() != bytes(damaged)  # rebuilt from the log


@pytest.mark.parametrize(
    "damage",
    [
        "state-partials", "state-size-larger", "state-size-smaller", "state-garbage",
        "nodes-truncated", "nodes-swapped-for-another-ledger", "offsets-shifted",
        "tile-zeroed", "state-last-leaf",
    ],
)
def test_a_damaged_tree_cache_is_rebuilt_from_the_log(tmp_path, damage):
    book = _book(tmp_path / "l", 600)
    other = _book(tmp_path / "other", 700)
    assert cli("inclusion", "--ledger", str(other), "--seq", "1").code == 0
    assert cli("inclusion", "--ledger", str(book), "--seq", "1").code == 0
    clean = _tree_files(book)
    tree = book / "tree"
    state = json.loads((tree / "state.json").read_text())
    if damage == "state-partials":
        partial = bytearray(_b64(state["partial_tiles"][0]))
        partial[5] ^= 1
        state["partial_tiles"][0] = base64.b64encode(bytes(partial)).decode()
    elif damage == "state-size-larger":
        state["size"] = 601
    elif damage == "state-size-smaller":
        state["size"] = 599
    elif damage == "state-last-leaf":
        state["last_leaf"] = base64.b64encode(b"\x01" * 32).decode()
    if damage.startswith("state-"):
        text = "{garbage" if damage == "state-garbage" else json.dumps(state)
        (tree / "state.json").write_text(text)
    elif damage == "nodes-truncated":
        with open(tree / "nodes.bin", "r+b") as fh:
            fh.truncate(32 * 100)
    elif damage == "nodes-swapped-for-another-ledger":
        shutil.copy(other / "tree" / "nodes.bin", tree / "nodes.bin")
    elif damage == "offsets-shifted":
        offsets = (tree / "offsets.bin").read_bytes()
        (tree / "offsets.bin").write_bytes(offsets[8:] + offsets[:8])
    elif damage == "tile-zeroed":
        (tree / "tile" / "0" / "001").write_bytes(b"\0" * 8192)
    for seq in (0, 300, 599):
        _check_inclusion(book, seq, cli("inclusion", "--ledger", str(book), "--seq", str(seq),
                                        "--json"))
    for size1 in (1, 256, 599):
        _check_consistency(book, size1, cli("consistency", "--ledger", str(book), "--from",
                                            str(size1), "--json"))
    _check_inclusion(book, 10, cli("inclusion", "--ledger", str(book), "--seq", "10",
                                   "--tree-size", "257", "--json"))
    if damage not in ("tile-zeroed", "state-partials", "offsets-shifted"):
        assert _tree_files(book) == clean  # (proofs never read tiles, partials or offsets)


def test_a_damaged_log_fails_the_proof_commands(tmp_path):
    book = _book(tmp_path / "l", 40)
    records = list(Ledger(book).scan())
    data = bytearray((book / "log.bin").read_bytes())
    data[records[30].offset + 12] ^= 0xFF  # type: ignore[union-attr]  # record CRC now fails
    (book / "log.bin").write_bytes(bytes(data))
    for args in (["inclusion", "--seq", "3"], ["consistency", "--from", "5"]):
        result = cli(*args, "--ledger", str(book))
        assert result.code == 1 and result.out == "", result
        assert result.err.count("\n") == 1 and "damaged at seq 30" in result.err, result.err


def test_a_log_rewritten_under_the_cache_is_refused_not_proven(tmp_path):
    """A forger rewrites one entry (CRC fixed) under a cache that agrees with the old log:
    the proof commands rebuild the cache (one notice), find that the log no longer gives
    the root recorded in tree/root.json, and prove nothing (exit 1, saying so). Deleting
    tree/ accepts the log as it now is, and the proof says its root was recomputed."""
    book = _book(tmp_path / "l", 300)
    assert cli("inclusion", "--ledger", str(book), "--seq", "260").code == 0
    recorded = json.loads((book / "tree" / "root.json").read_text())
    forge_entry(book, 260, lambda data: data.replace(b"r260", b"r999"))
    for args in (["inclusion", "--seq", "260"], ["inclusion", "--seq", "0"],
                 ["consistency", "--from", "5"]):
        result = cli(*args, "--ledger", str(book), "--json")
        assert result.code == 1 and result.out == "", (args, result)
        notice, error = result.err.splitlines()
        assert notice.startswith("notice: the tree store ") and "rebuilt it" in notice
        assert error.startswith("evidence-ledger: error: ") and (
            "contradicts root recorded in tree/root.json (tree size 300, ") in error
        assert error.endswith("nothing is proven (run verify)"), error
    assert json.loads((book / "tree" / "root.json").read_text()) == recorded
    shutil.rmtree(book / "tree")
    result = cli("inclusion", "--ledger", str(book), "--seq", "260", "--json")
    _check_inclusion(book, 260, result)
    assert json.loads(result.out)["checked_against"] == [
        "root recomputed from log.bin (tree size 300); recorded in tree/root.json"]


def test_a_log_rewritten_before_any_root_was_recorded_contradicts_its_checkpoint(tmp_path):
    """No recorded root yet, but a signed checkpoint: the root recomputed from the forged
    log does not extend the checkpoint, and nothing is proven."""
    book, _, vkey = _keyed(tmp_path)
    forge_entry(book, 3, lambda data: data[:-1] + bytes([data[-1] ^ 1]))
    result = cli("inclusion", "--ledger", str(book), "--seq", "1", "--verifier-key", vkey)
    assert result.code == 1 and result.out == "", result
    assert "contradicts checkpoint 00000001 (tree size " in result.err, result.err
    assert "signature verified: example.com/log+" in result.err, result.err
    assert not (book / "tree" / "root.json").exists()  # a root that failed is not recorded


def test_library_proofs_stay_fast_and_the_store_can_be_rebuilt(tmp_path):
    book = _book(tmp_path / "l", 300)
    before = TreeStore(book).update().root()
    (book / "tree" / "nodes.bin").write_bytes(b"\0" * 32 * node_count(300))
    assert TreeStore(book).rebuild().root() == before == naive_mth(_leaves(book))


def _reference_leaves(log: bytes) -> tuple[list[bytes], bool]:
    """What every reader reads: leaves before the first damage, and whether there was."""
    leaves = []
    for item in scan_bytes(log):
        if isinstance(item, TornTail):
            break
        if isinstance(item, Damage) or not item.crc_ok:
            return leaves, True
        leaves.append(leaf_hash(item.data))
    return leaves, False


@FUZZ
@given(
    groups=st.lists(st.lists(st.binary(max_size=90), min_size=1, max_size=3), max_size=6),
    cut=st.integers(0, 2000),
    edits=st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 255)), max_size=2),
    tail=st.sampled_from([b"", b"\0" * 9, b"\0" * 40, b"garbage!", b"\0\0\0\x05"]),
    read=st.sampled_from([8, 13, 64, 1 << 22]),
)
def test_the_fast_log_pass_reads_what_every_reader_reads(groups, cut, edits, tail, read):
    log = bytearray(
        b"".join(frame(r, i < len(g) - 1) for g in groups for i, r in enumerate(g)) + tail
    )
    for position, value in edits:
        if log:
            log[position % len(log)] = value
    data = bytes(log[: len(log) - cut % (len(log) + 1)])
    want, damaged = _reference_leaves(data)
    got: list[bytes] = []
    with tempfile.TemporaryFile() as fh:
        fh.write(data)
        fh.flush()
        old, log_proofs._READ = log_proofs._READ, read  # small reads: frames across read bounds
        try:
            with contextlib.suppress(EvidenceError):
                got.extend(log_proofs.log_leaf_hashes(fh.fileno(), len(data)))
                assert not damaged, "damage was not reported"
        finally:
            log_proofs._READ = old
    assert got == want


# -- 2. non-regular files inside the ledger: refused, never read ----------------------


def _plant(path: Path, kind: str, tmp_path: Path) -> None:
    if path.exists() or path.is_symlink():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:  # a symlink to a regular file outside the ledger
        outside = tmp_path / "outside"
        outside.write_bytes(b"not evidence\n")
        path.symlink_to(outside)


KINDS = ["fifo", "dev-zero", "symlink"]


def _keyed(tmp_path: Path) -> tuple[Path, Path, str]:
    book = tmp_path / "l"
    ingest(book)
    key = tmp_path / "k.key"
    vkey = run_cli("keygen", "--origin", "example.com/log", "--out", str(key)).out.strip()
    assert run_cli("checkpoint", "--ledger", str(book), "--key", str(key)).code == 0
    return book, key, vkey


@pytest.mark.parametrize("kind", KINDS)
def test_a_non_regular_checkpoint_is_a_finding(tmp_path, kind):
    book, key, vkey = _keyed(tmp_path)
    _plant(book / "checkpoints" / "00000002.note", kind, tmp_path)
    result = cli("verify", "--ledger", str(book), "--verifier-key", vkey, "--json")
    assert result.code == 1, result
    found = json.loads(result.out)["violations"]
    assert [v["rule"] for v in found] == ["checkpoint_format"], found
    assert "00000002.note" in found[0]["detail"] and "regular file" in found[0]["detail"]
    signed = cli("checkpoint", "--ledger", str(book), "--key", str(key))
    assert signed.code == 1 and "regular file" in signed.err


@pytest.mark.parametrize("kind", KINDS)
def test_a_non_regular_payload_is_a_violation(tmp_path, kind):
    book = format1(tmp_path / "l")  # one file per payload (format 2: tests/test_segments.py)
    ingest(book)
    payload = next(p for p in (book / "payloads").rglob("*") if p.is_file())
    _plant(payload, kind, tmp_path)
    result = cli("verify", "--ledger", str(book), "--json")
    assert result.code == 1, result
    report = json.loads(result.out)
    assert {v["rule"] for v in report["violations"]} == {"integrity"}, report
    assert any(payload.name in n and "regular file" in n for n in report["notices"]), report
    assert cli("verify", "--ledger", str(book), "--no-payloads").code == 0
    assert Ledger(book).payloads.get(bytes.fromhex(payload.name)) is None


@pytest.mark.parametrize("kind", KINDS)
def test_a_non_regular_log_is_damage(tmp_path, kind):
    book = _book(tmp_path / "l", 5)
    key = tmp_path / "k.key"
    assert run_cli("keygen", "--origin", "example.com/log", "--out", str(key)).code == 0
    _plant(book / "log.bin", kind, tmp_path)
    for args in (["verify"], ["inclusion", "--seq", "0"], ["consistency", "--from", "1"],
                 ["log"], ["checkpoint", "--key", str(key)]):
        result = cli(*args, "--ledger", str(book))
        assert result.code == 1, (args, result)
        assert result.err.count("\n") == 1 and "log.bin" in result.err, (args, result.err)
    with deadline(), pytest.raises(EvidenceError, match=r"log\.bin"):
        EvidenceWriter(book).run_end(run_id="x", status="completed")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["nodes.bin", "offsets.bin", "state.json", "tile/0/000"])
def test_a_non_regular_tree_cache_file_is_rebuilt(tmp_path, kind, name):
    book = _book(tmp_path / "l", 300)
    assert cli("inclusion", "--ledger", str(book), "--seq", "1").code == 0
    outside = tmp_path / "outside"
    _plant(book / "tree" / name, kind, tmp_path)
    result = cli("inclusion", "--ledger", str(book), "--seq", "7", "--json")
    _check_inclusion(book, 7, result)
    _check_consistency(book, 9, cli("consistency", "--ledger", str(book), "--from", "9",
                                    "--json"))
    _book(book, 1)  # one more entry: the next proof updates the store
    again = cli("inclusion", "--ledger", str(book), "--seq", "7", "--json")
    _check_inclusion(book, 7, again)
    if name != "tile/0/000":  # (nothing reads a full tile again once it is written)
        assert "rebuilt" in result.err + again.err
    if kind == "symlink":
        assert outside.read_bytes() == b"not evidence\n"  # never written through


def test_a_symlinked_tree_directory_is_never_written_through(tmp_path):
    book = _book(tmp_path / "l", 300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("precious")
    (book / "tree").symlink_to(elsewhere)
    result = cli("inclusion", "--ledger", str(book), "--seq", "7", "--json")
    _check_inclusion(book, 7, result)
    assert sorted(os.listdir(elsewhere)) == ["keep"] and not (book / "tree").is_symlink()


@pytest.mark.parametrize("kind", KINDS)
def test_lock_files_are_never_followed_out_of_the_ledger(tmp_path, kind):
    book = _book(tmp_path / "l", 300)
    assert cli("inclusion", "--ledger", str(book), "--seq", "1").code == 0
    _plant(book / "tree" / "lock", kind, tmp_path)
    _book(book, 1)  # the next proof updates the store, under its lock
    _check_inclusion(book, 7, cli("inclusion", "--ledger", str(book), "--seq", "7", "--json"))
    assert (book / "tree" / "lock").is_file() and not (book / "tree" / "lock").is_symlink()
    away = tmp_path / "created-outside"
    (book / "writer.lock").unlink()
    (book / "writer.lock").symlink_to(away)  # a dangling link: O_CREAT would create it
    result = cli("ingest", str(DATA / "rules" / "valid.jsonl"), "--ledger", str(book))
    assert result.code == 1 and "writer.lock" in result.err, result
    assert not away.exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_non_regular_repair_marker_never_hangs_verify(tmp_path, kind):
    book = tmp_path / "l"
    ingest(book)
    _plant(book / "repairs" / "r1.json", kind, tmp_path)
    result = cli("verify", "--ledger", str(book))
    assert result.code == 0 and "r1.json is unreadable" in result.out, result


# -- 3. a payload deleted without a redaction entry is lost evidence ------------------


def test_a_deleted_payload_is_a_violation_naming_its_digest_and_seq(tmp_path):
    book = tmp_path / "l"
    ingest(book)
    named = [
        (entry.seq, entry.body[name])
        for entry, _ in Ledger(book).entries()
        for name in PAYLOAD_FIELDS
        if isinstance(entry.body.get(name), bytes)
    ]
    _, digest = named[-1]
    first = min(s for s, d in named if d == digest)
    assert Ledger(book).payloads.remove(digest)  # gone, without a redaction entry
    result = cli("verify", "--ledger", str(book), "--json")
    assert result.code == 1, result
    report = json.loads(result.out)
    assert "payload_missing" in report["rules"]
    assert [(v["rule"], v["seq"]) for v in report["violations"]] == [("payload_missing", first)]
    assert f"sha256:{digest.hex()}" in report["violations"][0]["detail"]
    assert not any("missing" in n for n in report["notices"]), report["notices"]
    human = cli("verify", "--ledger", str(book))
    assert human.code == 1 and "payload_missing" in human.out
    skipped = cli("verify", "--ledger", str(book), "--no-payloads", "--json")
    assert skipped.code == 0 and "payload_missing" not in json.loads(skipped.out)["rules"]

    redacted = cli("redact", "--ledger", str(book), "--digest", f"sha256:{digest.hex()}",
                   "--reason", "erasure request")
    assert redacted.code == 0 and "already gone" in redacted.out, redacted
    after = json.loads(cli("verify", "--ledger", str(book), "--json").out)
    assert after["ok"] and any("redacted" in n for n in after["notices"]), after


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["index.duckdb", "index.duckdb.build", "index.duckdb.wal"])
def test_a_non_regular_index_file_is_refused_never_opened(tmp_path, kind, name):
    book, _key, _vkey = _keyed(tmp_path)
    _plant(default_index(book).with_name(name), kind, tmp_path)
    for args in (("query", "SELECT count(*) AS n FROM entries"),
                 ("export", "--format", "jsonl", "--out", str(tmp_path / "x"), "--key",
                  str(_key))):
        result = cli(*args[:1], "--ledger", str(book), *args[1:])
        assert result.code == 2 and "not a regular file" in result.err, (args, result.err)
        assert result.err.count("\n") == 1


@pytest.mark.parametrize("kind", [*KINDS, "symlink-to-an-index"])
@pytest.mark.parametrize("name", ["index.duckdb", "index.duckdb.wal"])
def test_a_non_regular_file_beside_a_current_index_is_refused_never_opened(tmp_path, kind, name):
    # before: a query on a current index opened it without looking (a FIFO WAL hung it)
    book, _key, _vkey = _keyed(tmp_path)
    assert cli("query", "--ledger", str(book), "SELECT 1").code == 0  # the index is current
    index = default_index(book)
    if kind == "symlink-to-an-index":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        shutil.copy(index, elsewhere / "index.duckdb")
        index.with_name(name).unlink(missing_ok=True)
        index.with_name(name).symlink_to(elsewhere / "index.duckdb")
    else:
        _plant(index.with_name(name), kind, tmp_path)
    result = cli("query", "--ledger", str(book), "SELECT count(*) AS n FROM entries")
    assert result.code == 2 and "not a regular file" in result.err, result
    assert result.err.count("\n") == 1


@pytest.mark.parametrize("cut", ["torn", "whole-entries"])
def test_a_writer_never_cuts_or_overwrites_entries_a_checkpoint_covers(tmp_path, cut):
    book, _key, _vkey = _keyed(tmp_path)
    log = book / "log.bin"
    data = log.read_bytes()
    if cut == "torn":
        kept = data[:-100]  # mid-entry: a torn tail under the checkpoint's tree size
    else:
        frames = [r.end for r in Ledger(book).scan() if isinstance(r, Record)]
        kept = data[: frames[-3]]  # two whole entries fewer than the checkpoint covers
    log.write_bytes(kept)
    events = tmp_path / "more.jsonl"
    events.write_text('{"kind":"run_end","status":"completed","run_id":"r-late"}\n')
    result = cli("ingest", str(events), "--ledger", str(book))
    assert result.code == 1 and "signed checkpoint covers" in result.err, result.err
    assert log.read_bytes() == kept and not (book / "torn").exists()


def test_scan_session_refuses_a_fifo_and_deep_nesting(tmp_path):
    fifo = tmp_path / "f.db"
    os.mkfifo(fifo)
    result = cli("scan-session", str(fifo))
    assert result.code == 2 and "not a regular file" in result.err, result.err
    deep = tmp_path / "d.jsonl"
    deep.write_text('{"session_id":"s","item":' + "[" * 100_000 + "]" * 100_000 + "}\n")
    result = cli("scan-session", str(deep))
    assert result.code == 2 and result.err.count("\n") == 1 and "line 1" in result.err, result.err


def test_export_refuses_a_log_changed_after_it_was_indexed(tmp_path):
    # an entry rewritten in place, canonical and with a fresh CRC: the index's freshness
    # check (the last indexed record) still passes, the root does not
    book, key, _vkey = _keyed(tmp_path)
    index = ("--index", str(tmp_path / "index.duckdb"))  # one index, whatever the origin
    assert cli("query", "--ledger", str(book), *index, "SELECT 1 AS one").code == 0
    def flip_a_letter_of_the_run_id(data: bytes) -> bytes:
        at = data.index(b"run_id") + len(b"run_id") + 2  # inside the run id's value
        return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]  # still canonical

    forge_entry(book, 5, flip_a_letter_of_the_run_id)
    export = ("export", "--ledger", str(book), *index, "--format", "jsonl", "--out",
              str(tmp_path / "x"), "--key", str(key))
    result = cli(*export)
    assert result.code == 1 and "contradicts its stored checkpoint 1" in result.err, result.err
    assert not (tmp_path / "x").exists()
    shutil.rmtree(book / "checkpoints")  # no signed head to contradict: the index's root
    result = cli(*export)
    assert result.code == 1 and "no longer has the root" in result.err, result.err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("folder", ["payloads", "checkpoints", "payloads-shard"])
def test_a_symlinked_folder_is_never_read_or_written_through(tmp_path, folder):
    book, key, _vkey = _keyed(tmp_path)
    outside = tmp_path / "outside"
    if folder == "payloads-shard":
        shard = next(p for p in (book / "payloads").iterdir() if p.is_dir())
        shard.rename(outside)
        shard.symlink_to(outside)
    else:
        (book / folder).rename(outside)
        (book / folder).symlink_to(outside)
    before = sorted(p.name for p in outside.rglob("*"))
    assert cli("verify", "--ledger", str(book)).code == 1
    events = tmp_path / "more.jsonl"
    events.write_text('{"kind":"call","call_id":"late","agent":"a","tool":"t",'
                      '"arguments":"{\\"x\\": 1}"}\n')
    cli("ingest", str(events), "--ledger", str(book))
    cli("checkpoint", "--ledger", str(book), "--key", str(key))
    assert sorted(p.name for p in outside.rglob("*")) == before  # nothing written outside


def test_inclusion_refuses_an_entry_that_does_not_decode(tmp_path):
    """Regression (hostile-input audit): an entry whose bytes are not MessagePack (its CRC-32
    recomputed, no checkpoint covering it) got an inclusion proof and exit 0."""
    ingest(tmp_path)
    forge_entry(tmp_path, 5, lambda data: b"\xc1" + data[1:])
    refused = run_cli("inclusion", "--ledger", str(tmp_path), "--seq", "5")
    assert refused.code == 1 and "entry 5 does not decode" in refused.err, refused.err
    assert run_cli("inclusion", "--ledger", str(tmp_path), "--seq", "6").code == 0
