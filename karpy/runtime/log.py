"""Structured logs as upstream Karpenter writes them: one compact JSON object per line, with the keys
``level``, ``time`` (ISO 8601, milliseconds, UTC), ``logger``, ``message``, ``commit``, then, for a
controller, ``controller`` and -- inside a reconcile (:meth:`Logger.reconcile`) -- ``namespace``,
``name`` and ``reconcileID``, then the values of the record, in that order.

``karpy controller`` writes them to stdout; ``karpy sandbox`` writes them to stdout and keeps the last
ones in a :class:`LogBuffer` that ``kubectl logs`` reads; ``karpy simulate`` keeps them in memory, where
the simulation reads the records it reports (the disruption commands, for one).
"""

from __future__ import annotations

import json
import math
import sys
import threading
import uuid
from collections import deque
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TextIO

from .. import __version__
from .._build import COMMIT as BUILD_COMMIT
from ..timeutil import format_rfc3339

LEVELS = {"debug": 10, "info": 20, "warn": 30, "warning": 30, "error": 40}
# what karpy's lines carry as ``commit``, as upstream's carry the build's git commit: the image's commit, if stamped
COMMIT = BUILD_COMMIT or __version__
BUFFER_BYTES = 8 * 1024 * 1024  # the lines karpy sandbox keeps for kubectl logs, at most


def iso_millis(t: float) -> str:
    """``2025-04-30T09:05:58.528Z``: the time as upstream's logger writes it (zap's ISO 8601 encoder, UTC)."""
    whole = math.floor(t)
    ms = min(999, int((t - whole) * 1000))
    return f"{format_rfc3339(whole)[:-1]}.{ms:03d}Z"


def go_duration(seconds: float) -> str:
    """A duration as Go's ``time.Duration`` prints it: ``17.375028ms``, ``1.5s``, ``2m3.5s``, ``0s``."""
    ns = int(round(seconds * 1e9))
    if ns == 0:
        return "0s"
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)

    def frac(v: int, digits: int) -> str:
        whole, part = divmod(v, 10 ** digits)
        tail = f"{part:0{digits}d}".rstrip("0")
        return f"{whole}.{tail}" if tail else str(whole)

    if ns < 1000:
        return f"{sign}{ns}ns"
    if ns < 1_000_000:
        return f"{sign}{frac(ns, 3)}µs"
    if ns < 1_000_000_000:
        return f"{sign}{frac(ns, 6)}ms"
    h, rem = divmod(ns, 3600 * 10 ** 9)
    m, rem = divmod(rem, 60 * 10 ** 9)
    out = f"{h}h" if h else ""
    if h or m:
        out += f"{m}m"
    return f"{sign}{out}{frac(rem, 9)}s"


class LogBuffer:
    """The last lines a logger wrote, each with its time, at most ``max_bytes`` of them (the oldest go
    first): what ``kubectl logs`` reads from karpy sandbox's Karpenter pod. Readers wait for new lines on
    :attr:`cond`; every line has a sequence number, so a follower asks for the lines after the last it saw."""

    def __init__(self, max_bytes: int = BUFFER_BYTES):
        self.max_bytes = max(1, int(max_bytes))
        self.entries: deque[tuple[int, float, bytes]] = deque()  # (sequence number, time, line with its "\n")
        self.size = 0
        self.next_seq = 0
        self.cond = threading.Condition()

    def append(self, t: float, line: bytes) -> None:
        with self.cond:
            self.entries.append((self.next_seq, t, line))
            self.next_seq += 1
            self.size += len(line)
            while self.size > self.max_bytes and len(self.entries) > 1:
                self.size -= len(self.entries.popleft()[2])
            self.cond.notify_all()

    def lines(self) -> tuple[list[tuple[int, float, bytes]], int]:
        """Every line kept, and the sequence number the next line will have."""
        with self.cond:
            return list(self.entries), self.next_seq

    def after(self, seq: int, timeout: float) -> tuple[list[tuple[int, float, bytes]], int]:
        """The lines from sequence number ``seq`` on (waiting up to ``timeout`` seconds for one), and the
        sequence number to ask for next. Lines dropped before they were read are skipped."""
        with self.cond:
            if self.next_seq <= seq:
                self.cond.wait(timeout)
            out = [e for e in self.entries if e[0] >= seq] if self.next_seq > seq else []
            return out, self.next_seq


class Logger:
    def __init__(self, clock: Any, level: str = "info", stream: TextIO | None = None, keep: bool = False,
                 logger: str = "controller", buffer: LogBuffer | None = None, commit: str = COMMIT):
        self.clock = clock
        self.level = LEVELS.get(level.lower(), 20)
        self.stream = stream
        self.keep = keep
        self.buffer = buffer
        self.commit = commit
        self.records: list[dict] = []
        self.logger = logger
        self.listeners: list[Callable[[dict], None]] = []
        self.listen_for: set[str] | None = None  # messages the listeners want (None: every one)
        self._lock = threading.Lock()  # karpy controller logs from several threads
        self._local = threading.local()  # the reconcile a thread is in (see reconcile)

    @contextmanager
    def reconcile(self, controller: str, namespace: str = "", name: str = "") -> Iterator[None]:
        """Within this block, this thread's records of ``controller`` carry the reconciled object's
        ``namespace`` and ``name`` and one ``reconcileID``, as controller-runtime's logger adds them."""
        prev = getattr(self._local, "reconcile", None)
        self._local.reconcile = (controller, {"namespace": namespace, "name": name, "reconcileID": str(uuid.uuid4())})
        try:
            yield
        finally:
            self._local.reconcile = prev

    def wants(self, level: str, message: str) -> bool:
        """Would a record at this level with this message go anywhere? (Callers may skip building it.)"""
        if LEVELS.get(level, 20) >= self.level:
            return True
        return bool(self.listeners) and (self.listen_for is None or message in self.listen_for)

    def log(self, level: str, message: str, controller: str = "", unlogged: dict | None = None,
            **values: Any) -> None:
        """One record. ``unlogged`` values reach the listeners (karpy controller's metrics read them) but
        are not written: upstream's line for the same event does not have them."""
        lv = LEVELS.get(level, 20)
        if lv < self.level and not (self.listeners and (self.listen_for is None or message in self.listen_for)):
            return
        now = self.clock.now()
        rec: dict[str, Any] = {"level": level.upper(), "time": iso_millis(now), "logger": self.logger,
                               "message": message}
        if self.commit:
            rec["commit"] = self.commit
        if controller:
            rec["controller"] = controller
            ctx = getattr(self._local, "reconcile", None)
            if ctx is not None and ctx[0] == controller:
                rec.update(ctx[1])
        rec.update(values)
        if self.listeners:
            heard = {**rec, **unlogged} if unlogged else rec
            for fn in self.listeners:
                fn(heard)
        if lv < self.level:
            return
        if self.keep:
            self.records.append(rec)
        if self.stream is not None or self.buffer is not None:
            line = json.dumps(rec, default=str, ensure_ascii=False, separators=(",", ":")) + "\n"
            if self.buffer is not None:
                self.buffer.append(now, line.encode())
            if self.stream is not None:
                with self._lock:
                    self.stream.write(line)
                    self.stream.flush()

    def info(self, message: str, controller: str = "", **values: Any) -> None:
        self.log("info", message, controller, **values)

    def debug(self, message: str, controller: str = "", **values: Any) -> None:
        self.log("debug", message, controller, **values)

    def error(self, message: str, controller: str = "", **values: Any) -> None:
        self.log("error", message, controller, **values)

    def warn(self, message: str, controller: str = "", **values: Any) -> None:
        self.log("warn", message, controller, **values)


def stdout_logger(clock: Any, level: str = "info") -> Logger:
    return Logger(clock, level=level, stream=sys.stdout)


def pretty_slice(items: list, max_items: int) -> str:
    """The first ``max_items`` items, then `` and N other(s)``, as upstream lists pods and instance types."""
    shown = ", ".join(str(i) for i in items[:max_items])
    return shown + (f" and {len(items) - max_items} other(s)" if len(items) > max_items else "")
