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
prices) are tried in halves; when they fail too, a local search re-packs pairs of nodes (:func:`_pairs`). A command
of several nodes or replacements is taken only when the evicted pods also fit as the cluster will bind them, on the
nodes already there and then the replacements (:func:`realizable`): a plan that only the simulation's own packing
makes work loses its saving to a node launched for a pod left over, and the next pass undoes it. The command is
carried out by the disruption queue as upstream's are (replacements launched and initialized before the candidates
drain).

Candidates are upstream's (do-not-disrupt, PodDisruptionBudgets, consolidateAfter, policy), less spot nodes
(upstream's spot-to-spot rules stay with its own methods).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from .. import resources as res
from ..cloudprovider.types import CAPACITY_ON_DEMAND, CAPACITY_RESERVED, CAPACITY_SPOT, LABEL_HOSTNAME, LABEL_ZONE
from ..scheduling.scheduler import ExistingNode, NewNodeClaim, Results, Scheduler
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


def _as_node(nc: NewNodeClaim, name: str) -> ExistingNode:
    """A replacement as the cluster will see it once it is up: a node of its cheapest type, in the first zone
    it allows, holding only its daemons."""
    it = nc.instance_types[0]
    labels = {**nc.template.labels, **it.labels, **nc.requirements.labels(), LABEL_HOSTNAME: name}
    zone = nc.requirements.get(LABEL_ZONE)
    if LABEL_ZONE not in labels and zone.is_finite():
        zones = sorted(o.zone for o in it.compatible_offerings(nc.requirements) if zone.has(o.zone))
        if zones:
            labels[LABEL_ZONE] = zones[0]
    return ExistingNode(name=name, labels=labels, taints=tuple(nc.template.taints), allocatable=dict(it.allocatable),
                        requested=dict(nc.template.daemon_overhead), nodepool=nc.template.nodepool)


def realizable(snapshot: ClusterSnapshot, cands: Sequence[Candidate], reps: Sequence[NewNodeClaim]) -> bool:
    """Will the evicted pods find room once the replacements are up, placed as the cluster places them (the nodes
    that were there first, then the replacements) rather than as the consolidation simulation packed them?

    An N-by-M command is only as good as its realization: when the pods, re-created after the drain, land
    elsewhere than the simulation put them, a replacement may stay empty while pods wait for a node launched
    for them, and the saving is lost (and the next pass undoes it). The check re-places the pods with the
    scheduler against the cluster after the command, the replacements last, and accepts only a command that
    needs no further node."""
    names = {c.name for c in cands}
    kept = [n.existing for n in snapshot.nodes
            if n.name not in names and not (n.marked_for_deletion or n.terminating) and n.existing.schedulable]
    order = [replace(e, name=f"{i:06d}", takes_moving=True) for i, e in enumerate(kept)]
    order += [_as_node(nc, f"{len(kept) + i:06d}") for i, nc in enumerate(reps)]
    pods = [p.info for c in cands for p in c.node.pods if currently_reschedulable(p, snapshot.pdbs, snapshot.now)]
    sched = Scheduler(snapshot.templates, order, respect_preferences=snapshot.respect_preferences,
                      ignore_dra=snapshot.ignore_dra, hostname_prefix="realization-placeholder")
    r = sched.solve(pods)
    return not r.errors and not r.new_nodeclaims


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

    def attempt(sub: list[Candidate]) -> Proposal | None:
        sim = simulate(snapshot, sub, consolidation=True, refine=True)
        if not sim.ok:
            return None
        reps, savings = evaluate(sub, sim.results)
        if not worth_it(sub, savings):
            return None
        if (len(sub) > 1 or len(reps) > 1) and not realizable(snapshot, sub, reps):
            return None
        return Proposal(sub, reps, sim.results, savings)

    found = None
    for _ in range(SHRINK_TRIES):
        if size < 1:
            break
        found = attempt(batch[:size])
        if found is not None:
            break
        size //= 2
    if found is None:
        found = _pairs(snapshot, cands, budgets, attempt)
    return found


PAIR_TARGETS = 4  # the nodes whose use is worth least, which the local search tries to re-pack
PAIR_PARTNERS = 8  # the nodes with the most room tried beside each


def _use(c: Candidate) -> float:
    e = c.node.existing
    return max((e.requested.get(r, 0) / e.allocatable[r] for r in (res.CPU, res.MEMORY) if e.allocatable.get(r)),
               default=1.0)


def _pairs(snapshot: ClusterSnapshot, cands: Sequence[Candidate], budgets: dict[str, int],
           attempt: Callable) -> Proposal | None:
    """A local search the model cannot see: a node and one other, of the same zone first, re-packed together.

    The pods of a small or little-used node rarely fit the scattered room left on the others, and a node of its
    own for them costs what it does now; taken with a node that has room, they share one replacement (or the
    room the other node's pods leave elsewhere), which upstream's methods, one node or a prefix of the
    candidates at a time, do not try. The best saving found wins; ties go to fewer replacements, then names."""
    targets = sorted(cands, key=lambda c: (_use(c) * c.price, c.name))[:PAIR_TARGETS]
    best: Proposal | None = None
    seen: set[tuple[str, str]] = set()
    for t in targets:
        others = sorted((c for c in cands if c is not t),
                        key=lambda c: (c.node.zone != t.node.zone, _use(c), c.name))[:PAIR_PARTNERS]
        for o in others:
            pair = sorted([t, o], key=lambda c: c.name)
            key = (pair[0].name, pair[1].name)
            if key in seen:
                continue
            seen.add(key)
            if o.node.nodepool == t.node.nodepool and budgets.get(t.node.nodepool or "", 0) < 2:
                continue  # the NodePool's budget allows one node at a time
            got = attempt(pair)
            if got is None:
                continue
            rank = (round(got.savings, 9), -len(got.replacements))
            if best is None or rank > (round(best.savings, 9), -len(best.replacements)):
                best = got
    return best
