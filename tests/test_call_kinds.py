"""Every kind of call the SDK (0.24) makes, in one recorded run, and what the verifier says
when the approval of any approvable one is missing.

One agent, driven by ``Runner.run``'s arguments through a :class:`Recorder` and a
``ScriptedModel``, calls in one response a function tool, a tool of a local MCP server
over stdio (``tests/data/mcp_files_server.py``), a shell, an apply_patch, a custom and a
computer tool, a hosted MCP tool (an approval request) and a hosted web search; every
approvable call pauses, is approved through the recorder, and runs on resume, when the
provider runs the hosted MCP call and the agent hands off through a ``handoff(agent)``
object. The ledger verifies clean; re-appended to a new ledger without one approval, it
fails with ``approval_binding`` on that call, for each approvable kind.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    ApplyPatchTool,
    ComputerTool,
    CustomTool,
    HostedMCPTool,
    ShellTool,
    WebSearchTool,
    function_tool,
    handoff,
)
from agents.computer import Computer
from agents.editor import ApplyPatchResult
from agents.mcp import MCPServerStdio
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseComputerToolCall, ResponseFunctionWebSearch
from openai.types.responses.response_computer_tool_call import ActionScreenshot
from openai.types.responses.response_function_web_search import ActionSearch
from openai.types.responses.response_output_item import McpApprovalRequest, McpCall

from evidence_ledger import Recorder
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.verify.audit import verify_ledger

pytestmark = pytest.mark.anyio

MCP_SERVER = Path(__file__).parent / "data" / "mcp_files_server.py"

APPROVABLE = {
    "k-function": "refund", "k-mcp-server": "delete_file", "k-shell": "shell",
    "k-apply-patch": "apply_patch", "k-custom": "note", "k-hosted-mcp": "lookup",
}
"""call_id -> tool of each call that pauses for approval."""

RUN_BY_NO_APPROVAL = {"k-computer": "computer_use_preview", "k-web-search": "web_search",
                      "k-handoff": "transfer_to_closer"}


class Screen(Computer):
    """A computer whose only action used here is a screenshot."""

    environment = "linux"
    dimensions = (1, 1)

    def screenshot(self) -> str:
        return "img"

    def click(self, x: int, y: int, button: Any) -> None: ...
    def double_click(self, x: int, y: int) -> None: ...
    def scroll(self, x: int, y: int, scroll_x: int, scroll_y: int) -> None: ...
    def type(self, text: str) -> None: ...
    def wait(self) -> None: ...
    def move(self, x: int, y: int) -> None: ...
    def keypress(self, keys: list[str]) -> None: ...
    def drag(self, path: list[tuple[int, int]]) -> None: ...


class Editor:
    """An apply_patch editor that changes nothing."""

    def create_file(self, operation: Any) -> ApplyPatchResult:
        return ApplyPatchResult(status="completed", output="created")

    def update_file(self, operation: Any) -> ApplyPatchResult:
        return ApplyPatchResult(status="completed", output="updated")

    def delete_file(self, operation: Any) -> ApplyPatchResult:
        return ApplyPatchResult(status="completed", output="deleted")


@function_tool(needs_approval=True)
def refund(amount: int) -> str:
    """Refund (gated)."""
    return f"refunded {amount}"


def _first_response() -> list[Any]:
    return [
        function_call("refund", {"amount": 5}, call_id="k-function"),
        function_call("delete_file", {"path": "/x"}, call_id="k-mcp-server"),
        {"type": "shell_call", "id": "id-shell", "call_id": "k-shell", "status": "in_progress",
         "action": {"type": "exec", "commands": ["ls"], "timeout_ms": 1000}},
        {"type": "apply_patch_call", "id": "id-patch", "call_id": "k-apply-patch",
         "status": "completed",
         "operation": {"type": "update_file", "path": "a.txt", "diff": "-a\n+b\n"}},
        {"type": "custom_tool_call", "name": "note", "call_id": "k-custom", "input": "hi"},
        McpApprovalRequest(id="k-hosted-mcp", type="mcp_approval_request", name="lookup",
                           server_label="docs", arguments='{"q": "x"}'),
        ResponseComputerToolCall(id="id-computer", type="computer_call", call_id="k-computer",
                                 action=ActionScreenshot(type="screenshot"),
                                 pending_safety_checks=[], status="completed"),
        ResponseFunctionWebSearch(id="k-web-search", type="web_search_call", status="completed",
                                  action=ActionSearch(type="search", query="x")),
    ]


def _second_response() -> list[Any]:
    return [
        McpCall(id="mcp-1", type="mcp_call", name="lookup", server_label="docs",
                arguments='{"q": "x"}', output="found x", approval_request_id="k-hosted-mcp"),
        function_call("transfer_to_closer", {}, call_id="k-handoff"),
    ]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def every_kind(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger of the run the module docstring describes."""
    ledger = tmp_path_factory.mktemp("kinds") / "ledger"
    async with MCPServerStdio(params={"command": sys.executable, "args": [str(MCP_SERVER)]},
                              require_approval="always", cache_tools_list=True) as server:
        closer = Agent(name="closer", model=ScriptedModel([
            ModelStep(output=[assistant_message("done")])]))
        agent = Agent(name="operator", mcp_servers=[server], handoffs=[handoff(closer)], tools=[
            refund,
            ShellTool(executor=lambda request: "ran", needs_approval=True),
            ApplyPatchTool(editor=Editor(), needs_approval=True),
            CustomTool(name="note", description="Take a note (gated)",
                       on_invoke_tool=lambda *_: "noted", needs_approval=True),
            HostedMCPTool(tool_config={"type": "mcp", "server_label": "docs",
                                       "server_url": "https://example.com",
                                       "require_approval": "always"}),
            ComputerTool(computer=Screen()),
            WebSearchTool(),
        ], model=ScriptedModel([ModelStep(output=_first_response()),
                                ModelStep(output=_second_response())]))
        recorder = Recorder(ledger)
        state = (await recorder.run(agent, "go")).to_state()
        assert sorted(i.call_id for i in state.get_interruptions()) == sorted(APPROVABLE)
        for item in state.get_interruptions():
            recorder.approve(state, item, approver="ann")
        result = await recorder.run(agent, state)
    assert result.final_output == "done" and not result.interruptions
    return ledger


def _evidence(ledger: Path) -> dict[str, list[tuple[str, Any]]]:
    """call_id -> (entry kind, tool) of its call, decision and execution entries."""
    found: dict[str, list[tuple[str, Any]]] = {}
    for entry, _ in Ledger(ledger).entries():
        if entry.kind in ("call", "decision", "execution"):
            found.setdefault(entry.body["call_id"], []).append((entry.kind, entry.body["tool"]))
    return found


async def test_every_kind_of_call_is_recorded_and_verifies_clean(every_kind: Path):
    found = _evidence(every_kind)
    for call_id, tool in APPROVABLE.items():
        assert found[call_id] == [("call", tool), ("decision", tool), ("execution", tool)]
    for call_id, tool in RUN_BY_NO_APPROVAL.items():
        assert found[call_id] == [("call", tool), ("execution", tool)]
    assert verify_ledger(Ledger(every_kind)).violations == []


def reappended_without_decision(source: Path, target: Path, call_id: str) -> None:
    """Append every entry of ``source`` to a new ledger at ``target``, in order, with its
    links to earlier entries re-pointed, except the decision on ``call_id``."""
    writer = EvidenceWriter(Ledger(target))
    shutil.copytree(source / "payloads", target / "payloads", dirs_exist_ok=True)
    moved: dict[bytes, bytes] = {}
    for entry, hash_ in Ledger(source).entries():
        if entry.kind == "decision" and entry.body["call_id"] == call_id:
            continue
        moved[hash_] = writer.append(entry.kind, entry.body,
                                     [moved[r] for r in entry.refs if r in moved], entry.time)


@pytest.mark.parametrize("call_id", sorted(APPROVABLE))
async def test_a_missing_approval_of_any_kind_is_reported(
    every_kind: Path, tmp_path: Path, call_id: str
):
    reappended_without_decision(every_kind, tmp_path / "ledger", call_id)
    violations = verify_ledger(Ledger(tmp_path / "ledger")).violations
    assert {(v.rule, v.call_id) for v in violations} == {("approval_binding", call_id)}
