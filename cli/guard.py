"""The guard's commands: ``revoke`` and ``approve`` a recorded call's approvals from outside
the app, and ``check-policy`` a policy file before a recorder loads it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

import evidence_ledger as el
from evidence_ledger.cli import output
from evidence_ledger.cli.options import JsonOpt, LedgerOpt, open_ledger

__all__ = ["register"]

CallIdOpt = Annotated[str, typer.Option("--call-id", metavar="ID", help="The recorded call.")]
RunIdOpt = Annotated[
    str | None,
    typer.Option("--run-id", metavar="ID",
                 help="The run that made the call (needed when several runs reuse the call id)."),
]
ByOpt = Annotated[str, typer.Option("--by", metavar="NAME", help="Who decides (recorded).")]


def revoke_command(
    call_id: CallIdOpt,
    by: ByOpt,
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded).")],
    run_id: RunIdOpt = None,
    ledger: LedgerOpt = None,
    json: JsonOpt = False,
) -> None:
    """Revoke every approval of a recorded call made so far.

    A recorder with a guard policy then refuses to run the call's tool, also from a
    `RunState` approved and serialized before (the run gets the rejection message); the
    revocation is durable when this returns.
    """
    seq = open_ledger(ledger).revoke(call_id, by=by, reason=reason, run_id=run_id)
    if json:
        output.print_json({"call_id": call_id, "revocation_seq": seq})
    else:
        output.stdout.print(f"revoked the approvals of {call_id} (seq {seq})", markup=False)


def approve_command(
    call_id: CallIdOpt,
    by: ByOpt,
    key: Annotated[Path, typer.Option("--key", metavar="PATH",
                                      help="The approver's private key file (keygen).")],
    reason: Annotated[str | None, typer.Option("--reason", help="Why (recorded).")] = None,
    run_id: RunIdOpt = None,
    ledger: LedgerOpt = None,
    json: JsonOpt = False,
) -> None:
    """Approve a recorded call, signed with the approver's key.

    Appends an `approve` decision bound to the call's arguments digest and the key's
    Ed25519 signature over the call (a policy with `signed = true` counts only such
    approvals, by the key it names for the approver). The app still applies the approval
    to its `RunState` before it resumes.
    """
    seq = open_ledger(ledger).approve(call_id, by=by, key=el.SigningKey.load(key),
                                      reason=reason, run_id=run_id)
    if json:
        output.print_json({"call_id": call_id, "decision_seq": seq})
    else:
        output.stdout.print(f"approved {call_id} as {by}, signed (seq {seq})", markup=False)


def check_policy_command(
    policy: Annotated[Path, typer.Argument(metavar="FILE", help="A guard policy (TOML).")],
    json: JsonOpt = False,
) -> None:
    """Check a guard policy file; print the tools it guards (exit 2 if it is not valid)."""
    parsed = el.read_policy(policy)
    rules: list[dict[str, Any]] = [{
        "match": rule.match, "agent": rule.agent, "mode": rule.mode,
        "approvers": sorted(rule.approvers) if rule.approvers is not None else None,
        "max_age_s": rule.max_age_ns // 1_000_000_000 if rule.max_age_ns else None,
        "second_approver": rule.second_approver, "signed": rule.signed,
        "arguments": [c.name for c in rule.constraints],
    } for rule in parsed.tools]
    if json:
        output.print_json({"policy_digest": "sha256:" + parsed.digest.hex(),
                           "on_deny": parsed.on_deny, "tools": rules})
        return
    output.stdout.print(f"policy sha256:{parsed.digest.hex()}: {len(rules)} rule(s), "
                        f"on deny: {parsed.on_deny}", markup=False)
    for rule in rules:
        who = ", ".join(rule["approvers"]) if rule["approvers"] else "anyone"
        extras = [f"max age {rule['max_age_s']} s"] if rule["max_age_s"] else []
        extras += ["second approver"] * bool(rule["second_approver"])
        extras += ["signed"] * bool(rule["signed"])
        extras += [f"arguments: {', '.join(rule['arguments'])}"] if rule["arguments"] else []
        agent = f" (agent {rule['agent']})" if rule["agent"] else ""
        output.stdout.print(f"  {rule['match']}{agent}: {rule['mode']}, approved by {who}"
                            + "".join(f"; {e}" for e in extras), markup=False)


def register(app: typer.Typer) -> None:
    """Add ``revoke``, ``approve`` and ``check-policy`` to ``app``."""
    app.command("revoke")(revoke_command)
    app.command("approve")(approve_command)
    app.command("check-policy")(check_policy_command)
