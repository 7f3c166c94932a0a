"""The simulation over time, at a fixed interval: what ``karpy simulate -o json`` reports as
``status.samples`` (and ``status.costPerHourAverage``), and what ``--plot`` and ``karpy compare`` draw.

The interval is the shortest of :data:`INTERVALS` that keeps a run to at most :data:`MAX_SAMPLES`
samples (10 s for the usual hour, 6 h for a month). Each sample is the state at its instant: the cost per
hour and the number of launched NodeClaims not yet gone, and how many disruption commands started since
the previous sample. The first sample is at the start, the last at the end.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from ..kube.times import fmt_time

INTERVALS = (10, 30, 60, 300, 600, 1800, 3600, 6 * 3600, 24 * 3600, 7 * 24 * 3600, 30 * 24 * 3600)
MAX_SAMPLES = 360


def interval_for(window: float) -> int:
    for i in INTERVALS:
        if window / i <= MAX_SAMPLES:
            return i
    return int(window // MAX_SAMPLES) + 1


def _at(changes: list[tuple[float, Any]], t: float, default: Any) -> Any:
    """The value of a step function given by its (time, value) changes, at ``t``."""
    i = bisect_right(changes, t, key=lambda c: c[0])
    return changes[i - 1][1] if i else default


def average_cost(costs: list[tuple[float, float]], start: float, end: float) -> float:
    """The cost per hour averaged over [start, end]: what the window cost, divided by its hours."""
    if end <= start:
        return _at(costs, end, 0.0)
    total = 0.0
    cur = _at(costs, start, 0.0)
    t = start
    for when, c in costs:
        if when <= start:
            continue
        if when >= end:
            break
        total += cur * (when - t)
        cur, t = c, when
    total += cur * (end - t)
    return total / (end - start)


def samples(history: Any, start: float, end: float) -> tuple[int, list[dict]]:
    """(interval in seconds, the samples) of a simulation's history over [start, end]."""
    step = interval_for(max(0.0, end - start))
    times = [start + k * step for k in range(int((end - start) // step) + 1)]
    if not times or times[-1] < end:
        times.append(end)
    started = sorted(d.started for d in history.disruptions)
    out = []
    prev = None
    for t in times:
        lo = 0 if prev is None else bisect_right(started, prev)
        out.append({
            "time": fmt_time(t),
            "costPerHour": f"{_at(history.costs, t, 0.0):.4f}",
            "nodeClaims": _at(history.node_counts, t, 0),
            "disruptions": bisect_right(started, t) - lo,
        })
        prev = t
    return step, out
