"""``report``: the HTML page of a ledger's runs or of a proof bundle, read as text and as a
model (the page in a browser: ``tests/test_report_browser.py``).

Each violation sits at its place (the entry at its seq, else its call); values show
unless redacted or left out (``--no-values``: no payload byte in the file); every
string from the evidence is escaped; bad input exits 2 (a tampered bundle 1).
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

import evidence_ledger as el
from evidence_ledger.bundle.verify import Selection
from evidence_ledger.storage.ledger_dir import Ledger as LedgerDirectory
from evidence_ledger.views import report_ledger as report_ledger_module
from evidence_ledger.views import report_model as report_model_module
from evidence_ledger.views.report_ledger import ledger_report
from evidence_ledger.views.report_model import CallSpan, ReportModel, Step

from .helpers import DATA, ingest, run_cli, stored_payloads

RULE_CASES = sorted(p.stem for p in (DATA / "rules").glob("*.jsonl") if p.stem != "valid")


# -- helpers --------------------------------------------------------------------------


class _Elements(HTMLParser):
    """Every element of a page with its attributes and those of its ancestors."""

    VOID = frozenset({"meta", "br", "img", "input", "link", "hr", "wbr"})

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str], list[dict[str, str]]]] = []
        self.stack: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        mine = {k: v or "" for k, v in attrs}
        self.found.append((tag, mine, [a for _, a in self.stack]))
        if tag not in self.VOID:
            self.stack.append((tag, mine))

    def handle_endtag(self, tag: str) -> None:
        while self.stack:
            if self.stack.pop()[0] == tag:
                break


def elements(page: str) -> list[tuple[str, dict[str, str], list[dict[str, str]]]]:
    parser = _Elements()
    parser.feed(page)
    return parser.found


def write_events(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def report(ledger: Path, out: Path, *args: str) -> str:
    done = run_cli("report", "--ledger", str(ledger), "--out", str(out), *args)
    assert done.code == 0, done.err
    return out.read_text()


def model_of(ledger: Path, *, values: bool = True, selection: Selection | None = None,
             ) -> ReportModel:
    book = LedgerDirectory(ledger)
    return ledger_report(book, el.Ledger(ledger).verify(), selection or Selection("all"), [],
                         values=values, made_at=0)


def steps(model: ReportModel) -> list[Step]:
    found: list[Step] = []
    for run in model.runs:
        for item in run.items:
            found += item.steps if isinstance(item, CallSpan) else [item]
    return found


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return el.run_demo(tmp_path_factory.mktemp("demo") / "ledger")


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    path = tmp_path_factory.mktemp("keys") / "ledger.key"
    done = run_cli("keygen", "--origin", "report.example/log", "--out", str(path))
    assert done.code == 0, done.err
    return path, done.out.strip()


# -- the demo: calls, checkpoint, verdict ----------------------------------------------


def test_the_demo_report_shows_every_call_the_verdict_and_the_checkpoint(demo, tmp_path):
    vkey = demo.key.verifier_key
    page = report(demo.ledger.directory, tmp_path / "r.html", "--all", "--verifier-key", vkey)
    found = elements(page)
    spans = {(a["data-call-id"], a["data-scope"]) for tag, a, _ in found
             if tag == "li" and "data-call-id" in a}
    assert spans == {(key[2], "/".join(key[1])) for key in demo.report.calls}
    assert len(spans) == 6
    nested = [a for tag, a, _ in found if a.get("data-scope") == "ask_billing:c-billing"]
    assert nested[0]["style"] == "--depth:1" and nested[0]["data-call-id"] == "c-credit"
    assert '<div class="verdict pass" data-verdict="pass">PASS</div>' in page
    cp = demo.checkpoint.checkpoint
    assert f"<code>{cp.origin}</code>" in page
    assert f"{cp.size} entries" in page
    assert f"<code>{base64.b64encode(cp.root).decode()}</code>" in page
    assert "✔ verified</span> with <code>" + html.escape(vkey) + "</code>" in page
    assert "✔ the log's root at size 35 is this root" in page
    # every entry once, in its run's timeline; run states drawn
    seqs = [int(a["data-seq"]) for tag, a, _ in found if tag == "li" and "data-kind" in a]
    assert sorted(seqs) == list(range(demo.report.tree_size))
    assert "Run states (lineage)" in page
    assert not re.search(r"<script|https?://|src=", page, re.IGNORECASE)


def test_the_checkpoint_signature_is_checked_against_the_given_key(demo, key, tmp_path):
    ledger = demo.ledger.directory
    page = report(ledger, tmp_path / "none.html", "--all")
    assert 'data-checkpoint="unchecked"' in page and "not checked</span>" in page
    page = report(ledger, tmp_path / "wrong.html", "--all", "--verifier-key", key[1])
    assert 'data-checkpoint="failed"' in page and "✖ does not verify" in page
    assert "no signature by a given verifier key" in page
    bare = tmp_path / "bare"
    ingest(bare)
    page = report(bare, tmp_path / "bare.html", "--all")
    assert 'data-checkpoint="none"' in page and "No signed checkpoint" in page


def test_a_run_and_a_call_are_selected_alone(demo, tmp_path):
    ledger = demo.ledger.directory
    run = next(iter(demo.report.calls))[0]
    page = report(ledger, tmp_path / "run.html", "--run-id", run[:8], "--json")
    assert f'data-run-id="{run}"' in page
    page = report(ledger, tmp_path / "call.html", "--call-id", "c-email")
    kinds = [(a["data-seq"], a["data-kind"]) for tag, a, _ in elements(page)
             if tag == "li" and "data-kind" in a]
    own = [k for _, k in kinds if k != "run_state"]
    assert own == ["call", "session_item", "decision", "session_item"]
    assert len(kinds) > len(own)  # the run states that waited on it
    assert {a["data-call-id"] for tag, a, _ in elements(page)
            if tag == "li" and "data-call-id" in a} == {"c-email"}


def test_json_says_what_was_written(demo, tmp_path):
    out = tmp_path / "r.html"
    done = run_cli("report", "--ledger", str(demo.ledger.directory), "--all", "--out",
                   str(out), "--verifier-key", demo.key.verifier_key, "--json")
    assert done.code == 0, done.err
    doc = json.loads(done.out)
    assert doc["out"] == str(out) and doc["bytes"] == out.stat().st_size
    assert (doc["ok"], doc["runs"], doc["calls"], doc["entries"], doc["violations"]) == (
        True, 1, 6, 35, 0)
    assert doc["values"] == "included" and doc["selection"] == "the whole log"
    assert doc["checkpoint"]["signature"] == "verified"
    assert doc["checkpoint"]["tree_size"] == 35
    assert doc["checkpoint"]["verified_by"] == [demo.key.verifier_key]
    assert os.stat(out).st_mode & 0o777 == 0o600 & ~umask()  # it holds values: private


def test_text_output_is_one_line(demo, tmp_path):
    out = tmp_path / "r.html"
    done = run_cli("report", "--ledger", str(demo.ledger.directory), "--all", "--out",
                   str(out))
    assert done.out == (f"wrote {out} ({out.stat().st_size} bytes): the whole log, 6 call(s), "
                        "35 entries, PASS (no violation); values included\n")


# -- violations at their place ---------------------------------------------------------


@pytest.mark.parametrize("case", RULE_CASES)
def test_each_violation_sits_at_its_seq_or_its_call(tmp_path, case):
    ledger = tmp_path / "ledger"
    ingest(ledger, case)
    findings = el.Ledger(ledger).verify().violations
    assert findings, case
    model = model_of(ledger)
    assert not model.ok and model.violations == len(findings)
    placed = {}
    for run in model.runs:
        for item in run.items:
            for step in item.steps if isinstance(item, CallSpan) else [item]:
                placed.update({id(f.finding): ("step", step.seq) for f in step.flags})
            if isinstance(item, CallSpan):
                placed.update({id(f.finding): ("call", item.key) for f in item.flags})
        placed.update({id(f.finding): ("run", run.run_id) for f in run.flags})
    shown = [f for run in model.runs for f in _all_flags(run)]
    assert sorted(id(f.finding) for f in shown) == sorted(placed)
    for flag in shown:
        where, at = placed[id(flag.finding)]
        if flag.finding.seq is not None:
            assert (where, at) == ("step", flag.finding.seq), flag.finding
    page = report(ledger, tmp_path / "r.html", "--all")
    for f in findings:
        attrs = [a for tag, a, _ in elements(page) if a.get("data-rule") == f.rule
                 and a.get("data-seq") == str(f.seq)]
        assert attrs and attrs[0].get("data-call-id") == f.call_id, f


def _all_flags(run: Any) -> list[Any]:
    flags = list(run.flags)
    for item in run.items:
        if isinstance(item, CallSpan):
            flags += item.flags
            flags += [f for s in item.steps for f in s.flags]
        else:
            flags += item.flags
    return flags


def test_argument_integrity_shows_what_differs(tmp_path):
    ledger = tmp_path / "ledger"
    ingest(ledger, "argument_integrity")
    (flag,) = [f for s in steps(model_of(ledger)) for f in s.flags]
    assert flag.finding.rule == "argument_integrity"
    assert [what for what, _ in flag.compared] == ["called", "executed"]
    assert flag.diff == ('$.path: "/tmp/a" -> "/"',)
    page = report(ledger, tmp_path / "r.html", "--all")
    assert "$.path: &#34;/tmp/a&#34; -&gt; &#34;/&#34;" in page
    page = report(ledger, tmp_path / "bare.html", "--all", "--no-values")
    assert "values left out of this report" in page and "/tmp/a" not in page


def test_approval_binding_compares_what_the_approver_was_shown(tmp_path):
    ledger = tmp_path / "ledger"
    write_events(tmp_path / "e.jsonl", [
        {"kind": "call", "run_id": "r1", "agent": "a", "tool": "charge", "call_id": "c0",
         "arguments": '{"amount": 300, "to": "x"}'},
        {"kind": "call", "run_id": "r1", "agent": "a", "tool": "charge", "call_id": "c1",
         "arguments": '{"amount": 3, "to": "x"}', "needs_approval": True},
        {"kind": "decision", "run_id": "r1", "call_id": "c1", "decision": "approve",
         "approver": "alice", "arguments": '{"to": "x", "amount": 300}'},
        {"kind": "execution", "run_id": "r1", "call_id": "c1",
         "arguments": '{"amount": 3, "to": "x"}', "result": "ok"},
    ])
    assert run_cli("ingest", str(tmp_path / "e.jsonl"), "--ledger", str(ledger)).code == 0
    (flag,) = [f for s in steps(model_of(ledger)) for f in s.flags]
    assert flag.finding.rule == "approval_binding" and flag.finding.seq == 3
    assert [what for what, _ in flag.compared] == ["shown to the approver", "called"]
    assert flag.diff == ("$.amount: 300 -> 3",)
    shown = flag.compared[0][1]  # the copy of what the approver was shown, redacted
    assert run_cli("redact", "--ledger", str(ledger), "--digest", shown, "--reason", "gdpr",
                   "--by", "dpo").code == 0
    (flag,) = [f for s in steps(model_of(ledger)) for f in s.flags]
    assert flag.diff == () and flag.note is not None
    assert flag.note == "shown to the approver: redacted by dpo at seq 5: gdpr"


# -- values ------------------------------------------------------------------------------


def test_arguments_and_outputs_are_there_to_expand(demo, tmp_path):
    page = report(demo.ledger.directory, tmp_path / "r.html", "--call-id", "c-refund-1")
    (details,) = re.findall(r'<details class="value" data-label="arguments">.*?</details>',
                            page, re.DOTALL)
    pretty = re.search(r'<pre class="json">(.*?)</pre>', details, re.DOTALL)
    assert pretty is not None
    assert json.loads(html.unescape(pretty.group(1))) == {"order_id": "o-1", "amount": "20.00"}
    assert "<code class=\"preview\">{&#34;order_id&#34;:&#34;o-1&#34;,&#34;amount&#34;:" \
           "&#34;20.00&#34;}</code>" in details
    assert "refunded 20.00 on o-1" in page  # the result, as text


def test_no_values_writes_no_payload_byte(demo, tmp_path):
    ledger = demo.ledger.directory
    full = report(ledger, tmp_path / "full.html", "--all")
    bare = report(ledger, tmp_path / "bare.html", "--all", "--no-values")
    payloads = [data.decode() for data in stored_payloads(ledger).values()]
    assert len(payloads) >= 20
    for text in (full, html.unescape(full)):
        assert "acct-9" in text
    for text in (bare, html.unescape(bare)):
        assert "acct-9" not in text and "20.00" not in text
        assert not [p for p in payloads if len(p) >= 6 and p in text]
    assert bare.count("value not included") == full.count('class="value"')
    assert "<b>left out</b>" in bare
    assert os.stat(tmp_path / "bare.html").st_mode & 0o777 == 0o644 & ~umask()


def test_a_redacted_value_is_never_shown_even_if_its_bytes_come_back(tmp_path):
    ledger = tmp_path / "ledger"
    ingest(ledger)
    book = el.Ledger(ledger)
    call = next(book.entries(kind="call", call_id="c1"))
    digest = call["body"]["args_payload"]
    store = LedgerDirectory(ledger).payloads
    kept = store.get(bytes.fromhex(digest[7:]))
    assert kept == b'{"amount": 3}'
    (segment, offset, _, _), = store.copies(bytes.fromhex(digest[7:]))
    done = book.redact(digest, reason="GDPR <erasure>", by="dpo")
    with open(segment, "r+b") as fh:  # restored from a backup: still redacted
        fh.seek(offset - 49 + 4)
        fh.write(b"\0")  # its state: stored
        fh.seek(offset)
        fh.write(kept)
    (ledger / "payloads" / "locations.sqlite").unlink()  # the map rebuilt: the copy is back
    assert LedgerDirectory(ledger).payloads.get(bytes.fromhex(digest[7:])) == kept
    page = report(ledger, tmp_path / "r.html", "--all")
    assert f"redacted by dpo at seq {done.seq}: GDPR &lt;erasure&gt;" in page
    assert "{&#34;amount&#34;: 3}" not in page
    assert '<div class="value absent redacted" data-label="arguments">' in page


def test_every_string_of_the_evidence_is_shown_as_text(tmp_path):
    ledger = tmp_path / "ledger"
    evil = "<script>alert(1)</script>"
    write_events(tmp_path / "e.jsonl", [
        {"kind": "call", "run_id": "r\u202e1", "agent": "<b>agent</b>", "tool": evil,
         "call_id": 'c1" onmouseover="alert(1)', "needs_approval": True,
         "arguments": {"q": "</pre><script>alert(2)</script>"}},
        {"kind": "decision", "run_id": "r\u202e1", "call_id": 'c1" onmouseover="alert(1)',
         "decision": "approve", "approver": "<img src=x onerror=alert(3)>",
         "reason": "</details><script>alert(4)</script>"},
    ])
    assert run_cli("ingest", str(tmp_path / "e.jsonl"), "--ledger", str(ledger)).code == 0
    page = report(ledger, tmp_path / "r.html", "--all")
    assert not re.search(r"<script|<img|<b>agent|onmouseover=\"", page, re.IGNORECASE)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;/details&gt;&lt;script&gt;alert(4)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(3)&gt;" in page
    assert 'data-call-id="c1&#34; onmouseover=&#34;alert(1)"' in page
    assert "\u202e" not in page and "r\\u202e1" in page


def test_a_nested_call_sits_under_the_call_that_ran_it(tmp_path):
    ledger = tmp_path / "ledger"
    ingest(ledger, "nested_ownership")  # c1 and c2 each run an agent that calls n1
    page = report(ledger, tmp_path / "r.html", "--run-id", "r1")
    spans = [(a["data-call-id"], a["data-scope"], a["style"]) for tag, a, _ in elements(page)
             if tag == "li" and "data-call-id" in a]
    assert spans == [("c1", "", "--depth:0"), ("n1", "ask_payer:c1", "--depth:1"),
                     ("c2", "", "--depth:0"), ("n1", "ask_payer:c2", "--depth:1")]


# -- lineage ------------------------------------------------------------------------------


def test_run_state_forks_are_drawn_as_branches(tmp_path):
    ledger = tmp_path / "ledger"
    write_events(tmp_path / "e.jsonl", [
        {"kind": "call", "run_id": "r1", "agent": "a", "tool": "t", "call_id": "c1",
         "arguments": "{}", "needs_approval": True},
        {"kind": "run_end", "run_id": "r1", "status": "interrupted"},
        {"kind": "run_state", "run_id": "r1", "state_id": "root", "event": "to_state"},
        {"kind": "run_state", "run_id": "r1", "state_id": "left", "parent": "root",
         "event": "loaded"},
        {"kind": "run_state", "run_id": "r1", "state_id": "right", "parent": "root",
         "event": "loaded"},
        {"kind": "decision", "run_id": "r1", "call_id": "c1", "decision": "reject",
         "approver": "bob", "run_state": "right"},
    ])
    assert run_cli("ingest", str(tmp_path / "e.jsonl"), "--ledger", str(ledger)).code == 0
    (run,) = [r for r in model_of(ledger).runs if r.run_id == "r1"]
    assert [(row.depth, row.node.state_id, row.last) for row in run.states] == [
        (0, "root", None), (1, "left", False), (1, "right", True)]
    page = report(ledger, tmp_path / "r.html", "--all")
    assert "fork · 2 branches" in page
    assert '<a class="chip decision reject" href="#e-5">reject c1 #5</a>' in page
    rows = [a for tag, a, _ in elements(page) if "data-state-id" in a]
    assert [(a["data-state-id"], a.get("data-parent"), a["style"]) for a in rows] == [
        ("root", None, "--depth:0"), ("left", "root", "--depth:1"),
        ("right", "root", "--depth:1")]


# -- large selections ----------------------------------------------------------------------


def test_a_large_selection_is_shown_up_to_its_cap(tmp_path, monkeypatch):
    ledger = tmp_path / "ledger"
    ingest(ledger)
    monkeypatch.setattr(report_ledger_module, "MAX_ENTRIES", 5)
    model = model_of(ledger)
    total = el.Ledger(ledger).verify().tree_size
    assert (model.entries, model.left_out) == (5, total - 5)
    page = report(ledger, tmp_path / "r.html", "--all")
    assert f"5</b><span>entries shown, {total - 5} more not shown" in page
    broken = tmp_path / "broken"
    ingest(broken, "approval_binding")  # violations at seq 2 and 4
    monkeypatch.setattr(report_ledger_module, "MAX_ENTRIES", 2)
    monkeypatch.setattr(report_model_module, "MAX_UNPLACED", 1)
    model = model_of(broken)
    assert (model.violations, model.unlisted) == (2, 1)
    (listed,) = [f for run in model.runs for f in _all_flags(run)]
    assert (listed.finding.seq, listed.finding.call_id) == (2, "c1")  # at its call


# -- bundles --------------------------------------------------------------------------------


@pytest.fixture
def proved(tmp_path, key) -> dict[str, Any]:
    ledger = tmp_path / "ledger"
    ingest(ledger, "argument_integrity")
    paths = {}
    for name, extra in (("with", ["--include-payloads"]), ("without", [])):
        paths[name] = tmp_path / f"{name}.bundle.json"
        done = run_cli("prove", "--ledger", str(ledger), "--key", str(key[0]), "--out",
                       str(paths[name]), "--run-id", "r1", *extra)
        assert done.code == 0, done.err
    return {"ledger": ledger, "vkey": key[1], **paths}


def test_a_bundle_alone_is_reported(proved, tmp_path):
    out = tmp_path / "b.html"
    done = run_cli("report", "--bundle", str(proved["with"]), "--verifier-key",
                   proved["vkey"], "--out", str(out), "--json")
    assert done.code == 0, done.err
    doc = json.loads(done.out)
    assert (doc["ok"], doc["violations"], doc["selection"], doc["values"]) == (
        False, 1, "run r1", "included")
    assert doc["checkpoint"]["signature"] == "verified"
    assert doc["checkpoint"]["against_log"] == "proven"
    page = out.read_text()
    assert 'data-rule="argument_integrity" data-seq="1" data-call-id="c1"' in page
    assert "$.path: &#34;/tmp/a&#34; -&gt; &#34;/&#34;" in page
    assert "bundle with.bundle.json" in page


def test_a_bundle_of_digests_only_says_values_are_not_included(proved, tmp_path):
    out = tmp_path / "b.html"
    written = el.report_bundle(proved["without"], proved["vkey"], out)
    page = out.read_text()
    assert written.model.values == "digests only"
    assert "value not included" in page and "/tmp/a" not in page
    assert "<b>digests only</b>" in page
    assert os.stat(out).st_mode & 0o777 == 0o644 & ~umask()


def test_a_bundle_that_is_not_authentic_exits_as_verify_proof_does(proved, tmp_path):
    doc = json.loads(proved["with"].read_text())
    statement = bytearray(base64.b64decode(doc["payload"]))
    statement[statement.index(b"r1")] = ord("r")
    statement[statement.index(b"r1") + 1] = ord("2")
    doc["payload"] = base64.b64encode(bytes(statement)).decode()
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(doc))
    out = tmp_path / "b.html"
    done = run_cli("report", "--bundle", str(tampered), "--verifier-key", proved["vkey"],
                   "--out", str(out))
    assert done.code == 1 and done.err.startswith("evidence-ledger: error: ")
    assert not out.exists()
    text = tmp_path / "notes.txt"
    text.write_text("not a bundle\n")
    for bad, code in ((text, 1), (tmp_path / "missing.json", 2), (tmp_path, 2)):
        done = run_cli("report", "--bundle", str(bad), "--verifier-key", proved["vkey"],
                       "--out", str(out))
        assert done.code == code and not out.exists(), done.err
        assert run_cli("verify-proof", str(bad), "--verifier-key", proved["vkey"]).code == code
    done = run_cli("report", "--bundle", str(proved["with"]), "--out", str(out))
    assert done.code == 2 and "--bundle needs --verifier-key" in done.err
    done = run_cli("report", "--bundle", str(proved["with"]), "--verifier-key",
                   proved["vkey"], "--out", str(out), "--run-id", "r1")
    assert done.code == 2 and "drop --run-id" in done.err
    done = run_cli("report", "--bundle", str(proved["with"]), "--verifier-key",
                   proved["vkey"], "--out", str(proved["with"]), "--force")
    assert done.code == 2 and "it is the bundle itself" in done.err


# -- bad usage --------------------------------------------------------------------------------


def test_bad_usage_exits_2_and_writes_nothing(demo, tmp_path):
    ledger = str(demo.ledger.directory)
    out = tmp_path / "r.html"
    cases = [
        ((), "say what to show"),
        (("--all", "--run-id", "x"), "--all shows the whole log"),
        (("--run-id", "no-such-run"), "no entry of run 'no-such-run' (runs: "),
        (("--call-id", "no-such-call"), "no entry names call_id 'no-such-call'"),
        (("--all", "--verifier-key", "nonsense"), "verifier key"),
    ]
    for args, message in cases:
        done = run_cli("report", "--ledger", ledger, "--out", str(out), *args)
        assert (done.code, message in done.err) == (2, True), (args, done.err)
        assert len(done.err.splitlines()) == 1
        assert not out.exists()
    inside = demo.ledger.directory / "r.html"
    done = run_cli("report", "--ledger", ledger, "--out", str(inside), "--all")
    assert done.code == 2 and "inside the ledger" in done.err and not inside.exists()


def test_an_existing_file_is_replaced_only_with_force(demo, tmp_path):
    ledger = str(demo.ledger.directory)
    out = tmp_path / "r.html"
    out.write_text("mine")
    done = run_cli("report", "--ledger", ledger, "--out", str(out), "--all")
    assert done.code == 2 and "pass --force" in done.err
    assert out.read_text() == "mine"
    done = run_cli("report", "--ledger", ledger, "--out", str(out), "--all", "--force")
    assert done.code == 0, done.err
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]  # no temporary file left


def test_the_api_reports_a_ledger(demo, tmp_path):
    written = demo.ledger.report(tmp_path / "r.html", call_id="c-credit",
                                 verifier_keys=demo.key.verifier_key)
    assert isinstance(written, el.ReportFile)
    assert written.model.ok and written.model.calls == 1
    assert written.size == (tmp_path / "r.html").stat().st_size
    with pytest.raises(TypeError, match="call_id is a str"):
        demo.ledger.report(tmp_path / "x.html", call_id=7)  # type: ignore[arg-type]


def test_context_calls_of_a_call_bundle_say_they_lie_outside_the_selection(demo, tmp_path):
    # a trial user read "no call entry" on spans whose call entry was right below it
    bundle = tmp_path / "refund.json"
    assert run_cli("prove", "--ledger", str(demo.ledger.directory), "--key", str(demo.key.path),
                   "--call-id", "c-refund-1", "--out", str(bundle)).code == 0
    out = tmp_path / "b.html"
    assert run_cli("report", "--bundle", str(bundle), "--verifier-key",
                   demo.key.verifier_key, "--out", str(out)).code == 0
    page = out.read_text()
    assert "outside the selection" in page and "no call entry" not in page


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_force_never_replaces_what_is_not_a_regular_file(demo, tmp_path, kind):
    # a breaker turned /dev/full into a regular file with `report --out /dev/full --force`
    out = tmp_path / "out.html"
    if kind == "fifo":
        os.mkfifo(out)
    else:
        (tmp_path / "elsewhere.html").write_text("mine")
        out.symlink_to(tmp_path / "elsewhere.html")
    done = run_cli("report", "--ledger", str(demo.ledger.directory), "--all", "--out",
                   str(out), "--force")
    assert done.code == 2 and "is not a regular file" in done.err, done.err
    assert out.is_fifo() if kind == "fifo" else out.is_symlink()
