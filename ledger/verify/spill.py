"""Off-heap room for what a verify pass no longer works on, so its memory stays flat in
the size of the log.

:class:`Spill` is a private SQLite database in a temporary file (``sqlite3.connect("")``:
unlinked by SQLite, deleted when closed; its page cache is capped at
:data:`CACHE_KIB`). The rule engine moves a run's whole state there when the run ends or
falls out of its working set, and a session's items likewise, and takes them back
whenever a later entry names them (:class:`evidence_ledger.verify.rules.RuleEngine`);
the verifier keeps there the hashes of call entries that ``refs`` may name
(:class:`SpilledHashes`). What is stored is opaque bytes to this module: only this
process writes and reads it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator

__all__ = ["CACHE_KIB", "Spill", "SpilledHashes"]

CACHE_KIB = 4096
"""SQLite page cache of a :class:`Spill` (KiB): the most of it held in memory."""

_SCHEMA = """
CREATE TABLE runs (run_id TEXT PRIMARY KEY, state BLOB NOT NULL, persisted_order INTEGER,
                   persisted INTEGER) WITHOUT ROWID;
CREATE TABLE calls (seq INTEGER PRIMARY KEY, call_id TEXT NOT NULL, run_id TEXT NOT NULL,
                    scope TEXT NOT NULL);
CREATE INDEX calls_by_id ON calls (call_id);
CREATE INDEX calls_by_run ON calls (run_id);
CREATE TABLE states (state_id TEXT PRIMARY KEY, parent TEXT, run_id TEXT NOT NULL)
    WITHOUT ROWID;
CREATE INDEX states_by_run ON states (run_id);
CREATE TABLE sessions (session_id TEXT PRIMARY KEY, state BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE hashes (hash BLOB PRIMARY KEY) WITHOUT ROWID;
"""


class Spill:
    """Retired runs, sessions and call-entry hashes, off the Python heap.

    A run is either live (in the engine) or here, never both: :meth:`take_run` removes
    what it returns. Values are the engine's own encodings (bytes).
    """

    def __init__(self) -> None:
        # A verify report (which reads spilled calls back) may be read in another thread
        # than the one that verified, one at a time; Python's sqlite3 is built serialized.
        self._db = sqlite3.connect("", isolation_level=None, check_same_thread=False)
        self._db.executescript(
            f"PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-{CACHE_KIB};"
            + _SCHEMA)

    def close(self) -> None:
        """Delete the database (a :class:`Spill` also closes when collected)."""
        self._db.close()

    # -- runs --------------------------------------------------------------------------

    def put_run(self, run_id: str, state: bytes, persisted: tuple[int, bool] | None,
                calls: Iterable[tuple[int, str, str]], states: Iterable[tuple[str, str | None]],
                ) -> None:
        """Store a run's encoded ``state``, with what is looked up across runs: its
        ``persisted`` ``(order, flag)`` (or None), its calls as ``(seq, call_id, scope)``
        (the scope encoded as text) and the run states it recorded as
        ``(state_id, parent)``."""
        order, flag = persisted if persisted is not None else (None, None)
        db = self._db
        db.execute("BEGIN")
        db.execute("INSERT INTO runs VALUES (?, ?, ?, ?)", (run_id, state, order, flag))
        db.executemany("INSERT INTO calls VALUES (?, ?, ?, ?)",
                       ((seq, call_id, run_id, scope) for seq, call_id, scope in calls))
        db.executemany("INSERT INTO states VALUES (?, ?, ?)",
                       ((state_id, parent, run_id) for state_id, parent in states))
        db.execute("COMMIT")

    def run(self, run_id: str) -> bytes | None:
        """A stored run's state, left stored (None: not here)."""
        row = self._db.execute("SELECT state FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else row[0]

    def take_run(self, run_id: str) -> tuple[bytes, list[tuple[str, str | None]]] | None:
        """A stored run's state and its run states ``(state_id, parent)``, removed with its
        calls (None: not here)."""
        state = Spill.run(self, run_id)  # this database's, whatever a subclass adds
        if state is None:
            return None
        db = self._db
        db.execute("BEGIN")
        states = db.execute(
            "DELETE FROM states WHERE run_id = ? RETURNING state_id, parent", (run_id,)).fetchall()
        db.execute("DELETE FROM calls WHERE run_id = ?", (run_id,))
        db.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
        db.execute("COMMIT")
        return state, states

    def call_runs(self, call_id: str) -> list[tuple[int, str, str]]:
        """``(seq, run_id, scope)`` of every stored call with ``call_id``, by seq."""
        return self._db.execute("SELECT seq, run_id, scope FROM calls WHERE call_id = ? "
                                "ORDER BY seq", (call_id,)).fetchall()

    def call_seqs(self) -> Iterator[tuple[int, str, str, str]]:
        """``(seq, run_id, scope, call_id)`` of every stored call, by seq."""
        return iter(self._db.execute("SELECT seq, run_id, scope, call_id FROM calls ORDER BY seq"))

    def call_count(self) -> int:
        """Number of stored calls."""
        return int(self._db.execute("SELECT count(*) FROM calls").fetchone()[0])

    def run_ids(self) -> list[str]:
        """Every stored run (ids; one short string a run)."""
        return [row[0] for row in self._db.execute("SELECT run_id FROM runs")]

    def written_run_ids(self) -> list[str]:
        """The stored runs written here by :meth:`put_run` (a subclass over state stored
        elsewhere may hold more: :meth:`run_ids`)."""
        return Spill.run_ids(self)

    def unpersisted(self, first: int) -> tuple[int, list[tuple[int, str]]]:
        """How many stored runs have a false persisted flag, and ``(order, run_id)`` of the
        ``first`` of them by order."""
        db = self._db
        count = db.execute("SELECT count(*) FROM runs WHERE persisted = 0").fetchone()[0]
        return int(count), db.execute(
            "SELECT persisted_order, run_id FROM runs WHERE persisted = 0 "
            "ORDER BY persisted_order LIMIT ?", (first,)).fetchall()

    def state_parent(self, state_id: str) -> tuple[bool, str | None]:
        """``(True, parent)`` for a stored run state, else ``(False, None)``."""
        row = self._db.execute(
            "SELECT parent FROM states WHERE state_id = ?", (state_id,)).fetchone()
        return (False, None) if row is None else (True, row[0])

    # -- sessions ----------------------------------------------------------------------

    def put_session(self, session_id: str, state: bytes) -> None:
        """Store a session's encoded state."""
        self._db.execute("INSERT INTO sessions VALUES (?, ?)", (session_id, state))

    def take_session(self, session_id: str) -> bytes | None:
        """A stored session's state, removed (None: not here)."""
        row = self._db.execute(
            "DELETE FROM sessions WHERE session_id = ? RETURNING state", (session_id,)).fetchone()
        return None if row is None else row[0]

    def sessions(self) -> Iterator[tuple[str, bytes]]:
        """Every stored session and its state."""
        return iter(self._db.execute("SELECT session_id, state FROM sessions"))


    def written_sessions(self) -> Iterator[tuple[str, bytes]]:
        """The stored sessions written here by :meth:`put_session`, and their states (see
        :meth:`written_run_ids`)."""
        return Spill.sessions(self)


class SpilledHashes:
    """A set of 32-byte hashes that keeps at most ``buffer`` of them in memory and the
    rest in a :class:`Spill`.

    Args:
        spill: where the older hashes go.
        buffer: hashes held in memory before they are moved out in one batch.
    """

    def __init__(self, spill: Spill, buffer: int = 65_536) -> None:
        self._db = spill._db
        self._recent: set[bytes] = set()
        self._buffer = buffer
        self._spilled = False

    def add(self, hash_: bytes) -> None:
        """Add one hash."""
        self._recent.add(hash_)
        if len(self._recent) >= self._buffer:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR IGNORE INTO hashes VALUES (?)",
                                 ((h,) for h in self._recent))
            self._db.execute("COMMIT")
            self._recent.clear()
            self._spilled = True

    def __contains__(self, hash_: bytes) -> bool:
        if hash_ in self._recent:
            return True
        return self._spilled and self._db.execute(
            "SELECT 1 FROM hashes WHERE hash = ?", (hash_,)).fetchone() is not None
