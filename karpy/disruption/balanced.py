"""consolidationPolicy ``Balanced``: a consolidation goes ahead only when what it saves is worth what it disrupts.

For each NodePool with the Balanced policy that a consolidation command touches, karpy compares two
fractions of that NodePool's totals:

* the **savings fraction**: the command's estimated saving per hour attributed to the NodePool (in
  proportion to the NodePool's share of the source nodes' price when the command spans several
  NodePools), over the NodePool's total price per hour (every node of the NodePool, candidate or not);
* the **disruption fraction**: the disruption cost of the NodePool's candidates (1 per node plus each
  evicted pod's eviction cost), over the disruption cost of every node of the NodePool.

The score is their ratio; the command is approved when every Balanced NodePool it touches scores at
least ``1/k`` (k = 2, threshold 0.50). A saving of zero or less scores 0; a positive saving with no
disruption scores +Inf. NodePools with another policy are not scored. An approved single-node command
emits ``ConsolidationApproved`` on its Node and NodeClaim, an approved multi-node command one per
Balanced NodePool, with the message ``score S >= threshold T (k: K, savings X%, disruption Y%)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from .candidates import Candidate
from .state import NodeState

BALANCED = "Balanced"
K = 2  # upstream's BalancedK: approve when score >= 1/K
PER_NODE_DISRUPTION = 1.0


@dataclass(frozen=True)
class NodePoolTotals:
    total_cost: float  # $/h of every node of the NodePool
    total_disruption: float  # disruption cost of every node of the NodePool


@dataclass(frozen=True)
class ScoreResult:
    savings_fraction: float = 0.0
    disruption_fraction: float = 0.0
    k: int = K

    @property
    def score(self) -> float:
        if self.savings_fraction <= 0:
            return 0.0
        if self.disruption_fraction == 0:
            return math.inf
        return self.savings_fraction / self.disruption_fraction

    @property
    def threshold(self) -> float:
        return 1.0 / self.k

    @property
    def approved(self) -> bool:
        return self.score >= self.threshold

    def message(self) -> str:
        score = "+Inf" if math.isinf(self.score) else f"{self.score:.2f}"
        return (f"score {score} >= threshold {self.threshold:.2f} (k: {self.k}, "
                f"savings {self.savings_fraction * 100:.1f}%, disruption {self.disruption_fraction * 100:.1f}%)")


def is_balanced(nodepool: Mapping | None) -> bool:
    return (((nodepool or {}).get("spec") or {}).get("disruption") or {}).get("consolidationPolicy") == BALANCED


def node_disruption_cost(node: NodeState) -> float:
    """1 for the node plus the positive eviction cost of each pod on it that no DaemonSet owns."""
    return PER_NODE_DISRUPTION + sum(max(0.0, p.eviction_cost()) for p in node.pods if not p.daemon)


def score_move(savings: float, disruption: float, totals: NodePoolTotals, k: int = K) -> ScoreResult:
    """The fractions of a move against its NodePool's totals (zero totals: nothing to compare, score 0)."""
    if totals.total_cost <= 0 or totals.total_disruption <= 0:
        return ScoreResult(k=k)
    return ScoreResult(savings / totals.total_cost, disruption / totals.total_disruption, k)


def _finite(price: float | None) -> float:
    return price if price is not None and math.isfinite(price) else 0.0


def nodepool_totals(candidates: Sequence[Candidate], nodes: Iterable[NodeState]) -> dict[str, NodePoolTotals]:
    """Totals for each NodePool that has a candidate. ``candidates`` are all the nodes that may be disrupted
    (before any method's own filter), ``nodes`` every node of the cluster: a NodePool's price is that of all
    its nodes (the candidates' when that is zero) and its disruption cost counts every node, a candidate by
    its reschedule cost. A price that is not a finite number (NaN from a cloud's price answer) counts 0, so it
    cannot poison a NodePool's total."""
    by_name = {c.name: c for c in candidates}
    fallback: dict[str, float] = {}
    for c in candidates:
        name = c.node.nodepool or ""
        fallback[name] = fallback.get(name, 0.0) + _finite(c.price)
    cost: dict[str, float] = {}
    disruption: dict[str, float] = {}
    for n in nodes:
        if not n.nodepool:
            continue
        c = by_name.get(n.name)
        disruption[n.nodepool] = disruption.get(n.nodepool, 0.0) + (c.reschedule_cost if c else node_disruption_cost(n))
        cost[n.nodepool] = cost.get(n.nodepool, 0.0) + _finite(n.price)
    return {name: NodePoolTotals(cost.get(name, 0.0) if cost.get(name, 0.0) > 0 else fb, disruption.get(name, 0.0))
            for name, fb in fallback.items()}


def evaluate_move(candidates: Sequence[Candidate], savings: float,
                  totals: Mapping[str, NodePoolTotals]) -> tuple[bool, dict[str, ScoreResult] | None]:
    """Score a command's Balanced NodePools; approved only when each of them approves (a command without
    candidates never is). A NodePool missing from ``totals`` scores 0."""
    if not candidates:
        return False, None
    groups: dict[str, list[Candidate]] = {}
    for c in candidates:
        groups.setdefault(c.node.nodepool or "", []).append(c)
    source = sum(c.price for c in candidates)
    approved = True
    per_pool: dict[str, ScoreResult] = {}
    for name, mine in groups.items():
        if not is_balanced(mine[0].nodepool):
            continue
        share = savings
        if source > 0 and len(groups) > 1:
            share = savings * sum(c.price for c in mine) / source
        result = score_move(share, sum(c.reschedule_cost for c in mine), totals.get(name, NodePoolTotals(0.0, 0.0)))
        per_pool[name] = result
        approved = approved and result.approved
    return approved, per_pool


def can_pass_threshold(c: Candidate, totals: Mapping[str, NodePoolTotals]) -> bool:
    """Could deleting this candidate outright (the best any move on it can do) pass its NodePool's threshold?"""
    if not is_balanced(c.nodepool):
        return True
    t = totals.get(c.node.nodepool or "")
    if t is None or t.total_cost <= 0:
        return True
    return score_move(c.price, c.reschedule_cost, t).approved
