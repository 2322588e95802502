"""Decisions made outside a run: a revocation of a call's approvals, and an approval
signed by its approver's key, appended to a ledger by whoever holds the call id (the
CLI's ``revoke`` and ``approve``; a recorder's own are in
:class:`~evidence_ledger.record.integrations.openai_agents.Recorder`)."""

from __future__ import annotations

from evidence_ledger.format.errors import UsageError
from evidence_ledger.record.writer import EvidenceWriter, Scope
from evidence_ledger.tlog.note import Signer

__all__ = ["approve_call", "revoke_call"]


def _the_call(writer: EvidenceWriter, call_id: str, run_id: str | None) -> tuple[str, Scope]:
    """``(run_id, scope)`` of the one recorded call ``call_id`` (in ``run_id`` if given; the
    latest scope when it is in several).

    Raises:
        UsageError: if none is recorded, or several runs recorded it and ``run_id`` is None.
    """
    runs = writer.runs_with_call(call_id)
    if run_id is not None:
        runs = [run for run in runs if run == run_id]
    if not runs:
        where = f" in run {run_id}" if run_id is not None else ""
        raise UsageError(f"no recorded call {call_id!r}{where}")
    if len(runs) > 1:
        raise UsageError(f"call {call_id!r} was recorded by {len(runs)} runs "
                         f"({', '.join(runs[:3])}): name one with --run-id")
    return runs[0], writer.call_scopes(runs[0], call_id)[-1]


def revoke_call(writer: EvidenceWriter, call_id: str, *, by: str, reason: str,
                run_id: str | None = None) -> int:
    """Append a ``revocation`` of every approval of the recorded call ``call_id`` (in
    ``run_id``; None: the one run that recorded it) made so far; return its seq.

    Raises:
        UsageError: as :func:`_the_call`.
        StorageError: if the append fails.
    """
    with writer.atomic():
        run, _ = _the_call(writer, call_id, run_id)
        writer.revocation(call_id=call_id, by=by, reason=reason, run_id=run)
        return writer.size - 1


def approve_call(writer: EvidenceWriter, call_id: str, *, by: str, signer: Signer,
                 reason: str | None = None, run_id: str | None = None) -> int:
    """Append an ``approve`` decision by ``by`` on the recorded call ``call_id`` (bound to
    its arguments digest, on no run state) and ``signer``'s ``approval_signature`` of it, in
    one group; return the decision's seq. The SDK does not learn of it: the app applies it
    to its ``RunState`` (the guard then finds it in the ledger).

    Raises:
        UsageError: as :func:`_the_call`; or if ``signer``'s key is not named ``by``.
        StorageError: if the append fails.
    """
    if signer.name != by:
        raise UsageError(f"the key is {signer.name!r}'s, not {by!r}'s: an approver signs "
                         "with a key of their own name")
    with writer.atomic():
        run, scope = _the_call(writer, call_id, run_id)
        made = writer.decision(run_id=run, call_id=call_id, decision="approve", approver=by,
                               scope=scope, reason=reason)
        seq = writer.size - 1
        writer.approval_signature(decision=made, signer=signer)
        return seq
