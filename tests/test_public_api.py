"""The public API: ``evidence_ledger.__all__``, its version, and lazy loading.

Verifying needs only the base install: ``--version``, ``verify-proof`` and
``verify-checkpoint`` run with the Agents SDK, DuckDB and pyarrow unimportable, and a
command that needs one of them exits 2 naming the extra to install. The real installs
(a wheel in fresh venvs) are checked by ``tests/test_install.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import evidence_ledger as el

from .helpers import ingest, run_cli

ROOT = Path(__file__).resolve().parent.parent
OPTIONAL = ("agents", "duckdb", "pyarrow", "opentelemetry")

# Run in a fresh interpreter: the optional packages cannot be imported, then the CLI runs
# with sys.argv[1:]; prints which optional modules got loaded, then the exit code.
BLOCKED = f"""
import sys
OPTIONAL = {OPTIONAL!r}

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in OPTIONAL:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
from evidence_ledger.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
loaded = sorted(m for m in sys.modules if m.partition(".")[0] in OPTIONAL)
print("LOADED", loaded, "EXIT", code, file=sys.stderr)
"""


def _without_extras(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCKED, *args], capture_output=True,
                          text=True, cwd=cwd, check=False, timeout=120)


@pytest.fixture(scope="module")
def evidence(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path | str]:
    """A ledger with a stored checkpoint and a bundle proving run-1, made with all extras."""
    tmp = tmp_path_factory.mktemp("evidence")
    ledger, key, bundle = tmp / "book", tmp / "signing.key", tmp / "bundle.json"
    ingest(ledger)
    vkey = run_cli("keygen", "--origin", "test.example/log", "--out", str(key)).out.strip()
    assert run_cli("checkpoint", "--ledger", str(ledger), "--key", str(key)).code == 0
    proved = run_cli("prove", "--ledger", str(ledger), "--key", str(key), "--out", str(bundle),
                     "--all")
    assert proved.code == 0, proved.err
    return {"tmp": tmp, "ledger": ledger, "vkey": vkey, "bundle": bundle,
            "checkpoint": ledger / "checkpoints" / "00000001.note"}


def test_all_names_the_public_api_and_each_loads():
    public = set(el._PUBLIC)
    assert set(el.__all__) == public | {"__version__"}
    for name in sorted(public):
        assert getattr(el, name).__name__ == name.rpartition(".")[2]
    assert el.Ledger.__module__ == "evidence_ledger.api.handle"
    with pytest.raises(AttributeError, match="no attribute 'EvidenceWriter'"):
        _ = el.EvidenceWriter


def test_the_version_is_one_string_in_one_place():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["dynamic"] == ["version"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "evidence_ledger.__version__"
    assert run_cli("--version").out == f"evidence-ledger {el.__version__} ({el.core_in_use()})\n"


def test_importing_the_package_loads_nothing_optional():
    code = ("import sys, evidence_ledger as el; el.verify_bundle; el.Ledger; "
            f"print(sorted(m for m in sys.modules if m.partition('.')[0] in {OPTIONAL!r}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout == "[]\n"


def test_version_without_the_extras(tmp_path: Path):
    done = _without_extras("--version", cwd=tmp_path)
    assert done.stdout == f"evidence-ledger {el.__version__} ({el.core_in_use()})\n"
    assert done.stderr.endswith("LOADED [] EXIT 0\n"), done.stderr


def test_verify_proof_without_the_extras(evidence):
    done = _without_extras("verify-proof", str(evidence["bundle"]), "--verifier-key",
                           str(evidence["vkey"]), "--json", cwd=evidence["tmp"])
    assert done.stderr.endswith("LOADED [] EXIT 0\n"), done.stderr
    assert json.loads(done.stdout)["verdict"]["ok"] is True


def test_verify_checkpoint_without_the_extras(evidence):
    done = _without_extras("verify-checkpoint", str(evidence["checkpoint"]),
                           "--verifier-key", str(evidence["vkey"]), cwd=evidence["tmp"])
    assert done.stderr.endswith("LOADED [] EXIT 0\n"), done.stderr
    assert done.stdout.startswith("checkpoint OK: origin test.example/log, tree size ")


def test_verify_without_the_extras(evidence):
    done = _without_extras("verify", "--ledger", str(evidence["ledger"]), "--verifier-key",
                           str(evidence["vkey"]), cwd=evidence["tmp"])
    assert done.stderr.endswith("LOADED [] EXIT 0\n"), done.stderr


def test_query_list_without_the_extras(tmp_path: Path):
    done = _without_extras("query", "--list", "--json", cwd=tmp_path)
    assert done.stderr.endswith("LOADED [] EXIT 0\n"), done.stderr
    assert [q["name"] for q in json.loads(done.stdout)] == [q.name for q in el.named_queries()]


@pytest.mark.parametrize(("args", "extra", "what", "first_missing"), [
    (("demo", "--ledger", "new"), "agents", "demo", "openai-agents"),
    (("query", "SELECT 1"), "query", "query", "duckdb"),
    (("trace", "c-1"), "query", "trace", "duckdb"),
    (("export", "--format", "csv", "--out", "exported", "--key", "signing.key"), "query",
     "export", "duckdb"),
    (("verify-export", "exported", "--verifier-key", "{vkey}"), "query", "verify-export",
     "duckdb"),
])
def test_a_command_whose_extra_is_missing_names_it(evidence, args, extra, what, first_missing):
    ledger = () if args[0] in ("demo", "verify-export") else ("--ledger", str(evidence["ledger"]))
    args = tuple(arg.format(vkey=evidence["vkey"]) for arg in args)
    done = _without_extras(*args, *ledger, cwd=evidence["tmp"])
    assert done.stdout == ""
    first, last = done.stderr.splitlines()
    packages = ("'openai-agents<0.25,>=0.20.0'" if extra == "agents"
                else "'duckdb>=1.1' 'pyarrow>=15' 'opentelemetry-semantic-conventions==0.66b2'")
    assert first == (f"evidence-ledger: error: {what} needs the '{extra}' extra "
                     f"({first_missing} is not installed): "
                     f"pip install {packages} (or install this project with [{extra}])")
    assert last.endswith("EXIT 2")
    assert not (evidence["tmp"] / "new").exists() and not (evidence["tmp"] / "exported").exists()


def test_the_recorder_without_its_extra_names_it(tmp_path: Path):
    code = BLOCKED.split("from evidence_ledger.cli.main")[0] + (
        "import evidence_ledger as el\n"
        "from evidence_ledger import *\n"  # every public name can be listed and imported
        "assert hasattr(el, 'Recorder') and 'Not available' in el.Recorder.__doc__\n"
        "try:\n    el.Recorder('ledger')\nexcept el.MissingExtraError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=tmp_path)
    assert done.stdout == ("Recorder needs the 'agents' extra (openai-agents is not installed): "
                           "pip install 'openai-agents<0.25,>=0.20.0' "
                           "(or install this project with [agents])\n")


def test_keys_are_passed_one_way_and_a_wrong_type_is_named(evidence, tmp_path: Path):
    ledger, vkey = el.Ledger(evidence["ledger"]), str(evidence["vkey"])
    assert ledger.verify(vkey).ok and ledger.verify([vkey]).ok  # one string is one key
    assert el.verify_bundle(evidence["bundle"], vkey).ok
    key = el.SigningKey.generate(tmp_path / "k.key", "test.example/log")
    with pytest.raises(TypeError, match=r"not SigningKey: pass key\.verifier_key"):
        ledger.verify([key])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"SigningKey objects \(SigningKey.load\(path\)\), not str"):
        ledger.checkpoint(str(tmp_path / "k.key"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not PosixPath"):
        ledger.prove(tmp_path / "b.json", tmp_path / "k.key", whole_log=True)  # type: ignore[arg-type]
    assert not (tmp_path / "b.json").exists()


def test_a_ledger_that_cannot_be_made_is_bad_usage(tmp_path: Path):
    (tmp_path / "afile").write_text("")
    with pytest.raises(el.UsageError, match="afile is not a directory"):
        el.Ledger(tmp_path / "afile" / "x", create=True)
    events = ROOT / "tests" / "data" / "rules" / "valid.jsonl"
    done = run_cli("ingest", str(events), "--ledger", str(tmp_path / "afile" / "x"))
    assert (done.code, done.out) == (2, "")
    assert done.err == (f"evidence-ledger: error: cannot create {tmp_path}/afile/x: "
                        f"{tmp_path}/afile is not a directory\n")


def test_a_long_signer_key_is_shown_whole(tmp_path: Path):
    ingest(tmp_path / "book")
    signer = el.SigningKey.generate(tmp_path / "long.key", "a-long-name-" + "x" * 100 + ".example")
    el.Ledger(tmp_path / "book").prove(tmp_path / "b.json", signer, whole_log=True)
    other = el.SigningKey.generate(tmp_path / "other.key", "other.example/log")
    with pytest.raises(el.EvidenceError) as raised:
        el.verify_bundle(tmp_path / "b.json", other.verifier_key)
    assert "signed by a key with key id " in str(raised.value)
    assert f"not by the given key ({other.verifier_key})" in str(raised.value)  # whole


@pytest.mark.parametrize(("since", "error", "match"), [
    (2**64, el.UsageError, "lies past 2262-04-11"),
    (-1, el.UsageError, "lies before 1970-01-01"),
    (True, TypeError, "not bool"),
])
def test_export_holds_int_times_to_the_text_range(evidence, tmp_path, since, error, match):
    with pytest.raises(error, match=match):
        el.Ledger(evidence["ledger"]).export(
            tmp_path / "out", "jsonl", el.SigningKey.load(evidence["tmp"] / "signing.key"),
            since=since)
    assert not (tmp_path / "out").exists()


def test_a_wrong_python_type_is_a_type_error_naming_the_argument(evidence, tmp_path):
    ledger = el.Ledger(evidence["ledger"])
    key = el.SigningKey.generate(tmp_path / "k.key", "test.example/log")
    with pytest.raises(TypeError, match="call_id is a str, not int"):
        ledger.prove(tmp_path / "b.json", key, call_id=123)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="call_id is a str, not int"):
        ledger.trace(123)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="by is a str, not int"):
        ledger.redact("sha256:" + "0" * 64, reason="r", by=5)  # type: ignore[arg-type]
    note = (evidence["checkpoint"]).read_text()
    with pytest.raises(TypeError, match="pass the evidence itself as bytes"):
        el.verify_checkpoint(note, evidence["vkey"])
    assert el.verify_checkpoint(note.encode(), evidence["vkey"]).checkpoint.size > 0
    checkpoints = sorted((evidence["ledger"] / "checkpoints").glob("*.note"))
    assert ledger.verify(evidence["vkey"], checkpoints[0]).ok  # one trusted path


def test_a_key_too_long_to_load_is_refused_before_it_is_written(tmp_path):
    with pytest.raises(el.UsageError, match="a key file holds at most 4096 bytes"):
        el.SigningKey.generate(tmp_path / "long.key", "a" * 5000)
    assert not (tmp_path / "long.key").exists()


def test_a_checkpoint_needs_a_log(tmp_path):
    key = el.SigningKey.generate(tmp_path / "k.key", "test.example/log")
    with pytest.raises(el.UsageError, match="no ledger at"):
        el.Ledger(tmp_path / "new", create=True).checkpoint(key)
    assert not (tmp_path / "new").exists()


@pytest.mark.anyio
async def test_run_demo_in_async_code_says_so(tmp_path):
    with pytest.raises(el.UsageError, match="call it outside async code"):
        el.run_demo(tmp_path / "demo")
    assert not (tmp_path / "demo").exists()


def test_an_unknown_kind_is_refused_at_the_call(evidence):
    with pytest.raises(el.UsageError, match="unknown kind 'nope'"):
        el.Ledger(evidence["ledger"]).entries(kind="nope")  # not iterated
