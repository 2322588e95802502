"""Group commit: the evidence queue of one :class:`EvidenceWriter` and the flusher thread
that appends it, in order, as atomic synced groups.

One queue per :class:`EvidenceWriter`, shared by every recorder and session on it, keeps
the order; lookups of recorded calls (the scope of an interruption to approve, of a
state's pending calls) happen once the calls before them are appended. The flusher is a
daemon thread, started on demand, that ends after :data:`FLUSHER_IDLE` seconds without
evidence; at interpreter exit, evidence still queued (a leg that never ended) is
appended.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator
from typing import TypeVar

from evidence_ledger.format.errors import StorageError
from evidence_ledger.record.writer import EvidenceWriter

__all__ = ["FLUSHER_IDLE", "GROUP_WINDOW", "GROUP_WRITES", "Write"]

_T = TypeVar("_T")

Write = Callable[[EvidenceWriter], object]
"""Appends one or more entries through the writer it is given (called inside ``atomic()``)."""
GROUP_WRITES = 256
"""At most this many queued writes go into one group the flusher appends."""
GROUP_WINDOW = 0.010
"""Seconds the flusher waits, after the first queued write, for more to join its group."""
FLUSHER_IDLE = 1.0
"""Seconds without evidence after which a flusher thread ends (a new one starts on demand)."""

_JOURNAL_ATTR = "_evidence_ledger_journal"
_JOURNALS_LOCK = threading.Lock()
_LIVE_JOURNALS: weakref.WeakSet[Journal] = weakref.WeakSet()


class Journal:
    """The evidence queue of one :class:`EvidenceWriter` (shared by every recorder on it).

    Writes are applied in the order they were queued or committed. Queued writes are
    appended by a daemon flusher thread, up to :data:`GROUP_WRITES` of them (or what
    arrived within :data:`GROUP_WINDOW`) as one atomic, synced group. Whoever appends
    holds the *turn* (``_busy``), so groups never interleave: the flusher, or a caller
    of :meth:`commit` / :meth:`read` that appends what is queued itself rather than
    wait for the flusher.

    If the flusher cannot append a group, nothing of it is appended and every write
    queued after it is dropped (what is durable stays a prefix of what was queued); the
    failure is kept until :meth:`settle`, :meth:`commit` or :meth:`read` reports it,
    and :meth:`submit` refuses new writes until then. :attr:`failures` counts them, so
    that every leg running when one happened learns of it (see :meth:`settle`).
    """

    def __init__(self, writer: EvidenceWriter) -> None:
        self.writer = writer
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[Write] = []
        self._busy = False  # someone holds the turn (appends a group)
        self._urgent = 0  # callers waiting for the turn: the flusher cuts its window short
        self._failure: BaseException | None = None  # not reported yet
        self._dropped = 0  # writes lost with the failed group, or refused after it
        self._last: StorageError | None = None  # the latest failure, as reported
        self.failures = 0
        """Groups the flusher could not append so far."""
        self._flusher: threading.Thread | None = None

    @staticmethod
    def of(writer: EvidenceWriter) -> Journal:
        """The journal of ``writer`` (made on first use)."""
        journal = writer.__dict__.get(_JOURNAL_ATTR)
        if journal is None:
            with _JOURNALS_LOCK:
                journal = writer.__dict__.get(_JOURNAL_ATTR)
                if journal is None:
                    journal = writer.__dict__[_JOURNAL_ATTR] = Journal(writer)
                    _LIVE_JOURNALS.add(journal)
        assert isinstance(journal, Journal)
        return journal

    def record(self, write: Write, since: int | None) -> None:
        """``write`` appended durably before returning (``since`` None), or queued for
        the flusher as evidence of a leg that started when :attr:`failures` was ``since``
        (see :meth:`submit`)."""
        if since is None:
            self.commit(write)
        else:
            self.submit(write, since)

    def submit(self, write: Write, since: int) -> None:
        """Queue ``write`` for the flusher; returns at once.

        ``since``: :attr:`failures` when the leg that ``write`` belongs to started. Once
        a group failed, a leg that was running then records nothing more: its evidence
        would have a hole (what is durable of each leg stays a prefix of it).

        Raises:
            StorageError: if a group failed since, or one failed that no one was told of.
        """
        with self._cond:
            if self._failure is not None or self.failures > since:
                self._dropped += 1
                cause = self._failure if self._failure is not None else self._last
                raise StorageError(
                    f"evidence not recorded: an earlier group could not be appended ({cause})"
                ) from cause
            self._queue.append(write)
            waiting, flusher = len(self._queue), self._flusher
            if flusher is None:
                flusher = threading.Thread(
                    target=self._flush, name="evidence-ledger-flusher", daemon=True,
                )
                try:
                    flusher.start()
                    self._flusher = flusher
                except RuntimeError:  # the interpreter is shutting down
                    flusher = None
            elif waiting == 1 or waiting >= GROUP_WRITES:
                self._cond.notify_all()
        if flusher is None:  # no thread to append it: do so now
            self.commit()

    def commit(self, write: Write | None = None, *, join: bool = True) -> None:
        """Append every queued write, then ``write``, durably, before returning.

        ``join``: all in one group (else ``write`` in a group of its own, so that a
        ``write`` that raises drops nothing queued).

        Raises:
            StorageError: if a group the flusher appended earlier failed, or this one does.
        """
        with self._turn():
            batch = self._take()
            queued = len(batch)
            if write is not None and join:
                batch.append(write)
            self._append(batch, queued)
            if write is not None and not join:
                self._append([write])

    def read(self, look: Callable[[EvidenceWriter], _T]) -> _T:
        """``look(writer)`` once every queued write is durable (so the writer's indexes
        hold it).

        Raises:
            StorageError: as :meth:`commit`.
        """
        with self._turn():
            batch = self._take()
            self._append(batch, len(batch))
            return look(self.writer)

    def settle(self, since: int | None) -> StorageError | None:
        """Wait for the group in flight; then the failure not reported yet, or else the
        latest one if :attr:`failures` grew past ``since`` (a leg that started then has
        lost evidence, even if another drain point reported it first), as a
        :class:`StorageError`; None if neither."""
        with self._cond:
            while self._busy:
                self._cond.wait()
            failure = self._report()
            if failure is None and since is not None and self.failures > since:
                failure = self._last
            return failure

    # -- internals -------------------------------------------------------------------

    @contextlib.contextmanager
    def _turn(self) -> Iterator[None]:
        """Hold the turn: no group is appended by anyone else meanwhile.

        Raises:
            StorageError: (on entry) if a group the flusher appended failed.
        """
        with self._cond:
            self._urgent += 1
            self._cond.notify_all()
            try:
                while self._busy:
                    self._cond.wait()
            finally:
                self._urgent -= 1
            failure = self._report()
            if failure is not None:
                raise failure
            self._busy = True
        try:
            yield
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def _report(self) -> StorageError | None:
        """(Lock held.) The flusher's failure, once, as a StorageError; None if none."""
        failure, dropped = self._failure, self._dropped
        if failure is None:
            return None
        self._failure, self._dropped = None, 0
        error = StorageError(
            f"{dropped} evidence write(s) not recorded: a group could not be appended "
            f"({type(failure).__name__}: {failure})"
        )
        error.__cause__ = failure
        self._last = error
        return error

    def _take(self) -> list[Write]:
        with self._cond:
            batch, self._queue = self._queue, []
            return batch

    def _append(self, batch: list[Write], queued: int = 0) -> None:
        """Append ``batch`` as one atomic group (turn held). ``queued``: how many of its
        writes came from the queue: if it fails, the legs they belong to learn of it
        (:attr:`failures`), as the caller does (the exception propagates)."""
        if not batch:
            return
        writer = self.writer
        try:
            with writer.atomic():
                for write in batch:
                    write(writer)
        except BaseException as exc:
            if queued:
                with self._cond:
                    self.failures += 1
                    self._last = StorageError(
                        f"{queued} evidence write(s) not recorded: a group could not be "
                        f"appended ({type(exc).__name__}: {exc})"
                    )
                    self._last.__cause__ = exc
            raise

    def _flush(self) -> None:
        """The flusher thread: append queued writes in groups; end when idle."""
        while True:
            with self._cond:
                if not self._wait_for_group():
                    self._flusher = None
                    return
                self._busy = True
                batch = self._queue[:GROUP_WRITES]
                del self._queue[:GROUP_WRITES]
            try:
                self._append(batch)
            except BaseException as exc:  # kept for the next drain point, never dropped
                with self._cond:
                    self._dropped += len(batch) + len(self._queue)
                    self._queue.clear()
                    self._failure = self._failure or exc
                    self.failures += 1
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _wait_for_group(self) -> bool:
        """(Lock held.) Wait until a group can be taken: writes are queued, no one holds
        or waits for the turn, and the window is over or the group full. False once idle
        for :data:`FLUSHER_IDLE` seconds."""
        idle_until = time.monotonic() + FLUSHER_IDLE
        window_ends: float | None = None
        while True:
            left: float | None
            if not self._queue:
                window_ends = None
                left = idle_until - time.monotonic()
                if left <= 0:
                    return False
            elif self._busy or self._urgent:
                left = None  # the holder appends what is queued; wait for the turn
            else:
                if window_ends is None:
                    window_ends = time.monotonic() + GROUP_WINDOW
                left = window_ends - time.monotonic()
                if left <= 0 or len(self._queue) >= GROUP_WRITES:
                    return True
            self._cond.wait(left)


@atexit.register
def _flush_at_exit() -> None:
    """Append what abandoned runs left queued (daemon flushers stop at exit)."""
    for journal in list(_LIVE_JOURNALS):
        try:
            journal.commit()
        except Exception:  # reported, not raised: one failing ledger must not stop the rest
            traceback.print_exc()
