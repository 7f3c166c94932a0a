#!/usr/bin/env python3
"""Write karpy's CustomResourceDefinitions to deploy/crds/ and charts/karpy/crds/ (one file per CRD).

    python scripts/gen_crds.py            # (re)write deploy/crds/*.yaml and charts/karpy/crds/*.yaml
    python scripts/gen_crds.py --check    # exit 1 if either is out of date

It also copies deploy/rbac.yaml into charts/karpy/files/rbac.yaml, whose rules the chart's roles grant.

The CRDs come from karpy's own API schema (karpy.api.crds); rerun this after
changing karpy/api/nodepool.py or karpy/api/nodeclass.py. Files in
those directories that no CRD produces any more are removed (or reported by --check).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from karpy.api.crds import files  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="report differences instead of writing")
    ap.add_argument("--out", type=Path, action="append",
                    help="a directory to write (repeatable) [default: deploy/crds and charts/karpy/crds]")
    args = ap.parse_args(argv)

    want = files()
    status = 0
    for out in args.out or [ROOT / "deploy" / "crds", ROOT / "charts" / "karpy" / "crds"]:
        status |= sync(want, out, args.check)
    if not args.out:
        rbac = ROOT / "deploy" / "rbac.yaml"
        status |= sync({"rbac.yaml": rbac.read_text()}, ROOT / "charts" / "karpy" / "files", args.check)
    return status


def sync(want: dict[str, str], out: Path, check: bool) -> int:
    have = {p.name: p.read_text() for p in sorted(out.glob("*.yaml"))} if out.is_dir() else {}
    stale = sorted(n for n in want if have.get(n) != want[n])
    extra = sorted(n for n in have if n not in want)
    if check:
        for n in stale:
            print(f"{out / n}: out of date", file=sys.stderr)
        for n in extra:
            print(f"{out / n}: no CRD produces it", file=sys.stderr)
        if stale or extra:
            print("run: python scripts/gen_crds.py", file=sys.stderr)
            return 1
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for n in stale:
        (out / n).write_text(want[n])
        print(f"wrote {out / n}")
    for n in extra:
        (out / n).unlink()
        print(f"removed {out / n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
