"""A witness killed with SIGKILL at random points while a client keeps sending it
checkpoints that extend what it holds, and forks of it, never cosigns two roots for one tree
size nor forgets what it cosigned, across restarts (c2sp.org/tlog-witness: "The witness MUST
persist the new checkpoint before responding").

The witness is a :class:`evidence_ledger.WitnessServer` in a process forked by a launcher
subprocess that has the package loaded (a start in milliseconds, so 100 kills fit in
seconds), restarted on its state directory after each kill; at the end the real
``evidence-ledger witness serve`` reads that state back. Every cosignature the witness
ever returned is checked (it must verify) and kept with the root it vouches for.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from evidence_ledger.tlog.checkpoint import Checkpoint, parse_checkpoint
from evidence_ledger.tlog.cosignature import CosignatureVerifier
from evidence_ledger.tlog.merkle import leaf_hash
from evidence_ledger.tlog.note import NoteSignature, Signer, parse_note, sign_note
from evidence_ledger.tlog.witness_protocol import format_add_checkpoint, parse_size_body

from .helpers import run_cli
from .test_proofs import naive_mth, naive_proof

KILLS = 100
ORIGIN = "log.example/forked"
ORIGIN_HASH = hashlib.sha256(ORIGIN.encode()).hexdigest()
CLI = [sys.executable, "-m", "evidence_ledger.cli.main"]


class _Client:
    """A log that keeps presenting its witness with new branches: every request extends the
    checkpoint the witness holds with fresh leaves, or forks it (another last leaf at its
    size, or a larger tree grown from that other leaf, with that branch's proof). Keeps every
    cosignature returned, by size and root."""

    def __init__(self, log: Signer, witness: CosignatureVerifier, seed: int) -> None:
        self.log = log
        self.witness = witness
        self.rng = random.Random(seed)
        self.trunk: list[bytes] = []  # the leaves of the checkpoint the witness holds
        self.sent: dict[bytes, list[bytes]] = {}  # root -> leaves, of every extension sent
        self.roots: dict[int, set[bytes]] = {}
        self.forks_cosigned = 0
        self.forgotten: list[str] = []
        self.cosigned = 0
        self.cut = 0
        self.errors: list[str] = []

    def _fresh(self, n: int) -> list[bytes]:
        return [leaf_hash(self.rng.randbytes(8)) for _ in range(n)]

    def _ask(self, port: int, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            conn.request(method, path, body=body)
            answer = conn.getresponse()
            return answer.status, answer.read()
        finally:
            conn.close()

    def _send(self, port: int) -> None:
        held, grow = len(self.trunk), self.rng.randrange(4)
        fork = held > 0 and self.rng.random() < 0.35
        keep = held - 1 if fork else held
        leaves = self.trunk[:keep] + self._fresh(held + grow - keep)
        size = len(leaves)
        root = naive_mth(leaves)
        note = sign_note(Checkpoint(ORIGIN, size, root).to_text(), [self.log])
        proof = [] if held in (0, size) else naive_proof(held, leaves)
        if not fork:
            self.sent[root] = leaves
        status, body = self._ask(port, "POST", "/add-checkpoint",
                                 format_add_checkpoint(held, proof, note))
        if status == 409 and parse_size_body(body) != held:
            self._resync(port)
        if status != 200:
            return
        text = parse_note(note).text
        (line,) = parse_note(text.encode() + b"\n" + body).signatures
        assert self.witness.verify(text, NoteSignature(line.name, line.key_id, line.signature))
        self.roots.setdefault(size, set()).add(root)
        self.forks_cosigned += fork
        self.cosigned += 1
        self.trunk = leaves

    def _resync(self, port: int) -> None:
        """The witness holds another checkpoint than the client thinks: one of its requests
        a kill cut short after the witness stored it (the answer lost). Which one, its
        monitoring endpoint says; never one smaller than a cosignature it gave."""
        status, body = self._ask(port, "GET", f"/{ORIGIN_HASH}/checkpoint", None)
        assert status == 200, status
        held = parse_checkpoint(parse_note(body).text)
        if held.size < max(self.roots, default=0):
            self.forgotten.append(f"it holds tree size {held.size} after cosigning "
                                  f"{max(self.roots)}")
        self.trunk = self.sent[held.root]  # a KeyError: it holds what nobody sent it

    def run(self, port: int, stop: threading.Event) -> None:
        while not stop.is_set() and not self.errors:
            try:
                self._send(port)
            except ConnectionRefusedError:
                time.sleep(0.001)
            except (OSError, http.client.HTTPException):
                self.cut += 1
            except Exception as exc:  # a wrong answer: the test reports it
                self.errors.append(f"{type(exc).__name__}: {exc}")


LAUNCHER = """
import os, sys
import evidence_ledger as el

key, origin, vkey, state = sys.argv[1:5]
signing = el.SigningKey.load(key)
for line in sys.stdin:  # "start": fork a witness, print "<pid> <port>"; "reap PID"
    if line.startswith("reap "):
        os.waitpid(int(line.split()[1]), 0)
        print("reaped", flush=True)
        continue
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            server = el.WitnessServer(signing, {origin: [vkey]}, state, log=lambda line: None)
            os.write(write, server.url.rsplit(":", 1)[1].encode())
        except BaseException as exc:
            os.write(write, repr(exc).encode())
            os._exit(1)
        os.close(write)
        server.serve_forever()
        os._exit(0)
    os.close(write)
    print(pid, os.read(read, 300).decode(), flush=True)
    os.close(read)
"""


def _cli_witness(args: list[str]) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env={**os.environ, "OPENAI_AGENTS_DISABLE_TRACING": "1"})
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first.startswith("witness "), first
    return proc, int(first.rsplit(":", 1)[1])


def test_a_witness_killed_mid_request_never_cosigns_two_roots_for_one_size(tmp_path: Path):
    keys = tmp_path / "keys"
    keys.mkdir()
    log_vkey = run_cli("keygen", "--origin", ORIGIN, "--out", str(keys / "log.key")).out.strip()
    assert run_cli("keygen", "--origin", "w.example", "--out", str(keys / "w.key")).code == 0
    witness_key = run_cli("witness", "key", str(keys / "w.key")).out.strip()
    log = Signer.from_skey((keys / "log.key").read_text().strip())
    seed = random.randrange(1 << 32)
    client = _Client(log, CosignatureVerifier.from_vkey(witness_key), seed)
    pace = random.Random(seed + 1)  # when to kill
    state = tmp_path / "state"
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(keys / "w.key"), ORIGIN, log_vkey, str(state)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert launcher.stdin is not None and launcher.stdout is not None
    try:
        for _ in range(KILLS):
            launcher.stdin.write("start\n")
            launcher.stdin.flush()
            pid, port = launcher.stdout.readline().split()
            stop = threading.Event()
            thread = threading.Thread(target=client.run, args=(int(port), stop))
            thread.start()
            try:
                time.sleep(pace.uniform(0.005, 0.06))
            finally:
                os.kill(int(pid), signal.SIGKILL)
                launcher.stdin.write(f"reap {pid}\n")
                launcher.stdin.flush()
                assert launcher.stdout.readline() == "reaped\n"
                stop.set()
                thread.join()
    finally:
        launcher.stdin.close()
        launcher.wait(timeout=30)

    forked = {size: roots for size, roots in client.roots.items() if len(roots) > 1}
    assert not forked, f"two roots cosigned for sizes {sorted(forked)} (seed {seed})"
    assert client.forks_cosigned == 0, seed
    assert client.forgotten == [], f"it forgot what it cosigned (seed {seed})"
    assert client.errors == [], seed
    assert client.cosigned >= KILLS // 2, (client.cosigned, seed)  # it did work between kills
    assert client.cut >= KILLS // 5, (client.cut, seed)  # and kills landed mid-request
    proc, port = _cli_witness(["witness", "serve", "--key", str(keys / "w.key"), "--log",
                               f"{ORIGIN}={log_vkey}", "--state", str(state)])
    try:  # what it holds agrees with every answer it gave
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", f"/{ORIGIN_HASH}/checkpoint")
        held = parse_checkpoint(parse_note(conn.getresponse().read()).text)
        conn.close()
    finally:
        proc.kill()
        proc.wait()
    assert client.roots.get(held.size, {held.root}) == {held.root}
