"""Proof bundles: ``prove`` and ``verify-proof`` through the real CLI, and the closure of a
selection checked against the full ledger's verifier.

The shared orphan-output case under the current openai-agents release is recorded
in-process here (fast); the 0.22.3 recording is in ``test_bundle_matrix.py``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib.util
import json
import re
import stat
import tempfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evidence_ledger.bundle.build import build_bundle, select_entries
from evidence_ledger.bundle.verify import (
    ENGINE_RULES,
    Selection,
    finding_in_selection,
    verify_bundle,
)
from evidence_ledger.format.entries import PAYLOAD_FIELDS, decode_entry
from evidence_ledger.format.framing import Record
from evidence_ledger.format.schemas import load
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.keys import load_signer
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.tlog.checkpoint import parse_checkpoint
from evidence_ledger.tlog.merkle import leaf_hash
from evidence_ledger.tlog.proof_verify import verify_inclusion
from evidence_ledger.verify.audit import verify_ledger
from evidence_ledger.verify.rules import RuleEngine
from tests.helpers import DATA, ingest, rewrite_payload, run_cli

ORIGIN = "ledger.example/bundles"
REPO = Path(__file__).resolve().parent.parent
CASE = REPO / "examples" / "orphan_output_on_resume.py"


@pytest.fixture
def key(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "keys" / "ledger.key"
    path.parent.mkdir()
    result = run_cli("keygen", "--origin", ORIGIN, "--out", str(path))
    assert result.code == 0, result.err
    return path, result.out.strip()


def prove(ledger: Path, key: Path, out: Path, *args: str) -> Any:
    result = run_cli("prove", "--ledger", str(ledger), "--key", str(key), "--out", str(out), *args)
    assert result.code == 0, result.err
    return json.loads(result.out) if "markdown" not in args else result.out


def verify_json(bundle: Path, vkey: str) -> dict[str, Any]:
    result = run_cli("verify-proof", str(bundle), "--verifier-key", vkey, "--json")
    assert (result.code, result.err) == (0, ""), result.err
    doc: dict[str, Any] = json.loads(result.out)
    return doc


def statement(bundle: Path) -> dict[str, Any]:
    envelope = json.loads(bundle.read_bytes())
    doc: dict[str, Any] = json.loads(base64.b64decode(envelope["payload"]))
    return doc


def record_orphan_case(ledger: Path) -> None:
    """Record examples/orphan_output_on_resume.py with the installed openai-agents."""
    spec = importlib.util.spec_from_file_location("orphan_output_on_resume", CASE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    asyncio.run(module.main(str(ledger)))


# -- the shared case and the rule cases -------------------------------------------------


def test_orphan_case_under_the_current_sdk_proves_clean(tmp_path, key):
    path, vkey = key
    ledger = tmp_path / "ledger"
    record_orphan_case(ledger)
    bundle = tmp_path / "c-update.bundle.json"

    summary = prove(ledger, path, bundle, "--call-id", "c-update")
    report = verify_json(bundle, vkey)

    assert summary["verdict"]["ok"] is True and report["verdict"]["violations"] == []
    assert report["selection"] == {"mode": "call", "run_id": None, "call_id": "c-update"}
    kinds = [e["kind"] for e in report["entries"]]
    assert kinds.count("call") == 1 and "decision" in kinds and "execution" in kinds
    # its call item and output, and the first item its run wrote into that session
    assert kinds.count("session_item") == 3 and "run_end" in kinds
    text = run_cli("verify-proof", str(bundle), "--verifier-key", vkey)
    assert text.code == 0 and text.out.startswith("bundle OK: authentic, signed by ")
    # before: "(23 rules; recomputed from the entries)", though only the evidence rules are
    # (a trial user's note)
    assert "verdict: no violation (23 rules, 12 recomputed from the entries)\n" in text.out
    assert "absence: not proven by a subset" in text.out
    # before: "23 rules" here and "25 rules" from verify, with nothing saying which two
    # (a trial user's note): the guard's rules read payloads, which prove does not re-hash
    assert ("  not in this verdict: guard_verdict, guard_bypassed (verify on the ledger "
            "runs them)\n") in text.out
    assert report["verdict"]["not_in_verdict"] == ["guard_verdict", "guard_bypassed"]


def test_a_call_bundle_claims_a_changed_payload_of_any_entry_it_bundles(tmp_path, key):
    # breaker: once payload findings named a call, a bundle of c-update dropped those of the
    # entries bundled with it that name another call or only a run, and signed "no violation"
    path, vkey = key
    ledger = tmp_path / "ledger"
    record_orphan_case(ledger)
    prove(ledger, path, tmp_path / "clean.json", "--call-id", "c-update")
    seqs = {e["seq"] for e in verify_json(tmp_path / "clean.json", vkey)["entries"]}
    book = Ledger(ledger)
    other = next(e for e, _ in book.entries() if e.seq in seqs
                 and e.body.get("call_id") != "c-update"
                 and any(isinstance(e.body.get(f), bytes) for f in PAYLOAD_FIELDS))
    digest = next(e for e in (other.body.get(f) for f in PAYLOAD_FIELDS) if isinstance(e, bytes))
    rewrite_payload(ledger, digest, b"!")
    prove(ledger, path, tmp_path / "tampered.json", "--call-id", "c-update")
    claimed = verify_json(tmp_path / "tampered.json", vkey)["verdict"]["violations"]
    assert ("integrity", other.seq) in [(v["rule"], v["seq"]) for v in claimed]


def test_a_bundle_that_proves_a_violation_is_authentic(tmp_path, key):
    path, vkey = key
    ledger = tmp_path / "ledger"
    ingest(ledger, "tool_linkage")
    bundle = tmp_path / "b.json"

    summary = prove(ledger, path, bundle, "--call-id", "c-update", "--run-id", "r1")
    result = run_cli("verify-proof", str(bundle), "--verifier-key", vkey)

    assert [v["rule"] for v in summary["verdict"]["violations"]] == ["tool_linkage"]
    assert result.code == 0, result.err
    assert "verdict: 1 violation(s) (1 recomputed from the bundled entries" in result.out
    line = "  tool_linkage at seq 2 run r1 call c-update: function_call_output c-update"
    assert line in result.out


CASES = sorted([*(DATA / "rules").glob("*.jsonl"), *(DATA / "bundle-cases").glob("*.jsonl")])
"""Every rule's case, and the cases whose closure is subtle (``tests/data/bundle-cases``:
a run that traces an output only by having written into its session; two runs persisting
one call id in one session)."""


@pytest.mark.parametrize("case", CASES, ids=[p.stem for p in CASES])
def test_every_selection_of_every_rule_case_agrees_with_the_full_verifier(tmp_path, case):
    """Bundles for each call, each run and the whole log carry exactly the full ledger's
    findings on the selection, and the bundled entries re-derive them."""
    ledger = tmp_path / "ledger"
    assert run_cli("ingest", str(case), "--ledger", str(ledger)).code == 0
    keys = tmp_path / "keys"
    keys.mkdir()
    assert run_cli("keygen", "--origin", ORIGIN, "--out", str(keys / "k")).code == 0
    signer = load_signer(keys / "k")
    book = Ledger(ledger)
    full = verify_ledger(book, [signer.verifier.vkey])
    bodies = [entry.body for entry, _ in book.entries()]
    selections = [Selection("all")]
    runs = sorted({b["run_id"] for b in bodies if "run_id" in b})
    selections += [Selection("run", r) for r in runs]
    for b in bodies:
        if isinstance(b.get("call_id"), str):
            selections += [Selection("call", None, b["call_id"]),
                           Selection("call", b["run_id"], b["call_id"])]
        for pending in b.get("interruptions") or ():  # a state waiting on a call
            selections.append(Selection("call", b["run_id"], pending["call_id"]))
    for selection in dict.fromkeys(selections):
        verified = build_bundle(book, signer, selection).verified
        seqs = frozenset(e.seq for e in verified.entries)
        want = [f for f in full.violations if finding_in_selection(f, selection, seqs)]
        assert list(verified.verdict) == want, selection
        engine_claims = sorted(str(f) for f in verified.verdict if f.rule in ENGINE_RULES)
        assert sorted(str(f) for f in verified.recomputed) == engine_claims, selection


def test_a_call_run_under_a_sticky_approval_bundles_that_approval(tmp_path, key):
    """c5 runs under the sticky approval given on c4: the bundle must carry c4's decision
    and call, or the rules would see a gated call executed without approval."""
    path, vkey = key
    ledger = tmp_path / "ledger"
    ingest(ledger, "valid")
    bundle = tmp_path / "b.json"

    prove(ledger, path, bundle, "--call-id", "c5")
    report = verify_json(bundle, vkey)

    assert report["verdict"]["ok"] is True
    entries = [decode_entry(base64.b64decode(e["data"]))
               for e in statement(bundle)["predicate"]["entries"]]
    assert {(e.kind, e.body.get("call_id")) for e in entries} >= {
        ("call", "c4"), ("decision", "c4"), ("call", "c5"), ("execution", "c5"),
    }
    assert not any(e.kind == "execution" and e.body["call_id"] == "c4" for e in entries)


# -- contents ------------------------------------------------------------------------------


def test_digests_only_unless_payloads_are_asked_for(tmp_path, key):
    path, vkey = key
    ledger = tmp_path / "ledger"
    ingest(ledger, "valid")
    plain, full = tmp_path / "plain.json", tmp_path / "full.json"

    prove(ledger, path, plain, "--call-id", "c1")
    prove(ledger, path, full, "--call-id", "c1", "--include-payloads")

    assert statement(plain)["predicate"]["payloads"] is None
    for secret in (b"receipt-3", b'"amount"'):
        assert secret not in plain.read_bytes() and secret not in base64.b64decode(
            json.loads(plain.read_bytes())["payload"]
        )
    payloads = statement(full)["predicate"]["payloads"]
    assert b"receipt-3" in [base64.b64decode(v) for v in payloads.values()]
    for digest, blob in payloads.items():
        assert digest == "sha256:" + hashlib.sha256(base64.b64decode(blob)).hexdigest()
    report = verify_json(full, vkey)
    assert report["payloads"] == {"included": True, "verified": len(payloads), "missing": []}
    assert stat.S_IMODE(full.stat().st_mode) & 0o077 == 0  # payloads: owner only


def test_whole_log_bundle_proves_absence_and_carries_every_entry(tmp_path, key):
    path, vkey = key
    ledger = tmp_path / "ledger"
    ingest(ledger, "exactly_once")
    bundle = tmp_path / "all.json"

    prove(ledger, path, bundle, "--all")
    report = verify_json(bundle, vkey)
    predicate = statement(bundle)["predicate"]

    assert predicate["proof_form"] == "whole-log"
    assert all("proof" not in e for e in predicate["entries"])
    assert [e["seq"] for e in report["entries"]] == list(range(report["tree_size"]))
    assert report["absence"]["proven"] is True
    assert [v["rule"] for v in report["verdict"]["violations"]] == ["exactly_once"]
    text = run_cli("verify-proof", str(bundle), "--verifier-key", vkey).out
    assert "absence: proven (the bundle holds the whole log)" in text


def test_inclusion_proofs_are_c2sp_tlog_proofs_against_the_checkpoint(tmp_path, key):
    path, _ = key
    ledger = tmp_path / "ledger"
    ingest(ledger, "valid")
    bundle = tmp_path / "b.json"
    prove(ledger, path, bundle, "--run-id", "r1")
    verified = verify_bundle(bundle.read_bytes(), [load_signer(path).verifier])

    for item in verified.entries:
        text = verified.tlog_proof(item.seq)
        head, _, note = text.partition("\n\n")
        lines = head.split("\n")
        assert lines[0] == "c2sp.org/tlog-proof@v1" and lines[1] == f"index {item.seq}"
        cp = parse_checkpoint(note.partition("\n\n")[0] + "\n")
        proof = [base64.b64decode(h) for h in lines[2:]]
        verify_inclusion(item.seq, cp.size, leaf_hash(item.data), proof, cp.root)


def test_bundle_matches_its_json_schema(tmp_path, key):
    path, _ = key
    ledger = tmp_path / "ledger"
    ingest(ledger, "valid")
    schema = load("bundle")
    envelope_check = jsonschema.Draft202012Validator(schema)
    statement_check = jsonschema.Draft202012Validator({**schema, "$ref": "#/$defs/statement"})
    for i, args in enumerate([("--call-id", "c2"), ("--run-id", "r1"), ("--all",),
                              ("--call-id", "c1", "--include-payloads")]):
        bundle = tmp_path / f"b{i}.json"
        prove(ledger, path, bundle, *args)
        envelope_check.validate(json.loads(bundle.read_bytes()))
        statement_check.validate(statement(bundle))


def test_reuses_the_latest_checkpoint_when_it_covers_the_whole_log(tmp_path, key):
    path, vkey = key
    ledger = tmp_path / "ledger"
    ingest(ledger, "valid")
    assert run_cli("checkpoint", "--ledger", str(ledger), "--key", str(path)).code == 0
    stored = (ledger / "checkpoints" / "00000001.note").read_text("utf-8")

    first = prove(ledger, path, tmp_path / "a.json", "--call-id", "c1")
    assert first["checkpoint_reused"] is True
    assert statement(tmp_path / "a.json")["predicate"]["checkpoint"] == stored
    EvidenceWriter(ledger).run_end(run_id="r2", status="completed")
    second = prove(ledger, path, tmp_path / "b.json", "--call-id", "c1")

    assert second["checkpoint_reused"] is False
    assert second["tree_size"] == first["tree_size"] + 1
    assert sorted(p.name for p in (ledger / "checkpoints").glob("*.note")) == [
        "00000001.note", "00000002.note",
    ]
    assert verify_json(tmp_path / "b.json", vkey)["tree_size"] == second["tree_size"]


def test_markdown_report_for_an_issue(tmp_path, key):
    path, vkey = key
    ledger = tmp_path / "ledger"
    ingest(ledger, "tool_linkage")
    bundle = tmp_path / "bug-1234.json"

    report = prove(ledger, path, bundle, "--call-id", "c-update", "--format", "markdown")

    lines = report.splitlines()
    assert lines[0] == "### Evidence bundle: call c-update"
    table = lines.index("| call | tool | args digest | approval (by, at) | execution "
                        "| persisted output |")
    row = lines[table + 2]
    assert row.startswith("| `c-update` (seq 0) | `update` | `sha256:")
    assert "| not gated | seq 1 at " in row and "seq 2 in session `s1`" in row
    verdict = re.compile(r"\*\*Verdict\*\* \(\d+ rules\): 1 violation\(s\)\.")
    assert any(verdict.fullmatch(line) for line in lines)
    assert any(line.startswith("- `tool_linkage` at seq 2, call `c-update`:") for line in lines)
    assert any(line.startswith("**Checkpoint**: origin `ledger.example/bundles`, tree size 5, "
                               "root `") for line in lines)
    assert f"evidence-ledger verify-proof bug-1234.json --verifier-key '{vkey}'" in lines
    assert verify_json(bundle, vkey)["verdict"]["ok"] is False


# -- usage -----------------------------------------------------------------------------


def _usage(result: Any, needle: str) -> None:
    assert result.code == 2, (result.code, result.out, result.err)
    assert result.err.count("\n") == 1 and needle in result.err, result.err


def test_usage_errors_exit_2(tmp_path, key):
    path, vkey = key
    ledger = tmp_path / "ledger"
    ingest(ledger, "valid")
    out = str(tmp_path / "b.json")
    base = ("prove", "--ledger", str(ledger), "--key", str(path), "--out", out)

    _usage(run_cli(*base), "say what to prove")
    _usage(run_cli(*base, "--all", "--call-id", "c1"), "--all proves the whole log")
    _usage(run_cli(*base, "--call-id", "nope"), "no entry belongs to call nope")
    _usage(run_cli(*base, "--run-id", "r9"), "no entry belongs to run r9")
    _usage(run_cli(*base[:-1], str(tmp_path / "missing" / "b.json"), "--all"), "no directory")
    _usage(run_cli("prove", "--ledger", str(tmp_path / "none"), "--key", str(path), "--out", out,
                   "--all"), "no ledger")
    path.chmod(0o644)
    _usage(run_cli(*base, "--all"), "readable by others")
    path.chmod(0o600)
    assert run_cli(*base, "--all").code == 0
    _usage(run_cli("verify-proof", str(tmp_path / "nope.json"), "--verifier-key", vkey),
           "not found")
    _usage(run_cli("verify-proof", out, "--verifier-key", "not-a-key"), "verifier key")
    _usage(run_cli("verify-proof", out), "--verifier-key")


def test_a_key_for_another_origin_is_refused(tmp_path, key):
    path, _ = key
    ledger = tmp_path / "ledger"
    ingest(ledger, "valid")
    assert run_cli("checkpoint", "--ledger", str(ledger), "--key", str(path)).code == 0
    other = tmp_path / "keys" / "other.key"
    assert run_cli("keygen", "--origin", "other.example/log", "--out", str(other)).code == 0

    _usage(run_cli("prove", "--ledger", str(ledger), "--key", str(other), "--out",
                   str(tmp_path / "b.json"), "--all"), "origin")


# -- the closure, as a property ---------------------------------------------------------

RUNS, CALLS, SESSIONS = ("r1", "r2"), ("c1", "c2", "c3"), ("s1", "s2")
STATES = (None, "st1", "st2", "st3")
_common = (st.sampled_from(RUNS), st.sampled_from(CALLS), st.booleans(),
           st.sampled_from(STATES), st.sampled_from(((), ("ask:c9",))))
_event = st.one_of(
    st.tuples(st.just("call"), st.sampled_from(("charge", "refund")), st.sampled_from("ab"),
              *_common),
    st.tuples(st.just("decision"), st.sampled_from(("approve", "reject")),
              st.sampled_from("ab"), *_common),
    st.tuples(st.just("execution"), st.sampled_from(("ok", "other")), st.sampled_from("ab"),
              *_common),
    st.tuples(st.just("item"),
              st.sampled_from(("function_call", "function_call_output", "clear", "pop")),
              st.sampled_from(SESSIONS), *_common),
    st.tuples(st.just("guardrail"), st.just(""), st.just(""), *_common),
    st.tuples(st.just("run_end"), st.sampled_from(("completed", "interrupted", "failed")),
              st.just(""), *_common),
    st.tuples(st.just("run_state"), st.sampled_from(STATES[1:]),
              st.sampled_from(("to_state", "loaded", "resume")), *_common),
)


def _write(writer: EvidenceWriter, event: tuple[Any, ...]) -> None:
    kind, what, extra, run, call, flag, state, scope = event
    args = '{"a": "' + extra + '"}'
    if kind == "call":
        writer.call(run_id=run, call_id=call, agent="bot", tool=what, arguments=args,
                    needs_approval=flag, scope=scope)
    elif kind == "decision":
        writer.decision(run_id=run, call_id=call, decision=what, approver="x", always=flag,
                        message="no" if what == "reject" and flag else None, scope=scope,
                        run_state=state)
    elif kind == "execution":
        writer.execution(run_id=run, call_id=call, arguments=args, result=what, scope=scope,
                         run_state=state)
    elif kind == "item":
        if what == "clear":
            writer.session_item(run_id=run, session_id=extra, item=None, op="clear")
        elif what == "pop":
            writer.session_item(run_id=run, session_id=extra, op="pop",
                                item={"type": "function_call", "call_id": call, "name": "x",
                                      "arguments": "{}"})
        elif what == "function_call":
            writer.session_item(run_id=run, session_id=extra, item={
                "type": what, "call_id": call, "name": "x", "arguments": "{}"})
        else:
            writer.session_item(run_id=run, session_id=extra, item={
                "type": what, "call_id": call, "output": "ok" if flag else "no"})
    elif kind == "guardrail":
        writer.guardrail(run_id=run, call_id=call, guardrail="g", message="no" if flag else None,
                         scope=scope)
    elif kind == "run_state":
        writer.run_state(run_id=run, state_id=what, event=extra,
                         parent=state if state != what else None)
    else:
        writer.run_end(run_id=run, status=what, run_state=state)


@settings(max_examples=150, deadline=None, database=None)
@given(st.lists(_event, min_size=1, max_size=40))
def test_selection_closure_rederives_the_full_verdict(events):
    """For random logs, the rules re-run over a selection's bundled entries find exactly the
    full ledger's findings on that selection (what makes subset bundles verifiable)."""
    with tempfile.TemporaryDirectory() as tmp:
        writer = EvidenceWriter(Path(tmp))
        with writer.atomic():
            for event in events:
                _write(writer, event)
        records = [(r.index, r.data) for r in Ledger(Path(tmp)).scan() if isinstance(r, Record)]
    full = RuleEngine()
    for _, data in records:
        full.feed(decode_entry(data))
    selections = [Selection("run", r) for r in RUNS]
    selections += [Selection("call", r, c) for r in (None, *RUNS) for c in CALLS]
    for selection in selections:
        try:
            chosen = select_entries(lambda: iter(records), selection)
        except Exception as exc:  # nothing belongs to this selection
            assert "no entry belongs" in str(exc)
            continue
        sub = RuleEngine()
        for _, _, entry in chosen:
            sub.feed(entry)
        want = sorted(str(f) for f in full.findings if selection.selects(f))
        assert sorted(str(f) for f in sub.findings if selection.selects(f)) == want, selection


def test_prove_rehashes_only_the_payloads_of_the_entries_it_bundles(tmp_path, monkeypatch):
    ledger = tmp_path / "ledger"
    ingest(ledger, "valid")
    assert run_cli("keygen", "--origin", ORIGIN, "--out", str(tmp_path / "k")).code == 0
    signer = load_signer(tmp_path / "k")
    book = Ledger(ledger)
    call_id = next(e.body["call_id"] for e, _ in book.entries() if e.kind == "call")
    checked: list[bytes] = []
    store = type(book.payloads)
    real_check = store.check
    monkeypatch.setattr(store, "check",
                        lambda self, d: checked.append(d) or real_check(self, d))
    verified = build_bundle(book, signer, Selection("call", None, call_id)).verified
    named = {d for e in verified.entries for f in PAYLOAD_FIELDS
             if isinstance(d := e.entry.body.get(f), bytes)}
    every = {d for e, _ in book.entries() for f in PAYLOAD_FIELDS
             if isinstance(d := e.body.get(f), bytes)}
    assert named and set(checked) == named < every


def test_prove_rebuilds_a_tree_cache_that_claims_too_few_entries(tmp_path: Path) -> None:
    book, key, events = tmp_path / "book", tmp_path / "k.key", tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps({
        "kind": "call", "run_id": "r1", "call_id": f"x{i}", "agent": "a", "tool": "t",
        "arguments": "{}"}) + "\n" for i in range(600)))
    assert run_cli("ingest", str(events), "--ledger", str(book)).code == 0
    assert run_cli("inclusion", "--ledger", str(book), "--seq", "5").code == 0  # builds tree/
    state = book / "tree" / "state.json"
    doc = json.loads(state.read_text())
    doc["size"], doc["partial_tiles"] = 100, [base64.b64encode(b"\0" * 3200).decode()]
    state.write_text(json.dumps(doc))
    run_cli("keygen", "--origin", "ledger.example/rebuild", "--out", str(key))
    done = run_cli("prove", "--ledger", str(book), "--key", str(key), "--call-id", "x300",
                   "--out", str(tmp_path / "b.json"))
    assert done.code == 0, done.err
    assert json.loads(done.out)["tree_size"] == 601


def test_a_clear_of_the_session_another_run_persisted_a_call_item_to_is_in_the_closure():
    """Found by the property above: run r2 persisted a ``function_call`` of r1's call c1 to
    session s1, which was then cleared; the bundle of c1 left the ``clear`` out, so its
    rules found an ``output_not_persisted`` the ledger does not have."""
    events = [("call", "charge", "a", "r1", "c1", False, None, ()),
              ("item", "function_call", "s1", "r2", "c1", False, None, ()),
              ("item", "clear", "s1", "r1", "c1", False, None, ()),
              ("run_end", "completed", "", "r1", "c1", False, None, ())]
    test_selection_closure_rederives_the_full_verdict.hypothesis.inner_test(events)
