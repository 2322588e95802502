"""``evidence-ledger diff``: two runs side by side, without ids or times.

Stream parity: every lineage scenario (``examples/lineage_scenarios.py``) recorded with
``run`` and with ``run_streamed`` on the installed SDK gives the same runs (exit 0). Runs
that differ name what differs (exit 1); bad usage exits 2; a ledger that fails integrity
exits 1 saying which. ``tests/test_lineage_matrix.py`` compares one scenario across SDK
releases.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .helpers import forge_entry, load_example, run_cli

pytestmark = pytest.mark.anyio

scenarios = load_example("lineage_scenarios")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
async def test_a_scenario_run_and_run_streamed_are_the_same(tmp_path: Path, name: str):
    plain, streamed = tmp_path / name, tmp_path / f"{name}-streamed"
    for recorded in (plain, streamed):
        await scenarios.record(recorded.name, recorded)
    for run_a, run_b in zip(_runs(plain), _runs(streamed), strict=True):  # in order made
        result = run_cli("diff", str(plain), str(streamed), "--run-a", run_a,
                         "--run-b", run_b, "--json")
        assert (result.code, result.err) == (0, ""), result.out
        assert json.loads(result.out)["equal"] is True


def _runs(ledger: Path) -> list[str]:
    """The run ids that made calls in ``ledger``, oldest first."""
    result = run_cli("log", "--ledger", str(ledger), "--kind", "call", "--json")
    return list(dict.fromkeys(entry["body"]["run_id"] for entry in json.loads(result.out)))


def _ingested(ledger: Path, lines: list[dict]) -> Path:
    events = ledger.with_suffix(".jsonl")
    events.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert run_cli("ingest", str(events), "--ledger", str(ledger)).code == 0
    return ledger


CALL = {"kind": "call", "agent": "bank", "tool": "wire", "call_id": "c1",
        "arguments": '{"amount": 5}', "needs_approval": True}
APPROVE = {"kind": "decision", "call_id": "c1", "decision": "approve", "approver": "ann"}
RAN = {"kind": "execution", "call_id": "c1", "arguments": '{"amount": 5}', "result": "sent"}


def test_runs_that_differ_name_each_difference(tmp_path: Path):
    a = _ingested(tmp_path / "a", [{**CALL, "run_id": "r1"}, {**APPROVE, "run_id": "r1"},
                                   {**RAN, "run_id": "r1"}])
    b = _ingested(tmp_path / "b", [{**CALL, "run_id": "r2", "call_id": "other"},
                                   {**RAN, "run_id": "r2", "call_id": "other"},
                                   {**RAN, "run_id": "r2", "call_id": "other"}])
    result = run_cli("diff", str(a), str(b), "--json")
    assert result.code == 1
    found = {(d["what"], d["field"], json.dumps(d["a"]), json.dumps(d["b"]))
             for d in json.loads(result.out)["differences"]}
    assert ("bank.wire#1", "decision", '"approve"', "null") in found
    assert ("bank.wire#1", "executions", "1", "2") in found  # the extra execution
    assert ("bank.wire#1", "ran_in", '["fresh"]', '["fresh", "fresh"]') in found
    assert ("violations", "approval_binding", "0", "2") in found

    text = run_cli("diff", str(a), str(b))
    assert text.code == 1 and "DIFFER" in text.out
    assert "bank.wire#1: executions 1 in A, 2 in B" in text.out


def test_two_runs_of_one_ledger_are_chosen_by_prefix(tmp_path: Path):
    ledger = _ingested(tmp_path / "l", [
        {**CALL, "run_id": "run-one"}, {**APPROVE, "run_id": "run-one"},
        {**RAN, "run_id": "run-one"},
        {**CALL, "run_id": "run-two"}, {**APPROVE, "run_id": "run-two"},
        {**RAN, "run_id": "run-two"}])
    same = run_cli("diff", str(ledger), str(ledger), "--run-a", "run-o", "--run-b", "run-t")
    assert same.code == 0 and "SAME" in same.out

    unnamed = run_cli("diff", str(ledger), str(ledger))
    assert unnamed.code == 2
    assert "holds 2 runs (run-one, run-two): name one with --run-a" in unnamed.err
    ambiguous = run_cli("diff", str(ledger), str(ledger), "--run-a", "run-", "--run-b", "x")
    assert ambiguous.code == 2 and "starting with 'run-'" in ambiguous.err
    empty = run_cli("diff", str(ledger), str(ledger), "--run-a", "", "--run-b", "run-t")
    assert empty.code == 2 and "--run-a is empty" in empty.err


def test_violations_of_other_runs_are_a_notice_not_a_difference(tmp_path: Path):
    clean = _ingested(tmp_path / "a", [{**CALL, "run_id": "r1"}, {**APPROVE, "run_id": "r1"},
                                       {**RAN, "run_id": "r1"}])
    other = _ingested(tmp_path / "b", [{**CALL, "run_id": "r1"}, {**APPROVE, "run_id": "r1"},
                                       {**RAN, "run_id": "r1"},
                                       {**CALL, "run_id": "r9", "call_id": "c9"},
                                       {**RAN, "run_id": "r9", "call_id": "c9"}])
    result = run_cli("diff", str(clean), str(other), "--run-b", "r1")
    assert result.code == 0
    assert "ledger B holds 1 violation(s) of other runs (run verify)" in result.out


def test_a_ledger_that_fails_integrity_is_named(tmp_path: Path):
    a = _ingested(tmp_path / "a", [{**CALL, "run_id": "r1"}, {**RAN, "run_id": "r1"}])
    b = _ingested(tmp_path / "b", [{**CALL, "run_id": "r1"}, {**RAN, "run_id": "r1"}])
    forge_entry(b, 1, lambda data: data.replace(b"sent", b"SENT") if b"sent" in data
                else data[:-1] + bytes([data[-1] ^ 1]))
    result = run_cli("diff", str(a), str(b))
    assert result.code == 1
    assert "ledger B" in result.err and "fails integrity" in result.err


def _differences(a: Path, b: Path, *args: str) -> tuple[int, set[tuple[str, str]]]:
    result = run_cli("diff", str(a), str(b), *args, "--json")
    return result.code, {(d["what"], d["field"]) for d in json.loads(result.out)["differences"]}


def test_how_the_legs_ended_and_the_order_of_calls_are_compared(tmp_path: Path):
    read = {"kind": "call", "agent": "a", "tool": "read", "call_id": "c1", "arguments": "{}"}
    delete = {**read, "tool": "delete", "call_id": "c2"}
    first = _ingested(tmp_path / "a", [{**read, "run_id": "r1"}, {**delete, "run_id": "r1"},
                                       {"kind": "run_end", "run_id": "r1",
                                        "status": "completed"}])
    second = _ingested(tmp_path / "b", [{**delete, "run_id": "r1"}, {**read, "run_id": "r1"},
                                        {"kind": "run_end", "run_id": "r1", "status": "failed"}])
    code, found = _differences(first, second)
    assert code == 1 and found == {("run", "leg ends"), ("run", "call order")}


def test_an_exact_run_id_wins_over_the_runs_it_is_a_prefix_of(tmp_path: Path):
    ledger = _ingested(tmp_path / "l", [{**CALL, "run_id": "r1"}, {**CALL, "run_id": "r10"}])
    assert run_cli("diff", str(ledger), str(ledger), "--run-a", "r1",
                   "--run-b", "r10").code == 0


def test_calls_whose_names_read_alike_are_not_merged(tmp_path: Path):
    """A nested agent 'payer' under tool 'ask', and a top-level agent named 'ask/payer'."""
    wire = {"kind": "call", "tool": "wire", "arguments": "{}"}
    a = _ingested(tmp_path / "a", [
        {"kind": "call", "run_id": "r1", "agent": "top", "tool": "ask", "call_id": "k1",
         "arguments": "{}"},
        {**wire, "run_id": "r1", "agent": "payer", "call_id": "n1", "scope": ["ask:k1"]},
        {**wire, "run_id": "r1", "agent": "ask/payer", "call_id": "n2"}])
    b = _ingested(tmp_path / "b", [
        {"kind": "call", "run_id": "r1", "agent": "top", "tool": "ask", "call_id": "k1",
         "arguments": "{}"},
        {**wire, "run_id": "r1", "agent": "ask/payer", "call_id": "n2"}])
    code, found = _differences(a, b)
    assert code == 1 and any(field == "call" for _, field in found)  # before: SAME
