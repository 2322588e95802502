"""The producer API: turn evidence into entries and append them.

Every producer (the openai-agents recorder, JSONL ingest) writes through
:class:`EvidenceWriter`, so one piece of code defines each kind's body. Payloads
(arguments, results, messages, session items) go to the payload store first; the entry
holds only their digests. A call's identity is ``(run_id, scope, call_id)`` where
``scope`` is the path of agent-as-tool edges from the top agent (empty at top level).

In a ledger of format version 2 the payloads an entry names are held until its group is
appended, then written to a segment and synced before the log group is written (see
:mod:`evidence_ledger.storage.segment_store`).

Writers may live in several processes at once: each append takes the OS lock, catches
up with what others appended, and releases it (see :meth:`Ledger.locked_tail`). One
writer may be shared by threads: its ``atomic()`` blocks (so every append) and payload
puts hold a per-writer lock, so a block of one thread never joins another's group.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from evidence_ledger.format import digests, encoding
from evidence_ledger.format.entries import ZERO_HASH, Entry, entry_hash
from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.format.framing import MAX_RECORD
from evidence_ledger.policy.judge import GuardFacts, approval_message
from evidence_ledger.storage.checkpoint_store import CheckpointStore
from evidence_ledger.storage.ledger_dir import Ledger, Tail
from evidence_ledger.tlog.checkpoint import parse_checkpoint
from evidence_ledger.tlog.note import Signer, parse_note

Scope = tuple[str, ...]
CallKey = tuple[str, Scope, str]

_CALL_BY_ID = {
    "web_search_call": "id", "file_search_call": "id", "code_interpreter_call": "id",
    "image_generation_call": "id", "mcp_approval_request": "id",
    "mcp_approval_response": "approval_request_id", "mcp_call": "approval_request_id",
}
"""Session item type without a ``call_id`` -> its field naming the call it belongs to, as
the recorder keys hosted calls (an ``mcp_call`` that needed no approval: its own ``id``)."""


class Interruption(NamedTuple):
    """A pending approval of a run state, as :meth:`EvidenceWriter.run_state` records it.

    Attributes:
        call_id: the call waiting for a decision.
        tool, agent: what it calls, and who.
        scope: agent-as-tool edges of the recorded call, None when not known.
        arguments: the raw arguments string shown, None when not known.
    """

    call_id: str
    tool: str | None = None
    agent: str | None = None
    scope: Sequence[str] | None = None
    arguments: str | None = None

RUN_STATUSES = ("completed", "interrupted", "failed")
DECISIONS = ("approve", "reject")
SESSION_OPS = ("add", "pop", "clear")
STATE_EVENTS = ("to_state", "to_json", "loaded", "resume", "decided", "adopted", "ended")
_HELD_BYTES = 8 << 20
"""Payload bytes a group holds before it writes them out (format 2)."""
_MADE = frozenset({"to_state", "to_json", "decided", "adopted", "ended"})
"""Events of a state whose content was new then: what :meth:`EvidenceWriter.find_state`
matches (a ``loaded`` or ``resume`` entry repeats the content of a state made earlier)."""


def _pending_fields(interruptions: Sequence[Interruption]) -> list[dict[str, Any]]:
    """The ``interruptions`` maps of a ``run_state`` body, in canonical key order."""
    pending = []
    for item in interruptions:
        fields = {
            "call_id": item.call_id, "tool": item.tool, "agent": item.agent,
            "scope": None if item.scope is None else list(item.scope),
            "args_digest": (
                None if item.arguments is None
                else digests.arguments_digest(item.arguments).digest
            ),
        }
        pending.append({name: fields[name] for name in encoding.canonical_order(fields)})
    return pending


def _pending_key(pending: Sequence[Mapping[str, Any]]) -> tuple[Any, ...]:
    """What identifies a paused run by its pending approvals: ``(call_id, agent, tool,
    args_digest)`` of each (not the scope, which is looked up when recorded)."""
    return tuple((p["call_id"], p["agent"], p["tool"], p["args_digest"]) for p in pending)


def item_bytes(item: Any) -> bytes:
    """Canonical bytes of a session item: RFC 8785 JSON, or sorted ``json.dumps`` as a
    fallback for values RFC 8785 refuses (never raises)."""
    try:
        return digests.canonical_json(item)
    except ValueError:
        return _fallback_bytes(item)


def _fallback_bytes(item: Any) -> bytes:
    """The :func:`item_bytes` of a value RFC 8785 refuses: sorted ``json.dumps``, UTF-8."""
    return json.dumps(item, sort_keys=True, default=str).encode("utf-8", "surrogatepass")


def item_sha256(item: Any) -> bytes:
    """SHA-256 (32 bytes) of :func:`item_bytes` of ``item``, hashed as the canonical JSON
    is written (see :func:`digests.jcs_sha256`) rather than from bytes held whole."""
    try:
        return digests.jcs_sha256(item)
    except (ValueError, RecursionError):
        return digests.sha256(_fallback_bytes(item))


class EvidenceWriter:
    """Append evidence entries to a ledger.

    Args:
        ledger: the :class:`Ledger` (or its directory) to append to.
        lock_timeout: seconds to wait for another writer's lock.
        clock: source of entry times, integer ns since the epoch, UTC.

    Every method that appends returns the new entry's 32-byte entry hash and raises
    :class:`~evidence_ledger.format.errors.StorageError` (nothing acknowledged) when the write
    fails.
    """

    def __init__(
        self,
        ledger: Ledger | str | os.PathLike[str] | None = None,
        *,
        lock_timeout: float = 30.0,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
        self.lock_timeout = lock_timeout
        self.clock = clock
        self._group: list[bytes] | None = None
        self._next: Tail | None = None
        self._lock = threading.RLock()  # one atomic() block at a time, across threads
        self._floor: tuple[int, int] = (-1, 0)  # (checkpoints/ mtime, latest tree size)
        self._forget()

    def _checkpoint_floor(self) -> int:
        """Tree size of the latest stored checkpoint (0: none, or unreadable, which
        ``verify`` reports); re-read only when ``checkpoints/`` changed."""
        store = CheckpointStore(self.ledger)
        try:
            mtime = os.stat(store.directory).st_mtime_ns
        except OSError:
            return 0
        if self._floor[0] != mtime:
            size = 0
            with contextlib.suppress(EvidenceError):
                latest = store.latest()
                if latest is not None:
                    size = parse_checkpoint(parse_note(latest.data).text).size
            self._floor = (mtime, size)
        return self._floor[1]

    def _forget(self) -> None:
        """Drop every index; the next append re-reads the log from the start."""
        self._tail = Tail(0, ZERO_HASH, 0)
        self._calls: dict[CallKey, bytes] = {}
        self._call_agents: dict[CallKey, tuple[str, bytes]] = {}
        self._calls_by_id: dict[tuple[str, str], list[bytes]] = {}
        self._call_payloads: dict[bytes, tuple[str, bytes]] = {}  # call hash -> tool, args
        self._ingested: set[bytes] = set()
        self._decided_ids: set[str] = set()
        self._sticky: set[tuple[str, Scope, str | None, str | None]] = set()
        self._states: dict[bytes | tuple[Any, ...], tuple[str, str]] = {}
        self._latest_state: dict[str, str] = {}  # run_id -> its latest state made
        self._policies: dict[str, bytes] = {}  # run_id -> the policy it recorded last
        # decision hash -> (run_id, scope, call_id, tool, arguments digest) it was shown
        self._decision_calls: dict[bytes, tuple[str, Scope, str, str, bytes]] = {}
        self.guard_facts = GuardFacts()
        """What the guard judges calls by (:mod:`evidence_ledger.policy.judge`), as of the
        log this writer knows."""

    # -- indexes -------------------------------------------------------------------

    def _visit(self, entry: Entry, hash_: bytes) -> None:
        body = entry.body
        self.guard_facts.feed(entry, hash_)
        if entry.kind == "call":
            key = (body["run_id"], tuple(body["scope"]), body["call_id"])
            self._calls[key] = hash_
            self._call_agents[key] = (body["agent"], body["args_digest"])
            self._calls_by_id.setdefault((body["run_id"], body["call_id"]), []).append(hash_)
            self._call_payloads[hash_] = (body["tool"], body["args_payload"])
        elif entry.kind == "decision":
            self._decided_ids.add(body["call_id"])
            key = (body["run_id"], tuple(body["scope"]), body["call_id"])
            _, tool, args = self.guard_facts.calls.get(key, (None, body["tool"], None))
            tool, args = body["tool"] or tool, body["args_digest"] or args
            if tool is not None and args is not None:
                self._decision_calls[hash_] = (*key, tool, args)
            if body["always"]:
                self._sticky.add((body["run_id"], tuple(body["scope"]), body["agent"],
                                  body["tool"]))
        elif entry.kind == "ingest":
            self._ingested.add(body["file_sha256"])
        elif entry.kind == "policy":
            self._policies[body["run_id"]] = body["policy_digest"]
        elif entry.kind == "run_state" and body["event"] in _MADE:
            found = (body["run_id"], body["state_id"])
            self._latest_state[body["run_id"]] = body["state_id"]
            if body["digest"] is not None:
                self._states[body["digest"]] = found
            if body["interruptions"]:
                self._states[_pending_key(body["interruptions"])] = found

    def find_call(self, run_id: str, scope: Sequence[str] | None, call_id: str) -> bytes | None:
        """Entry hash of the recorded call, or None.

        With ``scope=None`` the most recent call with that ``(run_id, call_id)`` in any
        scope is returned.
        """
        if scope is None:
            found = self._calls_by_id.get((run_id, call_id))
            return found[-1] if found else None
        return self._calls.get((run_id, tuple(scope), call_id))

    def decided(
        self, run_id: str, scope: Sequence[str], call_id: str, agent: str | None, tool: str,
    ) -> bool:
        """True when a decision naming ``call_id`` is recorded, in any run or scope (on
        another call with that id, it may be the one the SDK applies), or a sticky one
        (``always``) on ``agent``'s ``tool`` in ``run_id`` and ``scope`` (``agent`` None:
        any agent's); approvals and rejections alike, on any run state."""
        if call_id in self._decided_ids:
            return True
        if agent is not None:
            return (run_id, tuple(scope), agent, tool) in self._sticky
        return any((r, s, t) == (run_id, tuple(scope), tool) for r, s, _, t in self._sticky)

    @property
    def size(self) -> int:
        """Entries in the log as this writer knows it, pending ones of an open group included."""
        return (self._next or self._tail).size

    def call_scopes(
        self, run_id: str, call_id: str, agent: str | None = None, arguments: str | None = None
    ) -> list[Scope]:
        """Scopes of the recorded calls with this ``(run_id, call_id)``, oldest first; when
        there are several, those of calls ``agent`` made (one ``call_id`` at top level and
        inside a nested agent), then, if still several, those with the digest of
        ``arguments`` (one agent tool called twice, its agent reusing a call id).

        Catches up with entries other writers appended (takes the writer lock).
        """
        with self.atomic():
            keys = [key for key in self._calls if (key[0], key[2]) == (run_id, call_id)]
            if len(keys) > 1 and agent is not None:
                keys = [key for key in keys if self._call_agents[key][0] == agent]
            if len(keys) > 1 and arguments is not None:
                digest = digests.arguments_digest(arguments).digest
                keys = [key for key in keys if self._call_agents[key][1] == digest]
            return [scope for _, scope, _ in keys]

    def recorded_call_item(self, run_id: str, call_id: str) -> dict[str, str] | None:
        """The ``function_call`` item of the latest call ``call_id`` of ``run_id`` (any scope),
        rebuilt from the ledger: its tool as recorded and its exact raw arguments from the
        payload store (``arguments``, ``call_id``, ``name``, ``type``); None when no such
        call is recorded or its arguments payload is gone or not UTF-8. Catches up with
        entries other writers appended (takes the writer lock)."""
        with self.atomic():
            found = self._calls_by_id.get((run_id, call_id))
            if not found:
                return None
            tool, payload = self._call_payloads[found[-1]]
        data = self.ledger.payloads.get(payload)
        if data is None:
            return None
        try:
            arguments = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return {"arguments": arguments, "call_id": call_id, "name": tool,
                "type": "function_call"}

    def runs_with_call(self, call_id: str) -> list[str]:
        """The runs that recorded a call ``call_id`` (any scope), in the order of their first
        such call. Catches up with entries other writers appended (takes the writer lock)."""
        with self.atomic():
            return list(dict.fromkeys(run for run, made in self._calls_by_id if made == call_id))

    def made_elsewhere(self, run_id: str, call_id: str, arguments: str) -> bool:
        """True when a run other than ``run_id`` recorded a call ``call_id`` with the digest
        of ``arguments``, in any scope (reads every recorded call: for the rare call a run
        waits on without having made it). Catches up with entries other writers appended
        (takes the writer lock)."""
        digest = digests.arguments_digest(arguments).digest
        with self.atomic():
            return any(run != run_id and made == call_id and facts[1] == digest
                       for (run, _, made), facts in self._call_agents.items())

    def find_state(
        self, digest: bytes | None, interruptions: Sequence[Interruption],
        calls: Sequence[tuple[str, str]] = (),
    ) -> tuple[str, str] | None:
        """``(run_id, state_id)`` of the latest run state recorded as made or changed
        (``to_state``, ``decided``, ``adopted``, ``ended``; ``to_json`` of older recorders)
        with this 32-byte ``digest``; else, when ``interruptions`` is not empty, of the
        latest one with the same pending approvals (call id, agent, tool and arguments
        digest of each, in order); else, when ``calls`` (``(call_id, arguments)`` of the
        calls a state holds) is not empty and exactly one run recorded every one of them at
        top-level scope with the digest of those arguments, of that run's latest state; else
        None. Catches up with entries other writers appended (takes the writer lock; the
        last step reads every recorded call)."""
        with self.atomic():
            found = self._states.get(digest) if digest is not None else None
            if found is None and interruptions:
                found = self._states.get(_pending_key(_pending_fields(interruptions)))
            if found is None and calls:
                found = self._state_of_calls(calls)
            return found

    def _state_of_calls(self, calls: Sequence[tuple[str, str]]) -> tuple[str, str] | None:
        wanted = {(call_id, digests.arguments_digest(arguments).digest)
                  for call_id, arguments in calls}
        held: dict[str, int] = {}
        for (run_id, scope, call_id), (_, args_digest) in self._call_agents.items():
            if not scope and (call_id, args_digest) in wanted:
                held[run_id] = held.get(run_id, 0) + 1
        runs = [run_id for run_id, count in held.items()
                if count == len(wanted) and run_id in self._latest_state]
        return (runs[0], self._latest_state[runs[0]]) if len(runs) == 1 else None

    def already_ingested(self, file_sha256: bytes) -> bool:
        """True when an ``ingest`` entry names a file with this 32-byte SHA-256."""
        with self.atomic():
            return file_sha256 in self._ingested

    # -- appending -----------------------------------------------------------------

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """Group every append inside the block into one atomic, fsynced log group.

        The writer lock is held for the whole block. If the block raises, nothing is
        appended. Nested blocks (of the same thread) join the outer one; a block of
        another thread waits until the outer one is done.
        """
        with self._lock:
            if self._group is not None:
                yield
                return
            with self._locked_group():
                yield

    @contextlib.contextmanager
    def _locked_group(self) -> Iterator[None]:
        self.ledger.store.create()
        with self.ledger.locked_tail(
            self._tail, self._visit, self.lock_timeout, self._checkpoint_floor
        ) as tail:
            self._group, self._next = [], tail
            payloads = self.ledger.payloads
            try:
                yield
                payloads.flush()  # format 2: payloads written and synced before the log
                if self._group:
                    end = self.ledger.store.append_group(self._group, payloads.sync)
                    self._tail = Tail(self._next.size, self._next.last_hash, end)
            except BaseException:  # payloads held stay held: another thread's entry may name them
                self._forget()  # indexes may name entries that were never written
                raise
            finally:
                self._group, self._next = None, None

    def append(
        self,
        kind: str,
        body: dict[str, Any],
        refs: Sequence[bytes] = (),
        time_ns: int | None = None,
    ) -> bytes:
        """Append one entry of ``kind`` with ``body`` and ``refs``; return its entry hash.

        Raises:
            EncodingError: if the body holds a value the canonical encoding refuses.
            UsageError: if the entry is longer than a log record may be
                (:data:`~evidence_ledger.format.framing.MAX_RECORD` bytes); nothing is appended.
            StorageError: if the write fails.
        """
        with self.atomic():
            assert self._next is not None and self._group is not None
            entry = Entry(
                seq=self._next.size,
                prev=self._next.last_hash,
                kind=kind,
                time=self.clock() if time_ns is None else time_ns,
                body=body,
                refs=tuple(refs),
            )
            data = entry.to_bytes()
            if len(data) > MAX_RECORD:
                raise UsageError(
                    f"a {kind} entry of {len(data)} bytes exceeds the record limit of "
                    f"{MAX_RECORD} bytes"
                )
            hash_ = entry_hash(data)
            self._group.append(data)
            self._next = Tail(entry.seq + 1, hash_, 0)
            self._visit(entry, hash_)
            return hash_

    def _flush_held(self) -> None:
        """Inside a group (writer lock held), store the payloads held so far once they pass
        8 MiB, so that a large group never holds them all."""
        if self._group is not None and self.ledger.payloads.pending_bytes > _HELD_BYTES:
            self.ledger.payloads.flush()

    def _put_output(self, output: Any) -> bytes:
        """Store the bytes :func:`digests.write_output` writes for ``output`` (a str: its
        UTF-8, as for an arguments string; else RFC 8785 JSON) as a payload, piece by
        piece, never held whole; return their 32-byte SHA-256.

        Raises:
            ValueError: if a non-string output cannot be canonicalised (nothing stored).
        """
        with self._lock:  # a sync of another thread's group never drops it from its dirty set
            digest = self.ledger.payloads.put_stream(
                lambda write: digests.write_output(output, write))
            self._flush_held()
            return digest

    def _put_arguments(self, arguments: str, form: str) -> bytes:
        """Store ``arguments`` (a raw arguments string) in the form their arguments digest
        hashes (:func:`digests.arguments_digest`: RFC 8785 JSON for ``jcs``, the UTF-8
        bytes for ``raw``), so that the payload is named by that digest; return it."""
        if form == "raw":
            return self._put_output(arguments)
        value = digests.parse_strict_json(arguments)
        with self._lock:
            digest = self.ledger.payloads.put_stream(lambda write: digests.jcs_dump(value, write))
            self._flush_held()
            return digest

    def _put_item(self, item: Any) -> bytes:
        """Store :func:`item_bytes` of ``item`` as a payload and return their 32-byte
        SHA-256. The canonical JSON is written as it is produced (see
        :func:`digests.jcs_dump`): an item holding a long string is not copied whole."""
        with self._lock:
            try:
                digest = self.ledger.payloads.put_stream(
                    lambda write: digests.jcs_dump(item, write))
            except (ValueError, RecursionError):
                digest = self.ledger.payloads.put(_fallback_bytes(item))
            self._flush_held()
            return digest

    def _call_refs(self, run_id: str, scope: Sequence[str] | None, call_id: str) -> list[bytes]:
        found = self.find_call(run_id, scope, call_id)
        return [found] if found else []

    # -- kinds -----------------------------------------------------------------------

    def tool_policy(
        self,
        *,
        run_id: str,
        agent: str,
        tool: str,
        needs_approval: bool,
        scope: Sequence[str] = (),
        policy: str = "static",
        call_id: str | None = None,
        time_ns: int | None = None,
    ) -> bytes:
        """Record an agent's tool and whether it needs approval.

        ``policy`` is ``"static"`` (a bool on the tool) or ``"callable"`` (evaluated per
        call; then ``call_id`` names the call and ``needs_approval`` is the result).
        """
        body = {
            "run_id": run_id, "scope": list(scope), "agent": agent, "tool": tool,
            "needs_approval": bool(needs_approval), "policy": policy, "call_id": call_id,
        }
        refs = self._call_refs(run_id, scope, call_id) if call_id else []
        return self.append("tool_policy", body, refs, time_ns)

    def call(
        self,
        *,
        run_id: str,
        call_id: str,
        agent: str,
        tool: str,
        arguments: str,
        scope: Sequence[str] = (),
        needs_approval: bool | None = False,
        response_id: str | None = None,
        time_ns: int | None = None,
    ) -> bytes:
        """Record a ``function_call`` the model made.

        ``arguments`` is the raw arguments string; it is stored as a payload and
        digested (see :func:`evidence_ledger.format.digests.arguments_digest`). ``needs_approval``
        is None when a callable policy decides per call (see :meth:`tool_policy`).
        """
        args = digests.arguments_digest(arguments)
        body = {
            "run_id": run_id, "scope": list(scope), "call_id": call_id, "agent": agent,
            "tool": tool, "args_digest": args.digest, "args_form": args.form,
            "args_payload": self._put_output(arguments), "needs_approval": needs_approval,
            "response_id": response_id,
        }
        return self.append("call", body, [], time_ns)

    def decision(
        self,
        *,
        run_id: str,
        call_id: str,
        decision: str,
        approver: str,
        scope: Sequence[str] = (),
        always: bool = False,
        reason: str | None = None,
        message: str | None = None,
        arguments: str | None = None,
        agent: str | None = None,
        tool: str | None = None,
        run_state: str | None = None,
        time_ns: int | None = None,
    ) -> bytes:
        """Record a human ``approve`` or ``reject`` bound to one call.

        ``arguments`` is what the approver was shown (default: the call's recorded
        arguments digest); when their digest is not the recorded call's, they are kept as
        the payload named by that digest (their RFC 8785 JSON, or the raw string for
        ``args_form`` ``raw``), so that a violation can show what differs. ``always`` makes
        the decision sticky for the agent's tool. ``run_state`` is the id of the run state
        (see :meth:`run_state`) it was made on.

        Raises:
            UsageError: if ``decision`` is not ``approve`` or ``reject``.
        """
        if decision not in DECISIONS:
            raise UsageError(f"decision must be one of {DECISIONS}, not {decision!r}")
        call_hash = self.find_call(run_id, scope, call_id)
        args_digest: bytes | None = None
        args_form: str | None = None
        if arguments is not None:
            args = digests.arguments_digest(arguments)
            args_digest, args_form = args.digest, args.form
            called = self._call_agents.get((run_id, tuple(scope), call_id))
            if called is None or called[1] != args_digest:
                self._put_arguments(arguments, args_form)
        body = {
            "run_id": run_id, "scope": list(scope), "call_id": call_id, "decision": decision,
            "always": bool(always), "approver": approver, "reason": reason,
            "message_digest": self._put_output(message) if message else None,
            "args_digest": args_digest, "args_form": args_form, "agent": agent, "tool": tool,
            "run_state": run_state,
        }
        return self.append("decision", body, [call_hash] if call_hash else [], time_ns)

    def execution(
        self,
        *,
        run_id: str,
        call_id: str,
        arguments: str,
        scope: Sequence[str] = (),
        agent: str | None = None,
        tool: str | None = None,
        result: Any = None,
        error: str | None = None,
        run_state: str | None = None,
        time_ns: int | None = None,
    ) -> bytes:
        """Record that a tool ran with ``arguments`` (raw string) and returned ``result``.

        ``result`` is digested like a persisted output (see :func:`digests.write_output`);
        ``None`` with ``error`` set records a failed execution. ``run_state`` is the id of
        the run state the leg that ran it resumed from (None for a leg started fresh).
        """
        args = digests.arguments_digest(arguments)
        result_digest = None
        if result is not None:
            try:
                result_digest = self._put_output(result)
            except ValueError:
                result_digest = self._put_output(str(result))
        body = {
            "run_id": run_id, "scope": list(scope), "call_id": call_id, "agent": agent,
            "tool": tool, "args_digest": args.digest, "args_form": args.form,
            "args_payload": self._put_output(arguments), "result_digest": result_digest,
            "error": error, "run_state": run_state,
        }
        return self.append("execution", body, self._call_refs(run_id, scope, call_id), time_ns)

    def session_item(
        self,
        *,
        run_id: str,
        session_id: str,
        item: dict[str, Any] | None,
        scope: Sequence[str] = (),
        op: str = "add",
        time_ns: int | None = None,
    ) -> bytes:
        """Record an item the session store accepted (``op="add"``), or a removal.

        ``op="pop"`` records that the last item was removed (``item`` = what was
        popped); ``op="clear"`` that the session was cleared (``item`` None).

        Raises:
            UsageError: if ``op`` is unknown.
        """
        if op not in SESSION_OPS:
            raise UsageError(f"session op must be one of {SESSION_OPS}, not {op!r}")
        item_type = call_id = None
        item_digest = output_digest = args_digest = None
        if item is not None:
            item_type = item.get("type") or ("message" if "role" in item else None)
            call_id = item.get("call_id")
            if call_id is None and item_type in _CALL_BY_ID:  # a hosted call's item
                call_id = item.get(_CALL_BY_ID[item_type]) or item.get("id")
            item_digest = self._put_item(item)
            if item_type == "function_call_output" and "output" in item:
                try:
                    output_digest = self._put_output(item["output"])
                except ValueError:
                    output_digest = None
            if item_type == "function_call" and isinstance(item.get("arguments"), str):
                args_digest = digests.arguments_digest(item["arguments"]).digest
        body = {
            "run_id": run_id, "scope": list(scope), "session_id": session_id, "op": op,
            "item_type": item_type, "call_id": call_id, "item_digest": item_digest,
            "output_digest": output_digest, "args_digest": args_digest,
        }
        refs = self._call_refs(run_id, None, call_id) if isinstance(call_id, str) else []
        return self.append("session_item", body, refs, time_ns)

    def guardrail(
        self,
        *,
        run_id: str,
        call_id: str,
        guardrail: str,
        message: str | None = None,
        scope: Sequence[str] = (),
        agent: str | None = None,
        tool: str | None = None,
        time_ns: int | None = None,
    ) -> bytes:
        """Record that a guardrail blocked a call: its ``message`` (None: not known) replaces
        the call's output. A tool input guardrail blocks before the tool runs, a tool output
        guardrail after (its execution is recorded first)."""
        body = {
            "run_id": run_id, "scope": list(scope), "call_id": call_id, "guardrail": guardrail,
            "message_digest": self._put_output(message) if message else None,
            "agent": agent, "tool": tool,
        }
        return self.append("guardrail", body, self._call_refs(run_id, scope, call_id), time_ns)

    def run_end(
        self,
        *,
        run_id: str,
        status: str,
        scope: Sequence[str] = (),
        run_state: str | None = None,
        time_ns: int | None = None,
    ) -> bytes:
        """Record the end of a run (or of one leg of it): completed, interrupted or failed.

        ``run_state`` is the id of the run state the leg resumed from (None: started fresh).

        Raises:
            UsageError: if ``status`` is unknown.
        """
        if status not in RUN_STATUSES:
            raise UsageError(f"run status must be one of {RUN_STATUSES}, not {status!r}")
        body = {"run_id": run_id, "scope": list(scope), "status": status, "run_state": run_state}
        return self.append("run_end", body, [], time_ns)

    def run_state(
        self,
        *,
        run_id: str,
        state_id: str,
        event: str,
        parent: str | None = None,
        state: Any = None,
        digest: bytes | None = None,
        interruptions: Sequence[Interruption] = (),
        time_ns: int | None = None,
    ) -> bytes:
        """Record a run state (a paused run's ``RunState``) of run ``run_id``.

        ``state_id`` names the state; ``parent`` the state it was derived from.
        ``event`` is one of :data:`STATE_EVENTS`: ``to_state`` (made from a run
        result), ``to_json`` (serialised; earlier recorders wrote it), ``loaded``
        (first met, found by its digest or pending approvals), ``resume`` (a leg resumed
        from it), ``decided`` (a decision was applied to it), ``adopted`` (first met,
        never recorded before: the first entry of a new run) or ``ended`` (a leg resumed
        from it ended: the SDK updates the state object it resumes). ``state`` is its serialised
        form (a JSON value), digested into the 32-byte ``digest`` as SHA-256 over its
        RFC 8785 JSON (see :func:`item_bytes` for values RFC 8785 refuses) and not
        stored; or pass ``digest`` itself. ``interruptions`` are its pending approvals.

        Raises:
            UsageError: if ``event`` is unknown.
        """
        if event not in STATE_EVENTS:
            raise UsageError(f"run state event must be one of {STATE_EVENTS}, not {event!r}")
        if state is not None:
            digest = item_sha256(state)
        pending = _pending_fields(interruptions)
        body = {
            "run_id": run_id, "state_id": state_id, "parent": parent, "event": event,
            "digest": digest, "interruptions": pending,
        }
        return self.append("run_state", body, [], time_ns)

    def policy(self, *, run_id: str, text: bytes, time_ns: int | None = None) -> bytes | None:
        """Record that run ``run_id`` is guarded by the policy file ``text`` (its bytes, stored
        as a payload named by their SHA-256) from now on, unless that is the policy its run
        recorded last (then None)."""
        with self.atomic():
            digest = hashlib.sha256(text).digest()
            if self._policies.get(run_id) == digest:
                return None
            body = {"run_id": run_id, "policy_digest": self.ledger.payloads.put(text)}
            return self.append("policy", body, [], time_ns)

    def guard(
        self,
        *,
        allowed: bool,
        run_id: str,
        call_id: str,
        scope: Sequence[str],
        agent: str,
        tool: str,
        arguments: str,
        mode: str,
        code: str,
        reason: str,
        policy_digest: bytes,
        run_state: str | None,
        message: str | None = None,
        args_digest: bytes | None = None,
        time_ns: int | None = None,
    ) -> bytes:
        """Record the guard's verdict on the call ``(run_id, scope, call_id)`` of ``agent``'s
        ``tool`` with ``arguments`` (raw string; digested): an ``allowed`` or a ``denied``
        entry, with the ``code`` and ``reason`` of :func:`evidence_ledger.policy.judge.judge`,
        under the policy ``policy_digest`` (recorded by :meth:`policy`), in ``mode``
        (``observe``: the tool runs anyway); ``run_state``: the state the leg resumed from;
        ``message``: the rejection the call gets instead of running (None: it runs, or the
        run fails); ``args_digest``: the digest of ``arguments``, when the caller has it.
        Its ref is the recorded call (none when the run never recorded it)."""
        body = {
            "run_id": run_id, "scope": list(scope), "call_id": call_id, "agent": agent,
            "tool": tool,
            "args_digest": args_digest or digests.arguments_digest(arguments).digest,
            "mode": mode, "code": code, "reason": reason, "policy_digest": policy_digest,
            "run_state": run_state,
            "message_digest": self._put_output(message) if message else None,
        }
        return self.append("allowed" if allowed else "denied", body,
                           self._call_refs(run_id, scope, call_id), time_ns)

    def revocation(
        self, *, call_id: str, by: str, reason: str, run_id: str | None = None,
        time_ns: int | None = None,
    ) -> bytes:
        """Record that every approval of ``call_id`` recorded so far (in ``run_id``; None:
        in every run) no longer lets its tool run through the guard."""
        body = {"run_id": run_id, "call_id": call_id, "by": by, "reason": reason}
        return self.append("revocation", body, [], time_ns)

    def approval_signature(
        self, *, decision: bytes, signer: Signer, time_ns: int | None = None,
    ) -> bytes:
        """Record ``signer``'s Ed25519 signature (a C2SP signed-note key) over the call the
        approval ``decision`` (its entry hash) names: its identity, tool, arguments digest
        and approver (:func:`evidence_ledger.policy.judge.approval_message`).

        Raises:
            UsageError: if ``decision`` names no recorded decision, or one whose tool and
                arguments neither it nor its call records.
        """
        with self.atomic():
            made = self.guard_facts.by_hash.get(decision)
            found = self._decision_calls.get(decision)
            if made is None or found is None:
                raise UsageError("the decision to sign names no recorded call")
            run_id, scope, call_id, tool, args_digest = found
            message = approval_message(run_id, scope, call_id, tool, args_digest, made.approver,
                                       decision)
            body = {
                "run_id": run_id, "scope": list(scope), "call_id": call_id,
                "decision_hash": decision, "approver": made.approver,
                "vkey": signer.verifier.vkey,
                "signature": base64.b64encode(signer.sign(message)).decode("ascii"),
            }
            return self.append("approval_signature", body,
                               self._call_refs(run_id, scope, call_id), time_ns)

    def redaction(
        self, *, digest: bytes, reason: str, by: str | None = None, time_ns: int | None = None
    ) -> bytes:
        """Record that the payload with this 32-byte SHA-256 is erased, and why.

        Append this before erasing the payload, so an erased payload always has its
        entry (see :func:`evidence_ledger.record.redact.redact`).
        """
        body = {"digest": digest, "reason": reason, "by": by}
        return self.append("redaction", body, [], time_ns)

    def ingest_marker(
        self, *, file_sha256: bytes, lines: int, name: str, time_ns: int | None = None
    ) -> bytes:
        """Record that a JSONL file (32-byte SHA-256, ``lines`` lines) was ingested."""
        body = {"file_sha256": file_sha256, "lines": lines, "name": name}
        return self.append("ingest", body, [], time_ns)

    def session_repair(
        self,
        *,
        repair_id: str,
        session_id: str,
        store: str,
        item: dict[str, Any],
        position: int,
        run_id: str,
        by: str,
        scope: Sequence[str] = (),
        backup: str | None = None,
        history_digest: bytes | None = None,
        time_ns: int | None = None,
    ) -> bytes:
        """Record that a missing ``function_call`` ``item`` was synthesised from the ledger's
        evidence and inserted into session ``session_id`` at index ``position`` (0-based, in
        the repaired history), by ``by``.

        ``item`` is the inserted ``function_call`` (``call_id``, ``name``, ``arguments``
        strings); it is stored as a payload (``item_digest``) and its arguments digested.
        The entry's ref is the recorded call ``(run_id, scope, item["call_id"])`` the item
        was rebuilt from. ``store`` names the session store (a file path, or a Session
        class); ``backup`` the backup copy written first, if any; ``history_digest`` the
        32-byte digest of an already-stored payload holding the history before the repair.
        All entries of one repair share ``repair_id`` (see :mod:`evidence_ledger.sessions`).

        Raises:
            UsageError: if ``item`` is not such a ``function_call``, ``position`` is
                negative, or no call ``(run_id, scope, call_id)`` is recorded.
        """
        call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
        if item.get("type") != "function_call" or not all(
            isinstance(v, str) for v in (call_id, name, arguments)
        ):
            raise UsageError("a session repair inserts a function_call item with string "
                             "call_id, name and arguments")
        assert isinstance(call_id, str) and isinstance(arguments, str)
        if position < 0:
            raise UsageError(f"position must be >= 0, not {position}")
        with self.atomic():
            call_hash = self.find_call(run_id, scope, call_id)
            if call_hash is None:
                raise UsageError(f"no recorded call {call_id!r} in run {run_id!r} scope "
                                 f"{list(scope)} to repair from")
            body = {
                "run_id": run_id, "scope": list(scope), "call_id": call_id,
                "repair_id": repair_id, "session_id": session_id, "store": store,
                "backup": backup, "tool": name,
                "args_digest": digests.arguments_digest(arguments).digest,
                "item_digest": self._put_item(item), "position": position,
                "history_digest": history_digest, "by": by,
            }
            return self.append("session_repair", body, [call_hash], time_ns)
