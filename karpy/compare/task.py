"""One variant as a worker runs it (in this process, a pool's process or a Ray task)."""

from __future__ import annotations

from .run import Options, metrics, simulate
from .variants import documents


def task(base: list[dict], changed: dict[int, dict], opts: Options, full: bool) -> dict:
    """One variant: the SimulationSummary's status (``full``) or the row's metrics."""
    status = simulate(documents(base, changed), opts)
    return status if full else metrics(status)
