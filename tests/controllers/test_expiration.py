"""NodeClaim expiration (karpy/controllers/expiration.py).

Mirrors upstream pkg/controllers/nodeclaim/expiration/suite_test.go, plus what a user sees end to end:
an expired node's pods get new capacity while it drains, PDBs and do-not-disrupt are honoured by the
drain until the terminationGracePeriod.
"""

from __future__ import annotations

import pytest

from controllers.harness import DO_NOT_DISRUPT, Harness, deleting, nodepool, pdb, pod

EXPIRATION = "nodeclaim.expiration"
IT = "c-4x-amd64-linux"


def test_expire_after_never_does_not_expire(h):
    """It("should not remove the NodeClaims when expiration is disabled")"""
    h.setup(nodepool(expire_after="Never"))
    c, _ = h.launch_node(instance_types=[IT])
    h.tick(365 * 86400)
    assert h.reconcile(EXPIRATION, c["metadata"]["name"]) is None
    assert not deleting(h.get("NodeClaim", c["metadata"]["name"]))


def test_no_expire_after_does_not_expire(h):
    """A NodeClaim without spec.expireAfter never expires."""
    h.setup()
    c, _ = h.launch_node(instance_types=[IT])
    assert "expireAfter" not in c["spec"]
    h.tick(365 * 86400)
    assert h.reconcile(EXPIRATION, c["metadata"]["name"]) is None
    assert not deleting(h.get("NodeClaim", c["metadata"]["name"]))


def test_requeues_for_the_time_left(h):
    """It("should not remove non-expired NodeClaims"),
    It("should return the requeue interval for the time between now and when the nodeClaim expires")"""
    h.setup(nodepool(expire_after="200s"))
    c, _ = h.launch_node(instance_types=[IT])
    h.tick(100)
    assert h.reconcile(EXPIRATION, c["metadata"]["name"]) == pytest.approx(100.0)
    assert not deleting(h.get("NodeClaim", c["metadata"]["name"]))


def test_an_expired_nodeclaim_is_deleted(h):
    """It("should remove nodeclaims that are expired"), It("should delete NodeClaims if the nodeClaim is expired but
    the node isn't"): expiry counts from the NodeClaim's creationTimestamp."""
    h.setup(nodepool(expire_after="30s"))
    c, _ = h.launch_node(instance_types=[IT])
    name = c["metadata"]["name"]
    h.tick(30)
    assert h.reconcile(EXPIRATION, name) is None
    assert deleting(h.get("NodeClaim", name))
    (ev,) = h.events("Expired", involved=name)
    assert ev["message"] == "NodeClaim expired after 30s"


def test_an_expired_nodeclaim_is_expired_once(h):
    """It("shouldn't expire the same NodeClaim multiple times")"""
    h.setup(nodepool(expire_after="30s"))
    c, _ = h.launch_node(instance_types=[IT])
    name = c["metadata"]["name"]
    h.tick(60)
    h.reconcile(EXPIRATION, name)
    h.reconcile(EXPIRATION, name)
    assert len(h.events("Expired", involved=name)) == 1


def test_expiry_uses_the_nodeclaims_own_expire_after(h):
    """Changing the NodePool's expireAfter does not change existing NodeClaims' deadline (it drifts them instead)."""
    h.setup(nodepool(expire_after="1h"))
    c, _ = h.launch_node(instance_types=[IT])
    name = c["metadata"]["name"]
    h.patch("NodePool", "default", {"spec": {"template": {"spec": {"expireAfter": "10m"}}}})
    h.tick(900)
    assert h.reconcile(EXPIRATION, name) == pytest.approx(2700.0)
    assert not deleting(h.get("NodeClaim", name))


def test_expiration_ignores_disruption_budgets_and_do_not_disrupt_nodes(h):
    """Expiration is forceful: budgets of 0 and a do-not-disrupt node annotation do not stop it."""
    h.setup(nodepool(expire_after="30s", budgets=[{"nodes": "0"}]))
    c, n = h.launch_node(instance_types=[IT])
    h.patch("Node", n["metadata"]["name"], {"metadata": {"annotations": {DO_NOT_DISRUPT: "true"}}})
    h.tick(30)
    h.reconcile(EXPIRATION, c["metadata"]["name"])
    assert deleting(h.get("NodeClaim", c["metadata"]["name"]))


def _world_with_expiring_pool(expire_after: str, **np_kw) -> Harness:
    h = Harness(world=True)
    h.setup(nodepool(expire_after=expire_after, **np_kw))
    return h


def test_expired_node_pods_get_new_capacity_before_the_node_goes(h):
    """End to end (controllers + the simulated world): a Deployment of 3 under a maxUnavailable=1 PDB on an
    expiring node. The expired node drains one pod at a time, its pods are placed on a NodeClaim launched while
    it drains, and the old node goes only once they are all running elsewhere."""
    h = _world_with_expiring_pool("10m")
    h.create({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
              "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                       "template": {"metadata": {"labels": {"app": "web"}},
                                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}},
             pdb("web", {"app": "web"}, max_unavailable=1))
    h.run_for(60)
    (first,) = h.nodeclaims()
    old_node = first["status"]["nodeName"]
    h.run_for(660)
    (second,) = h.nodeclaims()
    assert second["metadata"]["name"] != first["metadata"]["name"]
    (expired,) = h.events("Expired")
    assert expired["involvedObject"]["name"] == first["metadata"]["name"]
    assert expired["message"] == "NodeClaim expired after 10m0s"
    (removing,) = [e for e in h.events("RemovingNode") if e["involvedObject"]["name"] == old_node]
    assert expired["firstTimestamp"] <= second["metadata"]["creationTimestamp"] < removing["firstTimestamp"]
    evictions = sorted(e["firstTimestamp"] for e in h.events("Evicted"))
    assert len(evictions) == 3 and len(set(evictions)) == 3  # one at a time (the PDB allows one)
    pods = h.pods()
    assert len(pods) == 3
    assert all(p["spec"]["nodeName"] == second["status"]["nodeName"] and p["status"]["phase"] == "Running"
               for p in pods)


def test_an_expired_node_waits_for_do_not_disrupt_pods_until_its_grace_period(h):
    """Upstream: expiration is forceful but the drain still honours do-not-disrupt, until terminationGracePeriod."""
    h = _world_with_expiring_pool("10m", termination_grace_period="5m")
    h.create(pod("keep", cpu="1", annotations={DO_NOT_DISRUPT: "true"}))
    h.run_for(30)
    (first,) = h.nodeclaims()
    name = first["metadata"]["name"]
    h.run_until(h.now() + 600 - 30 + 60)  # 1 minute past expiry
    c = h.get("NodeClaim", name)
    assert c is not None and deleting(c)
    assert h.get("Pod", "keep", "default") is not None
    h.run_for(300)  # past the 5 minute grace period
    assert h.get("NodeClaim", name) is None
    assert h.get("Pod", "keep", "default") is None
    assert [e["involvedObject"]["name"] for e in h.events("Disrupted")] == ["keep"]
