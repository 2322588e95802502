"""The guard's latency per gated call against one durable append, in the same run.

A ledger holds :data:`CALLS` recorded gated calls, each approved. The guard then judges
each call once (:func:`~evidence_ledger.record.integrations.guard.guard_call`: it reads the
ledger as it stands, judges, and appends the ``allowed`` entry durably); interleaved with
it, in alternating order, one durable append of the same entry through the same writer
with no judging (an ``allowed`` entry of another recorded call, so the difference is what
judging adds), and the floor: an entry of that size packed with ``msgpack``, hashed with
``hashlib``, written and ``fdatasync``-ed to a file of its own (no project code). Figures
are p50 and p99 over :data:`CALLS` of each, in microseconds; the target is the guard's p99
within 1.2x of the durable append's p99.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import time
from collections.abc import Callable
from functools import partial

import msgpack

from benchmarks.common import Row, scratch
from evidence_ledger.policy.model import Policy, ToolRule, parse_policy
from evidence_ledger.record.integrations.group_commit import Journal
from evidence_ledger.record.integrations.guard import guard_call
from evidence_ledger.record.integrations.legs import Leg
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger

CALLS = 2000
POLICY = b'version = 1\n[[tools]]\nmatch = "charge"\napprovers = ["bench"]\nmax_age = 3600\n'
ARGUMENTS = '{"account": "a-1", "amount": 12}'


def _p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def _floor_append(fd: int, seq: int) -> None:
    entry = msgpack.packb({"v": 1, "seq": seq, "kind": "allowed", "time": time.time_ns(),
                           "prev": bytes(32), "refs": [bytes(32)], "body": {
                               "run_id": "run-bench", "scope": [], "call_id": f"c{seq}",
                               "agent": "billing", "tool": "charge", "args_digest": bytes(32),
                               "mode": "enforce", "code": "approved",
                               "reason": "approved by bench", "policy_digest": bytes(32),
                               "run_state": None, "message_digest": None}})
    os.write(fd, hashlib.sha256(entry).digest() + entry)
    os.fdatasync(fd)


def _timed(step: Callable[[], object]) -> float:
    start = time.perf_counter_ns()
    step()
    return (time.perf_counter_ns() - start) / 1000


def _judged(leg: Leg, rule: ToolRule, n: int) -> None:
    verdict = guard_call(leg, rule, f"c{n}", "billing", "charge", ARGUMENTS, rejects=True)
    assert verdict.allowed, verdict


def _appended(writer: EvidenceWriter, policy: Policy, n: int) -> None:
    writer.guard(allowed=True, run_id="run-bench", call_id=f"c{CALLS + n}", scope=(),
                 agent="billing", tool="charge", arguments=ARGUMENTS, mode="enforce",
                 code="approved", reason="approved by bench", policy_digest=policy.digest,
                 run_state=None)


def rows() -> list[Row]:
    """One row: the guard's p99 per gated call against a durable append's p99 (and the
    floor's), measured interleaved in this run."""
    with scratch("guard-") as work:
        writer = EvidenceWriter(Ledger(work / "ledger"))
        policy = parse_policy(POLICY)
        writer.policy(run_id="run-bench", text=POLICY)
        for n in range(2 * CALLS):  # c0..: judged; the rest: appended without judging
            with writer.atomic():
                writer.call(run_id="run-bench", call_id=f"c{n}", agent="billing", tool="charge",
                            arguments=ARGUMENTS, needs_approval=True)
                writer.decision(run_id="run-bench", call_id=f"c{n}", decision="approve",
                                approver="bench", arguments=ARGUMENTS)
        leg = Leg(Journal.of(writer), None, "run-bench", policy=policy)
        (rule,) = policy.tools
        guard: list[float] = []
        append: list[float] = []
        floor: list[float] = []
        fd = os.open(work / "floor.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for n in range(CALLS):
                judged = (guard, partial(_judged, leg, rule, n))
                appended = (append, partial(_appended, writer, policy, n))
                for times, step in (judged, appended) if n % 2 else (appended, judged):
                    times.append(_timed(step))
                floor.append(_timed(partial(_floor_append, fd, n)))
        finally:
            os.close(fd)
    ratio = _p(guard, 99) / _p(append, 99)
    return [Row(
        operation="guard per gated call (judge + durable allowed entry), p99", size=CALLS,
        ours=_p(guard, 99), unit="us",
        baselines={"same entry appended, no judging, p99": _p(append, 99),
                   "floor p99": _p(floor, 99)},
        ratio=ratio, target="within 1.2x of one durable append", met=ratio <= 1.2,
        note=(f"p50 guard {_p(guard, 50):.0f} us, append {_p(append, 50):.0f} us, floor "
              f"{_p(floor, 50):.0f} us (msgpack + hashlib + write + fdatasync); the append "
              "syncs the file system (syncfs), the floor one file"),
    )]


if __name__ == "__main__":
    from benchmarks.common import print_table

    print_table(rows(), "this machine")

