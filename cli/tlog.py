"""Transparency-log commands: keys, signed checkpoints, inclusion and consistency proofs.

Thin: parse arguments, call the public API (``SigningKey``, ``Ledger.checkpoint``,
``verify_checkpoint``, ``LedgerProofs``), print. Errors are
:class:`evidence_ledger.LedgerError` types, turned into one line and an exit code by the
handler in :mod:`evidence_ledger.cli.main`. Hashes are printed in standard
base64; ``--json`` uses the field names of the transparency-dev/merkle test vectors.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

import evidence_ledger as el
from evidence_ledger.cli import output
from evidence_ledger.cli.options import (
    JsonOpt,
    LedgerOpt,
    MinWitnessesOpt,
    WitnessKeyOpt,
    check_witnesses,
    open_ledger,
)

__all__ = ["register"]



def _notice(line: str) -> None:
    typer.echo(f"notice: {line}", err=True)


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _print_fields(doc: dict[str, Any]) -> None:
    for key, value in doc.items():
        if isinstance(value, list):
            if not value:
                typer.echo(f"{key}: (empty)")
            for i, item in enumerate(value):
                typer.echo(f"{key}[{i}]: {item}")
        else:
            typer.echo(f"{key}: {value}")


def _print(doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        output.print_json(doc)
    else:
        _print_fields(doc)


PemOpt = Annotated[bool, typer.Option(
    "--pem", help="Print the public key as PEM (SubjectPublicKeyInfo) instead: for "
                  "securesystemslib, cosign or openssl, which check proof bundles too.")]


def keygen_command(
    origin: Annotated[
        str,
        typer.Option(
            "--origin", metavar="NAME", help="Key name and checkpoint origin, e.g. example.com/log."
        ),
    ],
    out: Annotated[
        Path,
        typer.Option("--out", metavar="PATH", help="New file for the private key (mode 0600)."),
    ],
    pem: PemOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Create an Ed25519 key; write its verifier key (C2SP signed-note) beside it and print it.

    The verifier key goes to PATH with a final `.key` replaced by `.vkey` (`ledger.key` ->
    `ledger.vkey`; else `.vkey` is added): the file to hand to whoever verifies. Neither
    file is ever overwritten; a failed write leaves neither.

    A ledger's checkpoint key (its name is the origin), or an approver's key for signed
    approvals (its name is the approver's, as the policy's `[keys]` names it).
    """
    made = el.SigningKey.generate(out, origin)
    if as_json:
        output.print_json({"verifier_key": made.verifier_key, "key_file": str(out),
                           "verifier_key_file": str(el.SigningKey.verifier_key_path(out)),
                           "public_key_pem": made.public_key_pem})
    else:
        typer.echo(made.public_key_pem.rstrip("\n") if pem else made.verifier_key)


def pubkey_command(
    key: Annotated[
        Path, typer.Argument(metavar="KEY", help="Private key file (keygen's).",
                             show_default=False)
    ],
    pem: PemOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Print the verifier key (C2SP signed-note) of a private key file.

    What `keygen` printed and wrote to the key's `.vkey` file; for a key made before
    `keygen` wrote that file, `evidence-ledger pubkey ledger.key > ledger.vkey` makes it.
    """
    signing = el.SigningKey.load(key)
    if as_json:
        output.print_json({"verifier_key": signing.verifier_key, "name": signing.name,
                           "key_file": str(key), "public_key_pem": signing.public_key_pem})
    else:
        typer.echo(signing.public_key_pem.rstrip("\n") if pem else signing.verifier_key)


def checkpoint_command(
    key: Annotated[
        list[Path],
        typer.Option(
            "--key", metavar="PATH", help="Private key file; repeat for one signature per key."
        ),
    ],
    ledger: LedgerOpt = None,
    witness: Annotated[
        list[str] | None,
        typer.Option(
            "--witness", metavar="URL=VKEY",
            help="A witness to cosign it (c2sp.org/tlog-witness): its URL, '=', its "
                 "cosignature verifier key; repeatable.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Sign the current tree head as a C2SP checkpoint, have each --witness cosign it,
    store it with their cosignatures, and print it.

    A witness that refuses (it cosigned a tree this one does not extend: a fork, or a log
    rolled back) or cannot be reached leaves no cosignature: the checkpoint is stored
    without it, one line on stderr names each, and the command exits 1. `verify
    --witness-key ... --min-witnesses N` then reports it (rule witness_quorum).
    """
    book = open_ledger(ledger)
    witnesses = [el.Witness.parse(text) for text in witness or []]
    stored = book.checkpoint([el.SigningKey.load(path) for path in key], witnesses=witnesses)
    note = stored.data.decode("utf-8")  # UTF-8, ends with a newline
    if as_json:
        cp = stored.checkpoint
        doc: dict[str, Any] = {
            "origin": cp.origin, "tree_size": cp.size, "root_hash": _b64(cp.root),
            "path": str(stored.path), "note": note,
        }
        if witnesses:
            doc["witnesses"] = [r.to_json() for r in stored.witnesses]
        output.print_json(doc)
    else:
        sys.stdout.write(note)
        sys.stdout.flush()
    missed = [r for r in stored.witnesses if not r.ok]
    if missed:
        typer.echo(
            f"evidence-ledger: error: {len(missed)} of {len(witnesses)} witness(es) did not "
            f"cosign checkpoint {stored.number} (stored without their cosignature): "
            + "; ".join(f"{r.witness.url} {r.status}: {r.detail}" for r in missed),
            err=True,
        )
        raise typer.Exit(1)


def verify_checkpoint_command(
    file: Annotated[
        Path, typer.Argument(metavar="FILE", help="Signed checkpoint file.", show_default=False)
    ],
    verifier_key: Annotated[
        list[str],
        typer.Option(
            "--verifier-key",
            metavar="VKEY",
            help="Trusted verifier key name+keyid+key; repeatable.",
        ),
    ],
    origin: Annotated[
        str | None,
        typer.Option(
            "--origin", metavar="NAME", help="Expected origin (default: the signing key's name)."
        ),
    ] = None,
    witness_key: WitnessKeyOpt = None,
    min_witnesses: MinWitnessesOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Verify a signed checkpoint against trusted verifier keys, and with --witness-key
    its witnesses' cosignatures (exit 1 below --min-witnesses: witness_quorum)."""
    verified = el.verify_checkpoint(file, verifier_key, origin)
    quorum = check_witnesses(file, witness_key, min_witnesses)
    cp = verified.checkpoint
    signers = [f"{s.name}+{s.key_id:08x}" for s in verified.note.verified]
    if as_json:
        doc: dict[str, Any] = {
            "ok": True, "origin": cp.origin, "tree_size": cp.size, "root_hash": _b64(cp.root),
            "signed_by": signers,
        }
        if quorum is not None:
            doc["witnesses"] = quorum.to_json()
        output.print_json(doc)
        return
    cosigned = "" if quorum is None else (
        f"; cosigned by {', '.join(c.witness for c in quorum.cosigned)}")
    typer.echo(
        f"checkpoint OK: origin {cp.origin}, tree size {cp.size}, root {_b64(cp.root)}, "
        f"signed by {', '.join(signers)}{cosigned}"
    )


ProofKeyOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--verifier-key", metavar="VKEY",
        help="Trusted C2SP verifier key (repeatable): the latest stored checkpoint must be "
             "signed by one, and the proof is checked against its root (exit 1 if not).",
    ),
]


def _proofs(ledger: Path | None, keys: list[str] | None) -> el.LedgerProofs:
    return el.LedgerProofs(ledger, verifier_keys=keys or [], notice=_notice)


def inclusion_command(
    seq: Annotated[int, typer.Option("--seq", metavar="N", help="Entry seq (0-based leaf index).")],
    ledger: LedgerOpt = None,
    tree_size: Annotated[
        int | None,
        typer.Option(
            "--tree-size", metavar="N", help="Prove against this tree size (default: current)."
        ),
    ] = None,
    verifier_key: ProofKeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print an RFC 9162 inclusion proof: leaf hash, tree size, root, audit path, and what
    it was checked against.

    The path is read from the tree/ cache in O(log n); the leaf hash is recomputed from the
    entry's bytes in log.bin, and the proof is checked against the root of log.bin recorded
    in tree/root.json (extended by any entries appended since) and the latest stored
    checkpoint (its signature verified with --verifier-key, else said to be unchecked). A
    cache that fails the check is rebuilt from the log (one notice line); a log that no
    longer gives a root it gave before is refused (exit 1). See FORMAT.md, "Ledger directory".
    """
    proof = _proofs(ledger, verifier_key).inclusion_proof(seq, tree_size)
    _print(proof.to_json(), as_json)


def consistency_command(
    from_: Annotated[int, typer.Option("--from", metavar="M", help="Older tree size (> 0).")],
    ledger: LedgerOpt = None,
    to: Annotated[
        int | None, typer.Option("--to", metavar="N", help="Newer tree size (default: current).")
    ] = None,
    verifier_key: ProofKeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print an RFC 9162 consistency proof between two tree sizes, and what it was checked
    against.

    Read from the tree/ cache in O(log n) and checked, as `inclusion` says, against the
    root recorded in tree/root.json and the latest stored checkpoint; a cache that fails
    the check is rebuilt from the log (one notice line).
    """
    proof = _proofs(ledger, verifier_key).consistency_proof(from_, to)
    _print(proof.to_json(), as_json)


def register(app: typer.Typer) -> None:
    """Add ``keygen``, ``pubkey``, ``checkpoint``, ``verify-checkpoint``, ``inclusion``
    and ``consistency`` to ``app``."""
    app.command("keygen")(keygen_command)
    app.command("pubkey")(pubkey_command)
    app.command("checkpoint")(checkpoint_command)
    app.command("verify-checkpoint")(verify_checkpoint_command)
    app.command("inclusion")(inclusion_command)
    app.command("consistency")(consistency_command)
