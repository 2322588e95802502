"""Named audit queries: the questions of docs/QUERIES.md as data (name, question, SQL,
parameters), run by name with ``evidence-ledger query NAME [--param k=v]`` or
``Ledger.query(name, params=...)``.

A query that mirrors a rule (:attr:`NamedQuery.mirrors`) asks the rule's question from the
facts of the index (calls, approvals, executions, session items) and returns one row per
violation the verifier reports, ``seq`` being the entry where the break shows (as in
``verify --json``), with the call identity ``run_id``, ``scope``, ``call_id``. The
``violations`` table holds the verifier's own findings and is exact; where a mirror's
facts cannot tell (run-state lineage and the status a leg ended with are not in the
index), docs/QUERIES.md says how it can differ. Rules no mirror asks
(``state_isolation``, ``nested_ownership``, ``foreign_interruption``,
``output_not_persisted``) are read from ``violations`` (the ``violations`` query).

Parameters are bound as DuckDB prepared-statement parameters (``$name``), never pasted
into the SQL. This module imports no DuckDB: listing needs no ``[query]`` extra.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from textwrap import dedent

from evidence_ledger.format.errors import UsageError
from evidence_ledger.verify.findings import (
    APPROVAL_BINDING,
    APPROVED_NOT_EXECUTED,
    ARGUMENT_INTEGRITY,
    EXACTLY_ONCE,
    EXECUTION_PROVENANCE,
    OUTPUT_PROVENANCE,
    REJECTION_RESPECTED,
    RULES,
    TOOL_LINKAGE,
)
from evidence_ledger.verify.rules import CALL_OUTPUTS

__all__ = ["NAMED_QUERIES", "NamedQuery", "Param", "named_queries", "resolve"]

ParamValue = str | int | None
"""A bound parameter value: text, an integer, or NULL."""

_INTEGER = re.compile(r"-?[0-9]{1,19}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Param:
    """One parameter of a named query, bound as ``$name``.

    Attributes:
        name: the parameter's name (``--param name=value``).
        type: ``VARCHAR`` (text) or ``INTEGER``.
        help: what it selects, one line.
        default: the value when not given (None: NULL, which the query reads as "all").
        required: it has no default: a value must be given.
        choices: the values allowed (text), when the set is closed.
        bounds: ``(lowest, highest)`` allowed for an ``INTEGER``.
    """

    name: str
    type: str
    help: str
    default: ParamValue = None
    required: bool = False
    choices: tuple[str, ...] = ()
    bounds: tuple[int, int] = (0, 2**31 - 1)

    def value(self, given: object) -> ParamValue:
        """``given`` (text from the command line, or a Python value) as the value bound.

        Raises:
            UsageError: for text that is not a value of the parameter (one line naming
                what is valid).
            TypeError: for a Python value of another type (not str, nor int for an
                ``INTEGER``).
        """
        if self.type == "INTEGER" and type(given) is int:
            number = given
        elif not isinstance(given, str):
            kinds = "str or int" if self.type == "INTEGER" else "str"
            raise TypeError(f"parameter {self.name}: {kinds}, not {type(given).__name__}")
        elif self.type == "INTEGER":
            if not _INTEGER.fullmatch(given):
                raise UsageError(f"parameter {self.name} takes an integer from {self.bounds[0]} "
                                 f"to {self.bounds[1]}, not {given!r}")
            number = int(given)
        else:
            if self.choices and given not in self.choices:
                raise UsageError(f"parameter {self.name} takes one of {', '.join(self.choices)}; "
                                 f"not {given!r}")
            return given
        low, high = self.bounds
        if not low <= number <= high:
            raise UsageError(f"parameter {self.name} takes an integer from {low} to {high}, "
                             f"not {number}")
        return number

    def describe(self) -> str:
        """One line: ``name TYPE = default`` (or ``(required)``), then its help."""
        if self.required:
            given = " (required)"
        else:
            given = f" = {'NULL' if self.default is None else self.default}"
        return f"{self.name} {self.type}{given}: {self.help}"

    def to_json(self) -> dict[str, object]:
        """``{"name", "type", "help", "default", "required", "choices"}`` (and
        ``minimum``/``maximum`` for an ``INTEGER``)."""
        out: dict[str, object] = {
            "name": self.name, "type": self.type, "help": self.help, "default": self.default,
            "required": self.required, "choices": list(self.choices),
        }
        if self.type == "INTEGER":
            out["minimum"], out["maximum"] = self.bounds
        return out


@dataclass(frozen=True)
class NamedQuery:
    """One named audit query.

    Attributes:
        name: what ``query NAME`` calls it.
        question: the audit question it answers, one line.
        sql: one read-only ``SELECT``; parameters as ``$name``.
        params: its parameters, each used in ``sql``.
        mirrors: the verifier rule (``verify``) whose violations it returns, one row each
            with the ``seq`` where it shows; None for other questions.
    """

    name: str
    question: str
    sql: str
    params: tuple[Param, ...] = ()
    mirrors: str | None = None

    def bind(self, given: Mapping[str, object] | None) -> dict[str, ParamValue]:
        """The values to bind: each parameter's given value (see :meth:`Param.value`) or
        default.

        Raises:
            UsageError: for a parameter the query does not take, a required one not
                given, or a bad value (one line naming what is valid).
        """
        given = dict(given or {})
        known = {p.name: p for p in self.params}
        unknown = sorted(set(given) - set(known))
        if unknown:
            takes = ", ".join(known) if known else "none"
            raise UsageError(f"query {self.name} takes no parameter {unknown[0]!r} "
                             f"(its parameters: {takes})")
        bound: dict[str, ParamValue] = {}
        for param in self.params:
            if param.name in given:
                bound[param.name] = param.value(given[param.name])
            elif param.required:
                raise UsageError(f"query {self.name} needs parameter {param.name} "
                                 f"({param.type}, {param.help}): --param {param.name}=VALUE")
            else:
                bound[param.name] = param.default
        return bound

    def to_json(self) -> dict[str, object]:
        """``{"name", "question", "mirrors", "params": [...], "sql"}`` for ``query --list
        --json``."""
        return {"name": self.name, "question": self.question, "mirrors": self.mirrors,
                "params": [p.to_json() for p in self.params], "sql": self.sql}


def _sql(text: str) -> str:
    return dedent(text).strip()


_OUTPUT_ITEMS = ", ".join(f"'{kind}'" for kind in CALL_OUTPUTS)
"""The item types of persisted tool outputs, as an SQL list. Each one's call item type
is its name without ``_output`` (:data:`evidence_ledger.verify.rules.CALL_OUTPUTS`)."""

_RAN = """
    WITH ran AS (  -- executions with the call they ran, those the rules judge as its own
        SELECT e.seq, e.arguments_match, c.seq AS call_seq, c.run_id, c.scope, c.call_id,
               c.agent, c.tool, c.arguments_digest, ch.needs_approval AS gated
        FROM executions e JOIN calls c ON c.seq = e.call_seq
        JOIN call_chains ch ON ch.call_seq = c.seq
        WHERE e.scope = c.scope OR NOT (ch.needs_approval OR EXISTS (
            SELECT 1 FROM approvals a WHERE a.call_seq = c.seq AND a.seq < e.seq))
    )"""
"""Executions traced to their call (``call_seq``), except one run at another agent-as-tool
scope than a call that was gated or decided (``nested_ownership``, not judged further)."""

_JUDGED = _RAN + """, judged AS (  -- and the decisions in force when each ran
        SELECT r.*,
            (SELECT arg_max({'decision': a.decision, 'seq': a.seq, 'approver': a.approver,
                             'scope': a.scope, 'shown': a.arguments_digest}, a.seq)
             FROM approvals a WHERE a.call_seq = r.call_seq AND a.seq < r.seq) AS own,
            (SELECT arg_max({'decision': a.decision, 'seq': a.seq, 'approver': a.approver},
                            a.seq)
             FROM approvals a JOIN calls d ON d.seq = a.call_seq
             WHERE a.always AND a.seq < r.seq AND d.run_id = r.run_id
               AND d.scope = r.scope AND a.agent = r.agent AND a.tool = r.tool) AS sticky
        FROM ran r
    )"""
""":data:`_RAN` with the call's latest decision before each execution (``own``) and the
latest sticky (``always``) decision on its agent's tool in its run and scope (``sticky``):
the call's own decision beats a sticky one."""

_QUERIES = (
    NamedQuery(
        "gated_without_approval",
        "Gated calls executed without a human approval (one recorded after the execution "
        "does not count).",
        _sql("""
            SELECT run_id, scope, call_id, tool, executed_at
            FROM call_chains
            WHERE needs_approval AND executed_at IS NOT NULL
              AND (decision IS NULL OR decided_at > executed_at)
            ORDER BY call_seq
        """),
    ),
    NamedQuery(
        "executed_without_bound_approval",
        "Executions of a gated call that no approval of exactly its arguments allowed.",
        _sql(_JUDGED + """
            SELECT seq, run_id, scope, call_id, tool, own.seq AS approved_at,
                   own.shown AS approved_arguments, arguments_digest
            FROM judged j
            WHERE gated AND (
                own IS NULL AND sticky IS NULL AND NOT EXISTS (  -- approved elsewhere?
                    SELECT 1 FROM approvals a
                    WHERE a.decision = 'approve' AND a.call_id = j.call_id AND a.seq < j.seq
                      AND (a.run_id = j.run_id) <> (a.scope = j.scope))
                OR own.decision = 'approve' AND own.scope = scope
                   AND own.shown <> arguments_digest)
            ORDER BY seq
        """),
        mirrors=APPROVAL_BINDING,
    ),
    NamedQuery(
        "approvals_not_bound",
        "Approvals whose arguments digest differs from the call's (the approver saw other "
        "arguments).",
        _sql("""
            SELECT seq, run_id, scope, call_id, tool, approver, arguments_digest,
                   call_arguments_digest
            FROM approvals
            WHERE decision = 'approve' AND NOT bound
            ORDER BY seq
        """),
    ),
    NamedQuery(
        "executed_after_rejection",
        "Executions of a call after it was rejected (its own rejection, else a sticky one "
        "on its tool).",
        _sql(_JUDGED + """
            SELECT seq, run_id, scope, call_id, tool, coalesce(own, sticky).seq AS rejected_at,
                   coalesce(own, sticky).approver AS rejected_by
            FROM judged
            WHERE coalesce(own, sticky).decision = 'reject'
            ORDER BY seq
        """),
        mirrors=REJECTION_RESPECTED,
    ),
    NamedQuery(
        "executed_other_arguments",
        "Executions whose arguments differ from the ones the call was made with.",
        _sql(_RAN + """
            SELECT r.seq, r.run_id, r.scope, r.call_id, r.tool, e.arguments_digest,
                   r.arguments_digest AS call_arguments_digest
            FROM ran r JOIN executions e ON e.seq = r.seq
            WHERE NOT r.arguments_match
            ORDER BY r.seq
        """),
        mirrors=ARGUMENT_INTEGRITY,
    ),
    NamedQuery(
        "executed_twice",
        "Second and later executions of one call.",
        _sql(_RAN + """
            SELECT r.seq, r.run_id, r.scope, r.call_id, r.tool, min(f.seq) AS first_seq
            FROM ran r JOIN ran f ON f.call_seq = r.call_seq AND f.seq < r.seq
            GROUP BY ALL
            ORDER BY r.seq
        """),
        mirrors=EXACTLY_ONCE,
    ),
    NamedQuery(
        "executions_without_call",
        "Executions of a call that was never recorded.",
        _sql("""
            SELECT seq, run_id, scope, call_id, tool, executed_at
            FROM executions
            WHERE call_seq IS NULL
            ORDER BY seq
        """),
        mirrors=EXECUTION_PROVENANCE,
    ),
    NamedQuery(
        "approved_not_executed",
        "Calls approved but never executed (nor blocked), at the end of the next leg of "
        "their run.",
        _sql("""
            WITH approved AS (  -- approvals of a call still not run; the next leg end
                SELECT a.seq, a.call_seq, a.approver, (
                    SELECT min(x.seq) FROM entries x
                    WHERE x.kind = 'run_end' AND x.run_id = a.run_id AND x.seq > a.seq
                ) AS ended
                FROM approvals a JOIN call_chains ch ON ch.call_seq = a.call_seq
                WHERE a.decision = 'approve' AND ch.status = 'approved_not_executed'
            )
            SELECT p.ended AS seq, c.run_id, c.scope, c.call_id, c.tool,
                   max(p.seq) AS approved_at, arg_max(p.approver, p.seq) AS approver
            FROM approved p JOIN calls c ON c.seq = p.call_seq
            WHERE p.ended IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM approvals r
                WHERE r.call_seq = p.call_seq AND r.decision = 'reject'
                  AND r.seq > p.seq AND r.seq < p.ended)
            GROUP BY ALL
            ORDER BY seq, call_id
        """),
        mirrors=APPROVED_NOT_EXECUTED,
    ),
    NamedQuery(
        "outputs_without_call",
        "Outputs persisted for a call that was never recorded.",
        _sql("""
            SELECT seq, run_id, scope, session_id, call_id
            FROM session_items
            WHERE op = 'add' AND item_type = 'function_call_output' AND call_seq IS NULL
            ORDER BY seq
        """),
    ),
    NamedQuery(
        "untraced_outputs",
        "Persisted tool outputs that trace to no recorded call, or to none of its "
        "executions' results, rejections or guardrail blocks.",
        _sql(f"""
            WITH withheld AS (  -- results an output guardrail blocked right after they ran
                SELECT e.seq, e.call_seq, e.result_digest
                FROM executions e JOIN guardrails g ON g.call_seq = e.call_seq
                    AND g.blocked_at_ns = e.executed_at_ns AND g.seq > e.seq
                WHERE e.result_digest IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM executions y WHERE y.seq > e.seq AND y.seq < g.seq)
            ), answers AS (  -- what may stand as a call's output ('*': any message)
                SELECT call_seq, seq, result_digest AS digest FROM executions
                WHERE seq NOT IN (SELECT seq FROM withheld)
                UNION ALL SELECT call_seq, seq, coalesce(message_digest, '*') FROM approvals
                WHERE decision = 'reject'
                UNION ALL SELECT call_seq, seq, coalesce(message_digest, '*') FROM guardrails
                UNION ALL SELECT call_seq, seq, coalesce(message_digest, '*')
                FROM guard_verdicts WHERE verdict = 'denied' AND mode = 'enforce'
            ), outputs AS (
                SELECT o.seq, coalesce(c.run_id, o.run_id) AS run_id,
                       coalesce(c.scope, o.scope) AS scope, o.call_id, o.session_id,
                       o.item_type, o.output_digest, o.call_seq, c.agent, c.tool
                FROM session_items o LEFT JOIN calls c ON c.seq = o.call_seq
                WHERE o.op = 'add' AND o.item_type IN ({_OUTPUT_ITEMS}) AND o.call_id <> ''
            )
            SELECT seq, run_id, scope, call_id, session_id, item_type, output_digest
            FROM outputs o
            WHERE call_seq IS NULL OR (NOT EXISTS (
                SELECT 1 FROM answers w
                WHERE w.call_seq = o.call_seq AND w.seq < o.seq
                  AND (o.item_type <> 'function_call_output' OR w.digest = o.output_digest
                       OR w.digest = '*' AND o.output_digest NOT IN (
                           SELECT result_digest FROM withheld h
                           WHERE h.call_seq = o.call_seq AND h.seq < o.seq))
            ) AND coalesce(  -- a rejection in force lets any output stand
                (SELECT arg_max(a.decision, a.seq) FROM approvals a
                 WHERE a.call_seq = o.call_seq AND a.seq < o.seq),
                (SELECT arg_max(a.decision, a.seq) FROM approvals a
                 JOIN calls d ON d.seq = a.call_seq
                 WHERE a.always AND a.seq < o.seq AND d.run_id = o.run_id
                   AND d.scope = o.scope AND a.agent = o.agent AND a.tool = o.tool),
                '') <> 'reject')
            ORDER BY seq
        """),
        mirrors=OUTPUT_PROVENANCE,
    ),
    NamedQuery(
        "outputs_without_function_call",
        "Tool outputs persisted in a session without their call item there before them "
        "(added since the session was last cleared, and not popped).",
        _sql(f"""
            SELECT o.seq, coalesce(c.run_id, o.run_id) AS run_id,
                   coalesce(c.scope, o.scope) AS scope, o.call_id, o.session_id, o.item_type
            FROM session_items o LEFT JOIN calls c ON c.seq = o.call_seq
            WHERE o.op = 'add' AND o.item_type IN ({_OUTPUT_ITEMS}) AND o.call_id <> ''
              AND NOT EXISTS (
                SELECT 1 FROM session_items f
                WHERE f.session_id = o.session_id AND f.call_id = o.call_id
                  AND f.item_type = replace(o.item_type, '_output', '') AND f.seq < o.seq
                  AND f.seq > coalesce((
                      SELECT max(x.seq) FROM session_items x
                      WHERE x.session_id = o.session_id AND x.op = 'clear' AND x.seq < o.seq
                  ), -1)
                HAVING sum(CASE WHEN f.op = 'add' THEN 1 ELSE -1 END) > 0)
            ORDER BY o.seq
        """),
        mirrors=TOOL_LINKAGE,
    ),
    NamedQuery(
        "decisions_per_approver_per_day",
        "Approvals and rejections per approver per day (UTC).",
        _sql("""
            SELECT approver, CAST(decided_at AS DATE) AS day,
                   count(*) FILTER (WHERE decision = 'approve') AS approvals,
                   count(*) FILTER (WHERE decision = 'reject') AS rejections
            FROM approvals
            GROUP BY approver, day
            ORDER BY day, approver
        """),
    ),
    NamedQuery(
        "recent_approvals",
        "Who approved what in the last `days` days.",
        _sql("""
            SELECT decided_at, approver, run_id, scope, call_id, tool, bound
            FROM approvals
            WHERE decision = 'approve' AND decided_at >= now()::TIMESTAMP - to_days($days)
            ORDER BY decided_at
        """),
        (Param("days", "INTEGER", "how many days back from now", default=7,
               bounds=(0, 100_000)),),
    ),
    NamedQuery(
        "approval_wait",
        "How long approvals waited, per approver (seconds from the call to the decision).",
        _sql("""
            SELECT a.approver, count(*) AS decisions,
                   avg(epoch_us(a.decided_at) - epoch_us(c.called_at)) / 1e6 AS mean_wait_s,
                   max(epoch_us(a.decided_at) - epoch_us(c.called_at)) / 1e6 AS max_wait_s
            FROM approvals a JOIN calls c ON c.seq = a.call_seq
            GROUP BY a.approver
            ORDER BY a.approver
        """),
    ),
    NamedQuery(
        "outputs_persisted_for_run",
        "Which tool outputs were persisted for a run.",
        _sql("""
            SELECT s.seq, s.session_id, s.call_id, c.tool, s.output_digest, s.recorded_at
            FROM session_items s LEFT JOIN calls c ON c.seq = s.call_seq
            WHERE s.run_id = $run_id AND s.op = 'add'
              AND s.item_type = 'function_call_output'
            ORDER BY s.seq
        """),
        (Param("run_id", "VARCHAR", "the run", required=True),),
    ),
    NamedQuery(
        "denied_calls",
        "Calls the guard denied, and why (in observe mode the tool ran all the same).",
        _sql("""
            SELECT seq, run_id, scope, call_id, tool, mode, code, reason, judged_at
            FROM guard_verdicts
            WHERE verdict = 'denied'
            ORDER BY seq
        """),
    ),
    NamedQuery(
        "revoked_approvals",
        "Revoked approvals, and whether the guard later stopped the call.",
        _sql("""
            SELECT r.seq, r.call_id, r.revoked_by, r.reason, r.revoked_at,
                   count(g.seq) FILTER (WHERE g.verdict = 'denied' AND g.code = 'revoked')
                       AS stopped
            FROM revocations r
            LEFT JOIN guard_verdicts g ON g.call_id = r.call_id AND g.seq > r.seq
                AND (r.run_id IS NULL OR g.run_id = r.run_id)
            GROUP BY ALL
            ORDER BY r.seq
        """),
    ),
    NamedQuery(
        "violations",
        "The violations the verifier's rules find in the log (of one rule, or all), in its "
        "order; payload, checkpoint and guard findings are verify's only.",
        _sql("""
            SELECT seq, rule, run_id, scope, call_id, detail
            FROM violations
            WHERE CAST($rule AS VARCHAR) IS NULL OR rule = $rule
            ORDER BY finding_no
        """),
        (Param("rule", "VARCHAR", "only this rule (NULL: every rule)", choices=RULES),),
    ),
    NamedQuery(
        "violations_per_rule",
        "Violations per rule.",
        _sql("""
            SELECT rule, count(*) AS violations
            FROM violations
            GROUP BY rule
            ORDER BY rule
        """),
    ),
)

NAMED_QUERIES: dict[str, NamedQuery] = {query.name: query for query in _QUERIES}
"""Every named query by name, in the order ``query --list`` shows them."""


def named_queries() -> list[NamedQuery]:
    """The named audit queries (docs/QUERIES.md), in the order ``query --list`` shows
    them. Needs no ``[query]`` extra."""
    return list(NAMED_QUERIES.values())


def resolve(
    sql_or_name: str, params: Mapping[str, object] | None = None
) -> tuple[str, dict[str, object] | None]:
    """The SQL to run and the parameters to bind for ``sql_or_name``: a named query's SQL
    and its parameters checked (:meth:`NamedQuery.bind`); else ``sql_or_name`` is SQL,
    run with ``params`` as given (``$name`` in the SQL; None: no parameters).

    A single word (a name, never a statement) that names no query is refused.

    Raises:
        UsageError: for an unknown name (the message lists the known ones) or a
            parameter the named query does not take, lacks, or cannot take.
    """
    text = sql_or_name.strip()
    query = NAMED_QUERIES.get(text)
    if query is not None:
        return query.sql, dict(query.bind(params))
    if _NAME.fullmatch(text):
        raise UsageError(f"no query named {text!r}; named queries: {', '.join(NAMED_QUERIES)} "
                         "(query --list)")
    return sql_or_name, None if params is None else dict(params)
