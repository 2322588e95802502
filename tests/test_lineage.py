"""Run-state lineage at the JSONL level: the rules state_isolation, nested_ownership and
approved_not_executed over forks, loads, resumes and retries; the lineage forest; trace."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import jsonschema
import pytest

from evidence_ledger.format import schemas
from evidence_ledger.format.entries import Entry
from evidence_ledger.record.writer import EvidenceWriter, Interruption
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.verify.lineage import StateNode, ancestry, run_state_forest
from tests.helpers import DATA, run_cli

VALID = DATA / "lineage" / "valid.jsonl"

CALL = '{"kind":"call","run_id":"%s","agent":"payer","tool":"wire","call_id":"c1",' \
       '"arguments":"{}","needs_approval":true}'
STATE = '{"kind":"run_state","run_id":"%s","state_id":"%s","event":"to_state"%s}'


def verified(tmp_path: Path, lines: list[str]) -> dict:
    """Ingest ``lines`` into a fresh ledger; return verify's JSON report."""
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(lines) + "\n")
    ledger = tmp_path / "ledger"
    assert run_cli("ingest", str(events), "--ledger", str(ledger)).code == 0
    result = run_cli("verify", "--ledger", str(ledger), "--json")
    report = json.loads(result.out)
    jsonschema.validate(report, schemas.load("verify-report"))
    assert result.code == (0 if report["ok"] else 1)
    # these ledgers carry no signed checkpoint on purpose; that notice is tested elsewhere
    report["notices"] = [n for n in report["notices"] if not n.startswith("no signed checkpoint")]
    return report


def found(report: dict) -> list[tuple[str, int, str, list[str]]]:
    return [(v["rule"], v["seq"], v["call_id"], v["scope"]) for v in report["violations"]]


def execution(run: str, state: str | None, scope: str = "", call_id: str = "c1") -> str:
    fields = {"kind": "execution", "run_id": run, "call_id": call_id, "arguments": "{}",
              "result": "ok"}
    if scope:
        fields["scope"] = [scope]
    if state:
        fields["run_state"] = state
    return json.dumps(fields)


def decision(run: str, state: str | None, scope: str = "", **extra: object) -> str:
    fields = {"kind": "decision", "run_id": run, "call_id": "c1", "decision": "approve",
              "approver": "alice", **extra}
    if scope:
        fields["scope"] = [scope]
    if state:
        fields["run_state"] = state
    return json.dumps(fields)


def run_end(run: str, status: str, state: str | None = None) -> str:
    fields = {"kind": "run_end", "run_id": run, "status": status}
    if state:
        fields["run_state"] = state
    return json.dumps(fields)


# -- a valid lineage -----------------------------------------------------------------------


NO_SESSION = (
    "1 run(s) executed tools but persisted no session item (r1): tool_linkage and "
    "output_provenance do not apply to them (no session, or history kept by the provider: "
    "the calls' response ids link it)"
)
"""The notice for these ledgers, whose run r1 persists nothing."""


def test_valid_lineage_passes(tmp_path: Path) -> None:
    # fork (s-a approved with always, s-b pauses again), s-a -> JSON -> s-c runs the call
    # and a second one on the sticky approval, s-d approves a nested call, fails, retries
    report = verified(tmp_path, VALID.read_text().splitlines())
    assert (report["ok"], report["violations"], report["notices"]) == (True, [], [NO_SESSION])
    assert {"state_isolation", "nested_ownership", "approved_not_executed"} <= set(
        report["rules"]
    )


def test_decision_on_an_ancestor_holds_in_a_descendants_leg(tmp_path: Path) -> None:
    report = verified(tmp_path, [
        CALL % "r1", run_end("r1", "interrupted"),
        STATE % ("r1", "s1", ""), decision("r1", "s1"),
        STATE % ("r1", "s2", ',"parent":"s1"'), STATE % ("r1", "s3", ',"parent":"s2"'),
        execution("r1", "s3"), run_end("r1", "completed", "s3"),
    ])
    assert found(report) == []


# -- state_isolation -----------------------------------------------------------------------


def test_approval_on_a_sibling_does_not_authorise(tmp_path: Path) -> None:
    # tests/data/rules/state_isolation.jsonl, with its detail
    lines = (DATA / "rules" / "state_isolation.jsonl").read_text().splitlines()
    report = verified(tmp_path, lines)
    assert found(report) == [("state_isolation", 6, "c1", [])]
    assert report["violations"][0]["detail"] == (
        "approved at seq 4 on run state s-a, not on run state s-b this leg resumed from or "
        "an ancestor of it"
    )


def test_approval_on_a_child_does_not_authorise_its_parents_leg(tmp_path: Path) -> None:
    report = verified(tmp_path, [
        CALL % "r1", STATE % ("r1", "s1", ""), STATE % ("r1", "s2", ',"parent":"s1"'),
        decision("r1", "s2"), execution("r1", "s1"),
    ])
    assert found(report) == [("state_isolation", 4, "c1", [])]


def test_a_fresh_leg_is_not_authorised_by_a_decision_on_a_state(tmp_path: Path) -> None:
    report = verified(tmp_path, [
        CALL % "r1", STATE % ("r1", "s1", ""), decision("r1", "s1"), execution("r1", None),
    ])
    assert found(report) == [("state_isolation", 3, "c1", [])]
    assert report["violations"][0]["detail"].endswith("this leg started fresh, from no run state")


def test_sticky_approval_on_a_sibling_does_not_authorise(tmp_path: Path) -> None:
    second = CALL.replace('"c1"', '"c2"')
    report = verified(tmp_path, [
        CALL % "r1", STATE % ("r1", "s-a", ""), STATE % ("r1", "s-b", ""),
        decision("r1", "s-a", always=True), execution("r1", "s-a"),
        second % "r1", execution("r1", "s-b", call_id="c2"),
    ])
    assert found(report) == [("state_isolation", 6, "c2", [])]


def test_approval_in_another_run_does_not_authorise(tmp_path: Path) -> None:
    # both runs made call c1 at scope ask:o1; only r1 approved it; r2 ran it
    nested = CALL.replace('"agent"', '"scope":["ask:o1"],"agent"')
    report = verified(tmp_path, [
        nested % "r1", nested % "r2", decision("r1", None, "ask:o1"),
        execution("r2", None, "ask:o1"),
    ])
    assert found(report) == [("state_isolation", 3, "c1", ["ask:o1"])]
    assert report["violations"][0]["detail"] == (
        "no approval in this run; run r1 approved c1 at seq 2"
    )


def test_run_that_never_made_the_call_runs_another_runs_approval(tmp_path: Path) -> None:
    report = verified(tmp_path, [
        CALL % "r1", decision("r1", None), execution("r2", None),
    ])
    assert found(report) == [
        ("execution_provenance", 2, "c1", []), ("state_isolation", 2, "c1", []),
    ]


def test_unknown_states_keep_the_decision(tmp_path: Path) -> None:
    # no run_state entry names s-x / s-y: lineage unknown, the approval holds as before
    report = verified(tmp_path, [
        CALL % "r1", decision("r1", "s-x"), execution("r1", "s-y"), run_end("r1", "completed"),
    ])
    assert found(report) == []
    assert report["notices"] == [
        "seq 1: decision on run state s-x, which no run_state entry records", NO_SESSION,
    ]


def test_rejection_on_a_sibling_does_not_bind_but_approval_still_needed(tmp_path: Path) -> None:
    report = verified(tmp_path, [
        CALL % "r1", STATE % ("r1", "s-a", ""), STATE % ("r1", "s-b", ""),
        decision("r1", "s-a", decision="reject"), decision("r1", "s-b"), execution("r1", "s-b"),
    ])
    assert found(report) == []


# -- nested_ownership ------------------------------------------------------------------------


def test_execution_at_a_scope_the_call_was_not_made_at(tmp_path: Path) -> None:
    nested = CALL.replace('"agent"', '"scope":["ask:o1"],"agent"')
    report = verified(tmp_path, [
        nested % "r1", run_end("r1", "interrupted"), decision("r1", None, "ask:o1"),
        execution("r1", None), run_end("r1", "completed"),
    ])
    assert found(report) == [
        ("nested_ownership", 3, "c1", []), ("approved_not_executed", 4, "c1", ["ask:o1"]),
    ]
    assert report["violations"][0]["detail"] == (
        "executed at top level; call c1 was made at ask:o1, decided at seq 2"
    )


def test_approval_shown_at_one_scope_applied_at_another(tmp_path: Path) -> None:
    lines = (DATA / "rules" / "nested_ownership.jsonl").read_text().splitlines()
    report = verified(tmp_path, lines)
    assert found(report) == [("nested_ownership", 7, "n1", ["ask_payer:c2"])]
    assert report["violations"][0]["detail"] == (
        "approval at seq 5 was shown n1 at ask_payer:c1, the call is at ask_payer:c2"
    )


def test_decision_naming_another_scope_than_its_call(tmp_path: Path) -> None:
    # the decision names scope ask:o2 where no call was made; the call is at ask:o1
    nested = CALL.replace('"agent"', '"scope":["ask:o1"],"agent"')
    report = verified(tmp_path, [
        nested % "r1", decision("r1", None, "ask:o2"), execution("r1", None, "ask:o1"),
    ])
    assert found(report) == [("nested_ownership", 2, "c1", ["ask:o1"])]


def test_ungated_undecided_call_at_another_scope_is_not_ownership(tmp_path: Path) -> None:
    ungated = CALL.replace('"needs_approval":true', '"needs_approval":false')
    report = verified(tmp_path, [ungated % "r1", execution("r1", None, "ask:o9")])
    assert found(report) == []


# -- approved_not_executed over legs -----------------------------------------------------------


def test_nested_approval_paused_again_is_reported(tmp_path: Path) -> None:
    nested = CALL.replace('"agent"', '"scope":["ask:o1","ask:o2"],"agent"')
    report = verified(tmp_path, [
        nested % "r1", run_end("r1", "interrupted"), STATE % ("r1", "s1", ""),
        STATE % ("r1", "s2", ',"parent":"s1","interruptions":[{"call_id":"c1"}]'),
        json.dumps({"kind": "decision", "run_id": "r1", "scope": ["ask:o1", "ask:o2"],
                    "call_id": "c1", "decision": "approve", "approver": "alice",
                    "run_state": "s2"}),
        run_end("r1", "interrupted", "s2"),
    ])
    assert found(report) == [("approved_not_executed", 5, "c1", ["ask:o1", "ask:o2"])]
    assert report["violations"][0]["detail"] == (
        "approved at seq 4 by alice, not executed when the leg (resumed from run state s2) "
        "ended interrupted"
    )


def test_leg_of_another_branch_or_a_failed_leg_does_not_report(tmp_path: Path) -> None:
    report = verified(tmp_path, [
        CALL % "r1", STATE % ("r1", "s-a", ""), STATE % ("r1", "s-b", ""),
        decision("r1", "s-a"), run_end("r1", "completed", "s-b"), run_end("r1", "failed", "s-a"),
    ])
    assert found(report) == []


def test_failed_leg_then_retry_that_finishes_without_it(tmp_path: Path) -> None:
    report = verified(tmp_path, [
        CALL % "r1", STATE % ("r1", "s1", ""), decision("r1", "s1"),
        run_end("r1", "failed", "s1"), run_end("r1", "completed", "s1"),
    ])
    assert found(report) == [("approved_not_executed", 4, "c1", [])]


def test_execution_in_a_sibling_does_not_settle_the_approval(tmp_path: Path) -> None:
    report = verified(tmp_path, [
        CALL % "r1", STATE % ("r1", "s-a", ""), STATE % ("r1", "s-b", ""),
        decision("r1", "s-a"), execution("r1", "s-b"), run_end("r1", "completed", "s-a"),
    ])
    assert found(report) == [("state_isolation", 4, "c1", []),
                             ("approved_not_executed", 5, "c1", [])]


# -- the lineage forest --------------------------------------------------------------------------


def _forest(tmp_path: Path, lines: list[str]) -> dict[str, list[StateNode]]:
    verified(tmp_path, lines)
    return run_state_forest(e for e, _ in Ledger(tmp_path / "ledger").entries())


def _shape(nodes: list[StateNode]) -> list[tuple[int, str, str | None, bool]]:
    return [(d, n.state_id, n.parent, n.recorded) for root in nodes for d, n in root.walk()]


def test_forest_of_the_valid_lineage(tmp_path: Path) -> None:
    forest = _forest(tmp_path, VALID.read_text().splitlines())
    assert list(forest) == ["r1"]
    assert _shape(forest["r1"]) == [
        (0, "s-a", None, True), (1, "s-c", "s-a", True), (2, "s-d", "s-c", True),
        (0, "s-b", None, True),
    ]
    s_a, s_c, s_d = (n for _, n in forest["r1"][0].walk())
    assert [e.event for e in s_a.events] == ["to_state", "to_json"]
    assert [(b.kind, b.call_id, b.detail) for b in s_a.bound] == [
        ("decision", "c1", "approve always"),
    ]
    assert [(b.kind, b.detail) for b in s_d.bound] == [
        ("decision", "approve"), ("run_end", "failed"), ("execution", ""), ("execution", ""),
        ("run_end", "completed"),
    ]
    assert s_a.pending == () and s_d.first_seq == 16  # its latest event lists none
    assert [i["call_id"] for i in s_a.events[0].interruptions] == ["c1"]
    assert s_a.events[0].digest is not None and s_a.events[0].digest != s_a.events[1].digest
    assert s_c.to_json()["events"][0]["digest"].startswith("sha256:")


def test_forest_names_unrecorded_parents_and_survives_a_cycle(tmp_path: Path) -> None:
    forest = _forest(tmp_path, [
        CALL % "r1", STATE % ("r1", "s2", ',"parent":"ghost"'), decision("r1", "s9"),
        STATE % ("r1", "x", ',"parent":"y"'), STATE % ("r1", "y", ',"parent":"x"'),
    ])
    assert _shape(forest["r1"]) == [
        (0, "ghost", None, False), (1, "s2", "ghost", True), (0, "s9", None, False),
        (0, "y", "x", True), (0, "x", "y", True),
    ]


def test_ancestry() -> None:
    parents = {"c": "b", "b": "a", "a": None, "x": "y", "y": "x"}
    assert ancestry(parents, "c") == ["c", "b", "a"]
    assert ancestry(parents, None) == []
    assert ancestry(parents, "unknown") == ["unknown"]
    assert ancestry(parents, "x") == ["x", "y"]


# -- the entry kind --------------------------------------------------------------------------------


def test_run_state_entry_body(tmp_path: Path) -> None:
    writer = EvidenceWriter(tmp_path)
    for call_id, scope in (("c1", ["ask:o1"]), ("c2", [])):  # the calls the state waits on
        writer.call(run_id="r1", call_id=call_id, agent="payer", tool="wire", scope=scope,
                    arguments='{"amount": 5}', needs_approval=True)
    writer.run_state(
        run_id="r1", state_id="s1", event="to_state", state={"b": 1, "a": [1.5, "x"]},
        interruptions=[Interruption("c1", "wire", "payer", ["ask:o1"], '{"amount": 5}'),
                       Interruption("c2")],
    )
    entry = [e for e, _ in Ledger(tmp_path).entries()][-1]
    assert isinstance(entry, Entry) and entry.kind == "run_state"
    body = entry.body
    assert (body["state_id"], body["parent"], body["event"]) == ("s1", None, "to_state")
    assert body["digest"] == hashlib.sha256(b'{"a":[1.5,"x"],"b":1}').digest()
    assert body["interruptions"][0]["scope"] == ["ask:o1"]
    assert body["interruptions"][1] == {
        "tool": None, "agent": None, "scope": None, "call_id": "c2", "args_digest": None,
    }
    assert run_cli("verify", "--ledger", str(tmp_path)).code == 0


def test_unknown_run_state_event_is_refused(tmp_path: Path) -> None:
    events = tmp_path / "bad.jsonl"
    events.write_text('{"kind":"run_state","state_id":"s1","event":"forked"}\n')
    result = run_cli("ingest", str(events), "--ledger", str(tmp_path / "l"))
    assert result.code == 2 and "line 1" in result.err


@pytest.mark.parametrize("field", ["run_state", "parent"])
def test_empty_state_ids_are_refused(tmp_path: Path, field: str) -> None:
    line = {"kind": "run_state", "state_id": "s1", "event": "to_state", field: ""}
    if field == "run_state":
        line = {"kind": "run_end", "status": "completed", "run_state": ""}
    (tmp_path / "bad.jsonl").write_text(json.dumps(line) + "\n")
    assert run_cli("ingest", str(tmp_path / "bad.jsonl"), "--ledger", str(tmp_path / "l")).code == 2


# -- trace ---------------------------------------------------------------------------------------


def test_trace_prints_the_run_state_tree(tmp_path: Path) -> None:
    verified(tmp_path, VALID.read_text().splitlines())
    result = run_cli("trace", "c1", "--ledger", str(tmp_path / "ledger"))
    assert result.code == 0
    tree = result.out[result.out.index("run states of run r1:"):].splitlines()
    assert tree == [
        "run states of run r1:",
        "  s-a  to_state@2  to_json@7  approve always c1@4",
        "  └─ s-c  loaded@8  resume@9  ran c1@10  leg interrupted@15",
        "    └─ s-d  to_state@16  resume@18  resume@20  leg failed@19  leg completed@23",
        "  s-b  to_state@3  resume@5  pending c1  leg interrupted@6",
        "no rule broken by this call (payloads and checkpoints: verify)",
    ]


def test_trace_json_has_the_lineage(tmp_path: Path) -> None:
    verified(tmp_path, VALID.read_text().splitlines())
    result = run_cli("trace", "n1", "--ledger", str(tmp_path / "ledger"), "--json")
    lineage = json.loads(result.out)["lineage"]
    assert [run["run_id"] for run in lineage] == ["r1"]
    states = lineage[0]["states"]  # flat, depth first: each names its parent
    assert [(s["state_id"], s["parent"], s["depth"]) for s in states] == [
        ("s-a", None, 0), ("s-c", "s-a", 1), ("s-d", "s-c", 2), ("s-b", None, 0)]
    s_d = states[2]
    assert s_d["events"][0]["interruptions"][0]["scope"] == ["ask_treasury:c3"]
    assert s_d["bound"][0] == {"seq": 17, "time": s_d["bound"][0]["time"], "kind": "decision",
                               "call_id": "n1", "scope": ["ask_treasury:c3"], "detail": "approve"}


def test_trace_follows_a_run_state_chain_as_long_as_the_log(tmp_path: Path) -> None:
    """700 run states, each the parent of the next: no RecursionError in text or JSON, and
    the JSON lists them flat (read with the default recursion limit, output linear in the
    chain's length: nested and indented, it grew with its square)."""
    lines = ['{"kind":"call","run_id":"r1","agent":"a","tool":"t","call_id":"c1",'
             '"arguments":"{}"}']
    for i in range(700):
        parent = f',"parent":"s{i - 1}"' if i else ""
        lines.append(f'{{"kind":"run_state","run_id":"r1","state_id":"s{i}",'
                     f'"event":"to_state"{parent}}}')
    verified(tmp_path, lines)
    ledger = str(tmp_path / "ledger")
    result = run_cli("trace", "c1", "--ledger", ledger, "--json")
    assert result.code == 0, result.err
    states = json.loads(result.out)["lineage"][0]["states"]
    assert [(s["state_id"], s["depth"]) for s in states] == [(f"s{i}", i) for i in range(700)]
    assert len(result.out) < 1_000_000, len(result.out)
    text = run_cli("trace", "c1", "--ledger", ledger)
    assert text.code == 0 and "└─[699] " in text.out
    assert len(text.out) < 250_000, len(text.out)  # indented to every depth: ~500 KB
