"""Run-state lineage: the id, parent, run and ``run_state`` entries of every ``RunState``
object a recorder meets, kept outside the app's objects.

A paused run becomes a ``RunState`` that apps fork, serialise, approve on one copy and
resume in another process, or retry; a ``call_id`` alone does not say which copy a
decision was made on, nor which run a state restored in another process belongs to. The
recorder keeps nothing in the run context, the state or its JSON: it registers each
``RunState`` object it meets (by identity, weakly), gives it a *state id* (32 hex digits),
and records a ``run_state`` entry per event:

- ``to_state``: ``result.to_state()`` on a result of :meth:`Recorder.run` /
  :meth:`Recorder.run_streamed` (the recorder wraps that result method) makes a new state
  whose parent is the state the leg resumed from (None for a leg that started fresh): two
  ``to_state()`` calls on one result give two siblings with the same parent;
- ``decided``: a decision of :meth:`Recorder.approve` / :meth:`Recorder.reject` was
  applied to it (its digest has changed);
- ``loaded``: a state object the recorder did not make (restored with
  ``RunState.from_json`` / ``from_string`` in this process or another, or a copy), met at a
  decision or a resume, and found in the ledger (:func:`match_state`): it gets a new id, its
  parent being the recorded state it matched and its run that state's run;
- ``adopted``: such a state that matches nothing recorded (built by hand, restored from a
  run no recorder saw): it starts a new run, with a ``call`` entry for each pending
  approval it carries (the calls were made before the recorder met them);
- ``resume``: a leg resumed from it;
- ``ended``: that leg ended (the SDK updates the state object it resumes, also when the leg
  fails: its digest then, so that its JSON is found when restored for a retry).

Each entry holds the run id, the state id, its parent, its *digest* and its pending
interruptions (call_id, tool, agent, scope, arguments digest). The digest
(:func:`state_digest`) is the SHA-256 of the RFC 8785 JSON of ``to_json()`` with the app's
own context value left out (``context.context`` and ``context.context_meta``: the SDK
restores a dataclass context as a mapping without a deserializer, so that part may differ
after a round trip); everything else ``from_json`` restores identically (measured on
0.20 - 0.24). A state restored in another process is matched by that digest, else (a
decision applied before it was serialised changed it) by its pending approvals; the latest
matching entry wins. A state matching neither (its JSON was edited, or input was added
after it was restored) is matched by the calls among its items, when exactly one run
recorded them all with the same arguments: its parent is then that run's latest state.
Decisions carry the id of the state they were made on; executions and
``run_end`` entries the id of the state their leg resumed from (None for a fresh leg).
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from agents import RunState

from evidence_ledger.record.integrations.agent_labels import agent_label, approval_tool
from evidence_ledger.record.integrations.group_commit import Journal, Write
from evidence_ledger.record.integrations.native_calls import item_field, native_call
from evidence_ledger.record.writer import EvidenceWriter, Interruption, item_sha256

__all__ = ["StateInfo", "pending_approvals", "state_digest", "state_id", "state_info"]


@dataclass(frozen=True)
class StateInfo:
    """What the recorder knows of one ``RunState`` object: its id, its parent's id, its
    run, and the journal its events are recorded to."""

    journal: Journal
    state_id: str
    parent: str | None
    run_id: str


# id(RunState) -> (weak reference, info): RunState is a dataclass, hence unhashable
_STATES: dict[int, tuple[weakref.ref[Any], StateInfo]] = {}


def state_info(state: Any) -> StateInfo | None:
    """The :class:`StateInfo` registered for this very object, or None."""
    found = _STATES.get(id(state))
    return found[1] if found is not None and found[0]() is state else None


def state_id(state: RunState[Any, Any]) -> str | None:
    """The id the recorder gave ``state`` (see the module docstring), or None when no
    recorder has met this object yet."""
    info = state_info(state)
    return info.state_id if info is not None else None


def register_state(state: RunState[Any, Any], info: StateInfo) -> None:
    """Remember ``info`` for ``state`` (weakly; the object is not touched)."""
    key = id(state)

    def forget(ref: weakref.ref[Any]) -> None:
        if key in _STATES and _STATES[key][0] is ref:
            del _STATES[key]

    _STATES[key] = (weakref.ref(state, forget), info)


def state_digest(state: RunState[Any, Any]) -> bytes | None:
    """The 32-byte digest of ``state`` (see the module docstring); None if the SDK cannot
    serialise it. The app's context value is not serialised (no serializer of the app's
    runs, no warning is logged). Never raises."""
    try:
        try:  # the app's context is left out of the digest: never serialise it
            data = state.to_json(context_serializer=_no_context)
        except TypeError:  # an SDK without context serializers (before 0.23)
            data = state.to_json()
    except Exception:
        return None
    context = data.get("context") if isinstance(data, dict) else None
    if isinstance(context, dict):
        kept = {k: v for k, v in context.items() if k not in ("context", "context_meta")}
        data = {**data, "context": kept}
    try:
        return item_sha256(data)
    except Exception:
        return None


def _no_context(context: Any) -> dict[str, Any]:
    """A context serializer that reads nothing of the app's context."""
    return {}


def pending_approvals(state: RunState[Any, Any]) -> list[Interruption]:
    """The interruptions ``state`` waits on (scope not yet known; none if the SDK cannot
    say)."""
    try:
        items = state.get_interruptions()
    except Exception:
        return []
    pending = []
    for item in items:
        arguments = getattr(item, "arguments", None)
        agent = getattr(item, "agent", None)
        pending.append(Interruption(
            call_id=str(item.call_id), tool=approval_tool(item),
            agent=agent_label(agent) if agent is not None else None,
            arguments=arguments if isinstance(arguments, str) else None,
        ))
    return pending


def held_calls(state: RunState[Any, Any]) -> list[tuple[str, str]]:
    """``(call_id, arguments)`` of each call among the items ``state`` generated (function
    calls and the kinds of :func:`native_call`; none if the SDK cannot say)."""
    calls = []
    for item in getattr(state, "_generated_items", None) or ():
        raw = getattr(item, "raw_item", None)
        if item_field(raw, "type") == "function_call":
            call_id, arguments = item_field(raw, "call_id"), item_field(raw, "arguments")
            if isinstance(call_id, str) and isinstance(arguments, str):
                calls.append((call_id, arguments))
            continue
        native = native_call(getattr(item, "agent", None), raw)
        if native is not None:
            calls.append((native[0], native[2]))
    return calls


Find = Callable[[bytes | None, list[Interruption], list[tuple[str, str]]],
                "tuple[str, str] | None"]
""":meth:`EvidenceWriter.find_state` of a writer that holds every entry recorded so far."""


def meet_state(
    journal: Journal, state: RunState[Any, Any], find: Find | None = None
) -> tuple[StateInfo, Write | None]:
    """The :class:`StateInfo` of ``state`` (registered now if no recorder met this object
    before; the current ``journal`` becomes its journal), and what records its first meeting
    (None if it was met before): for a state found in the ledger (``find``; None: the
    journal's writer, once what is queued is appended) a ``loaded`` entry
    with its parent and run, else a ``call`` at top-level scope for each approval it waits on
    (the SDK paused on them: they need approval) and an ``adopted`` entry starting a new
    run."""
    info = state_info(state)
    if info is not None:
        if info.journal is not journal:
            info = replace(info, journal=journal)
            register_state(state, info)
        return info, None
    digest, pending, calls = state_digest(state), pending_approvals(state), held_calls(state)
    if find is None:
        found = journal.read(lambda writer: writer.find_state(digest, pending, calls))
    else:
        found = find(digest, pending, calls)
    if found is not None:
        info = StateInfo(journal, uuid.uuid4().hex, found[1], found[0])
        register_state(state, info)
        return info, state_entry(state, info, "loaded")
    info = StateInfo(journal, uuid.uuid4().hex, None, uuid.uuid4().hex)
    register_state(state, info)
    adopted, time_ns = state_entry(state, info, "adopted"), journal.writer.clock()

    def write(writer: EvidenceWriter) -> None:
        for item in pending:
            writer.call(
                run_id=info.run_id, call_id=item.call_id, agent=item.agent or "",
                tool=item.tool or "", arguments=item.arguments or "", needs_approval=True,
                time_ns=time_ns,
            )
        adopted(writer)

    return info, write


def state_entry(state: Any, info: StateInfo, event: str) -> Write:
    """What appends a ``run_state`` entry for ``state`` as it is now (its digest and pending
    approvals are taken at once; the scopes of its interruptions are looked up when it is
    appended, in order, so calls still queued are found)."""
    pending, digest = pending_approvals(state), state_digest(state)
    time_ns = info.journal.writer.clock()

    def write(writer: EvidenceWriter) -> None:
        found = []
        for item in pending:
            scopes = writer.call_scopes(info.run_id, item.call_id, item.agent, item.arguments)
            found.append(item._replace(scope=scopes[0] if len(scopes) == 1 else None))
        writer.run_state(
            run_id=info.run_id, state_id=info.state_id, parent=info.parent, event=event,
            digest=digest, interruptions=found, time_ns=time_ns,
        )

    return write


def record_state(state: Any, info: StateInfo, event: str, since: int | None = None) -> None:
    """Record a ``run_state`` entry for ``state`` (:func:`state_entry`), durably before
    returning, or (``since`` not None) queued as evidence of the leg it starts (see
    :meth:`Journal.record`)."""
    info.journal.record(state_entry(state, info, event), since)
