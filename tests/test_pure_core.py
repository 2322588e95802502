"""The verifier and the proof checks are a pure core: they import nothing from storage."""

import subprocess
import sys

import pytest

STORAGE = ("ledger.store", "ledger.log", "ledger.payloads", "ledger.tree_store",
           "ledger.checkpoint_store", "ledger.index", "duckdb", "agents")


@pytest.mark.parametrize(
    "module", ["ledger.verify", "ledger.rules", "ledger.proof_verify", "ledger.bundle_verify",
               "ledger.checkpoint", "ledger.note", "ledger.sessions.scan"],
)
def test_pure_module_loads_no_storage(module):
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True).stdout.split())
    assert not loaded & set(STORAGE), loaded & set(STORAGE)
