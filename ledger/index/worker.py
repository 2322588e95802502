"""Checking batches of log records for the index beside the deriver, in a worker process.

:class:`BatchChecker` runs stage one of deriving the index
(:func:`evidence_ledger.index.check.check_batch`) for each batch it is given, in order. The first
batch is checked in line; the later ones go to a worker process started with
``python -m evidence_ledger.index.worker``, which checks one batch while this process runs stage
two (:class:`evidence_ledger.index.build.Deriver`) on the one before: the two stages then use both
cores. The worker reads pickled batches (lists of :class:`~evidence_ledger.format.framing.Record`)
on stdin and writes one pickled :class:`~evidence_ledger.index.check.CheckedBatch` per batch on
stdout (after ``ELW1`` and its length, 8 bytes big-endian), until stdin ends; it serves only the
process that started it.

The result is the same wherever a batch is checked, so nothing depends on the worker: if
it cannot start, dies, stops (no output for :data:`STALL_SECONDS`) or answers out of
turn, the batches it held are checked in line.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import os
import pickle
import queue
import select
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from evidence_ledger.format.framing import Record
from evidence_ledger.index.check import CheckedBatch, check_batch

__all__ = ["STALL_SECONDS", "BatchChecker", "main", "worker_command"]

STALL_SECONDS = 120.0
"""A worker that writes nothing for this long is taken for stopped, and its batches are
checked in line (a batch of 50,000 records takes it about a second)."""
_HEADER = struct.Struct(">4sQ")
"""Before each result: :data:`_MAGIC`, then the pickle's length in bytes."""
_MAGIC = b"ELW1"

class BatchChecker:
    """Stage one for batches of records, in the order they are submitted.

    Call :meth:`submit` for a batch, then :meth:`result` for the oldest batch not yet
    returned; submit the next batch before asking for the result of this one, so that
    the worker checks it meanwhile. Use as a context manager: on exit the worker is
    stopped (killed: it holds nothing worth keeping).
    """

    def __init__(self) -> None:
        self._parallel = True  # False once a worker failed: the rest is checked in line
        self._waiting: collections.deque[tuple[Sequence[Record], bool]] = collections.deque()
        self._submitted = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._outbox: queue.Queue[bytes | None] = queue.Queue()
        self._sender: threading.Thread | None = None

    def __enter__(self) -> BatchChecker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def submit(self, records: Sequence[Record]) -> None:
        """Queue one non-empty batch of consecutive records for checking."""
        if self._submitted and self._parallel and self._proc is None:
            self._start()
        sent = self._proc is not None
        if sent:  # pickled here: the sender thread only writes (the GIL released throughout)
            self._outbox.put(pickle.dumps(list(records), protocol=5))
        self._waiting.append((records, sent))
        self._submitted += 1

    def result(self) -> CheckedBatch:
        """The :class:`CheckedBatch` of the oldest batch submitted and not yet returned."""
        records, sent = self._waiting.popleft()
        if sent and self._proc is not None:
            checked = None
            with contextlib.suppress(Exception):  # the worker died: check in line instead
                assert self._proc.stdout is not None
                checked = pickle.loads(_receive(self._proc.stdout.fileno()))
            if type(checked) is CheckedBatch and checked.first == records[0].index:
                return checked
            self._stop()
        return check_batch(records)

    def close(self) -> None:
        """Stop the worker, if one runs."""
        self._stop()

    def _start(self) -> None:
        try:
            self._proc = subprocess.Popen(
                worker_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, start_new_session=True, env=_worker_env(),
            )
        except (OSError, ValueError, TypeError):  # no interpreter to start: check in line
            self._parallel = False
            return
        self._sender = threading.Thread(
            target=_send, args=(self._outbox, self._proc.stdin), name="index-check-send",
            daemon=True,
        )
        self._sender.start()

    def _stop(self) -> None:
        proc, self._proc, self._parallel = self._proc, None, False
        if proc is None:
            return
        proc.kill()  # also unblocks the sender, should it be writing
        self._outbox.put(None)
        if self._sender is not None:
            self._sender.join()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        proc.wait()


def worker_command() -> list[str]:
    """The command that starts a worker: this interpreter, running this module (``-P``:
    the working directory is not put on the worker's path, so a ``ledger`` package there
    is never imported)."""
    return [sys.executable, "-P", "-m", __name__]


def _worker_env() -> dict[str, str]:
    """This environment, with this ``ledger`` package first on the worker's path."""
    paths = [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def _send(outbox: queue.Queue[bytes | None], pipe: IO[bytes] | None) -> None:
    """Write each pickled batch put in ``outbox`` to the worker, until None (or a broken
    pipe). One write per batch: a thread that pickled into the pipe would wait for the
    GIL at every frame, while the deriver holds it."""
    assert pipe is not None
    with contextlib.suppress(OSError, ValueError):
        while (batch := outbox.get()) is not None:
            pipe.write(batch)
            pipe.flush()


def _receive(fd: int) -> bytes:
    """One result from the worker: :data:`_HEADER`, then its pickle.

    Raises:
        ValueError: if the output does not start with :data:`_MAGIC`.
        EOFError: if the worker's output ends first.
        TimeoutError: if no byte comes for :data:`STALL_SECONDS` (a stopped worker).
    """
    magic, length = _HEADER.unpack(_read_exactly(fd, _HEADER.size))
    if magic != _MAGIC:  # e.g. a banner printed by a sitecustomize: not our worker's output
        raise ValueError("the worker's output does not start with a result")
    return _read_exactly(fd, length)


def _read_exactly(fd: int, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        if not select.select([fd], [], [], STALL_SECONDS)[0]:
            raise TimeoutError(f"no output from the worker for {STALL_SECONDS} s")
        chunk = os.read(fd, min(size - len(data), 1 << 20))
        if not chunk:
            raise EOFError("the worker's output ended")
        data += chunk
    return bytes(data)


def main() -> None:
    """The worker: check each batch read from stdin and write its result to stdout."""
    requests, results = sys.stdin.buffer, sys.stdout.buffer
    gc.disable()  # a batch is many small acyclic containers: nothing for the GC to free
    while True:
        try:
            records = pickle.load(requests)
        except EOFError:
            return
        result = pickle.dumps(check_batch(records), protocol=5)
        results.write(_HEADER.pack(_MAGIC, len(result)) + result)
        results.flush()


if __name__ == "__main__":
    main()
