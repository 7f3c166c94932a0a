"""Instance types, offerings and prices from moto's DescribeInstanceTypes/Offerings, and upstream's allocatable."""

from __future__ import annotations

import json

from karpy.cloudprovider.ec2.clients import Clients
from karpy.cloudprovider.ec2.instancetypes import InstanceTypes, parse_price_list
from karpy.resources import CPU, EPHEMERAL, MEMORY, PODS

from .conftest import REGION, FaultInjector, nodeclass, preload

MI = 2**20
GI = 2**30


def status(account) -> dict:
    return {"subnets": [{"id": s, "zone": z, "zoneID": ""} for z, s in account.subnets.items()],
            "amis": [{"id": "ami-a", "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]},
                     {"id": "ami-x", "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}


def load(account, catalog, **kw):
    c = Clients(max_attempts=1)
    faults = FaultInjector(c.ec2, c.pricing)
    its = InstanceTypes(c, REGION, **kw)
    preload(its, catalog)
    return its, c, faults


def by_name(types):
    return {t.name: t for t in types}


def test_allocatable_matches_upstreams_reference_page(account, ec2_catalog):
    its, _, _ = load(account, ec2_catalog)
    its.refresh()
    types = by_name(its.list({**nodeclass(), "status": status(account)}))
    assert len(types) > 500
    m5 = types["m5.large"].allocatable
    assert (m5[CPU], m5[MEMORY] // MI, m5[PODS], m5[EPHEMERAL]) == (1930, 6903, 29, 17 * GI)
    assert types["m7g.large"].allocatable[MEMORY] // MI == 6844
    assert types["m7g.large"].labels["kubernetes.io/arch"] == "arm64"
    assert types["m7g.large"].labels["karpenter.k8s.aws/instance-category"] == "m"
    assert types["m7g.large"].labels["karpenter.k8s.aws/instance-generation"] == "7"
    # zones: the type's offered zones within the NodeClass' subnets
    assert {o.zone for o in types["m5.large"].offerings} == {"us-west-2a", "us-west-2b", "us-west-2c"}


def test_reserved_enis_max_pods_and_memory_overhead(account, ec2_catalog):
    its, _, _ = load(account, ec2_catalog, reserved_enis=1, vm_memory_overhead=0.1)
    its.refresh()
    t = by_name(its.list({**nodeclass(), "status": status(account)}))["m5.large"]
    assert t.capacity[PODS] == 2 * 9 + 2
    assert t.capacity[MEMORY] // MI == 8192 - 820
    assert t.overhead[MEMORY] == (11 * 29 + 255 + 100) * MI  # kube-reserved counts every ENI on AL2023
    t = by_name(its.list({**nodeclass(kubelet={"maxPods": 50}), "status": status(account)}))["m5.large"]
    assert t.capacity[PODS] == 50


def test_prices_static_when_pricing_api_fails_and_spot_from_history(account, ec2_catalog):
    its, _, faults = load(account, ec2_catalog)
    faults.spot_prices = {("m5.large", "us-west-2a"): 0.031, ("m5.large", "us-west-2b"): 0.029}
    its.refresh()  # moto has no Pricing API: karpy's static table stays
    assert its.on_demand_source == "static" and its.on_demand["m5.large"] == 0.096
    t = by_name(its.list({**nodeclass(), "status": status(account)}))["m5.large"]
    spot = {o.zone: o for o in t.offerings if o.capacity_type == "spot"}
    assert spot["us-west-2a"].price == 0.031 and spot["us-west-2a"].available
    assert not spot["us-west-2c"].available  # no spot price known there
    od = [o for o in t.offerings if o.capacity_type == "on-demand"]
    assert all(o.price == 0.096 and o.available for o in od)


def test_pricing_api_answer_replaces_static_prices(account, ec2_catalog):
    its, c, _ = load(account, ec2_catalog)
    doc = {"product": {"attributes": {"instanceType": "m5.large"}},
           "terms": {"OnDemand": {"x": {"priceDimensions": {"y": {"pricePerUnit": {"USD": "0.1000000000"}}}}}}}
    assert parse_price_list([json.dumps(doc)]) == {"m5.large": 0.1}

    def answer(model, params, **_):
        from botocore.awsrequest import AWSResponse

        if model.name == "GetProducts":
            return AWSResponse(None, 200, {}, None), {"PriceList": [json.dumps(doc)], "FormatVersion": "aws_v1"}
        return None

    c.pricing.meta.events.register_first("before-call.pricing.GetProducts", answer)
    its.update_on_demand()
    assert its.on_demand_source == "pricing-api" and its.on_demand["m5.large"] == 0.1


def test_isolated_vpc_never_calls_pricing(account, ec2_catalog):
    its, _, faults = load(account, ec2_catalog, isolated_vpc=True)
    its.refresh()
    assert "GetProducts" not in faults.calls and its.on_demand_source == "static"


def test_unavailable_offerings_are_marked(account, ec2_catalog):
    its, _, _ = load(account, ec2_catalog)
    its.refresh()
    t = by_name(its.list({**nodeclass(), "status": status(account)},
                         unavailable=lambda n, z, ct: (n, z, ct) == ("m5.large", "us-west-2a", "on-demand")))["m5.large"]
    assert [o.available for o in t.offerings if o.capacity_type == "on-demand" and o.zone == "us-west-2a"] == [False]
