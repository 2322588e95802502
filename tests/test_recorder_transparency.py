"""The recorder is a guest: a recorded run behaves as the plain SDK run does.

Each test runs the same scripted agent plainly (``Runner``) and through a :class:`Recorder`
and compares what the app can observe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from evidence_ledger import Recorder
from evidence_ledger.storage.ledger_dir import Ledger

pytestmark = pytest.mark.anyio


@function_tool
def lookup(order_id: str) -> str:
    """Read an order."""
    return f"order {order_id}"


def _agent() -> Agent[Any]:
    return Agent(name="support", tools=[lookup], model=ScriptedModel([
        ModelStep(output=[function_call("lookup", {"order_id": "o-1"}, call_id="c-1")]),
        ModelStep(output=[assistant_message("done")]),
    ]))


async def _first_event_then_aclose(result: Any) -> None:
    stream = result.stream_events()
    await stream.__anext__()
    await stream.aclose()


async def test_aclose_on_the_recorded_stream_closes_the_sdks(tmp_path: Path):
    plain = Runner.run_streamed(_agent(), "hi")
    await _first_event_then_aclose(plain)
    recorded = Recorder(tmp_path).run_streamed(_agent(), "hi")
    await _first_event_then_aclose(recorded)
    # the SDK's own generator, closed, waits for its run: the run has finished
    assert plain.is_complete and plain.run_loop_task is not None and plain.run_loop_task.done()
    assert recorded.is_complete == plain.is_complete
    assert recorded.run_loop_task is not None and recorded.run_loop_task.done()
    assert recorded.final_output == plain.final_output == "done"
    ends = [e.body["status"] for e, _ in Ledger(tmp_path).entries() if e.kind == "run_end"]
    assert ends == ["completed"]
