"""Rows of upstream's Azure instance-type suite checked against karpy's Azure provider reading resource SKUs
(karpy/cloudprovider/arm/skus.py): the SKU list is handed in directly, as ``Microsoft.Compute/skus`` answers it."""

from __future__ import annotations

from karpy.cloudprovider.arm.skus import InstanceTypes
from karpy.cloudprovider.azure import MISSING_PRICE

LOCATION = "eastus"
PREMIUM = "karpenter.azure.com/sku-storage-premium-capable"
ACCEL = "karpenter.azure.com/sku-networking-accelerated"


def sku(name: str, vcpus: int, memory_gb: float, *, accelerated: bool = True, premium: bool = True,
        family: str = "standardDSv5Family") -> dict:
    caps = {"vCPUs": str(vcpus), "MemoryGB": f"{memory_gb:g}", "CpuArchitectureType": "x64",
            "HyperVGenerations": "V1,V2", "PremiumIO": str(premium), "LowPriorityCapable": "True",
            "EphemeralOSDiskSupported": "False", "EncryptionAtHostSupported": "True",
            "AcceleratedNetworkingEnabled": str(accelerated)}
    return {"resourceType": "virtualMachines", "name": name, "tier": "Standard", "family": family,
            "size": name.removeprefix("Standard_"), "locations": [LOCATION],
            "locationInfo": [{"location": LOCATION, "zones": ["1", "2", "3"], "zoneDetails": []}],
            "capabilities": [{"name": k, "value": v} for k, v in caps.items()], "restrictions": []}


def types_of(skus: list[dict]):
    its = InstanceTypes(lambda: skus, LOCATION)
    its.refresh()
    return {it.name: it for it in its.list({"kind": "AKSNodeClass", "spec": {"imageFamily": "Ubuntu2204"}})}


def test_a_sku_missing_from_the_pricing_data_is_offered_at_the_penalty_price():
    promo = sku("Standard_D2_v2_Promo", 2, 7, family="standardDv2Family")
    types = types_of([sku("Standard_D2s_v5", 2, 8), promo])
    it = types["Standard_D2_v2_Promo"]
    by_ct = {}
    for o in it.offerings:
        assert o.available
        by_ct.setdefault(o.capacity_type, set()).add(o.price)
    assert by_ct == {"on-demand": {MISSING_PRICE}, "spot": {MISSING_PRICE}}
    # a priced SKU keeps its price, far below the penalty
    assert max(o.price for o in types["Standard_D2s_v5"].offerings) < MISSING_PRICE


def test_boolean_sku_labels_carry_exactly_true_or_false():
    skus = [sku("Standard_D2s_v5", 2, 8, accelerated=True, premium=True),
            sku("Standard_D4_v5", 4, 16, accelerated=False, premium=False),
            sku("Standard_E4s_v5", 4, 32, accelerated=True, premium=True, family="standardESv5Family")]
    types = types_of(skus)
    assert set(types) == {s["name"] for s in skus}
    for it in types.values():
        for key in (PREMIUM, ACCEL):
            assert it.labels[key] in ("true", "false"), (it.name, key)
    assert types["Standard_D4_v5"].labels[ACCEL] == "false" and types["Standard_D4_v5"].labels[PREMIUM] == "false"
    assert types["Standard_D2s_v5"].labels[ACCEL] == "true" and types["Standard_D2s_v5"].labels[PREMIUM] == "true"
