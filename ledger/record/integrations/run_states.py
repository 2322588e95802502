"""Run ids and run-state lineage: the run id a run context carries, and the id, parent and
``run_state`` entries of every ``RunState`` object a recorder meets.

Run id: a fresh run gets a random id (32 hex digits), stored in the run context under
:data:`RUN_ID_KEY`: a ``None`` context becomes ``{RUN_ID_KEY: run_id}``, a mutable mapping
gets the key added (so use one context mapping per run). The SDK serializes mapping
contexts into ``RunState.to_json()`` and restores them in ``RunState.from_json()``, so a
resumed leg - in this process or another one - finds the same run id there. Other context
types are refused (:class:`~evidence_ledger.format.errors.UsageError`).

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
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents import RunContextWrapper, RunState

from evidence_ledger.format.errors import UsageError
from evidence_ledger.record.integrations.group_commit import Journal
from evidence_ledger.record.writer import EvidenceWriter, Interruption

__all__ = ["RUN_ID_KEY", "RUN_STATE_KEY", "state_id", "state_run_id"]

RUN_ID_KEY = "evidence_ledger_run_id"
"""Key of the run id in a mapping run context."""

RUN_STATE_KEY = "evidence_ledger_run_state"
"""Key of the run state id in the context of a serialised ``RunState`` (``to_json()``)."""


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


@dataclass(frozen=True)
class StateInfo:
    """What the recorder knows of one ``RunState`` object: its id, its parent's id, its
    run, and the journal its ``to_json()`` events are recorded to."""

    journal: Journal  # where its to_json() events go
    state_id: str
    parent: str | None
    run_id: str


# id(RunState) -> (weak reference, info): RunState is a dataclass, hence unhashable
_STATES: dict[int, tuple[weakref.ref[Any], StateInfo]] = {}
STATE_ATTR = "_evidence_ledger_state_id"
_RECORDING_CLASSES: dict[type, type] = {}


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
    """Remember ``info`` for ``state`` (weakly), stamp its id on the object and swap in
    a recording subclass, so its ``to_json()`` is recorded and copies carry the id."""
    key = id(state)

    def forget(ref: weakref.ref[Any]) -> None:
        if key in _STATES and _STATES[key][0] is ref:
            del _STATES[key]

    _STATES[key] = (weakref.ref(state, forget), info)
    state.__dict__[STATE_ATTR] = info.state_id  # copies of the object carry it along
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
            info = state_info(self)
            if info is not None:
                record_state(self, info, "to_json", data)
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
    info = state_info(state)
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


def record_state(
    state: Any, info: StateInfo, event: str, data: Any = None, since: int | None = None
) -> Any:
    """Record a ``run_state`` entry for ``state`` (``data``: its serialised form, if known),
    durably before returning, or (``since`` not None) queued as evidence of the leg it
    starts (see :meth:`Journal.record`). Returns the serialised form.

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
            scopes = writer.call_scopes(info.run_id, item.call_id, item.agent)
            found.append(item._replace(scope=scopes[0] if len(scopes) == 1 else None))
        writer.run_state(
            run_id=info.run_id, state_id=info.state_id, parent=info.parent, event=event,
            state=data, interruptions=found, time_ns=time_ns,
        )

    info.journal.record(write, since)
    return data
