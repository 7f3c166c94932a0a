"""Rows of upstream's Azure instance-type suite (Azure/karpenter-provider-azure
pkg/providers/instancetype/suite_test.go, v1.14) that hang on what a Resource SKU says: spot only where the SKU is
``LowPriorityCapable``, and UltraSSD per zone (``locationInfo.zoneDetails``). karpy's Azure provider reads the SKUs
from the fake ARM through the real SDK; pods are scheduled by karpy's engine and the NodeClaims launched."""

from __future__ import annotations

import pytest

from karpy.cloudprovider.provider import InsufficientCapacityError
from tests.helpers import pod

from .test_provider import NODECLASS, claim, provider  # noqa: F401 - the provider fixture on the fake ARM
from .test_provider_conformance import CAPACITY_TYPE, INSTANCE_TYPE, ZONE, nodepool, provision, req, vm_puts

ULTRA = "karpenter.azure.com/sku-storage-ultra-ssd"
ZONES = {"eastus-1", "eastus-2", "eastus-3"}


def set_capability(fake, provider, name: str, capability: str, value: str) -> None:
    """Set (or add) one capability of SKU ``name`` in the fake's SKU list, and read the list again."""
    (sku,) = [s for s in fake.skus if s["name"] == name]
    caps = [c for c in sku["capabilities"] if c["name"] != capability]
    sku["capabilities"] = [*caps, {"name": capability, "value": value}]
    provider.types.refresh(force=True)


def ultra_ssd_in(fake, provider, name: str, *zones: str) -> None:
    """UltraSSD available in ``zones`` ("1", "2", ...) of SKU ``name``, as ``locationInfo[].zoneDetails`` says."""
    (sku,) = [s for s in fake.skus if s["name"] == name]
    sku["locationInfo"][0]["zoneDetails"] = [
        {"name": [z], "capabilities": [{"name": "UltraSSDAvailable", "value": "True"}]} for z in zones]
    provider.types.refresh(force=True)


def types_for(provider, np: dict) -> dict:
    return {it.name: it for it in provider.get_instance_types(np, NODECLASS)}


# --- L2484 "should not have spot offerings available for SKUs with LowPriorityCapable=False" --------------------
def test_a_sku_that_is_not_low_priority_capable_has_on_demand_offerings_and_no_spot(fake, provider):
    set_capability(fake, provider, "Standard_D4pls_v6", "LowPriorityCapable", "False")
    types = types_for(provider, nodepool())
    it = types["Standard_D4pls_v6"]
    on_demand = {o.zone for o in it.offerings if o.available and o.capacity_type == "on-demand"}
    spot = [o for o in it.offerings if o.available and o.capacity_type == "spot"]
    assert on_demand == ZONES | {"0"}  # every zone and the regional placement stay on sale on demand
    assert spot == []
    # a SKU that is LowPriorityCapable keeps its spot offerings
    other = types["Standard_D2pls_v6"]
    assert {o.zone for o in other.offerings if o.available and o.capacity_type == "spot"} == ZONES | {"0"}


def test_a_spot_launch_of_a_sku_that_is_not_low_priority_capable_fails_without_a_vm_request(fake, provider):
    set_capability(fake, provider, "Standard_D4pls_v6", "LowPriorityCapable", "False")
    with pytest.raises(InsufficientCapacityError):
        provider.create(claim(types=("Standard_D4pls_v6",), ct=("spot",)))
    assert vm_puts(fake) == []
    # allowed both capacity types, the size launches on demand
    out = provider.create(claim(name="either", types=("Standard_D4pls_v6",), ct=("spot", "on-demand")))
    assert out["metadata"]["labels"][CAPACITY_TYPE] == "on-demand"
    (vm,) = vm_puts(fake)
    assert vm["properties"]["priority"] == "Regular"


def test_a_spot_nodepool_schedules_onto_sizes_that_are_low_priority_capable_only(fake, provider):
    set_capability(fake, provider, "Standard_D2pls_v6", "LowPriorityCapable", "False")
    np = nodepool(req(CAPACITY_TYPE, "spot"), req(INSTANCE_TYPE, "Standard_D2pls_v6", "Standard_D4pls_v6"))
    results, (out,) = provision(provider, np, [pod("p", cpu="1")])
    assert not results.errors
    labels = out["metadata"]["labels"]
    assert (labels[INSTANCE_TYPE], labels[CAPACITY_TYPE]) == ("Standard_D4pls_v6", "spot")


# --- L2786 "should propagate UltraSSD values from available offerings" -------------------------------------------
# Upstream gives each offering the UltraSSD values of its zone ("true" and "false" where the zone has UltraSSD,
# "false" elsewhere; the regional offering: the SKU's own capability) and the instance type the union over its
# available offerings. karpy carries a size's sku-storage-ultra-ssd on its offerings when it varies, and its
# scheduler and launch read the values of the offerings a NodeClaim may still land on.


def ultra_values(it) -> dict[tuple[str, str], set[str]]:
    """(zone, capacity type) -> the sku-storage-ultra-ssd values of each available offering of ``it`` (the size's
    own label where its offerings carry none)."""
    own = {it.labels[ULTRA]} if ULTRA in it.labels else set()
    return {(o.zone, o.capacity_type): {v for k, vs in o.labels if k == ULTRA for v in vs} or own
            for o in it.offerings if o.available}


def test_an_instance_types_ultra_ssd_values_are_those_of_its_available_offerings(fake, provider):
    """The It body: for every instance type, its values are the union of its available offerings' values. With
    UltraSSD in zone 1 of Standard_D4pls_v6, its eastus-1 offerings hold "true" and "false", the others "false";
    once the eastus-1 offerings are out of capacity the size holds "false" only, and a pod asking for UltraSSD is
    not launched on it, while it still is while zone 1 is on sale."""
    ultra_ssd_in(fake, provider, "Standard_D4pls_v6", "1")
    np = nodepool(req(INSTANCE_TYPE, "Standard_D4pls_v6"), req(CAPACITY_TYPE, "on-demand"))
    types = types_for(provider, nodepool())
    for it in types.values():
        union = set().union(*ultra_values(it).values())
        assert union == (set(it.offering_label_values(ULTRA)) or {it.labels[ULTRA]}), it.name
    d4 = ultra_values(types["Standard_D4pls_v6"])
    assert {k: v for k, v in d4.items() if k[0] == "eastus-1"} == {
        ("eastus-1", "on-demand"): {"true", "false"}, ("eastus-1", "spot"): {"true", "false"}}
    assert all(v == {"false"} for k, v in d4.items() if k[0] != "eastus-1")
    assert set(types["Standard_D2pls_v6"].offering_label_values(ULTRA)) == set()
    assert types["Standard_D2pls_v6"].labels[ULTRA] == "false"
    for ct in ("on-demand", "spot"):
        provider.mark_unavailable("Standard_D4pls_v6", "eastus-1", ct)
    assert types_for(provider, np)["Standard_D4pls_v6"].offering_label_values(ULTRA) == {"false"}
    results, created = provision(provider, np, [pod("p", cpu="1", node_selector={ULTRA: "true"})])
    assert results.errors and created == [] and vm_puts(fake) == []


def test_a_size_without_ultra_ssd_anywhere_offers_false_only(fake, provider):
    """The part of upstream's outcome karpy's one value gives: no zone with UltraSSD, no offering says "true", so
    the size carries "false"; a pod asking for UltraSSD stays pending on it, one asking for none lands."""
    np = nodepool(req(INSTANCE_TYPE, "Standard_D4pls_v6"), req(CAPACITY_TYPE, "on-demand"))
    assert types_for(provider, np)["Standard_D4pls_v6"].labels[ULTRA] == "false"
    results, created = provision(provider, np, [pod("p", cpu="1", node_selector={ULTRA: "true"})])
    assert results.errors and created == [] and vm_puts(fake) == []
    results, (out,) = provision(provider, np, [pod("q", cpu="1", node_selector={ULTRA: "false"})])
    assert not results.errors and out["metadata"]["labels"][ULTRA] == "false"


def test_a_pod_asking_for_ultra_ssd_lands_in_the_zone_of_a_size_that_has_it(fake, provider):
    """UltraSSD in zone 1 only: upstream's offering in eastus-1 says "true" (and "false"), so the size's
    requirement holds "true" and a pod asking for UltraSSD is launched there, in eastus-1."""
    ultra_ssd_in(fake, provider, "Standard_D4pls_v6", "1")
    np = nodepool(req(INSTANCE_TYPE, "Standard_D4pls_v6"), req(CAPACITY_TYPE, "on-demand"))
    results, created = provision(provider, np, [pod("p", cpu="1", node_selector={ULTRA: "true"})])
    assert not results.errors and len(created) == 1
    assert created[0]["metadata"]["labels"][ZONE] == "eastus-1"


def test_a_pod_asking_for_no_ultra_ssd_lands_on_a_size_that_has_it_in_every_zone(fake, provider):
    """UltraSSD in every zone: upstream's offerings all hold "false" as well, so a pod asking for
    sku-storage-ultra-ssd=false still gets the size."""
    ultra_ssd_in(fake, provider, "Standard_D4pls_v6", "1", "2", "3")
    np = nodepool(req(INSTANCE_TYPE, "Standard_D4pls_v6"), req(CAPACITY_TYPE, "on-demand"))
    results, created = provision(provider, np, [pod("p", cpu="1", node_selector={ULTRA: "false"})])
    assert not results.errors and len(created) == 1
