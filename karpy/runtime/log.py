"""Structured logs with upstream Karpenter's keys (``level``, ``time``, ``logger``, ``message``,
``controller`` and the objects concerned), one JSON object per line.

``karpy controller`` writes them to stdout; ``karpy simulate`` keeps them in
memory, where the simulation reads the records it reports (the disruption
commands, for one).
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any, Callable, TextIO

from ..kube.times import fmt_time

LEVELS = {"debug": 10, "info": 20, "warn": 30, "warning": 30, "error": 40}


class Logger:
    def __init__(self, clock: Any, level: str = "info", stream: TextIO | None = None, keep: bool = False,
                 logger: str = "controller"):
        self.clock = clock
        self.level = LEVELS.get(level.lower(), 20)
        self.stream = stream
        self.keep = keep
        self.records: list[dict] = []
        self.logger = logger
        self.listeners: list[Callable[[dict], None]] = []
        self.listen_for: set[str] | None = None  # messages the listeners want (None: every one)
        self._lock = threading.Lock()  # karpy controller logs from several threads

    def wants(self, level: str, message: str) -> bool:
        """Would a record at this level with this message go anywhere? (Callers may skip building it.)"""
        if LEVELS.get(level, 20) >= self.level:
            return True
        return bool(self.listeners) and (self.listen_for is None or message in self.listen_for)

    def log(self, level: str, message: str, controller: str = "", **values: Any) -> None:
        lv = LEVELS.get(level, 20)
        if lv < self.level and not (self.listeners and (self.listen_for is None or message in self.listen_for)):
            return
        rec: dict[str, Any] = {"level": level.upper(), "time": fmt_time(self.clock.now()), "logger": self.logger,
                               "message": message}
        if controller:
            rec["controller"] = controller
        rec.update(values)
        for fn in self.listeners:
            fn(rec)
        if lv < self.level:
            return
        if self.keep:
            self.records.append(rec)
        if self.stream is not None:
            line = json.dumps(rec, default=str) + "\n"
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
