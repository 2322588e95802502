"""Wrapping the app's objects and callables: each wrapped once, a wrapper the same kind of
callable as what it wraps (sync or coroutine function) under the same name."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["answered", "claim", "is_ours", "named_as", "observed", "ours"]

MARK = "_evidence_ledger_attached"


def claim(obj: object) -> bool:
    """Mark ``obj`` (a tool, a guardrail or one of our wrappers) as attached; False if it
    already was."""
    if getattr(obj, MARK, False):
        return False
    setattr(obj, MARK, True)
    return True


def ours(function: Any) -> Any:
    """``function``, marked as one of our wrappers (a tool copied or rebuilt with
    ``dataclasses.replace`` carries them along: they are never wrapped twice)."""
    claim(function)
    return function


def is_ours(function: Any) -> bool:
    """True for a wrapper :func:`ours` marked."""
    return bool(getattr(function, MARK, False))


def named_as(wrapper: Any, original: Any) -> Any:
    """``wrapper``, carrying the name, module and qualified name ``original`` shows
    (``functools.update_wrapper``); for a callable object, which has none of its own, those
    of its class, as the SDK reads them when it tells same-named agents apart (their
    guardrails and policies are part of an agent's identity in a ``RunState``)."""
    functools.update_wrapper(wrapper, original)
    for attr in ("__module__", "__qualname__", "__name__"):
        if not hasattr(original, attr):
            setattr(wrapper, attr, getattr(type(original), attr))
    return wrapper


def observed(function: Any, after: Callable[[tuple[Any, ...], Any], None]) -> Any:
    """A wrapper of ``function`` that returns what it returns and calls ``after(args,
    result)`` first (as :func:`answered`)."""

    def answer(args: tuple[Any, ...], result: Any) -> Any:
        after(args, result)
        return result

    return answered(function, answer)


def answered(function: Any, answer: Callable[[tuple[Any, ...], Any], Any]) -> Any:
    """A wrapper of ``function`` that returns ``answer(args, result)`` of what it returns
    (positional arguments; an awaitable result is awaited, then passed). A coroutine
    function gives a coroutine function, anything else a plain function that returns
    the answer (an awaitable's answer when awaited, as an awaitable); named as
    ``function`` (:func:`named_as`)."""

    async def later(args: tuple[Any, ...], pending: Any) -> Any:
        return answer(args, await pending)

    if inspect.iscoroutinefunction(function):

        async def answered_async(*args: Any) -> Any:
            return answer(args, await function(*args))

        return named_as(answered_async, function)

    def answered_sync(*args: Any) -> Any:
        result = function(*args)
        if inspect.isawaitable(result):  # a callable object returning an awaitable
            return later(args, result)
        return answer(args, result)

    return named_as(answered_sync, function)
