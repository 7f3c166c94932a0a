"""Metrics from log records and the informer cache, in Prometheus' text format with upstream's names."""

from __future__ import annotations

from karpy.controller.metrics import Metrics
from karpy.metrics import KarpenterMetrics
from karpy.runtime.clock import SimClock
from karpy.runtime.log import Logger


class Mgr:
    def __init__(self):
        self.store = {"Node": {}, "Pod": {}, "NodePool": {}, "NodeClaim": {}}
        self.on_reconcile = None

    def get(self, kind, name, namespace=""):
        return self.store[kind].get(("", name))


def test_metrics_text():
    mgr = Mgr()
    mgr.store["NodeClaim"][("", "default-abc")] = {"metadata": {"name": "default-abc", "labels": {
        "karpenter.sh/nodepool": "default", "karpenter.sh/capacity-type": "spot",
        "topology.kubernetes.io/zone": "z1"}}}
    mgr.store["Node"][("", "n1")] = {"metadata": {"name": "n1", "labels": {
        "karpenter.sh/nodepool": "default", "topology.kubernetes.io/zone": "z1", "kubernetes.io/arch": "arm64",
        "node.kubernetes.io/instance-type": "c-4x", "karpenter.sh/capacity-type": "spot"}},
        "status": {"allocatable": {"cpu": "3900m", "memory": "1Gi"}, "capacity": {"cpu": "4"}, "phase": "Running"}}
    mgr.store["Pod"][("default", "p")] = {"metadata": {"name": "p", "namespace": "default", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs"}]}, "spec": {"nodeName": "n1"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    mgr.store["NodePool"][("", "default")] = {"metadata": {"name": "default"}, "spec": {"limits": {"cpu": "100"}},
                                              "status": {"resources": {"cpu": "4", "nodes": "1"}}}

    core = KarpenterMetrics()  # the controllers' own metrics, which /metrics serves beside these
    log = Logger(SimClock(0), level="error")
    m = Metrics()
    m.attach(mgr, log, core)
    log.info("created nodeclaim", controller="provisioner", NodePool={"name": "default"},
             NodeClaim={"name": "default-abc"}, reason="provisioning")
    log.info("created nodeclaim", controller="disruption", NodePool={"name": "default"},
             NodeClaim={"name": "default-abc"}, reason="Underutilized")
    log.info("deleted nodeclaim", controller="nodeclaim.lifecycle", NodeClaim={"name": "default-abc"})
    core.decisions.labels("replace", "underutilized", "single").inc()
    core.scheduling_duration.labels("provisioner").observe(0.02)
    core.provisioner_scheduling_duration.observe(0.02)
    mgr.on_reconcile("provisioner", 0.02, False)
    mgr.on_reconcile("nodeclaim.lifecycle", 0.01, True)
    text = m.text().decode()
    for line in (
        'karpenter_nodeclaims_created_total{min_values_relaxed="false",nodepool="default",reason="provisioned"} 1.0',
        'karpenter_nodeclaims_created_total{min_values_relaxed="false",nodepool="default",reason="underutilized"} 1.0',
        'karpenter_nodeclaims_terminated_total{capacity_type="spot",nodepool="default",zone="z1"} 1.0',
        'karpenter_voluntary_disruption_decisions_total{consolidation_type="single",decision="replace",reason="underutilized"} 1.0',
        'karpenter_scheduler_scheduling_duration_seconds_count{controller="provisioner"} 1.0',
        'karpenter_provisioner_scheduling_duration_seconds_count 1.0',
        'controller_runtime_reconcile_total{controller="nodeclaim.lifecycle",result="error"} 1.0',
        'karpenter_nodepools_usage{nodepool="default",resource_type="cpu"} 4.0',
        'karpenter_nodepools_limit{nodepool="default",resource_type="cpu"} 100.0',
    ):
        assert line in text, line
    alloc = next(l for l in text.splitlines() if l.startswith("karpenter_nodes_allocatable{") and 'resource_type="cpu"' in l)
    for part in ('node_name="n1"', 'nodepool="default"', 'zone="z1"', 'arch="arm64"', 'instance_type="c-4x"',
                 'capacity_type="spot"', 'phase="Running"', 'managed="true"'):
        assert part in alloc, part
    assert alloc.endswith(" 3.9")
    state = next(l for l in text.splitlines() if l.startswith("karpenter_pods_state{"))
    for part in ('name="p"', 'namespace="default"', 'owner="/apis/apps/v1/namespaces/default/replicasets/rs"',
                 'node="n1"', 'scheduled="true"', 'phase="Running"', 'ready="true"', 'managed="true"'):
        assert part in state, part
