"""Prometheus metrics with upstream Karpenter's names and labels, where karpy has the behaviour.

``/metrics`` serves two registries. The controllers' own metrics (disruption decisions, disrupted NodeClaims,
drains and evictions, terminations, the scheduler's, the cloud provider's instance types and prices) are
counted where the behaviour happens, in :mod:`karpy.metrics`, and served as they are (``attach(core=...)``).
The rest is kept here, by listening: to the structured log records the controllers already write
("created nodeclaim", "deleted nodeclaim") and to the manager's reconcile hook (durations). Gauges are read
from the informer cache when Prometheus scrapes (the Nodes, Pods and NodePools the manager holds).

Labels follow kubernetes-sigs/karpenter:

* ``karpenter_nodeclaims_created_total{reason,nodepool,min_values_relaxed}``
* ``karpenter_nodeclaims_terminated_total{nodepool,capacity_type,zone}``
* ``karpenter_nodes_allocatable{<well-known labels>,node_name,phase,managed,resource_type}``
* ``karpenter_pods_state{name,namespace,owner,node,scheduled,nodepool,zone,arch,capacity_type,instance_type,phase,ready,managed}``
* ``karpenter_nodepools_usage{resource_type,nodepool}``, ``karpenter_nodepools_limit{resource_type,nodepool}``
* ``karpenter_interruption_received_messages_total{message_type}``, ``karpenter_interruption_deleted_messages_total``,
  ``karpenter_interruption_message_queue_duration_seconds`` (the AWS interruption queue)
* ``controller_runtime_reconcile_total{controller,result}``, ``controller_runtime_reconcile_time_seconds{controller}``
"""

from __future__ import annotations

import threading
from typing import Any, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from .. import resources as res
from ..api.labels import WELL_KNOWN_LABELS
from ..metrics import DURATION_BUCKETS, KarpenterMetrics, RegistryProxy

NODEPOOL = "karpenter.sh/nodepool"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
ZONE = "topology.kubernetes.io/zone"
ARCH = "kubernetes.io/arch"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
MIN_VALUES_RELAXED = "karpenter.sh/nodeclaim-min-values-relaxed"

# karpy's creation reasons -> upstream's reason label values
CREATE_REASONS = {"provisioning": "provisioned"}


def _snake(label_key: str) -> str:
    return label_key.split("/", 1)[-1].lower().replace("-", "_")


WELL_KNOWN = sorted(WELL_KNOWN_LABELS)
NODE_LABELS = [_snake(k) for k in WELL_KNOWN] + ["node_name", "phase", "managed", "resource_type"]
POD_LABELS = ["name", "namespace", "owner", "node", "scheduled", "nodepool", "zone", "arch", "capacity_type",
              "instance_type", "phase", "ready", "managed"]


def _resource_value(name: str, quantity: Any) -> float:
    """A quantity as upstream exports it: cores for cpu, bytes for memory, counts otherwise."""
    try:
        q = res.parse_quantity(quantity)
    except (ValueError, TypeError):
        return 0.0
    return float(q)


def _resource_name(name: str) -> str:
    return name.lower().replace("-", "_").replace("/", "_").replace(".", "_")


def _safe_values(store: dict | None) -> list[dict]:
    for _ in range(5):
        try:
            return list((store or {}).values())
        except RuntimeError:  # changed size during iteration (the manager thread writes)
            continue
    return []


class Metrics:
    def __init__(self, mgr: Any = None):
        self.mgr = mgr
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.nodeclaims_created = Counter(
            "karpenter_nodeclaims_created_total",
            "Number of nodeclaims created in total by Karpenter. Labeled by reason the nodeclaim was created, "
            "the owning nodepool, and if min values was relaxed for this nodeclaim.",
            ["reason", "nodepool", "min_values_relaxed"], registry=r)
        self.nodeclaims_terminated = Counter(
            "karpenter_nodeclaims_terminated_total",
            "Number of nodeclaims terminated in total by Karpenter. Labeled by the owning nodepool, capacity "
            "type, and zone.", ["nodepool", "capacity_type", "zone"], registry=r)
        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total", "Total number of reconciliations per controller",
            ["controller", "result"], registry=r)
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds", "Length of time per reconciliation per controller",
            ["controller"], buckets=DURATION_BUCKETS, registry=r)
        self.interruption_received = Counter(
            "karpenter_interruption_received_messages_total",
            "Count of messages received from the SQS queue. Broken down by message type and whether the message was "
            "actionable.", ["message_type"], registry=r)
        self.interruption_deleted = Counter(
            "karpenter_interruption_deleted_messages_total", "Count of messages deleted from the SQS queue.", [],
            registry=r)
        self.interruption_latency = Histogram(
            "karpenter_interruption_message_queue_duration_seconds",
            "Amount of time an interruption message is on the queue before it is processed by karpenter.", [],
            buckets=DURATION_BUCKETS, registry=r)
        r.register(_StateCollector(self))
        self.core: KarpenterMetrics | None = None  # the controllers' own metrics (karpy.metrics)
        r.register(RegistryProxy(lambda: self.core.registry.collect() if self.core is not None else ()))
        self._lock = threading.Lock()

    # --- wiring -------------------------------------------------------------------------------------
    def attach(self, mgr: Any, log: Any, core: KarpenterMetrics | None = None) -> None:
        self.mgr = mgr
        self.core = core
        log.listeners.append(self.on_log)
        if log.listen_for is not None:
            log.listen_for |= {"created nodeclaim", "deleted nodeclaim",
                               "received interruption queue message", "deleted interruption queue message"}
        mgr.on_reconcile = self.on_reconcile

    def text(self) -> bytes:
        return generate_latest(self.registry)

    # --- listeners ----------------------------------------------------------------------------------
    def on_log(self, rec: dict) -> None:
        msg = rec.get("message")
        if msg == "created nodeclaim":
            np = (rec.get("NodePool") or {}).get("name", "")
            reason = str(rec.get("reason") or "provisioning")
            relaxed = "false"
            claim = self._claim((rec.get("NodeClaim") or {}).get("name"))
            if claim is not None and (claim["metadata"].get("annotations") or {}).get(MIN_VALUES_RELAXED) == "true":
                relaxed = "true"
            self.nodeclaims_created.labels(CREATE_REASONS.get(reason, reason.lower()), np, relaxed).inc()
        elif msg == "deleted nodeclaim":
            claim = self._claim((rec.get("NodeClaim") or {}).get("name"))
            labels = ((claim or {}).get("metadata") or {}).get("labels") or {}
            self.nodeclaims_terminated.labels(labels.get(NODEPOOL, ""), labels.get(CAPACITY_TYPE, ""),
                                              labels.get(ZONE, "")).inc()
        elif msg == "received interruption queue message":
            self.interruption_received.labels(str(rec.get("message_type") or "no_op")).inc()
            if isinstance(rec.get("queue_seconds"), (int, float)):
                self.interruption_latency.observe(rec["queue_seconds"])
        elif msg == "deleted interruption queue message":
            self.interruption_deleted.inc()

    def on_reconcile(self, controller: str, seconds: float, failed: bool) -> None:
        self.reconcile_total.labels(controller, "error" if failed else "success").inc()
        self.reconcile_time.labels(controller).observe(seconds)

    def _claim(self, name: str | None) -> dict | None:
        if not name or self.mgr is None:
            return None
        return self.mgr.get("NodeClaim", name)


class _StateCollector:
    """Gauges computed from the informer cache at scrape time."""

    def __init__(self, metrics: Metrics):
        self.m = metrics

    def describe(self) -> Iterable:
        return []

    def collect(self) -> Iterable[GaugeMetricFamily]:
        mgr = self.m.mgr
        store = getattr(mgr, "store", {}) if mgr is not None else {}
        nodes = _safe_values(store.get("Node"))
        pods = _safe_values(store.get("Pod"))
        pools = _safe_values(store.get("NodePool"))
        yield self._allocatable(nodes)
        yield self._pods(pods, {n["metadata"]["name"]: n for n in nodes})
        usage, limit = self._nodepools(pools, nodes)
        yield usage
        yield limit

    @staticmethod
    def _allocatable(nodes: list[dict]) -> GaugeMetricFamily:
        g = GaugeMetricFamily("karpenter_nodes_allocatable", "Node allocatable are the resources allocatable by nodes.",
                              labels=NODE_LABELS)
        for n in nodes:
            labels = (n.get("metadata") or {}).get("labels") or {}
            base = [labels.get(k, "") for k in WELL_KNOWN]
            phase = str((n.get("status") or {}).get("phase") or "")
            managed = "true" if labels.get(NODEPOOL) else "false"
            for rname, q in sorted(((n.get("status") or {}).get("allocatable") or {}).items()):
                g.add_metric(base + [n["metadata"]["name"], phase, managed, _resource_name(rname)],
                             _resource_value(rname, q))
        return g

    @staticmethod
    def _pods(pods: list[dict], nodes: dict[str, dict]) -> GaugeMetricFamily:
        g = GaugeMetricFamily("karpenter_pods_state",
                              "Pod state is the current state of pods. This metric can be used several ways as it is "
                              "labeled by the pod name, namespace, owner, node, nodepool name, zone, architecture, "
                              "capacity type, instance type, pod phase, and pod readiness.", labels=POD_LABELS)
        for p in pods:
            meta = p.get("metadata") or {}
            spec = p.get("spec") or {}
            status = p.get("status") or {}
            owners = meta.get("ownerReferences") or ()
            owner = ""
            if owners:
                o = owners[0]
                owner = f"/apis/{o.get('apiVersion', '')}/namespaces/{meta.get('namespace', '')}/" \
                        f"{str(o.get('kind', '')).lower()}s/{o.get('name', '')}"
            node_name = spec.get("nodeName") or ""
            nl = ((nodes.get(node_name) or {}).get("metadata") or {}).get("labels") or {}
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
            g.add_metric([meta.get("name", ""), meta.get("namespace", ""), owner, node_name,
                          "true" if node_name else "false", nl.get(NODEPOOL, ""), nl.get(ZONE, ""), nl.get(ARCH, ""),
                          nl.get(CAPACITY_TYPE, ""), nl.get(INSTANCE_TYPE, ""), str(status.get("phase") or ""),
                          "true" if ready else "false", "true" if nl.get(NODEPOOL) else "false"], 1.0)
        return g

    @staticmethod
    def _nodepools(pools: list[dict], nodes: list[dict]) -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        usage = GaugeMetricFamily("karpenter_nodepools_usage",
                                  "The amount of resources that have been provisioned for a nodepool. Labeled by "
                                  "nodepool name and resource type.", labels=["resource_type", "nodepool"])
        limit = GaugeMetricFamily("karpenter_nodepools_limit",
                                  "Limits specified on the nodepool that restrict the quantity of resources "
                                  "provisioned. Labeled by nodepool name and resource type.",
                                  labels=["resource_type", "nodepool"])
        for np in pools:
            name = np["metadata"]["name"]
            used = (np.get("status") or {}).get("resources")
            if used is None:  # not counted yet: the capacity of its nodes
                total: dict[str, int] = {}
                for n in nodes:
                    if ((n.get("metadata") or {}).get("labels") or {}).get(NODEPOOL) == name:
                        total = res.add(total, res.parse_resource_list((n.get("status") or {}).get("capacity")))
                used = res.format_resource_list(total)
            for rname, q in sorted(used.items()):
                usage.add_metric([_resource_name(rname), name], _resource_value(rname, q))
            for rname, q in sorted(((np.get("spec") or {}).get("limits") or {}).items()):
                limit.add_metric([_resource_name(rname), name], _resource_value(rname, q))
        return usage, limit
