"""A multi-node probe whose pods cannot fit on one new NodeClaim at most is rejected without simulating.

Multi-node consolidation searches for the largest batch of candidates whose pods fit on the other nodes plus
at most one new NodeClaim. When the batch's pods ask, in some resource, for more than the free room of every
node left plus the largest instance type a NodePool offers, no simulation could place them that way: the engine
rejects the probe at once, and the probe's answer (a rejected batch) is the one the full simulation gives.
"""

from __future__ import annotations

import itertools

from disruption_helpers import Cluster, dpod, names
from helpers import expr
from karpy.cloudprovider.types import LABEL_INSTANCE_TYPE
from karpy.disruption import methods
from karpy.disruption.candidates import build_candidates, sort_for_consolidation
from karpy.disruption.methods import DisruptionEngine, simulate


def _cluster(room: bool) -> Cluster:
    """Four std-8 nodes (8 vCPU) holding 7 vCPU of pods each, a NodePool that launches std-1 .. std-4 only; with
    ``room``, two std-16 nodes holding 1 vCPU each."""
    c = Cluster()
    c.nodepool(requirements=[expr(LABEL_INSTANCE_TYPE, "In", "std-1", "std-2", "std-4")])
    for i in range(4):
        c.node(f"full-{i}", itype="std-8", pods=[dpod(f"big-{i}", cpu="4"), dpod(f"small-{i}", cpu="3")])
    if room:
        for i in range(2):
            c.node(f"roomy-{i}", itype="std-16", pods=[dpod(f"lone-{i}", cpu="1")])
    return c


def test_every_batch_the_bound_rejects_is_rejected_by_the_full_simulation():
    for room in (False, True):
        snapshot = _cluster(room).snapshot()
        cands = [c for c in build_candidates(snapshot, "graceful", []) if c.name.startswith("full")]
        cut = kept = 0
        for size in (2, 3, 4):
            for batch in itertools.combinations(cands, size):
                pods = methods._moving_pods(snapshot, batch)
                full = simulate(snapshot, list(batch), consolidation=True)
                if methods._beyond_one_nodeclaim(snapshot, batch, pods):
                    cut += 1
                    assert not full.ok or len(full.results.new_nodeclaims) > 1
                else:
                    kept += 1
        # without room every batch is cut (14+ vCPU of pods against at most 2 vCPU free and one 4-vCPU
        # NodeClaim); with the roomy nodes' 30 vCPU free, none is
        assert (cut > 0) != room and (kept > 0) == room


def test_a_probe_beyond_one_nodeclaim_is_rejected_without_a_simulation():
    snapshot = _cluster(room=False).snapshot()
    engine = DisruptionEngine()
    batch = sort_for_consolidation(build_candidates(snapshot, "graceful", []))[:2]
    before = methods.SIMULATIONS[0]
    assert engine.compute_consolidation(snapshot, batch, None, "multi") is None
    assert methods.SIMULATIONS[0] == before


def test_consolidation_still_merges_what_fits():
    """The bound leaves alone a batch whose pods fit: two nodes holding 700m each merge onto one std-2."""
    c = Cluster()
    c.nodepool(budgets=[{"nodes": "100%"}], requirements=[expr(LABEL_INSTANCE_TYPE, "In", "std-1", "std-2", "std-4")])
    c.node("a", itype="std-4", pods=[dpod("p-a", cpu="700m")])
    c.node("b", itype="std-4", pods=[dpod("p-b", cpu="700m")])
    r = c.step()
    assert r.command is not None and r.command.method == "multi"
    assert sorted(names(r.command)) == ["a", "b"]
    assert [it.name for it in r.command.replacements[0].instance_types][:1] == ["std-2"]
