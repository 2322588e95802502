"""Run the compatibility suite: ``python -m tests.compat.run [--sdk 0.24.0] [-n 2] [-- ARGS]``
(``make compat``).

Builds or reuses the cached sdist and venv of the release (:mod:`tests.compat.venv`), then
runs the SDK test files listed in ``tests/compat/files.txt`` twice, from the sdist's root,
with pytest-xdist: once PLAIN (the plugin only keeps the tests offline and writes each
outcome; reused from the cache when nothing it depends on changed), once with
``--compat-record`` (:mod:`tests.compat.plugin`: every run and decision recorded, every
test's ledger verified, violations checked against ``expected-violations.json``).
``ARGS`` go to both pytest runs (``-- -k approve``).

It prints, and writes to ``.cache/compat/<version>/results/report.txt`` (with each pass's
JSON and log, and the ledgers with violations, beside it): the files and tests run, the wall
time, the tests that pass plain but not with the recorder grouped by cause (the first error
the recorder raised in the test, else its first failure line; hex ids, addresses, quoted
values, digests and sequence numbers masked; a test the recorded pass never reached counts
too), the violations grouped by rule and detail, how many of them the expected file lists
as true (the SDK or the test's intent) and as recorder gaps (a reason starting with
``recorder gap:``: a false report the recorder owes a fix, listed so that any other
change fails the suite), and those not expected or expected but missing. Exits 1 if any
test passes plain but not recorded, any violation is not expected or expected but missing,
or a pass ended with a pytest exit status other than 0 or 1 (an
INTERNALERROR, a collection error); 2 if a pass did not produce its results.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.compat.venv import CACHE, compat_tree
from tests.sdk_venvs import sdk_env

HERE = Path(__file__).resolve().parent
FILES = HERE / "files.txt"
EXPECTED = HERE / "expected-violations.json"
SHOWN = 8
"""Test ids printed per group (all of them are in the JSON)."""
GAP = "recorder gap: "
"""How the reason of an expected violation that is a false report of the recorder starts."""


def selected_files(sdist: Path) -> list[str]:
    """The paths in ``files.txt`` (comments and blank lines skipped).

    Raises:
        SystemExit: if one is not in the sdist.
    """
    lines = [line.strip() for line in FILES.read_text("utf-8").splitlines()]
    files = [line for line in lines if line and not line.startswith("#")]
    absent = [f for f in files if not (sdist / f).is_file()]
    if absent:
        raise SystemExit(f"not in the sdist: {absent}")
    return files


def run_pass(bin_dir: Path, sdist: Path, args: list[str], out: Path) -> dict[str, Any]:
    """One pytest run; the plugin's JSON (``--compat-out``)."""
    env = {k: v for k, v in sdk_env().items() if not k.startswith("OPENAI_")}
    env.update(OPENAI_AGENTS_DISABLE_TRACING="1", PYTHONPATH=str(HERE))
    cmd = [str(bin_dir / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "-p", "plugin", f"--compat-out={out}", *args]
    done = subprocess.run(cmd, cwd=sdist, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    (out.with_suffix(".log")).write_text(done.stdout, "utf-8")
    if not out.exists():
        print(done.stdout[-4000:], file=sys.stderr)
        raise SystemExit(2)
    result: dict[str, Any] = json.loads(out.read_text("utf-8"))
    result["exit"] = done.returncode
    return result


def plain_pass(bin_dir: Path, sdist: Path, args: list[str], out: Path) -> dict[str, Any]:
    """The PLAIN pass, reused from the cache when it ran before with the same arguments,
    test files, plugin and SDK venv (its outcome does not depend on this project's code)."""
    key = hashlib.sha256(json.dumps([args, str(bin_dir)]).encode())
    for path in (FILES, HERE / "plugin.py", bin_dir.parent / ".installed"):
        key.update(path.read_bytes() if path.exists() else b"-")
    cached = out.parent.parent / f"plain-{key.hexdigest()[:16]}.json"
    if cached.exists():
        shutil.copyfile(cached, out)
        shutil.copyfile(cached.with_suffix(".log"), out.with_suffix(".log"))
        result: dict[str, Any] = json.loads(cached.read_text("utf-8"))
        return result
    result = run_pass(bin_dir, sdist, args, out)
    if result["exit"] in (0, 1):
        for old in out.parent.parent.glob("plain-*.*"):
            old.unlink()
        cached.write_text(json.dumps(result), "utf-8")
        shutil.copyfile(out.with_suffix(".log"), cached.with_suffix(".log"))
    return result


def cause(message: str | None) -> str:
    """A failure's first line with what differs between alike failures masked."""
    text = message or "(no message)"
    text = re.sub(r"\b[0-9a-f]{32}\b", "<id>", text)
    text = re.sub(r"sha256:[0-9a-f]{64}", "sha256:…", text)
    text = re.sub(r"\bseq \d+", "seq N", text)
    text = re.sub(r"\d{6,}", "N", text)
    text = re.sub(r"0x[0-9a-f]+", "0x…", text)
    text = re.sub(r"'[^']*'", "'…'", text)
    return text[:220]


def cause_of(test: dict[str, Any] | None) -> str:
    """Why a test failed with the recorder: the first error the recorder itself raised in
    it (maybe swallowed by the test or the SDK), else its first failure line."""
    if test is None:
        return "(not run: the recorded pass stopped before it)"
    if test.get("refused"):
        return "recorder raised " + cause(test["refused"][0])
    return cause(test["message"])


def grouped(rows: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """``(key, test id)`` rows as ``(key, test ids)``, largest group first."""
    groups: dict[str, list[str]] = defaultdict(list)
    for key, test in rows:
        groups[key].append(test)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def report(version: str, files: list[str], plain: dict[str, Any], recorded: dict[str, Any],
           seconds: float) -> tuple[list[str], bool]:
    """The report's lines, and whether the suite passed."""
    outcomes = {t: r["outcome"] for t, r in plain["tests"].items()}
    broken = [(cause_of(recorded["tests"].get(t)), t) for t, outcome in outcomes.items()
              if outcome == "passed" and recorded["tests"].get(t, {}).get("outcome") != "passed"]
    counts = defaultdict(int)
    for outcome in outcomes.values():
        counts[outcome] += 1
    head = subprocess.run(["git", "-C", str(HERE), "describe", "--always", "--dirty"],
                          capture_output=True, text=True).stdout.strip() or "?"
    lines = [
        f"evidence-ledger at {head}; "
        f"openai-agents {version}: {len(files)} test files, {len(outcomes)} tests "
        f"(plain: {dict(counts)}); wall time {seconds:.0f} s",
        f"recorded: {recorded['stats']}; pytest exit status plain {plain['exit']}, "
        f"recorded {recorded['exit']}",
        "", f"== {len(broken)} test(s) pass plain but not with the recorder",
    ]
    for key, tests in grouped(broken):
        lines.append(f"[{len(tests)}] {key}")
        lines += [f"    {t}" for t in tests[:SHOWN]]
        if len(tests) > SHOWN:
            lines.append(f"    ... and {len(tests) - SHOWN} more")
    violations = recorded["violations"]
    lines += ["", f"== {len(violations)} violation(s)"]
    masked = [(f"{v['rule']}: {cause(v['detail'])}", v["test"]) for v in violations]
    for key, tests in grouped(masked):
        lines.append(f"[{len(tests)}] {key}")
        lines += [f"    {t}" for t in tests[:SHOWN]]
        if len(tests) > SHOWN:
            lines.append(f"    ... and {len(tests) - SHOWN} more")
    expected = json.loads(EXPECTED.read_text("utf-8"))
    gaps = {(e["test"], e["rule"]) for e in expected if e["reason"].startswith(GAP)}
    found = {(v["test"], v["rule"]) for v in violations}
    lines += ["", f"== expected: {len(found - gaps)} violation(s) the SDK or the test's intent "
              f"makes true, {len(found & gaps)} listed as recorder gaps (reason "
              f"{GAP!r}: reports the recorder owes a fix)"]
    lines += ["", f"== {len(recorded['unexpected'])} violation(s) not expected, "
              f"{len(recorded['missing'])} expected but missing"]
    lines += [f"    not expected: {v['test']}: {v['rule']}" for v in recorded["unexpected"]]
    lines += [f"    missing: {e['test']}: {e['rule']}" for e in recorded["missing"]]
    ok = (not broken and not recorded["unexpected"] and not recorded["missing"]
          and plain["exit"] in (0, 1) and recorded["exit"] in (0, 1))
    lines += ["", "compat: " + ("ok" if ok else "FAILED")]
    return lines, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sdk", default="0.24.0", help="openai-agents release (0.24.0)")
    parser.add_argument("-n", default="2", help="pytest-xdist workers (2)")
    parser.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments")
    options = parser.parse_args(argv)
    started = time.monotonic()
    sdist, bin_dir = compat_tree(options.sdk)
    files = selected_files(sdist)
    results = CACHE / options.sdk / "results"
    shutil.rmtree(results, ignore_errors=True)
    (results / "ledgers").mkdir(parents=True)
    common = ["-n", options.n, *options.pytest_args, *files]
    plain = plain_pass(bin_dir, sdist, common, results / "plain.json")
    recorded = run_pass(bin_dir, sdist, [
        "--compat-record", f"--compat-expected={EXPECTED}",
        f"--compat-keep={results / 'ledgers'}", *common,
    ], results / "recorded.json")
    lines, ok = report(options.sdk, files, plain, recorded, time.monotonic() - started)
    text = "\n".join(lines) + "\n"
    (results / "report.txt").write_text(text, "utf-8")
    print(text, end="")
    print(f"(details: {results})", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
