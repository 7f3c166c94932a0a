"""Instance types, offerings and prices from the account, as upstream's instancetype and pricing providers.

* ``DescribeInstanceTypes`` (hvm, x86_64 and arm64) and ``DescribeInstanceTypeOfferings`` per availability
  zone, refreshed every 12 hours;
* on-demand prices from the Pricing API (``GetProducts``, Linux, shared and dedicated tenancy) every 12 hours,
  karpy's static catalog (``data/aws.json.gz``) until then, on failure and always with ``ISOLATED_VPC``; spot
  prices from ``DescribeSpotPriceHistory``: before the first answer a spot offering is priced on-demand, after
  it a zone with no record has no price and its offering is unavailable;
* allocatable as upstream: pods = kubelet maxPods, else ENIs x (IPv4 per ENI - 1) + 2 with the ENIs of the
  default network card less ``RESERVED_ENIS``; memory less 64 MiB on arm64 and ``VM_MEMORY_OVERHEAD_PERCENT``;
  kube-reserved, system-reserved and the eviction threshold from karpy's AWS catalog (:mod:`karpy.cloudprovider.aws`);
* resources as upstream: vpc.amazonaws.com/efa (the EC2NodeClass's EFA-only ``networkInterfaces``, else the type's
  EFA maximum), aws.amazon.com/neuroncore, and on Windows vpc.amazonaws.com/PrivateIPv4Address from the VPC
  resource controller's limits (``data/aws_vpc_limits.json``); a type that cannot take the EC2NodeClass's
  ``networkInterfaces`` keeps its offerings, unavailable; the nitro-sandbox label from NitroEnclavesSupport.
"""

from __future__ import annotations

import functools
import json
import math
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable

from ...api.nodeclass import ec2_kubelet_parse_error
from ...resources import EPHEMERAL, MEMORY, PODS
from .. import aws as static
from ..kubelet_cel import KubeletExpressionError
from ..types import CAPACITY_ON_DEMAND, CAPACITY_SPOT, LABEL_ARCH, LABEL_INSTANCE_TYPE, LABEL_OS, LABEL_REGION, InstanceType, Offering

REFRESH = 12 * 3600.0  # instance types, offerings and prices
ARCH = {"x86_64": "amd64", "arm64": "arm64"}
MIB = 2**20
_GEN = re.compile(r"^([a-z]+)(\d+)")
EFA_ONLY = "efa-only"
RESOURCE_NEURON_CORE = "aws.amazon.com/neuroncore"
RESOURCE_PRIVATE_IPV4 = "vpc.amazonaws.com/PrivateIPv4Address"
VPC_LIMITS = Path(__file__).resolve().parent.parent / "data" / "aws_vpc_limits.json"


@functools.lru_cache(maxsize=1)
def vpc_ipv4_per_interface() -> dict[str, int]:
    """IPv4 addresses per interface of the types the VPC resource controller knows (scripts/build_vpc_limits.py)."""
    return json.loads(VPC_LIMITS.read_text())["ipv4_per_interface"]


def private_ipv4_addresses(name: str) -> int:
    """vpc.amazonaws.com/PrivateIPv4Address of a Windows node: the VPC resource controller's IPv4 addresses per
    interface less the primary one; 0 for a type it does not advertise."""
    n = vpc_ipv4_per_interface().get(name)
    return max(n - 1, 0) if n is not None else 0


def eni_limited_pods(info: dict, reserved_enis: int, interfaces: list | None = None) -> int:
    """ENIs x (IPv4 addresses per ENI - 1) + 2, with the default network card's ENIs less the reserved ones and
    less the EFA-only interfaces the EC2NodeClass puts on network card 0 (they take an ENI but no IPs)."""
    net = info.get("NetworkInfo") or {}
    cards = net.get("NetworkCards") or []
    idx = int(net.get("DefaultNetworkCardIndex") or 0)
    card = next((c for c in cards if int(c.get("NetworkCardIndex", 0)) == idx), None)
    enis = int(card["MaximumNetworkInterfaces"]) if card else int(net.get("MaximumNetworkInterfaces") or 0)
    enis -= reserved_enis + sum(1 for n in interfaces or () if int(n.get("networkCardIndex") or 0) == 0
                                and n.get("interfaceType") == EFA_ONLY)
    if enis <= 0:
        return 0
    return enis * (int(net.get("Ipv4AddressesPerInterface") or 0) - 1) + 2


def eni_limits(info: dict) -> tuple[int, int]:
    """(interfaces of the default network card, IPv4 addresses per interface): the ``default_enis`` and
    ``ips_per_eni`` of a kubelet expression (feature gate NodeClassCEL); 0 where EC2 does not say."""
    net = info.get("NetworkInfo") or {}
    cards = net.get("NetworkCards") or []
    card = None
    if net.get("DefaultNetworkCardIndex") is not None:
        idx = int(net["DefaultNetworkCardIndex"])
        card = next((c for c in cards if int(c.get("NetworkCardIndex", 0)) == idx), None)
    return (int(card.get("MaximumNetworkInterfaces") or 0) if card else 0,
            int(net.get("Ipv4AddressesPerInterface") or 0))


def efa_count(info: dict, interfaces: list | None) -> int:
    """vpc.amazonaws.com/efa: the EC2NodeClass's EFA-only interfaces when it lists networkInterfaces, else the
    type's maximum EFA interfaces."""
    if interfaces is not None:
        return sum(1 for n in interfaces if n.get("interfaceType") == EFA_ONLY)
    return int(((info.get("NetworkInfo") or {}).get("EfaInfo") or {}).get("MaximumEfaInterfaces") or 0)


def supports_interfaces(info: dict, interfaces: list | None) -> bool:
    """Whether the type can take the EC2NodeClass's networkInterfaces (upstream's compatibility check): ENA
    supported, every interface on a network card the type has at a device index below that card's maximum, and
    no more EFA-only interfaces than the type's EFA maximum. A type that cannot keeps its offerings, unavailable."""
    if interfaces is None:
        return True
    net = info.get("NetworkInfo") or {}
    cards = {int(c.get("NetworkCardIndex") or 0): c for c in net.get("NetworkCards") or ()}
    if not cards or net.get("EnaSupport") == "unsupported":
        return False
    ips = int(net.get("Ipv4AddressesPerInterface") or 0)
    for n in interfaces:
        card = cards.get(int(n.get("networkCardIndex") or 0))
        if card is None or int(card.get("MaximumNetworkInterfaces") or 0) <= int(n.get("deviceIndex") or 0):
            return False
        secondary = max(int(n.get("secondaryIPPrefixCount") or 0), int(n.get("secondaryIPCount") or 0))
        if secondary > 0 and secondary + 1 > ips:
            return False
    efa_only = efa_count(info, interfaces)
    limit = ((net.get("EfaInfo") or {}).get("MaximumEfaInterfaces"))
    return not efa_only or (limit is not None and efa_only <= int(limit))


def neuron_cores(info: dict) -> int:
    """aws.amazon.com/neuroncore: the first Neuron device's count x its cores."""
    devices = (info.get("NeuronInfo") or {}).get("NeuronDevices") or []
    if not devices:
        return 0
    return int(devices[0].get("Count") or 0) * int((devices[0].get("CoreInfo") or {}).get("Count") or 0)


def memory_capacity(mib: int, arch: str, overhead: float) -> int:
    mib -= static.ARM64_CMA_MIB if arch == "arm64" else 0
    return (mib - math.ceil(mib * overhead)) * MIB


def parse_price_list(items: list[str]) -> dict[str, float]:
    """Pricing API ``PriceList`` entries -> on-demand USD per hour by instance type (zeros skipped)."""
    out: dict[str, float] = {}
    for raw in items:
        doc = json.loads(raw) if isinstance(raw, str) else raw
        it = ((doc.get("product") or {}).get("attributes") or {}).get("instanceType")
        for term in ((doc.get("terms") or {}).get("OnDemand") or {}).values():
            for dim in (term.get("priceDimensions") or {}).values():
                usd = (dim.get("pricePerUnit") or {}).get("USD") or (dim.get("pricePerUnit") or {}).get("CNY")
                if it and usd and 0 < float(usd) < math.inf:  # (NaN is not > 0)
                    out[it] = float(usd)
    return out


class KubeletConfigError(KubeletExpressionError):
    """An EC2NodeClass's spec.kubelet cannot be decoded: none of its instance types are resolved."""


class InstanceTypes:
    """The account's instance types for a region, with their zones and prices."""

    def __init__(self, clients: Any, region: str, isolated_vpc: bool = False, reserved_enis: int = 0,
                 vm_memory_overhead: float = static.VM_MEMORY_OVERHEAD_PERCENT, now: Callable[[], float] = time.time,
                 log: Callable[..., None] | None = None):
        self.c = clients
        self.region = region
        self.isolated_vpc = isolated_vpc
        self.reserved_enis = reserved_enis
        self.overhead = vm_memory_overhead
        self.now = now
        self.log = log or (lambda *a, **k: None)
        self.lock = threading.RLock()
        self.infos: dict[str, dict] = {}
        self.zones: dict[str, set[str]] = {}
        self.static = {s["name"]: s for s in static.provider.catalog["sizes"]}
        price_region = static.provider.catalog["price_regions"].get(region, "us-east-1")
        self.on_demand: dict[str, float] = {n: float(s["prices"][price_region]["on_demand"])
                                            for n, s in self.static.items() if (s.get("prices") or {}).get(price_region)}
        self.on_demand_source = "static"
        self.spot: dict[tuple[str, str], float] = {}
        self.spot_updated = False
        self.version = 0  # bumped whenever types, zones or prices change
        self.refreshed: dict[str, float] = {}

    # --- refresh ----------------------------------------------------------------------------------
    def refresh(self, force: bool = False) -> None:
        """Refresh what is older than 12 hours (types and zones must load; prices keep their last value)."""
        for what, fn in (("types", self.update_types), ("offerings", self.update_offerings),
                         ("on-demand", self.update_on_demand), ("spot", self.update_spot)):
            if force or self.now() - self.refreshed.get(what, -1e18) >= REFRESH:
                try:
                    fn()
                    self.refreshed[what] = self.now()
                except Exception as e:  # noqa: BLE001
                    if what in ("types", "offerings") and not self.infos:
                        raise
                    self.log(f"failed refreshing {what}", error=str(e))

    def update_types(self) -> None:
        infos = {}
        pages = self.c.ec2.get_paginator("describe_instance_types").paginate(Filters=[
            {"Name": "supported-virtualization-type", "Values": ["hvm"]},
            {"Name": "processor-info.supported-architecture", "Values": ["x86_64", "arm64"]}])
        for page in pages:
            for info in page.get("InstanceTypes", []):
                infos[info["InstanceType"]] = info
        with self.lock:
            self.infos = infos
            self.version += 1

    def update_offerings(self) -> None:
        zones: dict[str, set[str]] = {}
        for page in self.c.ec2.get_paginator("describe_instance_type_offerings").paginate(LocationType="availability-zone"):
            for o in page.get("InstanceTypeOfferings", []):
                zones.setdefault(o["InstanceType"], set()).add(o["Location"])
        with self.lock:
            self.zones = zones
            self.version += 1

    def update_on_demand(self) -> None:
        if self.isolated_vpc or self.region.startswith("us-gov-"):
            return
        prices: dict[str, float] = {}
        for tenancy, family in (("Shared", "Compute Instance"), ("Dedicated", "Compute Instance (bare metal)")):
            filters = [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in (
                ("regionCode", self.region), ("serviceCode", "AmazonEC2"), ("preInstalledSw", "NA"),
                ("operatingSystem", "Linux"), ("capacitystatus", "Used"), ("marketoption", "OnDemand"),
                ("tenancy", tenancy), ("productFamily", family))]
            got: dict[str, float] = {}
            for page in self.c.pricing.get_paginator("get_products").paginate(ServiceCode="AmazonEC2", Filters=filters):
                got.update(parse_price_list(page.get("PriceList", [])))
            if not got:
                raise RuntimeError(f"no {tenancy} on-demand prices")
            prices.update(got)
        with self.lock:
            self.on_demand = {**self.on_demand, **prices}
            self.on_demand_source = "pricing-api"
            self.version += 1

    def update_spot(self) -> None:
        prices: dict[tuple[str, str], tuple[str, float]] = {}
        pages = self.c.ec2.get_paginator("describe_spot_price_history").paginate(
            ProductDescriptions=["Linux/UNIX", "Linux/UNIX (Amazon VPC)"], StartTime=self.now())
        for page in pages:
            for r in page.get("SpotPriceHistory", []):
                if not r.get("Timestamp"):
                    continue
                key = (r["InstanceType"], r["AvailabilityZone"])
                ts = str(r["Timestamp"])
                try:
                    price = float(r["SpotPrice"])
                except (TypeError, ValueError):
                    continue
                if not math.isfinite(price) or price < 0:
                    continue  # not a price (NaN, infinite, negative): the record is ignored
                if key not in prices or ts > prices[key][0]:
                    prices[key] = (ts, price)
        with self.lock:
            self.spot.update({k: v for k, (_, v) in prices.items()})
            self.spot_updated = True
            self.version += 1

    # --- per NodeClass ----------------------------------------------------------------------------
    def spot_price(self, name: str, zone: str) -> float | None:
        if not self.spot_updated:
            return self.on_demand.get(name)
        return self.spot.get((name, zone))

    def list(self, nodeclass: dict | None, unavailable: Callable[[str, str, str], bool] = lambda t, z, c: False,
             gates: dict[str, bool] | None = None, strict: bool = False) -> list[InstanceType]:
        """The NodeClass's instance types; KubeletExpressionError (gate NodeClassCEL) when one type's maxPods
        expression cannot be resolved (``strict``: any kubelet expression, as the NodeClass validation): then none.
        KubeletConfigError (one of them) when spec.kubelet cannot be decoded at all."""
        bad = ec2_kubelet_parse_error(((nodeclass or {}).get("spec") or {}).get("kubelet"))
        if bad is not None:  # as upstream: refused, not resolved from defaults the user never set
            raise KubeletConfigError(f"parsing spec.kubelet, {bad}")
        status = (nodeclass or {}).get("status") or {}
        subnet_zones = {s["zone"] for s in status.get("subnets") or ()}
        ami_arches = {v for a in status.get("amis") or () for r in a.get("requirements") or ()
                      if r.get("key") == LABEL_ARCH for v in r.get("values") or ()}
        family = static.AMI_FAMILIES[static.ami_family_name(nodeclass)]
        params = static.provider.gated_params(nodeclass, gates or {})
        if strict and params.get("cel"):
            params["cel"] = {**params["cel"], "strict": True}
        out = []
        with self.lock:
            for name, info in sorted(self.infos.items()):
                arches = [ARCH[a] for a in (info.get("ProcessorInfo") or {}).get("SupportedArchitectures", []) if a in ARCH]
                if not arches or (ami_arches and arches[0] not in ami_arches):
                    continue
                if family.is_windows and arches[0] != "amd64":
                    continue
                if family.name == "AL2023" and name.startswith("a1."):
                    continue  # AL2023 does not boot on a1
                zones = sorted(self.zones.get(name, set()) & subnet_zones if subnet_zones else self.zones.get(name, set()))
                out.append(self._instance_type(name, info, arches[0], zones, family, params, unavailable,
                                               (nodeclass or {}).get("spec")))
        return out

    def _instance_type(self, name, info, arch, zones, family, params, unavailable, nodeclass_spec=None) -> InstanceType:
        st = self.static.get(name) or {}
        vcpu = int((info.get("VCpuInfo") or {}).get("DefaultVCpus") or 0)
        mib = int((info.get("MemoryInfo") or {}).get("SizeInMiB") or 0)
        fam, _, size = name.partition(".")
        m = _GEN.match(fam)
        labels = {LABEL_ARCH: arch, LABEL_OS: "windows" if family.is_windows else "linux", LABEL_INSTANCE_TYPE: name,
                  LABEL_REGION: self.region, static.LABEL_INSTANCE_CPU: str(vcpu), static.LABEL_INSTANCE_MEMORY: str(mib),
                  static.LABEL_INSTANCE_FAMILY: fam, static.LABEL_INSTANCE_SIZE: size,
                  static.LABEL_INSTANCE_CAPABILITY_FLEX: str(bool(st.get("capability_flex"))).lower()}
        if m:
            labels[static.LABEL_INSTANCE_CATEGORY] = m.group(1)
            labels[static.LABEL_INSTANCE_GENERATION] = m.group(2)
        if info.get("Hypervisor"):
            labels[static.LABEL_INSTANCE_HYPERVISOR] = info["Hypervisor"]
        manu = st.get("cpu_manufacturer") or (info.get("ProcessorInfo") or {}).get("Manufacturer")
        if manu:
            labels[static.LABEL_INSTANCE_CPU_MANUFACTURER] = str(manu).lower().replace(" ", "-")
        if st.get("network_bandwidth") is not None:
            labels[static.LABEL_INSTANCE_NETWORK_BANDWIDTH] = str(st["network_bandwidth"])
        ebs = ((info.get("EbsInfo") or {}).get("EbsOptimizedInfo") or {}).get("MaximumBandwidthInMbps")
        if ebs and (info.get("EbsInfo") or {}).get("EbsOptimizedSupport") == "default":
            labels[static.LABEL_INSTANCE_EBS_BANDWIDTH] = str(ebs)
        net = info.get("NetworkInfo") or {}
        if net.get("EncryptionInTransitSupported") is not None:
            labels[static.LABEL_INSTANCE_ENCRYPTION_IN_TRANSIT] = str(net["EncryptionInTransitSupported"]).lower()
        labels[static.LABEL_INSTANCE_NITRO_SANDBOX] = str(info.get("NitroEnclavesSupport") == "supported").lower()
        storage = info.get("InstanceStorageInfo") or {}
        if storage.get("NvmeSupport") in ("required", "supported") and storage.get("TotalSizeInGB"):
            labels[static.LABEL_INSTANCE_LOCAL_NVME] = str(storage["TotalSizeInGB"])
        gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
        gpu = None
        if gpus:
            g = gpus[0]
            gpu = {"manufacturer": str(g.get("Manufacturer", "")).lower(), "count": int(g.get("Count") or 0)}
            labels.update({static.LABEL_INSTANCE_GPU_NAME: str(g.get("Name", "")).lower(),
                           static.LABEL_INSTANCE_GPU_MANUFACTURER: gpu["manufacturer"],
                           static.LABEL_INSTANCE_GPU_COUNT: str(gpu["count"]),
                           static.LABEL_INSTANCE_GPU_MEMORY: str(int((g.get("MemoryInfo") or {}).get("SizeInMiB") or 0))})
        neuron = (info.get("NeuronInfo") or {}).get("NeuronDevices") or (info.get("InferenceAcceleratorInfo") or {}).get("Accelerators") or []
        accel = None
        if neuron:
            a = neuron[0]
            accel = {"manufacturer": "aws", "count": int(a.get("Count") or 0)}
            labels.update({static.LABEL_INSTANCE_ACCELERATOR_NAME: str(a.get("Name", "")).lower(),
                           static.LABEL_INSTANCE_ACCELERATOR_MANUFACTURER: "aws",
                           static.LABEL_INSTANCE_ACCELERATOR_COUNT: str(accel["count"])})
        interfaces = (nodeclass_spec or {}).get("networkInterfaces")
        record = {"vcpu": vcpu, "memory": mib, "arch": arch,
                  "max_pods": eni_limited_pods(info, self.reserved_enis, interfaces),
                  "gpus": gpu, "accelerators": accel, "pod_eni": st.get("pod_eni"), "efa": efa_count(info, interfaces),
                  "local_nvme": storage.get("TotalSizeInGB") if storage.get("NvmeSupport") in ("required", "supported") else None}
        if params.get("cel"):  # kubelet expressions (gate NodeClassCEL), resolved for this type
            enis, ips = eni_limits(info)
            params = static.provider.resolve_kubelet({**record, "name": name, "default_enis": enis, "ips_per_eni": ips},
                                                     family, params)
        capacity, _ = static.provider.resources(record, family, params)
        memory = memory_capacity(mib, arch, self.overhead)
        capacity[MEMORY] = memory
        if neuron_cores(info):
            capacity[RESOURCE_NEURON_CORE] = neuron_cores(info)
        if family.is_windows:
            capacity[RESOURCE_PRIVATE_IPV4] = private_ipv4_addresses(name)
        pods_for_memory = eni_limited_pods(info, 0, interfaces) if family.eni_limited_memory else capacity[PODS]
        overhead = static._sum(static.kube_reserved(vcpu, pods_for_memory, params["kube_reserved"]),
                               params["system_reserved"],
                               static.eviction_threshold(memory, capacity[EPHEMERAL], params["eviction_hard"]))
        offerings = []
        fits = supports_interfaces(info, interfaces)
        usage = set((info.get("SupportedUsageClasses") or [CAPACITY_ON_DEMAND]))
        for zone in zones:
            for ct in (CAPACITY_ON_DEMAND, CAPACITY_SPOT):
                if ct not in usage:
                    continue
                price = self.on_demand.get(name) if ct == CAPACITY_ON_DEMAND else self.spot_price(name, zone)
                available = fits and price is not None and not unavailable(name, zone, ct)
                offerings.append(Offering(zone, ct, float(price or 0.0), available=available,
                                          price_estimated=ct == CAPACITY_SPOT and not self.spot_updated))
        return InstanceType(name, labels, capacity, overhead, offerings)

