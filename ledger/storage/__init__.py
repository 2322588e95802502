"""Storage: a ledger directory on disk. The framed log, payloads, the derived tree tiles,
the checkpoint store, signing keys, locks, fsync and torn-tail recovery.
"""
