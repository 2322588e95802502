"""Shared test helpers: run the CLI in-process and read its exit code and output."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

from cli.main import main

DATA = Path(__file__).parent / "data"


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
