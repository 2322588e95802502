"""Reliability harness: crash, fault, concurrency and tamper trials against a real ledger.

``make reliability`` runs every trial at full size and prints one results table; the
tests in ``tests/test_reliability.py`` run the same trials at the sizes the issue asks
for in ``make test``. Each trial returns a :class:`Trial` row.

Usage: python -m benchmarks.reliability [--kills N] [--writers N] [--per-writer N]

The strace trials (:mod:`benchmarks.fault_injection`) run where ``strace`` may trace; where
it may not, the reason is printed and they are left out.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from benchmarks import fault_injection
from evidence_ledger.format.errors import StorageError
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.verify.audit import verify_ledger

_WRITER_SCRIPT = """
import random, sys
from evidence_ledger.record.writer import EvidenceWriter
writer = EvidenceWriter(sys.argv[1])
rng = random.Random(int(sys.argv[2]))
while True:
    with writer.atomic():
        for _ in range(rng.randint(1, 8)):
            h = writer.call(run_id="crash", call_id=f"c{rng.random()}", agent="a", tool="t",
                            arguments='{"blob": "%s"}' % ("x" * rng.randint(0, 4000)))
    print(writer.size - 1, h.hex(), flush=True)
"""


@dataclass
class Trial:
    """One row of the results table.

    Attributes:
        name: what was tried.
        load: the load held (entries, processes).
        attempts: faults injected, kill points or inputs tried.
        lost: acknowledged entries lost or changed (must be 0).
        failures: other failed checks (must be 0), with ``detail`` naming the first.
    """

    name: str
    load: str
    attempts: int
    lost: int = 0
    failures: int = 0
    detail: str = ""


def kill_trial(directory: Path, kills: int, seed: int = 1) -> Trial:
    """SIGKILL a writer process at ``kills`` random moments; check acknowledged entries.

    After each kill: every acknowledged (seq, entry hash) is present and unchanged,
    ``verify`` passes (a torn tail is only a notice), and the next writer cuts the tail.
    """
    rng = random.Random(seed)
    acknowledged: dict[int, str] = {}
    trial = Trial("SIGKILL mid-append", "1 writer, groups of 1-8 entries", kills)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    for kill in range(kills):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER_SCRIPT, str(directory), str(seed * 1000 + kill)],
            stdout=subprocess.PIPE, text=True, env=env,
        )
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the writer is up and appending
        if first:
            seq, hash_hex = first.split()
            acknowledged[int(seq)] = hash_hex
        deadline = time.monotonic() + rng.uniform(0.0, 0.1)
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seq, hash_hex = line.split()
            acknowledged[int(seq)] = hash_hex
        os.kill(proc.pid, signal.SIGKILL)
        for line in proc.stdout:  # acknowledged before the kill landed
            seq, hash_hex = line.split()
            acknowledged[int(seq)] = hash_hex
        proc.wait()
        present = {e.seq: h.hex() for e, h in Ledger(directory).entries()}
        trial.lost += sum(1 for s, h in acknowledged.items() if present.get(s) != h)
        report = verify_ledger(Ledger(directory))
        if not report.ok:
            trial.failures += 1
            trial.detail = trial.detail or f"kill {kill}: {report.violations[0].detail}"
    trial.load = f"{len(acknowledged)} entries acknowledged, " + trial.load
    return trial


def _events_file(directory: Path, events: int) -> Path:
    """A JSONL file of ``events`` call events (arguments of 1-2 KiB), for ``ingest``."""
    path = directory / "events.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for n in range(events):
            arguments = json.dumps({"n": n, "blob": "x" * (1024 + n % 1024)})
            fh.write(json.dumps({"kind": "call", "run_id": "kill", "call_id": f"k{n}",
                                 "agent": "a", "tool": "t", "arguments": arguments}) + "\n")
    return path


PROCESS_KILLS = {
    "ingest": (lambda folder, events: [
        str(Path(sys.executable).parent / "evidence-ledger"), "ingest", str(events),
        "--again", "--ledger", str(folder)], 0.3, 1.4),
    "recorded run": (lambda folder, events: [
        sys.executable, str(Path(__file__).resolve().parent.parent / "examples"
                            / "approval_flow.py"), "--ledger", str(folder)], 0.8, 3.2),
}
"""Trial name -> (command line given the ledger and an events file, earliest and latest
kill, seconds after the start: the span in which it appends)."""


def process_kill_trial(directory: Path, name: str, kills: int, seed: int = 1,
                       per_ledger: int = 25) -> Trial:
    """SIGKILL ``kills`` runs of the command :data:`PROCESS_KILLS` names, each at a random
    moment of the span in which it appends (a fresh ledger every ``per_ledger`` kills).

    After each kill: every entry the ledger held before it is intact, entries of a run that
    finished are there, ``verify`` finds no integrity violation (a cut-short recorded run
    may break a rule about the agent's run: its evidence, not damage), and the next run
    writes on.
    """
    command, earliest, latest = PROCESS_KILLS[name]
    rng = random.Random(seed)
    events = _events_file(directory, 400)
    env = {**os.environ, "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    trial = Trial(f"SIGKILL mid-{name}", "", kills)
    held, finished = 0, 0
    for kill in range(kills):
        folder = directory / f"L{kill // per_ledger}"
        before = [h for _, h in Ledger(folder).entries()] if folder.exists() else []
        proc = subprocess.Popen(command(folder, events), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=env)
        time.sleep(rng.uniform(earliest, latest))
        proc.send_signal(signal.SIGKILL)
        finished += proc.wait() == 0
        present = [h for _, h in Ledger(folder).entries()] if folder.exists() else []
        held = max(held, len(present))
        trial.lost += sum(1 for a, b in zip(before, present, strict=False) if a != b)
        trial.lost += max(0, len(before) - len(present))
        if folder.exists():
            damage = [v for v in verify_ledger(Ledger(folder), payloads=True).violations
                      if v.rule in fault_injection.INTEGRITY_RULES]
            if damage:
                trial.failures += 1
                trial.detail = trial.detail or f"kill {kill}: {damage[0].detail}"
    trial.load = (f"{finished} runs finished before their kill, ledgers of up to {held} "
                  "entries")
    return trial


@contextmanager
def _fault(patches: dict[str, Any]) -> Iterator[None]:
    """Apply ``patches`` (target -> side-effect callable, or plain value) together."""
    with contextlib.ExitStack() as stack:
        for target, effect in patches.items():
            if callable(effect):
                stack.enter_context(mock.patch(target, side_effect=effect))
            else:
                stack.enter_context(mock.patch(target, new=effect))
        yield


def _raise(code: int) -> Callable[..., object]:
    def effect(*_args: object, **_kwargs: object) -> object:
        raise OSError(code, os.strerror(code))

    return effect


def fault_trial(directory: Path, rounds: int = 10) -> Trial:
    """Inject a short write, a failed fsync and ENOSPC into each write step.

    Each injected fault must surface as :class:`StorageError`, append nothing, and leave
    the ledger verifiable and writable.
    """
    real_write = os.write
    LOG, SEGMENTS = "evidence_ledger.storage.log_store", "evidence_ledger.storage.segment_store"
    faults: list[tuple[str, dict[str, Any]]] = [  # a ledger of format 2: payload segments
        ("short write of the log",
         {f"{LOG}.os.write": lambda fd, data: _partial(fd, data)}),
        ("ENOSPC writing the log", {f"{LOG}.os.write": _raise(errno.ENOSPC)}),
        ("failed fdatasync of the log", {f"{SEGMENTS}.SegmentStore.sync": _raise(errno.EIO)}),
        ("failed fdatasync of a segment", {f"{SEGMENTS}.os.fdatasync": _raise(errno.EIO)}),
        ("ENOSPC writing a segment", {f"{SEGMENTS}.os.pwrite": _raise(errno.ENOSPC)}),
    ]

    def _partial(fd: int, data: bytes) -> int:
        real_write(fd, data[: max(1, len(data) // 2)])
        raise OSError(errno.ENOSPC, "No space left on device")

    writer = EvidenceWriter(directory)
    writer.run_end(run_id="f", status="completed")  # the ledger exists before the first fault
    trial = Trial("injected I/O faults", "5 write steps", 0)
    for round_ in range(rounds):
        for name, patches in faults:
            trial.attempts += 1
            before = [h for _, h in Ledger(directory).entries()]
            try:
                with _fault(patches):
                    writer.call(run_id="f", call_id=f"{name}-{round_}", agent="a", tool="t",
                                arguments=json.dumps({"fault": name, "round": round_}))
                trial.failures += 1
                trial.detail = trial.detail or f"{name}: no error raised"
            except StorageError:
                pass
            after = [h for _, h in Ledger(directory).entries()]
            trial.lost += sum(1 for a, b in zip(before, after, strict=False) if a != b)
            if after != before or not verify_ledger(Ledger(directory)).ok:
                trial.failures += 1
                trial.detail = trial.detail or f"{name}: ledger changed or fails verify"
            writer.run_end(run_id="f", status="completed")  # still writable
    return trial


def _append_many(directory: str, worker: int, count: int, group: int) -> None:
    writer = EvidenceWriter(directory, lock_timeout=120)
    done = 0
    while done < count:
        with writer.atomic():
            for _ in range(min(group, count - done)):
                writer.run_end(run_id=f"w{worker}-{done}", status="completed")
                done += 1


def concurrency_trial(directory: Path, writers: int, per_writer: int, group: int = 25) -> Trial:
    """``writers`` processes append ``per_writer`` entries each to one ledger at once.

    Checks: exactly writers * per_writer entries, contiguous seq, valid chain and tree,
    every writer's entries present in its own order.
    """
    procs = [
        multiprocessing.get_context("spawn").Process(
            target=_append_many, args=(str(directory), w, per_writer, group)
        )
        for w in range(writers)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    trial = Trial("concurrent writers", f"{writers} processes x {per_writer} entries",
                  writers * per_writer)
    report = verify_ledger(Ledger(directory))
    names = [e.body["run_id"] for e, _ in Ledger(directory).entries()]
    expected = {f"w{w}-{i}" for w in range(writers) for i in range(per_writer)}
    trial.lost = len(expected - set(names))
    for w in range(writers):
        mine = [n for n in names if n.startswith(f"w{w}-")]
        if mine != [f"w{w}-{i}" for i in range(per_writer)]:
            trial.failures += 1
            trial.detail = trial.detail or f"writer {w}: entries out of order"
    if not report.ok or report.tree_size != writers * per_writer or any(p.exitcode for p in procs):
        trial.failures += 1
        trial.detail = trial.detail or f"tree size {report.tree_size}, ok={report.ok}"
    return trial


def strace_trials(directory: Path, commands: tuple[str, ...] | None = None,
                  evidence_only: bool = False) -> list[Trial]:
    """One row per command of :mod:`benchmarks.fault_injection`: every system call that
    touches the ledger failed once with EIO, at every position (``commands``: only those,
    by name; ``evidence_only``: not the calls on derived files only, e.g. the payload
    map). Empty, with the reason printed, where ``strace`` cannot run."""
    problem = fault_injection.strace_problem()
    if problem is not None:
        print(f"fault injection skipped: {problem}", file=sys.stderr)
        return []
    template = fault_injection.make_template(directory / "template")
    trials = []
    for command in fault_injection.COMMANDS:
        if commands is not None and command.name not in commands:
            continue
        outcome = fault_injection.run_command(command, template, directory,
                                              evidence_only=evidence_only)
        trials.append(Trial(
            f"strace EIO into {command.name}",
            f"{len(fault_injection.SYSCALLS)} system calls, every position on a ledger "
            f"file ({outcome.missed} more missed it and are not counted)",
            outcome.cases, outcome.lost, len(outcome.failures),
            outcome.failures[0] if outcome.failures else ""))
    return trials


def print_table(trials: list[Trial]) -> None:
    """Print the results table (markdown, so it can be pasted into README)."""
    print("| trial | load held | attempts | entries lost | other failures |")
    print("|---|---|---|---|---|")
    for t in trials:
        extra = f" ({t.detail})" if t.detail else ""
        print(f"| {t.name} | {t.load} | {t.attempts} | {t.lost} | {t.failures}{extra} |")


def main(argv: list[str] | None = None) -> int:
    """Run every trial at full size; exit 1 if anything was lost or failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--process-kills", type=int, default=500,
                        help="SIGKILLs of each of ingest and a recorded run")
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--per-writer", type=int, default=2500)
    args = parser.parse_args(argv)
    trials = []
    with tempfile.TemporaryDirectory() as tmp:
        trials.append(kill_trial(Path(tmp) / "kill", args.kills))
        for name in PROCESS_KILLS:
            folder = Path(tmp) / name.replace(" ", "-")
            folder.mkdir()
            trials.append(process_kill_trial(folder, name, args.process_kills))
        trials.append(fault_trial(Path(tmp) / "fault"))
        trials.append(concurrency_trial(Path(tmp) / "conc", args.writers, args.per_writer))
        trials += strace_trials(Path(tmp) / "strace")
    print_table(trials)
    return 1 if any(t.lost or t.failures for t in trials) else 0


if __name__ == "__main__":
    sys.exit(main())
