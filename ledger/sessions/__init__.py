"""Session doctor: find agent sessions poisoned by tool items out of order, and repair the
orphan outputs among them from the ledger's evidence.

An openai-agents 0.22.x defect persisted a ``function_call_output`` whose
``function_call`` was never written; the model provider then refuses every later turn
of that conversation (HTTP 400). This package scans session stores for that damage and
for its relatives, and rebuilds the missing ``function_call`` from the recorded call.

This module is the package's public API. One module per job, in the order data flows:

- :mod:`.scan`: the findings in one session's history (pure);
- :mod:`.stores`: reading a ``SQLiteSession`` file or a JSON Lines dump, read-only;
- :mod:`.report`: scanning every session of a store (the ``scan-session`` report);
- :mod:`.evidence`: what the ledger says about calls and sessions, indexed for repairs;
- :mod:`.plan`: planning the repair of orphan outputs from that evidence (pure);
- :mod:`.markers`: a repair's durable intent, and settling repairs a crash left open;
- :mod:`.record`: what every repair shares: preconditions, history, ``session_repair``
  entries;
- :mod:`.apply_store`: carrying out a plan on a SQLite store, in one transaction;
- :mod:`.apply_session`: carrying out a plan on any SDK ``Session`` object.
"""
