"""Progress of a long ``karpy simulate`` on a terminal: one line on standard error, rewritten in place
a few times a second, then cleared. The result on standard output is unchanged, and nothing is
written when standard error is not a terminal (a pipe, a file, CI) or with ``--quiet``."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from ..kube.times import fmt_time

INTERVAL = 0.25  # seconds of wall time between two updates


class Progress:
    def __init__(self, stream: TextIO | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self._next = 0.0
        self._shown = False

    @staticmethod
    def wanted(quiet: bool, stream: TextIO | None = None) -> bool:
        s = stream if stream is not None else sys.stderr
        return not quiet and hasattr(s, "isatty") and s.isatty()

    def __call__(self, sim: Any, force: bool = False) -> None:
        now = time.monotonic()  # pacing the display only; the simulation never reads it
        if not force and now < self._next:
            return
        self._next = now + INTERVAL
        self.stream.write("\r\x1b[2K" + line(sim))
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self._shown = False


def line(sim: Any) -> str:
    """What the simulation has reached: simulated time, pods bound and pending, NodeClaims, disruptions."""
    bound = pending = 0
    if sim.karpenter is not None:
        for e in sim.karpenter.cluster.pods.values():
            if e.terminal:
                continue
            if e.node:
                bound += 1
            else:
                pending += 1
    h = sim.history
    live = sum(1 for life in h.claims.values() if life.deleted is None)
    return (f"simulated {fmt_time(sim.now)} of {fmt_time(sim.until)}: {bound} pods bound, {pending} pending, "
            f"{live} NodeClaims, {len(h.disruptions)} disruptions")
