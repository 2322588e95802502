"""Named audit queries (``query NAME``, ``query --list``) and how ``query`` shows rows to
people (one record per block when the table is too wide, digests cut short).

The bar: each named query that mirrors a rule returns, on every ledger below, exactly the
violations ``verify --json`` reports for that rule, as (rule, run_id, call_id, seq). The
ledgers: one per rule example (``tests/data/rules/*.jsonl``, each breaking its rule), the
audit ledger of ``tests/test_index.py`` (every chain shape, violations put in on purpose),
every scenario of ``examples/lineage_scenarios.py`` recorded on the installed SDK (forks,
nested agents, retries, guardrails: the shapes where the facts must not say more than the
verifier), and ``examples/call_kinds.py`` runs with one decision taken out (every kind of
call, and a non-function output).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from pathlib import Path

import pytest

import evidence_ledger as el
from evidence_ledger.cli.rows import short_digests
from evidence_ledger.index.named import NAMED_QUERIES
from evidence_ledger.index.query import check_read_only
from evidence_ledger.verify.findings import RULES
from tests.helpers import DATA, ingest, load_example, run_cli
from tests.test_call_kinds import kinds, reappended_without_decision
from tests.test_index import DOCS, ODD_TOOL, build_audit_ledger

scenarios = load_example("lineage_scenarios")

MIRRORS = {q.name: q.mirrors for q in NAMED_QUERIES.values() if q.mirrors}
UNMIRRORED = {"integrity", "state_isolation", "nested_ownership", "foreign_interruption",
              "output_not_persisted"}
"""Rules no query mirrors: integrity stops the index; the others need run-state lineage,
interruptions or how a leg ended, which the index does not hold (docs/QUERIES.md)."""

WITHOUT_DECISION = [("every_kind", "k-function"), ("every_kind", "k-shell"),
                    ("on_context", "k-apply-patch")]
"""call_kinds runs re-recorded without one decision: approval_binding for a function and a
shell call, output_provenance for an apply_patch output."""


@pytest.fixture(scope="module")
def ledgers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Name -> ledger directory, for every ledger of the module docstring."""
    root = tmp_path_factory.mktemp("named")
    found = {}
    for events in sorted((DATA / "rules").glob("*.jsonl")):
        ingest(root / events.stem, events.stem)
        found[events.stem] = root / events.stem
    found["audit"] = build_audit_ledger(root / "audit").directory

    async def record() -> None:
        for name in scenarios.SCENARIOS:
            await scenarios.record(name, root / name)
        for name in {scenario for scenario, _ in WITHOUT_DECISION}:
            await kinds.SCENARIOS[name](root / "kinds" / name)

    asyncio.run(record())
    found |= {name: root / name for name in scenarios.SCENARIOS}
    for scenario, call_id in WITHOUT_DECISION:
        target = root / f"{scenario}-without-{call_id}"
        reappended_without_decision(root / "kinds" / scenario, target, call_id)
        found[target.name] = target
    return found


def cli_json(*args: str) -> object:
    result = run_cli(*args)
    assert result.err == "", result.err
    return json.loads(result.out)


def named(ledger: Path, name: str, *params: str) -> list[dict]:
    found = cli_json("query", name, "--ledger", str(ledger), "--format", "json", *params)
    assert isinstance(found, list)
    return found


# -- the bar: mirrors return the verifier's violations ----------------------------------


@pytest.fixture(scope="module")
def verdicts(ledgers: dict[str, Path]) -> dict[str, list[dict]]:
    """Ledger name -> the violations ``verify --json`` reports."""
    out = {}
    for name, ledger in ledgers.items():
        result = run_cli("verify", "--ledger", str(ledger), "--json")
        assert result.code in (0, 1), result.err
        out[name] = json.loads(result.out)["violations"]
    return out


@pytest.mark.parametrize("query", sorted(MIRRORS))
def test_each_mirror_returns_the_verifiers_violations_of_its_rule(ledgers, verdicts, query):
    rule = MIRRORS[query]
    found = 0
    for name, ledger in ledgers.items():
        want = Counter((v["rule"], v["run_id"], v["call_id"], v["seq"])
                       for v in verdicts[name] if v["rule"] == rule)
        got = Counter((rule, r["run_id"], r["call_id"], r["seq"]) for r in named(ledger, query))
        assert got == want, name
        found += want.total()
    assert found >= 1  # its rule's example breaks it: the comparison is never empty


def test_every_rule_example_breaks_its_rule_and_mirrors_cover_the_rest(verdicts):
    for path in (DATA / "rules").glob("*.jsonl"):
        rules = {v["rule"] for v in verdicts[path.stem]}
        assert rules == (set() if path.stem == "valid" else {path.stem})
    assert set(MIRRORS.values()) == set(RULES) - UNMIRRORED
    assert len(set(MIRRORS.values())) == len(MIRRORS)  # one query per rule


def test_the_violations_query_is_the_report(ledgers, verdicts):
    for name in ("audit", "tool_linkage", "state_isolation"):
        want = [(v["seq"], v["rule"], v["call_id"]) for v in verdicts[name]]
        got = [(r["seq"], r["rule"], r["call_id"]) for r in named(ledgers[name], "violations")]
        assert got == want and want
    only = named(ledgers["audit"], "violations", "--param", "rule=tool_linkage")
    assert [r["rule"] for r in only] == ["tool_linkage", "tool_linkage"]


# -- the queries as data, and docs/QUERIES.md --------------------------------------------


def test_docs_show_each_named_query_with_its_sql():
    text = DOCS.read_text(encoding="utf-8")
    shown = dict(re.findall(r"<!-- query: (\w+) -->\n```sql\n(.*?)\n```", text, re.S))
    assert shown == {name: q.sql for name, q in NAMED_QUERIES.items()}
    for name in NAMED_QUERIES:  # each question names its query
        assert f"**`{name}`**: " in text


@pytest.mark.parametrize("name", sorted(NAMED_QUERIES))
def test_each_query_is_one_read_and_uses_each_of_its_parameters(name):
    query = NAMED_QUERIES[name]
    check_read_only(query.sql)
    assert set(re.findall(r"\$(\w+)", query.sql)) == {p.name for p in query.params}
    assert query.mirrors in (None, *RULES)


def test_the_public_api_lists_and_runs_them(ledgers):
    assert [q.name for q in el.named_queries()] == list(NAMED_QUERIES)
    book = el.Ledger(ledgers["audit"])
    result = book.query("outputs_persisted_for_run", params={"run_id": "r1"})
    assert "ghost" in [row[result.columns.index("call_id")] for row in result.rows]
    assert book.query("recent_approvals", params={"days": 7}).rows == \
        book.query("recent_approvals").rows  # the default
    with pytest.raises(TypeError, match="parameter days: str or int, not bool"):
        book.query("recent_approvals", params={"days": True})
    with pytest.raises(el.UsageError, match="needs parameter run_id"):
        book.query("outputs_persisted_for_run")


# -- query --list ------------------------------------------------------------------------


def test_list_names_each_query_its_question_parameters_and_rule(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ledger: listing reads none
    monkeypatch.setenv("COLUMNS", "400")
    result = run_cli("query", "--list", "--no-expanded")
    assert (result.code, result.err) == (0, "")
    lines = result.out.splitlines()
    # the columns are named as the --json keys are (before: "parameters" here, "params"
    # there; a trial user's note)
    header = next(line for line in lines if "┃ name " in line)
    assert [c.strip() for c in header.strip("┃ ").split("┃")] == [
        "name", "question", "params", "mirrors"]
    row = next(line for line in lines if "│ recent_approvals " in line)
    assert len(row) > 200, lines
    assert "Who approved what in the last `days` days." in row
    assert "days INTEGER = 7: how many days back from now" in row
    row = next(line for line in lines if "│ executed_twice " in line)
    assert "│ exactly_once " in row
    assert lines[-1].startswith(f"{len(NAMED_QUERIES)} named queries: query NAME")
    assert not any((tmp_path / name).exists() for name in (".evidence", "index.duckdb"))


def test_list_honours_format_as_json_does():
    # before: --list --format json (and jsonl, csv) printed the text records (a trial
    # user's note)
    listed = cli_json("query", "--list", "--json")
    assert cli_json("query", "--list", "--format", "json") == listed
    lines = run_cli("query", "--list", "--format", "jsonl")
    assert lines.code == 0 and [json.loads(line) for line in lines.out.splitlines()] == listed
    refused = run_cli("query", "--list", "--format", "csv")
    assert refused.code == 2 and refused.out == "" and "--format json" in refused.err
    both = run_cli("query", "--list", "--json", "--format", "csv")
    assert both.code == 2 and "give one" in both.err


def test_list_json_gives_each_query_whole():
    listed = cli_json("query", "--list", "--json")
    assert isinstance(listed, list)
    assert [q["name"] for q in listed] == list(NAMED_QUERIES)
    by_name = {q["name"]: q for q in listed}
    assert by_name["executed_twice"]["mirrors"] == "exactly_once"
    assert by_name["executed_twice"]["sql"] == NAMED_QUERIES["executed_twice"].sql
    assert by_name["recent_approvals"]["params"] == [{
        "name": "days", "type": "INTEGER", "help": "how many days back from now",
        "default": 7, "required": False, "choices": [], "minimum": 0, "maximum": 100_000}]
    (rule,) = by_name["violations"]["params"]
    assert rule["choices"] == list(RULES) and rule["default"] is None


# -- parameters: bound, checked ----------------------------------------------------------


def test_parameters_are_bound_never_pasted(ledgers):
    audit = str(ledgers["audit"])
    ran = named(ledgers["audit"], "outputs_persisted_for_run", "--param", "run_id=r1")
    assert {r["call_id"]: r["tool"] for r in ran}["c6"] == ODD_TOOL
    for hostile in ("r1' OR '1'='1", "r1'; DROP TABLE calls; --"):
        assert named(ledgers["audit"], "outputs_persisted_for_run", "--param",
                     f"run_id={hostile}") == []
    assert named(ledgers["audit"], "recent_approvals", "--param", "days=0") == []
    recent = named(ledgers["audit"], "recent_approvals", "--param", "days=7")
    assert [(r["approver"], r["call_id"]) for r in recent] == [("erin@example.com", "c20")]
    every = cli_json("query", "--ledger", audit, "--json",
                     "SELECT count(*) AS n FROM approvals WHERE decision = 'approve'")
    assert [{"n": len(named(ledgers["audit"], "recent_approvals", "--param",
                            "days=100000"))}] == every
    mine = cli_json("query", "--ledger", audit, "SELECT $who AS who, $n AS n", "--param",
                    "who=ann", "--param", "n=7", "--json")
    assert mine == [{"who": "ann", "n": "7"}]  # your own SQL: text, bound as given


@pytest.mark.parametrize(("args", "message"), [
    (["nosuch"], "no query named 'nosuch'; named queries: gated_without_approval, "),
    (["violations", "--param", "rul=x"],
     "query violations takes no parameter 'rul' (its parameters: rule)"),
    (["violations_per_rule", "--param", "rule=x"],
     "query violations_per_rule takes no parameter 'rule' (its parameters: none)"),
    (["outputs_persisted_for_run"],
     "query outputs_persisted_for_run needs parameter run_id (VARCHAR, the run): "
     "--param run_id=VALUE"),
    (["recent_approvals", "--param", "days=seven"],
     "parameter days takes an integer from 0 to 100000, not 'seven'"),
    (["recent_approvals", "--param", "days=100001"],
     "parameter days takes an integer from 0 to 100000, not 100001"),
    (["recent_approvals", "--param", "days=-1"],
     "parameter days takes an integer from 0 to 100000, not -1"),
    (["violations", "--param", "rule=approval"],
     f"parameter rule takes one of {', '.join(RULES)}; not 'approval'"),
    (["violations", "--param", "rule"], "--param takes NAME=VALUE, not 'rule'"),
    (["violations", "--param", "=x"], "--param takes NAME=VALUE, not '=x'"),
    (["recent_approvals", "--param", "days=1", "--param", "days=2"],
     "--param days is given twice"),
    (["--list", "violations"], "--list takes no query and no --param"),
    ([], "give one SELECT statement or a query name (query --list)"),
    (["violations", "--json", "--format", "csv"], "--json and --format csv: give one"),
    (["SELECT $x AS x"], "SQL error: Invalid Input Error: Values were not provided"),
])
def test_bad_names_and_parameters_are_one_line_with_exit_2(ledgers, args, message):
    result = run_cli("query", "--ledger", str(ledgers["audit"]), *args)
    assert (result.code, result.out) == (2, "")
    assert result.err.startswith(f"evidence-ledger: error: {message}"), result.err
    assert result.err.count("\n") == 1


# -- how rows are shown ------------------------------------------------------------------

C7 = "SELECT seq, call_id, arguments_digest FROM approvals WHERE call_id = 'c7'"


def test_a_table_wider_than_the_terminal_is_one_record_per_block(ledgers, monkeypatch):
    monkeypatch.setenv("COLUMNS", "36")  # the table wants 39
    ledger, sql = str(ledgers["audit"]), C7 + " OR call_id = 'c1' ORDER BY seq"
    c1, c7 = cli_json("query", "--ledger", ledger, sql, "--json")  # type: ignore[misc]
    result = run_cli("query", "--ledger", ledger, sql)
    assert (result.code, result.err) == (0, "")
    assert result.out.splitlines() == [
        "-[ RECORD 1 ]-----------------------",  # as wide as the console, at most
        f"seq              | {c1['seq']}",
        "call_id          | c1",
        f"arguments_digest | {c1['arguments_digest'][:19]}",
        "-[ RECORD 2 ]-----------------------",
        f"seq              | {c7['seq']}",
        "call_id          | c7",
        f"arguments_digest | {c7['arguments_digest'][:19]}",
        "2 row(s) at tree size 53; digests cut to 12 hex digits (--format csv or json prints "
        "them whole)",
    ]


def test_a_record_stays_on_its_lines_whatever_its_values_hold(ledgers, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    result = run_cli("query", "--ledger", str(ledgers["audit"]), "--expanded",
                     "SELECT approver, reason FROM approvals WHERE call_id = 'c7'")
    assert result.out.splitlines()[1:3] == [
        'approver | Doe, "JD"\\nJane', 'reason   | ok, "urgent"\\nsee ticket, 7']


def test_expanded_can_be_forced_either_way(ledgers, monkeypatch):
    ledger = str(ledgers["audit"])
    monkeypatch.setenv("COLUMNS", "36")
    table = run_cli("query", "--ledger", ledger, C7, "--no-expanded").out
    assert "┃ seq" in table and "-[ RECORD" not in table
    monkeypatch.setenv("COLUMNS", "300")
    assert "┃ seq" in run_cli("query", "--ledger", ledger, C7).out  # fits: a table
    records = run_cli("query", "--ledger", ledger, C7, "--expanded").out
    assert records.startswith("-[ RECORD 1 ]---") and "call_id          | c7\n" in records


def test_a_piped_table_is_200_columns_wide_unless_columns_says(ledgers, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    wide = "SELECT " + ", ".join(f"'{'x' * 20}' AS c{i}" for i in range(9))  # 9 * 23 + 1 > 200
    ledger = str(ledgers["audit"])
    assert run_cli("query", "--ledger", ledger, wide).out.startswith("-[ RECORD 1 ]")
    assert run_cli("query", "--ledger", ledger, wide.rpartition(",")[0]).out.startswith("┏")


def test_digests_are_cut_in_tables_and_whole_elsewhere(ledgers, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    ledger = str(ledgers["audit"])
    (full,) = cli_json("query", "--ledger", ledger, C7, "--format", "json")
    digest = full["arguments_digest"]
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
    table = run_cli("query", "--ledger", ledger, C7).out
    assert f"│ {digest[:19]} │" in table and digest not in table
    for form in ("csv", "jsonl"):
        assert digest in run_cli("query", "--ledger", ledger, C7, "--format", form).out
    plain = run_cli("query", "--ledger", ledger, "SELECT 1 AS n").out
    assert plain.splitlines()[-1] == "1 row(s) at tree size 53"  # nothing cut, nothing said


def test_short_digests_cuts_only_whole_digests():
    hex64 = "0a8b3c4d5e6f" + "7" * 52
    assert short_digests(f"sha256:{hex64}") == "sha256:0a8b3c4d5e6f"
    assert short_digests(f'["sha256:{hex64}","sha256:{hex64}"]') == \
        '["sha256:0a8b3c4d5e6f","sha256:0a8b3c4d5e6f"]'
    for kept in (f"sha256:{hex64}0", f"sha256:{hex64[:-1]}", f"xsha256:{hex64}",
                 f"sha256:{hex64.upper()}"):
        assert short_digests(kept) == kept

