"""Runnable examples of recording agent runs; ``evidence-ledger demo`` runs
:mod:`.approval_flow` from an installed wheel."""
