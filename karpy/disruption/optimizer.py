"""karpy's ``ConsolidationOptimizer`` feature gate: a global re-packing of the cluster (docs/feature-gates.md).

Upstream's consolidation looks at one node (replaced by one cheaper node) or a prefix of the candidates
(merged into at most one new node). With the gate on, each disruption pass first asks a model of the whole
cluster (:mod:`karpy.disruption.highs`, solved by HiGHS) which consolidatable nodes to remove so that new
nodes of the NodePools' types hold their pods more cheaply, within the NodePools' budgets. The optimizer
proposes; the scheduling simulation disposes: the chosen nodes' pods are placed by the same simulation
upstream's methods use (existing nodes first, then new NodeClaims, with every topology, affinity, taint and
limit constraint), and the command goes ahead only when every pod finds a home and the NodeClaims it opens
cost less than the nodes removed. The simulation re-packs the NodeClaims it opens as ``CostRefinement`` does
(a half-used NodeClaim becomes cheaper smaller ones), so a node may be replaced by several. When the whole set fails, the nodes wasting the most (by the model's dual
prices) are tried in halves. The command is carried out by the disruption queue as upstream's are
(replacements launched and initialized before the candidates drain).

Candidates are upstream's (do-not-disrupt, PodDisruptionBudgets, consolidateAfter, policy), less spot nodes
(upstream's spot-to-spot rules stay with its own methods).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .. import resources as res
from ..cloudprovider.types import CAPACITY_ON_DEMAND, CAPACITY_RESERVED, CAPACITY_SPOT
from ..scheduling.scheduler import NewNodeClaim, Results
from . import highs
from .candidates import Candidate, currently_reschedulable
from .state import ClusterSnapshot

GATE = highs.GATE
RESOURCES = (res.CPU, res.MEMORY, res.PODS)
SHRINK_TRIES = 6  # the chosen set, then its most wasteful half, quarter, ...


@dataclass
class Proposal:
    candidates: list[Candidate]
    replacements: list[NewNodeClaim]
    results: Results
    savings: float


def claim_price(nc: NewNodeClaim) -> float:
    """What a new NodeClaim will cost: its cheapest type's dearest offering in the capacity type the launch
    picks (reserved, then spot, then on-demand), as upstream prices a replacement."""
    if not nc.instance_types:
        return float("inf")
    offers = nc.instance_types[0].compatible_offerings(nc.requirements)
    for ct in (CAPACITY_RESERVED, CAPACITY_SPOT, CAPACITY_ON_DEMAND):
        prices = [o.price for o in offers if o.capacity_type == ct]
        if prices:
            return max(prices)
    return float("inf")


def _types(snapshot: ClusterSnapshot) -> tuple[np.ndarray, np.ndarray]:
    """Allocatable (less daemon overhead) and launch price of every type a NodePool can launch now."""
    best: dict[tuple, float] = {}
    for tpl in snapshot.templates:
        for it in tpl.instance_types:
            offers = it.compatible_offerings(tpl.requirements)
            if not offers:
                continue
            alloc = it.allocatable
            row = tuple(max(0, alloc.get(r, 0) - tpl.daemon_overhead.get(r, 0)) for r in RESOURCES)
            price = min(o.price for o in offers)
            if price < best.get(row, float("inf")):
                best[row] = price
    rows = sorted(best)
    # only types no other type beats (as large in every resource, no dearer) can be in a cheapest plan
    rows = [r for r in rows if not any(o != r and best[o] <= best[r] and all(a >= b for a, b in zip(o, r)) for o in rows)]
    return np.array(rows, dtype=float).reshape(-1, len(RESOURCES)), np.array([best[r] for r in rows], dtype=float)


def _free(n) -> list[float]:
    """What a node has unused (ExistingNode allocatable less requested), per resource."""
    e = n.existing
    return [max(0, e.allocatable.get(r, 0) - e.requested.get(r, 0)) for r in RESOURCES]


def _demand(snapshot: ClusterSnapshot, c: Candidate) -> list[float]:
    out = [0.0] * len(RESOURCES)
    for p in c.node.pods:
        if not currently_reschedulable(p, snapshot.pdbs, snapshot.now):
            continue
        for i, r in enumerate(RESOURCES[:-1]):
            out[i] += p.info.requests.get(r, 0)
        out[-1] += 1
    return out


def evaluate(cands: Sequence[Candidate], results: Results) -> tuple[list[NewNodeClaim], float]:
    """The NodeClaims a simulation opens and what removing the candidates for them saves, $/h."""
    reps = list(results.new_nodeclaims)
    return reps, sum(c.price for c in cands) - sum(claim_price(nc) for nc in reps)


def worth_it(cands: Sequence[Candidate], savings: float) -> bool:
    return savings > highs.DISRUPTION_COST * sum(c.price for c in cands) and savings > 1e-9


def propose(snapshot: ClusterSnapshot, cands: Sequence[Candidate], budgets: dict[str, int],
            simulate: Callable) -> Proposal | None:
    """The cheapest re-packing the model finds that the scheduling simulation confirms, or None."""
    cands = sorted((c for c in cands if c.node.capacity_type != CAPACITY_SPOT and budgets.get(c.node.nodepool or "", 0) > 0),
                   key=lambda c: c.name)
    if not cands:
        return None
    alloc, tprice = _types(snapshot)
    if not len(tprice):
        return None
    pools = sorted({c.node.nodepool or "" for c in cands})
    demand = np.array([_demand(snapshot, c) for c in cands], dtype=float)
    price = np.array([c.price for c in cands], dtype=float)
    group = np.array([pools.index(c.node.nodepool or "") for c in cands])
    budget = np.array([budgets.get(p, 0) for p in pools], dtype=float)
    names = {c.name for c in cands}
    free = np.array([_free(c.node) for c in cands], dtype=float)
    elsewhere = np.zeros(len(RESOURCES))
    for n in snapshot.nodes:
        if n.name not in names and n.initialized and not (n.marked_for_deletion or n.terminating) \
                and n.existing.schedulable and n.existing.takes_moving:
            elsewhere += _free(n)
    plan = highs.solve(demand, price, group, budget, alloc, tprice, free, elsewhere)
    chosen = [i for i in np.flatnonzero(plan.remove)]
    chosen.sort(key=lambda i: (-plan.waste[i], cands[i].name))
    batch = [cands[i] for i in chosen]
    size = len(batch)
    for _ in range(SHRINK_TRIES):
        if size < 1:
            break
        sub = batch[:size]
        sim = simulate(snapshot, sub, consolidation=True, refine=True)
        if sim.ok:
            reps, savings = evaluate(sub, sim.results)
            if worth_it(sub, savings):
                return Proposal(sub, reps, sim.results, savings)
        size //= 2
    return None
