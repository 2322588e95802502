"""Options every command shares, defined once, and the one check of ``--ledger``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import evidence_ledger as el

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
    typer.Option("--index", metavar="FILE",
                 help="Index file (default: one per ledger under "
                      "$XDG_CACHE_HOME/evidence-ledger/index/; the ledger is only read)."),
]
"""``--index FILE``: the DuckDB index a reading command uses (None: the default)."""

RebuildOpt = Annotated[
    bool, typer.Option("--rebuild", help="Rebuild the index from the log first.")
]
"""``--rebuild``: rebuild the index before reading it."""

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
"""``--json``: print JSON for scripts instead of text."""


def open_ledger(directory: Path | None, *, create: bool = False) -> el.Ledger:
    """The ledger ``--ledger`` names, checked before a command touches anything (see
    :class:`evidence_ledger.Ledger`: UsageError for a path that is not a ledger directory).
    """
    return el.Ledger(directory, create=create)
