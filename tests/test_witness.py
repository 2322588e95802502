"""Witnesses on loopback: ``checkpoint --witness`` collects cosignatures, ``verify`` and the
offline checks count them (``--min-witnesses``), and a witness refuses a fork with the
status c2sp.org/tlog-witness v1.0.0 names (409 at the size it cosigned, 422 for a proof
from the other branch). Witnesses run in threads of this process (port 0)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

import evidence_ledger as el
import evidence_ledger.api.witness as witness_api
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.tlog.note import sign_note
from evidence_ledger.tlog.witness_protocol import format_add_checkpoint

from .helpers import run_cli

ORIGIN = "log.example/witnessed"


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, str]:
    """The log's key and two witnesses' keys: paths and verifier keys."""
    folder = tmp_path / "keys"
    folder.mkdir()
    found: dict[str, str] = {}
    for name, origin in (("log", ORIGIN), ("w1", "w1.example/witness"),
                         ("w2", "w2.example/witness")):
        path = folder / f"{name}.key"
        result = run_cli("keygen", "--origin", origin, "--out", str(path))
        assert result.code == 0, result.err
        found[name] = str(path)
        found[f"{name}_vkey"] = result.out.strip()
        found[f"{name}_witness"] = el.SigningKey.load(path).witness_key
    return found


def _grow(ledger: Path, branch: str, entries: int) -> Path:
    writer = EvidenceWriter(ledger)
    with writer.atomic():
        for i in range(entries):
            writer.run_end(run_id=f"{branch}{i}", status="completed")
    return ledger


@contextlib.contextmanager
def _serving(key: str, log_vkey: str, state: Path) -> Iterator[tuple[el.WitnessServer, list]]:
    lines: list[str] = []
    server = el.WitnessServer(el.SigningKey.load(key), {ORIGIN: [log_vkey]}, state,
                              log=lines.append)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, lines
    finally:
        server.shutdown()
        thread.join()
        server.close()


def _post(url: str, body: bytes, path: str = "/add-checkpoint",
          method: str = "POST") -> tuple[int, str, bytes]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(method, path, body=body)
        answer = conn.getresponse()
        return answer.status, answer.getheader("Content-Type", ""), answer.read()
    finally:
        conn.close()


def _spec_cosigned(note: bytes, witness_vkey: str) -> int:
    """The timestamp of ``witness_vkey``'s cosignature on ``note``, checked from the spec
    (c2sp.org/tlog-cosignature: key ID over 0x04, ``cosignature/v1\\ntime <t>\\n`` + body)."""
    name, key_hex, key64 = witness_vkey.split("+", 2)
    key = base64.b64decode(key64)
    assert key[0] == 0x04
    assert hashlib.sha256(name.encode() + b"\n" + key).digest()[:4].hex() == key_hex
    text, _, lines = note.decode().rpartition("\n\n")
    for line in lines.splitlines():
        signer, b64 = line.removeprefix("— ").split(" ")
        raw = base64.b64decode(b64)
        if signer == name and raw[:4].hex() == key_hex:
            stamp = int.from_bytes(raw[4:12], "big")
            message = f"cosignature/v1\ntime {stamp}\n{text}\n".encode()
            Ed25519PublicKey.from_public_bytes(key[1:]).verify(raw[12:], message)
            return stamp
    raise AssertionError(f"no cosignature by {name} in {note!r}")


def _witness_args(*pairs: tuple[str, str]) -> list[str]:
    return [arg for url, vkey in pairs for arg in ("--witness", f"{url}={vkey}")]


def test_checkpoint_collects_two_cosignatures_and_every_verifier_counts_them(keys, tmp_path):
    book = _grow(tmp_path / "book", "a", 21)
    with _serving(keys["w1"], keys["log_vkey"], tmp_path / "s1") as (w1, log1), \
            _serving(keys["w2"], keys["log_vkey"], tmp_path / "s2") as (w2, _):
        witnesses = _witness_args((w1.url, keys["w1_witness"]), (w2.url, keys["w2_witness"]))
        first = run_cli("checkpoint", "--ledger", str(book), "--key", keys["log"], *witnesses)
        assert (first.code, first.err) == (0, "")
        stored = (book / "checkpoints" / "00000001.note").read_bytes()
        assert first.out.encode() == stored and stored.count("\n— ".encode()) == 3
        assert _spec_cosigned(stored, keys["w1_witness"]) > 0
        assert _spec_cosigned(stored, keys["w2_witness"]) > 0

        _grow(book, "c", 4)  # witnesses hold size 21: 409, then a proof from 21 to 25
        second = run_cli("checkpoint", "--ledger", str(book), "--key", keys["log"], *witnesses,
                         "--json")
        assert second.code == 0, second.err
        doc = json.loads(second.out)
        assert doc["tree_size"] == 25
        assert [w["status"] for w in doc["witnesses"]] == ["cosigned", "cosigned"]
        assert log1[-2:] == [
            f"409 {ORIGIN} size 25: old size 0, but the latest checkpoint cosigned has size 21",
            f"200 cosigned {ORIGIN} size 25 (old size 21)"]

    both = ["--witness-key", keys["w1_witness"], "--witness-key", keys["w2_witness"]]
    ok = run_cli("verify", "--ledger", str(book), "--verifier-key", keys["log_vkey"], *both,
                 "--min-witnesses", "2", "--json")
    assert ok.code == 0, ok.out
    report = json.loads(ok.out)
    assert report["ok"] and "witness_quorum" in report["rules"]
    note = str(book / "checkpoints" / "00000002.note")
    checked = run_cli("verify-checkpoint", note, "--verifier-key", keys["log_vkey"], *both,
                      "--min-witnesses", "2")
    labels = ["+".join(keys[w].split("+", 2)[:2]) for w in ("w1_witness", "w2_witness")]
    assert checked.code == 0
    assert checked.out.rstrip().endswith(f"; cosigned by {labels[0]}, {labels[1]}")
    bundle = tmp_path / "all.bundle.json"
    assert run_cli("prove", "--ledger", str(book), "--key", keys["log"], "--all", "--out",
                   str(bundle)).code == 0
    proof = run_cli("verify-proof", str(bundle), "--verifier-key", keys["log_vkey"], *both,
                    "--min-witnesses", "2", "--json")
    assert proof.code == 0, proof.err
    assert json.loads(proof.out)["witnesses"]["ok"] is True


def test_a_fork_is_refused_and_its_missing_cosignature_fails_verify(keys, tmp_path):
    book = _grow(tmp_path / "book", "a", 21)
    fork = _grow(tmp_path / "fork", "b", 21)  # another log of the same size, same key
    with _serving(keys["w1"], keys["log_vkey"], tmp_path / "s1") as (w1, _):
        witness = _witness_args((w1.url, keys["w1_witness"]))
        assert run_cli("checkpoint", "--ledger", str(book), "--key", keys["log"],
                       *witness).code == 0

        same = run_cli("checkpoint", "--ledger", str(fork), "--key", keys["log"], *witness)
        assert same.code == 1 and same.err.count("\n") == 1
        assert same.err == (
            "evidence-ledger: error: 1 of 1 witness(es) did not cosign checkpoint 1 (stored "
            f"without their cosignature): {w1.url} refused: it cosigned another root at tree "
            "size 21: a fork (409)\n")
        forked_note = (fork / "checkpoints" / "00000001.note").read_bytes()
        assert forked_note.count("\n— ".encode()) == 1  # the log's signature only
        status, content_type, body = _post(w1.url, format_add_checkpoint(21, [], forked_note))
        assert (status, content_type, body) == (409, "text/x.tlog.size", b"21\n")

        _grow(fork, "b-more", 9)
        larger = run_cli("checkpoint", "--ledger", str(fork), "--key", keys["log"], *witness)
        assert larger.code == 1
        assert ("refused: this checkpoint does not extend the one it cosigned at tree size "
                "21: a fork (422:") in larger.err
        proof = el.Ledger(fork).consistency_proof(21, 30).proof
        note = (fork / "checkpoints" / "00000002.note").read_bytes()
        assert _post(w1.url, format_add_checkpoint(21, proof, note))[0] == 422

    one = ["--witness-key", keys["w1_witness"], "--min-witnesses", "1"]
    forked = run_cli("verify", "--ledger", str(fork), "--verifier-key", keys["log_vkey"], *one,
                     "--json")
    assert forked.code == 1
    (finding,) = json.loads(forked.out)["violations"]
    assert finding["rule"] == "witness_quorum"
    assert finding["detail"] == (
        "checkpoint 2: checkpoint of tree size 30 carries 0 valid cosignature(s) by the 1 "
        "witness key(s) given, want 1")
    assert run_cli("verify", "--ledger", str(book), "--verifier-key", keys["log_vkey"],
                   *one).code == 0
    short = run_cli("verify-checkpoint", str(fork / "checkpoints" / "00000001.note"),
                    "--verifier-key", keys["log_vkey"], *one)
    assert short.code == 1 and short.err.startswith("evidence-ledger: error: witness_quorum: ")


def test_a_rolled_back_log_and_an_unreachable_witness_are_named(keys, tmp_path):
    book = _grow(tmp_path / "book", "a", 21)
    with _serving(keys["w1"], keys["log_vkey"], tmp_path / "s1") as (w1, _):
        witness = _witness_args((w1.url, keys["w1_witness"]))
        assert run_cli("checkpoint", "--ledger", str(book), "--key", keys["log"],
                       *witness).code == 0
        shorter = _grow(tmp_path / "shorter", "a", 20)  # the log minus its last entry
        back = run_cli("checkpoint", "--ledger", str(shorter), "--key", keys["log"], *witness)
        assert back.code == 1
        assert (f"{w1.url} refused: it cosigned tree size 21 of {ORIGIN}, larger than this "
                "checkpoint's 20: this log was rolled back") in back.err
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nobody listens there once closed
    gone = run_cli("checkpoint", "--ledger", str(book), "--key", keys["log"],
                   *_witness_args((f"http://127.0.0.1:{port}", keys["w1_witness"])))
    assert gone.code == 1 and f"http://127.0.0.1:{port} failed: no answer" in gone.err
    assert (book / "checkpoints" / "00000002.note").exists()  # stored, uncosigned


def _signed(leaves_from: Path, key: str) -> bytes:
    stored = el.Ledger(leaves_from).checkpoint(el.SigningKey.load(key))
    return stored.data


def test_bad_requests_get_the_status_the_spec_names(keys, tmp_path):
    book = _grow(tmp_path / "book", "a", 5)
    note = _signed(book, keys["log"])
    stranger = tmp_path / "keys" / "stranger.key"
    run_cli("keygen", "--origin", ORIGIN, "--out", str(stranger))
    with _serving(keys["w1"], keys["log_vkey"], tmp_path / "s1") as (w1, _):
        origin_hash = hashlib.sha256(ORIGIN.encode()).hexdigest()
        assert _post(w1.url, b"", f"/{origin_hash}/checkpoint", "GET")[0] == 404
        assert _post(w1.url, b"old 0\n")[0] == 400  # no blank line
        assert _post(w1.url, format_add_checkpoint(6, [], note))[0] == 400  # old > size
        other_origin = sign_note("other.example/log\n1\n" + base64.b64encode(bytes(32)).decode()
                                 + "\n", [el.SigningKey.load(stranger).signer])
        assert _post(w1.url, format_add_checkpoint(0, [], other_origin))[0] == 404
        forged = _signed(_grow(tmp_path / "other", "x", 5), str(stranger))
        assert _post(w1.url, format_add_checkpoint(0, [], forged))[0] == 403
        assert _post(w1.url, format_add_checkpoint(0, [bytes(32)], note))[0] == 422
        assert _post(w1.url, b"x" * 70_000)[0] == 413
        assert _post(w1.url, note, "/elsewhere")[0] == 404
        assert _post(w1.url, note, "/add-checkpoint", "PUT")[0] == 501
        with socket.create_connection(("127.0.0.1", int(w1.url.rsplit(":", 1)[1]))) as raw:
            raw.sendall(b"POST /add-checkpoint HTTP/1.1\r\nHost: x\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
            assert raw.recv(100).startswith(b"HTTP/1.1 411 ")
        status, _, line = _post(w1.url, format_add_checkpoint(0, [], note))
        assert status == 200 and line.startswith("— w1.example/witness ".encode())
        status, _, served = _post(w1.url, b"", f"/{origin_hash}/checkpoint", "GET")
        assert status == 200 and served == note + line  # log signature, then cosignature


def test_the_state_outlives_the_witness_and_serves_one_witness_at_a_time(keys, tmp_path):
    book = _grow(tmp_path / "book", "a", 8)
    fork = _grow(tmp_path / "fork", "b", 8)
    state = tmp_path / "s1"
    with _serving(keys["w1"], keys["log_vkey"], state) as (w1, _):
        assert _post(w1.url, format_add_checkpoint(0, [], _signed(book, keys["log"])))[0] == 200
        with pytest.raises(el.StorageError, match="another witness serves from"):
            el.WitnessServer(el.SigningKey.load(keys["w1"]), {ORIGIN: [keys["log_vkey"]]},
                             state)
    with _serving(keys["w1"], keys["log_vkey"], state) as (w1, _):  # restarted
        answer = _post(w1.url, format_add_checkpoint(8, [], _signed(fork, keys["log"])))
        assert answer == (409, "text/x.tlog.size", b"8\n")
    (state_file,) = (state / "logs").iterdir()
    assert state_file.name == hashlib.sha256(ORIGIN.encode()).hexdigest() + ".note"
    state_file.write_bytes(b"damaged")
    with pytest.raises(el.StorageError, match="is damaged"):
        el.WitnessServer(el.SigningKey.load(keys["w1"]), {ORIGIN: [keys["log_vkey"]]}, state)


def test_witness_key_and_usage_errors(keys, tmp_path):
    printed = run_cli("witness", "key", keys["w1"])
    assert (printed.code, printed.out) == (0, keys["w1_witness"] + "\n")
    assert keys["w1_witness"].split("+")[0] == "w1.example/witness"
    assert json.loads(run_cli("witness", "key", keys["w1"], "--json").out) == {
        "name": "w1.example/witness", "witness_key": keys["w1_witness"]}
    book = _grow(tmp_path / "book", "a", 3)
    usage = [
        ("checkpoint", "--ledger", str(book), "--key", keys["log"], "--witness",
         keys["w1_witness"]),
        ("checkpoint", "--ledger", str(book), "--key", keys["log"], "--witness",
         f"http://127.0.0.1:9={keys['w1_vkey']}"),
        ("verify", "--ledger", str(book), "--min-witnesses", "1"),
        ("verify", "--ledger", str(book), "--witness-key", keys["w1_witness"],
         "--min-witnesses", "2"),
        ("witness", "serve", "--key", keys["w1"], "--log", "no-key", "--state",
         str(tmp_path / "s")),
        ("witness", "serve", "--key", keys["w1"], "--log", f"{ORIGIN}={keys['log_vkey']}",
         "--state", str(tmp_path / "s"), "--listen", "nowhere"),
    ]
    for args in usage:
        result = run_cli(*args)
        assert result.code == 2 and result.err.count("\n") == 1, (args, result.err)
    assert not (book / "checkpoints").exists()  # refused before signing anything


def test_monitor_follows_a_ledger_and_stops_at_a_rewritten_log(keys, tmp_path):
    book = _grow(tmp_path / "book", "a", 21)
    log = ["--log", f"{ORIGIN}={keys['log_vkey']}"]
    for more in (0, 4):
        _grow(book, "c", more)
        assert run_cli("checkpoint", "--ledger", str(book), "--key", keys["log"]).code == 0
    watched = run_cli("witness", "monitor", str(book), *log, "--once")
    assert watched.code == 0, watched.err
    assert watched.out.splitlines()[1].endswith(
        "(extends tree size 21: consistency proof from the log)")

    fork = _grow(tmp_path / "fork", "b", 30)  # the log rewritten under checkpoint 1
    (book / "log.bin").unlink()
    (book / "log.bin").write_bytes((fork / "log.bin").read_bytes())
    forged = el.Ledger(fork).checkpoint(el.SigningKey.load(keys["log"])).data
    (book / "checkpoints" / "00000003.note").write_bytes(forged)
    caught = run_cli("witness", "monitor", str(book), *log, "--once")
    assert caught.code == 1 and caught.out.count("\n") == 1  # checkpoint 1, then the error
    assert "00000002.note: tree size 25, root " in caught.err
    assert "the log cannot prove it extends tree size 21 (the log contradicts" in caught.err


def test_monitor_of_a_file_stops_at_a_fork_or_a_rollback(keys, tmp_path):
    book = _grow(tmp_path / "book", "a", 21)
    fork = _grow(tmp_path / "fork", "b", 21)
    first = _signed(book, keys["log"])
    published = tmp_path / "published.note"
    for later, message in ((_signed(fork, keys["log"]), "another root .* a fork"),
                           (_signed(_grow(tmp_path / "short", "a", 3), keys["log"]),
                            "smaller than tree size 21 seen before: the log was rolled back")):
        published.write_bytes(first)
        seen: list[str] = []

        def publish(line: str, later: bytes = later, seen: list[str] = seen) -> None:
            seen.append(line)
            published.write_bytes(later)  # the next look finds the other checkpoint

        with pytest.raises(el.MonitorError, match=message):
            el.monitor_checkpoints(published, [keys["log_vkey"]], ORIGIN, interval=0.1,
                                   report=publish)
        root = base64.b64encode(el.Ledger(book).consistency_proof(21, 21).root1).decode()
        assert seen == [f"published.note: tree size 21, root {root} (the first seen)"]


def test_a_slow_dripping_client_is_cut_and_a_vanished_one_costs_one_line(keys, tmp_path,
                                                                         monkeypatch, capfd):
    # a trial held every slot with clients sending one byte every 4 s (each byte restarted
    # the 10 s time-out), and clients gone before their answer printed tracebacks
    monkeypatch.setattr(witness_api, "CONNECTION_DEADLINE", 1.0)
    with _serving(keys["w1"], keys["log_vkey"], tmp_path / "s1") as (w1, _):
        port = int(w1.url.rsplit(":", 1)[1])
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port)) as drip:
            drip.sendall(b"POST /add-checkpoint HTTP/1.1\r\n")
            with contextlib.suppress(OSError):
                while time.monotonic() - started < 5:
                    drip.sendall(b"X")
                    time.sleep(0.2)
                    if drip.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) == b"":
                        break
        assert time.monotonic() - started < 3, "the dripping connection was never cut"
        with socket.create_connection(("127.0.0.1", port)) as gone:
            gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            gone.sendall(b"POST /add-checkpoint HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")
        time.sleep(0.5)
    assert "Traceback" not in capfd.readouterr().err
