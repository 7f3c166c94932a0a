#!/usr/bin/env python3
"""Build karpy's embedded instance-type catalogs from the shared facts data.

Reads ``azure-vm-sizes.csv``, ``aws-instance-types.csv`` and
``kwok-instance-types.csv`` (documented in the data directory's README.md) and
writes ``karpy/cloudprovider/data/{azure,aws,kwok}.json``.

The JSON files are the data the providers load at run time. They hold facts
only (specs, label values, prices); every formula (allocatable, overhead,
offerings, estimated spot prices) lives in the provider modules. The output is
deterministic: records sorted by name, keys sorted, compact separators, so
rerunning this script on the same CSV files reproduces the files byte for byte.

Usage::

    python scripts/build_catalogs.py [--data DIR] [--out DIR] [--check]

``--data`` defaults to ``data/instance-types`` (the repository's copy of the shared instance-type
facts, with their README of sources; ``../shared/data`` beside the project is the same files),
``--facts`` to ``data/facts`` (zones of every region, Azure prices of every
region and AWS spot savings, extracted by ``scripts/extract_price_facts.py``;
``docs/data-sources.md`` cites every source) and ``--out`` to
``karpy/cloudprovider/data``. ``--check`` writes nothing and exits 1 when a
file on disk differs from what would be written.

The Azure and AWS catalogs are written gzip-compressed (``<name>.json.gz``:
every region's prices make them megabytes of JSON); the kwok catalog stays
plain JSON.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import re
import statistics
import sys
from decimal import Decimal
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = PROJECT_ROOT / "data" / "instance-types"
DEFAULT_FACTS = PROJECT_ROOT / "data" / "facts"
DEFAULT_OUT = PROJECT_ROOT / "karpy" / "cloudprovider" / "data"

# The regions whose prices azure-vm-sizes.csv repeats (checked against the facts).
AZURE_CSV_REGIONS = ["eastus", "southcentralus", "westeurope", "westus2"]
# The regions aws-instance-types.csv has on-demand prices for (Karpenter-AWS's static tables).
AWS_PRICED_REGIONS = ["us-east-1", "us-gov-east-1", "us-gov-west-1"]
# Where on-demand prices of a region without its own come from: upstream's static
# fallback (pkg/providers/pricing/pricing.go, Reset) uses us-east-1's table.
AWS_FALLBACK_PRICE_REGION = "us-east-1"
# The Windows Server license AWS adds to the Linux price, USD per vCPU-hour: AWS EC2
# User Guide, "Optimize CPUs for License-Included instances", table "License-included
# AMI instance billing", row "Windows Server" (RunInstances:0002): $0.046.
AWS_WINDOWS_LICENSE_PER_VCPU_HOUR = 0.046
AWS_WINDOWS_LICENSE_SOURCE = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/optimize-cpu.html"
# A family's median spot ratio / savings is used only with at least this many samples.
MIN_FAMILY_SAMPLES = 3

# Digits kept for the spot/on-demand ratio (enough to reproduce every estimate
# to the 6 decimals the price sources use).
RATIO_DIGITS = 6


# --------------------------------------------------------------------------
# small helpers


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _int_or_none(s: str) -> int | None:
    return int(s) if s != "" else None


def _price(s: str) -> float | None:
    """A price cell as a float (None when empty). float() of the decimal string keeps the shortest repr."""
    return float(s) if s != "" else None


def _bool_or_none(s: str) -> bool | None:
    if s == "":
        return None
    if s not in ("true", "false"):
        raise ValueError(f"expected true/false, got {s!r}")
    return s == "true"


def _mib_from_gib(s: str) -> int:
    mib = Decimal(s) * 1024
    if mib != mib.to_integral_value():
        raise ValueError(f"memory {s} GiB is not a whole number of MiB")
    return int(mib)


# --------------------------------------------------------------------------
# the extracted region facts (data/facts; see docs/data-sources.md)


class Facts:
    """Zones of every region, Azure on-demand prices of every region, AWS Spot Advisor savings."""

    def __init__(self, sources, azure_regions, azure_prices, azure_zones, aws_zones, aws_spot_savings):
        self.sources = sources
        self.azure_regions: list[str] = azure_regions
        self.azure_prices: dict[str, dict[str, str]] = azure_prices  # size -> region -> price string
        self.azure_zones: dict[str, list[str]] = azure_zones
        self.aws_zones: dict[str, list[str]] = aws_zones
        self.aws_spot_savings: dict[str, dict[str, dict[str, int]]] = aws_spot_savings

    @classmethod
    def read(cls, d: Path) -> "Facts":
        sources = json.loads((d / "sources.json").read_text(encoding="utf-8"))
        with (d / "azure-ondemand-prices.csv").open(newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader)
            azure_regions = header[1:]
            azure_prices = {row[0]: dict(zip(azure_regions, row[1:])) for row in reader}
        azure_zones = {r["region"]: r["zones"].split() for r in _read_csv(d / "azure-zones.csv")}
        if sorted(azure_zones) != sorted(azure_regions):
            raise SystemExit("facts: azure-zones.csv and azure-ondemand-prices.csv name different regions")
        aws_zones = {r["region"]: r["zones"].split() for r in _read_csv(d / "aws-zones.csv")}
        savings: dict[str, dict[str, dict[str, int]]] = {}
        for r in _read_csv(d / "aws-spot-savings.csv"):
            pct = int(r["savings_percent"])
            if not -100 < pct < 100:  # the feed has one negative figure (spot above on-demand)
                raise SystemExit(f"facts: aws-spot-savings.csv: savings {pct} out of range")
            savings.setdefault(r["region"], {}).setdefault(r["os"], {})[r["instance_type"]] = pct
        return cls(sources, azure_regions, azure_prices, azure_zones, aws_zones, savings)


# --------------------------------------------------------------------------
# Azure VM size names
#
# Karpenter-Azure derives its sku-family / sku-series / sku-version labels by
# parsing the size name along Azure's naming convention
# (https://learn.microsoft.com/azure/virtual-machines/vm-naming-conventions):
#
#   <Family letter><sub-family letters><vCPUs>[-<constrained vCPUs>]<features>
#       [_<accelerator>][_v<version>][_Promo]
#
# family  = the first letter only ("N" for NC24ads_A100_v4, "D" for DS2_v2),
# series  = family + sub-family + feature letters + "_v<N>" ("NCads_v4"),
# version = N without the "v"; "1" when the name carries no version.
# The parser below is our own; it covers every name in the data and returns
# None for a name it cannot read (the provider then omits those labels).

_AZURE_SIZE = re.compile(
    r"^(?P<family>[A-Z])(?P<sub>[A-Z]{0,2})(?P<cpus>[0-9]+)"
    r"(?:-(?P<constrained>[0-9]+))?"
    r"(?P<features>[a-z]*)"
    r"(?:_(?P<accel>[A-Z]+[0-9]+[A-Z]*))?"
    r"(?:_(?P<version>[vV][1-9]))?"
    r"(?:_Promo)?$"
)

# Sizes whose name carries no accelerator token; their GPU model comes from the
# Microsoft Learn NCv3 series page (the same facts Karpenter-Azure uses).
_AZURE_GPU_BY_SIZE = {
    "NC6s_v3": "V100",
    "NC12s_v3": "V100",
    "NC24s_v3": "V100",
    "NC24rs_v3": "V100",
}


def parse_azure_size(name: str) -> dict | None:
    size = name.removeprefix("Standard_")
    m = _AZURE_SIZE.match(size)
    if not m:
        return None
    version = m["version"] or ""
    series = m["family"] + m["sub"] + m["features"] + (f"_{version}" if version else "")
    return {
        "family": m["family"],
        "series": series,
        "version": version[1:] if version else "1",
        "constrained": m["constrained"] is not None,
        "accelerator": m["accel"] or _AZURE_GPU_BY_SIZE.get(size),
    }


def azure_spot_ratios(rows: list[dict[str, str]]) -> dict:
    """Spot/on-demand ratios of the known Azure spot prices: the median of all, and of
    each size family (the name's first letter) with at least MIN_FAMILY_SAMPLES of them."""
    ratios: list[float] = []
    by_family: dict[str, list[float]] = {}
    for r in rows:
        for region in AZURE_CSV_REGIONS:
            spot = r.get(f"spot_price_linux_per_hour_{region}", "")
            if spot:
                ratio = float(spot) / float(r[f"price_linux_ondemand_per_hour_{region}"])
                ratios.append(ratio)
                fam = (parse_azure_size(r["name"]) or {}).get("family")
                by_family.setdefault(fam, []).append(ratio)
    return {
        "ratio": round(statistics.median(ratios), RATIO_DIGITS),
        "samples": len(ratios),
        "min": round(min(ratios), 4),
        "max": round(max(ratios), 4),
        "by_family": {
            f: round(statistics.median(v), RATIO_DIGITS)
            for f, v in sorted(by_family.items())
            if f and len(v) >= MIN_FAMILY_SAMPLES
        },
        "rule": "median spot/on-demand ratio of the known Azure spot prices: of the size's family "
        f"(the name's first letter) when it has at least {MIN_FAMILY_SAMPLES} samples, else of all",
    }


def build_azure(rows: list[dict[str, str]], facts: Facts) -> dict:
    spot_est = azure_spot_ratios(rows)
    regions = facts.azure_regions
    sizes = []
    unparsed = []
    for r in rows:
        parsed = parse_azure_size(r["name"])
        if parsed is None:
            unparsed.append(r["name"])
        gpu_count = _int_or_none(r["gpu_count"])
        gpu_manufacturer = r["gpu_manufacturer"] or None
        gpus = None
        if gpu_manufacturer or (gpu_count or 0) > 0:
            gpus = {
                "count": gpu_count,
                "name": (parsed or {}).get("accelerator") or (r["gpu_type"] or None),
                "manufacturer": gpu_manufacturer,
            }
        od_by_region = facts.azure_prices.get(r["name"], {})
        for region in AZURE_CSV_REGIONS:
            # the shared CSV repeats four regions of the same upstream table: they must agree
            if _price(r[f"price_linux_ondemand_per_hour_{region}"]) != _price(od_by_region.get(region, "")):
                raise SystemExit(f"azure: {r['name']} {region}: azure-vm-sizes.csv and the facts disagree")
        prices = {}
        for region in regions:
            od = _price(od_by_region.get(region, ""))
            if od is None:
                continue
            prices[region] = {
                "on_demand": od,
                "spot": _price(r.get(f"spot_price_linux_per_hour_{region}", "")),
            }
        sizes.append(
            {
                "name": r["name"],
                "arch": r["arch"],
                "os": "linux",
                "vcpu": int(r["vcpu"]),
                "memory": _mib_from_gib(r["memory_gib"]),
                "gpus": gpus,
                "max_pods": None,
                "family": parsed["family"] if parsed else None,
                "series": parsed["series"] if parsed else None,
                "version": parsed["version"] if parsed else None,
                "constrained_vcpu": bool(parsed and parsed["constrained"]),
                "premium_io": _bool_or_none(r["premium_storage"]),
                "accelerated_networking": _bool_or_none(r["accelerated_networking"]),
                "known_sku": r["in_known_skus"] == "true",
                "specs_source": r["specs_source"],
                "prices": prices,
            }
        )
    if unparsed:
        raise SystemExit(f"azure: cannot parse size names: {unparsed}")
    sizes.sort(key=lambda s: s["name"])
    n_spot = sum(1 for s in sizes for p in s["prices"].values() if p["spot"] is not None)
    zonal = sum(1 for z in facts.azure_zones.values() if z != ["0"])
    src = facts.sources["azure-ondemand-prices.csv"]
    notes = (
        "Azure VM sizes for karpy, built by scripts/build_catalogs.py from azure-vm-sizes.csv "
        "(shared facts data; see its README.md for every source) and data/facts (docs/data-sources.md). "
        "Specs: vCPU, memory (MiB = GiB x 1024), arch, GPU count come from the Azure Resource SKUs API dumps "
        "in Azure/karpenter-provider-azure (20 sizes), from the size-name rule checked against Microsoft Learn "
        "(478) and from Microsoft Learn size tables (131). "
        "family/series/version are parsed from the size name the way Karpenter-Azure labels them "
        "(family = first letter, series = family+sub-family+feature letters+_vN, version = N or 1). "
        "premium_io is the API PremiumIO capability for the 20 API sizes and the 's' feature letter otherwise; "
        "accelerated_networking is known only for the 20 API sizes (null elsewhere, so that label is omitted). "
        "GPU count is null for Standard_NV6/12/18ads_A10_v5 (fractional A10 GPUs). "
        "max_pods is null: Azure sets pods from the AKSNodeClass (spec.maxPods, else 250 for the default "
        "Azure CNI overlay network). known_sku mirrors Karpenter-Azure's known_skus.yaml; like upstream, karpy "
        "prices sizes missing from it at the penalty price 999 so they are chosen only when nothing else fits. "
        "The catalog lists every size of the data; the provider drops those AKS cannot use (under 2 vCPUs or "
        "3.5 GiB, restricted, constrained-vCPU, confidential DC/EC). "
        f"Prices: USD/hour, Linux, {len(regions)} regions. On-demand prices are Karpenter-Azure's "
        f"generated price table ({src['repository']} {src['path']} at {src['commit']}, generated "
        f"{src['data_date']}); a size without a price in a region is not offered there. "
        f"Spot prices are known for {n_spot} (size, region) pairs only (a pricing audit report in a fork of "
        "karpenter-provider-azure, 2026-09-01); every other spot price is an ESTIMATE made at run time: "
        "on-demand price x the median spot/on-demand ratio of the known spot prices of the size's family "
        f"(families with at least {MIN_FAMILY_SAMPLES} samples: "
        + ", ".join(f"{f} {v}" for f, v in spot_est["by_family"].items())
        + f"), else of all {spot_est['samples']} ({spot_est['ratio']}, range {spot_est['min']:.4f} to "
        f"{spot_est['max']:.4f}), rounded to 6 decimals, and flagged price_estimated. "
        f"Zones: {zonal} of the regions have availability zones <region>-1, -2 and -3 (Microsoft Learn, "
        "Azure regions with availability zone support); the others are regional, zone \"0\" as AKS labels "
        "regional nodes. No per-zone availability of sizes is known."
    )
    return {
        "provider": "azure",
        "notes": notes,
        "regions": regions,
        "zones": facts.azure_zones,
        "spot_estimate": spot_est,
        "sizes": sizes,
    }


# --------------------------------------------------------------------------
# AWS


def aws_spot_fallback(savings: dict[str, dict[str, dict[str, int]]]) -> dict:
    """Per region and OS: the median Spot Advisor savings of each instance family with at
    least MIN_FAMILY_SAMPLES types, and of all types ("*")."""
    out: dict = {}
    for region, by_os in sorted(savings.items()):
        for os_name, by_type in sorted(by_os.items()):
            fams: dict[str, list[int]] = {}
            for itype, pct in by_type.items():
                fams.setdefault(itype.split(".", 1)[0], []).append(pct)
            entry = {f: statistics.median(v) for f, v in sorted(fams.items()) if len(v) >= MIN_FAMILY_SAMPLES}
            entry["*"] = statistics.median(by_type.values())
            out.setdefault(region, {})[os_name] = entry
    return out


def build_aws(rows: list[dict[str, str]], facts: Facts) -> dict:
    savings = facts.aws_spot_savings  # region -> os -> type -> percent
    fallback = aws_spot_fallback(savings)
    # the ratio the catalog's single-number readers (karpy's viewer) use: us-east-1's median
    us_east = fallback[AWS_FALLBACK_PRICE_REGION]["linux"]["*"]
    sizes = []
    for r in rows:
        gpu_count = int(r["gpu_count"] or 0)
        acc_count = int(r["accelerator_count"] or 0)
        family = r["family"]
        flex = _bool_or_none(r["capability_flex"])
        if flex is None:
            # Karpenter-AWS derives the flag from the family name.
            flex = "-flex" in family
        prices = {}
        for region in AWS_PRICED_REGIONS:
            od = _price(r[f"price_ondemand_per_hour_{region.replace('-', '_')}"])
            if od is not None:
                prices[region] = {"on_demand": od, "spot": None}
        # Spot Advisor savings, percent: {region: [linux, windows]} (null where the feed has none)
        spot_savings = {}
        for region, by_os in sorted(savings.items()):
            pair = [by_os.get("linux", {}).get(r["name"]), by_os.get("windows", {}).get(r["name"])]
            if pair != [None, None]:
                spot_savings[region] = pair
        sizes.append(
            {
                "name": r["name"],
                "arch": r["arch"],
                "os": "linux",
                "vcpu": int(r["vcpu"]),
                "memory": int(r["memory_mib"]),
                "gpus": (
                    {
                        "count": gpu_count,
                        "name": r["gpu_name"] or None,
                        "manufacturer": r["gpu_manufacturer"] or None,
                        "memory": _int_or_none(r["gpu_memory_mib"]),
                    }
                    if gpu_count
                    else None
                ),
                "accelerators": (
                    {
                        "count": acc_count,
                        "name": r["accelerator_name"] or None,
                        "manufacturer": r["accelerator_manufacturer"] or None,
                    }
                    if acc_count
                    else None
                ),
                "max_pods": int(r["max_pods"]),
                "family": family,
                "category": r["category"] or None,
                "generation": r["generation"] or None,
                "size": r["size"] or None,
                "cpu_manufacturer": r["cpu_manufacturer"] or None,
                "hypervisor": r["hypervisor"] or None,
                "local_nvme": _int_or_none(r["local_nvme_gib"]),
                "network_bandwidth": _int_or_none(r["network_bandwidth_mbps"]),
                "ebs_bandwidth": _int_or_none(r["ebs_bandwidth_mbps"]),
                "encryption_in_transit": _bool_or_none(r["encryption_in_transit_supported"]),
                "capability_flex": flex,
                "efa": int(r["efa"] or 0),
                "pod_eni": int(r["pod_eni"] or 0),
                "prices": prices,
                "spot_savings": spot_savings,
            }
        )
    sizes.sort(key=lambda s: s["name"])
    regions = sorted(facts.aws_zones)
    price_regions = {
        region: region if region in AWS_PRICED_REGIONS else AWS_FALLBACK_PRICE_REGION for region in regions
    }
    src = facts.sources["aws-spot-savings.csv"]
    zsrc = facts.sources["aws-zones.csv"]
    notes = (
        "EC2 instance types for karpy, built by scripts/build_catalogs.py from aws-instance-types.csv "
        "(shared facts data; see its README.md for every source). "
        "Specs and label values come from the instance-types reference pages that aws/karpenter-provider-aws "
        "generates (AL2023, no blockDeviceMappings; us-east-1, us-east-2 and us-west-2); memory is MiB. "
        "max_pods is the ENI-limited pod count from those pages (reserved ENIs 0). "
        "efa and pod_eni are the vpc.amazonaws.com/efa and vpc.amazonaws.com/pod-eni capacities of those pages. "
        "gpus and accelerators are filled only where the pages list a single GPU / accelerator type "
        "(as Karpenter-AWS labels them). "
        f"Regions: {len(regions)}. On-demand prices: USD/hour, Linux, for {', '.join(AWS_PRICED_REGIONS)} "
        "(Karpenter-AWS's generated static price tables, 2026-07-20); types without a price there are not "
        f"offered there. Every other region is priced, as upstream's static fallback does, with the "
        f"{AWS_FALLBACK_PRICE_REGION} price, flagged price_estimated (price_regions says which region's "
        "prices a region uses); there a type is offered when the Spot Advisor lists it for the region (or, "
        "in a region the Advisor does not cover, when it has a fallback price). "
        "Windows (AMI families Windows2019/2022/2025): the bill adds the Windows Server license, "
        f"${AWS_WINDOWS_LICENSE_PER_VCPU_HOUR} per vCPU-hour ({AWS_WINDOWS_LICENSE_SOURCE}), flagged "
        "price_estimated; Karpenter itself ranks offerings by the Linux price, as upstream's pricing does. "
        "Spot prices are ESTIMATES: on-demand price x (1 - savings/100), where savings is the percentage "
        "AWS's Spot Instance Advisor feed publishes for the type, region and OS (spot_savings, "
        f"[linux, windows]; {src['feed']}, as committed in {src['repository']} {src['path']} at "
        f"{src['commit']}, {src['commit_date'][:10]}); for a type the feed lacks, the median of its family "
        f"in that region (families with at least {MIN_FAMILY_SAMPLES} types), else of the region "
        f"(spot_savings_fallback); a region the feed does not cover uses {AWS_FALLBACK_PRICE_REGION}'s. "
        f"spot_estimate.ratio ({round(1 - us_east / 100, RATIO_DIGITS)}) is 1 - the median {AWS_FALLBACK_PRICE_REGION} "
        "Linux savings, for readers that want one number. "
        f"Zones: {zsrc['repository']} {zsrc['path']} at {zsrc['commit']} lists the zones of the regions whose "
        "zones are not a, b and c; every other region has zones <region>a, b and c. No per-zone "
        "availability of types is known."
    )
    return {
        "provider": "aws",
        "notes": notes,
        "regions": regions,
        "zones": facts.aws_zones,
        "price_regions": price_regions,
        "windows_license_per_vcpu_hour": AWS_WINDOWS_LICENSE_PER_VCPU_HOUR,
        "spot_estimate": {
            "ratio": round(1 - us_east / 100, RATIO_DIGITS),
            "rule": f"1 - the median Spot Advisor Linux savings in {AWS_FALLBACK_PRICE_REGION} / 100",
        },
        "spot_savings_fallback": fallback,
        "spot_savings_region_fallback": AWS_FALLBACK_PRICE_REGION,
        "sizes": sizes,
    }


# --------------------------------------------------------------------------
# kwok


def build_kwok(rows: list[dict[str, str]]) -> dict:
    by_name: dict[str, dict] = {}
    for r in rows:
        rec = by_name.get(r["name"])
        spec = {
            "name": r["name"],
            "arch": r["arch"],
            "os": r["os"],
            "vcpu": int(r["vcpu"]),
            "memory": _mib_from_gib(r["memory_gib"]),
            "gpus": None,
            "max_pods": int(r["pods"]),
            "ephemeral_storage": _mib_from_gib(r["ephemeral_storage_gib"]),
        }
        if rec is None:
            rec = dict(spec, offerings=[])
            by_name[r["name"]] = rec
        elif any(rec[k] != v for k, v in spec.items()):
            raise SystemExit(f"kwok: rows of {r['name']} disagree on specs")
        rec["offerings"].append(
            {
                "zone": r["zone"],
                "capacity_type": r["capacity_type"],
                "price": float(r["price"]),
                "available": r["available"] == "true",
            }
        )
    sizes = []
    for name in sorted(by_name):
        rec = by_name[name]
        rec["offerings"].sort(key=lambda o: (o["zone"], o["capacity_type"]))
        sizes.append(rec)
    zones = sorted({o["zone"] for s in sizes for o in s["offerings"]})
    notes = (
        "The generic KWOK catalog for karpy, built by scripts/build_catalogs.py from kwok-instance-types.csv, "
        "which flattens kubernetes-sigs/karpenter kwok/cloudprovider/instance_types.json (one row per offering). "
        "Names are <c|s|m>-<vCPU>x-<arch>-<os> with 2, 4 and 8 GiB per vCPU; memory and ephemeral_storage are MiB; "
        "max_pods is the catalog's pods resource (min(16 x vCPU, 1024)). "
        f"Offerings are exactly the catalog's: zones {', '.join(zones)}, spot and on-demand, all available; prices "
        "are the catalog's synthetic units (on-demand 0.025/vCPU + 0.001/GB of memory; spot 0.7 x on-demand). "
        "The catalog is region-independent."
    )
    return {"provider": "kwok", "notes": notes, "regions": ["kwok"], "zones": zones, "sizes": sizes}


# --------------------------------------------------------------------------


def render(obj: dict) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False) + "\n"


def build_all(data_dir: Path, facts_dir: Path = DEFAULT_FACTS) -> dict[str, str]:
    """Every catalog file name (before compression) with its content."""
    azure_rows = _read_csv(data_dir / "azure-vm-sizes.csv")
    aws_rows = _read_csv(data_dir / "aws-instance-types.csv")
    kwok_rows = _read_csv(data_dir / "kwok-instance-types.csv")
    facts = Facts.read(facts_dir)
    return {
        "azure.json": render(build_azure(azure_rows, facts)),
        "aws.json": render(build_aws(aws_rows, facts)),
        "kwok.json": render(build_kwok(kwok_rows)),
    }


# The catalogs written gzip-compressed (file name + ".gz").
COMPRESSED = ("azure.json", "aws.json")


def file_name(name: str) -> str:
    return name + ".gz" if name in COMPRESSED else name


def read_catalog_text(path: Path) -> str | None:
    """The JSON text of a catalog file on disk (decompressed), or None when it is missing."""
    if not path.exists():
        return None
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="directory with the three CSV files")
    ap.add_argument("--facts", type=Path, default=DEFAULT_FACTS, help="directory with the extracted region facts")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory to write the JSON catalogs to")
    ap.add_argument("--check", action="store_true", help="write nothing; fail if a catalog on disk is stale")
    args = ap.parse_args(argv)

    files = build_all(args.data, args.facts)
    stale = []
    for name, text in files.items():
        path = args.out / file_name(name)
        if read_catalog_text(path) == text:
            continue
        if args.check:
            stale.append(path.name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        data = text.encode("utf-8")
        if name in COMPRESSED:
            data = gzip.compress(data, compresslevel=9, mtime=0)  # mtime 0: the same input, the same bytes
        path.write_bytes(data)
        print(f"wrote {path} ({len(data)} bytes)")
    if stale:
        print(f"stale catalogs: {', '.join(stale)} (rerun scripts/build_catalogs.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
