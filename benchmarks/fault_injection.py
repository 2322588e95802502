"""Fault injection with ``strace``: each system call of a command that touches the ledger
fails once with EIO, at every position it is made, one case per run.

For each command (``ingest``, a recorded run, ``redact``, ``checkpoint``, ``export``) and
each system call of :data:`SYSCALLS`, a first run under ``strace -f -y`` lists the calls
that name a file of the ledger (or of the export's output); then, for each of their
positions N (strace counts each system call per thread), the command runs again on a fresh
copy of the same ledger with ``-e inject=SYSCALL:error=EIO:when=N``. After each case:

- the command exits 0 (the fault did not matter) or, for a CLI command, 1 with its error
  line (``evidence-ledger: error: ...``: a :class:`~evidence_ledger.LedgerError`, which the
  CLI prints as one line; never an internal error). Cases run with ``--verbose``, so that a
  failure shows its traceback;
- every entry the ledger held before is intact (same seq, same entry hash), and when the
  command succeeded, every entry it acknowledged is there;
- ``verify`` finds no integrity violation (a rule about what the agent did may fail when
  a recorded run was cut short: that is the run's evidence, not damage);
- the next write succeeds and the ledger still verifies.

``make reliability`` runs every case; ``tests/test_reliability.py`` runs the ``ingest`` and
``redact`` cases. Where ``strace`` is missing or may not trace, :func:`strace_problem`
says why and the trial is skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.segment_store import SegmentStore
from evidence_ledger.verify.audit import verify_ledger
from evidence_ledger.verify.findings import INTEGRITY, PAYLOAD_MISSING

REPO = Path(__file__).resolve().parent.parent

HANG_S = 120
"""A case still running after this (seconds) is a hang."""

_MISSED = "missed"
"""What :func:`run_case` says of a case whose fault fell on no ledger file this time
(strace counts per thread and process; a run may order its calls otherwise)."""

SYSCALLS = ("write", "pwrite64", "fsync", "fdatasync", "syncfs", "rename", "renameat",
            "renameat2", "openat", "close", "ftruncate", "unlink", "unlinkat")
"""The system calls failed (Python's ``os.replace`` is ``rename`` on Linux)."""

INTEGRITY_RULES = frozenset({INTEGRITY, PAYLOAD_MISSING})
"""Findings that mean the ledger itself is damaged (the others judge the agent's run)."""

_OUR_ERROR = re.compile(r"(evidence_ledger\.[\w.]*\.|object type name: )(StorageError|"
                        r"EvidenceError|UsageError|LockTimeout|GuardDenied)\b")
"""One of our errors, as a traceback's last line names it (or, when the write of that line
to stderr is the call that failed, as Python's own last words do)."""
_CALL = re.compile(r"^(\d+) +(\w+)\((.*)")
_PATHS = re.compile(r'"((?:[^"\\]|\\.)*)"|<([^>]*)>')


@dataclass
class Command:
    """One command under test.

    Attributes:
        name: as the table shows it.
        argv: its command line, given the case's folder (the ledger is ``DIR/L``).
        cli: True for an ``evidence-ledger`` command (held to the one-line error).
        outputs: folders besides the ledger whose files count as its own (``export``).
        did: what its success must have done, given the ledger and the digest it names:
            None if done, else what is not.
    """

    name: str
    argv: Callable[[Path], list[str]]
    cli: bool = True
    outputs: tuple[str, ...] = ()
    did: Callable[[Path, str], str | None] | None = None


@dataclass
class Outcome:
    """The cases of one command: how many ran with their fault on a ledger file, how many
    missed it (counted apart, never as passed), and each failure, named."""

    command: str
    cases: int = 0
    missed: int = 0
    failures: list[str] = field(default_factory=list)
    lost: int = 0


def _erased(ledger: Path, digest: str) -> str | None:
    """None when the payload ``digest`` names (``sha256:<hex>``) is gone: no copy stored,
    none being erased (format 2: in its segments; format 1: its file and marker)."""
    store = Ledger(ledger).payloads
    if isinstance(store, SegmentStore):
        left = [f"{path.name}@{at}" for path, at, _, _ in store.copies(bytes.fromhex(digest[7:]))]
    else:
        left = [p.name for p in (ledger / "payloads" / digest[7:9]).glob(f"{digest[7:]}*")]
    return f"exit 0, but {', '.join(left)} is still stored" if left else None


def _cli(*args: str) -> Callable[[Path], list[str]]:
    exe = str(Path(sys.executable).parent / "evidence-ledger")
    return lambda work: [exe, *(a.replace("{W}", str(work)) for a in args)]


COMMANDS = (
    Command("ingest", _cli("ingest", "{W}/events.jsonl", "--ledger", "{W}/L")),
    Command("recorded run", lambda work: [
        sys.executable, str(REPO / "examples" / "guarded_approval.py"), "park", "--ledger",
        f"{work}/L", "--state", f"{work}/state.json", "--policy", f"{work}/policy.toml"],
        cli=False),
    Command("redact", _cli("redact", "--ledger", "{W}/L", "--digest", "{DIGEST}",
                           "--reason", "erasure request"), did=_erased),
    Command("checkpoint", _cli("checkpoint", "--ledger", "{W}/L", "--key", "{W}/log.key")),
    Command("export", _cli("export", "--ledger", "{W}/L", "--format", "jsonl",
                           "--out", "{W}/out", "--key", "{W}/log.key"), outputs=("out",)),
)


def strace_problem() -> str | None:
    """Why this machine cannot run the trial (no ``strace``, or ptrace denied); None if it
    can."""
    strace = shutil.which("strace")
    if strace is None:
        return "strace is not installed"
    probe = subprocess.run([strace, "-qq", "-e", "trace=none", "true"], capture_output=True,
                           text=True, timeout=60)
    if probe.returncode != 0:
        return f"strace cannot trace here: {probe.stderr.strip()[:200]}"
    return None


def make_template(folder: Path) -> Path:
    """A folder holding ``L`` (a ledger of the rule vectors' valid run, with a signed
    checkpoint), ``events.jsonl`` (two more events), ``log.key`` and ``policy.toml`` (the
    guard's, for the recorded run: ``examples/guarded_approval.py park``); returns it."""
    folder.mkdir(parents=True)
    exe = str(Path(sys.executable).parent / "evidence-ledger")
    data = REPO / "tests" / "data" / "rules" / "valid.jsonl"
    for args in (["ingest", str(data), "--ledger", str(folder / "L")],
                 ["keygen", "--origin", "example.com/faults", "--out", str(folder / "log.key")],
                 ["checkpoint", "--ledger", str(folder / "L"), "--key", str(folder / "log.key")]):
        subprocess.run([exe, *args], check=True, capture_output=True, timeout=120)
    (folder / "policy.toml").write_text('version = 1\n[[tools]]\nmatch = "refund"\n',
                                        encoding="utf-8")
    (folder / "events.jsonl").write_text(
        '{"kind": "call", "run_id": "f", "call_id": "f1", "agent": "a", "tool": "t", '
        '"arguments": "{\\"n\\": 1}"}\n'
        '{"kind": "execution", "run_id": "f", "call_id": "f1", "arguments": "{\\"n\\": 1}", '
        '"result": "done"}\n', encoding="utf-8")
    return folder


def _digest(template: Path) -> str:
    call = next(Ledger(template / "L").entries())[0]
    return "sha256:" + call.body["args_payload"].hex()


def _argv(command: Command, work: Path, digest: str) -> list[str]:
    return [a.replace("{DIGEST}", digest) for a in command.argv(work)]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
            "OPENAI_AGENTS_DISABLE_TRACING": "1", "COLUMNS": "200"}


def _fresh(template: Path, work: Path) -> None:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(template, work, symlinks=True)


DERIVED = ("/payloads/locations.sqlite",)
"""Files of the ledger that are derived, rebuilt from the evidence (the payload map and its
SQLite companions): ``evidence_only`` runs leave their calls alone."""


def positions(command: Command, template: Path, work: Path, digest: str,
              evidence_only: bool = False) -> dict[str, list[int]]:
    """System call -> the positions (1-based, per thread, as ``when=`` counts) of its calls
    that name a file under the ledger (or the command's outputs), from one traced run;
    ``evidence_only``: not those that name only :data:`DERIVED` files."""
    _fresh(template, work)
    trace = work.parent / f"{work.name}.trace"
    subprocess.run(["strace", "-f", "-qq", "-y", "-e", f"trace={','.join(SYSCALLS)}",
                    "-o", str(trace), *_argv(command, work, digest)],
                   capture_output=True, env=_env(), timeout=300, cwd=work, check=True)
    roots = [str(work / "L"), *(str(work / o) for o in command.outputs)]
    counts: dict[tuple[str, str], int] = {}
    found: dict[str, set[int]] = {}
    for line in trace.read_text(errors="replace").splitlines():
        match = _CALL.match(line)
        if match is None or "resumed>" in line:
            continue
        tid, name, rest = match.groups()
        n = counts[tid, name] = counts.get((tid, name), 0) + 1
        paths = [q or a for q, a in _PATHS.findall(rest)]
        if evidence_only:
            paths = [p for p in paths if not any(d in p for d in DERIVED)]
        if any(p.startswith(root) for p in paths for root in roots):
            found.setdefault(name, set()).add(n)
    return {name: sorted(found[name]) for name in SYSCALLS if name in found}


def _integrity(ledger: Path) -> list[str]:
    report = verify_ledger(Ledger(ledger))
    return [f"{v.rule} at seq {v.seq}: {v.detail}" for v in report.violations
            if v.rule in INTEGRITY_RULES]


def run_case(command: Command, template: Path, work: Path, digest: str, syscall: str,
             position: int, before: list[bytes], after: int) -> str | None:
    """Run one case (see the module docstring): ``before``, the entry hashes of the
    ledger before it; ``after``, how many entries a run without a fault leaves. None if it
    held, else what failed."""
    _fresh(template, work)
    trace = work.parent / f"{work.name}.injected"
    try:
        done = subprocess.run(
            ["strace", "-f", "-qq", "-y", "-o", str(trace), "-e", f"trace={syscall}",
             "-e", f"inject={syscall}:error=EIO:when={position}",
             *_argv(command, work, digest), *(["--verbose"] if command.cli else [])],
            capture_output=True, text=True, env=_env(), timeout=HANG_S, cwd=work)
    except subprocess.TimeoutExpired:
        done = None
    injected = [line.split(" ", 1)[1] for line in
                trace.read_text(errors="replace").splitlines() if "(INJECTED)" in line]
    roots = [str(work / "L"), *(str(work / o) for o in command.outputs)]
    hit = [line for line in injected if any(root in line for root in roots)]
    if done is None:
        return f"hung over {HANG_S} s [{'; '.join(injected)}]"
    if not hit:
        return _MISSED  # the fault fell outside the ledger, or on no call at all
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    outside = len(hit) < len(injected)  # it also landed on a file not the ledger's
    failed = _judged_case(command, done, lines, work, before, after, outside)
    if failed is None and done.returncode == 0 and command.did is not None:
        failed = command.did(work / "L", digest)
    return None if failed is None else f"{failed} [{'; '.join(hit) or 'no ledger call hit'}]"


def _judged_case(command: Command, done: subprocess.CompletedProcess[str], lines: list[str],
                 work: Path, before: list[bytes], after: int, outside: bool) -> str | None:
    """What failed in a case that ran (None: it held). ``outside``: the fault also landed
    on a file outside the ledger (another thread's n-th call: strace counts per thread),
    where an error not ours is the app's or the SDK's, and only the ledger is judged."""
    if command.cli and done.returncode not in (0, 1):
        return f"exit {done.returncode}: {done.stderr.strip()[-300:]}"
    said = lines[-1] if lines else ""
    refused = (done.returncode == 1 and not said.startswith("evidence-ledger: error: ")
               if command.cli else  # a library call fails with one of our errors
               done.returncode != 0 and not outside and not _OUR_ERROR.search(done.stderr))
    if "internal error" in done.stderr or refused:
        return f"not an error line: {done.stderr.strip()[-1500:]}"
    present = [h for _, h in Ledger(work / "L").entries()]
    if present[: len(before)] != before:
        return "entries held before the command changed or are gone"
    if done.returncode == 0 and len(present) < after:  # entries carry their time: count
        return f"exit 0, but {after - len(present)} acknowledged entries are missing"
    damage = _integrity(work / "L")
    if damage:
        return f"integrity after the fault: {damage[0]}"
    try:
        EvidenceWriter(work / "L").run_end(run_id="next", status="completed")
    except Exception as exc:
        return f"next write failed: {type(exc).__name__}: {exc}"
    damage = _integrity(work / "L")
    if damage:
        return f"integrity after the next write: {damage[0]}"
    return None


def run_command(command: Command, template: Path, scratch: Path,
                progress: Callable[[str], None] | None = None,
                evidence_only: bool = False) -> Outcome:
    """Every case of ``command`` (see the module docstring); ``evidence_only``: not the
    calls on :data:`DERIVED` files only."""
    work, digest = scratch / "case", _digest(template)
    outcome = Outcome(command.name)
    before = [h for _, h in Ledger(template / "L").entries()]
    _fresh(template, work)
    subprocess.run(_argv(command, work, digest), capture_output=True, env=_env(), timeout=300,
                   cwd=work, check=True)
    after = sum(1 for _ in Ledger(work / "L").entries())
    for syscall, found in positions(command, template, work, digest,
                                    evidence_only).items():
        for position in found:
            failed = run_case(command, template, work, digest, syscall, position, before,
                              after)
            if failed == _MISSED:
                outcome.missed += 1
                continue
            outcome.cases += 1
            if failed is not None:
                outcome.failures.append(f"{command.name}, {syscall} #{position}: {failed}")
                outcome.lost += "missing" in failed or "changed" in failed
            if progress is not None:
                progress(f"{command.name}: {syscall} #{position}: "
                         f"{'ok' if failed is None else failed}")
    return outcome
