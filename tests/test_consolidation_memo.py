"""A consolidation pass over a cluster nothing has changed in gives the answers of the pass before it.

The disruption engine remembers, per simulation input, the consolidations that found nothing (and why): a pass
whose snapshot holds the very nodes, pods and templates an earlier pass simulated (upstream's forced re-check
every five minutes, or a cluster change that reached no node) decides and reports exactly as that pass did,
without simulating again; a cluster that did change is simulated afresh.
"""

from __future__ import annotations

from disruption_helpers import Cluster, dpod, events_for, names
from helpers import expr
from karpy.cloudprovider.types import CAPACITY_ON_DEMAND, LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE
from karpy.disruption import methods
from karpy.disruption.methods import DisruptionEngine

ON_DEMAND_ONLY = [expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_ON_DEMAND)]


def _stuck_cluster() -> Cluster:
    """Two nodes no consolidation can touch: one already the cheapest for its pod, one whose pods need two
    new nodes of the types the NodePool allows (and that leaves no room for the other)."""
    c = Cluster()
    c.nodepool(requirements=ON_DEMAND_ONLY + [expr(LABEL_INSTANCE_TYPE, "In", "std-1", "std-2", "std-4")])
    c.node("a", itype="std-1", pods=[dpod(cpu="1")])
    c.node("b", itype="std-8", pods=[dpod(cpu="3500m"), dpod(cpu="4")])
    return c


def _reasons(result) -> dict[str, list[str]]:
    return {n: events_for(result, n, "Unconsolidatable") for n in ("a", "b")}


def test_a_pass_over_an_unchanged_cluster_repeats_the_reasons_without_simulating():
    snapshot = _stuck_cluster().snapshot()
    engine = DisruptionEngine()
    first = engine.step(snapshot, version=1)
    assert first.command is None
    assert _reasons(first) == {"a": ["Can't replace with a cheaper node"],
                               "b": ["Can't remove without creating 2 candidates"]}
    before = methods.SIMULATIONS[0]
    again = engine.step(snapshot, version=2)  # another cluster version: the methods run again
    assert again.command is None
    assert _reasons(again) == _reasons(first)
    assert methods.SIMULATIONS[0] == before


def test_a_changed_cluster_is_simulated_again():
    c = _stuck_cluster()
    engine = DisruptionEngine()
    assert engine.step(c.snapshot(), version=1).command is None
    # room appears for node a's pod: a is now deleted, not refused again for the old reason
    c.node("c", itype="std-4", pods=[dpod(cpu="3", memory="1Gi")], consolidatable=False)
    before = methods.SIMULATIONS[0]
    r = engine.step(c.snapshot(), version=2)
    assert methods.SIMULATIONS[0] > before
    assert r.command is not None and r.command.decision == "delete"
    assert names(r.command) == ["a"]


def test_replacement_types_are_ordered_by_price_as_upstream_and_repriced_when_replaced():
    """The price filter orders a replacement's types cheapest first, equal prices in the NodeClaim's own order
    (upstream's OrderByPrice is a stable sort), with each one's dearest launch price beside it. Remembered per
    list of types: a second simulation with the same list gets the same answer, and a type replaced by one with
    other prices (a catalog refresh) is priced anew."""
    from karpy.cloudprovider.types import InstanceType, Offering
    from karpy.scheduling.requirements import Requirements

    def it(name: str, *prices: tuple[str, str, float]) -> InstanceType:
        return InstanceType(name=name, labels={}, capacity={}, overhead={},
                            offerings=[Offering(zone=z, capacity_type=ct, price=p) for z, ct, p in prices])

    reqs = Requirements()
    rkey = methods._price_key(reqs)
    a = it("a", ("z1", "on-demand", 0.30), ("z2", "on-demand", 0.50))
    b = it("b", ("z1", "on-demand", 0.20))
    c = it("c", ("z1", "on-demand", 0.30), ("z1", "spot", 0.10), ("z2", "spot", 0.40))
    d = it("d", ("z1", "on-demand", 0.20))
    ordered, worst = methods._by_price([a, b, c, d], reqs, rkey)
    assert [t.name for t in ordered] == ["c", "b", "d", "a"]  # c's spot is cheapest; b before d as given
    assert worst == [0.40, 0.20, 0.20, 0.50]  # c: its dearest spot offering, the capacity type launched first
    assert methods._by_price([a, b, c, d], reqs, rkey) == (ordered, worst)
    b2 = it("b", ("z1", "on-demand", 0.60))
    ordered, worst = methods._by_price([a, b2, c, d], reqs, rkey)
    assert [t.name for t in ordered] == ["c", "d", "a", "b"]
    assert worst == [0.40, 0.20, 0.50, 0.60]
