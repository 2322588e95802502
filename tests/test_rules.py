"""Each rule: an ingested JSONL that breaks only that rule is reported by that name."""

import json

import jsonschema
import pytest

from evidence_ledger.format import schemas
from tests.helpers import DATA, ingest, run_cli

RULE_FILES = sorted(p.stem for p in (DATA / "rules").glob("*.jsonl") if p.stem != "valid")
EXPECTED = {
    "tool_linkage": [(2, "c-update")],
    "output_provenance": [(3, "c1")],
    "execution_provenance": [(0, "ghost")],
    "approval_binding": [(2, "c1"), (4, "c2")],
    "rejection_respected": [(5, "c2")],
    "argument_integrity": [(1, "c1")],
    "exactly_once": [(2, "c1")],
    "approved_not_executed": [(3, "n1")],
    "state_isolation": [(6, "c1")],
    "nested_ownership": [(7, "n1")],
    "output_not_persisted": [(7, "c-update")],  # the leg that failed writing it, retried
    "foreign_interruption": [(5, "n1")],  # run r-b waits on run r-a's nested call, once
}


def _verify_json(ledger):
    result = run_cli("verify", "--ledger", str(ledger), "--json")
    report = json.loads(result.out)
    jsonschema.validate(report, schemas.load("verify-report"))
    return result.code, report


def test_every_rule_has_a_breaking_file():
    assert set(RULE_FILES) == set(EXPECTED)


@pytest.mark.parametrize("rule", RULE_FILES)
def test_file_breaking_one_rule_is_reported_by_that_rule_only(tmp_path, rule):
    ingest(tmp_path, rule)
    code, report = _verify_json(tmp_path)
    assert code == 1
    assert not report["ok"]
    assert [(v["rule"], v["seq"], v["call_id"]) for v in report["violations"]] == [
        (rule, seq, call_id) for seq, call_id in EXPECTED[rule]
    ]
    assert rule in report["rules"]


def test_valid_file_passes(tmp_path):
    ingest(tmp_path)
    code, report = _verify_json(tmp_path)
    assert (code, report["ok"], report["violations"]) == (0, True, [])
    assert report["tree_size"] == 25  # 24 events + the ingest entry


def test_nested_scope_is_part_of_the_identity(tmp_path):
    events = DATA / "rules" / "approved_not_executed.jsonl"
    # executing the same call_id at top level does not satisfy the nested approval
    text = events.read_text().replace(
        '{"kind":"run_end","run_id":"r1","status":"completed"}',
        '{"kind":"call","run_id":"r1","agent":"top","tool":"wire","call_id":"n1",'
        '"arguments":"{}"}\n'
        '{"kind":"execution","run_id":"r1","call_id":"n1","arguments":"{}","result":"x"}\n'
        '{"kind":"run_end","run_id":"r1","status":"completed"}',
    )
    path = tmp_path / "nested.jsonl"
    path.write_text(text)
    assert run_cli("ingest", str(path), "--ledger", str(tmp_path / "l")).code == 0
    _, report = _verify_json(tmp_path / "l")
    assert [(v["rule"], v["scope"]) for v in report["violations"]] == [
        ("approved_not_executed", ["ask_expert:c9"])
    ]


@pytest.mark.parametrize(("second_scope", "rules"), [
    (["ask_billing:c1"], []),  # the same agent-tool run: its sticky approval holds
    (["ask_billing:c2"], ["approval_binding"]),  # another one: the SDK asks again
])
def test_a_sticky_approval_holds_in_its_own_agent_tool_run(tmp_path, second_scope, rules):
    def call(call_id: str, scope: list[str]) -> str:
        return json.dumps({"kind": "call", "run_id": "r1", "scope": scope, "agent": "billing",
                           "tool": "credit", "call_id": call_id, "arguments": "{}",
                           "needs_approval": True})

    def ran(call_id: str, scope: list[str]) -> str:
        return json.dumps({"kind": "execution", "run_id": "r1", "scope": scope,
                           "call_id": call_id, "arguments": "{}", "result": "ok"})

    path = tmp_path / "sticky.jsonl"
    path.write_text("\n".join([
        call("n1", ["ask_billing:c1"]),
        json.dumps({"kind": "decision", "run_id": "r1", "scope": ["ask_billing:c1"],
                    "call_id": "n1", "decision": "approve", "approver": "ann",
                    "always": True}),
        ran("n1", ["ask_billing:c1"]), call("n2", second_scope), ran("n2", second_scope),
    ]) + "\n")
    assert run_cli("ingest", str(path), "--ledger", str(tmp_path / "l")).code == 0
    _, report = _verify_json(tmp_path / "l")
    assert [v["rule"] for v in report["violations"]] == rules


def test_explicit_rejection_beats_sticky_approval(tmp_path):
    # rejection_respected.jsonl: c1 approved with always=True, c2 explicitly rejected
    assert run_cli(
        "ingest", str(DATA / "rules" / "rejection_respected.jsonl"), "--ledger", str(tmp_path)
    ).code == 0
    _, report = _verify_json(tmp_path)
    assert report["violations"][0]["detail"].startswith("executed after a rejection by bob")


def test_a_late_approval_of_a_call_that_already_ran_is_one_violation(tmp_path):
    # the call ran before anyone approved it: approval_binding, and nothing awaits execution
    path = DATA / "cases" / "late_approval.jsonl"
    assert run_cli("ingest", str(path), "--ledger", str(tmp_path)).code == 0
    _, report = _verify_json(tmp_path)
    assert [(v["rule"], v["seq"]) for v in report["violations"]] == [("approval_binding", 1)]


@pytest.mark.parametrize(("persisted", "rules"), [
    ("[withheld]", []),  # the guardrail's message, as the SDK persists it
    ("secret k1", ["output_provenance"]),  # what the guardrail withheld: a leak
])
def test_a_blocked_call_may_only_persist_the_block_message(tmp_path, persisted, rules):
    """An output guardrail blocked c1 after it ran: its execution holds the real result,
    and only the guardrail's message may be persisted as its output."""
    events = [
        {"kind": "call", "run_id": "r1", "agent": "vault", "tool": "lookup", "call_id": "c1",
         "arguments": "{}"},
        {"kind": "execution", "run_id": "r1", "call_id": "c1", "arguments": "{}",
         "result": "secret k1", "time": 7},
        {"kind": "guardrail", "run_id": "r1", "call_id": "c1", "guardrail": "no_secrets",
         "message": "[withheld]", "time": 7},  # an output guardrail: at its execution's time
        {"kind": "session_item", "run_id": "r1", "session_id": "s1", "item": {
            "type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"}},
        {"kind": "session_item", "run_id": "r1", "session_id": "s1", "item": {
            "type": "function_call_output", "call_id": "c1", "output": persisted}},
    ]
    path = tmp_path / "blocked.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert run_cli("ingest", str(path), "--ledger", str(tmp_path / "l")).code == 0
    _, report = _verify_json(tmp_path / "l")
    assert [v["rule"] for v in report["violations"]] == rules


def _ingest_events(tmp_path, events):
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert run_cli("ingest", str(path), "--ledger", str(tmp_path / "l")).code == 0
    return _verify_json(tmp_path / "l")[1]


_GATED = {"kind": "call", "run_id": "r1", "agent": "bank", "tool": "wire", "call_id": "c1",
          "arguments": "{}", "needs_approval": True}
_APPROVE = {"kind": "decision", "run_id": "r1", "call_id": "c1", "decision": "approve",
            "approver": "alice", "arguments": "{}"}
_BLOCK = {"kind": "guardrail", "run_id": "r1", "call_id": "c1", "guardrail": "limits",
          "message": "over the limit"}


def _persisted(output):
    """Session items: c1's function_call, then its function_call_output ``output``."""
    return [
        {"kind": "session_item", "run_id": "r1", "session_id": "s1", "item": {
            "type": "function_call", "call_id": "c1", "name": "wire", "arguments": "{}"}},
        {"kind": "session_item", "run_id": "r1", "session_id": "s1", "item": {
            "type": "function_call_output", "call_id": "c1", "output": output}},
    ]


def test_an_approved_call_its_input_guardrail_blocked_awaits_nothing(tmp_path):
    report = _ingest_events(tmp_path, [
        _GATED, _APPROVE, _BLOCK, {"kind": "run_end", "run_id": "r1", "status": "completed"},
    ])
    assert report["violations"] == []  # before: approved_not_executed at the run_end


def test_a_block_does_not_withhold_a_result_that_came_after_it(tmp_path):
    """One fork's input guardrail blocked c1; another fork ran it and persisted its result."""
    report = _ingest_events(tmp_path, [
        _GATED, _APPROVE, _BLOCK,
        {"kind": "execution", "run_id": "r1", "call_id": "c1", "arguments": "{}",
         "result": "sent"},
        *_persisted("sent"),
    ])
    assert report["violations"] == []  # before: output_provenance on "sent"


def test_a_result_withheld_in_one_fork_counts_when_another_fork_returns_it_unblocked(tmp_path):
    run_it = {"kind": "execution", "run_id": "r1", "call_id": "c1", "arguments": "{}",
              "result": "sent", "time": 7}
    out_block = {**_BLOCK, "message": "[frozen]", "time": 7}
    report = _ingest_events(tmp_path, [
        _GATED, _APPROVE, run_it, out_block,  # fork A: its output guardrail withheld "sent"
        run_it,  # fork B ran it too and its guardrail allowed
        *_persisted("sent"),
    ])
    assert [v["rule"] for v in report["violations"]] == ["exactly_once"]


def test_another_forks_input_block_between_a_run_and_its_output_withholds_nothing(tmp_path):
    report = _ingest_events(tmp_path, [
        _GATED, _APPROVE,
        {"kind": "execution", "run_id": "r1", "call_id": "c1", "arguments": "{}",
         "result": "sent", "time": 7},  # fork A ran it
        {**_BLOCK, "time": 8},  # fork B's input guardrail blocked it (another time)
        *_persisted("sent"),
    ])
    assert report["violations"] == []  # before: output_provenance on fork A's output


@pytest.mark.parametrize("message", [None, ""])
def test_a_block_of_unknown_or_empty_message_does_not_let_the_withheld_result_through(
    tmp_path, message
):
    block = {"kind": "guardrail", "run_id": "r1", "call_id": "c1", "guardrail": "g", "time": 7}
    if message is not None:
        block["message"] = message
    report = _ingest_events(tmp_path, [
        {**_GATED, "needs_approval": False},
        {"kind": "execution", "run_id": "r1", "call_id": "c1", "arguments": "{}",
         "result": "secret", "time": 7}, block,
        *_persisted("secret"),
    ])
    assert [v["rule"] for v in report["violations"]] == ["output_provenance"]


def test_the_result_withheld_is_the_one_the_block_followed(tmp_path):
    def run(result, time):
        return {"kind": "execution", "run_id": "r1", "call_id": "c1", "arguments": "{}",
                "result": result, "time": time}

    report = _ingest_events(tmp_path, [
        {**_GATED, "needs_approval": False}, run("A", 1), run("B", 2), run("A", 3),
        {**_BLOCK, "time": 3},
        *_persisted("A"),
    ])
    assert [v["rule"] for v in report["violations"]] == [
        "exactly_once", "exactly_once", "output_provenance"]


_SHELL_CALL = {"type": "shell_call", "call_id": "c1", "status": "completed",
               "action": {"commands": ["ls"]}}
_SHELL_OUTPUT = {"type": "shell_call_output", "call_id": "c1",
                 "output": [{"stdout": "a.txt", "stderr": "",
                             "outcome": {"type": "exit", "exit_code": 0}}]}


def _session(*items):
    return [{"kind": "session_item", "run_id": "r1", "session_id": "s1", "item": item}
            for item in items]


@pytest.mark.parametrize(("evidence", "items", "rules"), [
    # ran, approved, both items persisted in order: clean (the output is the SDK's rendering)
    ([_APPROVE, {"kind": "execution", "run_id": "r1", "call_id": "c1", "arguments": "{}",
                 "result": "a.txt"}], [_SHELL_CALL, _SHELL_OUTPUT], []),
    # rejected: the SDK persists its rejection message as the output
    ([{**_APPROVE, "decision": "reject"}], [_SHELL_CALL, _SHELL_OUTPUT], []),
    # blocked by a guardrail
    ([_BLOCK], [_SHELL_CALL, _SHELL_OUTPUT], []),
    # an output persisted without its call item
    ([_APPROVE, {"kind": "execution", "run_id": "r1", "call_id": "c1", "arguments": "{}",
                 "result": "a.txt"}], [_SHELL_OUTPUT], ["tool_linkage"]),
    # an output of a call that never ran, nor was rejected or blocked
    ([_APPROVE], [_SHELL_CALL, _SHELL_OUTPUT], ["output_provenance", "approved_not_executed"]),
])
def test_the_outputs_of_a_shell_call_are_judged_like_a_functions(tmp_path, evidence, items,
                                                                  rules):
    report = _ingest_events(tmp_path, [
        {**_GATED, "tool": "shell"}, *evidence, *_session(*items),
        {"kind": "run_end", "run_id": "r1", "status": "completed"},
    ])
    assert [(v["rule"], v["call_id"]) for v in report["violations"]] == [
        (rule, "c1") for rule in rules]


def test_an_output_persisted_by_a_later_leg_of_the_run_is_not_reported(tmp_path):
    """The call item persisted before the pause, its output by the leg that resumed."""
    report = _ingest_events(tmp_path, [
        _GATED, _persisted("sent")[0],
        {"kind": "run_end", "run_id": "r1", "status": "interrupted"},
        _APPROVE, {"kind": "execution", "run_id": "r1", "call_id": "c1", "arguments": "{}",
                   "result": "sent"},
        _persisted("sent")[1], {"kind": "run_end", "run_id": "r1", "status": "completed"},
    ])
    assert report["violations"] == []


def test_a_call_item_removed_from_its_session_awaits_no_output(tmp_path):
    report = _ingest_events(tmp_path, [
        _GATED, _persisted("sent")[0],
        {"kind": "session_item", "run_id": "r1", "session_id": "s1", "op": "pop",
         "item": _persisted("sent")[0]["item"]},
        {"kind": "run_end", "run_id": "r1", "status": "completed"},
    ])
    assert report["violations"] == []


def _call(run_id, call_id="c1"):
    return {"kind": "call", "run_id": run_id, "agent": "bank", "tool": "wire",
            "call_id": call_id, "arguments": "{}"}


def _ran(run_id, call_id="c1"):
    return {"kind": "execution", "run_id": run_id, "call_id": call_id, "arguments": "{}",
            "result": "sent"}


def _items_without_run(call_id="c1"):
    """c1's function_call and output as an ingest file gives them: no run_id."""
    return [{"kind": "session_item", "session_id": "s1", "item": item}
            for item in ({"type": "function_call", "call_id": call_id, "name": "wire",
                          "arguments": "{}"},
                         {"type": "function_call_output", "call_id": call_id,
                          "output": "sent"})]


def test_session_items_that_name_no_run_trace_through_their_session(tmp_path):
    report = _ingest_events(tmp_path, [_call("r1"), _ran("r1"), *_items_without_run()])
    assert report["violations"] == []  # before: "output of a call that was never recorded"
    assert not any("persisted no session item" in n for n in report["notices"])


def test_a_call_item_that_names_no_run_awaits_its_output_in_its_calls_run(tmp_path):
    report = _ingest_events(tmp_path, [
        _call("r1"), _ran("r1"), _items_without_run()[0],
        {"kind": "run_end", "run_id": "r1", "status": "completed"}])
    assert [(v["rule"], v["run_id"]) for v in report["violations"]] == [
        ("output_not_persisted", "r1")]


def test_an_output_whose_call_no_run_made_is_still_reported(tmp_path):
    report = _ingest_events(tmp_path, [_call("r1"), _ran("r1"), *_items_without_run("c9")])
    assert [(v["rule"], v["call_id"], v["detail"]) for v in report["violations"]] == [
        ("output_provenance", "c9",
         "output of a call that was never recorded (no call c9 was recorded in any run)")]


def test_a_call_id_two_runs_made_is_ambiguous_unless_one_wrote_into_the_session(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    report = _ingest_events(tmp_path / "a", [
        _call("r1"), _ran("r1"), _call("r2"), _ran("r2"), *_items_without_run()])
    assert [(v["rule"], v["call_id"]) for v in report["violations"]] == [
        ("output_provenance", "c1")]
    assert "which more than one run made (run r1 at seq 0, run r2 at seq 2)" in report[
        "violations"][0]["detail"]

    wrote = {"kind": "session_item", "run_id": "r2", "session_id": "s1",
             "item": {"type": "message", "role": "user", "content": "hi"}}
    report = _ingest_events(tmp_path / "b", [
        _call("r1"), _ran("r1"), _call("r2"), _ran("r2"), wrote, *_items_without_run()])
    assert report["violations"] == []


def test_a_call_item_the_app_gave_as_input_awaits_no_output(tmp_path):
    """A pending shell call the app passed in: persisted, but no call of the run."""
    report = _ingest_events(tmp_path, [
        *_session(_SHELL_CALL), {"kind": "run_end", "run_id": "r1", "status": "completed"},
    ])
    assert report["violations"] == []


def test_two_runs_persisting_one_call_id_in_one_session_are_judged_each(tmp_path):
    """The SDK's scripted models reuse call ids: two runs, one session, no outputs."""
    item = {"type": "function_call", "call_id": "c1", "name": "wire", "arguments": "{}"}
    report = _ingest_events(tmp_path, [
        _call("r1"), {"kind": "session_item", "run_id": "r1", "session_id": "s1", "item": item},
        _call("r2"), {"kind": "session_item", "run_id": "r2", "session_id": "s1", "item": item},
        {"kind": "run_end", "run_id": "r1", "status": "completed"},
        {"kind": "run_end", "run_id": "r2", "status": "completed"},
    ])  # before: an internal error (KeyError)
    assert [(v["rule"], v["run_id"]) for v in report["violations"]] == [
        ("output_not_persisted", "r1"), ("output_not_persisted", "r2")]


def test_an_output_of_another_kind_than_its_call_item_answers_nothing(tmp_path):
    """A function call's output relabelled as a custom tool's: not linked, not its output."""
    report = _ingest_events(tmp_path, [
        _call("r1"), _persisted("sent")[0], _ran("r1"),
        {"kind": "session_item", "run_id": "r1", "session_id": "s1", "item": {
            "type": "custom_tool_call_output", "call_id": "c1", "output": "anything"}},
        {"kind": "run_end", "run_id": "r1", "status": "completed"},
    ])  # before: clean
    assert [v["rule"] for v in report["violations"]] == ["tool_linkage", "output_not_persisted"]
