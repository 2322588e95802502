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

from .helpers import run_cli
from .sdk_venvs import RELEASES, REPO_ROOT, sdk_env, sdk_venv
from .test_call_kinds import WITHOUT_DECISION, broken_without, same_evidence

pytestmark = pytest.mark.release_matrix

SCRIPT = REPO_ROOT / "examples" / "call_kinds.py"


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
