"""Timestamps as the API server writes them: RFC 3339, UTC, whole seconds (see :mod:`karpy.timeutil`)."""

from __future__ import annotations

from functools import lru_cache

from ..timeutil import MAX_TIME, format_rfc3339, parse_rfc3339

__all__ = ["MAX_TIME", "fmt_time", "parse_time"]


_LAST: list = [None, None]


def fmt_time(t: float | None) -> str | None:
    if t is None:
        return None
    sec = int(min(t, MAX_TIME)) if t >= 0 else t
    if _LAST[0] == sec:
        return _LAST[1]
    out = format_rfc3339(min(t, MAX_TIME))
    _LAST[0], _LAST[1] = sec, out
    return out


def parse_time(s: str | None) -> float | None:
    """Seconds since the epoch of an RFC 3339 date-time; None for an empty or unreadable one."""
    if s is None or s == "":
        return None
    return _parse(str(s))


@lru_cache(maxsize=65536)
def _parse(s: str) -> float | None:
    try:
        return parse_rfc3339(s)
    except ValueError:
        return None
