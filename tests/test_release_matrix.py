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

from .sdk_venvs import REPO_ROOT, sdk_env, sdk_venv

pytestmark = pytest.mark.release_matrix

CASE = REPO_ROOT / "examples" / "orphan_output_on_resume.py"


def record_and_verify(version: str, ledger: Path) -> tuple[int, dict[str, Any]]:
    """Record the case under ``version`` into ``ledger``; return verify's exit code and JSON."""
    bin_dir = sdk_venv(version)
    recorded = subprocess.run(
        [str(bin_dir / "python"), str(CASE), "--ledger", str(ledger)],
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
