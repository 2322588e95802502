"""The format-1 fixture ledger (``tests/data/format1/``, written by the code of format
version 1): it verifies as recorded, with its root hash and checkpoints."""

from __future__ import annotations

import base64
import hashlib
import shutil
from pathlib import Path

import pytest

from tests.helpers import DATA, run_cli

FIXTURE = DATA / "format1"
ROOT = "AuHIEMnX02GlCB8ZwpJLUWtSj3Z2IL3suWRKeveZO5U="
"""The fixture's root hash (21 entries), as recorded when it was written."""
CHECKPOINTS = {
    "00000001.note": "147f624cbc608f4106edff3553c948374bf51b09d758139edc24182da2e53fa4",
    "00000002.note": "e70a8bcc7fe7a0d3d6d0759c8151d089d5cb8fbd863ab75087a9b9bb00b39171",
}
"""SHA-256 of each checkpoint file of the fixture."""
VKEY = (FIXTURE / "signing.vkey").read_text().strip()


@pytest.fixture
def book(tmp_path: Path) -> Path:
    """A copy of the fixture ledger."""
    target = tmp_path / "ledger"
    shutil.copytree(FIXTURE / "ledger", target)
    return target


def _checkpoint_hashes(book: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((book / "checkpoints").glob("*.note"))}


def test_fixture_verifies_as_recorded(book: Path) -> None:
    result = run_cli("verify", "--ledger", str(book), "--verifier-key", VKEY, "--json")
    assert result.code == 0, result.out + result.err
    assert f'"root_hash": "{ROOT}"' in result.out
    assert '"tree_size": 21' in result.out
    assert _checkpoint_hashes(book) == CHECKPOINTS
    assert base64.b64decode(ROOT).hex() == (
        "02e1c810c9d7d361a5081f19c2924b516b528f767620bdecb9644a7af7993b95")
