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


# --- the requirements every SKU carries (upstream's "Basic" context) -------------------------------------------
ULTRA = "karpenter.azure.com/sku-storage-ultra-ssd"
HYPERV = "karpenter.azure.com/sku-hyperv-generation"
EPHEMERAL = "karpenter.azure.com/sku-storage-ephemeralos-maxsize"


def with_caps(s: dict, zone_ultra: tuple[str, ...] = (), **caps: str) -> dict:
    """A SKU with capabilities set (or added), and UltraSSD available in ``zone_ultra`` (locationInfo.zoneDetails)."""
    have = {c["name"]: c for c in s["capabilities"]}
    for k, v in caps.items():
        if k in have:
            have[k]["value"] = v
        else:
            s["capabilities"].append({"name": k, "value": v})
    if zone_ultra:
        s["locationInfo"][0]["zoneDetails"] = [
            {"name": [z], "capabilities": [{"name": "UltraSSDAvailable", "value": "True"}]} for z in zone_ultra]
    return s


def test_every_sku_carries_the_well_known_requirements():
    """Upstream's "should have all the requirements on every sku": arch, os, instance type, SKU name, premium IO,
    accelerated networking, UltraSSD, Hyper-V generation and the largest ephemeral OS disk, from the capabilities
    the Resource SKUs API gives (upstream's fake A100 SKU among them)."""
    a100 = with_caps(sku("Standard_NC24ads_A100_v4", 24, 220, family="StandardNCADSA100v4Family"),
                     zone_ultra=("1", "2", "3"), HyperVGenerations="V2", GPUs="1", EphemeralOSDiskSupported="True",
                     SupportedEphemeralOSDiskPlacements="ResourceDisk,CacheDisk", CachedDiskBytes="274877906944",
                     MaxResourceVolumeMB="65536", NvmeDiskSizeInMiB="915527")
    nvme = with_caps(sku("Standard_D16ds_v6", 16, 64, family="standardDDSv6Family"), EphemeralOSDiskSupported="True",
                     SupportedEphemeralOSDiskPlacements="NvmeDisk", NvmeDiskSizeInMiB="915527",
                     CachedDiskBytes="0", MaxResourceVolumeMB="0")
    resource_only = with_caps(sku("Standard_E4ds_v5", 4, 32, family="standardEDSv5Family"),
                              EphemeralOSDiskSupported="True", MaxResourceVolumeMB="409600", CachedDiskBytes="0",
                              HyperVGenerations="V1")
    # neither capability named: upstream's "false" for both booleans
    bare = sku("Standard_D4_v5", 4, 16)
    bare["capabilities"] = [c for c in bare["capabilities"]
                            if c["name"] not in ("PremiumIO", "AcceleratedNetworkingEnabled")]
    types = types_of([a100, nvme, resource_only, bare, sku("Standard_D2s_v5", 2, 8)])
    assert len(types) == 5
    for it in types.values():
        for key in ("kubernetes.io/arch", "kubernetes.io/os", "node.kubernetes.io/instance-type",
                    "karpenter.azure.com/sku-name", PREMIUM, ACCEL, HYPERV):
            assert key in it.labels, (it.name, key)
        # UltraSSD: the size's own label, or its offerings' where the value varies by zone
        assert ULTRA in it.labels or it.offering_label_values(ULTRA), it.name
    # values derived as upstream derives them
    assert types["Standard_NC24ads_A100_v4"].labels[EPHEMERAL] == "274"  # CachedDiskBytes in GB: NVMe is not a placement
    assert types["Standard_D16ds_v6"].labels[EPHEMERAL] == "959"  # 915527 MiB of NVMe disk, in GB
    assert types["Standard_E4ds_v5"].labels[EPHEMERAL] == "429"  # 400 GiB resource disk, in GB
    assert EPHEMERAL not in types["Standard_D2s_v5"].labels  # EphemeralOSDiskSupported False: the label does not exist
    assert types["Standard_NC24ads_A100_v4"].offering_label_values(ULTRA) == {"true", "false"}
    assert types["Standard_D2s_v5"].labels[ULTRA] == "false"
    assert types["Standard_NC24ads_A100_v4"].labels[HYPERV] == "2"
    assert types["Standard_E4ds_v5"].labels[HYPERV] == "1"
    assert types["Standard_D4_v5"].labels[PREMIUM] == "false" and types["Standard_D4_v5"].labels[ACCEL] == "false"
    a = types["Standard_NC24ads_A100_v4"]
    assert (a.labels["karpenter.azure.com/sku-gpu-manufacturer"], a.labels["karpenter.azure.com/sku-gpu-count"],
            a.capacity.get("nvidia.com/gpu")) == ("nvidia", "1", 1)


def test_ultra_ssd_needs_every_zone_it_is_offered_in():
    """UltraSSD in zone 1 only: a node in zone 2 would not have it, so only the zone-1 offerings offer "true"
    (with "false"); the others, and the regional one of a SKU without the capability itself, offer "false"."""
    partial = with_caps(sku("Standard_D8s_v5", 8, 32), zone_ultra=("1",))
    regional = with_caps(sku("Standard_D4s_v5", 4, 16), UltraSSDAvailable="True")
    regional["locationInfo"][0]["zones"] = []
    types = types_of([partial, regional])

    def values(it) -> dict[str, set[str]]:
        return {o.zone: {v for k, vs in o.labels if k == ULTRA for v in vs} for o in it.offerings}

    d8 = values(types["Standard_D8s_v5"])
    assert ULTRA not in types["Standard_D8s_v5"].labels
    assert {z: v for z, v in d8.items() if v != {"false"}} == {"eastus-1": {"true", "false"}}
    assert {o.zone for o in types["Standard_D4s_v5"].offerings} == {"0"}
    # a SKU without zones: the SKU's own capability
    assert values(types["Standard_D4s_v5"]) == {"0": {"true", "false"}}


# --- GPU sizes per image family (upstream's "Filtering GPU SKUs AzureLinux") -------------------------------------
def gpu_sku(name: str, vcpus: int, memory_gb: float, gpus: int, family: str) -> dict:
    return with_caps(sku(name, vcpus, memory_gb, family=family), GPUs=str(gpus))


GPU_SKUS = [gpu_sku("Standard_NC6", 6, 56, 1, "standardNCFamily"),  # registry: Ubuntu (and Windows) only
            gpu_sku("Standard_NC16as_T4_v3", 16, 110, 1, "Standard NCASv3_T4 Family"),
            gpu_sku("Standard_NC24ads_A100_v4", 24, 220, 1, "StandardNCADSA100v4Family"),
            gpu_sku("Standard_NG8ads_V620_v1", 8, 16, 1, "StandardNGADSV620v1Family"),  # not in the registry
            sku("Standard_D2s_v5", 2, 8)]


def test_azure_linux_leaves_out_ubuntu_only_gpu_sizes():
    its = InstanceTypes(lambda: GPU_SKUS, LOCATION)
    its.refresh()
    azl = {it.name for it in its.list({"kind": "AKSNodeClass", "spec": {"imageFamily": "AzureLinux"}})}
    assert "Standard_NC6" not in azl
    assert {"Standard_NC16as_T4_v3", "Standard_NC24ads_A100_v4", "Standard_D2s_v5"} <= azl
    ubuntu = {it.name: it for it in its.list({"kind": "AKSNodeClass", "spec": {"imageFamily": "Ubuntu2204"}})}
    nc6 = ubuntu["Standard_NC6"]  # the same SKU is offered on Ubuntu, as the GPU size it is
    assert nc6.capacity.get("nvidia.com/gpu") == 1
    assert nc6.labels["karpenter.azure.com/sku-gpu-manufacturer"] == "nvidia"
    # a SKU with GPUs that the registry does not list is offered on no image family
    assert "Standard_NG8ads_V620_v1" not in azl | set(ubuntu)


# --- the same labels in `karpy simulate` (the offline catalog) -----------------------------------------------------
def test_simulate_gives_each_pod_a_node_with_the_capacity_type_its_aks_priority_label_asks_for(tmp_path):
    """scalesetpriority/priority follow the capacity type (upstream's Azure offerings carry them): a pod asking
    for "regular" gets an on-demand node labelled so even where spot is cheaper and allowed, one asking for "spot"
    a spot node, and the Azure Disk CSI zone key resolves to the zone."""
    import json

    import yaml
    from click.testing import CliRunner

    from karpy.cli import main

    selectors = {"regular": {"kubernetes.azure.com/scalesetpriority": "regular"},
                 "prio-regular": {"kubernetes.azure.com/priority": "regular"},
                 "spot": {"kubernetes.azure.com/priority": "spot"},
                 "csi-zone": {"topology.disk.csi.azure.com/zone": "eastus-2"}}
    docs = [{"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"}, "spec": {
                "template": {"spec": {"nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass",
                                                       "name": "default"},
                                      "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In",
                                                        "values": ["spot", "on-demand"]}]}}}},
            {"apiVersion": "karpenter.azure.com/v1beta1", "kind": "AKSNodeClass", "metadata": {"name": "default"},
             "spec": {"imageFamily": "Ubuntu2204"}}]
    for name, sel in selectors.items():
        docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                     "spec": {"nodeSelector": sel, "containers": [{"name": "app", "image": "busybox", "resources": {
                         "requests": {"cpu": "100m"}}}]}})
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    r = CliRunner().invoke(main, ["simulate", str(path), "-o", "json", "-q"])
    assert r.exit_code == 0, r.output
    items = json.loads(r.stdout)["items"]
    nodes = {i["metadata"]["name"]: i["metadata"]["labels"] for i in items if i["kind"] == "Node"}
    placed = {i["metadata"]["name"]: nodes.get(i["spec"].get("nodeName")) for i in items if i["kind"] == "Pod"}
    assert all(placed.values()), placed
    assert placed["regular"]["kubernetes.azure.com/scalesetpriority"] == "regular"
    assert placed["regular"]["karpenter.sh/capacity-type"] == "on-demand"
    assert placed["prio-regular"]["karpenter.sh/capacity-type"] == "on-demand"
    assert placed["spot"]["karpenter.sh/capacity-type"] == "spot"
    assert placed["csi-zone"]["topology.kubernetes.io/zone"] == "eastus-2"
    assert "topology.disk.csi.azure.com/zone" not in placed["csi-zone"]
    assert sum(i["kind"] == "NodeClaim" for i in items) <= len(selectors)  # no NodeClaim launched in vain


def test_a_sku_the_offline_catalog_does_not_know_is_labelled_from_its_name_and_capabilities():
    """Size parts from the name as upstream parses them (the accelerator is not part of the series), GPUs from the
    GPUs capability and upstream's registry."""
    h100 = with_caps(sku("Standard_NC40ads_H100_v5", 40, 320, family="standardNCadsH100v5Family"), GPUs="1")
    it = types_of([h100])["Standard_NC40ads_H100_v5"]
    want = {"karpenter.azure.com/sku-family": "N", "karpenter.azure.com/sku-series": "NCads_v5",
            "karpenter.azure.com/sku-version": "5", "karpenter.azure.com/sku-gpu-name": "H100",
            "karpenter.azure.com/sku-gpu-manufacturer": "nvidia", "karpenter.azure.com/sku-gpu-count": "1",
            "karpenter.azure.com/sku-cpu": "40", "karpenter.azure.com/sku-memory": "327680"}
    assert {k: it.labels.get(k) for k in want} == want
    assert it.capacity.get("nvidia.com/gpu") == 1
