"""pytest plugin for the compatibility suite: the SDK's own tests, with the recorder routed in.

Loaded into the SDK's pytest (run from the root of its sdist, in the venv that
:mod:`tests.compat.venv` builds) as ``PYTHONPATH=<repo>/tests/compat pytest -p plugin``. It
imports nothing from this repository's ``tests`` package, so the SDK's ``tests`` package
keeps its name.

Always: no socket may connect outside loopback (the tests never reach a model provider or the
internet; a connection elsewhere fails with ``OSError``); with ``--compat-out FILE`` the
controller writes each test's outcome (``passed``, ``failed``, ``error``, ``skipped``) and
first failure line there as JSON (pytest-xdist workers send their reports to it); and garbage
is collected before a failure is reported and when the session ends. That last one works around
CPython 3.11's gh-106905: a finaliser run by the collector inside ``ast.parse`` (an asyncio task
whose exception was never retrieved logs it) can re-enter ``ast.parse``, whose shared recursion
counter then fails the outer call with ``SystemError: AST constructor recursion depth
mismatch``. Pytest parses the test's source to show a failure, so the worker died with an
INTERNALERROR and its remaining tests never ran.

With ``--compat-record``, in each test (from its setup to its teardown):

- ``Runner.run`` / ``Runner.run_streamed`` go through ``Recorder.run`` / ``run_streamed`` of
  a recorder writing to a fresh temporary ledger, made on first use; ``Runner.run_sync``
  goes through ``AgentRunner.run_sync`` (which owns the event loop handling) of a runner
  whose ``run`` is the routed ``Runner.run``. A call made inside a recorded leg
  (``Agent.as_tool`` running its agent) goes to the SDK unchanged: the recorder records
  nested agents itself. So does every call while a test has a default runner of its own
  installed;
- ``RunState.approve`` / ``RunState.reject`` go through ``recorder.approve`` /
  ``recorder.reject`` (approver ``"compat-suite"``; ``always_approve`` / ``always_reject``
  as ``always``, ``rejection_message`` as ``message``), so a decision a test makes on a
  state is a recorded decision (a state no recorded run made, built by hand or restored,
  is adopted by the recorder). The SDK's own calls, made while a decision is applied or
  inside a recorded leg (approvals handed on to a nested agent's state), go to the SDK
  unchanged and are counted;
- each error of the recorder's own (``LedgerError``: a call it did not record) that a routed call
  raises is kept with the test, even if the test or the SDK swallows it (a run in a
  background task): a test that then times out is reported with its real cause;
- after teardown, the recorder's queue is flushed and the ledger verified
  (``Ledger(dir).verify()``); each violation is kept as ``(rule, detail)`` on the test's
  teardown report, and the ledger is copied under ``--compat-keep DIR`` if there is one.

The controller then compares the violations with ``--compat-expected FILE`` (a JSON list of
``{"test", "rule", "reason"}``, matched on test id and rule) and fails the session (exit 1)
when a violation is not listed there, or a listed one of a test that ran did not appear.
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
import inspect
import ipaddress
import json
import re
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

APPROVER = "compat-suite"

_DECIDING: contextvars.ContextVar[bool] = contextvars.ContextVar("compat_deciding", default=False)
"""Set while a decision is applied: every ``approve`` / ``reject`` inside goes to the SDK."""


class _TestLedger:
    """The ledger and recorder of the running test (made on first use), with counters."""

    def __init__(self) -> None:
        self.directory: Path | None = None
        self._recorder: Any = None
        self.stats = {"runs": 0, "decisions": 0, "unrecorded_decisions": 0}
        self.refused: list[str] = []  # what the recorder raised when asked to record

    def recorder(self) -> Any:
        if self._recorder is None:
            from evidence_ledger import Recorder

            self.directory = Path(tempfile.mkdtemp(prefix="compat-ledger-"))
            self._recorder = Recorder(self.directory / "ledger")
        return self._recorder

    def verify(self) -> list[tuple[str, str]]:
        """Flush the recorder and verify the ledger; the violations, ``(rule, detail)`` (a
        flush that raises is the violation ``flush``)."""
        if self._recorder is None or self.directory is None:
            return []
        from evidence_ledger import Ledger

        found = []
        try:
            self._recorder.flush()
        except Exception as exc:
            found.append(("flush", f"{type(exc).__name__}: {exc}"))
        if (self.directory / "ledger" / "log.bin").exists():  # else nothing was recorded
            report = Ledger(self.directory / "ledger").verify()
            found += [(v.rule, v.detail) for v in report.violations]
        return found


_current: _TestLedger | None = None


# -- offline ---------------------------------------------------------------------------------

def _offline() -> None:
    """Refuse socket connections to anything but loopback and Unix sockets."""
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def allowed(sock: socket.socket, address: Any) -> bool:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return True
        host = str(address[0])
        try:
            return ipaddress.ip_address(host.split("%")[0]).is_loopback
        except ValueError:
            return host == "localhost"

    def guarded(sock: socket.socket, address: Any) -> Any:
        if not allowed(sock, address):
            raise OSError(f"compat suite: no network outside loopback ({address!r})")
        return connect(sock, address)

    def guarded_ex(sock: socket.socket, address: Any) -> Any:
        if not allowed(sock, address):
            raise OSError(f"compat suite: no network outside loopback ({address!r})")
        return connect_ex(sock, address)

    socket.socket.connect = guarded  # type: ignore[method-assign]
    socket.socket.connect_ex = guarded_ex  # type: ignore[method-assign]


# -- routing ---------------------------------------------------------------------------------

def _route() -> None:
    """Patch ``Runner.run`` / ``run_streamed`` / ``run_sync`` and ``RunState.approve`` /
    ``reject`` as the module docstring says."""
    from agents import Runner, RunState
    from agents.run import AgentRunner, get_default_agent_runner

    from evidence_ledger import LedgerError
    from evidence_ledger.record.integrations.legs import CURRENT_LEG
    from evidence_ledger.record.integrations.nested_runs import RecordingRunner

    run, run_streamed, run_sync = Runner.run, Runner.run_streamed, Runner.run_sync
    approve, reject = RunState.approve, RunState.reject

    def recording(signature: inspect.Signature, args: Any, kwargs: Any) -> Any:
        """``(test, agent, input, options)`` to record this call with; None: leave it be
        (no test, inside a recorded leg, or a default runner the test installed)."""
        if _current is None or CURRENT_LEG.get() is not None or own_runner():
            return None
        try:
            options = dict(signature.bind(*args, **kwargs).arguments)
        except TypeError:  # the SDK raises it
            return None
        _current.stats["runs"] += 1
        return _current, options.pop("starting_agent"), options.pop("input"), options

    @contextlib.contextmanager
    def noting(test: _TestLedger, item: Any = None) -> Iterator[None]:
        """Keep the recorder's own errors with the test (they still propagate), with the
        type of the interruption ``item`` decided on, if any (``function_call``,
        ``shell_call``, ``mcp_approval_request``...)."""
        try:
            yield
        except LedgerError as exc:
            raw = getattr(item, "raw_item", None)
            kind = raw.get("type") if isinstance(raw, dict) else getattr(raw, "type", None)
            test.refused.append(f"{type(exc).__name__}: {exc}" + (f" [{kind}]" if kind else ""))
            raise

    async def routed_run(cls: Any, *args: Any, **kwargs: Any) -> Any:
        found = recording(inspect.signature(run), args, kwargs)
        if found is None:
            return await run(*args, **kwargs)
        test, agent, input, options = found
        with noting(test):
            return await test.recorder().run(agent, input, **options)

    def routed_run_streamed(cls: Any, *args: Any, **kwargs: Any) -> Any:
        found = recording(inspect.signature(run_streamed), args, kwargs)
        if found is None:
            return run_streamed(*args, **kwargs)
        test, agent, input, options = found
        with noting(test):
            return test.recorder().run_streamed(agent, input, **options)

    class RoutedRunner(AgentRunner):
        async def run(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
            return await Runner.run(starting_agent, input, **kwargs)

    def own_runner() -> bool:
        return type(get_default_agent_runner()) not in (AgentRunner, RecordingRunner)

    def routed_run_sync(cls: Any, *args: Any, **kwargs: Any) -> Any:
        if _current is None or CURRENT_LEG.get() is not None or own_runner():
            return run_sync(*args, **kwargs)
        return RoutedRunner().run_sync(*args, **kwargs)

    def by_the_sdk() -> bool:
        """True for a decision the SDK applies itself: while a decision is applied, or in a
        recorded leg (the approvals it hands on to a nested agent's state)."""
        return _DECIDING.get() or CURRENT_LEG.get() is not None

    @contextlib.contextmanager
    def deciding() -> Iterator[None]:
        token = _DECIDING.set(True)
        try:
            yield
        finally:
            _DECIDING.reset(token)

    def routed_approve(self: Any, approval_item: Any, always_approve: bool = False) -> None:
        if _current is None or by_the_sdk():
            if _current is not None and not _DECIDING.get():
                _current.stats["unrecorded_decisions"] += 1
            with deciding():
                return approve(self, approval_item, always_approve)
        _current.stats["decisions"] += 1
        with deciding(), noting(_current, approval_item):
            _current.recorder().approve(self, approval_item, approver=APPROVER,
                                        always=always_approve)

    def routed_reject(self: Any, approval_item: Any, always_reject: bool = False, *,
                      rejection_message: str | None = None) -> None:
        if _current is None or by_the_sdk():
            if _current is not None and not _DECIDING.get():
                _current.stats["unrecorded_decisions"] += 1
            with deciding():
                return reject(self, approval_item, always_reject,
                              rejection_message=rejection_message)
        _current.stats["decisions"] += 1
        with deciding(), noting(_current, approval_item):
            _current.recorder().reject(self, approval_item, approver=APPROVER,
                                       always=always_reject, message=rejection_message)

    Runner.run = classmethod(routed_run)  # type: ignore[method-assign,assignment]
    Runner.run_streamed = classmethod(routed_run_streamed)  # type: ignore[method-assign,assignment]
    Runner.run_sync = classmethod(routed_run_sync)  # type: ignore[method-assign,assignment]
    RunState.approve = routed_approve  # type: ignore[method-assign]
    RunState.reject = routed_reject  # type: ignore[method-assign]


# -- pytest hooks ----------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("compat", "evidence-ledger compatibility suite")
    group.addoption("--compat-record", action="store_true",
                    help="route runs and decisions through a per-test Recorder")
    group.addoption("--compat-expected", metavar="FILE", help="expected-violations.json")
    group.addoption("--compat-out", metavar="FILE", help="write outcomes and violations here")
    group.addoption("--compat-keep", metavar="DIR", help="copy ledgers with violations here")


class _Results:
    """What the controller gathers from the reports: outcomes, violations, counters."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.tests: dict[str, dict[str, Any]] = {}
        self.violations: list[dict[str, str]] = []
        self.stats = {"runs": 0, "decisions": 0, "unrecorded_decisions": 0}
        self.unexpected: list[dict[str, str]] = []
        self.missing: list[dict[str, str]] = []

    def add(self, report: pytest.TestReport) -> None:
        test = self.tests.setdefault(report.nodeid, {"outcome": "passed", "message": None})
        if report.failed and test["outcome"] not in ("failed", "error"):
            test["outcome"] = "failed" if report.when == "call" else "error"
            test["message"] = _first_line(report)
        elif report.skipped and test["outcome"] == "passed":
            test["outcome"] = "skipped"
        for name, value in report.user_properties:
            if name == "compat_ledger":
                for key in self.stats:
                    self.stats[key] += value["stats"][key]
                test["refused"] = value["refused"]
                self.violations += [{"test": report.nodeid, "rule": rule, "detail": detail}
                                    for rule, detail in value["violations"]]

    def compare(self, expected_file: str) -> None:
        expected = json.loads(Path(expected_file).read_text("utf-8"))
        listed = {(e["test"], e["rule"]) for e in expected}
        found = {(v["test"], v["rule"]) for v in self.violations}
        self.unexpected = [v for v in self.violations if (v["test"], v["rule"]) not in listed]
        self.missing = [e for e in expected
                        if e["test"] in self.tests and (e["test"], e["rule"]) not in found]


def _first_line(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return text.strip().splitlines()[0] if text.strip() else ""


_results: _Results | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _results
    _offline()
    if config.getoption("--compat-record"):
        _route()
    if not hasattr(config, "workerinput"):  # the controller (or the only process)
        _results = _Results(config)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    global _current
    _current = _TestLedger() if item.config.getoption("--compat-record") else None
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield
    global _current
    test, _current = _current, None
    if test is None:
        return
    try:
        violations = test.verify()
        keep = item.config.getoption("--compat-keep")
        if violations and keep and test.directory is not None:
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid)[:150]
            shutil.copytree(test.directory / "ledger", Path(keep) / name, dirs_exist_ok=True)
    finally:
        if test.directory is not None:
            shutil.rmtree(test.directory, ignore_errors=True)
    item.user_properties.append(("compat_ledger", {
        "stats": test.stats, "violations": violations, "refused": test.refused[:1],
    }))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    if call.excinfo is not None:  # finalisers run now, not inside ast.parse (gh-106905)
        gc.collect()
    yield


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _results is not None:
        _results.add(report)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    gc.collect()  # before other plugins parse sources (inline-snapshot; gh-106905)
    if _results is None:
        return
    config = session.config
    expected = config.getoption("--compat-expected")
    if config.getoption("--compat-record") and expected:
        _results.compare(expected)
        if _results.unexpected or _results.missing:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    out = config.getoption("--compat-out")
    if out:
        Path(out).write_text(json.dumps({
            "tests": _results.tests, "stats": _results.stats, "violations": _results.violations,
            "unexpected": _results.unexpected, "missing": _results.missing,
        }, indent=1) + "\n", "utf-8")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _results is None or not terminalreporter.config.getoption("--compat-record"):
        return
    write = terminalreporter.write_line
    write(f"compat: {_results.stats}; {len(_results.violations)} violation(s), "
          f"{len(_results.unexpected)} not expected, {len(_results.missing)} expected but missing")
    for v in _results.unexpected:
        write(f"  not expected: {v['test']}: {v['rule']}: {v['detail']}")
    for e in _results.missing:
        write(f"  missing: {e['test']}: {e['rule']} ({e['reason']})")
