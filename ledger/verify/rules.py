"""The evidence rules: decoded entries in, findings out (pure, no I/O).

:class:`RuleEngine` reads entries in log order and keeps only per-call state, so a
whole ledger streams through it. Rules (stable names, see FORMAT.md):

- ``tool_linkage``: every persisted tool output (``function_call_output``, and the
  outputs of the other kinds of call the SDK runs locally, :data:`CALL_OUTPUTS`) has a
  persisted call item of its kind with the same ``call_id`` in that session, no later
  than the output;
- ``output_provenance``: every persisted ``function_call_output`` traces to a recorded
  call and to an execution whose result digest equals the output digest, a rejection
  whose message it carries, or a guardrail block; a result an output guardrail withheld
  (its block recorded at its execution's time, right after it) does not count. The
  output of another kind traces to a recorded call and to an execution, a rejection or a
  block of it (the SDK persists its own rendering of such a tool's result, not the value
  the tool returned, so digests are not compared);
- ``execution_provenance``: every execution traces to a recorded call;
- ``approval_binding``: every execution of a gated call follows an approve decision for
  that call (or a sticky approval of that agent's tool in that run, at that agent-as-tool
  scope: the SDK keeps sticky decisions per run state, and each agent-tool call runs its
  agent in one of its own) whose arguments
  digest equals the call's;
- ``rejection_respected``: no execution of a call after it was rejected; an explicit
  decision on a call beats a sticky decision on its tool;
- ``argument_integrity``: the arguments executed have the digest of the arguments called;
- ``exactly_once``: at most one execution per call identity;
- ``approved_not_executed``: an approved call (top level or nested) with no execution
  (nor a guardrail block, which settles it) when a later leg of its run, resumed from the
  state the approval was made on or a descendant of it, ends ``completed`` or
  ``interrupted`` (it may pause on that very call again); a ``failed`` leg reports
  nothing, since its retry may still run the call, nor does an ``interrupted`` one for
  an agent-as-tool call whose nested agent paused (a nested call neither executed,
  blocked nor rejected): that call is still running;
- ``state_isolation``: a decision holds only in legs resumed from the run state it was
  made on or a descendant of that state: a gated call executed where the only approval
  was made on another branch (a sibling state) or in another run is reported, and so is
  an execution in a run that never made the call while another run approved it;
- ``output_not_persisted``: every tool call item a run persisted to a session for a call
  it made (of the kinds of :data:`CALL_OUTPUTS`; not an item the app gave as input) has
  its output persisted there by the time that run ends
  ``completed`` (the session doctor's ``dangling_call``: the conversation moved on past
  it); an ``interrupted`` or ``failed`` leg leaves it pending, as a later leg of the run
  may still persist it. A session that ends so is rejected by the provider for good;
- ``foreign_interruption``: a run state waits only on calls its own run made: an
  interruption whose call its run never recorded (nor with those arguments) is reported
  once per run and call, naming the run that made it (by call id and arguments digest)
  and the arguments an approver of it would be shown;
- ``nested_ownership``: a decision on a call holds at the agent-as-tool scope it was
  shown for: an execution at another scope than the call it runs (when that call was
  gated or decided), or a gated call run on the strength of an approval shown for the
  same call_id at another scope, is reported.

Lineage (see :mod:`evidence_ledger.verify.lineage`; the rules keep each run state's parent from its
first ``run_state`` entry): decisions carry the run state they were made on,
executions and ``run_end`` entries the state their leg resumed from (null: started
fresh). Where a side names no state, or a state no ``run_state`` entry records, the
decision holds as if lineage were not recorded (so partial evidence never reports more).
"""

from __future__ import annotations

import dataclasses
import operator
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from evidence_ledger.format.entries import CONTEXT_APPROVER, Entry
from evidence_ledger.verify.findings import (
    APPROVAL_BINDING,
    APPROVED_NOT_EXECUTED,
    ARGUMENT_INTEGRITY,
    EXACTLY_ONCE,
    EXECUTION_PROVENANCE,
    FOREIGN_INTERRUPTION,
    NESTED_OWNERSHIP,
    OUTPUT_NOT_PERSISTED,
    OUTPUT_PROVENANCE,
    REJECTION_RESPECTED,
    STATE_ISOLATION,
    TOOL_LINKAGE,
    Finding,
)
from evidence_ledger.verify.lineage import ancestry

CallKey = tuple[str, tuple[str, ...], str]
T = TypeVar("T")
ANY_MESSAGE = b"*"  # a rejection or block whose message was not recorded matches any output
CALL_OUTPUTS = {
    "function_call_output": "function_call", "shell_call_output": "shell_call",
    "local_shell_call_output": "local_shell_call", "apply_patch_call_output": "apply_patch_call",
    "computer_call_output": "computer_call", "custom_tool_call_output": "custom_tool_call",
}
"""Item type of a persisted tool output -> item type of its call (the kinds of call the SDK
runs locally; a hosted call's item is its call and its result at once)."""
_CALL_ITEMS = frozenset(CALL_OUTPUTS.values())


def _digest_text(digest: bytes | None) -> str:
    return "none" if digest is None else "sha256:" + digest.hex()


def _added(items: tuple[T, ...], item: T) -> tuple[T, ...]:
    """``items`` with ``item`` appended unless it is already there."""
    return items if item in items else (*items, item)


def _items(held: T | tuple[T, ...] | None) -> tuple[T, ...]:
    """What :func:`_held` keeps, as a tuple."""
    if held is None:
        return ()
    return held if type(held) is tuple else (held,)  # type: ignore[return-value]


def _held(held: T | tuple[T, ...] | None, item: T, unique: bool = False) -> T | tuple[T, ...]:
    """``held`` with ``item`` added: bare while it is the only one, else a tuple."""
    if held is None:
        return item
    items = _items(held)
    return held if unique and item in items else (*items, item)


def _pickled_by_fields(cls: type[T]) -> type[T]:
    """Make a slots dataclass pickle as ``(cls, field values)``: one C-level attrgetter
    call to save and the class's own ``__init__`` to load, instead of the per-field
    ``__getstate__`` / ``__setstate__`` loops dataclasses add (the index saves and loads
    its rule state, ~2 objects a call, on every update)."""
    values = operator.attrgetter(*(f.name for f in dataclasses.fields(cls)))  # type: ignore[arg-type]
    cls.__reduce__ = lambda self: (cls, values(self))  # type: ignore[method-assign]
    return cls


def _scope_text(scope: tuple[str, ...]) -> str:
    return "/".join(scope) if scope else "top level"


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class Decision:
    """A human decision as the rules see it.

    Attributes:
        decision: ``"approve"`` or ``"reject"``.
        args_digest: 32-byte digest the approver was shown.
        seq: entry where it was recorded.
        approver: who decided.
        time: ns since the epoch, UTC.
        always: sticky for the agent's tool.
        run_id, scope: the call identity it names (what the approver was shown).
        run_state: id of the run state it was made on, or None.
    """

    decision: str
    args_digest: bytes
    seq: int
    approver: str
    time: int
    always: bool
    run_id: str = ""
    scope: tuple[str, ...] = ()
    run_state: str | None = None


@_pickled_by_fields
@dataclass(slots=True)
class CallState:
    """Everything the rules know about one call identity.

    Attributes mirror the ``call`` body; ``decision`` is the latest explicit decision
    (``decisions`` all of them, in log order, whichever run state they were made on),
    ``executions`` the seqs of its executions, ``results`` the digests they returned,
    ``rejection_messages`` / ``blocks`` message digests (``ANY_MESSAGE`` when unknown),
    ``withheld`` the result digests an output guardrail's block withheld,
    ``persisted`` the seqs of its persisted outputs, ``authorized_by`` the decision in
    force when it first executed (its own, or a sticky one on its tool).

    The collections read as tuples (in log order, without repeats for the digest ones).
    Most calls hold none or one of each, so one item is kept bare and an empty tuple is
    shared: a ledger of 10^6 entries keeps about 1 KiB of state a call.
    """

    key: CallKey
    seq: int
    time: int
    agent: str
    tool: str
    args_digest: bytes
    needs_approval: bool | None
    policy_result: bool | None = None
    decisions: tuple[Decision, ...] = ()
    authorized_by: Decision | None = None
    rejection_messages: tuple[bytes, ...] = ()
    blocks: tuple[bytes, ...] = ()
    withheld: tuple[bytes, ...] = ()
    violations: tuple[str, ...] = ()
    held_executions: int | tuple[int, ...] | None = None
    held_results: bytes | tuple[bytes, ...] | None = None
    held_persisted: int | tuple[int, ...] | None = None

    @property
    def decision(self) -> Decision | None:
        """The latest explicit decision on this call, or None."""
        return self.decisions[-1] if self.decisions else None

    @property
    def executions(self) -> tuple[int, ...]:
        """Seqs of its executions, in log order."""
        return _items(self.held_executions)

    @property
    def results(self) -> tuple[bytes, ...]:
        """Result digests (32 bytes) its executions returned, without repeats."""
        return _items(self.held_results)

    @property
    def persisted(self) -> tuple[int, ...]:
        """Seqs of its persisted outputs, in log order."""
        return _items(self.held_persisted)

    @property
    def gated(self) -> bool:
        """True when the tool needed a human approval for this call."""
        return bool(self.needs_approval) or bool(self.policy_result)


def _first(names: Iterable[str], shown: int = 3) -> str:
    """The first ``shown`` of ``names``, comma-separated, with how many more there are."""
    names = list(names)
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


class RuleEngine:
    """Apply the rules to entries fed in log order.

    Usage: call :meth:`feed` for every decoded entry, then read :attr:`findings`
    (ordered by seq) and :attr:`calls` (call identity -> :class:`CallState`).
    """

    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.notices: list[str] = []
        self.calls: dict[CallKey, CallState] = {}
        self.state_parents: dict[str, str | None] = {}  # run state id -> parent id
        # run -> call_id -> the latest call with that call_id at an agent-as-tool scope
        # (top-level calls, the common case, are found in `calls` itself: no entry here)
        self._nested: dict[str, dict[str, CallKey]] = defaultdict(dict)
        self._scopes: dict[tuple[str, ...], tuple[str, ...]] = {}  # one tuple per scope
        # (run, scope, agent, tool) -> its sticky decisions: the SDK keeps them per RunState,
        # and each agent-as-tool call runs its agent in a run (and scope) of its own
        self._sticky: dict[tuple[str, tuple[str, ...], str, str], list[Decision]] = \
            defaultdict(list)
        self._sessions: dict[str, Counter[tuple[str, str]]] = defaultdict(Counter)
        # run -> call -> its latest approval, until a leg it holds in runs the call
        self._approved: dict[str, dict[CallKey, Decision]] = defaultdict(dict)
        # call_id -> every approval naming it, any run and scope (the rare paths that
        # look for an approval made elsewhere filter these by run or by scope)
        self._approvals: dict[str, list[Decision]] = {}
        # the latest execution: (its call, time, result digest); a block of that call at
        # that very time is its output guardrail's, which withheld that result
        self._last_run: tuple[CallState, int, bytes | None] | None = None
        # run -> whether it persisted a session item, for each run with a top-level execution
        self._persisted: dict[str, bool] = {}
        self._context_decisions: list[int] = []  # seq of each decision read off a run context
        # session -> (call_id, call item type, run) -> seq of each persisted call item
        # without its output there yet; run -> (session, call_id, item type) of those
        # call_id -> the call(s) with it, any run and scope; session -> the runs that wrote
        # into it (a session item's output is traced through them: see _output_call)
        self._call_ids: dict[str, CallKey | list[CallKey]] = {}
        self._foreign: set[tuple[str, str]] = set()  # (run, call_id) reported foreign
        self._session_runs: dict[str, set[str]] = defaultdict(set)
        self._unanswered: dict[str, dict[tuple[str, str, str], int]] = defaultdict(dict)
        self._unanswered_by_run: dict[str, set[tuple[str, str, str]]] = defaultdict(set)

    # -- helpers ---------------------------------------------------------------------

    def _report(self, rule: str, entry: Entry, detail: str, key: CallKey | None,
                compared: tuple[bytes, bytes] | None = None) -> None:
        run_id, scope, call_id = key if key else (entry.body.get("run_id"), (), None)
        self.findings.append(
            Finding(rule, entry.seq, detail, run_id, tuple(scope), call_id, compared))
        if key in self.calls:
            call = self.calls[key]
            call.violations = (*call.violations, rule)

    def _find(self, body: dict) -> CallState | None:
        key = (body["run_id"], tuple(body["scope"]), body["call_id"])
        if key in self.calls:
            return self.calls[key]
        top = self.calls.get((body["run_id"], (), body["call_id"]))
        nested_key = self._nested.get(body["run_id"], {}).get(body["call_id"])
        nested = self.calls[nested_key] if nested_key else None
        if top is None or nested is None:
            return top or nested
        return top if top.seq > nested.seq else nested  # the latest in any scope

    def closing_notices(self) -> list[str]:
        """Once every entry is fed: a notice naming the runs that executed tools at top
        level but persisted no session item (run without a session, or with the history
        kept by the provider: ``conversation_id`` / ``previous_response_id``), to which
        ``tool_linkage`` and ``output_provenance`` do not apply; and one naming the
        decisions the recorder read off a run context (approver
        :data:`~evidence_ledger.format.entries.CONTEXT_APPROVER`), which no one made
        through it. Empty when there are neither."""
        notices = []
        runs = [run_id for run_id, persisted in self._persisted.items() if not persisted]
        if runs:
            notices.append(
                f"{len(runs)} run(s) executed tools but persisted no session item "
                f"({_first(run_id[:12] for run_id in runs)}): {TOOL_LINKAGE} and "
                f"{OUTPUT_PROVENANCE} do not apply to them (no session, or history kept by "
                "the provider: the calls' response ids link it)")
        if self._context_decisions:
            notices.append(
                f"{len(self._context_decisions)} decision(s) read off the run context, not "
                f"made through the recorder (approver {CONTEXT_APPROVER}; seq "
                f"{_first(map(str, self._context_decisions))})")
        return notices

    def find_call(self, run_id: str, scope: tuple[str, ...], call_id: str) -> CallState | None:
        """The call the rules attribute evidence naming this identity to: the exact
        ``(run_id, scope, call_id)``, else the latest call with that ``(run_id, call_id)``
        in any scope; None when no such call is recorded (read-only)."""
        exact = self.calls.get((run_id, scope, call_id))  # the common case, without a body
        return exact or self._find({"run_id": run_id, "scope": scope, "call_id": call_id})

    def _effective(self, call: CallState) -> Decision | None:
        """The latest explicit decision on ``call``, else the latest sticky one on its tool
        (whatever run state either was made on)."""
        if call.decision is not None:
            return call.decision
        sticky = self._sticky.get((call.key[0], call.key[1], call.agent, call.tool))
        return sticky[-1] if sticky else None

    def _holds(self, decision: Decision, leg: str | None) -> bool:
        """True when ``decision`` holds in a leg resumed from run state ``leg`` (None: a
        fresh leg): it was made on ``leg`` or an ancestor of it. A decision or leg whose
        state no ``run_state`` entry records holds (lineage unknown)."""
        made_on, known = decision.run_state, self.state_parents
        if made_on is None or made_on not in known or (leg is not None and leg not in known):
            return True
        return made_on in ancestry(known, leg)

    def _in_force(self, call: CallState, leg: str | None) -> Decision | None:
        """The decision that holds for ``call`` in a leg resumed from ``leg``: the latest
        explicit one that holds there, else the latest sticky one on its tool that does."""
        for decision in reversed(call.decisions):
            if self._holds(decision, leg):
                return decision
        for decision in reversed(self._sticky.get(
                (call.key[0], call.key[1], call.agent, call.tool), [])):
            if self._holds(decision, leg):
                return decision
        return None

    # -- entry kinds -----------------------------------------------------------------

    def feed(self, entry: Entry) -> None:
        """Apply every rule to one decoded entry (``seq`` order, none skipped)."""
        handler = getattr(self, "_on_" + entry.kind, None)
        if handler is not None:
            handler(entry)

    def _on_call(self, entry: Entry) -> None:
        b = entry.body
        scope = tuple(b["scope"])
        run_id = sys.intern(b["run_id"])  # shared by every call of the run
        key = (run_id, self._scopes.setdefault(scope, scope), b["call_id"])
        if key in self.calls:
            self.notices.append(f"seq {entry.seq}: call {b['call_id']} recorded twice")
            return
        self.calls[key] = CallState(
            key, entry.seq, entry.time, sys.intern(b["agent"]), sys.intern(b["tool"]),
            b["args_digest"], b["needs_approval"],
        )
        if scope:
            self._nested[run_id][b["call_id"]] = key
        held = self._call_ids.get(b["call_id"])  # one key bare, several in a list
        self._call_ids[b["call_id"]] = key if held is None else [
            *(held if isinstance(held, list) else [held]), key]

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
        state = b["run_state"]
        if state is not None and state not in self.state_parents:
            self.notices.append(
                f"seq {entry.seq}: decision on run state {state}, which no run_state entry records"
            )
        shown = b["args_digest"]
        decision = Decision(
            # shared strings, and the call's own digest object when equal: one copy a call
            sys.intern(b["decision"]), call.args_digest if shown in (None, call.args_digest)
            else shown, entry.seq,
            sys.intern(b["approver"]), entry.time, b["always"], call.key[0],
            self._scopes.setdefault(tuple(b["scope"]), tuple(b["scope"])), state,
        )
        call.decisions = (*call.decisions, decision)
        if b["approver"] == CONTEXT_APPROVER:
            self._context_decisions.append(entry.seq)
        if b["always"]:
            self._sticky[(call.key[0], call.key[1], b["agent"] or call.agent,
                          b["tool"] or call.tool)].append(decision)
        approved = self._approved[call.key[0]]
        if decision.decision == "approve":
            if not call.executions:  # a late approval of a call that already ran awaits nothing
                approved[call.key] = decision
            self._approvals.setdefault(call.key[2], []).append(decision)
        else:
            if call.key in approved and self._holds(approved[call.key], state):
                del approved[call.key]
            call.rejection_messages = _added(
                call.rejection_messages, b["message_digest"] or ANY_MESSAGE
            )

    def _on_run_state(self, entry: Entry) -> None:
        for pending in entry.body["interruptions"]:
            self._check_interruption(entry, pending)
        state, parent = entry.body["state_id"], entry.body["parent"]
        if state not in self.state_parents:
            self.state_parents[state] = parent
        elif self.state_parents[state] != parent:
            self.notices.append(
                f"seq {entry.seq}: run state {state} names parent {parent}, its first entry "
                f"{self.state_parents[state]}"
            )

    def _check_interruption(self, entry: Entry, pending: dict) -> None:
        """``foreign_interruption`` if the run of ``entry`` (a ``run_state``) never made the
        call ``pending`` (one of its interruptions) waits on."""
        run_id, call_id, shown = entry.body["run_id"], pending["call_id"], pending["args_digest"]
        if (run_id, call_id) in self._foreign:
            return
        scope = tuple(pending["scope"]) if pending["scope"] is not None else None
        own = (self.calls.get((run_id, scope, call_id)) if scope is not None
               else self._find({"run_id": run_id, "scope": (), "call_id": call_id}))
        if own is not None and shown in (None, own.args_digest):
            return
        self._foreign.add((run_id, call_id))
        held = self._call_ids.get(call_id)
        others = [self.calls[k] for k in ([] if held is None else
                                          held if isinstance(held, list) else [held])
                  if k[0] != run_id and shown in (None, self.calls[k].args_digest)]
        made = (f"made in run {others[0].key[0]} at {_scope_text(others[0].key[1])}, seq "
                f"{others[0].seq}" if others else "made in no run of this ledger")
        mine = "" if own is None else f" (its own call {call_id} has other arguments)"
        self._report(
            FOREIGN_INTERRUPTION, entry,
            f"run state {entry.body['state_id']} waits on call {call_id}, which its run never "
            f"made{mine}: {made}; an approver would be shown the arguments with digest "
            f"{_digest_text(shown)}",
            (run_id, scope or (), call_id),
            None if own is None or shown is None else (shown, own.args_digest),
        )

    def _on_execution(self, entry: Entry) -> None:
        b = entry.body
        if not b["scope"]:
            self._persisted.setdefault(b["run_id"], False)
        here: CallKey = (b["run_id"], tuple(b["scope"]), b["call_id"])
        leg = b["run_state"]
        call = self._find(b)
        if call is None:
            self._report(
                EXECUTION_PROVENANCE, entry, f"execution of {b['call_id']} has no recorded call",
                here,
            )
            self._other_runs(entry, here)
            return
        key = call.key
        if key[1] != here[1] and (call.gated or call.decisions):
            decided = f", decided at seq {call.decision.seq}" if call.decision else ""
            self._report(
                NESTED_OWNERSHIP, entry,
                f"executed at {_scope_text(here[1])}; call {key[2]} was made at "
                f"{_scope_text(key[1])}{decided}", here,
            )
            return
        if call.executions:
            self._report(
                EXACTLY_ONCE, entry,
                f"second execution of {key[2]} (first at seq {call.executions[0]})", key,
            )
        if b["args_digest"] != call.args_digest:
            self._report(
                ARGUMENT_INTEGRITY, entry,
                f"executed arguments {_digest_text(b['args_digest'])} differ from the call's "
                f"{_digest_text(call.args_digest)}", key, (call.args_digest, b["args_digest"]),
            )
        decision = self._in_force(call, leg)
        if decision is not None and decision.decision == "reject":
            self._report(
                REJECTION_RESPECTED, entry,
                f"executed after a rejection by {decision.approver} at seq {decision.seq}", key,
            )
        elif call.gated:
            if decision is None:
                self._unauthorised(entry, call, leg)
            elif decision in call.decisions and decision.scope != key[1]:
                self._report(
                    NESTED_OWNERSHIP, entry,
                    f"approval at seq {decision.seq} was shown {key[2]} at "
                    f"{_scope_text(decision.scope)}, the call is at {_scope_text(key[1])}", key,
                )
            elif decision in call.decisions and decision.args_digest != call.args_digest:
                self._report(
                    APPROVAL_BINDING, entry,
                    f"approval at seq {decision.seq} was shown arguments "
                    f"{_digest_text(decision.args_digest)}, the call has "
                    f"{_digest_text(call.args_digest)}",
                    key, (decision.args_digest, call.args_digest),
                )
        if not call.executions:
            call.authorized_by = decision
        call.held_executions = _held(call.held_executions, entry.seq)
        self._last_run = (call, entry.time, b["result_digest"])
        if b["result_digest"] is not None:
            call.held_results = _held(call.held_results, b["result_digest"], unique=True)
            if b["result_digest"] in call.withheld:  # returned again, not withheld (yet)
                call.withheld = tuple(d for d in call.withheld if d != b["result_digest"])
        approved = self._approved[key[0]]
        if key in approved and self._holds(approved[key], leg):
            del approved[key]

    def _unauthorised(self, entry: Entry, call: CallState, leg: str | None) -> None:
        """Report a gated call run with no decision holding in its leg, by why."""
        key = call.key
        sticky = self._sticky.get((key[0], key[1], call.agent, call.tool), [])
        elsewhere = [d for d in (*call.decisions, *sticky) if d.decision == "approve"]
        if elsewhere:
            d = elsewhere[-1]
            where = (
                f"not on run state {leg} this leg resumed from or an ancestor of it" if leg
                else "but this leg started fresh, from no run state"
            )
            self._report(
                STATE_ISOLATION, entry,
                f"approved at seq {d.seq} on run state {d.run_state}, {where}", key,
            )
            return
        other_scope = [
            d for d in self._approvals.get(key[2], ()) if d.run_id == key[0] and d.scope != key[1]
        ]
        if other_scope:
            d = other_scope[-1]
            self._report(
                NESTED_OWNERSHIP, entry,
                f"approval at seq {d.seq} was shown {key[2]} at {_scope_text(d.scope)}, "
                f"the call is at {_scope_text(key[1])}", key,
            )
            return
        if not self._other_runs(entry, key):
            self._report(APPROVAL_BINDING, entry, "gated call executed without approval", key)

    def _other_runs(self, entry: Entry, key: CallKey) -> bool:
        """Report ``state_isolation`` if another run approved this scope and call_id."""
        approvals = [d for d in self._approvals.get(key[2], ()) if d.scope == key[1]]
        others = [d for d in approvals if d.run_id != key[0]]
        if others:
            d = others[-1]
            self._report(
                STATE_ISOLATION, entry,
                f"no approval in this run; run {d.run_id} approved {key[2]} at seq {d.seq}", key,
            )
        return bool(others)

    def _on_guardrail(self, entry: Entry) -> None:
        call = self._find(entry.body)
        if call is not None:
            call.blocks = _added(call.blocks, entry.body["message_digest"] or ANY_MESSAGE)
            last = self._last_run  # an output guardrail's block: its execution's time
            if last is not None and last[0] is call and last[1] == entry.time and last[2]:
                call.withheld = _added(call.withheld, last[2])
            self._approved[call.key[0]].pop(call.key, None)  # attempted, and blocked
        else:
            self.notices.append(
                f"seq {entry.seq}: guardrail block for unrecorded call {entry.body['call_id']}"
            )

    def _on_denied(self, entry: Entry) -> None:
        """The guard stopped a call in ``enforce`` mode: its body did not run, and the call's
        output is the rejection message (a block, as a guardrail's)."""
        if entry.body["mode"] == "enforce":
            call = self._find(entry.body)
            if call is not None:
                call.blocks = _added(call.blocks, entry.body["message_digest"] or ANY_MESSAGE)
                self._approved[call.key[0]].pop(call.key, None)  # attempted, and stopped

    def _on_session_item(self, entry: Entry) -> None:
        b = entry.body
        if b["run_id"]:
            self._persisted[b["run_id"]] = True
            self._session_runs[b["session_id"]].add(sys.intern(b["run_id"]))
        session = self._sessions[b["session_id"]]
        call_id, kind = b["call_id"], b["item_type"]
        if b["op"] == "clear":
            session.clear()
            for _, _, run_id in self._unanswered.pop(b["session_id"], {}):
                self._unanswered_by_run[run_id] = {
                    k for k in self._unanswered_by_run[run_id] if k[0] != b["session_id"]}
        elif kind in _CALL_ITEMS and call_id is not None:
            known = self._output_call(b)[0]  # traced as an output is: through the session
            if known is not None:
                call_id = known.key[2]  # the call's own string: one copy per call
            session[call_id, kind] += 1 if b["op"] == "add" else -1
            if b["op"] == "add" and known is not None:  # a call a run made, not input
                run_id = known.key[0]
                self._unanswered[b["session_id"]][call_id, kind, run_id] = entry.seq
                self._unanswered_by_run[run_id].add((b["session_id"], call_id, kind))
            elif b["op"] != "add":
                self._answered(b["session_id"], call_id, kind)
        elif kind in CALL_OUTPUTS and call_id and b["op"] == "add":
            self._answered(b["session_id"], call_id, CALL_OUTPUTS[kind])
            self._check_output(entry, session[call_id, CALL_OUTPUTS[kind]] > 0)

    def _answered(self, session_id: str, call_id: str, kind: str) -> None:
        """Every run's call item ``call_id`` of ``kind`` in ``session_id`` has its output
        there (or the item was removed)."""
        waiting = self._unanswered.get(session_id, {})
        for key in [k for k in waiting if k[:2] == (call_id, kind)]:
            del waiting[key]
            self._unanswered_by_run[key[2]].discard((session_id, call_id, kind))

    def _unanswered_at_end(self, entry: Entry) -> None:
        """``output_not_persisted`` for each call item the run of ``entry`` (a ``run_end``
        that completed) persisted without its output."""
        run_id = entry.body["run_id"]
        for session_id, call_id, kind in sorted(self._unanswered_by_run.pop(run_id, ())):
            seq = self._unanswered[session_id].pop((call_id, kind, run_id), None)
            if seq is None:
                continue
            call = self.calls.get((run_id, (), call_id))
            output = next(o for o, c in CALL_OUTPUTS.items() if c == kind)
            self._report(
                OUTPUT_NOT_PERSISTED, entry,
                f"{kind} {call_id} persisted in session {session_id} at seq {seq} has no "
                f"{output} there when its run completed",
                call.key if call else (run_id, (), call_id),
            )

    def _output_call(self, b: dict) -> tuple[CallState | None, str]:
        """The call a persisted item (an output, or a call item) traces to; or None and the
        finding's detail: what was found instead.

        Sessions are not runs: one session serves every run that uses it, and an ingested
        item may name no run. The call is the one of the item's own identity ``(run_id,
        scope, call_id)``; else the one with that ``call_id`` made by a run that wrote into
        the item's session; else, with no such link, the one made by any run. Two candidates
        at the same step are ambiguous: none is taken."""
        exact = self.calls.get((b["run_id"], tuple(b["scope"]), b["call_id"]))
        if exact is not None:
            return exact, ""
        held = self._call_ids.get(b["call_id"])
        keys = [] if held is None else held if isinstance(held, list) else [held]
        made = [self.calls[k] for k in keys]
        if not made:
            return None, (f"output of a call that was never recorded (no call {b['call_id']} "
                          "was recorded in any run)")
        writers = self._session_runs.get(b["session_id"], set())
        linked = [c for c in made if c.key[0] in writers]
        found = linked or made
        if len(found) == 1:
            return found[0], ""
        runs = ", ".join(f"run {c.key[0]} at seq {c.seq}" for c in found[:3])
        return None, (f"output of call {b['call_id']}, which more than one run made "
                      f"({runs}{'; each wrote into the session' if linked else ''}): it traces "
                      "to none of them")

    def _check_output(self, entry: Entry, linked: bool) -> None:
        b = entry.body
        call, found_instead = self._output_call(b)
        key = call.key if call else (b["run_id"], tuple(b["scope"]), b["call_id"])
        kind = b["item_type"]
        if not linked:
            self._report(
                TOOL_LINKAGE, entry,
                f"{kind} {b['call_id']} persisted in session {b['session_id']} "
                f"without its {CALL_OUTPUTS[kind]}",
                key,
            )
        if call is None:
            self._report(OUTPUT_PROVENANCE, entry, found_instead, key)
            return
        if call.key[0] in self._persisted:  # a run that wrote into a session, by this item
            self._persisted[call.key[0]] = True
        call.held_persisted = _held(call.held_persisted, entry.seq)
        sticky = self._effective(call)
        sticky_rejected = sticky is not None and sticky.decision == "reject"
        if kind != "function_call_output":  # the SDK's rendering of the result: no digest
            if not (call.executions or call.rejection_messages or call.blocks or sticky_rejected):
                self._report(OUTPUT_PROVENANCE, entry,
                             f"{kind} of a call with no execution, rejection or guardrail block",
                             key)
            return
        output = b["output_digest"]
        withheld = output in call.withheld
        if output in call.results and not withheld:
            return
        for messages in (call.rejection_messages, call.blocks):
            if sticky_rejected or output in messages or (ANY_MESSAGE in messages and not withheld):
                return
        self._report(
            OUTPUT_PROVENANCE, entry,
            f"output {_digest_text(output)} matches no execution result, rejection or "
            "guardrail block",
            key,
        )

    def _still_running(self, key: CallKey) -> bool:
        """True when ``key`` is an agent-as-tool call whose nested agent has a call that
        is neither executed, blocked nor rejected: the nested run paused inside it."""
        run_id, scope, call_id = key
        inner = (*scope, f"{self.calls[key].tool}:{call_id}")
        for nested in self._nested.get(run_id, {}).values():
            call = self.calls[nested]
            if nested[1][: len(inner)] == inner and not call.executions and not call.blocks:
                decision = call.decision
                if decision is None or decision.decision != "reject":
                    return True
        return False

    def _on_run_end(self, entry: Entry) -> None:
        b = entry.body
        if b["status"] == "failed":
            return  # a failed leg may be retried; approvals stay pending
        if b["status"] == "completed" and not b["scope"]:  # the run, not an agent tool's
            self._unanswered_at_end(entry)
        approved, leg = self._approved.get(b["run_id"], {}), b["run_state"]
        for key in sorted(approved, key=lambda k: self.calls[k].seq):
            decision = approved[key]
            if not self._holds(decision, leg):
                continue
            if b["status"] == "interrupted" and self._still_running(key):
                continue  # an agent tool whose agent paused: it runs on when resumed
            del approved[key]
            resumed = f" (resumed from run state {leg})" if leg else ""
            self._report(
                APPROVED_NOT_EXECUTED, entry,
                f"approved at seq {decision.seq} by {decision.approver}, "
                f"not executed when the leg{resumed} ended {b['status']}",
                key,
            )
