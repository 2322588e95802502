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


WitnessKeyOpt = Annotated[
    list[str] | None,
    typer.Option("--witness-key", metavar="VKEY",
                 help="A witness's cosignature verifier key (type 0x04, as `witness key` "
                      "prints it; repeatable): the checkpoint must carry valid cosignatures "
                      "by --min-witnesses of them (rule witness_quorum)."),
]
"""``--witness-key VKEY``...: witnesses whose cosignatures a verifying command checks."""

MinWitnessesOpt = Annotated[
    int | None,
    typer.Option("--min-witnesses", metavar="N",
                 help="How many of the --witness-key witnesses must have cosigned "
                      "(default 1)."),
]
"""``--min-witnesses N``: the quorum of witness cosignatures wanted."""


def check_witnesses(note: bytes | Path, keys: list[str] | None,
                    minimum: int | None) -> el.WitnessQuorum | None:
    """The quorum ``--witness-key`` / ``--min-witnesses`` ask of ``note`` (None when neither
    is given); :class:`evidence_ledger.QuorumError` (exit 1) when it falls short."""
    if not keys and minimum is None:
        return None
    return el.check_witnesses(note, keys or [], minimum)
