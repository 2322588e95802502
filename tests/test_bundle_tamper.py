"""Tampered bundles: one case per field, each named after its tampering, walked by one
parametrised test. Every case must make ``verify-proof`` exit 1 with one line naming what
failed, never a traceback.

Most fields are tampered twice: left unsigned (the DSSE signature over the payload fails
first), and re-signed with the right ledger key, so the check behind the signature
(subject digests, inclusion proofs, checkpoint signature, hash links, payloads, the
verdict re-derived from the entries) is the one that must catch it.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from evidence_ledger.bundle.build import sign_statement
from evidence_ledger.bundle.verify import BundleError, verify_bundle
from evidence_ledger.format.entries import Entry, decode_entry
from evidence_ledger.storage.keys import load_signer
from evidence_ledger.tlog.note import Signer, sign_note
from tests.helpers import ingest, run_cli

ORIGIN = "ledger.example/tamper"

Doc = dict[str, Any]


@dataclass(frozen=True)
class Case:
    """One tampering: ``change`` edits the statement (and may return a whole new file)."""

    name: str
    change: Callable[[Doc, Doc, Any], bytes | None]
    resign: bool
    want: str


@pytest.fixture(scope="module")
def signed(tmp_path_factory) -> tuple[bytes, Signer, str, Signer]:
    """A bundle proving a tool_linkage violation (payloads included), its key, the
    verifier key, and another key."""
    tmp = tmp_path_factory.mktemp("tamper")
    ledger = tmp / "ledger"
    ingest(ledger, "tool_linkage")
    ingest(ledger, "valid")
    key, other = tmp / "ledger.key", tmp / "other.key"
    vkey = run_cli("keygen", "--origin", ORIGIN, "--out", str(key)).out.strip()
    assert run_cli("keygen", "--origin", "other.example/log", "--out", str(other)).code == 0
    out = tmp / "bundle.json"
    result = run_cli("prove", "--ledger", str(ledger), "--key", str(key), "--out", str(out),
                     "--call-id", "c-update", "--include-payloads")
    assert result.code == 0, result.err
    return out.read_bytes(), load_signer(key), vkey, load_signer(other)


def _entries(statement: Doc) -> list[Doc]:
    entries: list[Doc] = statement["predicate"]["entries"]
    return entries


def _flip(text: str, at: int = 3) -> str:
    """Base64 text with one bit of its decoded byte ``at`` flipped."""
    raw = bytearray(base64.b64decode(text))
    raw[at % len(raw)] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


def _index(statement: Doc, kind: str) -> int:
    for i, item in enumerate(_entries(statement)):
        if decode_entry(base64.b64decode(item["data"])).kind == kind:
            return i
    raise AssertionError(kind)


def _set_entry(statement: Doc, i: int, entry: Entry) -> None:
    data = entry.to_bytes()
    _entries(statement)[i]["data"] = base64.b64encode(data).decode()
    statement["subject"][i]["digest"]["sha256"] = hashlib.sha256(data).hexdigest()


# -- the changes ---------------------------------------------------------------------------


def entry_byte(s: Doc, env: Doc, keys: Any) -> None:
    item = _entries(s)[_index(s, "execution")]
    item["data"] = _flip(item["data"], 40)


def entry_body_and_subject(s: Doc, env: Doc, keys: Any) -> None:
    i = _index(s, "execution")
    entry = decode_entry(base64.b64decode(_entries(s)[i]["data"]))
    _set_entry(s, i, entry._replace(body={**entry.body, "error": "forged"}))


def proof_bit(s: Doc, env: Doc, keys: Any) -> None:
    item = _entries(s)[0]
    item["proof"][0] = _flip(item["proof"][0], 7)


def proof_hash_dropped(s: Doc, env: Doc, keys: Any) -> None:
    _entries(s)[1]["proof"].pop()


def proof_swapped(s: Doc, env: Doc, keys: Any) -> None:
    entries = _entries(s)
    entries[0]["proof"], entries[1]["proof"] = entries[1]["proof"], entries[0]["proof"]


def checkpoint_root(s: Doc, env: Doc, keys: Any) -> None:
    origin, size, root, rest = s["predicate"]["checkpoint"].split("\n", 3)
    s["predicate"]["checkpoint"] = "\n".join((origin, size, _flip(root, 0), rest))


def checkpoint_size(s: Doc, env: Doc, keys: Any) -> None:
    origin, size, rest = s["predicate"]["checkpoint"].split("\n", 2)
    s["predicate"]["checkpoint"] = "\n".join((origin, str(int(size) + 1), rest))


def checkpoint_signature(s: Doc, env: Doc, keys: Any) -> None:
    text, _, sig = s["predicate"]["checkpoint"].rpartition("\n\n— ")
    name, b64 = sig.rstrip("\n").split(" ")
    s["predicate"]["checkpoint"] = f"{text}\n\n— {name} {_flip(b64, 20)}\n"


def checkpoint_by_other_key(s: Doc, env: Doc, keys: Any) -> None:
    text = s["predicate"]["checkpoint"].partition("\n\n")[0] + "\n"
    s["predicate"]["checkpoint"] = sign_note(text, [keys[1]]).decode()


def envelope_payload_byte(s: Doc, env: Doc, keys: Any) -> bytes:
    env["payload"] = _flip(env["payload"], 200)
    return json.dumps(env).encode()


def envelope_signature_byte(s: Doc, env: Doc, keys: Any) -> bytes:
    env["signatures"][0]["sig"] = _flip(env["signatures"][0]["sig"], 5)
    return json.dumps(env).encode()


def envelope_payload_type(s: Doc, env: Doc, keys: Any) -> bytes:
    env["payloadType"] = "application/json"
    return json.dumps(env).encode()


def envelope_signature_dropped(s: Doc, env: Doc, keys: Any) -> bytes:
    env["signatures"] = []
    return json.dumps(env).encode()


def swapped_key(s: Doc, env: Doc, keys: Any) -> bytes:
    """Checkpoint and envelope both re-signed with another key."""
    text = s["predicate"]["checkpoint"].partition("\n\n")[0] + "\n"
    s["predicate"]["checkpoint"] = sign_note(text, [keys[1]]).decode()
    return sign_statement(json.dumps(s).encode(), keys[1])


def envelope_by_other_key(s: Doc, env: Doc, keys: Any) -> bytes:
    return sign_statement(json.dumps(s).encode(), keys[1])


def entry_dropped_call(s: Doc, env: Doc, keys: Any) -> None:
    i = _index(s, "call")
    del _entries(s)[i], s["subject"][i]


def entry_dropped_execution(s: Doc, env: Doc, keys: Any) -> None:
    i = _index(s, "execution")
    del _entries(s)[i], s["subject"][i]


def entry_added_forged(s: Doc, env: Doc, keys: Any) -> None:
    entries = _entries(s)
    last = decode_entry(base64.b64decode(entries[-1]["data"]))
    forged = last._replace(seq=last.seq + 1, body={**last.body})
    entries.append({"seq": forged.seq, "data": "", "proof": list(entries[-1]["proof"])})
    s["subject"].append({"name": f"entry/{forged.seq}", "digest": {"sha256": ""}})
    _set_entry(s, len(entries) - 1, forged)


def entry_duplicated(s: Doc, env: Doc, keys: Any) -> None:
    _entries(s).append(copy.deepcopy(_entries(s)[-1]))
    s["subject"].append(copy.deepcopy(s["subject"][-1]))


def subject_digest(s: Doc, env: Doc, keys: Any) -> None:
    s["subject"][0]["digest"]["sha256"] = "0" * 64


def subject_dropped(s: Doc, env: Doc, keys: Any) -> None:
    s["subject"].pop()


def verdict_cleared(s: Doc, env: Doc, keys: Any) -> None:
    s["predicate"]["verdict"].update(ok=True, violations=[])


def verdict_violation_added(s: Doc, env: Doc, keys: Any) -> None:
    v = dict(s["predicate"]["verdict"]["violations"][0], rule="exactly_once", detail="made up")
    s["predicate"]["verdict"]["violations"].append(v)


def verdict_detail_edited(s: Doc, env: Doc, keys: Any) -> None:
    s["predicate"]["verdict"]["violations"][0]["detail"] = "nothing to see"


def verdict_ok_flipped(s: Doc, env: Doc, keys: Any) -> None:
    s["predicate"]["verdict"]["ok"] = True


def absence_claimed(s: Doc, env: Doc, keys: Any) -> None:
    s["predicate"]["absence"].update(proven=True, basis="whole-log")


def absence_statement_rewritten(s: Doc, env: Doc, keys: Any) -> None:
    s["predicate"]["absence"]["statement"] = "No other execution exists anywhere. Trust us."


def absence_statement_size_changed(s: Doc, env: Doc, keys: Any) -> None:
    absence = s["predicate"]["absence"]
    absence["statement"] = absence["statement"].replace("tree size ", "tree size 1")


def verdict_unknown_rule_claimed(s: Doc, env: Doc, keys: Any) -> None:
    s["predicate"]["verdict"]["violations"].append({
        "rule": "made_up_rule", "run_id": None, "scope": [], "call_id": None, "seq": None,
        "detail": "the ledger key says so",
    })


def verdict_unknown_rule_listed(s: Doc, env: Doc, keys: Any) -> None:
    s["predicate"]["verdict"]["rules"].append("made_up_rule")


def verdict_rule_not_run_claimed(s: Doc, env: Doc, keys: Any) -> None:
    verdict = s["predicate"]["verdict"]
    verdict["rules"].remove("append_only")
    verdict["violations"].append({
        "rule": "append_only", "run_id": None, "scope": [], "call_id": None, "seq": None,
        "detail": "rolled back",
    })


def payload_byte(s: Doc, env: Doc, keys: Any) -> None:
    payloads = s["predicate"]["payloads"]
    first = sorted(payloads)[0]
    payloads[first] = _flip(payloads[first], 0)


def payload_unnamed(s: Doc, env: Doc, keys: Any) -> None:
    s["predicate"]["payloads"]["sha256:" + hashlib.sha256(b"x").hexdigest()] = "eA=="


def selection_changed(s: Doc, env: Doc, keys: Any) -> None:
    s["predicate"]["selection"]["call_id"] = "c-other"


def trailing_garbage(s: Doc, env: Doc, keys: Any) -> bytes:
    return json.dumps(env).encode() + b"}"


def truncated(s: Doc, env: Doc, keys: Any) -> bytes:
    return json.dumps(env).encode()[:-40]


SIG = "envelope signature"
CASES = [
    Case("entry-byte-flipped", entry_byte, False, SIG),
    Case("entry-byte-flipped-resigned", entry_byte, True, "does not match the entry bytes"),
    Case("entry-and-subject-forged-resigned", entry_body_and_subject, True,
         "inclusion proof of entry/"),
    Case("proof[0]-bit-flipped", proof_bit, False, SIG),
    Case("proof[0]-bit-flipped-resigned", proof_bit, True, "inclusion proof of entry/"),
    Case("proof-hash-dropped-resigned", proof_hash_dropped, True, "inclusion proof of entry/"),
    Case("proofs-swapped-resigned", proof_swapped, True, "inclusion proof of entry/"),
    Case("checkpoint-root-changed", checkpoint_root, False, SIG),
    Case("checkpoint-root-changed-resigned", checkpoint_root, True,
         "checkpoint: invalid signature"),
    Case("checkpoint-size-changed-resigned", checkpoint_size, True,
         "checkpoint: invalid signature"),
    Case("checkpoint-signature-byte-resigned", checkpoint_signature, True,
         "checkpoint: invalid signature"),
    Case("checkpoint-by-other-key-resigned", checkpoint_by_other_key, True,
         "checkpoint: note has no signature by a given verifier key"),
    Case("envelope-payload-byte-flipped", envelope_payload_byte, False, "bundle not authentic: "),
    Case("envelope-signature-byte-flipped", envelope_signature_byte, False, SIG),
    Case("envelope-payload-type-changed", envelope_payload_type, False, SIG),
    Case("envelope-signature-dropped", envelope_signature_dropped, False,
         "envelope.signatures: has 0 signatures"),
    Case("swapped-key", swapped_key, False, SIG + ": signed by a key with key id "),
    Case("envelope-by-other-key", envelope_by_other_key, False, SIG),
    Case("entry-dropped", entry_dropped_call, False, SIG),
    Case("call-entry-dropped-resigned", entry_dropped_call, True, "names no bundled call entry"),
    Case("execution-entry-dropped-resigned", entry_dropped_execution, True,
         "verdict: the bundled entries show output_provenance"),
    Case("entry-added", entry_added_forged, False, SIG),
    Case("forged-entry-added-resigned", entry_added_forged, True, "inclusion proof of entry/"),
    Case("entry-duplicated-resigned", entry_duplicated, True, "out of order or repeated"),
    Case("subject-digest-changed-resigned", subject_digest, True,
         "does not match the entry bytes"),
    Case("subject-dropped-resigned", subject_dropped, True, "subjects for"),
    Case("verdict-cleared", verdict_cleared, False, SIG),
    Case("verdict-cleared-resigned", verdict_cleared, True,
         "verdict: the bundled entries show tool_linkage at seq 2, call c-update"),
    Case("verdict-violation-added-resigned", verdict_violation_added, True,
         "verdict: claims exactly_once at seq 2"),
    Case("verdict-detail-edited-resigned", verdict_detail_edited, True, "verdict: the bundled"),
    Case("verdict-ok-flipped-resigned", verdict_ok_flipped, True,
         "verdict: says ok=true with 1 violation(s)"),
    Case("absence-claimed-resigned", absence_claimed, True,
         "absence: claims proven=true (whole-log); a subset of the log cannot prove absence"),
    Case("absence-statement-rewritten-resigned", absence_statement_rewritten, True,
         "absence: the statement is not the one a bundle of this form and tree size carries"),
    Case("absence-statement-size-changed-resigned", absence_statement_size_changed, True,
         "absence: the statement is not the one a bundle of this form and tree size carries"),
    Case("verdict-unknown-rule-claimed-resigned", verdict_unknown_rule_claimed, True,
         "verdict: claims a violation of 'made_up_rule', a rule the verifier did not run"),
    Case("verdict-unknown-rule-listed-resigned", verdict_unknown_rule_listed, True,
         "verdict: lists 'made_up_rule', not a rule of the ledger's verifier"),
    Case("verdict-rule-not-run-claimed-resigned", verdict_rule_not_run_claimed, True,
         "verdict: claims a violation of 'append_only', a rule the verifier did not run"),
    Case("payload-byte-flipped", payload_byte, False, SIG),
    Case("payload-byte-flipped-resigned", payload_byte, True, "its bytes hash to"),
    Case("payload-unnamed-added-resigned", payload_unnamed, True, "is named by no bundled entry"),
    Case("selection-changed-resigned", selection_changed, True,
         "selection: no bundled entry belongs to call c-other"),
    Case("trailing-garbage", trailing_garbage, False, "bundle: not JSON"),
    Case("truncated", truncated, False, "bundle: not JSON"),
]


def tamper(signed: tuple[bytes, Signer, str, Signer], case: Case) -> bytes:
    data, key, _vkey, other = signed
    envelope = json.loads(data)
    statement = json.loads(base64.b64decode(envelope["payload"]))
    whole = case.change(statement, envelope, (key, other))
    if whole is not None:
        return whole
    payload = json.dumps(statement).encode()
    if case.resign:
        return sign_statement(payload, key)
    envelope["payload"] = base64.b64encode(payload).decode()
    return json.dumps(envelope).encode()


def test_the_untampered_bundle_verifies(signed):
    data, key, _vkey, _ = signed
    assert verify_bundle(data, [key.verifier]).verdict[0].rule == "tool_linkage"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_tampering_is_caught_and_named(signed, case, tmp_path):
    _data, key, vkey, _ = signed
    bad = tamper(signed, case)
    with pytest.raises(BundleError) as caught:
        verify_bundle(bad, [key.verifier])
    assert case.want in str(caught.value), str(caught.value)

    path = tmp_path / f"{case.name}.json"
    path.write_bytes(bad)
    result = run_cli("verify-proof", str(path), "--verifier-key", vkey)
    assert result.code == 1, (result.out, result.err)
    assert result.out == ""
    assert result.err == f"evidence-ledger: error: {caught.value}\n"
    assert "Traceback" not in result.err and "internal error" not in result.err


def test_a_bundle_checked_with_another_key_is_not_authentic(signed, tmp_path):
    data, _key, _vkey, other = signed
    path = tmp_path / "b.json"
    path.write_bytes(data)
    result = run_cli("verify-proof", str(path), "--verifier-key", other.verifier.vkey)
    assert result.code == 1
    assert result.err.startswith("evidence-ledger: error: bundle not authentic: envelope "
                                 "signature: signed by a key with key id ")
    assert f"not by the given key ({other.verifier.vkey})" in result.err


def _resigned(signed: tuple[bytes, Signer, str, Signer], statement: Doc) -> bytes:
    return sign_statement(json.dumps(statement).encode(), signed[1])


def test_every_byte_of_an_entry_with_its_subject_updated(signed):
    """Any changed byte of an entry, even with a matching subject digest and a valid
    envelope signature, leaves the entry out of the signed tree."""
    data, key, _, _ = signed
    base = json.loads(base64.b64decode(json.loads(data)["payload"]))
    raw = base64.b64decode(_entries(base)[0]["data"])
    for at in range(len(raw)):
        statement = copy.deepcopy(base)
        changed = bytearray(raw)
        changed[at] ^= 0x20
        _entries(statement)[0]["data"] = base64.b64encode(bytes(changed)).decode()
        statement["subject"][0]["digest"]["sha256"] = hashlib.sha256(changed).hexdigest()
        with pytest.raises(BundleError, match="inclusion proof of entry/"):
            verify_bundle(_resigned(signed, statement), [key.verifier])


def test_every_byte_of_a_proof_and_of_the_checkpoint(signed):
    data, key, _, _ = signed
    base = json.loads(base64.b64decode(json.loads(data)["payload"]))
    proof = _entries(base)[0]["proof"]
    for i in range(len(proof)):
        for at in range(32):
            statement = copy.deepcopy(base)
            _entries(statement)[0]["proof"][i] = _flip(proof[i], at)
            with pytest.raises(BundleError, match="inclusion proof of entry/"):
                verify_bundle(_resigned(signed, statement), [key.verifier])
    note = base["predicate"]["checkpoint"]
    for at in range(len(note)):
        statement = copy.deepcopy(base)
        statement["predicate"]["checkpoint"] = note[:at] + chr(ord(note[at]) ^ 0x01) + note[at + 1:]
        with pytest.raises(BundleError, match="checkpoint"):
            verify_bundle(_resigned(signed, statement), [key.verifier])


def test_the_offline_verifier_knows_every_rule_the_ledger_verifier_runs(tmp_path):
    from evidence_ledger.bundle.verify import LEDGER_RULES
    from evidence_ledger.storage.ledger_dir import Ledger
    from evidence_ledger.verify import checkpoint_audit
    from evidence_ledger.verify.audit import verify_ledger

    ingest(tmp_path)
    for payloads in (True, False):
        assert set(verify_ledger(Ledger(tmp_path), payloads=payloads).rules) <= set(LEDGER_RULES)
    assert set(checkpoint_audit.RULES) <= set(LEDGER_RULES)


def test_a_verdict_re_signed_without_a_new_rule_shows_what_it_leaves_out(tmp_path):
    """A verdict that does not list ``output_not_persisted`` (as one signed before the rule
    existed) still verifies, and the violation the entries show is named, as not covered."""
    ledger, key = tmp_path / "ledger", tmp_path / "k"
    ingest(ledger, "output_not_persisted")
    vkey = run_cli("keygen", "--origin", ORIGIN, "--out", str(key)).out.strip()
    out = tmp_path / "b.json"
    assert run_cli("prove", "--ledger", str(ledger), "--key", str(key), "--out", str(out),
                   "--call-id", "c-update").code == 0
    statement = json.loads(base64.b64decode(json.loads(out.read_bytes())["payload"]))
    verdict = statement["predicate"]["verdict"]
    verdict["rules"].remove("output_not_persisted")
    verdict["violations"], verdict["ok"] = [], True
    out.write_bytes(sign_statement(json.dumps(statement).encode(), load_signer(key)))

    verified = verify_bundle(out.read_bytes(), [load_signer(key).verifier])
    assert verified.ok and [f.rule for f in verified.uncovered] == ["output_not_persisted"]
    # verify-proof re-ran it: not among the rules it leaves to verify on the ledger (breaker:
    # it was listed there too)
    assert verified.not_in_verdict == ("guard_verdict", "guard_bypassed")
    result = run_cli("verify-proof", str(out), "--verifier-key", vkey)
    assert result.code == 0
    assert "warning: the bundled entries show 1 violation(s) of rules the signed verdict " \
        "does not list" in result.out
    assert "output_not_persisted at seq 7" in result.out
