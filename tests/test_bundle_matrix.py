"""Proof bundles for the shared orphan-output case, recorded under pinned openai-agents
releases (one cached venv each, see ``tests/sdk_venvs.py``), then proven and verified with
this project's CLI (the ledger format is ours, so the main venv reads any recording).

Slow on first run (builds the venvs); run with ``pytest -m release_matrix``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli

from .test_release_matrix import record_and_verify

pytestmark = pytest.mark.release_matrix

ORIGIN = "matrix.example/ledger"


def prove_and_verify(version: str, tmp_path: Path) -> tuple[dict, str]:
    """Record the case under ``version``; prove call c-update; return verify-proof's JSON
    report and its text output."""
    ledger, key, bundle = tmp_path / "ledger", tmp_path / "ledger.key", tmp_path / "bundle.json"
    record_and_verify(version, ledger)
    vkey = run_cli("keygen", "--origin", ORIGIN, "--out", str(key)).out.strip()
    proved = run_cli("prove", "--ledger", str(ledger), "--key", str(key), "--out", str(bundle),
                     "--call-id", "c-update")
    assert proved.code == 0, proved.err
    checked = run_cli("verify-proof", str(bundle), "--verifier-key", vkey, "--json")
    assert (checked.code, checked.err) == (0, ""), checked.err
    text = run_cli("verify-proof", str(bundle), "--verifier-key", vkey)
    assert text.code == 0, text.err
    return json.loads(checked.out), text.out


def test_sdk_0_22_3_bundle_proves_the_orphaned_output(tmp_path: Path) -> None:
    report, text = prove_and_verify("0.22.3", tmp_path)

    assert [(v["rule"], v["call_id"]) for v in report["verdict"]["violations"]] == [
        ("tool_linkage", "c-update"),
    ]
    assert report["verdict"]["recomputed"] == report["verdict"]["violations"]
    assert "verdict: 1 violation(s) (1 recomputed from the bundled entries" in text
    assert "tool_linkage at seq" in text and "call c-update" in text


def test_sdk_0_24_0_bundle_is_clean(tmp_path: Path) -> None:
    report, text = prove_and_verify("0.24.0", tmp_path)

    assert report["verdict"]["violations"] == []
    assert "verdict: no violation" in text
