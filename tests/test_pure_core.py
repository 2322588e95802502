"""The verifier and the proof checks are a pure core: they import nothing from storage."""

import subprocess
import sys

import pytest

STORAGE = ("evidence_ledger.storage.log_store", "evidence_ledger.storage.ledger_dir",
           "evidence_ledger.storage.payloads", "evidence_ledger.storage.tree_store",
           "evidence_ledger.storage.tree_state", "evidence_ledger.storage.log_proofs",
           "evidence_ledger.storage.checkpoint_store", "evidence_ledger.index.build", "duckdb",
           "agents")


@pytest.mark.parametrize(
    "module", ["evidence_ledger.verify.records", "evidence_ledger.verify.rules",
               "evidence_ledger.tlog.proof_verify", "evidence_ledger.tlog.proofs",
               "evidence_ledger.tlog.tiles",
               "evidence_ledger.bundle.verify", "evidence_ledger.tlog.checkpoint",
               "evidence_ledger.tlog.note", "evidence_ledger.tlog.dsse",
               "evidence_ledger.tlog.cosignature", "evidence_ledger.tlog.witness_protocol",
               "evidence_ledger.sessions.scan"],
)
def test_pure_module_loads_no_storage(module):
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True).stdout.split())
    assert not loaded & set(STORAGE), loaded & set(STORAGE)
