"""More NodeClaim drift cases of upstream pkg/controllers/nodeclaim/disruption/drift_test.go
(the rest are in tests/controllers/test_nodeclaim_disruption.py)."""

from __future__ import annotations

from controllers.harness import Harness, cond, nodepool

DISRUPTION = "nodeclaim.disruption"
OS = "kubernetes.io/os"


def _drifted(h: Harness, name: str) -> str | None:
    h.reconcile(DISRUPTION, name)
    c = cond(h.get("NodeClaim", name), "Drifted")
    return None if c is None else c["reason"]


def _os_requirement(h: Harness, *values: str) -> None:
    np = h.get("NodePool", "default")
    tspec = dict(np["spec"]["template"]["spec"])
    tspec["requirements"] = [r for r in tspec["requirements"] if r["key"] != OS] + [
        {"key": OS, "operator": "In", "values": list(values)}]
    h.patch("NodePool", "default", {"spec": {"template": {"spec": tspec}}})


def test_only_the_nodeclaim_whose_labels_the_narrowed_requirement_excludes_drifts(h):
    """It("should return drifted only on NodeClaims that are drifted from an updated nodePool"): one NodePool
    allowing linux and windows holds one NodeClaim of each; narrowing it to linux drifts the windows one only."""
    h.setup(nodepool())
    _os_requirement(h, "linux", "windows")
    linux, _ = h.launch_node(instance_types=["c-4x-amd64-linux"])
    windows, _ = h.launch_node(instance_types=["c-4x-amd64-windows"])
    linux, windows = linux["metadata"]["name"], windows["metadata"]["name"]
    assert _drifted(h, linux) is None and _drifted(h, windows) is None
    _os_requirement(h, "linux")
    assert _drifted(h, linux) is None
    assert _drifted(h, windows) == "RequirementsDrifted"


def test_a_nodeclaim_without_the_hash_version_is_not_statically_drifted(h):
    """It("should not return drifted if karpenter.sh/nodepool-hash-version annotation is not present on the NodeClaim")"""
    h.setup(nodepool(labels={"team": "a"}))
    c, _ = h.launch_node(instance_types=["c-4x-amd64-linux"])
    name = c["metadata"]["name"]
    h.patch("NodeClaim", name, {"metadata": {"annotations": {"karpenter.sh/nodepool-hash-version": None}}})
    h.patch("NodePool", "default", {"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}})
    assert _drifted(h, name) is None


def test_requirement_drift_is_found_before_nodeclass_drift(h):
    """It("should detect node requirement drift before cloud provider drift")"""
    np = nodepool(family=None)
    np["spec"]["template"]["spec"]["nodeClassRef"] = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "ec2"}
    h.create({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "ec2"},
              "spec": {"role": "KarpenterNodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                       "subnetSelectorTerms": [{"tags": {"net": "a"}}],
                       "securityGroupSelectorTerms": [{"tags": {"sg": "a"}}]}}, np)
    c, _ = h.launch_node(instance_types=["m5.large"])
    name = c["metadata"]["name"]
    tspec = dict(h.get("NodePool", "default")["spec"]["template"]["spec"])
    tspec["requirements"] = list(tspec["requirements"]) + [
        {"key": "node.kubernetes.io/instance-type", "operator": "DoesNotExist"}]
    h.patch("NodePool", "default", {"spec": {"template": {"spec": tspec}}})
    h.patch("EC2NodeClass", "ec2", {"spec": {"role": "AnotherRole"}})
    assert _drifted(h, name) == "RequirementsDrifted"
