"""The cached source distribution and venv of one ``openai-agents`` release, for the
compatibility suite.

``compat_tree("0.24.0")`` returns ``(sdist, bin)``: the unpacked sdist
``<repo>/.cache/compat/0.24.0/openai_agents-0.24.0`` (the release's ``tests/`` ship in it)
and the ``bin/`` folder of ``<repo>/.cache/compat/0.24.0/venv``. Both are built on first use,
as :mod:`tests.sdk_venvs` builds the release-matrix venvs:

- the sdist: ``pip download --no-deps --no-binary :all: openai-agents==<version>``, unpacked;
  a ``.unpacked`` marker written after that makes later calls reuse it;
- the venv: ``openai-agents==<version>`` with this project's runtime dependencies and
  ``query`` extra, the test dependencies in :data:`TEST_DEPS` (their versions read from the
  sdist's ``dev`` dependency group or ``uv.lock``: the ones the SDK tests itself with),
  then this project with ``pip install --no-deps -e <repo>``. A ``.installed`` marker listing
  the requirements and the SHA-256 of our pyproject.toml, written after a successful build,
  makes later calls return at once; a venv without it or with other requirements is built
  again, one whose pyproject.toml changed only gets the project reinstalled.

Only the packages registry is reached (pip); nothing else.
"""

from __future__ import annotations

import re
import shutil
import sys
import tarfile
import tomllib
from pathlib import Path

from tests.sdk_venvs import REPO_ROOT, SDK, cached_venv, run_checked, runtime_requirements

CACHE = REPO_ROOT / ".cache" / "compat"

TEST_DEPS = ("pytest", "pytest-asyncio", "pytest-mock", "pytest-xdist", "inline-snapshot",
             "aiosqlite", "fastapi", "httpx")
"""Names of what the files in ``files.txt`` import or use as pytest plugins (``mocker``,
``snapshot``, the FastAPI test client of the HITL server example, aiosqlite for the async
SQLite session, httpx for fake HTTP errors), with the specifier of the sdist's ``dev``
dependency group, else (``httpx`` comes in through other packages there) the version its
``uv.lock`` pins."""


def compat_tree(version: str) -> tuple[Path, Path]:
    """The unpacked sdist of ``version`` and the ``bin/`` folder of its test venv.

    Raises:
        RuntimeError: if ``pip`` or ``venv`` fails (the message ends with its output).
    """
    return _sdist(version), _venv(version)


def _sdist(version: str) -> Path:
    root = CACHE / version
    tree = root / f"openai_agents-{version}"
    if (tree / ".unpacked").exists():
        return tree
    download = root / "download"
    shutil.rmtree(download, ignore_errors=True)
    shutil.rmtree(tree, ignore_errors=True)
    run_checked([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary",
          ":all:", f"{SDK}=={version}", "-d", str(download)])
    (archive,) = download.glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
    (tree / ".unpacked").write_text(archive.name + "\n", "utf-8")
    shutil.rmtree(download)
    return tree


def testing_requirements(sdist: Path) -> list[str]:
    """The :data:`TEST_DEPS` as the sdist's ``dev`` dependency group or ``uv.lock`` pin them.

    Raises:
        RuntimeError: if one of them is in neither.
    """
    group = tomllib.loads((sdist / "pyproject.toml").read_text("utf-8"))["dependency-groups"]
    lock = tomllib.loads((sdist / "uv.lock").read_text("utf-8"))["package"]
    by_name = {_name(p["name"]): f"{p['name']}=={p['version']}" for p in lock}
    by_name.update({_name(req): req for req in group["dev"]})
    missing = [name for name in TEST_DEPS if name not in by_name]
    if missing:
        raise RuntimeError(f"neither in the sdist's dev dependency group nor uv.lock: {missing}")
    return [by_name[name] for name in TEST_DEPS]


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    return match.group(0).lower().replace("_", "-") if match else requirement


def _venv(version: str) -> Path:
    return cached_venv(CACHE / version / "venv",
                       [*runtime_requirements(version), *testing_requirements(_sdist(version))])



if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(*compat_tree(arg))
