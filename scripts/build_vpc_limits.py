"""Write karpy/cloudprovider/data/aws_vpc_limits.json: the instance types the Amazon VPC resource controller
advertises vpc.amazonaws.com/PrivateIPv4Address for (Windows nodes), with their IPv4 addresses per interface.

The source is the limits table aws/karpenter-provider-aws generates from the VPC resource controller
(``pkg/providers/instancetype/zz_generated.vpclimits.go``), read from a local git copy of that repository:

    python scripts/build_vpc_limits.py --repo DIR --commit SHA
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

PATH = "pkg/providers/instancetype/zz_generated.vpclimits.go"
OUT = Path(__file__).resolve().parent.parent / "karpy" / "cloudprovider" / "data" / "aws_vpc_limits.json"
ENTRY = re.compile(r'^\t"(?P<name>[a-z0-9][a-z0-9.\-]*)": \{(?P<body>.*?)^\t\},', re.M | re.S)
FIELD = re.compile(r"^\t\tIPv4PerInterface:\s*(\d+),", re.M)


def parse(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in ENTRY.finditer(text):
        f = FIELD.search(m.group("body"))
        if f is None:
            raise SystemExit(f"{PATH}: entry {m.group('name')!r} has no IPv4PerInterface")
        out[m.group("name")] = int(f.group(1))
    if not out:
        raise SystemExit(f"{PATH}: no limits found")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", required=True, help="a git copy of aws/karpenter-provider-aws (bare or not)")
    ap.add_argument("--commit", required=True)
    a = ap.parse_args(argv)
    text = subprocess.run(["git", "-C", a.repo, "show", f"{a.commit}:{PATH}"], capture_output=True, text=True)
    if text.returncode:
        print(f"git show {a.commit}:{PATH}: {text.stderr.strip()}", file=sys.stderr)
        return 2
    limits = parse(text.stdout)
    OUT.write_text(json.dumps({
        "source": {"repository": "aws/karpenter-provider-aws", "path": PATH, "commit": a.commit},
        "notes": "IPv4 addresses per network interface of every instance type the VPC resource controller "
                 "advertises vpc.amazonaws.com/PrivateIPv4Address for; a Windows node offers that number less one",
        "ipv4_per_interface": dict(sorted(limits.items())),
    }, indent=1) + "\n")
    print(f"{OUT}: {len(limits)} instance types")
    return 0


if __name__ == "__main__":
    sys.exit(main())
