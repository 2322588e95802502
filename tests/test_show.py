"""The values behind digests: ``show``, digest prefixes (``show``, ``redact``), ``trace
--values``, and the values a violation compared (``verify``, ``trace``)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import evidence_ledger as el
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from tests.helpers import format1, ingest, rewrite_payload, run_cli, stored_payloads

CLI = [sys.executable, "-m", "evidence_ledger.cli.main"]
CALLED = b'{"amount": 3}'  # approval_binding.jsonl: c1's arguments, as the model sent them
SHOWN = b'{"amount":300}'  # what its approver was shown, kept as RFC 8785 JSON
RESULT = b"receipt"


def _hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _args_digest(ledger: Path, call_id: str) -> str:
    calls = json.loads(run_cli("log", "--ledger", str(ledger), "--kind", "call", "--call-id",
                               call_id, "--json").out)
    return calls[0]["body"]["args_digest"]


@pytest.fixture
def bound(tmp_path) -> Path:
    """tests/data/rules/approval_binding.jsonl ingested: c1 approved on {"amount": 300},
    called and run with {"amount": 3}."""
    ledger = tmp_path / "ledger"
    ingest(ledger, "approval_binding")
    return ledger


def _show(ledger: Path, *args: str):
    return run_cli("show", *args, "--ledger", str(ledger))


@pytest.fixture
def bound1(tmp_path) -> Path:
    """:func:`bound` in format version 1 (one file per payload), where a file can be planted
    under any name."""
    ledger = format1(tmp_path / "ledger")
    ingest(ledger, "approval_binding")
    return ledger


def _plant(ledger: Path, name: str, data: bytes) -> None:
    """A file in ``payloads/`` (format 1) named ``name`` (not the SHA-256 of ``data``)."""
    shard = ledger / "payloads" / name[:2]
    shard.mkdir(parents=True, exist_ok=True)
    (shard / name).write_bytes(data)


# -- show ------------------------------------------------------------------------------


def test_show_prints_a_payload_by_its_whole_digest_or_a_prefix(bound):
    whole = _show(bound, "sha256:" + _hex(CALLED))
    assert whole.code == 0, whole.err
    assert whole.out == f"payload sha256:{_hex(CALLED)}, 13 bytes\n{{\n  \"amount\": 3\n}}\n"
    for prefix in (_hex(CALLED)[:8], "SHA256:" + _hex(CALLED)[:8].upper(),
                   "sha256:" + _hex(CALLED)[:12]):
        assert _show(bound, prefix).out == whole.out, prefix
    text = _show(bound, _hex(RESULT)[:10])
    assert text.code == 0 and text.out == f"payload sha256:{_hex(RESULT)}, 7 bytes\nreceipt\n"


def test_show_takes_an_arguments_digest_and_the_arguments_an_approver_was_shown(bound):
    args = _args_digest(bound, "c1")
    called = _show(bound, args[:15])
    assert called.code == 0, called.err
    assert called.out.splitlines()[0] == (
        f"arguments {args} (payload sha256:{_hex(CALLED)}), 13 bytes")
    shown = _show(bound, _hex(SHOWN)[:8])
    assert shown.code == 0, shown.err
    assert shown.out == f"arguments sha256:{_hex(SHOWN)}, 14 bytes\n{{\n  \"amount\": 300\n}}\n"


def test_show_json_is_the_value_with_its_state_and_size(bound):
    result = _show(bound, _hex(CALLED)[:8], "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out) == {
        "digest": "sha256:" + _hex(CALLED), "state": "present", "value": {"amount": 3},
        "cut": False, "size": 13}


def test_an_ambiguous_prefix_names_the_matches_and_a_longer_one_picks_one(bound1):
    bound = bound1
    first, second = "0a8b3c4d" + "1" * 56, "0a8b3c4d" + "2" * 56
    _plant(bound, first, b'{"planted": 1}')
    _plant(bound, second, b'{"planted": 2}')
    for args in (("show", "0a8b3c4d"),
                 ("redact", "--digest", "sha256:0a8b3c4d", "--reason", "r")):
        result = run_cli(*args, "--ledger", str(bound))
        assert result.code == 2, (args, result.err)
        assert result.err.count("\n") == 1
        assert (f"sha256:0a8b3c4d is ambiguous, it matches 2 digests: sha256:{first}, "
                f"sha256:{second}; give more digits") in result.err
    # a file whose bytes do not hash to its name is never shown: damaged, exit 1
    damaged = _show(bound, "0a8b3c4d1")
    assert damaged.code == 1
    assert damaged.out == (f"payload sha256:{first}: damaged: the stored bytes do not match "
                           "the digest (run verify)\n")
    assert "planted" not in damaged.out


def test_a_digest_nothing_names_or_a_bad_one_is_bad_usage(bound):
    # before: "no payload digest ...", though show takes arguments digests too (a trial
    # user's note)
    for text, says in (("ffffffff", "no payload or arguments digest of this ledger starts "
                                    "with sha256:ffffffff"),
                       ("sha256:" + "f" * 64, "starts with sha256:" + "f" * 64),
                       ("0a8b3c4", "is not a digest"), ("sha1:0a8b3c4d", "is not a digest")):
        result = _show(bound, text)
        assert result.code == 2 and result.out == "", text
        assert says in result.err and result.err.count("\n") == 1, (text, result.err)


def test_a_redacted_payload_shows_who_when_and_why_never_missing(bound):
    redacted = run_cli("redact", "--ledger", str(bound), "--digest", _hex(CALLED)[:8],
                       "--reason", "GDPR erasure 42", "--by", "dpo@example.com", "--json")
    assert redacted.code == 0, redacted.err
    assert json.loads(redacted.out)["digest"] == "sha256:" + _hex(CALLED)
    result = _show(bound, _hex(CALLED)[:8])
    assert result.code == 0, result.err
    assert result.out.startswith(f"payload sha256:{_hex(CALLED)}: redacted by dpo@example.com "
                                 "at seq 7: GDPR erasure 42 (")
    assert "missing" not in result.out
    as_json = json.loads(_show(bound, _hex(CALLED)[:8], "--json").out)
    assert as_json["state"] == "redacted" and "value" not in as_json
    assert as_json["redaction"]["by"] == "dpo@example.com"
    assert as_json["redaction"]["reason"] == "GDPR erasure 42"
    # the arguments digest names the same, now redacted, arguments
    by_args = _show(bound, _args_digest(bound, "c1"), "--json")
    assert by_args.code == 0 and json.loads(by_args.out)["state"] == "redacted"


def test_a_payload_gone_without_a_redaction_is_lost_evidence(bound):
    assert Ledger(bound).payloads.remove(bytes.fromhex(_hex(RESULT)))  # no redaction entry
    result = _show(bound, "sha256:" + _hex(RESULT))
    assert result.code == 1
    assert result.out == (f"payload sha256:{_hex(RESULT)}: missing, and no redaction entry "
                          "erased it: lost evidence (run verify)\n")
    as_json = _show(bound, _hex(RESULT)[:8], "--json")
    assert as_json.code == 1 and json.loads(as_json.out)["state"] == "missing"


def test_arguments_an_approver_was_shown_but_the_ledger_never_kept_are_bad_usage(bound):
    assert Ledger(bound).payloads.remove(bytes.fromhex(_hex(SHOWN)))  # as recorded before 0.2
    result = _show(bound, _hex(SHOWN)[:8])
    assert result.code == 2 and result.err.count("\n") == 1
    assert (f"sha256:{_hex(SHOWN)} is the digest of arguments a decision entry names (seq 1); "
            "the ledger holds no copy of those arguments") in result.err


def test_raw_writes_the_exact_bytes_streamed(tmp_path):
    ledger = tmp_path / "ledger"
    big = '{"blob": "' + "\u00e9x" * (1 << 20) + '"}'  # 3 MiB of UTF-8: past the 1 MiB preview
    writer = EvidenceWriter(Ledger(ledger))
    writer.call(run_id="r", call_id="c", agent="a", tool="t", arguments=big)
    data = big.encode()
    raw = subprocess.run([*CLI, "show", _hex(data)[:8], "--raw", "--ledger", str(ledger)],
                         capture_output=True, timeout=120, check=False)
    assert raw.returncode == 0, raw.stderr
    assert raw.stdout == data
    shown = _show(ledger, _hex(data)[:8])
    assert shown.code == 0
    assert shown.out.splitlines()[0] == (f"payload sha256:{_hex(data)}, {len(data)} bytes, the "
                                         "first 1048576 shown (--raw for all)")
    assert run_cli("show", "x" * 8, "--raw", "--json", "--ledger", str(ledger)).code == 2


def test_raw_of_a_redacted_payload_writes_nothing_and_says_why(bound):
    assert run_cli("redact", "--ledger", str(bound), "--digest", _hex(RESULT)[:8],
                   "--reason", "r").code == 0
    raw = subprocess.run([*CLI, "show", _hex(RESULT)[:8], "--raw", "--ledger", str(bound)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert raw.returncode == 0 and raw.stdout == ""
    assert f"payload sha256:{_hex(RESULT)}: redacted at seq 7: r (" in raw.stderr


# -- redact by prefix ------------------------------------------------------------------


def test_redact_takes_a_prefix_and_records_the_whole_digest(bound):
    result = run_cli("redact", "--ledger", str(bound), "--digest", _hex(RESULT)[:8],
                     "--reason", "r")
    assert result.code == 0, result.err
    assert result.out == f"redacted sha256:{_hex(RESULT)}\n"
    last = json.loads(run_cli("log", "--ledger", str(bound), "--json").out)[-1]
    assert last["kind"] == "redaction" and last["body"]["digest"] == "sha256:" + _hex(RESULT)
    again = run_cli("redact", "--ledger", str(bound), "--digest", _hex(RESULT)[:8],
                    "--reason", "r")
    assert again.code == 2 and "already redacted" in again.err


def test_the_copy_of_arguments_an_approver_was_shown_can_be_redacted(bound):
    result = run_cli("redact", "--ledger", str(bound), "--digest", _hex(SHOWN)[:8],
                     "--reason", "r", "--by", "dpo")
    assert result.code == 0, result.err
    assert Ledger(bound).payloads.get(bytes.fromhex(_hex(SHOWN))) is None
    verify = json.loads(run_cli("verify", "--ledger", str(bound), "--json").out)
    assert verify["violations"][0]["values"]["expected"]["state"] == "redacted"


# -- violations name the values that differ --------------------------------------------


def test_verify_shows_what_the_approver_was_shown_against_what_the_call_had(bound):
    text = run_cli("verify", "--ledger", str(bound))
    assert text.code == 1
    assert "values (shown to the approver -> called):" in text.out
    assert "$.amount: 300 -> 3" in text.out
    report = json.loads(run_cli("verify", "--ledger", str(bound), "--json").out)
    first, second = report["violations"]
    assert first["rule"] == "approval_binding" and "values" not in second
    assert first["values"] == {
        "expected": {"role": "shown to the approver", "digest": "sha256:" + _hex(SHOWN),
                     "state": "present", "value": {"amount": 300}, "cut": False, "size": 14,
                     "args_digest": "sha256:" + _hex(SHOWN)},
        "got": {"role": "called", "digest": "sha256:" + _hex(CALLED), "state": "present",
                "value": {"amount": 3}, "cut": False, "size": 13,
                "args_digest": _args_digest(bound, "c1")},
        "diff": ["$.amount: 300 -> 3"],
    }
    quiet = run_cli("verify", "--ledger", str(bound), "--no-payloads", "--json")
    assert all("values" not in v for v in json.loads(quiet.out)["violations"])


def test_verify_shows_the_executed_arguments_against_the_called_ones(tmp_path):
    ingest(tmp_path, "argument_integrity")
    text = run_cli("verify", "--ledger", str(tmp_path))
    assert text.code == 1
    assert "values (called -> executed):" in text.out
    assert '$.path: "/tmp/a" -> "/"' in text.out
    values = json.loads(run_cli("verify", "--ledger", str(tmp_path), "--json").out)[
        "violations"][0]["values"]
    assert values["diff"] == ['$.path: "/tmp/a" -> "/"']
    assert (values["expected"]["value"], values["got"]["value"]) == ({"path": "/tmp/a"},
                                                                     {"path": "/"})


def test_a_redacted_side_is_named_instead_of_a_diff(bound):
    assert run_cli("redact", "--ledger", str(bound), "--digest", _hex(CALLED)[:8],
                   "--reason", "GDPR", "--by", "dpo").code == 0
    text = run_cli("verify", "--ledger", str(bound)).out
    assert "  called: redacted by dpo at seq 7: GDPR" in text
    assert "$.amount" not in text


# -- trace -----------------------------------------------------------------------------


def test_trace_values_shows_each_entry_s_values_and_the_violation_s_diff(bound):
    result = run_cli("trace", "c1", "--ledger", str(bound), "--values")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert f"        arguments sha256:{_hex(CALLED)[:12]}  {{\"amount\":3}}" in lines
    assert f"        arguments shown sha256:{_hex(SHOWN)[:12]}  {{\"amount\":300}}" in lines
    assert f"        result sha256:{_hex(RESULT)[:12]}  receipt" in lines
    at = lines.index("    values (shown to the approver -> called):")
    assert lines[at - 1].startswith("approval_binding at seq 2: ")
    assert lines[at + 1] == "      $.amount: 300 -> 3"
    plain = run_cli("trace", "c1", "--ledger", str(bound))
    assert "    values (shown to the approver -> called):" in plain.out
    assert "arguments shown" not in plain.out


def test_trace_values_json_holds_each_entry_s_values(bound):
    doc = json.loads(run_cli("trace", "c1", "--ledger", str(bound), "--values", "--json").out)
    kinds = {row["kind"]: row["values"] for row in doc["entries"]}
    assert kinds["call"] == [{"what": "arguments", "digest": "sha256:" + _hex(CALLED),
                              "state": "present", "value": {"amount": 3}, "cut": False,
                              "size": 13}]
    assert [v["what"] for v in kinds["execution"]] == ["arguments", "result"]
    assert doc["violations"][0]["values"]["diff"] == ["$.amount: 300 -> 3"]
    plain = json.loads(run_cli("trace", "c1", "--ledger", str(bound), "--json").out)
    assert all("values" not in row for row in plain["entries"])


def test_trace_says_a_redacted_value_is_redacted(bound):
    assert run_cli("redact", "--ledger", str(bound), "--digest", _hex(RESULT)[:8],
                   "--reason", "secret", "--by", "dpo").code == 0
    result = run_cli("trace", "c1", "--ledger", str(bound), "--values")
    assert (f"        result sha256:{_hex(RESULT)[:12]}  redacted by dpo at seq 7: secret"
            in result.out.splitlines())


def test_every_digest_trace_prints_is_taken_back_by_show(bound):
    out = run_cli("trace", "c1", "--ledger", str(bound), "--values").out
    printed = set(re.findall(r"sha256:([0-9a-f]{12})\b", out))
    assert len(printed) >= 4
    for digest in printed:
        result = _show(bound, "sha256:" + digest)
        assert result.code == 0, (digest, result.err)


# -- recording: the arguments an approver was shown ---------------------------------------


def _payload_files(ledger: Path) -> set[str]:
    return {d.hex() for d in stored_payloads(ledger)}


def test_a_decision_keeps_the_arguments_shown_only_when_they_are_not_the_call_s(tmp_path):
    ledger = tmp_path / "ledger"
    writer = EvidenceWriter(Ledger(ledger))
    writer.call(run_id="r", call_id="c", agent="a", tool="t", arguments='{"b": 1, "a": 2}')
    before = _payload_files(ledger)
    writer.decision(run_id="r", call_id="c", decision="approve", approver="x",
                    arguments='{"a":2,"b":1}')  # the same JSON: nothing new kept
    assert _payload_files(ledger) == before
    writer.decision(run_id="r", call_id="c", decision="approve", approver="x",
                    arguments='{"b": 1, "a": 999999}')
    kept = _payload_files(ledger) - before
    assert kept == {_hex(b'{"a":999999,"b":1}')}  # RFC 8785: named by the arguments digest
    writer.decision(run_id="r", call_id="c", decision="approve", approver="x",
                    arguments="not json")  # args_form raw: the string itself
    assert _payload_files(ledger) - before == kept | {_hex(b"not json")}


def test_prove_markdown_shows_the_bundled_values(tmp_path):
    ledger, key = tmp_path / "ledger", tmp_path / "signing.key"
    ingest(ledger, "argument_integrity")
    assert run_cli("keygen", "--origin", "test.example/log", "--out", str(key)).code == 0
    args = ("prove", "--ledger", str(ledger), "--key", str(key), "--all", "--format", "markdown")
    with_values = run_cli(*args, "--out", str(tmp_path / "a.json"), "--include-payloads")
    assert with_values.code == 0, with_values.err
    assert '<br>`{"path":"/tmp/a"}`' in with_values.out and "<br>`deleted`" in with_values.out
    digests_only = run_cli(*args, "--out", str(tmp_path / "b.json"))
    assert digests_only.code == 0 and "<br>" not in digests_only.out


def test_raw_bytes_that_change_after_the_check_end_in_exit_1(tmp_path, monkeypatch):
    # a breaker moved other bytes over the payload between the check and the stream:
    # exit 0 with "EVIL BYTES" on stdout
    ledger = tmp_path / "ledger"
    data = b'{"amount": 1}'
    EvidenceWriter(Ledger(ledger)).call(run_id="r", call_id="c", agent="a", tool="t",
                                        arguments=data.decode())
    book = el.Ledger(ledger)
    kind = type(Ledger(ledger).payloads)
    real_open = kind.open

    def swapped(store, digest):  # the bytes replaced just after value() checked them
        rewrite_payload(ledger, digest, b"EVIL BYTES")
        return real_open(store, digest)

    monkeypatch.setattr(kind, "open", swapped)
    with pytest.raises(el.EvidenceError, match="changed while it was read"), \
            book.open_payload(_hex(data)[:8]) as stream:
        while stream.read(4):
            pass
