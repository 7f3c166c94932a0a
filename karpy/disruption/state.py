"""The cluster as the disruption engine sees it: nodes, their pods, PDBs and NodePools.

The simulator (and later the Kubernetes controller) builds a
:class:`ClusterSnapshot`; the engine reads it and returns decisions. Nothing
here performs I/O or reads a clock: ``now`` is part of the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from .. import resources as res
from ..cloudprovider.types import InstanceType
from ..scheduling.pods import LabelSelector, PodInfo, Taint, Toleration
from ..scheduling.scheduler import ExistingNode, NodeClaimTemplate

DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
DISRUPTED_TAINT = Taint("karpenter.sh/disrupted", "", "NoSchedule")
CRITICAL_PRIORITY_CLASSES = ("system-cluster-critical", "system-node-critical")


@dataclass(eq=False)
class PodState:
    info: PodInfo
    phase: str = "Running"  # Pending | Running | Succeeded | Failed
    owner_kind: str | None = None  # DaemonSet, StatefulSet, ReplicaSet, Job, Node (mirror pod), ...
    annotations: Mapping[str, str] = field(default_factory=dict)
    start_time: float | None = None
    terminating: bool = False
    priority_class: str | None = None
    ready: bool = True

    @property
    def key(self) -> str:
        return self.info.key

    @property
    def daemon(self) -> bool:
        return self.owner_kind == "DaemonSet"

    @property
    def mirror(self) -> bool:
        return self.owner_kind == "Node"

    @property
    def active(self) -> bool:
        return self.phase not in ("Succeeded", "Failed") and not self.terminating

    @property
    def reschedulable(self) -> bool:
        """Would this pod need a new home if its node went away?"""
        return (self.active or (self.owner_kind == "StatefulSet" and self.terminating)) and not self.daemon and not self.mirror

    @property
    def critical(self) -> bool:
        return self.priority_class in CRITICAL_PRIORITY_CLASSES

    def do_not_disrupt(self, now: float) -> bool:
        """The karpenter.sh/do-not-disrupt annotation: "true", or a duration from the pod's start."""
        v = self.annotations.get(DO_NOT_DISRUPT)
        if v is None:
            return False
        if v == "true":
            return True
        until = self.do_not_disrupt_until()
        return until is not None and now < until

    def do_not_disrupt_until(self) -> float | None:
        """When a duration-valued do-not-disrupt annotation stops protecting the pod (inf while the pod
        has not started; None for "true", no annotation or a value that protects nothing)."""
        v = self.annotations.get(DO_NOT_DISRUPT)
        if v is None or v == "true":
            return None
        try:
            d = res.parse_duration(v)
        except ValueError:
            return None
        if d <= 0:
            return None
        return float("inf") if self.start_time is None else self.start_time + d

    def tolerates_disrupted_taint(self) -> bool:
        return any(t.tolerates(DISRUPTED_TAINT) for t in self.info.tolerations)

    def eviction_cost(self) -> float:
        """Upstream's per-pod eviction cost: 1, nudged by deletion cost and priority, clamped to [-10, 10]."""
        c = 1.0
        v = self.annotations.get(DELETION_COST)
        if v is not None:
            try:
                c += float(v) / 2**27
            except ValueError:
                pass
        c += self.info.priority / 2**25
        return max(-10.0, min(10.0, c))


@dataclass(eq=False)
class PDBState:
    namespace: str
    name: str
    selector: LabelSelector
    disruptions_allowed: int
    fully_blocking: bool = False  # maxUnavailable 0 / "0%", or minAvailable "100%"
    unhealthy_always_allow: bool = False

    def selects(self, pod: PodState) -> bool:
        return pod.info.namespace == self.namespace and self.selector.matches(pod.info.labels)


@dataclass(eq=False)
class NodeState:
    """A managed node (a NodeClaim and, once registered, its Node) or an unmanaged Node."""

    name: str  # the Node name, or the NodeClaim name before registration
    nodeclaim: str | None
    nodepool: str | None
    labels: Mapping[str, str]
    instance_type: InstanceType | None
    price: float
    pods: list[PodState]
    existing: ExistingNode  # how the scheduler sees it as a destination
    initialized: bool = True
    ready: bool = True
    registered: bool = True  # False: a NodeClaim whose Node has not joined yet
    marked_for_deletion: bool = False  # a command or a deletion has claimed it
    queued: bool = False  # held by a disruption command in progress
    terminating: bool = False  # its instance is being terminated
    nominated: bool = False  # the provisioner expects pending pods to land here
    annotations: Mapping[str, str] = field(default_factory=dict)
    consolidatable: bool = False  # consolidateAfter has elapsed since the last pod event
    under_consolidate_after: bool = False  # a pod event is more recent than consolidateAfter
    drifted: str | None = None  # drift reason, if drifted
    drifted_since: float | None = None
    termination_grace_period: float | None = None
    capacity_type: str | None = None
    zone: str | None = None
    buffer_pods: int = 0  # CapacityBuffer virtual pods the last provisioning pass placed here

    @property
    def managed(self) -> bool:
        return self.nodeclaim is not None


@dataclass
class ClusterSnapshot:
    now: float
    nodes: list[NodeState]
    nodepools: Mapping[str, Mapping]  # name -> NodePool manifest
    templates: list[NodeClaimTemplate]  # what each NodePool can launch now
    pending_pods: list[PodInfo] = field(default_factory=list)  # provisionable pods not yet placed
    pdbs: list[PDBState] = field(default_factory=list)
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    respect_preferences: bool = True  # preferencePolicy Respect (Ignore: simulations leave preferences out)
    ignore_dra: bool = True  # IgnoreDRARequests: pods asking for devices cannot be rescheduled
    min_values_best_effort: bool = False  # minValuesPolicy BestEffort: simulations may relax minValues
    tolerations_for_daemons: tuple[Toleration, ...] = ()
    # NodePool -> NodeClaims (running, being deleted, being disrupted), for static NodePools' drift
    nodepool_counts: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)

    def node(self, name: str) -> NodeState | None:
        for n in self.nodes:
            if n.name == name:
                return n
        return None
