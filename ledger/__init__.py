"""evidence-ledger: a content-addressed, Merkle-chained evidence ledger for AI agent runs.

The public API is this module's ``__all__``; every other module is internal. The code is
laid out along the data path, one subpackage per stage, each importing only from the
stages before it (``tests/test_layout.py`` holds the order and checks this line)::

    format -> tlog -> storage -> policy -> verify -> record -> index -> bundle -> sessions
        -> views -> api

``format`` entries, canonical encoding, framing; ``tlog`` Merkle maths, proofs, signed
notes (both pure); ``storage`` log.bin, payloads, tiles, checkpoints, keys; ``policy`` the
guard's policy file and judgement (pure); ``verify`` the rules and the audit; ``record``
the writer, the SDK recorder and its guard; ``index`` DuckDB, SQL,
exports; ``bundle`` proof bundles; ``sessions`` session scan and repair; ``views``
evidence for people (payload values, value diffs, the HTML report); ``api`` this API.

Names are loaded on first use (PEP 562), so ``import evidence_ledger`` loads no optional
dependency: verifying a bundle or a checkpoint never imports the Agents SDK, DuckDB or
pyarrow.

Verbs::

    Ledger(directory, create=False)      open a ledger directory; its methods: entries,
                                         verify, trace, inclusion_proof, consistency_proof,
                                         update_index, query, export, verify_export,
                                         ingest, redact, checkpoint, prove, repair_sessions,
                                         diff (two runs side by side), revoke, approve,
                                         value / open_payload (a payload by digest or
                                         prefix), violation_values, trace_values, report
                                         (an HTML page of runs)
    Recorder(directory, policy=None)     record OpenAI Agents SDK runs; with a policy,
                                         guard the tools it names           [agents]
    read_policy(path)                    a guard policy file, checked
    named_queries()                      the named audit queries Ledger.query runs by name
    SigningKey.generate(path, origin)    a checkpoint key (and its .vkey file);
                                         SigningKey.load(path)
    verify_bundle(bundle, verifier_keys)            a proof bundle, offline
    verify_checkpoint(note, verifier_keys)          a signed checkpoint, offline
    verify_export(directory, verifier_keys)         an export, offline          [query]
    report_bundle(bundle, verifier_keys, out)       a bundle's HTML report, offline
    check_witnesses(note, witness_keys, n)          its witnesses' cosignatures, offline
    WitnessServer(key, logs, state)      a witness: cosigns checkpoints consistent with
                                         the last it cosigned (c2sp.org/tlog-witness)
    monitor_checkpoints(path, keys, origin)  follow a log's checkpoints; stop at a fork
    scan_sessions(store)                 a session store, for tool items out of order
    run_demo(directory)                  the approval-flow demo                 [agents]
    migrate(directory, to=2)             rewrite a format-1 ledger's payload files into
                                         payload segments (log and checkpoints unchanged)
    core_in_use()                        "native core" (Rust, built where cargo was) or
                                         "pure-Python core" (EVIDENCE_LEDGER_PURE=1 forces it)

Keys are passed one way everywhere: signing keys as :class:`SigningKey`, verifier keys as
C2SP strings (``name+hex8+base64``). Errors derive from :class:`LedgerError`, whose
``exit_code`` the CLI exits with: 1 for :class:`EvidenceError` and :class:`StorageError`,
2 for :class:`UsageError` (and :class:`MissingExtraError`, naming the extra to install).
Methods marked ``[query]`` need the ``query`` extra (DuckDB, pyarrow).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

_PUBLIC = {
    # verbs
    "Ledger": "evidence_ledger.api.handle",
    "LedgerProofs": "evidence_ledger.api.proofs",
    "Recorder": "evidence_ledger.record.integrations.openai_agents",
    "SigningKey": "evidence_ledger.api.keys",
    "verify_bundle": "evidence_ledger.api.offline",
    "verify_checkpoint": "evidence_ledger.api.offline",
    "verify_export": "evidence_ledger.api.offline",
    "scan_sessions": "evidence_ledger.api.offline",
    "check_witnesses": "evidence_ledger.api.offline",
    "WitnessServer": "evidence_ledger.api.witness",
    "monitor_checkpoints": "evidence_ledger.api.monitor",
    "Witness": "evidence_ledger.tlog.witness_protocol",
    "run_demo": "evidence_ledger.api.demo",
    "report_bundle": "evidence_ledger.api.reports",
    "read_policy": "evidence_ledger.record.policy_file",
    "named_queries": "evidence_ledger.index.named",
    "migrate": "evidence_ledger.storage.migrate",
    "core_in_use": "evidence_ledger.format.core",
    # errors
    "LedgerError": "evidence_ledger.format.errors",
    "EvidenceError": "evidence_ledger.format.errors",
    "UsageError": "evidence_ledger.format.errors",
    "StorageError": "evidence_ledger.format.errors",
    "MissingExtraError": "evidence_ledger.api.extras",
    "QuorumError": "evidence_ledger.tlog.cosignature",
    "MonitorError": "evidence_ledger.api.monitor",
    "PolicyError": "evidence_ledger.policy.model",
    "GuardDenied": "evidence_ledger.record.integrations.guard",
    # what the verbs return, for annotations
    "Report": "evidence_ledger.verify.records",
    "Finding": "evidence_ledger.verify.findings",
    "CallChain": "evidence_ledger.verify.chains",
    "CallState": "evidence_ledger.verify.rules",
    "StateNode": "evidence_ledger.verify.lineage",
    "VerifiedBundle": "evidence_ledger.bundle.verify",
    "VerifiedCheckpoint": "evidence_ledger.tlog.checkpoint",
    "ScanReport": "evidence_ledger.sessions.report",
    "SessionRepair": "evidence_ledger.api.handle",
    "RunDiff": "evidence_ledger.verify.compare",
    "ReportFile": "evidence_ledger.api.reports",
    "Policy": "evidence_ledger.policy.model",
    "Value": "evidence_ledger.views.values",
    "ValueDiff": "evidence_ledger.views.values",
    "NamedQuery": "evidence_ledger.index.named",
    "WitnessResult": "evidence_ledger.tlog.witness_protocol",
    "WitnessQuorum": "evidence_ledger.tlog.cosignature",
    "Migration": "evidence_ledger.storage.migrate",
}
"""Public name -> the module that defines it."""

_EXTRA = {"Recorder": "agents", "GuardDenied": "agents"}
"""Public names whose module needs an optional extra."""

__all__ = [
    "CallChain",
    "CallState",
    "EvidenceError",
    "Finding",
    "GuardDenied",
    "Ledger",
    "LedgerError",
    "LedgerProofs",
    "Migration",
    "MissingExtraError",
    "MonitorError",
    "NamedQuery",
    "Policy",
    "PolicyError",
    "QuorumError",
    "Recorder",
    "Report",
    "ReportFile",
    "RunDiff",
    "ScanReport",
    "SessionRepair",
    "SigningKey",
    "StateNode",
    "StorageError",
    "UsageError",
    "Value",
    "ValueDiff",
    "VerifiedBundle",
    "VerifiedCheckpoint",
    "Witness",
    "WitnessQuorum",
    "WitnessResult",
    "WitnessServer",
    "__version__",
    "check_witnesses",
    "core_in_use",
    "migrate",
    "monitor_checkpoints",
    "named_queries",
    "read_policy",
    "report_bundle",
    "run_demo",
    "scan_sessions",
    "verify_bundle",
    "verify_checkpoint",
    "verify_export",
]

if TYPE_CHECKING:
    from evidence_ledger.api.demo import run_demo
    from evidence_ledger.api.extras import MissingExtraError
    from evidence_ledger.api.handle import Ledger, SessionRepair
    from evidence_ledger.api.keys import SigningKey
    from evidence_ledger.api.monitor import MonitorError, monitor_checkpoints
    from evidence_ledger.api.offline import (
        check_witnesses,
        scan_sessions,
        verify_bundle,
        verify_checkpoint,
        verify_export,
    )
    from evidence_ledger.api.proofs import LedgerProofs
    from evidence_ledger.api.reports import ReportFile, report_bundle
    from evidence_ledger.api.witness import WitnessServer
    from evidence_ledger.bundle.verify import VerifiedBundle
    from evidence_ledger.format.errors import EvidenceError, LedgerError, StorageError, UsageError
    from evidence_ledger.index.named import NamedQuery, named_queries
    from evidence_ledger.policy.model import Policy, PolicyError
    from evidence_ledger.record.integrations.guard import GuardDenied
    from evidence_ledger.record.integrations.openai_agents import Recorder
    from evidence_ledger.record.policy_file import read_policy
    from evidence_ledger.sessions.report import ScanReport
    from evidence_ledger.storage.migrate import Migration, migrate
    from evidence_ledger.tlog.checkpoint import VerifiedCheckpoint
    from evidence_ledger.tlog.cosignature import QuorumError, WitnessQuorum
    from evidence_ledger.tlog.witness_protocol import Witness, WitnessResult
    from evidence_ledger.verify.chains import CallChain
    from evidence_ledger.verify.compare import RunDiff
    from evidence_ledger.verify.findings import Finding
    from evidence_ledger.verify.lineage import StateNode
    from evidence_ledger.verify.records import Report
    from evidence_ledger.verify.rules import CallState
    from evidence_ledger.views.values import Value, ValueDiff


def __getattr__(name: str) -> Any:
    """Load a public name on first use (PEP 562).

    A name whose optional extra is not installed is a stand-in that raises
    :class:`MissingExtraError` when called, so ``help()``, ``dir()`` and ``import *`` work
    on a base install.

    Raises:
        AttributeError: for a name that is not public.
    """
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'evidence_ledger' has no attribute {name!r}")
    if name in _EXTRA:
        from evidence_ledger.api.extras import MissingExtraError, load, missing

        try:
            value = getattr(load(module, _EXTRA[name], name), name)
        except MissingExtraError as exc:  # a stand-in that says so when it is used
            value = missing(name, exc)
    else:
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
