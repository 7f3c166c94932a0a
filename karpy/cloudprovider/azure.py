"""Azure (AKS) VM sizes as Karpenter-Azure offers them to NodePools using an AKSNodeClass.

Behaviour learned from Azure/karpenter-provider-azure (pkg/providers/instancetype/
instancetype.go and instancetypes.go, pkg/apis/v1beta1/labels.go, pkg/utils):

Capacity
    cpu = vCPUs; memory = whole GiB of the size (the fraction is dropped) minus
    the VM memory overhead, ceil(bytes x 0.075) (``--vm-memory-overhead-percent``
    default); ephemeral-storage = ``spec.osDiskSizeGB`` x 10^9 bytes (default
    128); pods = ``spec.maxPods``, else 250 (the default Azure CNI overlay
    network); GPUs as ``nvidia.com/gpu`` / ``amd.com/gpu`` by manufacturer.
Overhead
    kube-reserved CPU = 6% of the first core, 4% of the second, 2% of cores 3-4,
    1% above, truncated to millicores; kube-reserved memory = 25% of the first
    4 GiB, 20% of the next 4, 10% of the next 8, 6% up to 128 GiB and 2% above,
    truncated to MiB; no system-reserved; eviction threshold memory.available
    750Mi. (The VM memory overhead is already out of capacity.)
Sizes offered
    as upstream's AKS filter: at least 2 vCPUs and 3.5 GiB, not in the AKS or
    Karpenter restricted lists, no constrained-vCPU or confidential (DC*/EC*)
    sizes, no GPU size outside the supported-GPU list; arm64 sizes are dropped
    when ``spec.artifactStreaming.enabled`` is true, and sizes under 4 vCPUs when
    LocalDNS is on (``status.localDNSState`` Enabled; without a status,
    ``spec.localDNS.mode`` Required). EncryptionAtHost and TrustedLaunch
    filters need SKU capabilities the data lacks; they are not applied.
Offerings
    in every zone of the region: ``<region>-1..3`` where the region has
    availability zones, else the single regional zone ``"0"`` (the label AKS
    gives regional nodes; placement scope ``regional``); no per-zone
    availability of sizes is known. On-demand and spot in each. On-demand
    prices come from the data (57 regions). Spot prices the data knows (90
    size/region pairs) are used; every other spot price is ESTIMATED as
    on-demand x the median spot/on-demand ratio of the known prices of the
    size's family (else of all of them; see the catalog notes) and flagged
    ``price_estimated``. Like
    upstream, sizes missing from Karpenter-Azure's known_skus.yaml are priced
    at the penalty price 999 (on-demand and spot) so they are only used when
    nothing else fits. Sizes without an on-demand price in the region are left
    out.
Registration
    an assumed 60 s from launch to a Ready node (no upstream figure exists).
"""

from __future__ import annotations

import math
import sys
from typing import Any, Mapping

from ..resources import CPU, EPHEMERAL, MEMORY, PODS
from .catalog import CatalogProvider, priced_offering, spec, spot_price
from .types import (
    CAPACITY_ON_DEMAND,
    CAPACITY_SPOT,
    LABEL_ARCH,
    LABEL_INSTANCE_TYPE,
    LABEL_OS,
    LABEL_REGION,
    InstanceType,
    Offering,
    RepairPolicy,
    kubelet_ready_policies,
)

GROUP = "karpenter.azure.com"
# The zone label AKS gives nodes in a region without availability zones.
REGIONAL_ZONE = "0"
AKS_DOMAIN = "kubernetes.azure.com"

LABEL_SKU_NAME = f"{GROUP}/sku-name"
LABEL_SKU_FAMILY = f"{GROUP}/sku-family"
LABEL_SKU_SERIES = f"{GROUP}/sku-series"
LABEL_SKU_VERSION = f"{GROUP}/sku-version"
LABEL_SKU_CPU = f"{GROUP}/sku-cpu"
LABEL_SKU_MEMORY = f"{GROUP}/sku-memory"  # MiB
LABEL_SKU_ACCELERATED_NETWORKING = f"{GROUP}/sku-networking-accelerated"
LABEL_SKU_PREMIUM_STORAGE = f"{GROUP}/sku-storage-premium-capable"
LABEL_SKU_EPHEMERAL_OS_MAX = f"{GROUP}/sku-storage-ephemeralos-maxsize"
LABEL_SKU_ULTRA_SSD = f"{GROUP}/sku-storage-ultra-ssd"
LABEL_SKU_GPU_NAME = f"{GROUP}/sku-gpu-name"
LABEL_SKU_GPU_MANUFACTURER = f"{GROUP}/sku-gpu-manufacturer"
LABEL_SKU_GPU_COUNT = f"{GROUP}/sku-gpu-count"
LABEL_PLACEMENT_SCOPE = f"{GROUP}/placement-scope"
AKS_LABEL_CPU = f"{AKS_DOMAIN}/sku-cpu"
AKS_LABEL_MEMORY = f"{AKS_DOMAIN}/sku-memory"
AKS_LABEL_CLUSTER = f"{AKS_DOMAIN}/cluster"
AKS_LABEL_MODE = f"{AKS_DOMAIN}/mode"
AKS_LABEL_SCALESET_PRIORITY = f"{AKS_DOMAIN}/scalesetpriority"
AKS_LABEL_PRIORITY = f"{AKS_DOMAIN}/priority"
AKS_LABEL_OS_SKU = f"{AKS_DOMAIN}/os-sku"
AKS_LABEL_FIPS = f"{AKS_DOMAIN}/fips_enabled"

GIB = 2**30
MIB = 2**20

# Defaults of the Karpenter-Azure operator and AKSNodeClass.
VM_MEMORY_OVERHEAD_PERCENT = 0.075
EVICTION_MEMORY_AVAILABLE = 750 * MIB
DEFAULT_OS_DISK_SIZE_GB = 128
DEFAULT_MAX_PODS = 250  # Azure CNI overlay, the operator's default network
# Price Karpenter-Azure gives sizes it does not know (not in known_skus.yaml).
MISSING_PRICE = 999.0

# kube-reserved tax brackets: (upper bound, rate). Memory in GiB, CPU in cores.
_MEMORY_BRACKETS = ((4.0, 0.25), (8.0, 0.20), (16.0, 0.10), (128.0, 0.06), (sys.float_info.max, 0.02))
_CPU_BRACKETS = ((1.0, 0.06), (2.0, 0.04), (4.0, 0.02), (sys.float_info.max, 0.01))

# Sizes AKS does not allow, and sizes Karpenter-Azure excludes as problematic.
RESTRICTED_SIZES = frozenset(
    {
        "Standard_A0",
        "Standard_A1",
        "Standard_A1_v2",
        "Standard_B1s",
        "Standard_B1ms",
        "Standard_F1",
        "Standard_F1s",
        "Standard_E64i_v3",
        "Standard_E64is_v3",
    }
)

_OS_SKU_BY_IMAGE_FAMILY = {
    "Ubuntu": "Ubuntu",
    "Ubuntu2204": "Ubuntu",
    "Ubuntu2404": "Ubuntu",
    "AzureLinux": "AzureLinux",
}

_GPU_RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}


def _bracket_tax(brackets: tuple[tuple[float, float], ...], amount: float) -> float:
    """Sum of rate x (the part of ``amount`` inside each bracket), in upstream's float order."""
    tax = 0.0
    lower = 0.0
    for upper_bound, rate in brackets:
        if lower > amount:
            continue
        upper = min(upper_bound, amount)
        tax += (upper - lower) * rate
        lower = upper_bound
    return tax


def kube_reserved(vcpus: int, memory_gib: float) -> dict[str, int]:
    """AKS kube-reserved for a size: CPU in millicores, memory in bytes (whole MiB)."""
    cpu_milli = int(1000 * _bracket_tax(_CPU_BRACKETS, float(vcpus)))
    memory_mib = int(1024 * _bracket_tax(_MEMORY_BRACKETS, float(memory_gib)))
    return {CPU: cpu_milli, MEMORY: memory_mib * MIB}


def eviction_threshold() -> dict[str, int]:
    return {MEMORY: EVICTION_MEMORY_AVAILABLE}


def memory_capacity(memory_mib: int, overhead_percent: float = VM_MEMORY_OVERHEAD_PERCENT) -> int:
    """Node memory capacity in bytes: whole GiB of the size minus the VM memory overhead (a fraction)."""
    whole = (memory_mib // 1024) * GIB
    return whole - math.ceil(float(whole) * overhead_percent)


def overhead(vcpus: int, memory_mib: int) -> dict[str, int]:
    """kube-reserved + system-reserved (none) + eviction threshold."""
    out = kube_reserved(vcpus, memory_mib / 1024)
    for k, v in eviction_threshold().items():
        out[k] = out.get(k, 0) + v
    return out


def is_supported(size: Mapping[str, Any]) -> bool:
    """Upstream's filter of the sizes AKS and Karpenter-Azure can use."""
    name = size["name"]
    gpus = size.get("gpus") or {}
    return (
        size["vcpu"] >= 2
        and size["memory"] >= 3584  # 3.5 GiB
        and name not in RESTRICTED_SIZES
        and not size.get("constrained_vcpu")
        and not name.removeprefix("Standard_").startswith(("DC", "EC"))
        # a GPU size must be in the supported-GPU list (the data has a manufacturer only for those)
        and not ((gpus.get("count") or 0) > 0 and not gpus.get("manufacturer"))
    )


def _local_dns_enabled(nodeclass: Mapping[str, Any] | None, local_dns: Mapping[str, Any]) -> bool:
    """Whether LocalDNS is on for an AKSNodeClass, as upstream decides it: ``status.localDNSState`` Enabled (the
    state the AKSNodeClass controller resolved, Preferred included); without that status (an offline manifest),
    ``spec.localDNS.mode`` Required."""
    status = (nodeclass or {}).get("status") if isinstance(nodeclass, Mapping) else None
    state = status.get("localDNSState") if isinstance(status, Mapping) else None
    if state:
        return state == "Enabled"
    return local_dns.get("mode") == "Required"


def placement_scope(zone: str) -> str:
    """Karpenter-Azure's placement scope of a zone: ``regional`` for AKS's regional zone "0"."""
    return "regional" if zone == REGIONAL_ZONE else "zonal"


class AzureProvider(CatalogProvider):
    name = "azure"
    group = GROUP
    nodeclass_kind = "AKSNodeClass"
    default_region = "eastus"
    LABEL_DOMAIN = GROUP
    # upstream's Azure provider (RepairPolicies): the kubelet's Ready for 10 minutes; AKS's NodeHealthy False
    # and a spot VM's PreemptionScheduled True at once
    REPAIR_POLICIES = kubelet_ready_policies(600.0) + (
        RepairPolicy("kubernetes.azure.com/NodeHealthy", "False", 0.0),
        RepairPolicy("PreemptionScheduled", "True", 0.0),
    )
    WELL_KNOWN_LABELS = frozenset(
        {
            LABEL_SKU_NAME,
            LABEL_SKU_FAMILY,
            LABEL_SKU_SERIES,
            LABEL_SKU_VERSION,
            LABEL_SKU_CPU,
            LABEL_SKU_MEMORY,
            AKS_LABEL_CPU,
            AKS_LABEL_MEMORY,
            LABEL_SKU_ACCELERATED_NETWORKING,
            LABEL_SKU_PREMIUM_STORAGE,
            LABEL_SKU_EPHEMERAL_OS_MAX,
            LABEL_SKU_ULTRA_SSD,
            LABEL_SKU_GPU_NAME,
            LABEL_SKU_GPU_MANUFACTURER,
            LABEL_SKU_GPU_COUNT,
            LABEL_PLACEMENT_SCOPE,
            AKS_LABEL_CLUSTER,
            AKS_LABEL_MODE,
            AKS_LABEL_SCALESET_PRIORITY,
            AKS_LABEL_PRIORITY,
            AKS_LABEL_OS_SKU,
            AKS_LABEL_FIPS,
        }
    )
    DEFAULT_REGISTRATION_DELAY = 60.0

    def offering_labels(self, offering: Offering) -> dict[str, str]:
        """AKS priority labels that follow the capacity type, and the placement scope of the zone."""
        priority = "spot" if offering.capacity_type == CAPACITY_SPOT else "regular"
        return {
            AKS_LABEL_SCALESET_PRIORITY: priority,
            AKS_LABEL_PRIORITY: priority,
            LABEL_PLACEMENT_SCOPE: placement_scope(offering.zone),
        }

    def _params(self, nodeclass: Mapping[str, Any] | None) -> dict[str, Any]:
        s = spec(nodeclass)
        streaming = s.get("artifactStreaming") or {}
        local_dns = s.get("localDNS") or {}
        return {
            "max_pods": int(s.get("maxPods") or DEFAULT_MAX_PODS),
            "os_disk_gb": int(s.get("osDiskSizeGB") or DEFAULT_OS_DISK_SIZE_GB),
            "image_family": s.get("imageFamily") or "Ubuntu",
            "fips": s.get("fipsMode") == "FIPS",
            "artifact_streaming": streaming.get("enabled") is True,
            "local_dns": _local_dns_enabled(nodeclass, local_dns),
        }

    def _build(self, region: str, params: dict[str, Any]) -> list[InstanceType]:
        zones = self.zones(region)
        image_family = params["image_family"]
        os_sku = _OS_SKU_BY_IMAGE_FAMILY.get(image_family, image_family)
        out = []
        for size in self.catalog["sizes"]:
            prices = size["prices"].get(region)
            if prices is None or not is_supported(size):
                continue
            if params["artifact_streaming"] and size["arch"] == "arm64":
                continue
            if params["local_dns"] and size["vcpu"] < 4:
                continue
            out.append(self._instance_type(size, region, zones, prices, params, os_sku))
        return out

    def spot_ratio(self, size: Mapping[str, Any]) -> float:
        """The spot/on-demand ratio that estimates an unknown spot price of this size."""
        est = self.catalog["spot_estimate"]
        return float(est["by_family"].get(size.get("family") or "", est["ratio"]))

    def _instance_type(self, size, region, zones, prices, params, os_sku) -> InstanceType:
        vcpu = size["vcpu"]
        memory_mib = size["memory"]
        gpus = size.get("gpus") or {}
        gpu_count = gpus.get("count")
        gpu_maker = gpus.get("manufacturer")

        labels = {
            LABEL_ARCH: size["arch"],
            LABEL_OS: "linux",
            LABEL_INSTANCE_TYPE: size["name"],
            LABEL_REGION: region,
            LABEL_SKU_NAME: size["name"],
            LABEL_SKU_CPU: str(vcpu),
            LABEL_SKU_MEMORY: str(memory_mib),
            AKS_LABEL_CPU: str(vcpu),
            AKS_LABEL_MEMORY: str(memory_mib),
            # every zone of a region has the same scope: zonal, or regional where it has no zones
            LABEL_PLACEMENT_SCOPE: placement_scope(zones[0]),
            AKS_LABEL_OS_SKU: os_sku,
        }
        for key, field in ((LABEL_SKU_FAMILY, "family"), (LABEL_SKU_SERIES, "series"), (LABEL_SKU_VERSION, "version")):
            if size.get(field):
                labels[key] = size[field]
        if size.get("premium_io") is not None:
            labels[LABEL_SKU_PREMIUM_STORAGE] = str(size["premium_io"]).lower()
        if size.get("accelerated_networking") is not None:
            labels[LABEL_SKU_ACCELERATED_NETWORKING] = str(size["accelerated_networking"]).lower()
        # sku-gpu-count is 0 for non-GPU sizes; omitted where the GPU count is unknown (fractional GPUs).
        if not gpu_maker:
            labels[LABEL_SKU_GPU_COUNT] = "0"
        else:
            if gpu_count is not None:
                labels[LABEL_SKU_GPU_COUNT] = str(gpu_count)
            labels[LABEL_SKU_GPU_MANUFACTURER] = gpu_maker
            if gpus.get("name"):
                labels[LABEL_SKU_GPU_NAME] = gpus["name"]
        if params["fips"]:
            labels[AKS_LABEL_FIPS] = "true"

        capacity = {
            CPU: vcpu * 1000,
            MEMORY: memory_capacity(memory_mib),
            EPHEMERAL: params["os_disk_gb"] * 10**9,
            PODS: params["max_pods"],
        }
        if gpu_maker in _GPU_RESOURCE and gpu_count:
            capacity[_GPU_RESOURCE[gpu_maker]] = gpu_count

        if size.get("known_sku", True):
            od_price = float(prices["on_demand"])
            sp_price, sp_estimated = spot_price(prices, self.spot_ratio(size))
        else:
            od_price = sp_price = MISSING_PRICE
            sp_estimated = False
        offerings = []
        for zone in zones:
            offerings.append(Offering(zone=zone, capacity_type=CAPACITY_ON_DEMAND, price=od_price))
            offerings.append(priced_offering(zone, CAPACITY_SPOT, sp_price, sp_estimated))
        return InstanceType(
            name=size["name"],
            labels=labels,
            capacity=capacity,
            overhead=overhead(vcpu, memory_mib),
            offerings=offerings,
        )


provider = AzureProvider()
