"""The package as a user installs it: a wheel, in fresh virtual environments.

- ``pip install evidence-ledger`` (the base install): ``--version``, ``verify-proof``,
  ``verify-checkpoint`` and ``report --bundle`` work; ``demo`` exits 2 naming the
  ``agents`` extra; neither openai-agents, duckdb nor pyarrow is installed.
- ``pip install .`` where ``PATH`` holds no ``cargo``: the optional native core is left out,
  the install succeeds, and ``--version`` names the pure-Python core (where cargo is
  there, the wheel holds the native core and ``--version`` says so).
- ``pip install 'evidence-ledger[all]'``: ``--version`` and ``demo`` work, and the README
  quick start runs as written, in a directory that also holds folders named ``ledger/``
  (a real ledger made by ``demo``) and ``cli/``.

Installs from the package registry (like the release matrix), so it runs in that lane:
``pytest -m release_matrix``. The venvs are cached under ``.cache/install-venvs/`` with
the project's dependencies; the wheel is rebuilt and reinstalled (``--no-deps``) each run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from .helpers import ingest, run_cli
from .sdk_venvs import cached_venv, path_without_cargo
from .test_readme import quick_start

pytestmark = pytest.mark.release_matrix

ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / ".cache" / "install-venvs"
OPTIONAL = ("openai-agents", "duckdb", "pyarrow", "opentelemetry-semantic-conventions")


def _run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, check=False,
                          timeout=900)


def _checked(cmd: list[str], cwd: Path | None = None) -> str:
    done = _run(cmd, cwd)
    assert done.returncode == 0, f"{cmd} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout


def _requirements(extras: tuple[str, ...]) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = list(project["dependencies"])
    for extra in extras:
        found += project["optional-dependencies"][extra]
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built from this checkout."""
    out = tmp_path_factory.mktemp("wheel")
    _checked([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out),
              str(ROOT)])
    (built,) = out.glob("evidence_ledger-*.whl")
    return built


def _installed(name: str, extras: tuple[str, ...], wheel: Path) -> Path:
    bin_dir = cached_venv(VENVS / name, _requirements(extras), editable=False)
    _checked([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--no-deps",
              "--force-reinstall", str(wheel)])
    return bin_dir


@pytest.fixture(scope="module")
def evidence(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A bundle and a checkpoint, made by the development install."""
    tmp = tmp_path_factory.mktemp("evidence")
    ledger, key, bundle = tmp / "book", tmp / "signing.key", tmp / "bundle.json"
    ingest(ledger)
    vkey = run_cli("keygen", "--origin", "install.example/log", "--out", str(key)).out.strip()
    assert run_cli("prove", "--ledger", str(ledger), "--key", str(key), "--out", str(bundle),
                   "--run-id", "r1").code == 0
    return {"vkey": vkey, "bundle": str(bundle),
            "checkpoint": str(ledger / "checkpoints" / "00000001.note")}


def test_the_base_install_verifies_and_names_missing_extras(wheel, evidence, tmp_path):
    bin_dir = _installed("base", (), wheel)
    listed = {line.split("==")[0].lower()
              for line in _checked([str(bin_dir / "python"), "-m", "pip", "freeze"]).split()}
    assert "evidence-ledger" in listed
    assert listed.isdisjoint(OPTIONAL), sorted(listed & set(OPTIONAL))
    cli = str(bin_dir / "evidence-ledger")
    version = _checked([str(bin_dir / "python"), "-c",
                        "import evidence_ledger as el; print(el.__version__)"]).strip()
    core = "native core" if shutil.which("cargo") else "pure-Python core"
    assert _checked([cli, "--version"], tmp_path) == f"evidence-ledger {version} ({core})\n"
    proof = json.loads(_checked([cli, "verify-proof", evidence["bundle"], "--verifier-key",
                                 evidence["vkey"], "--json"], tmp_path))
    assert proof["selection"] == {"mode": "run", "run_id": "r1", "call_id": None}
    assert _checked([cli, "verify-checkpoint", evidence["checkpoint"], "--verifier-key",
                     evidence["vkey"]], tmp_path).startswith(
        "checkpoint OK: origin install.example/log, tree size ")
    page = tmp_path / "bundle.html"  # the report's template ships in the wheel
    assert _checked([cli, "report", "--bundle", evidence["bundle"], "--verifier-key",
                     evidence["vkey"], "--out", str(page)], tmp_path).startswith(
        f"wrote {page} (")
    assert page.read_text().startswith("<!DOCTYPE html>")
    demo = _run([cli, "demo", "--ledger", "new"], tmp_path)
    assert (demo.returncode, demo.stdout) == (2, "")
    assert demo.stderr == ("evidence-ledger: error: demo needs the 'agents' extra "
                           "(openai-agents is not installed): "
                           "pip install 'openai-agents<0.25,>=0.20.0' "
                           "(or install this project with [agents])\n")


def test_an_install_without_cargo_runs_the_pure_core(tmp_path):
    bin_dir = cached_venv(VENVS / "no-cargo", _requirements(()), editable=False)
    path = path_without_cargo()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CARGO")}
    # a checkout as a user's would be: no build/ of an earlier install with cargo in it
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT, checkout, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".cache", ".*_cache", ".hypothesis", "build", "target", "*.so",
        "*.egg-info", "__pycache__"))
    done = subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet",
                           "--no-deps", "--force-reinstall", str(checkout)],
                          capture_output=True, text=True, env={**env, "PATH": path},
                          check=False, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _checked([str(bin_dir / "evidence-ledger"), "--version"], tmp_path).endswith(
        " (pure-Python core)\n")
    shipped = Path(_checked([str(bin_dir / "python"), "-c",
                             "import evidence_ledger._native as n; print(n.__path__[0])"]).strip())
    assert sorted(p.name for p in shipped.iterdir() if p.name != "__pycache__") == [
        "__init__.py", "_core.pyi"]


def test_the_full_install_runs_the_demo_and_the_quick_start(wheel, tmp_path):
    bin_dir = _installed("all", ("agents", "query"), wheel)
    python, cli = str(bin_dir / "python"), str(bin_dir / "evidence-ledger")
    origin = _checked([python, "-c", "import evidence_ledger; print(evidence_ledger.__file__)"],
                      tmp_path)
    assert Path(origin.strip()).is_relative_to(bin_dir.parent), origin  # the wheel, not ROOT
    demo = _run([cli, "demo", "--ledger", "ledger"], tmp_path)
    assert demo.returncode == 0, demo.stderr
    assert "OK: " in demo.stdout and (tmp_path / "ledger" / "log.bin").is_file()
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "__init__.py").write_text("raise ImportError('the shadowing cli/')\n")
    script, expected = quick_start()
    (tmp_path / "quickstart.py").write_text(script)
    done = _run([python, "quickstart.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == expected.splitlines()
