"""Options every command shares, defined once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

LedgerOpt = Annotated[
    Path | None,
    typer.Option(
        "--ledger", envvar="EVIDENCE_LEDGER", show_envvar=True, metavar="DIR",
        help="Ledger directory (default: ./.evidence).",
    ),
]
"""``--ledger DIR``; None means ``$EVIDENCE_LEDGER``, else ``./.evidence``."""

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
"""``--json``: print JSON for scripts instead of text."""
