"""Proof-bundle commands: ``prove`` (build a signed, offline-verifiable bundle) and
``verify-proof`` (check one without the ledger).

Thin: parse arguments, call the public API (``Ledger.prove``, ``verify_bundle``), print.
Errors are :class:`evidence_ledger.LedgerError` types, turned into one line and an exit code
by the handler in :mod:`evidence_ledger.cli.main`. Every string that came from a bundle or
a ledger is printed with control characters escaped.
"""

from __future__ import annotations

import base64
import json
from enum import StrEnum
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

__all__ = ["register", "render_markdown", "render_text"]

MARKDOWN_ROWS = 50
"""Most calls the markdown table lists (the rest are counted)."""



class ProveFormat(StrEnum):
    json = "json"
    markdown = "markdown"


def _clean(text: object) -> str:
    """``text`` with control characters (and other non-printables) escaped."""
    value = str(text)
    if value.isprintable():
        return value
    return "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in value)


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _finding_line(f: el.Finding) -> str:
    where = "ledger-wide" if f.seq is None else f"seq {f.seq}"
    who = " ".join(
        part for part in (
            f"run {f.run_id}" if f.run_id else "",
            f"scope {'/'.join(f.scope)}" if f.scope else "",
            f"call {f.call_id}" if f.call_id else "",
        ) if part
    )
    return _clean(f"{f.rule} at {where}{' ' + who if who else ''}: {f.detail}")


def render_text(v: el.VerifiedBundle) -> str:
    """What ``verify-proof`` prints for an authentic bundle (several lines, ending in ``\\n``)."""
    cp = v.checkpoint
    proofs = (
        "the whole log (root recomputed from every leaf)" if v.whole_log
        else "each with an RFC 9162 inclusion proof"
    )
    if v.payloads is None:
        payloads = "digests only (no payloads)"
    else:
        payloads = f"{len(v.payloads)} payload(s) match their digests"
        if v.missing_payloads:
            payloads += f", {len(v.missing_payloads)} named but not bundled (redacted or missing)"
    lines = [
        f"bundle OK: authentic, signed by {_clean(v.signer)}",
        f"  log {_clean(cp.origin)}, tree size {cp.size}, root {_b64(cp.root)} "
        "(checkpoint signed by the same key)",
        f"  selection: {_clean(v.selection.describe())}; {len(v.entries)} entries, {proofs}",
        f"  links: {v.prev_links} prev, {v.ref_links} refs; payloads: {payloads}",
    ]
    recomputed = len(v.verdict) - len(v.signed_only)
    if v.ok:
        lines.append(f"verdict: no violation ({len(v.rules)} rules, "
                     f"{len(v.recomputed_rules)} recomputed from the entries)")
    else:
        lines.append(
            f"verdict: {len(v.verdict)} violation(s) ({recomputed} recomputed from the bundled "
            f"entries, {len(v.signed_only)} resting on the signature)"
        )
    lines += [f"  {_finding_line(f)}" for f in v.verdict]
    if v.not_in_verdict:
        lines.append(f"  not in this verdict: {', '.join(v.not_in_verdict)} (verify on the "
                     "ledger runs them)")
    if v.uncovered:
        lines.append(
            f"warning: the bundled entries show {len(v.uncovered)} violation(s) of rules the "
            "signed verdict does not list (signed before those rules existed, or without "
            "them): the signature says nothing about them")
        lines += [f"  {_finding_line(f)}" for f in v.uncovered]
    if v.absence_proven:
        lines.append("absence: proven (the bundle holds the whole log)")
    else:
        lines.append(
            "absence: not proven by a subset; it rests on the verdict signed for tree size "
            f"{cp.size}"
        )
    return "\n".join(lines) + "\n"


def _md_code(text: object) -> str:
    """A Markdown code span that survives a GFM table cell."""
    value = _clean(text).replace("|", "\\|")
    fence = "``" if "`" in value else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def _md_text(text: object) -> str:
    return _clean(text).replace("|", "\\|").replace("<", "&lt;")


def _short(digest: bytes | None) -> str:
    return "—" if digest is None else _md_code("sha256:" + digest.hex()[:16] + "…")


MARKDOWN_VALUE = 60
"""Most characters of a bundled value the markdown table shows (one line, compact JSON)."""


def _bundled(v: el.VerifiedBundle, digest: bytes | None) -> str:
    """The value of payload ``digest`` under its digest in a table cell (a ``<br>`` and a
    one-line preview), when the bundle holds payloads (``--include-payloads``)."""
    if v.payloads is None or digest is None:
        return ""
    data = v.payloads.get(digest)
    text = ("not bundled (redacted or missing)" if data is None
            else el.Value.of(digest, data, {}).preview(MARKDOWN_VALUE))
    return "<br>" + _md_code(text)


def _call_row(v: el.VerifiedBundle, call: el.CallState) -> str:
    decision = call.decision or call.authorized_by
    if decision is None:
        approval = "none (gated)" if call.gated else "not gated"
    else:
        sticky = " (always)" if decision.always or decision is not call.decision else ""
        approval = (
            f"{decision.decision}{sticky} by {_md_text(decision.approver)} at "
            f"{output.when(decision.time)} (seq {decision.seq})"
        )
    runs = []
    for seq in call.executions:
        e = v.entry(seq)
        result = e.entry.body.get("result_digest") if e else None
        when = output.when(e.entry.time) if e else "—"
        runs.append(f"seq {seq} at {when}, result {_short(result)}{_bundled(v, result)}")
    persisted = []
    for seq in call.persisted:
        e = v.entry(seq)
        if e is None:
            continue
        body = e.entry.body
        persisted.append(
            f"seq {seq} in session {_md_code(body['session_id'])}, {_short(body['output_digest'])}"
        )
    scope = "/".join(call.key[1])
    name = _md_code(f"{scope}/{call.key[2]}" if scope else call.key[2])
    called = v.entry(call.seq)
    arguments = _bundled(v, called.entry.body["args_payload"] if called else None)
    return (
        f"| {name} (seq {call.seq}) | {_md_code(call.tool)} | {_short(call.args_digest)}"
        f"{arguments} "
        f"| {approval} | {'<br>'.join(runs) or 'not executed'} "
        f"| {'<br>'.join(persisted) or 'not persisted'} |"
    )


def render_markdown(v: el.VerifiedBundle, bundle_name: str) -> str:
    """A short report to paste into an issue: the chain, the verdict, the checkpoint root,
    and how to verify the attached bundle file ``bundle_name``."""
    cp = v.checkpoint
    title = _md_text(v.selection.describe())
    lines = [
        f"### Evidence bundle: {title}",
        "",
        f"{len(v.entries)} ledger entries of log {_md_code(cp.origin)}, each proven to be in the "
        f"log at tree size {cp.size}; signed by the ledger key. Payloads: "
        + ("digests only." if v.payloads is None else f"{len(v.payloads)} included."),
        "",
        "| call | tool | args digest | approval (by, at) | execution | persisted output |",
        "|---|---|---|---|---|---|",
    ]
    lines += [_call_row(v, call) for call in v.calls[:MARKDOWN_ROWS]]
    if len(v.calls) > MARKDOWN_ROWS:
        lines.append(f"| … {len(v.calls) - MARKDOWN_ROWS} more calls | | | | | |")
    if not v.calls:
        lines.append("| (no call entry recorded for the selection) | | | | | |")
    lines += ["", f"**Verdict** ({len(v.rules)} rules): "
              + ("no violation." if v.ok else f"{len(v.verdict)} violation(s).")]
    for f in v.verdict:
        where = "ledger-wide" if f.seq is None else f"seq {f.seq}"
        call = f", call {_md_code(f.call_id)}" if f.call_id else ""
        lines.append(f"- {_md_code(f.rule)} at {where}{call}: {_md_text(f.detail)}")
    lines += [
        "",
        f"**Checkpoint**: origin {_md_code(cp.origin)}, tree size {cp.size}, "
        f"root {_md_code(_b64(cp.root))}",
        "",
        f"**Absence**: {_md_text(v.absence)}",
        "",
        f"**Verify** the attached {_md_code(bundle_name)} offline (no ledger needed):",
        "",
        "```sh",
        f"evidence-ledger verify-proof {_clean(bundle_name)} --verifier-key '{_clean(v.signer)}'",
        "```",
    ]
    return "\n".join(lines) + "\n"


def _summary(v: el.VerifiedBundle, out: Path, size: int, reused: bool) -> dict[str, Any]:
    doc = v.to_json()
    return {
        "out": str(out),
        "bytes": size,
        "checkpoint_reused": reused,
        "signed_by": doc["signed_by"],
        "origin": doc["origin"],
        "tree_size": doc["tree_size"],
        "root_hash": doc["root_hash"],
        "selection": doc["selection"],
        "proof_form": doc["proof_form"],
        "entries": len(v.entries),
        "payloads": doc["payloads"]["included"],
        "verdict": {k: doc["verdict"][k] for k in ("ok", "rules", "violations")},
        "absence": doc["absence"],
    }


def prove_command(
    key: Annotated[
        Path, typer.Option("--key", metavar="PATH", help="The ledger's checkpoint key file.")
    ],
    out: Annotated[
        Path, typer.Option("--out", metavar="FILE", help="Bundle file to write (JSON).")
    ],
    ledger: LedgerOpt = None,
    call_id: Annotated[
        str | None, typer.Option("--call-id", metavar="ID", help="Prove this call's chain.")
    ] = None,
    run_id: Annotated[
        str | None,
        typer.Option("--run-id", metavar="ID", help="Prove this run (or, with --call-id, "
                     "only that call in this run)."),
    ] = None,
    all_: Annotated[
        bool, typer.Option("--all", help="Prove the whole log (absence proven too).")
    ] = False,
    include_payloads: Annotated[
        bool,
        typer.Option("--include-payloads",
                     help="Bundle arguments, outputs and items (default: digests only)."),
    ] = False,
    format_: Annotated[
        ProveFormat,
        typer.Option("--format", help="What to print: a JSON summary, or a Markdown report "
                     "to paste into an issue."),
    ] = ProveFormat.json,
) -> None:
    """Write a signed, offline-verifiable proof bundle (in-toto Statement in a DSSE
    envelope) of the selected evidence chains, with inclusion proofs against a signed
    checkpoint and the verifier's verdict on them."""
    book = open_ledger(ledger)
    bundle = book.prove(out, el.SigningKey.load(key), call_id=call_id, run_id=run_id,
                        whole_log=all_, include_payloads=include_payloads)
    path = out
    if format_ is ProveFormat.markdown:
        typer.echo(render_markdown(bundle.verified, path.name), nl=False)
    else:
        doc = _summary(bundle.verified, path, len(bundle.data), bundle.checkpoint_reused)
        typer.echo(json.dumps(doc, indent=2))


def verify_proof_command(
    file: Annotated[
        Path, typer.Argument(metavar="FILE", help="Bundle file.", show_default=False)
    ],
    verifier_key: Annotated[
        list[str],
        typer.Option("--verifier-key", metavar="VKEY",
                     help="The ledger's verifier key name+keyid+key; repeatable."),
    ],
    witness_key: WitnessKeyOpt = None,
    min_witnesses: MinWitnessesOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Verify a proof bundle offline, without the ledger: signatures, inclusion proofs,
    hash links, payloads, and the verdict re-derived from the bundled entries; with
    --witness-key, the witnesses' cosignatures on its checkpoint.

    Exit 0 when authentic (whatever verdict it carries), 1 when not or when its checkpoint
    has fewer than --min-witnesses cosignatures (witness_quorum).
    """
    verified = el.verify_bundle(file, verifier_key)
    quorum = check_witnesses(verified.checkpoint_note.encode("utf-8"), witness_key,
                             min_witnesses)
    if json_:
        doc = verified.to_json()
        if quorum is not None:
            doc["witnesses"] = quorum.to_json()
        typer.echo(json.dumps(doc, indent=2))
    else:
        typer.echo(render_text(verified), nl=False)
        if quorum is not None:
            typer.echo(f"witnesses: {_clean(quorum.describe())}")


def register(app: typer.Typer) -> None:
    """Add ``prove`` and ``verify-proof`` to ``app``."""
    app.command("prove")(prove_command)
    app.command("verify-proof")(verify_proof_command)
