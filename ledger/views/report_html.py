"""The HTML report: one self-contained page (inline CSS, no script, nothing fetched) drawn
from a :class:`~evidence_ledger.views.report_model.ReportModel` with the Jinja2 template
``report.html.j2`` beside this module.

Every string from the evidence (tool names, reasons, ids, values) is attacker-controlled:
the template autoescapes all of it, and control, bidirectional and lone surrogate
characters are shown as escapes (``\\u202e``), so that no string can change the page or
reorder what it says. The page's Content-Security-Policy forbids scripts and every load.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import jinja2
import markupsafe

from evidence_ledger.views.report_model import CallSpan, ReportModel

__all__ = ["render_html"]

_HIDDEN = re.compile("[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f\\u061c\\u200e\\u200f\\u202a-\\u202e"
                     "\\u2066-\\u2069\\ud800-\\udfff]")
"""Characters shown as escapes: controls (but tab and newline), bidirectional controls and
lone surrogates."""

_EPOCH = dt.datetime(1970, 1, 1)


def _visible(value: Any) -> Any:
    """A string with :data:`_HIDDEN` characters as ``\\uXXXX`` escapes; markup the template
    made (a macro's output, already escaped) and other values as they are."""
    if isinstance(value, str) and not isinstance(value, markupsafe.Markup):
        return _HIDDEN.sub(lambda m: f"\\u{ord(m.group()):04x}", value)
    return value


def _when(ns: int) -> str:
    """ISO 8601 UTC time (ms, ``Z``) of ``ns`` nanoseconds since the epoch."""
    moment = _EPOCH + dt.timedelta(microseconds=ns // 1000)
    return moment.isoformat(timespec="milliseconds") + "Z"


def _span(ns: int) -> str:
    """A duration for people: ``0 ms``, ``12.5 ms``, ``3.20 s``, ``4 min 05 s``."""
    ms = ns / 1e6
    if ms < 100:
        return f"{ms:.1f} ms".replace(".0 ms", " ms")
    if ms < 60_000:
        return f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.2f} s"
    minutes, seconds = divmod(int(ms // 1000), 60)
    return f"{minutes} min {seconds:02d} s"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("evidence_ledger.views", "."),
        autoescape=True, finalize=_visible, undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True,
    )
    env.filters.update(when=_when, span=_span)
    env.tests["span"] = lambda item: isinstance(item, CallSpan)
    return env


_TEMPLATE = _environment().get_template("report.html.j2")


def render_html(model: ReportModel, version: str) -> str:
    """The page of ``model`` (text; escapes as the module docstring says), made by
    evidence-ledger ``version`` (named in its footer)."""
    return _TEMPLATE.render(m=model, version=version)
