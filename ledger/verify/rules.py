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
import heapq
import itertools
import json
import operator
import pickle
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from evidence_ledger.format.entries import CONTEXT_APPROVER, KINDS, Entry
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
from evidence_ledger.verify.spill import Spill

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


SHOWN = 3
"""How many runs or seqs a closing notice names (it counts the rest)."""


def _first(names: Iterable[str], total: int) -> str:
    """The first :data:`SHOWN` of ``names`` (of ``total``), comma-separated, with how many
    more there are."""
    more = f" and {total - SHOWN} more" if total > SHOWN else ""
    return ", ".join(itertools.islice(names, SHOWN)) + more


def _scope_code(scope: tuple[str, ...]) -> str:
    """A scope as one string (JSON), for plain-data state."""
    return json.dumps(list(scope)) if scope else "[]"


def _scope_of(code: str) -> tuple[str, ...]:
    return tuple(json.loads(code)) if code != "[]" else ()


@_pickled_by_fields
@dataclass(slots=True)
class _Run:
    """What the rules keep about one run: a run's state is in memory, or whole in the
    engine's :class:`~evidence_ledger.verify.spill.Spill`.

    Attributes:
        calls: its calls (identity -> state), in log order.
        nested: call_id -> the latest of its calls with that call_id at an agent-as-tool
            scope (top-level calls, the common case, are found in ``calls``: no entry).
        scopes: one tuple per scope (interned).
        sticky: (scope, agent, tool) -> its sticky decisions: the SDK keeps them per
            RunState, and each agent-as-tool call runs its agent in a run (and scope) of
            its own.
        approved: call -> its latest approval, until a leg it holds in runs the call.
        persisted: ``(order, wrote)`` once it executed a tool at top level or persisted a
            session item: whether it persisted one (``order`` ranks it for the notice).
        states: the run states its ``run_state`` entries recorded first.
    """

    calls: dict[CallKey, CallState] = field(default_factory=dict)
    nested: dict[str, CallKey] = field(default_factory=dict)
    scopes: dict[tuple[str, ...], tuple[str, ...]] = field(default_factory=dict)
    sticky: dict[tuple[tuple[str, ...], str, str], list[Decision]] = field(default_factory=dict)
    approved: dict[CallKey, Decision] = field(default_factory=dict)
    persisted: tuple[int, bool] | None = None
    states: list[str] = field(default_factory=list)

    def scope(self, scope: tuple[str, ...]) -> tuple[str, ...]:
        """``scope`` as the run's one tuple for it."""
        return self.scopes.setdefault(scope, scope)


@_pickled_by_fields
@dataclass(slots=True)
class _Session:
    """What the rules keep about one session: ``items`` (call_id, call item type) -> how
    many are in it; ``writers`` the runs that wrote into it (a session item's output is
    traced through them: see :meth:`RuleEngine._output_call`)."""

    items: Counter[tuple[str, str]] = field(default_factory=Counter)
    writers: set[str] = field(default_factory=set)

    def size(self) -> int:
        return len(self.items) + len(self.writers)


StateValue = str | int | bytes | None
"""A value of a state row: text, an integer (a bool is one), bytes or None."""

STATE_TABLES: dict[str, tuple[str, ...]] = {
    "calls": ("run_id", "scope", "call_id", "seq", "time", "agent", "tool", "args_digest",
              "needs_approval", "policy_result", "authorized_by"),
    "call_values": ("run_id", "scope", "call_id", "field", "value"),
    "decisions": ("seq", "run_id", "call_scope", "call_id", "decision", "args_digest",
                  "approver", "time", "always", "scope", "run_state"),
    "sticky": ("run_id", "scope", "agent", "tool", "decision_seq"),
    "approved": ("run_id", "scope", "call_id", "decision_seq"),
    "runs": ("run_id", "persisted_order", "persisted"),
    "run_states": ("state_id", "parent", "run_id"),
    "sessions": ("session_id", "call_id", "item_type", "count"),
    "session_runs": ("session_id", "run_id"),
    "unanswered": ("session_id", "call_id", "item_type", "run_id", "seq"),
    "foreign": ("run_id", "call_id"),
    "findings": ("rule", "seq", "detail", "run_id", "scope", "call_id", "expected", "got"),
    "notices": ("notice",),
    "counters": ("name", "value"),
    "last_run": ("run_id", "scope", "call_id", "time", "result_digest"),
    "context_decisions": ("seq",),
}
"""The tables of :meth:`RuleEngine.state_rows`: table -> column names. A ``scope`` is a
JSON array of strings; a decision is named by its ``seq`` (``authorized_by``,
``decision_seq``); ``call_values`` rows hold a call's collections, field by field
(:data:`_CALL_VALUES`) in order; ``counters`` are ``persist_order`` and
``context_decisions`` (how many there were; ``context_decisions`` rows name the first
:data:`SHOWN`)."""

_CALL_VALUES = ("rejection_message", "block", "withheld", "violation", "execution", "result",
                "persisted")
"""The fields of a call's collections in ``call_values``, each read as a tuple."""

LIVE_LIMIT = 20_000
"""With a spill: most calls (and most session items) kept in memory between two entries,
beyond those of the run (and the session) the latest entry touched."""


class RuleEngine:
    """Apply the rules to entries fed in log order.

    Usage: call :meth:`feed` for every decoded entry, then read :attr:`findings`
    (ordered by seq) and :attr:`calls` (call identity -> :class:`CallState`).

    Memory: without a ``spill`` every call's state stays in memory (about 1 KiB a call).
    With one, a run's whole state moves to it when the run ends (a top-level ``run_end``
    that completed) and whenever more than ``live_limit`` calls are held (the runs least
    recently touched first), a session's items likewise; an entry that names a run or a
    session there takes it back first, so the findings are the same either way. Between
    two entries the engine then holds at most ``live_limit`` calls and session items
    beyond those of the latest run and session it touched, the items of sessions awaiting
    an output, and the findings.

    Args:
        spill: where retired state goes (None: nowhere, all of it stays in memory).
        live_limit: calls (and session items) kept in memory with a spill.
    """

    def __init__(self, spill: Spill | None = None, live_limit: int = LIVE_LIMIT) -> None:
        self.findings: list[Finding] = []
        self.notices: list[str] = []
        self.state_parents: dict[str, str | None] = {}  # run state id -> parent id (live runs)
        self._runs: dict[str, _Run] = {}  # least recently touched first (with a spill)
        self._live_calls = 0
        self._sessions: dict[str, _Session] = {}  # likewise
        self._session_items = 0
        # call_id -> the call(s) of live runs with it, any scope: one key bare, several in
        # a list (a spilled run's are in the spill)
        self._call_ids: dict[str, CallKey | list[CallKey]] = {}
        # the latest execution: (its call, time, result digest); a block of that call at
        # that very time is its output guardrail's, which withheld that result
        self._last_run: tuple[CallKey, int, bytes | None] | None = None
        self._persist_order = 0  # runs ranked by when they first count for the notice
        self._context_count = 0  # decisions read off a run context: how many, the first seqs
        self._context_first: list[int] = []
        # session -> (call_id, call item type, run) -> seq of each persisted call item
        # without its output there yet; run -> (session, call_id, item type) of those
        self._unanswered: dict[str, dict[tuple[str, str, str], int]] = {}
        self._unanswered_by_run: dict[str, set[tuple[str, str, str]]] = {}
        self._foreign: set[tuple[str, str]] = set()  # (run, call_id) reported foreign
        self._spill = spill
        self._live_limit = live_limit
        self._ended: str | None = None  # the run whose run_end the latest entry was
        self._retired = 0  # how many times state went to the spill (read views check it)
        self._touched_run: str | None = None  # the latest touched (last in its dict)
        self._touched_session: str | None = None

    @property
    def spill(self) -> Spill | None:
        """Where retired state goes (None: nowhere)."""
        return self._spill

    # -- where the state is ------------------------------------------------------------

    def _run(self, run_id: str, create: bool = False) -> _Run | None:
        """The live state of run ``run_id``, taken back from the spill if it is there;
        else a new one when ``create``, or None."""
        run = self._runs.get(run_id)
        if run is None:
            if self._spill is not None:
                run = self._revive(run_id)
            if run is None and create:
                run = self._runs[run_id] = _Run()
        elif self._spill is not None and run_id != self._touched_run:
            self._runs[run_id] = self._runs.pop(run_id)  # the most recently touched
        self._touched_run = run_id
        return run

    def _call(self, key: CallKey) -> CallState | None:
        """The live state of call ``key`` (its run taken back if spilled), or None."""
        run = self._run(key[0])
        return None if run is None else run.calls.get(key)

    def _add_call_id(self, key: CallKey) -> None:
        held = self._call_ids.get(key[2])  # one key bare, several in a list
        self._call_ids[key[2]] = key if held is None else [
            *(held if isinstance(held, list) else [held]), key]

    def _live_keys(self, call_id: str) -> list[CallKey]:
        held = self._call_ids.get(call_id)
        return [] if held is None else held if isinstance(held, list) else [held]

    def _revive(self, run_id: str) -> _Run | None:
        assert self._spill is not None
        taken = self._spill.take_run(run_id)
        if taken is None:
            return None
        state, parents = taken
        run: _Run = pickle.loads(state)  # this process's own bytes
        self._runs[run_id] = run
        self._live_calls += len(run.calls)
        for key in run.calls:
            self._add_call_id(key)
        self.state_parents.update(parents)
        return run

    def _retire(self, run_id: str) -> None:
        assert self._spill is not None
        run = self._runs.pop(run_id)
        self._live_calls -= len(run.calls)
        self._retired += 1
        for key in run.calls:
            keys = [k for k in self._live_keys(key[2]) if k[0] != run_id]
            if not keys:
                self._call_ids.pop(key[2], None)
            else:
                self._call_ids[key[2]] = keys[0] if len(keys) == 1 else keys
        parents = [(state, self.state_parents.pop(state)) for state in run.states]
        self._spill.put_run(
            run_id, pickle.dumps(run, protocol=5), run.persisted,
            ((call.seq, key[2], _scope_code(key[1])) for key, call in run.calls.items()),
            parents)

    def _session(self, session_id: str) -> _Session:
        """The live state of a session (taken back from the spill, or new)."""
        session = self._sessions.get(session_id)
        if session is None:
            taken = self._spill.take_session(session_id) if self._spill is not None else None
            session = _Session() if taken is None else pickle.loads(taken)
            self._sessions[session_id] = session
            self._session_items += session.size()
        elif self._spill is not None and session_id != self._touched_session:
            self._sessions[session_id] = self._sessions.pop(session_id)
        self._touched_session = session_id
        return session

    def _settle(self) -> None:
        """Between two entries (with a spill): retire the run that ended, and the runs and
        sessions least recently touched while more than the limit are held."""
        assert self._spill is not None
        if self._ended is not None:
            if self._ended in self._runs:
                self._retire(self._ended)
            self._ended = None
        limit = self._live_limit
        while len(self._runs) > 1 and (self._live_calls > limit or len(self._runs) > limit):
            self._retire(next(iter(self._runs)))
        while len(self._sessions) > 1 and (
                self._session_items > limit or len(self._sessions) > limit):
            session_id = next(iter(self._sessions))
            session = self._sessions.pop(session_id)
            self._session_items -= session.size()
            self._retired += 1
            if session.size():
                self._spill.put_session(session_id, pickle.dumps(session, protocol=5))

    def _state_parent(self, state: str) -> tuple[bool, str | None]:
        """``(True, parent)`` for a run state a ``run_state`` entry recorded, else
        ``(False, None)``."""
        if state in self.state_parents:
            return True, self.state_parents[state]
        return (False, None) if self._spill is None else self._spill.state_parent(state)

    def _peek(self, key: CallKey) -> CallState | None:
        """The state of call ``key`` for reading only: a spilled one is a copy, and its run
        stays spilled."""
        run = self._runs.get(key[0])
        if run is None and self._spill is not None:
            state = self._spill.run(key[0])
            run = None if state is None else pickle.loads(state)
        return None if run is None else run.calls.get(key)

    def _calls_with(self, call_id: str) -> list[CallState]:
        """Every call with ``call_id``, any run and scope, in log order, for reading only
        (a spilled run's calls are copies: see :meth:`_peek`)."""
        found = [self._runs[k[0]].calls[k] for k in self._live_keys(call_id)]
        if self._spill is not None:
            for _, run_id, scope in self._spill.call_runs(call_id):
                call = self._peek((run_id, _scope_of(scope), call_id))
                assert call is not None
                found.append(call)
            found.sort(key=lambda c: c.seq)
        return found

    def _approvals(self, call_id: str) -> list[Decision]:
        """Every approval naming ``call_id``, any run and scope, in log order (the rare
        paths that look for an approval made elsewhere filter these by run or scope)."""
        return sorted((d for call in self._calls_with(call_id) for d in call.decisions
                       if d.decision == "approve"), key=lambda d: d.seq)

    def _persist(self, run: _Run, wrote: bool) -> None:
        """Count ``run`` for the closing notice; ``wrote``: it persisted a session item."""
        if run.persisted is None:
            run.persisted = (self._persist_order, wrote)
            self._persist_order += 1
        elif wrote and not run.persisted[1]:
            run.persisted = (run.persisted[0], True)

    @property
    def calls(self) -> Mapping[CallKey, CallState]:
        """Every call's state: call identity -> :class:`CallState`, in log order (read
        only; a spilled call is read back as a copy)."""
        return _Calls(self)

    # -- helpers ---------------------------------------------------------------------

    def _report(self, rule: str, entry: Entry, detail: str, key: CallKey | None,
                compared: tuple[bytes, bytes] | None = None) -> None:
        run_id, scope, call_id = key if key else (entry.body.get("run_id"), (), None)
        self.findings.append(
            Finding(rule, entry.seq, detail, run_id, tuple(scope), call_id, compared))
        call = self._call(key) if key else None
        if call is not None:
            call.violations = (*call.violations, rule)

    def _find(self, body: dict) -> CallState | None:
        run = self._run(body["run_id"])
        if run is None:
            return None
        call = run.calls.get((body["run_id"], tuple(body["scope"]), body["call_id"]))
        if call is not None:
            return call
        top = run.calls.get((body["run_id"], (), body["call_id"]))
        nested_key = run.nested.get(body["call_id"])
        nested = run.calls[nested_key] if nested_key else None
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
        runs = [(run.persisted[0], run_id) for run_id, run in self._runs.items()
                if run.persisted is not None and not run.persisted[1]]
        total = len(runs)
        if self._spill is not None:
            spilled, first = self._spill.unpersisted(SHOWN)
            runs, total = runs + first, total + spilled
        if runs:
            notices.append(
                f"{total} run(s) executed tools but persisted no session item "
                f"({_first((run_id[:12] for _, run_id in sorted(runs)), total)}): "
                f"{TOOL_LINKAGE} and {OUTPUT_PROVENANCE} do not apply to them (no session, "
                "or history kept by the provider: the calls' response ids link it)")
        if self._context_count:
            notices.append(
                f"{self._context_count} decision(s) read off the run context, not "
                f"made through the recorder (approver {CONTEXT_APPROVER}; seq "
                f"{_first(map(str, self._context_first), self._context_count)})")
        return notices

    def find_call(self, run_id: str, scope: tuple[str, ...], call_id: str) -> CallState | None:
        """The call the rules attribute evidence naming this identity to: the exact
        ``(run_id, scope, call_id)``, else the latest call with that ``(run_id, call_id)``
        in any scope; None when no such call is recorded (no rule state changes)."""
        exact = self._call((run_id, scope, call_id))  # the common case, without a body
        return exact or self._find({"run_id": run_id, "scope": scope, "call_id": call_id})

    def _sticky(self, call: CallState) -> list[Decision]:
        """The sticky decisions on the tool of ``call``, in its run and scope."""
        return self._runs[call.key[0]].sticky.get((call.key[1], call.agent, call.tool), [])

    def _effective(self, call: CallState) -> Decision | None:
        """The latest explicit decision on ``call``, else the latest sticky one on its tool
        (whatever run state either was made on)."""
        if call.decision is not None:
            return call.decision
        sticky = self._sticky(call)
        return sticky[-1] if sticky else None

    def _holds(self, decision: Decision, leg: str | None) -> bool:
        """True when ``decision`` holds in a leg resumed from run state ``leg`` (None: a
        fresh leg): it was made on ``leg`` or an ancestor of it. A decision or leg whose
        state no ``run_state`` entry records holds (lineage unknown)."""
        made_on = decision.run_state
        if made_on is None:
            return True
        parents = self.state_parents if self._spill is None else _Parents(self)
        if made_on not in parents or (leg is not None and leg not in parents):
            return True
        return made_on in ancestry(parents, leg)

    def _in_force(self, call: CallState, leg: str | None) -> Decision | None:
        """The decision that holds for ``call`` in a leg resumed from ``leg``: the latest
        explicit one that holds there, else the latest sticky one on its tool that does."""
        for decision in reversed(call.decisions):
            if self._holds(decision, leg):
                return decision
        for decision in reversed(self._sticky(call)):
            if self._holds(decision, leg):
                return decision
        return None

    # -- entry kinds -----------------------------------------------------------------

    def feed(self, entry: Entry) -> None:
        """Apply every rule to one decoded entry (``seq`` order, none skipped)."""
        handler = _HANDLERS.get(entry.kind)
        if handler is not None:
            handler(self, entry)
            limit = self._live_limit
            if self._spill is not None and (
                    self._ended is not None or len(self._runs) > limit
                    or self._live_calls > limit or self._session_items > limit
                    or len(self._sessions) > limit):
                self._settle()

    def _on_call(self, entry: Entry) -> None:
        b = entry.body
        scope = tuple(b["scope"])
        run_id = sys.intern(b["run_id"])  # shared by every call of the run
        run = self._run(run_id, create=True)
        assert run is not None
        key = (run_id, run.scope(scope), b["call_id"])
        if key in run.calls:
            self.notices.append(f"seq {entry.seq}: call {b['call_id']} recorded twice")
            return
        run.calls[key] = CallState(
            key, entry.seq, entry.time, sys.intern(b["agent"]), sys.intern(b["tool"]),
            b["args_digest"], b["needs_approval"],
        )
        self._live_calls += 1
        if scope:
            run.nested[b["call_id"]] = key
        self._add_call_id(key)

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
        if state is not None and not self._state_parent(state)[0]:
            self.notices.append(
                f"seq {entry.seq}: decision on run state {state}, which no run_state entry records"
            )
        run = self._runs[call.key[0]]
        shown = b["args_digest"]
        decision = Decision(
            # shared strings, and the call's own digest object when equal: one copy a call
            sys.intern(b["decision"]), call.args_digest if shown in (None, call.args_digest)
            else shown, entry.seq,
            sys.intern(b["approver"]), entry.time, b["always"], call.key[0],
            run.scope(tuple(b["scope"])), state,
        )
        call.decisions = (*call.decisions, decision)
        if b["approver"] == CONTEXT_APPROVER:
            self._context_count += 1
            if len(self._context_first) < SHOWN:
                self._context_first.append(entry.seq)
        if b["always"]:
            run.sticky.setdefault(
                (call.key[1], b["agent"] or call.agent, b["tool"] or call.tool), []
            ).append(decision)
        approved = run.approved
        if decision.decision == "approve":
            if not call.executions:  # a late approval of a call that already ran awaits nothing
                approved[call.key] = decision
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
        known, first = self._state_parent(state)
        if not known:
            self.state_parents[state] = parent
            run = self._run(entry.body["run_id"], create=True)
            assert run is not None
            run.states.append(state)
        elif first != parent:
            self.notices.append(
                f"seq {entry.seq}: run state {state} names parent {parent}, its first entry "
                f"{first}"
            )

    def _check_interruption(self, entry: Entry, pending: dict) -> None:
        """``foreign_interruption`` if the run of ``entry`` (a ``run_state``) never made the
        call ``pending`` (one of its interruptions) waits on."""
        run_id, call_id, shown = entry.body["run_id"], pending["call_id"], pending["args_digest"]
        if (run_id, call_id) in self._foreign:
            return
        scope = tuple(pending["scope"]) if pending["scope"] is not None else None
        own = (self._call((run_id, scope, call_id)) if scope is not None
               else self._find({"run_id": run_id, "scope": (), "call_id": call_id}))
        if own is not None and shown in (None, own.args_digest):
            return
        self._foreign.add((run_id, call_id))
        others = [c for c in self._calls_with(call_id)
                  if c.key[0] != run_id and shown in (None, c.args_digest)]
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
            run = self._run(b["run_id"], create=True)
            assert run is not None
            self._persist(run, False)
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
        self._last_run = (key, entry.time, b["result_digest"])
        if b["result_digest"] is not None:
            call.held_results = _held(call.held_results, b["result_digest"], unique=True)
            if b["result_digest"] in call.withheld:  # returned again, not withheld (yet)
                call.withheld = tuple(d for d in call.withheld if d != b["result_digest"])
        approved = self._runs[key[0]].approved
        if key in approved and self._holds(approved[key], leg):
            del approved[key]

    def _unauthorised(self, entry: Entry, call: CallState, leg: str | None) -> None:
        """Report a gated call run with no decision holding in its leg, by why."""
        key = call.key
        elsewhere = [d for d in (*call.decisions, *self._sticky(call)) if d.decision == "approve"]
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
            d for d in self._approvals(key[2]) if d.run_id == key[0] and d.scope != key[1]
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
        approvals = [d for d in self._approvals(key[2]) if d.scope == key[1]]
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
            if last is not None and last[0] == call.key and last[1] == entry.time and last[2]:
                call.withheld = _added(call.withheld, last[2])
            self._runs[call.key[0]].approved.pop(call.key, None)  # attempted, and blocked
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
                self._runs[call.key[0]].approved.pop(call.key, None)  # attempted, and stopped

    def _on_session_item(self, entry: Entry) -> None:
        b = entry.body
        held = self._session(b["session_id"])
        size = held.size()
        if b["run_id"]:
            run = self._run(b["run_id"], create=True)
            assert run is not None
            self._persist(run, True)
            held.writers.add(sys.intern(b["run_id"]))
        session = held.items
        call_id, kind = b["call_id"], b["item_type"]
        if b["op"] == "clear":
            session.clear()
            for _, _, run_id in self._unanswered.pop(b["session_id"], {}):
                pending = self._pending_of(run_id)
                pending.difference_update([k for k in pending if k[0] == b["session_id"]])
                self._drop_pending(run_id)
        elif kind in _CALL_ITEMS and call_id is not None:
            known = self._output_call(b)[0]  # traced as an output is: through the session
            if known is not None:
                call_id = known.key[2]  # the call's own string: one copy per call
            session[call_id, kind] += 1 if b["op"] == "add" else -1
            if b["op"] == "add" and known is not None:  # a call a run made, not input
                run_id = known.key[0]
                self._unanswered.setdefault(b["session_id"], {})[call_id, kind, run_id] = \
                    entry.seq
                self._pending_of(run_id).add((b["session_id"], call_id, kind))
            elif b["op"] != "add":
                self._answered(b["session_id"], call_id, kind)
        elif kind in CALL_OUTPUTS and call_id and b["op"] == "add":
            self._answered(b["session_id"], call_id, CALL_OUTPUTS[kind])
            self._check_output(entry, session[call_id, CALL_OUTPUTS[kind]] > 0)
        self._session_items += held.size() - size

    def _pending_of(self, run_id: str) -> set[tuple[str, str, str]]:
        """(session, call_id, item type) of each call item ``run_id`` persisted without its
        output there yet (drop it with :meth:`_drop_pending` once empty)."""
        return self._unanswered_by_run.setdefault(run_id, set())

    def _drop_pending(self, run_id: str) -> None:
        if run_id in self._unanswered_by_run and not self._unanswered_by_run[run_id]:
            del self._unanswered_by_run[run_id]

    def _answered(self, session_id: str, call_id: str, kind: str) -> None:
        """Every run's call item ``call_id`` of ``kind`` in ``session_id`` has its output
        there (or the item was removed)."""
        waiting = self._unanswered.get(session_id, {})
        for key in [k for k in waiting if k[:2] == (call_id, kind)]:
            del waiting[key]
            self._pending_of(key[2]).discard((session_id, call_id, kind))
            self._drop_pending(key[2])
        if not waiting:
            self._unanswered.pop(session_id, None)

    def _unanswered_at_end(self, entry: Entry) -> None:
        """``output_not_persisted`` for each call item the run of ``entry`` (a ``run_end``
        that completed) persisted without its output."""
        run_id = entry.body["run_id"]
        for session_id, call_id, kind in sorted(self._unanswered_by_run.pop(run_id, ())):
            waiting = self._unanswered.get(session_id, {})
            seq = waiting.pop((call_id, kind, run_id), None)
            if not waiting:
                self._unanswered.pop(session_id, None)
            if seq is None:
                continue
            call = self._call((run_id, (), call_id))
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
        exact = self._call((b["run_id"], tuple(b["scope"]), b["call_id"]))
        if exact is not None:
            return exact, ""
        made = self._calls_with(b["call_id"])
        if not made:
            return None, (f"output of a call that was never recorded (no call {b['call_id']} "
                          "was recorded in any run)")
        writers = self._session(b["session_id"]).writers
        linked = [c for c in made if c.key[0] in writers]
        found = linked or made
        if len(found) == 1:
            return self._call(found[0].key), ""  # the live one (a copy was read)
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
        run = self._runs[call.key[0]]
        if run.persisted is not None:  # a run that wrote into a session, by this item
            self._persist(run, True)
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
        run = self._runs[run_id]
        inner = (*scope, f"{run.calls[key].tool}:{call_id}")
        for nested in run.nested.values():
            call = run.calls[nested]
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
            self._ended = b["run_id"]  # retired once this entry is done (with a spill)
        run = self._run(b["run_id"])
        if run is None:
            return
        approved, leg = run.approved, b["run_state"]
        for key in sorted(approved, key=lambda k: run.calls[k].seq):
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

    # -- plain-data state ------------------------------------------------------------

    def _all_runs(self, written_only: bool = False) -> Iterator[tuple[str, _Run]]:
        """Every run's state: the live ones, then copies of the spilled ones (those
        written to the spill only, when ``written_only``)."""
        yield from self._runs.items()
        if self._spill is not None:
            spill = self._spill
            for run_id in spill.written_run_ids() if written_only else spill.run_ids():
                yield run_id, pickle.loads(spill.run(run_id) or b"")

    def _all_sessions(self, written_only: bool = False) -> Iterator[tuple[str, _Session]]:
        yield from self._sessions.items()
        if self._spill is not None:
            spill = self._spill
            for session_id, state in (spill.written_sessions() if written_only
                                      else spill.sessions()):
                yield session_id, pickle.loads(state)

    def _run_rows(self, run_id: str, run: _Run) -> dict[str, list[tuple[StateValue, ...]]]:
        """The state rows of one run: its ``sticky``, ``approved``, ``runs``,
        ``run_states``, ``calls`` (by seq), ``call_values`` and ``decisions`` (call by
        call)."""
        rows: dict[str, list[tuple[StateValue, ...]]] = {
            name: [] for name in ("sticky", "approved", "runs", "run_states", "calls",
                                  "call_values", "decisions")}
        for (at, agent, tool), sticky in run.sticky.items():
            rows["sticky"] += [(run_id, _scope_code(at), agent, tool, d.seq) for d in sticky]
        rows["approved"] += [(run_id, _scope_code(key[1]), key[2], d.seq)
                             for key, d in run.approved.items()]
        if run.persisted is not None:
            rows["runs"].append((run_id, *run.persisted))
        for state in run.states:
            rows["run_states"].append((state, self._state_parent(state)[1], run_id))
        for call in sorted(run.calls.values(), key=operator.attrgetter("seq")):
            call_id = call.key[2]
            scope = _scope_code(call.key[1])
            rows["calls"].append((
                run_id, scope, call_id, call.seq, call.time, call.agent, call.tool,
                call.args_digest, call.needs_approval, call.policy_result,
                None if call.authorized_by is None else call.authorized_by.seq))
            values: tuple[tuple[StateValue, ...], ...] = (
                call.rejection_messages, call.blocks, call.withheld, call.violations,
                call.executions, call.results, call.persisted)
            for name, held in zip(_CALL_VALUES, values, strict=True):
                rows["call_values"] += [(run_id, scope, call_id, name, v) for v in held]
            rows["decisions"] += [
                (d.seq, run_id, scope, call_id, d.decision, d.args_digest, d.approver, d.time,
                 d.always, _scope_code(d.scope), d.run_state) for d in call.decisions]
        return rows

    def _engine_rows(self) -> dict[str, list[tuple[StateValue, ...]]]:
        """The state rows held outside runs and sessions (bounded by findings, pending
        session items and notices, not by calls)."""
        rows: dict[str, list[tuple[StateValue, ...]]] = {}
        rows["unanswered"] = [(session_id, call_id, kind, run_id, seq)
                              for session_id, waiting in sorted(self._unanswered.items())
                              for (call_id, kind, run_id), seq in waiting.items()]
        rows["foreign"] = sorted(self._foreign)
        rows["findings"] = [
            (f.rule, f.seq, f.detail, f.run_id, _scope_code(f.scope), f.call_id,
             *(f.compared or (None, None))) for f in self.findings]
        rows["notices"] = [(notice,) for notice in self.notices]
        rows["counters"] = [("persist_order", self._persist_order),
                            ("context_decisions", self._context_count)]
        rows["last_run"] = []
        if self._last_run is not None:
            last, time, digest = self._last_run
            rows["last_run"] = [(last[0], _scope_code(last[1]), last[2], time, digest)]
        rows["context_decisions"] = [(seq,) for seq in self._context_first]
        return rows

    def state_row_batches(self, written_only: bool = False,
                          ) -> Iterator[tuple[str, list[tuple[StateValue, ...]]]]:
        """The rows of :meth:`state_rows`, a run or a session at a time: ``(table, rows)``
        pairs, a table named many times, its rows in no canonical order (a reader sorts
        what it needs: :meth:`from_state_rows` wants ``decisions`` and ``calls`` by seq
        within a run, and they are). Memory: one run's rows at a time; spilled runs and
        sessions are read back one by one. ``written_only``: the runs and sessions only
        of those live or written to the spill by this engine
        (:meth:`~evidence_ledger.verify.spill.Spill.written_run_ids`), not those a spill
        over stored state still holds as stored.
        """
        for run_id, run in self._all_runs(written_only):
            yield from self._run_rows(run_id, run).items()
        for session_id, session in self._all_sessions(written_only):
            yield "sessions", [(session_id, *item, count)
                               for item, count in session.items.items()]
            yield "session_runs", [(session_id, run_id) for run_id in sorted(session.writers)]
        yield from self._engine_rows().items()

    def state_rows(self) -> dict[str, list[tuple[StateValue, ...]]]:
        """The whole rule state as plain rows: table -> rows, the tables and columns of
        :data:`STATE_TABLES` (every table present, maybe empty), each row a tuple of
        ``str`` / ``int`` / ``bytes`` / None, in a canonical order (for storing in tables,
        e.g. the index's; :meth:`from_state_rows` reads them back). Spilled state is
        included. Memory: the rows of every call, about as much as the state itself
        (:meth:`state_row_batches` streams them)."""
        rows: dict[str, list[tuple[StateValue, ...]]] = {name: [] for name in STATE_TABLES}
        for _, run_rows in sorted(((run_id, self._run_rows(run_id, run))
                                   for run_id, run in self._all_runs()),
                                  key=operator.itemgetter(0)):
            for name, held in run_rows.items():
                rows[name] += held
        rows["runs"].sort(key=operator.itemgetter(1))
        rows["calls"].sort(key=operator.itemgetter(3))
        call_seqs: dict[tuple[StateValue, ...], Any] = {row[:3]: row[3] for row in rows["calls"]}
        rows["call_values"].sort(key=lambda row: call_seqs[row[:3]])  # stable: field order
        rows["decisions"].sort(key=operator.itemgetter(0))
        for session_id, session in sorted(self._all_sessions(), key=operator.itemgetter(0)):
            rows["sessions"] += [(session_id, *item, count)
                                 for item, count in session.items.items()]
            rows["session_runs"] += [(session_id, run_id) for run_id in sorted(session.writers)]
        rows.update(self._engine_rows())
        return rows

    @classmethod
    def from_state_rows(
        cls, tables: Mapping[str, Iterable[Sequence[StateValue]]], spill: Spill | None = None,
        live_limit: int = LIVE_LIMIT,
    ) -> RuleEngine:
        """An engine in the state :meth:`state_rows` gave (its ``state_rows()`` are equal
        to them, and it goes on to find what the engine they came from would), with
        ``spill`` and ``live_limit`` as :class:`RuleEngine` takes them.

        Args:
            tables: table -> rows as :meth:`state_rows` gives them (rows may be any
                sequences; a table left out is empty).

        Raises:
            ValueError, KeyError, TypeError: rows that :meth:`state_rows` did not make.
        """
        return cls.from_state_parts([tables], spill, live_limit)

    @classmethod
    def from_state_parts(
        cls, parts: Iterable[Mapping[str, Iterable[Sequence[StateValue]]]],
        spill: Spill | None = None, live_limit: int = LIVE_LIMIT,
    ) -> RuleEngine:
        """As :meth:`from_state_rows`, from the rows split into parts by run: each run's
        rows (in the tables with a ``run_id`` column) all in one part, each table outside
        runs whole in one part. With a ``spill``, runs and sessions past ``live_limit``
        are retired after each part: memory is one part's rows and state beyond the
        limit, not the whole state.

        Raises:
            ValueError, KeyError, TypeError: rows that :meth:`state_rows` did not make.
        """
        engine = cls(spill, live_limit)
        for tables in parts:
            engine._load_rows(tables)
            if spill is not None:
                engine._settle()
        return engine

    def _load_rows(self, tables: Mapping[str, Iterable[Sequence[StateValue]]]) -> None:
        """Add the state in ``tables`` (see :meth:`from_state_parts`)."""
        engine = self

        def table(name: str) -> Iterable[Sequence[Any]]:
            return tables.get(name, ())

        def run_of(run_id: str) -> _Run:
            run = engine._run(sys.intern(run_id), create=True)
            assert run is not None
            return run

        decisions: dict[int, Decision] = {}
        owned: dict[CallKey, list[Decision]] = {}
        for seq, run_id, call_scope, call_id, kind, args, approver, time, always, scope, \
                state in table("decisions"):
            run = run_of(run_id)
            decisions[seq] = Decision(sys.intern(kind), args, seq, sys.intern(approver), time,
                                      always, sys.intern(run_id), run.scope(_scope_of(scope)),
                                      state)
            owned.setdefault((run_id, _scope_of(call_scope), call_id), []).append(decisions[seq])
        values: dict[CallKey, dict[str, list[Any]]] = {}
        for run_id, scope, call_id, name, value in table("call_values"):
            held = values.setdefault((run_id, _scope_of(scope), call_id), {})
            held.setdefault(name, []).append(value)
        for run_id, scope, call_id, seq, time, agent, tool, args, needs, policy, \
                authorized in table("calls"):
            run = run_of(run_id)
            key = (sys.intern(run_id), run.scope(_scope_of(scope)), call_id)
            held = values.get(key, {})
            run.calls[key] = CallState(
                key, seq, time, sys.intern(agent), sys.intern(tool), args, needs, policy,
                tuple(owned.get(key, ())), None if authorized is None else decisions[authorized],
                *(tuple(held.get(name, ())) for name in _CALL_VALUES[:4]),
                *(_bare(held.get(name, ())) for name in _CALL_VALUES[4:]))
            engine._live_calls += 1
            if key[1]:
                run.nested[call_id] = key
            engine._add_call_id(key)
        for run_id, scope, agent, tool, seq in table("sticky"):
            run_of(run_id).sticky.setdefault((_scope_of(scope), agent, tool), []).append(
                decisions[seq])
        for run_id, scope, call_id, seq in table("approved"):
            run = run_of(run_id)
            run.approved[run_id, run.scope(_scope_of(scope)), call_id] = decisions[seq]
        for run_id, order, persisted in table("runs"):
            run_of(run_id).persisted = (order, bool(persisted))
        for state, parent, run_id in table("run_states"):
            engine.state_parents[state] = parent
            run_of(run_id).states.append(state)
        for session_id, call_id, kind, count in table("sessions"):
            engine._session(session_id).items[call_id, kind] = count
        for session_id, run_id in table("session_runs"):
            engine._session(session_id).writers.add(sys.intern(run_id))
        engine._session_items = sum(s.size() for s in engine._sessions.values())
        for session_id, call_id, kind, run_id, seq in table("unanswered"):
            engine._unanswered.setdefault(session_id, {})[call_id, kind, run_id] = seq
            engine._pending_of(run_id).add((session_id, call_id, kind))
        engine._foreign.update((run_id, call_id) for run_id, call_id in table("foreign"))
        engine.findings += [
            Finding(rule, seq, detail, run_id, _scope_of(scope), call_id,
                    None if expected is None else (expected, got))
            for rule, seq, detail, run_id, scope, call_id, expected, got in table("findings")]
        engine.notices += [notice for notice, in table("notices")]
        counters: dict[str, int] = {name: value for name, value in table("counters")}
        engine._persist_order = counters.get("persist_order", engine._persist_order)
        engine._context_count = counters.get("context_decisions", engine._context_count)
        engine._context_first += [seq for seq, in table("context_decisions")]
        for run_id, scope, call_id, time, digest in table("last_run"):
            engine._last_run = ((run_id, _scope_of(scope), call_id), time, digest)


_HANDLERS: dict[str, Callable[[RuleEngine, Entry], None]] = {
    kind: getattr(RuleEngine, "_on_" + kind) for kind in KINDS if hasattr(RuleEngine, "_on_" + kind)
}
"""Entry kind -> the :class:`RuleEngine` method that applies the rules to it (kinds no rule
reads have none)."""


def encoded_run(tables: Mapping[str, Iterable[Sequence[StateValue]]], run_id: str,
                ) -> tuple[bytes, list[tuple[str, str | None]]] | None:
    """One run's state rows (the tables with a ``run_id`` column, as
    :meth:`RuleEngine.state_rows` gives them, for that run only) in the form a
    :class:`~evidence_ledger.verify.spill.Spill` keeps it: the encoded run and its run
    states ``(state_id, parent)``; None when the rows hold no such run.

    Raises:
        ValueError, KeyError, TypeError: rows that :meth:`RuleEngine.state_rows` did not make.
    """
    engine = RuleEngine.from_state_rows(tables)
    run = engine._runs.get(run_id)
    if run is None:
        return None
    return (pickle.dumps(run, protocol=5),
            [(state, engine.state_parents[state]) for state in run.states])


def encoded_session(items: Iterable[tuple[str, str, int]], writers: Iterable[str]) -> bytes:
    """A session's state rows (``sessions`` rows ``(call_id, item_type, count)`` and the
    ``session_runs`` run ids, as :meth:`RuleEngine.state_rows` gives them without the
    session id) in the form a :class:`~evidence_ledger.verify.spill.Spill` keeps it."""
    session = _Session()
    for call_id, kind, count in items:
        session.items[call_id, kind] = count
    session.writers.update(sys.intern(run_id) for run_id in writers)
    return pickle.dumps(session, protocol=5)


def _bare(items: Sequence[T]) -> T | tuple[T, ...] | None:
    """``items`` as :func:`_held` keeps them: None, one bare, or a tuple."""
    return None if not items else items[0] if len(items) == 1 else tuple(items)


class _Parents:
    """Run state -> parent over the live run states and the spilled ones (for
    :func:`~evidence_ledger.verify.lineage.ancestry`)."""

    def __init__(self, engine: RuleEngine) -> None:
        self._engine = engine

    def __contains__(self, state: object) -> bool:
        return isinstance(state, str) and self._engine._state_parent(state)[0]

    def get(self, state: str, /) -> str | None:
        return self._engine._state_parent(state)[1]


class _Calls(Mapping[CallKey, CallState]):
    """:attr:`RuleEngine.calls`: the live calls as they are, spilled ones read back (a few
    spilled runs are kept decoded while they are read in turn)."""

    KEPT = 16

    def __init__(self, engine: RuleEngine) -> None:
        self._engine = engine
        self._decoded: dict[str, _Run] = {}
        self._retired = engine._retired

    def __getitem__(self, key: CallKey) -> CallState:
        engine = self._engine
        run = engine._runs.get(key[0]) if type(key) is tuple and len(key) == 3 else None
        if run is None and engine._spill is not None and type(key) is tuple and len(key) == 3:
            if self._retired != engine._retired:  # spilled state changed since decoded
                self._decoded, self._retired = {}, engine._retired
            run = self._decoded.get(key[0])
            if run is None:
                state = engine._spill.run(key[0])
                if state is None:
                    raise KeyError(key)
                if len(self._decoded) >= self.KEPT:
                    del self._decoded[next(iter(self._decoded))]
                run = self._decoded[key[0]] = pickle.loads(state)
        if run is None or key not in run.calls:
            raise KeyError(key)
        return run.calls[key]

    def __iter__(self) -> Iterator[CallKey]:
        engine = self._engine
        live = sorted((call.seq, key) for run in engine._runs.values()
                      for key, call in run.calls.items())
        spilled: Iterable[tuple[int, CallKey]] = () if engine._spill is None else (
            (seq, (run_id, _scope_of(scope), call_id))
            for seq, run_id, scope, call_id in engine._spill.call_seqs())
        return (key for _, key in heapq.merge(live, spilled))

    def __len__(self) -> int:
        engine = self._engine
        return engine._live_calls + (0 if engine._spill is None else engine._spill.call_count())
