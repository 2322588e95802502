"""One row per call: the evidence chain from call to persisted output (pure).

Built from the per-call state the rules keep (:class:`evidence_ledger.verify.rules.CallState`), so
the demo table, ``trace`` and later exports all read the same facts as the verifier.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from evidence_ledger.verify.rules import CallKey, CallState


class CallChain(NamedTuple):
    """The chain of one call identity (a named tuple: the index makes one per call).

    Attributes:
        run_id, scope, call_id: the call identity.
        agent, tool: who called what.
        args_digest: 32-byte arguments digest.
        needs_approval: True when the call was gated.
        decision: ``approve``, ``reject`` or None; ``sticky`` when it came from an
            ``always`` decision on the tool.
        approver: who decided, or None.
        decided_at: ns since the epoch (UTC) or None.
        executed_at: ns since the epoch (UTC) of the first execution, when the caller
            knows it (see :func:`call_chains`), else None.
        persisted: number of persisted ``function_call_output`` items.
        status: ``executed``, ``rejected``, ``blocked``, ``approved_not_executed``,
            ``pending`` (gated, undecided) or ``called``.
        violations: names of the rules this call broke.
    """

    run_id: str
    scope: tuple[str, ...]
    call_id: str
    agent: str
    tool: str
    args_digest: bytes
    needs_approval: bool
    decision: str | None
    sticky: bool
    approver: str | None
    decided_at: int | None
    executed_at: int | None
    persisted: int
    status: str
    violations: tuple[str, ...]


def _status(call: CallState) -> str:
    if call.executions:
        return "executed"
    if call.blocks:
        return "blocked"
    if call.decision is not None:
        return "rejected" if call.decision.decision == "reject" else "approved_not_executed"
    return "pending" if call.gated else "called"


def call_chains(
    calls: Iterable[CallState], executed_at: Mapping[CallKey, int] | None = None
) -> list[CallChain]:
    """Rows for ``calls``, in the order the calls were recorded.

    Args:
        calls: the rule engine's call states.
        executed_at: call identity -> time (ns, UTC) of its first execution, for callers
            that keep it (the index does; the rule engine keeps only the seqs).
    """
    rows = []
    for call in sorted(calls, key=lambda c: c.seq):
        # an executed call shows the decision in force when it first ran (possibly none);
        # one that never ran shows its latest decision
        decision = call.authorized_by if call.executions else call.decision
        rows.append(
            CallChain(
                run_id=call.key[0], scope=call.key[1], call_id=call.key[2], agent=call.agent,
                tool=call.tool, args_digest=call.args_digest, needs_approval=call.gated,
                decision=decision.decision if decision else None,
                sticky=decision is not None and (
                    decision.always or all(decision is not d for d in call.decisions)),
                approver=decision.approver if decision else None,
                decided_at=decision.time if decision else None,
                executed_at=(executed_at or {}).get(call.key), persisted=len(call.persisted),
                status=_status(call), violations=tuple(dict.fromkeys(call.violations)),
            )
        )
    return rows
