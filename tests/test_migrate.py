"""The format-1 fixture ledger (``tests/data/format1/``, written by the code of format
version 1): it verifies as recorded, with its root hash and checkpoints; ``migrate --to 2``
rewrites its payload files into segments with log.bin and every checkpoint unchanged, and a
kill -9 anywhere in a migration leaves a ledger that verifies and a re-run that finishes."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import shutil
import signal
from pathlib import Path

import pytest

import evidence_ledger as el
from evidence_ledger import StorageError, migrate
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from tests.helpers import DATA, run_cli, stored_payloads

FIXTURE = DATA / "format1"
ROOT = "AuHIEMnX02GlCB8ZwpJLUWtSj3Z2IL3suWRKeveZO5U="
"""The fixture's root hash (21 entries), as recorded when it was written."""
CHECKPOINTS = {
    "00000001.note": "147f624cbc608f4106edff3553c948374bf51b09d758139edc24182da2e53fa4",
    "00000002.note": "e70a8bcc7fe7a0d3d6d0759c8151d089d5cb8fbd863ab75087a9b9bb00b39171",
}
"""SHA-256 of each checkpoint file of the fixture."""
VKEY = (FIXTURE / "signing.vkey").read_text().strip()
SECRET = '{"card": "4111-1111-1111-1111", "cvv": "123"}'
"""The fixture's redacted arguments (tests/data/format1/make_format1_ledger.py)."""


@pytest.fixture
def book(tmp_path: Path) -> Path:
    """A copy of the fixture ledger."""
    target = tmp_path / "ledger"
    shutil.copytree(FIXTURE / "ledger", target)
    return target


def _checkpoint_hashes(book: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((book / "checkpoints").glob("*.note"))}


def test_fixture_verifies_as_recorded(book: Path) -> None:
    result = run_cli("verify", "--ledger", str(book), "--verifier-key", VKEY, "--json")
    assert result.code == 0, result.out + result.err
    assert f'"root_hash": "{ROOT}"' in result.out
    assert '"tree_size": 21' in result.out
    assert _checkpoint_hashes(book) == CHECKPOINTS
    assert base64.b64decode(ROOT).hex() == (
        "02e1c810c9d7d361a5081f19c2924b516b528f767620bdecb9644a7af7993b95")


def _files(book: Path) -> dict[str, bytes]:
    """The bytes of ``log.bin`` and every checkpoint file (what a migration never changes)."""
    found = {"log.bin": (book / "log.bin").read_bytes()}
    found.update({f"checkpoints/{p.name}": p.read_bytes()
                  for p in sorted((book / "checkpoints").iterdir())})
    return found


def _segment_bytes(book: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((book / "payloads").rglob("*.seg")))


def test_the_fixture_migrates_and_verifies_again_with_the_same_root(book: Path) -> None:
    before = _files(book)
    payloads = stored_payloads(book)
    assert len(payloads) == 12 and max(map(len, payloads.values())) == 65536
    done = run_cli("migrate", "--ledger", str(book), "--to", "2", "--json")
    assert done.code == 0, done.err
    assert json.loads(done.out) == {
        "ledger": str(book), "from_version": 1, "to_version": 2, "changed": True,
        "copied": 12, "reused": 0, "erased": 0, "kept": 0, "removed": 12}
    assert (book / "format").read_text() == "2\n"
    assert _files(book) == before  # log.bin and every checkpoint byte-identical
    assert _checkpoint_hashes(book) == CHECKPOINTS
    assert sorted(p.name for p in (book / "payloads").iterdir()) == [
        "locations.sqlite", "segments"]
    result = run_cli("verify", "--ledger", str(book), "--verifier-key", VKEY, "--json")
    assert result.code == 0, result.out + result.err
    report = json.loads(result.out)
    assert report["root_hash"] == ROOT and report["tree_size"] == 21 and report["ok"]
    assert stored_payloads(book) == payloads
    for digest, data in payloads.items():
        with el.Ledger(book).open_payload(digest.hex()) as stream:  # show --raw
            assert stream.read() == data, digest.hex()
    shown = run_cli("show", "sha256:" + hashlib.sha256(b"18 C, clear").hexdigest(),
                    "--ledger", str(book))
    assert shown.code == 0 and shown.out.endswith("18 C, clear\n"), shown.out
    assert SECRET.encode() not in _segment_bytes(book)
    redacted = run_cli("show", hashlib.sha256(SECRET.encode()).hexdigest(), "--ledger",
                       str(book))
    assert redacted.code == 0 and "redacted by dpo@example.com" in redacted.out


def test_migrating_a_version_2_ledger_is_a_no_op(book: Path) -> None:
    assert run_cli("migrate", "--ledger", str(book), "--to", "2").code == 0
    before = {p: p.read_bytes() for p in book.rglob("*") if p.is_file()}
    again = run_cli("migrate", "--ledger", str(book), "--to", "2")
    assert again.code == 0
    assert again.out == f"{book} is already in format version 2: nothing to do\n"
    assert {p: p.read_bytes() for p in book.rglob("*") if p.is_file()} == before
    for bad in ("1", "3"):
        refused = run_cli("migrate", "--ledger", str(book), "--to", bad)
        assert refused.code == 2 and "format version 2 only" in refused.err
    assert run_cli("migrate", "--ledger", str(book.parent / "none"), "--to", "2").code == 2


def test_a_damaged_payload_file_is_not_migrated(book: Path) -> None:
    path = next(p for p in (book / "payloads").rglob("*") if p.is_file())
    path.write_bytes(b"changed")
    refused = run_cli("migrate", "--ledger", str(book), "--to", "2")
    assert refused.code == 1 and "does not hash to its name: not migrated" in refused.err
    assert not (book / "format").exists()  # nothing committed: still version 1
    assert run_cli("verify", "--ledger", str(book)).code == 1  # as before: integrity


def test_a_writer_open_across_the_migration_appends_nothing_to_the_old_layout(book: Path) -> None:
    writer = EvidenceWriter(Ledger(book))
    writer.run_end(run_id="run_9", status="completed")
    assert run_cli("migrate", "--ledger", str(book), "--to", "2").code == 0
    with pytest.raises(StorageError, match="migrated to format version 2 while this writer"):
        writer.call(run_id="run_9", call_id="c", agent="a", tool="t", arguments="{}")
    EvidenceWriter(Ledger(book)).call(run_id="run_9", call_id="c", agent="a", tool="t",
                                      arguments="{}")
    assert run_cli("verify", "--ledger", str(book)).code == 0


# -- kill -9 -------------------------------------------------------------------------------


def _killed_at(book: Path, step: int) -> None:
    """Run :func:`migrate` on ``book`` in a forked child that SIGKILLs itself right after its
    ``step``-th unit of work (1-based), and check that it died so."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        seen = itertools.count(1)

        def die(_step: str, _done: int, _total: int) -> None:
            if next(seen) == step:
                os.kill(os.getpid(), signal.SIGKILL)

        try:
            migrate(book, 2, progress=die)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (step, status)


@pytest.fixture
def grown(tmp_path: Path) -> Path:
    """The fixture with 40 more calls appended in format 1 (40 more payload files)."""
    target = tmp_path / "grown"
    shutil.copytree(FIXTURE / "ledger", target)
    writer = EvidenceWriter(Ledger(target))
    for n in range(40):
        writer.call(run_id="run_4", call_id=f"c{n}", agent="a", tool="t",
                    arguments=json.dumps({"n": n, "pad": "x" * (n * 97)}))
    assert not (target / "format").exists()
    return target


def test_kill_9_at_50_points_of_a_migration_leaves_a_ledger_that_verifies(
        grown: Path, tmp_path: Path) -> None:
    before = _files(grown)
    root = json.loads(run_cli("verify", "--ledger", str(grown), "--json").out)["root_hash"]
    payloads = stored_payloads(grown)
    steps: list[str] = []
    probe = tmp_path / "probe"
    shutil.copytree(grown, probe)
    migrate(probe, 2, progress=lambda step, done, total: steps.append(step))
    assert {"copy", "check", "commit", "clean"} <= set(steps) and len(steps) > 100
    commit = steps.index("commit") + 1
    chosen = {1, commit - 1, commit, commit + 1, len(steps)}  # and 45 spread between
    spread = iter(sorted(range(1, len(steps) + 1), key=lambda k: (k * 7919) % len(steps)))
    while len(chosen) < 50:
        chosen.add(next(spread))
    points = sorted(chosen)
    assert {steps[p - 1] for p in points} == set(steps)
    for point in points:
        book = tmp_path / f"k{point}"
        shutil.copytree(grown, book)
        _killed_at(book, point)
        cut = run_cli("verify", "--ledger", str(book), "--json")
        assert cut.code == 0, (point, steps[point - 1], cut.out)
        assert json.loads(cut.out)["root_hash"] == root
        again = run_cli("migrate", "--ledger", str(book), "--to", "2", "--json")
        assert again.code == 0, (point, again.err)
        assert (book / "format").read_text() == "2\n"
        assert not [p for p in (book / "payloads").iterdir() if len(p.name) == 2], point
        done = run_cli("verify", "--ledger", str(book), "--json")
        assert done.code == 0 and json.loads(done.out)["root_hash"] == root, point
        assert _files(book) == before, point
        assert stored_payloads(book) == payloads, point
        shutil.rmtree(book)


def test_a_payload_redacted_after_a_migration_was_cut_short_is_never_brought_back(
        grown: Path) -> None:
    secret = '{"token": "s3cr3t-t0k3n"}'
    EvidenceWriter(Ledger(grown)).call(run_id="run_5", call_id="c", agent="a", tool="t",
                                       arguments=secret)
    copying = sum(1 for p in (grown / "payloads").rglob("*") if p.is_file())
    _killed_at(grown, copying + 1)  # every file copied into segments, nothing committed
    assert secret.encode() in _segment_bytes(grown)
    digest = hashlib.sha256(secret.encode()).hexdigest()
    assert run_cli("redact", "--ledger", str(grown), "--digest", digest,
                   "--reason", "r").code == 0  # in format 1: its file erased
    done = run_cli("migrate", "--ledger", str(grown), "--to", "2", "--json")
    assert done.code == 0 and json.loads(done.out)["erased"] == 1
    assert not [p for p in grown.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert run_cli("verify", "--ledger", str(grown)).code == 0
    shown = run_cli("show", digest, "--ledger", str(grown))
    assert shown.code == 0 and "redacted" in shown.out


@pytest.mark.parametrize("claim", ["1\n", None])
def test_a_version_2_ledger_whose_format_file_says_1_or_is_gone_keeps_every_payload(
        book: Path, claim: str | None) -> None:
    payloads = stored_payloads(book)
    assert run_cli("migrate", "--ledger", str(book), "--to", "2").code == 0
    assert SECRET.encode() not in _segment_bytes(book)  # redacted in the fixture
    if claim is None:
        (book / "format").unlink()
    else:
        (book / "format").write_text(claim)
    again = run_cli("migrate", "--ledger", str(book), "--to", "2", "--json")
    assert again.code == 0, again.err
    done = json.loads(again.out)
    assert (done["from_version"], done["erased"], done["kept"]) == (1, 0, 12)
    assert (book / "format").read_text() == "2\n"
    assert stored_payloads(book) == payloads
    assert all(data in _segment_bytes(book) for data in payloads.values())
    assert run_cli("verify", "--ledger", str(book)).code == 0
    (book / "format").write_text("1\n")
    text = run_cli("migrate", "--ledger", str(book), "--to", "2")
    assert text.code == 0 and ", 12 already in segments with no file and no redaction kept " \
        "(a version-2 writer stored them);" in text.out
