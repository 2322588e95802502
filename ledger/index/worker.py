"""Stage one of deriving the index in a worker process: chunks of the log read and checked
there, while this process derives the chunk before.

A :class:`Checker` runs :func:`read_log_chunk` (the worker reads its own byte range of
``log.bin``, from a record boundary) or :func:`check_records` (records given) in a
:class:`concurrent.futures.ProcessPoolExecutor` of one worker process (started with
``spawn``, when the first job is submitted), and returns what the worker found, ready for
stage two: each record's hashes, bytes and row of the chunk tables
(:class:`evidence_ledger.index.check.CheckedBatch`; stage two decodes the bytes again,
unchecked, for the rules: cheaper than pickling decoded entries).

The result is the same wherever a chunk is read, so nothing depends on the worker: if it
cannot start, dies, or returns nothing for :data:`STALL_SECONDS`, that job and the later
ones run in line.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidence_ledger.format.framing import Damage, Record, TornTail
from evidence_ledger.index.check import CheckedBatch, check_batch
from evidence_ledger.storage.log_store import FileLogStore

__all__ = ["STALL_SECONDS", "Checked", "Checker", "check_records", "read_log_chunk"]

STALL_SECONDS = 120.0
"""A worker that returns nothing for this long is taken for stopped, and its job is run in
line (a chunk of 10,000 records takes it well under a second)."""


@dataclass(frozen=True)
class Checked:
    """One chunk of records, checked (stage one).

    Attributes:
        batch: what :func:`evidence_ledger.index.check.check_batch` found in its records;
            None when there were none.
        damage: why the log cannot be read past the chunk (``log damaged at seq N: ...``),
            or None.
        more: True when the chunk stopped at its limit of records (the log may go on).
    """

    batch: CheckedBatch | None
    damage: str | None
    more: bool


def check_records(records: Sequence[Record], damage: str | None = None) -> Checked:
    """Check a batch of consecutive records given (see :func:`check_batch`)."""
    return Checked(check_batch(records) if records else None, damage, False)


def read_log_chunk(directory: str, offset: int, index: int, limit: int) -> Checked:
    """Read and check up to ``limit`` records of the log in ``directory`` from byte
    ``offset`` (a record boundary, record ``index``): the records of complete groups, as
    :meth:`FileLogStore.scan` reads them. Never raises on bad bytes.

    Raises:
        EvidenceError: if the log cannot be read.
    """
    records: list[Record] = []
    damage = None
    more = False
    for item in FileLogStore(Path(directory)).scan(offset, index):
        if isinstance(item, TornTail):
            break
        if isinstance(item, Damage):
            damage = f"log damaged at seq {item.index}: {item.reason} (run verify)"
            break
        records.append(item)
        if len(records) == limit:
            more = True
            break
    return Checked(check_batch(records) if records else None, damage, more)


class Checker:
    """Runs jobs of stage one in one worker process, or in line.

    :meth:`submit` a job (its function and arguments: picklable, top-level), then
    :meth:`result` of the oldest job not yet returned. Use as a context manager: on exit
    the worker is stopped (killed: it holds nothing worth keeping).
    """

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._parallel = True  # False once the worker failed: the rest runs in line
        self._jobs: list[tuple[Callable[..., Checked], tuple[Any, ...], Future[Checked] | None]]
        self._jobs = []

    def __enter__(self) -> Checker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop()

    def submit(self, job: Callable[..., Checked], *args: Any) -> None:
        """Queue ``job(*args)``: in the worker (started now if need be), else in line
        when :meth:`result` asks for it."""
        future = None
        if self._parallel:
            try:
                if self._pool is None:
                    self._pool = ProcessPoolExecutor(
                        1, mp_context=multiprocessing.get_context("spawn"))
                future = self._pool.submit(job, *args)
            except Exception:  # no process to start: run in line
                self._stop()
        self._jobs.append((job, args, future))

    def result(self) -> Checked:
        """The result of the oldest job not yet returned (run in line when the worker
        failed)."""
        job, args, future = self._jobs.pop(0)
        if future is not None and self._parallel:
            try:
                result = future.result(timeout=STALL_SECONDS)
                if type(result) is Checked:
                    return result
            except Exception:  # died, stalled, or failed: run in line
                pass
            self._stop()
        return job(*args)

    def _stop(self) -> None:
        pool, self._pool, self._parallel = self._pool, None, False
        if pool is None:
            return
        # a stopped or busy worker is killed, not waited for (Python 3.14 has kill_workers)
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            with contextlib.suppress(OSError):
                process.kill()
        with contextlib.suppress(Exception):
            pool.shutdown(wait=True, cancel_futures=True)

