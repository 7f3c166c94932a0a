"""Instance types from the Resource SKUs API, priced from karpy's static Azure data.

``GET /subscriptions/{sub}/providers/Microsoft.Compute/skus?$filter=location eq '<region>'`` is read at
start and every 12 hours (upstream's interval); a failed refresh keeps the last list. Each VM SKU becomes the
instance type karpy's offline catalog builds (:class:`karpy.cloudprovider.azure.AzureProvider`): the same
labels, capacity and allocatable (kube-reserved, eviction threshold, VM memory overhead), with what the
subscription says instead of the static data: vCPUs, memory, architecture, accelerated networking, premium
IO, the zones the SKU is offered in (less zones a restriction names; a SKU restricted in the whole location is
dropped), spot only where ``LowPriorityCapable`` is True. Prices: the Azure Retail Prices API's
(:mod:`.pricing`), else karpy's static Azure prices of the region (spot estimated as the offline catalog
does); a SKU neither prices costs upstream's 999 so it goes last. What launch needs is kept per SKU: the ARM family (quota), the largest ephemeral OS disk, the Hyper-V
generations and accelerated networking.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from .. import azure as static
from ..catalog import load_catalog
from ..types import CAPACITY_SPOT, InstanceType

REFRESH = 12 * 3600.0


@dataclass
class SkuInfo:
    name: str
    family: str  # ARM family, e.g. standardDPLSv6Family
    vcpus: int
    arch: str
    zones: list[str]  # "<location>-<n>", or ["0"] for a SKU without zones
    spot: bool
    ephemeral_max_gb: float  # largest ephemeral OS disk (0: none)
    ephemeral_placement: str  # NvmeDisk | CacheDisk | ResourceDisk | ""
    hyperv: tuple[str, ...]
    accelerated_networking: bool


def _caps(sku: dict) -> dict[str, str]:
    return {c["name"]: str(c["value"]) for c in sku.get("capabilities") or () if c.get("name")}


def _series(name: str) -> tuple[str, str, str]:
    """(family letter, series, version) from a size name: Standard_D2pls_v6 -> (D, Dpls_v6, 6)."""
    m = re.match(r"^Standard_([A-Z]+)\d+([a-z_\-\d]*?)(?:_v(\d+))?$", name)
    if not m:
        return "", "", "1"
    version = m.group(3) or "1"
    return m.group(1)[0], m.group(1) + m.group(2) + (f"_v{version}" if m.group(3) else ""), version


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
    nvme = float(caps.get("NvmeDiskSizeInMiB", "0") or 0) / 1024
    cache = float(caps.get("CachedDiskBytes", "0") or 0) / 2**30
    resource = float(caps.get("MaxResourceVolumeMB", "0") or 0) / 1024
    placement, eph = "", 0.0
    if caps.get("EphemeralOSDiskSupported") == "True":
        if nvme > 0 and "NvmeDisk" in caps.get("SupportedEphemeralOSDiskPlacements", ""):
            placement, eph = "NvmeDisk", nvme
        elif cache > 0:
            placement, eph = "CacheDisk", cache
        elif resource > 0:
            placement, eph = "ResourceDisk", resource
    return SkuInfo(
        name=sku["name"], family=str(sku.get("family") or ""), vcpus=vcpus,
        arch="arm64" if caps.get("CpuArchitectureType", "x64").lower() == "arm64" else "amd64",
        zones=[f"{location}-{z}" for z in sorted(zones)] or [static.REGIONAL_ZONE],
        spot=caps.get("LowPriorityCapable") == "True", ephemeral_max_gb=eph, ephemeral_placement=placement,
        hyperv=tuple(v.strip() for v in caps.get("HyperVGenerations", "V1").split(",") if v.strip()),
        accelerated_networking=caps.get("AcceleratedNetworkingEnabled") == "True")


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
                "premium_io": caps.get("PremiumIO") == "True" if "PremiumIO" in caps else None,
                "accelerated_networking": info.accelerated_networking if "AcceleratedNetworkingEnabled" in caps else None,
                "gpus": (known or {}).get("gpus"),
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
        key = (self.version, tuple(sorted(params.items())), self.prices.version if self.prices is not None else 0)
        with self.lock:
            hit = self._cache.get(key)
            if hit is not None:
                return list(hit)
        os_sku = static._OS_SKU_BY_IMAGE_FAMILY.get(params["image_family"], params["image_family"])
        out = []
        for name, size in self.sizes.items():
            info = self.infos[name]
            if params["artifact_streaming"] and info.arch == "arm64":
                continue
            if params["local_dns"] and info.vcpus < 4:
                continue
            prices = size["prices"].get(self.location)
            if self.prices is not None:
                prices = self.prices.get(name, prices)
            if prices is None:  # a SKU karpy has no price for in this region: upstream's penalty price
                size = {**size, "known_sku": False}
                prices = {"on_demand": static.MISSING_PRICE, "spot": static.MISSING_PRICE}
            it = static.provider._instance_type(size, self.location, info.zones, prices, params, os_sku)
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
