"""The session wrapper is the app's session to the SDK: same class checks, lazy attributes,
every method and keyword forwarded, and what it stores recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents import OpenAIConversationsSession, RunContextWrapper, SQLiteSession
from agents.memory.session import (
    _session_accepts_wrapper,
    is_openai_responses_compaction_aware_session,
)

from evidence_ledger.record.integrations.recorded_session import is_recorded, recorded_session
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger

pytestmark = pytest.mark.anyio


def _ops(ledger: Path) -> list[tuple[str, str, str | None]]:
    return [(e.body["session_id"], e.body["op"], e.body["item_type"])
            for e, _ in Ledger(ledger).entries() if e.kind == "session_item"]


class WrapperSession(SQLiteSession):
    """A session that opts into the SDK's ``wrapper=`` keyword, and keeps what it got."""

    seen: list[Any]

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[Any]:
        self.seen.append(("get", wrapper))
        return await super().get_items(limit)

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        self.seen.append(("add", wrapper))
        await super().add_items(items)

    async def pop_item(self, *, wrapper: Any = None) -> Any:
        self.seen.append(("pop", wrapper))
        return await super().pop_item()

    async def clear_session(self, *, wrapper: Any = None) -> None:
        self.seen.append(("clear", wrapper))
        await super().clear_session()


class CompactingSession(SQLiteSession):
    """A compaction-aware session (the SDK calls ``run_compaction`` when it has one)."""

    compactions: list[Any]

    async def run_compaction(self, args: Any = None) -> None:
        self.compactions.append(args)


async def test_a_conversation_session_keeps_its_class_and_its_lazy_id(tmp_path: Path):
    inner = OpenAIConversationsSession(openai_client=object())  # type: ignore[arg-type]
    session = recorded_session(EvidenceWriter(tmp_path), inner)  # reads no session_id
    assert isinstance(session, OpenAIConversationsSession) and is_recorded(session)
    assert type(session).__name__ == "OpenAIConversationsSession"
    with pytest.raises(ValueError, match="Session ID not yet available"):
        _ = session.session_id
    session.session_id = "conv_1"  # the setter reaches the session itself
    assert inner.session_id == "conv_1" and session.session_id == "conv_1"
    assert not is_recorded(inner)


async def test_every_history_method_forwards_the_wrapper_keyword(tmp_path: Path):
    inner = WrapperSession("w", ":memory:")
    inner.seen = []
    session = recorded_session(EvidenceWriter(tmp_path), inner)
    assert _session_accepts_wrapper(session) and not _session_accepts_wrapper(
        recorded_session(EvidenceWriter(tmp_path), SQLiteSession("plain", ":memory:")))
    wrapper = RunContextWrapper(context=None)
    await session.add_items([{"role": "user", "content": "a"}], wrapper=wrapper)
    assert await session.get_items(wrapper=wrapper) == [{"role": "user", "content": "a"}]
    assert await session.pop_item(wrapper=wrapper) == {"role": "user", "content": "a"}
    await session.clear_session(wrapper=wrapper)
    assert inner.seen == [("add", wrapper), ("get", wrapper), ("pop", wrapper),
                          ("clear", wrapper)]
    assert _ops(tmp_path) == [("w", "add", "message"), ("w", "pop", "message"),
                              ("w", "clear", None)]


async def test_a_compaction_aware_session_keeps_its_compaction(tmp_path: Path):
    inner = CompactingSession("c", ":memory:")
    inner.compactions = []
    session = recorded_session(EvidenceWriter(tmp_path), inner)
    plain = recorded_session(EvidenceWriter(tmp_path), SQLiteSession("p", ":memory:"))
    assert is_openai_responses_compaction_aware_session(session)
    assert not is_openai_responses_compaction_aware_session(plain)
    await session.run_compaction({"force": True})
    assert inner.compactions == [{"force": True}]


async def test_attributes_read_and_written_are_the_sessions_own(tmp_path: Path):
    inner = SQLiteSession("attrs", ":memory:")
    session = recorded_session(EvidenceWriter(tmp_path), inner)
    session.note = "kept"
    assert inner.note == "kept" and session.session_id == "attrs"  # type: ignore[attr-defined]
    assert session.session_settings is inner.session_settings
    del session.note
    assert not hasattr(inner, "note")
    assert recorded_session(EvidenceWriter(tmp_path), inner).__class__ is type(session)
