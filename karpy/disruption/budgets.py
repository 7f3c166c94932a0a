"""Disruption budgets: how many of a NodePool's nodes may be disrupted right now, and why not.

A budget allows ``nodes`` (a count, or a percentage of the NodePool's nodes
rounded up) while it is active: always, or from each firing of its cron
``schedule`` (UTC) for ``duration``. It applies to the ``reasons`` it lists
(all when unset). The NodePool allows the minimum over its active budgets that
apply to the reason; nodes already being disrupted (deleting, or not Ready)
are counted against it.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Mapping

from croniter import CroniterBadDateError, croniter

from .. import resources as res
from ..cron import cron_error
from ..timeutil import MAX_TIME

UNLIMITED = 2**31 - 1
REASONS = ("Underutilized", "Empty", "Drifted")


_WINDOWS: dict[tuple[str, str], tuple[float, float, bool]] = {}


def _active(budget: Mapping, now: float) -> bool:
    """Is the budget's schedule window open at ``now``? (Always, without a schedule.)

    The window opens at each firing of the cron schedule (UTC) and stays open for
    ``duration``. The answer is cached until the next time it can change.
    """
    schedule = budget.get("schedule")
    duration = budget.get("duration")
    if not schedule and not duration:
        return True
    if not schedule or not duration:
        raise ValueError("schedule and duration must be set together")
    problem = cron_error(str(schedule))
    if problem:
        raise ValueError(problem)
    key = (str(schedule), str(duration))
    hit = _WINDOWS.get(key)
    if hit is not None and hit[0] <= now < hit[1]:
        return hit[2]
    length = res.parse_duration(duration)
    now_dt = datetime.fromtimestamp(now, tz=timezone.utc)
    last = _firing(schedule, now_dt + timedelta(microseconds=1), forward=False)  # latest firing <= now
    nxt = _firing(schedule, now_dt, forward=True)  # first firing > now
    nxt_t = math.inf if nxt is None else nxt  # none left before the calendar's end (year 9999)
    closes = -math.inf if last is None else last + length
    if now < closes:
        # open from a firing until ``duration`` later (that instant excluded); re-evaluated
        # at the next firing, which may extend it
        _WINDOWS[key] = (now, min(closes, nxt_t), True)
        return True
    _WINDOWS[key] = (now, nxt_t, False)
    return False


def _firing(schedule: str, start: datetime, forward: bool) -> float | None:
    """The schedule's first firing after ``start`` (or its last before), in seconds; None when the calendar
    (years 1 to 9999) holds none: near its ends the cron library runs out of dates."""
    try:
        it = croniter(schedule, start)
        return (it.get_next(datetime) if forward else it.get_prev(datetime)).timestamp()
    except (OverflowError, ValueError, CroniterBadDateError):
        return None


def window_changes_at(budget: Mapping, now: float) -> float | None:
    """The next instant after ``now`` at which the budget's schedule window opens or closes
    (None without a schedule, or for a budget that cannot be evaluated)."""
    if not budget.get("schedule") or not budget.get("duration"):
        return None
    try:
        _active(budget, now)
    except (ValueError, KeyError):
        return None
    hit = _WINDOWS.get((str(budget["schedule"]), str(budget["duration"])))
    return hit[1] if hit is not None and now < hit[1] <= MAX_TIME else None  # none past the calendar's end


def allowed_by_budget(budget: Mapping, num_nodes: int, now: float) -> int:
    """Nodes this one budget allows to be disrupted (UNLIMITED when it is not active)."""
    if not _active(budget, now):
        return UNLIMITED
    nodes = str(budget.get("nodes", "10%"))
    if nodes.endswith("%"):
        pct = int(nodes[:-1])
        return math.ceil(pct * num_nodes / 100)
    return int(nodes)


def allowed_disruptions(nodepool: Mapping, num_nodes: int, reason: str, now: float) -> int:
    """Nodes of this NodePool that may be disrupted for ``reason`` now (before subtracting those in progress).

    A budget that cannot be evaluated blocks every reason, as upstream fails closed.
    """
    budgets = ((nodepool.get("spec") or {}).get("disruption") or {}).get("budgets")
    if budgets is None:
        budgets = [{"nodes": "10%"}]
    allowed = UNLIMITED
    try:
        for b in budgets:
            value = allowed_by_budget(b, num_nodes, now)
            reasons = b.get("reasons")
            if reasons is not None and reason not in reasons:
                continue
            allowed = min(allowed, value)
    except (ValueError, KeyError):
        return 0
    return allowed


def budget_mapping(nodepools: Mapping[str, Mapping], nodes, reason: str, now: float) -> dict[str, int]:
    """Per NodePool, how many more nodes may start disruption for ``reason``.

    ``nodes`` are the managed nodes (:class:`karpy.disruption.state.NodeState`);
    only initialized ones that are not already terminating count toward the total,
    and those deleting or not Ready are already using the budget.
    """
    total: dict[str, int] = {}
    disrupting: dict[str, int] = {}
    for n in nodes:
        if n.nodeclaim is None or not n.initialized or n.terminating or n.nodepool is None:
            continue
        total[n.nodepool] = total.get(n.nodepool, 0) + 1
        if not n.ready or n.marked_for_deletion:
            disrupting[n.nodepool] = disrupting.get(n.nodepool, 0) + 1
    out: dict[str, int] = {}
    for name, np in nodepools.items():
        allowed = allowed_disruptions(np, total.get(name, 0), reason, now)
        out[name] = max(allowed - disrupting.get(name, 0), 0)
    return out


def blocked_nodepools(nodepools: Mapping[str, Mapping], nodes, reason: str, now: float) -> list[str]:
    """NodePools with nodes whose budgets allow no disruption for ``reason`` at all (an event is due)."""
    counts: dict[str, int] = {}
    for n in nodes:
        if n.nodeclaim is not None and n.initialized and not n.terminating and n.nodepool:
            counts[n.nodepool] = counts.get(n.nodepool, 0) + 1
    return sorted(name for name, np in nodepools.items()
                  if counts.get(name, 0) and allowed_disruptions(np, counts[name], reason, now) == 0)
