"""Large benchmark ledgers written directly as log frames, cached across runs.

Appending 10^7 entries through :class:`~evidence_ledger.record.writer.EvidenceWriter`
takes hours; this writes the same entries directly. The entries are those of
:mod:`benchmarks.workload` (the same call chains, bodies, refs and payload digests, byte
for byte: ``python -m benchmarks.ledger_cache --check`` compares them with a writer's),
with entry times ``T0 + seq`` µs: canonical MessagePack packed by ``msgpack`` in the
key order of :func:`evidence_ledger.format.encoding.canonical_order`, a valid ``prev``
chain, framed by :func:`evidence_ledger.format.framing.frame` in groups of
:data:`GROUP`, one ``fsync`` per group.

Payloads go through the ledger's own store (:meth:`PayloadStore.put`, then
:meth:`PayloadStore.sync` with the log, per group), so their layout stays the store's
business. Up to :data:`PAYLOADS_UP_TO` entries only:
in the layout of one file per payload, the 7.3 million payloads of 10^7 entries would
take about 20 minutes and as many inodes. Entries past that point name their payloads'
digests but the store does not hold them; the benchmarks that use such a ledger verify
without payload re-hash (no payload is read).

Ledgers are kept under ``.cache/bench/ledgers/<key>/<entries>`` where ``<key>`` hashes
the source of this generator, the workload and the modules that define the format and
the payload store: a second ``make bench`` reuses them, a change to any of those builds
them afresh (older keys are discarded). Callers must not write into a cached ledger:
:func:`working_copy` gives a copy that takes new files (``make bench``'s shared ledgers).
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack

from benchmarks import workload
from benchmarks.common import SCRATCH, discard, scaled, scratch
from evidence_ledger.format import digests, encoding, entries, framing
from evidence_ledger.format.entries import (
    BODY_FIELDS,
    FORMAT_VERSION,
    PAYLOAD_FIELDS,
    ZERO_HASH,
)
from evidence_ledger.storage import log_store, payloads
from evidence_ledger.storage.ledger_dir import Ledger

GROUP = 10_000
T0 = 1_741_000_000 * 10**9
PAYLOADS_UP_TO = 1_000_000
"""Entries whose payloads are stored (``BENCH_PAYLOADS_UP_TO`` overrides; smoke runs scale
it as every size, see :func:`benchmarks.common.scaled`)."""
CACHE = SCRATCH / "ledgers"
LOG = log_store.LOG_NAME
_ORDER = {kind: encoding.canonical_order(fields) for kind, fields in BODY_FIELDS.items()}
_TOP = encoding.canonical_order(("v", "seq", "body", "kind", "prev", "refs", "time"))

Step = tuple[str, dict[str, Any], list[bytes], list[bytes]]
"""(kind, body, payload bytes it stores, refs as "call" placeholders resolved later)."""


def cache_key() -> str:
    """Hex key naming the generator's code and the format it writes (16 characters)."""
    hasher = hashlib.sha256()
    for module in (sys.modules[__name__], workload, entries, encoding, framing, digests,
                   log_store, payloads):
        hasher.update(inspect.getsource(module).encode())
    return hasher.hexdigest()[:16]


def payloads_up_to() -> int:
    """How many entries of a generated ledger have their payloads stored."""
    return int(os.environ.get("BENCH_PAYLOADS_UP_TO") or scaled(PAYLOADS_UP_TO))


def _body(kind: str, **fields: Any) -> dict[str, Any]:
    return {name: fields[name] for name in _ORDER[kind]}  # KeyError: a field is missing


def _jcs(value: dict[str, Any]) -> bytes:
    """RFC 8785 JSON of a map of ASCII strings and small integers (what the workload
    makes; ``--check`` holds it to the writer's :func:`digests.canonical_json`)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def chain(i: int) -> list[Step]:
    """The entries :func:`benchmarks.workload.chain_steps` appends for call chain ``i``:
    per entry its kind, body, the payloads the writer stores for it, and whether it
    refers to the chain's call (a one-item list holding ``b"call"``) or to nothing."""
    run_id = f"run-{i // workload.CHAINS_PER_RUN:06d}"
    call_id = f"call_{i:09d}"
    parsed = {"account": f"acct-{i % 977}", "amount": i % 1000, "memo": "x" * 80}
    arguments = json.dumps(parsed)
    result = f"receipt {i}: charged {i % 1000} to acct-{i % 977}"
    args_digest = digests.sha256(_jcs(parsed))
    args_bytes, result_bytes = arguments.encode(), result.encode()
    args_payload, result_digest = digests.sha256(args_bytes), digests.sha256(result_bytes)
    session = f"s-{run_id}"
    call_item = {"type": "function_call", "call_id": call_id, "name": "charge",
                 "arguments": arguments}
    output_item = {"type": "function_call_output", "call_id": call_id, "output": result}
    call_item_bytes = _jcs(call_item)
    output_item_bytes = _jcs(output_item)
    gated = i % 2 == 0
    ident = {"run_id": run_id, "scope": [], "call_id": call_id}
    steps: list[Step] = [("call", _body(
        "call", **ident, agent="billing", tool="charge", args_digest=args_digest,
        args_form="jcs", args_payload=args_payload, needs_approval=gated,
        response_id=f"resp_{i}"), [args_bytes], [])]
    if gated:
        steps.append(("decision", _body(
            "decision", **ident, decision="approve", always=False,
            approver="alice@example.com", reason="ok", message_digest=None, args_digest=None,
            args_form=None, agent=None, tool=None, run_state=None), [], [b"call"]))
    steps += [
        ("execution", _body(
            "execution", **ident, agent="billing", tool="charge", args_digest=args_digest,
            args_form="jcs", args_payload=args_payload, result_digest=result_digest,
            error=None, run_state=None), [result_bytes, args_bytes], [b"call"]),
        ("session_item", _body(
            "session_item", run_id=run_id, scope=[], session_id=session, op="add",
            item_type="function_call", call_id=call_id,
            item_digest=digests.sha256(call_item_bytes), output_digest=None,
            args_digest=args_digest), [call_item_bytes], [b"call"]),
        ("session_item", _body(
            "session_item", run_id=run_id, scope=[], session_id=session, op="add",
            item_type="function_call_output", call_id=call_id,
            item_digest=digests.sha256(output_item_bytes), output_digest=result_digest,
            args_digest=None), [output_item_bytes, result_bytes], [b"call"]),
    ]
    if i % workload.CHAINS_PER_RUN == workload.CHAINS_PER_RUN - 1:
        steps.append(("run_end", _body("run_end", run_id=run_id, scope=[],
                                       status="completed", run_state=None), [], []))
    return steps


def entry_stream(count: int) -> Iterator[tuple[bytes, list[bytes]]]:
    """The first ``count`` entries of the workload as (canonical entry bytes, payloads
    the writer stores for it), chained by ``prev``; entry ``seq`` has time ``T0 + seq`` µs."""
    pack = msgpack.Packer(use_bin_type=True).pack
    prev, seq, i = ZERO_HASH, 0, 0
    while seq < count:
        call_hash = ZERO_HASH
        for kind, body, stored, refs in chain(i):
            if seq == count:
                return
            top = {"v": FORMAT_VERSION, "seq": seq, "body": body, "kind": kind, "prev": prev,
                   "refs": [call_hash for _ in refs], "time": T0 + seq * 1000}
            data = pack({k: top[k] for k in _TOP})
            prev = hashlib.sha256(data).digest()
            if kind == "call":
                call_hash = prev
            yield data, stored
            seq += 1
        i += 1


def write(directory: Path, count: int, stored_up_to: int | None = None) -> None:
    """Write a ledger of the first ``count`` workload entries into ``directory`` (new),
    with the payloads of the first ``stored_up_to`` (default :func:`payloads_up_to`)."""
    limit = payloads_up_to() if stored_up_to is None else stored_up_to
    ledger = Ledger(directory)
    ledger.store.create()
    fd = os.open(ledger.store.path, os.O_WRONLY | os.O_APPEND)
    try:
        group: list[bytes] = []
        stored_any = False
        for seq, (data, stored) in enumerate(entry_stream(count)):
            if seq < limit:
                for payload in stored:
                    ledger.payloads.put(payload)
                    stored_any = True
            group.append(data)
            if len(group) == GROUP or seq == count - 1:
                last = len(group) - 1
                os.write(fd, b"".join(framing.frame(d, k < last) for k, d in enumerate(group)))
                if stored_any:
                    ledger.payloads.sync(fd)
                else:
                    os.fsync(fd)
                group, stored_any = [], False
    finally:
        os.close(fd)


def cached_ledger(count: int) -> Path:
    """The directory of a cached ledger of the first ``count`` workload entries, written
    now (a few minutes per 10^6 entries with payloads) when not cached (read only)."""
    key = cache_key()
    target = CACHE / key / f"{count}-payloads-{min(count, payloads_up_to())}"
    if target.exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    for stale in CACHE.iterdir():
        if stale.name != key:
            discard(stale)
    start = time.perf_counter()
    with scratch("gen-") as work:
        write(work / "l", count)
        target.parent.mkdir(parents=True, exist_ok=True)
        (work / "l").rename(target)
    print(f"wrote a {count:,}-entry ledger as frames in {time.perf_counter() - start:.0f} s "
          f"(cached: {target})", file=sys.stderr)
    return target


def working_copy(count: int, target: Path) -> Path:
    """A copy at ``target`` (new) of the cached ledger of ``count`` entries that may be
    read, and given new files (a tree cache, checkpoints, an index), but never appended
    to: ``log.bin`` is copied, every other file hard-linked (copying 10^6 payload files
    would take minutes)."""
    source = cached_ledger(count)
    shutil.copytree(source, target, copy_function=os.link)
    os.unlink(target / LOG)
    shutil.copyfile(source / LOG, target / LOG)
    return target


def check(count: int) -> int:
    """Write ``count`` entries both ways (this generator; the workload through the
    project's writer, clock ``T0 + k`` µs) and compare log and payloads; 0 when equal."""
    from evidence_ledger.record.writer import EvidenceWriter

    with scratch("check-") as work:
        write(work / "fast", count, count)
        ticks = iter(range(count))
        writer = EvidenceWriter(work / "slow", clock=lambda: T0 + next(ticks) * 1000)
        todo = workload.steps(writer, count)
        for start in range(0, count, GROUP):
            with writer.atomic():
                for step in todo[start : start + GROUP]:
                    step()
        same_log = ((work / "fast" / "log.bin").read_bytes()
                    == (work / "slow" / "log.bin").read_bytes())
        fast, slow = Ledger(work / "fast"), Ledger(work / "slow")
        named = {body[field] for entry, _ in slow.entries() for body in [entry.body]
                 for field in PAYLOAD_FIELDS if isinstance(body.get(field), bytes)}
        same = sum(1 for d in named
                   if (got := fast.payloads.get(d)) is not None and got == slow.payloads.get(d))
        print(f"{count:,} entries: log.bin {'identical' if same_log else 'DIFFERS'}; "
              f"{same:,} of {len(named):,} named payloads stored and identical")
    return 0 if same_log and same == len(named) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", type=int, metavar="N",
                        help="compare N generated entries with the writer's and exit")
    parser.add_argument("--entries", type=int, nargs="*", default=[],
                        help="write (or find) cached ledgers of these sizes; print their paths")
    args = parser.parse_args(argv)
    if args.check:
        return check(args.check)
    for count in args.entries:
        print(cached_ledger(count))
    return 0


if __name__ == "__main__":
    sys.exit(main())
