"""NodeClaim garbage collection (karpy/controllers/garbagecollection.py), after upstream's
pkg/controllers/nodeclaim/garbagecollection suite: a launched NodeClaim whose instance is gone goes."""

from __future__ import annotations

from controllers.harness import Harness, deleting, nodepool

GC = "nodeclaim.garbagecollection"
IT = "c-4x-amd64-linux"


def _lost(h: Harness) -> tuple[str, str]:
    """A launched, registered NodeClaim whose instance the cloud no longer has."""
    h.setup(nodepool())
    c, n = h.launch_node(instance_types=[IT])
    h.cloud.terminate(c["status"]["providerID"])
    return c["metadata"]["name"], n["metadata"]["name"]


def test_a_nodeclaim_whose_instance_is_gone_is_deleted_once_its_node_is_not_ready(h):
    """It("should delete the NodeClaim when the Node is NotReady / there is no Node and the instance is gone")"""
    claim, node = _lost(h)
    h.make_ready(node, False)
    assert h.reconcile(GC) == 120.0
    assert deleting(h.get("NodeClaim", claim)) or h.get("NodeClaim", claim) is None
    assert any(e["involvedObject"]["name"] == claim for e in h.events("GarbageCollected"))


def test_a_ready_node_keeps_its_nodeclaim_whatever_the_cloud_says(h):
    """It("shouldn't delete the NodeClaim when the Node is still Ready")"""
    claim, _ = _lost(h)
    h.reconcile(GC)
    assert not deleting(h.get("NodeClaim", claim))


def test_a_nodeclaim_with_its_instance_is_kept(h):
    h.setup(nodepool())
    c, n = h.launch_node(instance_types=[IT])
    h.make_ready(n["metadata"]["name"], False)
    h.reconcile(GC)
    assert not deleting(h.get("NodeClaim", c["metadata"]["name"]))


def test_a_nodeclaim_without_a_node_whose_instance_is_gone_is_deleted(h):
    h.setup(nodepool())
    c = h.create_one(h.nodeclaim(instance_types=[IT]))
    name = c["metadata"]["name"]
    h.launch(name)
    launched = h.get("NodeClaim", name)
    h.cloud.terminate(launched["status"]["providerID"])
    h.reconcile(GC)
    assert h.get("NodeClaim", name) is None or deleting(h.get("NodeClaim", name))
