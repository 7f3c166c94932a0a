"""Karpenter's Prometheus metrics that the controllers emit where the behaviour happens.

Each :class:`~karpy.controllers.env.Env` carries one :class:`KarpenterMetrics`, with its own registry, so
``karpy simulate`` runs, tests and ``karpy controller`` each count their own events; ``karpy controller``
serves this registry on ``/metrics`` beside the gauges it reads from the informer cache
(:mod:`karpy.controller.metrics`). Names, labels and semantics are upstream Karpenter v1.14's:

* ``karpenter_nodeclaims_disrupted_total`` and ``karpenter_pods_disruption_initiated_total``
  ``{reason,nodepool,capacity_type,consolidation_policy,termination_mode}``: a NodeClaim deleted by a
  disruption command, expiration, node repair or garbage collection, and the reschedulable pods it held
  (DaemonSet and mirror pods left out); a launch that failed or a registration that timed out counts the
  NodeClaim only;
* ``karpenter_voluntary_disruption_decisions_total{decision,reason,consolidation_type}``,
  ``karpenter_voluntary_disruption_decisions_by_nodepool_total{nodepool,decision,reason,consolidation_type}``,
  ``karpenter_voluntary_disruption_eligible_nodes{reason}``,
  ``karpenter_voluntary_disruption_failed_validations_total{consolidation_type}``,
  ``karpenter_voluntary_disruption_consolidation_timeouts_total{consolidation_type}``;
* ``karpenter_nodes_drained_total{nodepool}``, ``karpenter_nodes_terminated_total{nodepool,zone}``,
  ``karpenter_nodes_termination_duration_seconds{nodepool}`` (a summary), ``karpenter_nodes_lifetime_duration_seconds{nodepool}``;
* ``karpenter_pods_drained_total{reason}``, ``karpenter_pods_eviction_requests_total{code}``;
* ``karpenter_scheduler_scheduling_duration_seconds{controller}`` (and the pre-v1 name
  ``karpenter_provisioner_scheduling_duration_seconds``), ``karpenter_scheduler_queue_depth{controller,scheduling_id}``,
  ``karpenter_scheduler_unschedulable_pods_count{controller}``,
  ``karpenter_scheduler_pending_pods_by_effective_zone_count{controller,zone}``,
  ``karpenter_pods_scheduling_decision_duration_seconds``;
* read when Prometheus scrapes, from the cluster state: ``karpenter_cluster_state_node_count`` (Nodes and launched
  NodeClaims) and ``karpenter_cluster_state_synced`` (1 once every NodeClaim is launched, else 0);
* read when Prometheus scrapes, from the instance types the cloud provider gives each NodePool:
  ``karpenter_cloudprovider_instance_type_offering_price_estimate{instance_type,capacity_type,zone}``,
  ``karpenter_cloudprovider_instance_type_offering_available{instance_type,capacity_type,zone}``,
  ``karpenter_cloudprovider_instance_type_cpu_cores{instance_type}``,
  ``karpenter_cloudprovider_instance_type_memory_bytes{instance_type}`` (EC2's memory before overhead where the
  type says it, ``karpenter.k8s.aws/instance-memory``; else the type's memory capacity).

Every update is one label lookup and one add: no controller rescans anything to keep a metric.
Durations of Karpenter's own work (the scheduling simulation) are wall-clock seconds, as upstream measures
them; durations of cluster events (a node's lifetime, its termination, a pod's wait for a decision) are on
the clock the controllers run on (simulated time in ``karpy simulate``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary, generate_latest
from prometheus_client.core import GaugeMetricFamily

from .resources import parse_duration

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
                    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50,
                    60, 120, 150, 300, 450, 600)
_HOUR, _DAY = 3600.0, 86400.0
LIFETIME_BUCKETS = (900.0, 1800.0, 2700.0, _HOUR, 2 * _HOUR, 4 * _HOUR, 6 * _HOUR, 8 * _HOUR, 10 * _HOUR, 12 * _HOUR,
                    16 * _HOUR, 20 * _HOUR, _DAY, 2 * _DAY, 3 * _DAY, 5 * _DAY, 10 * _DAY, 15 * _DAY, 20 * _DAY,
                    25 * _DAY, 30 * _DAY)
DISRUPTION_LABELS = ["reason", "nodepool", "capacity_type", "consolidation_policy", "termination_mode"]
# karpy's disruption methods -> upstream's consolidation_type label ("" for drift, which is no consolidation)
CONSOLIDATION_TYPES = {"emptiness": "empty", "multi": "multi", "single": "single", "optimizer": "multi"}
EC2_INSTANCE_MEMORY_MIB = "karpenter.k8s.aws/instance-memory"
MIB = 1024 * 1024


def snake(value: str) -> str:
    """``WhenEmptyOrUnderutilized`` -> ``when_empty_or_underutilized`` (upstream's pretty.ToSnakeCase)."""
    out = []
    for i, ch in enumerate(value):
        if ch.isupper() and i and not value[i - 1].isupper():
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def termination_mode(claim: dict | None) -> str:
    """How a NodeClaim's pods will go: ``graceful`` without a terminationGracePeriod, ``forceful`` with a
    zero one, ``eventual`` otherwise (upstream's DisruptionTerminationMode)."""
    tgp = ((claim or {}).get("spec") or {}).get("terminationGracePeriod")
    if tgp is None:
        return "graceful"
    try:
        return "forceful" if parse_duration(tgp) <= 0 else "eventual"
    except (ValueError, TypeError):
        return "eventual"


def reschedulable_pods(state_node: Any) -> int:
    """The pods on a cluster-state node that its disruption sends elsewhere: running or pending, not terminating,
    neither DaemonSet nor mirror pods (upstream's ReschedulablePods, for pods_disruption_initiated_total)."""
    if state_node is None:
        return 0
    return sum(1 for e in state_node.pods.values() if e.active and not e.daemon and not _mirror(e.obj))


def _mirror(pod: dict) -> bool:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or ()
    kind = next((r.get("kind") for r in refs if r.get("controller")), refs[0].get("kind") if refs else None)
    return kind == "Node"


class KarpenterMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.nodeclaims_disrupted = Counter(
            "karpenter_nodeclaims_disrupted_total",
            "Number of nodeclaims disrupted in total by Karpenter. Labeled by reason the nodeclaim was disrupted, the "
            "owning nodepool, the capacity type, the consolidation policy, and the termination mode.",
            DISRUPTION_LABELS, registry=r)
        self.pods_disruption_initiated = Counter(
            "karpenter_pods_disruption_initiated_total",
            "Number of pod disruptions initiated in total by Karpenter, incremented by the reschedulable pod count "
            "whenever the underlying nodeclaim is disrupted. Pods owned by DaemonSets and mirror pods are excluded.",
            DISRUPTION_LABELS, registry=r)
        self.decisions = Counter(
            "karpenter_voluntary_disruption_decisions_total",
            "Number of disruption decisions performed. Labeled by disruption decision, reason, and consolidation type.",
            ["decision", "reason", "consolidation_type"], registry=r)
        self.decisions_by_nodepool = Counter(
            "karpenter_voluntary_disruption_decisions_by_nodepool_total",
            "Number of disruption decisions performed by nodepool. Labeled by nodepool name, disruption decision, "
            "reason, and consolidation type.", ["nodepool", "decision", "reason", "consolidation_type"], registry=r)
        self.eligible_nodes = Gauge(
            "karpenter_voluntary_disruption_eligible_nodes",
            "Number of nodes eligible for disruption by Karpenter. Labeled by disruption reason.", ["reason"],
            registry=r)
        self.failed_validations = Counter(
            "karpenter_voluntary_disruption_failed_validations_total",
            "Number of candidates that were selected for disruption but failed validation. Labeled by consolidation "
            "type.", ["consolidation_type"], registry=r)
        self.consolidation_timeouts = Counter(
            "karpenter_voluntary_disruption_consolidation_timeouts_total",
            "Number of times the Consolidation algorithm has reached a timeout. Labeled by consolidation type.",
            ["consolidation_type"], registry=r)
        for ctype in ("multi", "single"):  # present from the start, as upstream's
            self.consolidation_timeouts.labels(ctype)
        self.nodes_drained = Counter("karpenter_nodes_drained_total", "The total number of nodes drained by Karpenter",
                                     ["nodepool"], registry=r)
        self.nodes_terminated = Counter(
            "karpenter_nodes_terminated_total",
            "Number of nodes terminated in total by Karpenter. Labeled by owning nodepool and zone.",
            ["nodepool", "zone"], registry=r)
        self.termination_duration = Summary(
            "karpenter_nodes_termination_duration_seconds",
            "The time taken between a node's deletion request and the removal of its finalizer", ["nodepool"],
            registry=r)
        self.lifetime = Histogram("karpenter_nodes_lifetime_duration_seconds",
                                  "The lifetime duration of the nodes since creation.", ["nodepool"],
                                  buckets=LIFETIME_BUCKETS, registry=r)
        self.pods_drained = Counter(
            "karpenter_pods_drained_total",
            "The total number of pods drained during node termination by Karpenter, labeled by reason", ["reason"],
            registry=r)
        self.eviction_requests = Counter(
            "karpenter_pods_eviction_requests_total",
            "The total number of pod eviction requests made by Karpenter, labeled by response code", ["code"],
            registry=r)
        self.scheduling_duration = Histogram(
            "karpenter_scheduler_scheduling_duration_seconds",
            "Duration of scheduling simulations used for deprovisioning and provisioning in seconds.", ["controller"],
            buckets=DURATION_BUCKETS, registry=r)
        self.provisioner_scheduling_duration = Histogram(
            "karpenter_provisioner_scheduling_duration_seconds",
            "Duration of scheduling process in seconds (the name before karpenter v1).", [],
            buckets=DURATION_BUCKETS, registry=r)
        self.queue_depth = Gauge("karpenter_scheduler_queue_depth",
                                 "The number of pods currently waiting to be scheduled.",
                                 ["controller", "scheduling_id"], registry=r)
        self.unschedulable_pods = Gauge("karpenter_scheduler_unschedulable_pods_count",
                                        "The number of unschedulable Pods.", ["controller"], registry=r)
        self.pending_by_zone = Gauge(
            "karpenter_scheduler_pending_pods_by_effective_zone_count",
            "Pending pods dimensioned by effective zone constraint, or the intersection of pod-level zone signals, "
            "volume topology (PVC zones), and topology constraints. Values: specific zone name, 'flexible' "
            "(multiple zones), or 'none' (no valid intersection).", ["controller", "zone"], registry=r)
        self.scheduling_decision = Histogram(
            "karpenter_pods_scheduling_decision_duration_seconds",
            "The time it takes for Karpenter to first try to schedule a pod after it's been seen.", [],
            buckets=DURATION_BUCKETS, registry=r)
        self._queue_ids: dict[str, str] = {}  # controller -> the scheduling_id its queue_depth series carries
        # the instance types of every NodePool, and whether reserved capacity is modelled (set by the operator)
        self.instance_types: Callable[[], Iterable[Iterable[Any]]] | None = None
        self.reserved_capacity = True
        r.register(_InstanceTypeCollector(self))
        self.cluster_state: Callable[[], tuple[int, bool]] | None = None  # (node count, synced), set by the operator
        r.register(_ClusterStateCollector(self))
        self._zones: dict[str, list[str]] = {}  # controller -> zones its pending_by_zone series carry

    # --- helpers the controllers call -------------------------------------------------------------
    def disrupted(self, claim: dict, reason: str, reschedulable_pods: int | None, consolidation_policy: str = "") -> None:
        """A NodeClaim deleted to disrupt it (a command's candidate, an expired, unhealthy or garbage-collected
        NodeClaim, a launch that failed); its reschedulable pods are counted unless None (upstream counts none
        for launch failures and timeouts)."""
        labels = (claim.get("metadata") or {}).get("labels") or {}
        values = (snake(reason), labels.get("karpenter.sh/nodepool", ""), labels.get("karpenter.sh/capacity-type", ""),
                  snake(consolidation_policy), termination_mode(claim))
        self.nodeclaims_disrupted.labels(*values).inc()
        if reschedulable_pods is not None:
            self.pods_disruption_initiated.labels(*values).inc(reschedulable_pods)

    def queue(self, controller: str, scheduling_id: str, depth: int) -> None:
        """The scheduling queue's depth; a new scheduling_id replaces the controller's previous series."""
        prev = self._queue_ids.get(controller)
        if prev is not None and prev != scheduling_id:
            try:
                self.queue_depth.remove(controller, prev)
            except KeyError:
                pass
        self._queue_ids[controller] = scheduling_id
        self.queue_depth.labels(controller, scheduling_id).set(depth)

    def pending_zones(self, controller: str, counts: dict[str, int]) -> None:
        """The pending pods of one scheduling pass by effective zone (the controller's older series go)."""
        for zone in self._zones.get(controller, ()):
            if zone not in counts:
                try:
                    self.pending_by_zone.remove(controller, zone)
                except KeyError:
                    pass
        for zone, n in counts.items():
            self.pending_by_zone.labels(controller, zone).set(n)
        self._zones[controller] = list(counts)

    def text(self) -> bytes:
        return generate_latest(self.registry)

    def value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """One sample's value (``name`` as exposed, e.g. ``..._total`` or ``..._count``), or None when absent."""
        return self.registry.get_sample_value(name, labels or {})


class _ClusterStateCollector:
    def __init__(self, metrics: KarpenterMetrics):
        self.m = metrics

    def describe(self) -> Iterable:
        return []

    def collect(self) -> Iterable[GaugeMetricFamily]:
        if self.m.cluster_state is None:
            return
        count, synced = self.m.cluster_state()
        yield GaugeMetricFamily("karpenter_cluster_state_node_count", "Current count of nodes in cluster state",
                                value=float(count))
        yield GaugeMetricFamily(
            "karpenter_cluster_state_synced",
            "Returns 1 if cluster state is synced and 0 otherwise. Synced checks that nodeclaims and nodes that are "
            "stored in the APIServer have the same representation as Karpenter's cluster state",
            value=1.0 if synced else 0.0)


class _InstanceTypeCollector:
    """Upstream's cloudprovider metrics, read from the cloud provider's instance types at scrape time (one
    NodePool's types after another: an offering's price is the last NodePool's, its availability true if any
    NodePool's offering is available; with reserved capacity on, each zone an instance type is offered in has
    a reserved series, unavailable at price 0, unless a reservation offers it)."""

    def __init__(self, metrics: KarpenterMetrics):
        self.m = metrics

    def describe(self) -> Iterable:
        return []

    def collect(self) -> Iterable[GaugeMetricFamily]:
        available: dict[tuple[str, str, str], bool] = {}
        price: dict[tuple[str, str, str], float] = {}
        cpu: dict[str, float] = {}
        memory: dict[str, float] = {}
        source = self.m.instance_types
        for types in (source() if source is not None else ()):
            for it in types:
                zones = set()
                for o in it.offerings:
                    dims = (it.name, o.capacity_type, o.zone)
                    available[dims] = available.get(dims, False) or bool(o.available)
                    price[dims] = float(o.price)
                    zones.add(o.zone)
                if self.m.reserved_capacity:
                    for zone in zones:
                        dims = (it.name, "reserved", zone)
                        if dims not in available:
                            available[dims] = False
                            price[dims] = 0.0
                cpu[it.name] = it.capacity.get("cpu", 0) / 1000.0
                mib = it.labels.get(EC2_INSTANCE_MEMORY_MIB)
                memory[it.name] = float(int(mib) * MIB) if mib and mib.isdigit() else float(it.capacity.get("memory", 0))
        dims_labels = ["instance_type", "capacity_type", "zone"]
        g_price = GaugeMetricFamily(
            "karpenter_cloudprovider_instance_type_offering_price_estimate",
            "Instance type offering estimated hourly price used when making informed decisions on node cost "
            "calculation, based on instance type, capacity type, and zone.", labels=dims_labels)
        g_avail = GaugeMetricFamily(
            "karpenter_cloudprovider_instance_type_offering_available",
            "Instance type offering availability, based on instance type, capacity type, and zone",
            labels=dims_labels)
        for dims in sorted(price):
            g_price.add_metric(list(dims), price[dims])
            g_avail.add_metric(list(dims), 1.0 if available[dims] else 0.0)
        g_cpu = GaugeMetricFamily("karpenter_cloudprovider_instance_type_cpu_cores",
                                  "VCPUs cores for a given instance type.", labels=["instance_type"])
        g_mem = GaugeMetricFamily("karpenter_cloudprovider_instance_type_memory_bytes",
                                  "Memory, in bytes, for a given instance type.", labels=["instance_type"])
        for name in sorted(cpu):
            g_cpu.add_metric([name], cpu[name])
            g_mem.add_metric([name], memory[name])
        yield from (g_price, g_avail, g_cpu, g_mem)


class RegistryProxy:
    """A collector serving another registry's metrics (karpy controller's /metrics serves the controllers')."""

    def __init__(self, source: Callable[[], Iterable]):
        self.source = source

    def describe(self) -> Iterable:
        return []

    def collect(self) -> Iterable:
        yield from self.source()
