"""The report of a proof bundle, from what the bundle alone carries: its entries, its
payloads (when it has them), its signed verdict and the checkpoint they are proven
against (see :func:`evidence_ledger.bundle.verify.verify_bundle`). Pure."""

from __future__ import annotations

import dataclasses

from evidence_ledger.bundle.verify import VerifiedBundle
from evidence_ledger.tlog.note import parse_note
from evidence_ledger.verify.findings import Finding
from evidence_ledger.verify.lineage import run_state_forest
from evidence_ledger.views.report_model import (
    MAX_ENTRIES,
    CheckpointView,
    ReportModel,
    ValueSource,
    b64,
    build_report,
)
from evidence_ledger.views.values import redactions_of

__all__ = ["bundle_report"]

SIGNED_ONLY = "rests on the bundle's signature: the bundled entries cannot show it"
UNCOVERED = ("shown by the bundled entries; the signed verdict does not list this rule, so "
             "the signature says nothing about it")


def bundle_report(verified: VerifiedBundle, name: str, *, values: bool, made_at: int,
                  ) -> ReportModel:
    """The report of an authentic bundle (``name``: its file, for the header).

    Args:
        verified: the bundle, verified.
        values: show the payloads it carries (False: leave every value out).
        made_at: when (ns since the epoch, UTC), for the header.
    """
    entries = [item.entry for item in verified.entries]
    payloads = verified.payloads
    read = payloads.get if payloads is not None and values else None
    cp = verified.checkpoint
    signers = tuple((s.name, f"{s.key_id:08x}")
                    for s in parse_note(verified.checkpoint_note.encode("utf-8")).signatures)
    compared = {f: f.compared for f in verified.recomputed}  # a signed verdict holds none
    findings: list[tuple[Finding, str | None]] = [
        (dataclasses.replace(f, compared=compared.get(f)),
         SIGNED_ONLY if f in verified.signed_only else None) for f in verified.verdict]
    findings += [(f, UNCOVERED) for f in verified.uncovered]
    return build_report(
        source=f"bundle {name}", selection=verified.selection, made_at=made_at,
        entries=entries[:MAX_ENTRIES], left_out=max(len(entries) - MAX_ENTRIES, 0),
        findings=findings, elsewhere=0, calls=verified.calls,
        lineage=run_state_forest(entries),
        values=ValueSource(read, redactions_of(entries), absent_withheld=True),
        checkpoint=CheckpointView(cp.origin, cp.size, b64(cp.root), signers, "verified",
                                  (verified.signer,), "proven", "bundle", cp.size),
        tree_size=cp.size, notices=[f"absence: {verified.absence}"],
        values_mode=("digests only" if payloads is None
                     else "included" if values else "left out"),
    )
