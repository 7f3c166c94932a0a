"""NodePool status (karpy/controllers/nodepool.py): counters, readiness, the template hash.

Mirrors upstream pkg/controllers/nodepool/{counter,readiness,hash}/suite_test.go.
"""

from __future__ import annotations

import pytest

from karpy.controllers.termination import MIN_DRAIN_TIME
from controllers.harness import Harness, annotations, cond, cond_status, nodeclass, nodepool

STATUS = "nodepool.status"
IT = "c-4x-amd64-linux"  # 4 cpu, 8Gi, 64 pods, 20Gi ephemeral-storage


def _np(h: Harness, name: str = "default") -> dict:
    h.reconcile(STATUS, name)
    return h.get("NodePool", name)


# --- hash ---------------------------------------------------------------------------------------


def test_the_template_hash_is_stamped_on_the_nodepool(h):
    """Upstream nodepool/hash: karpenter.sh/nodepool-hash and karpenter.sh/nodepool-hash-version annotations."""
    h.setup()
    ann = annotations(_np(h))
    # karpy's own hash version: its hashes are not upstream's, so the version must not be upstream's "v3"
    assert ann["karpenter.sh/nodepool-hash-version"] == "karpy-v1"
    assert len(ann["karpenter.sh/nodepool-hash"]) > 0


def _upstream_stamped(h: Harness, claim: dict, drifted: bool = False) -> None:
    """Make the NodePool and a NodeClaim look as upstream Karpenter left them: its own hash and version "v3"."""
    upstream = {"karpenter.sh/nodepool-hash": "12345678901234567890", "karpenter.sh/nodepool-hash-version": "v3"}
    h.patch("NodePool", "default", {"metadata": {"annotations": upstream}})
    h.patch("NodeClaim", claim["metadata"]["name"], {"metadata": {"annotations": upstream}})
    if drifted:
        c = h.get("NodeClaim", claim["metadata"]["name"])
        conds = [*((c.get("status") or {}).get("conditions") or ()),
                 {"type": "Drifted", "status": "True", "reason": "NodePoolDrifted", "message": "",
                  "lastTransitionTime": "2026-01-01T00:00:00Z"}]
        h.patch("NodeClaim", c["metadata"]["name"], {"status": {"conditions": conds}}, subresource="status")


def test_nodeclaims_hashed_by_upstream_are_restamped_not_drifted(h):
    """Taking over from upstream Karpenter (drift hash versioning): the NodePool carries upstream's hash
    version, so its NodeClaims take karpy's hash and version instead of all turning drifted."""
    h.setup()
    claim, _ = h.launch_node()
    _upstream_stamped(h, claim)
    ann = annotations(_np(h))
    assert ann["karpenter.sh/nodepool-hash-version"] == "karpy-v1"
    c = annotations(h.get("NodeClaim", claim["metadata"]["name"]))
    assert c["karpenter.sh/nodepool-hash-version"] == "karpy-v1"
    assert c["karpenter.sh/nodepool-hash"] == ann["karpenter.sh/nodepool-hash"]
    h.reconcile("nodeclaim.disruption", claim["metadata"]["name"])
    assert cond(h.get("NodeClaim", claim["metadata"]["name"]), "Drifted") is None


def test_a_nodeclaim_already_drifted_keeps_its_hash_on_restamping(h):
    """It stays drifted: its old hash cannot be compared, so it is not made to look current."""
    h.setup()
    claim, _ = h.launch_node()
    _upstream_stamped(h, claim, drifted=True)
    np_hash = annotations(_np(h))["karpenter.sh/nodepool-hash"]
    c = annotations(h.get("NodeClaim", claim["metadata"]["name"]))
    assert c["karpenter.sh/nodepool-hash-version"] == "karpy-v1"
    assert c["karpenter.sh/nodepool-hash"] == "12345678901234567890" != np_hash


def test_the_hash_follows_static_fields_only(h):
    """It("should update the drift hash when NodePool static field is updated"),
    It("should not update the drift hash when NodePool behavior field is updated")"""
    h.setup()
    before = annotations(_np(h))["karpenter.sh/nodepool-hash"]
    h.patch("NodePool", "default", {"spec": {"disruption": {"consolidateAfter": "1m", "budgets": [{"nodes": "5%"}]},
                                             "limits": {"cpu": "10"}, "weight": 3}})
    assert annotations(_np(h))["karpenter.sh/nodepool-hash"] == before
    h.patch("NodePool", "default", {"spec": {"template": {"metadata": {"labels": {"team": "x"}}}}})
    after = annotations(_np(h))["karpenter.sh/nodepool-hash"]
    assert after != before
    # the same as the NodeClaims the provisioner stamps from then on
    c = h.create_one(h.nodeclaim(instance_types=[IT]))
    assert annotations(c)["karpenter.sh/nodepool-hash"] == after


def test_equivalent_durations_hash_alike(h):
    """expireAfter '1h' and '60m' are the same template."""
    h.setup(nodepool(expire_after="1h"))
    before = annotations(_np(h))["karpenter.sh/nodepool-hash"]
    h.patch("NodePool", "default", {"spec": {"template": {"spec": {"expireAfter": "60m"}}}})
    assert annotations(_np(h))["karpenter.sh/nodepool-hash"] == before


# --- readiness ----------------------------------------------------------------------------------


def test_ready_when_the_nodeclass_exists(h):
    """It("should have status condition on nodePool as ready if nodeClass is ready")"""
    h.setup()
    np = _np(h)
    assert cond_status(np, "NodeClassReady") == "True"
    assert cond_status(np, "ValidationSucceeded") == "True"
    assert cond_status(np, "Ready") == "True"


def test_not_ready_when_the_nodeclass_is_missing(h):
    """It("should have status condition on nodePool as not ready when nodeClass does not exist")"""
    h.create(nodepool())
    np = _np(h)
    assert cond_status(np, "NodeClassReady") == "False"
    assert cond(np, "NodeClassReady")["reason"] == "NodeClassNotFound"
    assert cond_status(np, "Ready") == "False"


def test_readiness_follows_the_nodeclass_appearing(h):
    """Creating the NodeClass enqueues its NodePools; they turn Ready."""
    h.create(nodepool())
    assert cond_status(_np(h), "Ready") == "False"
    h.clear_queue()
    h.create(nodeclass())
    assert any(c is h.controllers[STATUS] and k == "default" for c, k in h.mgr._queue)
    assert cond_status(_np(h), "Ready") == "True"


def test_a_condition_turning_true_drops_its_false_message(h):
    """operatorpkg SetTrue clears the message; `kubectl describe nodepool` must not show a stale reason."""
    h.create(nodepool())
    _np(h)
    h.create(nodeclass())
    np = _np(h)
    assert cond(np, "NodeClassReady").get("message", "") == ""
    assert cond(np, "Ready").get("message", "") == ""


def test_not_ready_when_the_nodeclass_is_terminating(h):
    """It("should mark NodeClassReady status condition on nodePool as NotReady if nodeClass is terminating")"""
    h.setup()
    h.patch("KWOKNodeClass", "default", {"metadata": {"finalizers": ["example.com/hold"]}})
    h.delete("KWOKNodeClass", "default")
    assert cond_status(_np(h), "Ready") == "False"


def test_not_ready_when_the_nodeclass_reports_not_ready(h):
    """It("should have status condition on nodePool as not ready if nodeClass is not ready")"""
    h.setup()
    h.patch("KWOKNodeClass", "default", {"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "reason", "message": "message",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, subresource="status")
    assert cond_status(_np(h), "Ready") == "False"


# --- counters -----------------------------------------------------------------------------------


def test_well_known_resources_are_zero_without_nodes(h):
    """It("should set well-known resource to zero when no nodes exist in the cluster")"""
    h.setup()
    assert _np(h)["status"]["resources"] == {"cpu": "0", "memory": "0", "pods": "0", "ephemeral-storage": "0",
                                             "nodes": "0"}


def test_counters_sum_the_launched_capacity(h):
    """It("should increase the counter when new nodes are created"), Context("Status.Nodes Field")"""
    h.setup()
    assert _np(h)["status"]["nodes"] == 0
    h.launch_node(instance_types=[IT])
    h.launch_node(instance_types=[IT])
    st = _np(h)["status"]
    assert st["nodes"] == 2
    assert st["resources"] == {"cpu": "8", "memory": "16Gi", "pods": "128", "ephemeral-storage": "40Gi", "nodes": "2"}


def test_counters_count_a_launched_nodeclaim_before_its_node_registers(h):
    """It("should set the counter from the nodeClaim and then to the node when it initializes")"""
    h.setup()
    c = h.create_one(h.nodeclaim(instance_types=[IT]))
    h.launch(c["metadata"]["name"])
    st = _np(h)["status"]
    assert st["nodes"] == 1 and st["resources"]["cpu"] == "4"


def _remove(h: Harness, claim: dict, node: dict) -> None:
    h.delete("NodeClaim", claim["metadata"]["name"])
    h.reconcile("nodeclaim.lifecycle", claim["metadata"]["name"])
    h.reconcile("node.termination", node["metadata"]["name"])
    h.tick(MIN_DRAIN_TIME)
    h.reconcile("node.termination", node["metadata"]["name"])
    h.reconcile("node.termination", node["metadata"]["name"])
    h.reconcile("nodeclaim.lifecycle", claim["metadata"]["name"])
    assert h.get("NodeClaim", claim["metadata"]["name"]) is None


def test_counters_decrease_when_nodeclaims_go(h):
    """It("should decrease the counter when an existing node is deleted")"""
    h.setup()
    a, an = h.launch_node(instance_types=[IT])
    h.launch_node(instance_types=["c-8x-amd64-linux"])
    assert _np(h)["status"]["resources"]["cpu"] == "12"
    _remove(h, a, an)
    st = _np(h)["status"]
    assert st["nodes"] == 1
    assert st["resources"] == {"cpu": "8", "memory": "16Gi", "pods": "128", "ephemeral-storage": "20Gi", "nodes": "1"}


def test_counters_zero_out_when_all_nodes_are_deleted(h):
    """It("should zero out the counter when all nodes are deleted")"""
    h.setup()
    a, an = h.launch_node(instance_types=[IT])
    assert _np(h)["status"]["resources"]["cpu"] == "4"
    _remove(h, a, an)
    st = _np(h)["status"]
    assert st["nodes"] == 0
    assert st["resources"].get("cpu", "0") == "0" and st["resources"].get("memory", "0") == "0"
    assert st["resources"]["nodes"] == "0"


def test_counters_are_per_nodepool(h):
    """It("should handle multiple nodepools ... with different node counts")"""
    h.setup(nodepool("a"), nodepool("b"))
    h.launch_node("a", instance_types=[IT])
    h.launch_node("b", instance_types=[IT])
    h.launch_node("b", instance_types=[IT])
    assert _np(h, "a")["status"]["nodes"] == 1
    assert _np(h, "b")["status"]["nodes"] == 2
