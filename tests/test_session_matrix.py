"""The session doctor against the real fault: the shared orphan-output case run under
openai-agents 0.22.3 with the recorder attached and a file-backed ``SQLiteSession``.

Everything runs inside the cached 0.22.3 venv (``tests/sdk_venvs.py``): the recorded run,
``scan-session`` / ``repair-session`` through that venv's CLI, and a further turn with a
``ScriptedModel`` whose recorded input shows what a provider would have been sent.
Slow on first use (builds the venv); run with ``pytest -m release_matrix``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .sdk_venvs import REPO_ROOT, sdk_env, sdk_venv

pytestmark = pytest.mark.release_matrix

SDK = "0.22.3"
SESSION = "case-orphan"

# Run inside the SDK venv: ``record STORE LEDGER`` records the shared case
# (examples/orphan_output_on_resume.py ``main``: agent, script, approval through the
# recorder) into LEDGER with a file-backed session in STORE; ``next-turn STORE`` runs one more
# turn on that session and prints the input the model was sent, as JSON.
SCRIPT = """
import asyncio, importlib.util, json, sys
from agents import Agent, Runner, SQLiteSession
from agents.testing import ModelStep, ScriptedModel, assistant_message

spec = importlib.util.spec_from_file_location("case", sys.argv[1])
case = importlib.util.module_from_spec(spec)
spec.loader.exec_module(case)
SESSION = case.SESSION_ID

async def next_turn(store):
    model = ScriptedModel([ModelStep(output=[assistant_message("k1 is v2")])])
    agent = Agent(name="records", instructions="Answer.", model=model)
    session = SQLiteSession(SESSION, store)
    try:
        await Runner.run(agent, "what is k1 now?", session=session)
    finally:
        session.close()
    print(json.dumps(model.last_call.input, default=str))

if sys.argv[2] == "record":
    asyncio.run(case.main(sys.argv[4], sys.argv[3]))
else:
    asyncio.run(next_turn(sys.argv[3]))
"""


def _run(args: list[str], *, want: int) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, env=sdk_env(), capture_output=True, text=True, timeout=300,
                          cwd=REPO_ROOT)
    assert done.returncode == want, f"{args}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    return done


def _misplaced_outputs(model_input: Any) -> list[str]:
    """call_ids of function_call_outputs not preceded by their function_call."""
    assert isinstance(model_input, list), model_input
    called: set[str] = set()
    misplaced = []
    for item in model_input:
        if item.get("type") == "function_call":
            called.add(item["call_id"])
        elif item.get("type") == "function_call_output" and item["call_id"] not in called:
            misplaced.append(item["call_id"])
    return misplaced


def test_sdk_0_22_3_poisoned_session_scanned_repaired_and_usable(tmp_path: Path) -> None:
    bin_dir = sdk_venv(SDK)
    python, cli = str(bin_dir / "python"), str(bin_dir / "evidence-ledger")
    script = tmp_path / "script" / "case_run.py"  # not beside ./ledger: sys.path[0] is its folder
    script.parent.mkdir()
    script.write_text(SCRIPT, "utf-8")
    case = str(REPO_ROOT / "examples" / "orphan_output_on_resume.py")
    store, ledger = tmp_path / "sessions.db", tmp_path / "ledger"

    # the fault, recorded
    _run([python, str(script), case, "record", str(store), str(ledger)], want=0)

    # scan: exactly that orphan
    scan = json.loads(_run([cli, "scan-session", str(store), "--json"], want=1).stdout)
    findings = [(f["session_id"], f["kind"], f["call_id"])
                for s in scan["sessions"] for f in s["findings"]]
    assert findings == [(SESSION, "orphan_output", "c-update")]

    # control: a further turn on the poisoned session sends the orphan to the model
    poisoned = tmp_path / "poisoned.db"
    shutil.copyfile(store, poisoned)
    sent = json.loads(_run([python, str(script), case, "next-turn", str(poisoned)],
                           want=0).stdout)
    assert _misplaced_outputs(sent) == ["c-update"]

    # repair from the ledger recorded during that run; a rescan is clean
    dry = _run([cli, "repair-session", str(store), "--ledger", str(ledger)], want=0)
    assert "insert function_call c-update (update_record)" in dry.stdout
    _run([cli, "repair-session", str(store), "--ledger", str(ledger), "--apply",
          "--by", "operator"], want=0)
    _run([cli, "scan-session", str(store)], want=0)
    entries = json.loads(_run([cli, "log", "--ledger", str(ledger), "--kind",
                               "session_repair", "--json"], want=0).stdout)
    assert [(e["body"]["call_id"], e["body"]["by"]) for e in entries] == [
        ("c-update", "operator")]

    # the further turn now sends every output after its call, with the recorded arguments
    sent = json.loads(_run([python, str(script), case, "next-turn", str(store)],
                           want=0).stdout)
    assert _misplaced_outputs(sent) == []
    (update,) = [i for i in sent
                 if i.get("type") == "function_call" and i["call_id"] == "c-update"]
    assert (update["name"], json.loads(update["arguments"])) == (
        "update_record", {"key": "k1", "value": "v2"})
