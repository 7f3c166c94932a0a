"""Which nodes may be disrupted, and in what order.

A node is a candidate when Karpenter manages it, it is initialized, nothing
else is deleting it, no pending pod is nominated to it, neither the node nor
its pods carry ``karpenter.sh/do-not-disrupt``, and every pod on it could be
evicted without breaking a PodDisruptionBudget. Drift tolerates pod blockers
when the NodeClaim has a ``terminationGracePeriod`` (the drain will force
them by then).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from .state import DO_NOT_DISRUPT, ClusterSnapshot, NodeState, PDBState, PodState

GRACEFUL = "graceful"
EVENTUAL = "eventual"


class Blocked(Exception):
    """A candidate rejected; the message is the DisruptionBlocked event text."""

    def __init__(self, message: str, pod_block: bool = False):
        super().__init__(message)
        self.pod_block = pod_block


def sentence(s: str) -> str:
    return s[:1].upper() + s[1:] if s else s


@dataclass(eq=False)
class Candidate:
    node: NodeState
    nodepool: dict
    reschedulable: list[PodState]
    price: float
    reschedule_cost: float
    events: list[tuple[str, str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def empty(self) -> bool:
        return self.reschedule_cost <= 1.0

    @property
    def savings_ratio(self) -> float:
        return self.price / self.reschedule_cost


def pdb_blocks(pod: PodState, pdbs: Sequence[PDBState], now: float, fully_blocking_only: bool = False) -> str | None:
    """Why evicting this pod would break a PDB, if it would."""
    if not pdbs:
        return None
    if not pod.active or pod.mirror or pod.tolerates_disrupted_taint() or pod.do_not_disrupt(now):
        return None
    matching = [p for p in pdbs if p.selects(pod)]
    if not matching:
        return None
    if len(matching) > 1:
        names = " ".join(f"{p.namespace}/{p.name}" for p in matching)
        return f"eviction does not support multiple PDBs (PodDisruptionBudget(s)=[{names}])"
    p = matching[0]
    if p.unhealthy_always_allow and not pod.ready:
        return None
    blocked = p.fully_blocking if fully_blocking_only else p.disruptions_allowed <= 0
    if blocked:
        return f"pdb prevents pod evictions (PodDisruptionBudget=[{p.namespace}/{p.name}])"
    return None


def validate_pods(node: NodeState, pdbs: Sequence[PDBState], now: float) -> None:
    for pod in node.pods:
        if DO_NOT_DISRUPT in pod.annotations and pod.active and pod.do_not_disrupt(now):
            raise Blocked(f'pod has "{DO_NOT_DISRUPT}" annotation (Pod={pod.key})', pod_block=True)
    if not pdbs:
        return
    for pod in node.pods:
        why = pdb_blocks(pod, pdbs, now)
        if why:
            raise Blocked(why, pod_block=True)


def validate_node(node: NodeState) -> None:
    if node.nodeclaim is None:
        raise Blocked("node isn't managed by karpenter")
    if not node.registered:
        raise Blocked("nodeclaim does not have an associated node")
    if not node.initialized:
        raise Blocked("node isn't initialized")
    if node.marked_for_deletion or node.terminating:
        raise Blocked("node is deleting or marked for deletion")
    if node.nominated:
        raise Blocked("node is nominated for a pending pod")
    if node.annotations.get(DO_NOT_DISRUPT) == "true":
        raise Blocked(f'disruption is blocked through the "{DO_NOT_DISRUPT}" annotation')
    if not node.nodepool:
        raise Blocked("node doesn't have required label (label=karpenter.sh/nodepool)")


def currently_reschedulable(pod: PodState, pdbs: Sequence[PDBState], now: float) -> bool:
    """Pods the scheduling simulation must find a new home for."""
    if not pod.reschedulable:
        return False
    if DO_NOT_DISRUPT in pod.annotations and pod.active and pod.do_not_disrupt(now):
        return False
    return not pdbs or pdb_blocks(pod, pdbs, now, True) is None


def build_candidates(snapshot: ClusterSnapshot, klass: str, blocked_events: list[tuple[str, str, str]]) -> list[Candidate]:
    """Every node that may be disrupted by a method of this class (graceful or eventual)."""
    out = []
    for node in snapshot.nodes:
        if not node.managed:
            continue
        try:
            validate_node(node)
        except Blocked as e:
            if node.nodeclaim is not None and not node.queued:
                blocked_events.append((node.name, "DisruptionBlocked", sentence(str(e))))
            continue
        np = snapshot.nodepools.get(node.nodepool or "")
        if np is None:
            blocked_events.append((node.name, "DisruptionBlocked", f"NodePool not found (NodePool={node.nodepool})"))
            continue
        try:
            validate_pods(node, snapshot.pdbs, snapshot.now)
        except Blocked as e:
            if not (klass == EVENTUAL and node.termination_grace_period is not None and e.pod_block):
                blocked_events.append((node.name, "DisruptionBlocked", sentence(str(e))))
                continue
        resched, cost = _reschedulable(node)
        out.append(Candidate(node, dict(np), list(resched), node.price, cost))
    return out


def _reschedulable(node: NodeState) -> tuple[list[PodState], float]:
    """The node's pods that need a new home and the cost of evicting them, kept on the node state (a snapshot
    reuses the state of a node that did not change, and with it this answer)."""
    pods = node.pods
    hit = node.__dict__.get("_reschedulable")
    if hit is not None and hit[0] is pods and hit[1] == len(pods):
        return hit[2], hit[3]
    resched = [p for p in pods if p.reschedulable]
    cost = 1.0 + sum(max(0.0, p.eviction_cost()) for p in resched)
    node.__dict__["_reschedulable"] = (pods, len(pods), resched, cost)
    return resched, cost


def sort_for_consolidation(cands: Iterable[Candidate]) -> list[Candidate]:
    """Most savings per unit of disruption first (ties by name, for determinism)."""
    return sorted(cands, key=lambda c: (-c.savings_ratio, c.name))


def sort_for_drift(cands: Iterable[Candidate]) -> list[Candidate]:
    """Oldest drift first; nodes with nothing to reschedule ahead of the rest."""
    ordered = sorted(cands, key=lambda c: (c.node.drifted_since or 0.0, c.name))
    return [c for c in ordered if not c.reschedulable] + [c for c in ordered if c.reschedulable]
