"""The verifier. Findings, the evidence rules and run-state lineage (pure), and the
audit of a ledger directory and its checkpoints that feeds them.
"""
