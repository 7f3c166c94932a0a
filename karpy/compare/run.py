"""One configuration simulated as ``karpy simulate`` simulates it, and what a comparison row reports of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class InputError(Exception):
    """Input that cannot be simulated: one line per problem, each naming the file and the field."""

    def __init__(self, lines: list[str]):
        super().__init__("; ".join(lines))
        self.lines = lines


@dataclass(frozen=True)
class Options:
    """What every configuration of one comparison or sweep is simulated with (``karpy simulate``'s flags)."""

    until: float = 3600.0
    horizon: bool = False  # --until given without --settle: run to the horizon
    region: str | None = None
    prices: Any = None  # the user's prices (--prices), already loaded

    def key(self) -> dict:
        return {"until": self.until, "horizon": self.horizon, "region": self.region,
                "prices": repr(self.prices) if self.prices is not None else None}


def load(paths: list[str], region: str | None) -> tuple[list[dict], list[str]]:
    """The validated manifests of a path set (files, directories), and the notes for standard error.
    Raises InputError with every problem found."""
    from ..api.loader import load_documents
    from ..simulator.inputs import check_regions, check_size

    loaded = load_documents(list(paths))
    if loaded.errors:
        raise InputError([str(e) for e in loaded.errors])
    problems = check_regions(loaded.documents, region) + check_size(loaded.documents)
    if problems:
        raise InputError(problems)
    return [d.obj for d in loaded.documents], loaded.messages()


def simulate(documents: list[dict], opts: Options) -> dict:
    """Simulate the documents; the SimulationSummary's status, with ``podsEvicted`` beside it."""
    from ..simulator.output import summary
    from ..simulator.sim import Simulation

    sim = Simulation(documents, region=opts.region, until=opts.until, horizon=opts.horizon)
    sim.cloud.prices = opts.prices
    sim.run()
    status = summary(sim)["status"]
    events, _ = sim.api.list("Event")
    status["podsEvicted"] = sum(1 for e in events if e.get("reason") == "Evicted")
    return status


def _count(items: list[str | None]) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x or "-"] = out.get(x or "-", 0) + 1
    return dict(sorted(out.items()))


def metrics(status: dict) -> dict:
    """What a comparison reports of one run: cost at the end and averaged over the window, the NodeClaims at
    the end by instance type, capacity type and architecture, pending pods, disruptions by reason, evictions."""
    live = [c for c in status["nodeClaims"] if c["deletedAt"] is None and not c["launchFailed"]]
    launched = [c for c in status["nodeClaims"] if not c["launchFailed"]]
    reasons = _count([d["reason"] for d in status["disruptions"]])
    return {
        "costPerHour": float(status["costPerHour"]),
        "costPerHourAverage": float(status["costPerHourAverage"]),
        "nodeClaims": len(live),
        "nodeClaimsLaunched": len(launched),
        "instanceTypes": _count([c["instanceType"] for c in live]),
        "capacityTypes": _count([c["capacityType"] for c in live]),
        "architectures": _count([c["arch"] for c in live]),
        "podsPending": status["pods"]["pending"],
        "disruptions": sum(reasons.values()),
        "disruptionsByReason": reasons,
        "podsEvicted": status.get("podsEvicted", 0),
        "simulatedUntil": status["end"],
        **({"stoppedEarly": status["stoppedEarly"]} if status.get("stoppedEarly") else {}),
    }


def load_prices(path: str) -> Any:
    """The user's prices file (--prices), checked against the catalogs' instance types and regions."""
    from ..cloudprovider.catalog import all_providers
    from ..cloudprovider.user_prices import PriceFileError, load_user_prices

    types: set[str] = set()
    regions: set[str] = set()
    for p in all_providers():
        types.update(s["name"] for s in p.catalog["sizes"])
        regions.update(p.regions)
    try:
        return load_user_prices(path, types, regions)
    except PriceFileError as e:
        raise InputError([f"--prices: {e}"]) from None
