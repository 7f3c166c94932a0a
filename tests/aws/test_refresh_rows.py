"""Upstream rows that need the cloud's catalog to change during a run, checked against karpy's AWS provider on moto
(over HTTP): DescribeInstanceTypes and DescribeInstanceTypeOfferings are read again (every 12 hours, or when
upstream's test forces it) and the provider's instance types follow; a NodeClaim whose instance type or offering
the refreshed catalog no longer has drifts as InstanceTypeNotFound (kubernetes-sigs/karpenter
pkg/controllers/nodeclaim/disruption/drift_test.go); the AMI drift reads the NodeClaim's ``status.imageID``
(aws/karpenter-provider-aws pkg/cloudprovider/suite_test.go); unpriced types keep only unavailable offerings."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from karpy.disruption.drift import instance_type_not_found

from .conftest import ZONES, claim

NODEPOOL = {"metadata": {"name": "graviton"}, "spec": {"template": {"spec": {
    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}}


class Answers:
    """Rewrites what moto answers to DescribeInstanceTypes and DescribeInstanceTypeOfferings on the provider's own
    EC2 client, as the account would change between two reads."""

    def __init__(self, ec2):
        self.drop_types: set[str] = set()
        self.drop_offerings: set[tuple[str, str]] = set()  # (type, zone); zone "*" for every zone
        self.add_offerings: list[tuple[str, str]] = []
        ev = ec2.meta.events
        ev.register("after-call.ec2.DescribeInstanceTypes", self._types)
        ev.register("after-call.ec2.DescribeInstanceTypeOfferings", self._offerings)

    def _types(self, parsed: dict, **_) -> None:
        if isinstance(parsed, dict):
            parsed["InstanceTypes"] = [i for i in parsed.get("InstanceTypes", [])
                                       if i["InstanceType"] not in self.drop_types]

    def _offerings(self, parsed: dict, **_) -> None:
        if not isinstance(parsed, dict):
            return
        kept = [o for o in parsed.get("InstanceTypeOfferings", [])
                if (o["InstanceType"], o["Location"]) not in self.drop_offerings
                and (o["InstanceType"], "*") not in self.drop_offerings]
        if not parsed.get("NextToken"):  # added once, on the last page
            kept += [{"InstanceType": t, "Location": z, "LocationType": "availability-zone"}
                     for t, z in self.add_offerings]
        parsed["InstanceTypeOfferings"] = kept


def _offered(types) -> dict[str, list[tuple]]:
    """name -> sorted (zone, capacity type, price, available) of every offering."""
    return {it.name: sorted((o.zone, o.capacity_type, o.price, o.available) for o in it.offerings) for it in types}


@pytest.fixture
def answers(env):
    p, nc, faults, account = env
    return Answers(p.c.ec2)


# --- Provider Cache: the catalog read again (aws pkg/providers/instancetype/suite_test.go) --------------------------

def test_a_type_gone_from_describe_instance_types_leaves_the_list_and_drifts_its_nodeclaim(env, answers):
    """It("updates to the instanceTypeInfo should result in a different set of instance types"): read again with
    nothing changed, the list is the same; read again with one type gone from DescribeInstanceTypes, the list is
    different and lacks it. The NodeClaim launched on that type is then InstanceTypeNotFound (drift_test.go It
    "should detect stale instance type drift if the instance type doesn't exist", with EC2's own answer)."""
    p, nc, faults, account = env
    launched = p.create(claim(types=("c7g.large",)))
    labels = launched["metadata"]["labels"]
    list1 = p.get_instance_types(NODEPOOL, nc)
    assert "c7g.large" in {it.name for it in list1}
    assert not instance_type_not_found(list1, labels)
    p.types.update_types()  # moto answers the same
    list2 = p.get_instance_types(NODEPOOL, nc)
    assert _offered(list2) == _offered(list1)
    answers.drop_types = {"c7g.large"}
    p.types.update_types()
    list3 = p.get_instance_types(NODEPOOL, nc)
    assert set(_offered(list2)) - set(_offered(list3)) == {"c7g.large"}
    assert instance_type_not_found(list3, labels)


def test_an_offering_added_to_describe_instance_type_offerings_is_read_within_a_run(env, answers):
    """It("updates to the instanceTypeOfferingInfo should result in a different set of instance types"): read again
    with nothing changed, the list is the same; once the account offers a type in one more zone, the provider's
    own 12-hour refresh (no restart, no forced read) gives a different list, with that zone's offerings."""
    p, nc, faults, account = env
    answers.drop_offerings = {("m7g.large", "us-west-2c")}  # the account before: m7g.large not in us-west-2c
    p.types.update_offerings()
    list1 = p.get_instance_types(NODEPOOL, nc)
    zones1 = {o.zone for it in list1 if it.name == "m7g.large" for o in it.offerings}
    assert zones1 == {"us-west-2a", "us-west-2b"}
    p.types.update_offerings()  # nothing changed
    list2 = p.get_instance_types(NODEPOOL, nc)
    assert _offered(list2) == _offered(list1)
    answers.drop_offerings = set()
    answers.add_offerings = [("m7g.large", "us-west-2c")]
    real_now = p.types.now
    p.types.now = lambda: real_now() + 12 * 3600 + 1  # twelve hours on: the provider reads the account again
    list3 = p.get_instance_types(NODEPOOL, nc)
    assert _offered(list3) != _offered(list2)
    zones3 = {o.zone for it in list3 if it.name == "m7g.large" for o in it.offerings if o.available}
    assert zones3 == set(ZONES)


@pytest.mark.parametrize("gone", ["every-zone", "its-zone"])
def test_an_offering_gone_from_the_account_makes_its_nodeclaim_instance_type_not_found(env, answers, gone):
    """drift_test.go It("should detect stale instance type drift if the instance type offerings doesn't exist") and
    It("... if the instance type offerings aren't compatible with the nodeclaim"), with EC2's own answers: the
    NodeClaim's type is still listed but DescribeInstanceTypeOfferings no longer offers it anywhere (no offerings),
    or only in zones other than the NodeClaim's. Another zone's loss changes nothing."""
    p, nc, faults, account = env
    launched = p.create(claim(types=("c7g.large",)))
    labels = launched["metadata"]["labels"]
    zone = labels["topology.kubernetes.io/zone"]
    other = next(z for z in ZONES if z != zone)
    answers.drop_offerings = {("c7g.large", other)}
    p.types.update_offerings()
    assert not instance_type_not_found(p.get_instance_types(NODEPOOL, nc), labels)
    answers.drop_offerings = {("c7g.large", "*" if gone == "every-zone" else zone)}
    p.types.update_offerings()
    types = p.get_instance_types(NODEPOOL, nc)
    (it,) = [t for t in types if t.name == "c7g.large"]
    if gone == "every-zone":
        assert it.offerings == []
    else:
        assert it.offerings and zone not in {o.zone for o in it.offerings}
    assert instance_type_not_found(types, labels)


# --- the NodeClaim disruption controller marks the drift (core drift_test.go) ---------------------------------------

def _drift_after_catalog_change(change) -> tuple[dict | None, dict | None]:
    """A launched NodeClaim whose NodePool's instance types then change as ``change`` (name, types) -> types says,
    as upstream's test changes its fake cloud provider's: its Drifted condition within the first hour and two
    hours after creation."""
    from controllers.harness import Harness, cond  # noqa: PLC0415

    h = Harness()
    h.setup()
    c, _ = h.launch_node(instance_types=["c-4x-amd64-linux"])
    name = c["metadata"]["name"]
    real = h.provider.get_instance_types
    h.provider.get_instance_types = lambda np, ncl: change(c["metadata"]["labels"], real(np, ncl))
    h.reconcile("nodeclaim.disruption", name)
    early = cond(h.get("NodeClaim", name), "Drifted")
    h.tick(2 * 3600)
    h.reconcile("nodeclaim.disruption", name)
    return early, cond(h.get("NodeClaim", name), "Drifted")


def _no_types(labels, types):
    return []


def _no_offerings(labels, types):
    return [dataclasses.replace(t, offerings=[]) for t in types]


def _offerings_elsewhere(labels, types):
    name = labels["node.kubernetes.io/instance-type"]
    return [dataclasses.replace(t, offerings=[dataclasses.replace(o, zone="test-zone-elsewhere") for o in t.offerings])
            if t.name == name else t for t in types]


@pytest.mark.parametrize("change", [_no_types, _no_offerings, _offerings_elsewhere],
                         ids=["instance-type-gone", "offerings-gone", "offerings-in-other-zones"])
def test_a_nodeclaim_whose_instance_type_or_offering_is_gone_drifts(change):
    """drift_test.go It("should detect stale instance type drift if the instance type doesn't exist"), It("... if
    the instance type offerings doesn't exist"), It("... if the instance type offerings aren't compatible with the
    nodeclaim"): two hours after creation the NodeClaim is Drifted (InstanceTypeNotFound); in its first hour the
    instance type is not checked, as upstream."""
    early, late = _drift_after_catalog_change(change)
    assert early is None
    assert late["status"] == "True" and late["reason"] == "InstanceTypeNotFound"


def test_a_nodeclaim_whose_instance_type_and_offering_remain_does_not_drift():
    early, late = _drift_after_catalog_change(lambda labels, types: types)
    assert early is None and late is None


# --- AMI drift reads status.imageID (aws pkg/cloudprovider/suite_test.go) -----------------------------------------

def test_ami_drift_reads_the_nodeclaims_image_id(env):
    """It("should error if the NodeClaim doesn't have ImageID"): without ``status.imageID`` upstream errors and no
    drift decision is made, even with the EC2NodeClass's AMIs moved on; with it, the image recorded there (not the
    instance's) is compared with the AMI a launch would choose now."""
    p, nc, faults, account = env
    launched = p.create(claim())
    (inst,) = account.instances()
    image = launched["status"]["imageID"]
    assert image == inst["ImageId"]
    moved = copy.deepcopy(nc)
    moved["status"]["amis"] = [{"id": "ami-0a2023arm99999999", "requirements": []}]
    nodeclaim = {"metadata": {"name": "nc-1", "labels": dict(launched["metadata"]["labels"])},
                 "status": {"providerID": launched["status"]["providerID"], "imageID": image}}
    assert p.is_drifted(nodeclaim, nc) is None
    assert p.is_drifted(nodeclaim, moved) == "AMIDrift"
    without = copy.deepcopy(nodeclaim)
    without["status"]["imageID"] = ""
    assert p.is_drifted(without, moved) is None
    # status.imageID already the NodeClass's new AMI: not drifted, whatever image the instance reports
    recorded = copy.deepcopy(nodeclaim)
    recorded["status"]["imageID"] = "ami-0a2023arm99999999"
    assert p.is_drifted(recorded, moved) is None


# --- NodeOverlay Preview Instance Pricing: a type EC2 lists but no price covers -------------------------------------

def test_an_unpriced_instance_type_is_listed_with_only_unavailable_offerings(env):
    """It("should not mark offerings as available for unpriced instance types without a NodeOverlay"): moto lists
    p5e.48xlarge (upstream's preview type) in DescribeInstanceTypes, and neither the Pricing API nor karpy's
    static prices price it: the type is listed, its offerings all unavailable; a priced type's are available."""
    p, nc, faults, account = env
    assert "p5e.48xlarge" not in p.types.on_demand
    types = {it.name: it for it in p.get_instance_types(NODEPOOL, nc)}
    preview = types["p5e.48xlarge"]
    assert preview.offerings and not any(o.available for o in preview.offerings)
    assert any(o.available for o in types["m7g.large"].offerings)


# --- a NaN price (kubernetes-sigs/karpenter pkg/controllers/disruption/balanced_adversarial_test.go) ----------------

def test_a_nan_spot_price_from_ec2_is_no_price(env):
    """A DescribeSpotPriceHistory record whose SpotPrice is NaN is ignored: that spot offering has no price and is
    unavailable (never priced NaN); the same type's spot offering priced in another zone keeps its price."""
    import math

    p, nc, faults, account = env
    faults.spot_prices = {("m7g.large", "us-west-2a"): float("nan"), ("m7g.large", "us-west-2b"): 0.031}
    p.types.update_spot()
    (it,) = [t for t in p.get_instance_types(NODEPOOL, nc) if t.name == "m7g.large"]
    spot = {o.zone: o for o in it.offerings if o.capacity_type == "spot"}
    assert not any(math.isnan(o.price) for o in it.offerings)
    assert not spot["us-west-2a"].available
    assert spot["us-west-2b"].available and spot["us-west-2b"].price == pytest.approx(0.031)


def test_a_nan_price_does_not_poison_the_nodepool_totals():
    """It("should not allow NaN price to poison NodePool totals"): a Balanced NodePool of three nodes with a pod each,
    one of them priced NaN: the NodePool's total cost is a number (the NaN counts nothing) and a move scored
    against it has a score that is not NaN."""
    import math

    from disruption_helpers import Cluster, dpod
    from helpers import expr
    from karpy.disruption.balanced import nodepool_totals, score_move
    from karpy.disruption.candidates import GRACEFUL, build_candidates

    c = Cluster()
    c.nodepool("pool-nan", policy="Balanced", budgets=[{"nodes": "100%"}],
               requirements=[expr("karpenter.sh/capacity-type", "In", "on-demand")])
    c.node("node-good-1", itype="std-4", nodepool="pool-nan", pods=[dpod(cpu="1")], price=4.84)
    c.node("node-nan", itype="std-4", nodepool="pool-nan", pods=[dpod(cpu="1")], price=float("nan"))
    c.node("node-good-2", itype="std-4", nodepool="pool-nan", pods=[dpod(cpu="1")], price=4.84)
    snapshot = c.snapshot()
    totals = nodepool_totals(build_candidates(snapshot, GRACEFUL, []), snapshot.nodes)["pool-nan"]
    assert not math.isnan(totals.total_cost) and totals.total_cost == pytest.approx(2 * 4.84)
    assert not math.isnan(score_move(4.84, 2.0, totals, 2).score)


# --- local zones (aws pkg/providers/instancetype/suite_test.go) ---------------------------------------------------

LOCAL_ZONE = "us-west-2-lax-1a"


def test_instances_launch_in_a_local_zone(env, answers):
    """It("should launch instances in local zones"): the EC2NodeClass's only subnet is in a Local Zone, which
    DescribeInstanceTypeOfferings lists like any zone (moto has no Local Zones: the offerings and the subnet's zone
    are the account's answer as EC2 gives it in an opted-in region); a NodeClaim requiring that zone launches there."""
    p, nc, faults, account = env
    answers.add_offerings = [("m7g.large", LOCAL_ZONE)]
    p.types.update_offerings()
    local = copy.deepcopy(nc)
    subnet = local["status"]["subnets"][0]
    local["status"]["subnets"] = [{**subnet, "zone": LOCAL_ZONE}]
    p.lookup = lambda kind, name: local
    (it,) = [t for t in p.get_instance_types(NODEPOOL, local) if t.name == "m7g.large"]
    assert {o.zone for o in it.offerings if o.available} == {LOCAL_ZONE}
    c = claim(types=("m7g.large",))
    c["spec"]["requirements"].append({"key": "topology.kubernetes.io/zone", "operator": "In", "values": [LOCAL_ZONE]})
    out = p.create(c)
    assert out["metadata"]["labels"]["topology.kubernetes.io/zone"] == LOCAL_ZONE
    (fleet,) = faults.calls["CreateFleet"]
    overrides = [o for cfg in fleet["LaunchTemplateConfigs"] for o in cfg["Overrides"]]
    assert overrides and all(o["AvailabilityZone"] == LOCAL_ZONE and o["SubnetId"] == subnet["id"] for o in overrides)


def _preview_overlay(validated: bool = True, **spec) -> dict:
    return {"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": "preview-price"},
            "spec": {"price": "98.32", "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5e.48xlarge"]}], **spec},
            "status": {"conditions": [{"type": "ValidationSucceeded", "status": "True" if validated else "False"}]}}


def test_a_nodeoverlay_price_makes_an_unpriced_type_available(env):
    """It("should mark offerings as available when a NodeOverlay defines a price for an unpriced instance type"):
    with the NodeOverlay gate on, a validated NodeOverlay pricing p5e.48xlarge (listed by moto, priced by nothing)
    gives its offerings that price, available. Not with the gate off, nor for an overlay not validated or with more
    requirements than the instance type (upstream reads only those); a priced type keeps EC2's prices."""
    p, nc, faults, account = env

    def preview():
        types = {it.name: it for it in p.get_instance_types(NODEPOOL, nc)}
        return types["p5e.48xlarge"], types["m7g.large"]

    p.overlays = lambda: [_preview_overlay()]
    it, before = preview()
    assert not any(o.available for o in it.offerings)  # the gate is off
    p.gates = {**p.gates, "NodeOverlay": True}
    it, priced = preview()
    available = [o for o in it.offerings if o.available]
    assert available and {o.price for o in available} == {98.32}
    assert [(o.zone, o.capacity_type, o.price, o.available) for o in priced.offerings] == \
        [(o.zone, o.capacity_type, o.price, o.available) for o in before.offerings]
    for overlay in (_preview_overlay(validated=False),
                    _preview_overlay(requirements=[
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5e.48xlarge"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}])):
        p.overlays = lambda overlay=overlay: [overlay]
        it, _ = preview()
        assert not any(o.available for o in it.offerings)
