"""``make fuzz``'s table: every parser of hostile input fed mutated inputs, counting
internal errors, hangs and peak memory.

Each parser runs in a fresh process (:func:`run_parser`): ``inputs`` inputs, each a valid
seed (the project's own vectors) mutated one to four times (bits flipped, bytes replaced,
inserted, deleted, duplicated or cut, seeds spliced, JSON and MessagePack tokens
inserted), parsed through the code the CLI runs. An error the parser documents (any
:class:`~evidence_ledger.LedgerError`) is the expected answer to bad input; any other
exception is an internal error, and an input that takes over :data:`HANG_S` seconds a hang.
Each process reports its peak RSS (``VmHWM``). The first failing inputs are kept in
``benchmarks/fuzz-failures/`` to reproduce.

Usage: python -m benchmarks.fuzz_table [--inputs N] [--parser NAME ...] [--seed N]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
VECTORS = REPO / "tests" / "vectors" / "evidence-ledger"
FAILURES = Path(__file__).resolve().parent / "fuzz-failures"
HANG_S = 10
"""An input that takes longer than this (seconds) is a hang."""
PEAK_TARGET_MB = 256

_TOKENS = (b"\x00", b"\xff", b"\n", b"{", b"}", b"[", b"]", b'"', b",", b":", b"\\u0000",
           b"1e999", b"-0", b"NaN", b"9" * 40, b"\xc1", b"\xdb\xff\xff\xff\xff",
           b"\xdf\xff\xff\xff\xff", b"\x80" * 3, b"\xe2\x80\x94 ", b"= ", b"[[tools]]\n")


class _Hang(BaseException):
    """Raised by the alarm: a BaseException, so that no parser's ``except Exception``
    turns a hang into one of its documented errors."""


def mutate(rng: random.Random, seed: bytes, seeds: list[bytes]) -> bytes:
    """``seed`` changed one to four times (see the module docstring)."""
    data = bytearray(seed)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(data) + 1)
        op = rng.randrange(8)
        if op == 0 and data:
            data[min(at, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif op == 2:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 3:
            del data[at:at + rng.randint(1, 64)]
        elif op == 4:
            end = min(len(data), at + rng.randint(1, 256))
            data[at:at] = data[at:end] * rng.randint(1, 4)
        elif op == 5:
            del data[at:]
        elif op == 6:
            other = rng.choice(seeds)
            start = rng.randrange(len(other) + 1)
            data[at:] = other[start:]
        else:
            data[at:at] = rng.choice(_TOKENS)
    return bytes(data)


# -- the parsers --------------------------------------------------------------------------


def _ingest() -> tuple[list[bytes], Callable[[bytes], object]]:
    from evidence_ledger.record.ingest import read_events

    seeds = [p.read_bytes() for p in sorted((REPO / "tests" / "data").glob("*/*.jsonl"))]
    return seeds, lambda data: list(read_events(io.BytesIO(data)))


def _notes() -> tuple[list[bytes], Callable[[bytes], object]]:
    from evidence_ledger.tlog.note import Verifier, open_note

    vectors = [json.loads(p.read_text()) for p in sorted((VECTORS / "checkpoints").glob("*"))]
    keys = [Verifier.from_vkey(v["verifier_key"]) for v in vectors if "verifier_key" in v]
    seeds = [v["note"].encode() for v in vectors if "note" in v]
    return seeds, lambda data: open_note(data, keys[:1])


def _witness_requests() -> tuple[list[bytes], Callable[[bytes], object]]:
    """``add-checkpoint`` bodies, parsed and judged as a witness holding tree size 13."""
    from evidence_ledger.tlog.checkpoint import Checkpoint
    from evidence_ledger.tlog.note import Verifier
    from evidence_ledger.tlog.witness_protocol import (
        format_add_checkpoint,
        judge,
        parse_add_checkpoint,
    )

    vector = json.loads((VECTORS / "checkpoints" / "signed.json").read_text())
    keys = [Verifier.from_vkey(vector["verifier_key"])]
    note = vector["note"].encode()
    proof = [bytes([i]) * 32 for i in range(3)]
    held = Checkpoint(vector["origin"], 13, bytes(32))
    seeds = [format_add_checkpoint(0, [], note), format_add_checkpoint(13, proof, note)]
    return seeds, lambda data: judge(parse_add_checkpoint(data), keys, held)


def _cosigned_notes() -> tuple[list[bytes], Callable[[bytes], object]]:
    """Checkpoints carrying witness cosignatures, counted against a quorum."""
    from evidence_ledger.tlog.cosignature import WitnessPolicy, check_quorum

    vector = json.loads((REPO / "tests" / "vectors" / "cosignature" / "known-answer.json")
                        .read_text())
    policy = WitnessPolicy.from_keys([vector["witness"]["verifier_key"]], 1)
    assert policy is not None
    return [vector["cosigned_note"].encode()], lambda data: check_quorum(data, policy)


def _bundles() -> tuple[list[bytes], Callable[[bytes], object]]:
    from evidence_ledger.bundle.verify import verify_bundle
    from evidence_ledger.tlog.note import Verifier

    vectors = [json.loads(p.read_text()) for p in sorted((VECTORS / "bundles").glob("*.json"))
               if not p.name.endswith(".dsse.json")]
    key = Verifier.from_vkey(vectors[0]["verifier_key"])
    seeds = [(VECTORS / v["bundle"]).read_bytes() for v in vectors if "bundle" in v]
    return seeds, lambda data: verify_bundle(data, [key])


def _frames() -> tuple[list[bytes], Callable[[bytes], object]]:
    from evidence_ledger.format.entries import decode_entry
    from evidence_ledger.format.framing import Record, scan_bytes

    seeds = [bytes.fromhex(json.loads(p.read_text())["log_hex"])
             for p in sorted((VECTORS / "frames").glob("*.json"))]

    def parse(data: bytes) -> object:
        return [decode_entry(item.data) for item in scan_bytes(data)
                if isinstance(item, Record) and item.crc_ok]

    return [s for s in seeds if s], parse


def _entries() -> tuple[list[bytes], Callable[[bytes], object]]:
    """Entry bytes straight into the canonical decoder: a mutated record of ``log.bin``
    fails its CRC-32 before the decoder sees it, so the frames row never reaches it."""
    from evidence_ledger.format.entries import decode_entry

    seeds = [bytes.fromhex(json.loads(p.read_text())["entry_hex"])
             for p in sorted((VECTORS / "entries").glob("*.json"))]
    return seeds, decode_entry


def _policies() -> tuple[list[bytes], Callable[[bytes], object]]:
    from evidence_ledger.policy.model import parse_policy

    seeds = [b'version = 1\nmode = "enforce"\non_deny = "reject"\nsession = "enforce"\n'
             b'[groups]\ndesk = ["carol", "dan"]\n[keys]\nbob = "bob+c0ffee00+AAAA"\n'
             b'[[tools]]\nmatch = "billing.*"\nagent = "ops"\napprovers = ["alice", "@desk"]\n'
             b'max_age = 3600\nsecond_approver = true\n'
             b'[tools.arguments.amount]\nmax = 100\nmin = 0\n'
             b'[tools.arguments.account]\npattern = "^acct-[0-9]+$"\n'
             b'[tools.arguments.currency]\none_of = ["EUR", "USD"]\n',
             b'version = 1\n[[tools]]\nmatch = "refund"\n']
    return seeds, parse_policy


class _InFile:
    """A parser of files: each input written to one scratch file, then parsed by path."""

    def __init__(self, suffix: str, parse: Callable[[Path], object]) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="fuzz-")) / f"input{suffix}"
        self.parse = parse

    def __call__(self, data: bytes) -> object:
        self.path.write_bytes(data)
        return self.parse(self.path)


def _manifests() -> tuple[list[bytes], Callable[[bytes], object]]:
    from evidence_ledger.index.export_check import _read_manifest

    seed = json.dumps({
        "export_format_version": 2, "format": "jsonl", "tree_size": 12,
        "root_hash": "3q2+7w==", "since_ns": None, "until_ns": 1700000000000000000,
        "files": [{"name": "entries.bin", "entries": 12, "sha256": "sha256:" + "cd" * 32},
                  {"name": "checkpoint.note", "sha256": "sha256:" + "ef" * 32},
                  {"name": "calls.jsonl", "view": "calls", "rows": 3,
                   "sha256": "sha256:" + "ab" * 32}],
    }).encode()
    parser = _InFile("", lambda path: _read_manifest(path.parent))
    parser.path = parser.path.with_name("manifest.json")
    return [seed], parser


def _sessions() -> tuple[list[bytes], Callable[[bytes], object]]:
    from evidence_ledger.api.offline import scan_sessions

    dump = b"".join(json.dumps({"session_id": "s", "message_data": json.dumps(item)}).encode()
                    + b"\n" for item in (
        {"type": "function_call", "call_id": "c1", "name": "t", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"role": "user", "content": "hi"}))
    return [dump], _InFile(".jsonl", scan_sessions)


def _sqlite_sessions() -> tuple[list[bytes], Callable[[bytes], object]]:
    import sqlite3

    from evidence_ledger.api.offline import scan_sessions

    folder = Path(tempfile.mkdtemp(prefix="fuzz-seed-"))
    conn = sqlite3.connect(folder / "s.db")
    conn.execute("CREATE TABLE agent_messages (id INTEGER PRIMARY KEY, session_id TEXT, "
                 "message_data TEXT, created_at TEXT)")
    conn.executemany("INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)", [
        ("s", json.dumps({"type": "function_call", "call_id": "c1", "name": "t",
                          "arguments": "{}"})),
        ("s", json.dumps({"type": "function_call_output", "call_id": "c1", "output": "ok"}))])
    conn.commit()
    conn.close()
    return [(folder / "s.db").read_bytes()], _InFile(".db", scan_sessions)


PARSERS: dict[str, Callable[[], tuple[list[bytes], Callable[[bytes], object]]]] = {
    "ingest JSONL": _ingest, "signed notes": _notes, "proof bundles": _bundles,
    "export manifests": _manifests, "session stores (JSONL dump)": _sessions,
    "session stores (SQLite)": _sqlite_sessions, "log.bin frames": _frames,
    "entries (canonical MessagePack)": _entries, "policy files": _policies,
    "witness add-checkpoint requests": _witness_requests,
    "cosigned notes (witness quorums)": _cosigned_notes,
}


# -- running ------------------------------------------------------------------------------


def _on_alarm(_signum: int, _frame: Any) -> None:
    raise _Hang


def worker(name: str, inputs: int, seed: int) -> dict[str, Any]:
    """Fuzz parser ``name`` in this process; its counts and peak RSS (MB)."""
    from evidence_ledger import LedgerError

    seeds, parse = PARSERS[name]()
    rng = random.Random(seed)
    signal.signal(signal.SIGALRM, _on_alarm)
    internal, hangs, kept = 0, 0, []
    start = time.perf_counter()
    for _ in range(inputs):
        data = mutate(rng, rng.choice(seeds), seeds)
        signal.setitimer(signal.ITIMER_REAL, HANG_S)
        try:
            parse(data)
        except LedgerError:
            pass
        except _Hang:
            hangs += 1
            kept.append(("hang", data))
        except Exception as exc:  # what no parser may raise on any input
            internal += 1
            kept.append((f"{type(exc).__name__}: {exc}"[:300], data))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    with open("/proc/self/status") as status:
        hwm = next(line for line in status if line.startswith("VmHWM"))
    first = []
    for n, (why, data) in enumerate(kept[:3]):
        FAILURES.mkdir(exist_ok=True)
        path = FAILURES / f"{name.split()[0]}-{seed}-{n}.bin"
        path.write_bytes(data)
        first.append(f"{why} ({path.relative_to(REPO)})")
    return {"parser": name, "inputs": inputs, "internal": internal, "hangs": hangs,
            "peak_mb": int(hwm.split()[1]) / 1024, "seconds": time.perf_counter() - start,
            "first": first}


def run_parser(name: str, inputs: int, seed: int) -> dict[str, Any]:
    """:func:`worker` in a fresh interpreter (so that its peak RSS is its own)."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.fuzz_table", "--worker", name,
                           "--inputs", str(inputs), "--seed", str(seed)],
                          capture_output=True, text=True, cwd=REPO, check=True)
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


@dataclass
class _Args:
    inputs: int
    parser: list[str] | None
    seed: int
    worker: str | None


def main(argv: list[str] | None = None) -> int:
    """Fuzz every parser (or those named) and print the table; exit 1 on any internal
    error, hang or peak over :data:`PEAK_TARGET_MB`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=100_000)
    parser.add_argument("--parser", action="append", choices=sorted(PARSERS))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = _Args(**vars(parser.parse_args(argv)))
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.inputs, args.seed)))
        return 0
    print("| parser | inputs | internal errors | hangs (> 10 s) | peak RSS | time |")
    print("|---|---|---|---|---|---|")
    bad = 0
    for name in args.parser or PARSERS:
        row = run_parser(name, args.inputs, args.seed)
        bad += row["internal"] + row["hangs"] + (row["peak_mb"] > PEAK_TARGET_MB)
        print(f"| {name} | {row['inputs']:,} | {row['internal']} | {row['hangs']} | "
              f"{row['peak_mb']:.0f} MB | {row['seconds']:.0f} s |", flush=True)
        for first in row["first"]:
            print(f"  - {first}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
