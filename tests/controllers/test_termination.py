"""Node termination controller (karpy/controllers/termination.py): the karpenter.sh/termination finalizer.

Mirrors upstream pkg/controllers/node/termination/suite_test.go: delete a Node, reconcile the termination
controller, watch pods go through the Eviction API in upstream's order.
"""

from __future__ import annotations

import pytest

from controllers.harness import (
    DISRUPTED_TAINT, DO_NOT_DISRUPT, FINALIZER, Harness, cond_status, deleting, has_taint, labels, node, nodepool,
    owner_ref, pdb,
)
from karpy.controllers.termination import MIN_DRAIN_TIME
from karpy.kube.times import fmt_time

TERMINATION = "node.termination"
IT = "c-8x-amd64-linux"
RS_OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": True}


def _managed(h: Harness, **np_kw) -> tuple[str, str]:
    """A NodePool and one initialized managed node; (NodeClaim name, Node name)."""
    h.setup(nodepool(**np_kw))
    c, n = h.launch_node(instance_types=[IT])
    return c["metadata"]["name"], n["metadata"]["name"]


def _pod_names(h: Harness) -> list[str]:
    return sorted(p["metadata"]["name"] for p in h.pods())


def _blocking_pdb(h: Harness, name: str, selector: dict, healthy: int = 1) -> None:
    """A PDB whose status (as the disruption controller would write it) allows nothing."""
    h.create(pdb(name, selector, max_unavailable=0))
    h.patch("PodDisruptionBudget", name, {"status": {
        "observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": healthy, "desiredHealthy": healthy,
        "expectedPods": healthy}}, "default", subresource="status")


def _daemonset(h: Harness, name: str) -> dict:
    return h.create_one({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "default"},
                         "spec": {"selector": {"matchLabels": {"ds": name}},
                                  "template": {"metadata": {"labels": {"ds": name}}, "spec": {"containers": []}}}})


def test_deleting_a_node_taints_it_deletes_its_nodeclaim_and_removes_the_finalizer(h):
    """It("should delete nodes"), It("should delete nodeclaims associated with nodes")"""
    claim, name = _managed(h)
    h.delete("Node", name)
    h.reconcile(TERMINATION, name)
    assert h.get("Node", name) is not None  # a drain lasts at least MIN_DRAIN_TIME
    assert cond_status(h.get("NodeClaim", claim), "Drained") == "Unknown"
    h.tick(MIN_DRAIN_TIME)
    h.reconcile(TERMINATION, name)
    h.reconcile(TERMINATION, name)
    assert h.get("Node", name) is None
    c = h.get("NodeClaim", claim)
    assert deleting(c)
    assert cond_status(c, "Drained") == "True"
    assert not h.cloud.instances
    h.reconcile("nodeclaim.lifecycle", claim)
    assert h.get("NodeClaim", claim) is None


def test_the_node_is_tainted_disrupted_before_pods_are_evicted(h):
    """It("should evict pods ...") -- the karpenter.sh/disrupted:NoSchedule taint goes on first."""
    _, name = _managed(h)
    _blocking_pdb(h, "hold", {"app": "hold"})
    h.pod_on(name, name="held", labels={"app": "hold"})
    h.delete("Node", name)
    assert h.reconcile(TERMINATION, name) > 0
    n = h.get("Node", name)
    assert has_taint(n, DISRUPTED_TAINT["key"], "NoSchedule")
    assert FINALIZER in n["metadata"]["finalizers"]


def test_a_terminating_node_is_excluded_from_load_balancers(h):
    """It("should exclude nodes from load balancers when terminating")"""
    _, name = _managed(h)
    _blocking_pdb(h, "hold", {"app": "hold"})
    h.pod_on(name, name="held", labels={"app": "hold"})
    h.delete("Node", name)
    h.reconcile(TERMINATION, name)
    assert labels(h.get("Node", name)).get("node.kubernetes.io/exclude-from-external-load-balancers") == "karpenter"


def test_pods_are_evicted_in_upstream_order_one_group_at_a_time(h):
    """It("should evict pods in order and wait until pods are fully deleted"), It("should evict non-critical pods first")"""
    _, name = _managed(h)
    ds = _daemonset(h, "ds")
    h.pod_on(name, name="a-plain", owner=RS_OWNER)
    h.pod_on(name, name="b-daemon", owner=owner_ref(ds))
    h.pod_on(name, name="c-node-critical", priority_class="system-node-critical", owner=RS_OWNER)
    h.pod_on(name, name="d-cluster-critical", priority_class="system-cluster-critical", owner=RS_OWNER)
    h.pod_on(name, name="e-daemon-critical", priority_class="system-node-critical", owner=owner_ref(ds))
    h.delete("Node", name)
    seen = []
    for _ in range(4):
        before = set(_pod_names(h))
        assert h.reconcile(TERMINATION, name) == pytest.approx(1.0)
        seen.append(sorted(before - set(_pod_names(h))))
        assert h.get("Node", name) is not None
    assert seen == [["a-plain"], ["b-daemon"], ["c-node-critical", "d-cluster-critical"], ["e-daemon-critical"]]
    assert [e["message"] for e in h.events("Evicted")] == ["Evicted pod: Forceful Termination"] * 5
    h.tick(MIN_DRAIN_TIME)
    h.reconcile(TERMINATION, name)
    h.reconcile(TERMINATION, name)
    assert h.get("Node", name) is None


def test_eviction_event_carries_the_disruption_reason(h):
    """The Evicted event says why: the NodeClaim's DisruptionReason condition (upstream evictionReason)."""
    claim, name = _managed(h)
    c = h.get("NodeClaim", claim)
    st = dict(c["status"])
    st["conditions"] = list(st["conditions"]) + [{"type": "DisruptionReason", "status": "True", "reason": "Drifted",
                                                   "message": "Drifted", "lastTransitionTime": fmt_time(h.now())}]
    h.patch("NodeClaim", claim, {"status": st}, subresource="status")
    h.pod_on(name, name="p", owner=RS_OWNER)
    h.delete("Node", name)
    h.reconcile(TERMINATION, name)
    (ev,) = h.events("Evicted", involved="p")
    assert ev["message"] == "Evicted pod: Drifted"
    assert ev["involvedObject"]["kind"] == "Pod"


@pytest.mark.parametrize("toleration", [
    {"key": "karpenter.sh/disrupted", "operator": "Equal", "value": "", "effect": "NoSchedule"},
    {"key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoSchedule"},
    {"operator": "Exists"},
], ids=["equal", "exists", "tolerate-everything"])
def test_pods_tolerating_the_disrupted_taint_are_not_evicted(h, toleration):
    """It("should not evict pods that tolerate karpenter disruption taint with equal/exists operator")"""
    _, name = _managed(h)
    h.pod_on(name, name="evict-me", owner=RS_OWNER)
    h.pod_on(name, name="skip-me", tolerations=[toleration], owner=RS_OWNER)
    h.delete("Node", name)
    h.reconcile(TERMINATION, name)
    h.tick(MIN_DRAIN_TIME)
    h.reconcile(TERMINATION, name)
    h.reconcile(TERMINATION, name)
    assert _pod_names(h) == ["skip-me"]
    assert h.get("Node", name) is None
    assert [e["involvedObject"]["name"] for e in h.events("Evicted")] == ["evict-me"]


def test_pods_tolerating_the_unschedulable_taint_are_evicted(h):
    """It("should evict pods that tolerate the node.kubernetes.io/unschedulable taint")"""
    _, name = _managed(h)
    h.pod_on(name, name="p", owner=RS_OWNER,
             tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}])
    h.delete("Node", name)
    h.reconcile(TERMINATION, name)
    assert _pod_names(h) == []


def test_pods_without_owner_and_terminal_pods_do_not_block(h):
    """It("should delete nodes that have pods without an ownerRef"), It("should delete nodes with terminal pods")"""
    _, name = _managed(h)
    h.pod_on(name, name="orphan")
    h.pod_on(name, name="done")
    h.set_pod_phase("done", "Succeeded")
    h.pod_on(name, name="failed")
    h.set_pod_phase("failed", "Failed")
    h.delete("Node", name)
    h.reconcile(TERMINATION, name)
    h.tick(MIN_DRAIN_TIME)
    h.reconcile(TERMINATION, name)
    h.reconcile(TERMINATION, name)
    assert h.get("Node", name) is None
    assert [e["involvedObject"]["name"] for e in h.events("Evicted")] == ["orphan"]


def test_static_pods_are_not_evicted(h):
    """It("should not evict static pods")"""
    _, name = _managed(h)
    n = h.get("Node", name)
    h.pod_on(name, name="mirror", owner={"apiVersion": "v1", "kind": "Node", "name": name,
                                        "uid": n["metadata"]["uid"], "controller": True})
    h.pod_on(name, name="normal", owner=RS_OWNER)
    h.delete("Node", name)
    h.reconcile(TERMINATION, name)
    h.tick(MIN_DRAIN_TIME)
    h.reconcile(TERMINATION, name)
    h.reconcile(TERMINATION, name)
    assert h.get("Node", name) is None
    assert [e["involvedObject"]["name"] for e in h.events("Evicted")] == ["normal"]


def test_a_pdb_blocks_eviction_and_the_node_waits(h):
    """It("should fail to evict pods that violate a PDB")"""
    _, name = _managed(h)
    _blocking_pdb(h, "hold", {"app": "hold"})
    h.pod_on(name, name="held", labels={"app": "hold"}, owner=RS_OWNER)
    h.delete("Node", name)
    for _ in range(3):
        assert h.reconcile(TERMINATION, name) == pytest.approx(10.0)
        h.tick(10)
    assert _pod_names(h) == ["held"]
    assert h.get("Node", name) is not None
    evs = h.events("FailedDraining", involved=name)
    assert [e["message"] for e in evs] == ["Failed to drain node, evicting pod violates a PDB (Pod=default/held)"]
    assert evs[0]["type"] == "Warning"
    # the PDB allows it now
    h.patch("PodDisruptionBudget", "hold", {"status": {"disruptionsAllowed": 1}}, "default", subresource="status")
    h.reconcile(TERMINATION, name)
    h.reconcile(TERMINATION, name)
    assert h.get("Node", name) is None


def test_a_node_held_by_two_pdbs_says_so_once_in_two_minutes(h):
    """Upstream deduplicates FailedDraining on the node alone for 2 minutes: the first pod a PDB holds is named,
    the other pod held at the same time is not, until the window has passed."""
    _, name = _managed(h)
    for app in ("a", "b"):
        _blocking_pdb(h, f"hold-{app}", {"app": app})
        h.pod_on(name, name=f"held-{app}", labels={"app": app}, owner=RS_OWNER)
    h.delete("Node", name)
    for _ in range(3):
        h.reconcile(TERMINATION, name)
        h.tick(10)
    assert _pod_names(h) == ["held-a", "held-b"]
    said = [e["message"] for e in h.events("FailedDraining", involved=name)]
    assert said == ["Failed to drain node, evicting pod violates a PDB (Pod=default/held-a)"]
    h.tick(120)
    h.reconcile(TERMINATION, name)
    said = [e["message"] for e in h.events("FailedDraining", involved=name)]
    assert len(said) == 2 and said[1].startswith("Failed to drain node, evicting pod violates a PDB (Pod=default/held-")


def test_a_pod_under_two_pdbs_is_not_evicted(h):
    """The Eviction API answers 500 for a pod with two PDBs: upstream waits and says so."""
    _, name = _managed(h)
    for n_ in ("one", "two"):
        h.create(pdb(n_, {"app": "x"}, max_unavailable=1))
        h.patch("PodDisruptionBudget", n_, {"status": {"observedGeneration": 1, "disruptionsAllowed": 1,
                                                        "currentHealthy": 1, "desiredHealthy": 0}}, "default",
                subresource="status")
    h.pod_on(name, name="x", labels={"app": "x"}, owner=RS_OWNER)
    h.delete("Node", name)
    h.reconcile(TERMINATION, name)
    assert _pod_names(h) == ["x"]
    (ev,) = h.events("FailedDraining", involved=name)
    assert ev["message"] == "Failed to drain node, eviction does not support multiple PDBs (Pod=default/x)"


def test_do_not_disrupt_pods_are_waited_on(h):
    """A karpenter.sh/do-not-disrupt pod is not evicted (upstream IsEvictable), the node waits."""
    _, name = _managed(h)
    h.pod_on(name, name="dnd", annotations={DO_NOT_DISRUPT: "true"}, owner=RS_OWNER)
    h.pod_on(name, name="other", owner=RS_OWNER)
    h.delete("Node", name)
    h.reconcile(TERMINATION, name)
    h.reconcile(TERMINATION, name)
    assert _pod_names(h) == ["dnd"]
    assert h.get("Node", name) is not None
    assert any("do-not-disrupt" in e["message"] for e in h.events("FailedDraining", involved=name))


def test_termination_grace_period_deletes_blocked_pods_at_the_deadline(h):
    """It("should preemptively delete pods to satisfy their terminationGracePeriodSeconds"): past the
    NodeClaim's terminationGracePeriod, PDBs and do-not-disrupt are bypassed."""
    claim, name = _managed(h, termination_grace_period="5m")
    _blocking_pdb(h, "hold", {"app": "hold"})
    h.pod_on(name, name="held", labels={"app": "hold"}, owner=RS_OWNER)
    h.pod_on(name, name="dnd", annotations={DO_NOT_DISRUPT: "true"}, owner=RS_OWNER)
    h.delete("NodeClaim", claim)
    h.reconcile("nodeclaim.lifecycle", claim)  # stamps the deadline, deletes the Node
    deadline = h.now() + 300
    assert h.reconcile(TERMINATION, name) == pytest.approx(10.0)
    h.tick(265)
    # wakes up when the pods' default 30 s grace period would otherwise run past the deadline
    assert h.reconcile(TERMINATION, name) == pytest.approx(5.0)
    assert _pod_names(h) == ["dnd", "held"]
    h.tick(5)
    h.reconcile(TERMINATION, name)
    assert _pod_names(h) == []
    msgs = {e["involvedObject"]["name"]: e["message"] for e in h.events("Disrupted")}
    assert set(msgs) == {"dnd", "held"}
    assert fmt_time(deadline) in msgs["held"] and "bypasses the PDB" in msgs["held"]
    h.reconcile(TERMINATION, name)
    assert h.get("Node", name) is None


def test_pods_are_deleted_early_enough_for_their_own_grace_period(h):
    """It("should only delete pods when their terminationGracePeriodSeconds is less than the the node's remaining
    terminationGracePeriod"): node TGP 300 s, pod TGS 60 s -> deleted at 240 s, not at 300 s."""
    claim, name = _managed(h, termination_grace_period="5m")
    h.pod_on(name, name="dnd", annotations={DO_NOT_DISRUPT: "true"}, owner=RS_OWNER,
             terminationGracePeriodSeconds=60)
    h.delete("NodeClaim", claim)
    h.reconcile("nodeclaim.lifecycle", claim)
    h.tick(90)
    h.reconcile(TERMINATION, name)
    assert _pod_names(h) == ["dnd"]
    h.tick(155)  # 245 s: 55 s left, less than the pod's 60 s
    h.reconcile(TERMINATION, name)
    assert _pod_names(h) == []


def test_a_notready_node_without_an_instance_is_released_without_draining(h):
    """It("should delete nodes with no underlying instance even if not fully drained")"""
    claim, name = _managed(h)
    _blocking_pdb(h, "hold", {"app": "hold"})
    h.pod_on(name, name="held", labels={"app": "hold"}, owner=RS_OWNER)
    h.make_ready(name, False)
    h.cloud.terminate(h.get("NodeClaim", claim)["status"]["providerID"])
    h.delete("Node", name)
    assert h.reconcile(TERMINATION, name) is None
    assert h.get("Node", name) is None


def test_a_ready_node_without_an_instance_is_still_drained(h):
    """It("should not delete nodes with no underlying instance if the node is still Ready")"""
    claim, name = _managed(h)
    _blocking_pdb(h, "hold", {"app": "hold"})
    h.pod_on(name, name="held", labels={"app": "hold"}, owner=RS_OWNER)
    h.cloud.terminate(h.get("NodeClaim", claim)["status"]["providerID"])
    h.delete("Node", name)
    h.reconcile(TERMINATION, name)
    assert h.get("Node", name) is not None


def test_nodes_without_the_karpenter_finalizer_are_ignored(h):
    """It("should ignore nodes not managed by this Karpenter instance")"""
    h.setup()
    h.create(node("byo"))
    h.patch("Node", "byo", {"metadata": {"finalizers": ["example.com/keep"]}})
    h.pod_on("byo", name="p", owner=RS_OWNER)
    h.delete("Node", "byo")
    assert h.reconcile(TERMINATION, "byo") is None
    n = h.get("Node", "byo")
    assert not has_taint(n, DISRUPTED_TAINT["key"])
    assert _pod_names(h) == ["p"]


def test_a_karpenter_node_without_a_nodeclaim_is_drained_and_released(h):
    """It("should delete nodes without nodeclaims")"""
    h.setup()
    h.create(node("orphan-node", provider_id="kwok://orphan-node"))
    h.patch("Node", "orphan-node", {"metadata": {"finalizers": [FINALIZER]}})
    h.pod_on("orphan-node", name="p", owner=RS_OWNER)
    h.delete("Node", "orphan-node")
    h.reconcile(TERMINATION, "orphan-node")
    h.tick(MIN_DRAIN_TIME)
    h.reconcile(TERMINATION, "orphan-node")
    h.reconcile(TERMINATION, "orphan-node")
    assert h.get("Node", "orphan-node") is None
    assert _pod_names(h) == []


def test_draining_lasts_at_least_the_minimum_drain_time(h):
    """It("should not finish draining until minDrainTime has passed") (upstream MinDrainTime = 5 s)."""
    claim, name = _managed(h)
    h.delete("Node", name)
    assert h.reconcile(TERMINATION, name) is not None
    assert h.get("Node", name) is not None
    c = h.get("NodeClaim", claim)
    assert cond_status(c, "Drained") == "Unknown"
    h.tick(3)
    h.reconcile(TERMINATION, name)
    assert h.get("Node", name) is not None
    h.tick(5)
    h.reconcile(TERMINATION, name)
    h.reconcile(TERMINATION, name)
    assert h.get("Node", name) is None
