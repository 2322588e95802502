"""Keys, checkpoint bodies, the append-only checkpoint store and the checkpoint audit.

The audit tests are attack scenarios on real ledger directories: roll back, fork,
rewrite, delete a checkpoint, sign with another key. Each asserts the exact findings
and that the audit changed nothing on disk.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import stat
from pathlib import Path

import pytest

from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.record.checkpointing import create_checkpoint
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.checkpoint_store import CheckpointStore
from evidence_ledger.storage.keys import keygen, load_signer
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.tree_store import TreeStore
from evidence_ledger.tlog.checkpoint import (
    Checkpoint,
    CheckpointFormatError,
    CheckpointOriginError,
    parse_checkpoint,
    verify_checkpoint,
)
from evidence_ledger.tlog.merkle import EMPTY_ROOT
from evidence_ledger.tlog.note import (
    KeyFormatError,
    Signer,
    UnverifiedNoteError,
    Verifier,
    sign_note,
)
from evidence_ledger.verify.checkpoint_audit import (
    RULES,
    CheckpointFinding,
    RootRecorder,
    check_checkpoints,
    checkpoint_sizes,
)
from evidence_ledger.verify.findings import Finding

ORIGIN = "ledger.example/audit"


def _append(path: Path, count: int, start: int = 0) -> Path:
    """Append ``count`` entries, one atomic group each (so any entry can be cut after)."""
    writer = EvidenceWriter(path, clock=lambda: 1_700_000_000_000_000_000)
    for i in range(start, start + count):
        writer.run_end(run_id=f"r{i}", status="completed")
    return path


def _truncate_to(book: Path, entries: int) -> None:
    records = list(Ledger(book).scan())
    with open(book / "log.bin", "r+b") as fh:
        fh.truncate(records[entries - 1].end)  # type: ignore[union-attr]


def _snapshot(book: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(book)): p.read_bytes()
        for p in sorted(book.rglob("*"))
        if p.is_file() and "tree" not in p.parts
    }


@pytest.fixture
def signer() -> Signer:
    return Signer(ORIGIN, bytes(range(32)))


@pytest.fixture
def vkey(signer: Signer) -> str:
    return signer.verifier.vkey


# -- keys ----------------------------------------------------------------------------


def test_keygen_writes_a_private_key_only_the_owner_can_read(tmp_path):
    path = tmp_path / "log.key"
    vkey = keygen(ORIGIN, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert text.startswith(f"PRIVATE+KEY+{ORIGIN}+") and text.endswith("\n")
    signer = load_signer(path)
    assert signer.verifier.vkey == vkey == Verifier.from_vkey(vkey).vkey
    assert vkey.startswith(f"{ORIGIN}+{signer.key_id:08x}+")


def test_keygen_refuses_to_overwrite_or_to_write_inside_a_ledger(tmp_path):
    path = tmp_path / "log.key"
    path.write_text("precious\n")
    with pytest.raises(UsageError, match="already exists"):
        keygen(ORIGIN, path)
    assert path.read_text() == "precious\n"
    book = _append(tmp_path / "ledger", 1)
    (book / "keys").mkdir()
    for inside in (book / "k.key", book / "keys" / "k.key"):
        with pytest.raises(UsageError, match="inside the ledger directory"):
            keygen(ORIGIN, inside)
        assert not inside.exists()
    for bad in ("", "has space", "a+b"):
        with pytest.raises(UsageError, match="invalid origin"):
            keygen(bad, tmp_path / "x.key")


def test_loading_a_key_refuses_open_modes_and_wrong_file_types(tmp_path):
    path = tmp_path / "log.key"
    keygen(ORIGIN, path)
    for mode in (0o644, 0o640, 0o604, 0o660):
        path.chmod(mode)
        with pytest.raises(UsageError, match="chmod 600"):
            load_signer(path)
    path.chmod(0o400)
    assert load_signer(path).name == ORIGIN
    link = tmp_path / "link.key"
    link.symlink_to(path)
    assert load_signer(link).name == ORIGIN
    with pytest.raises(UsageError, match="not a regular file"):
        load_signer(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(UsageError, match="not a regular file"):
        load_signer(fifo)
    with pytest.raises(UsageError, match="not found"):
        load_signer(tmp_path / "missing.key")
    public = tmp_path / "public.key"
    public.write_text(Signer(ORIGIN, bytes(32)).verifier.vkey + "\n")
    public.chmod(0o600)
    with pytest.raises(KeyFormatError, match="not a private key"):
        load_signer(public)


# -- checkpoint bodies ---------------------------------------------------------------

ROOT = base64.b64encode(bytes(range(32))).decode()


@pytest.mark.parametrize(
    "text, message",
    [
        (f"o\n1\n{ROOT}", "newline"),
        ("o\n1\n", "3"),
        (f"\n1\n{ROOT}\n", "origin"),
        (f"o\n01\n{ROOT}\n", "leading zeros"),
        (f"o\n-1\n{ROOT}\n", "decimal"),
        (f"o\n+1\n{ROOT}\n", "decimal"),
        (f"o\n 1\n{ROOT}\n", "decimal"),
        (f"o\n{1 << 64}\n{ROOT}\n", "uint64"),
        (f"o\n1\n{ROOT[:-4]}\n", "32"),
        (f"o\n1\n{ROOT[:-2]}\n", "base64"),
        (f"o\n1\n{ROOT.replace('=', 'A')}\n", "base64"),
        (f"o\n1\n{ROOT}\n\nx\n", "extension line 4"),
        (f"o\n1\n{ROOT}\n\n", "extension line 4"),
    ],
)
def test_checkpoint_bodies_are_parsed_strictly(text, message):
    with pytest.raises(CheckpointFormatError, match=message):
        parse_checkpoint(text)


def test_checkpoint_body_round_trips_with_extensions():
    text = f"example.com/log\n0\n{ROOT}\nfirst ext\nsecond — ext\n"
    checkpoint = parse_checkpoint(text)
    assert checkpoint == Checkpoint(
        "example.com/log", 0, bytes(range(32)), ("first ext", "second — ext")
    )
    assert checkpoint.to_text() == text
    with pytest.raises(CheckpointFormatError):
        Checkpoint("two\nlines", 1, bytes(32)).to_text()


def test_verify_checkpoint_checks_the_origin(signer, vkey):
    verifier = Verifier.from_vkey(vkey)
    good = sign_note(Checkpoint(ORIGIN, 5, bytes(32)).to_text(), [signer])
    assert verify_checkpoint(good, [verifier]).checkpoint.size == 5
    other = sign_note(Checkpoint("evil.example/log", 5, bytes(32)).to_text(), [signer])
    with pytest.raises(
        CheckpointOriginError, match=re.escape("'evil.example/log', want 'ledger.example/audit'")
    ):
        verify_checkpoint(other, [verifier])
    assert verify_checkpoint(other, [verifier], origin="evil.example/log").checkpoint.size == 5
    with pytest.raises(CheckpointOriginError):
        verify_checkpoint(good, [verifier], origin="another")
    not_a_checkpoint = sign_note("hello\n", [signer])
    with pytest.raises(CheckpointFormatError):
        verify_checkpoint(not_a_checkpoint, [verifier])


# -- creating and storing checkpoints ------------------------------------------------


def test_checkpoints_are_signed_stored_and_kept(tmp_path, signer, vkey):
    book = _append(tmp_path / "l", 10)
    first = create_checkpoint(book, [signer])
    assert first.number == 1 and first.path == book / "checkpoints" / "00000001.note"
    assert first.path.read_bytes() == first.data
    cp = verify_checkpoint(first.data, [Verifier.from_vkey(vkey)]).checkpoint
    assert (cp.origin, cp.size, cp.root) == (ORIGIN, 10, TreeStore(book).update().root())

    _append(book, 5, start=10)
    second = create_checkpoint(book, [signer])
    assert (
        second.number == 2
        and parse_checkpoint(second.data.decode().split("\n\n")[0] + "\n").size == 15
    )
    assert first.path.read_bytes() == first.data  # never rewritten
    assert stat.S_IMODE(first.path.stat().st_mode) == 0o444
    assert [s.number for s in CheckpointStore(book).all()] == [1, 2]


def test_checkpoint_with_two_keys_has_two_signature_lines(tmp_path, signer):
    witness = Signer("witness.example/w", bytes(32))
    book = _append(tmp_path / "l", 3)
    data = create_checkpoint(book, [signer, witness]).data.decode()
    lines = data.split("\n\n")[1].splitlines()
    assert [line.split(" ")[1] for line in lines] == [ORIGIN, "witness.example/w"]
    with pytest.raises(UsageError, match=re.escape("origin 'ledger.example/audit'")):
        create_checkpoint(book, [witness])  # the origin is fixed by the first checkpoint


def test_empty_ledger_checkpoint(tmp_path, signer):
    book = tmp_path / "l"
    EvidenceWriter(book).ledger.store.create()
    cp = parse_checkpoint(create_checkpoint(book, [signer]).data.decode().split("\n\n")[0] + "\n")
    assert (cp.size, cp.root) == (0, EMPTY_ROOT)


def test_refuses_to_sign_a_ledger_that_no_longer_extends_its_last_checkpoint(tmp_path, signer):
    book = _append(tmp_path / "l", 20)
    create_checkpoint(book, [signer])
    shutil.rmtree(book / "tree", ignore_errors=True)  # no derived cache helps either way
    _truncate_to(book, 12)
    with pytest.raises(EvidenceError, match=r"refusing to sign.*checkpoint 1 \(tree size 20\)"):
        create_checkpoint(book, [signer])
    assert [s.number for s in CheckpointStore(book).all()] == [1]
    with pytest.raises(UsageError, match="at least one"):
        create_checkpoint(book, [])


def test_refuses_to_sign_a_damaged_log_even_when_the_tree_cache_is_intact(tmp_path, signer):
    from evidence_ledger.storage.log_proofs import prove_inclusion

    book = _append(tmp_path / "l", 20)
    prove_inclusion(Ledger(book), 3)  # the derived tree/ cache now covers all 20 entries
    log = book / "log.bin"
    data = bytearray(log.read_bytes())
    data[len(data) // 2] ^= 0x01
    log.write_bytes(bytes(data))
    with pytest.raises(EvidenceError, match="refusing to sign: the log is damaged at seq"):
        create_checkpoint(book, [signer])
    assert CheckpointStore(book).all() == []


# -- the audit -----------------------------------------------------------------------


@pytest.fixture
def audited(tmp_path, signer):
    """A ledger with checkpoints at sizes 10, 15, 30 and a trusted copy of the last."""
    book = _append(tmp_path / "l", 10)
    create_checkpoint(book, [signer])
    _append(book, 5, start=10)
    create_checkpoint(book, [signer])
    _append(book, 15, start=15)
    trusted = create_checkpoint(book, [signer]).data
    return book, trusted


def _rules(findings: list[CheckpointFinding]) -> list[tuple[str, int | None, int | None]]:
    return [(f.rule, f.checkpoint, f.tree_size) for f in findings]


def test_a_clean_ledger_has_no_findings(audited, vkey):
    book, trusted = audited
    _append(book, 7, start=30)  # growing past the last checkpoint is fine
    assert check_checkpoints(book, [vkey], [trusted]) == []
    assert check_checkpoints(book, [], [trusted]) == []
    assert check_checkpoints(book, [vkey], []) == []


def test_the_audit_changes_nothing(audited, vkey):
    book, trusted = audited
    _truncate_to(book, 12)
    before = _snapshot(book)
    assert check_checkpoints(book, [vkey], [trusted])
    assert _snapshot(book) == before


def test_rollback_below_a_trusted_checkpoint_is_append_only(audited, vkey):
    book, trusted = audited
    _truncate_to(book, 12)
    findings = check_checkpoints(book, [vkey], [trusted])
    assert _rules(findings) == [
        ("checkpoint_size", 2, 15),
        ("checkpoint_size", 3, 30),
        ("append_only", None, 30),
    ]
    assert "rolled back below trusted checkpoint 1" in findings[-1].detail
    assert "the log has 12 readable entries" in findings[-1].detail
    # Deleting the later checkpoints too hides the rollback inside the directory...
    for n in (2, 3):
        os.unlink(book / "checkpoints" / f"{n:08d}.note")
    assert check_checkpoints(book, [vkey], []) == []
    # ...but not from whoever kept a trusted checkpoint.
    assert _rules(check_checkpoints(book, [vkey], [trusted])) == [("append_only", None, 30)]


def test_a_fork_from_a_trusted_checkpoint_is_append_only(audited, vkey, tmp_path):
    book, trusted = audited
    other = _append(tmp_path / "other", 40, start=500)
    shutil.copy(other / "log.bin", book / "log.bin")
    findings = check_checkpoints(book, [vkey], [trusted])
    assert _rules(findings) == [
        ("checkpoint_root", 1, 10),
        ("checkpoint_root", 2, 15),
        ("checkpoint_root", 3, 30),
        ("append_only", None, 30),
    ]
    assert "ledger forked from trusted checkpoint 1: root at tree size 30 is" in findings[-1].detail
    assert "the log changed after it was signed" in findings[0].detail


def test_a_deleted_checkpoint_is_missing(audited, vkey):
    book, _ = audited
    os.unlink(book / "checkpoints" / "00000002.note")
    assert _rules(check_checkpoints(book, [vkey], [])) == [("checkpoint_missing", 2, None)]


def test_checkpoints_signed_by_another_key(audited, vkey):
    book, trusted = audited
    stranger = Signer("stranger.example", bytes(32)).verifier.vkey
    findings = check_checkpoints(book, [stranger], [trusted])
    assert _rules(findings) == [
        ("checkpoint_signature", 1, None),
        ("checkpoint_signature", 2, None),
        ("checkpoint_signature", 3, None),
        ("trusted_checkpoint", None, None),
    ]
    assert "no signature by a given verifier key" in findings[0].detail
    with pytest.raises(UsageError):
        check_checkpoints(book, ["not a vkey"], [])


def test_malformed_and_stray_files(audited, vkey):
    book, _ = audited
    (book / "checkpoints" / "00000004.note").write_bytes(b"garbage")
    (book / "checkpoints" / "notes.txt").write_bytes(b"")
    (book / "checkpoints" / ".tmp-1-9").write_bytes(b"")  # an interrupted write: ignored
    shutil.copy(book / "checkpoints" / "00000001.note", book / "checkpoints" / "000000001.note")
    findings = check_checkpoints(book, [vkey], [])
    assert _rules(findings) == [
        ("checkpoint_format", None, None),
        ("checkpoint_format", None, None),
        ("checkpoint_format", 4, None),
    ]
    assert "unexpected file 000000001.note" in findings[0].detail


def _plant(book: Path, number: int, checkpoint: Checkpoint, signer: Signer) -> None:
    path = book / "checkpoints" / f"{number:08d}.note"
    path.write_bytes(sign_note(checkpoint.to_text(), [signer]))


def test_checkpoints_that_go_backwards_or_fork(audited, vkey, signer):
    book, _ = audited
    root12 = TreeStore(book).update().root(12)
    _plant(book, 4, Checkpoint(ORIGIN, 12, root12), signer)  # true root, smaller size
    assert _rules(check_checkpoints(book, [vkey], [])) == [("checkpoint_consistency", 4, 12)]
    _plant(book, 4, Checkpoint(ORIGIN, 30, bytes(32)), signer)  # same size, another root
    findings = check_checkpoints(book, [vkey], [])
    assert _rules(findings) == [("checkpoint_root", 4, 30), ("checkpoint_consistency", 4, 30)]
    assert "two roots for tree size 30: a fork" in findings[1].detail


def test_checkpoint_with_another_origin(audited, vkey):
    book, _ = audited
    other = Signer("other.example/log", bytes(32))
    _plant(book, 4, Checkpoint("other.example/log", 30, bytes(32)), other)
    both = [vkey, other.verifier.vkey]
    assert _rules(check_checkpoints(book, both, [])) == [("checkpoint_origin", 4, 30)]
    foreign = sign_note(Checkpoint("other.example/log", 3, bytes(32)).to_text(), [other])
    assert _rules(check_checkpoints(book, both, [foreign])) == [
        ("checkpoint_origin", 4, 30),
        ("trusted_checkpoint", None, 3),
    ]


def test_damaged_log_is_named_in_the_findings(audited, vkey):
    book, trusted = audited
    records = list(Ledger(book).scan())
    data = bytearray((book / "log.bin").read_bytes())
    data[records[13].offset + 12] ^= 0xFF  # type: ignore[union-attr]
    (book / "log.bin").write_bytes(bytes(data))
    findings = check_checkpoints(book, [vkey], [trusted])
    assert _rules(findings) == [
        ("checkpoint_size", 2, 15),
        ("checkpoint_size", 3, 30),
        ("append_only", None, 30),
    ]
    assert "log damaged at seq 13" in findings[0].detail


def test_a_root_recorder_fed_by_the_caller_gives_the_same_findings(audited, vkey, tmp_path):
    book, trusted = audited
    _truncate_to(book, 14)
    recorder = RootRecorder(checkpoint_sizes(book, [trusted]))
    assert checkpoint_sizes(book, [trusted]) == {10, 15, 30}
    for item in Ledger(book).scan():
        recorder.add_entry(item.data)  # type: ignore[union-attr]
    assert check_checkpoints(book, [vkey], [trusted], tree=recorder) == check_checkpoints(
        book, [vkey], [trusted]
    )


def test_findings_convert_to_report_findings(audited, vkey):
    book, trusted = audited
    _truncate_to(book, 12)
    findings = check_checkpoints(book, [vkey], [trusted])
    assert {f.rule for f in findings} <= set(RULES)
    converted = findings[-1].to_finding()
    assert isinstance(converted, Finding)
    assert (converted.rule, converted.seq, converted.detail) == (
        "append_only",
        None,
        findings[-1].detail,
    )


def test_no_ledger_is_a_usage_error(tmp_path, vkey):
    with pytest.raises(UsageError, match="no ledger"):
        check_checkpoints(tmp_path / "nothing", [vkey], [])


def test_unverified_notes_are_evidence_errors():
    assert issubclass(UnverifiedNoteError, EvidenceError)
