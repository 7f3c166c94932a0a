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

``--data`` defaults to ``../shared/data`` relative to the project root and
``--out`` to ``karpy/cloudprovider/data``. ``--check`` writes nothing and exits
1 when a file on disk differs from what would be written.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import sys
from decimal import Decimal
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = PROJECT_ROOT.parent / "shared" / "data"
DEFAULT_OUT = PROJECT_ROOT / "karpy" / "cloudprovider" / "data"

AZURE_REGIONS = ["eastus", "southcentralus", "westeurope", "westus2"]
AWS_REGIONS = ["us-east-1", "us-gov-east-1", "us-gov-west-1"]

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


def azure_spot_ratio(rows: list[dict[str, str]]) -> tuple[float, int, float, float]:
    """Median spot/on-demand ratio over every (size, region) with a known spot price."""
    ratios = []
    for r in rows:
        for region in AZURE_REGIONS:
            spot = r.get(f"spot_price_linux_per_hour_{region}", "")
            if spot:
                ratios.append(float(spot) / float(r[f"price_linux_ondemand_per_hour_{region}"]))
    return round(statistics.median(ratios), RATIO_DIGITS), len(ratios), min(ratios), max(ratios)


def build_azure(rows: list[dict[str, str]], ratio: float, n_ratio: int, lo: float, hi: float) -> dict:
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
        prices = {}
        for region in AZURE_REGIONS:
            od = _price(r[f"price_linux_ondemand_per_hour_{region}"])
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
    notes = (
        "Azure VM sizes for karpy, built by scripts/build_catalogs.py from azure-vm-sizes.csv "
        "(shared facts data; see its README.md for every source). "
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
        f"Prices: USD/hour, Linux, regions {', '.join(AZURE_REGIONS)}. On-demand prices are Karpenter-Azure's "
        "generated price table (Azure Retail Prices API, generated 2026-06-18). "
        f"Spot prices are known for {n_spot} (size, region) pairs only (a pricing audit report in a fork of "
        "karpenter-provider-azure, 2026-09-01); every other spot price is an ESTIMATE made at run time: "
        f"on-demand price x {ratio}, the median spot/on-demand ratio of the {n_ratio} known spot prices "
        f"(range {lo:.4f} to {hi:.4f}), rounded to 6 decimals, and flagged price_estimated. "
        "No per-zone availability is known: sizes are offered in zones <region>-1, -2 and -3."
    )
    return {
        "provider": "azure",
        "notes": notes,
        "regions": AZURE_REGIONS,
        "spot_estimate": {"ratio": ratio, "samples": n_ratio, "rule": "median spot/on-demand ratio of the known Azure spot prices"},
        "sizes": sizes,
    }


# --------------------------------------------------------------------------
# AWS


def build_aws(rows: list[dict[str, str]], ratio: float, n_ratio: int) -> dict:
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
        for region in AWS_REGIONS:
            od = _price(r[f"price_ondemand_per_hour_{region.replace('-', '_')}"])
            if od is not None:
                prices[region] = {"on_demand": od, "spot": None}
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
            }
        )
    sizes.sort(key=lambda s: s["name"])
    notes = (
        "EC2 instance types for karpy, built by scripts/build_catalogs.py from aws-instance-types.csv "
        "(shared facts data; see its README.md for every source). "
        "Specs and label values come from the instance-types reference pages that aws/karpenter-provider-aws "
        "generates (AL2023, no blockDeviceMappings; us-east-1, us-east-2 and us-west-2); memory is MiB. "
        "max_pods is the ENI-limited pod count from those pages (reserved ENIs 0). "
        "efa and pod_eni are the vpc.amazonaws.com/efa and vpc.amazonaws.com/pod-eni capacities of those pages. "
        "gpus and accelerators are filled only where the pages list a single GPU / accelerator type "
        "(as Karpenter-AWS labels them). "
        f"Prices: USD/hour, Linux, on-demand, regions {', '.join(AWS_REGIONS)} "
        "(Karpenter-AWS's generated static price tables, 2026-07-20); types without a price in a region are "
        "not offered there. No AWS spot price is in the data: every spot price is an ESTIMATE made at run time, "
        f"on-demand price x {ratio}, the median spot/on-demand ratio of the {n_ratio} known Azure spot prices "
        "(no AWS spot figure exists in the sources; the ratio is borrowed across clouds), rounded to 6 decimals "
        "and flagged price_estimated. No per-zone availability is known: types are offered in zones "
        "<region>a, b and c, on-demand and spot."
    )
    return {
        "provider": "aws",
        "notes": notes,
        "regions": AWS_REGIONS,
        "spot_estimate": {"ratio": ratio, "samples": n_ratio, "rule": "median spot/on-demand ratio of the known Azure spot prices"},
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


def build_all(data_dir: Path) -> dict[str, str]:
    """Every catalog file name with its content."""
    azure_rows = _read_csv(data_dir / "azure-vm-sizes.csv")
    aws_rows = _read_csv(data_dir / "aws-instance-types.csv")
    kwok_rows = _read_csv(data_dir / "kwok-instance-types.csv")
    ratio, n, lo, hi = azure_spot_ratio(azure_rows)
    return {
        "azure.json": render(build_azure(azure_rows, ratio, n, lo, hi)),
        "aws.json": render(build_aws(aws_rows, ratio, n)),
        "kwok.json": render(build_kwok(kwok_rows)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="directory with the three CSV files")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory to write the JSON catalogs to")
    ap.add_argument("--check", action="store_true", help="write nothing; fail if a catalog on disk is stale")
    args = ap.parse_args(argv)

    files = build_all(args.data)
    stale = []
    for name, text in files.items():
        path = args.out / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path} ({len(text)} bytes)")
    if stale:
        print(f"stale catalogs: {', '.join(stale)} (rerun scripts/build_catalogs.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
