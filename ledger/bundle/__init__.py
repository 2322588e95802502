"""A consumer: signed, offline-verifiable proof bundles; building one from a ledger
and verifying one with nothing but the bundle and keys.
"""
