"""The CLI: exit codes, one-line errors, ingest is all-or-nothing."""

import json
import types

import pytest

from evidence_ledger.cli import main as cli_main
from evidence_ledger.storage.ledger_dir import Ledger
from tests.helpers import DATA, ingest, run_cli

VALID = DATA / "rules" / "valid.jsonl"


def _size(ledger):
    return sum(1 for _ in Ledger(ledger).entries()) if Ledger(ledger).store.exists() else 0


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ('{"kind":"call","agent":"a"}', "'tool' is a required property"),
        ('{"kind":"teleport"}', "kind"),
        ('{"kind":"run_end","status":"done"}', "status"),
        ('{"kind":"run_end","status":"completed","status":"failed"}', "duplicate key"),
        ('{"kind":"run_end","status":"completed","time":NaN}', "NaN"),
        ("[1, 2]", "is not of type 'object'"),
        ("not json at all", "not a JSON object"),
        ('{"kind":"run_end","status":"completed","bogus":1}', "bogus"),
    ],
)
def test_a_bad_line_rejects_the_whole_file(tmp_path, bad_line, message):
    lines = VALID.read_text().splitlines()
    lines.insert(3, bad_line)
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = run_cli("ingest", str(path), "--ledger", str(tmp_path / "l"))
    assert result.code == 2
    assert result.err.count("\n") == 1 and "line 4" in result.err and message in result.err
    assert _size(tmp_path / "l") == 0


def test_non_utf8_line_rejected_with_its_number(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"kind":"run_end","status":"completed"}\n{"kind":"\xff"}\n')
    result = run_cli("ingest", str(path), "--ledger", str(tmp_path / "l"))
    assert result.code == 2 and "line 2: not UTF-8" in result.err


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"])
def test_empty_file_is_bad_input(tmp_path, content):
    path = tmp_path / "events.jsonl"
    path.write_bytes(content)
    assert run_cli("ingest", str(path), "--ledger", str(tmp_path / "l")).code == 2


def test_reingest_refused_unless_again(tmp_path):
    ledger = str(tmp_path)
    assert run_cli("ingest", str(VALID), "--ledger", ledger).code == 0
    again = run_cli("ingest", str(VALID), "--ledger", ledger)
    assert again.code == 2 and "--again" in again.err
    assert _size(tmp_path) == 25
    result = run_cli("ingest", str(VALID), "--ledger", ledger, "--again", "--json")
    assert result.code == 0 and json.loads(result.out)["first_seq"] == 25


def test_ledger_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("EVIDENCE_LEDGER", str(tmp_path / "env-ledger"))
    assert run_cli("ingest", str(VALID)).code == 0
    assert run_cli("verify").code == 0
    assert _size(tmp_path / "env-ledger") == 25


@pytest.mark.parametrize(
    "args, code",
    [
        (["verify", "--bogus"], 2),
        (["verify", "--ledger", "/nonexistent/ledger"], 2),
        (["ingest", "/nonexistent/events.jsonl"], 2),
        (["trace"], 2),
        (["log", "--limit", "0"], 2),
    ],
)
def test_usage_errors_exit_2_with_one_line(tmp_path, args, code):
    result = run_cli(*args)
    assert result.code == code
    assert result.err.count("\n") == 1 and "Traceback" not in result.err


def test_verbose_adds_the_traceback():
    result = run_cli("verify", "--ledger", "/nonexistent/ledger", "--verbose")
    assert result.code == 2 and "Traceback" in result.err


def test_an_internal_error_hints_at_verbose_only_without_it(monkeypatch):
    class Broken:
        commands = types.MappingProxyType({})

        def main(self, **_: object) -> None:
            raise RuntimeError("boom")

    monkeypatch.setattr(cli_main, "_command", Broken)
    plain, verbose = run_cli("log"), run_cli("log", "--verbose")
    assert plain.code == verbose.code == 1
    assert plain.err == (
        "evidence-ledger: internal error: RuntimeError: boom (rerun with --verbose)\n")
    assert "Traceback" in verbose.err and "rerun with --verbose" not in verbose.err


def test_log_of_a_call_id_no_entry_names_is_exit_2(tmp_path):
    ingest(tmp_path)
    missing = run_cli("log", "--ledger", str(tmp_path), "--call-id", "nosuch")
    assert missing.code == 2 and missing.err.count("\n") == 1 and "nosuch" in missing.err
    other_kind = run_cli("log", "--ledger", str(tmp_path), "--call-id", "c1", "--kind",
                         "run_state", "--json")
    assert other_kind.code == 0 and json.loads(other_kind.out) == []


def test_log_filters_and_trace(tmp_path):
    assert run_cli("ingest", str(VALID), "--ledger", str(tmp_path)).code == 0
    rows = json.loads(run_cli("log", "--ledger", str(tmp_path), "--kind", "decision", "--json").out)
    assert [r["body"]["call_id"] for r in rows] == ["c1", "c2", "c4", "n1"]
    assert rows[0]["hash"].startswith("sha256:") and len(rows[0]["hash"]) == 71
    last = json.loads(run_cli("log", "--ledger", str(tmp_path), "--limit", "1", "--json").out)
    assert [r["seq"] for r in last] == [24]
    trace = run_cli("trace", "c1", "--ledger", str(tmp_path), "--json")
    kinds = [e["kind"] for e in json.loads(trace.out)["entries"]]
    assert kinds == ["call", "decision", "execution", "session_item", "session_item"]
    text = run_cli("trace", "c2", "--ledger", str(tmp_path)).out
    assert "reject by bob@example.com" in text
    assert run_cli("trace", "nope", "--ledger", str(tmp_path)).code == 2


def test_log_names_the_event_of_each_run_state_entry(tmp_path):
    source = DATA / "rules" / "state_isolation.jsonl"
    assert run_cli("ingest", str(source), "--ledger", str(tmp_path)).code == 0
    lines = run_cli("log", "--ledger", str(tmp_path), "--kind", "run_state").out.splitlines()
    assert [line.split()[3] for line in lines] == [
        "event=to_state", "event=to_state", "event=resume"]


def test_verify_says_when_checkpoints_are_missing_or_unchecked(tmp_path):
    from evidence_ledger.record.checkpointing import create_checkpoint
    from evidence_ledger.tlog.note import Signer

    ingest(tmp_path)
    notices = json.loads(run_cli("verify", "--ledger", str(tmp_path), "--json").out)["notices"]
    assert any(n.startswith("no signed checkpoint") for n in notices)
    signer = Signer.generate("example.com/log")
    create_checkpoint(tmp_path, [signer])
    notices = json.loads(run_cli("verify", "--ledger", str(tmp_path), "--json").out)["notices"]
    assert any("not for signatures (pass --verifier-key)" in n for n in notices)
    notices = json.loads(run_cli("verify", "--ledger", str(tmp_path), "--verifier-key",
                                 signer.verifier.vkey, "--json").out)["notices"]
    assert not any("checkpoint" in n for n in notices)


def test_markup_in_ledger_strings_is_printed_not_interpreted(tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text(
        '{"kind":"call","run_id":"[/red]","agent":"a","tool":"[bold]t","call_id":"[/x]",'
        '"arguments":"{}","needs_approval":true}\n'
        '{"kind":"execution","run_id":"[/red]","call_id":"[/x]","arguments":"{}","result":"r"}\n'
    )
    assert run_cli("ingest", str(events), "--ledger", str(tmp_path / "l")).code == 0
    result = run_cli("verify", "--ledger", str(tmp_path / "l"))
    assert result.code == 1 and "[/x]" in result.out and "Traceback" not in result.err
    for args in (["log"], ["trace", "[/x]"]):
        shown = run_cli(*args, "--ledger", str(tmp_path / "l"))
        assert shown.code == 0 and "[/red]" in shown.out, shown.err


def test_ingest_json_counts_the_events_and_the_marker_apart(tmp_path):
    result = run_cli("ingest", str(DATA / "rules" / "valid.jsonl"), "--ledger",
                     str(tmp_path / "l"), "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc["last_seq"] - doc["first_seq"] + 1 == doc["events"]
    assert doc["marker_seq"] == doc["last_seq"] + 1


@pytest.mark.parametrize("ns, shown", [
    (1_700_000_000_999_999_999, "2023-11-14T22:13:20.999Z"),  # before: rounded to ...21.000Z
    (0, "1970-01-01T00:00:00.000Z"),
    (2**64 - 1, "2554-07-21T23:34:33.709Z"),
])
def test_text_times_are_cut_to_the_millisecond_as_query_cuts_them(ns, shown):
    from evidence_ledger.cli import output

    assert output.when(ns) == shown


def test_python_m_cli_main_runs_the_cli():
    # before: python -m evidence_ledger.cli.main exited 0 printing nothing (no __main__ guard)
    import subprocess
    import sys
    from pathlib import Path

    done = subprocess.run([sys.executable, "-m", "evidence_ledger.cli.main", "--help"],
                          capture_output=True, text=True, cwd=Path(__file__).parent.parent,
                          check=False)
    assert done.returncode == 0 and "evidence-ledger" in done.stdout
