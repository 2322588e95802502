"""The guard: a tool the policy names runs only on a live, bound approval in the ledger.

A recorder given a policy (``Recorder(ledger, policy=...)``,
:mod:`evidence_ledger.policy.model`) checks each call of a tool the policy names right
before the tool's body would run, after the SDK has decided to run it: it appends what
is queued, reads the ledger as it stands (other processes' entries too: a revocation
made elsewhere counts), asks :func:`~evidence_ledger.policy.judge.judge`, and appends an
``allowed`` or a ``denied`` entry, durably, before the body may run.

Where it stops the body:

- a function tool of an agent the recorder attaches (also one with an output schema, or
  given by ``Agent.as_tool``) gets one more tool input guardrail, :data:`GUARD_NAME`, last
  in its list (the SDK runs tool input guardrails once it has decided to run the call,
  right before ``on_tool_start`` and the body). Denied in ``enforce`` mode, the tool
  returns the policy's rejection message (the SDK's own text by default) as its output,
  or, with ``on_deny = "raise"``, the SDK raises ``ToolInputGuardrailTripwireTriggered``;
- every other kind the recorder records (a tool of an MCP server, which the SDK makes for
  each run, shell, local shell, apply_patch, computer, custom) is judged at
  ``on_tool_start``, which the SDK awaits before it calls the body: denied in ``enforce``
  mode, :class:`GuardDenied` is raised there, so the run fails and the body is never
  called (the SDK has no rejection path after that point);
- a hosted MCP tool's call, which the provider runs, gets a rejection as the answer to its
  approval request (:mod:`~evidence_ledger.record.integrations.hosted_guard`).

In ``observe`` mode (the policy's, or one rule's) the verdict is recorded and the tool
runs. A run configured with ``pre_approval_tool_input_guardrails`` would have the SDK run
the guard before it asks for approval: the recorder refuses that combination.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, FunctionTool
from agents.tool_guardrails import ToolGuardrailFunctionOutput, ToolInputGuardrail

from evidence_ledger.format.digests import arguments_digest
from evidence_ledger.format.errors import LedgerError
from evidence_ledger.policy.judge import Verdict, judge
from evidence_ledger.policy.model import Policy, ToolRule
from evidence_ledger.record.integrations.agent_labels import (
    agent_label,
    function_tool_label,
    tool_label,
)
from evidence_ledger.record.integrations.legs import CURRENT_LEG, Leg
from evidence_ledger.record.integrations.wrappers import ours
from evidence_ledger.record.writer import EvidenceWriter

__all__ = ["GUARD_NAME", "GuardDenied", "guard_call", "install_guard"]

GUARD_NAME = "evidence-ledger:guard"
"""The name of the tool input guardrail the guard adds to the function tools it holds."""


class GuardDenied(LedgerError):
    """The guard denied a call of a tool the SDK runs without a rejection path (raised
    into the SDK from ``on_tool_start``: the run fails, the body never runs)."""


def guard_call(frame: Leg, rule: ToolRule, call_id: str, agent: str, tool: str,
               arguments: str, rejects: bool) -> Verdict:
    """Judge the call ``(frame.run_id, frame.scope, call_id)`` and append the ``allowed`` /
    ``denied`` entry, after what the leg queued, durably, before returning the verdict
    (``rejects``: denied, the call gets the policy's message as its output).

    Raises:
        StorageError: if the entry cannot be appended (the tool must not run then).
    """
    policy = frame.policy
    assert policy is not None
    verdicts: list[Verdict] = []

    digest = arguments_digest(arguments).digest

    def write(writer: EvidenceWriter) -> None:
        now = writer.clock()
        verdict = judge(writer.guard_facts, policy, rule, run_id=frame.run_id,
                        scope=frame.scope, call_id=call_id, leg=frame.run_state, now=now,
                        arguments=arguments, args_digest=digest)
        writer.guard(
            allowed=verdict.allowed, run_id=frame.run_id, call_id=call_id, scope=frame.scope,
            agent=agent, tool=tool, arguments=arguments, mode=rule.mode,
            code=verdict.code, reason=verdict.reason, policy_digest=policy.digest,
            run_state=frame.run_state, time_ns=now,
            message=policy.message if not verdict.allowed and rule.mode == "enforce"
            and rejects else None, args_digest=digest,
        )
        verdicts.append(verdict)

    frame.journal.commit(write, join=False)
    frame.guarded[frame.scope, call_id] = verdicts[0]
    return verdicts[0]


async def _guard_function(data: Any) -> ToolGuardrailFunctionOutput:
    """The guardrail :func:`install_guard` adds: allow outside a recorded leg with a
    policy, or for a tool no rule names; else the guard's verdict."""
    frame = CURRENT_LEG.get()
    if frame is None or frame.policy is None:
        return ToolGuardrailFunctionOutput.allow()
    context, agent = data.context, agent_label(data.agent)
    tool = tool_label(context.tool_name, getattr(context, "tool_namespace", None))
    rule = frame.policy.rule(agent, tool)
    if rule is None:
        return ToolGuardrailFunctionOutput.allow()
    verdict = guard_call(frame, rule, context.tool_call_id, agent, tool, context.tool_arguments,
                         rejects=frame.policy.on_deny == "reject")
    if verdict.allowed or rule.mode == "observe":
        return ToolGuardrailFunctionOutput.allow()
    if frame.policy.on_deny == "raise":
        return ToolGuardrailFunctionOutput.raise_exception(output_info=verdict.reason)
    return ToolGuardrailFunctionOutput.reject_content(frame.policy.message,
                                                      output_info=verdict.reason)


GUARD: ToolInputGuardrail[Any] = ToolInputGuardrail(
    guardrail_function=ours(_guard_function), name=GUARD_NAME)
ours(GUARD)  # never wrapped as an app's guardrail: it records its own entries


def install_guard(agents: list[Agent[Any]], policy: Policy) -> None:
    """Add :data:`GUARD` last to the tool input guardrails of every function tool of
    ``agents`` that a rule of ``policy`` names (in place, once per tool)."""
    for agent in agents:
        label = agent_label(agent)
        for tool in agent.tools:
            if not isinstance(tool, FunctionTool) or policy.rule(
                    label, function_tool_label(tool)) is None:
                continue
            held = list(tool.tool_input_guardrails or ())
            if GUARD not in held:
                tool.tool_input_guardrails = [*held, GUARD]


def guard_started(frame: Leg, agent: Agent[Any], call_id: str, label: str,
                  arguments: str) -> None:
    """``on_tool_start`` of a call the guardrail did not judge (a tool of another kind, or
    of an MCP server): judge it now; denied in ``enforce`` mode, raise.

    Raises:
        GuardDenied: naming the call and why.
    """
    if frame.policy is None or (frame.scope, call_id) in frame.guarded:
        return
    name = agent_label(agent)
    rule = frame.policy.rule(name, label)
    if rule is None:
        return
    verdict = guard_call(frame, rule, call_id, name, label, arguments, rejects=False)
    if not verdict.allowed and rule.mode == "enforce":
        raise GuardDenied(f"the guard denied {label} call {call_id}: {verdict.reason}")
