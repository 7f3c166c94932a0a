"""Interruption (karpy/controllers/interruption.py): the cloud's interruption notices.

Modelled on upstream's AWS provider pkg/controllers/interruption/suite_test.go: a message arrives (here
from SimulatedCloud.interrupt), the controller reconciles once, the NodeClaim is deleted and Events
name the reason; a spot interruption makes the offering unavailable for a while.
"""

from __future__ import annotations

import pytest

from controllers.harness import (
    CAPACITY_TYPE_LABEL, DO_NOT_DISRUPT, INSTANCE_TYPE_LABEL, ZONE_LABEL, Harness, deleting, labels, nodepool, pod,
)

INTERRUPTION = "interruption"
IT = "c-4x-amd64-linux"


def _interrupt(h: Harness, claim: dict) -> None:
    inst = h.cloud.find(h.get("NodeClaim", claim["metadata"]["name"])["status"]["providerID"])
    h.cloud.interrupt(inst)


def test_a_notice_enqueues_the_controller(h):
    """The cloud's notices reach the controller through its subscription (no polling)."""
    h.setup()
    c, _ = h.launch_node(instance_types=[IT])
    h.clear_queue()
    _interrupt(h, c)
    assert any(ctl is h.controllers[INTERRUPTION] for ctl, _ in h.mgr._queue)


def test_spot_interruption_deletes_the_nodeclaim_with_events(h):
    """It("should delete the NodeClaim when receiving a spot interruption warning")"""
    h.setup(nodepool(capacity=("spot",)))
    c, n = h.launch_node(instance_types=[IT])
    name, node_name = c["metadata"]["name"], n["metadata"]["name"]
    assert labels(c)[CAPACITY_TYPE_LABEL] == "spot"
    _interrupt(h, c)
    h.reconcile(INTERRUPTION)
    assert deleting(h.get("NodeClaim", name))
    (spot,) = h.events("SpotInterrupted", involved=name)
    assert spot["type"] == "Warning" and spot["message"] == "Spot interruption warning was triggered"
    terminating = h.events("TerminatingOnInterruption")
    assert {(e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in terminating} == \
        {("Node", node_name), ("NodeClaim", name)}
    assert all(e["message"] == "Interruption triggered termination for the Node" for e in terminating)


def test_spot_interruption_makes_the_offering_unavailable_for_new_launches(h):
    """The interrupted offering is marked unavailable (3 minutes): the next launch goes elsewhere."""
    h.setup(nodepool(capacity=("spot",)))
    c, _ = h.launch_node(instance_types=[IT])
    zone = labels(c)[ZONE_LABEL]
    _interrupt(h, c)
    h.reconcile(INTERRUPTION)
    assert (IT, zone, "spot") in h.provider.ice
    c2, _ = h.launch_node(instance_types=[IT])
    assert labels(c2)[INSTANCE_TYPE_LABEL] == IT
    assert labels(c2)[ZONE_LABEL] != zone
    # and the unavailability expires
    h.tick(181)
    c3, _ = h.launch_node(instance_types=[IT])
    assert labels(c3)[ZONE_LABEL] == zone


def test_on_demand_instance_stopping_deletes_without_marking_capacity(h):
    """A non-spot notice (instance stopping): InstanceTerminating event, the NodeClaim is deleted, no ICE mark."""
    h.setup()
    c, _ = h.launch_node(instance_types=[IT])
    name = c["metadata"]["name"]
    _interrupt(h, c)
    h.reconcile(INTERRUPTION)
    assert deleting(h.get("NodeClaim", name))
    (ev,) = h.events("InstanceTerminating", involved=name)
    assert ev["message"] == "Instance is terminating"
    assert h.events("SpotInterrupted") == []
    assert not h.provider.ice


def test_notices_for_unknown_instances_are_ignored(h):
    """It("should not delete a NodeClaim that is not managed by this Karpenter") / unknown instance IDs"""
    h.setup()
    c, _ = h.launch_node(instance_types=[IT])
    h.cloud._messages.append({"kind": "SpotInterruption", "providerID": "kwok://nowhere", "instanceType": IT,
                              "zone": "test-zone-a", "capacityType": "spot", "time": h.now()})
    h.reconcile(INTERRUPTION)
    assert not deleting(h.get("NodeClaim", c["metadata"]["name"]))
    assert h.events("TerminatingOnInterruption") == []


def test_a_nodeclaim_already_deleting_is_not_interrupted_again(h):
    """A second notice for a NodeClaim being deleted publishes nothing new."""
    h.setup(nodepool(capacity=("spot",)))
    c, _ = h.launch_node(instance_types=[IT])
    _interrupt(h, c)
    h.reconcile(INTERRUPTION)
    _interrupt(h, c)
    h.reconcile(INTERRUPTION)
    assert len(h.events("SpotInterrupted")) == 1


def test_interruption_ignores_budgets_and_do_not_disrupt(h):
    """Interruption is forceful: a zero budget and a do-not-disrupt node do not hold it."""
    h.setup(nodepool(budgets=[{"nodes": "0"}]))
    c, n = h.launch_node(instance_types=[IT])
    h.patch("Node", n["metadata"]["name"], {"metadata": {"annotations": {DO_NOT_DISRUPT: "true"}}})
    _interrupt(h, c)
    h.reconcile(INTERRUPTION)
    assert deleting(h.get("NodeClaim", c["metadata"]["name"]))


def test_several_notices_are_handled_in_one_pass(h):
    """Messages are drained in a batch: every interrupted NodeClaim goes."""
    h.setup()
    claims = [h.launch_node(instance_types=[IT])[0] for _ in range(3)]
    for c in claims:
        _interrupt(h, c)
    h.reconcile(INTERRUPTION)
    assert all(deleting(h.get("NodeClaim", c["metadata"]["name"])) for c in claims)


def test_interrupted_node_pods_are_replaced_elsewhere(h):
    """End to end with the simulated world: a spot interruption's pods land on a new spot node in another zone."""
    h = Harness(world=True)
    h.setup(nodepool(capacity=("spot",)))
    h.create({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
              "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                       "template": {"metadata": {"labels": {"app": "web"}},
                                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}})
    h.run_for(30)
    (first,) = h.nodeclaims()
    zone, it = labels(first)[ZONE_LABEL], labels(first)[INSTANCE_TYPE_LABEL]
    _interrupt(h, first)
    h.run_for(60)
    (second,) = h.nodeclaims()
    assert second["metadata"]["name"] != first["metadata"]["name"]
    assert labels(second)[CAPACITY_TYPE_LABEL] == "spot"
    assert (labels(second)[INSTANCE_TYPE_LABEL], labels(second)[ZONE_LABEL]) != (it, zone)
    assert all(p["status"]["phase"] == "Running" and p["spec"]["nodeName"] == second["status"]["nodeName"]
               for p in h.pods())
    assert len(h.pods()) == 2
    _ = pod
    _ = pytest
