"""The rule engine with its state spilled (runs retired at their end, the rest evicted
between entries) finds exactly what it finds with everything in memory; its plain-data
state round-trips; and a verify pass over a 10^5-entry log keeps only open runs' calls."""

from __future__ import annotations

import functools
import gc
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.workload import CHAINS_PER_RUN, chain_steps
from evidence_ledger.format.entries import ZERO_HASH, Entry, decode_entry, entry_hash
from evidence_ledger.format.framing import Record
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.verify.records import verify_records
from evidence_ledger.verify.rules import STATE_TABLES, CallState, RuleEngine
from evidence_ledger.verify.spill import Spill
from tests.helpers import DATA, ingest

NAMES = sorted(p.stem for p in (DATA / "rules").glob("*.jsonl"))


@functools.cache
def _fixture(name: str) -> tuple[Entry, ...]:
    """The entries of ``tests/data/rules/<name>.jsonl`` as ingested."""
    with tempfile.TemporaryDirectory() as tmp:
        ingest(Path(tmp), name)
        return tuple(decode_entry(r.data) for r in Ledger(Path(tmp)).scan())


def _run_end(entry: Entry, run_id: str) -> Entry:
    return entry._replace(kind="run_end", refs=(), body={
        "run_id": run_id, "scope": [], "status": "completed", "run_state": None})


@st.composite
def interleavings(draw: st.DrawFn) -> list[Entry]:
    """Entries of a few rule fixtures interleaved at random (their run ids kept, so that
    copies collide, or made apart; some session items naming no run, so that they are
    traced by call_id to any run), with ``run_end`` entries that complete random runs
    thrown in (so runs retire and are taken back later)."""
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4))
    streams = []
    for number, name in enumerate(names):
        apart = draw(st.booleans())
        streams.append([
            e._replace(body={**e.body, "run_id": f"{e.body['run_id']}~{number}"})
            if apart and isinstance(e.body.get("run_id"), str) else e
            for e in _fixture(name)])
    out: list[Entry] = []
    runs: list[str] = []
    while any(streams):
        stream = draw(st.sampled_from([s for s in streams if s]))
        entry = stream.pop(0)
        if entry.kind == "session_item" and draw(st.integers(0, 3)) == 0:
            entry = entry._replace(body={**entry.body, "run_id": ""})
        out.append(entry)
        if isinstance(entry.body.get("run_id"), str):
            runs.append(entry.body["run_id"])
        if runs and draw(st.integers(0, 5)) == 0:
            out.append(_run_end(entry, draw(st.sampled_from(runs))))
    return [e._replace(seq=seq) for seq, e in enumerate(out)]


def _verdict(engine: RuleEngine) -> tuple[object, ...]:
    findings = [(f.rule, f.seq, f.detail, f.run_id, f.scope, f.call_id, f.compared)
                for f in engine.findings]
    return (findings, engine.notices + engine.closing_notices(), list(engine.calls.items()),
            engine.state_rows())


def _fed(engine: RuleEngine, entries: list[Entry]) -> RuleEngine:
    for entry in entries:
        engine.feed(entry)
    return engine


@settings(max_examples=150, deadline=None, database=None)
@given(interleavings(), st.integers(0, 2))
def test_spilled_engine_finds_exactly_what_the_in_memory_one_does(entries, live_limit):
    whole = _fed(RuleEngine(), entries)
    spilled = _fed(RuleEngine(Spill(), live_limit=live_limit), entries)
    assert _verdict(spilled) == _verdict(whole)


@settings(max_examples=100, deadline=None, database=None)
@given(interleavings(), st.data())
def test_state_rows_round_trip_and_resume(entries, data):
    cut = data.draw(st.integers(0, len(entries)))
    first = _fed(RuleEngine(), entries[:cut])
    rows = first.state_rows()
    assert set(rows) == set(STATE_TABLES)
    assert all(len(row) == len(STATE_TABLES[name]) for name, held in rows.items()
               for row in held)
    assert all(type(v) in (str, int, bool, bytes, type(None))
               for held in rows.values() for row in held for v in row)
    restored = RuleEngine.from_state_rows(rows)
    assert restored.state_rows() == rows
    assert dict(restored.calls) == dict(first.calls)
    spilled = RuleEngine.from_state_rows(rows, Spill(), live_limit=0)
    whole = _fed(RuleEngine(), entries)
    assert _verdict(_fed(restored, entries[cut:])) == _verdict(whole)
    assert _verdict(_fed(spilled, entries[cut:])) == _verdict(whole)


def test_every_fixture_round_trips_through_state_rows():
    for name in NAMES:
        engine = _fed(RuleEngine(Spill(), live_limit=0), list(_fixture(name)))
        rows = engine.state_rows()
        assert RuleEngine.from_state_rows(rows).state_rows() == rows, name
        assert rows["calls"] or rows["findings"], name


def _generated_log(entries: int) -> list[Record]:
    """Records of a ``entries``-entry log of benchmark call chains (runs of
    :data:`CHAINS_PER_RUN` chains, each ending ``completed``): one run written, then
    copied under other run, call and session ids (payloads are not written)."""
    with tempfile.TemporaryDirectory() as tmp:
        writer = EvidenceWriter(Path(tmp))
        for i in range(CHAINS_PER_RUN):
            for step in chain_steps(writer, i):
                step()
        template = [decode_entry(r.data) for r in Ledger(Path(tmp)).scan()]
    records: list[Record] = []
    prev = ZERO_HASH
    copy = 0
    while len(records) < entries:
        renamed: dict[bytes, bytes] = {}
        for old in template[: entries - len(records)]:
            body = {k: f"{v}~{copy}" if k in ("run_id", "call_id", "session_id") else v
                    for k, v in old.body.items()}
            entry = Entry(len(records), prev, old.kind, old.time, body,
                          tuple(renamed[r] for r in old.refs))
            data = entry.to_bytes()
            prev = entry_hash(data)
            renamed[entry_hash(Entry(old.seq, old.prev, old.kind, old.time, old.body,
                                     old.refs).to_bytes())] = prev
            records.append(Record(len(records), 0, data, True))
        copy += 1
    return records


def test_verify_keeps_only_the_open_runs_calls_in_memory():
    records = _generated_log(100_000)
    calls = sum(decode_entry(r.data).kind == "call" for r in records)
    report = verify_records(iter(records))
    del records
    assert report.ok and report.tree_size == 100_000
    gc.collect()
    live = sum(type(o) is CallState for o in gc.get_objects())
    assert live <= CHAINS_PER_RUN  # the last run may still be open: no other call is held
    assert len(report.calls) == calls
    first = next(iter(report.calls.values()))
    assert (first.key, first.seq, len(first.executions), len(first.persisted)) == (
        ("run-000000~0", (), "call_000000000~0"), 0, 1, 1)


def test_a_spilled_report_is_read_in_another_thread(tmp_path):
    """Once: the HTML report read a demo's calls in another thread than the one that
    verified, and SQLite refused the spill's connection there."""
    from concurrent.futures import ThreadPoolExecutor

    ingest(tmp_path / "l")
    spill = Spill()
    with ThreadPoolExecutor(1) as thread:
        engine = thread.submit(_fed_from, RuleEngine(spill, live_limit=0),
                               tmp_path / "l").result()
    assert spill.call_count() > 0 and list(engine.calls) == sorted(
        engine.calls, key=lambda key: engine.calls[key].seq)


def _fed_from(engine: RuleEngine, directory: Path) -> RuleEngine:
    for record in Ledger(directory).scan():
        if isinstance(record, Record):
            engine.feed(decode_entry(record.data))
    engine.closing_notices()
    return engine
