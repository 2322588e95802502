"""The top: the public API's own code (the ledger handle, keys, lazy loading of the
optional extras). :mod:`evidence_ledger` re-exports it; nothing below imports it.
"""
