"""The native core against the pure-Python reference: the same inputs, random and mutated,
give the same results and the same errors (type and message).

Each entry point of ``evidence_ledger._native._core`` is fed values and bytes from
hypothesis: canonical encodings of random values and entries, then the same bytes with bits
flipped, cut short, grown, or packed in a non-canonical form (long integer, string, binary,
array and map headers, unsorted or repeated keys, floats, extension types), and logs of
frames with damaged headers, records and tails. ``make test`` runs 10^3 inputs per property,
``make fuzz`` 10^4 (``FUZZ_EXAMPLES``). Skipped where the native core is not built, failed
under ``CI=true``.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evidence_ledger.format import core, encoding, entries, framing
from evidence_ledger.format.entries import decode_entry
from evidence_ledger.tlog import entry_batch, merkle

from .cores import DISPATCHED, compiled, use_core
from .fuzzing import FUZZ

ENTRY_VECTORS = sorted((Path(__file__).parent / "vectors" / "evidence-ledger" / "entries")
                       .glob("*.json"))
ENTRY_BYTES = [bytes.fromhex(json.loads(p.read_text())["entry_hex"]) for p in ENTRY_VECTORS]

_LONG = st.integers(0, 300)
"""Lengths that need the 8- and 16-bit headers now and then (cheap to draw as one run)."""
values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=8)
    | st.binary(max_size=8) | _LONG.map(lambda n: "é" * (n // 2)) | _LONG.map(bytes)
    | st.integers(14, 17).map(lambda n: [0] * n),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=10,
)


def _outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """What a call gives, comparably: its value's repr (True is not 1, dict order counts),
    or its exception's type and message."""
    try:
        return ("value", repr(fn(*args, **kwargs)))
    except Exception as exc:
        return ("error", type(exc), str(exc))


# -- mutations ----------------------------------------------------------------------------


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with a few bits flipped, bytes replaced, inserted or cut, or its end cut
    off or grown."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "append"]))
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        if kind == "flip" and out:
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and out:
            out[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif kind == "delete" and out:
            del out[at : at + draw(st.integers(1, 4))]
        elif kind == "truncate":
            del out[at:]
        elif kind == "append":
            out += draw(st.binary(min_size=1, max_size=4))
    return bytes(out)


def _header(draw: st.DrawFn, forms: list[tuple[int, int, int]], n: int,
            fix: tuple[int, int] | None) -> bytes:
    """A length or integer header for ``n``: the fix form or any wider one that holds it
    ((tag, bytes, largest)); the choice is hypothesis's, so longer forms come up."""
    choices: list[bytes] = []
    if fix is not None and n <= fix[1]:
        choices.append(bytes([fix[0] | n]))
    for tag, width, largest in forms:
        if n <= largest:
            choices.append(bytes([tag]) + n.to_bytes(width, "big"))
    return draw(st.sampled_from(choices))


_LENGTHS = [(1, 0xFF), (2, 0xFFFF), (4, 0xFFFF_FFFF)]


def _lengths(tags: tuple[int, ...]) -> list[tuple[int, int, int]]:
    return [(tag, width, largest) for tag, (width, largest) in zip(tags, _LENGTHS, strict=False)]


@st.composite
def loosely_packed(draw: st.DrawFn, value: Any) -> bytes:
    """``value`` packed with any header wide enough (not only the shortest), maps maybe
    in another order or with a key repeated, and now and then a float or extension type."""
    if draw(st.integers(0, 40)) == 0:
        return draw(st.sampled_from([b"\xca\x3f\x80\x00\x00", b"\xcb" + struct.pack(">d", 1.5),
                                     b"\xd4\x01\x00", b"\xc7\x01\x05\x00", b"\xc1"]))
    if value is None or isinstance(value, bool):
        return msgpack.packb(value)
    if isinstance(value, int):
        if value >= 0:
            forms = [(0xCC, 1, 0xFF), (0xCD, 2, 0xFFFF), (0xCE, 4, 0xFFFF_FFFF),
                     (0xCF, 8, 2**64 - 1)]
            signed = [(0xD0, 1, 0x7F), (0xD1, 2, 0x7FFF), (0xD2, 4, 2**31 - 1),
                      (0xD3, 8, 2**63 - 1)]
            return _header(draw, forms + signed, value, (0x00, 0x7F))
        width = draw(st.sampled_from([w for w in (1, 2, 4, 8) if -(2 ** (8 * w - 1)) <= value]))
        tag = {1: 0xD0, 2: 0xD1, 4: 0xD2, 8: 0xD3}[width]
        short = [value.to_bytes(1, "big", signed=True)] if value >= -32 else []
        return draw(st.sampled_from([*short, bytes([tag]) + value.to_bytes(width, "big",
                                                                           signed=True)]))
    if isinstance(value, str):
        raw = value.encode("utf-8")
        return _header(draw, _lengths((0xD9, 0xDA, 0xDB)), len(raw), (0xA0, 31)) + raw
    if isinstance(value, bytes):
        return _header(draw, _lengths((0xC4, 0xC5, 0xC6)), len(value), None) + value
    if isinstance(value, list):
        head = _header(draw, _lengths((0xDC, 0xDC, 0xDD))[1:], len(value), (0x90, 15))
        return head + b"".join(draw(loosely_packed(v)) for v in value)
    pairs = list(value.items())
    if pairs and draw(st.booleans()):
        pairs = draw(st.permutations(pairs))
    if pairs and draw(st.integers(0, 8)) == 0:
        pairs.append(pairs[0])
    head = _header(draw, _lengths((0xDE, 0xDE, 0xDF))[1:], len(pairs), (0x80, 15))
    return head + b"".join(draw(loosely_packed(k)) + draw(loosely_packed(v)) for k, v in pairs)


@st.composite
def message_bytes(draw: st.DrawFn) -> bytes:
    """Canonical bytes of a random value, loosely packed bytes, or either mutated."""
    value = draw(values)
    data = encoding.encode(value) if draw(st.booleans()) else draw(loosely_packed(value))
    return draw(mutated(data)) if draw(st.booleans()) else data


# -- the core in use ----------------------------------------------------------------------


def test_each_dispatched_name_is_bound_to_the_core_in_use():
    for module, name, reference, native in DISPATCHED:
        bound = getattr(module, name)
        if core.native is None:
            assert bound is reference, (module.__name__, name)
        else:
            expected = getattr(core.native, native) if isinstance(native, str) else native
            assert bound is expected, (module.__name__, name)


@pytest.mark.parametrize("which", ["reference", "native"])
def test_use_core_points_every_name_at_one_core(which, monkeypatch):
    use_core(which, monkeypatch)
    on_native = [getattr(module, name) is not reference for module, name, reference, _ in
                 DISPATCHED]
    assert on_native == [which == "native"] * len(DISPATCHED)


def test_the_native_core_is_built_and_forbids_unsafe_code():
    assert compiled().__name__ == "evidence_ledger._native._core"
    lib = Path(__file__).parent.parent / "ledger" / "_native" / "src" / "lib.rs"
    assert "#![forbid(unsafe_code)]" in lib.read_text()


# -- canonical MessagePack ----------------------------------------------------------------


def _assert_same_decoding(data: bytes) -> None:
    native = compiled()
    raw = _outcome(native.decode, data)
    reference = _outcome(encoding.decode_reference, data)
    if reference[0] == "value":
        assert raw == reference, data.hex()
    else:
        assert raw == ("error", native.NotCanonical, ""), data.hex()
    for checked in (False, True):
        assert _outcome(encoding.decode_native, data, schema_checked=checked) == _outcome(
            encoding.decode_reference, data, schema_checked=checked), (data.hex(), checked)


@FUZZ
@given(message_bytes())
def test_native_decode_fuzz(data):
    _assert_same_decoding(data)


@pytest.mark.parametrize("data", [
    b"", b"\xc1", b"\x91" * 31 + b"\xc0", b"\x91" * 32 + b"\xc0", b"\x91" * 33 + b"\xc0",
    b"\x81\xa1a" * 31 + b"\xc0", b"\x81\xa1a" * 32 + b"\xc0", b"\x91" * 100_000,
    b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff\x00", b"\xdb\xff\xff\xff\xff",
    b"\xa2\xed\xa0", b"\xa3\xed\xa0\x80", b"\xa2\xc0\x80", b"\xa4\xf4\x90\x80\x80",
    b"\xcf" + b"\xff" * 8, b"\xd3\x80" + bytes(7), b"\xd0\xdf", b"\xd0\xe0", b"\xcc\x7f",
    b"\xcc\x80", b"\x82\xa1b\x01\xa2aa\x02", b"\x82\xa2aa\x01\xa1b\x02", b"\x81\x01\x02",
    b"\x81\xc4\x01a\x01", b"\xcb" + struct.pack(">d", 0.5), b"\x81\xa1a\xcb" + bytes(8),
])
def test_native_decode_edges(data):
    """Nesting at and past MAX_DEPTH, counts no input could hold, UTF-8 surrogates and
    overlong forms, integer bounds, key order, floats where schema_checked takes them."""
    _assert_same_decoding(data)


# -- entries ------------------------------------------------------------------------------


@st.composite
def entry_bytes(draw: st.DrawFn) -> bytes:
    """A vector entry with a new seq, time and refs, maybe mutated."""
    entry = decode_entry(draw(st.sampled_from(ENTRY_BYTES)))
    refs = tuple(draw(st.lists(st.binary(min_size=32, max_size=32), max_size=3)))
    data = entry._replace(seq=draw(st.integers(0, 2**64 - 1)),
                          time=draw(st.integers(0, 2**64 - 1)), refs=refs).to_bytes()
    return draw(mutated(data)) if draw(st.booleans()) else data


@FUZZ
@given(entry_bytes())
def test_native_entry_decode_fuzz(data):
    with pytest.MonkeyPatch.context() as patch:
        use_core("reference", patch)
        reference = _outcome(entries.decode_entry, data), _outcome(entries.decode_checked, data)
        use_core("native", patch)
        native = _outcome(entries.decode_entry, data), _outcome(entries.decode_checked, data)
    assert native[0] == reference[0], data.hex()
    if reference[0][0] == "value":  # decode_checked is only for bytes decode_entry took
        assert native[1] == reference[1]
    assert entries.entry_hash_reference(data) == compiled().entry_hash(data)
    assert merkle.leaf_hash_reference(data) == compiled().leaf_hash(data)


_EDGES = [None, True, False, 0, 1, -1, 2**64 - 1, "", "x", "approve", "jcs", "add", "completed",
          "enforce", "A" * 86 + "==", "A" * 85 + "-==", b"", bytes(31), bytes(32), bytes(33),
          [], ["a"], [1], [bytes(32)], {}, {"a": 1}]
_FIELD_VALUES = (
    st.sampled_from(_EDGES) | values
    | st.lists(st.fixed_dictionaries({name: st.none() for name in entries._INTERRUPTION})
               | st.dictionaries(st.sampled_from(sorted(entries._INTERRUPTION)),
                                 st.sampled_from(_EDGES), max_size=5), max_size=2)
)
"""Body and top-level values near the checks' edges: hashes of 31 to 33 bytes, scopes,
enumerated words, signatures, interruption lists."""


@st.composite
def schema_mutated_entries(draw: st.DrawFn) -> bytes:
    """A vector entry, canonical MessagePack still, with a field replaced, dropped or added,
    or its kind changed: bytes that reach the schema checks."""
    entry = msgpack.unpackb(draw(st.sampled_from(ENTRY_BYTES)))
    target = entry["body"] if draw(st.booleans()) else entry
    name = draw(st.sampled_from(sorted(target)))
    change = draw(st.sampled_from(["replace", "replace", "drop", "add", "kind"]))
    if change == "replace":
        target[name] = draw(_FIELD_VALUES)
    elif change == "drop":
        del target[name]
    elif change == "add":
        target[draw(st.text(max_size=12))] = draw(_FIELD_VALUES)
    else:
        entry["kind"] = draw(st.sampled_from([*entries.KINDS, "nope"]))
    return encoding.encode(entry)


def _field_edits() -> list[bytes]:
    """Every vector entry with each of its fields (top level and body) set to each edge
    value in turn, or dropped, and with a field added: every check against every edge."""
    out = []
    for data in ENTRY_BYTES:
        entry = msgpack.unpackb(data)
        for target in (entry, entry["body"]):
            for name in [*target, "extra"]:
                before = target.get(name, _EDGES)
                for value in [*_EDGES, _EDGES]:  # the list itself: drop the field
                    if value is _EDGES:
                        target.pop(name, None)
                    else:
                        target[name] = value
                    out.append(encoding.encode(entry))
                target.pop(name, None)
                if before is not _EDGES:
                    target[name] = before
    return out


def test_native_entry_checks_agree_on_every_field_edge():
    edits = _field_edits()
    with pytest.MonkeyPatch.context() as patch:
        use_core("reference", patch)
        reference = [_outcome(entries.decode_entry, data) for data in edits]
        use_core("native", patch)
        native = [_outcome(entries.decode_entry, data) for data in edits]
        accepted = [_outcome(compiled().EntrySchema.decode, entries.native_schema, data)[0]
                    for data in edits]
    assert sum(r[0] == "value" for r in reference) > 100  # the edits reach every check
    for data, ref, nat, acc in zip(edits, reference, native, accepted, strict=True):
        assert (nat, acc == "value") == (ref, ref[0] == "value"), data.hex()


@FUZZ
@given(schema_mutated_entries())
def test_native_entry_checks_fuzz(data):
    with pytest.MonkeyPatch.context() as patch:
        use_core("reference", patch)
        reference = _outcome(entries.decode_entry, data)
        use_core("native", patch)
        native = _outcome(entries.decode_entry, data)
        assert native == reference, data.hex()
        # and the compiled check alone agrees on what it accepts
        accepted = _outcome(compiled().EntrySchema.decode, entries.native_schema, data)
    assert (accepted[0] == "value") == (reference[0] == "value"), data.hex()


# -- frames -------------------------------------------------------------------------------


@st.composite
def logs(draw: st.DrawFn) -> bytes:
    """Framed records in groups, maybe with damaged bytes, a cut or a zero-filled tail."""
    records = draw(st.lists(st.binary(max_size=24), max_size=6))
    log = b"".join(framing.frame(r, more=draw(st.booleans())) for r in records)
    ending = draw(st.sampled_from(["none", "mutate", "zeros", "huge-length"]))
    if ending == "mutate":
        log = draw(mutated(log))
    elif ending == "zeros":
        log += bytes(draw(st.integers(1, 30)))
    elif ending == "huge-length":
        word = struct.pack(">I", framing.MAX_RECORD + draw(st.integers(1, 5)))
        log += word + struct.pack(">I", __import__("zlib").crc32(word))
    return log


@FUZZ
@given(logs(), st.data())
def test_native_frame_scan_fuzz(log, data):
    start = data.draw(st.integers(0, len(log) + 2))
    limit = data.draw(st.none() | st.integers(-2, len(log) + 2))
    assert _outcome(framing.split_frames_native, log, start, limit) == _outcome(
        framing.split_frames_reference, log, start, limit)
    scans = []
    with pytest.MonkeyPatch.context() as patch:
        for which in ("reference", "native"):
            use_core(which, patch)
            scans.append(_outcome(lambda: list(framing.scan_bytes(log))))
    assert scans[0] == scans[1]


# -- hashes and roots ---------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=200), st.binary(max_size=64),
       st.lists(st.binary(min_size=32, max_size=32) | st.binary(max_size=33), max_size=12))
def test_native_hashes_fuzz(data, other, leaves):
    native = compiled()
    assert native.entry_hash(data) == entries.entry_hash_reference(data)
    assert native.leaf_hash(data) == merkle.leaf_hash_reference(data)
    assert native.node_hash(data, other) == merkle.node_hash_reference(data, other)
    assert _outcome(native.root_of_leaves, leaves) == _outcome(
        merkle.root_of_leaves_reference, leaves)
    assert _outcome(native.root_of_leaves, iter(leaves)) == _outcome(
        merkle.root_of_leaves_reference, iter(leaves))


@pytest.mark.parametrize("leaves", [[], ["not bytes"], 5, [bytes(32)] * 5 + [bytes(31)]])
def test_native_root_of_leaves_refuses_as_the_reference(leaves):
    assert _outcome(compiled().root_of_leaves, leaves) == _outcome(
        merkle.root_of_leaves_reference, leaves)


def _range_trace(cls: Any, start: tuple[Any, Any] | None, leaves: list[Any]) -> list:
    """What a compact range of ``cls`` shows along the way: its ``from_peaks`` error, or
    after each append (or its error), its size, peaks and root."""
    try:
        tree = cls() if start is None else cls.from_peaks(*start)
    except Exception as exc:
        return [("error", type(exc), str(exc))]
    trace = []
    for leaf in leaves:
        trace.append((_outcome(tree.append, leaf), tree.size, tree.peaks, tree.root()))
    return trace


class _Bytes(bytes):
    """A bytes subclass: a leaf hash all the same."""


_H = b"\x11" * 32


@pytest.mark.parametrize("start", [
    lambda: (2**64 - 1, [_H] * 64),  # full: the next append is refused, not wrapped to 0
    lambda: (2**64 - 2, [_H] * 63), lambda: (2**64, [_H]), lambda: (2**64 + 1, [_H]),
    lambda: (-1, []), lambda: (1.0, [_H]), lambda: ("1", [_H]), lambda: (None, [_H]),
    lambda: (1, iter([_H])), lambda: (1, [bytearray(_H)]), lambda: (1, ["a" * 32]),
    lambda: (1, [memoryview(_H)]), lambda: (1, None), lambda: (1, 5), lambda: (3, [_H]),
])
def test_native_compact_range_edges_as_the_reference(start):
    leaves = [_H, _Bytes(_H), _H, bytearray(_H)]
    assert _range_trace(compiled().CompactRange, start(), leaves) == _range_trace(
        merkle.CompactRangeReference, start(), leaves)


@FUZZ
@given(st.none() | st.tuples(st.integers(-2, 2**64 - 1),
                             st.lists(st.binary(min_size=31, max_size=33), max_size=4)),
       st.lists(st.binary(min_size=32, max_size=32) | st.binary(max_size=33) | st.none(),
                max_size=40))
def test_native_compact_range_fuzz(start, leaves):
    assert _range_trace(compiled().CompactRange, start, leaves) == _range_trace(
        merkle.CompactRangeReference, start, leaves)


def test_native_compact_range_from_peaks_round_trip():
    leaves = [bytes([i]) * 32 for i in range(21)]
    tree = compiled().CompactRange()
    for leaf in leaves:
        tree.append(leaf)
    again = compiled().CompactRange.from_peaks(tree.size, tree.peaks)
    assert (again.size, again.root()) == (21, merkle.root_of_leaves_reference(leaves))


@FUZZ
@given(st.lists(entry_bytes() | schema_mutated_entries(), max_size=6))
def test_native_read_entries_fuzz(records):
    def read(which: str) -> tuple[str, bytes, int]:
        with pytest.MonkeyPatch.context() as patch:
            use_core(which, patch)
            tree = merkle.CompactRange()
            pairs = entry_batch.read_entries(records, tree)
            return repr(pairs), tree.root(), tree.size

    assert read("native") == read("reference")
    assert read("reference")[0].count("None") >= sum(  # a refused record gives None
        _outcome(entries.decode_entry_reference, data)[0] == "error" for data in records)


def test_native_read_entries_refuses_what_is_not_bytes():
    with pytest.raises(TypeError):
        compiled().read_entries(["text"], entries.native_schema, compiled().CompactRange())
