"""The values behind digests: ``show`` (one payload, or the arguments an arguments digest
names), and the value lines ``trace --values`` prints under its entries.

Thin: parse arguments, call the public API (``Ledger.value``, ``Ledger.open_payload``),
print. A redacted payload is shown as redacted (who, when, why), never as missing; one gone
without a redaction entry is lost evidence (exit 1). Strings from a ledger are printed with
control characters escaped.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.syntax import Syntax

import evidence_ledger as el
from evidence_ledger.cli import output
from evidence_ledger.cli.options import JsonOpt, LedgerOpt, open_ledger

__all__ = ["print_compared", "print_entry_values", "register"]

LOST = ("missing", "damaged")
"""Value states that are evidence failing: ``show`` exits 1."""


def _header(value: el.Value) -> str:
    """``payload sha256:<hex>``; for the value of an arguments digest ``arguments
    sha256:<hex>``, with ``(payload sha256:<hex>)`` when another payload holds it."""
    if value.args_digest is None:
        return f"payload {value.text}"
    if value.args_digest == value.digest:
        return f"arguments {value.text}"
    return f"arguments sha256:{value.args_digest.hex()} (payload {value.text})"


def _state_line(value: el.Value) -> str:
    """One line saying what the value is: its size, or why it cannot be shown."""
    if value.state == "present":
        shown = len(value.data or b"")
        cut = f", the first {shown} shown (--raw for all)" if value.cut else ""
        return f"{_header(value)}, {value.size} bytes{cut}"
    if value.state == "redacted" and value.redaction is not None:
        return f"{_header(value)}: {value.describe()} ({output.when(value.redaction.time_ns)})"
    if value.state == "missing":
        return f"{_header(value)}: missing, and no redaction entry erased it: lost evidence " \
               "(run verify)"
    return f"{_header(value)}: {value.describe()}"


def _print_value(value: el.Value) -> None:
    output.stdout.print(output.plain(_state_line(value)), highlight=False, markup=False)
    if value.state != "present":
        return
    parsed = value.parsed()
    if isinstance(parsed, str):  # not JSON: its text, control characters escaped
        output.stdout.print(parsed, highlight=False, markup=False)
    elif output.stdout.is_terminal:
        output.stdout.print(Syntax(output.json_text(parsed), "json", word_wrap=True))
    else:
        output.stdout.print(output.json_text(parsed), highlight=False, markup=False)


def show(
    digest: Annotated[
        str, typer.Argument(
            metavar="DIGEST",
            help="sha256:HEX or a unique prefix of at least 8 hex digits (sha256: optional): "
                 "a payload digest (arguments, result, item, output, message, policy) or an "
                 "arguments digest, as trace, log and verify print them."),
    ],
    ledger: LedgerOpt = None,
    raw: Annotated[
        bool, typer.Option("--raw", help="Write the payload's exact bytes to stdout, streamed "
                                         "(the whole payload, however large).")
    ] = False,
    json: JsonOpt = False,
) -> None:
    """Show the value behind a digest, as pretty JSON (or its text when it is not JSON).

    A payload larger than 1 MiB is shown cut (`--raw` writes it all). A redacted payload is
    shown as redacted: who, when and why (exit 0). Exit 1 when the payload is gone without
    a redaction entry (lost evidence) or its bytes do not match the digest; exit 2 for a
    digest no entry or payload names, an ambiguous prefix (the matches are named), or an
    arguments digest whose arguments the ledger does not hold.
    """
    if raw and json:
        raise el.UsageError("--raw and --json exclude each other")
    book = open_ledger(ledger)
    value = book.value(digest)
    if json:
        output.print_json(value.to_json())
    elif raw and value.state == "present":
        with book.open_payload(value.text) as stream:
            output.write_bytes(stream)
    elif raw:  # nothing to write: say why on stderr, stdout stays empty
        output.stderr.print(output.plain(_state_line(value)), highlight=False, markup=False)
    else:
        _print_value(value)
    raise typer.Exit(1 if value.state in LOST else 0)


VALUE_INDENT = " " * 8
"""Indent of the value lines ``trace --values`` prints under an entry."""


def print_entry_values(values: list[tuple[str, el.Value]]) -> None:
    """One line per value an entry names, under it: what it is, its digest (12 hex digits,
    which ``show`` takes back) and the value as compact JSON cut to the terminal width (or
    why it cannot be shown)."""
    width = output.stdout.width
    for what, value in values:
        head = f"{VALUE_INDENT}{what} {output.short(value.args_digest or value.digest)}  "
        output.stdout.print(
            output.plain(head + value.preview(max(width - len(head), 20))),
            highlight=False, markup=False, crop=False)


def print_compared(diff: el.ValueDiff) -> None:
    """The values a violation compared, under it (:func:`output.compared_lines`)."""
    for line in output.compared_lines(diff):
        output.stdout.print(output.plain(f"    {line}"), highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    """Add ``show`` to ``app``."""
    app.command("show")(show)
