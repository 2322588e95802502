"""Group commit in the recorder (``Recorder(ledger, durability="group")``, the default).

What must hold: the same entries as ``durability="entry"`` (kinds, bodies, order); no
sync on the agent's path, only at the end of a leg; everything durable when ``run()`` /
``stream_events()`` returns; a group the flusher cannot append surfaces as
``StorageError`` and leaves a valid ledger holding only whole groups; a crash mid-leg
leaves a prefix of the leg's evidence; the flusher never keeps the interpreter alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any
from unittest import mock

import pytest

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import Agent, RunState, SQLiteSession, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from evidence_ledger.format.errors import StorageError, UsageError
from evidence_ledger.record.integrations import group_commit, openai_agents, run_states
from evidence_ledger.record.integrations.openai_agents import Recorder
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.verify.audit import verify_ledger
from tests.helpers import stored_payloads

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parent.parent
FLUSHER = "evidence-ledger-flusher"


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


Row = tuple[str, dict[str, Any], list[int]]


def rows(directory: Path) -> list[Row]:
    """(kind, body, refs as the seqs they name) of every entry: what an entry says,
    without ``time`` and the hashes that depend on it (``prev``, entry hashes)."""
    seq_of: dict[bytes, int] = {}
    out = []
    for entry, hash_ in Ledger(directory).entries():
        seq_of[hash_] = entry.seq
        out.append((entry.kind, entry.body, [seq_of[ref] for ref in entry.refs]))
    return out


def label(row: Row) -> tuple[str, str | None]:
    kind, body, _ = row
    return kind, body.get("call_id") or body.get("status") or body.get("event")


@pytest.fixture
def fixed_ids(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Restart the recorder's run and state ids at 0 (they are random otherwise, and
    run_state digests cover them)."""

    def restart() -> None:
        counter = itertools.count()
        ids = SimpleNamespace(uuid4=lambda: SimpleNamespace(hex=f"{next(counter):032x}"))
        monkeypatch.setattr(openai_agents, "uuid", ids)
        monkeypatch.setattr(run_states, "uuid", ids)

    return restart


# -- the same evidence as entry durability ---------------------------------------------


@function_tool
async def fetch(key: str) -> str:
    """Read a record."""
    return f"record {key}"


@function_tool(needs_approval=True)
async def pay(amount: int) -> str:
    """Pay (gated)."""
    return f"paid {amount}"


def one_call(tool: str, arguments: dict[str, Any], call_id: str) -> ModelStep:
    return ModelStep(output=[function_call(tool, arguments, call_id=call_id)])


def teller() -> Agent[Any]:
    """One call per turn, async tools only: the SDK runs it in one order, every time."""
    auditor = Agent(name="auditor", tools=[fetch], model=ScriptedModel([
        one_call("fetch", {"key": "ledger"}, "c-nested"),
        ModelStep(output=[assistant_message("ok")]),
    ]))
    return Agent(name="teller", model=ScriptedModel([
        one_call("fetch", {"key": "k1"}, "c-fetch"),
        one_call("pay", {"amount": 10}, "c-pay-1"),
        one_call("pay", {"amount": 20}, "c-pay-2"),
        one_call("ask_auditor", {"input": "check"}, "c-audit"),
        ModelStep(output=[assistant_message("done")]),
    ]), tools=[fetch, pay, auditor.as_tool(tool_name="ask_auditor", tool_description="Audit.")])


async def sequential_flow(ledger: Path, durability: str, streamed: bool) -> None:
    """Three legs: pause on c-pay-1 (approved on the state reloaded from JSON), pause on
    c-pay-2 (rejected), then a nested agent call and the answer."""
    agent, session = teller(), SQLiteSession("teller", ":memory:")
    recorder = Recorder(ledger, durability=durability)
    result = await run_leg(recorder, agent, streamed, session=session)
    state = await RunState.from_json(agent, result.to_state().to_json())
    recorder.approve(state, state.get_interruptions()[0], approver="alice")
    result = await run_leg(recorder, agent, streamed, state, session=session)
    state = result.to_state()
    recorder.reject(state, state.get_interruptions()[0], approver="bob", reason="too much")
    result = await run_leg(recorder, agent, streamed, state, session=session)
    assert result.final_output == "done"


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_group_records_what_entry_records_in_the_same_order(
    tmp_path: Path, fixed_ids: Callable[[], None], streamed: bool
) -> None:
    recorded = {}
    for durability in ("group", "entry"):
        fixed_ids()
        await sequential_flow(tmp_path / durability, durability, streamed)
        recorded[durability] = rows(tmp_path / durability)

    assert [label(row) for row in recorded["group"]][-1] == ("run_end", "completed")
    assert recorded["group"] == recorded["entry"]
    payloads = {d: sorted(stored_payloads(tmp_path / d)) for d in recorded}
    assert payloads["group"] == payloads["entry"]
    assert verify_ledger(Ledger(tmp_path / "group")).violations == []


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_approval_flow_group_records_what_entry_records(
    tmp_path: Path, fixed_ids: Callable[[], None], streamed: bool
) -> None:
    """The approval flow's first turn runs four tools at once, ``lookup_order`` in a
    worker thread (the SDK runs sync tools there): the order of that turn's branches
    varies from run to run, in either durability. The same entries, then, with refs to
    the same entries, and the same order per call and per leg."""
    flow = load_example("approval_flow")
    recorded = {}
    for durability in ("group", "entry"):
        fixed_ids()
        await flow.main(str(tmp_path / durability), streamed=streamed, durability=durability)
        found = rows(tmp_path / durability)
        recorded[durability] = [
            (kind, body, [label(found[seq]) for seq in refs]) for kind, body, refs in found
        ]

    group, entry = recorded["group"], recorded["entry"]
    assert len(group) == 35  # 3 decisions with their "decided" run states, 1 "ended"
    assert sorted(map(repr, group)) == sorted(map(repr, entry))

    def per_call(found: list[Any]) -> dict[str | None, list[str]]:
        chains: dict[str | None, list[str]] = {}
        for kind, body, _ in found:
            chains.setdefault(body.get("call_id"), []).append(kind)
        return chains

    assert per_call(group) == per_call(entry)
    legs = {"run_end", "run_state", "decision"}
    assert [r for r in group if r[0] in legs] == [r for r in entry if r[0] in legs]
    assert verify_ledger(Ledger(tmp_path / "group")).violations == []


def test_unknown_durability_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="durability"):
        Recorder(tmp_path, durability="eventual")


# -- a small agent, and a store we can watch or break -----------------------------------

TURNS = 6


@function_tool
async def lookup(key: str) -> str:
    """Read a record (slowly, so that a leg spans several groups)."""
    await asyncio.sleep(0.03)
    return f"record {key}"


def lookup_agent() -> Agent[Any]:
    steps = [ModelStep(output=[function_call("lookup", {"key": f"k{t}"}, call_id=f"l{t}")])
             for t in range(TURNS)]
    steps.append(ModelStep(output=[assistant_message("done")]))
    return Agent(name="reader", model=ScriptedModel(steps), tools=[lookup])


async def run_leg(recorder: Recorder, agent: Agent[Any], streamed: bool, run_input: Any = "go",
                  **kwargs: Any) -> Any:
    if not streamed:
        return await recorder.run(agent, run_input, **kwargs)
    result = recorder.run_streamed(agent, run_input, **kwargs)
    async for _event in result.stream_events():
        pass
    return result


class WatchedStore:
    """Wraps a ledger's ``append_group``: notes who appended which records, and can fail
    (``fail``: given the thread name and the number of this call, True to fail it) or
    slow down the flusher's appends."""

    def __init__(self, recorder: Recorder, fail: Callable[[str, int], bool] | None = None,
                 flusher_delay: float = 0.0) -> None:
        self.real = recorder.writer.ledger.store.append_group
        self.fail, self.flusher_delay = fail, flusher_delay
        self.appended: list[tuple[str, list[bytes]]] = []
        self.failed: list[tuple[str, list[bytes]]] = []

    def __call__(self, records: list[bytes], *args: Any, **kwargs: Any) -> int:
        thread = threading.current_thread().name
        calls = len(self.appended) + len(self.failed) + 1
        if thread == FLUSHER and self.flusher_delay:
            time.sleep(self.flusher_delay)
        if self.fail is not None and self.fail(thread, calls):
            self.failed.append((thread, list(records)))
            raise StorageError("injected: no space left on device")
        end = self.real(records, *args, **kwargs)
        self.appended.append((thread, list(records)))
        return end

    def by(self, thread: str) -> int:
        return sum(1 for name, _ in self.appended if name == thread)


@contextlib.contextmanager
def watched(recorder: Recorder, **options: Any) -> Iterator[WatchedStore]:
    store = WatchedStore(recorder, **options)
    with mock.patch.object(recorder.writer.ledger.store, "append_group", side_effect=store):
        yield store


# -- durability points ------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_no_sync_on_the_agents_path_only_at_the_end_of_the_leg(
    tmp_path: Path, streamed: bool
) -> None:
    recorder = Recorder(tmp_path)
    with watched(recorder) as store:
        await run_leg(recorder, lookup_agent(), streamed,
                      session=SQLiteSession("s", ":memory:"))

    main = threading.current_thread().name
    assert store.by(main) == 1  # the leg's tail and its run_end
    assert store.by(FLUSHER) >= 2
    assert sum(len(records) for _, records in store.appended) == len(rows(tmp_path))


async def test_entry_durability_syncs_every_write_on_the_agents_path(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path, durability="entry")
    with watched(recorder) as store:
        await recorder.run(lookup_agent(), "go", session=SQLiteSession("s", ":memory:"))

    assert store.by(FLUSHER) == 0
    assert store.by(threading.current_thread().name) == len(store.appended) > TURNS


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_evidence_is_durable_when_the_leg_returns(tmp_path: Path, streamed: bool) -> None:
    recorder = Recorder(tmp_path)
    with watched(recorder, flusher_delay=0.05):  # a slow disk: the flusher lags behind
        result = await run_leg(recorder, lookup_agent(), streamed,
                               session=SQLiteSession("s", ":memory:"))
        found = rows(tmp_path)  # a fresh Ledger, before anything else

    assert result.final_output == "done"
    assert label(found[-1]) == ("run_end", "completed")
    calls = {f"l{t}" for t in range(TURNS)}
    for kind in ("call", "execution"):
        assert {body["call_id"] for k, body, _ in found if k == kind} == calls
    outputs = [body for k, body, _ in found
               if k == "session_item" and body["item_type"] == "function_call_output"]
    assert {body["call_id"] for body in outputs} == calls


async def test_approve_and_reject_are_durable_when_they_return(tmp_path: Path) -> None:
    flow = load_example("approval_flow")
    agent, recorder = flow.build_agent(), Recorder(tmp_path)
    paused = await recorder.run(agent, "refund please")
    state = paused.to_state()
    with watched(recorder, flusher_delay=0.05):
        for item in state.get_interruptions():
            if item.call_id == "c-email":
                recorder.reject(state, item, approver="alice")
            else:
                recorder.approve(state, item, approver="alice")
            decided = [body["call_id"] for kind, body, _ in rows(tmp_path) if kind == "decision"]
            assert decided[-1] == item.call_id


# -- failures -----------------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
@pytest.mark.parametrize("failing", [1, 2], ids=["first-group", "second-group"])
async def test_a_group_the_flusher_cannot_append_surfaces_and_appends_nothing(
    tmp_path: Path, streamed: bool, failing: int
) -> None:
    recorder = Recorder(tmp_path)
    flushes = itertools.count(1)

    def fail(thread: str, _call: int) -> bool:
        return thread == FLUSHER and next(flushes) == failing

    with watched(recorder, fail=fail) as store, pytest.raises(
        StorageError, match="not recorded: a group could not be appended"
    ):
        await run_leg(recorder, lookup_agent(), streamed, session=SQLiteSession("s", ":memory:"))

    assert len(store.failed) == 1
    written = [e.to_bytes() for e, _ in Ledger(tmp_path).entries()]
    assert written == [record for _, records in store.appended for record in records]
    assert label(rows(tmp_path)[-1]) == ("run_end", "failed")
    assert verify_ledger(Ledger(tmp_path)).violations == []
    # the failure was reported once: the recorder records the next run
    await run_leg(recorder, lookup_agent(), streamed)
    assert label(rows(tmp_path)[-1]) == ("run_end", "completed")


@pytest.mark.parametrize("failing", ["flusher", "leg-end"])
async def test_concurrent_legs_that_lose_evidence_raise_and_the_rest_stays_whole(
    tmp_path: Path, failing: str
) -> None:
    recorder = Recorder(tmp_path)
    main = threading.current_thread().name
    counts: dict[str, Iterator[int]] = {FLUSHER: itertools.count(1), main: itertools.count(1)}

    def fail(thread: str, _call: int) -> bool:
        nth = next(counts[thread])
        return (thread, nth) == ((FLUSHER, 2) if failing == "flusher" else (main, 1))

    with watched(recorder, fail=fail) as store:
        results = await asyncio.gather(
            *(recorder.run(lookup_agent(), "go", session=SQLiteSession(f"s{n}", ":memory:"))
              for n in range(3)),
            return_exceptions=True,
        )

    assert len(store.failed) == 1
    raised = [r for r in results if isinstance(r, BaseException)]
    assert raised and all(isinstance(r, StorageError) for r in raised)
    if failing == "flusher":  # it dropped evidence of every leg
        assert len(raised) == 3
    written = [e.to_bytes() for e, _ in Ledger(tmp_path).entries()]
    assert written == [record for _, records in store.appended for record in records]
    ends = {body["run_id"]: body["status"] for kind, body, _ in rows(tmp_path)
            if kind == "run_end"}
    assert sorted(ends.values()).count("completed") == len(results) - len(raised)
    assert verify_ledger(Ledger(tmp_path)).violations == []
    result = await recorder.run(lookup_agent(), "go")  # a leg started afterwards is clean
    assert result.final_output == "done"
    assert label(rows(tmp_path)[-1]) == ("run_end", "completed")


async def test_a_failing_last_group_surfaces_from_run(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path)
    main = threading.current_thread().name
    with watched(recorder, fail=lambda thread, _: thread == main) as store, pytest.raises(
        StorageError, match="injected"
    ):
        await recorder.run(lookup_agent(), "go")

    assert [thread for thread, _ in store.failed] == [main]
    written = [e.to_bytes() for e, _ in Ledger(tmp_path).entries()]
    assert written == [record for _, records in store.appended for record in records]
    assert "run_end" not in {kind for kind, _, _ in rows(tmp_path)}
    assert verify_ledger(Ledger(tmp_path)).violations == []


# -- crashes and exit -----------------------------------------------------------------------

SCRIPT_HEAD = f"""
import asyncio, itertools, os, sys, types
sys.path.insert(0, {str(REPO)!r})
os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
from agents import Agent, RunState, SQLiteSession, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from evidence_ledger.record.integrations import group_commit, openai_agents, run_states
from evidence_ledger.record.integrations.openai_agents import Recorder
counter = itertools.count()
openai_agents.uuid = types.SimpleNamespace(
    uuid4=lambda: types.SimpleNamespace(hex=f"{{next(counter):032x}}"))
"""

CRASH = SCRIPT_HEAD + """
@function_tool
async def lookup(key: str) -> str:
    '''Read a record; the machine dies at k8.'''
    if key == "k8":
        os._exit(3)
    await asyncio.sleep(0.02)
    return f"record {key}"

steps = [ModelStep(output=[function_call("lookup", {"key": f"k{t}"}, call_id=f"l{t}")])
         for t in range(12)]
agent = Agent(name="reader", model=ScriptedModel(steps), tools=[lookup])
recorder = Recorder(sys.argv[1], durability=sys.argv[2])
asyncio.run(recorder.run(agent, "go", session=SQLiteSession("s", ":memory:")))
"""


def run_script(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "OPENAI_AGENTS_DISABLE_TRACING": "1"})


def test_a_crash_mid_leg_leaves_a_valid_prefix_of_the_legs_evidence(tmp_path: Path) -> None:
    crashed = {}
    for durability in ("group", "entry"):
        done = run_script(CRASH, str(tmp_path / durability), durability)
        assert done.returncode == 3, done.stderr
        crashed[durability] = rows(tmp_path / durability)
        assert verify_ledger(Ledger(tmp_path / durability)).violations == []

    group, entry = crashed["group"], crashed["entry"]
    assert ("execution", "l7") in map(label, entry)  # acknowledged before the crash
    assert group == entry[:len(group)]


ABANDON = SCRIPT_HEAD + """
group_commit.GROUP_WINDOW = 3600.0  # the flusher would wait for an hour

steps = [ModelStep(output=[function_call("lookup", {"key": "k0"}, call_id="l0")]),
         ModelStep(output=[assistant_message("done")])]

ran = asyncio.Event()

@function_tool
def lookup(key: str) -> str:
    '''Read a record.'''
    ran.set()
    return f"record {key}"

async def main() -> None:
    recorder = Recorder(sys.argv[1])
    agent = Agent(name="reader", model=ScriptedModel(steps), tools=[lookup])
    recorder.run_streamed(agent, "go")  # its events are never read: the leg never ends
    await ran.wait()
    await asyncio.sleep(0.2)

asyncio.run(main())
print("done", flush=True)
"""


def test_an_abandoned_recorder_lets_the_interpreter_exit_and_appends_its_queue(
    tmp_path: Path,
) -> None:
    start = time.monotonic()
    done = run_script(ABANDON, str(tmp_path))

    assert (done.returncode, done.stdout) == (0, "done\n"), done.stderr
    assert time.monotonic() - start < 60
    found = rows(tmp_path)
    assert {label(row) for row in found} >= {("call", "l0"), ("execution", "l0")}
    assert "run_end" not in {kind for kind, _, _ in found}
    assert verify_ledger(Ledger(tmp_path)).violations == []


async def test_flusher_threads_are_daemons_that_end_when_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(group_commit, "FLUSHER_IDLE", 0.05)
    await Recorder(tmp_path).run(lookup_agent(), "go")

    flushers = [t for t in threading.enumerate() if t.name == FLUSHER]
    assert all(t.daemon for t in flushers)
    deadline = time.monotonic() + 10
    while any(t.is_alive() for t in flushers) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not any(t.is_alive() for t in flushers)
