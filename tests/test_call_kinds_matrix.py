"""Every kind of call, recorded under each pinned openai-agents release.

``examples/call_kinds.py`` runs inside a venv holding that release (see
``tests/sdk_venvs.py``); what it recorded must be what ``tests/test_call_kinds.py`` expects
of 0.24 (each kind's call, decision, execution or provider result and persisted items, the
decisions made on the run context), each ledger must verify clean with our CLI, and each
lacking one decision must break the rule that decision answers for. These runs back the
release columns of the coverage table in ``docs/RECORDING.md``. Slow: one venv per release
on first run; run with ``pytest -m release_matrix``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from evidence_ledger import Ledger

from .helpers import load_example, run_cli
from .sdk_venvs import RELEASES, REPO_ROOT, sdk_env, sdk_venv
from .test_call_kinds import WITHOUT_DECISION, broken_without, same_evidence
from .test_guard import EVERY_GATED

pytestmark = pytest.mark.release_matrix

SCRIPT = REPO_ROOT / "examples" / "call_kinds.py"
APPROVED = load_example("call_kinds").APPROVED


@pytest.mark.parametrize("release", RELEASES)
def test_every_kind_of_call_is_recorded_under_each_release(tmp_path: Path, release: str):
    done = subprocess.run(
        [str(sdk_venv(release) / "python"), str(SCRIPT), "--out", str(tmp_path)],
        env=sdk_env(), capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = {line["scenario"]: line for line in map(json.loads, done.stdout.splitlines())}
    assert set(lines) == {"every_kind", "on_context"}

    for scenario, line in lines.items():
        assert (line["sdk"], line["error"]) == (release, None)
        same_evidence(line, scenario)
        verified = run_cli("verify", "--ledger", line["ledger"], "--json")
        assert (verified.code, json.loads(verified.out)["violations"]) == (0, [])
    for (scenario, call_id), rule in WITHOUT_DECISION.items():
        broken = broken_without(Path(lines[scenario]["ledger"]),
                                tmp_path / f"without-{scenario}-{call_id}", call_id)
        assert broken == {(rule, call_id)}, (scenario, call_id)


@pytest.mark.parametrize("release", RELEASES)
def test_every_gated_kind_goes_through_the_guard_under_each_release(tmp_path: Path,
                                                                     release: str):
    """With a policy naming every kind that asks for approval, each call gets an
    ``allowed`` entry before it runs, the hosted MCP call too (the guard answers its
    approval request), and the ledger verifies clean."""
    policy = tmp_path / "policy.toml"
    policy.write_text(EVERY_GATED, encoding="utf-8")
    done = subprocess.run(
        [str(sdk_venv(release) / "python"), str(SCRIPT), "--out", str(tmp_path),
         "--scenario", "every_kind", "--policy", str(policy)],
        env=sdk_env(), capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    ledger = tmp_path / "every_kind"
    verdicts = {e["body"]["call_id"]: (e["kind"], e["body"]["tool"])
                for e in Ledger(ledger).entries() if e["kind"] in ("allowed", "denied")}
    assert verdicts == {call_id: ("allowed", tool) for call_id, tool in APPROVED.items()}
    verified = run_cli("verify", "--ledger", str(ledger), "--json")
    assert (verified.code, json.loads(verified.out)["violations"]) == (0, [])
