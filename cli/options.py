"""Options every command shares, defined once, and the one check of ``--ledger``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from evidence_ledger.format.errors import UsageError
from evidence_ledger.storage.ledger_dir import Ledger

LedgerOpt = Annotated[
    Path | None,
    typer.Option(
        "--ledger", envvar="EVIDENCE_LEDGER", show_envvar=True, metavar="DIR",
        help="Ledger directory (default: ./.evidence).",
    ),
]
"""``--ledger DIR``; None means ``$EVIDENCE_LEDGER``, else ``./.evidence``."""

IndexOpt = Annotated[
    Path | None,
    typer.Option("--index", metavar="FILE", help="Index file (default: LEDGER/index.duckdb)."),
]
"""``--index FILE``: the DuckDB index a reading command uses (None: the default)."""

RebuildOpt = Annotated[
    bool, typer.Option("--rebuild", help="Rebuild the index from the log first.")
]
"""``--rebuild``: rebuild the index before reading it."""

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
"""``--json``: print JSON for scripts instead of text."""


def open_ledger(directory: Path | None, *, create: bool = False) -> Ledger:
    """The ledger ``--ledger`` names, checked before a command touches anything.

    Args:
        directory: the option's value (see :data:`LedgerOpt`).
        create: the command may create the ledger (a writer such as ``ingest``); else
            the ledger must exist already.

    Raises:
        UsageError: if the path exists and is not a directory, or (unless ``create``)
            holds no ledger. Nothing is created either way.
    """
    book = Ledger(directory)
    if os.path.lexists(book.directory) and not book.directory.is_dir():
        raise UsageError(f"{book.directory} is not a directory; --ledger names a ledger directory")
    if not create:
        book.require_exists()
    return book
