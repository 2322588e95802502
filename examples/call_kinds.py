"""Every kind of call the SDK makes, recorded, under any openai-agents 0.20 - 0.24 (offline).

Two scenarios, each recorded into its own ledger, with a session (SQLite, in memory):

  every_kind  one agent whose first model response calls a function tool, a tool of a local
              MCP server over stdio (``examples/mcp_files_server.py``), a shell, a local
              shell, an apply_patch, a custom and a computer tool, a hosted MCP tool (an
              approval request) and the hosted tools (web search, file search, code
              interpreter, image generation, tool search: call and output). Every approvable
              call pauses and is approved through the recorder; on resume the provider runs
              the hosted MCP call and the agent hands off through a ``handoff(agent)`` object,
              whose agent answers.
  on_context  the app decides on the run context before the run, outside the recorder:
              approves a function tool's and a shell's call, rejects an apply_patch call.

Prints one JSON line per scenario: ``scenario``, ``sdk``, ``ledger``, ``error``,
``evidence`` (call id -> ``[entry kind, tool]`` of its call, decision and execution
entries, in log order), ``approvers`` (call id -> who decided) and ``persisted`` (call id
-> the item types the session got for it). ``tests/test_call_kinds.py`` (0.24, fast suite)
and ``tests/test_call_kinds_matrix.py`` (every release) check them and what ``verify`` says.

Run:  python examples/call_kinds.py --out DIR   (ledgers in DIR/<scenario>/)
      [--scenario NAME ...] [--policy FILE]   (some scenarios; the guard on: ENFORCEMENT.md)
Then: evidence-ledger verify --ledger DIR/every_kind
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import traceback
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import (
    Agent,
    ApplyPatchTool,
    CodeInterpreterTool,
    ComputerTool,
    CustomTool,
    FileSearchTool,
    HostedMCPTool,
    ImageGenerationTool,
    LocalShellTool,
    RunContextWrapper,
    ShellTool,
    SQLiteSession,
    ToolApprovalItem,
    ToolSearchTool,
    WebSearchTool,
    function_tool,
    handoff,
)
from agents.computer import Computer
from agents.editor import ApplyPatchResult
from agents.mcp import MCPServerStdio
from agents.version import __version__ as SDK_VERSION
from openai.types.responses import (
    ResponseComputerToolCall,
    ResponseFunctionToolCall,
    ResponseFunctionWebSearch,
    ResponseOutputMessage,
    ResponseOutputText,
)
from scripted_models import steps_model

from evidence_ledger import Ledger, Recorder

MCP_SERVER = Path(__file__).resolve().parent / "mcp_files_server.py"

APPROVED = {
    "k-function": "refund", "k-mcp-server": "delete_file", "k-shell": "shell",
    "k-apply-patch": "apply_patch", "k-custom": "note", "k-hosted-mcp": "lookup",
}
"""every_kind: call id -> tool of each call that pauses and is approved through the recorder."""

RUN_WITHOUT_APPROVAL = {
    "k-local-shell": "local_shell", "k-computer": "computer_use_preview",
    "k-web-search": "web_search", "k-file-search": "file_search",
    "k-code-interpreter": "code_interpreter", "k-image": "image_generation",
    "k-tool-search": "tool_search", "k-handoff": "transfer_to_closer",
}
"""every_kind: call id -> tool of each call the SDK or the provider runs without asking."""


# -- tools -------------------------------------------------------------------------------


class Screen(Computer):
    """A computer whose only action used here is a screenshot."""

    @property
    def environment(self) -> Any:
        return "linux"

    @property
    def dimensions(self) -> tuple[int, int]:
        return (1, 1)

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


def gated_tools() -> list[Any]:
    """The local tools that ask for approval, and the ones that do not."""
    return [
        refund,
        ShellTool(executor=lambda request: "ran", needs_approval=True),
        ApplyPatchTool(editor=Editor(), needs_approval=True),
        CustomTool(name="note", description="Take a note (gated)",
                   on_invoke_tool=lambda *_: "noted", needs_approval=True),
        LocalShellTool(executor=lambda request: "ran locally"),
        ComputerTool(computer=Screen()),
    ]


# -- model responses ---------------------------------------------------------------------


def function_call(name: str, arguments: str, call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(id=f"id-{call_id}", call_id=call_id, type="function_call",
                                    name=name, arguments=arguments)


def message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg", type="message", role="assistant", status="completed",
        content=[ResponseOutputText(text=text, type="output_text", annotations=[])])


SHELL_CALL = {"type": "shell_call", "id": "id-shell", "call_id": "k-shell",
              "status": "in_progress",
              "action": {"type": "exec", "commands": ["ls"], "timeout_ms": 1000}}
PATCH_CALL = {"type": "apply_patch_call", "id": "id-patch", "call_id": "k-apply-patch",
              "status": "completed",
              "operation": {"type": "update_file", "path": "a.txt", "diff": "-a\n+b\n"}}


def first_response() -> list[Any]:
    return [
        function_call("refund", '{"amount": 5}', "k-function"),
        function_call("delete_file", '{"path": "/x"}', "k-mcp-server"),
        SHELL_CALL,
        {"type": "local_shell_call", "id": "k-local-shell-item", "call_id": "k-local-shell",
         "status": "completed",
         "action": {"type": "exec", "command": ["ls"], "env": {}}},
        PATCH_CALL,
        {"type": "custom_tool_call", "name": "note", "call_id": "k-custom", "input": "hi"},
        {"type": "mcp_approval_request", "id": "k-hosted-mcp", "name": "lookup",
         "server_label": "docs", "arguments": '{"q": "x"}'},
        ResponseComputerToolCall.model_validate({
            "id": "id-computer", "type": "computer_call", "call_id": "k-computer",
            "action": {"type": "screenshot"}, "pending_safety_checks": [],
            "status": "completed"}),
        ResponseFunctionWebSearch.model_validate({
            "id": "k-web-search", "type": "web_search_call", "status": "completed",
            "action": {"type": "search", "query": "x"}}),
        {"type": "file_search_call", "id": "k-file-search", "status": "completed",
         "queries": ["refund policy"], "results": []},
        {"type": "code_interpreter_call", "id": "k-code-interpreter", "status": "completed",
         "code": "print(1)", "container_id": "cnt-1", "outputs": []},
        {"type": "image_generation_call", "id": "k-image", "status": "completed",
         "result": "aW1n"},
        {"type": "tool_search_call", "id": "ts-1", "call_id": "k-tool-search",
         "execution": "server", "arguments": {"query": "refunds"}, "status": "completed"},
        {"type": "tool_search_output", "id": "tso-1", "call_id": "k-tool-search",
         "execution": "server", "status": "completed", "tools": []},
    ]


def second_response() -> list[Any]:
    return [
        {"type": "mcp_call", "id": "mcp-1", "name": "lookup", "server_label": "docs",
         "arguments": '{"q": "x"}', "output": "found x", "approval_request_id": "k-hosted-mcp"},
        function_call("transfer_to_closer", "{}", "k-handoff"),
    ]


# -- scenarios ---------------------------------------------------------------------------


async def every_kind(ledger: Path, policy: str | None = None) -> None:
    """Record the ``every_kind`` scenario (see the module docstring) into ``ledger`` (with
    the guard's ``policy`` file, if given: docs/ENFORCEMENT.md)."""
    async with MCPServerStdio(params={"command": sys.executable, "args": [str(MCP_SERVER)]},
                              require_approval="always", cache_tools_list=True) as server:
        closer = Agent(name="closer", model=steps_model([[message("done")]]))
        agent = Agent(name="operator", mcp_servers=[server], handoffs=[handoff(closer)], tools=[
            *gated_tools(),
            HostedMCPTool(tool_config={"type": "mcp", "server_label": "docs",
                                       "server_url": "https://example.com",
                                       "require_approval": "always"}),
            WebSearchTool(), FileSearchTool(vector_store_ids=["vs-1"]),
            CodeInterpreterTool(tool_config={"type": "code_interpreter", "container": "auto"}),
            ImageGenerationTool(tool_config={"type": "image_generation"}), ToolSearchTool(),
        ], model=steps_model([first_response(), second_response()]))
        recorder, session = Recorder(ledger, policy=policy), SQLiteSession("every_kind")
        result = await recorder.run(agent, "go", session=session)
        for _ in range(3):  # each leg may pause on approvals it has not asked for yet
            if not result.interruptions:
                break
            state = result.to_state()
            for item in state.get_interruptions():
                recorder.approve(state, item, approver="ann")
            result = await recorder.run(agent, state, session=session)


async def on_context(ledger: Path, policy: str | None = None) -> None:
    """Record the ``on_context`` scenario (see the module docstring) into ``ledger`` (with
    the guard's ``policy`` file, if given)."""
    calls: list[Any] = [function_call("refund", '{"amount": 5}', "k-function"), SHELL_CALL,
                        PATCH_CALL]
    agent = Agent(name="operator", tools=gated_tools(),
                  model=steps_model([calls, [message("done")]]))
    context: RunContextWrapper[None] = RunContextWrapper(context=None)
    for call, tool in zip(calls, (None, "shell", "apply_patch"), strict=True):
        item = ToolApprovalItem(agent=agent, raw_item=call, tool_name=tool)
        if tool == "apply_patch":
            context.reject_tool(item, rejection_message="not this patch")
        else:
            context.approve_tool(item)
    await Recorder(ledger, policy=policy).run(agent, "go", context=context,
                                              session=SQLiteSession("on_context"))


SCENARIOS: dict[str, Callable[..., Coroutine[Any, Any, None]]] = {
    "every_kind": every_kind, "on_context": on_context,
}


# -- what was recorded -------------------------------------------------------------------


def recorded(ledger: Path) -> dict[str, Any]:
    """``evidence``, ``approvers`` and ``persisted`` of ``ledger`` (see the module docstring)."""
    evidence: dict[str, list[list[str]]] = {}
    approvers: dict[str, str] = {}
    persisted: dict[str, list[str]] = {}
    for entry in Ledger(ledger).entries():
        kind, body = entry["kind"], entry["body"]
        if kind in ("call", "decision", "execution"):
            evidence.setdefault(body["call_id"], []).append([kind, body["tool"]])
            if kind == "decision":
                approvers[body["call_id"]] = body["approver"]
        elif kind == "session_item" and body["call_id"] is not None:
            persisted.setdefault(body["call_id"], []).append(body["item_type"])
    return {"evidence": evidence, "approvers": approvers, "persisted": persisted}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for one ledger per scenario")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                        help="run only this scenario (repeatable; default: all)")
    parser.add_argument("--policy", help="the guard's policy file (docs/ENFORCEMENT.md)")
    args = parser.parse_args(argv)
    failed = 0
    for name in args.scenario or SCENARIOS:
        ledger, error = Path(args.out) / name, None
        try:
            asyncio.run(SCENARIOS[name](ledger, args.policy))
        except Exception as exc:  # recorded as far as it got; the ledger says what happened
            error = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
            failed += 1
        found = recorded(ledger) if (ledger / "log.bin").exists() else {}
        print(json.dumps({"scenario": name, "sdk": SDK_VERSION, "ledger": str(ledger),
                          "error": error, **found}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
