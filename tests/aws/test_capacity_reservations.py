"""capacityReservationSelectorTerms: reservations in the EC2NodeClass status, reserved offerings, launches into a
reservation until it is full (moto has no capacity reservations: the fault injector answers for EC2)."""

from __future__ import annotations

import datetime as dt

from karpy.cloudprovider.ec2.nodeclass import NodeClassResolver

from .conftest import CLUSTER, K8S, SSM_ROOT, claim, nodeclass


def reservation(rid, itype, zone, available, state="active", end=None, tags=None, rtype="default"):
    r = {"CapacityReservationId": rid, "InstanceType": itype, "AvailabilityZone": zone, "OwnerId": "123456789012",
         "InstanceMatchCriteria": "targeted", "State": state, "AvailableInstanceCount": available,
         "TotalInstanceCount": available, "ReservationType": rtype,
         "Tags": [{"Key": k, "Value": v} for k, v in (tags or {}).items()]}
    if end is not None:
        r["EndDate"] = end
    return r


def reserved_or_on_demand(name):
    c = claim(name)
    for r in c["spec"]["requirements"]:
        if r["key"] == "karpenter.sh/capacity-type":
            r["values"] = ["reserved", "on-demand"]
    return c


def test_reservations_resolve_and_launches_use_them_until_full(env, monkeypatch):
    p, nc, faults, account = env
    soon = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=10)).isoformat()
    faults.capacity_reservations = [
        reservation("cr-0aaa", "m7g.large", "us-west-2b", 1, tags={"team": "ml"}),
        # a capacity block ending within 40 min
        reservation("cr-0bbb", "m7g.large", "us-west-2c", 5, end=soon, tags={"team": "ml"}, rtype="capacity-block"),
        reservation("cr-0ccc", "m7g.large", "us-west-2a", 5, state="cancelled", tags={"team": "ml"}),
        reservation("cr-0ddd", "c7g.large", "us-west-2a", 5, tags={"team": "other"}),
    ]
    resolver = NodeClassResolver(p.c, CLUSTER, lambda: K8S, SSM_ROOT, lambda: "172.20.0.0/16")
    p.reservations = resolver.reservation_capacity
    spec = nodeclass(capacityReservationSelectorTerms=[{"tags": {"team": "ml"}}])
    res = resolver.resolve(spec)
    crs = res.status["capacityReservations"]
    assert [(r["id"], r["state"]) for r in crs] == [("cr-0aaa", "active"), ("cr-0bbb", "expiring")]
    assert crs[0] == {"id": "cr-0aaa", "instanceType": "m7g.large", "availabilityZone": "us-west-2b",
                      "ownerID": "123456789012", "instanceMatchCriteria": "targeted", "reservationType": "default",
                      "state": "active"}
    assert res.conditions["CapacityReservationsReady"][0] == "True"
    nc["spec"] = spec["spec"]
    nc["status"]["capacityReservations"] = crs
    # the reserved offering: the reservation's zone only, nearly free, so it is launched before cheaper types
    m7g = next(t for t in p.get_instance_types({}, nc) if t.name == "m7g.large")
    reserved = [(o.zone, o.available) for o in m7g.offerings if o.capacity_type == "reserved"]
    assert sorted(reserved) == [("us-west-2b", True), ("us-west-2c", False)]
    out = p.create(reserved_or_on_demand("nc-1"))
    labels = out["metadata"]["labels"]
    assert (labels["karpenter.sh/capacity-type"], labels["karpenter.k8s.aws/capacity-reservation-id"],
            labels["topology.kubernetes.io/zone"], labels["node.kubernetes.io/instance-type"]) == \
        ("reserved", "cr-0aaa", "us-west-2b", "m7g.large")
    req = faults.calls["CreateFleet"][-1]
    assert req["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "on-demand"
    assert [(o["InstanceType"], o["AvailabilityZone"]) for cfg in req["LaunchTemplateConfigs"] for o in cfg["Overrides"]] == \
        [("m7g.large", "us-west-2b")]
    lt = req["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateName"]
    data = account.ec2.describe_launch_template_versions(LaunchTemplateName=lt)["LaunchTemplateVersions"][0]["LaunchTemplateData"]
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationPreference": "capacity-reservations-only",
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0aaa"}}
    (inst,) = account.instances()
    assert (inst["InstanceType"], inst["Placement"]["AvailabilityZone"]) == ("m7g.large", "us-west-2b")
    # EC2 reports the instance's reservation in DescribeInstances (moto leaves it out for a fleet's instance)
    real = p._instance
    monkeypatch.setattr(p, "_instance", lambda pid: {**real(pid), "CapacityReservationId": "cr-0aaa"})
    assert p.is_drifted(out, nc) is None
    unselected = {**nc, "status": {**nc["status"], "capacityReservations": crs[1:]}}
    assert p.is_drifted(out, unselected) == "CapacityReservationDrift"
    # the reservation is full now: the next launch is on-demand, the cheapest type, with no reservation
    second = p.create(reserved_or_on_demand("nc-2"))
    assert second["metadata"]["labels"]["karpenter.sh/capacity-type"] == "on-demand"
    assert "karpenter.k8s.aws/capacity-reservation-id" not in second["metadata"]["labels"]
    assert second["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "c7g.large"


def test_a_nodeclass_without_terms_has_none_and_an_error_is_a_condition(env):
    p, nc, faults, account = env
    resolver = NodeClassResolver(p.c, CLUSTER, lambda: K8S, SSM_ROOT, lambda: "172.20.0.0/16")
    res = resolver.resolve(nodeclass())
    assert "capacityReservations" not in res.status and res.conditions["CapacityReservationsReady"][0] == "True"
    faults.fail("DescribeCapacityReservations", "UnauthorizedOperation", "no ec2:DescribeCapacityReservations")
    res = resolver.resolve(nodeclass(capacityReservationSelectorTerms=[{"id": "cr-0aaa"}]))
    assert res.conditions["CapacityReservationsReady"] == ("False", "Unauthorized", "no ec2:DescribeCapacityReservations")
