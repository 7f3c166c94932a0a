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

from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from .. import resources as res
from ..cloudprovider.types import (
    CAPACITY_ON_DEMAND, CAPACITY_RESERVED, CAPACITY_SPOT, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_ZONE,
)
from ..scheduling.pods import ClassKey, PodInfo, class_key, moving
from ..scheduling.requirements import IN, Requirement
from ..scheduling.scheduler import ExistingNode, NewNodeClaim, NodeClaimTemplate, Results, Scheduler, tolerates_all
from . import highs, repack
from .candidates import Candidate, currently_reschedulable
from .state import ClusterSnapshot

GATE = highs.GATE
RESOURCES = (res.CPU, res.MEMORY, res.PODS)
SHRINK_TRIES = 6  # the chosen set, then its most wasteful half, quarter, ...


@dataclass
class Proposal:
    candidates: list[Candidate]
    replacements: list[NewNodeClaim]
    results: Results | None
    savings: float
    pinned: bool = False  # a re-packing: each replacement is of one type in one zone, for the pods it names


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
    """The cheapest re-packing found that the scheduling simulation confirms, or None: first the whole
    re-packing of the candidates (:func:`repack_all`), then the model's set and its halves."""
    found = repack_all(snapshot, cands, budgets)
    if found is not None:
        return found
    return _model_then_halves(snapshot, cands, budgets, simulate)


def _model_then_halves(snapshot: ClusterSnapshot, cands: Sequence[Candidate], budgets: dict[str, int],
                       simulate: Callable) -> Proposal | None:
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


# --- the whole re-packing ------------------------------------------------------------------
#
# Upstream's methods, and the model above, ask the scheduling simulation where the pods go; its packing is
# first-fit, largest pod first, and a node's type is the cheapest that holds what first-fit put there. With pods
# of many shapes that leaves nodes whose CPU and memory are out of step with their type's. The re-packing instead
# chooses the new nodes and what each holds together (karpy.disruption.repack: column generation over node
# patterns, per zone), checks the result with the scheduler (each pod pinned to its planned node, every
# constraint judged), and names each replacement's pods, which karpy's provisioner then places there when the
# pods are re-created (karpy.controllers.provisioning, with the gate on).

REPACK_HOSTNAME = "repack"
REPACK_SLACK = 1.02  # a packing rarely comes closer than this to the fractional bound: skip when that cannot pay
_PLANS: dict[tuple, "Proposal | None"] = {}  # input key -> the answer (a pass over an unchanged cluster repeats it)
_PLANS_KEPT = 64


def slot_key(p: PodInfo) -> tuple:
    """What a planned place is for: pods of this class (a re-created pod of the same owner has it too)."""
    base = p.class_key or class_key(p)
    return tuple(base[:-1]) if base and base[-1] == "moving" else tuple(base)


def _per_node_cap(p: PodInfo) -> int:
    """How many pods of its own class one node may hold: one under a hostname anti-affinity to itself, maxSkew
    under a hostname spread (counted from an empty node), else no limit."""
    cap = 1 << 30
    for t in p.anti_affinity:
        if t.topology_key == LABEL_HOSTNAME and t.selector.matches(p.labels) \
                and (t.namespaces is None or p.namespace in t.namespaces):
            cap = 1
    for c in p.spread:
        if c.topology_key == LABEL_HOSTNAME and c.when_unsatisfiable == "DoNotSchedule" and c.selector.matches(p.labels):
            cap = min(cap, max(1, c.max_skew))
    return cap


def _pinned_claim(tpl: NodeClaimTemplate, it, zone: str | None) -> NewNodeClaim | None:
    reqs = tpl.requirements.copy()
    reqs.add(Requirement.new(LABEL_INSTANCE_TYPE, IN, [it.name]))
    if zone is not None:
        reqs.add(Requirement.new(LABEL_ZONE, IN, [zone]))
    if not it.compatible_offerings(reqs):
        return None
    return NewNodeClaim(tpl, "", reqs, [it], [], dict(tpl.daemon_overhead))


def _take(cands: Sequence[Candidate], budgets: dict[str, int]) -> list[Candidate]:
    """The candidates the NodePools' budgets allow, the least used first."""
    left = dict(budgets)
    out = []
    for c in sorted(cands, key=lambda c: (_use(c), c.name)):
        pool = c.node.nodepool or ""
        if left.get(pool, 0) > 0:
            left[pool] -= 1
            out.append(c)
    return out


def _use(c: Candidate) -> float:
    e = c.node.existing
    return max((e.requested.get(r, 0) / e.allocatable[r] for r in (res.CPU, res.MEMORY) if e.allocatable.get(r)),
               default=1.0)


def repack_all(snapshot: ClusterSnapshot, cands: Sequence[Candidate], budgets: dict[str, int]) -> Proposal | None:
    """Replace the candidates the budgets allow by the cheapest nodes that hold their pods, each pod staying in
    its zone; None when that does not save enough, or when the cluster is not at rest (pods pending, nodes
    leaving), or when the scheduler refuses the plan."""
    if snapshot.pending_pods or any(n.marked_for_deletion or n.terminating for n in snapshot.nodes):
        return None
    chosen = _take([c for c in cands if c.node.capacity_type != CAPACITY_SPOT], budgets)
    if len(chosen) < 2:
        return None
    pods: list[tuple[str | None, PodInfo]] = []
    for c in chosen:
        for p in c.node.pods:
            if currently_reschedulable(p, snapshot.pdbs, snapshot.now):
                if set(p.info.requests) - {res.CPU, res.MEMORY, res.PODS}:
                    return None  # other resources (devices, storage) are left to the simulation's own methods
                pods.append((c.node.zone, p.info))
    classes: dict[tuple, int] = {}
    for _, info in pods:
        classes.setdefault(slot_key(info), len(classes))
    zones = sorted({z for z, _ in pods}, key=lambda z: (z is None, z or ""))
    key = (tuple((c.name, c.price) for c in chosen),
           tuple(sorted(Counter((z or "", classes[slot_key(i)]) for z, i in pods).items())),
           tuple(sorted(classes.items(), key=lambda kv: kv[1])))
    if key in _PLANS:
        return _PLANS[key]
    found = _plan(snapshot, chosen, pods, classes, zones)
    if len(_PLANS) >= _PLANS_KEPT:
        _PLANS.clear()
    _PLANS[key] = found
    return found


def _plan(snapshot: ClusterSnapshot, chosen: list[Candidate], pods: list[tuple[str | None, PodInfo]],
          classes: dict[tuple, int], zones: list[str | None]) -> Proposal | None:
    reps = [None] * len(classes)
    for _, info in pods:
        reps[classes[slot_key(info)]] = info
    n = len(classes)
    sizes = np.array([[info.requests.get(res.CPU, 0), info.requests.get(res.MEMORY, 0)] for info in reps], dtype=float)
    cap = np.array([_per_node_cap(info) for info in reps], dtype=float)
    counts = np.zeros((len(zones), n))
    for z, info in pods:
        counts[zones.index(z), classes[slot_key(info)]] += 1
    # the types new nodes may be (per template), their price in each zone, and which classes they may hold
    types, alloc, price, compat, claims = [], [], [], [], []
    seen: set = set()
    for tpl in snapshot.templates:
        for it in tpl.instance_types:
            row = [max(0, it.allocatable.get(r, 0) - tpl.daemon_overhead.get(r, 0)) for r in RESOURCES]
            zc = [_pinned_claim(tpl, it, z) for z in zones]
            zp = [claim_price(nc) if nc is not None else float("inf") for nc in zc]
            if all(p == float("inf") for p in zp):
                continue
            treqs = tpl.requirements.copy()
            for k, v in it.labels.items():
                treqs.add(Requirement.new(k, IN, [v]))
            ok = [tolerates_all(info.tolerations, tpl.taints) is None
                  and treqs.compatible(info.strict_requirements(), allow_undefined=tpl.well_known_labels) is None
                  for info in reps]
            sig = (tuple(row), tuple(zp), tuple(ok))
            if sig in seen:
                continue  # a twin (say, the other architecture at the same price) adds nothing
            seen.add(sig)
            types.append((tpl, it))
            alloc.append(row)
            price.append(zp)
            compat.append(ok)
            claims.append(zc)
    if not types:
        return None
    alloc_a = np.array(alloc, dtype=float)
    price_a = np.array(price, dtype=float).T  # zones x types
    now = sum(c.price for c in chosen)
    bound = sum(repack.fractional(counts[z] @ sizes, counts[z].sum(), alloc_a, price_a[z]) for z in range(len(zones)))
    if now * (1 - highs.DISRUPTION_COST) <= bound * REPACK_SLACK:
        return None
    packing = repack.pack(sizes, counts, cap, alloc_a, price_a, np.array(compat, dtype=bool))
    if packing is None or not worth_it(chosen, now - packing.cost):
        return None
    # the plan's nodes, each with the very pods it holds
    by_class: dict[tuple[int, int], list[PodInfo]] = {}
    for z, info in pods:
        by_class.setdefault((zones.index(z), classes[slot_key(info)]), []).append(info)
    bins: list[NewNodeClaim] = []
    for zi, nodes in enumerate(packing.nodes):
        for t, y in nodes:
            nc = claims[t][zi]
            held = [info for i in np.flatnonzero(y) for info in
                    [by_class[(zi, int(i))].pop() for _ in range(int(y[i]))]]
            bins.append(NewNodeClaim(nc.template, f"{REPACK_HOSTNAME}-{len(bins)}", nc.requirements, nc.instance_types,
                                     held, res.add(dict(nc.requests), res.total(p.requests for p in held))))
    if not feasible(snapshot, chosen, bins):
        return None
    savings = now - sum(claim_price(b) for b in bins)
    if not worth_it(chosen, savings):
        return None
    return Proposal(list(chosen), bins, None, savings, pinned=True)


def _as_node(nc: NewNodeClaim, name: str) -> ExistingNode:
    it = nc.instance_types[0]
    labels = {**nc.template.labels, **it.labels, **nc.requirements.labels(), LABEL_HOSTNAME: name}
    return ExistingNode(name=name, labels=labels, taints=tuple(nc.template.taints), allocatable=dict(it.allocatable),
                        requested=dict(nc.template.daemon_overhead), nodepool=nc.template.nodepool)


def feasible(snapshot: ClusterSnapshot, cands: Sequence[Candidate], bins: Sequence[NewNodeClaim]) -> bool:
    """Does every pod of the plan fit its planned node, with every constraint the scheduler judges (requests,
    taints, node and pod affinity, topology spread) against the cluster without the candidates?"""
    names = {c.name for c in cands}
    nodes = [n.existing for n in snapshot.nodes if n.name not in names]
    pinned: list[PodInfo] = []
    for k, nc in enumerate(bins):
        name = f"{REPACK_HOSTNAME}-placeholder-{k}"
        nodes.append(_as_node(nc, name))
        for info in nc.pods:
            m = moving(info)
            sel = m.node_selector.copy()
            sel.add(Requirement.new(LABEL_HOSTNAME, IN, [name]))
            pinned.append(replace(m, node_selector=sel, class_key=ClassKey(tuple(m.class_key) + (name,))))
    sched = Scheduler(snapshot.templates, nodes, respect_preferences=snapshot.respect_preferences,
                      ignore_dra=snapshot.ignore_dra, hostname_prefix=f"{REPACK_HOSTNAME}-unplanned")
    r = sched.solve(pinned)
    return not r.errors and not r.new_nodeclaims


def revalidate(snapshot: ClusterSnapshot, cands: Sequence[Candidate], bins: Sequence[NewNodeClaim]) -> bool:
    """Does the plan still hold: the candidates carry the very pods it places, and they still fit?"""
    planned = {p.key for nc in bins for p in nc.pods}
    now = {p.info.key for c in cands for p in c.node.pods if currently_reschedulable(p, snapshot.pdbs, snapshot.now)}
    return planned == now and not snapshot.pending_pods and feasible(snapshot, cands, bins)
