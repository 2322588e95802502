"""The run-state lineage scenarios recorded under each pinned openai-agents release.

``examples/lineage_scenarios.py`` runs inside a venv holding that release (see
``tests/sdk_venvs.py``) and records every scenario into its own ledger; each ledger is
then verified with our CLI, and the rules it reports must be exactly the ones in
:data:`EXPECTED` (nothing, where the release behaves). Slow: one venv per release on
first run; run with ``pytest -m release_matrix``.

What the releases do, as recorded (streamed and not streamed alike):

- 0.20.0 hands ``to_state()`` copies one shared context wrapper, so the approval made
  on one fork lets its sibling run the call (``state_isolation``); keeps nested
  agent-tool runs in a process-wide cache keyed by the calling tool call, so a second
  run reusing that call finds the first run's approved nested call and runs it
  (``execution_provenance``: its run never made the call; ``state_isolation``: only
  the other run approved it), while the first run, resumed, never runs it
  (``approved_not_executed``); and with two or three agent-tool edges it pauses an
  approved nested call again on resume (``approved_not_executed``), parked for good.
- 0.20.0, 0.21.0 and 0.21.1, resuming a state again after a leg whose session write of
  the approved call's output failed, complete without ever persisting that output: the
  session keeps a ``function_call`` without its ``function_call_output``, which the
  provider rejects for good (``output_not_persisted``; SDK issue #4615).
- 0.20.0 through 0.22.3 resume run A's pending nested run for run B's agent-tool call
  that reuses A's call id: B's model is never asked, yet B's state waits on A's nested call
  with A's arguments (``foreign_interruption``; SDK issue #5123). 0.21.0 and later keep it
  from running in B unless B's state is approved: approved through the recorder
  (``foreign_approval``: the decision is recorded, bound to no call of B), B runs A's
  call with A's arguments (``execution_provenance``: B never made it). 0.23.1 and 0.24.0
  give B a nested run of its own.
- 0.21.0, 0.21.1, 0.22.3, 0.23.1 and 0.24.0 keep forks apart.
- Every release (0.24.0 too) runs a call rejected explicitly once another call of its tool
  in the same state is approved with ``always_approve=True``: the sticky approval
  overrides the rejection (``rejection_respected``; the shape of SDK issue #4429).
- Every release ignores all but the first of several handoffs in one response, and
  persists a tool output guardrail's message in place of the tool's result: both are
  recorded as blocks, so verify stays clean, and the execution keeps the tool's result.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from evidence_ledger.storage.ledger_dir import Ledger

from .helpers import run_cli
from .sdk_venvs import RELEASES, REPO_ROOT, sdk_env, sdk_venv

pytestmark = pytest.mark.release_matrix

SCRIPT = REPO_ROOT / "examples" / "lineage_scenarios.py"
SCENARIOS = (
    "fork", "reuse_call_id", "foreign_approval", "nested1", "nested2", "nested3", "retry_write",
    "handoff", "handoff_resumed", "output_guard", "sticky_reject",
)

EXPECTED: dict[tuple[str, str], set[str]] = {
    ("0.20.0", "fork"): {"state_isolation"},
    ("0.20.0", "reuse_call_id"): {
        "execution_provenance", "state_isolation", "approved_not_executed",
        "foreign_interruption",
    },
    ("0.20.0", "foreign_approval"): {"foreign_interruption", "execution_provenance"},
    ("0.21.0", "foreign_approval"): {"foreign_interruption", "execution_provenance"},
    ("0.21.1", "foreign_approval"): {"foreign_interruption", "execution_provenance"},
    ("0.22.3", "foreign_approval"): {"foreign_interruption", "execution_provenance"},
    ("0.21.0", "reuse_call_id"): {"foreign_interruption"},
    ("0.21.1", "reuse_call_id"): {"foreign_interruption"},
    ("0.22.3", "reuse_call_id"): {"foreign_interruption"},
    ("0.20.0", "nested2"): {"approved_not_executed"},
    ("0.20.0", "nested3"): {"approved_not_executed"},
    ("0.20.0", "retry_write"): {"output_not_persisted"},
    ("0.21.0", "retry_write"): {"output_not_persisted"},
    ("0.21.1", "retry_write"): {"output_not_persisted"},
    **{(release, "sticky_reject"): {"rejection_respected"} for release in RELEASES},
}
"""(release, scenario) -> the rules its ledgers break, streamed and not; absent: none."""


def record_all(release: str, out: Path, *only: str, policy: Path | None = None
               ) -> dict[str, dict[str, object]]:
    """Run the scenario script under ``release`` (``only`` these ledgers, if named; with the
    guard and ``policy``, if given); its JSON lines by ledger name."""
    bin_dir = sdk_venv(release)
    done = subprocess.run(
        [str(bin_dir / "python"), str(SCRIPT), "--out", str(out),
         *(["--only", *only] if only else []),
         *(["--policy", str(policy)] if policy else [])],
        env=sdk_env(), capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    return {str(line["scenario"]): line for line in lines}


@pytest.mark.parametrize("release", RELEASES)
def test_lineage_scenarios_report_what_the_release_does(tmp_path: Path, release: str) -> None:
    recorded = record_all(release, tmp_path)
    assert set(recorded) == {f"{s}{m}" for s in SCENARIOS for m in ("", "-streamed")}

    reported: dict[str, set[str]] = {}
    for name, line in sorted(recorded.items()):
        assert line["sdk"] == release and line["error"] is None
        result = run_cli("verify", "--ledger", str(line["ledger"]), "--json")
        report = json.loads(result.out)
        assert result.code == (0 if report["ok"] else 1), result.err
        reported[name] = {v["rule"] for v in report["violations"]}

    expected = {
        name: EXPECTED.get((release, name.removesuffix("-streamed")), set())
        for name in recorded
    }
    assert reported == expected
    for mode in ("", "-streamed"):  # verify is clean either way: the execution must hold
        # what the tool returned, not the guardrail's message the SDK persisted
        found = [e for e, _ in Ledger(Path(str(recorded[f"output_guard{mode}"]["ledger"])))
                 .entries()]
        assert [e.body["result_digest"] for e in found if e.kind == "execution"] == [
            hashlib.sha256(b"c-9: 4111 1111 1111 1111").digest()]
        assert [e.body["guardrail"] for e in found if e.kind == "guardrail"] == [
            "no_card_numbers"]


def test_diff_names_the_execution_a_sibling_fork_ran_on_0_20_0(tmp_path: Path) -> None:
    """The fork scenario before (0.20.0) and after (0.24.0) the fix of the approval that
    leaked between sibling checkpoints: ``diff`` exits 1 and names the leg that ran it."""
    before = record_all("0.20.0", tmp_path / "before", "fork")["fork"]["ledger"]
    after = record_all("0.24.0", tmp_path / "after", "fork")["fork"]["ledger"]
    result = run_cli("diff", str(before), str(after), "--json")
    assert result.code == 1
    found = {(d["what"], d["field"]): (d["a"], d["b"])
             for d in json.loads(result.out)["differences"]}
    assert found["payer.wire#1", "ran_in"] == (["state 2"], ["state 1"])  # B's leg, not A's
    assert found["violations", "state_isolation"] == (1, 0)


FAULTS = ("fork", "reuse_call_id", "foreign_approval", "sticky_reject")
"""The scenarios of the fault classes the guard must stop: an approval leaking between
sibling checkpoints (#4409), another run's call run without its run asking, or with the
foreign approval (#5123), a sticky approval overriding a rejection (#4429)."""

RAN_WRONGLY = {"state_isolation", "execution_provenance", "rejection_respected"}
"""The rules whose finding is an execution that must not have happened."""


@pytest.mark.parametrize("release", RELEASES)
def test_the_guard_stops_each_fault_class_and_observe_only_records_it(
        tmp_path: Path, release: str) -> None:
    names = [f"{s}{m}" for s in FAULTS for m in ("", "-streamed")]
    for mode in ("enforce", "observe"):
        policy = tmp_path / f"{mode}.toml"
        policy.write_text(f'version = 1\nmode = "{mode}"\n[[tools]]\nmatch = "wire"\n')
        recorded = record_all(release, tmp_path / mode, *names, policy=policy)
        for name, line in sorted(recorded.items()):
            assert line["error"] is None, (mode, name)
            expected = EXPECTED.get((release, name.removesuffix("-streamed")), set())
            ledger = Path(str(line["ledger"]))
            report = json.loads(run_cli("verify", "--ledger", str(ledger), "--json").out)
            rules = {v["rule"] for v in report["violations"]}
            entries = [e for e, _ in Ledger(ledger).entries()]
            denied = [e for e in entries if e.kind == "denied"]
            assert not rules & {"guard_verdict", "guard_bypassed"}, (mode, name, rules)
            if mode == "observe":  # the same run, and what enforcement would have denied
                assert rules == expected, (name, rules)
                assert all(e.body["mode"] == "observe" for e in denied)
                assert bool(denied) >= bool(expected & RAN_WRONGLY), name
                continue
            assert not rules & RAN_WRONGLY, (name, rules)  # nothing ran that must not have
            assert bool(denied) >= bool(expected & RAN_WRONGLY), name
            for stop in denied:  # and the tool body never ran for a denied call
                ident = (stop.body["run_id"], stop.body["scope"], stop.body["call_id"])
                assert not [e for e in entries if e.kind == "execution" and e.seq > stop.seq
                            and (e.body["run_id"], e.body["scope"], e.body["call_id"]) == ident]
