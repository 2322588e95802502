"""The session wrapper: a stand-in for the app's session that records every item the session
stores or removes (``session_item`` entries), and is otherwise the session itself to the SDK.

:func:`recorded_session` returns an object of a subclass of the session's own class (made
once per class), so ``isinstance`` checks the SDK makes (``OpenAIConversationsSession``,
the compaction-aware protocol) hold as for the session. Every attribute read, write and
method call goes to the wrapped session itself, untouched (so lazy attributes such as a
conversation's ``session_id`` stay lazy); the history methods ``add_items``, ``pop_item``
and ``clear_session`` are called on it too, then recorded. They keep the wrapped methods'
signatures, so a session whose methods take the SDK's ``wrapper=`` keyword still gets it.
Reads are not recorded, nor what a session's own ``run_compaction`` rewrites (reading
the history around it would add calls the SDK does not make).
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

from evidence_ledger.record.integrations.context_decisions import persisted_decisions
from evidence_ledger.record.integrations.group_commit import Journal
from evidence_ledger.record.integrations.legs import CURRENT_LEG
from evidence_ledger.record.integrations.published import persisted_executions
from evidence_ledger.record.integrations.session_guard import guard_batch
from evidence_ledger.record.writer import EvidenceWriter

__all__ = ["is_recorded", "recorded_session"]

_INNER, _WRITER = "_evidence_ledger_session", "_evidence_ledger_writer"
_BASE = "_evidence_ledger_base"
_CLASSES: dict[type, type] = {}


def _snapshot(value: Any) -> Any:
    """``value`` with its dicts and lists copied (other values shared): a session item as
    it was stored, should the SDK change the object before its entry is appended."""
    if isinstance(value, dict):
        return {key: _snapshot(inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [_snapshot(inner) for inner in value]
    return value


def is_recorded(session: Any) -> bool:
    """True for a session :func:`recorded_session` made."""
    return getattr(type(session), _BASE, None) is not None


def recorded_session(writer: EvidenceWriter, inner: Any) -> Any:
    """A stand-in for ``inner`` (any SDK session) that records what it stores to ``writer``.

    Each item passed to ``add_items`` is recorded (``session_item``, ``op="add"``) after
    the session accepted the batch, or, when ``add_items`` raised, if the session's
    ``get_items`` shows the batch stored at its end all the same (a lost acknowledgement);
    ``pop_item`` records ``op="pop"`` with the item removed, ``clear_session`` records
    ``op="clear"``. Items are mappings
    (``function_call``: call_id, name, arguments; ``function_call_output``:
    call_id, output; messages: role, content).

    Inside a leg of a recorder on the same writer, the entries are that leg's evidence
    (queued under ``"group"`` durability, see
    :mod:`evidence_ledger.record.integrations.openai_agents`); outside one they are durable
    before the method returns.
    """
    proxy: Any = object.__new__(_recording_class(type(inner)))
    object.__setattr__(proxy, _INNER, inner)
    object.__setattr__(proxy, _WRITER, writer)
    return proxy


def _recording_class(cls: type) -> type:
    sub = _CLASSES.get(cls)
    if sub is None:
        namespace: dict[str, Any] = {
            "__slots__": (_INNER, _WRITER), _BASE: cls, "__module__": cls.__module__,
            "__qualname__": cls.__qualname__, "__doc__": cls.__doc__,
            "__getattribute__": _get, "__setattr__": _set, "__delattr__": _delete,
        }
        for name, record in _RECORDERS.items():
            method = getattr(cls, name, None)
            if callable(method):
                namespace[name] = _recorded_method(name, method, record)
        try:
            sub = type(cls.__name__, (cls,), namespace)
        except TypeError:  # a class that cannot be subclassed (final, a layout conflict)
            sub = type(cls.__name__, (object,), namespace)  # forwards all but isinstance
        _CLASSES[cls] = sub
    return sub


def _get(self: Any, name: str) -> Any:
    if name in _OWN or (name in _RECORDERS and name in type(self).__dict__):
        return object.__getattribute__(self, name)
    return getattr(object.__getattribute__(self, _INNER), name)


def _set(self: Any, name: str, value: Any) -> None:
    setattr(object.__getattribute__(self, _INNER), name, value)


def _delete(self: Any, name: str) -> None:
    delattr(object.__getattribute__(self, _INNER), name)


def _recorded_method(name: str, method: Callable[..., Any], record: Callable[..., Any]) -> Any:
    """A method that calls the wrapped session's own ``name`` with the arguments it got,
    then records what it did; its signature is ``method``'s (``wrapper=`` included)."""

    @functools.wraps(method)
    async def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        inner = object.__getattribute__(self, _INNER)
        writer = object.__getattribute__(self, _WRITER)
        return await record(inner, writer, getattr(inner, name), args, kwargs)

    recorded.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
    return recorded


async def _call(method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = method(*args, **kwargs)
    return await result if inspect.isawaitable(result) else result


async def _add_items(inner: Any, writer: EvidenceWriter, method: Any, args: Any, kw: Any) -> Any:
    items = list(args[0] if args else kw.get("items", []))
    guarded: list[Any] = []
    leg = CURRENT_LEG.get()
    if leg is not None and leg.policy is not None and leg.journal.writer is writer:
        batch, guarded = await guard_batch(leg, inner, _session_id(inner), items)
        if batch is not items:  # the guard wrote a missing function_call: pass the batch on
            items = batch
            args, kw = ((batch, *args[1:]), kw) if args else (args, {**kw, "items": batch})
    try:
        result = await _call(method, args, kw)
    except Exception:
        if await _landed(inner, items):  # stored, though the store said it failed
            _record(inner, writer, "add", items, guarded)
        raise
    _record(inner, writer, "add", items, guarded)
    return result


def _same(item: Any) -> str:
    return json.dumps(item, sort_keys=True, default=str)


async def _landed(inner: Any, items: list[Any]) -> bool:
    """True when the session, after an ``add_items`` of ``items`` that raised, ends with
    exactly those items: the write was stored and only its acknowledgement was lost (the
    SDK then recovers it from the session and writes nothing again). Read with the
    session's own ``get_items``; a session that cannot say counts as not stored."""
    if not items:
        return False
    try:
        tail = await _call(inner.get_items, (), {"limit": len(items)})
        return [_same(i) for i in tail] == [_same(i) for i in items]
    except Exception:
        return False


async def _pop_item(inner: Any, writer: EvidenceWriter, method: Any, args: Any, kw: Any) -> Any:
    item = await _call(method, args, kw)
    if item is not None:
        _record(inner, writer, "pop", [item])
    return item


async def _clear(inner: Any, writer: EvidenceWriter, method: Any, args: Any, kw: Any) -> Any:
    result = await _call(method, args, kw)
    _record(inner, writer, "clear", [None])
    return result


_RECORDERS = {
    "add_items": _add_items, "pop_item": _pop_item, "clear_session": _clear,
}
_OWN = frozenset({_INNER, _WRITER, "__class__"})


def _session_id(inner: Any) -> str:
    """The session's id as it is now; '' if the session cannot say (a conversation whose
    id the service has not given yet)."""
    try:
        value = inner.session_id
    except Exception:
        return ""
    return value if isinstance(value, str) else str(value)


def _record(inner: Any, writer: EvidenceWriter, op: str, items: list[Any],
            guarded: list[Callable[[EvidenceWriter], None]] = ()) -> None:  # type: ignore[assignment]
    frame = CURRENT_LEG.get()
    run_id, scope = (frame.run_id, frame.scope) if frame is not None else ("", ())
    leg = frame if frame is not None and frame.journal.writer is writer else None
    later = leg is not None and leg.since is not None  # copy what the SDK could change
    session_id, clock = _session_id(inner), writer.clock
    executions = [*persisted_executions(leg, items), *persisted_decisions(leg, items)] \
        if leg is not None and op == "add" else []
    found = [
        (None if item is None else _snapshot(dict(item)) if later else dict(item), clock())
        for item in items
    ]

    def write(writer: EvidenceWriter) -> None:  # one batch: one group
        for record in guarded:  # what the session guard did to this batch (or saw in it)
            record(writer)
        for execution in executions:  # outputs of calls whose evidence no hook gave:
            execution(writer)  # published after a callback failed, or rejected on the context
        for item, time_ns in found:
            writer.session_item(
                run_id=run_id, session_id=session_id, item=item, scope=scope, op=op,
                time_ns=time_ns,
            )

    if leg is not None:
        leg.record(write)
    else:
        Journal.of(writer).commit(write)
