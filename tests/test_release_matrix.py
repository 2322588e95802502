"""The orphan-output case recorded under pinned openai-agents releases, then verified.

Slow (builds one venv per release on first run, see ``tests/sdk_venvs.py``); excluded
from the default run. Run it with ``pytest -m release_matrix``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from evidence_ledger.storage.ledger_dir import Ledger

from .sdk_venvs import REPO_ROOT, sdk_env, sdk_venv

pytestmark = pytest.mark.release_matrix

CASE = REPO_ROOT / "examples" / "orphan_output_on_resume.py"


def record_and_verify(version: str, ledger: Path, *options: str) -> tuple[int, dict[str, Any]]:
    """Record the case under ``version`` into ``ledger`` (with the case's ``options``); return
    verify's exit code and JSON."""
    bin_dir = sdk_venv(version)
    recorded = subprocess.run(
        [str(bin_dir / "python"), str(CASE), "--ledger", str(ledger), *options],
        env=sdk_env(), capture_output=True, text=True, timeout=300,
    )
    assert recorded.returncode == 0, recorded.stderr
    verified = subprocess.run(
        [str(bin_dir / "evidence-ledger"), "verify", "--ledger", str(ledger), "--json"],
        env=sdk_env(), capture_output=True, text=True, timeout=300,
    )
    return verified.returncode, json.loads(verified.stdout)


def test_sdk_0_22_3_orphans_the_approved_output(tmp_path: Path) -> None:
    code, report = record_and_verify("0.22.3", tmp_path / "ledger")

    assert code == 1
    assert [(v["rule"], v["call_id"]) for v in report["violations"]] == [
        ("tool_linkage", "c-update"),
    ]


def test_sdk_0_24_0_records_clean(tmp_path: Path) -> None:
    code, report = record_and_verify("0.24.0", tmp_path / "ledger")

    assert (code, report["violations"]) == (0, [])


@pytest.mark.parametrize("mode", ["enforce", "observe"])
def test_the_session_guard_keeps_the_session_valid_on_0_22_3(tmp_path: Path, mode: str) -> None:
    """With a guard policy whose session guard enforces, the recorded session writes the
    missing ``function_call`` with the orphan output: ``scan-session`` finds the session clean
    and the ledger records the write; observing, the orphan is recorded as it happens."""
    policy = tmp_path / "policy.toml"
    policy.write_text(f'version = 1\nsession = "{mode}"\n[[tools]]\nmatch = "update_record"\n')
    store = tmp_path / "session.db"
    code, report = record_and_verify("0.22.3", tmp_path / "ledger", "--session-db", str(store),
                                     "--policy", str(policy))
    scanned = subprocess.run(
        [str(sdk_venv("0.22.3") / "evidence-ledger"), "scan-session", str(store), "--json"],
        env=sdk_env(), capture_output=True, text=True, timeout=300,
    )
    entries = [e for e, _ in Ledger(tmp_path / "ledger").entries()]
    if mode == "enforce":
        assert (code, report["violations"], scanned.returncode) == (0, [], 0)
        (repair,) = [e for e in entries if e.kind == "session_repair"]
        assert (repair.body["call_id"], repair.body["by"]) == (
            "c-update", "evidence-ledger session guard")
        kinds = [(e.kind, e.body.get("item_type")) for e in entries if e.seq > repair.seq]
        assert kinds[:2] == [("session_item", "function_call"),
                             ("session_item", "function_call_output")]
    else:
        assert code == 1 and scanned.returncode == 1
        assert [v["rule"] for v in report["violations"]] == ["tool_linkage"]
        (seen,) = [e for e in entries if e.kind == "denied"]
        assert (seen.body["code"], seen.body["mode"]) == ("orphan_output", "observe")
