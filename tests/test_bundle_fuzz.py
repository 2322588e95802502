"""Fuzz the bundle reader: whatever the bytes, ``verify_bundle`` returns a verified bundle
or raises a :class:`~evidence_ledger.bundle.verify.BundleError`, never anything else.

Inputs: random bytes; a real bundle truncated, with bytes flipped or spliced; envelopes
whose fields hold random JSON of any type; statements and predicates with random JSON in
every field, *signed with the right key*, so the parser behind the signature check is
fuzzed too; and JSON nested 10^5 deep.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evidence_ledger.bundle.build import sign_statement
from evidence_ledger.bundle.verify import BundleError, VerifiedBundle, verify_bundle
from evidence_ledger.storage.keys import load_signer
from evidence_ledger.tlog.note import Signer
from tests.fuzzing import FUZZ
from tests.helpers import ingest, run_cli

DEEP = 100_000

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.text(max_size=20) | st.sampled_from(["", "AAAA", "sha256:" + "0" * 64, "entry/0"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> tuple[bytes, Signer]:
    tmp = tmp_path_factory.mktemp("fuzz")
    ledger, key = tmp / "ledger", tmp / "ledger.key"
    ingest(ledger, "valid")
    assert run_cli("keygen", "--origin", "fuzz.example/log", "--out", str(key)).code == 0
    out = tmp / "b.json"
    result = run_cli("prove", "--ledger", str(ledger), "--key", str(key), "--out", str(out),
                     "--call-id", "c5", "--include-payloads")
    assert result.code == 0, result.err
    return out.read_bytes(), load_signer(key)


def check(data: bytes, signer: Signer) -> None:
    """The property: a verified bundle, or a BundleError (anything else propagates)."""
    try:
        result = verify_bundle(data, [signer.verifier])
    except BundleError as exc:
        assert str(exc).startswith("bundle not authentic: ") and "\n" not in str(exc)
        return
    assert isinstance(result, VerifiedBundle)


def _statement(data: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(base64.b64decode(json.loads(data)["payload"]))
    return doc


@FUZZ
@given(st.binary(max_size=2048))
def test_random_bytes(real, blob):
    check(blob, real[1])


@FUZZ
@given(st.data())
def test_truncated_flipped_and_spliced_bundles(real, data):
    bundle, signer = real
    cut = data.draw(st.integers(0, len(bundle)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(bundle) - 1), st.integers(1, 255)),
                               max_size=4))
    mutated = bytearray(bundle[:cut] if data.draw(st.booleans()) else bundle)
    for at, bit in flips:
        if at < len(mutated):
            mutated[at] ^= bit
    insert = data.draw(st.binary(max_size=16))
    at = data.draw(st.integers(0, len(mutated)))
    check(bytes(mutated[:at]) + insert + bytes(mutated[at:]), signer)


@FUZZ
@given(st.sampled_from(["payload", "payloadType", "signatures", "extra"]), json_values)
def test_envelope_fields_of_any_type(real, field, value):
    envelope = json.loads(real[0])
    envelope[field] = value
    check(json.dumps(envelope).encode(), real[1])


PATHS = [
    ("_type",), ("subject",), ("subject", 0), ("subject", 0, "name"), ("subject", 0, "digest"),
    ("predicateType",), ("predicate",), ("predicate", "format_version"),
    ("predicate", "selection"), ("predicate", "selection", "mode"),
    ("predicate", "selection", "call_id"), ("predicate", "checkpoint"),
    ("predicate", "proof_form"), ("predicate", "entries"), ("predicate", "entries", 0),
    ("predicate", "entries", 0, "seq"), ("predicate", "entries", 0, "data"),
    ("predicate", "entries", 0, "proof"), ("predicate", "entries", 0, "proof", 0),
    ("predicate", "payloads"), ("predicate", "verdict"), ("predicate", "verdict", "ok"),
    ("predicate", "verdict", "rules"), ("predicate", "verdict", "violations"),
    ("predicate", "absence"), ("predicate", "absence", "proven"),
    ("predicate", "absence", "statement"),
]


@FUZZ
@given(st.sampled_from(PATHS), json_values)
def test_signed_statements_with_fields_of_any_type(real, path, value):
    """Signed with the right key: only the statement parser stands between the value and
    the checks behind it."""
    bundle, signer = real
    statement = _statement(bundle)
    node: Any = statement
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    check(sign_statement(json.dumps(statement).encode(), signer), signer)


@FUZZ
@given(json_values)
def test_signed_payloads_of_any_json(real, value):
    check(sign_statement(json.dumps(value).encode(), real[1]), real[1])


@FUZZ
@given(st.binary(max_size=512))
def test_signed_payloads_of_any_bytes(real, blob):
    check(sign_statement(blob, real[1]), real[1])


@pytest.mark.parametrize("opener,closer", [("[", "]"), ('{"a":', "}")])
def test_json_nested_100000_deep(real, opener, closer, tmp_path: Path):
    deep = (opener * DEEP + "1" + closer * DEEP).encode()
    _bundle, signer = real
    for data in (deep, sign_statement(deep, signer)):
        with pytest.raises(BundleError, match="nested too deeply"):
            verify_bundle(data, [signer.verifier])
    path = tmp_path / "deep.json"
    path.write_bytes(deep)
    result = run_cli("verify-proof", str(path), "--verifier-key", signer.verifier.vkey)
    assert result.code == 1
    assert result.err == ("evidence-ledger: error: bundle not authentic: bundle: JSON nested "
                          "too deeply\n")


def test_deep_nesting_inside_a_field(real):
    bundle, signer = real
    envelope = json.loads(bundle)
    text = json.dumps(envelope).replace('"payloadType": "application/vnd.in-toto+json"',
                                        '"payloadType": ' + "[" * DEEP + "]" * DEEP)
    with pytest.raises(BundleError):
        verify_bundle(text.encode(), [signer.verifier])
