"""Capacity blocks on the real EC2 provider, as upstream's AWS instance-type suite ("Capacity Blocks").

A capacity block in the EC2NodeClass status (type ``capacity-block``) with one instance left becomes exactly one
``reserved`` offering of its instance type, in its zone, carrying its ID and its instance count, priced at the
on-demand price / 10,000,000 (nearly free); while the block is ``expiring`` the offering exists but is not
available, so nothing new launches into it. A node launched into an active block is labelled with the reservation's
ID and type.
"""

from __future__ import annotations

import pytest

from .conftest import claim

CR_TYPE = "c6g.large"
CR_ZONE = "us-west-2a"
CR_ID = "cr-123"
CR_CAPACITY = 1


def _with_capacity_block(p, nc, state: str) -> None:
    p.reservations = {CR_ID: CR_CAPACITY}  # the status pass's count of instances left (upstream: the provider's)
    nc["status"]["capacityReservations"] = [{
        "id": CR_ID, "instanceType": CR_TYPE, "availabilityZone": CR_ZONE, "ownerID": "123456789012",
        "instanceMatchCriteria": "targeted", "reservationType": "capacity-block", "state": state}]


@pytest.mark.parametrize("state", ["active", "expiring"])
def test_a_capacity_block_becomes_one_reserved_offering(env, state):
    p, nc, _, _ = env
    _with_capacity_block(p, nc, state)
    it = next(t for t in p.get_instance_types({}, nc) if t.name == CR_TYPE)
    reserved = [o for o in it.offerings if o.capacity_type == "reserved"]
    assert len(reserved) == 1, "only a single reserved offering should exist"
    (o,) = reserved
    assert (o.zone, o.reservation_id, o.reservation_capacity) == (CR_ZONE, CR_ID, CR_CAPACITY)
    assert o.available is (state != "expiring")
    od = next(x for x in it.offerings if x.capacity_type == "on-demand" and x.zone == CR_ZONE)
    assert o.price == pytest.approx(od.price / 10_000_000)


def test_a_node_launched_into_an_active_capacity_block_carries_its_id_and_type(env):
    p, nc, _, _ = env
    _with_capacity_block(p, nc, "active")
    out = p.create(claim("nc-cb", types=(CR_TYPE,), ct="reserved"))
    labels = out["metadata"]["labels"]
    assert (labels["karpenter.sh/capacity-type"], labels["topology.kubernetes.io/zone"],
            labels["karpenter.k8s.aws/capacity-reservation-id"],
            labels["karpenter.k8s.aws/capacity-reservation-type"]) == ("reserved", CR_ZONE, CR_ID, "capacity-block")


def test_nothing_launches_into_an_expiring_capacity_block(env):
    p, nc, _, _ = env
    _with_capacity_block(p, nc, "expiring")
    c = claim("nc-cb", types=(CR_TYPE,))
    for r in c["spec"]["requirements"]:
        if r["key"] == "karpenter.sh/capacity-type":
            r["values"] = ["reserved", "on-demand"]
    labels = p.create(c)["metadata"]["labels"]
    assert labels["karpenter.sh/capacity-type"] == "on-demand"
    assert "karpenter.k8s.aws/capacity-reservation-id" not in labels


def test_with_the_gate_off_reservations_give_no_offering(env):
    """Feature gate ReservedCapacity off (upstream's resolver returns the offerings unchanged): no reserved offering,
    and a NodeClaim allowing reserved or on-demand launches on-demand."""
    p, nc, _, _ = env
    _with_capacity_block(p, nc, "active")
    p.reserved_capacity = False
    it = next(t for t in p.get_instance_types({}, nc) if t.name == CR_TYPE)
    assert [o for o in it.offerings if o.capacity_type == "reserved"] == []
    c = claim("nc-cb", types=(CR_TYPE,))
    for r in c["spec"]["requirements"]:
        if r["key"] == "karpenter.sh/capacity-type":
            r["values"] = ["reserved", "on-demand"]
    labels = p.create(c)["metadata"]["labels"]
    assert labels["karpenter.sh/capacity-type"] == "on-demand"


@pytest.mark.parametrize("gates,on", [("", True), ("ReservedCapacity=false", False)])
def test_the_controller_feature_gate_reaches_the_ec2_provider(account, ec2_catalog, monkeypatch, gates, on):
    from karpy.cloudprovider.ec2.controllers import build_aws
    from karpy.cloudprovider.ec2.instancetypes import InstanceTypes
    from karpy.controller.settings import resolve
    from karpy.kube.memory import MemoryAPI
    from karpy.runtime.clock import SimClock
    from karpy.runtime.events import Recorder
    from karpy.runtime.log import Logger
    from karpy.runtime.manager import Manager

    from .conftest import CLUSTER, SSM_ROOT, preload

    monkeypatch.setattr(InstanceTypes, "refresh", lambda self: preload(self, ec2_catalog))  # moto's catalog, loaded once
    flags = {"cloud_provider": "aws", "cluster_name": CLUSTER, "cluster_endpoint": "https://example.eks.amazonaws.com"}
    if gates:
        flags["feature_gates"] = gates
    settings = resolve(flags, {})
    clock = SimClock(0.0)
    api = MemoryAPI(clock)
    provider, _, workers = build_aws(settings, api, Manager(api, clock, strict=True), clock, Recorder(api, clock),
                                     Logger(clock, level="error", keep=False), ssm_root=SSM_ROOT)
    assert workers == []
    assert provider.reserved_capacity is on


def test_only_a_capacity_block_near_its_end_is_expiring(env):
    """Upstream's CapacityReservationFromEC2: a capacity block is ``expiring`` from 40 minutes before its end; an
    on-demand capacity reservation with an end date stays ``active``. The instances left are the reservation's."""
    import datetime as dt

    from karpy.cloudprovider.ec2.nodeclass import NodeClassResolver

    from .conftest import CLUSTER, K8S, SSM_ROOT, nodeclass
    from .test_capacity_reservations import reservation

    p, nc, faults, _ = env
    now = dt.datetime.now(dt.timezone.utc)
    soon, later = ((now + dt.timedelta(minutes=m)).isoformat() for m in (30, 120))
    faults.capacity_reservations = [
        reservation("cr-block-soon", CR_TYPE, CR_ZONE, 2, end=soon, tags={"t": "x"}, rtype="capacity-block"),
        reservation("cr-block-later", CR_TYPE, "us-west-2b", 2, end=later, tags={"t": "x"}, rtype="capacity-block"),
        reservation("cr-odcr-soon", CR_TYPE, "us-west-2c", 2, end=soon, tags={"t": "x"}),
    ]
    resolver = NodeClassResolver(p.c, CLUSTER, lambda: K8S, SSM_ROOT, lambda: "172.20.0.0/16")
    spec = nodeclass(capacityReservationSelectorTerms=[{"tags": {"t": "x"}}])
    crs = resolver.resolve(spec).status["capacityReservations"]
    assert [(r["id"], r["reservationType"], r["state"]) for r in crs] == [
        ("cr-block-later", "capacity-block", "active"), ("cr-block-soon", "capacity-block", "expiring"),
        ("cr-odcr-soon", "default", "active")]
    assert resolver.reservation_capacity == {"cr-block-later": 2, "cr-block-soon": 2, "cr-odcr-soon": 2}
    p.reservations = resolver.reservation_capacity
    nc["status"]["capacityReservations"] = crs
    it = next(t for t in p.get_instance_types({}, nc) if t.name == CR_TYPE)
    assert sorted((o.reservation_id, o.available, o.reservation_capacity) for o in it.offerings
                  if o.capacity_type == "reserved") == \
        [("cr-block-later", True, 2), ("cr-block-soon", False, 2), ("cr-odcr-soon", True, 2)]


def test_nodeclaims_in_a_capacity_block_near_its_end_are_deleted(env):
    """Upstream's capacityreservation.expiration controller: every minute, a NodeClaim launched into a capacity block
    within 40 minutes of its end is deleted (drained and replaced before EC2 ends the instance); NodeClaims in a
    block ending later, in an on-demand reservation ending as soon, in a reservation EC2 no longer knows, or in none,
    are kept."""
    import datetime as dt

    from karpy.cloudprovider.ec2.controllers import CapacityBlockExpiration
    from karpy.kube.memory import MemoryAPI
    from karpy.runtime.clock import SimClock
    from karpy.runtime.log import Logger
    from karpy.runtime.manager import Manager

    from .test_capacity_reservations import reservation

    p, _, faults, _ = env
    now = dt.datetime.now(dt.timezone.utc)
    soon, later = ((now + dt.timedelta(minutes=m)).isoformat() for m in (30, 120))
    faults.capacity_reservations = [
        reservation("cr-block-soon", CR_TYPE, CR_ZONE, 0, end=soon, rtype="capacity-block"),
        reservation("cr-block-later", CR_TYPE, CR_ZONE, 0, end=later, rtype="capacity-block"),
        reservation("cr-odcr-soon", CR_TYPE, CR_ZONE, 0, end=soon),
    ]
    clock = SimClock(0.0)
    api = MemoryAPI(clock)
    mgr = Manager(api, clock, strict=True)
    ref = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
    rids = {"in-soon": "cr-block-soon", "in-later": "cr-block-later", "in-odcr": "cr-odcr-soon", "in-gone": "cr-gone",
            "none": None}
    for name, rid in rids.items():
        labels = {"karpenter.sh/capacity-type": "reserved" if rid else "on-demand"}
        if rid:
            labels["karpenter.k8s.aws/capacity-reservation-id"] = rid
        api.create({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": name, "labels": labels},
                    "spec": {"nodeClassRef": ref, "requirements": []}})
    ctl = CapacityBlockExpiration(mgr, api, p.c, Logger(clock, level="error", keep=False))
    mgr.add(ctl)
    mgr.start()
    mgr.pump()
    assert ctl.reconcile("") == 60.0
    assert sorted(n for n in rids if api.try_get("NodeClaim", n) is not None) == ["in-gone", "in-later", "in-odcr",
                                                                                  "none"]
    asked = sorted(c["CapacityReservationIds"][0] for c in faults.calls["DescribeCapacityReservations"])
    assert asked == ["cr-block-later", "cr-block-soon", "cr-gone", "cr-odcr-soon"]


def test_a_reservation_id_ec2_does_not_know_selects_nothing(env):
    """As upstream's capacity-reservation provider: DescribeCapacityReservations answering NotFound for an ID term
    leaves that reservation out; the other terms still resolve and the NodeClass stays ready."""
    from karpy.cloudprovider.ec2.nodeclass import NodeClassResolver

    from .conftest import CLUSTER, K8S, SSM_ROOT, nodeclass
    from .test_capacity_reservations import reservation

    p, _, faults, _ = env
    faults.capacity_reservations = [reservation("cr-0aaa", CR_TYPE, CR_ZONE, 1, tags={"t": "x"})]
    real = faults._reservations

    def answer(params):
        if params.get("CapacityReservationIds") == ["cr-0gone"]:
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": "InvalidCapacityReservationId.NotFound", "Message": "gone"}},
                              "DescribeCapacityReservations")
        return real(params)

    faults._reservations = answer
    resolver = NodeClassResolver(p.c, CLUSTER, lambda: K8S, SSM_ROOT, lambda: "172.20.0.0/16")
    res = resolver.resolve(nodeclass(capacityReservationSelectorTerms=[{"id": "cr-0gone"}, {"tags": {"t": "x"}}]))
    assert [r["id"] for r in res.status["capacityReservations"]] == ["cr-0aaa"]
    assert res.conditions["CapacityReservationsReady"][0] == "True"


def test_a_reserved_nodeclaim_whose_instance_left_its_reservation_becomes_on_demand(env, monkeypatch):
    """Upstream's capacityreservation.capacitytype controller: an instance EC2 reports in no reservation any more (the
    reservation ended, the instance runs on) demotes its reserved NodeClaim, and its registered Node, to on-demand
    without the reservation labels; an instance still in its reservation keeps them."""
    from karpy.cloudprovider.ec2.controllers import CapacityTypeSync
    from karpy.kube.memory import MemoryAPI
    from karpy.runtime.clock import SimClock
    from karpy.runtime.log import Logger
    from karpy.runtime.manager import Manager

    p, nc, _, _ = env
    p.reservations = {CR_ID: 2}
    nc["status"]["capacityReservations"] = [{
        "id": CR_ID, "instanceType": CR_TYPE, "availabilityZone": CR_ZONE, "ownerID": "123456789012",
        "instanceMatchCriteria": "targeted", "reservationType": "default", "state": "active"}]
    launched = {n: p.create(claim(n, types=(CR_TYPE,), ct="reserved")) for n in ("nc-kept", "nc-ended")}
    pids = {n: c["status"]["providerID"] for n, c in launched.items()}
    # EC2 reports the reservation of nc-kept's instance only (moto leaves it out for a fleet's instance)
    kept_iid = pids["nc-kept"].rsplit("/", 1)[-1]
    real = p._describe

    def describe(**kw):
        return [{**i, "CapacityReservationId": CR_ID,
                 "CapacityReservationSpecification": {"CapacityReservationPreference": "capacity-reservations-only"}}
                if i["InstanceId"] == kept_iid else i for i in real(**kw)]

    monkeypatch.setattr(p, "_describe", describe)
    clock = SimClock(0.0)
    api = MemoryAPI(clock)
    for n, c in launched.items():
        labels = c["metadata"]["labels"]
        assert (labels["karpenter.sh/capacity-type"], labels["karpenter.k8s.aws/capacity-reservation-id"]) == \
            ("reserved", CR_ID)
        api.create({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": n, "labels": labels},
                    "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                             "requirements": []}, "status": {"providerID": pids[n]}})
        api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{n}",
                                                                    "labels": {**labels, "karpenter.sh/registered": "true"}},
                    "spec": {"providerID": pids[n]}})
    mgr = Manager(api, clock, strict=True)
    ctl = CapacityTypeSync(mgr, api, p, Logger(clock, level="error", keep=False))
    mgr.add(ctl)
    mgr.start()
    mgr.pump()
    assert ctl.reconcile("") == 60.0
    reservation_labels = ("karpenter.k8s.aws/capacity-reservation-id", "karpenter.k8s.aws/capacity-reservation-type")
    for obj in (api.get("NodeClaim", "nc-ended"), api.get("Node", "node-nc-ended")):
        labels = obj["metadata"]["labels"]
        assert labels["karpenter.sh/capacity-type"] == "on-demand"
        assert not any(k in labels for k in reservation_labels)
    for obj in (api.get("NodeClaim", "nc-kept"), api.get("Node", "node-nc-kept")):
        labels = obj["metadata"]["labels"]
        assert (labels["karpenter.sh/capacity-type"], labels["karpenter.k8s.aws/capacity-reservation-id"],
                labels["karpenter.k8s.aws/capacity-reservation-type"]) == ("reserved", CR_ID, "default")
