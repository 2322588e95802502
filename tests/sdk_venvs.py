"""Throwaway virtual environments, one per pinned openai-agents release.

``sdk_venv("0.22.3")`` returns the ``bin/`` folder of ``<repo>/.cache/sdk-venvs/0.22.3``,
building it on first use: ``python -m venv``, then an install of the project's runtime
dependencies and ``query`` extra (read from ``pyproject.toml``) with
``openai-agents==<version>`` (by ``uv pip install`` when the running environment has ``uv``,
the ``dev`` extra's: it downloads in parallel and links from its cache, minutes less for the
matrix's venvs on a fresh machine; else ``pip install``), then the project itself with ``pip
install --no-deps -e <repo>`` with no ``cargo`` on ``PATH``: the optional native core is not
built again (24 s a venv, measured), and the editable install imports the one ``make`` built
in the checkout (``ledger/_native/``), if any.

A ``.installed`` marker listing the requirements and the SHA-256 of pyproject.toml, written
after a successful install, makes later calls return at once; a venv without it (half built)
or with other requirements is removed and built again, and one whose pyproject.toml changed
only gets the project reinstalled.

Also runnable: ``python tests/sdk_venvs.py 0.20.0 0.22.3`` builds those venvs.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
VENVS_DIR = REPO_ROOT / ".cache" / "sdk-venvs"
MARKER = ".installed"
SDK = "openai-agents"
UV = Path(sys.executable).parent / "uv"
"""The ``uv`` of the running environment (``dev`` extra), used for dependencies when present."""
RELEASES = ("0.20.0", "0.21.0", "0.21.1", "0.22.3", "0.23.1", "0.24.0")
"""The openai-agents releases the release matrix records under (the latest of each minor
release the project supports)."""


def runtime_requirements(version: str) -> list[str]:
    """The project's runtime requirements, with the ``query`` extra and openai-agents pinned
    to ``version``."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    others = [*project["dependencies"], *project["optional-dependencies"]["query"]]
    return [*others, f"{SDK}=={version}"]


def sdk_venv(version: str) -> Path:
    """The ``bin/`` folder of a venv holding openai-agents ``version`` and this project.

    Raises:
        RuntimeError: if ``venv`` or ``pip`` fails (the message ends with its output).
    """
    return cached_venv(VENVS_DIR / version, runtime_requirements(version))


def cached_venv(venv: Path, requirements: list[str], editable: bool = True) -> Path:
    """The ``bin/`` folder of the venv at ``venv`` holding ``requirements`` and (unless
    ``editable`` is False: the caller installs the project its own way) this project,
    editable; built on first use and rebuilt when the requirements change (see the module
    docstring).

    Raises:
        RuntimeError: if ``venv`` or ``pip`` fails (the message ends with its output).
    """
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "a") as lock:  # test workers build it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _built(venv, requirements, editable)


def _built(venv: Path, requirements: list[str], editable: bool) -> Path:
    bin_dir, marker = venv / "bin", venv / MARKER
    digest = hashlib.sha256((REPO_ROOT / "pyproject.toml").read_bytes()).hexdigest()
    project = f"project {digest}" if editable else "project not installed"
    pip = [str(bin_dir / "python"), "-m", "pip", "install", "--quiet"]
    install = [*pip, "--no-deps", "-e", str(REPO_ROOT)]
    no_cargo = {**os.environ, "PATH": path_without_cargo()}
    dependencies = ([UV, "pip", "install", "--quiet", "--python", str(bin_dir / "python")]
                    if UV.exists() else pip)
    recorded = marker.read_text("utf-8").splitlines() if marker.exists() else []
    if recorded[:-1] == requirements and (editable or recorded[-1:] == [project]):
        if recorded[-1:] != [project]:  # packaging changed: reinstall the project only
            run_checked(install, no_cargo)
            marker.write_text("\n".join([*requirements, project]) + "\n", "utf-8")
        return bin_dir
    shutil.rmtree(venv, ignore_errors=True)
    run_checked([sys.executable, "-m", "venv", str(venv)])
    run_checked([*dependencies, *requirements])
    if editable:
        run_checked(install, no_cargo)
    marker.write_text("\n".join([*requirements, project]) + "\n", "utf-8")
    return bin_dir


def path_without_cargo() -> str:
    """This process's ``PATH`` less every folder holding a ``cargo``."""
    return os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                           if d and not (Path(d) / "cargo").exists())


def run_checked(cmd: list[str], env: dict[str, str] | None = None) -> None:
    """Run ``cmd`` (in ``env``, default this process's); RuntimeError with the end of its
    output if it fails."""
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-4000:]}")


def sdk_env() -> dict[str, str]:
    """Environment for subprocesses in an SDK venv: tracing off, no inherited venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    return env


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(sdk_venv(arg))
