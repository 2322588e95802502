"""Witness commands: ``witness serve`` (cosign checkpoints of the logs it follows, each only
if consistent with the last it cosigned: c2sp.org/tlog-witness), ``witness key`` (the
cosignature verifier key logs and verifiers name it by) and ``witness monitor`` (follow a
log's checkpoints, stop at the first inconsistent one).

Thin: parse arguments, call the public API (``WitnessServer``, ``SigningKey.witness_key``,
``monitor_checkpoints``), print. Errors are :class:`evidence_ledger.LedgerError` types,
turned into one line and an exit code by the handler in :mod:`evidence_ledger.cli.main`.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

import evidence_ledger as el
from evidence_ledger.cli import output
from evidence_ledger.cli.options import JsonOpt

__all__ = ["register"]

app = typer.Typer(
    name="witness", no_args_is_help=True, rich_markup_mode="markdown",
    help="Run a witness that cosigns checkpoints (c2sp.org/tlog-witness), print its key, or "
         "monitor a log's checkpoints.",
)

KeyArg = Annotated[
    Path, typer.Option("--key", metavar="PATH",
                       help="The witness's private key file (made by keygen; its name names "
                            "the witness).")
]


def _logs(pairs: list[str]) -> dict[str, list[str]]:
    """``ORIGIN=VKEY`` options as origin -> verifier keys (split at the first ``=``)."""
    logs: dict[str, list[str]] = {}
    for pair in pairs:
        origin, sep, vkey = pair.partition("=")
        if not sep or not origin or not vkey:
            raise el.UsageError(f"--log {pair[:80]!r}: want ORIGIN=VKEY (the log's origin and "
                                "its checkpoint verifier key)")
        logs.setdefault(origin, []).append(vkey)
    return logs


def _listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as ``(host, port)``."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise el.UsageError(f"--listen {text[:80]!r}: want HOST:PORT, e.g. 127.0.0.1:8080")
    return host, int(port)


def _stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@app.command("serve")
def serve_command(
    key: KeyArg,
    log: Annotated[
        list[str],
        typer.Option("--log", metavar="ORIGIN=VKEY",
                     help="A log to witness: its origin, '=', a verifier key trusted to sign "
                          "its checkpoints; repeatable (repeat an origin for more keys)."),
    ],
    state: Annotated[
        Path,
        typer.Option("--state", metavar="DIR",
                     help="Directory of the witness's state: the latest checkpoint it "
                          "cosigned of each log (created; one witness at a time)."),
    ],
    listen: Annotated[
        str, typer.Option("--listen", metavar="HOST:PORT",
                          help="Address to listen on (port 0: any free port).")
    ] = "127.0.0.1:0",
    as_json: JsonOpt = False,
) -> None:
    """Serve `POST /add-checkpoint`: cosign each checkpoint of the logs it follows that is
    consistent with the last one it cosigned of that log, and refuse the rest (409 with the
    size it holds, 422 for a failing proof, 403, 404, 400); `GET /<sha256(origin)>/checkpoint`
    serves the latest it cosigned. Its state is made durable before it answers.

    Prints its URL and cosignature verifier key, then one line per answer on stderr; stops
    on SIGINT or SIGTERM (exit 0).
    """
    signing_key = el.SigningKey.load(key)
    host, port = _listen(listen)
    with el.WitnessServer(signing_key, _logs(log), state, host, port) as server:
        if as_json:
            output.print_json({"url": server.url, "name": signing_key.name,
                               "witness_key": signing_key.witness_key})
        else:
            typer.echo(f"witness {signing_key.name} listening on {server.url}")
            typer.echo(f"cosignature key: {signing_key.witness_key}")
        sys.stdout.flush()
        signal.signal(signal.SIGTERM, _stop)
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()


@app.command("key")
def key_command(
    key: Annotated[
        Path, typer.Argument(metavar="KEY", help="The witness's private key file.",
                             show_default=False)
    ],
    as_json: JsonOpt = False,
) -> None:
    """Print the witness's cosignature verifier key (C2SP vkey, type 0x04): what logs pass
    to `checkpoint --witness URL=VKEY` and verifiers to `--witness-key`."""
    signing_key = el.SigningKey.load(key)
    if as_json:
        output.print_json({"name": signing_key.name, "witness_key": signing_key.witness_key})
    else:
        typer.echo(signing_key.witness_key)


@app.command("monitor")
def monitor_command(
    path: Annotated[
        Path, typer.Argument(metavar="PATH", help="A ledger directory, or a checkpoint file.",
                             show_default=False)
    ],
    log: Annotated[
        list[str],
        typer.Option("--log", metavar="ORIGIN=VKEY",
                     help="The log: its origin, '=', a verifier key trusted to sign its "
                          "checkpoints; repeat for more keys."),
    ],
    interval: Annotated[
        float, typer.Option("--interval", metavar="SECONDS", min=0.1,
                            help="Seconds between looks.")
    ] = 2.0,
    once: Annotated[
        bool, typer.Option("--once", help="Look once and exit (0: all consistent).")
    ] = False,
) -> None:
    """Follow a log's checkpoints (each new file of a ledger's checkpoints/, or one file
    read again when it changes) and exit 1 at the first that is not consistent with the last
    one seen: a smaller tree (rolled back), another root at the same size (a fork), or, in a
    ledger, a larger tree its log does not prove extends the last one. One line per
    checkpoint; runs until interrupted (exit 0)."""
    logs = _logs(log)
    if len(logs) != 1:
        raise el.UsageError(f"--log names {len(logs)} origins; the monitor follows one log")
    ((origin, vkeys),) = logs.items()
    signal.signal(signal.SIGTERM, _stop)
    with contextlib.suppress(KeyboardInterrupt):
        el.monitor_checkpoints(path, vkeys, origin, interval=interval, once=once,
                               report=_line)


def _line(text: str) -> None:
    typer.echo(text)
    sys.stdout.flush()


def register(root: typer.Typer) -> None:
    """Add the ``witness`` command group (``serve``, ``key``, ``monitor``) to ``root``."""
    root.add_typer(app)
