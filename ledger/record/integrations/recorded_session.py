"""The session wrapper: a :class:`agents.Session` that records every item the wrapped
session stores or removes (``session_item`` entries)."""

from __future__ import annotations

from typing import Any

from agents import Session

from evidence_ledger.record.integrations.group_commit import Journal
from evidence_ledger.record.integrations.legs import CURRENT_LEG
from evidence_ledger.record.writer import EvidenceWriter

__all__ = ["RecordedSession"]


def _snapshot(value: Any) -> Any:
    """``value`` with its dicts and lists copied (other values shared): a session item as
    it was stored, should the SDK change the object before its entry is appended."""
    if isinstance(value, dict):
        return {key: _snapshot(inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [_snapshot(inner) for inner in value]
    return value


class RecordedSession:
    """A :class:`agents.Session` that records what the wrapped session stores.

    Each item passed to ``add_items`` is recorded (``session_item``, ``op="add"``) after
    the inner session accepted the batch; ``pop_item`` records ``op="pop"`` with the
    item removed, ``clear_session`` records ``op="clear"``. Reads are not recorded.
    Items are mappings (``function_call``: call_id, name, arguments;
    ``function_call_output``: call_id, output; messages: role, content).

    Inside a leg of a recorder on the same writer, the entries are that leg's evidence
    (queued under ``"group"`` durability, see
    :mod:`evidence_ledger.record.integrations.openai_agents`);
    outside one they are durable before the method returns.
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
        frame = CURRENT_LEG.get()
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
            Journal.of(self.writer).commit(write)

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
