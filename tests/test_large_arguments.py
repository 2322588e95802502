"""Hostile input: a 100 MB tool-call argument, or tool output, is streamed to the
payload store.

The writer must not hold the argument several times over (its UTF-8 bytes, the parsed
value, its RFC 8785 canonical bytes, a cache entry): peak extra memory stays close to
one copy of the parsed value, the one thing a JCS digest cannot do without.
"""

from __future__ import annotations

import gc
import hashlib
import json
import tracemalloc

import pytest
import rfc8785

from evidence_ledger.record.writer import EvidenceWriter, item_bytes
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.payloads import PayloadStore
from evidence_ledger.verify.audit import verify_ledger

SIZE = 100 * 1024 * 1024  # bytes of argument text
# A source-like line: mostly plain text, with characters JSON and RFC 8785 escape.
LINE = 'print("total: %d" % (n,))  # \\ tab\there ' + "x" * 960 + "\n"


def _arguments() -> str:
    content = (LINE * (SIZE // len(LINE) + 1))[: SIZE - 64] + "".join(map(chr, range(32)))
    return json.dumps({"path": "src/big.py", "content": content, "mode": 0o644})


def test_a_100_mb_argument_is_streamed_not_held_several_times(tmp_path):
    text = _arguments()
    size = len(text)
    assert text.isascii() and SIZE <= size < 1.01 * SIZE  # one byte per character
    gc.collect()
    tracemalloc.start()
    try:
        writer = EvidenceWriter(tmp_path)
        with writer.atomic():  # as the recorder does: the call, then its execution
            writer.call(run_id="r", call_id="c1", agent="a", tool="write_file",
                        arguments=text)
            writer.execution(run_id="r", call_id="c1", arguments=text, agent="a",
                             tool="write_file", result="ok")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The parsed value is ~1x (json's decoder overallocates a string with escapes while
    # building it: ~1.15x measured); held as bytes, parsed and canonical it was 4.3x.
    assert peak < 1.25 * size, f"peak {peak / size:.2f}x the argument size"

    book = Ledger(tmp_path)
    (call, _), (execution, _) = book.entries()
    expected = hashlib.sha256(rfc8785.dumps(json.loads(text))).digest()
    for entry in (call, execution):
        assert entry.body["args_form"] == "jcs"
        assert entry.body["args_digest"] == expected
    assert call.body["args_payload"] == execution.body["args_payload"]
    assert book.payloads.get(call.body["args_payload"]) == text.encode("utf-8")
    report = verify_ledger(book)
    assert report.ok and report.violations == []
    assert not any("payload" in notice for notice in report.notices)


def _pieces(data: bytes, size: int):
    def fill(write):
        for start in range(0, len(data), size):
            write(data[start:start + size])
    return fill


@pytest.mark.parametrize("in_memory", [0, 10, 1 << 20])
def test_put_stream_stores_the_pieces_under_their_digest(tmp_path, in_memory):
    store = PayloadStore(tmp_path)
    data = bytes(range(256)) * 100
    digest = store.put_stream(_pieces(data, 7), in_memory=in_memory)
    assert digest == hashlib.sha256(data).digest() and store.get(digest) == data
    assert store.put_stream(_pieces(data, 1000), in_memory=in_memory) == digest  # idempotent
    assert str(store.path_for(digest)) in store._dirty
    assert sorted(p.name for p in store.root.iterdir()) == [digest.hex()[:2]]  # no temp file


def test_put_stream_stores_nothing_when_fill_fails(tmp_path):
    store = PayloadStore(tmp_path)

    def fill(write):
        write(b"x" * 100)
        raise ValueError("refused half way")

    with pytest.raises(ValueError, match="half way"):
        store.put_stream(fill, in_memory=10)
    assert list(store.root.iterdir()) == [] and not store._dirty


def test_long_session_items_and_run_states_are_stored_canonically(tmp_path):
    arguments = json.dumps({"content": ("x" * 1000 + '\\"\t\n') * 1500})  # > 1 MiB: spooled
    item = {"type": "function_call", "call_id": "c1", "name": "t", "arguments": arguments}
    writer = EvidenceWriter(tmp_path)
    writer.call(run_id="r", call_id="c1", agent="a", tool="t", arguments=arguments)
    writer.session_item(run_id="r", session_id="s", item=item)
    writer.run_state(run_id="r", state_id="st", event="to_json", state={"items": [item]})
    book = Ledger(tmp_path)
    (call, _), (session, _), (state, _) = book.entries()
    assert book.payloads.get(session.body["item_digest"]) == item_bytes(item)
    assert session.body["args_digest"] == call.body["args_digest"]
    assert state.body["digest"] == hashlib.sha256(item_bytes({"items": [item]})).digest()
    assert verify_ledger(book).ok


def test_a_100_mb_tool_output_is_streamed_not_copied(tmp_path):
    text = _arguments()  # ~100 MB of text, as a tool might return
    parts = [{"type": "text", "text": text}]  # a structured output holding it
    gc.collect()
    tracemalloc.start()
    try:
        writer = EvidenceWriter(tmp_path)
        for call_id, output in (("c-text", text), ("c-parts", parts)):
            with writer.atomic():
                writer.call(run_id="r", call_id=call_id, agent="a", tool="read", arguments="{}")
                writer.execution(run_id="r", call_id=call_id, arguments="{}", agent="a",
                                 tool="read", result=output)
                writer.session_item(run_id="r", session_id="s", item={
                    "type": "function_call", "call_id": call_id, "name": "read",
                    "arguments": "{}"})
                writer.session_item(run_id="r", session_id="s", item={
                    "type": "function_call_output", "call_id": call_id, "output": output})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Held as bytes, each output was one more copy (1x); streamed, a few MiB at most.
    assert peak < 0.1 * len(text), f"peak {peak / len(text):.2f}x the output size"

    book = Ledger(tmp_path)
    bodies = {(e.kind, e.body["call_id"]): e.body for e, _ in book.entries()
              if e.kind in ("execution", "session_item")}
    for call_id, want in (("c-text", text.encode("utf-8")), ("c-parts", rfc8785.dumps(parts))):
        digest = hashlib.sha256(want).digest()
        assert bodies["execution", call_id]["result_digest"] == digest
        assert bodies["session_item", call_id]["output_digest"] == digest
        assert book.payloads.get(digest) == want
    report = verify_ledger(book)
    assert report.ok, report.violations
