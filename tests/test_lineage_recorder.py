"""Run-state lineage as the recorder writes it, on the installed SDK (agents.testing).

Each scenario of ``examples/lineage_scenarios.py`` (streamed and not) must verify clean on
the current release, but for the faults it still has (:data:`SDK_FAULTS`), and its run
states must form the lineage the scenario made. The same scenarios under every pinned
release are in ``test_lineage_matrix.py``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import Agent, RunState

from evidence_ledger.format import digests
from evidence_ledger.format.entries import Entry
from evidence_ledger.record.integrations.openai_agents import Recorder
from evidence_ledger.record.integrations.run_states import state_id
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.verify.audit import verify_ledger
from evidence_ledger.verify.lineage import run_state_forest

from .helpers import load_example

pytestmark = pytest.mark.anyio

scenarios = load_example("lineage_scenarios")


def entries(directory: Path) -> list[Entry]:
    return [entry for entry, _ in Ledger(directory).entries()]


def states(found: list[Entry]) -> list[tuple[str, str, str | None]]:
    """(event, state_id, parent) of every run_state entry, in log order."""
    return [(e.body["event"], e.body["state_id"], e.body["parent"])
            for e in found if e.kind == "run_state"]


def bound(found: list[Entry], kind: str) -> list[tuple[Any, ...]]:
    """(call_id or status, scope, run_state) of every entry of ``kind``."""
    return [(e.body.get("call_id") or e.body.get("status"), tuple(e.body["scope"]),
             e.body["run_state"]) for e in found if e.kind == kind]


SDK_FAULTS = {"sticky_reject": ["rejection_respected"]}
"""Scenarios whose fault the current release still has: the rules it breaks."""


@pytest.mark.parametrize("name", scenarios.NAMES)
async def test_scenario_verifies_clean_on_the_current_release(tmp_path: Path, name: str) -> None:
    await scenarios.record(name, tmp_path)
    report = verify_ledger(Ledger(tmp_path))
    assert [f.rule for f in report.violations] == SDK_FAULTS.get(
        name.removesuffix("-streamed"), [])
    assert not [n for n in report.notices if "run state" in n]


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_a_sticky_approval_runs_a_rejected_call_unless_the_guard_stops_it(
        tmp_path: Path, streamed: bool) -> None:
    """The current release runs the call rejected explicitly once a sibling call of its tool
    is approved with ``always=True``; the guard denies it (the rejection is in force), and
    the sibling runs."""
    name = "sticky_reject" + ("-streamed" if streamed else "")
    policy = tmp_path / "policy.toml"
    policy.write_text('version = 1\n[[tools]]\nmatch = "wire"\n')
    await scenarios.record(name, tmp_path / "guarded", str(policy))
    found = entries(tmp_path / "guarded")
    first = scenarios.tag("sticky", streamed) + "-a"
    assert [(e.kind, e.body["call_id"], e.body["code"]) for e in found
            if e.kind in ("allowed", "denied")] == [
        ("denied", first, "rejected"), ("allowed", first[:-1] + "b", "approved")]
    assert [e.body["call_id"] for e in found if e.kind == "execution"] == [first[:-1] + "b"]
    assert verify_ledger(Ledger(tmp_path / "guarded")).violations == []


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_fork_gives_siblings_and_binds_each_leg(tmp_path: Path, streamed: bool) -> None:
    await scenarios.SCENARIOS["fork"](Recorder(tmp_path), streamed)
    found = entries(tmp_path)
    made = states(found)
    (_, a, _), (_, b, _) = made[:2]
    assert made == [
        ("to_state", a, None), ("to_state", b, None), ("decided", a, None), ("resume", b, None),
        ("ended", b, None), ("resume", a, None), ("ended", a, None),
    ]
    assert a != b
    wire = scenarios.tag("fork", streamed) + "-wire"
    assert bound(found, "decision") == [(wire, (), a)]
    assert bound(found, "run_end") == [("interrupted", (), None), ("interrupted", (), b),
                                       ("completed", (), a)]
    assert bound(found, "execution") == [(wire, (), a)]


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_reused_call_id_binds_to_its_own_run(tmp_path: Path, streamed: bool) -> None:
    await scenarios.SCENARIOS["reuse_call_id"](Recorder(tmp_path), streamed)
    found = entries(tmp_path)
    runs = list(dict.fromkeys(e.body["run_id"] for e in found if e.kind == "run_end"))
    assert len(runs) == 2
    by_run = {e.body["state_id"]: e.body["run_id"] for e in found if e.kind == "run_state"}
    (decided,) = [e.body for e in found if e.kind == "decision"]
    (ran,) = [e.body for e in found if e.kind == "execution" and e.body["tool"] == "wire"]
    assert decided["run_id"] == ran["run_id"] == runs[0] == by_run[decided["run_state"]]
    assert ran["run_state"] == decided["run_state"]
    assert tuple(ran["scope"]) == (f"ask_l1:{scenarios.tag('reuse', streamed)}-l1",)
    other = [e.body for e in found if e.kind == "run_end" and e.body["run_id"] == runs[1]]
    assert [b["status"] for b in other] == ["interrupted", "interrupted"]


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_nested_call_runs_at_its_scope_on_the_loaded_state(
    tmp_path: Path, depth: int, streamed: bool
) -> None:
    await scenarios.SCENARIOS[f"nested{depth}"](Recorder(tmp_path), streamed)
    found = entries(tmp_path)
    made = states(found)
    (_, saved, _), (_, loaded, _) = made[0], made[1]
    assert made == [("to_state", saved, None), ("loaded", loaded, saved),
                    ("decided", loaded, saved), ("resume", loaded, saved),
                    ("ended", loaded, saved)]
    tag = scenarios.tag(f"nested{depth}", streamed)
    scope = tuple(f"ask_l{k}:{tag}-l{k}" for k in range(1, depth + 1))
    assert bound(found, "decision") == [(f"{tag}-wire", scope, loaded)]
    assert (f"{tag}-wire", scope, loaded) in bound(found, "execution")
    pending = next(e.body["interruptions"] for e in found if e.kind == "run_state")
    assert [(i["call_id"], tuple(i["scope"]), i["tool"]) for i in pending] == [
        (f"{tag}-wire", scope, "wire"),
    ]


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_retry_resumes_the_same_state_again(tmp_path: Path, streamed: bool) -> None:
    await scenarios.SCENARIOS["retry_write"](Recorder(tmp_path), streamed)
    found = entries(tmp_path)
    made = states(found)
    loaded = made[1][1]
    assert [(event, parent) for event, _, parent in made] == [
        ("to_state", None), ("loaded", made[0][1]), ("decided", made[0][1]),
        ("resume", made[0][1]), ("ended", made[0][1]), ("resume", made[0][1]),
        ("ended", made[0][1]),
    ]
    assert [s for s in bound(found, "run_end")] == [
        ("interrupted", (), None), ("failed", (), loaded), ("completed", (), loaded),
    ]
    assert len(bound(found, "execution")) == 1


# -- identity across serialisation ---------------------------------------------------------


def two_step_agent() -> Agent[Any]:
    """Calls the gated ``wire`` twice, one turn each (c1, then c2)."""
    return Agent(
        name="payer", tools=[scenarios.wire],
        model=scenarios.scripted_model(
            [("wire", {"amount": 1}, "ts-c1"), ("wire", {"amount": 2}, "ts-c2")], "done",
        ),
    )


async def test_states_of_a_resumed_leg_are_children_of_the_state_it_resumed(
    tmp_path: Path,
) -> None:
    recorder, agent = Recorder(tmp_path), two_step_agent()
    first = (await recorder.run(agent, "pay")).to_state()
    scenarios.approve_all(recorder, first)
    paused = await recorder.run(agent, first)
    one, two = paused.to_state(), paused.to_state()

    assert {state_id(one), state_id(two), state_id(first)} == set(
        s for _, s, _ in states(entries(tmp_path))
    )
    assert [p for e, _, p in states(entries(tmp_path)) if e == "to_state"] == [
        None, state_id(first), state_id(first),
    ]
    assert type(one) is RunState  # the object is the SDK's, untouched


async def test_to_json_and_to_string_are_the_sdks_own(tmp_path: Path) -> None:
    recorder, agent = Recorder(tmp_path), two_step_agent()
    state = (await recorder.run(agent, "pay")).to_state()
    before = len(entries(tmp_path))
    data = state.to_json()

    assert json.loads(state.to_string()) == data
    assert "evidence_ledger" not in json.dumps(data)
    assert len(entries(tmp_path)) == before  # serialising records nothing
    [made] = [e.body for e in entries(tmp_path) if e.kind == "run_state"]
    stable = {**data, "context": {k: v for k, v in data["context"].items()
                                  if k not in ("context", "context_meta")}}
    assert made["digest"] == hashlib.sha256(digests.canonical_json(stable)).digest()


async def test_a_state_loaded_twice_gives_two_children(tmp_path: Path) -> None:
    recorder, agent = Recorder(tmp_path), two_step_agent()
    saved = (await recorder.run(agent, "pay")).to_state()
    stored = json.dumps(saved.to_json())
    one = await RunState.from_json(agent, json.loads(stored))
    two = await RunState.from_json(agent, json.loads(stored))
    assert state_id(one) is None  # not met yet
    scenarios.approve_all(recorder, one)
    await recorder.run(agent, two)

    forest = run_state_forest(entries(tmp_path))
    ((_, (root,)),) = forest.items()
    assert root.state_id == state_id(saved)
    assert [c.state_id for c in root.children] == [state_id(one), state_id(two)]
    assert [[e.event for e in c.events] for c in root.children] == [
        ["loaded", "decided"], ["loaded", "resume", "ended"],
    ]
    assert verify_ledger(Ledger(tmp_path)).violations == []


async def test_a_copied_state_is_a_child_of_the_original(tmp_path: Path) -> None:
    recorder, agent = Recorder(tmp_path), two_step_agent()
    original = (await recorder.run(agent, "pay")).to_state()
    duplicate = copy.deepcopy(original)
    assert state_id(duplicate) is None
    scenarios.approve_all(recorder, duplicate)

    assert next(s for s in states(entries(tmp_path)) if s[1] == state_id(duplicate)) == (
        "loaded", state_id(duplicate), state_id(original))
    assert [e.body["run_state"] for e in entries(tmp_path) if e.kind == "decision"] == [
        state_id(duplicate),
    ]
