"""Inputs from an adversarial trial: each once made a command lose data, leak or crash."""

import os

from tests.helpers import ingest, run_cli


def _keyed(tmp_path):
    ledger = tmp_path / "l"
    ingest(ledger)
    key = tmp_path / "k.key"
    assert run_cli("keygen", "--origin", "example.com/log", "--out", str(key)).code == 0
    return ledger, key


def test_query_index_option_never_replaces_a_file_that_is_not_an_index(tmp_path):
    ledger, _ = _keyed(tmp_path)
    before = (ledger / "log.bin").read_bytes()
    result = run_cli("query", "--ledger", str(ledger), "--index", str(ledger / "log.bin"),
                     "SELECT 1")
    assert result.code == 2 and "not a DuckDB index" in result.err
    assert (ledger / "log.bin").read_bytes() == before


def test_prove_never_overwrites_its_output(tmp_path):
    ledger, key = _keyed(tmp_path)
    out = tmp_path / "keep.json"
    out.write_text("precious")
    result = run_cli("prove", "--ledger", str(ledger), "--key", str(key), "--all",
                     "--out", str(out))
    assert result.code == 2 and "exists" in result.err and out.read_text() == "precious"


def test_a_key_inside_the_ledger_directory_is_refused(tmp_path):
    ledger, key = _keyed(tmp_path)
    inside = ledger / "k.key"
    inside.write_bytes(key.read_bytes())
    os.chmod(inside, 0o600)
    for args in (["checkpoint"], ["prove", "--all", "--out", str(tmp_path / "b.json")]):
        result = run_cli(*args, "--ledger", str(ledger), "--key", str(inside))
        assert result.code == 2 and "inside the ledger directory" in result.err


def test_a_private_key_given_as_verifier_key_is_never_echoed(tmp_path):
    ledger, key = _keyed(tmp_path)
    secret = key.read_text().strip()
    result = run_cli("verify", "--ledger", str(ledger), "--verifier-key", secret)
    assert result.code == 2 and "PRIVATE key" in result.err
    assert secret.rsplit("+", 1)[-1] not in result.err


def test_fifos_and_unstorable_ingest_lines_are_bad_input(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert run_cli("ingest", str(fifo), "--ledger", str(tmp_path / "l")).code == 2
    for line in ('{"kind":"run_end","status":"completed","time":1.0}',
                 '{"kind":"run_end","status":"completed","run_id":"\\ud800"}',
                 '{"kind":"run_end","status":"completed","time":18446744073709551615}'):
        events = tmp_path / "events.jsonl"
        events.write_text(line + "\n")
        result = run_cli("ingest", str(events), "--ledger", str(tmp_path / "l"))
        assert result.code == 2 and "line 1" in result.err, (line, result.err)
