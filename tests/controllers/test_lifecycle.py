"""NodeClaim lifecycle controller (karpy/controllers/lifecycle.py), one reconcile at a time.

Mirrors upstream pkg/controllers/nodeclaim/lifecycle/{suite,launch,registration,initialization,liveness,
termination}_test.go: create a NodeClaim, reconcile the lifecycle controller, play kubelet by hand.
"""

from __future__ import annotations

import pytest

from karpy.controllers.termination import MIN_DRAIN_TIME
from controllers.harness import (
    FINALIZER, INSTANCE_TYPE_LABEL, ZONE_LABEL, CAPACITY_TYPE_LABEL, Harness, annotations, cond, cond_status,
    deleting, finalizers, labels, nodepool, taints,
)

LIFECYCLE = "nodeclaim.lifecycle"
IT = "c-4x-amd64-linux"
STARTUP = {"key": "example.com/agent-not-ready", "effect": "NoSchedule"}
TAINT = {"key": "example.com/team", "value": "a", "effect": "NoSchedule"}


def _new_claim(h: Harness, **kw) -> str:
    kw.setdefault("instance_types", [IT])
    return h.create_one(h.nodeclaim(**kw))["metadata"]["name"]


def test_adds_the_termination_finalizer(h):
    """It("should add the finalizer if it doesn't exist")"""
    h.setup()
    name = _new_claim(h)
    h.reconcile(LIFECYCLE, name)
    assert FINALIZER in finalizers(h.get("NodeClaim", name))


def test_launch_sets_launched_and_resolves_the_offering(h):
    """It("should add the Launched status condition after creating the NodeClaim")"""
    h.setup()
    name = _new_claim(h)
    h.reconcile(LIFECYCLE, name)
    c = h.get("NodeClaim", name)
    assert cond_status(c, "Launched") == "True"
    assert c["status"]["providerID"] == f"kwok://{name}"
    assert c["status"]["capacity"]["cpu"] == "4"
    assert c["status"]["allocatable"]["cpu"] == "3900m"  # kwok's 100m kube-reserved
    assert labels(c)[INSTANCE_TYPE_LABEL] == IT
    assert labels(c)[CAPACITY_TYPE_LABEL] == "on-demand"
    assert labels(c)[ZONE_LABEL].startswith("test-zone-")
    assert cond_status(c, "Registered") == "Unknown" and cond(c, "Registered")["reason"] == "NodeNotFound"
    assert cond_status(c, "Ready") == "Unknown"
    (ev,) = h.events("Launched", involved=name)
    assert ev["message"].startswith(f"launched {IT} (on-demand, ")
    assert name in {i.nodeclaim for i in h.cloud.instances.values()}


def test_insufficient_capacity_deletes_the_nodeclaim(h):
    """It("should delete the nodeclaim if InsufficientCapacity is returned from the cloudprovider")"""
    h.setup()
    h.cloud.set_availability([IT], None, None, False)
    name = _new_claim(h)
    h.reconcile(LIFECYCLE, name)
    c = h.get("NodeClaim", name)
    assert c is not None and deleting(c)
    assert cond_status(c, "Launched") != "True"
    assert [e["message"] for e in h.events("LaunchFailed", involved=name)] == [
        "InsufficientCapacityError: all requested instance types were unavailable during launch"]
    # the finalizer goes at once: nothing was launched
    h.reconcile(LIFECYCLE, name)
    assert h.get("NodeClaim", name) is None
    assert not h.cloud.instances


def test_registration_syncs_labels_annotations_taints_owner_and_finalizer_to_the_node(h):
    """It("should sync the labels/annotations/taints to the Node when the Node comes online"),
    It("should add the owner reference to the Node when the Node comes online"),
    It("should sync the karpenter.sh/registered label to the Node and remove the karpenter.sh/unregistered taint")"""
    h.setup(nodepool(labels={"team": "a"}, annotations={"example.com/note": "x"}, taints=[TAINT]))
    name = _new_claim(h)
    h.reconcile(LIFECYCLE, name)
    n = h.register(name)
    assert any(t["key"] == "karpenter.sh/unregistered" for t in taints(n))
    h.reconcile(LIFECYCLE, name)
    c, n = h.get("NodeClaim", name), h.get("Node", name)
    assert cond_status(c, "Registered") == "True"
    assert c["status"]["nodeName"] == name
    assert labels(n)["karpenter.sh/registered"] == "true"
    assert labels(n)["team"] == "a" and labels(n)["karpenter.sh/nodepool"] == "default"
    assert annotations(n)["example.com/note"] == "x"
    assert [t for t in taints(n) if t["key"] == "karpenter.sh/unregistered"] == []
    assert TAINT in taints(n)
    assert FINALIZER in finalizers(n)
    (owner,) = n["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["blockOwnerDeletion"]) == \
        ("NodeClaim", name, c["metadata"]["uid"], True)
    assert [e["involvedObject"]["name"] for e in h.events("Registered")] == [name]


def test_a_condition_turning_true_drops_the_message_of_its_unknown_state(h):
    """operatorpkg's SetTrue: Status True, Reason = the type, Message "" (what kubectl describe shows)."""
    h.setup()
    c, _ = h.launch_node(instance_types=[IT])
    for t in ("Launched", "Registered", "Initialized", "Ready"):
        assert cond_status(c, t) == "True"
        assert not cond(c, t).get("message"), (t, cond(c, t).get("message"))


def test_startup_taints_are_synced_once_and_not_restored_after_removal(h):
    """It("should sync the startupTaints to the Node when the Node comes online"),
    It("should not re-sync the startupTaints to the Node when the startupTaints are removed")"""
    h.setup(nodepool(startup_taints=[STARTUP]))
    name = _new_claim(h)
    h.reconcile(LIFECYCLE, name)
    h.register(name)
    h.reconcile(LIFECYCLE, name)
    assert STARTUP in taints(h.get("Node", name))
    h.make_ready(name)
    h.remove_taint(name, STARTUP["key"])
    h.patch("Node", name, {"metadata": {"labels": {"example.com/touched": "1"}}})
    h.reconcile(LIFECYCLE, name)
    h.reconcile(LIFECYCLE, name)
    assert STARTUP not in taints(h.get("Node", name))


def test_not_initialized_while_the_node_is_not_ready(h):
    """It("should not consider the Node to be initialized when the status of the Node is NotReady")"""
    h.setup()
    c, n = h.launch_node(instance_types=[IT], ready=False)
    name = c["metadata"]["name"]
    assert cond_status(c, "Initialized") == "Unknown"
    assert cond(c, "Initialized")["reason"] == "NodeNotReady"
    assert cond_status(c, "Ready") == "Unknown"
    assert "karpenter.sh/initialized" not in labels(n)
    h.make_ready(name)
    h.reconcile(LIFECYCLE, name)
    c, n = h.get("NodeClaim", name), h.get("Node", name)
    assert cond_status(c, "Initialized") == "True" and cond_status(c, "Ready") == "True"
    assert labels(n)["karpenter.sh/initialized"] == "true"
    assert [e["involvedObject"]["name"] for e in h.events("Initialized")] == [name]


def test_not_initialized_until_startup_taints_are_removed(h):
    """It("should not consider the Node to be initialized when all startupTaints aren't removed"),
    It("should consider the Node to be initialized once the startupTaints are removed")"""
    h.setup(nodepool(startup_taints=[STARTUP]))
    name = _new_claim(h)
    h.reconcile(LIFECYCLE, name)
    h.register(name)
    h.reconcile(LIFECYCLE, name)
    h.make_ready(name)
    h.reconcile(LIFECYCLE, name)
    c = h.get("NodeClaim", name)
    assert cond_status(c, "Initialized") == "Unknown"
    assert cond(c, "Initialized")["reason"] == "StartupTaintsExist"
    assert "example.com/agent-not-ready:NoSchedule" in cond(c, "Initialized")["message"]
    h.remove_taint(name, STARTUP["key"])
    h.reconcile(LIFECYCLE, name)
    assert cond_status(h.get("NodeClaim", name), "Initialized") == "True"


def test_not_initialized_while_a_known_ephemeral_taint_is_on_the_ready_node(h):
    """It("should not consider the Node to be initialized when all ephemeral taints aren't removed"),
    It("should consider the Node to be initialized once all ephemeral taints are removed"): a Node Ready before
    kube-controller-manager has taken node.kubernetes.io/not-ready off it is not initialized yet, so the
    provisioner keeps treating it as a node coming up instead of holding that taint against the pods meant for it"""
    h.setup()
    name = _new_claim(h)
    h.reconcile(LIFECYCLE, name)
    h.register(name)
    h.reconcile(LIFECYCLE, name)
    kept = [t for t in taints(h.get("Node", name)) if t.get("key") != "node.kubernetes.io/not-ready"]
    h.patch("Node", name, {"spec": {"taints": kept + [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]}})
    h.make_ready(name)
    h.reconcile(LIFECYCLE, name)
    c = h.get("NodeClaim", name)
    assert cond_status(c, "Initialized") == "Unknown"
    assert cond(c, "Initialized")["reason"] == "KnownEphemeralTaintsExist"
    assert cond(c, "Initialized")["message"] == 'KnownEphemeralTaint "node.kubernetes.io/not-ready:NoSchedule" still exists'
    assert "karpenter.sh/initialized" not in labels(h.get("Node", name))
    h.remove_taint(name, "node.kubernetes.io/not-ready")
    h.reconcile(LIFECYCLE, name)
    assert cond_status(h.get("NodeClaim", name), "Initialized") == "True"


def test_not_initialized_until_requested_extended_resources_are_registered(h):
    """It("should not consider the Node to be initialized when all requested resources aren't registered"),
    It("should consider the node to be initialized once all the resources are registered")"""
    h.setup()
    name = _new_claim(h, spec={"resources": {"requests": {"cpu": "1", "example.com/widget": "1"}}})
    h.reconcile(LIFECYCLE, name)
    h.register(name)
    h.reconcile(LIFECYCLE, name)
    h.make_ready(name)
    h.reconcile(LIFECYCLE, name)
    c = h.get("NodeClaim", name)
    assert cond_status(c, "Initialized") == "Unknown"
    assert cond(c, "Initialized")["reason"] == "ResourceNotRegistered"
    # the device plugin registers the resource
    n = h.get("Node", name)
    st = dict(n["status"])
    st["allocatable"] = {**st["allocatable"], "example.com/widget": "1"}
    h.patch("Node", name, {"status": st}, subresource="status")
    h.reconcile(LIFECYCLE, name)
    assert cond_status(h.get("NodeClaim", name), "Initialized") == "True"


def test_registration_timeout_deletes_a_nodeclaim_whose_node_never_registers(h):
    """Liveness: a NodeClaim not registered 15 minutes after launch is deleted (upstream registrationTTL)."""
    h.setup()
    name = _new_claim(h)
    assert h.reconcile(LIFECYCLE, name) == pytest.approx(900.0)
    h.tick(600)
    assert h.reconcile(LIFECYCLE, name) == pytest.approx(300.0)
    assert not deleting(h.get("NodeClaim", name))
    h.tick(300)
    h.reconcile(LIFECYCLE, name)
    assert deleting(h.get("NodeClaim", name))
    (ev,) = h.events("RegistrationTimeout", involved=name)
    assert ev["type"] == "Warning"
    # finalization terminates the instance that never registered
    h.reconcile(LIFECYCLE, name)
    h.reconcile(LIFECYCLE, name)
    assert h.get("NodeClaim", name) is None
    assert not h.cloud.instances


def test_a_registered_nodeclaim_is_not_deleted_past_the_registration_timeout(h):
    """It("shouldn't delete the nodeClaim when the node has registered past the registration timeout")"""
    h.setup()
    c, _ = h.launch_node(instance_types=[IT], ready=False)
    h.tick(3600)
    assert h.reconcile(LIFECYCLE, c["metadata"]["name"]) is None
    assert not deleting(h.get("NodeClaim", c["metadata"]["name"]))


def test_finalization_deletes_the_node_then_the_instance_then_the_finalizer(h):
    """It("should not delete the NodeClaim until all the Nodes are removed")"""
    h.setup()
    c, n = h.launch_node(instance_types=[IT])
    name = c["metadata"]["name"]
    h.delete("NodeClaim", name)
    h.reconcile(LIFECYCLE, name)
    assert deleting(h.get("Node", name))
    assert h.get("NodeClaim", name) is not None  # waits on the Node
    assert FINALIZER in finalizers(h.get("NodeClaim", name))
    h.reconcile(LIFECYCLE, name)
    assert h.get("NodeClaim", name) is not None
    # the Node's own finalizer drains it (for at least the minimum drain time) and lets it go
    h.reconcile("node.termination", name)
    h.tick(MIN_DRAIN_TIME)
    h.reconcile("node.termination", name)
    h.reconcile("node.termination", name)
    assert h.get("Node", name) is None
    h.reconcile(LIFECYCLE, name)
    assert h.get("NodeClaim", name) is None
    assert not h.cloud.instances


def test_a_nodeclaim_that_never_launched_is_finalized_without_touching_the_cloud(h):
    """It("should not call Delete() on the CloudProvider if the NodeClaim hasn't been launched yet")"""
    h.setup()
    other, _ = h.launch_node(instance_types=[IT])
    name = _new_claim(h)
    h.patch("NodeClaim", name, {"metadata": {"finalizers": [FINALIZER]}})
    h.delete("NodeClaim", name)
    h.reconcile(LIFECYCLE, name)
    assert h.get("NodeClaim", name) is None
    assert len(h.cloud.instances) == 1  # the other instance is untouched
    assert h.get("Node", other["metadata"]["name"]) is not None


def test_termination_grace_period_is_stamped_as_an_annotation_on_deletion(h):
    """It("should annotate the node if the NodeClaim has a terminationGracePeriod")"""
    h.setup(nodepool(termination_grace_period="5m"))
    c, _ = h.launch_node(instance_types=[IT])
    name = c["metadata"]["name"]
    assert c["spec"]["terminationGracePeriod"] == "5m"
    h.tick(7)
    h.delete("NodeClaim", name)
    deleted_at = h.now()
    h.reconcile(LIFECYCLE, name)
    ann = annotations(h.get("NodeClaim", name))
    from karpy.kube.times import parse_time

    assert parse_time(ann["karpenter.sh/nodeclaim-termination-timestamp"]) == deleted_at + 300
    (ev,) = h.events("TerminationGracePeriodExpiring", involved=name)
    assert ev["message"] == f"All pods will be deleted by {ann['karpenter.sh/nodeclaim-termination-timestamp']}"


def test_no_termination_annotation_without_a_termination_grace_period(h):
    """It("should not annotate the node if the NodeClaim has no terminationGracePeriod")"""
    h.setup()
    c, _ = h.launch_node(instance_types=[IT])
    name = c["metadata"]["name"]
    h.delete("NodeClaim", name)
    h.reconcile(LIFECYCLE, name)
    assert "karpenter.sh/nodeclaim-termination-timestamp" not in annotations(h.get("NodeClaim", name))


def test_an_existing_termination_annotation_is_kept(h):
    """It("should not change the annotation if the NodeClaim has a terminationGracePeriod and the annotation already exists")"""
    h.setup(nodepool(termination_grace_period="5m"))
    c, _ = h.launch_node(instance_types=[IT])
    name = c["metadata"]["name"]
    h.patch("NodeClaim", name, {"metadata": {"annotations": {
        "karpenter.sh/nodeclaim-termination-timestamp": "2024-04-01T12:00:00-05:00"}}})
    h.delete("NodeClaim", name)
    h.reconcile(LIFECYCLE, name)
    assert annotations(h.get("NodeClaim", name))["karpenter.sh/nodeclaim-termination-timestamp"] == \
        "2024-04-01T12:00:00-05:00"


def test_a_stale_cache_never_launches_a_nodeclaim_twice(h):
    """Against a real API server the informer's copy lags the controller's own writes: a second reconcile that
    still sees the NodeClaim unlaunched (its Node's event came first) must not launch a second instance, nor
    log it twice (upstream's launch remembers each launch by UID for the same reason)."""
    h.setup()
    name = _new_claim(h)
    lc = h.controllers[LIFECYCLE]
    h.mgr.pump()
    lc.reconcile(name)
    h.mgr._feed.clear()  # the watch events of its own writes have not arrived: the cache still says unlaunched
    assert cond_status(h.mgr.get("NodeClaim", name), "Launched") != "True"
    lc.reconcile(name)
    assert [i.nodeclaim for i in h.cloud.instances.values()].count(name) == 1
    assert len(h.events("Launched", involved=name)) == 1
    c = h.get("NodeClaim", name)
    assert cond_status(c, "Launched") == "True" and c["status"]["providerID"] == f"kwok://{name}"


def test_a_stale_cache_past_our_own_write_reuses_the_launch(h):
    """Even when the controller's own write is lost (the status patch failed), a NodeClaim is launched once
    within a minute: the cloud's answer is remembered by UID."""
    h.setup()
    name = _new_claim(h)
    lc = h.controllers[LIFECYCLE]
    calls = []
    create = lc.env.cloud.create
    lc.env.cloud.create = lambda claim: calls.append(claim["metadata"]["name"]) or create(claim)
    h.mgr.pump()
    lc.reconcile(name)
    h.mgr._feed.clear()
    lc._written.clear()
    lc.reconcile(name)
    assert calls == [name]  # a real cloud would have made a second instance
    assert cond_status(h.get("NodeClaim", name), "Launched") == "True"
