"""Inputs from an adversarial trial: each once made a command lose data, leak or crash."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evidence_ledger.cli.main import _command
from evidence_ledger.format.framing import MAX_RECORD
from evidence_ledger.index.export import export_statement
from evidence_ledger.record import writer as writer_mod
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage import keys
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.tlog.dsse import PAYLOAD_TYPE, sign_envelope
from tests.helpers import DATA, forge_entry, ingest, run_cli


def _keyed(tmp_path):
    ledger = tmp_path / "l"
    ingest(ledger)
    key = tmp_path / "k.key"
    assert run_cli("keygen", "--origin", "example.com/log", "--out", str(key)).code == 0
    return ledger, key


def test_query_index_option_never_replaces_a_file_that_is_not_an_index(tmp_path):
    ledger, _ = _keyed(tmp_path)
    before = (ledger / "log.bin").read_bytes()
    result = run_cli("query", "--ledger", str(ledger), "--index", str(ledger / "log.bin"),
                     "SELECT 1")
    assert result.code == 2 and "inside the ledger directory" in result.err
    assert (ledger / "log.bin").read_bytes() == before


def test_prove_never_overwrites_its_output(tmp_path):
    ledger, key = _keyed(tmp_path)
    out = tmp_path / "keep.json"
    out.write_text("precious")
    result = run_cli("prove", "--ledger", str(ledger), "--key", str(key), "--all",
                     "--out", str(out))
    assert result.code == 2 and "exists" in result.err and out.read_text() == "precious"


def test_a_key_inside_the_ledger_directory_is_refused(tmp_path):
    ledger, key = _keyed(tmp_path)
    inside = ledger / "k.key"
    inside.write_bytes(key.read_bytes())
    os.chmod(inside, 0o600)
    for args in (["checkpoint"], ["prove", "--all", "--out", str(tmp_path / "b.json")]):
        result = run_cli(*args, "--ledger", str(ledger), "--key", str(inside))
        assert result.code == 2 and "inside the ledger directory" in result.err


def test_a_private_key_given_as_verifier_key_is_never_echoed(tmp_path):
    ledger, key = _keyed(tmp_path)
    secret = key.read_text().strip()
    result = run_cli("verify", "--ledger", str(ledger), "--verifier-key", secret)
    assert result.code == 2 and "PRIVATE key" in result.err
    seed = secret.split("+", 4)[4]  # PRIVATE+KEY+<name>+<key id>+<base64: may hold '+'>
    assert len(seed) == 44 and seed not in result.err


def test_fifos_and_unstorable_ingest_lines_are_bad_input(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert run_cli("ingest", str(fifo), "--ledger", str(tmp_path / "l")).code == 2
    for line in ('{"kind":"run_end","status":"completed","time":1.0}',
                 '{"kind":"run_end","status":"completed","run_id":"\\ud800"}',
                 '{"kind":"run_end","status":"completed","time":18446744073709551615}'):
        events = tmp_path / "events.jsonl"
        events.write_text(line + "\n")
        result = run_cli("ingest", str(events), "--ledger", str(tmp_path / "l"))
        assert result.code == 2 and "line 1" in result.err, (line, result.err)


# -- a second trial ------------------------------------------------------------------------

ZERO = "sha256:" + "0" * 64


def _one_line(result) -> bool:
    return result.err.count("\n") == 1 and "Traceback" not in result.err


def _ledger_args(tmp_path, key) -> dict[str, list[str]]:
    """Arguments of every command that takes --ledger (all but --ledger itself)."""
    return {
        "ingest": [str(DATA / "rules" / "valid.jsonl")],
        "verify": [], "log": [], "trace": ["c-1"],
        "redact": ["--digest", ZERO, "--reason", "r"], "show": [ZERO],
        "checkpoint": ["--key", str(key)],
        "inclusion": ["--seq", "0"], "consistency": ["--from", "1"],
        "query": ["SELECT 1"],
        "export": ["--format", "csv", "--out", str(tmp_path / "export"), "--key", str(key)],
        "verify-export": [str(tmp_path), "--verifier-key", "example.com/log+00000000+AA=="],
        "repair-session": [str(tmp_path / "session.jsonl")],
        "prove": ["--all", "--key", str(key), "--out", str(tmp_path / "bundle.json")],
        "demo": [],
        "revoke": ["--call-id", "c-1", "--by", "b", "--reason", "r"],
        "approve": ["--call-id", "c-1", "--by", "b", "--key", str(key)],
        "report": ["--all", "--out", str(tmp_path / "report.html")],
        "migrate": ["--to", "2"],
    }


def test_every_command_taking_a_ledger_is_listed_here(tmp_path):
    taking = {name for name, command in _command().commands.items()
              if any("--ledger" in getattr(p, "opts", ()) for p in command.params)}
    assert taking == set(_ledger_args(tmp_path, "k"))


def test_a_ledger_path_that_is_a_regular_file_is_bad_usage(tmp_path):
    _, key = _keyed(tmp_path)
    target = tmp_path / "file"
    target.write_text("not a ledger")
    for name, args in _ledger_args(tmp_path, key).items():
        result = run_cli(name, *args, "--ledger", str(target))
        assert result.code == 2 and _one_line(result), (name, result.err)
        assert "not a directory" in result.err, (name, result.err)
        assert target.read_text() == "not a ledger"


def test_only_writers_create_a_missing_ledger(tmp_path):
    _, key = _keyed(tmp_path)
    missing = tmp_path / "missing" / "ledger"
    for name, args in _ledger_args(tmp_path, key).items():
        if name in ("ingest", "demo"):
            continue
        result = run_cli(name, *args, "--ledger", str(missing))
        assert result.code == 2 and _one_line(result), (name, result.err)
        assert f"no ledger at {missing}" in result.err, (name, result.err)
        assert not (tmp_path / "missing").exists(), name


def test_an_oversized_ingest_line_is_bad_input_naming_the_line(tmp_path):
    ledger, _ = _keyed(tmp_path)
    before = (ledger / "log.bin").read_bytes()
    events = tmp_path / "big.jsonl"
    small = '{"kind":"run_end","status":"completed","run_id":"big"}'
    big = json.dumps({"kind": "call", "call_id": "c", "agent": "a", "tool": "t",
                      "arguments": "{}", "response_id": "x" * MAX_RECORD})
    events.write_text(small + "\n" + big + "\n")
    result = run_cli("ingest", str(events), "--ledger", str(ledger))
    assert result.code == 2 and _one_line(result) and "line 2" in result.err, result.err[:300]
    assert len(result.err) < 300
    assert (ledger / "log.bin").read_bytes() == before


def test_a_schema_error_never_echoes_a_huge_value(tmp_path):
    events = tmp_path / "long.jsonl"
    events.write_text(json.dumps({"kind": "call", "call_id": "c" * 100_000, "agent": "a",
                                  "tool": "t", "arguments": "{}"}) + "\n")
    result = run_cli("ingest", str(events), "--ledger", str(tmp_path / "l"))
    assert result.code == 2 and _one_line(result) and "line 1" in result.err
    assert len(result.err) < 500


def test_verbose_is_only_stripped_as_a_flag_never_as_an_option_value(tmp_path):
    ledger, _ = _keyed(tmp_path)
    digest = _first_call_args(ledger)
    result = run_cli("redact", "--ledger", str(ledger), "--digest", digest,
                     "--reason", "--verbose", "--by", "--verbose")
    assert result.code == 0, result.err
    body = json.loads(run_cli("log", "--ledger", str(ledger), "--json").out)[-1]["body"]
    assert body["reason"] == "--verbose" and body["by"] == "--verbose"
    for args in (["--verbose", "log"], ["log", "--verbose"]):
        verbose = run_cli(*args, "--ledger", str(tmp_path / "none"))
        assert verbose.code == 2 and "Traceback" in verbose.err, args


def _exported(tmp_path):
    """A ledger, its key, its verifier key, and an export of it (CSV)."""
    ledger, key = _keyed(tmp_path)
    out = tmp_path / "export"
    assert run_cli("export", "--ledger", str(ledger), "--format", "csv",
                   "--out", str(out), "--key", str(key)).code == 0
    return ledger, key, keys.verifier_key_path(key).read_text().strip(), out


def test_verify_export_refuses_a_manifest_listing_a_file_twice(tmp_path):
    ledger, _, vkey, out = _exported(tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"].append(manifest["files"][0])
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = run_cli("verify-export", str(out), "--ledger", str(ledger), "--verifier-key", vkey)
    assert result.code == 1 and _one_line(result) and "twice" in result.err, result.err


def test_verify_export_takes_a_manifest_without_a_time_range(tmp_path):
    ledger, key, vkey, out = _exported(tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    for name in ("since_ns", "until_ns"):
        manifest.pop(name, None)
    data = json.dumps(manifest).encode()
    (out / "manifest.json").write_bytes(data)
    result = run_cli("verify-export", str(out), "--ledger", str(ledger), "--verifier-key", vkey)
    assert result.code == 1 and "the signature covers (manifest changed)" in result.out
    statement = export_statement(data, manifest["tree_size"], manifest["root_hash"])
    (out / "manifest.dsse.json").write_bytes(
        sign_envelope(statement, keys.load_signer(key), PAYLOAD_TYPE))  # signed as it is
    result = run_cli("verify-export", str(out), "--ledger", str(ledger), "--verifier-key", vkey)
    assert result.code == 0, result.out + result.err


@pytest.mark.parametrize("key", ["since_ns", "until_ns"])
def test_verify_export_refuses_a_manifest_time_past_the_index_range(tmp_path, key):
    ledger, _, vkey, out = _exported(tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest[key] = 2**64  # before: an OverflowError, reported as an internal error
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = run_cli("verify-export", str(out), "--ledger", str(ledger), "--verifier-key", vkey)
    assert result.code == 1 and _one_line(result), result.err
    assert "not an evidence-ledger export manifest" in result.err


def _tree(path):
    return sorted((p.relative_to(path), p.stat().st_size) for p in path.rglob("*"))


def test_demo_refuses_a_directory_that_is_not_empty_touching_nothing(tmp_path, monkeypatch):
    (tmp_path / "keep.txt").write_text("mine")
    monkeypatch.chdir(tmp_path)
    before = _tree(tmp_path)
    for target, why in ((".", "fresh"), (str(tmp_path), "fresh"), ("keep.txt", "not a directory")):
        result = run_cli("demo", "--ledger", target)
        assert result.code == 2 and _one_line(result) and why in result.err, (target, result.err)
        assert _tree(tmp_path) == before


def test_demo_into_the_current_empty_directory_keeps_its_key_outside(tmp_path, monkeypatch):
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    monkeypatch.chdir(fresh)
    result = run_cli("demo", "--ledger", ".")
    assert result.code == 0, result.err
    assert (tmp_path / "fresh-signing.key").is_file() and (fresh / "log.bin").is_file()
    assert "a nested (agent-as-tool) call's output goes to its agent's run" in result.out


def _first_call_args(ledger) -> str:
    calls = json.loads(run_cli("log", "--ledger", str(ledger), "--kind", "call", "--json").out)
    digest: str = calls[0]["body"]["args_payload"]
    return digest


def test_redacting_a_payload_twice_appends_nothing_the_second_time(tmp_path):
    ledger, _ = _keyed(tmp_path)
    digest = _first_call_args(ledger)
    args = ("redact", "--ledger", str(ledger), "--digest", digest, "--reason", "r")
    assert run_cli(*args).code == 0
    seq = len(json.loads(run_cli("log", "--ledger", str(ledger), "--json").out)) - 1
    before = (ledger / "log.bin").read_bytes()
    again = run_cli(*args)
    assert again.code == 2 and _one_line(again), again.err
    assert f"payload {digest} is already redacted (seq {seq})" in again.err
    assert (ledger / "log.bin").read_bytes() == before


@pytest.mark.parametrize("origin", ["", "has space", "a+b", "tab\there", "bell\x07",
                                    "bad\udcffbyte", "nbsp\u00a0x", "zero\u200bwidth"])
def test_keygen_refuses_an_invalid_origin_creating_no_file(tmp_path, origin):
    out = tmp_path / "k.key"
    result = run_cli("keygen", "--origin", origin, "--out", str(out))
    assert result.code == 2 and _one_line(result), result.err
    assert "invalid origin" in result.err and not out.exists()


def test_keygen_takes_a_printable_utf8_origin_and_the_key_signs(tmp_path):
    ledger = tmp_path / "l"
    ingest(ledger)
    key = tmp_path / "k.key"
    result = run_cli("keygen", "--origin", "exämple.org/日志", "--out", str(key))
    assert result.code == 0, result.err
    vkey = result.out.strip()
    assert vkey.startswith("exämple.org/日志+")
    assert run_cli("checkpoint", "--ledger", str(ledger), "--key", str(key)).code == 0
    assert run_cli("verify", "--ledger", str(ledger), "--verifier-key", vkey).code == 0


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), RuntimeError("boom")])
def test_keygen_leaves_no_partial_key_file_when_the_write_fails(tmp_path, monkeypatch, error):
    def fail(fd):
        raise error

    monkeypatch.setattr(keys.os, "fsync", fail)
    out = tmp_path / "k.key"
    result = run_cli("keygen", "--origin", "example.com/log", "--out", str(out))
    assert result.code == 1 and _one_line(result), result.err
    assert not out.exists()


def test_an_ingest_line_whose_entry_exceeds_the_record_limit_names_the_line(
    tmp_path, monkeypatch
):
    # a line under the line limit whose entry is over the record limit (lowered here so
    # the test stays fast; at 16 MB a run_state of ~400k tiny interruptions does it)
    monkeypatch.setattr(writer_mod, "MAX_RECORD", 64 * 1024)
    ledger, _ = _keyed(tmp_path)
    before = (ledger / "log.bin").read_bytes()
    events = tmp_path / "wide.jsonl"
    events.write_text(json.dumps({"kind": "call", "call_id": "c", "agent": "a", "tool": "t",
                                  "arguments": "{}", "response_id": "x" * 70_000}) + "\n")
    result = run_cli("ingest", str(events), "--ledger", str(ledger))
    assert result.code == 2 and _one_line(result) and "line 1" in result.err, result.err[:300]
    assert "exceeds the record limit" in result.err
    assert (ledger / "log.bin").read_bytes() == before


@pytest.mark.parametrize("bound", ["--until", "--since"])
@pytest.mark.parametrize("value", ["9999-12-31", "99999999999999999999999", str(2**63)])
def test_export_refuses_a_time_beyond_64_bit_nanoseconds(tmp_path, bound, value):
    ledger, key = _keyed(tmp_path)
    out = tmp_path / "out"
    result = run_cli("export", "--ledger", str(ledger), "--format", "csv", "--out", str(out),
                     bound, value, "--key", str(key))
    assert result.code == 2 and _one_line(result) and "2262" in result.err, result.err
    assert not out.exists()



@pytest.mark.parametrize("closed", ["1", "2", "1 2"])
def test_a_closed_standard_stream_is_bad_usage_not_a_traceback(tmp_path, closed):
    ingest(tmp_path)
    closing = " ".join(f"{fd}>&-" for fd in closed.split())
    shell = (f'"{sys.executable}" -c "from evidence_ledger.cli.main import main; main()" '
             f'query --ledger "{tmp_path}" "SELECT 1" 2>"{tmp_path}/err" {closing}; echo $?')
    # before: the import of evidence_ledger.cli.output raised AttributeError (sys.stdout None) with
    # a traceback
    code = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).parent.parent)
    err = (tmp_path / "err").read_text()
    assert "Traceback" not in err + code.stderr
    if closed == "2":  # nothing can be said: the query still runs and prints
        assert code.stdout.splitlines()[-1] == "0" and "1 row(s)" in code.stdout
    else:
        assert code.stdout.strip() == "2"
        assert err == ("" if closed == "1 2" else
                       "evidence-ledger: error: standard output is closed (redirect it to a "
                       "file or to /dev/null)\n")


@pytest.mark.parametrize("command", [("query", "SELECT 1"), ("trace", "c1")])
def test_a_refused_index_file_gets_no_lock_file_beside_it(tmp_path, command):
    # before: the lock was taken first, so a refused --index left <file>.lock behind (in
    # the ledger's checkpoints directory, it then failed verify with checkpoint_format)
    ingest(tmp_path / "l")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    result = run_cli(command[0], "--ledger", str(tmp_path / "l"), "--index", str(notes),
                     *command[1:])
    assert result.code == 2 and "is not a DuckDB index" in result.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l", "notes.txt"]


@pytest.mark.parametrize("inside", [
    "payloads/x.duckdb", "checkpoints/x.duckdb", "new/x.duckdb",  # before: verify failed
    "torn", "tree", "checkpoints2", "writer",  # before: writers failed, or shared the lock
])
def test_an_index_inside_the_ledger_directory_is_refused(tmp_path, inside):
    # before: --index L/checkpoints/x.duckdb wrote the index there (verify then failed:
    # checkpoint_format, unexpected file), and L/torn stopped every writer from cutting a
    # torn tail; L/writer made the index lock the ledger's writer.lock
    ingest(tmp_path)
    (tmp_path / "checkpoints").mkdir(exist_ok=True)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = run_cli("query", "--ledger", str(tmp_path), "--index", str(tmp_path / inside),
                     "SELECT 1")
    assert result.code == 2 and "inside the ledger directory" in result.err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert run_cli("verify", "--ledger", str(tmp_path)).code == 0


def test_the_default_index_may_be_named_with_index(tmp_path):
    ingest(tmp_path)
    result = run_cli("query", "--ledger", str(tmp_path), "--index",
                     str(tmp_path / "index.duckdb"), "SELECT count(*) AS n FROM entries")
    assert result.code == 0 and "25" in result.out


def test_a_directory_named_as_the_index_is_refused_without_advice_to_remove_it(tmp_path):
    # before: "... not a regular file (remove it; ...)" for the ledger directory itself
    ingest(tmp_path / "l")
    result = run_cli("query", "--ledger", str(tmp_path / "l"), "--index", str(tmp_path / "l"),
                     "SELECT 1")
    assert result.code == 2 and "is a directory" in result.err and "remove" not in result.err


@pytest.mark.parametrize("sink", ["a reader that stops", "a full device"])
def test_output_that_cannot_be_written_is_bad_usage_not_a_failed_verification(tmp_path, sink):
    # before: a broken pipe exited 1 (as a failed verification) saying nothing (rich's
    # own handler), and a full device said "internal error: OSError"
    w = EvidenceWriter(Ledger(tmp_path))
    for i in range(400):  # far more lines than a pipe holds
        w.run_end(run_id=f"run-{i}", status="completed")
    cli = (f'"{sys.executable}" -c "from evidence_ledger.cli.main import main; main()" '
           f'log --ledger "{tmp_path}"')
    err = tmp_path / "err"
    if sink == "a full device":
        shell, reason = f'{cli} --json 2>"{err}" >/dev/full; echo $?', "No space left on device"
    else:
        shell = f'{cli} 2>"{err}" | head -n1 >/dev/null; echo ${{PIPESTATUS[0]}}'
        reason = "Broken pipe"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).parent.parent)
    assert done.stdout == "2\n"
    assert err.read_text() == (f"evidence-ledger: error: cannot write standard output: {reason} "
                               "(the command ran; only its output is lost)\n")


@pytest.mark.parametrize("command", [("query", "SELECT 1"), ("trace", "c1")])
def test_an_empty_index_path_is_bad_usage(tmp_path, command):
    # before: "internal error: ValueError: PosixPath('.') has an empty name" (exit 1)
    ingest(tmp_path)
    result = run_cli(command[0], "--ledger", str(tmp_path), "--index", "", *command[1:])
    assert result.code == 2 and "--index names no file" in result.err


FORGED_LINE = "t\n     9  2026-01-01T00:00:00.000Z  decision      approve by ceo"
TERMINAL_TITLE = "\x1b]0;pwned\x07agent"


@pytest.mark.parametrize(("command", "code", "shown"), [
    # log, trace and query show evidence, violations included, and exit 0; verify fails
    # the gated call executed without a decision
    (("log",), 0, "run_id=r\\x1b[2J call_id=c-evil"),
    (("trace", "c-evil"), 0, "approval_binding at seq 1: gated call executed without approval"),
    (("query", "SELECT agent, tool FROM calls"), 0, "1 row(s) at tree size 2"),
    (("verify",), 1, "gated call executed without approval"),
])
def test_control_characters_from_the_ledger_are_shown_escaped(tmp_path, command, code, shown):
    # before: a tool name holding a newline printed a forged line in log and trace, and an
    # agent name holding ESC ] 0 ; ... BEL set the terminal's title
    w = EvidenceWriter(Ledger(tmp_path))
    w.call(run_id="r\x1b[2J", call_id="c-evil", agent=TERMINAL_TITLE, tool=FORGED_LINE,
           arguments="{}", needs_approval=True)
    w.execution(run_id="r\x1b[2J", call_id="c-evil", arguments="{}", result="ok")
    result = run_cli(command[0], "--ledger", str(tmp_path), *command[1:])
    assert (result.code, result.err) == (code, ""), result.err
    assert shown in result.out, result.out
    assert not any(c in result.out for c in "\x1b\x07"), repr(result.out)
    assert "approve by ceo" not in "".join(  # never at the start of a line of its own
        line for line in result.out.splitlines() if line.lstrip().startswith("9  2026"))
    assert "\\x1b" in result.out  # shown, escaped (the run id or the agent)


def test_session_scans_show_line_breaks_bidi_controls_and_emoji_codes_as_they_are(tmp_path):
    # before: a call_id holding \n or U+2028 printed a finding as several lines, U+202E
    # reached the terminal, and ":skull:" was shown as an emoji
    dump = tmp_path / "dump.jsonl"
    item = {"type": "function_call_output", "call_id": "c\nFORGED\u2028x", "output": "ok"}
    dump.write_text(json.dumps({"session_id": "s:skull:\u202e", "item": item}) + "\n")
    result = run_cli("scan-session", str(dump))
    assert result.code == 1, result.err
    assert not any(line.startswith("FORGED") for line in result.out.splitlines())
    assert not any(c in result.out for c in "\u2028\u202e\U0001f480"), repr(result.out)
    assert "c\\nFORGED\\u2028x" in result.out and "s:skull:\\u202e" in result.out


@pytest.mark.parametrize("inside", ["checkpoints/00000002.note", "payloads/zz", "bundle.json"])
def test_a_bundle_written_inside_the_ledger_directory_is_refused(tmp_path, inside):
    """Once accepted: a bundle written as checkpoints/00000002.note broke checkpoint, prove
    and verify."""
    ledger, key = _keyed(tmp_path)
    result = run_cli("prove", "--ledger", str(ledger), "--key", str(key), "--all",
                     "--out", str(ledger / inside))
    assert result.code == 2 and "inside the ledger directory" in result.err
    assert not (ledger / inside).exists()
    assert run_cli("verify", "--ledger", str(ledger)).code == 0


@pytest.mark.parametrize("inside", ["checkpoints/exp", "payloads/exp", "exp"])
def test_an_export_written_inside_the_ledger_directory_is_refused(tmp_path, inside):
    ledger, key = _keyed(tmp_path)
    result = run_cli("export", "--ledger", str(ledger), "--format", "jsonl",
                     "--out", str(ledger / inside), "--key", str(key))
    assert result.code == 2 and "inside the ledger directory" in result.err
    assert not (ledger / inside).exists()


def test_files_the_ledger_did_not_write_are_named_by_verify(tmp_path):
    ledger = tmp_path / "ledger"
    assert run_cli("demo", "--ledger", str(ledger)).code == 0
    assert run_cli("query", "--ledger", str(ledger), "SELECT 1").code == 0  # the index
    assert run_cli("inclusion", "--ledger", str(ledger), "--seq", "0").code == 0  # tree/
    clean = run_cli("verify", "--ledger", str(ledger))
    assert clean.code == 0 and "did not write" not in clean.out

    (ledger / "payloads" / "junk.txt").write_text("x")
    (ledger / "torn").mkdir(exist_ok=True)
    (ledger / "torn" / "notes.txt").write_text("x")
    (ledger / "export").mkdir()
    flagged = run_cli("verify", "--ledger", str(ledger))
    assert flagged.code == 0
    assert ("3 file(s) in the ledger directory that the ledger did not write (never read as "
            "evidence): export, payloads/junk.txt, torn/notes.txt") in flagged.out


def _sparse(path, size):
    with open(path, "wb") as fh:
        fh.truncate(size)
    return path


def test_inputs_past_their_limits_are_refused_before_they_are_read(tmp_path):
    """Once read whole first (up to 1 GiB: 1-2 GB of memory), then refused."""
    vkey = run_cli("keygen", "--origin", "example.com/log", "--out", str(tmp_path / "k")).out
    note = _sparse(tmp_path / "note", (1 << 20) + 1)
    result = run_cli("verify-checkpoint", str(note), "--verifier-key", vkey.strip())
    assert result.code == 2 and "larger than the largest signed note" in result.err

    zeros = _sparse(tmp_path / "zeros", 64 << 20)
    result = run_cli("verify-proof", str(zeros), "--verifier-key", vkey.strip())
    assert result.code == 1 and "not JSON" in result.err

    result = run_cli("scan-session", str(_sparse(tmp_path / "dump", (16 << 20) + 2)))
    assert result.code == 2 and "line 1: longer than 16777216 bytes" in result.err


def test_names_that_are_not_utf8_are_bad_usage_not_internal_errors(tmp_path):
    """Once: ``std::bad_cast`` from DuckDB for a ledger at such a path (its index lived
    inside it), and a ``UnicodeEncodeError`` for such a session id."""
    ledger = Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/x\xff/ledger"))
    ingest(ledger)
    assert run_cli("verify", "--ledger", str(ledger)).code == 0
    for args in (["query", "SELECT 1"], ["trace", "c1"]):  # the index is in the cache
        assert run_cli(*args, "--ledger", str(ledger)).code == 0, args
    result = run_cli("query", "SELECT 1", "--ledger", str(ledger),
                     "--index", str(ledger / "index.duckdb"))
    assert result.code == 2 and "not UTF-8 text" in result.err, result.err
    dump = tmp_path / "dump.jsonl"
    dump.write_text('{"session_id": "s", "item": {"role": "user", "content": "hi"}}\n')
    result = run_cli("scan-session", str(dump), "--session-id", os.fsdecode(b"s\xff"))
    assert result.code == 2 and "not UTF-8 text" in result.err


def test_no_proof_is_made_from_a_log_that_contradicts_its_signed_checkpoint(tmp_path):
    """Once: inclusion and consistency exited 0 on such a log; only verify caught it."""
    ledger, key = _keyed(tmp_path)
    assert run_cli("checkpoint", "--ledger", str(ledger), "--key", str(key)).code == 0
    forge_entry(ledger, 1, lambda data: data[:-1] + bytes([data[-1] ^ 1]))
    for args in (["inclusion", "--seq", "0"], ["consistency", "--from", "1"]):
        result = run_cli(*args, "--ledger", str(ledger))
        assert result.code == 1, (args, result.out)
        assert "the log contradicts checkpoint 00000001 (tree size 25" in result.err
        assert result.err.endswith("nothing is proven (run verify)\n"), result.err


def test_scan_session_on_a_sqlite_column_name_that_is_not_utf8_is_bad_input():
    """Regression (make fuzz): a mutated SQLiteSession file whose column name is not UTF-8
    raised UnicodeDecodeError (internal error, exit 1)."""
    result = run_cli("scan-session", str(DATA / "hostile" / "sqlite-column-not-utf8.db"))
    assert result.code == 2 and "unreadable SQLite database" in result.err, result.err
