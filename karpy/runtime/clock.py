"""Clocks the controllers and the simulated world read: simulated or real time.

Both hold timers (``call_at``): callbacks run when their time comes, by whoever
drives the clock (the simulation loop, or the real-time loop of
``karpy sandbox`` / ``karpy controller``). A timer may be marked ``keepalive``:
work the world still has to do (a node registering, a pod finishing), which
keeps a simulation from counting as settled; controllers' polling and requeues
are not.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from typing import Callable


class Timer:
    __slots__ = ("when", "priority", "seq", "fn", "keepalive", "cancelled", "label", "_order")

    def __init__(self, when: float, seq: int, fn: Callable[[], None], keepalive: bool, label: str, priority: int = 0):
        self.when = when
        self.priority = priority
        self.seq = seq
        self.fn = fn
        self.keepalive = keepalive
        self.cancelled = False
        self.label = label
        self._order = (when, priority, seq)  # the heap's order, built once (a heap compares each timer often)

    def cancel(self) -> None:
        self.cancelled = True

    def __lt__(self, other: "Timer") -> bool:
        return self._order < other._order


class Clock:
    """Timers over some notion of now; subclasses say what now is."""

    def __init__(self) -> None:
        self._timers: list[Timer] = []
        self._seq = itertools.count()
        self._lock = threading.RLock()
        self.wakeup = threading.Condition(self._lock)
        self.keepalive_count = 0

    def now(self) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def call_at(self, when: float, fn: Callable[[], None], keepalive: bool = False, label: str = "",
                priority: int = 0) -> Timer:
        """Run ``fn`` at ``when``; at equal times, lower ``priority`` first (the simulation drains
        everything one priority's timers cause before the next priority's run)."""
        with self._lock:
            t = Timer(when, next(self._seq), fn, keepalive, label, priority)
            heapq.heappush(self._timers, t)
            if keepalive:
                self.keepalive_count += 1
            self.wakeup.notify_all()
            return t

    def call_later(self, delay: float, fn: Callable[[], None], keepalive: bool = False, label: str = "") -> Timer:
        return self.call_at(self.now() + max(0.0, delay), fn, keepalive, label)

    def next_time(self) -> float | None:
        with self._lock:
            self._drop_cancelled()
            return self._timers[0].when if self._timers else None

    def peek(self) -> Timer | None:
        """The earliest live timer, left in place."""
        with self._lock:
            self._drop_cancelled()
            return self._timers[0] if self._timers else None

    def earliest(self, accept: Callable[[Timer], bool]) -> float:
        """The time of the earliest live timer ``accept`` takes (infinity when none does); a full scan."""
        with self._lock:
            return min((t.when for t in self._timers if not t.cancelled and accept(t)), default=float("inf"))

    def has_keepalive(self) -> bool:
        with self._lock:
            self._drop_cancelled()
            return any(t.keepalive and not t.cancelled for t in self._timers)

    def _drop_cancelled(self) -> None:
        while self._timers and self._timers[0].cancelled:
            t = heapq.heappop(self._timers)
            if t.keepalive:
                self.keepalive_count -= 1

    def _pop_while(self, take: Callable[[Timer], bool]) -> list[Timer]:
        """Pop timers from the head while ``take`` accepts the head; the live ones, in order (lock held)."""
        out = []
        while self._timers and take(self._timers[0]):
            t = heapq.heappop(self._timers)
            if t.keepalive:
                self.keepalive_count -= 1
            if not t.cancelled:
                out.append(t)
        return out

    def pop_due(self, now: float) -> list[Timer]:
        """Timers due at or before ``now``, in order, removed from the clock."""
        with self._lock:
            return self._pop_while(lambda t: t.when <= now)

    def pop_next_batch(self) -> list[Timer]:
        """The timers of the earliest (time, priority) (for the simulation loop)."""
        with self._lock:
            self._drop_cancelled()
            if not self._timers:
                return []
            head = (self._timers[0].when, self._timers[0].priority)
            return self._pop_while(lambda t: (t.when, t.priority) == head)


class SimClock(Clock):
    """Simulated time: it moves only when the simulation loop sets it."""

    def __init__(self, start: float):
        super().__init__()
        self._now = start

    def now(self) -> float:
        return self._now

    def set(self, t: float) -> None:
        if t > self._now:
            self._now = t


class RealClock(Clock):
    """Real time, optionally sped up: ``now = start + (wall time elapsed) * speed``."""

    def __init__(self, start: float | None = None, speed: float = 1.0):
        super().__init__()
        self._wall0 = time.monotonic()
        self._start = time.time() if start is None else start
        self.speed = max(1e-6, float(speed))

    def now(self) -> float:
        return self._start + (time.monotonic() - self._wall0) * self.speed

    def wall_seconds_until(self, t: float) -> float:
        return max(0.0, (t - self.now()) / self.speed)
