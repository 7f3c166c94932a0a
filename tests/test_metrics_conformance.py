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
    DO_NOT_DISRUPT, Harness, cond_status, deleting, nodepool,
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
