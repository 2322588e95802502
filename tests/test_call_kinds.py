"""Every kind of call the SDK (0.24) makes, recorded (``examples/call_kinds.py``, run in this
process), and what the verifier says when any decision is missing.

``every_kind``: each kind's call, decision (approvable kinds, through the recorder),
execution or provider result, and persisted session items are in the ledger, which
verifies clean; re-appended to a new ledger without one approval, it fails with
``approval_binding`` on that call, for each approvable kind. ``on_context``: the decisions
the app made on the run context are recorded with approver ``run_context``; without one,
the approved call's execution (``approval_binding``) or the rejected call's persisted
message (``output_provenance``) is reported. ``tests/test_call_kinds_matrix.py`` runs the
same script under every pinned SDK release.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.verify.audit import verify_ledger

from .helpers import load_example

pytestmark = pytest.mark.anyio

kinds = load_example("call_kinds")

HOSTED_PERSISTED = {
    "k-hosted-mcp": ["mcp_approval_request", "mcp_approval_response", "mcp_call"],
    "k-web-search": ["web_search_call"], "k-file-search": ["file_search_call"],
    "k-code-interpreter": ["code_interpreter_call"], "k-image": ["image_generation_call"],
    "k-tool-search": ["tool_search_call", "tool_search_output"],
}
"""Call id -> the items the session gets for a call the provider runs."""

LOCAL_ITEMS = {
    "k-function": "function_call", "k-mcp-server": "function_call", "k-shell": "shell_call",
    "k-local-shell": "local_shell_call", "k-apply-patch": "apply_patch_call",
    "k-custom": "custom_tool_call", "k-computer": "computer_call", "k-handoff": "function_call",
}
"""Call id -> the item type of a call run locally (its output: ``<type>_output``)."""


def expected(scenario: str) -> dict[str, Any]:
    """What ``examples/call_kinds.py`` must print for ``scenario`` (``evidence``,
    ``approvers``, ``persisted``), on every SDK release."""
    if scenario == "on_context":
        decided = {"k-function": "refund", "k-shell": "shell", "k-apply-patch": "apply_patch"}
        return {
            "evidence": {
                call_id: [["call", tool], ["decision", tool]]
                + ([] if call_id == "k-apply-patch" else [["execution", tool]])
                for call_id, tool in decided.items()},
            "approvers": dict.fromkeys(decided, "run_context"),
            "persisted": {call_id: [LOCAL_ITEMS[call_id], f"{LOCAL_ITEMS[call_id]}_output"]
                          for call_id in decided},
        }
    evidence = {call_id: [["call", tool], ["decision", tool], ["execution", tool]]
                for call_id, tool in kinds.APPROVED.items()}
    evidence.update({call_id: [["call", tool], ["execution", tool]]
                     for call_id, tool in kinds.RUN_WITHOUT_APPROVAL.items()})
    persisted = {call_id: [item, f"{item}_output"] for call_id, item in LOCAL_ITEMS.items()}
    return {"evidence": evidence, "approvers": dict.fromkeys(kinds.APPROVED, "ann"),
            "persisted": {**persisted, **HOSTED_PERSISTED}}


def same_evidence(found: dict[str, Any], scenario: str) -> None:
    """``found`` (a line the script printed) is what :func:`expected` says, call by call
    (the order of calls aside: the SDK runs some kinds concurrently)."""
    want = expected(scenario)
    for field in ("evidence", "approvers", "persisted"):
        assert found[field] == want[field], field


def reappended_without_decision(source: Path, target: Path, call_id: str) -> None:
    """Append every entry of ``source`` to a new ledger at ``target``, in order, with its
    links to earlier entries re-pointed, except the decision on ``call_id``."""
    writer = EvidenceWriter(Ledger(target))
    shutil.copytree(source / "payloads", target / "payloads", dirs_exist_ok=True)
    moved: dict[bytes, bytes] = {}
    for entry, hash_ in Ledger(source).entries():
        if entry.kind == "decision" and entry.body["call_id"] == call_id:
            continue
        moved[hash_] = writer.append(entry.kind, entry.body,
                                     [moved[r] for r in entry.refs if r in moved], entry.time)


def broken_without(ledger: Path, target: Path, call_id: str) -> set[tuple[str, str | None]]:
    """(rule, call id) of each violation of ``ledger`` re-appended at ``target`` without
    its decision on ``call_id``."""
    reappended_without_decision(ledger, target, call_id)
    return {(v.rule, v.call_id) for v in verify_ledger(Ledger(target)).violations}


WITHOUT_DECISION = {
    ("every_kind", call_id): "approval_binding" for call_id in kinds.APPROVED
} | {("on_context", "k-function"): "approval_binding",
     ("on_context", "k-shell"): "approval_binding",
     ("on_context", "k-apply-patch"): "output_provenance"}
"""(scenario, call id of a decided call) -> the rule its ledger breaks without that decision."""


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Scenario name -> the ledger of its run (every scenario of the script)."""
    out = tmp_path_factory.mktemp("kinds")
    for name, scenario in kinds.SCENARIOS.items():
        await scenario(out / name)
    return {name: out / name for name in kinds.SCENARIOS}


@pytest.mark.parametrize("scenario", ["every_kind", "on_context"])
async def test_every_kind_of_call_is_recorded_and_verifies_clean(
    recorded: dict[str, Path], scenario: str
):
    same_evidence(kinds.recorded(recorded[scenario]), scenario)
    assert verify_ledger(Ledger(recorded[scenario])).violations == []


@pytest.mark.parametrize(("scenario", "call_id"), sorted(WITHOUT_DECISION))
async def test_a_missing_decision_of_any_kind_is_reported(
    recorded: dict[str, Path], tmp_path: Path, scenario: str, call_id: str
):
    assert broken_without(recorded[scenario], tmp_path / "ledger", call_id) == {
        (WITHOUT_DECISION[scenario, call_id], call_id)}
