"""Times the user gives: ns since the Unix epoch (UTC) from an integer or ISO 8601 text
(pure). Entry times are ns since the epoch (FORMAT.md "Entries")."""

from __future__ import annotations

import datetime as dt
import re

from evidence_ledger.format.errors import UsageError

__all__ = ["parse_time", "time_ns"]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def parse_time(text: str) -> int:
    """Nanoseconds since the epoch (UTC) of ``text``: an integer (ns) or ISO 8601.

    An ISO 8601 time without an offset is taken as UTC; a date alone is its midnight.

    Raises:
        UsageError: if ``text`` is neither, or lies before the epoch or past the last
            nanosecond a signed 64-bit integer holds (2262-04-11, the time columns' range).
    """
    text = text.strip()
    if re.fullmatch(r"[0-9]+", text):
        return _in_range(int(text), text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise UsageError(f"time {text!r} is neither ISO 8601 nor integer ns") from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    ns = (when - _EPOCH) // dt.timedelta(microseconds=1) * 1000
    if ns < 0:
        raise UsageError(f"time {text!r} lies before 1970-01-01")
    return _in_range(ns, text)


def time_ns(value: str | int) -> int:
    """Nanoseconds since the epoch (UTC) of ``value``: text as :func:`parse_time` reads it,
    or an integer number of ns, held to the same range.

    Raises:
        UsageError: if the time lies before the epoch or past 2262-04-11.
        TypeError: for anything but ``str`` or ``int`` (``bool`` included).
    """
    if isinstance(value, str):
        return parse_time(value)
    if type(value) is not int:
        raise TypeError(f"a time is ISO 8601 text or int ns, not {type(value).__name__}")
    if value < 0:
        raise UsageError(f"time {value} lies before 1970-01-01")
    return _in_range(value, str(value))


def _in_range(ns: int, text: str) -> int:
    if ns >= 2**63:
        raise UsageError(f"time {text!r} lies past 2262-04-11 (beyond 64-bit nanoseconds)")
    return ns
