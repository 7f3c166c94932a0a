#!/usr/bin/env python3
"""Extract karpy's region, zone and price facts from local copies of public sources.

karpy's catalogs (``scripts/build_catalogs.py``) need facts the shared CSV
files lack: the zones of every region, Azure on-demand prices in every region,
and AWS spot savings. This script reads them from local git copies of the
public repositories that state them and writes plain CSV files under
``data/facts/`` plus ``data/facts/sources.json`` (repository, path, commit and
date of every file read). Only values are taken; ``docs/data-sources.md``
describes each source and every rule applied.

Usage::

    python scripts/extract_price_facts.py --mirrors DIR [--out DIR]

``--mirrors`` holds one bare git directory per repository, named
``<owner>+<name>/repo`` (as the project's source mirror tool lays them out).
The files read are those at each repository's HEAD.

Sources read:

- Azure/karpenter-provider-azure ``pkg/providers/pricing/zz_generated.pricing.go``:
  on-demand Linux prices, 57 regions (only the sizes karpy's Azure catalog has).
- alexei-led/spotinfo ``internal/spot/data/spot-advisor-data.json``: AWS's
  Spot Instance Advisor feed, savings over on-demand per region, OS and type.
- getmoto/moto ``moto/ec2/models/availability_zones_and_regions.py``: the zone
  names of the AWS regions whose zones are not simply ``a``, ``b``, ``c``.
- MicrosoftDocs/azure-docs ``articles/reliability/availability-zones-region-support.md``
  (through the code index; its text is given with ``--azure-zones-doc FILE``):
  the Azure regions that have availability zones.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = PROJECT_ROOT / "data" / "facts"
SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _source(repo_dir: Path, repository: str, path: str) -> tuple[str, dict]:
    text = _git(repo_dir, "show", f"HEAD:{path}")
    commit, date = _git(repo_dir, "log", "-1", "--format=%H %cI", "HEAD", "--", path).split()
    return text, {"repository": repository, "path": path, "commit": commit, "commit_date": date}


def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
    print(f"wrote {path} ({len(rows)} rows)")


# --------------------------------------------------------------------------
# Azure on-demand prices, every region of the upstream table

_AZ_REGION = re.compile(r'initialOnDemandPrices\["([a-z0-9]+)"\]\s*=\s*map\[string\]float64\{(.*?)\n\t\}', re.S)
_AZ_PRICE = re.compile(r'"([A-Za-z0-9_\-]+)":\s*([0-9.]+)')
_AZ_DATE = re.compile(r"// generated at (\S+)")


def azure_prices(mirrors: Path, sizes: list[str]) -> tuple[list[str], list[list], dict]:
    text, src = _source(
        mirrors / "Azure+karpenter-provider-azure" / "repo",
        "Azure/karpenter-provider-azure",
        "pkg/providers/pricing/zz_generated.pricing.go",
    )
    src["data_date"] = _AZ_DATE.search(text).group(1)
    table: dict[str, dict[str, str]] = {}
    for region, body in _AZ_REGION.findall(text):
        table[region] = dict(_AZ_PRICE.findall(body))
    regions = sorted(table)
    rows = [[name] + [table[r].get(name, "") for r in regions] for name in sizes]
    src["regions"] = len(regions)
    return ["name"] + regions, rows, src


# --------------------------------------------------------------------------
# AWS Spot Instance Advisor: savings over on-demand (percent) per region, OS, type


def aws_spot_savings(mirrors: Path) -> tuple[list[str], list[list], dict]:
    text, src = _source(
        mirrors / "alexei-led+spotinfo" / "repo", "alexei-led/spotinfo", "internal/spot/data/spot-advisor-data.json"
    )
    src["feed"] = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"
    advisor = json.loads(text)["spot_advisor"]
    rows = []
    for region in sorted(advisor):
        for os_name in sorted(advisor[region]):
            for itype, stats in sorted(advisor[region][os_name].items()):
                rows.append([region, os_name.lower(), itype, int(stats["s"])])
    src["regions"] = len(advisor)
    return ["region", "os", "instance_type", "savings_percent"], rows, src


# --------------------------------------------------------------------------
# zones

_MOTO_ZONE = re.compile(r'Zone\(\s*region_name="([a-z0-9-]+)",\s*name="([a-z0-9-]+)"')


def aws_zones(mirrors: Path, regions: list[str]) -> tuple[list[str], list[list], dict]:
    text, src = _source(
        mirrors / "getmoto+moto" / "repo", "getmoto/moto", "moto/ec2/models/availability_zones_and_regions.py"
    )
    listed: dict[str, list[str]] = {}
    for region, zone in _MOTO_ZONE.findall(text):
        listed.setdefault(region, []).append(zone)
    rows = []
    for region in regions:
        if region in listed:
            rows.append([region, " ".join(sorted(listed[region])), "listed"])
        else:
            rows.append([region, " ".join(f"{region}{z}" for z in "abc"), "default"])
    return ["region", "zones", "basis"], rows, src


def azure_zones(doc: Path, regions: list[str]) -> tuple[list[str], list[list]]:
    """Regions named in the doc's table have zones 1-3; the others are regional (zone "0")."""
    names = set()
    for line in doc.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|") or "---" in line or "Americas" in line:
            continue
        for cell in line.strip("|").split("|"):
            cell = cell.strip().strip("*").strip()
            if cell:
                names.add(cell.lower().replace(" ", ""))
    unknown = sorted(names - set(regions))
    rows = [[r, " ".join(f"{r}-{i}" for i in (1, 2, 3)) if r in names else "0"] for r in regions]
    if unknown:
        print(f"note: zonal regions without prices (left out): {', '.join(unknown)}", file=sys.stderr)
    return ["region", "zones"], rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirrors", type=Path, required=True)
    ap.add_argument("--azure-zones-doc", type=Path, required=True,
                    help="text of MicrosoftDocs/azure-docs articles/reliability/availability-zones-region-support.md")
    ap.add_argument("--azure-zones-commit", required=True, help="the commit of that file")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    with (SHARED_DATA / "azure-vm-sizes.csv").open(newline="", encoding="utf-8") as f:
        sizes = sorted(r["name"] for r in csv.DictReader(f))
    sources = {}

    header, rows, sources["azure-ondemand-prices.csv"] = azure_prices(args.mirrors, sizes)
    _write_csv(args.out / "azure-ondemand-prices.csv", header, rows)
    azure_regions = header[1:]
    header, rows = azure_zones(args.azure_zones_doc, azure_regions)
    _write_csv(args.out / "azure-zones.csv", header, rows)
    sources["azure-zones.csv"] = {
        "repository": "MicrosoftDocs/azure-docs",
        "path": "articles/reliability/availability-zones-region-support.md",
        "commit": args.azure_zones_commit,
        "url": "https://learn.microsoft.com/azure/reliability/availability-zones-region-support",
    }

    header, rows, sources["aws-spot-savings.csv"] = aws_spot_savings(args.mirrors)
    _write_csv(args.out / "aws-spot-savings.csv", header, rows)
    aws_regions = sorted({r[0] for r in rows} | {"us-east-1", "us-gov-east-1", "us-gov-west-1",
                                                  "cn-north-1", "cn-northwest-1"})
    header, rows, sources["aws-zones.csv"] = aws_zones(args.mirrors, aws_regions)
    _write_csv(args.out / "aws-zones.csv", header, rows)

    (args.out / "sources.json").write_text(json.dumps(sources, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
