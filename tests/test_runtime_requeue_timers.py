"""Requeues on the clock (Manager.requeue_after): the earliest request wins, and a timer that fired or was
replaced is freed at once, without the cyclic garbage collector (which karpy simulate keeps away from its
long-lived heap, so a timer left to it would stay for the rest of the run)."""

from __future__ import annotations

import gc

from karpy.kube.memory import MemoryAPI
from karpy.runtime.clock import SimClock, Timer
from karpy.runtime.manager import Manager


class _Counter:
    name = "counter"

    def __init__(self) -> None:
        self.runs: list[tuple[float, str]] = []
        self.clock: SimClock | None = None

    def setup(self, mgr: Manager) -> None:
        self.clock = mgr.clock

    def reconcile(self, key: str) -> None:
        self.runs.append((self.clock.now(), key))
        return None


def _fire_all(clock: SimClock, mgr: Manager) -> None:
    while (t := clock.next_time()) is not None:
        clock.set(t)
        for timer in clock.pop_due(t):
            timer.fn()
        mgr.drain()


def _timers() -> int:
    return sum(1 for o in gc.get_objects() if type(o) is Timer)


def test_the_earliest_requeue_wins_and_fired_or_replaced_timers_are_freed_at_once():
    clock = SimClock(0.0)
    mgr = Manager(MemoryAPI(clock), clock)
    c = _Counter()
    mgr.add(c)
    was = gc.isenabled()
    gc.disable()
    try:
        before = _timers()
        for i in range(50):
            mgr.requeue_after(c, f"k{i}", 30.0)
            mgr.requeue_after(c, f"k{i}", 10.0)  # earlier: replaces the first
            mgr.requeue_after(c, f"k{i}", 20.0)  # later: ignored
        assert _timers() - before == 100  # the replaced ones wait in the clock, cancelled
        _fire_all(clock, mgr)
        assert _timers() == before
    finally:
        if was:
            gc.enable()
    assert sorted(c.runs) == sorted((10.0, f"k{i}") for i in range(50))
