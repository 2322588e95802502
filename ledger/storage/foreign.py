"""Files in a ledger directory that the ledger did not write.

Everything under a ledger directory is the ledger's own: ``format``, ``log.bin``,
``writer.lock``, ``payloads/`` (format 2: ``segments/`` of ``NNNNNNNN.seg`` files and the
map ``locations.sqlite`` with its companions; format 1, or left by a migration cut short:
shard folders of two hex digits holding files named by their SHA-256, the
temporary files a crash may leave, and the markers of payloads being erased), ``torn/``
(cut torn tails), ``checkpoints/`` (checked by the checkpoint audit), ``tree/`` (the tile
cache), ``repairs/`` (session repair markers) and an index put there with ``--index``,
``index.duckdb`` with its companions (the default index lived there before it moved to the
user's cache). Anything else was put there by someone else: :func:`foreign_files`
names it, so that ``verify`` can say so (a file left in ``payloads/`` is never read as
evidence, but nobody should take it for some).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from evidence_ledger.storage.checkpoint_store import CHECKPOINT_DIR
from evidence_ledger.storage.ledger_format import FORMAT_NAME
from evidence_ledger.storage.log_store import LOCK_NAME, LOG_NAME, TORN_DIR
from evidence_ledger.storage.payload_map import MAP_NAME
from evidence_ledger.storage.payloads import PAYLOAD_DIR
from evidence_ledger.storage.segments import SEGMENT_DIR, segment_number
from evidence_ledger.storage.tree_store import TREE_DIR

__all__ = ["foreign_files"]

_TOP = frozenset({FORMAT_NAME, LOG_NAME, LOCK_NAME, PAYLOAD_DIR, TORN_DIR, CHECKPOINT_DIR,
                  TREE_DIR, "repairs"})  # repairs/: the session doctor's (a later stage) markers
_INDEX = "index.duckdb"  # and index.duckdb.wal, .lock, .state, .tmp
_SHARD = re.compile(r"[0-9a-f]{2}")
_PAYLOAD = re.compile(r"([0-9a-f]{2})[0-9a-f]{62}(\.\d+\.tmp|\.erasing)?")
_SPOOL = re.compile(r"\.\d+-\d+\.tmp")
_TORN = re.compile(r"(?:seg-\d{8}-)?\d{12}-\d+\.bin")  # log.bin's tails; a segment's
_FORMAT_TMP = re.compile(r"\.format\.\d+\.tmp")
_MAP_FILES = frozenset(MAP_NAME + suffix for suffix in ("", "-wal", "-shm", "-journal"))


def _names(folder: Path) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:  # missing, or not a folder: the checks that read it say so
        return []


def foreign_files(directory: Path) -> Iterator[str]:
    """Paths (relative to the ledger ``directory``) of the files and folders in it that the
    ledger did not write, in sorted order: at its top level, in ``payloads/`` and in
    ``torn/`` (``checkpoints/`` is the checkpoint audit's). Reads folder listings only."""
    for name in _names(directory):
        if name not in _TOP and not name.startswith(_INDEX) and not _FORMAT_TMP.fullmatch(name):
            yield name
    payloads = directory / PAYLOAD_DIR
    for shard in _names(payloads):
        if _SPOOL.fullmatch(shard) or shard in _MAP_FILES:
            continue
        if shard == SEGMENT_DIR and (payloads / shard).is_dir():
            yield from (f"{PAYLOAD_DIR}/{SEGMENT_DIR}/{name}"
                        for name in _names(payloads / shard) if segment_number(name) is None)
            continue
        if not _SHARD.fullmatch(shard) or not (payloads / shard).is_dir():
            yield f"{PAYLOAD_DIR}/{shard}"
            continue
        for name in _names(payloads / shard):
            found = _PAYLOAD.fullmatch(name)
            if found is None or found.group(1) != shard:
                yield f"{PAYLOAD_DIR}/{shard}/{name}"
    for name in _names(directory / TORN_DIR):
        if not _TORN.fullmatch(name):
            yield f"{TORN_DIR}/{name}"
