"""NodePool limits and nodes on their way out (upstream's nodePoolResources and NewScheduler(nodes.Active())).

Upstream charges a NodePool's limits with the capacity of its nodes that are not marked for deletion: the
capacity launched for the pods of a node being deleted (drift, expiry, a manual delete) is not refused
because the leaving node still counts.
"""

from __future__ import annotations

import pytest

from controllers.harness import DISRUPTED_TAINT, Harness, nodepool, pod

PROVISIONER = "provisioner"
OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": True}


def _leaving_node(h: Harness) -> tuple[dict, str]:
    old, n = h.launch_node(instance_types=["c-8x-amd64-linux"])
    name = n["metadata"]["name"]
    h.pod_on(name, name="w1", cpu="2", owner=OWNER)
    h.pod_on(name, name="w2", cpu="2", owner=OWNER)
    h.patch("Node", name, {"spec": {"taints": list(n["spec"].get("taints") or []) + [dict(DISRUPTED_TAINT)]}})
    h.patch("Node", name, {"metadata": {"finalizers": ["karpenter.sh/termination"]}})
    h.delete("Node", name)
    return old, name


def test_a_node_being_deleted_does_not_count_against_the_limit(h):
    h.setup(nodepool(limits={"cpu": "8"}))
    old, name = _leaving_node(h)
    assert h.reconcile("provisioner.trigger.node", name) == pytest.approx(10.0)
    h.tick(1)
    h.reconcile(PROVISIONER)
    new = [c for c in h.nodeclaims() if c["metadata"]["name"] != old["metadata"]["name"]]
    assert len(new) == 1 and new[0]["spec"]["resources"]["requests"]["pods"] == "2"
    assert h.events("FailedScheduling", involved="w1") == []


def test_a_node_that_stays_still_counts(h):
    h.setup(nodepool(limits={"cpu": "8"}))
    _, n = h.launch_node(instance_types=["c-8x-amd64-linux"])
    h.pod_on(n["metadata"]["name"], name="resident", cpu="7", owner=OWNER)
    h.create(pod("more", cpu="2", unschedulable=True))
    h.reconcile("provisioner.trigger.pod", "default/more")
    h.tick(h.settings.batch_idle)
    h.reconcile(PROVISIONER)
    assert len(h.nodeclaims()) == 1  # the running 8 vCPU node leaves nothing of the 8 vCPU limit
    (ev,) = h.events("FailedScheduling", involved="more")
    assert "exceed limits" in ev["message"]
