"""karpy's ``ConsolidationOptimizer`` feature gate: a re-packing of the nodes worth re-packing (docs/feature-gates.md).

Upstream's consolidation looks at one node (replaced by one cheaper node) or a prefix of the candidates (merged
into at most one new node), and where the pods go is the scheduling simulation's first-fit, largest pod first.
With the gate on, each disruption pass offers every consolidatable node to the re-packing. When the NodePools'
budgets would not allow removing them all, the re-packing is carried out a part at a time, the part the budgets
allow that saves most first (:func:`_next_part`); failing that, a model of the whole cluster
(:mod:`karpy.disruption.highs`, solved by HiGHS) chooses which nodes to re-pack within the budgets. The re-packing
chooses the new nodes and which pods each holds together (:mod:`karpy.disruption.repack`: column generation over
node patterns, zone by zone, each pod staying in its zone; a chosen node the re-packing would not change enough to
pay for its move is kept as it is), and checks the plan (every pod within its planned node's allocatable,
per-node cap and allowed types; no pod left behind repelling it). The command goes ahead when it saves more
than ``DISRUPTION_COST`` of the removed nodes' price. It is carried out by the disruption queue (replacements
launched and initialized before any pod moves, as upstream's are), which hands the plan over one replacement at a
time: the very pods planned on it are evicted once it alone is open (:meth:`karpy.controllers.disruption.
Orchestrator._hand_over`), so the re-created pods have their room whatever order they come back in. Each
replacement names the pods planned for it: karpy's provisioner, with the gate on, places those pods there
(:meth:`karpy.controllers.provisioning.Provisioner._planned`).

Candidates are upstream's (do-not-disrupt, PodDisruptionBudgets, consolidateAfter, policy), less spot nodes
(upstream's spot-to-spot rules stay with its own methods). Pods whose constraints the plan does not keep by
construction (pod affinity, anti-affinity to other classes, host ports, volumes, devices; see :func:`modelled`)
leave the decision to upstream's methods, which run after.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .. import resources as res
from ..cloudprovider.types import (
    CAPACITY_ON_DEMAND, CAPACITY_RESERVED, CAPACITY_SPOT, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_ZONE,
)
from ..scheduling.pods import PodInfo, class_key
from ..scheduling.requirements import IN, Requirement
from ..scheduling.scheduler import NewNodeClaim, NodeClaimTemplate, Results, tolerates_all
from . import highs, repack
from .candidates import Candidate, currently_reschedulable
from .state import ClusterSnapshot

GATE = highs.GATE
RESOURCES = (res.CPU, res.MEMORY, res.PODS)
SHRINK_TRIES = 6  # the scheduler-checked set, then its most wasteful half, quarter, ...


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


def worth_it(cands: Sequence[Candidate], savings: float) -> bool:
    return savings > highs.DISRUPTION_COST * sum(c.price for c in cands) and savings > 1e-9


def propose(snapshot: ClusterSnapshot, cands: Sequence[Candidate], budgets: dict[str, int],
            memo: "RepackMemo | None" = None, simulate: Callable | None = None) -> Proposal | None:
    """The re-packing of the nodes the model would remove (:func:`repack_all`), or None. When the re-packing
    declines those nodes' pods (constraints it does not keep, see :func:`modelled`), the model's set and then its
    most wasteful halves are simulated by the scheduler instead (``simulate``), each replacement as the simulation
    opens it."""
    chosen = _model_choice(snapshot, [c for c in cands if c.node.capacity_type != CAPACITY_SPOT], budgets)
    infos = [p.info for c in chosen for p in c.node.pods if currently_reschedulable(p, snapshot.pdbs, snapshot.now)]
    if not infos or modelled(infos) or simulate is None:
        return repack_all(snapshot, cands, budgets, memo)
    size = len(chosen)
    for _ in range(SHRINK_TRIES):
        if size < 1:
            break
        sub = chosen[:size]
        sim = simulate(snapshot, sub, consolidation=True, refine=True)
        if sim.ok:
            reps, savings = evaluate(sub, sim.results)
            if worth_it(sub, savings):
                return Proposal(sub, reps, sim.results, savings)
        size //= 2
    return None


def evaluate(cands: Sequence[Candidate], results: Results) -> tuple[list[NewNodeClaim], float]:
    """The NodeClaims a simulation opens and what removing the candidates for them saves, $/h."""
    reps = list(results.new_nodeclaims)
    return reps, sum(c.price for c in cands) - sum(claim_price(nc) for nc in reps)


def _model_choice(snapshot: ClusterSnapshot, cands: Sequence[Candidate], budgets: dict[str, int]) -> list[Candidate]:
    """The candidates the model removes (within the budgets), the most wasteful first."""
    cands = sorted((c for c in cands if c.node.capacity_type != CAPACITY_SPOT and budgets.get(c.node.nodepool or "", 0) > 0),
                   key=lambda c: c.name)
    if not cands:
        return []
    alloc, tprice = _types(snapshot)
    if not len(tprice):
        return []
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
    return [cands[i] for i in chosen]


# --- the whole re-packing ------------------------------------------------------------------
#
# Upstream's methods, and the model above, ask the scheduling simulation where the pods go; its packing is
# first-fit, largest pod first, and a node's type is the cheapest that holds what first-fit put there. With pods
# of many shapes that leaves nodes whose CPU and memory are out of step with their type's. The re-packing instead
# chooses the new nodes and what each holds together (karpy.disruption.repack: column generation over node
# patterns, per zone), checks each planned node by construction (see feasible; pods whose constraints that does
# not cover are declined, see modelled), and names each replacement's pods, which karpy's provisioner then places there when the
# pods are re-created (karpy.controllers.provisioning, with the gate on).

REPACK_HOSTNAME = "repack"
REPACK_SLACK = 1.02  # a packing rarely comes closer than this to the fractional bound: skip when that cannot pay
REPACK_BACKOFF = 300.0  # seconds after a re-packing that found nothing worth doing (or went stale) before the next
PART_HORIZON = 1800.0  # seconds a re-packing carried out a part at a time is followed before it is made anew


class RepackMemo:
    """What a disruption engine remembers of its re-packings: the last one that led nowhere (when, and what the
    nodes cost and their pods' fractional bound then). The same nodes and pods are not packed again for
    REPACK_BACKOFF seconds; a change of either (pods gone, nodes added) lifts the wait."""

    def __init__(self) -> None:
        # per kind of re-packing (of every candidate, of the model's choice): (until, cost of the nodes, bound of
        # their pods)
        self.failed: dict[str, tuple[float, float, float]] = {}
        # the clusters (pods and what all nodes cost) a re-packing started from: a cluster that comes back to one
        # (the pods landed elsewhere than planned, and the nodes left over were removed) is not re-packed again
        self.started: set[tuple[int, int]] = set()
        # a re-packing of every candidate that budgets tighter than the candidates let out a part at a time: what
        # is left of it, carried out by the next passes while its nodes and their pods are as it found them
        self.rest: _Rest | None = None
        self.patterns: list[tuple[tuple[str, str], dict[tuple, float]]] = []  # its last column generation's

    @staticmethod
    def cluster(snapshot: ClusterSnapshot) -> tuple[int, int]:
        return sum(len(n.pods) for n in snapshot.nodes), round(sum(n.price for n in snapshot.nodes) * 1e4)

    def worth_trying(self, now: float, cost_now: float, bound: float, kind: str = "") -> bool:
        if cost_now * (1 - highs.DISRUPTION_COST) <= bound * REPACK_SLACK:
            return False  # even a packing as close to the bound as they come would not pay
        failed = self.failed.get(kind)
        if failed is not None:
            until, cost, was = failed
            if now < until and abs(cost_now - cost) <= 0.02 * cost and abs(bound - was) <= 0.02 * was:
                return False
        return True

    def nothing(self, now: float, cost_now: float, bound: float, kind: str = "") -> None:
        self.failed[kind] = (now + REPACK_BACKOFF, cost_now, bound)


@dataclass
class _Rest:
    """What is left of a re-packing carried out a part at a time."""
    until: float  # the plan is given up after this (PART_HORIZON after it was made)
    pods: dict[str, frozenset[str]]  # each node it removes -> the keys of the pods it moves off that node
    planned: list[tuple[int, int, np.ndarray]]  # its new nodes not launched yet: (zone, type, pods of each class)
    zones: list[str | None]
    classes: dict[tuple, int]
    price: np.ndarray  # zones x types
    claims: list[list[NewNodeClaim | None]]  # per type, per zone: the NodeClaim a new node becomes


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


def repack_all(snapshot: ClusterSnapshot, cands: Sequence[Candidate], budgets: dict[str, int],
               memo: RepackMemo | None = None) -> Proposal | None:
    """Replace the nodes the model would remove (within the budgets) by the cheapest nodes that hold their pods,
    each pod staying in its zone; None when that does not save enough, when the cluster is not at rest (pods
    pending, nodes launching or leaving), or when the pods carry constraints the plan does not keep."""
    if snapshot.pending_pods or any(n.marked_for_deletion or n.terminating or not n.initialized for n in snapshot.nodes):
        return None  # not at rest: pods to place, nodes coming or going
    memo = memo if memo is not None else RepackMemo()
    chosen = _within_budgets(cands, budgets)
    if chosen is not None:
        return _repack(snapshot, chosen, memo)
    # a budget tighter than the candidates: the re-packing of them all, of which the part the budgets allow that
    # saves most goes first and the next passes take the rest; failing that, the re-packing of the model's choice
    everyone = _within_budgets(cands, None) or []
    found = _next_part(snapshot, everyone, memo, budgets)
    if found is None:
        found = _repack(snapshot, everyone, memo, budgets)
    if found is not None:
        return found
    return _repack(snapshot, _model_choice(snapshot, [c for c in cands if c.node.capacity_type != CAPACITY_SPOT],
                                           budgets), memo, kind="model")


def _repack(snapshot: ClusterSnapshot, chosen: list[Candidate], memo: RepackMemo,
            budgets: dict[str, int] | None = None, kind: str = "") -> Proposal | None:
    pods = [(c.node.zone, p.info) for c in chosen for p in c.node.pods
            if currently_reschedulable(p, snapshot.pdbs, snapshot.now)]
    if not pods or not modelled([info for _, info in pods]):
        return None
    classes: dict[tuple, int] = {}
    for _, info in pods:
        classes.setdefault(slot_key(info), len(classes))
    zones = sorted({z for z, _ in pods}, key=lambda z: (z is None, z or ""))
    return _plan(snapshot, chosen, pods, classes, zones, memo, budgets, kind or ("part" if budgets else ""))


def _within_budgets(cands: Sequence[Candidate], budgets: dict[str, int] | None) -> list[Candidate] | None:
    """Every on-demand (or reserved) candidate, when the budgets would allow removing them all (``None``: no
    budget); else None (then part of the re-packing, or the model's choice, within the budgets)."""
    out = sorted((c for c in cands if c.node.capacity_type != CAPACITY_SPOT), key=lambda c: c.name)
    per = Counter(c.node.nodepool or "" for c in out)
    if budgets is not None and any(budgets.get(pool, 0) < k for pool, k in per.items()):
        return None
    return out


def _plan(snapshot: ClusterSnapshot, chosen: list[Candidate], pods: list[tuple[str | None, PodInfo]],
          classes: dict[tuple, int], zones: list[str | None], memo: RepackMemo,
          budgets: dict[str, int] | None = None, kind: str = "") -> Proposal | None:
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
    if not memo.worth_trying(snapshot.now, now, bound, kind) or memo.cluster(snapshot) in memo.started:
        return None
    # each candidate may stay as it is: the plan moves its pods only when that saves what a disruption must
    moving = {id(info) for _, info in pods}
    keep: list[list[tuple[np.ndarray, float, float]]] = [[] for _ in zones]
    keep_of: list[list[Candidate]] = [[] for _ in zones]
    for c in chosen:
        y = np.zeros(n)
        for p in c.node.pods:
            if id(p.info) in moving:
                y[classes[slot_key(p.info)]] += 1
        if y.any() and c.node.zone in zones:
            zi = zones.index(c.node.zone)
            keep[zi].append((y, c.price * (1 - highs.DISRUPTION_COST), c.price))
            keep_of[zi].append(c)
    # carried out a part at a time, the plan is made again often: from the patterns the last one found
    start = None
    if budgets is not None:
        at = {(tpl.nodepool, it.name): t for t, (tpl, it) in enumerate(types)}
        start = []
        for key, held in memo.patterns:
            y = np.zeros(n)
            if key in at and all(k in classes for k in held):
                for k, v in held.items():
                    y[classes[k]] = v
                start.append((at[key], y))
    packing = repack.pack(sizes, counts, cap, alloc_a, price_a, np.array(compat, dtype=bool), keep, start)
    if budgets is not None and packing is not None:
        keys = list(classes)
        memo.patterns = [((types[t][0].nodepool, types[t][1].name), {keys[i]: float(y[i]) for i in np.flatnonzero(y)})
                         for t, y in packing.patterns or []]
    stays = {id(keep_of[zi][k]) for zi, ks in enumerate(packing.kept or []) for k in ks} if packing else set()
    removed = [c for c in chosen if id(c) not in stays]
    price_removed = sum(c.price for c in removed)
    # what the new nodes cost: each its type's price in its zone (claim_price of the NodeClaim it becomes)
    savings = price_removed - sum(price_a[zi, t] for zi, nodes in enumerate(packing.nodes) for t, _ in nodes) \
        if packing else 0.0
    if packing is None or not removed or not worth_it(removed, savings):
        memo.nothing(snapshot.now, now, bound, kind)
        return None
    # the plan's nodes: (zone, type, how many pods of each class it holds)
    planned = [(zi, t, y) for zi, nodes in enumerate(packing.nodes) for t, y in nodes]
    if budgets is not None:
        memo.rest = _Rest(snapshot.now + PART_HORIZON, {}, planned, zones, classes, price_a, claims)
        for c in removed:
            memo.rest.pods[c.name] = frozenset(p.key for p in c.node.pods if id(p.info) in moving)
        found = _next_part(snapshot, removed, memo, budgets)
        if found is None:
            memo.nothing(snapshot.now, now, bound, kind)
        return found
    bins = _bins(removed, planned, pods, zones, classes, claims)
    if bins is None or not feasible(snapshot, removed, bins):
        memo.nothing(snapshot.now, now, bound, kind)
        return None
    memo.started.add(memo.cluster(snapshot))
    return Proposal(removed, bins, None, savings, pinned=True)


def _bins(removed: list[Candidate], planned: list[tuple[int, int, np.ndarray]], pods: list[tuple[str | None, PodInfo]],
          zones: list[str | None], classes: dict[tuple, int],
          claims: list[list[NewNodeClaim | None]]) -> list[NewNodeClaim] | None:
    """The plan's new nodes, each with the very pods it holds (the removed nodes' pods of its classes in its zone;
    the pods of the nodes kept, or left for later, stay where they are); None when a removed node's pod has no
    room planned for it."""
    by_class: dict[tuple[int, int], list[PodInfo]] = {}
    leaving = {id(p.info) for c in removed for p in c.node.pods}
    for z, info in pods:
        if id(info) in leaving:
            by_class.setdefault((zones.index(z), classes[slot_key(info)]), []).append(info)
    bins: list[NewNodeClaim] = []
    for zi, t, y in planned:
        nc = claims[t][zi]
        held = [by_class[(zi, int(i))].pop() for i in np.flatnonzero(y) for _ in range(int(y[i]))
                if by_class.get((zi, int(i)))]
        bins.append(NewNodeClaim(nc.template, f"{REPACK_HOSTNAME}-{len(bins)}", nc.requirements, nc.instance_types,
                                 held, res.add(dict(nc.requests), res.total(p.requests for p in held))))
    return None if any(by_class.values()) else bins


def _next_part(snapshot: ClusterSnapshot, cands: Sequence[Candidate], memo: RepackMemo,
               budgets: dict[str, int]) -> Proposal | None:
    """The next part, within the budgets, of the re-packing being carried out a part at a time: of its nodes
    still here with the very pods it planned for (the others are left out), and its new nodes not launched yet.
    The new nodes chosen are taken out of the plan; when no part is left worth doing, the plan is given up."""
    rest = memo.rest
    if rest is None:
        return None
    if snapshot.now > rest.until or snapshot.pending_pods:
        memo.rest = None
        return None
    removed, pods = [], []
    for c in cands:
        keys = rest.pods.get(c.name)
        if keys is None or c.node.zone not in rest.zones:
            continue
        moving = [p.info for p in c.node.pods if currently_reschedulable(p, snapshot.pdbs, snapshot.now)]
        if frozenset(i.key for i in moving) != keys or any(slot_key(i) not in rest.classes for i in moving):
            continue
        removed.append(c)
        pods.extend((c.node.zone, i) for i in moving)
    part = _part(removed, rest.planned, rest.zones, rest.classes, {id(i) for _, i in pods}, rest.price, budgets) \
        if removed else None
    if part is None:
        memo.rest = None
        return None
    out, planned = part
    bins = _bins(out, planned, pods, rest.zones, rest.classes, rest.claims)
    if bins is None or not feasible(snapshot, out, bins):
        memo.rest = None
        return None
    taken = {id(b) for b in planned}
    rest.planned = [b for b in rest.planned if id(b) not in taken]
    for c in out:
        del rest.pods[c.name]
    savings = sum(c.price for c in out) - sum(rest.price[zi, t] for zi, t, _ in planned)
    return Proposal(out, bins, None, savings, pinned=True)


def _part(removed: list[Candidate], planned: list[tuple[int, int, np.ndarray]], zones: list[str | None],
          classes: dict[tuple, int], moving: set[int], price: np.ndarray,
          budgets: dict[str, int]) -> tuple[list[Candidate], list[tuple[int, int, np.ndarray]]] | None:
    """The part of a re-packing the budgets allow that saves most: which of its removed nodes, and which of its
    new nodes to hold their pods (each class in each zone within the new nodes' room for it); None when no part
    within the budgets saves what a disruption must."""
    n = len(classes)
    need = np.zeros((len(removed), len(zones) * n))
    for i, c in enumerate(removed):
        zi = zones.index(c.node.zone)
        for ps in c.node.pods:
            if id(ps.info) in moving:
                need[i, zi * n + classes[slot_key(ps.info)]] += 1
    room = np.zeros((len(planned), len(zones) * n))
    for j, (zi, _, y) in enumerate(planned):
        room[j, zi * n:(zi + 1) * n] = y
    pools = sorted({c.node.nodepool or "" for c in removed})
    group = [pools.index(c.node.nodepool or "") for c in removed]
    cost = np.concatenate([[-(1.0 - highs.DISRUPTION_COST) * c.price for c in removed],
                           [price[zi, t] for zi, t, _ in planned]])
    take = highs.select(need, room, group, np.array([budgets.get(pool, 0) for pool in pools], dtype=float), cost)
    if take is None:
        return None
    out = [c for i, c in enumerate(removed) if take[i]]
    nodes = [b for j, b in enumerate(planned) if take[len(removed) + j]]
    if not out or not worth_it(out, sum(c.price for c in out) - sum(price[zi, t] for zi, t, _ in nodes)):
        return None
    return out, nodes


def modelled(infos: Sequence[PodInfo]) -> bool:
    """Are these pods' constraints all ones the re-packing keeps by construction? Requests of CPU and memory; node
    selectors, affinity and tolerations (a class goes only on the types it may); zone spreads (each pod stays in
    its zone, so their counts do not change); a hostname anti-affinity or spread among the pods of its own class
    (its per-node cap). Anything else (pod affinity, an anti-affinity or hostname spread that selects pods of
    another class, host ports, volumes, devices) is left to the scheduling simulation of upstream's methods."""
    classes = {slot_key(i): i for i in infos}
    for k, p in classes.items():
        if p.affinity or p.host_ports or p.volume_requirements is not None or p.volume_usage or p.dra:
            return False
        if set(p.requests) - {res.CPU, res.MEMORY, res.PODS}:
            return False
        if any(t.topology_key != LABEL_HOSTNAME for t in p.anti_affinity):
            return False  # an anti-affinity over zones or another key
        own = [t.selector for t in p.anti_affinity]
        own += [c.selector for c in p.spread if c.topology_key == LABEL_HOSTNAME and c.when_unsatisfiable == "DoNotSchedule"]
        for c in p.spread:
            if c.topology_key not in (LABEL_ZONE, LABEL_HOSTNAME) and c.when_unsatisfiable == "DoNotSchedule":
                return False
        for sel in own:
            if any(j != k and sel.matches(q.labels) and q.namespace == p.namespace for j, q in classes.items()):
                return False
    return True


def feasible(snapshot: ClusterSnapshot, cands: Sequence[Candidate], bins: Sequence[NewNodeClaim]) -> bool:
    """Does every planned node hold its pods: requests within its type's allocatable (less daemons), each class
    within its per-node cap and on a type it may go on, and no pod of the cluster left out of the plan repelling
    the plan's pods (an anti-affinity to them held by a pod that is not moving)?"""
    moving_keys = {p.key for nc in bins for p in nc.pods}
    for nc in bins:
        it = nc.instance_types[0]
        used = res.add(dict(nc.template.daemon_overhead), res.total(p.requests for p in nc.pods))
        if not any(res.PODS in p.requests for p in nc.pods):
            used[res.PODS] = used.get(res.PODS, 0) + len(nc.pods)
        if any(v > it.allocatable.get(r, 0) for r, v in used.items() if v):
            return False
        labels = {**nc.template.labels, **it.labels, **nc.requirements.labels()}
        for k, group in _by_class(nc.pods).items():
            p = group[0]
            if len(group) > _per_node_cap(p) or tolerates_all(p.tolerations, nc.template.taints) is not None:
                return False
            if not p.strict_requirements().satisfied_by_labels(labels) or \
                    (p.required_terms and not any(t.satisfied_by_labels(labels) for t in p.required_terms)):
                return False
    for n in snapshot.nodes:  # a pod staying put whose anti-affinity over zones repels moving pods
        for ps in n.pods:
            if ps.info.key in moving_keys:
                continue
            for t in ps.info.anti_affinity:
                if t.topology_key != LABEL_HOSTNAME and any(t.selector.matches(p.labels) for nc in bins for p in nc.pods):
                    return False
    return True


def _by_class(pods: Sequence[PodInfo]) -> dict[tuple, list[PodInfo]]:
    out: dict[tuple, list[PodInfo]] = {}
    for p in pods:
        out.setdefault(slot_key(p), []).append(p)
    return out


def revalidate(snapshot: ClusterSnapshot, cands: Sequence[Candidate], bins: Sequence[NewNodeClaim]) -> bool:
    """Does the plan still hold: the candidates carry the very pods it places, and they still fit?"""
    planned = {p.key for nc in bins for p in nc.pods}
    now = {p.info.key for c in cands for p in c.node.pods if currently_reschedulable(p, snapshot.pdbs, snapshot.now)}
    return planned == now and not snapshot.pending_pods and feasible(snapshot, cands, bins)
