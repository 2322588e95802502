"""The HTML report's model: each run as a timeline of call spans (call -> decisions ->
executions -> persisted items) with the run's own entries between them, every violation at
its place, the run-state lineage as trees, and payload values as people read them.

Pure: built from decoded entries in seq order, the verifier's findings, its call states,
the run-state forest and a :class:`ValueSource` (which the caller hands the bytes it
reads); rendered by :mod:`evidence_ledger.views.report_html`. Read by the ledger's and the
proof bundle's report (:mod:`evidence_ledger.views.report_ledger`,
:mod:`evidence_ledger.views.report_bundle`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evidence_ledger.bundle.verify import Selection
from evidence_ledger.format.entries import Entry
from evidence_ledger.verify.chains import CallChain, call_chains
from evidence_ledger.verify.findings import Finding
from evidence_ledger.verify.lineage import BoundEntry, StateNode
from evidence_ledger.verify.rules import CallKey, CallState
from evidence_ledger.views.values import (
    COMPARED_ROLES,
    PREVIEW_BYTES,
    Redaction,
    Value,
    ValueDiff,
    argument_payloads,
    preview,
)

__all__ = [
    "MAX_ENTRIES",
    "MAX_STATES",
    "VALUE_BUDGET",
    "CallSpan",
    "CheckpointView",
    "Flag",
    "ReportModel",
    "RunView",
    "Shown",
    "StateRow",
    "Step",
    "ValueSource",
    "build_report",
]

MAX_ENTRIES = 10_000
"""Most entries a report shows (about 2 KiB of HTML each); a larger selection is shown up
to this many, and the header says how many more there are."""

MAX_STATES = 2_000
"""Most run states a report draws per run."""

MAX_UNPLACED = 1_000
"""Most violations a report lists that sit at no entry shown (past :data:`MAX_ENTRIES`,
or at none): the rest are counted."""

VALUE_BUDGET = 32 << 20
"""Most payload bytes a report holds in all (32 MiB; each value at most
:data:`~evidence_ledger.views.values.PREVIEW_BYTES`): later values are left out, counted."""

PREVIEW_WIDTH = 96
"""Characters of a value's one-line preview."""

LABELS = {
    "args_payload": "arguments", "result_digest": "result", "message_digest": "message",
    "item_digest": "item", "policy_digest": "policy", "history_digest": "history",
}
"""Payload fields a step shows, in this order, and their names (``output_digest`` is part
of the item it stands beside)."""


class ValueSource:
    """The payload values of one report: each digest read at most once, redacted ones never
    read, and at most ``budget`` bytes read in all (later ones left out and counted).

    Args:
        read: a payload's bytes by its 32-byte digest (at most ``PREVIEW_BYTES + 1`` of
            them), None when not found; None for no values at all (``--no-values``, or a
            bundle of digests only).
        redactions: digest -> its redaction (:func:`~evidence_ledger.views.values.redactions_of`).
        absent_withheld: a payload ``read`` does not find was not handed over (a bundle's),
            rather than lost (a ledger's).
        budget: bytes, see :data:`VALUE_BUDGET`.
    """

    def __init__(self, read: Callable[[bytes], bytes | None] | None,
                 redactions: Mapping[bytes, Redaction], *, absent_withheld: bool = False,
                 budget: int = VALUE_BUDGET) -> None:
        self._read = read
        self.redactions = dict(redactions)
        self._absent_withheld = absent_withheld
        self._left = budget
        self._seen: dict[bytes, Value] = {}
        self.over_budget = 0
        """Values left out because the budget was spent."""

    @property
    def included(self) -> bool:
        """Whether values are looked for at all."""
        return self._read is not None

    def __call__(self, digest: bytes) -> Value:
        """The value of ``digest`` (see :meth:`~evidence_ledger.views.values.Value.of`)."""
        found = self._seen.get(digest)
        if found is None:
            found = self._seen[digest] = self._value(digest)
        return found

    def _value(self, digest: bytes) -> Value:
        if self._read is None or digest in self.redactions:
            return Value.of(digest, None, self.redactions, withheld=True)
        if self._left <= 0:
            self.over_budget += 1
            return Value.of(digest, None, self.redactions, withheld=True)
        data = self._read(digest)
        if data is None and self._absent_withheld:
            return Value.of(digest, None, self.redactions, withheld=True)
        self._left -= min(len(data or b""), PREVIEW_BYTES)
        return Value.of(digest, data, self.redactions)


@dataclass(frozen=True)
class Shown:
    """One payload at one step.

    Attributes:
        label: what it is (``arguments``, ``result``, ``item``...).
        value: its value (state, digest, bytes).
        text: the whole value to read, pretty JSON or text (None unless present).
        line: a one-line preview of it (None unless present).
    """

    label: str
    value: Value
    text: str | None = None
    line: str | None = None

    @classmethod
    def of(cls, label: str, value: Value) -> Shown:
        """``value`` under ``label``, with its text and preview when present."""
        if value.state != "present":
            return cls(label, value)
        parsed = value.parsed()
        text = parsed if isinstance(parsed, str) else _dumps(parsed, indent=2)
        if value.cut:
            text += f"\n… (cut: the first {PREVIEW_BYTES >> 20} MiB of a larger payload)"
        line = preview(parsed if isinstance(parsed, str) else _dumps(parsed), PREVIEW_WIDTH)
        return cls(label, value, text, line)


def _dumps(value: Any, indent: int | None = None) -> str:
    """``value`` as JSON text (compact unless ``indent``); a structure nested too deep for
    the encoder as its Python repr."""
    try:
        return json.dumps(value, ensure_ascii=False, indent=indent,
                          separators=None if indent else (",", ":"))
    except RecursionError:
        return repr(value)


@dataclass(frozen=True)
class Flag:
    """One violation, as the report shows it at its place.

    Attributes:
        finding: the verifier's finding.
        compared: for a violation about two argument values (:attr:`Finding.compared`):
            ``(what, digest text)`` of each side, else empty.
        diff: what differs between the two values (one line each, JSON paths), when both
            are at hand.
        note: why there is no diff although two sides are compared, else None.
        remark: a word on the finding's standing (e.g. not covered by a bundle's
            signature), else None.
    """

    finding: Finding
    compared: tuple[tuple[str, str], ...] = ()
    diff: tuple[str, ...] = ()
    note: str | None = None
    remark: str | None = None


@dataclass
class Step:
    """One entry in a timeline.

    Attributes:
        entry: the entry.
        title: one line saying what happened.
        tone: its badge's colour (a CSS class suffix).
        detail: a reason, an error or another remark, else None.
        values: its payloads.
        flags: violations found at this entry.
    """

    entry: Entry
    title: str
    tone: str
    detail: str | None = None
    values: list[Shown] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)

    @property
    def seq(self) -> int:
        """The entry's seq."""
        return self.entry.seq

    @property
    def first_seq(self) -> int:
        """Where it stands in its run's timeline."""
        return self.entry.seq


@dataclass
class CallSpan:
    """One call identity's entries (a span of the timeline).

    Attributes:
        key: ``(run_id, scope, call_id)``.
        agent, tool: who called what (from its first entry that names them).
        chain: the chain the rules built, None when no ``call`` entry recorded it.
        steps: its entries, in seq order.
        flags: its violations found at an entry not shown here.
    """

    key: CallKey
    agent: str
    tool: str
    chain: CallChain | None
    steps: list[Step] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)

    @property
    def first_seq(self) -> int:
        """Seq of its first entry."""
        return self.steps[0].seq

    @property
    def depth(self) -> int:
        """Its agent-as-tool nesting (0 at top level)."""
        return len(self.key[1])

    @property
    def start(self) -> int:
        """Time of its first entry (ns since the epoch, UTC)."""
        return self.steps[0].entry.time

    @property
    def end(self) -> int:
        """Time of its last entry (ns since the epoch, UTC)."""
        return max(step.entry.time for step in self.steps)

    @property
    def recorded(self) -> bool:
        """Whether its ``call`` entry is among its steps (a span without a chain but with
        one is context outside the selection, e.g. of a bundle)."""
        return any(step.entry.kind == "call" for step in self.steps)

    @property
    def violated(self) -> bool:
        """Whether any violation is shown in it."""
        return bool(self.flags) or any(step.flags for step in self.steps)


@dataclass(frozen=True)
class StateRow:
    """One run state, as drawn in its run's lineage tree.

    Attributes:
        depth: its distance from its root.
        node: the state.
        bound: the decisions, executions and leg ends shown with it.
        last: it is its parent's last child (None for a root).
    """

    depth: int
    node: StateNode
    bound: tuple[BoundEntry, ...]
    last: bool | None


@dataclass
class RunView:
    """One run: its timeline and its run states.

    Attributes:
        run_id: the run, or None for the entries of no run (ingest, redaction...).
        items: call spans and the run's own entries, by first seq.
        states: its run states, depth first.
        states_left: run states not drawn (past :data:`MAX_STATES`).
        flags: its violations at no entry shown.
        start, end: times of its first and last entry shown (ns since the epoch, UTC).
    """

    run_id: str | None
    items: list[CallSpan | Step] = field(default_factory=list)
    states: list[StateRow] = field(default_factory=list)
    states_left: int = 0
    flags: list[Flag] = field(default_factory=list)
    start: int = 0
    end: int = 0

    @property
    def spans(self) -> list[CallSpan]:
        """Its call spans."""
        return [item for item in self.items if isinstance(item, CallSpan)]

    def at(self, time: int) -> float:
        """Where ``time`` falls between the run's first and last entry, in percent."""
        return 100 * (time - self.start) / max(self.end - self.start, 1)


@dataclass(frozen=True)
class CheckpointView:
    """The signed checkpoint a report was checked against.

    Attributes:
        origin, size: the log and its tree size (entries).
        root: its root hash, standard base64.
        signers: ``name`` and key id (8 hex) of each signature line.
        signature: ``verified`` (by a given verifier key), ``failed`` (none of the given
            keys signed it validly) or ``unchecked`` (no key given).
        verified_by: the verifier keys whose signature verified.
        against_log: ``matches``, ``differs`` (the log's root at its size is another),
            ``ahead`` (larger than the log), ``proven`` (a bundle's entries are proven
            against it) or ``malformed``.
        where: where it was found (a file, or the bundle).
        log_size: the log's tree size then (entries).
        problem: why the signature or the note failed, else None.
    """

    origin: str
    size: int
    root: str
    signers: tuple[tuple[str, str], ...]
    signature: str
    verified_by: tuple[str, ...]
    against_log: str
    where: str
    log_size: int
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        """``{"origin", "tree_size", "root_hash", "signers", "signature", "verified_by",
        "against_log", "where", "problem"}``."""
        return {"origin": self.origin, "tree_size": self.size, "root_hash": self.root,
                "signers": [f"{name}+{key_id}" for name, key_id in self.signers],
                "signature": self.signature, "verified_by": list(self.verified_by),
                "against_log": self.against_log, "where": self.where,
                "problem": self.problem}


@dataclass
class ReportModel:
    """Everything one HTML report shows.

    Attributes:
        source: what was read (``ledger DIR``, ``bundle FILE``).
        selection: what is shown (:meth:`Selection.describe`).
        made_at: when the report was made (ns since the epoch, UTC).
        tree_size: entries of the log (or the bundle's checkpoint).
        checkpoint: the signed checkpoint, None when there is none.
        runs: the runs shown, by first seq.
        flags: violations of no run shown (ledger-wide ones: integrity, checkpoints).
        violations: violations of the selection and of the log as a whole.
        unlisted: of those, the ones not listed (past :data:`MAX_UNPLACED`).
        elsewhere: violations of the log outside the selection (not shown).
        entries: entries shown; left_out: selected entries past :data:`MAX_ENTRIES`.
        values: ``included``, ``left out`` or ``digests only``.
        over_budget: values left out past :data:`VALUE_BUDGET`.
        redacted: payloads redacted in the log (or bundle).
        notices: remarks of the verifier that are not violations.
    """

    source: str
    selection: str
    made_at: int
    tree_size: int
    checkpoint: CheckpointView | None
    runs: list[RunView]
    flags: list[Flag]
    violations: int
    elsewhere: int
    entries: int
    left_out: int
    values: str
    over_budget: int
    redacted: int
    notices: list[str]
    unlisted: int = 0

    @property
    def ok(self) -> bool:
        """PASS: no violation shown."""
        return self.violations == 0

    @property
    def calls(self) -> int:
        """Call spans shown."""
        return sum(len(run.spans) for run in self.runs)

    def summary(self) -> dict[str, Any]:
        """``{"ok", "selection", "runs", "calls", "entries", "left_out", "violations",
        "unlisted", "elsewhere", "values", "checkpoint"}`` (checkpoint:
        :meth:`CheckpointView.to_json` or None)."""
        return {
            "ok": self.ok, "selection": self.selection,
            "runs": sum(run.run_id is not None for run in self.runs), "calls": self.calls,
            "entries": self.entries, "left_out": self.left_out,
            "violations": self.violations, "unlisted": self.unlisted,
            "elsewhere": self.elsewhere,
            "values": self.values,
            "checkpoint": None if self.checkpoint is None else self.checkpoint.to_json(),
        }


def b64(raw: bytes) -> str:
    """Standard base64 of ``raw``."""
    return base64.b64encode(raw).decode("ascii")


def build_report(
    *,
    source: str,
    selection: Selection,
    made_at: int,
    entries: Sequence[Entry],
    left_out: int,
    findings: Iterable[tuple[Finding, str | None]],
    elsewhere: int,
    calls: Iterable[CallState],
    lineage: Mapping[str, list[StateNode]],
    values: ValueSource,
    checkpoint: CheckpointView | None,
    tree_size: int,
    notices: Sequence[str] = (),
    values_mode: str = "included",
) -> ReportModel:
    """The report of ``entries`` (the selected ones, in seq order).

    Args:
        source, selection, made_at, tree_size, checkpoint, notices: for the header.
        entries: the entries shown (at most :data:`MAX_ENTRIES`); ``left_out`` counts the
            selected ones past them.
        findings: the violations to show, each with a remark (or None); ``elsewhere``
            counts the log's others.
        calls: the rule engine's call states (those of calls not shown are skipped).
        lineage: run id -> its run states as trees (those of runs not shown are skipped).
        values: the payload values.
        values_mode: ``included``, ``left out`` or ``digests only`` (for the header).
    """
    shown_calls = {key for key in map(_call_key, entries) if key is not None}
    chains = {(c.run_id, c.scope, c.call_id): c
              for c in call_chains(c for c in calls if c.key in shown_calls)}
    runs: dict[str | None, RunView] = {}
    spans: dict[CallKey, CallSpan] = {}
    steps: dict[int, Step] = {}
    calls_by_key: dict[CallKey, Entry] = {}
    for entry in entries:
        run = runs.get(entry.body.get("run_id"))
        if run is None:
            run = runs[entry.body.get("run_id")] = RunView(entry.body.get("run_id"),
                                                          start=entry.time)
        run.start, run.end = min(run.start, entry.time), max(run.end, entry.time)
        key = _call_key(entry)
        if key is not None and entry.kind == "call":
            calls_by_key.setdefault(key, entry)
        step = steps[entry.seq] = _step(entry, values, calls_by_key.get(key) if key else None)
        if key is None:
            run.items.append(step)
            continue
        span = spans.get(key)
        if span is None:
            span = spans[key] = CallSpan(key, str(entry.body.get("agent") or "?"),
                                         str(entry.body.get("tool") or "?"), chains.get(key))
            run.items.append(span)
        span.steps.append(step)
    for run in runs.values():
        run.items = _nested(run.items, spans)
        focus = selection.call_id if selection.mode == "call" else None
        run.states, run.states_left = _states(lineage.get(run.run_id or "", []), focus)
    shown = unplaced = 0
    ledger_flags: list[Flag] = []
    args = argument_payloads(entries)
    for finding, remark in findings:
        shown += 1
        at = steps.get(finding.seq) if finding.seq is not None else None
        key = _finding_key(finding)
        if at is None:
            unplaced += 1
            if unplaced > MAX_UNPLACED:
                continue
        flag = _flag(finding, remark, args, values)
        if at is not None:
            at.flags.append(flag)
        elif key is not None and key in spans:
            spans[key].flags.append(flag)
        elif finding.run_id in runs:
            runs[finding.run_id].flags.append(flag)
        else:
            ledger_flags.append(flag)
    ordered = sorted(runs.values(), key=lambda r: (r.run_id is None, r.items[0].first_seq))
    return ReportModel(
        source=source, selection=selection.describe(), made_at=made_at, tree_size=tree_size,
        checkpoint=checkpoint, runs=ordered, flags=ledger_flags, violations=shown,
        elsewhere=elsewhere, entries=len(entries), left_out=left_out, values=values_mode,
        over_budget=values.over_budget, redacted=len(values.redactions),
        notices=list(notices), unlisted=max(unplaced - MAX_UNPLACED, 0),
    )


def _nested(items: list[CallSpan | Step], spans: Mapping[CallKey, CallSpan],
            ) -> list[CallSpan | Step]:
    """``items`` by first seq, each agent-as-tool call's span right under the span of the
    call that ran it (its scope's last edge, ``tool:call_id``, names that call), those of
    one parent by first seq; a span whose parent is not shown stays in seq order."""
    edges = {(k[0], k[1], f"{span.tool}:{k[2]}"): k for k, span in spans.items()}
    children: dict[CallKey, list[CallSpan]] = {}
    top: list[CallSpan | Step] = []
    for item in sorted(items, key=lambda item: item.first_seq):
        parent = None
        if isinstance(item, CallSpan) and item.key[1]:
            run, scope = item.key[0], item.key[1]
            parent = edges.get((run, scope[:-1], scope[-1]))
        if isinstance(item, CallSpan) and parent is not None:
            children.setdefault(parent, []).append(item)
        else:
            top.append(item)
    ordered: list[CallSpan | Step] = []
    stack = list(reversed(top))
    while stack:  # depth first, without recursion
        item = stack.pop()
        ordered.append(item)
        if isinstance(item, CallSpan):
            stack.extend(reversed(children.get(item.key, [])))
    return ordered


def _call_key(entry: Entry) -> CallKey | None:
    """The call identity an entry belongs to, or None for an entry of its run as a whole
    (those that name no call, or no scope: a revocation spans every scope)."""
    b = entry.body
    if isinstance(b.get("call_id"), str) and isinstance(b.get("run_id"), str) \
            and "scope" in b:
        return (b["run_id"], tuple(b["scope"]), b["call_id"])
    return None


def _finding_key(finding: Finding) -> CallKey | None:
    if finding.run_id is None or finding.call_id is None:
        return None
    return (finding.run_id, finding.scope, finding.call_id)


def _states(roots: list[StateNode], focus: str | None) -> tuple[list[StateRow], int]:
    """The rows of a run's lineage, depth first, at most :data:`MAX_STATES`; with a
    ``focus`` call, only its decisions and executions are shown bound (and every leg end)."""
    rows: list[StateRow] = []
    left = 0
    stack: list[tuple[int, StateNode, bool | None]] = [(0, r, None) for r in reversed(roots)]
    while stack:  # depth first, without recursion (a chain of states may be long)
        depth, node, last = stack.pop()
        if len(rows) >= MAX_STATES:
            left += 1
        else:
            bound = tuple(b for b in node.bound if focus is None or b.kind == "run_end"
                          or b.call_id == focus)
            rows.append(StateRow(depth, node, bound, last))
        count = len(node.children)
        stack.extend((depth + 1, child, i == count - 1)
                     for i, child in reversed(list(enumerate(node.children))))
    return rows, left


def _flag(finding: Finding, remark: str | None, args: Mapping[bytes, bytes],
          values: ValueSource) -> Flag:
    """``finding`` with the two argument values it compared (:attr:`Finding.compared`:
    what the approver was shown and what the call had, what the call had and what ran, ...),
    and what differs between them when both are at hand. An arguments digest names the
    payload of that digest (a decision's copy of what its approver was shown, or arguments
    that are their own canonical form) when one is at hand, else the arguments payload
    of an entry with that digest (``args``)."""
    if finding.compared is None:
        return Flag(finding, remark=remark)
    roles = COMPARED_ROLES.get(finding.rule, ("expected", "got"))
    compared = tuple(zip(roles, ("sha256:" + d.hex() for d in finding.compared), strict=True))
    if not values.included:
        return Flag(finding, compared, note="values left out of this report", remark=remark)
    sides = [_arguments_value(digest, args, values) for digest in finding.compared]
    diff = ValueDiff.of(finding, *sides)
    if diff.lines:
        return Flag(finding, compared, diff.lines, remark=remark)
    return Flag(finding, compared, note="; ".join(diff.summary()), remark=remark)


def _arguments_value(digest: bytes, args: Mapping[bytes, bytes], values: ValueSource,
                     ) -> Value:
    """The value of the arguments ``digest`` names (see :func:`_flag`)."""
    value = values(digest)
    if value.state in ("missing", "withheld") and digest in args:
        value = values(args[digest])
    return value if value.state != "missing" or digest in args else Value(digest, "unrecorded")


# -- what one entry says --------------------------------------------------------------

_OPS = {"add": "stored", "pop": "removed", "clear": "cleared"}


def _step(entry: Entry, values: ValueSource, call: Entry | None) -> Step:
    """The timeline row of ``entry`` (``call``: the call entry of its call identity, when
    shown before it)."""
    b = entry.body
    if entry.kind == "execution" and not b["tool"] and call is not None:
        b = {**b, "tool": call.body["tool"]}  # an ingested execution may leave it out
    title, tone, detail = _TITLES[entry.kind](b)
    shown = []
    for name, label in LABELS.items():
        digest = b.get(name)
        if not isinstance(digest, bytes):
            continue
        if entry.kind == "execution" and name == "args_payload" and call is not None \
                and call.body["args_digest"] == b["args_digest"]:
            continue  # the call's own arguments, shown at the call
        shown.append(Shown.of(label, values(digest)))
    return Step(entry, title, tone, detail, shown)


Title = tuple[str, str, str | None]
"""(title, tone, detail) of a step."""


def _call(b: dict[str, Any]) -> Title:
    gated = {True: "needs approval", False: None, None: "approval decided per call"}
    note = gated[b["needs_approval"]]
    if b["args_form"] == "raw":
        note = "; ".join(filter(None, [note, "arguments are not strict JSON: kept raw"]))
    return f"{b['agent']} called {b['tool']}", "call", note


def _decision(b: dict[str, Any]) -> Title:
    verb = "approved" if b["decision"] == "approve" else "rejected"
    always = f" (always: every {b['tool'] or 'such'} call of this run)" if b["always"] else ""
    return (f"{verb} by {b['approver']}{always}", b["decision"],
            f"reason: {b['reason']}" if b["reason"] else None)


def _execution(b: dict[str, Any]) -> Title:
    tool = b["tool"] or "the tool"
    if b["error"]:
        return f"{tool} ran and failed", "error", f"error: {b['error']}"
    return f"{tool} ran", "execution", None


def _session_item(b: dict[str, Any]) -> Title:
    what = b["item_type"] or "items"
    return f"{_OPS.get(b['op'], b['op'])} {what} in session {b['session_id']}", "item", None


def _guard(b: dict[str, Any], verdict: str) -> Title:
    code = "" if verdict == "allowed" else f", {b['code']}"
    return (f"guard {verdict} {b['tool']} ({b['mode']}{code})",
            "approve" if verdict == "allowed" else "reject", b["reason"])


_TITLES: dict[str, Callable[[dict[str, Any]], Title]] = {
    "call": _call,
    "decision": _decision,
    "execution": _execution,
    "session_item": _session_item,
    "guardrail": lambda b: (f"blocked by guardrail {b['guardrail']}", "guard", None),
    "tool_policy": lambda b: (
        f"{b['tool']} of {b['agent']} "
        + ("needs approval" if b["needs_approval"] else "runs without approval")
        + f" ({b['policy']} policy)", "state", None),
    "allowed": lambda b: _guard(b, "allowed"),
    "denied": lambda b: _guard(b, "denied"),
    "revocation": lambda b: (f"approvals of {b['call_id']} revoked by {b['by']}", "reject",
                             f"reason: {b['reason']}"),
    "approval_signature": lambda b: (f"approval signed by {b['approver']}", "approve",
                                     f"key {b['vkey']}"),
    "policy": lambda b: ("run guarded by a policy", "state", None),
    "run_end": lambda b: (f"leg {b['status']}", "end", None),
    "run_state": lambda b: (
        f"run state {b['state_id'][:12]} {b['event']}", "state",
        f"derived from {b['parent'][:12]}" if b["parent"] else None),
    "ingest": lambda b: (f"ingested {b['name']} ({b['lines']} lines)", "state",
                         "sha256:" + b["file_sha256"].hex()),
    "redaction": lambda b: (
        f"payload sha256:{b['digest'].hex()[:12]}… redacted"
        + (f" by {b['by']}" if b["by"] else ""), "reject", f"reason: {b['reason']}"),
    "session_repair": lambda b: (
        f"{b['tool']} call item inserted into session {b['session_id']} by {b['by']}",
        "item", f"repair {b['repair_id']}"),
}
