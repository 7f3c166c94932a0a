"""Cron schedules as Karpenter's disruption budgets read them (standard 5 fields, UTC).

croniter parses them; on top of it, the rules of the cron library upstream uses
apply: every value within its field's bounds (day-of-week 0-6, so 7 is out of
range), and ranges ascending (``tue-mon`` is refused).
"""

from __future__ import annotations

import re

from croniter import croniter

DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
_NAMES = (
    {},
    {},
    {},
    {m: i + 1 for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"))},
    {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))},
)
_ITEM = re.compile(r"^(\*|[a-z0-9]+(?:-[a-z0-9]+)?)(?:/([0-9]+))?$")
_FIELDS = ("minute", "hour", "day of month", "month", "day of week")


def _value(text: str, field: int) -> int:
    names = _NAMES[field]
    if text in names:
        return names[text]
    if not text.isdigit():
        raise ValueError(f"failed to parse int from {text}")
    return int(text)


def cron_error(schedule: str) -> str | None:
    """Why this schedule is invalid, or None."""
    s = schedule.strip()
    if s.startswith("@"):
        return None if s in DESCRIPTORS else f"unrecognized descriptor: {s}"
    fields = s.split()
    if len(fields) != 5:
        return f"expected exactly 5 fields, found {len(fields)}: {s}"
    for i, f in enumerate(fields):
        lo, hi = _BOUNDS[i]
        for item in f.lower().split(","):
            m = _ITEM.match(item)
            if not m:
                return f"failed to parse {_FIELDS[i]} field: {item}"
            rng = m.group(1)
            if rng == "*":
                continue
            try:
                parts = [_value(x, i) for x in rng.split("-")]
            except ValueError as e:
                return str(e)
            start, end = parts[0], parts[-1]
            if start < lo:
                return f"beginning of range ({start}) below minimum ({lo}): {item}"
            if end > hi:
                return f"end of range ({end}) above maximum ({hi}): {item}"
            if start > end:
                return f"beginning of range ({start}) beyond end of range ({end}): {item}"
    if not croniter.is_valid(s):
        return f"invalid cron schedule: {s}"
    return None
