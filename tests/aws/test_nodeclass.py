"""EC2NodeClass status against moto over HTTP: subnets, security groups, AMIs, instance profile, conditions."""

from __future__ import annotations

from karpy.cloudprovider.ec2.clients import Clients
from karpy.cloudprovider.ec2.nodeclass import (
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    NodeClassResolver,
    hash_annotations,
)

from .conftest import CLUSTER, K8S, REGION, ROLE, SSM_ROOT, FaultInjector, nodeclass


def resolver(cidr="172.20.0.0/16"):
    c = Clients(max_attempts=1)
    return NodeClassResolver(c, CLUSTER, lambda: K8S, ssm_root=SSM_ROOT, cluster_cidr=lambda: cidr), c


def test_default_nodeclass_resolves_subnets_groups_amis_and_profile(account):
    r, _ = resolver()
    res = r.resolve(nodeclass())
    st = res.status
    assert sorted(s["zone"] for s in st["subnets"]) == ["us-west-2a", "us-west-2b", "us-west-2c"]
    assert {s["id"] for s in st["subnets"]} == set(account.subnets.values())
    assert all(s["zoneID"].startswith("usw2-az") for s in st["subnets"])
    assert st["securityGroups"] == [{"id": account.sg, "name": "nodes"}]
    # al2023@latest: the recommended image of each architecture, with its requirements
    amis = {a["id"]: a for a in st["amis"]}
    assert set(amis) == {"ami-0a2023x8600000002", "ami-0a2023arm00000002"}
    assert {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]} in amis["ami-0a2023arm00000002"]["requirements"]
    assert {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "DoesNotExist"} in amis["ami-0a2023arm00000002"]["requirements"]
    assert {c: v[0] for c, v in res.conditions.items()} == {
        "AMIsReady": "True", "SubnetsReady": "True", "SecurityGroupsReady": "True", "InstanceProfileReady": "True",
        "CapacityReservationsReady": "True", "ValidationSucceeded": "True"}
    # the instance profile was created under karpy's path, tagged, with the role
    prof = account.iam.get_instance_profile(InstanceProfileName=st["instanceProfile"])["InstanceProfile"]
    assert prof["Path"] == f"/karpenter/{REGION}/{CLUSTER}/1111-2222/"
    assert [x["RoleName"] for x in prof["Roles"]] == [ROLE]
    tags = {t["Key"]: t["Value"] for t in prof["Tags"]}
    assert tags[f"kubernetes.io/cluster/{CLUSTER}"] == "owned" and tags["karpenter.k8s.aws/ec2nodeclass"] == "default"
    # a second pass finds the same profile (no new one)
    again = r.resolve({**nodeclass(), "status": st}).status
    assert again["instanceProfile"] == st["instanceProfile"]
    assert len(account.iam.list_instance_profiles()["InstanceProfiles"]) == 1


def test_selectors_by_id_name_and_tag_key(account):
    r, _ = resolver()
    nc = nodeclass(subnetSelectorTerms=[{"id": account.subnets["us-west-2b"]}],
                   securityGroupSelectorTerms=[{"name": "other"}, {"id": account.sg}],
                   amiSelectorTerms=[{"name": "my-golden-image-*", "owner": "602401143452"}])
    st = r.resolve(nc).status
    assert [s["zone"] for s in st["subnets"]] == ["us-west-2b"]
    assert {g["name"] for g in st["securityGroups"]} == {"nodes", "other"}
    assert [a["id"] for a in st["amis"]] == ["ami-0c0570m0000000001"]
    st = r.resolve(nodeclass(subnetSelectorTerms=[{"tags": {"Name": "*"}}])).status
    assert len(st["subnets"]) == 3


def test_nothing_matches_gives_upstreams_reasons(account):
    r, _ = resolver()
    res = r.resolve(nodeclass(subnetSelectorTerms=[{"tags": {"karpenter.sh/discovery": "nope"}}],
                              securityGroupSelectorTerms=[{"name": "nope"}],
                              amiSelectorTerms=[{"alias": "al2023@v19990101"}]))
    assert res.conditions["SubnetsReady"][:2] == ("False", "SubnetsNotFound")
    assert res.conditions["SecurityGroupsReady"][:2] == ("False", "SecurityGroupsNotFound")
    assert res.conditions["AMIsReady"][:2] == ("False", "AMINotFound")
    assert res.conditions["ValidationSucceeded"][0] == "Unknown"


def test_bottlerocket_alias_and_al2_refused_on_133(account):
    r, _ = resolver()
    st = r.resolve(nodeclass(amiSelectorTerms=[{"alias": "bottlerocket@latest"}])).status
    assert {a["id"] for a in st["amis"]} == {"ami-0b0771eac00000001", "ami-0b0771eac00000002"}
    res = r.resolve(nodeclass(amiSelectorTerms=[{"alias": "al2@latest"}]))
    assert res.conditions["AMIsReady"][:2] == ("False", "UnsupportedAlias")


def test_access_denied_and_bad_tags_are_conditions_not_crashes(account):
    r, c = resolver()
    faults = FaultInjector(c.ec2)
    faults.fail("DescribeSubnets", "UnauthorizedOperation", "You are not authorized to perform this operation.", times=1)
    res = r.resolve(nodeclass(tags={"karpenter.sh/nodepool": "x"}))
    assert res.conditions["SubnetsReady"] == ("False", "Unauthorized", "You are not authorized to perform this operation.")
    assert any("SubnetsReady: Unauthorized" in e[2] for e in res.events)
    assert res.conditions["ValidationSucceeded"][:2] == ("False", "TagValidationFailed")
    faults.fail("RunInstances", "UnauthorizedOperation", "no ec2:RunInstances")
    res = r.resolve(nodeclass())
    assert res.conditions["ValidationSucceeded"] == ("False", "RunInstancesAuthCheckFailed", "no ec2:RunInstances")


def test_al2023_needs_the_cluster_cidr(account):
    r, _ = resolver(cidr=None)
    assert r.resolve(nodeclass()).conditions["ValidationSucceeded"][:2] == ("False", "ClusterCIDRNotFound")


def test_instance_profile_given_is_used_as_is_and_role_change_reattaches(account):
    r, _ = resolver()
    st = r.resolve(nodeclass(role=None, instanceProfile="my-profile")).status
    assert st["instanceProfile"] == "my-profile"
    assert account.iam.list_instance_profiles()["InstanceProfiles"] == []
    st = r.resolve(nodeclass()).status
    account.iam.create_role(RoleName="other-role", AssumeRolePolicyDocument="{}")
    st2 = r.resolve({**nodeclass(role="other-role"), "status": st}).status
    prof = account.iam.get_instance_profile(InstanceProfileName=st2["instanceProfile"])["InstanceProfile"]
    assert [x["RoleName"] for x in prof["Roles"]] == ["other-role"]


def test_hash_uses_karpys_version_and_ignores_selectors():
    a = hash_annotations(nodeclass())
    b = hash_annotations(nodeclass(subnetSelectorTerms=[{"id": "subnet-1"}]))
    c = hash_annotations(nodeclass(tags={"team": "a"}))
    assert a[HASH_VERSION_ANNOTATION] == HASH_VERSION == "karpy-v1"
    assert a[HASH_ANNOTATION] == b[HASH_ANNOTATION] != c[HASH_ANNOTATION]
