"""The native core: the compiled half of the ``format`` stage (Rust, built from this folder's
crate by ``pip install`` where cargo exists). Import it only through
:mod:`evidence_ledger.format.core`, which falls back to the pure-Python reference."""
