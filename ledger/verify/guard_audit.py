"""The guard audit (pure apart from the payload reader it is given): entries in log order
in, findings of the guard's two rules out.

- ``guard_verdict``: every ``allowed`` / ``denied`` entry says what
  :func:`~evidence_ledger.policy.judge.judge` says of the evidence before it, under the
  policy it names, at its own time: the approval really was missing, rejected, revoked,
  expired, made elsewhere or out of policy when a call was denied, and live when one was
  allowed. The policy it names is one its run recorded (a ``policy`` entry before it), and
  its time is no earlier than any entry before it (the guard judges at the time it
  appends, after everything before it was written: a back-dated verdict is a forgery);
- ``guard_bypassed``: no call of a tool that its run's policy (its latest ``policy``
  entry) enforces executes without an ``allowed`` entry for it before, nor after a
  ``denied`` one in ``enforce`` mode with no ``allowed`` since.

Both need the policy file, a payload: where it is gone (redacted), its run's guard
entries are not judged, and a notice says so.
"""

from __future__ import annotations

from collections.abc import Callable

from evidence_ledger.format.entries import Entry
from evidence_ledger.format.errors import UsageError
from evidence_ledger.policy.judge import ORPHAN_OUTPUT, GuardFacts, verdict_for
from evidence_ledger.policy.model import Policy, parse_policy
from evidence_ledger.verify.findings import GUARD_BYPASSED, GUARD_VERDICT, Finding

__all__ = ["GuardAudit"]

CallKey = tuple[str, tuple[str, ...], str]


class GuardAudit:
    """Feed every entry in log order (:meth:`feed`), then read :attr:`findings` and
    :attr:`notices`.

    Args:
        read_payload: a payload's bytes by its 32-byte digest, None when it is gone.
    """

    def __init__(self, read_payload: Callable[[bytes], bytes | None]) -> None:
        self.read_payload = read_payload
        self.findings: list[Finding] = []
        self.notices: list[str] = []
        self.facts = GuardFacts()
        self._policies: dict[bytes, Policy | None] = {}
        self._run_policy: dict[str, Policy] = {}
        self._arguments: dict[CallKey, bytes] = {}  # call -> its arguments' payload digest
        self._allowed: set[CallKey] = set()
        self._unread: set[bytes] = set()
        self._recorded: set[tuple[str, bytes]] = set()  # (run, policy digest) recorded
        self._latest = 0  # the latest entry time fed so far (ns)

    def _policy(self, digest: bytes) -> Policy | None:
        if digest not in self._policies:
            data = self.read_payload(digest)
            try:
                self._policies[digest] = None if data is None else parse_policy(data)
            except UsageError as exc:
                self._policies[digest] = None
                self.notices.append(f"policy sha256:{digest.hex()} does not parse: {exc}")
            if self._policies[digest] is None and digest not in self._unread:
                self._unread.add(digest)
                self.notices.append(f"policy sha256:{digest.hex()} is not readable: the guard "
                                    "entries made under it are not judged")
        return self._policies[digest]

    def feed(self, entry: Entry, hash_: bytes) -> None:
        """Check one entry against the evidence before it, then take it in."""
        b = entry.body
        if entry.kind == "call":
            self._arguments[b["run_id"], tuple(b["scope"]), b["call_id"]] = b["args_payload"]
        elif entry.kind == "policy":
            self._recorded.add((b["run_id"], b["policy_digest"]))
            policy = self._policy(b["policy_digest"])
            if policy is not None:
                self._run_policy[b["run_id"]] = policy
            else:
                self._run_policy.pop(b["run_id"], None)
        elif entry.kind in ("allowed", "denied"):
            self._on_guard(entry)
        elif entry.kind == "execution":
            self._on_execution(entry)
        self.facts.feed(entry, hash_)
        self._latest = max(self._latest, entry.time)

    def _on_guard(self, entry: Entry) -> None:
        b = entry.body
        if b["code"] == ORPHAN_OUTPUT:  # the session guard's record, not a tool's verdict
            return
        key = (b["run_id"], tuple(b["scope"]), b["call_id"])
        if b["mode"] == "enforce":
            self._allowed.discard(key)
        if (b["run_id"], b["policy_digest"]) not in self._recorded:
            self._report(GUARD_VERDICT, entry, f"{entry.kind} under policy "
                         f"sha256:{b['policy_digest'].hex()}, which its run never recorded", key)
            return
        if entry.time < self._latest:
            self._report(GUARD_VERDICT, entry, f"{entry.kind} judged at a time before entries "
                         f"it follows ({entry.time} < {self._latest} ns): back-dated", key)
            return
        policy = self._policy(b["policy_digest"])
        if policy is None:
            if entry.kind == "allowed":
                self._allowed.add(key)
            return
        payload = self._arguments.get(key)
        raw = self.read_payload(payload) if payload is not None else None
        arguments = raw.decode("utf-8", "replace") if raw is not None else None
        rule = policy.rule(b["agent"], b["tool"])
        if arguments is None and b["code"] == "arguments" and rule is not None \
                and rule.constraints:  # the arguments were redacted: cannot be judged again
            return
        verdict = verdict_for(self.facts, policy, b, entry.time, arguments)
        said = (entry.kind == "allowed", b["code"])
        if verdict is not None and verdict.allowed and said[0]:
            self._allowed.add(key)
        if verdict is None:
            self._report(GUARD_VERDICT, entry, f"{entry.kind} under a policy that does not "
                         f"name {b['tool']} of agent {b['agent']}", key)
        elif (verdict.allowed, verdict.code) != said:
            self._report(GUARD_VERDICT, entry, f"{entry.kind} ({b['code']}), but the evidence "
                         f"before it says {'allowed' if verdict.allowed else 'denied'} "
                         f"({verdict.code}): {verdict.reason}", key)

    def _on_execution(self, entry: Entry) -> None:
        b = entry.body
        policy = self._run_policy.get(b["run_id"])
        if policy is None or b["tool"] is None:
            return
        rule = policy.rule(b["agent"] or "", b["tool"])
        key = (b["run_id"], tuple(b["scope"]), b["call_id"])
        if rule is not None and rule.mode == "enforce" and key not in self._allowed:
            self._report(GUARD_BYPASSED, entry, f"{b['tool']} ran, which the run's policy "
                         "enforces, with no allowed entry of the guard before it", key)

    def _report(self, rule: str, entry: Entry, detail: str, key: CallKey) -> None:
        self.findings.append(Finding(rule, entry.seq, detail, *key))
