"""Fresh builds and long catch-ups write ``<index>.build`` and rename it over the index: a
build killed midway leaves the old index (or none), and the next update completes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from evidence_ledger.index import build as index_mod
from evidence_ledger.index.build import Deriver, derive, side_path, update_index
from evidence_ledger.index.db import VIEWS
from evidence_ledger.record.ingest import ingest_file
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from tests.helpers import DATA

_KILLED = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from evidence_ledger.index import build
    from evidence_ledger.storage.ledger_dir import Ledger

    build.CHUNK = 3
    build.SIDE_BYTES = int(sys.argv[3])
    def save(self, con, *args):  # every chunk committed in the side file: die as kill -9 would
        assert con.execute("SELECT count(*) FROM entries").fetchone()[0] > 0
        os._exit(9)

    build.Deriver.save = save
    build.update_index(Ledger(Path(sys.argv[1])), sys.argv[2])
""")


def _killed_build(ledger: Ledger, index: Path, side_bytes: int) -> None:
    """An update of ``index`` killed (exit without clean-up) once every chunk is in."""
    done = subprocess.run([sys.executable, "-c", _KILLED, str(ledger.directory), str(index),
                           str(side_bytes)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 9, done.stderr


def _same_as_derived(ledger: Ledger, index: Path) -> None:
    _, derived = derive(ledger.scan())
    with duckdb.connect(str(index), read_only=True) as con:
        for name, view in VIEWS.items():
            stored = con.sql(f"SELECT * FROM {name} ORDER BY {view.order}").to_arrow_table()
            assert stored.cast(view.schema).equals(derived[name]), name


def test_a_killed_fresh_build_leaves_no_index_and_the_next_one_completes(tmp_path):
    ledger = Ledger(tmp_path / "l")
    ingest_file(EvidenceWriter(ledger), DATA / "rules" / "valid.jsonl")
    index = tmp_path / "index.duckdb"
    _killed_build(ledger, index, 32 << 20)
    assert not index.exists() and side_path(index).exists()  # chunks committed there
    info = update_index(ledger, index)
    assert (info.rebuilt, info.tree_size) == (True, 25)
    assert not side_path(index).exists()
    _same_as_derived(ledger, index)


def test_a_killed_long_catch_up_leaves_the_old_index_and_the_next_one_completes(
        tmp_path, monkeypatch):
    ledger = Ledger(tmp_path / "l")
    ingest_file(EvidenceWriter(ledger), DATA / "rules" / "valid.jsonl")
    index = tmp_path / "index.duckdb"
    update_index(ledger, index)
    before = index.read_bytes()
    writer = EvidenceWriter(ledger)
    for i in range(7):
        writer.run_end(run_id=f"late-{i}", status="completed")
    _killed_build(ledger, index, 0)  # any catch-up is a long one
    assert index.read_bytes() == before and side_path(index).exists()
    monkeypatch.setattr(index_mod, "SIDE_BYTES", 0)
    info = update_index(ledger, index)  # from the old index's state, in a fresh side file
    assert (info.rebuilt, info.added, info.tree_size) == (False, 7, 32)
    assert not side_path(index).exists()
    _same_as_derived(ledger, index)


@pytest.mark.parametrize("side_bytes", [0, 32 << 20])
def test_a_catch_up_in_place_or_in_a_side_file_gives_the_same_rows(
        tmp_path, monkeypatch, side_bytes):
    ledger = Ledger(tmp_path / "l")
    writer = EvidenceWriter(ledger)
    ingest_file(writer, DATA / "rules" / "valid.jsonl")
    index = tmp_path / "index.duckdb"
    monkeypatch.setattr(index_mod, "CHUNK", 4)
    monkeypatch.setattr(index_mod, "SIDE_BYTES", side_bytes)
    update_index(ledger, index)
    ingest_file(writer, DATA / "rules" / "valid.jsonl", again=True)  # the same runs: chains change
    saved = []
    save = Deriver.save

    def noting_the_file(self, con, *args):
        saved.append(con.execute("SELECT path FROM duckdb_databases() WHERE NOT internal "
                                 "AND path IS NOT NULL").fetchone()[0])
        return save(self, con, *args)

    monkeypatch.setattr(Deriver, "save", noting_the_file)
    info = update_index(ledger, index)
    assert (info.rebuilt, info.added) == (False, 25)
    assert saved == [str(side_path(index) if side_bytes == 0 else index)]
    _same_as_derived(ledger, index)
