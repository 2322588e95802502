"""Reading a ledger never writes into it: ``query`` and ``trace`` on a ledger directory made
read-only, run as an unprivileged user, work and leave it byte-identical (issue 22: they
once wrote a 2 MB ``index.duckdb`` into the ledger one was sent, and left it behind when
they failed).

As root, the commands run as ``nobody`` (``setpriv --reuid=nobody --regid=nogroup
--clear-groups``), with an interpreter ``nobody`` can run: this one, or Debian's
``/usr/bin/python3`` of the same version with this environment's site-packages. Where
``nobody`` can reach neither, they run as root with every capability dropped (``setpriv
--bounding-set=-all``), which the permission bits bind just the same. As any other user,
they run as that user. Never skipped.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import evidence_ledger as el

NOBODY = ["--reuid=nobody", "--regid=nogroup", "--clear-groups"]
NO_CAPS = ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
BOOT = ("import site, sys\n"
        "for d in sys.argv[1].split(':'): site.addsitedir(d)\n"
        "sys.argv = ['evidence-ledger', *sys.argv[2:]]\n"
        "from evidence_ledger.cli.main import main\n"
        "main()\n")


def _site_dirs() -> str:
    paths = sysconfig.get_paths()
    return ":".join(dict.fromkeys((paths["purelib"], paths["platlib"])))


def _runner(tmp: Path) -> list[str]:
    """The command prefix that runs the CLI unprivileged (see the module docstring)."""
    python = [sys.executable, "-c", BOOT, _site_dirs()]
    if os.geteuid() != 0:
        return python
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed to run as nobody"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for interpreter in dict.fromkeys((sys.executable, "/usr/bin/python3")):
        probe = subprocess.run(
            [setpriv, *NOBODY, interpreter, "-c", BOOT, _site_dirs(), "--version"],
            capture_output=True, text=True, cwd=tmp, check=False)
        said = subprocess.run(
            [setpriv, *NOBODY, interpreter, "-c",
             "import sys; print(f'{sys.version_info.major}.{sys.version_info.minor}')"],
            capture_output=True, text=True, cwd=tmp, check=False).stdout.strip()
        if probe.returncode == 0 and said == version:
            return [setpriv, *NOBODY, interpreter, "-c", BOOT, _site_dirs()]
    return [setpriv, *NO_CAPS, *python]


def _snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every path under ``root``: its mode and, for a file, the SHA-256 of its bytes."""
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        found[str(path.relative_to(root))] = (info.st_mode, digest)
    return found


def _read_only(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        mode = 0o555 if path.is_dir() else 0o444
        path.chmod(mode)


@pytest.fixture
def sent() -> Iterator[tuple[Path, Path]]:
    """A ledger as someone was sent it: recorded, checkpointed, read-only; and a cache
    folder the reader may write. Under the system's temporary folder, not pytest's (which
    only its owner may enter)."""
    base = Path(tempfile.mkdtemp(prefix="evidence-ledger-read-only-"))
    try:
        base.chmod(0o755)
        ledger = base / "ledger"
        el.run_demo(ledger)  # recorded, with a signed checkpoint
        cache = base / "cache"
        cache.mkdir(mode=0o777)
        cache.chmod(0o777)
        _read_only(ledger)
        yield ledger, cache
    finally:
        for path in [base, *base.rglob("*")]:
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)
        shutil.rmtree(base)


def test_query_and_trace_on_a_read_only_ledger_work_and_leave_it_byte_identical(sent, tmp_path):
    ledger, cache = sent
    before = _snapshot(ledger)
    run = _runner(tmp_path)
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "COLUMNS": "200"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*run, *args, "--ledger", str(ledger)], capture_output=True,
                              text=True, env=env, cwd=tmp_path, check=False)

    counted = cli("query", "SELECT count(*) AS n FROM calls", "--format", "json")
    assert counted.returncode == 0, counted.stderr
    assert counted.stdout.strip() not in ("", "[]")
    traced = cli("trace", "c-refund-1")
    assert traced.returncode == 0, traced.stderr
    assert "c-refund-1" in traced.stdout and "approve" in traced.stdout
    failed = cli("query", "SELECT nothing FROM nowhere")
    assert failed.returncode == 2 and "SQL error" in failed.stderr
    assert _snapshot(ledger) == before
    assert list(cache.glob("evidence-ledger/index/*/*/index.duckdb")), "no index in the cache"
    if os.geteuid() == 0 and "--reuid=nobody" in run:
        owners = {p.stat().st_uid for p in cache.rglob("*")}
        assert owners == {int(subprocess.check_output(["id", "-u", "nobody"]))}
