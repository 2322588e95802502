"""The guard (docs/ENFORCEMENT.md): a tool its policy names runs only on a live, bound
approval in the ledger; ``verify`` checks every ``allowed`` / ``denied`` entry against the
evidence before it and that no enforced tool ran without an ``allowed`` entry.

The cross-process regression case runs ``examples/guarded_approval.py`` in fresh
processes: park and approve, revoke from the CLI, restore and resume with a new recorder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunState, ShellTool, SQLiteSession
from agents.exceptions import ToolInputGuardrailTripwireTriggered

import evidence_ledger as el
from evidence_ledger.policy.judge import GuardFacts, judge
from evidence_ledger.policy.model import parse_policy
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.tlog.note import Signer

from .helpers import EXAMPLES, load_example, run_cli

pytestmark = pytest.mark.anyio

guarded = load_example("guarded_approval")
scenarios = load_example("lineage_scenarios")

BOB_KEY = Signer("bob", bytes(32)).verifier.vkey

BASE = """version = 1
[[tools]]
match = "refund"
"""


def _entries(ledger: Path, kind: str | None = None) -> list[dict[str, Any]]:
    return [e for e in el.Ledger(ledger).entries() if kind is None or e["kind"] == kind]


def _verify(ledger: Path) -> el.Report:
    return el.Ledger(ledger).verify()


def _script(*args: str, ran: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GUARDED_APPROVAL_RAN": str(ran), "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    return subprocess.run([sys.executable, str(EXAMPLES / "guarded_approval.py"), *args],
                          capture_output=True, text=True, env=env, check=True, timeout=120)


@pytest.mark.parametrize("revoked", [True, False])
def test_a_revocation_from_another_process_stops_a_state_approved_before(tmp_path, revoked):
    ledger, ran = tmp_path / "L", tmp_path / "ran.txt"
    common = ["--ledger", str(ledger), "--state", str(tmp_path / "s.json"),
              "--policy", str(tmp_path / "p.toml")]
    _script("park", *common, ran=ran)
    if revoked:
        cli = run_cli("revoke", "--ledger", str(ledger), "--call-id", guarded.CALL_ID,
                      "--by", "bob", "--reason", "wrong amount")
        assert cli.code == 0, cli.err
    out = json.loads(_script("resume", *common, ran=ran).stdout)
    report = _verify(ledger)
    assert report.ok, report.violations
    if revoked:
        assert not ran.exists()  # the tool body was never called
        assert out["call_output"] == "Tool execution was not approved."
        (denied,) = _entries(ledger, "denied")
        assert denied["body"]["code"] == "revoked" and denied["body"]["mode"] == "enforce"
        assert [e["body"]["by"] for e in _entries(ledger, "revocation")] == ["bob"]
        assert not _entries(ledger, "execution")
    else:
        assert ran.read_text() == "o-1 20\n"
        assert out["call_output"] == "refunded 20 on o-1"
        (allowed,) = _entries(ledger, "allowed")
        assert allowed["body"]["code"] == "approved"
        assert not _entries(ledger, "denied")


def _policy(tmp_path: Path, text: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "policy.toml"
    path.write_text(text, encoding="utf-8")
    return path


async def _park(recorder: el.Recorder, amount: int = 20, **kwargs: Any
                ) -> tuple[Agent[Any], RunState[Any, Any]]:
    agent = guarded.support_agent(amount)
    result = await recorder.run(agent, "refund o-1", **kwargs)
    return agent, result.to_state()


def _approve(recorder: el.Recorder, state: RunState[Any, Any], approver: str = "alice",
             **kwargs: Any) -> None:
    for item in state.get_interruptions():
        recorder.approve(state, item, approver=approver, **kwargs)


async def _outcome(tmp_path: Path, policy: str, approvers: list[str], amount: int = 20,
                   signer: Any = None, clock: Any = None) -> tuple[str, dict[str, Any]]:
    """Park, approve as each of ``approvers``, resume: the output the call got and the
    guard's entry."""
    ledger = tmp_path / "L"
    writer = EvidenceWriter(ledger, clock=clock) if clock else EvidenceWriter(ledger)
    recorder = el.Recorder(writer, policy=_policy(tmp_path, policy))
    session = SQLiteSession("s")
    agent, state = await _park(recorder, amount, session=session)
    for approver in approvers:
        _approve(recorder, state, approver, signer=signer)
    await recorder.run(agent, state, session=session)
    outputs = [i["output"] for i in await session.get_items()
               if i.get("type") == "function_call_output"]
    (guard,) = [e for e in _entries(ledger) if e["kind"] in ("allowed", "denied")]
    report = _verify(ledger)
    assert report.ok, report.violations
    return outputs[-1], guard


APPROVERS = BASE + 'approvers = ["alice", "@desk"]\n[groups]\ndesk = ["carol"]\n'


@pytest.mark.parametrize(("approver", "allowed"), [("alice", True), ("carol", True),
                                                    ("mallory", False)])
async def test_only_an_approver_the_policy_names_counts(tmp_path, approver, allowed):
    output, guard = await _outcome(tmp_path, APPROVERS, [approver])
    assert (guard["kind"] == "allowed") is allowed
    assert output == ("refunded 20 on o-1" if allowed else "Tool execution was not approved.")
    if not allowed:
        assert guard["body"]["code"] == "approver"


async def test_a_second_approver_is_needed_when_the_policy_says_so(tmp_path):
    policy = BASE + "second_approver = true\n"
    _, one = await _outcome(tmp_path / "one", policy, ["alice"])
    _, two = await _outcome(tmp_path / "two", policy, ["alice", "bob"])
    assert (one["kind"], one["body"]["code"]) == ("denied", "second_approver")
    assert two["kind"] == "allowed"


async def test_an_argument_out_of_bounds_is_denied(tmp_path):
    policy = BASE + "[tools.arguments.amount]\nmax = 100\n"
    _, low = await _outcome(tmp_path / "low", policy, ["alice"], amount=100)
    _, high = await _outcome(tmp_path / "high", policy, ["alice"], amount=999999)
    assert low["kind"] == "allowed"
    assert (high["kind"], high["body"]["code"]) == ("denied", "arguments")
    assert "999999" in high["body"]["reason"]


async def test_an_approval_older_than_max_age_is_denied(tmp_path):
    now = [1_800_000_000_000_000_000]

    def clock() -> int:
        now[0] += 1_000_000  # 1 ms an entry
        return now[0]

    policy = BASE + "max_age = 60\n"
    ledger = tmp_path / "L"
    recorder = el.Recorder(EvidenceWriter(ledger, clock=clock), policy=_policy(tmp_path, policy))
    agent, state = await _park(recorder)
    _approve(recorder, state)
    now[0] += 61 * 1_000_000_000
    await recorder.run(agent, state)
    (denied,) = _entries(ledger, "denied")
    assert denied["body"]["code"] == "expired"
    assert _verify(ledger).ok


async def test_signed_approvals(tmp_path):
    alice = el.SigningKey.generate(tmp_path / "alice.key", "alice")
    other = el.SigningKey.generate(tmp_path / "other.key", "alice")  # same name, another key
    policy = (BASE + 'approvers = ["alice"]\nsigned = true\n[keys]\n'
              f'alice = "{alice.verifier_key}"\n')
    _, unsigned = await _outcome(tmp_path / "a", policy, ["alice"])
    _, wrong = await _outcome(tmp_path / "b", policy, ["alice"], signer=other)
    _, signed = await _outcome(tmp_path / "c", policy, ["alice"], signer=alice)
    assert (unsigned["kind"], unsigned["body"]["code"]) == ("denied", "unsigned")
    assert (wrong["kind"], wrong["body"]["code"]) == ("denied", "unsigned")
    assert signed["kind"] == "allowed"


async def test_a_signed_approval_from_the_cli_counts(tmp_path):
    alice = el.SigningKey.generate(tmp_path / "alice.key", "alice")
    policy = BASE + f'signed = true\n[keys]\nalice = "{alice.verifier_key}"\n'
    ledger = tmp_path / "L"
    recorder = el.Recorder(ledger, policy=_policy(tmp_path, policy))
    agent, state = await _park(recorder)
    cli = run_cli("approve", "--ledger", str(ledger), "--call-id", guarded.CALL_ID,
                  "--by", "alice", "--key", str(tmp_path / "alice.key"), "--json")
    assert cli.code == 0, cli.err
    for item in state.get_interruptions():  # the app applies it to its state
        state.approve(item)
    await recorder.run(agent, state)
    assert [e["kind"] for e in _entries(ledger) if e["kind"] in ("allowed", "denied")] == [
        "allowed"]
    assert _verify(ledger).ok


async def test_a_decision_on_the_context_alone_is_not_in_the_ledger(tmp_path):
    ledger = tmp_path / "L"
    recorder = el.Recorder(ledger, policy=_policy(tmp_path, BASE))
    agent, state = await _park(recorder)
    for item in state.get_interruptions():
        state.approve(item)  # behind the recorder's back
    await recorder.run(agent, state)
    (denied,) = _entries(ledger, "denied")
    assert denied["body"]["code"] == "no_approval"
    assert not _entries(ledger, "execution")


async def test_observe_records_what_it_would_deny_and_runs_the_tool(tmp_path):
    ledger = tmp_path / "L"
    recorder = el.Recorder(ledger, policy=_policy(tmp_path, 'mode = "observe"\n' + BASE))
    agent, state = await _park(recorder)
    _approve(recorder, state)
    recorder.revoke(guarded.CALL_ID, by="bob", reason="test")
    await recorder.run(agent, state)
    (denied,) = _entries(ledger, "denied")
    assert (denied["body"]["mode"], denied["body"]["code"]) == ("observe", "revoked")
    assert len(_entries(ledger, "execution")) == 1
    assert _verify(ledger).ok


async def test_on_deny_raise_fails_the_run_without_calling_the_tool(tmp_path):
    ledger = tmp_path / "L"
    recorder = el.Recorder(ledger, policy=_policy(tmp_path, 'on_deny = "raise"\n' + BASE))
    agent, state = await _park(recorder)
    for item in state.get_interruptions():
        state.approve(item)  # the SDK will run it; the ledger holds no approval
    with pytest.raises(ToolInputGuardrailTripwireTriggered):
        await recorder.run(agent, state)
    assert _entries(ledger, "denied") and not _entries(ledger, "execution")
    assert _verify(ledger).ok


async def test_a_tool_of_another_kind_is_stopped_at_its_start(tmp_path):
    calls: list[Any] = []
    shell = ShellTool(executor=lambda request: calls.append(request) or "ok",
                      needs_approval=True)
    agent = Agent(name="ops", tools=[shell], model=scripted_shell_model())
    ledger = tmp_path / "L"
    recorder = el.Recorder(ledger, policy=_policy(tmp_path, 'version = 1\n[[tools]]\n'
                                                             'match = "shell"\n'))
    state = (await recorder.run(agent, "list")).to_state()
    for item in state.get_interruptions():
        state.approve(item)  # not through the recorder: no approval in the ledger
    with pytest.raises(el.GuardDenied, match="no approval"):
        await recorder.run(agent, state)
    assert calls == []
    (denied,) = _entries(ledger, "denied")
    assert denied["body"]["tool"] == "shell"


def scripted_shell_model() -> Any:
    kinds = load_example("call_kinds")
    return kinds.steps_model([[kinds.SHELL_CALL], [kinds.message("done")]])


@pytest.mark.parametrize(("text", "fragment"), [
    ("version = 1\nfoo = 1\n[[tools]]\nmatch = \"a\"\n", "'foo' was unexpected"),
    ("version = 1\n[[tools]]\nmatch = \"a\"\nmax_age = \"1h\"\n", "max_age"),
    ("version = 2\n[[tools]]\nmatch = \"a\"\n", "version"),
    ("version = 1\n[[tools]]\nmatch = \"a**\"\n", "tool pattern"),
    ("version = 1\n[[tools]]\nmatch = \"a?\"\n", "match"),
    ("version = 1\n[[tools]]\nmatch = \"a..b\"\n", "tool pattern"),
    ("version = 1\n[[tools]]\nmatch = \"[ab]\"\n", "match"),
    ("version = 1\n[[tools]]\nmatch = \"a\"\napprovers = [\"@nobody\"]\n", "group"),
    ("version = 1\n[[tools]]\nmatch = \"a\"\n[tools.arguments.x]\npattern = \"(\"\n",
     "bad pattern"),
    ("version = 1\n[[tools]]\nmatch = \"a\"\nsigned = true\napprovers = [\"x\"]\n", "no key"),
    ("version = 1\n[keys]\nx = \"x+00000000+AAAA\"\n[[tools]]\nmatch = \"a\"\n", "keys/x"),
    ("version = 1\n[[tools]\n", "not a TOML file"),
    ("version = 1\n[groups]\ng = []\n[[tools]]\nmatch = \"a\"\napprovers = [\"@g\"]\n",
     "0 approver(s)"),
    ("version = 1\n[[tools]]\nmatch = \"a\"\napprovers = [\"x\"]\nsecond_approver = true\n",
     "fewer than it needs"),
    ("version = 1\n[[tools]]\nmatch = \"a\"\n[tools.arguments.n]\nmin = 10\nmax = 1\n",
     "min is above max"),
    ("version = 1\n[[tools]]\nmatch = \"a\"\n[[tools]]\nmatch = \"a\"\n", "never reached"),
    (f"version = 1\n[keys]\nalice = \"{BOB_KEY}\"\n[[tools]]\nmatch = \"a\"\n",
     "named 'bob'"),
    ("\xff", "not a TOML file"),
])
def test_a_bad_policy_file_is_refused_with_exit_2_and_one_line(tmp_path, text, fragment):
    path = tmp_path / "p.toml"
    path.write_bytes(text.encode("utf-8", "surrogateescape") if text != "\xff" else b"\xff")
    result = run_cli("check-policy", str(path))
    assert result.code == 2
    assert result.err.count("\n") == 1 and fragment in result.err, result.err
    with pytest.raises(el.PolicyError):
        el.Recorder(tmp_path / "L", policy=path)


def test_check_policy_prints_what_it_guards(tmp_path):
    result = run_cli("check-policy", str(_policy(tmp_path, guarded.POLICY)), "--json")
    assert result.code == 0
    (rule,) = json.loads(result.out)["tools"]
    assert rule == {"match": "refund", "agent": None, "mode": "enforce", "approvers": ["alice"],
                    "max_age_s": 3600, "second_approver": False, "signed": False,
                    "arguments": ["amount"]}


@pytest.mark.parametrize(("pattern", "name", "matches"), [
    ("refund", "refund", True), ("refund", "refunds", False), ("pay.*", "pay.wire", True),
    ("pay.*", "pay.x.wire", False), ("*", "pay.wire", False), ("*.*", "pay.wire", True),
    ("w*e", "wire", True), ("w*e", "w.e", False),
])
def test_a_pattern_matches_within_one_segment(pattern, name, matches):
    policy = parse_policy(f'version = 1\n[[tools]]\nmatch = "{pattern}"\n'.encode())
    assert (policy.rule("agent", name) is not None) is matches


def test_revoke_refuses_a_call_no_run_recorded(tmp_path):
    EvidenceWriter(tmp_path / "L").run_end(run_id="r", status="completed")
    result = run_cli("revoke", "--ledger", str(tmp_path / "L"), "--call-id", "nope", "--by",
                     "bob", "--reason", "x")
    assert result.code == 2 and "no recorded call 'nope'" in result.err


def _guarded_ledger(tmp_path: Path, allowed: bool, approved: bool, execute: bool) -> Path:
    ledger = tmp_path / "L"
    w = EvidenceWriter(Ledger(ledger))
    text = BASE.encode()
    w.policy(run_id="r", text=text)
    w.call(run_id="r", call_id="c", agent="support", tool="refund", arguments="{}",
           needs_approval=True)
    if approved:
        w.decision(run_id="r", call_id="c", decision="approve", approver="alice")
    w.guard(allowed=allowed, run_id="r", call_id="c", scope=(), agent="support", tool="refund",
            arguments="{}", mode="enforce", code="approved" if allowed else "no_approval",
            reason="-", policy_digest=parse_policy(text).digest, run_state=None)
    if execute:
        w.execution(run_id="r", call_id="c", arguments="{}", agent="support", tool="refund",
                    result="ok")
    return ledger


@pytest.mark.parametrize(("allowed", "approved", "execute", "rules"), [
    (True, True, True, []),
    (False, False, False, []),
    (True, False, False, ["guard_verdict"]),  # allowed without an approval
    (False, True, False, ["guard_verdict"]),  # denied though approved
    (False, False, True, ["guard_bypassed"]),  # denied, and it ran
])
def test_verify_checks_each_verdict_against_the_evidence_before_it(
        tmp_path, allowed, approved, execute, rules):
    report = _verify(_guarded_ledger(tmp_path, allowed, approved, execute))
    assert sorted({f.rule for f in report.violations} - {"approved_not_executed",
                                                         "approval_binding"}) == rules


def test_an_enforced_tool_run_without_the_guard_is_reported(tmp_path):
    ledger = tmp_path / "L"
    w = EvidenceWriter(Ledger(ledger))
    w.policy(run_id="r", text=BASE.encode())
    w.call(run_id="r", call_id="c", agent="support", tool="refund", arguments="{}")
    w.execution(run_id="r", call_id="c", arguments="{}", agent="support", tool="refund",
                result="ok")
    assert [f.rule for f in _verify(ledger).violations] == ["guard_bypassed"]


def test_an_approval_on_a_state_recorded_after_it_does_not_count():
    facts = GuardFacts()
    from evidence_ledger.format.entries import Entry

    def feed(seq: int, kind: str, body: dict[str, Any]) -> None:
        facts.feed(Entry(seq, bytes(32), kind, seq, body), bytes([seq]) * 32)

    feed(0, "call", {"run_id": "r", "scope": [], "call_id": "c", "agent": "a", "tool": "t",
                     "args_digest": bytes(32)})
    decision = {"run_id": "r", "scope": [], "call_id": "c", "decision": "approve",
                "always": False, "approver": "x", "args_digest": None, "agent": None,
                "tool": None, "run_state": "S"}
    feed(1, "decision", decision)
    feed(2, "run_state", {"state_id": "S", "parent": None})
    policy = parse_policy(b'version = 1\n[[tools]]\nmatch = "t"\n')
    (rule,) = policy.tools
    verdict = judge(facts, policy, rule, run_id="r", scope=(), call_id="c", leg="S", now=3,
                    arguments=None)
    assert (verdict.allowed, verdict.code) == (False, "lineage")
    feed(3, "decision", decision)  # made again, now that the state is recorded
    verdict = judge(facts, policy, rule, run_id="r", scope=(), call_id="c", leg="S", now=4,
                    arguments=None)
    assert verdict.allowed


def test_the_guard_queries_of_the_docs_name_what_the_guard_did(tmp_path):
    """``denied_calls`` and ``revoked_approvals`` of docs/QUERIES.md on the cross-process
    case: the revocation, and the denial it caused."""
    from .test_index import canned_queries

    ledger, ran = tmp_path / "L", tmp_path / "ran.txt"
    common = ["--ledger", str(ledger), "--state", str(tmp_path / "s.json"),
              "--policy", str(tmp_path / "p.toml")]
    _script("park", *common, ran=ran)
    el.Ledger(ledger).revoke(guarded.CALL_ID, by="bob", reason="wrong amount")
    _script("resume", *common, ran=ran)
    index = str(tmp_path / "index.duckdb")
    denied = el.Ledger(ledger).query(canned_queries()["denied_calls"], index=index)
    assert [(r[3], r[5], r[6]) for r in denied.rows] == [(guarded.CALL_ID, "enforce", "revoked")]
    revoked = el.Ledger(ledger).query(canned_queries()["revoked_approvals"], index=index)
    assert [(r[1], r[2], r[5]) for r in revoked.rows] == [(guarded.CALL_ID, "bob", 1)]


EVERY_GATED = """version = 1
[[tools]]
match = "refund"
[[tools]]
match = "delete_file"
[[tools]]
match = "shell"
[[tools]]
match = "apply_patch"
[[tools]]
match = "note"
[[tools]]
match = "lookup"
"""
"""A policy naming each kind of ``examples/call_kinds.py`` that asks for approval: a
function tool, an MCP server's tool, shell, apply_patch, a custom tool, a hosted MCP tool."""


async def test_every_gated_kind_goes_through_the_guard(tmp_path):
    kinds = load_example("call_kinds")
    await kinds.every_kind(tmp_path / "L", str(_policy(tmp_path, EVERY_GATED)))
    verdicts = {e["body"]["call_id"]: (e["kind"], e["body"]["tool"])
                for e in _entries(tmp_path / "L") if e["kind"] in ("allowed", "denied")}
    assert verdicts == {call_id: ("allowed", tool) for call_id, tool in kinds.APPROVED.items()}
    report = _verify(tmp_path / "L")
    assert report.ok, report.violations


async def test_a_context_approval_of_another_kind_fails_the_run_before_its_body(tmp_path):
    kinds = load_example("call_kinds")
    with pytest.raises(el.GuardDenied, match="shell call k-shell: no approval"):
        await kinds.on_context(tmp_path / "L", str(_policy(tmp_path, EVERY_GATED)))
    found = _entries(tmp_path / "L")
    assert {(e["kind"], e["body"]["call_id"]) for e in found  # the SDK runs them together
            if e["kind"] in ("allowed", "denied", "execution")} == {
        ("denied", "k-function"), ("denied", "k-shell")}
    report = _verify(tmp_path / "L")
    assert report.ok, report.violations


def test_an_approver_signs_with_a_key_of_their_own_name(tmp_path):
    el.SigningKey.generate(tmp_path / "bob.key", "bob")
    EvidenceWriter(tmp_path / "L").call(run_id="r", call_id="c", agent="a", tool="t",
                                        arguments="{}")
    common = ["--ledger", str(tmp_path / "L"), "--call-id", "c"]
    wrong = run_cli("approve", *common, "--by", "carol", "--key", str(tmp_path / "bob.key"))
    empty = run_cli("revoke", *common, "--by", " ", "--reason", "r")
    assert wrong.code == 2 and "the key is 'bob''s, not 'carol''s" in wrong.err
    assert empty.code == 2 and "by must not be empty" in empty.err
    assert [e["kind"] for e in _entries(tmp_path / "L")] == ["call"]


# -- what an adversarial trial found (each its failing input, now refused or caught) -----


def test_a_rule_for_an_agent_holds_for_its_same_named_twins():
    (rule,) = parse_policy(b'version = 1\n[[tools]]\nmatch = "wire"\nagent = "payer"\n').tools
    assert rule.matches("payer", "wire") and rule.matches("payer#2", "wire")
    assert not rule.matches("payer#x", "wire") and not rule.matches("payers", "wire")


@pytest.mark.parametrize("arguments", ['{"amount": NaN}', '{"amount": Infinity}',
                                       '{"amount": "5"}', "[" * 100_000])
def test_arguments_that_are_no_finite_number_break_a_bound(arguments):
    facts = GuardFacts()
    policy = parse_policy(b'version = 1\n[[tools]]\nmatch = "t"\n'
                          b'[tools.arguments.amount]\nmax = 100\n')
    (rule,) = policy.tools
    facts.calls["r", (), "c"] = ("a", "t", bytes(32))
    verdict = judge(facts, policy, rule, run_id="r", scope=(), call_id="c", leg=None, now=0,
                    arguments=arguments)
    assert (verdict.allowed, verdict.code) == (False, "arguments")


async def test_a_handoff_the_policy_names_fails_the_run_before_the_target_runs(tmp_path):
    kinds = load_example("call_kinds")
    target = Agent(name="closer", model=kinds.steps_model([[kinds.message("done")]]))
    agent = Agent(name="triage", handoffs=[target], model=kinds.steps_model([
        [kinds.function_call("transfer_to_closer", "{}", "h1")]]))
    recorder = el.Recorder(tmp_path / "L", policy=_policy(
        tmp_path, 'version = 1\n[[tools]]\nmatch = "transfer_to_*"\n'))
    with pytest.raises(el.GuardDenied, match="transfer_to_closer call h1"):
        await recorder.run(agent, "go")
    assert [e["body"]["code"] for e in _entries(tmp_path / "L", "denied")] == ["no_approval"]
    assert not _entries(tmp_path / "L", "execution")


def _signed_ledger(tmp_path: Path) -> tuple[EvidenceWriter, Any, bytes]:
    alice = Signer("alice", bytes(range(32)))
    text = (BASE + f'signed = true\n[keys]\nalice = "{alice.verifier.vkey}"\n').encode()
    w = EvidenceWriter(Ledger(tmp_path / "L"))
    w.policy(run_id="r", text=text)
    w.call(run_id="r", call_id="c", agent="support", tool="refund", arguments="{}",
           needs_approval=True)
    return w, alice, text


def test_a_signature_copied_onto_another_decision_does_not_count(tmp_path):
    w, alice, text = _signed_ledger(tmp_path)
    first = w.decision(run_id="r", call_id="c", decision="approve", approver="alice")
    w.approval_signature(decision=first, signer=alice)
    w.revocation(call_id="c", by="bob", reason="no", run_id="r")
    second = w.decision(run_id="r", call_id="c", decision="approve", approver="alice")
    (signed,) = _entries(tmp_path / "L", "approval_signature")
    w.append("approval_signature", {**{k: v for k, v in signed["body"].items()},
                                    "scope": [], "decision_hash": second})
    policy = parse_policy(text)
    verdict = judge(w.guard_facts, policy, policy.tools[0], run_id="r", scope=(),
                    call_id="c", leg=None, now=w.clock(), arguments="{}")
    assert (verdict.allowed, verdict.code) == (False, "unsigned")


def test_a_back_dated_or_unrecorded_policy_verdict_is_a_forgery(tmp_path):
    w = EvidenceWriter(Ledger(tmp_path / "L"))
    w.policy(run_id="r", text=BASE.encode())
    w.call(run_id="r", call_id="c", agent="support", tool="refund", arguments="{}",
           needs_approval=True)
    w.decision(run_id="r", call_id="c", decision="approve", approver="alice")
    common = {"run_id": "r", "call_id": "c", "scope": (), "agent": "support", "tool": "refund",
              "arguments": "{}", "mode": "enforce", "code": "approved", "reason": "-",
              "run_state": None}
    w.guard(allowed=True, policy_digest=parse_policy(BASE.encode()).digest, time_ns=1,
            **common)
    w.guard(allowed=True, policy_digest=bytes(32), **common)
    found = sorted((f.rule, f.seq) for f in _verify(tmp_path / "L").violations)
    assert found == [("guard_verdict", 3), ("guard_verdict", 4),
                     ("payload_missing", 4)]  # the forged digest names no payload either


def test_a_sticky_approval_holds_for_later_calls_with_other_arguments(tmp_path):
    w = EvidenceWriter(Ledger(tmp_path / "L"))
    for call_id, args in (("c1", '{"a": 1}'), ("c2", '{"a": 2}')):
        w.call(run_id="r", call_id=call_id, agent="support", tool="refund", arguments=args,
               needs_approval=True)
        if call_id == "c1":
            w.decision(run_id="r", call_id="c1", decision="approve", approver="alice",
                       always=True, agent="support", tool="refund")
    policy = parse_policy(BASE.encode())
    verdict = judge(w.guard_facts, policy, policy.tools[0], run_id="r", scope=(),
                    call_id="c2", leg=None, now=w.clock(), arguments='{"a": 2}')
    assert verdict.allowed, verdict


def test_a_denial_for_arguments_since_redacted_is_not_judged_again(tmp_path):
    text = (BASE + "[tools.arguments.a]\nmax = 1\n").encode()
    w = EvidenceWriter(Ledger(tmp_path / "L"))
    w.policy(run_id="r", text=text)
    w.call(run_id="r", call_id="c", agent="support", tool="refund", arguments='{"a": 5}',
           needs_approval=True)
    w.decision(run_id="r", call_id="c", decision="approve", approver="alice")
    w.guard(allowed=False, run_id="r", call_id="c", scope=(), agent="support", tool="refund",
            arguments='{"a": 5}', mode="enforce", code="arguments", reason="-",
            policy_digest=parse_policy(text).digest, run_state=None)
    (call,) = _entries(tmp_path / "L", "call")
    el.Ledger(tmp_path / "L").redact(call["body"]["args_payload"], reason="gdpr")
    assert [f.rule for f in _verify(tmp_path / "L").violations] == []


def test_a_run_switching_policies_records_each_switch(tmp_path):
    w = EvidenceWriter(Ledger(tmp_path / "L"))
    for text in (b"p1", b"p2", b"p1", b"p1"):
        w.policy(run_id="r", text=text)
    assert len(_entries(tmp_path / "L", "policy")) == 3


@pytest.mark.parametrize("text", [
    "version = 1\n[[tools]]\nmatch = \"a\"\n[tools.arguments.x]\nmax = nan\n",
    "version = 1\n[[tools]]\nmatch = \"a\"\n[tools.arguments.x]\npattern = \"a{4294967296}\"\n",
    "version = 1\n[[tools]]\nmatch = \"a\"\n[tools.arguments.x]\npattern = \"%s\"\n" % (
        "(" * 500 + ")" * 500),
    "version = 1\nx = " + "[" * 5000 + "]" * 5000 + "\n[[tools]]\nmatch = \"a\"\n",
])
def test_a_policy_bomb_is_refused_with_exit_2(tmp_path, text):
    path = tmp_path / "p.toml"
    path.write_text(text)
    result = run_cli("check-policy", str(path))
    assert result.code == 2 and result.err.count("\n") == 1, result.err


def test_text_that_is_not_utf8_is_refused_with_exit_2(tmp_path):
    EvidenceWriter(tmp_path / "L").call(run_id="r", call_id="c", agent="a", tool="t",
                                        arguments="{}")
    lone = "\udc80"  # what a shell passes for a byte that is not UTF-8
    for args in (["revoke", "--call-id", "c", "--by", "b", "--reason", lone],
                 ["redact", "--digest", "sha256:" + "0" * 64, "--reason", lone]):
        result = run_cli(*args, "--ledger", str(tmp_path / "L"))
        assert result.code == 2 and "not valid UTF-8" in result.err, result.err


HOSTED_REQUEST = {"type": "mcp_approval_request", "id": "h-1", "name": "lookup",
                  "server_label": "docs", "arguments": '{"q": "x"}'}
HOSTED_CALL = {"type": "mcp_call", "id": "mcp-1", "name": "lookup", "server_label": "docs",
               "arguments": '{"q": "x"}', "approval_request_id": "h-1"}


async def _hosted_run(ledger: Path, policy: str, streamed: bool, callback: Any = None,
                      approver: str = "ann") -> list[Any]:
    """A hosted MCP tool asks to run ``lookup``; the app approves it (by ``callback``, or
    as ``approver`` on the paused state through the recorder); returns the
    ``mcp_approval_response`` items the model was sent next."""
    from agents import HostedMCPTool

    scripted = load_example("scripted_models")
    sent: list[Any] = []

    def respond(items: Any) -> list[Any]:
        if not sent and not any(_field(i, "type") == "mcp_approval_response" for i in items):
            sent.append(None)
            return [HOSTED_REQUEST]
        answers = [i for i in items if _field(i, "type") == "mcp_approval_response"]
        sent.extend(answers)
        ran = [{**HOSTED_CALL, "output": "found x"}] if any(
            _field(a, "approve") for a in answers) else []  # the provider runs it if approved
        return [*ran, load_example("call_kinds").message("done")]

    config: Any = {"type": "mcp", "server_label": "docs", "server_url": "https://example.com",
                   "require_approval": "always"}
    tool = (HostedMCPTool(tool_config=config, on_approval_request=callback) if callback
            else HostedMCPTool(tool_config=config))
    # ScriptedModel streams only some item types, not an mcp_approval_request
    model = (scripted.TinyScriptedModel(respond) if streamed
             else scripted.responding_model(respond, 3))
    agent = Agent(name="ops", tools=[tool], model=model)
    recorder = el.Recorder(ledger, policy=_policy(ledger.parent, policy))

    async def run(given: Any) -> Any:
        if not streamed:
            return await recorder.run(agent, given)
        result = recorder.run_streamed(agent, given)
        async for _ in result.stream_events():
            pass
        return result

    result = await run("go")
    if result.interruptions:
        state = result.to_state()
        for item in state.get_interruptions():
            recorder.approve(state, item, approver=approver)
        await run(state)
    return sent[1:]


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def _approves(_request: Any) -> Any:
    return {"approve": True}


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
@pytest.mark.parametrize("callback", [None, _approves], ids=["on_state", "by_callback"])
@pytest.mark.parametrize("mode", ["enforce", "observe"])
async def test_the_guard_answers_a_hosted_request_approved_out_of_policy_with_a_rejection(
        tmp_path, streamed, callback, mode):
    policy = f'version = 1\nmode = "{mode}"\n[[tools]]\nmatch = "lookup"\napprovers = ["bob"]\n'
    sent = await _hosted_run(tmp_path / "L", policy, streamed, callback)
    (response,) = sent
    (denied,) = _entries(tmp_path / "L", "denied")
    assert (denied["body"]["call_id"], denied["body"]["code"]) == ("h-1", "approver")
    if mode == "enforce":
        assert _field(response, "approve") is False
        assert _field(response, "reason") in ("Tool execution was not approved.", None)
    else:
        assert _field(response, "approve") is True
    report = _verify(tmp_path / "L")
    assert report.ok, report.violations


@pytest.mark.parametrize("callback", [None, _approves], ids=["on_state", "by_callback"])
async def test_the_guard_lets_a_hosted_request_approved_in_policy_through(tmp_path, callback):
    approver = "callback:_approves" if callback else "bob"
    policy = f'version = 1\n[[tools]]\nmatch = "lookup"\napprovers = ["{approver}"]\n'
    (response,) = await _hosted_run(tmp_path / "L", policy, False, callback, approver="bob")
    assert _field(response, "approve") is True
    (allowed,) = _entries(tmp_path / "L", "allowed")
    assert (allowed["body"]["call_id"], allowed["body"]["code"]) == ("h-1", "approved")
    assert not _entries(tmp_path / "L", "denied")


def _hosted_model(requests: list[str], sent: list[tuple[str, Any]], done: str = "done") -> Any:
    """A model that asks each hosted request of ``requests`` in turn (the next after the
    previous one is answered), notes each answer it gets in ``sent``, and, as a provider
    would, runs each approved request."""
    scripted, kinds = load_example("scripted_models"), load_example("call_kinds")

    asked: list[str] = []

    def respond(items: Any) -> list[Any]:
        out: list[Any] = []
        for item in items:
            rid = _field(item, "approval_request_id")
            if _field(item, "type") == "mcp_approval_response" and rid not in dict(sent):
                sent.append((rid, _field(item, "approve")))
                if _field(item, "approve"):
                    out.append({**HOSTED_CALL, "id": f"mcp-{rid}", "approval_request_id": rid,
                                "output": "ran"})
        if len(asked) < len(requests) and len(sent) == len(asked):
            asked.append(requests[len(asked)])
            out.append({**HOSTED_REQUEST, "id": asked[-1]})
        return out or [kinds.message(done)]

    return scripted.responding_model(respond, 2 * len(requests) + 2)


def _hosted_tool() -> Any:
    from agents import HostedMCPTool

    return HostedMCPTool(tool_config={"type": "mcp", "server_label": "docs",
                                      "server_url": "https://example.com",
                                      "require_approval": "always"})


async def test_a_sticky_hosted_approval_out_of_policy_lets_no_later_request_through(tmp_path):
    """Regression (adversarial trial): alice, whom the policy does not allow, approves h-1
    sticky; the SDK answers h-2 itself from that approval (no pause, no callback). The
    guard's check of the model input answers it with the rejection."""
    sent: list[tuple[str, Any]] = []
    agent = Agent(name="ops", tools=[_hosted_tool()], model=_hosted_model(["h-1", "h-2"], sent))
    recorder = el.Recorder(tmp_path / "L", policy=_policy(
        tmp_path, 'version = 1\n[[tools]]\nmatch = "lookup"\napprovers = ["bob"]\n'))
    state = (await recorder.run(agent, "go")).to_state()
    recorder.approve(state, state.get_interruptions()[0], approver="alice", always=True)
    await recorder.run(agent, state)
    assert sent == [("h-1", False), ("h-2", False)]
    assert [(e["body"]["call_id"], e["body"]["code"]) for e in _entries(tmp_path / "L", "denied")
            ] == [("h-1", "approver"), ("h-2", "approver")]
    assert _verify(tmp_path / "L").ok


async def test_a_hosted_approval_on_the_context_alone_is_answered_with_a_rejection(tmp_path):
    from agents import RunContextWrapper, ToolApprovalItem

    sent: list[tuple[str, Any]] = []
    agent = Agent(name="ops", tools=[_hosted_tool()], model=_hosted_model(["h-1"], sent))
    context: Any = RunContextWrapper(context=None)
    context.approve_tool(ToolApprovalItem(agent=agent, raw_item=HOSTED_REQUEST),
                         always_approve=True)
    await el.Recorder(tmp_path / "L", policy=_policy(tmp_path, BASE.replace("refund", "lookup"))
                      ).run(agent, "go", context=context)
    assert sent == [("h-1", False)]
    (denied,) = _entries(tmp_path / "L", "denied")
    assert denied["body"]["code"] == "no_approval"
    assert _verify(tmp_path / "L").ok


@pytest.mark.parametrize(("approver", "answer"), [("alice", False), ("bob", True)])
async def test_a_hosted_request_of_an_agent_tool_is_judged_when_its_run_resumes(
        tmp_path, approver, answer):
    """Regression (adversarial trial): the approval of a nested agent's hosted request is
    kept on the agent tool's own state; the guard judges it when that run resumes."""
    scripted, kinds = load_example("scripted_models"), load_example("call_kinds")
    sent: list[tuple[str, Any]] = []
    inner = Agent(name="inner", tools=[_hosted_tool()], model=_hosted_model(["h-1"], sent))

    def outer_respond(items: Any) -> list[Any]:
        if not any(_field(i, "type") == "function_call_output" for i in items):
            return [kinds.function_call("ask_inner", '{"input": "look"}', "k-inner")]
        return [kinds.message("outer done")]

    outer = Agent(name="outer", tools=[inner.as_tool(tool_name="ask_inner",
                                                     tool_description="asks inner")],
                  model=scripted.responding_model(outer_respond, 4))
    recorder = el.Recorder(tmp_path / "L", policy=_policy(
        tmp_path, 'version = 1\n[[tools]]\nmatch = "lookup"\napprovers = ["bob"]\n'))
    state = (await recorder.run(outer, "go")).to_state()
    recorder.approve(state, state.get_interruptions()[0], approver=approver)
    await recorder.run(outer, state)
    assert sent == [("h-1", answer)]
    verdicts = [(e["kind"], e["body"]["scope"]) for e in _entries(tmp_path / "L")
                if e["kind"] in ("allowed", "denied")]
    assert verdicts == [("allowed" if answer else "denied", ["ask_inner:k-inner"])]
    assert _verify(tmp_path / "L").ok
