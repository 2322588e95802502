"""Redaction erases a payload; hashes, root and rules are untouched."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from tests.helpers import format1, ingest, require_strace, run_cli


def _ingested(tmp_path):
    ingest(tmp_path)
    return json.loads(run_cli("verify", "--ledger", str(tmp_path), "--json").out)


def test_redaction_keeps_every_hash_and_reports_a_notice(tmp_path):
    before = _ingested(tmp_path)
    call = json.loads(run_cli("log", "--ledger", str(tmp_path), "--kind", "call", "--json").out)[0]
    digest = call["body"]["args_payload"]
    result = run_cli("redact", "--ledger", str(tmp_path), "--digest", digest,
                     "--reason", "GDPR erasure request 42", "--by", "dpo@example.com")
    assert result.code == 0, result.err
    assert Ledger(tmp_path).payloads.get(bytes.fromhex(digest[7:])) is None
    after = json.loads(run_cli("verify", "--ledger", str(tmp_path), "--json").out)
    assert after["ok"] and after["violations"] == []
    assert after["tree_size"] == before["tree_size"] + 1
    assert any("redacted" in n for n in after["notices"])
    assert not any("missing" in n for n in after["notices"])
    # the entries before the redaction are byte-identical: same leading hashes
    entries = json.loads(run_cli("log", "--ledger", str(tmp_path), "--json").out)
    assert entries[0]["hash"] == call["hash"]
    assert entries[-1]["kind"] == "redaction" and entries[-1]["body"]["by"] == "dpo@example.com"


def test_log_shows_what_a_redaction_erased_and_who_did(tmp_path):
    # before: "redaction" and nothing after it on the line (a trial user's note)
    _ingested(tmp_path)
    digest = _payload_of_call(tmp_path)
    run_cli("redact", "--ledger", str(tmp_path), "--digest", digest, "--reason", "GDPR 42",
            "--by", "dpo@example.com")
    line = run_cli("log", "--ledger", str(tmp_path), "--kind", "redaction").out.strip()
    assert line.endswith(f"redaction     by=dpo@example.com digest={digest}")


def test_redacting_an_arguments_digest_names_the_payload_to_redact(tmp_path):
    # before: "no payload digest of this ledger starts with ..." for the args digest that
    # log and trace print first (a trial user's note)
    EvidenceWriter(Ledger(tmp_path)).call(  # as a model writes them: not canonical JSON
        run_id="r1", call_id="c1", agent="a", tool="t", arguments='{"b": 1, "a": 2}')
    call = json.loads(run_cli("log", "--ledger", str(tmp_path), "--kind", "call", "--json").out)[0]
    args, payload = call["body"]["args_digest"], call["body"]["args_payload"]
    assert args != payload
    for given in (args, args[:19]):
        result = run_cli("redact", "--ledger", str(tmp_path), "--digest", given, "--reason", "x")
        assert result.code == 2 and result.err.count("\n") == 1
        assert f"{args} is an arguments digest: the arguments are stored as payload " \
               f"{payload}: give that" in result.err


def test_a_log_value_cannot_pose_as_another_field(tmp_path):
    # breaker: by="alice digest=sha256:<other>" printed as a second digest= on the line
    _ingested(tmp_path)
    digest = _payload_of_call(tmp_path)
    forged = "alice digest=sha256:" + "ab" * 32
    run_cli("redact", "--ledger", str(tmp_path), "--digest", digest, "--reason", "r",
            "--by", forged)
    line = run_cli("log", "--ledger", str(tmp_path), "--kind", "redaction").out.strip()
    assert line.endswith(f'redaction     by="{forged}" digest={digest}')
    assert shlex.split(line.split("redaction", 1)[1]) == [f"by={forged}", f"digest={digest}"]


def test_redacting_an_unknown_digest_is_bad_usage(tmp_path):
    _ingested(tmp_path)
    result = run_cli("redact", "--ledger", str(tmp_path), "--digest", "sha256:" + "0" * 64,
                     "--reason", "x")
    assert result.code == 2 and "no entry names" in result.err
    bad = run_cli("redact", "--ledger", str(tmp_path), "--digest", "abc", "--reason", "x")
    assert bad.code == 2


def test_redaction_again_finishes_an_interrupted_one(tmp_path):
    from evidence_ledger.record.writer import EvidenceWriter

    _ingested(tmp_path)
    call = json.loads(run_cli("log", "--ledger", str(tmp_path), "--kind", "call", "--json").out)[0]
    digest = call["body"]["args_payload"]
    # the redaction entry is durable, then the process died before erasing the payload
    EvidenceWriter(tmp_path).redaction(digest=bytes.fromhex(digest[7:]), reason="r")
    before = (tmp_path / "log.bin").read_bytes()
    again = run_cli("redact", "--ledger", str(tmp_path), "--digest", digest, "--reason", "r")
    assert again.code == 0 and "finished the redaction recorded at seq" in again.out, again.err
    assert Ledger(tmp_path).payloads.get(bytes.fromhex(digest[7:])) is None
    assert (tmp_path / "log.bin").read_bytes() == before


def test_a_payload_recorded_again_after_its_redaction_is_stored_again(tmp_path):
    from evidence_ledger.record.writer import EvidenceWriter

    writer = EvidenceWriter(tmp_path)
    writer.call(run_id="r", call_id="c1", agent="a", tool="t", arguments='{"secret": 1}')
    digest = next(e.body["args_payload"] for e, _ in Ledger(tmp_path).entries())
    # erased by another process while this writer stays open
    assert run_cli("redact", "--ledger", str(tmp_path), "--digest", "sha256:" + digest.hex(),
                   "--reason", "r").code == 0
    writer.call(run_id="r", call_id="c2", agent="a", tool="t", arguments='{"secret": 1}')
    assert writer.ledger.payloads.get(digest) == b'{"secret": 1}'


def test_redaction_overwrites_the_payloads_bytes_where_they_are_stored(tmp_path):
    """Once only unlinked: the bytes stayed in the file system's free blocks (and in every
    other link to the file)."""
    ledger = tmp_path / "ledger"
    format1(ledger)  # one file per payload: the layout this test is about
    _ingested(ledger)
    call = json.loads(run_cli("log", "--ledger", str(ledger), "--kind", "call", "--json").out)[0]
    digest = call["body"]["args_payload"]
    stored = Ledger(ledger).payloads.path_for(bytes.fromhex(digest[7:]))
    secret = stored.read_bytes()
    other_link = tmp_path / "other-link"
    os.link(stored, other_link)  # the same blocks, seen through another name

    assert run_cli("redact", "--ledger", str(ledger), "--digest", digest,
                   "--reason", "erasure").code == 0
    assert not stored.exists()
    assert other_link.read_bytes() == bytes(len(secret)) != secret


def _payload_of_call(ledger):
    call = json.loads(run_cli("log", "--ledger", str(ledger), "--kind", "call", "--json").out)[0]
    return call["body"]["args_payload"]


def test_a_redaction_cut_short_after_the_overwrite_is_finished_by_running_it_again(tmp_path):
    format1(tmp_path)  # one file per payload: the layout this test is about
    _ingested(tmp_path)
    digest = _payload_of_call(tmp_path)
    raw = bytes.fromhex(digest[7:])
    assert Ledger(tmp_path).payloads.scrub(raw)  # zeroed and synced, then the process died
    cut = json.loads(run_cli("verify", "--ledger", str(tmp_path), "--json").out)
    assert cut["ok"], cut["violations"]  # marked as being erased: a notice names it
    assert any("redaction cut short" in n and digest in n for n in cut["notices"])
    (marker,) = (tmp_path / "payloads").glob("*/*.erasing")
    marker.unlink()  # without its marker, a zeroed payload is a changed one
    assert run_cli("verify", "--ledger", str(tmp_path)).code == 1
    marker.touch()
    again = run_cli("redact", "--ledger", str(tmp_path), "--digest", digest, "--reason", "r")
    assert again.code == 0, again.err
    assert Ledger(tmp_path).payloads.get(raw) is None
    assert not list((tmp_path / "payloads").glob("*/*.erasing"))
    assert run_cli("verify", "--ledger", str(tmp_path)).code == 0


def test_redact_overwrites_and_syncs_the_payload_before_it_appends_the_entry(tmp_path):
    """Under ``strace -P`` (the payload file and ``log.bin``): the payload's every byte is
    overwritten with zeros and synced, then the ``redaction`` entry is written to the log
    and synced, then the payload file is removed."""
    strace = require_strace()
    ledger = tmp_path / "L"
    format1(ledger)  # one file per payload: the layout this test is about
    _ingested(ledger)
    digest = _payload_of_call(ledger)
    payload = Path(Ledger(ledger).payloads._path(bytes.fromhex(digest[7:])))
    size = os.path.getsize(payload)
    log = tmp_path / "trace.txt"
    done = subprocess.run(
        [strace, "-f", "-qq", "-y", "-P", str(payload), "-P", str(ledger / "log.bin"),
         "-e", "trace=write,pwrite64,fsync,fdatasync,unlink,unlinkat", "-o", str(log),
         str(Path(sys.executable).parent / "evidence-ledger"), "redact", "--ledger", str(ledger),
         "--digest", digest, "--reason", "r"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    steps = []
    for line in log.read_text().splitlines():
        match = re.search(r"(\w+)\((\d+<([^>]*)>|\"([^\"]*)\")?.*= (-?\d+)", line)
        if match:
            target = match.group(3) or match.group(4) or ""
            steps.append((match.group(1), "payload" if target.endswith(payload.name)
                          else "log" if target.endswith("log.bin") else target,
                          int(match.group(5))))
    zeroed = sum(n for call, where, n in steps if call == "pwrite64" and where == "payload")
    assert zeroed == size, steps
    order = [(call, where) for call, where, _ in steps if call != "pwrite64"]
    assert order == [("fsync", "payload"), ("write", "log"), ("fsync", "log"),
                     ("unlink", "payload")], steps


def test_after_redact_the_secret_is_not_on_the_file_system_image(tmp_path):
    """On a loop-mounted ext4 image (where this test may mount one): after ``redact``,
    ``sync`` and unmounting, the payload's bytes are nowhere in the image."""
    image, mount = tmp_path / "fs.img", tmp_path / "mnt"
    mount.mkdir()
    for command in (["truncate", "-s", "32M", str(image)],
                    ["mkfs.ext4", "-q", "-F", str(image)],
                    ["mount", "-o", "loop", str(image), str(mount)]):
        try:
            made = subprocess.run(command, capture_output=True, text=True, timeout=60)
        except FileNotFoundError:
            pytest.skip(f"{command[0]} is not installed")
        if made.returncode != 0:
            pytest.skip(f"cannot make or mount an ext4 image here: {made.stderr.strip()}")
    secret = f"card-{os.urandom(12).hex()}"
    events = tmp_path / "events.jsonl"  # outside the image
    events.write_text(json.dumps({"kind": "call", "call_id": "c", "agent": "a", "tool": "t",
                                  "arguments": json.dumps({"card": secret})}) + "\n")
    try:
        assert run_cli("ingest", str(events), "--ledger", str(mount / "L")).code == 0
        subprocess.run(["sync"], check=True)
        assert secret.encode() in image.read_bytes()  # stored: the search finds it
        digest = _payload_of_call(mount / "L")
        done = run_cli("redact", "--ledger", str(mount / "L"), "--digest", digest,
                       "--reason", "r")
        assert done.code == 0, done.err
    finally:
        subprocess.run(["sync"], check=False)
        subprocess.run(["umount", str(mount)], check=True, timeout=60)
    assert secret.encode() not in image.read_bytes()  # 32 MiB


def test_a_forged_erasing_marker_hides_no_tampered_or_missing_payload(tmp_path):
    """Regression (adversarial trial): any file named ``<digest>.erasing`` turned a changed
    or missing payload into a notice. Only zeros beside an empty marker are an erase cut
    short."""
    format1(tmp_path)  # one file per payload: the layout this test is about
    _ingested(tmp_path)
    digest = _payload_of_call(tmp_path)
    path = Path(Ledger(tmp_path).payloads._path(bytes.fromhex(digest[7:])))
    marker = path.with_name(path.name + ".erasing")
    path.write_bytes(b'{"amount": 3000}')  # tampered
    marker.touch()
    tampered = run_cli("verify", "--ledger", str(tmp_path), "--json")
    assert tampered.code == 1 and "does not match its digest" in tampered.out
    marker.unlink()
    marker.mkdir()  # not a marker the ledger makes
    path.write_bytes(bytes(len(b'{"amount": 3000}')))
    assert run_cli("verify", "--ledger", str(tmp_path)).code == 1
    marker.rmdir()
    path.unlink()  # gone, no redaction entry: lost evidence, marker or not
    marker.touch()
    missing = run_cli("verify", "--ledger", str(tmp_path), "--json")
    assert missing.code == 1 and "payload_missing" in missing.out


def test_a_marker_left_after_a_finished_redaction_is_cleared_by_redacting_again(tmp_path):
    format1(tmp_path)  # one file per payload: the layout this test is about
    _ingested(tmp_path)
    digest = _payload_of_call(tmp_path)
    assert run_cli("redact", "--ledger", str(tmp_path), "--digest", digest,
                   "--reason", "r").code == 0
    path = Path(Ledger(tmp_path).payloads._path(bytes.fromhex(digest[7:])))
    marker = path.with_name(path.name + ".erasing")
    marker.touch()  # a crash between removing the payload and removing its marker
    again = run_cli("redact", "--ledger", str(tmp_path), "--digest", digest, "--reason", "r")
    assert again.code == 2 and "already redacted" in again.err
    assert not marker.exists()
    assert run_cli("verify", "--ledger", str(tmp_path)).code == 0
