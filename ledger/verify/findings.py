"""Findings: what the verifier reports, and the names of its rules."""

from __future__ import annotations

from dataclasses import dataclass, field

INTEGRITY = "integrity"
TOOL_LINKAGE = "tool_linkage"
OUTPUT_PROVENANCE = "output_provenance"
EXECUTION_PROVENANCE = "execution_provenance"
APPROVAL_BINDING = "approval_binding"
REJECTION_RESPECTED = "rejection_respected"
ARGUMENT_INTEGRITY = "argument_integrity"
EXACTLY_ONCE = "exactly_once"
APPROVED_NOT_EXECUTED = "approved_not_executed"
STATE_ISOLATION = "state_isolation"
NESTED_OWNERSHIP = "nested_ownership"
OUTPUT_NOT_PERSISTED = "output_not_persisted"
FOREIGN_INTERRUPTION = "foreign_interruption"

PAYLOAD_MISSING = "payload_missing"
"""A payload an entry names is gone and no ``redaction`` entry erased it: lost evidence.

Reported by :func:`evidence_ledger.verify.audit.verify_ledger` when payloads are checked (not part
of :data:`RULES`, which the pure verifier and offline bundles run without a payload store).
"""

GUARD_VERDICT = "guard_verdict"
"""An ``allowed`` / ``denied`` entry says other than the guard's judgement of the evidence
before it (:mod:`evidence_ledger.verify.guard_audit`; needs the policy's payload)."""

GUARD_BYPASSED = "guard_bypassed"
"""A call of a tool a run's policy enforces executed without the guard's ``allowed`` entry
before it (:mod:`evidence_ledger.verify.guard_audit`; needs the policy's payload)."""

GUARD_RULES = (GUARD_VERDICT, GUARD_BYPASSED)
"""The guard audit's rules: run by the ledger's verifier with its payloads, not by the
pure rule engine (a bundle carries no policy file)."""

RULES = (
    INTEGRITY,
    TOOL_LINKAGE,
    OUTPUT_PROVENANCE,
    EXECUTION_PROVENANCE,
    APPROVAL_BINDING,
    REJECTION_RESPECTED,
    ARGUMENT_INTEGRITY,
    EXACTLY_ONCE,
    APPROVED_NOT_EXECUTED,
    STATE_ISOLATION,
    NESTED_OWNERSHIP,
    OUTPUT_NOT_PERSISTED,
    FOREIGN_INTERRUPTION,
)
"""Stable rule names, in the order reports list them (see FORMAT.md)."""

CHECKPOINT_RULES = (
    "checkpoint_format",
    "checkpoint_signature",
    "checkpoint_origin",
    "checkpoint_missing",
    "checkpoint_size",
    "checkpoint_root",
    "checkpoint_consistency",
    "trusted_checkpoint",
    "append_only",
)
"""Rule names of the checkpoint audit (:mod:`evidence_ledger.verify.checkpoint_audit`), named here
so the
offline bundle verifier, which reads no storage code, knows them too."""

WITNESS_QUORUM = "witness_quorum"
"""The latest stored checkpoint carries fewer valid cosignatures by the witness keys given
than wanted, or one of theirs fails (``verify --witness-key ... --min-witnesses N``,
:mod:`evidence_ledger.tlog.cosignature`): nobody independent vouches that no other branch
of the log was shown to someone else. Checked only when witness keys are given."""


@dataclass(frozen=True)
class Finding:
    """One violation of one rule.

    Attributes:
        rule: one of :data:`RULES` (or a rule added by a later check, e.g. ``append_only``).
        seq: the entry (leaf index) where the break shows, or None when it is not an entry.
        detail: one human-readable sentence.
        run_id, scope, call_id: the call identity concerned, when there is one.
        compared: for a rule that compares two arguments digests (``approval_binding``,
            ``argument_integrity``, ``foreign_interruption``), the two compared, 32 bytes
            each: ``(expected, got)``, what an approver was shown (or the call had) and
            what the call had (or ran); else None. Not part of equality, repr or
            :meth:`to_json` (a signed verdict holds the detail sentence only): for showing
            the values that differ where the payloads are at hand.
    """

    rule: str
    seq: int | None
    detail: str
    run_id: str | None = None
    scope: tuple[str, ...] = field(default=())
    call_id: str | None = None
    compared: tuple[bytes, bytes] | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, object]:
        """The violation object of ``schemas/verify-report.schema.json``."""
        return {
            "rule": self.rule,
            "run_id": self.run_id,
            "scope": list(self.scope),
            "call_id": self.call_id,
            "seq": self.seq,
            "detail": self.detail,
        }
