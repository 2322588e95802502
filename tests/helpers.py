"""Shared test helpers: run the CLI in-process and read its exit code and output."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import NoReturn

from evidence_ledger.cli.main import main
from evidence_ledger.format.framing import FRAME_OVERHEAD, Record
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.segment_store import SegmentStore

DATA = Path(__file__).parent / "data"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_example(name: str) -> ModuleType:
    """The example script ``examples/<name>.py``, loaded as the module ``name``, with
    ``examples/`` on ``sys.path`` as when it runs as a script (for its sibling imports)."""
    if str(EXAMPLES) not in sys.path:
        sys.path.append(str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(*args: str) -> CliResult:
    """Run ``evidence-ledger ARGS`` in-process; capture exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return CliResult(code, out.getvalue(), err.getvalue())


def ingest(ledger: Path, name: str = "valid") -> None:
    """Ingest ``tests/data/rules/<name>.jsonl`` into ``ledger`` and check it succeeded."""
    result = run_cli("ingest", str(DATA / "rules" / f"{name}.jsonl"), "--ledger", str(ledger))
    assert result.code == 0, result.err


def forge_entry(ledger: Path, seq: int, edit: Callable[[bytes], bytes]) -> None:
    """Rewrite entry ``seq`` of ``ledger``'s log in place with ``edit(entry bytes)`` (same
    length) and a fresh record CRC, as a careful forger would: every frame still reads."""
    record = [r for r in Ledger(ledger).scan() if isinstance(r, Record)][seq]
    forged = edit(record.data)
    assert len(forged) == len(record.data)
    log = ledger / "log.bin"
    data = bytearray(log.read_bytes())
    start = record.offset + FRAME_OVERHEAD - 4  # past the frame header
    end = start + len(forged)
    data[start:end] = forged
    data[end : end + 4] = zlib.crc32(forged).to_bytes(4, "big")
    log.write_bytes(bytes(data))



def require_strace() -> str:
    """The path of ``strace``, where it runs and may trace (ptrace allowed); otherwise the
    test is skipped, naming why, except on CI (``CI`` set), where it fails."""
    strace = shutil.which("strace")
    why = "strace is not installed"
    if strace is not None:
        probe = subprocess.run([strace, "-qq", "-e", "trace=none", "true"],
                               capture_output=True, text=True, timeout=60)
        if probe.returncode == 0:
            return strace
        why = f"strace cannot trace here: {probe.stderr.strip()[:200]}"
    _unavailable(why, "strace")


def require_chromium() -> str:
    """The path of Debian's ``chromium``, where it and Playwright (which drives it; never
    ``playwright install``) are installed; otherwise the test is skipped, naming why,
    except on CI (``CI`` set), where it fails."""
    chromium = shutil.which("chromium")
    if chromium is None:
        _unavailable("chromium is not installed (apt-get install chromium)", "chromium")
    if importlib.util.find_spec("playwright") is None:
        _unavailable("playwright is not installed (pip install -e '.[dev]')", "playwright")
    return chromium


def _unavailable(why: str, what: str) -> NoReturn:
    """Skip the test, naming why; on CI (``CI`` set), fail it: CI installs ``what``."""
    import pytest

    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI installs {what} and must run this test)")
    pytest.skip(why)


def default_index(ledger: Path) -> Path:
    """Where ``query`` and ``trace`` keep the index of the ledger at ``ledger`` by default
    (the test's own ``$XDG_CACHE_HOME``, see tests/conftest.py)."""
    from evidence_ledger.index.build import index_path
    from evidence_ledger.storage.ledger_dir import Ledger

    return index_path(Ledger(ledger))


def stored_payloads(ledger: Path) -> dict[bytes, bytes]:
    """Every payload the ledger in ``ledger`` stores (format 1 or 2), digest -> its bytes."""
    store = Ledger(ledger).payloads
    if isinstance(store, SegmentStore):
        digests = list(store.stored())
    else:
        digests = [bytes.fromhex(p.name) for p in store.root.glob("*/*") if len(p.name) == 64]
    return {d: data for d in digests if (data := store.get(d)) is not None}


def rewrite_payload(ledger: Path, digest: bytes, data: bytes) -> None:
    """Overwrite the stored bytes of payload ``digest`` with ``data`` where they are stored,
    as a tamperer would: its file (format 1), or in place in its segment (format 2: ``data``
    cut or padded with spaces to the payload's length)."""
    store = Ledger(ledger).payloads
    if isinstance(store, SegmentStore):
        for path, offset, length, _ in store.copies(digest):
            with open(path, "r+b") as fh:
                fh.seek(offset)
                fh.write(data.ljust(length, b" ")[:length])
    else:
        store.path_for(digest).write_bytes(data)


def format1(ledger: Path) -> Path:
    """Make ``ledger`` (a new directory) a ledger of format version 1 (one file per payload):
    for tests of that layout, which a ledger of today's code is still read and written in."""
    ledger.mkdir(parents=True, exist_ok=True)
    (ledger / "format").write_text("1\n")
    return ledger


def run_end_ledger(path: Path, count: int, start: int = 0) -> Path:
    """``path``, a ledger given ``count`` more ``run_end`` entries (runs ``r<start>`` on), in
    one atomic group, at one fixed time: a log of a chosen size, quickly."""
    writer = EvidenceWriter(path, clock=lambda: 1_700_000_000_000_000_000)
    with writer.atomic():
        for i in range(start, start + count):
            writer.run_end(run_id=f"r{i}", status="completed")
    return path
