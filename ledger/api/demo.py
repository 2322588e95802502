"""``evidence-ledger demo``: record the approval-flow example into a fresh ledger, sign a
checkpoint with a throwaway key written beside it, and verify.

The example ships inside the package (``evidence_ledger.examples.approval_flow``), so the
demo runs from an installed wheel; it needs the ``[agents]`` extra, and runs offline with
a scripted model.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

from evidence_ledger.api.extras import load
from evidence_ledger.api.handle import Ledger
from evidence_ledger.api.keys import SigningKey
from evidence_ledger.format.errors import UsageError
from evidence_ledger.storage.checkpoint_store import StoredCheckpoint
from evidence_ledger.verify.chains import CallChain, call_chains
from evidence_ledger.verify.records import Report

__all__ = ["DEMO_ORIGIN", "DemoResult", "run_demo"]

DEMO_ORIGIN = "demo.evidence-ledger.example/log"
"""The throwaway key's name: the origin of the demo ledger's checkpoints."""

EXAMPLE = "evidence_ledger.examples.approval_flow"


@dataclass(frozen=True)
class DemoResult:
    """What the demo made.

    Attributes:
        ledger: the ledger it recorded into.
        example: the file name of the example it ran.
        key: the throwaway signing key (``<ledger>-signing.key``, its verifier key in
            ``<ledger>-signing.vkey``).
        checkpoint: the checkpoint it signed.
        report: the verifier's report on the ledger, with that key.
        chains: one row per call, from call to persisted output.
    """

    ledger: Ledger
    example: str
    key: SigningKey
    checkpoint: StoredCheckpoint
    report: Report
    chains: list[CallChain]


def _require_fresh(directory: Path) -> None:
    """Refuse a target that exists and is not an empty directory."""
    Ledger(directory, create=True)  # a directory, or a path where one can be made
    try:
        empty = not directory.exists() or next(directory.iterdir(), None) is None
    except OSError as exc:
        raise UsageError(f"cannot read {directory}: {exc.strerror or exc}") from exc
    if not empty:
        raise UsageError(
            f"{directory} is not empty; demo records into a fresh directory: remove it or "
            "pass another --ledger"
        )


def run_demo(directory: str | os.PathLike[str]) -> DemoResult:
    """Record the approval-flow example into ``directory`` (new or empty), write a throwaway
    key ``<directory>-signing.key`` (and ``.vkey``) beside it, sign a checkpoint, verify.

    Raises:
        MissingExtraError: (exit 2) without the ``[agents]`` extra.
        UsageError: if ``directory`` is not empty or the key files exist already.
    """
    target = Path(directory)
    _require_fresh(target)
    whole = target.resolve()  # "." has no name: the key goes beside the directory itself
    key_path = whole.parent / f"{whole.name}-signing.key"
    SigningKey.check_new_path(key_path)  # and its .vkey
    example = load(EXAMPLE, "agents", "demo")
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop: the demo runs its own
        asyncio.run(example.main(str(target)))
    else:
        raise UsageError("run_demo runs its own event loop: call it outside async code")
    key = SigningKey.generate(key_path, DEMO_ORIGIN)  # writes <directory>-signing.vkey too
    ledger = Ledger(target)
    stored = ledger.checkpoint(key)
    report = ledger.verify([key.verifier_key])
    return DemoResult(ledger, Path(example.__file__ or EXAMPLE).name, key, stored, report,
                      call_chains(report.calls.values()))
