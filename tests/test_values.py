"""Payload values for people (evidence_ledger.views.values): digest prefixes, redacted
values, value diffs."""

from __future__ import annotations

import json

import pytest

from evidence_ledger.format.entries import Entry
from evidence_ledger.format.errors import UsageError
from evidence_ledger.verify.findings import Finding
from evidence_ledger.verify.rules import RuleEngine
from evidence_ledger.views.values import (
    PREVIEW_BYTES,
    Value,
    ValueDiff,
    argument_payloads,
    digest_prefix,
    pick_digest,
    preview,
    redactions_of,
    value_diff,
)

A = bytes.fromhex("0a8b3c4d" + "11" * 28)
B = bytes.fromhex("0a8b3c4e" + "22" * 28)


@pytest.mark.parametrize("text", ["sha256:0A8B3C4D", " 0a8b3c4d", "sha256:" + A.hex()])
def test_a_prefix_is_hex_after_an_optional_sha256(text):
    assert A.hex().startswith(digest_prefix(text))


@pytest.mark.parametrize("text", ["0a8b3c4", "sha256:zz8b3c4d", "", "0" * 65, "sha1:0a8b3c4d"])
def test_a_short_or_foreign_prefix_is_a_usage_error(text):
    with pytest.raises(UsageError, match="is not a digest"):
        digest_prefix(text)


def test_a_prefix_names_one_digest_or_says_which_it_matches():
    assert pick_digest("0a8b3c4d", [A, B]) == A
    with pytest.raises(UsageError, match=f"matches 2 digests: sha256:{A.hex()}, sha256:{B.hex()}"):
        pick_digest("0a8b3c4", [A, B])
    with pytest.raises(UsageError, match="no payload digest of this ledger starts with"):
        pick_digest("ffffffff", [A, B])


def test_a_redacted_payload_says_who_when_and_why_and_never_its_bytes():
    entries = [Entry(3, b"\0" * 32, "redaction", 7, {"digest": A, "reason": "GDPR", "by": "bob"})]
    value = Value.of(A, b'{"path":"/etc/passwd"}', redactions_of(entries))
    assert value.state == "redacted"
    assert value.describe() == "redacted by bob at seq 3: GDPR"
    assert "value" not in value.to_json()
    assert value.to_json()["redaction"] == {"seq": 3, "time_ns": 7, "by": "bob", "reason": "GDPR"}


def test_a_value_is_json_when_it_parses_else_text_and_a_large_one_is_cut():
    assert Value.of(A, b'{"a":1}', {}).parsed() == {"a": 1}
    assert Value.of(A, b"plain \xff", {}).parsed() == "plain \ufffd"
    assert Value.of(A, None, {}).state == "missing"
    big = Value.of(A, b"x" * (PREVIEW_BYTES + 1), {})
    assert big.cut and len(big.data or b"") == PREVIEW_BYTES
    assert big.describe() == f"{PREVIEW_BYTES}+ bytes"


def test_the_diff_names_each_differing_path_and_is_cut_to_a_few_lines():
    shown = {"order_id": "o-1", "amount": 1, "memo": "x", "items": [1, 2]}
    had = {"order_id": "o-1", "amount": 999999, "note": "y", "items": [1, 3]}
    assert value_diff(shown, had) == [
        "$.amount: 1 -> 999999",
        "$.items[1]: 2 -> 3",
        '$.memo: removed "x"',
        '$.note: added "y"',
    ]
    assert value_diff(shown, shown) == []
    many = value_diff({str(i): i for i in range(10)}, {str(i): -i for i in range(1, 10)},
                      max_lines=3)
    assert many[-1] == "… and 8 more differences" and len(many) == 3
    assert value_diff(1, True) == ["$: 1 -> true"]


def test_a_preview_is_one_line_cut_to_width():
    assert preview({"a": "b\nc"}, 40) == '{"a":"b\\\\nc"}'.replace("\\\\", "\\")
    assert preview("x" * 50, 10) == "x" * 9 + "…"


def _entry(seq: int, kind: str, **body) -> Entry:
    return Entry(seq, b"\0" * 32, kind, seq, body)


def test_a_value_diff_names_both_sides_and_what_differs():
    finding = Finding("approval_binding", 5, "…", compared=(A, B))
    shown, called = Value.of(A, b'{"amount":1}', {}), Value.of(B, b'{"amount":999999}', {})
    diff = ValueDiff.of(finding, shown, called)
    assert diff.roles == ("shown to the approver", "called")
    assert diff.summary() == ["$.amount: 1 -> 999999"]
    assert diff.to_json() == {
        "expected": {"role": "shown to the approver", "digest": "sha256:" + A.hex(),
                     "state": "present", "value": {"amount": 1}, "cut": False},
        "got": {"role": "called", "digest": "sha256:" + B.hex(), "state": "present",
                "value": {"amount": 999999}, "cut": False},
        "diff": ["$.amount: 1 -> 999999"],
    }
    unknown = ValueDiff.of(finding, Value(A, "unrecorded"), called)
    assert unknown.lines == ()
    assert unknown.summary() == [
        "shown to the approver: not recorded (the ledger holds its digest only)"]


def test_the_rules_say_which_two_arguments_digests_they_compared():
    ran, other = bytes([1]) * 32, bytes([2]) * 32
    call = {"run_id": "r", "scope": [], "call_id": "c", "agent": "a", "tool": "t",
            "args_digest": A, "args_form": "jcs", "args_payload": A, "needs_approval": True,
            "response_id": None}
    entries = [
        _entry(0, "call", **call),
        _entry(1, "decision", run_id="r", scope=[], call_id="c", decision="approve",
               always=False, approver="x", reason=None, message_digest=None, args_digest=B,
               args_form="jcs", agent=None, tool=None, run_state=None),
        _entry(2, "execution", run_id="r", scope=[], call_id="c", agent=None, tool=None,
               args_digest=ran, args_form="jcs", args_payload=ran, result_digest=None,
               error=None, run_state=None),
        _entry(3, "run_state", run_id="r", state_id="s", parent=None, event="to_state",
               digest=None, interruptions=[{"call_id": "c", "tool": "t", "agent": "a",
                                            "scope": [], "args_digest": other}]),
    ]
    engine = RuleEngine()
    for entry in entries:
        engine.feed(entry)
    compared = {f.rule: f.compared for f in engine.findings}
    assert compared == {"argument_integrity": (A, ran), "approval_binding": (B, A),
                        "foreign_interruption": (other, A)}
    assert Finding("r", 1, "d", compared=(A, B)) == Finding("r", 1, "d")  # not in equality
    assert "compared" not in Finding("r", 1, "d", compared=(A, B)).to_json()


def test_arguments_digests_map_to_the_payloads_holding_them():
    entries = [_entry(0, "call", args_digest=A, args_payload=B),
               _entry(1, "execution", args_digest=B, args_payload=B),
               _entry(2, "decision", args_digest=bytes(32))]
    assert argument_payloads(entries) == {A: B, B: B}
    assert argument_payloads(entries, {B}) == {B: B}


def test_a_value_that_cannot_be_shown_previews_as_what_it_is():
    assert Value.of(A, b'{"a": [1, 2]}', {}).preview(40) == '{"a":[1,2]}'
    assert Value(A, "damaged").preview(20) == "damaged: the stored…"
    assert Value(A, "unrecorded").to_json() == {"digest": "sha256:" + A.hex(),
                                                "state": "unrecorded"}


def test_values_cut_short_are_never_called_equal():
    # a breaker's two 7.9 MB arguments differing past the first MiB read "equal as JSON"
    from evidence_ledger.verify.findings import Finding
    big = b'{"xs": [' + b"0," * PREVIEW_BYTES
    finding = Finding("argument_integrity", 1, "differs", compared=(A, B))
    diff = ValueDiff.of(finding, Value.of(A, big + b"1]}", {}), Value.of(B, big + b"7]}", {}))
    assert diff.lines == ()
    assert diff.summary() == [f"called: {PREVIEW_BYTES}+ bytes, too large to compare",
                              f"executed: {PREVIEW_BYTES}+ bytes, too large to compare"]


def test_a_lone_surrogate_escape_is_shown_as_its_escape_never_crashes_output():
    # a breaker's ingested arguments {"a": "\ud800"} crashed verify, trace and show
    raw = b'{"a": "\\ud800"}'
    value = Value.of(A, raw, {})
    assert value.parsed() == raw.decode()
    assert json.dumps(value.to_json(), ensure_ascii=False).encode("utf-8")
