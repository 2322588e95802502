"""The HTML report in a browser: Debian's headless Chromium, driven by Playwright (launched
with ``executable_path``; ``playwright install`` is never run). Skipped where Chromium or
Playwright is missing, except on CI, where that fails (``.ci/run`` installs Chromium).

Each page is opened from its file with every other request refused and recorded: the
page must load nothing but itself. The tests find each call and each violation in the
DOM (``data-call-id``, ``data-rule``, ``data-seq``), expand an argument by a click, and
take a screenshot of the whole page.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import evidence_ledger as el

from .helpers import DATA, ingest, require_chromium, run_cli

RULE_CASES = sorted(p.stem for p in (DATA / "rules").glob("*.jsonl") if p.stem != "valid")
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium = require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium)
        yield launched
        launched.close()


class Opened:
    """A report opened in a page: its URL, every request it made, every dialog it raised."""

    def __init__(self, browser: Any, path: Path, width: int = 1200) -> None:
        self.url = path.resolve().as_uri()
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page = browser.new_page(viewport={"width": width, "height": 900})
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.on("dialog", self._dialog)
        self.page.route("**/*", self._route)
        self.page.goto(self.url)

    def _route(self, route: Any) -> None:
        if route.request.url == self.url:
            route.continue_()
        else:
            route.abort()

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def screenshot(self, path: Path) -> None:
        self.page.screenshot(path=str(path), full_page=True)
        data = path.read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000

    def close(self) -> None:
        self.page.close()
        assert self.requests == [self.url]  # nothing fetched but the file itself
        assert self.dialogs == []


def _report(ledger: Path, out: Path, *args: str) -> Path:
    done = run_cli("report", "--ledger", str(ledger), "--out", str(out), *args)
    assert done.code == 0, done.err
    return out


def test_the_demo_report_in_chromium(browser, tmp_path):
    with ThreadPoolExecutor(1) as thread:  # Playwright's loop runs in this one
        demo = thread.submit(el.run_demo, tmp_path / "ledger").result()
    page = _report(demo.ledger.directory, tmp_path / "demo.html", "--all", "--verifier-key",
                   demo.key.verifier_key)
    opened = Opened(browser, page, width=1100)
    view = opened.page
    opened.screenshot(tmp_path / "demo.png")
    assert view.locator("[data-verdict]").inner_text() == "PASS"
    assert view.locator("[data-checkpoint]").get_attribute("data-checkpoint") == "verified"
    for _, scope, call_id in demo.report.calls:
        span = view.locator(f'li.span[data-call-id="{call_id}"][data-scope="{"/".join(scope)}"]')
        assert span.count() == 1 and span.is_visible(), call_id
        assert span.locator('li.step[data-kind="call"]').count() == 1
    nested = view.locator('li.span[data-call-id="c-credit"]').bounding_box()
    outer = view.locator('li.span[data-call-id="c-billing"]').bounding_box()
    assert nested["x"] > outer["x"] + 20  # the agent-as-tool call is indented
    arguments = view.locator('li.span[data-call-id="c-refund-1"] '
                             'details.value[data-label="arguments"]')
    pretty = arguments.locator("pre.json")
    assert not pretty.is_visible()
    arguments.locator("summary").click()
    assert pretty.is_visible()
    assert json.loads(pretty.inner_text()) == {"order_id": "o-1", "amount": "20.00"}
    opened.close()


@pytest.mark.parametrize("case", RULE_CASES)
def test_each_violation_kind_in_chromium(browser, tmp_path, case):
    ledger = tmp_path / "ledger"
    ingest(ledger, case)
    findings = el.Ledger(ledger).verify().violations
    opened = Opened(browser, _report(ledger, tmp_path / "r.html", "--all"))
    view = opened.page
    opened.screenshot(tmp_path / "r.png")
    assert view.locator("[data-verdict]").inner_text() == "FAIL"
    for f in findings:
        where = f'.violation[data-rule="{f.rule}"][data-seq="{f.seq}"]'
        shown = view.locator(where)
        assert shown.count() >= 1 and shown.first.is_visible(), f
        assert shown.first.get_attribute("data-call-id") == f.call_id
        assert f.rule in shown.first.inner_text() and f.detail in shown.first.inner_text()
        step = view.locator(f'li.step[data-seq="{f.seq}"] {where}')
        assert step.count() >= 1, f"{f} is not at the entry of its seq"
    for _, scope, call_id in el.Ledger(ledger).verify().calls:
        span = f'li.span[data-call-id="{call_id}"][data-scope="{"/".join(scope)}"]'
        assert view.locator(span).count() == 1
    opened.close()


def test_evidence_strings_are_text_in_chromium(browser, tmp_path):
    events = [
        {"kind": "call", "run_id": "r1", "agent": "a", "tool": "<script>alert(1)</script>",
         "call_id": "c1", "needs_approval": True,
         "arguments": {"q": "</pre><script>alert(2)</script><img src=x onerror=alert(3)>"}},
        {"kind": "decision", "run_id": "r1", "call_id": "c1", "decision": "approve",
         "approver": "<img src=x onerror=alert(4)>", "reason": "<script>alert(5)</script>"},
    ]
    (tmp_path / "e.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    ledger = tmp_path / "ledger"
    assert run_cli("ingest", str(tmp_path / "e.jsonl"), "--ledger", str(ledger)).code == 0
    opened = Opened(browser, _report(ledger, tmp_path / "r.html", "--all"))
    view = opened.page
    assert view.locator("script, img").count() == 0
    tool = view.locator('li.span[data-call-id="c1"] .tool')
    assert tool.inner_text() == "<script>alert(1)</script>"
    arguments = view.locator('details.value[data-label="arguments"]')
    arguments.locator("summary").click()
    assert json.loads(arguments.locator("pre.json").inner_text()) == events[0]["arguments"]
    assert "reason: <script>alert(5)</script>" in view.locator(
        'li.step[data-kind="decision"]').inner_text()
    opened.close()

