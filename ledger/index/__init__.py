"""A consumer: the DuckDB index of a ledger (never authoritative), read-only SQL,
compliance exports and ``trace``.
"""
