"""Timestamps as the API server writes them: RFC 3339, UTC, whole seconds."""

from __future__ import annotations

from datetime import datetime, timezone
from functools import lru_cache

# The last instant an RFC 3339 timestamp (four-digit year) can name.
MAX_TIME = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc).timestamp()


def fmt_time(t: float | None) -> str | None:
    if t is None:
        return None
    t = min(t, MAX_TIME)
    return datetime.fromtimestamp(int(t), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(s: str | None) -> float | None:
    """Seconds since the epoch of an RFC 3339 date-time (any offset, fractional seconds, ``t``/``z``)."""
    if s is None or s == "":
        return None
    return _parse(str(s))


@lru_cache(maxsize=65536)
def _parse(s: str) -> float:
    text = s.strip()
    if len(text) > 10 and text[10] in "tT ":
        text = text[:10] + "T" + text[11:]
    if text[-1:] in "zZ":
        text = text[:-1] + "+00:00"
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()
