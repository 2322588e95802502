"""A witness: an HTTP service that cosigns a log's checkpoints, each only if it is
consistent with every earlier one it cosigned of that log (c2sp.org/tlog-witness v1.0.0,
``add-checkpoint``; cosignatures c2sp.org/tlog-cosignature, Ed25519).

``POST /add-checkpoint`` answers as :mod:`evidence_ledger.tlog.witness_protocol` says
(200 with the cosignature line; 400, 403, 404, 409 with the size it holds, 422; 411 without
a ``Content-Length``, 413 over :data:`MAX_REQUEST_BYTES`, 500 when its state cannot be
stored). ``GET /<sha256(origin) hex>/checkpoint`` serves the latest checkpoint cosigned of
that log, with the log's signatures and the cosignature (the spec's monitoring endpoint).

Built on the standard library's ``http.server.ThreadingHTTPServer``: one thread per
connection (at most :data:`MAX_CONNECTIONS`; more are closed at once), a socket time-out of
:data:`REQUEST_TIMEOUT` seconds, and a connection cut after :data:`CONNECTION_DEADLINE`
seconds however it trickles in (a client sending a byte now and then holds a slot no
longer), HTTP/1.1 keep-alive. A client gone before its answer costs one line on stderr.
Requests for one log are taken one at a time (a lock per log), each
read-check-cosign-store-answer, so no two requests are checked against the same old
checkpoint (the spec's race). The state directory is held by one
process (:mod:`evidence_ledger.storage.witness_state`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from evidence_ledger.api.keys import SigningKey
from evidence_ledger.format.errors import StorageError, UsageError
from evidence_ledger.storage.witness_state import WitnessState
from evidence_ledger.tlog.cosignature import Cosigner
from evidence_ledger.tlog.note import Note, Verifier, format_note
from evidence_ledger.tlog.witness_protocol import (
    ADD_CHECKPOINT,
    SIZE_CONTENT_TYPE,
    MalformedRequestError,
    judge,
    parse_add_checkpoint,
)

__all__ = [
    "CONNECTION_DEADLINE",
    "MAX_CONNECTIONS",
    "MAX_REQUEST_BYTES",
    "REQUEST_TIMEOUT",
    "WitnessServer",
]

MAX_REQUEST_BYTES = 64 * 1024
"""Largest request body taken (bytes); a checkpoint with its proof is under 4 KiB."""
REQUEST_TIMEOUT = 10.0
"""Seconds a connection may stay silent (mid-request or idle between requests)."""
CONNECTION_DEADLINE = 15.0
"""Seconds a connection is served at most, from its first byte to its last (its requests
take milliseconds; a slow-dripping client is cut)."""
MAX_CONNECTIONS = 256
"""Connections served at once; one more is closed unanswered."""

_Answer = tuple[int, str, bytes]  # status, content type, body
_MONITOR = re.compile(r"/([0-9a-f]{64})/checkpoint")
_LENGTH = re.compile(r"[0-9]{1,12}")


class _Witness:
    """The witness without HTTP: verify, cosign, store, answer."""

    def __init__(self, key: SigningKey, logs: Mapping[str, Sequence[str]],
                 state: WitnessState, log: Callable[[str], None],
                 clock: Callable[[], float]) -> None:
        self.cosigner = Cosigner(key.signer)
        self.trusted = {origin: [Verifier.from_vkey(v) for v in vkeys]
                        for origin, vkeys in logs.items()}
        self.locks = {origin: threading.Lock() for origin in logs}
        self.by_hash = {hashlib.sha256(o.encode("utf-8")).hexdigest(): o for o in logs}
        self.state = state
        self.log = log
        self.clock = clock

    def add_checkpoint(self, body: bytes) -> _Answer:
        try:
            request = parse_add_checkpoint(body)
        except MalformedRequestError as exc:
            return self._refuse(400, str(exc))
        cp = request.checkpoint
        if cp.origin not in self.trusted:
            return self._refuse(404, f"unknown log {cp.origin!r}")
        with self.locks[cp.origin]:
            try:
                held = self.state.read(cp.origin)
                latest = None if held is None else held[0]
                verdict = judge(request, self.trusted[cp.origin], latest)
                if verdict.status != 200 or verdict.opened is None:
                    size = b"" if verdict.size is None else f"{verdict.size}\n".encode()
                    return self._refuse(verdict.status, f"{cp.origin} size {cp.size}: "
                                        f"{verdict.reason}", size)
                line = self.cosigner.cosign(verdict.opened.text, max(1, int(self.clock())))
                note = Note(verdict.opened.text, (*verdict.opened.verified, line))
                self.state.store(cp.origin, format_note(note))  # durable before the answer
            except StorageError as exc:
                return self._refuse(500, str(exc))
        self.log(f"200 cosigned {cp.origin} size {cp.size} (old size {request.old_size})")
        return 200, "text/plain; charset=utf-8", line.line.encode("utf-8")

    def checkpoint(self, origin_hash: str) -> _Answer:
        origin = self.by_hash.get(origin_hash)
        try:
            held = None if origin is None else self.state.read(origin)
        except StorageError as exc:
            return self._refuse(500, str(exc))
        if held is None:
            return 404, "text/plain; charset=utf-8", b"no checkpoint cosigned of this log\n"
        return 200, "text/plain; charset=utf-8", held[1]

    def _refuse(self, status: int, reason: str, size: bytes = b"") -> _Answer:
        self.log(f"{status} {reason}")
        if size:
            return status, SIZE_CONTENT_TYPE, size
        return status, "text/plain; charset=utf-8", (reason[:300] + "\n").encode("utf-8")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive (the spec's SHOULD)
    timeout = REQUEST_TIMEOUT
    server: _Server

    def setup(self) -> None:
        super().setup()
        self._deadline = threading.Timer(CONNECTION_DEADLINE, self._cut)
        self._deadline.daemon = True
        self._deadline.start()

    def finish(self) -> None:
        self._deadline.cancel()
        with contextlib.suppress(OSError):  # the client may be gone
            super().finish()

    def _cut(self) -> None:
        """End a connection past :data:`CONNECTION_DEADLINE` (its reads then see EOF)."""
        with contextlib.suppress(OSError):
            self.request.shutdown(socket.SHUT_RDWR)

    def do_POST(self) -> None:
        if self.path != ADD_CHECKPOINT:
            self._answer((404, "text/plain; charset=utf-8", b"not found\n"))
            return
        length = self.headers.get("Content-Length")
        if length is None or self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            self._answer((411, "text/plain; charset=utf-8", b"Content-Length required\n"))
            return
        if not _LENGTH.fullmatch(length) or int(length) > MAX_REQUEST_BYTES:
            self.close_connection = True
            self._answer((413, "text/plain; charset=utf-8",
                          f"a request body holds at most {MAX_REQUEST_BYTES} bytes\n".encode()))
            return
        body = self.rfile.read(int(length))
        if len(body) != int(length):  # the client went away
            self.close_connection = True
            return
        self._answer(self.server.witness.add_checkpoint(body))

    def do_GET(self) -> None:
        match = _MONITOR.fullmatch(self.path)
        if match is None:
            self._answer((404, "text/plain; charset=utf-8", b"not found\n"))
            return
        self._answer(self.server.witness.checkpoint(match.group(1)))

    def _answer(self, answer: _Answer) -> None:
        status, content_type, body = answer
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the witness logs each answer itself (one line, no headers)

    def log_error(self, format: str, *args: Any) -> None:
        self.server.witness.log(f"{self.client_address[0]}: {format % args}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], witness: _Witness) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.witness = witness
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line, never a traceback: mostly a client gone before its answer."""
        error = sys.exc_info()[1]
        what = f"{type(error).__name__}: {error}" if error is not None else "unknown error"
        self.witness.log(f"{client_address[0]}: connection ended: {what}")


def _stderr(line: str) -> None:
    print(f"witness: {line}", file=sys.stderr, flush=True)


class WitnessServer:
    """A witness serving ``add-checkpoint`` over HTTP (see the module docstring).

    Args:
        key: the witness's key (``keygen``); its name names the witness, its cosignature
            verifier key is ``key.witness_key``.
        logs: origin -> the log's trusted verifier keys (C2SP strings, type 0x01).
        state: the state directory: the latest checkpoint cosigned of each log.
        host, port: where to listen (port 0: any free port; see :attr:`url`).
        log: called with one line per answer (default: stderr).
        clock: POSIX seconds for cosignature timestamps (default ``time.time``).

    Raises:
        UsageError: for no log, a malformed verifier key, or an address it cannot bind.
        StorageError: if another witness holds ``state``, or a log's state is damaged.
    """

    def __init__(self, key: SigningKey, logs: Mapping[str, Sequence[str]],
                 state: str | os.PathLike[str], host: str = "127.0.0.1", port: int = 0, *,
                 log: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        if not logs:
            raise UsageError("a witness follows at least one log (--log ORIGIN=VKEY)")
        self._held = contextlib.ExitStack()
        store = WitnessState(state)
        witness = _Witness(key, logs, store, log or _stderr, clock)
        self._held.enter_context(store.hold())
        try:
            for origin in logs:
                store.read(origin)  # a damaged state stops the witness before it serves
            self._server = _Server((host, port), witness)
        except OSError as exc:
            self._held.close()
            raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
        except BaseException:
            self._held.close()
            raise

    @property
    def url(self) -> str:
        """The submission prefix, ``http://HOST:PORT``."""
        host, port = self._server.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        return f"http://[{name}]:{port}" if ":" in name else f"http://{name}:{port}"

    def serve_forever(self) -> None:
        """Answer requests until :meth:`shutdown` (from another thread) or a signal."""
        self._server.serve_forever(poll_interval=0.2)

    def shutdown(self) -> None:
        """Stop :meth:`serve_forever` (call from another thread); waits for it."""
        self._server.shutdown()

    def close(self) -> None:
        """Close the socket and release the state directory."""
        with contextlib.suppress(OSError):
            self._server.server_close()
        self._held.close()

    def __enter__(self) -> WitnessServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

