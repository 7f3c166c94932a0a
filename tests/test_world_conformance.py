"""Upstream behaviours that need objects of a real cluster (docs/conformance.md rows once n/a for the simulated world).

``karpy controller`` runs karpy's controllers against a real API server, where NodeClaims of another Karpenter,
NodeClaims that lost a label, Services, VolumeAttachments, CSINodes, nodes tainted by the node lifecycle controller
and pods deleted with a grace period all arise. Each test creates such objects through the in-memory API the
controllers read (tests/controllers/harness.py), runs one controller, and asserts what upstream's It body asserts.
"""

from __future__ import annotations

import pytest

from controllers.harness import Harness, cond, deleting, nodepool

DISRUPTION = "nodeclaim.disruption"
EXPIRATION = "nodeclaim.expiration"
IT = "c-4x-amd64-linux"
UNMANAGED_REF = {"group": "karpenter.test.sh", "kind": "UnmanagedNodeClass", "name": "default"}
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


@pytest.fixture
def h() -> Harness:
    return Harness()


def _unmanaged_claim(h: Harness, **np_kw) -> str:
    """A launched, initialized NodeClaim of the ``default`` NodePool whose nodeClassRef names a NodeClass kind this
    Karpenter's cloud provider does not support (another Karpenter's NodeClaim)."""
    m = h.nodeclaim(instance_types=[IT], labels={INSTANCE_TYPE_LABEL: IT})
    m["spec"]["nodeClassRef"] = dict(UNMANAGED_REF)
    name = h.create_one(m)["metadata"]["name"]
    t = "2026-01-01T00:00:00Z"
    h.patch("NodeClaim", name, {"status": {"providerID": "test://other/1", "conditions": [
        {"type": t_, "status": "True", "reason": t_, "lastTransitionTime": t}
        for t_ in ("Launched", "Registered", "Initialized")]}}, subresource="status")
    return name


# --- NodeClaims not managed by this Karpenter ------------------------------------------------------------


def test_drift_is_not_marked_on_a_nodeclaim_of_another_karpenter(h):
    """nodeclaim/disruption/drift_test.go Entry("should ignore drift for NodeClaims not managed by this instance of
    Karpenter"): the NodePool's template changed, so its own NodeClaim drifts, the unmanaged one does not."""
    h.setup(nodepool(labels={"team": "a"}))
    own, _ = h.launch_node(instance_types=[IT])
    other = _unmanaged_claim(h)
    h.patch("NodePool", "default", {"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}})
    for name in (own["metadata"]["name"], other):
        h.reconcile(DISRUPTION, name)
    assert cond(h.get("NodeClaim", own["metadata"]["name"]), "Drifted")["status"] == "True"
    assert cond(h.get("NodeClaim", other), "Drifted") is None


def test_consolidatable_is_not_marked_on_a_nodeclaim_of_another_karpenter(h):
    """nodeclaim/disruption/consolidation_test.go It("should ignore NodeClaims not managed by this instance of
    Karpenter"): consolidateAfter passes after the last pod event and the condition stays unknown (absent)."""
    h.setup(nodepool(consolidate_after="30s"))
    other = _unmanaged_claim(h)
    h.patch("NodeClaim", other, {"status": {"lastPodEventTime": "2026-01-01T00:00:00Z"}}, subresource="status")
    h.reconcile(DISRUPTION, other)
    assert cond(h.get("NodeClaim", other), "Consolidatable") is None
    h.tick(60)
    h.reconcile(DISRUPTION, other)
    assert cond(h.get("NodeClaim", other), "Consolidatable") is None
    own, _ = h.launch_node(instance_types=[IT])  # the same NodePool's own NodeClaim does turn consolidatable
    h.tick(60)
    h.reconcile(DISRUPTION, own["metadata"]["name"])
    assert cond(h.get("NodeClaim", own["metadata"]["name"]), "Consolidatable")["status"] == "True"


def test_an_expired_nodeclaim_of_another_karpenter_is_kept(h):
    """nodeclaim/expiration/suite_test.go Entry("should ignore expired NodeClaims that are not managed by this
    Karpenter instance"): expireAfter 30s, 60 s later the managed NodeClaim is deleted, the unmanaged one kept."""
    h.setup(nodepool(expire_after="30s"))
    own, _ = h.launch_node(instance_types=[IT])
    other = _unmanaged_claim(h)
    assert h.get("NodeClaim", other)["spec"]["expireAfter"] == "30s"
    h.tick(60)
    h.reconcile(EXPIRATION, own["metadata"]["name"])
    h.reconcile(EXPIRATION, other)
    assert deleting(h.get("NodeClaim", own["metadata"]["name"]))
    assert not deleting(h.get("NodeClaim", other))
    assert h.events("Expired", involved=other) == []


# --- a NodeClaim without its instance-type label ----------------------------------------------------------


def test_a_nodeclaim_without_the_instance_type_label_drifts_once_an_hour_old(h):
    """nodeclaim/disruption/drift_test.go It("should detect stale instance type drift if the instance type label
    doesn't exist"): two hours after creation the NodeClaim is Drifted (InstanceTypeNotFound); within its first hour
    the instance type is not checked, as upstream."""
    h.setup()
    c, _ = h.launch_node(instance_types=[IT])
    name = c["metadata"]["name"]
    h.patch("NodeClaim", name, {"metadata": {"labels": {INSTANCE_TYPE_LABEL: None}}})
    assert INSTANCE_TYPE_LABEL not in h.get("NodeClaim", name)["metadata"]["labels"]
    h.reconcile(DISRUPTION, name)
    assert cond(h.get("NodeClaim", name), "Drifted") is None
    h.tick(2 * 3600)
    h.reconcile(DISRUPTION, name)
    drifted = cond(h.get("NodeClaim", name), "Drifted")
    assert drifted["status"] == "True" and drifted["reason"] == "InstanceTypeNotFound"
