"""Launch through CreateFleet against moto: launch templates, overrides, tags, capacity errors, get/list/delete, drift."""

from __future__ import annotations

import base64

import pytest

from karpy.cloudprovider.provider import InsufficientCapacityError, NodeClaimNotFoundError, NodeClassNotReadyError

from .conftest import CLUSTER, claim


def test_launches_the_cheapest_graviton_type_with_upstreams_tags(env):
    p, nc, faults, account = env
    out = p.create(claim())
    pid = out["status"]["providerID"]
    assert pid.startswith("aws:///us-west-2") and "/i-" in pid
    (inst,) = account.instances()
    assert inst["InstanceType"] == "c7g.large"  # the cheapest of the three on-demand
    assert inst["ImageId"] == "ami-0a2023arm00000002"
    tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
    # karpenter.sh/nodeclaim and Name come once the Node registers (the tagging controller), as upstream
    assert tags == {"karpenter.sh/nodepool": "graviton",
                    "karpenter.k8s.aws/ec2nodeclass": "default", f"kubernetes.io/cluster/{CLUSTER}": "owned",
                    "eks:eks-cluster-name": CLUSTER}
    req = faults.calls["CreateFleet"][-1]
    assert req["Type"] == "instant" and req["OnDemandOptions"] == {"AllocationStrategy": "lowest-price"}
    overrides = [o for cfg in req["LaunchTemplateConfigs"] for o in cfg["Overrides"]]
    assert {o["InstanceType"] for o in overrides} == {"m7g.large", "c7g.large", "m6g.large"}
    assert len(overrides) == 9 and all(o["Priority"] > 0 for o in overrides)
    assert out["metadata"]["annotations"]["karpenter.k8s.aws/ec2nodeclass-hash-version"] == "karpy-v1"
    assert out["metadata"]["labels"]["topology.k8s.aws/zone-id"].startswith("usw2-az")
    # the launch template: upstream's naming, AL2023 NodeConfig user data
    lt_name = req["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateName"]
    assert lt_name.startswith("karpenter.k8s.aws/")
    data = account.ec2.describe_launch_template_versions(LaunchTemplateName=lt_name)["LaunchTemplateVersions"][0]["LaunchTemplateData"]
    ud = base64.b64decode(data["UserData"]).decode()
    assert "kind: NodeConfig" in ud and "apiServerEndpoint: https://example.eks.amazonaws.com" in ud
    assert "karpenter.sh/unregistered" in ud and "maxPods: 29" in ud
    # a second launch reuses the template (same name, no new one)
    p.create(claim("nc-2"))
    assert len(account.ec2.describe_launch_templates()["LaunchTemplates"]) == 1


def test_capacity_errors_mark_offerings_and_fall_through(env):
    p, nc, faults, account = env
    for z in ("us-west-2a", "us-west-2b", "us-west-2c"):
        faults.ice("c7g.large", z)
    p.create(claim())
    assert account.instances()[0]["InstanceType"] != "c7g.large"
    assert p.unavailable("c7g.large", "us-west-2a", "on-demand")
    for t in ("m7g.large", "m6g.large"):
        for z in ("us-west-2a", "us-west-2b", "us-west-2c"):
            faults.ice(t, z)
    with pytest.raises(InsufficientCapacityError):
        p.create(claim("nc-3", types=("m7g.large", "m6g.large")))


def test_get_list_delete_and_drift(env):
    p, nc, faults, account = env
    out = p.create(claim())
    launched = out["status"]
    pid = launched["providerID"]
    assert p.get(pid)["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "c7g.large"
    assert [c["status"]["providerID"] for c in p.list()] == [pid]
    # the NodeClaim as the launch labelled it (drift reads its instance type from the instance-type label)
    nodeclaim = {"metadata": {"labels": dict(out["metadata"]["labels"])},
                 "status": {"providerID": pid, "imageID": launched["imageID"]}}
    assert p.is_drifted(nodeclaim, nc) is None
    newer = {**nc, "status": {**nc["status"], "amis": [{"id": "ami-0a2023arm99999999", "requirements": []}]}}
    assert p.is_drifted(nodeclaim, newer) == "AMIDrift"
    p.delete({"status": {"providerID": pid}})
    with pytest.raises(NodeClaimNotFoundError):
        p.get(pid)
    assert p.list() == []


def test_a_nodeclass_not_ready_refuses_to_launch(env):
    p, nc, faults, account = env
    nc["status"]["conditions"] = [{"type": "Ready", "status": "False", "message": "SubnetsReady=False"}]
    with pytest.raises(NodeClassNotReadyError):
        p.create(claim())
    assert account.instances() == []
