"""Builders for the disruption tests: a small cluster of managed nodes, their pods, PDBs and NodePools.

A :class:`Cluster` collects NodePools, nodes (each a NodeClaim + Node of one instance type, in a
zone and capacity type, carrying pods), PodDisruptionBudgets and pending pods, and turns them into
the :class:`~karpy.disruption.state.ClusterSnapshot` the engine reads. Unless told otherwise a node
is managed, initialized, Ready, consolidatable and on-demand in test-zone-1, and every NodePool
launches from ``ladder()`` (std-1 .. std-16: N vCPU, 2N GiB; 0.07 per vCPU on-demand, 30% off on spot).
"""

from __future__ import annotations

import itertools
from datetime import datetime, timezone
from typing import Iterable, Mapping, Sequence

import helpers
from helpers import GIB, ladder, pod_manifest
from karpy import resources as res
from karpy.cloudprovider.types import (
    CAPACITY_ON_DEMAND,
    LABEL_CAPACITY_TYPE,
    LABEL_HOSTNAME,
    LABEL_NODEPOOL,
    LABEL_ZONE,
    InstanceType,
)
from karpy.disruption.methods import DisruptionEngine, StepResult
from karpy.disruption.state import DO_NOT_DISRUPT, ClusterSnapshot, NodeState, PDBState, PodState
from karpy.provisioning.templates import build_template
from karpy.scheduling.pods import LabelSelector, Taint, compile_pod
from karpy.scheduling.scheduler import ExistingNode

# Monday 2024-01-01 10:00:00 UTC
MONDAY_10AM = datetime(2024, 1, 1, 10, 0, tzinfo=timezone.utc).timestamp()
SATURDAY_10AM = datetime(2024, 1, 6, 10, 0, tzinfo=timezone.utc).timestamp()
HOUR = 3600.0

_names = itertools.count()


def utc(*args: int) -> float:
    return datetime(*args, tzinfo=timezone.utc).timestamp()


def disruption_nodepool(
    name: str = "default",
    budgets: Sequence[Mapping] | None = None,
    policy: str | None = None,
    consolidate_after: str | None = "0s",
    requirements: Sequence[Mapping] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping] | None = None,
    startup_taints: Sequence[Mapping] | None = None,
    expire_after: str | None = None,
    termination_grace_period: str | None = None,
    weight: int | None = None,
    limits: Mapping[str, object] | None = None,
) -> dict:
    """A NodePool manifest with a ``disruption`` block (budgets omitted: the engine's default applies)."""
    np = helpers.nodepool(name, requirements=requirements, labels=labels, taints=taints,
                          startup_taints=startup_taints, weight=weight, limits=limits)
    d: dict = {}
    if budgets is not None:
        d["budgets"] = [dict(b) for b in budgets]
    if policy is not None:
        d["consolidationPolicy"] = policy
    if consolidate_after is not None:
        d["consolidateAfter"] = consolidate_after
    np["spec"]["disruption"] = d
    tspec = np["spec"]["template"]["spec"]
    if expire_after is not None:
        tspec["expireAfter"] = expire_after
    if termination_grace_period is not None:
        tspec["terminationGracePeriod"] = termination_grace_period
    return np


def dpod(
    name: str | None = None,
    cpu: str | float | None = "1",
    memory: str | None = None,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    owner: str | None = "ReplicaSet",
    phase: str = "Running",
    start_time: float | None = None,
    terminating: bool = False,
    ready: bool = True,
    do_not_disrupt: str | None = None,
    priority: int = 0,
    **manifest_kw,
) -> PodState:
    """A pod as the disruption engine sees it (bound to whatever node it is given to)."""
    name = name or f"pod-{next(_names)}"
    ann = dict(annotations or {})
    if do_not_disrupt is not None:
        ann[DO_NOT_DISRUPT] = do_not_disrupt
    info = compile_pod(pod_manifest(name, cpu=cpu, memory=memory, namespace=namespace, labels=labels, **manifest_kw),
                       priority=priority)
    return PodState(info=info, phase=phase, owner_kind=owner, annotations=ann, start_time=start_time,
                    terminating=terminating, ready=ready)


def offering_price(it: InstanceType, zone: str, capacity_type: str) -> float:
    for o in it.offerings:
        if o.zone == zone and o.capacity_type == capacity_type:
            return o.price
    return 0.0


class Cluster:
    """A cluster under construction; :meth:`snapshot` freezes it for the engine."""

    def __init__(self, types: Sequence[InstanceType] | None = None, now: float = MONDAY_10AM,
                 feature_gates: Mapping[str, bool] | None = None):
        self.types = list(types if types is not None else ladder())
        self.now = now
        self.nodepools: dict[str, dict] = {}
        self.nodes: list[NodeState] = []
        self.pdbs: list[PDBState] = []
        self.pending: list = []
        self.feature_gates = dict(feature_gates or {})
        self.template_types: dict[str, list[InstanceType]] = {}

    def type(self, name: str) -> InstanceType:
        for it in self.types:
            if it.name == name:
                return it
        raise KeyError(name)

    def __repr__(self) -> str:
        lines = [f"Cluster(now={self.now}, gates={self.feature_gates})"]
        for name, np in self.nodepools.items():
            d = np["spec"].get("disruption", {})
            reqs = np["spec"]["template"]["spec"].get("requirements")
            lines.append(f"  nodepool {name}: budgets={d.get('budgets')} requirements={reqs}")
        for p in self.pdbs:
            lines.append(f"  pdb {p.name}: allowed={p.disruptions_allowed} fully_blocking={p.fully_blocking}")
        for n in self.nodes:
            flags = [f for f in ("marked_for_deletion", "terminating", "nominated") if getattr(n, f)]
            flags += [f"not {f}" for f in ("initialized", "ready", "consolidatable") if not getattr(n, f)]
            if n.drifted:
                flags.append(f"drifted@{n.drifted_since}")
            if n.termination_grace_period is not None:
                flags.append(f"tgp={n.termination_grace_period}")
            pods = ", ".join(f"{p.info.name}:{p.info.requests.get('cpu', 0)}m"
                             f"{'/' + p.owner_kind if p.owner_kind != 'ReplicaSet' else ''}"
                             f"{'/dnd=' + p.annotations[DO_NOT_DISRUPT] if DO_NOT_DISRUPT in p.annotations else ''}"
                             f"{'/' + str(p.info.labels) if p.info.labels else ''}" for p in n.pods)
            it = n.instance_type.name if n.instance_type else None
            lines.append(f"  node {n.name} [{n.nodepool}] {it} {n.capacity_type} {flags} pods=[{pods}]")
        return "\n".join(lines)

    # --- building -------------------------------------------------------------------------
    def nodepool(self, name: str = "default", types: Sequence[InstanceType] | None = None, **kw) -> dict:
        np = disruption_nodepool(name, **kw)
        self.nodepools[name] = np
        if types is not None:
            self.template_types[name] = list(types)
        return np

    def node(
        self,
        name: str | None = None,
        itype: str | InstanceType = "std-4",
        pods: Iterable[PodState] = (),
        nodepool: str | None = "default",
        zone: str = "test-zone-1",
        capacity_type: str = CAPACITY_ON_DEMAND,
        managed: bool = True,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        taints: Sequence[Mapping] = (),
        price: float | None = None,
        **state,
    ) -> NodeState:
        """Add a node; ``state`` sets NodeState flags (initialized, ready, nominated, drifted, ...)."""
        name = name or f"node-{next(_names)}"
        it = itype if isinstance(itype, InstanceType) else self.type(itype)
        lbls = dict(it.labels)
        lbls.update({LABEL_HOSTNAME: name, LABEL_ZONE: zone, LABEL_CAPACITY_TYPE: capacity_type})
        if managed and nodepool is not None:
            lbls[LABEL_NODEPOOL] = nodepool
            np = self.nodepools.get(nodepool) or {}
            lbls.update((((np.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {})
        if managed:
            lbls["karpenter.sh/initialized"] = "true"
        lbls.update(labels or {})
        pods = list(pods)
        used = res.total(p.info.requests for p in pods if p.phase not in ("Succeeded", "Failed"))
        existing = ExistingNode(
            name=name, labels=lbls, taints=tuple(Taint.from_obj(t) for t in taints),
            allocatable=dict(it.allocatable), requested=used,
            nodepool=nodepool if managed else None, bound_pods=[p.info for p in pods],
            initialized=state.get("initialized", True),
        )
        state.setdefault("consolidatable", True)
        n = NodeState(
            name=name, nodeclaim=f"{name}-claim" if managed else None, nodepool=nodepool if managed else None,
            labels=lbls, instance_type=it, price=offering_price(it, zone, capacity_type) if price is None else price,
            pods=pods, existing=existing, annotations=dict(annotations or {}),
            capacity_type=capacity_type, zone=zone, **state,
        )
        self.nodes.append(n)
        return n

    def pdb(self, name: str, labels: Mapping[str, str], allowed: int = 0, namespace: str = "default",
            fully_blocking: bool | None = None, always_allow: bool = False) -> PDBState:
        p = PDBState(namespace, name, LabelSelector({"matchLabels": dict(labels)}), allowed,
                     fully_blocking=(allowed == 0) if fully_blocking is None else fully_blocking,
                     unhealthy_always_allow=always_allow)
        self.pdbs.append(p)
        return p

    # --- the engine's view ---------------------------------------------------------------
    def snapshot(self) -> ClusterSnapshot:
        if not self.nodepools:
            self.nodepool()
        templates = [build_template(np, self.template_types.get(name, self.types), [], {}, frozenset({"example.com/cpu"}))
                     for name, np in self.nodepools.items()]
        return ClusterSnapshot(now=self.now, nodes=list(self.nodes), nodepools=dict(self.nodepools),
                               templates=templates, pending_pods=list(self.pending), pdbs=list(self.pdbs),
                               feature_gates=dict(self.feature_gates))

    def step(self, engine: DisruptionEngine | None = None) -> StepResult:
        return (engine or DisruptionEngine()).step(self.snapshot())


# --- reading results ------------------------------------------------------------------------


def names(cmd) -> list[str]:
    return sorted(c.name for c in cmd.candidates) if cmd is not None else []


def replacement_types(cmd, i: int = 0) -> list[str]:
    return [it.name for it in cmd.replacements[i].instance_types]


def events_for(result: StepResult, name: str | None = None, reason: str | None = None) -> list[str]:
    return [e.message for e in result.events
            if (name is None or e.name == name) and (reason is None or e.reason == reason)]


def gib(n: float) -> int:
    return int(n * GIB)
