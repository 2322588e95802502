"""Rows for people (``query`` in its table format, ``query --list``): a table, or, when the
table is wider than the console, one record per block as psql's expanded display
(``\\x``) shows them: a ``-[ RECORD n ]-`` line, then one ``column | value`` line each.

Digests (``sha256:`` and 64 hex digits) are cut to their first :data:`DIGEST_HEX` hex
digits here; ``--format csv``, ``json`` and ``jsonl`` print them whole.
"""

from __future__ import annotations

import re

from rich.cells import cell_len
from rich.measure import Measurement
from rich.table import Table

from evidence_ledger.cli import output

__all__ = ["DIGEST_HEX", "print_rows", "short_digests"]

DIGEST_HEX = 12
"""Hex digits of a digest a table shows, as :func:`evidence_ledger.cli.output.short` cuts
them (find the whole one with ``WHERE arguments_digest LIKE 'sha256:0a8b3c4d5e6f%'``)."""

_DIGEST = re.compile(rf"(?<![0-9a-z])(sha256:[0-9a-f]{{{DIGEST_HEX}}})[0-9a-f]{{{64 - DIGEST_HEX}}}"
                     r"(?![0-9a-f])")

_UNBOUNDED = 1 << 20
"""Width a table is measured at to find the width it wants (no column folded)."""


def short_digests(text: str) -> str:
    """``text`` with each digest in it (``sha256:`` and 64 lowercase hex digits) cut to its
    first :data:`DIGEST_HEX` hex digits."""
    return _DIGEST.sub(r"\1", text)


def print_rows(columns: list[str], rows: list[list[str]], caption: str,
               expanded: bool | None = None) -> None:
    """Print ``rows`` (cells as text, in ``columns`` order) on standard output, then
    ``caption`` (saying so when digests were cut).

    Args:
        expanded: True one record per block, False a table, None (default) a table unless
            it is wider than :func:`evidence_ledger.cli.output.width` (``COLUMNS``, else the
            terminal, else 200).
    """
    shown = [[short_digests(cell) for cell in row] for row in rows]
    if shown != rows:
        caption += (f"; digests cut to {DIGEST_HEX} hex digits (--format csv or json prints "
                    "them whole)")
    table = Table()
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in shown:
        table.add_row(*row)
    console, width = output.stdout, output.width()
    wanted = Measurement.get(console, console.options.update_width(_UNBOUNDED), table).maximum
    if expanded is None:
        expanded = wanted > width
    if expanded:
        _print_records(columns, shown, width)
    else:
        table.width = min(wanted, width)  # its own width, or folded to the console's
        console.print(table, markup=False, highlight=False)
    console.print(caption, markup=False, highlight=False)


def _print_records(columns: list[str], rows: list[list[str]], width: int) -> None:
    """Each row as a block: ``-[ RECORD n ]`` and dashes, then ``column | value`` lines
    (values on one line: line breaks in them shown as escapes)."""
    names = [output.plain(column) for column in columns]
    label = max(map(cell_len, names), default=0)
    lines = [[output.plain(cell) for cell in row] for row in rows]
    value = max((cell_len(cell) for row in lines for cell in row), default=0)
    rule = min(label + 3 + value, width)
    for number, row in enumerate(lines, start=1):
        head = f"-[ RECORD {number} ]"
        output.stdout.print(head + "-" * (rule - len(head)), markup=False, highlight=False)
        for name, cell in zip(names, row, strict=True):
            pad = " " * (label - cell_len(name))
            output.stdout.print(f"{name}{pad} | {cell}".rstrip(), markup=False,
                                highlight=False)
