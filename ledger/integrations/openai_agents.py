"""Record runs of the OpenAI Agents SDK (``openai-agents`` 0.20 - 0.24) into a ledger.

Usage::

    recorder = Recorder("./.evidence")
    result = await recorder.run(agent, "hello", session=SQLiteSession("s1", "chat.db"))
    if result.interruptions:
        state = result.to_state()      # or RunState.from_json(agent, json) in another process
        for item in state.get_interruptions():
            recorder.approve(state, item, approver="alice", reason="checked")
        result = await recorder.run(agent, state, session=SQLiteSession("s1", "chat.db"))

:meth:`Recorder.run` and :meth:`Recorder.run_streamed` take the arguments of
``Runner.run`` / ``Runner.run_streamed``. Before each run they :func:`attach` recording
to the starting agent and to every agent reachable from it through ``Agent.as_tool`` or
an ``Agent`` listed in ``handoffs`` (call :func:`attach` on the target of a ``Handoff``
object yourself), and wrap the ``session`` argument in a :class:`RecordedSession`.
What is recorded, and from where:

- ``call``: each ``function_call`` in a model response (``on_llm_end`` agent hook);
- ``tool_policy``: each per-call result of a callable ``needs_approval`` (wrapped);
- ``decision``: :meth:`Recorder.approve` / :meth:`Recorder.reject`, which then apply it
  (``RunState.approve`` / ``reject`` call no callback);
- ``execution``: each finished function tool (``on_tool_end`` agent hook), its result
  converted the way the SDK converts it for the ``function_call_output`` item;
- ``guardrail``: a tool input guardrail that did not allow a call (wrapped: the SDK fires
  no hook for it);
- ``session_item``: each item the wrapped session accepted or removed;
- ``run_end``: the end of every leg of a run (``completed``, ``interrupted``, ``failed``);
- ``run_state``: each ``RunState`` the recorder meets (see *Run states* below).

Agent hooks the user set are kept and still called (after recording). Hooks given to
``Runner.run`` do not reach agents run through ``Agent.as_tool``, hence agent hooks.

Durability: ``Recorder(ledger, durability="group")`` (the default) takes no sync on the
agent's path. The evidence of a leg (every entry above that a hook, a wrapped tool or
the wrapped session produces while the leg runs, and the ``loaded`` / ``resume`` run
states of its start) is queued, in the order it was produced, and a flusher thread
appends it in groups: what is queued, at most :data:`GROUP_WRITES` writes or what
arrived within :data:`GROUP_WINDOW` seconds, as one atomic group (``writer.atomic()``:
one lock, one sync), one group at a time. The guarantee:

- :meth:`Recorder.run` returns, and ``stream_events()`` of :meth:`Recorder.run_streamed`
  ends, only after the leg's evidence and its ``run_end`` are durable;
- :meth:`Recorder.approve` / :meth:`Recorder.reject` append what is still queued, then
  record the decision durably, then apply it; ``to_state()`` / ``to_json()`` record
  their ``run_state`` entries durably before returning; so does a session write outside
  a leg; :meth:`Recorder.flush` appends what is queued on demand;
- what is durable is always a prefix, in order, of the evidence produced: a crash in
  the middle of a leg loses at most the tail of that leg not yet appended (at most the
  group being synced and what was queued after it), never an entry acknowledged by the
  return of one of the calls above, and never the ledger's integrity (one group is
  written and synced at a time; a torn group is cut back by the next writer);
- if the flusher cannot append a group (an I/O error, a full disk, a lock time-out), no
  entry of that group is appended and what was queued after it is dropped; every leg
  running then records nothing more (so the prefix rule holds per leg): its next hook
  raises :class:`~ledger.errors.StorageError` into the SDK, and its end raises
  :class:`~ledger.errors.StorageError` after recording its ``run_end`` as ``failed`` if
  the storage takes it. A failure is never swallowed: the first durable point above to
  come raises it, and the end of every leg it hit;
- entry times are taken when the evidence is produced, not when it is appended.

One queue per :class:`EvidenceWriter`, shared by every recorder and session on it, keeps
the order; lookups of recorded calls (the scope of an interruption to approve, of a
state's pending calls) happen once the calls before them are appended. The flusher is a
daemon thread, started on demand, that ends after :data:`FLUSHER_IDLE` seconds without
evidence; at interpreter exit, evidence still queued (a leg that never ended) is
appended. ``durability="entry"`` appends every entry as its own durable group before its
hook returns (one sync per entry on the agent's path). Use the recorder, not
``recorder.writer`` directly, while a leg runs.

Run id: a fresh run gets a random id (32 hex digits), stored in the run context under
:data:`RUN_ID_KEY`: a ``None`` context becomes ``{RUN_ID_KEY: run_id}``, a mutable mapping
gets the key added (so use one context mapping per run). The SDK serializes mapping
contexts into ``RunState.to_json()`` and restores them in ``RunState.from_json()``, so a
resumed leg - in this process or another one - finds the same run id there. Other context
types are refused (:class:`~ledger.errors.UsageError`).

Run states: a paused run becomes a ``RunState`` that apps fork, serialise, approve on one
copy and resume in another process, or retry; a ``call_id`` alone does not say which
copy a decision was made on. So every ``RunState`` object the recorder meets gets a
*state id* (32 hex digits) and a ``run_state`` entry per event:

- ``to_state``: ``result.to_state()`` on a result of :meth:`Recorder.run` /
  :meth:`Recorder.run_streamed` (the recorder wraps it) makes a new state whose parent
  is the state the leg resumed from (None for a leg that started fresh): two
  ``to_state()`` calls on one result give two siblings with the same parent;
- ``to_json``: ``state.to_json()`` (and ``to_string()``) of such a state; the output
  carries the state id in its context mapping under :data:`RUN_STATE_KEY`;
- ``loaded``: a state the recorder did not make (one restored with
  ``RunState.from_json`` / ``from_string``, in this process or another, or a copy of
  a state object), met at :meth:`Recorder.approve`, :meth:`Recorder.reject` or a
  resume: it gets a new id, its parent being the id its JSON carried (or the copied
  state's), so two loads of one JSON are siblings too;
- ``resume``: a leg resumed from it.

(``to_json`` events go to the ledger of the recorder that last met the state.)

Each entry holds the run id, the state id, its parent, the SHA-256 of the RFC 8785
JSON of ``to_json()`` at that moment (None if the SDK cannot serialise it) and the
pending interruptions (call_id, tool, agent, scope, arguments digest). Decisions carry
the id of the state they were made on; executions and ``run_end`` entries the id of
the state their leg resumed from (None for a fresh leg). The id is written into the
``to_json()`` output, not into the live context mapping: the SDK gives sibling states
one shared mapping. To do so the recorder registers the object (by identity, weakly),
notes the id in an attribute of the object (``_evidence_ledger_state_id``, so that a
copy names its original), and swaps its class for a subclass of ``RunState`` with the
same name whose ``to_json()`` adds the id and records the event; nothing else about
the state changes.

Scope: a call's identity is ``(run_id, scope, call_id)``. ``scope`` is empty at the top
agent; inside an agent run through ``Agent.as_tool`` it gains the edge
``"<tool name>:<call_id of the tool call>"``, e.g. ``["ask_expert:call_7"]``, one edge per
level of nesting. The edge is set while the agent tool runs (a context variable), so the
nested agent's calls, executions and policies carry it, on resume as well.

Limits: attached agents must run through a recorder (their hooks raise
:class:`~ledger.errors.UsageError` otherwise); a session write outside a recorded run is
recorded with ``run_id=""``; a streamed run whose events are not read to the end is
recorded as ``failed``; handoff calls are recorded as calls but not as executions; the
run states of agents run through ``Agent.as_tool`` are the SDK's own and not recorded
(their calls are, under the top-level run's state).
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import os
import threading
import time
import traceback
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, MutableMapping
from contextvars import ContextVar
from dataclasses import dataclass, replace
from operator import methodcaller
from typing import Any, TypeVar

from agents import (
    Agent,
    AgentHooks,
    FunctionTool,
    ItemHelpers,
    ModelResponse,
    RunContextWrapper,
    Runner,
    RunResult,
    RunResultStreaming,
    RunState,
    Session,
    ToolInputGuardrail,
)
from agents.exceptions import UserError
from agents.items import ToolApprovalItem
from agents.stream_events import StreamEvent
from agents.tool import DEFAULT_APPROVAL_REJECTION_MESSAGE, Tool
from agents.tool_context import ToolContext
from agents.tool_guardrails import ToolGuardrailFunctionOutput, ToolInputGuardrailData
from openai.types.responses import ResponseFunctionToolCall

from ..errors import StorageError, UsageError
from ..log import Ledger
from ..writer import EvidenceWriter, Interruption, Scope

__all__ = [
    "RUN_ID_KEY", "RUN_STATE_KEY", "RecordedSession", "Recorder", "attach", "persisted_output",
    "state_id", "state_run_id",
]

RUN_ID_KEY = "evidence_ledger_run_id"
"""Key of the run id in a mapping run context."""

RUN_STATE_KEY = "evidence_ledger_run_state"
"""Key of the run state id in the context of a serialised ``RunState`` (``to_json()``)."""

_MARK = "_evidence_ledger_attached"
_T = TypeVar("_T")

# -- group commit ------------------------------------------------------------------------

Write = Callable[[EvidenceWriter], object]
"""Appends one or more entries through the writer it is given (called inside ``atomic()``)."""

DURABILITY = ("group", "entry")
GROUP_WRITES = 256
"""At most this many queued writes go into one group the flusher appends."""
GROUP_WINDOW = 0.010
"""Seconds the flusher waits, after the first queued write, for more to join its group."""
FLUSHER_IDLE = 1.0
"""Seconds without evidence after which a flusher thread ends (a new one starts on demand)."""

_JOURNAL_ATTR = "_evidence_ledger_journal"
_JOURNALS_LOCK = threading.Lock()
_LIVE_JOURNALS: weakref.WeakSet[_Journal] = weakref.WeakSet()


class _Journal:
    """The evidence queue of one :class:`EvidenceWriter` (shared by every recorder on it).

    Writes are applied in the order they were queued or committed. Queued writes are
    appended by a daemon flusher thread, up to :data:`GROUP_WRITES` of them (or what
    arrived within :data:`GROUP_WINDOW`) as one atomic, synced group. Whoever appends
    holds the *turn* (``_busy``), so groups never interleave: the flusher, or a caller
    of :meth:`commit` / :meth:`read` that appends what is queued itself rather than
    wait for the flusher.

    If the flusher cannot append a group, nothing of it is appended and every write
    queued after it is dropped (what is durable stays a prefix of what was queued); the
    failure is kept until :meth:`settle`, :meth:`commit` or :meth:`read` reports it,
    and :meth:`submit` refuses new writes until then. :attr:`failures` counts them, so
    that every leg running when one happened learns of it (see :meth:`settle`).
    """

    def __init__(self, writer: EvidenceWriter) -> None:
        self.writer = writer
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[Write] = []
        self._busy = False  # someone holds the turn (appends a group)
        self._urgent = 0  # callers waiting for the turn: the flusher cuts its window short
        self._failure: BaseException | None = None  # not reported yet
        self._dropped = 0  # writes lost with the failed group, or refused after it
        self._last: StorageError | None = None  # the latest failure, as reported
        self.failures = 0
        """Groups the flusher could not append so far."""
        self._flusher: threading.Thread | None = None

    @staticmethod
    def of(writer: EvidenceWriter) -> _Journal:
        """The journal of ``writer`` (made on first use)."""
        journal = writer.__dict__.get(_JOURNAL_ATTR)
        if journal is None:
            with _JOURNALS_LOCK:
                journal = writer.__dict__.get(_JOURNAL_ATTR)
                if journal is None:
                    journal = writer.__dict__[_JOURNAL_ATTR] = _Journal(writer)
                    _LIVE_JOURNALS.add(journal)
        assert isinstance(journal, _Journal)
        return journal

    def record(self, write: Write, since: int | None) -> None:
        """``write`` appended durably before returning (``since`` None), or queued for
        the flusher as evidence of a leg that started when :attr:`failures` was ``since``
        (see :meth:`submit`)."""
        if since is None:
            self.commit(write)
        else:
            self.submit(write, since)

    def submit(self, write: Write, since: int) -> None:
        """Queue ``write`` for the flusher; returns at once.

        ``since``: :attr:`failures` when the leg that ``write`` belongs to started. Once
        a group failed, a leg that was running then records nothing more: its evidence
        would have a hole (what is durable of each leg stays a prefix of it).

        Raises:
            StorageError: if a group failed since, or one failed that no one was told of.
        """
        with self._cond:
            if self._failure is not None or self.failures > since:
                self._dropped += 1
                cause = self._failure if self._failure is not None else self._last
                raise StorageError(
                    f"evidence not recorded: an earlier group could not be appended ({cause})"
                ) from cause
            self._queue.append(write)
            waiting, flusher = len(self._queue), self._flusher
            if flusher is None:
                flusher = threading.Thread(
                    target=self._flush, name="evidence-ledger-flusher", daemon=True,
                )
                try:
                    flusher.start()
                    self._flusher = flusher
                except RuntimeError:  # the interpreter is shutting down
                    flusher = None
            elif waiting == 1 or waiting >= GROUP_WRITES:
                self._cond.notify_all()
        if flusher is None:  # no thread to append it: do so now
            self.commit()

    def commit(self, write: Write | None = None, *, join: bool = True) -> None:
        """Append every queued write, then ``write``, durably, before returning.

        ``join``: all in one group (else ``write`` in a group of its own, so that a
        ``write`` that raises drops nothing queued).

        Raises:
            StorageError: if a group the flusher appended earlier failed, or this one does.
        """
        with self._turn():
            batch = self._take()
            queued = len(batch)
            if write is not None and join:
                batch.append(write)
            self._append(batch, queued)
            if write is not None and not join:
                self._append([write])

    def read(self, look: Callable[[EvidenceWriter], _T]) -> _T:
        """``look(writer)`` once every queued write is durable (so the writer's indexes
        hold it).

        Raises:
            StorageError: as :meth:`commit`.
        """
        with self._turn():
            batch = self._take()
            self._append(batch, len(batch))
            return look(self.writer)

    def settle(self, since: int | None) -> StorageError | None:
        """Wait for the group in flight; then the failure not reported yet, or else the
        latest one if :attr:`failures` grew past ``since`` (a leg that started then has
        lost evidence, even if another drain point reported it first), as a
        :class:`StorageError`; None if neither."""
        with self._cond:
            while self._busy:
                self._cond.wait()
            failure = self._report()
            if failure is None and since is not None and self.failures > since:
                failure = self._last
            return failure

    # -- internals -------------------------------------------------------------------

    @contextlib.contextmanager
    def _turn(self) -> Iterator[None]:
        """Hold the turn: no group is appended by anyone else meanwhile.

        Raises:
            StorageError: (on entry) if a group the flusher appended failed.
        """
        with self._cond:
            self._urgent += 1
            self._cond.notify_all()
            try:
                while self._busy:
                    self._cond.wait()
            finally:
                self._urgent -= 1
            failure = self._report()
            if failure is not None:
                raise failure
            self._busy = True
        try:
            yield
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def _report(self) -> StorageError | None:
        """(Lock held.) The flusher's failure, once, as a StorageError; None if none."""
        failure, dropped = self._failure, self._dropped
        if failure is None:
            return None
        self._failure, self._dropped = None, 0
        error = StorageError(
            f"{dropped} evidence write(s) not recorded: a group could not be appended "
            f"({type(failure).__name__}: {failure})"
        )
        error.__cause__ = failure
        self._last = error
        return error

    def _take(self) -> list[Write]:
        with self._cond:
            batch, self._queue = self._queue, []
            return batch

    def _append(self, batch: list[Write], queued: int = 0) -> None:
        """Append ``batch`` as one atomic group (turn held). ``queued``: how many of its
        writes came from the queue: if it fails, the legs they belong to learn of it
        (:attr:`failures`), as the caller does (the exception propagates)."""
        if not batch:
            return
        writer = self.writer
        try:
            with writer.atomic():
                for write in batch:
                    write(writer)
        except BaseException as exc:
            if queued:
                with self._cond:
                    self.failures += 1
                    self._last = StorageError(
                        f"{queued} evidence write(s) not recorded: a group could not be "
                        f"appended ({type(exc).__name__}: {exc})"
                    )
                    self._last.__cause__ = exc
            raise

    def _flush(self) -> None:
        """The flusher thread: append queued writes in groups; end when idle."""
        while True:
            with self._cond:
                if not self._wait_for_group():
                    self._flusher = None
                    return
                self._busy = True
                batch = self._queue[:GROUP_WRITES]
                del self._queue[:GROUP_WRITES]
            try:
                self._append(batch)
            except BaseException as exc:  # kept for the next drain point, never dropped
                with self._cond:
                    self._dropped += len(batch) + len(self._queue)
                    self._queue.clear()
                    self._failure = self._failure or exc
                    self.failures += 1
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _wait_for_group(self) -> bool:
        """(Lock held.) Wait until a group can be taken: writes are queued, no one holds
        or waits for the turn, and the window is over or the group full. False once idle
        for :data:`FLUSHER_IDLE` seconds."""
        idle_until = time.monotonic() + FLUSHER_IDLE
        window_ends: float | None = None
        while True:
            left: float | None
            if not self._queue:
                window_ends = None
                left = idle_until - time.monotonic()
                if left <= 0:
                    return False
            elif self._busy or self._urgent:
                left = None  # the holder appends what is queued; wait for the turn
            else:
                if window_ends is None:
                    window_ends = time.monotonic() + GROUP_WINDOW
                left = window_ends - time.monotonic()
                if left <= 0 or len(self._queue) >= GROUP_WRITES:
                    return True
            self._cond.wait(left)


@atexit.register
def _flush_at_exit() -> None:
    """Append what abandoned runs left queued (daemon flushers stop at exit)."""
    for journal in list(_LIVE_JOURNALS):
        try:
            journal.commit()
        except Exception:  # reported, not raised: one failing ledger must not stop the rest
            traceback.print_exc()


@dataclass(frozen=True)
class _Frame:
    journal: _Journal
    since: int | None  # None: entry durability; else the journal's failures at its start
    run_id: str
    scope: Scope = ()
    run_state: str | None = None  # the state this leg resumed from; None: started fresh

    def record(self, write: Write) -> None:
        """Record evidence of this leg (queued, or durable at once; see ``since``)."""
        self.journal.record(write, self.since)


_FRAME: ContextVar[_Frame | None] = ContextVar("evidence_ledger_frame", default=None)


def _frame() -> _Frame:
    frame = _FRAME.get()
    if frame is None:
        raise UsageError("an attached agent ran outside Recorder.run / Recorder.run_streamed")
    return frame


@contextlib.contextmanager
def _entered(frame: _Frame) -> Iterator[None]:
    token = _FRAME.set(frame)
    try:
        yield
    finally:
        _FRAME.reset(token)


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _snapshot(value: Any) -> Any:
    """``value`` with its dicts and lists copied (other values shared): a session item as
    it was stored, should the SDK change the object before its entry is appended."""
    if isinstance(value, dict):
        return {key: _snapshot(inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [_snapshot(inner) for inner in value]
    return value


def _status(result: RunResult | RunResultStreaming) -> str:
    return "interrupted" if result.interruptions else "completed"


def persisted_output(context: ToolContext[Any], tool: FunctionTool, result: Any) -> Any:
    """The ``output`` the SDK puts in the ``function_call_output`` item for ``result``.

    A string stays as it is; a list of content parts (``ToolOutputText`` and friends)
    becomes a list of dicts; a tool with a declared output schema gives compact JSON
    text; anything else becomes ``str(result)``.
    """
    call = context.tool_call or ResponseFunctionToolCall(
        type="function_call", call_id=context.tool_call_id, name=context.tool_name,
        arguments=context.tool_arguments,
    )
    try:
        item = ItemHelpers.tool_call_output_item(
            call, result, output_json_schema=tool.output_json_schema,
            output_type_adapter=getattr(tool, "_output_type_adapter", None),
        )
    except UserError:  # the SDK bypasses the output schema for error messages
        item = ItemHelpers.tool_call_output_item(call, result)
    return item["output"]


class Recorder:
    """Records agent runs into a ledger; see the module docstring.

    Args:
        ledger: an :class:`EvidenceWriter`, a :class:`Ledger`, or a ledger directory.
        durability: ``"group"`` (default): evidence of a leg is appended in groups by a
            flusher thread, and is durable when the leg ends; ``"entry"``: every entry
            is durable before its hook returns (see *Durability* in the module docstring).

    Raises:
        UsageError: if ``durability`` is neither.
    """

    def __init__(
        self,
        ledger: EvidenceWriter | Ledger | str | os.PathLike[str],
        *,
        durability: str = "group",
    ) -> None:
        if durability not in DURABILITY:
            raise UsageError(f"durability must be one of {DURABILITY}, not {durability!r}")
        self.writer = ledger if isinstance(ledger, EvidenceWriter) else EvidenceWriter(ledger)
        self.durability = durability
        self._journal = _Journal.of(self.writer)
        self._group = durability == "group"

    def flush(self) -> None:
        """Make every entry recorded so far durable (``"group"`` queues a leg's evidence).

        Raises:
            StorageError: if evidence queued earlier could not be appended, or this fails.
        """
        self._journal.commit()

    # -- running -----------------------------------------------------------------------

    async def run(self, agent: Agent[Any], input: Any, **kwargs: Any) -> RunResult:
        """``Runner.run(agent, input, **kwargs)``, recorded.

        ``input`` is a string, a list of input items, or a :class:`RunState` to resume.
        Every leg ends with a ``run_end`` entry: ``failed`` when the SDK raises (the
        exception propagates), else ``interrupted`` or ``completed``. Returns once the
        leg's evidence and its ``run_end`` are durable.

        Raises:
            UsageError: if the context is not a mapping, or a RunState carries no run id.
            StorageError: if evidence of the leg could not be appended (the leg is then
                recorded as ``failed`` where the storage still takes it).
        """
        frame = self._start(agent, input, kwargs)
        with self._leg(frame):
            result = await Runner.run(agent, input, **kwargs)
        self._finish(frame, _status(result))
        self._derive_states(result, frame)
        return result

    def run_streamed(self, agent: Agent[Any], input: Any, **kwargs: Any) -> RunResultStreaming:
        """``Runner.run_streamed(agent, input, **kwargs)``, recorded.

        The ``run_end`` entry is written when ``stream_events()`` ends, before it returns
        to the caller: ``failed`` when it raises or is left before its end. The leg's
        evidence and its ``run_end`` are durable when ``stream_events()`` ends.

        Raises:
            UsageError: as :meth:`run`.
            StorageError: from ``stream_events()``, as :meth:`run`.
        """
        frame = self._start(agent, input, kwargs)
        with self._leg(frame):  # the SDK's run task copies the context variable
            result = Runner.run_streamed(agent, input, **kwargs)
        self._derive_states(result, frame)
        events = result.stream_events

        async def recorded_events() -> AsyncIterator[StreamEvent]:
            status = "failed"
            try:
                async for event in events():
                    yield event
                status = _status(result)
            finally:
                self._finish(frame, status)

        result.stream_events = recorded_events  # type: ignore[method-assign]
        return result

    @contextlib.contextmanager
    def _leg(self, frame: _Frame) -> Iterator[None]:
        """Run the block inside ``frame``; record ``failed`` if it raises."""
        with _entered(frame):
            try:
                yield
            except BaseException:
                self._finish(frame, "failed")
                raise

    def _finish(self, frame: _Frame, status: str) -> None:
        """End the leg: its queued evidence and ``run_end``, durable before returning.

        Raises:
            StorageError: if a group of the leg's evidence could not be appended (then
                ``run_end`` says ``failed``), or this last one cannot.
        """
        failure = self._journal.settle(since=frame.since)
        end = methodcaller(
            "run_end", run_id=frame.run_id,
            status="failed" if failure is not None else status, run_state=frame.run_state,
        )
        try:
            self._journal.commit(end)
        finally:
            if failure is not None:
                raise failure

    def _start(self, agent: Agent[Any], input: Any, kwargs: dict[str, Any]) -> _Frame:
        attach(agent)
        since = self._journal.failures if self._group else None
        session = kwargs.get("session")
        if session is not None and not isinstance(session, RecordedSession):
            kwargs["session"] = RecordedSession(self.writer, session)
        if isinstance(input, RunState):
            info = self._adopt(input, since=since, resume=True)
            return _Frame(self._journal, since, info.run_id, run_state=info.state_id)
        run_id = uuid.uuid4().hex
        context = kwargs.get("context")
        if context is None:
            kwargs["context"] = {RUN_ID_KEY: run_id}
        elif isinstance(context, MutableMapping):
            context[RUN_ID_KEY] = run_id
        else:
            raise UsageError(
                f"the recorder keeps its run id in a mapping run context, not in a "
                f"{type(context).__name__}"
            )
        return _Frame(self._journal, since, run_id)

    # -- run states --------------------------------------------------------------------

    def _derive_states(self, result: RunResult | RunResultStreaming, frame: _Frame) -> None:
        """Make ``result.to_state()`` give each state it returns an id of its own, whose
        parent is the state this leg resumed from (so two calls give siblings)."""
        make = result.to_state
        journal = self._journal

        def to_state() -> RunState[Any, Any]:
            state = make()
            info = _StateInfo(journal, uuid.uuid4().hex, frame.run_state, frame.run_id)
            _register(state, info)
            _record_state(state, info, "to_state")
            return state

        result.to_state = to_state  # type: ignore[method-assign]

    def _adopt(
        self, state: RunState[Any, Any], since: int | None = None, resume: bool = False
    ) -> _StateInfo:
        """The id of ``state``; a state not seen before (one restored with
        ``RunState.from_json``) gets one, with the id its JSON carried as parent, and a
        ``loaded`` entry; ``resume``: then a ``resume`` entry (one serialisation for
        both). Entries are recorded as :meth:`_Journal.record` says for ``since``."""
        info = _state_info(state)
        if info is not None:
            if info.journal is not self._journal:  # its to_json() now records here
                info = replace(info, journal=self._journal)
                _register(state, info)
            if resume:
                _record_state(state, info, "resume", since=since)
            return info
        run_id = state_run_id(state)
        context = state._context.context if state._context is not None else None
        parent = getattr(state, _STATE_ATTR, None)  # a copy (copy.copy) of a state we met
        if parent is None and isinstance(context, Mapping):
            parent = context.get(RUN_STATE_KEY)
        info = _StateInfo(
            self._journal, uuid.uuid4().hex, parent if isinstance(parent, str) else None, run_id,
        )
        _register(state, info)
        data = _record_state(state, info, "loaded", since=since)
        if resume:
            _record_state(state, info, "resume", data, since=since)
        return info

    # -- decisions ---------------------------------------------------------------------

    def approve(
        self,
        state: RunState[Any, Any],
        item: ToolApprovalItem,
        *,
        approver: str,
        reason: str | None = None,
        always: bool = False,
    ) -> None:
        """Record an ``approve`` decision for ``item``'s call, then apply it to ``state``.

        ``item`` is an interruption the approver was shown (from ``result.interruptions``
        or ``state.get_interruptions()``); its arguments are recorded as what was shown.
        ``always=True`` approves the agent's tool for the rest of the run. Evidence still
        queued is appended first; the decision is durable before it is applied.

        Raises:
            UsageError: if ``state`` has no pending interruption with ``item``'s call id,
                or the call was not recorded in this run (or is ambiguous).
            StorageError: if the decision (or evidence queued before it) could not be
                appended; the decision is then not applied.
        """
        pending, run_id, scope = self._pending(state, item)
        made_on = self._adopt(state).state_id

        def decide(writer: EvidenceWriter) -> None:  # nothing is recorded if the SDK refuses
            _decision(writer, run_id, scope, item, "approve", approver, reason, None, always,
                      made_on)
            state.approve(pending, always_approve=always)

        self._journal.commit(decide, join=False)

    def reject(
        self,
        state: RunState[Any, Any],
        item: ToolApprovalItem,
        *,
        approver: str,
        reason: str | None = None,
        message: str | None = None,
        always: bool = False,
    ) -> None:
        """Record a ``reject`` decision for ``item``'s call, then apply it to ``state``.

        ``message`` is the text the SDK persists as the call's output; ``None`` means the
        SDK's default (``"Tool execution was not approved."``), which is then passed to
        the SDK explicitly so that the recorded and persisted texts agree (a run-level
        ``tool_error_formatter`` is not consulted for these rejections).

        Raises:
            UsageError, StorageError: as :meth:`approve`.
        """
        pending, run_id, scope = self._pending(state, item)
        made_on = self._adopt(state).state_id
        text = DEFAULT_APPROVAL_REJECTION_MESSAGE if message is None else message

        def decide(writer: EvidenceWriter) -> None:
            _decision(writer, run_id, scope, item, "reject", approver, reason, text, always,
                      made_on)
            state.reject(pending, always_reject=always, rejection_message=text)

        self._journal.commit(decide, join=False)

    def _pending(
        self, state: RunState[Any, Any], item: ToolApprovalItem
    ) -> tuple[ToolApprovalItem, str, Scope]:
        run_id = state_run_id(state)
        matches = [i for i in state.get_interruptions() if i.call_id == item.call_id]
        if not matches:
            raise UsageError(f"no pending interruption with call_id {item.call_id!r}")
        call_id = str(item.call_id)
        scopes = self._journal.read(lambda writer: writer.call_scopes(run_id, call_id))
        if len(scopes) != 1:
            found = "was not recorded" if not scopes else f"is in {len(scopes)} scopes"
            raise UsageError(f"call {item.call_id!r} of run {run_id} {found}")
        return matches[0], run_id, scopes[0]


def _decision(
    writer: EvidenceWriter, run_id: str, scope: Scope, item: ToolApprovalItem, decision: str,
    approver: str, reason: str | None, message: str | None, always: bool, made_on: str,
) -> None:
    writer.decision(
        run_id=run_id, call_id=str(item.call_id), decision=decision, approver=approver,
        scope=scope, always=always, reason=reason, message=message,
        arguments=item.arguments, agent=item.agent.name, tool=item.tool_name,
        run_state=made_on,
    )


def attach(agent: Agent[Any]) -> Agent[Any]:
    """Attach recording to ``agent`` and the agents reachable from it, in place.

    Reachable: agents run through ``Agent.as_tool`` and ``Agent`` objects in ``handoffs``.
    Sets a chaining agent hook on each agent and wraps its function tools (agent-as-tool
    scope, callable ``needs_approval``, tool input guardrails). Idempotent; the hooks and
    wrappers record through whichever :class:`Recorder` runs the agent (a tool object
    shared by several agents names the first one in its ``tool_policy`` entries).
    Returns ``agent``.
    """
    todo, seen = [agent], set()
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if _claim(current):
            current.hooks = _RecordingHooks(current.hooks)
        for tool in current.tools:
            if isinstance(tool, FunctionTool) and _claim(tool):
                _wrap_tool(current, tool)
            nested = getattr(tool, "_agent_instance", None)
            if isinstance(nested, Agent):
                todo.append(nested)
        todo.extend(h for h in current.handoffs if isinstance(h, Agent))
    return agent


def _claim(obj: Agent[Any] | FunctionTool) -> bool:
    """Mark ``obj`` as attached; False if it already was."""
    if getattr(obj, _MARK, False):
        return False
    setattr(obj, _MARK, True)
    return True


def _wrap_tool(agent: Agent[Any], tool: FunctionTool) -> None:
    if getattr(tool, "_agent_instance", None) is not None:
        invoke = tool.on_invoke_tool

        async def invoke_in_scope(context: ToolContext[Any], arguments: str) -> Any:
            outer = _frame()
            edge = f"{tool.name}:{context.tool_call_id}"
            with _entered(replace(outer, scope=(*outer.scope, edge))):
                return await invoke(context, arguments)

        tool.on_invoke_tool = invoke_in_scope
    if callable(tool.needs_approval):
        policy = tool.needs_approval

        async def recorded_policy(context: Any, params: Any, call_id: str) -> Any:
            decided: Any = policy(context, params, call_id)
            if inspect.isawaitable(decided):
                decided = await decided
            frame = _frame()
            frame.record(methodcaller(
                "tool_policy", run_id=frame.run_id, agent=agent.name,
                tool=tool.name, needs_approval=bool(decided), scope=frame.scope,
                policy="callable", call_id=call_id, time_ns=frame.journal.writer.clock(),
            ))
            return decided

        tool.needs_approval = recorded_policy
    if tool.tool_input_guardrails:
        tool.tool_input_guardrails = [
            _recorded_guardrail(tool, g) for g in tool.tool_input_guardrails
        ]


def _recorded_guardrail(
    tool: FunctionTool, guardrail: ToolInputGuardrail[Any]
) -> ToolInputGuardrail[Any]:
    name = guardrail.get_name()

    async def recorded(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        output = await guardrail.run(data)
        if output.behavior["type"] != "allow":
            frame, message = _frame(), output.behavior.get("message")
            frame.record(methodcaller(
                "guardrail", run_id=frame.run_id,
                call_id=data.context.tool_call_id, guardrail=name,
                message=message if isinstance(message, str) else None, scope=frame.scope,
                agent=data.agent.name, tool=tool.name, time_ns=frame.journal.writer.clock(),
            ))
        return output

    return ToolInputGuardrail(guardrail_function=recorded, name=name)


def _record_calls(agent: Agent[Any], response: ModelResponse) -> None:
    frame = _frame()
    calls = [item for item in response.output if _field(item, "type") == "function_call"]
    if not calls:
        return
    tools = {t.name: t for t in agent.tools if isinstance(t, FunctionTool)}
    clock = frame.journal.writer.clock
    found = []
    for item in calls:
        name = _field(item, "name")
        policy = getattr(tools.get(name), "needs_approval", None)
        found.append(methodcaller(
            "call", run_id=frame.run_id, call_id=_field(item, "call_id"),
            agent=agent.name, tool=name, arguments=_field(item, "arguments"), scope=frame.scope,
            needs_approval=policy if isinstance(policy, bool) else None,
            response_id=response.response_id, time_ns=clock(),
        ))

    def write(writer: EvidenceWriter) -> None:  # the calls of one response: one group
        for call in found:
            call(writer)

    frame.record(write)


def _record_execution(context: Any, agent: Agent[Any], tool: Tool, result: Any) -> None:
    if not (isinstance(context, ToolContext) and isinstance(tool, FunctionTool)):
        return  # hosted, shell and computer tools carry no call id here
    frame = _frame()
    frame.record(methodcaller(
        "execution", run_id=frame.run_id, call_id=context.tool_call_id,
        arguments=context.tool_arguments, scope=frame.scope, agent=agent.name, tool=tool.name,
        result=persisted_output(context, tool, result), run_state=frame.run_state,
        time_ns=frame.journal.writer.clock(),
    ))


def state_run_id(state: RunState[Any, Any]) -> str:
    """The run id a :class:`RunState` carries in its mapping context.

    Raises:
        UsageError: if the state's context holds no run id (the run was not recorded).
    """
    wrapper: RunContextWrapper[Any] | None = getattr(state, "_context", None)
    context = wrapper.context if wrapper is not None else None
    run_id = context.get(RUN_ID_KEY) if isinstance(context, Mapping) else None
    if not isinstance(run_id, str):
        raise UsageError(f"the RunState's context has no {RUN_ID_KEY!r}: not a recorded run")
    return run_id


# -- run states ------------------------------------------------------------------------


@dataclass(frozen=True)
class _StateInfo:
    journal: _Journal  # where its to_json() events go
    state_id: str
    parent: str | None
    run_id: str


# id(RunState) -> (weak reference, info): RunState is a dataclass, hence unhashable
_STATES: dict[int, tuple[weakref.ref[Any], _StateInfo]] = {}
_STATE_ATTR = "_evidence_ledger_state_id"
_RECORDING_CLASSES: dict[type, type] = {}


def _state_info(state: Any) -> _StateInfo | None:
    found = _STATES.get(id(state))
    return found[1] if found is not None and found[0]() is state else None


def state_id(state: RunState[Any, Any]) -> str | None:
    """The id the recorder gave ``state`` (see the module docstring), or None when no
    recorder has met this object yet."""
    info = _state_info(state)
    return info.state_id if info is not None else None


def _register(state: RunState[Any, Any], info: _StateInfo) -> None:
    key = id(state)

    def forget(ref: weakref.ref[Any]) -> None:
        if key in _STATES and _STATES[key][0] is ref:
            del _STATES[key]

    _STATES[key] = (weakref.ref(state, forget), info)
    state.__dict__[_STATE_ATTR] = info.state_id  # copies of the object carry it along
    state.__class__ = _recording_class(type(state))


def _recording_class(cls: Any) -> Any:
    """A subclass of ``cls`` whose ``to_json()`` writes the state's id into the output
    and records a ``to_json`` event (``to_string()`` goes through it too)."""
    if getattr(cls, "_evidence_ledger_base", None) is not None:
        return cls
    sub = _RECORDING_CLASSES.get(cls)
    if sub is None:

        def to_json(self: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
            data = _with_state_id(self, cls.to_json(self, *args, **kwargs))
            info = _state_info(self)
            if info is not None:
                _record_state(self, info, "to_json", data)
            return data

        sub = type(cls.__name__, (cls,), {
            "to_json": to_json, "__module__": cls.__module__, "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__, "_evidence_ledger_base": cls,
        })
        _RECORDING_CLASSES[cls] = sub
    return sub


def _with_state_id(state: Any, data: Any) -> Any:
    """``data`` (a ``to_json()`` output) with ``state``'s id in its context mapping (a
    copy: the live context is shared with sibling states)."""
    info = _state_info(state)
    outer = data.get("context") if isinstance(data, dict) else None
    if info is None or not isinstance(outer, dict) or not isinstance(outer.get("context"), dict):
        return data
    inner = {**outer["context"], RUN_STATE_KEY: info.state_id}
    return {**data, "context": {**outer, "context": inner}}


def _serialised(state: Any) -> Any:
    """``state.to_json()`` as the user would get it, recording nothing; None if the SDK
    cannot serialise it (a context value that is not JSON, for example)."""
    base = getattr(type(state), "_evidence_ledger_base", type(state))
    try:
        return _with_state_id(state, base.to_json(state))
    except Exception:
        return None


def _record_state(
    state: Any, info: _StateInfo, event: str, data: Any = None, since: int | None = None
) -> Any:
    """Record a ``run_state`` entry for ``state`` (``data``: its serialised form, if known),
    durably before returning, or (``since`` not None) queued as evidence of the leg it
    starts (see :meth:`_Journal.record`). Returns the serialised form.

    What the state holds is taken now; the scopes of its interruptions are looked up when
    the entry is appended, in order, so calls still queued are found."""
    pending = []
    for item in state.get_interruptions():
        arguments = getattr(item, "arguments", None)
        agent = getattr(item, "agent", None)
        pending.append(Interruption(
            call_id=str(item.call_id), tool=item.tool_name, agent=getattr(agent, "name", None),
            arguments=arguments if isinstance(arguments, str) else None,
        ))
    data = _serialised(state) if data is None else data
    time_ns = info.journal.writer.clock()

    def write(writer: EvidenceWriter) -> None:
        found = []
        for item in pending:
            scopes = writer.call_scopes(info.run_id, item.call_id)
            found.append(item._replace(scope=scopes[0] if len(scopes) == 1 else None))
        writer.run_state(
            run_id=info.run_id, state_id=info.state_id, parent=info.parent, event=event,
            state=data, interruptions=found, time_ns=time_ns,
        )

    info.journal.record(write, since)
    return data


class _RecordingHooks(AgentHooks[Any]):
    """Agent hooks that record, then call the hooks the user had set (``inner``)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def _forward(self, name: str, *args: Any) -> None:
        if self.inner is not None:
            await getattr(self.inner, name)(*args)

    async def on_start(self, context: Any, agent: Any) -> None:
        await self._forward("on_start", context, agent)

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        await self._forward("on_end", context, agent, output)

    async def on_handoff(self, context: Any, agent: Any, source: Any) -> None:
        await self._forward("on_handoff", context, agent, source)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        await self._forward("on_tool_start", context, agent, tool)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        _record_execution(context, agent, tool, result)
        await self._forward("on_tool_end", context, agent, tool, result)

    async def on_llm_start(self, context: Any, agent: Any, *args: Any) -> None:
        await self._forward("on_llm_start", context, agent, *args)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        _record_calls(agent, response)
        await self._forward("on_llm_end", context, agent, response)


class RecordedSession:
    """A :class:`agents.Session` that records what the wrapped session stores.

    Each item passed to ``add_items`` is recorded (``session_item``, ``op="add"``) after
    the inner session accepted the batch; ``pop_item`` records ``op="pop"`` with the
    item removed, ``clear_session`` records ``op="clear"``. Reads are not recorded.
    Items are mappings (``function_call``: call_id, name, arguments;
    ``function_call_output``: call_id, output; messages: role, content).

    Inside a leg of a recorder on the same writer, the entries are that leg's evidence
    (queued under ``"group"`` durability, see the module docstring); outside one they
    are durable before the method returns.
    """

    def __init__(self, writer: EvidenceWriter, inner: Session) -> None:
        self.writer = writer
        self.inner = inner

    @property
    def session_id(self) -> str:
        """The wrapped session's id."""
        return self.inner.session_id

    @property
    def session_settings(self) -> Any:
        """The wrapped session's settings (``SessionSettings`` or None)."""
        return getattr(self.inner, "session_settings", None)

    def _record(self, op: str, items: list[Any]) -> None:
        frame = _FRAME.get()
        run_id, scope = (frame.run_id, frame.scope) if frame is not None else ("", ())
        leg = frame if frame is not None and frame.journal.writer is self.writer else None
        later = leg is not None and leg.since is not None  # copy what the SDK could change
        session_id, clock = self.session_id, self.writer.clock
        found = [
            (None if item is None else _snapshot(dict(item)) if later else dict(item), clock())
            for item in items
        ]

        def write(writer: EvidenceWriter) -> None:  # one batch: one group
            for item, time_ns in found:
                writer.session_item(
                    run_id=run_id, session_id=session_id, item=item, scope=scope, op=op,
                    time_ns=time_ns,
                )

        if leg is not None:
            leg.record(write)
        else:
            _Journal.of(self.writer).commit(write)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The wrapped session's items, oldest first (the latest ``limit`` if given)."""
        return await self.inner.get_items(limit)

    async def add_items(self, items: list[Any]) -> None:
        """Store ``items`` in the wrapped session, then record each one."""
        await self.inner.add_items(items)
        self._record("add", items)

    async def pop_item(self) -> Any:
        """Remove and return the latest item (None when empty), recording the removal."""
        item = await self.inner.pop_item()
        if item is not None:
            self._record("pop", [item])
        return item

    async def clear_session(self) -> None:
        """Clear the wrapped session, then record ``op="clear"``."""
        await self.inner.clear_session()
        self._record("clear", [None])
