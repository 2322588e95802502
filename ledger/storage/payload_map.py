"""The derived location map of a segment ledger: payload digest -> (segment, offset, length,
state) of every copy, in an SQLite file (``payloads/locations.sqlite``, WAL journal,
``synchronous=NORMAL``: a crash may lose its latest changes, never its consistency), with
a high-water mark: every record before ``(segment, offset)`` has been read into it, and the
number of rows it has added (less those it dropped): a map whose row count differs (a row
deleted behind its back) is emptied on open, and its store reads every segment again.

It is derived from the segments alone and never trusted further than they are: a map that
cannot be opened or read is deleted and built again, as is one whose file or a
companion (``-wal``, ``-shm``, ``-journal``) is not a regular file with one link (a
symbolic link, a FIFO, a folder, a hard link: SQLite would follow it out of the
ledger); one the segments contradict is rebuilt by its store
(:mod:`evidence_ledger.storage.segment_store`). Memory: SQLite's page
cache (a few MiB), whatever the number of payloads. Where the file cannot be written (a
read-only ledger), the map is a private temporary database that SQLite deletes on close.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from collections.abc import Iterable
from pathlib import Path

MAP_NAME = "locations.sqlite"
_SCHEMA = 2
_COMPANIONS = ("", "-wal", "-shm", "-journal")
Location = tuple[int, int, int, int]
"""(segment number, record offset in bytes, payload length in bytes, state)."""

_DDL = (
    "CREATE TABLE IF NOT EXISTS loc (digest BLOB NOT NULL, segment INTEGER NOT NULL, "
    "offset INTEGER NOT NULL, length INTEGER NOT NULL, state INTEGER NOT NULL, "
    "PRIMARY KEY (digest, segment, offset)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS mark (id INTEGER PRIMARY KEY CHECK (id = 0), "
    "segment INTEGER NOT NULL, offset INTEGER NOT NULL, records INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO mark VALUES (0, 1, 0, 0)",
)


class PayloadMap:
    """The location map at ``path`` (see the module docstring).

    Raises (every method):
        sqlite3.Error: if the database fails; the store then calls :meth:`reset`.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        """The file, None for a private temporary map."""
        self._db = self._connect()

    def _connect(self) -> sqlite3.Connection:
        if self.path is None or not self._only_regular_files():
            return self._open("")
        try:
            return self._open(str(self.path))
        except sqlite3.DatabaseError:  # damaged, or not a database: it is derived
            self._remove_files()
            try:
                return self._open(str(self.path))
            except sqlite3.Error:
                return self._open("")
        except sqlite3.Error:  # cannot be written here (a read-only ledger)
            return self._open("")

    @staticmethod
    def _open(name: str) -> sqlite3.Connection:
        db = sqlite3.connect(name, isolation_level=None, check_same_thread=False, timeout=30)
        try:
            if name:
                db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, _SCHEMA):
                db.execute("DROP TABLE IF EXISTS loc")
                db.execute("DROP TABLE IF EXISTS mark")
            db.execute("BEGIN IMMEDIATE")
            for statement in _DDL:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {_SCHEMA}")
            counted = db.execute("SELECT count(*) FROM loc").fetchone()[0]
            if db.execute("SELECT records FROM mark").fetchone()[0] != counted:
                db.execute("DELETE FROM loc")  # rows lost: read every segment again
                db.execute("UPDATE mark SET segment = 1, offset = 0, records = 0")
            db.execute("COMMIT")
            db.execute("SELECT count(*) FROM mark").fetchone()
        except BaseException:
            db.close()
            raise
        return db

    def _only_regular_files(self) -> bool:
        """Remove the map's files that are not regular files with one link (derived data);
        False when one cannot be removed (the map is then a private one)."""
        for suffix in _COMPANIONS:
            name = f"{self.path}{suffix}"
            try:
                info = os.lstat(name)
            except FileNotFoundError:
                continue
            except OSError:
                return False
            if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
                continue
            try:
                if stat.S_ISDIR(info.st_mode):
                    os.rmdir(name)
                else:
                    os.unlink(name)
            except OSError:
                return False
        return True

    def _remove_files(self) -> None:
        if self.path is None:
            return
        for suffix in _COMPANIONS:
            with contextlib.suppress(OSError):
                os.unlink(f"{self.path}{suffix}")

    def reset(self) -> None:
        """Forget everything (the files are deleted and made again): a rebuild follows."""
        with contextlib.suppress(sqlite3.Error):
            self._db.close()
        self._remove_files()
        self._db = self._connect()

    def close(self) -> None:
        """Close the database."""
        with contextlib.suppress(sqlite3.Error):
            self._db.close()

    def mark(self) -> tuple[int, int]:
        """The high-water mark ``(segment, offset)``: every record before it is read in."""
        row = self._db.execute("SELECT segment, offset FROM mark").fetchone()
        return (int(row[0]), int(row[1])) if row else (1, 0)

    def add(self, rows: Iterable[tuple[bytes, int, int, int, int]], mark: tuple[int, int]
            ) -> None:
        """Add ``rows`` ``(digest, segment, offset, length, state)`` (already known ones are
        kept as they are) and raise the high-water mark to ``mark`` (never lower it), in one
        transaction."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            before = db.total_changes
            db.executemany("INSERT OR IGNORE INTO loc VALUES (?, ?, ?, ?, ?)", rows)
            db.execute("UPDATE mark SET records = records + ?", (db.total_changes - before,))
            db.execute("UPDATE mark SET segment = ?, offset = ? WHERE (segment, offset) < (?, ?)",
                       (*mark, *mark))
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise

    def find(self, digest: bytes) -> list[Location]:
        """Every copy of payload ``digest``, stored ones first, then by position."""
        return [(r[0], r[1], r[2], r[3]) for r in self._db.execute(
            "SELECT segment, offset, length, state FROM loc WHERE digest = ? "
            "ORDER BY state, segment, offset", (digest,))]

    def present(self, digests: Iterable[bytes]) -> set[bytes]:
        """Those of ``digests`` with a stored copy (state 0)."""
        wanted = list(digests)
        found: set[bytes] = set()
        for at in range(0, len(wanted), 500):
            part = wanted[at:at + 500]
            marks = ",".join("?" * len(part))
            found.update(r[0] for r in self._db.execute(
                f"SELECT DISTINCT digest FROM loc WHERE state = 0 AND digest IN ({marks})",
                part))
        return found

    def set_state(self, digest: bytes, state: int) -> None:
        """Record that every copy of ``digest`` is now in ``state``."""
        self._db.execute("UPDATE loc SET state = ? WHERE digest = ?", (state, digest))

    def drop(self, digest: bytes) -> None:
        """Forget every copy of ``digest`` (erased)."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            dropped = db.execute("DELETE FROM loc WHERE digest = ?", (digest,)).rowcount
            db.execute("UPDATE mark SET records = records - ?", (dropped,))
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise

    def after(self, digest: bytes, limit: int) -> list[bytes]:
        """Up to ``limit`` digests of known copies greater than ``digest``, in order (to page
        through them all in bounded memory)."""
        return [r[0] for r in self._db.execute(
            "SELECT DISTINCT digest FROM loc WHERE digest > ? ORDER BY digest LIMIT ?",
            (digest, limit))]

    def between(self, low: bytes, high: bytes | None) -> list[bytes]:
        """Digests ``low <= d < high`` (``high`` None: no upper bound) of the copies known."""
        if high is None:
            query, args = "SELECT DISTINCT digest FROM loc WHERE digest >= ?", (low,)
        else:
            query = "SELECT DISTINCT digest FROM loc WHERE digest >= ? AND digest < ?"
            args = (low, high)  # type: ignore[assignment]
        return [r[0] for r in self._db.execute(query, args)]
