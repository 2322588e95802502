"""The guard's policy: a small TOML file, read with ``tomllib`` and checked against
``schemas/policy.schema.json`` (pure: bytes in, a :class:`Policy` out).

A policy names the tools the guard holds to a live approval in the ledger (by pattern:
exact names, or ``*`` matching any run of characters within one dot-separated segment of
the tool name as the ledger records it, ``namespace.name``), who may approve each (names,
or ``@group``), how long an approval holds (``max_age``, seconds), whether a second
approver is needed, whether approvals must be signed by a key the policy names, and
constraints on arguments (``max``, ``min``, ``pattern``, ``one_of`` on top-level fields).
docs/ENFORCEMENT.md has the format and an example.
"""

from __future__ import annotations

import hashlib
import math
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from evidence_ledger.format import schemas
from evidence_ledger.format.errors import UsageError
from evidence_ledger.tlog.note import KeyFormatError, Verifier

__all__ = ["MAX_POLICY_BYTES", "SDK_REJECTION", "Constraint", "Policy", "PolicyError",
           "ToolRule", "parse_policy"]

MAX_POLICY_BYTES = 1 << 20
"""A policy file is at most 1 MiB."""

SDK_REJECTION = "Tool execution was not approved."
"""The text the SDK (0.20 - 0.24) persists as the output of a rejected call: the guard's
default rejection message."""

_WILDCARDS = re.compile(r"[?\[\]{}]")


class PolicyError(UsageError):
    """A policy file that is not a valid policy (exit code 2)."""


@dataclass(frozen=True)
class Constraint:
    """What one top-level argument may be: a number within ``min`` / ``max``, a string
    matching ``pattern`` (``re.fullmatch``), a value among ``one_of``."""

    name: str
    max: float | None = None
    min: float | None = None
    pattern: re.Pattern[str] | None = None
    one_of: tuple[Any, ...] | None = None

    def problem(self, arguments: Any) -> str | None:
        """Why ``arguments`` (the call's parsed JSON arguments) break this constraint, or
        None when they keep it (a missing argument breaks it)."""
        if not isinstance(arguments, dict) or self.name not in arguments:
            return f"argument {self.name!r} is missing"
        value = arguments[self.name]
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if (self.max is not None or self.min is not None) and not (
                number and math.isfinite(value)):
            return f"argument {self.name!r} is not a finite number"
        if self.max is not None and value > self.max:
            return f"argument {self.name!r} is {value}, above {self.max}"
        if self.min is not None and value < self.min:
            return f"argument {self.name!r} is {value}, below {self.min}"
        if self.pattern is not None and not (
                isinstance(value, str) and self.pattern.fullmatch(value)):
            return f"argument {self.name!r} does not match {self.pattern.pattern!r}"
        if self.one_of is not None and value not in self.one_of:
            return f"argument {self.name!r} is not one of {list(self.one_of)}"
        return None


@dataclass(frozen=True)
class ToolRule:
    """What the policy asks of the calls of the tools ``match`` names.

    Attributes:
        match: the pattern as written; ``agent``: only calls of this agent (None: any).
        mode: ``"enforce"`` or ``"observe"``.
        approvers: names allowed to approve (groups expanded); None: anyone.
        max_age_ns: how long an approval holds (ns); None: until revoked.
        second_approver: two approvals by two different allowed approvers are needed.
        signed: each counted approval carries a valid signature by the key the policy
            names for its approver.
        constraints: per argument.
    """

    match: str
    regex: re.Pattern[str]
    agent: str | None
    mode: str
    approvers: frozenset[str] | None
    max_age_ns: int | None
    second_approver: bool
    signed: bool
    constraints: tuple[Constraint, ...] = ()

    def matches(self, agent: str, tool: str) -> bool:
        """True when a call of ``tool`` (as the ledger records it) by ``agent`` (its label: a
        second agent of the same name in one graph is ``name#2``, and so on) is this
        rule's."""
        if self.agent is not None and agent != self.agent:
            base, _, count = agent.rpartition("#")
            if base != self.agent or not count.isdigit():
                return False
        return bool(self.regex.fullmatch(tool))


@dataclass(frozen=True)
class Policy:
    """A parsed policy file.

    Attributes:
        digest: SHA-256 of the file's bytes (32 bytes): the ledger names the policy by it.
        text: the file's bytes.
        on_deny: ``"reject"`` (the tool returns :attr:`message`) or ``"raise"``.
        session: the session guard's mode: ``"enforce"``, ``"observe"`` or ``"off"``
            (:mod:`~evidence_ledger.record.integrations.session_guard`).
        keys: approver name -> verifier key (C2SP signed-note ``vkey``).
        tools: the rules, first match wins.
    """

    digest: bytes
    text: bytes
    on_deny: str
    message: str
    session: str = "enforce"
    keys: dict[str, str] = field(default_factory=dict)
    tools: tuple[ToolRule, ...] = ()

    def rule(self, agent: str, tool: str) -> ToolRule | None:
        """The first rule that names a call of ``tool`` by ``agent``; None: not guarded."""
        return next((rule for rule in self.tools if rule.matches(agent, tool)), None)


def _pattern_regex(match: str, name: str) -> re.Pattern[str]:
    """The regex of a tool pattern, ``*`` never crossing a ``.``.

    Raises:
        PolicyError: for an empty segment, ``**`` or another wildcard character.
    """
    segments = match.split(".")
    if any(not s for s in segments) or "**" in match or _WILDCARDS.search(match):
        raise PolicyError(f"{name}: tool pattern {match!r}: use exact names and * within one "
                          "dot-separated segment")
    return re.compile(r"\.".join(
        "[^.]*".join(re.escape(part) for part in s.split("*")) for s in segments))


def _constraint(name: str, spec: dict[str, Any], where: str) -> Constraint:
    pattern = spec.get("pattern")
    try:
        compiled = re.compile(pattern) if pattern is not None else None
    except (re.error, OverflowError, RecursionError) as exc:
        raise PolicyError(f"{where}: argument {name!r}: bad pattern: {exc}") from None
    one_of = spec.get("one_of")
    return Constraint(name, spec.get("max"), spec.get("min"), compiled,
                      tuple(one_of) if one_of is not None else None)


def _approvers(names: list[str] | None, groups: dict[str, list[str]], where: str
               ) -> frozenset[str] | None:
    if names is None:
        return None
    found: set[str] = set()
    for name in names:
        if name.startswith("@"):
            if name[1:] not in groups:
                raise PolicyError(f"{where}: approver group {name!r} is not defined in [groups]")
            found.update(groups[name[1:]])
        else:
            found.add(name)
    return frozenset(found)


def parse_policy(data: bytes, name: str = "policy") -> Policy:
    """Parse and check a policy file (``data``: its bytes, at most :data:`MAX_POLICY_BYTES`).

    Raises:
        PolicyError: naming the first problem: not UTF-8 TOML (or nested too deep to
            read), a field the schema refuses (unknown keys, wrong types), a tool pattern
            outside the grammar, an undefined group, a bad regex, a rule that can never
            pass or never be reached, or ``signed`` without a key for a named approver.
    """
    try:
        return _parse(data, name)
    except RecursionError:
        raise PolicyError(f"{name}: nested too deep to read") from None


def _parse(data: bytes, name: str) -> Policy:
    if len(data) > MAX_POLICY_BYTES:
        raise PolicyError(f"{name}: over {MAX_POLICY_BYTES} bytes")
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise PolicyError(f"{name}: not a TOML file: {exc}") from None
    problem = schemas.first_error("policy", doc)
    if problem is not None:
        raise PolicyError(f"{name}: {problem}")
    groups, keys = doc.get("groups", {}), doc.get("keys", {})
    for approver, vkey in keys.items():
        try:
            named = Verifier.from_vkey(vkey).name
        except KeyFormatError as exc:
            raise PolicyError(f"{name}: keys/{approver}: {exc}") from None
        if named != approver:
            raise PolicyError(f"{name}: keys/{approver}: the key is named {named!r}, not "
                              f"{approver!r}")
    seen: set[tuple[str, str | None]] = set()
    rules = []
    for spec in doc["tools"]:
        where = f"{name}: tool {spec['match']!r}"
        if (spec["match"], spec.get("agent")) in seen:
            raise PolicyError(f"{where}: named by an earlier rule, so never reached")
        seen.add((spec["match"], spec.get("agent")))
        approvers = _approvers(spec.get("approvers"), groups, name)
        if approvers is not None and len(approvers) < (2 if spec.get("second_approver") else 1):
            raise PolicyError(f"{where}: its approvers name {len(approvers)} approver(s), "
                              "fewer than it needs")
        for arg, bounds in spec.get("arguments", {}).items():
            if not all(math.isfinite(bounds[b]) for b in ("min", "max") if b in bounds):
                raise PolicyError(f"{where}: argument {arg!r}: min and max must be finite")
            if bounds.get("min", float("-inf")) > bounds.get("max", float("inf")):
                raise PolicyError(f"{where}: argument {arg!r}: min is above max")
        signed = spec.get("signed", False)
        unkeyed = sorted((approvers or frozenset()) - keys.keys()) if signed else []
        if unkeyed or (signed and approvers is None and not keys):
            raise PolicyError(f"{name}: tool {spec['match']!r} needs signed approvals but "
                              f"[keys] has no key for {unkeyed or 'any approver'}")
        max_age = spec.get("max_age")
        rules.append(ToolRule(
            spec["match"], _pattern_regex(spec["match"], name), spec.get("agent"),
            spec.get("mode", doc.get("mode", "enforce")), approvers,
            max_age * 1_000_000_000 if max_age is not None else None,
            spec.get("second_approver", False), signed,
            tuple(_constraint(k, v, name) for k, v in spec.get("arguments", {}).items()),
        ))
    return Policy(hashlib.sha256(data).digest(), data, doc.get("on_deny", "reject"),
                  doc.get("message", SDK_REJECTION),
                  doc.get("session", doc.get("mode", "enforce")), dict(keys), tuple(rules))
