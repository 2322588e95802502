"""The guard's judgement (pure): may this call's tool run now, given the evidence so far?

:class:`GuardFacts` is fed entries in log order (the recorder's writer feeds it every entry
it appends or reads; the verifier's rule engine does the same), and :func:`judge` answers
for one call from those facts and a :class:`~evidence_ledger.policy.model.ToolRule`. The
guard and the verifier run this same code on the same facts, so ``verify`` can check
that each ``allowed`` / ``denied`` entry says what the evidence before it says.

A call may run when the ledger holds, for this exact call (run, scope, ``call_id``,
tool, arguments digest), enough approvals (one; two by different approvers with
``second_approver``) that are each: an ``approve`` decision on the call, naming its tool if
it names one (or a sticky one on its agent's tool in its run and scope, which holds
whatever the arguments), made on the run state the leg resumed from or an
ancestor of it (a decision naming no run state counts; one naming a state counts only if
that state's first ``run_state`` entry precedes it: an ``adopted`` state's approval made
before the adoption does not), shown the call's arguments digest, not followed by a
``reject`` decision in force, nor by a ``revocation`` of the call, not older than the
rule's ``max_age``, by an approver the rule allows (never one the recorder only read off
the SDK's run context, :data:`~evidence_ledger.format.entries.CONTEXT_APPROVER`), and,
when the rule says ``signed``,
carrying an ``approval_signature`` that verifies with the key the policy names for its
approver; and the call's arguments keep the rule's constraints.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import rfc8785

from evidence_ledger.format.entries import CONTEXT_APPROVER, Entry
from evidence_ledger.policy.model import Policy, ToolRule
from evidence_ledger.tlog.note import Verifier

__all__ = ["CODES", "GuardFacts", "Verdict", "approval_message", "judge"]

CODES = ("approved", "no_approval", "rejected", "revoked", "expired", "approver", "unsigned",
         "arguments", "second_approver", "other_arguments", "lineage")
"""The ``code`` of a guard entry: ``approved`` (``allowed``), else why it was denied."""

ORPHAN_OUTPUT = "orphan_output"
"""The ``code`` of the session guard's ``denied`` entry (observe mode): a
``function_call_output`` persisted without its ``function_call`` before it."""

Scope = tuple[str, ...]


def approval_message(run_id: str, scope: Scope, call_id: str, tool: str,
                     args_digest: bytes, approver: str, decision_hash: bytes) -> bytes:
    """The bytes an approver signs for a call: ``evidence-ledger approval v1\\n`` then the
    RFC 8785 JSON of the call's identity, tool, arguments digest, the approver's name and
    the entry hash of the ``decision`` entry signed (digests as ``sha256:<hex>``). The
    decision's hash binds the signature to that one entry, its time included: copied onto
    another decision (after a revocation, or past ``max_age``), it does not verify."""
    return b"evidence-ledger approval v1\n" + rfc8785.dumps({
        "run_id": run_id, "scope": list(scope), "call_id": call_id, "tool": tool,
        "args_digest": "sha256:" + args_digest.hex(), "approver": approver,
        "decision": "sha256:" + decision_hash.hex(),
    })


@dataclass
class _Decision:
    seq: int
    time: int
    decision: str
    approver: str
    args_digest: bytes | None
    run_state: str | None
    state_known: bool  # its run state's first entry preceded it (or it names none)
    hash: bytes
    tool: str | None = None  # the tool it names, if it names one
    signatures: list[tuple[str, str]] = field(default_factory=list)  # (vkey, base64 signature)


class Verdict(NamedTuple):
    """What the guard decides: ``allowed``, its ``code`` (:data:`CODES`), a one-line
    ``reason``, and the seqs of the approvals it counted."""

    allowed: bool
    code: str
    reason: str
    approvals: tuple[int, ...] = ()


class GuardFacts:
    """What :func:`judge` reads, kept from entries fed in log order (:meth:`feed`)."""

    def __init__(self) -> None:
        self.parents: dict[str, str | None] = {}
        self.calls: dict[tuple[str, Scope, str], tuple[str, str, bytes]] = {}
        self.decisions: dict[tuple[str, Scope, str], list[_Decision]] = {}
        self.sticky: dict[tuple[str, Scope, str, str], list[_Decision]] = {}
        self.by_hash: dict[bytes, _Decision] = {}
        self.revoked: dict[str, list[tuple[str | None, int]]] = {}  # call_id -> (run, seq)

    def feed(self, entry: Entry, hash_: bytes) -> None:
        """Take in one entry (every kind may be fed; the kinds judged are kept)."""
        b = entry.body
        if entry.kind == "run_state":
            self.parents.setdefault(b["state_id"], b["parent"])
        elif entry.kind == "call":
            self.calls[b["run_id"], tuple(b["scope"]), b["call_id"]] = (
                b["agent"], b["tool"], b["args_digest"])
        elif entry.kind == "decision":
            state = b["run_state"]
            made = _Decision(entry.seq, entry.time, b["decision"], b["approver"],
                             b["args_digest"], state, state is None or state in self.parents,
                             hash_, b["tool"])
            key = (b["run_id"], tuple(b["scope"]), b["call_id"])
            self.decisions.setdefault(key, []).append(made)
            self.by_hash[hash_] = made
            if b["always"]:
                call = self.calls.get(key)
                agent = b["agent"] or (call[0] if call else "")
                tool = b["tool"] or (call[1] if call else "")
                self.sticky.setdefault((key[0], key[1], agent, tool), []).append(made)
        elif entry.kind == "revocation":
            self.revoked.setdefault(b["call_id"], []).append((b["run_id"], entry.seq))
        elif entry.kind == "approval_signature":
            signed = self.by_hash.get(b["decision_hash"])
            if signed is not None:
                signed.signatures.append((b["vkey"], b["signature"]))

    def _lineage(self, leg: str | None) -> set[str | None]:
        """The run states a leg resumed from ``leg`` descends from (None included)."""
        found: set[str | None] = {None}
        seen = 0
        while leg is not None and leg not in found and seen < len(self.parents) + 1:
            found.add(leg)
            leg = self.parents.get(leg)
            seen += 1
        return found

    def revoked_after(self, run_id: str, call_id: str, seq: int) -> int | None:
        """Seq of a revocation of ``call_id`` (in ``run_id``, or naming no run) after
        ``seq``, or None."""
        later = [at for run, at in self.revoked.get(call_id, ())
                 if at > seq and run in (None, run_id)]
        return later[0] if later else None


def _signed(decision: _Decision, policy: Policy, identity: tuple[str, Scope, str, str, bytes]
            ) -> bool:
    """True when ``decision`` carries a signature that verifies with the key the policy
    names for its approver."""
    vkey = policy.keys.get(decision.approver)
    if vkey is None:
        return False
    message = approval_message(*identity, decision.approver, decision.hash)
    verifier = Verifier.from_vkey(vkey)
    return any(held == vkey and verifier.verify(message, base64.b64decode(signature))
               for held, signature in decision.signatures)


def _arguments_problem(rule: ToolRule, arguments: str | None) -> str | None:
    if not rule.constraints or arguments is None:
        return None
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return "arguments are not JSON"
    return next((p for c in rule.constraints if (p := c.problem(value)) is not None), None)


def judge(
    facts: GuardFacts, policy: Policy, rule: ToolRule, *, run_id: str, scope: Scope,
    call_id: str, leg: str | None, now: int, arguments: str | None,
    args_digest: bytes | None = None,
) -> Verdict:
    """May the call ``(run_id, scope, call_id)`` run now (``now``: ns since the epoch), in a
    leg resumed from run state ``leg`` (None: started fresh)? See the module docstring.

    ``arguments``: the call's raw arguments string, for the rule's constraints (None: not
    known; constraints are then not judged); ``args_digest``: the 32-byte digest of the
    arguments the SDK is about to run (None: the call's). A call not recorded is denied
    (``no_approval``), so is one about to run other arguments than it was made with.
    """
    call = facts.calls.get((run_id, scope, call_id))
    if call is None:
        return Verdict(False, "no_approval", f"call {call_id} is not recorded in run {run_id}")
    agent, tool, called = call
    if args_digest not in (None, called):
        return Verdict(False, "other_arguments", f"the SDK is about to run {call_id} with "
                       "other arguments than the call was made with")
    args_digest = called
    problem = _arguments_problem(rule, arguments)
    if problem is not None:
        return Verdict(False, "arguments", problem)
    lineage = facts._lineage(leg)
    explicit = facts.decisions.get((run_id, scope, call_id), [])
    sticky = facts.sticky.get((run_id, scope, agent, tool), [])
    held = [d for d in explicit if d.run_state in lineage and d.state_known
            and d.tool in (None, tool)]
    if not held:  # a sticky approval holds for its tool whatever the arguments
        held = [dataclasses.replace(d, args_digest=None) for d in sticky
                if d.run_state in lineage and d.state_known]
    if not held:
        other = [d for d in (*explicit, *sticky) if d.decision == "approve"]
        if other:
            d = other[-1]
            return Verdict(False, "lineage", f"the approval at seq {d.seq} was made on run "
                           f"state {d.run_state}, not on this leg's lineage"
                           if d.state_known else f"the approval at seq {d.seq} was made on "
                           f"run state {d.run_state} before the ledger recorded that state")
        return Verdict(False, "no_approval", f"no approval of {call_id} in the ledger")
    if held[-1].decision == "reject":
        d = held[-1]
        return Verdict(False, "rejected", f"rejected by {d.approver} at seq {d.seq}")
    last_reject = max((d.seq for d in held if d.decision == "reject"), default=-1)
    identity = (run_id, scope, call_id, tool, args_digest)
    counted: list[_Decision] = []
    refused: list[tuple[str, str]] = []
    for d in held:
        if d.decision != "approve" or d.seq < last_reject:
            continue
        revoked = facts.revoked_after(run_id, call_id, d.seq)
        if d.approver == CONTEXT_APPROVER:
            refused.append(("no_approval", f"the approval at seq {d.seq} was read off the run "
                            "context, not made through the ledger"))
        elif d.args_digest not in (None, args_digest):
            refused.append(("other_arguments", f"the approval at seq {d.seq} was shown other "
                            "arguments than the call has"))
        elif revoked is not None:
            refused.append(("revoked", f"the approval at seq {d.seq} was revoked at seq "
                            f"{revoked}"))
        elif rule.max_age_ns is not None and now - d.time > rule.max_age_ns:
            refused.append(("expired", f"the approval at seq {d.seq} is "
                            f"{(now - d.time) // 1_000_000_000} s old, over the "
                            f"{rule.max_age_ns // 1_000_000_000} s it holds"))
        elif rule.approvers is not None and d.approver not in rule.approvers:
            refused.append(("approver", f"{d.approver} (seq {d.seq}) may not approve {tool}"))
        elif rule.signed and not _signed(d, policy, identity):
            refused.append(("unsigned", f"the approval at seq {d.seq} carries no valid "
                            f"signature by the key the policy names for {d.approver}"))
        else:
            counted.append(d)
    approvers = {d.approver for d in counted}
    need = 2 if rule.second_approver else 1
    if len(approvers) >= need:
        seqs = tuple(d.seq for d in counted)
        return Verdict(True, "approved", f"approved by {', '.join(sorted(approvers))} "
                       f"(seq {', '.join(map(str, seqs))})", seqs)
    if counted and refused == []:
        return Verdict(False, "second_approver", f"approved only by {next(iter(approvers))}"
                       "; a second approver is needed")
    if refused:
        return Verdict(False, *refused[-1])
    return Verdict(False, "no_approval", f"no live approval of {call_id} in the ledger")


def verdict_for(facts: GuardFacts, policy: Policy, body: dict[str, Any], now: int,
                arguments: str | None) -> Verdict | None:
    """The verdict :func:`judge` gives for the call a guard entry's ``body`` names under
    ``policy`` (None: the policy has no rule for it)."""
    rule = policy.rule(body["agent"], body["tool"])
    if rule is None:
        return None
    return judge(facts, policy, rule, run_id=body["run_id"], scope=tuple(body["scope"]),
                 call_id=body["call_id"], leg=body["run_state"], now=now, arguments=arguments,
                 args_digest=body["args_digest"])
