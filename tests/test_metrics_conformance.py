"""Karpenter's Prometheus metrics, counted where the behaviour happens (karpy/metrics.py), as upstream's suites
assert them: each test drives the controllers on the in-memory runtime (tests/controllers/harness.py) and reads
the metric from the registry that ``karpy controller`` serves on /metrics.

Upstream's It bodies: pkg/controllers/disruption/{suite,consolidation,drift,emptiness}_test.go,
pkg/controllers/node/termination/{suite,terminator/suite}_test.go, pkg/controllers/nodeclaim/expiration/suite_test.go,
pkg/controllers/provisioning/scheduling/suite_test.go (Metrics) and aws pkg/providers/instancetype/suite_test.go.
"""

from __future__ import annotations

import pytest

from controllers.harness import (
    DO_NOT_DISRUPT, Harness, cond_status, deleting, nodepool, pod,
)
from karpy.controller.metrics import Metrics
from karpy.controllers.termination import MIN_DRAIN_TIME
from karpy.runtime.log import Logger
from karpy.state import pods as P

DISRUPTION = "disruption"
QUEUE = "disruption.queue"
RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": True}
DS = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "ds-uid", "controller": True}
BIG = "c-16x-amd64-linux"
SMALL = "c-4x-amd64-linux"


def value(h: Harness, name: str, **labels: str) -> float | None:
    return h.karpenter.env.metrics.value(name, labels)


def _pool(**kw) -> dict:
    kw.setdefault("consolidate_after", "0s")
    kw.setdefault("policy", "WhenEmptyOrUnderutilized")
    kw.setdefault("budgets", [{"nodes": "100%"}])
    return nodepool(**kw)


def _node(h: Harness, it: str = BIG, pods: int = 0, cpu: str = "1", **pod_kw) -> tuple[str, str]:
    """An initialized managed node with ``pods`` ReplicaSet pods, its disruption conditions computed."""
    c, n = h.launch_node("default", instance_types=[it])
    for _ in range(pods):
        h.pod_on(n["metadata"]["name"], cpu=cpu, owner=RS, **pod_kw)
    h.reconcile("nodeclaim.disruption", c["metadata"]["name"])
    return c["metadata"]["name"], n["metadata"]["name"]


def _pass(h: Harness) -> float | None:
    """ExpectSingletonReconciled(disruptionController)."""
    h.clear_queue()
    return h.reconcile(DISRUPTION)


def _validated_pass(h: Harness) -> None:
    assert _pass(h) == pytest.approx(15.0)
    h.tick(15)
    _pass(h)


def _drift(h: Harness) -> None:
    h.patch("NodePool", "default", {"spec": {"template": {"metadata": {"labels": {"rev": "2"}}}}})
    for c in h.nodeclaims():
        h.reconcile("nodeclaim.disruption", c["metadata"]["name"])
        assert cond_status(h.get("NodeClaim", c["metadata"]["name"]), "Drifted") == "True"


def _decisions(h: Harness, decision: str, reason: str, ctype: str) -> tuple[float | None, float | None]:
    return (value(h, "karpenter_voluntary_disruption_decisions_total", decision=decision, reason=reason,
                  consolidation_type=ctype),
            value(h, "karpenter_voluntary_disruption_decisions_by_nodepool_total", nodepool="default",
                  decision=decision, reason=reason, consolidation_type=ctype))


# --- disruption decisions (disruption/suite_test.go, Metrics) ----------------------------------------------


def test_single_node_empty_disruption_fires_decision_metrics():
    """It("should fire metrics for single node empty disruption")"""
    h = Harness()
    h.setup(_pool())
    _node(h)
    _validated_pass(h)
    assert _decisions(h, "delete", "empty", "empty") == (1.0, 1.0)


def test_single_node_delete_disruption_fires_decision_metrics():
    """It("should fire metrics for single node delete disruption"): a drifted node whose pods fit elsewhere."""
    h = Harness()
    h.setup(_pool(consolidate_after="Never"))
    _node(h, pods=2)
    _drift(h)
    # a second node with room, not drifted (created after the template change)
    c2, n2 = h.launch_node("default", instance_types=[BIG])
    for _ in range(2):
        h.pod_on(n2["metadata"]["name"], cpu="1", owner=RS)
    _pass(h)
    assert _decisions(h, "delete", "drifted", "") == (1.0, 1.0)


def test_single_node_replace_disruption_fires_decision_metrics():
    """It("should fire metrics for single node replace disruption")"""
    h = Harness()
    h.setup(_pool(consolidate_after="Never"))
    _node(h, pods=4)
    _drift(h)
    _pass(h)
    assert _decisions(h, "replace", "drifted", "") == (1.0, 1.0)


def test_multi_node_empty_disruption_fires_one_decision():
    """It("should fire metrics for multi-node empty disruption"): three empty nodes, one command."""
    h = Harness()
    h.setup(_pool())
    for _ in range(3):
        _node(h)
    _validated_pass(h)
    (r,) = h.disruption.queue.values()
    assert len(r.candidates) == 3
    assert _decisions(h, "delete", "empty", "empty") == (1.0, 1.0)


def test_multi_node_delete_disruption_fires_decision_metrics():
    """It("should fire metrics for multi-node delete disruption"): three nodes' pods fit on one of them."""
    h = Harness()
    h.setup(_pool())
    for _ in range(3):
        _node(h, it=SMALL, pods=1)
    _validated_pass(h)
    (r,) = h.disruption.queue.values()
    assert r.command.method == "multi" and r.command.decision == "delete"
    assert _decisions(h, "delete", "underutilized", "multi") == (1.0, 1.0)


def test_multi_node_replace_disruption_fires_decision_metrics():
    """It("should fire metrics for multi-node replace disruption"): three large nodes replaced by a cheaper one."""
    h = Harness()
    h.setup(_pool())
    for _ in range(3):
        _node(h, pods=1)
    _validated_pass(h)
    (r,) = h.disruption.queue.values()
    assert r.command.method == "multi" and r.command.decision == "replace"
    assert _decisions(h, "replace", "underutilized", "multi") == (1.0, 1.0)


# --- eligible nodes ---------------------------------------------------------------------------------------


def test_consolidation_reports_eligible_nodes():
    """consolidation_test.go It("should correctly report eligible nodes")"""
    h = Harness()
    h.setup(_pool())
    claim, node = _node(h)
    p = h.pod_on(node, cpu="1", owner=RS, annotations={DO_NOT_DISRUPT: "true"})
    h.reconcile("nodeclaim.disruption", claim)
    _pass(h)
    assert value(h, "karpenter_voluntary_disruption_eligible_nodes", reason="underutilized") == 0
    h.patch("Pod", p["metadata"]["name"], {"metadata": {"annotations": {DO_NOT_DISRUPT: None}}}, "default")
    _pass(h)
    assert value(h, "karpenter_voluntary_disruption_eligible_nodes", reason="underutilized") == 1


def test_drift_reports_eligible_drifted_nodes():
    """drift_test.go It("should correctly report eligible drifted nodes")"""
    h = Harness()
    h.setup(_pool(consolidate_after="Never"))
    claim, node = _node(h)
    p = h.pod_on(node, cpu="1", owner=RS, annotations={DO_NOT_DISRUPT: "true"})
    _pass(h)
    assert value(h, "karpenter_voluntary_disruption_eligible_nodes", reason="drifted") == 0
    h.patch("Pod", p["metadata"]["name"], {"metadata": {"annotations": {DO_NOT_DISRUPT: None}}}, "default")
    _drift(h)
    _pass(h)
    assert value(h, "karpenter_voluntary_disruption_eligible_nodes", reason="drifted") == 1


def test_emptiness_reports_eligible_nodes():
    """emptiness_test.go It("should correctly report eligible nodes")"""
    h = Harness()
    h.setup(_pool(policy="WhenEmpty"))  # the busy node is not consolidated meanwhile
    claim, node = _node(h)
    p = h.pod_on(node, cpu="1", owner=RS)
    h.reconcile("nodeclaim.disruption", claim)
    _pass(h)
    assert value(h, "karpenter_voluntary_disruption_eligible_nodes", reason="empty") == 0
    h.delete("Pod", p["metadata"]["name"], "default")
    h.reconcile("nodeclaim.disruption", claim)
    _pass(h)
    assert value(h, "karpenter_voluntary_disruption_eligible_nodes", reason="empty") == 1


# --- failed validations (consolidation_test.go, "should correctly report invalidated commands") ------------


def _block_budget(h: Harness, node: str) -> None:
    h.patch("NodePool", "default", {"spec": {"disruption": {"budgets": [{"nodes": "0"}]}}})


def _churn(h: Harness, node: str) -> None:
    """A pod arrives that the node may not lose (emptiness: no longer empty; consolidation: blocked)."""
    h.pod_on(node, cpu="1", owner=RS, annotations={DO_NOT_DISRUPT: "true"})


def _nominate(h: Harness, node: str) -> None:
    """The provisioner nominates the node for a pending pod."""
    p = h.create_one({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"nominated-{node}",
                      "namespace": "default"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
    h.cluster.nominate(P.pod_key(p), h.cluster.by_node[node].key, 60.0)


INVALIDATIONS = [pytest.param(_block_budget, id="blocked-by-budgets"), pytest.param(_churn, id="pod-churn"),
                 pytest.param(_nominate, id="candidate-nominated")]


def _failed(h: Harness, ctype: str) -> float | None:
    return value(h, "karpenter_voluntary_disruption_failed_validations_total", consolidation_type=ctype)


@pytest.mark.parametrize("invalidate", INVALIDATIONS)
def test_emptiness_counts_invalidated_commands(invalidate):
    """DescribeTable("should correctly report invalidated commands for emptiness disruption")"""
    h = Harness()
    h.setup(_pool())
    _, node = _node(h)
    assert _pass(h) == pytest.approx(15.0)
    assert h.disruption.validating.method == "emptiness"
    invalidate(h, node)
    h.tick(15)
    _pass(h)
    assert h.disruption.queue == {}
    assert _failed(h, "empty") == 1


@pytest.mark.parametrize("invalidate", INVALIDATIONS)
def test_multi_node_consolidation_counts_invalidated_commands(invalidate):
    """DescribeTable("should correctly report invalidated commands for multi node disruption"): both candidates."""
    h = Harness()
    h.setup(_pool())
    nodes = [_node(h, pods=1)[1] for _ in range(2)]
    assert _pass(h) == pytest.approx(15.0)
    cmd = h.disruption.validating
    assert cmd.method == "multi" and len(cmd.candidates) == 2
    invalidate(h, nodes[0])
    h.tick(15)
    _pass(h)
    assert h.disruption.queue == {}
    assert _failed(h, "multi") == 2


@pytest.mark.parametrize("invalidate", INVALIDATIONS)
def test_single_node_consolidation_counts_invalidated_commands(invalidate):
    """DescribeTable("should correctly report invalidated commands for single node disruption")"""
    h = Harness()
    h.setup(_pool())
    _, node = _node(h, pods=1)
    assert _pass(h) == pytest.approx(15.0)
    assert h.disruption.validating.method == "single"
    invalidate(h, node)
    h.tick(15)
    _pass(h)
    assert h.disruption.queue == {}
    assert _failed(h, "single") == 1


# --- node termination (node/termination/suite_test.go, Metrics) ----------------------------------------------

TERMINATION = "node.termination"


def _terminate(h: Harness) -> tuple[str, str]:
    """A managed node deleted and taken through its drain (upstream: reconcile, step 2 x MinDrainTime, reconcile),
    and its instance's termination (immediate in the simulated cloud); returns (NodeClaim, Node)."""
    h.setup(_pool(consolidate_after="Never"))
    claim, node = h.launch_node("default", instance_types=[SMALL])
    claim, node = claim["metadata"]["name"], node["metadata"]["name"]
    h.tick(3600)  # an hour old
    h.delete("Node", node)
    assert h.reconcile(TERMINATION, node) is not None  # taint, start the drain
    h.tick(2 * MIN_DRAIN_TIME)
    h.reconcile(TERMINATION, node)  # drained, instance terminated
    h.reconcile(TERMINATION, node)
    assert h.get("Node", node) is None
    return claim, node


def test_termination_fires_the_termination_duration_summary():
    """It("should fire the terminationSummary metric when deleting nodes")"""
    h = Harness()
    _terminate(h)
    assert value(h, "karpenter_nodes_termination_duration_seconds_count", nodepool="default") == 1
    assert value(h, "karpenter_nodes_termination_duration_seconds_sum", nodepool="default") == \
        pytest.approx(2 * MIN_DRAIN_TIME)


def test_termination_counts_drained_and_terminated_nodes():
    """It("should fire the nodesTerminated counter metric when deleting nodes")"""
    h = Harness()
    claim, node = _terminate(h)
    zone = h.get("NodeClaim", claim)["metadata"]["labels"]["topology.kubernetes.io/zone"]
    assert value(h, "karpenter_nodes_terminated_total", nodepool="default", zone=zone) == 1
    assert value(h, "karpenter_nodes_drained_total", nodepool="default") == 1  # once per node


def test_termination_fires_the_node_lifetime_histogram():
    """It("should fire the lifetime duration histogram metric when deleting nodes")"""
    h = Harness()
    _terminate(h)
    assert value(h, "karpenter_nodes_lifetime_duration_seconds_count", nodepool="default") == 1
    # an hour and the drain: in the 2 h bucket, not the 1 h one
    assert value(h, "karpenter_nodes_lifetime_duration_seconds_bucket", nodepool="default", le="3600.0") == 0
    assert value(h, "karpenter_nodes_lifetime_duration_seconds_bucket", nodepool="default", le="7200.0") == 1


# --- evictions (node/termination/terminator/suite_test.go, Eviction API) ------------------------------------


def test_an_eviction_counts_a_drained_pod_and_a_200_eviction_request():
    """It("should increment PodsDrainedTotal metric when a pod is evicted"): a node without a NodeClaim, so the
    reason is empty."""
    from controllers.harness import node as node_manifest

    h = Harness()
    h.setup(_pool())
    h.create(node_manifest("plain"))
    h.patch("Node", "plain", {"metadata": {"finalizers": ["karpenter.sh/termination"]}})
    h.pod_on("plain", name="p", owner=RS)
    h.delete("Node", "plain")
    h.reconcile(TERMINATION, "plain")
    assert [e["involvedObject"]["name"] for e in h.events("Evicted")] == ["p"]
    assert value(h, "karpenter_pods_drained_total", reason="") == 1
    assert value(h, "karpenter_pods_eviction_requests_total", code="200") == 1


def test_an_eviction_is_counted_with_the_nodeclaims_disruption_reason():
    """It("should increment PodsDrainedTotal metric with specific reason when a pod is evicted")"""
    from karpy.kube.times import fmt_time

    h = Harness()
    h.setup(_pool(consolidate_after="Never"))
    c, n = h.launch_node("default", instance_types=[SMALL])
    claim, node = c["metadata"]["name"], n["metadata"]["name"]
    st = dict(h.get("NodeClaim", claim)["status"])
    st["conditions"] = list(st["conditions"]) + [{
        "type": "DisruptionReason", "status": "True", "reason": "SpotInterruption",
        "message": "Node is being interrupted", "lastTransitionTime": fmt_time(h.now())}]
    h.patch("NodeClaim", claim, {"status": st}, subresource="status")
    h.pod_on(node, name="p", owner=RS)
    h.delete("Node", node)
    h.reconcile(TERMINATION, node)
    assert value(h, "karpenter_pods_drained_total", reason="SpotInterruption") == 1
    assert value(h, "karpenter_pods_eviction_requests_total", code="200") == 1


# --- expiration (nodeclaim/expiration/suite_test.go, Metrics) -----------------------------------------------

EXPIRATION = "nodeclaim.expiration"


def _expired(capacity: str = "on-demand", pods: int = 0, daemon_pods: int = 0) -> Harness:
    h = Harness()
    h.setup(nodepool(expire_after="30s", capacity=(capacity,)))
    c, n = h.launch_node("default", instance_types=[SMALL])
    for _ in range(pods):
        h.pod_on(n["metadata"]["name"], cpu="100m", owner=RS)
    for _ in range(daemon_pods):
        h.pod_on(n["metadata"]["name"], cpu="100m", owner=DS)
    h.tick(60)
    name = c["metadata"]["name"]
    assert h.reconcile(EXPIRATION, name) is None
    assert deleting(h.get("NodeClaim", name))
    return h


def _expired_labels(capacity: str) -> dict[str, str]:
    return {"reason": "expired", "nodepool": "default", "capacity_type": capacity, "consolidation_policy": "",
            "termination_mode": "graceful"}


@pytest.mark.parametrize("capacity", ["on-demand", "spot"])
def test_expiration_fires_nodeclaims_disrupted_total(capacity):
    """It("should fire a karpenter_nodeclaims_disrupted_total metric when expired") (on-demand, then spot)"""
    h = _expired(capacity)
    assert value(h, "karpenter_nodeclaims_disrupted_total", **_expired_labels(capacity)) == 1


def test_expiration_counts_the_reschedulable_pods_it_disrupts():
    """It("should fire karpenter_pods_disruption_initiated_total by the count of reschedulable pods on the node when
    expired"): two ReplicaSet pods count, the DaemonSet pod does not."""
    h = _expired(pods=2, daemon_pods=1)
    assert value(h, "karpenter_nodeclaims_disrupted_total", **_expired_labels("on-demand")) == 1
    assert value(h, "karpenter_pods_disruption_initiated_total", **_expired_labels("on-demand")) == 2


def test_a_disruption_command_counts_its_disrupted_nodeclaims_and_pods():
    """queue.go: a command's candidates are counted as they are deleted, with the NodePool's consolidation policy."""
    h = Harness()
    h.setup(_pool())
    for _ in range(3):
        _node(h, it=SMALL, pods=1)
    _validated_pass(h)
    (r,) = h.disruption.queue.values()
    assert r.command.decision == "delete"
    h.reconcile(QUEUE, r.id)
    labels = {"reason": "underutilized", "nodepool": "default", "capacity_type": "on-demand",
              "consolidation_policy": "when_empty_or_underutilized", "termination_mode": "graceful"}
    assert value(h, "karpenter_nodeclaims_disrupted_total", **labels) == len(r.candidates)
    assert value(h, "karpenter_pods_disruption_initiated_total", **labels) == len(r.candidates)


# --- the scheduler (provisioning/scheduling/suite_test.go, Metrics) -------------------------------------------

TRIGGER = "provisioner.trigger.pod"
PROVISIONER = "provisioner"


def _pending(h: Harness, *pods: dict) -> list[dict]:
    made = h.create(*pods)
    for p in made:
        h.reconcile(TRIGGER, P.pod_key(p))
    return made


def test_queue_depth_is_surfaced_while_the_scheduling_loop_runs(monkeypatch):
    """It("should surface the queueDepth metric while executing the scheduling loop")"""
    import karpy.controllers.provisioning as provisioning

    h = Harness()
    h.setup(_pool())
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "nginx"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    _pending(h, *(pod(cpu="100m", labels={"app": "nginx"}, affinity=anti, unschedulable=True) for _ in range(20)))
    seen = []
    solve = provisioning.Scheduler.solve

    def watching(self, pods):
        samples = [s for m in h.karpenter.env.metrics.queue_depth.collect() for s in m.samples
                   if s.labels["controller"] == "provisioner"]
        seen.extend(s.value for s in samples)
        return solve(self, pods)

    monkeypatch.setattr(provisioning.Scheduler, "solve", watching)
    h.provisioner.schedule()
    assert seen and max(seen) == 20
    assert len(h.nodeclaims()) == 20
    samples = [s for m in h.karpenter.env.metrics.queue_depth.collect() for s in m.samples]
    assert [s.value for s in samples] == [0.0]  # the queue is empty once the loop ends


def test_unschedulable_pods_count_is_surfaced():
    """It("should surface the UnschedulablePodsCount metric while executing the scheduling loop"): 10 pods ask for
    an instance type the NodePool does not allow, 5 for the one it does."""
    h = Harness()
    h.setup(_pool(requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [SMALL]}]))
    _pending(h, *(pod(cpu="100m", node_selector={"node.kubernetes.io/instance-type": "unknown"}, unschedulable=True)
                  for _ in range(10)))
    _pending(h, *(pod(cpu="100m", node_selector={"node.kubernetes.io/instance-type": SMALL}, unschedulable=True)
                  for _ in range(5)))
    h.provisioner.schedule()
    assert len(h.nodeclaims()) == 1
    assert value(h, "karpenter_scheduler_unschedulable_pods_count", controller="provisioner") == 10


def test_scheduling_duration_is_observed_once_per_scheduling_loop():
    """It("should surface the schedulingDuration metric after executing a scheduling loop")"""
    h = Harness()
    h.setup(_pool())
    _pending(h, *(pod(cpu="100m", unschedulable=True) for _ in range(50)))
    h.provisioner.schedule()
    assert h.nodeclaims()
    assert value(h, "karpenter_scheduler_scheduling_duration_seconds_count", controller="provisioner") == 1
    assert value(h, "karpenter_scheduler_scheduling_duration_seconds_sum", controller="provisioner") > 0
    assert value(h, "karpenter_provisioner_scheduling_duration_seconds_count") == 1


def test_pod_scheduling_decision_seconds_after_a_scheduling_loop():
    """It("should set the PodSchedulerDecisionSeconds metric after a scheduling loop"): three pods seen, the clock
    stepped a minute, one loop: three observations of a minute each, none before and none again."""
    h = Harness()
    h.setup(_pool())
    name = "karpenter_pods_scheduling_decision_duration_seconds"
    for p in (pod(cpu="100m", unschedulable=True) for _ in range(3)):
        _pending(h, p)
        assert not value(h, f"{name}_count")
    h.tick(60)
    h.provisioner.schedule()
    assert value(h, f"{name}_count") == 3
    assert value(h, f"{name}_sum") == pytest.approx(180.0)
    h.provisioner._last_noop = None
    h.provisioner.schedule()  # a pod's first decision only
    assert value(h, f"{name}_count") == 3


# --- pending pods by effective zone (scheduling/suite_test.go, "Pending Pods by Effective Zone Metric") ------

ZONE = "topology.kubernetes.io/zone"
Z1, Z2, Z3 = "test-zone-a", "test-zone-b", "test-zone-c"
APP = {"app": "pod-label"}


def _zonal_pool() -> dict:
    return _pool(consolidate_after="Never", zones=(Z1, Z2, Z3))


def _by_zone(h: Harness) -> dict[str, float]:
    return {s.labels["zone"]: s.value for m in h.karpenter.env.metrics.pending_by_zone.collect() for s in m.samples
            if s.labels["controller"] == "provisioner"}


def _pending_pod(**kw) -> dict:
    return pod(cpu="100m", unschedulable=True, **kw)


def _claim_volume(h: Harness, zones: list[str]) -> None:
    h.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "zone-sc"},
              "provisioner": "disk.example.com", "volumeBindingMode": "WaitForFirstConsumer",
              "allowedTopologies": [{"matchLabelExpressions": [{"key": ZONE, "values": zones}]}]},
             {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "pvc-name", "namespace": "default"},
              "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                       "storageClassName": "zone-sc"}})


VOLUME = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "pvc-name"}}]}


@pytest.mark.parametrize("sc_zones, selector, expected", [
    pytest.param([Z1, Z2], None, "flexible", id="PVC does not restrict pod to a single zone"),
    pytest.param([Z1], None, Z1, id="PVC restricts pod to a single zone"),
    pytest.param([Z2], {ZONE: Z1}, "none", id="PVC restricts pod to no zone"),
])
def test_pending_pods_by_effective_zone_with_volume_constraints(sc_zones, selector, expected):
    """DescribeTable("should report metric correctly for volume constraints")"""
    h = Harness()
    h.setup(_zonal_pool())
    _claim_volume(h, sc_zones)
    _pending(h, _pending_pod(node_selector=selector, **VOLUME))
    h.provisioner.schedule()
    assert _by_zone(h) == {expected: 1}


def _existing(h: Harness, zone: str, **pod_kw) -> None:
    """A running pod on a node in ``zone`` (upstream: provisioned, then the node's state reconciled)."""
    _, n = h.launch_node("default", instance_types=[SMALL],
                         requirements=[{"key": ZONE, "operator": "In", "values": [zone]}])
    assert n["metadata"]["labels"][ZONE] == zone
    h.pod_on(n["metadata"]["name"], cpu="100m", **pod_kw)


TSC = [{"topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": APP},
        "maxSkew": 1}]


def _aff(kind: str, labels: dict) -> dict:
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": labels}, "topologyKey": ZONE}]}}


ZONE_CASES = [
    pytest.param([], [_pending_pod(), _pending_pod()], {"flexible": 2}, id="pods are flexible to zones"),
    pytest.param([], [_pending_pod(node_selector={ZONE: Z2}) for _ in range(3)], {Z2: 3},
                 id="pods are flexible to zones (one zone selected)"),
    pytest.param([], [_pending_pod(node_selector={ZONE: Z1}), _pending_pod(node_selector={ZONE: Z2})], {Z1: 1, Z2: 1},
                 id="multiple pods have different zone constraints"),
    pytest.param([], [_pending_pod(affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [Z1]}]}}]}})],
        {"flexible": 1}, id="pod has preferred zone affinity"),
    pytest.param([(Z1, {})], [_pending_pod(affinity=_aff("podAffinity", APP))], {Z1: 1},
                 id="pods have required pod affinity"),
    pytest.param([(Z1, {}), (Z2, {})], [_pending_pod(affinity=_aff("podAntiAffinity", APP))], {Z3: 1},
                 id="pods have required pod anti-affinity"),
    pytest.param([(Z1, {"topologySpreadConstraints": TSC}), (Z2, {"topologySpreadConstraints": TSC})],
                 [_pending_pod(labels=APP, topologySpreadConstraints=TSC)], {Z3: 1}, id="pods have restricting TSCs"),
    pytest.param([(z, {}) for z in (Z1, Z1, Z2, Z2, Z3, Z3)],
                 [_pending_pod(topologySpreadConstraints=[dict(TSC[0], minDomains=4)])], {"none": 1},
                 id="TSC is unsatisfiable"),
    pytest.param([], [_pending_pod(affinity=_aff("podAffinity", {"nonexistent": "label"}))], {"none": 1},
                 id="pod affinity is unsatisfiable"),
    pytest.param([(Z1, {}), (Z2, {}), (Z3, {})], [_pending_pod(affinity=_aff("podAntiAffinity", APP))], {"none": 1},
                 id="pod anti-affinity is unsatisfiable"),
]


@pytest.mark.parametrize("existing, pending, expected", ZONE_CASES)
def test_pending_pods_by_effective_zone(existing, pending, expected):
    """DescribeTable("should report zone of pods corectly"): existing pods labelled app=pod-label in their zones,
    then one scheduling loop over the pending pods."""
    h = Harness()
    h.setup(_zonal_pool())
    for zone, spec in existing:
        _existing(h, zone, labels=APP, **spec)
    _pending(h, *pending)
    h.provisioner.schedule()
    assert _by_zone(h) == expected


def test_pending_pods_by_effective_zone_keeps_only_the_last_loops_zones():
    """Each loop replaces the controller's series (upstream resets them before counting)."""
    h = Harness()
    h.setup(_zonal_pool())
    _pending(h, _pending_pod(node_selector={ZONE: Z1}))
    h.provisioner.schedule()
    assert _by_zone(h) == {Z1: 1}
    _pending(h, _pending_pod(node_selector={ZONE: Z2}))
    h.provisioner._last_noop = None
    h.provisioner.schedule()
    assert _by_zone(h) == {Z1: 1, Z2: 1}
    for p in h.pods():
        h.delete("Pod", p["metadata"]["name"], "default")
    _pending(h, _pending_pod())
    h.provisioner.schedule()
    assert _by_zone(h) == {"flexible": 1}


# --- the cloud provider's instance types, and what karpy controller serves ---------------------------------


def test_offering_price_estimates_are_exported_for_the_nodepools_instance_types():
    """aws pkg/controllers/metrics (karpenter_cloudprovider_instance_type_offering_price_estimate and _available):
    every offering of every instance type a NodePool may use, read at scrape time through the operator."""
    h = Harness()
    h.setup(_pool(zones=("test-zone-a", "test-zone-b")))
    types = h.disruption.instance_types("default")
    assert SMALL in types
    m = h.karpenter.env.metrics
    for o in types[SMALL].offerings:
        labels = {"instance_type": SMALL, "capacity_type": o.capacity_type, "zone": o.zone}
        assert m.value("karpenter_cloudprovider_instance_type_offering_price_estimate", labels) == o.price
        assert m.value("karpenter_cloudprovider_instance_type_offering_available", labels) == float(o.available)
    assert m.value("karpenter_cloudprovider_instance_type_cpu_cores", {"instance_type": SMALL}) == 4


def test_karpy_controller_serves_the_controllers_metrics_beside_its_own():
    """/metrics: the registry the controllers count into is served with the informer-cache gauges."""
    h = Harness()
    h.setup(_pool())
    _node(h)
    _validated_pass(h)
    served = Metrics()
    served.attach(h.mgr, Logger(h.clock, level="error"), h.karpenter.env.metrics)
    text = served.text().decode()
    assert 'karpenter_voluntary_disruption_decisions_total{consolidation_type="empty",decision="delete",' \
           'reason="empty"} 1.0' in text
    assert "karpenter_cloudprovider_instance_type_offering_price_estimate{" in text
    assert 'karpenter_voluntary_disruption_consolidation_timeouts_total{consolidation_type="multi"} 0.0' in text


# --- NodeClaims deleted by other controllers (upstream's lifecycle, garbage collection, node repair) ---------


def _disrupted(h: Harness, reason: str, capacity: str = "on-demand") -> float | None:
    return value(h, "karpenter_nodeclaims_disrupted_total", reason=reason, nodepool="default", capacity_type=capacity,
                 consolidation_policy="", termination_mode="graceful")


def test_a_launch_refused_for_insufficient_capacity_counts_a_disrupted_nodeclaim():
    """lifecycle/launch.go: insufficient_capacity, without a pod count"""
    h = Harness()
    h.setup(_pool())
    h.cloud.set_availability([SMALL], None, None, False)
    claim = h.create_one(h.nodeclaim(instance_types=[SMALL], labels={"karpenter.sh/capacity-type": "on-demand"}))
    h.reconcile("nodeclaim.lifecycle", claim["metadata"]["name"])
    assert deleting(h.get("NodeClaim", claim["metadata"]["name"]))
    assert _disrupted(h, "insufficient_capacity") == 1
    assert "karpenter_pods_disruption_initiated_total{" not in h.karpenter.env.metrics.text().decode()


def test_a_registration_timeout_counts_a_disrupted_nodeclaim():
    """lifecycle/liveness.go: registration_timeout"""
    h = Harness()
    h.setup(_pool())
    name = h.create_one(h.nodeclaim(instance_types=[SMALL], labels={"karpenter.sh/capacity-type": "on-demand"}))[
        "metadata"]["name"]
    h.reconcile("nodeclaim.lifecycle", name)
    h.tick(900)
    h.reconcile("nodeclaim.lifecycle", name)
    assert deleting(h.get("NodeClaim", name))
    assert _disrupted(h, "registration_timeout") == 1


def test_garbage_collection_counts_a_disrupted_nodeclaim_and_its_pods():
    """nodeclaim/garbagecollection: garbage_collected, with the node's reschedulable pods"""
    h = Harness()
    h.setup(_pool(consolidate_after="Never"))
    c, n = h.launch_node("default", instance_types=[SMALL])
    h.pod_on(n["metadata"]["name"], cpu="100m", owner=RS)
    h.pod_on(n["metadata"]["name"], cpu="100m", owner=DS)
    h.cloud.terminate(c["status"]["providerID"])
    h.make_ready(n["metadata"]["name"], False)
    h.reconcile("nodeclaim.garbagecollection")
    assert deleting(h.get("NodeClaim", c["metadata"]["name"]))
    assert _disrupted(h, "garbage_collected") == 1
    assert value(h, "karpenter_pods_disruption_initiated_total", reason="garbage_collected", nodepool="default",
                 capacity_type="on-demand", consolidation_policy="", termination_mode="graceful") == 1


def test_node_repair_counts_an_unhealthy_disrupted_nodeclaim_and_its_pods():
    """node/health: unhealthy, with the node's reschedulable pods (gate NodeRepair)"""
    from karpy.controllers.env import DEFAULT_FEATURE_GATES, Settings

    h = Harness(settings=Settings(feature_gates={**DEFAULT_FEATURE_GATES, "NodeRepair": True}))
    h.setup(_pool(consolidate_after="Never"))
    for _ in range(4):  # one unhealthy node in five may be repaired
        h.launch_node("default", instance_types=[SMALL])
    c, n = h.launch_node("default", instance_types=[SMALL])
    node = n["metadata"]["name"]
    h.pod_on(node, cpu="100m", owner=RS)
    h.make_ready(node, False)
    wait = h.reconcile("node.health", node)
    assert wait and wait > 0
    h.tick(wait)
    h.reconcile("node.health", node)
    assert deleting(h.get("NodeClaim", c["metadata"]["name"]))
    assert _disrupted(h, "unhealthy") == 1
    assert value(h, "karpenter_pods_disruption_initiated_total", reason="unhealthy", nodepool="default",
                 capacity_type="on-demand", consolidation_policy="", termination_mode="graceful") == 1


def test_cluster_state_node_count_and_synced():
    """state/metrics.go: karpenter_cluster_state_node_count and karpenter_cluster_state_synced"""
    h = Harness()
    h.setup(_pool(consolidate_after="Never"))
    for _ in range(2):
        h.launch_node("default", instance_types=[SMALL])
    m = h.karpenter.env.metrics
    assert m.value("karpenter_cluster_state_node_count") == 2
    assert m.value("karpenter_cluster_state_synced") == 1
    h.create_one(h.nodeclaim(instance_types=[SMALL]))  # not launched yet
    assert m.value("karpenter_cluster_state_synced") == 0
    assert m.value("karpenter_cluster_state_node_count") == 2


def test_a_nodepool_whose_instance_types_fail_leaves_the_others_prices():
    """aws pkg/controllers/metrics: an error for one NodePool does not fail the scrape or suppress the series of the
    others (each NodePool's NodeClass instance types)."""
    h = Harness()
    real = h.provider.get_instance_types

    def failing(np, nodeclass):
        if np["metadata"]["name"] == "broken":
            raise RuntimeError("the cloud API is down")
        return real(np, nodeclass)

    h.provider.get_instance_types = failing
    h.setup(_pool(), nodepool("broken", family=("s",)))
    text = h.karpenter.env.metrics.text().decode()
    assert f'karpenter_cloudprovider_instance_type_cpu_cores{{instance_type="{SMALL}"}} 4.0' in text
    (rec,) = h.logs("getting instance types for metrics")
    assert rec["NodePool"] == {"name": "broken"} and rec["error"] == "the cloud API is down"
