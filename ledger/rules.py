"""The evidence rules: decoded entries in, findings out (pure, no I/O).

:class:`RuleEngine` reads entries in log order and keeps only per-call state, so a
whole ledger streams through it. Rules (stable names, see FORMAT.md):

- ``tool_linkage``: every persisted ``function_call_output`` has a persisted
  ``function_call`` with the same ``call_id`` in that session, no later than the output;
- ``output_provenance``: every persisted ``function_call_output`` traces to a recorded
  call and to an execution whose result digest equals the output digest, a rejection
  whose message it carries, or a guardrail block;
- ``execution_provenance``: every execution traces to a recorded call;
- ``approval_binding``: every execution of a gated call follows an approve decision for
  that call (or a sticky approval of that agent's tool in that run) whose arguments
  digest equals the call's;
- ``rejection_respected``: no execution of a call after it was rejected; an explicit
  decision on a call beats a sticky decision on its tool;
- ``argument_integrity``: the arguments executed have the digest of the arguments called;
- ``exactly_once``: at most one execution per call identity;
- ``approved_not_executed``: an approved call with no execution by a later ``run_end``
  of its run (run ids survive a resume, so a resumed run ends under the same id).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from .entries import Entry
from .findings import (
    APPROVAL_BINDING,
    APPROVED_NOT_EXECUTED,
    ARGUMENT_INTEGRITY,
    EXACTLY_ONCE,
    EXECUTION_PROVENANCE,
    OUTPUT_PROVENANCE,
    REJECTION_RESPECTED,
    TOOL_LINKAGE,
    Finding,
)

CallKey = tuple[str, tuple[str, ...], str]
ANY_MESSAGE = b"*"  # a rejection or block whose message was not recorded matches any output


def _short(digest: bytes | None) -> str:
    return "none" if digest is None else "sha256:" + digest.hex()[:16] + "…"


@dataclass(frozen=True)
class Decision:
    """A human decision as the rules see it.

    Attributes:
        decision: ``"approve"`` or ``"reject"``.
        args_digest: 32-byte digest the approver was shown.
        seq: entry where it was recorded.
        approver: who decided.
        time: ns since the epoch, UTC.
        always: sticky for the agent's tool.
    """

    decision: str
    args_digest: bytes
    seq: int
    approver: str
    time: int
    always: bool


@dataclass
class CallState:
    """Everything the rules know about one call identity.

    Attributes mirror the ``call`` body; ``decision`` is the latest explicit decision,
    ``executions`` the seqs of its executions, ``results`` the digests they returned,
    ``rejection_messages`` / ``blocks`` message digests (``ANY_MESSAGE`` when unknown),
    ``persisted`` the seqs of its persisted outputs, ``authorized_by`` the decision in
    force when it first executed (its own, or a sticky one on its tool).
    """

    key: CallKey
    seq: int
    time: int
    agent: str
    tool: str
    args_digest: bytes
    needs_approval: bool | None
    response_id: str | None
    policy_result: bool | None = None
    decision: Decision | None = None
    authorized_by: Decision | None = None
    executions: list[int] = field(default_factory=list)
    executed_at: int | None = None
    results: set[bytes] = field(default_factory=set)
    rejection_messages: set[bytes] = field(default_factory=set)
    blocks: set[bytes] = field(default_factory=set)
    persisted: list[int] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    @property
    def gated(self) -> bool:
        """True when the tool needed a human approval for this call."""
        return bool(self.needs_approval) or bool(self.policy_result)


class RuleEngine:
    """Apply the rules to entries fed in log order.

    Usage: call :meth:`feed` for every decoded entry, then read :attr:`findings`
    (ordered by seq) and :attr:`calls` (call identity -> :class:`CallState`).
    """

    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.notices: list[str] = []
        self.calls: dict[CallKey, CallState] = {}
        self._by_id: dict[tuple[str, str], list[CallKey]] = defaultdict(list)
        self._sticky: dict[tuple[str, str, str], Decision] = {}
        self._sessions: dict[str, Counter[str]] = defaultdict(Counter)
        self._approved: dict[str, set[CallKey]] = defaultdict(set)

    # -- helpers ---------------------------------------------------------------------

    def _report(self, rule: str, entry: Entry, detail: str, key: CallKey | None) -> None:
        run_id, scope, call_id = key if key else (entry.body.get("run_id"), (), None)
        self.findings.append(Finding(rule, entry.seq, detail, run_id, tuple(scope), call_id))
        if key in self.calls:
            self.calls[key].violations.append(rule)

    def _find(self, body: dict) -> CallState | None:
        key = (body["run_id"], tuple(body["scope"]), body["call_id"])
        if key in self.calls:
            return self.calls[key]
        candidates = self._by_id.get((body["run_id"], body["call_id"]))
        return self.calls[candidates[-1]] if candidates else None

    def find_call(self, run_id: str, scope: tuple[str, ...], call_id: str) -> CallState | None:
        """The call the rules attribute evidence naming this identity to: the exact
        ``(run_id, scope, call_id)``, else the latest call with that ``(run_id, call_id)``
        in any scope; None when no such call is recorded (read-only)."""
        return self._find({"run_id": run_id, "scope": scope, "call_id": call_id})

    def _effective(self, call: CallState) -> Decision | None:
        if call.decision is not None:
            return call.decision
        run_id = call.key[0]
        return self._sticky.get((run_id, call.agent, call.tool))

    # -- entry kinds -----------------------------------------------------------------

    def feed(self, entry: Entry) -> None:
        """Apply every rule to one decoded entry (``seq`` order, none skipped)."""
        handler = getattr(self, "_on_" + entry.kind, None)
        if handler is not None:
            handler(entry)

    def _on_call(self, entry: Entry) -> None:
        b = entry.body
        key = (b["run_id"], tuple(b["scope"]), b["call_id"])
        if key in self.calls:
            self.notices.append(f"seq {entry.seq}: call {b['call_id']} recorded twice")
            return
        self.calls[key] = CallState(
            key, entry.seq, entry.time, b["agent"], b["tool"], b["args_digest"],
            b["needs_approval"], b["response_id"],
        )
        self._by_id[(b["run_id"], b["call_id"])].append(key)

    def _on_tool_policy(self, entry: Entry) -> None:
        b = entry.body
        if b["call_id"] is None:
            return
        call = self._find(b)
        if call is not None:
            call.policy_result = b["needs_approval"]

    def _on_decision(self, entry: Entry) -> None:
        b = entry.body
        call = self._find(b)
        if call is None:
            self.notices.append(f"seq {entry.seq}: decision for unrecorded call {b['call_id']}")
            return
        decision = Decision(
            b["decision"], b["args_digest"] or call.args_digest, entry.seq, b["approver"],
            entry.time, b["always"],
        )
        call.decision = decision
        if b["always"]:
            self._sticky[(call.key[0], b["agent"] or call.agent, b["tool"] or call.tool)] = decision
        if decision.decision == "approve":
            self._approved[call.key[0]].add(call.key)
        else:
            self._approved[call.key[0]].discard(call.key)
            call.rejection_messages.add(b["message_digest"] or ANY_MESSAGE)

    def _on_execution(self, entry: Entry) -> None:
        b = entry.body
        call = self._find(b)
        if call is None:
            self._report(
                EXECUTION_PROVENANCE, entry, f"execution of {b['call_id']} has no recorded call",
                (b["run_id"], tuple(b["scope"]), b["call_id"]),
            )
            return
        key = call.key
        if call.executions:
            self._report(
                EXACTLY_ONCE, entry,
                f"second execution of {key[2]} (first at seq {call.executions[0]})", key,
            )
        if b["args_digest"] != call.args_digest:
            self._report(
                ARGUMENT_INTEGRITY, entry,
                f"executed arguments {_short(b['args_digest'])} differ from the call's "
                f"{_short(call.args_digest)}", key,
            )
        decision = self._effective(call)
        if decision is not None and decision.decision == "reject":
            self._report(
                REJECTION_RESPECTED, entry,
                f"executed after a rejection by {decision.approver} at seq {decision.seq}", key,
            )
        elif call.gated:
            if decision is None:
                self._report(APPROVAL_BINDING, entry, "gated call executed without approval", key)
            elif decision is call.decision and decision.args_digest != call.args_digest:
                self._report(
                    APPROVAL_BINDING, entry,
                    f"approval at seq {decision.seq} was shown arguments "
                    f"{_short(decision.args_digest)}, the call has {_short(call.args_digest)}",
                    key,
                )
        call.executions.append(entry.seq)
        if call.executed_at is None:
            call.executed_at, call.authorized_by = entry.time, decision
        if b["result_digest"] is not None:
            call.results.add(b["result_digest"])
        self._approved[key[0]].discard(key)

    def _on_guardrail(self, entry: Entry) -> None:
        call = self._find(entry.body)
        if call is not None:
            call.blocks.add(entry.body["message_digest"] or ANY_MESSAGE)
        else:
            self.notices.append(
                f"seq {entry.seq}: guardrail block for unrecorded call {entry.body['call_id']}"
            )

    def _on_session_item(self, entry: Entry) -> None:
        b = entry.body
        session = self._sessions[b["session_id"]]
        call_id = b["call_id"]
        if b["op"] == "clear":
            session.clear()
        elif b["item_type"] == "function_call" and call_id is not None:
            session[call_id] += 1 if b["op"] == "add" else -1
        elif b["item_type"] == "function_call_output" and call_id and b["op"] == "add":
            self._check_output(entry, session[call_id] > 0)

    def _check_output(self, entry: Entry, linked: bool) -> None:
        b = entry.body
        call = self._find(b)
        key = call.key if call else (b["run_id"], tuple(b["scope"]), b["call_id"])
        if not linked:
            self._report(
                TOOL_LINKAGE, entry,
                f"function_call_output {b['call_id']} persisted in session {b['session_id']} "
                "without its function_call",
                key,
            )
        if call is None:
            self._report(OUTPUT_PROVENANCE, entry, "output of a call that was never recorded", key)
            return
        call.persisted.append(entry.seq)
        output = b["output_digest"]
        if output in call.results:
            return
        sticky = self._effective(call)
        rejections = call.rejection_messages | (
            {ANY_MESSAGE} if sticky is not None and sticky.decision == "reject" else set()
        )
        for messages in (rejections, call.blocks):
            if ANY_MESSAGE in messages or output in messages:
                return
        self._report(
            OUTPUT_PROVENANCE, entry,
            f"output {_short(output)} matches no execution result, rejection or guardrail block",
            key,
        )

    def _on_run_end(self, entry: Entry) -> None:
        run_id = entry.body["run_id"]
        for key in sorted(self._approved.pop(run_id, set()), key=lambda k: self.calls[k].seq):
            call = self.calls[key]
            assert call.decision is not None
            self._report(
                APPROVED_NOT_EXECUTED, entry,
                f"approved at seq {call.decision.seq} by {call.decision.approver}, "
                f"not executed when the run ended {entry.body['status']}",
                key,
            )
