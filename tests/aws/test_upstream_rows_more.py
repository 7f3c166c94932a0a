"""Upstream's EC2 drift rows (aws/karpenter-provider-aws pkg/cloudprovider/suite_test.go, NodeClaim Drift) played
against karpy's AWS provider: a real instance launched through CreateFleet on moto, then the EC2NodeClass's
resolved status (subnets, security groups, AMIs) or the instance itself moved away from each other. moto's
DescribeInstances reports no security groups for a fleet's instance, so the security-group rows report the
instance's groups the way upstream's fake EC2 does: DescribeInstances answers with the groups the row names."""

from __future__ import annotations

import copy

import pytest

from karpy.cloudprovider.ec2.nodeclass import HASH_ANNOTATION, HASH_VERSION, HASH_VERSION_ANNOTATION, hash_annotations

from .conftest import claim


@pytest.fixture
def launched(env):
    """The provider, a Ready EC2NodeClass, the NodeClaim of one launched instance and that instance."""
    p, nc, faults, account = env
    out = p.create(claim())
    (inst,) = account.instances()
    nodeclaim = {"metadata": {"name": "nc-1", "annotations": dict(out["metadata"].get("annotations") or {}),
                              "labels": {"node.kubernetes.io/instance-type": inst["InstanceType"]}},
                 "status": {"providerID": out["status"]["providerID"], "imageID": out["status"]["imageID"]}}
    return p, nc, nodeclaim, inst, account


def report_groups(p, monkeypatch, groups: list[str]) -> None:
    """DescribeInstances reports the instance with security groups ``groups``."""
    real = p._instance
    monkeypatch.setattr(p, "_instance", lambda pid: {**real(pid), "SecurityGroups": [{"GroupId": g} for g in groups]})


def with_status(nc: dict, **status) -> dict:
    out = copy.deepcopy(nc)
    out["status"].update(status)
    return out


def test_a_nodeclaim_matching_its_nodeclass_is_not_drifted(launched, monkeypatch):
    p, nc, nodeclaim, inst, _ = launched
    assert p.is_drifted(nodeclaim, nc) is None
    # the instance's security groups are exactly the discovered ones
    report_groups(p, monkeypatch, [g["id"] for g in nc["status"]["securityGroups"]])
    assert p.is_drifted(nodeclaim, nc) is None


def test_an_instance_in_a_subnet_no_longer_discovered_drifts_on_subnet(launched):
    p, nc, nodeclaim, inst, _ = launched
    others = [s for s in nc["status"]["subnets"] if s["id"] != inst["SubnetId"]]
    assert others  # the instance's subnet is dropped from the status, the others stay
    assert p.is_drifted(nodeclaim, with_status(nc, subnets=others)) == "SubnetDrift"


def test_security_groups_that_differ_either_way_drift_on_security_groups(launched, monkeypatch):
    p, nc, nodeclaim, inst, _ = launched
    (found,) = [g["id"] for g in nc["status"]["securityGroups"]]
    # the instance's group is not the discovered one
    report_groups(p, monkeypatch, ["sg-0123456789abcdef0"])
    assert p.is_drifted(nodeclaim, nc) == "SecurityGroupDrift"
    # the instance has one group more than the NodeClass discovers
    report_groups(p, monkeypatch, ["sg-0123456789abcdef0", found])
    assert p.is_drifted(nodeclaim, nc) == "SecurityGroupDrift"
    # the NodeClass discovers one group more than the instance has
    report_groups(p, monkeypatch, [found])
    more = nc["status"]["securityGroups"] + [{"id": "sg-0fedcba9876543210", "name": "extra"}]
    assert p.is_drifted(nodeclaim, with_status(nc, securityGroups=more)) == "SecurityGroupDrift"


def test_nothing_discovered_is_not_drift(launched, monkeypatch):
    """Upstream returns an error when the status lists no subnets or no security groups; either way the NodeClaim
    is not marked drifted."""
    p, nc, nodeclaim, inst, _ = launched
    assert p.is_drifted(nodeclaim, with_status(nc, subnets=[])) is None
    report_groups(p, monkeypatch, ["sg-0123456789abcdef0"])
    assert p.is_drifted(nodeclaim, with_status(nc, securityGroups=[])) is None


def test_with_several_reasons_the_nodeclass_hash_is_reported(launched, monkeypatch):
    p, nc, nodeclaim, inst, _ = launched
    report_groups(p, monkeypatch, ["sg-0123456789abcdef0"])
    nodeclaim["metadata"]["annotations"].update({HASH_VERSION_ANNOTATION: HASH_VERSION, HASH_ANNOTATION: "abcdefghijkl"})
    assert hash_annotations(nc)[HASH_ANNOTATION] != "abcdefghijkl"
    moved = with_status(nc, amis=[{"id": "ami-0a2023arm99999999", "requirements": []}],
                        subnets=[s for s in nc["status"]["subnets"] if s["id"] != inst["SubnetId"]],
                        securityGroups=[{"id": "sg-0123456789abcdef0", "name": "x"}])
    assert p.is_drifted(nodeclaim, moved) == "NodeClassDrift"


def test_an_ami_still_listed_but_not_for_the_instances_type_drifts_on_ami(launched):
    """Upstream's AMI drift maps the status AMIs onto the instance's type: the instance's AMI still listed, but
    with requirements its instance type no longer meets, is AMIDrift."""
    p, nc, nodeclaim, inst, _ = launched
    arch = next(t for t in p.get_instance_types({}, nc) if t.name == inst["InstanceType"]).labels["kubernetes.io/arch"]
    other = "amd64" if arch == "arm64" else "arm64"
    assert p.is_drifted(nodeclaim, nc) is None
    same_id = [{"id": inst["ImageId"], "requirements": [
        {"key": "kubernetes.io/arch", "operator": "In", "values": [other]}]}]
    assert p.is_drifted(nodeclaim, with_status(nc, amis=same_id)) == "AMIDrift"
    # the same AMI with requirements its type meets is not drift
    fits = [{"id": inst["ImageId"], "requirements": [
        {"key": "kubernetes.io/arch", "operator": "In", "values": [arch]}]}]
    assert p.is_drifted(nodeclaim, with_status(nc, amis=fits)) is None


def test_a_reservation_that_fell_back_to_on_demand_is_not_drift(launched, monkeypatch):
    """The NodeClaim was launched for reservation cr-foo (its label says so), the reservation is gone from the
    EC2NodeClass's status, but the instance runs outside any reservation (it fell back to on-demand): EC2's
    answer, not the label, decides, so it is not drifted. While the instance is in cr-foo it is."""
    p, nc, nodeclaim, inst, _ = launched
    nodeclaim["metadata"]["labels"].update({"karpenter.k8s.aws/capacity-reservation-id": "cr-foo",
                                            "karpenter.sh/capacity-type": "reserved"})
    gone = with_status(nc, capacityReservations=[])
    assert p.is_drifted(nodeclaim, gone) is None
    real = p._instance
    monkeypatch.setattr(p, "_instance", lambda pid: {**real(pid), "CapacityReservationId": "cr-foo"})
    assert p.is_drifted(nodeclaim, gone) == "CapacityReservationDrift"
    kept = with_status(nc, capacityReservations=[{
        "id": "cr-foo", "instanceType": inst["InstanceType"], "availabilityZone": inst["Placement"]["AvailabilityZone"],
        "ownerID": "123456789012", "instanceMatchCriteria": "targeted", "reservationType": "default", "state": "active"}])
    assert p.is_drifted(nodeclaim, kept) is None


def test_an_instance_gone_out_of_band_gives_no_drift_decision(launched, monkeypatch):
    """It("should error if the underlying NodeClaim doesn't exist"): DescribeInstances no longer reports the
    instance; upstream returns an error, karpy answers "not drifted": either way the NodeClaim is not marked drifted,
    even with the EC2NodeClass's AMIs, subnets and security groups all moved."""
    p, nc, nodeclaim, inst, _ = launched
    moved = with_status(nc, amis=[{"id": "ami-0a2023arm99999999", "requirements": []}],
                        subnets=[s for s in nc["status"]["subnets"] if s["id"] != inst["SubnetId"]])
    assert p.is_drifted(nodeclaim, moved) == "AMIDrift"  # while the instance is there
    monkeypatch.setattr(p, "_describe", lambda **kw: [])
    assert p.is_drifted(nodeclaim, moved) is None


def test_a_nodeclaim_without_its_instance_type_label_gives_no_drift_decision(launched):
    """It("should error if the NodeClaim doesn't have the instance-type label"): upstream cannot map the status AMIs
    onto the NodeClaim's instance type, returns an error, and the NodeClaim is not marked drifted."""
    p, nc, nodeclaim, inst, _ = launched
    moved = with_status(nc, amis=[{"id": "ami-0a2023arm99999999", "requirements": []}],
                        subnets=[s for s in nc["status"]["subnets"] if s["id"] != inst["SubnetId"]])
    assert p.is_drifted(nodeclaim, moved) == "AMIDrift"  # with the label
    del nodeclaim["metadata"]["labels"]["node.kubernetes.io/instance-type"]
    # without it neither the AMI nor the subnet (checked after the AMI upstream) decides
    assert p.is_drifted(nodeclaim, moved) is None
    assert p.is_drifted(nodeclaim, with_status(nc, subnets=moved["status"]["subnets"])) is None
