"""Write the format-1 fixture ledger of ``tests/data/format1/`` (how it was made; the tests
read the committed bytes and never run this).

It was run once with the code of format version 1 (one file per payload,
``payloads/<hex[0:2]>/<hex>``), from the project root::

    .venv/bin/python tests/data/format1/make_format1_ledger.py

and writes ``ledger/`` (log.bin, payloads/, checkpoints/; the derived tree/ and the lock
file are removed), ``signing.key`` (mode 0600) and ``signing.vkey`` beside it, and prints
the root hash and the checkpoint files' SHA-256 that ``tests/test_migrate.py`` records.
Everything is fixed: a key from a fixed seed, entry times from a fixed clock, fixed ids,
arguments and results. The keys are test-only.

What it holds: three runs of calls with approvals (one approved first with arguments that
differ from the call's, so the approver's copy is a payload of its own, then again with the
call's), a rejection, executions
with small and 64 KiB results, session items, two calls with the same arguments (one payload,
named twice), a redaction (its payload erased), and two signed checkpoints.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sys
from pathlib import Path

from evidence_ledger.format import digests
from evidence_ledger.record.checkpointing import create_checkpoint
from evidence_ledger.record.redact import redact
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.tlog.note import Signer

HERE = Path(__file__).resolve().parent
ORIGIN = "format1.evidence-ledger.example/log"
SEED = hashlib.sha256(b"evidence-ledger format-1 fixture: ledger key").digest()
T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z, ns; entry n at T0 + n s
SECRET = '{"card": "4111-1111-1111-1111", "cvv": "123"}'
"""The arguments of the call whose payload is redacted (tests grep for the card number)."""


def _clock() -> object:
    n = iter(range(1 << 30))
    return lambda: T0 + next(n) * 1_000_000_000


def _big_result() -> str:
    """64 KiB of fixed pseudo-random hex text: a result larger than any 64 KiB read."""
    return random.Random(25).randbytes(32 * 1024).hex()


def write(target: Path) -> Signer:
    """Write the fixture ledger into ``target`` (new) and return its key."""
    signer = Signer(ORIGIN, SEED)
    ledger = Ledger(target)
    w = EvidenceWriter(ledger, clock=_clock())  # type: ignore[arg-type]
    weather = '{"city": "Paris", "units": "metric"}'
    w.tool_policy(run_id="run_1", agent="assistant", tool="get_weather", needs_approval=True)
    w.call(run_id="run_1", call_id="call_1", agent="assistant", tool="get_weather",
           arguments=weather, needs_approval=True)
    w.decision(run_id="run_1", call_id="call_1", decision="approve", approver="alice@example.com",
               reason="fine", arguments=weather, agent="assistant", tool="get_weather")
    w.execution(run_id="run_1", call_id="call_1", arguments=weather, agent="assistant",
                tool="get_weather", result="18 C, clear")
    with w.atomic():
        w.session_item(run_id="run_1", session_id="sess_1", item={
            "type": "function_call", "call_id": "call_1", "name": "get_weather",
            "arguments": weather})
        w.session_item(run_id="run_1", session_id="sess_1", item={
            "type": "function_call_output", "call_id": "call_1", "output": "18 C, clear"})
    w.call(run_id="run_1", call_id="call_2", agent="assistant", tool="fetch_report",
           arguments='{"id": 7}', needs_approval=False)
    w.execution(run_id="run_1", call_id="call_2", arguments='{"id": 7}', agent="assistant",
                tool="fetch_report", result=_big_result())
    w.run_end(run_id="run_1", status="completed")
    create_checkpoint(ledger, [signer])

    w.call(run_id="run_2", call_id="call_3", agent="assistant", tool="pay",
           arguments=SECRET, needs_approval=True)
    w.decision(run_id="run_2", call_id="call_3", decision="reject", approver="bob@example.com",
               reason="no", message="Payment refused.", agent="assistant", tool="pay")
    w.call(run_id="run_2", call_id="call_4", agent="assistant", tool="get_weather",
           arguments=weather, needs_approval=True)  # the same payload as call_1's
    w.decision(run_id="run_2", call_id="call_4", decision="approve", approver="alice@example.com",
               arguments='{"city": "Oslo", "units": "metric"}', agent="assistant",
               tool="get_weather")  # shown other arguments: kept as their own payload
    w.decision(run_id="run_2", call_id="call_4", decision="approve", approver="alice@example.com",
               arguments=weather, agent="assistant", tool="get_weather")  # then the right ones
    w.execution(run_id="run_2", call_id="call_4", arguments=weather, agent="assistant",
                tool="get_weather", result={"temp_c": 18, "sky": "clear"})
    w.run_end(run_id="run_2", status="completed")
    redact(w, digests.sha256(SECRET.encode()), reason="card number", by="dpo@example.com")

    w.call(run_id="run_3", call_id="call_5", agent="mailer", tool="send_email",
           arguments="to=bob@example.com; subject=lunch", scope=("ask_mailer:call_0",))
    w.execution(run_id="run_3", call_id="call_5", arguments="to=bob@example.com; subject=lunch",
                scope=("ask_mailer:call_0",), agent="mailer", tool="send_email",
                result="sent")
    w.session_item(run_id="run_3", session_id="sess_3", item={
        "role": "user", "content": "x" * 3000})
    w.run_end(run_id="run_3", status="completed")
    create_checkpoint(ledger, [signer])
    return signer


def main(out: Path = HERE) -> None:
    target = out / "ledger"
    if target.exists():
        shutil.rmtree(target)
    signer = write(target)
    shutil.rmtree(target / "tree", ignore_errors=True)
    (target / "writer.lock").unlink(missing_ok=True)
    key = out / "signing.key"
    key.write_text(signer.skey + "\n")
    os.chmod(key, 0o600)
    (out / "signing.vkey").write_text(signer.verifier.vkey + "\n")
    from evidence_ledger.verify.records import verify_records

    report = verify_records(Ledger(target).scan())
    print("entries", report.tree_size)
    print("root", report.root_hash.hex())
    for note in sorted((target / "checkpoints").iterdir()):
        print(note.name, hashlib.sha256(note.read_bytes()).hexdigest())


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
