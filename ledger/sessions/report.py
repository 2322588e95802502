"""Scanning every session of a store: :func:`scan_store` and its :class:`ScanReport`, the
``scan-session`` document (``schemas/scan-report.schema.json``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from evidence_ledger.sessions.scan import SessionFinding, scan_items
from evidence_ledger.sessions.stores import MESSAGES_TABLE, StoreContents, read_store

__all__ = ["ScanReport", "scan_store"]

SCAN_FORMAT_VERSION = 1


@dataclass
class ScanReport:
    """The findings of a scan (see ``schemas/scan-report.schema.json``).

    Attributes:
        contents: what was read.
        findings: per session id, its findings (ordered by index).
    """

    contents: StoreContents
    findings: dict[str, list[SessionFinding]]

    @property
    def ok(self) -> bool:
        """True when no session holds a finding."""
        return not any(self.findings.values())

    @property
    def all_findings(self) -> list[SessionFinding]:
        """Every finding, session by session."""
        return [f for s in self.contents.sessions for f in self.findings[s.session_id]]

    def to_json(self) -> dict[str, Any]:
        """The ``scan-session --json`` document."""
        sessions = self.contents.sessions
        return {
            "format_version": SCAN_FORMAT_VERSION,
            "source": str(self.contents.path),
            "source_format": self.contents.format,
            "ok": self.ok,
            "totals": {
                "sessions": len(sessions),
                "items": sum(len(s.items) for s in sessions),
                "findings": len(self.all_findings),
            },
            "sessions": [
                {
                    "session_id": s.session_id, "items": len(s.items),
                    "findings": [f.to_json() for f in self.findings[s.session_id]],
                }
                for s in sessions
            ],
            "notices": list(self.contents.notices),
        }


def scan_store(
    path: str | os.PathLike[str],
    *,
    session_id: str | None = None,
    messages_table: str = MESSAGES_TABLE,
) -> ScanReport:
    """Read a store (:func:`read_store`) and scan every session in it (:func:`scan_items`).

    Raises:
        UsageError: as :func:`read_store`.
    """
    contents = read_store(path, session_id=session_id, messages_table=messages_table)
    findings = {s.session_id: scan_items(s.session_id, s.items, s.rows) for s in contents.sessions}
    return ScanReport(contents, findings)
