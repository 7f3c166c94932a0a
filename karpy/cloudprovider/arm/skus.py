"""Instance types from the Resource SKUs API, priced from karpy's static Azure data.

``GET /subscriptions/{sub}/providers/Microsoft.Compute/skus?$filter=location eq '<region>'`` is read at
start and every 12 hours (upstream's interval); a failed refresh keeps the last list. Each VM SKU becomes the
instance type karpy's offline catalog builds (:class:`karpy.cloudprovider.azure.AzureProvider`): the same
labels, capacity and allocatable (kube-reserved, eviction threshold, VM memory overhead), with what the
subscription says instead of the static data: vCPUs, memory, architecture, accelerated networking, premium
IO, the zones the SKU is offered in (less zones a restriction names; a SKU restricted in the whole location is
dropped; a SKU with zones is offered in the regional zone "0" as well, as upstream), spot only where
``LowPriorityCapable`` is True; with ``spec.security.encryptionAtHost`` only SKUs whose
``EncryptionAtHostSupported`` is True. Prices: the Azure Retail Prices API's
(:mod:`.pricing`), else karpy's static Azure prices of the region (spot estimated as the offline catalog
does); a SKU neither prices costs upstream's 999 so it goes last. What launch needs is kept per SKU: the ARM family (quota), the largest ephemeral OS disk, the Hyper-V
generations and accelerated networking.

Labels the offline catalog cannot give, because its data lacks the capability, come from the SKU as upstream
derives them: ``sku-storage-ephemeralos-maxsize`` (the largest ephemeral OS disk in whole GB of 10^9 bytes: the
NVMe disk where ``SupportedEphemeralOSDiskPlacements`` names NvmeDisk, else ``CachedDiskBytes``, else
``MaxResourceVolumeMB``; absent when ``EphemeralOSDiskSupported`` is not True or every size is 0),
``sku-storage-ultra-ssd`` (``UltraSSDAvailable``: per zone in ``locationInfo.zoneDetails``, the SKU's own
capability for a SKU without zones), ``sku-hyperv-generation`` and ``kubernetes.azure.com/cluster`` (the node
resource group, as upstream normalises it for a label). ``sku-storage-ultra-ssd`` varies by zone, so a size with
UltraSSD somewhere carries it on its offerings, as upstream does ("true" and "false" where the offering's zone has
UltraSSD, "false" elsewhere); a size without it anywhere carries "false". ``sku-hyperv-generation`` is the
generation karpy launches the size with (2 where Gen2 is supported, else 1). GPU sizes follow upstream's registry of supported GPU sizes (:data:`GPU_SIZES`): a SKU with
GPUs that the registry does not list is not offered, and one the registry does not support on the
AKSNodeClass's image family (AzureLinux) is left out for it.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from .. import azure as static
from ..catalog import load_catalog
from ...resources import MEMORY as RESOURCE_MEMORY
from ..types import CAPACITY_SPOT, InstanceType

REFRESH = 12 * 3600.0
LABEL_HYPERV_GENERATION = f"{static.GROUP}/sku-hyperv-generation"

# Upstream's registry of the GPU sizes AKS supports (Azure/karpenter-provider-azure pkg/utils/supported-gpus.yaml,
# v1.14): size name in lower case -> (manufacturer, supported on AzureLinux images). Every size is supported on
# Ubuntu; a name's "_promo" suffix is ignored.
_NVIDIA_AZURELINUX = """
    nc16ads_a10_v4 nc32ads_a10_v4 nc8ads_a10_v4 nc24ads_a100_v4 nc48ads_a100_v4 nc96ads_a100_v4 nc40ads_h100_v5
    nc80adis_h100_v5 nd96asr_v4 nd112asr_a100_v4 nd120asr_a100_v4 nv12ads_a10_v5 nv18ads_a10_v5 nv36adms_a10_v5
    nv36ads_a10_v5 nv6ads_a10_v5 nv72ads_a10_v5 nd96amsr_a100_v4 nd112amsr_a100_v4 nd120amsr_a100_v4
    nd96isr_h100_v5 nd96is_h100_v5 nd96is_noib_h100_v5 nd96is_flex_h100_v5 nd96isf_h100_v5 nd96isrf_h100_v5
    nd96ams_v4 nd96ams_a100_flex_v4 nd96ams_a100_v4 nd96amsf_a100_v4 nd96amsrf_a100_v4 nd96isr_h200_v5
    nd96is_h200_v5 nd96isf_h200_v5 nd96isrf_h200_v5 nc16as_t4_v3 nc4as_t4_v3 nc64as_t4_v3 nc8as_t4_v3 nc12s_v3
    nc24rs_v3 nc24s_v3 nc6s_v3 nd40rs_v2 nd40s_v3
"""
_NVIDIA_UBUNTU_ONLY = """
    nc6 nc12 nc24 nc24r nc12s_v2 nc24rs_v2 nc24s_v2 nc6s_v2 nd6s nd12s nd24s nd24rs nv12 nv24 nv6 nv24r nv12s_v3
    nv24s_v3 nv48s_v3 nd128isr_ndr_gb200_v6 nd128isr_gb300_v6 nc24lds_xl_rtxpro6000bse_v6
    nc36ds_xl_rtxpro6000bse_v6 nc36lds_xl_rtxpro6000bse_v6 nc72ds_xl_rtxpro6000bse_v6 nc72lds_xl_rtxpro6000bse_v6
    nc144ds_xl_rtxpro6000bse_v6 nc144lds_xl_rtxpro6000bse_v6 nc288ds_xl_rtxpro6000bse_v6
    nc288lds_xl_rtxpro6000bse_v6
"""
_AMD_UBUNTU_ONLY = """
    nv4ads_v710_v5 nv8ads_v710_v5 nv12ads_v710_v5 nv24ads_v710_v5 nv28adms_v710_v5 nd96isr_mi300x_v5
    nd96is_mi300x_v5
"""
GPU_SIZES: dict[str, tuple[str, bool]] = {
    **{f"standard_{n}": ("nvidia", True) for n in _NVIDIA_AZURELINUX.split()},
    **{f"standard_{n}": ("nvidia", False) for n in _NVIDIA_UBUNTU_ONLY.split()},
    **{f"standard_{n}": ("amd", False) for n in _AMD_UBUNTU_ONLY.split()},
}


def gpu_size(name: str) -> tuple[str, bool] | None:
    """(manufacturer, supported on AzureLinux) of a GPU size upstream's registry lists, else None."""
    return GPU_SIZES.get(name.lower().removesuffix("_promo"))


def _accelerator(name: str) -> str | None:
    """The accelerator a size's name carries: Standard_NC24ads_A100_v4 -> A100 (none for Standard_NC6s_v3)."""
    parts = name.split("_")[2:]
    parts = [p for p in parts if not re.fullmatch(r"v\d+", p) and p.lower() not in ("promo", "xl", "flex", "noib")]
    return parts[-1] if parts else None


def cluster_label(node_resource_group: str) -> str:
    """The value of ``kubernetes.azure.com/cluster`` for a node resource group, as upstream writes it: parentheses
    become dashes, at most 63 characters, and a name ending in '-', '_' or '.' gets a 'z' (in place of its last
    character when that would pass 63)."""
    v = node_resource_group.replace("(", "-").replace(")", "-")[:63]
    if v.endswith(("-", "_", ".")):
        return v[:-1] + "z" if len(v) > 62 else v + "z"
    return v


ULTRA_SSD_VALUES = {True: ("true", "false"), False: ("false",)}  # an offering's sku-storage-ultra-ssd values


@dataclass
class SkuInfo:
    name: str
    family: str  # ARM family, e.g. standardDPLSv6Family
    vcpus: int
    arch: str
    zones: list[str]  # "<location>-<n>", or ["0"] for a SKU without zones
    spot: bool
    ephemeral_max_gb: int  # largest ephemeral OS disk, whole GB of 10^9 bytes (0: none)
    ephemeral_placement: str  # NvmeDisk | CacheDisk | ResourceDisk | ""
    hyperv: tuple[str, ...]
    accelerated_networking: bool
    # the offering zones ("<location>-<n>", "0" for regional) with UltraSSD: a zone's zoneDetails, the regional
    # offering the SKU's own capability
    ultra_ssd_zones: frozenset[str] = frozenset()
    hyperv_label: str = ""  # the sku-hyperv-generation label: "2", "1", or "" when HyperVGenerations names neither
    gpus: int = 0  # the GPUs capability
    encryption_at_host: bool = False  # the EncryptionAtHostSupported capability is True


def _true(value: Any) -> bool:
    return str(value).lower() == "true"


def _caps(sku: dict) -> dict[str, str]:
    return {c["name"]: str(c["value"]) for c in sku.get("capabilities") or () if c.get("name")}


def _zone_caps(sku: dict, zone: str) -> dict[str, str]:
    """The capabilities ``locationInfo[].zoneDetails`` give one zone ("1", "2", ...)."""
    out: dict[str, str] = {}
    for li in sku.get("location_info") or sku.get("locationInfo") or ():
        for zd in li.get("zone_details") or li.get("zoneDetails") or ():
            if zone.lower() in [str(n).lower() for n in zd.get("name") or ()]:
                for c in zd.get("capabilities") or ():
                    if c.get("name"):
                        out[c["name"]] = str(c.get("value"))
    return out


def _int(caps: dict[str, str], key: str) -> int:
    try:
        return int(float(caps.get(key, "0") or 0))
    except ValueError:
        return 0


def _series(name: str) -> tuple[str, str, str]:
    """(family letter, series, version) from a size name, as upstream parses it: Standard_D2pls_v6 ->
    (D, Dpls_v6, 6); an accelerator or other segment is not part of the series: Standard_NC24ads_A100_v4 ->
    (N, NCads_v4, 4); no version segment is version 1."""
    head, *rest = name.removeprefix("Standard_").split("_")
    m = re.match(r"^([A-Z]+)\d+(?:-\d+)?([a-z]*)", head)
    if not m:
        return "", "", "1"
    version = next((p[1:] for p in rest if re.fullmatch(r"v\d+", p)), "")
    return m.group(1)[0], m.group(1) + m.group(2) + (f"_v{version}" if version else ""), version or "1"


def sku_info(sku: dict, location: str) -> SkuInfo | None:
    """What launch needs of a VM SKU; None when it cannot be used in ``location``."""
    caps = _caps(sku)
    for r in sku.get("restrictions") or ():
        if r.get("type") == "Location" and location in [v.lower() for v in r.get("values") or ()]:
            return None
    zones: set[str] = set()
    for li in sku.get("location_info") or sku.get("locationInfo") or ():
        if (li.get("location") or "").lower() == location:
            zones.update(li.get("zones") or ())
    for r in sku.get("restrictions") or ():
        if r.get("type") == "Zone":
            info = r.get("restriction_info") or r.get("restrictionInfo") or {}
            zones.difference_update(info.get("zones") or ())
        if r.get("type") == "Location" and not zones:
            return None
    if not zones and any(r.get("type") == "Zone" for r in sku.get("restrictions") or ()):
        return None
    try:
        vcpus = int(caps.get("vCPUs", "0"))
    except ValueError:
        return None
    # the largest ephemeral OS disk, in whole GB (10^9 bytes) as upstream sizes it
    placement, eph = "", 0
    if _true(caps.get("EphemeralOSDiskSupported")):
        nvme, cache, resource = (_int(caps, "NvmeDiskSizeInMiB"), _int(caps, "CachedDiskBytes"),
                                 _int(caps, "MaxResourceVolumeMB"))
        if nvme > 0 and "nvmedisk" in caps.get("SupportedEphemeralOSDiskPlacements", "").lower():
            placement, eph = "NvmeDisk", nvme * 2**20 // 10**9
        elif cache > 0:
            placement, eph = "CacheDisk", cache // 10**9
        elif resource > 0:
            placement, eph = "ResourceDisk", resource * 2**20 // 10**9
    ultra_zones = {f"{location}-{z}" for z in zones if _true(_zone_caps(sku, z).get("UltraSSDAvailable"))}
    if _true(caps.get("UltraSSDAvailable")):
        ultra_zones.add(static.REGIONAL_ZONE)
    gens = caps.get("HyperVGenerations", "")
    hyperv_label = "2" if "V2" in gens.upper() else "1" if "V1" in gens.upper() else ""
    return SkuInfo(
        name=sku["name"], family=str(sku.get("family") or ""), vcpus=vcpus,
        arch="arm64" if caps.get("CpuArchitectureType", "x64").lower() == "arm64" else "amd64",
        zones=[f"{location}-{z}" for z in sorted(zones)] or [static.REGIONAL_ZONE],
        spot=caps.get("LowPriorityCapable") == "True", ephemeral_max_gb=eph, ephemeral_placement=placement,
        hyperv=tuple(v.strip() for v in caps.get("HyperVGenerations", "V1").split(",") if v.strip()),
        accelerated_networking=_true(caps.get("AcceleratedNetworkingEnabled")),
        ultra_ssd_zones=frozenset(ultra_zones),
        hyperv_label=hyperv_label, gpus=_int(caps, "GPUs"),
        encryption_at_host=_true(caps.get("EncryptionAtHostSupported")))


def _gpus(info: SkuInfo, known: dict | None) -> dict | None:
    """The GPUs of a size: the offline catalog's where it describes them, else the SKU's ``GPUs`` count with the
    manufacturer upstream's registry gives (none when the registry does not list it: the size is not offered)."""
    if known and (known.get("gpus") or {}).get("manufacturer"):
        return known["gpus"]
    if info.gpus <= 0:
        return (known or {}).get("gpus")
    listed = gpu_size(info.name)
    return {"count": info.gpus, "manufacturer": listed[0] if listed else None, "name": _accelerator(info.name)}


class InstanceTypes:
    """The subscription's VM SKUs in one location, as karpy's instance types (per NodeClass parameters)."""

    def __init__(self, list_skus: Callable[[], list[dict]], location: str, now: Callable[[], float] = time.time,
                 log: Callable[..., None] | None = None, prices: Any = None):
        self._list = list_skus
        self.prices = prices  # a pricing.Prices, or None for karpy's static prices only
        self.location = location
        self.now = now
        self.log = log
        self.infos: dict[str, SkuInfo] = {}
        self.sizes: dict[str, dict] = {}  # SKU name -> a size entry in the offline catalog's shape
        self.fetched = 0.0
        self.version = 0
        self._cache: dict[tuple, list[InstanceType]] = {}
        self.lock = threading.Lock()
        self.cluster = ""  # kubernetes.azure.com/cluster of every size (the provider sets it: cluster_label())
        self.default_max_pods = static.DEFAULT_MAX_PODS  # pods per node without spec.maxPods (the provider sets it)
        # VM_MEMORY_OVERHEAD_PERCENT, the fraction of a size's memory the hypervisor keeps (the provider sets it)
        self.vm_memory_overhead = static.VM_MEMORY_OVERHEAD_PERCENT

    def refresh(self, force: bool = False) -> None:
        if not force and self.fetched and self.now() - self.fetched < REFRESH:
            return
        try:
            skus = self._list()
        except Exception as e:  # noqa: BLE001 - keep the last list; the first one must succeed
            if not self.infos:
                raise
            if self.log:
                self.log("failed refreshing resource SKUs, keeping the last list", error=str(e))
            self.fetched = self.now()
            return
        catalog = {s["name"]: s for s in load_catalog("azure")["sizes"]}
        infos, sizes = {}, {}
        for sku in skus:
            if (sku.get("resource_type") or sku.get("resourceType")) != "virtualMachines":
                continue
            info = sku_info(sku, self.location)
            if info is None:
                continue
            caps = _caps(sku)
            known = catalog.get(info.name)
            letter, series, version = _series(info.name)
            size = {
                "name": info.name, "vcpu": info.vcpus,
                "memory": int(round(float(caps.get("MemoryGB", "0") or 0) * 1024)), "arch": info.arch,
                "family": (known or {}).get("family") or letter, "series": (known or {}).get("series") or series,
                "version": (known or {}).get("version") or version,
                # a capability the SKU does not name is not supported ("false", as upstream labels it)
                "premium_io": _true(caps.get("PremiumIO")),
                "accelerated_networking": info.accelerated_networking,
                "gpus": _gpus(info, known),
                "constrained_vcpu": bool((known or {}).get("constrained_vcpu")),
                "known_sku": bool(known) and bool((known or {}).get("known_sku", True)),
                "prices": (known or {}).get("prices") or {},
            }
            if not static.is_supported(size):
                continue
            infos[info.name], sizes[info.name] = info, size
        with self.lock:
            self.infos, self.sizes = infos, sizes
            self.fetched = self.now()
            self.version += 1
            self._cache.clear()

    def list(self, nodeclass: dict | None) -> list[InstanceType]:
        """Every usable SKU as an instance type, offerings all available (the caller marks the unavailable)."""
        params = static.provider._params(nodeclass)
        if not ((nodeclass or {}).get("spec") or {}).get("maxPods"):
            params["max_pods"] = self.default_max_pods
        # spec.security.encryptionAtHost: only SKUs whose EncryptionAtHostSupported capability is True (upstream)
        encryption = bool((((nodeclass or {}).get("spec") or {}).get("security") or {}).get("encryptionAtHost"))
        key = (self.version, tuple(sorted(params.items())), self.prices.version if self.prices is not None else 0,
               self.cluster, encryption, self.vm_memory_overhead)
        with self.lock:
            hit = self._cache.get(key)
            if hit is not None:
                return list(hit)
        os_sku = static._OS_SKU_BY_IMAGE_FAMILY.get(params["image_family"], params["image_family"])
        azure_linux = params["image_family"] == "AzureLinux"
        out = []
        for name, size in self.sizes.items():
            info = self.infos[name]
            if params["artifact_streaming"] and info.arch == "arm64":
                continue
            if azure_linux and (size.get("gpus") or {}).get("manufacturer") and not (gpu_size(name) or ("", False))[1]:
                continue  # a GPU size AzureLinux images do not support (upstream's registry: Ubuntu only)
            if params["local_dns"] and info.vcpus < 4:
                continue
            if encryption and not info.encryption_at_host:
                continue
            prices = size["prices"].get(self.location)
            if self.prices is not None:
                prices = self.prices.get(name, prices)
            if prices is None:  # a SKU karpy has no price for in this region: upstream's penalty price
                size = {**size, "known_sku": False}
                prices = {"on_demand": static.MISSING_PRICE, "spot": static.MISSING_PRICE}
            # as upstream (since v1.12): a size with zones is offered regionally too (zone "0"), which launch tries
            # after the zonal offerings of the same price; a size without zones is offered regionally only
            zones = info.zones if info.zones == [static.REGIONAL_ZONE] else [*info.zones, static.REGIONAL_ZONE]
            it = static.provider._instance_type(size, self.location, zones, prices, params, os_sku)
            labels = dict(it.labels)
            if info.ultra_ssd_zones:
                # as upstream's offerings: "true" and "false" in a zone with UltraSSD, "false" elsewhere; the size's
                # value is that of the offering a node launches into, so the label is the offerings'
                labels.pop(static.LABEL_SKU_ULTRA_SSD, None)
                it = replace(it, offerings=[replace(o, labels=((static.LABEL_SKU_ULTRA_SSD, ULTRA_SSD_VALUES[
                    o.zone in info.ultra_ssd_zones]),)) for o in it.offerings])
            else:
                labels[static.LABEL_SKU_ULTRA_SSD] = "false"
            if info.ephemeral_max_gb > 0:
                labels[static.LABEL_SKU_EPHEMERAL_OS_MAX] = str(info.ephemeral_max_gb)
            if info.hyperv_label:
                labels[LABEL_HYPERV_GENERATION] = info.hyperv_label
            if self.cluster:
                labels[static.AKS_LABEL_CLUSTER] = self.cluster
            capacity = dict(it.capacity)
            capacity[RESOURCE_MEMORY] = static.memory_capacity(size["memory"], self.vm_memory_overhead)
            if not (size.get("gpus") or {}).get("manufacturer"):
                capacity.setdefault("nvidia.com/gpu", 0)  # as upstream: a size without GPUs lists none
            it = replace(it, labels=labels, capacity=capacity)
            if not info.spot:
                it = replace(it, offerings=[o for o in it.offerings if o.capacity_type != CAPACITY_SPOT])
            out.append(it)
        with self.lock:
            self._cache[key] = out
        return list(out)

    def refresh_prices(self, force: bool = False) -> bool:
        """Refresh the prices when due; new prices build the instance types again. Whether they changed."""
        if self.prices is None or not self.prices.refresh(force):
            return False
        with self.lock:
            self.version += 1
            self._cache.clear()
        return True

    def info(self, name: str) -> SkuInfo | None:
        return self.infos.get(name)


def list_skus_via(compute: Any, location: str) -> Callable[[], list[dict]]:
    """A SKU lister over ``ComputeManagementClient.resource_skus`` (dicts in the SDK's attribute names)."""
    def run() -> list[dict]:
        return [s.as_dict() for s in compute.resource_skus.list(filter=f"location eq '{location}'")]
    return run
