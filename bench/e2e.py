"""End-to-end benchmark: `karpy simulate` run as a user runs it, parse and output included.

Two workloads, each written as plain manifests into a temporary directory and
handed to ``karpy simulate DIR -o json`` in a child process (the installed
console script of this virtualenv). For every run the script reports the wall
time and the child's peak RSS (``os.wait4``), then checks the result from the
JSON output alone:

``diverse N``
    upstream's makeDiversePods(N) mix (bench/scheduling.py) as N plain Pod
    manifests on the kwok catalog, one NodePool without limits (linux,
    on-demand). Checks: every pod bound; nodes <= 1.05 x N/5 (N/5 pods repel
    each other by hostname anti-affinity, so N/5 is the minimum); every bind
    admissible at the moment it was made (``bench/verify.replay_binds``).

``wide R``
    upstream's "wide deployments" shapes (test/suites/performance/
    wide_deployments_test.go): 30 Deployments of R replicas each with upstream's
    CPU and memory requests, a zone spread on all of them, a hostname spread on
    4-6 and hostname anti-affinity on 1-3, on a kwok NodePool limited to
    on-demand and instance-size < 32 with ``consolidateAfter: 30s`` and a 100 %
    budget (``--budget 10%``: upstream's default). After 10 simulated minutes every Deployment is scaled to half and
    the simulation runs to 75 minutes. Checks: every pod bound at the end, and
    the final cost against the LP lower bound of the final pods (fractional
    nodes of the allowed types covering CPU, memory and pod slots).

Run from the repository root:

    .venv/bin/python bench/e2e.py diverse 1000 5000 20000
    .venv/bin/python bench/e2e.py wide 34 100 267
    .venv/bin/python bench/e2e.py all          # the sizes bench/README.md reports

Exits non-zero when a check fails. Nothing here is a unit test: timings are
reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import yaml

import _util  # noqa: F401  (puts the repository root on sys.path)
from _util import GIB, MIB
from scheduling import make_diverse_pods

import verify

ROOT = Path(__file__).resolve().parents[1]
KARPY = Path(sys.executable).with_name("karpy")

KWOK_NODECLASS = {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": "default"}}
KWOK_REF = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}


# --- workloads -------------------------------------------------------------------------


def diverse_documents(n: int) -> list[dict]:
    # The pods are bare Pods: consolidation would evict them for good (as in a real cluster), so the
    # NodePool only removes nodes that are empty.
    nodepool = {
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": KWOK_REF,
                "requirements": [
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                ],
            }},
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"},
        },
    }
    pods = [p.manifest for p in make_diverse_pods(n)]
    scenario = {"apiVersion": "karpy.dev/v1alpha1", "kind": "Scenario", "metadata": {"name": "diverse"},
                "spec": {"settings": {"featureGates": dict(GATES)}}}
    return [KWOK_NODECLASS, nodepool, *pods, *([scenario] if GATES else [])]


WIDE_CPU = ["240m", "450m", "650m", "900m", "1400m", "1900m", "2400m", "2800m", "3300m", "3700m",
            "2300m", "900m", "1300m", "2800m", "1800m", "1850m", "3300m", "3800m", "225m", "450m",
            "700m", "900m", "1300m", "1800m", "2400m", "2800m", "3400m", "3800m", "3300m", "2800m"]
WIDE_MEM = ["300Mi", "400Mi", "700Mi", "1Gi", "2Gi", "4Gi", "8Gi", "4Gi", "16Gi", "10Gi",
            "64Gi", "30Gi", "32Gi", "32Gi", "30Gi", "20Gi", "30Gi", "300Mi", "500Mi", "750Mi",
            "1Gi", "2Gi", "4Gi", "8Gi", "16Gi", "32Gi", "28Gi", "64Gi", "13Gi", "24Gi"]
WIDE_LT = "32"  # instance-size Lt 32, as the performance suite sets on kwok


def wide_documents(replicas: int) -> list[dict]:
    nodepool = {
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": KWOK_REF,
                "requirements": [
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    {"key": "karpenter.kwok.sh/instance-size", "operator": "Lt", "values": [WIDE_LT]},
                ],
            }},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "30s",
                           "budgets": [{"nodes": BUDGET[0]}]},
        },
    }
    docs: list[dict] = [KWOK_NODECLASS, nodepool]
    steps: list[dict] = [{"advance": "10m"}]
    for i in range(30):
        name = f"wide-deployment-{i + 1}"
        labels = {"app": name, "deployment-index": str(i + 1)}
        sel = {"matchLabels": {"app": name}}
        spread = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                   "labelSelector": sel}]
        spec: dict = {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                                      "resources": {"requests": {"cpu": WIDE_CPU[i], "memory": WIDE_MEM[i]}}}]}
        if 3 <= i < 6:
            labels["has-hostname-spread"] = "true"
            spread.append({"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
                           "labelSelector": sel})
        if i < 3:
            labels["has-anti-affinity"] = "true"
            spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": sel}]}}
        spec["topologySpreadConstraints"] = spread
        docs.append({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": labels}, "spec": spec}},
        })
        steps.append({"scale": {"kind": "Deployment", "namespace": "default", "name": name, "replicas": replicas // 2}})
    docs.append({"apiVersion": "karpy.dev/v1alpha1", "kind": "Scenario", "metadata": {"name": "wide"},
                 "spec": {"steps": steps, **({"settings": {"featureGates": dict(GATES)}} if GATES else {})}})
    return docs


GATES: dict[str, bool] = {}  # --feature-gates, for the wide Scenario
BUDGET = ["100%"]  # --budget, the wide NodePool's disruption budget


# --- running ---------------------------------------------------------------------------


def _run(args: list[str], out_path: Path) -> tuple[float, float]:
    t0 = time.perf_counter()
    with open(out_path, "wb") as out:
        proc = subprocess.Popen([str(KARPY), "simulate", *args], stdout=out)
        _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"karpy simulate exited with {code}")
    return seconds, usage.ru_maxrss / 1024


def run_simulate(docs: list[dict], until: str, workdir: Path) -> tuple[dict, float, float, float]:
    """Write the manifests, then run `karpy simulate DIR` twice: as a user first runs it (the table), timed
    with its peak RSS; and with `-o json` for the checks. Returns (output, table s, RSS MiB, json s)."""
    d = workdir / "manifests"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    (d / "workload.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    seconds, rss = _run([str(d), "--until", until], workdir / "out.txt")
    json_seconds, _ = _run([str(d), "-o", "json", "--until", until], workdir / "out.json")
    return json.loads((workdir / "out.json").read_text()), seconds, rss, json_seconds


def of(output: dict, kind: str) -> list[dict]:
    return [i for i in output["items"] if i["kind"] == kind]


def summary(output: dict) -> dict:
    return of(output, "SimulationSummary")[0]["status"]


# --- LP bound ----------------------------------------------------------------------------


def lp_bound(pods: list[dict], types: list[tuple[Fraction, Fraction, Fraction, Fraction]]) -> Fraction:
    """The cheapest fractional cover of the pods' CPU, memory and pod slots by the given types
    ((price, cpu, memory, pods) allocatable each), exactly, by enumerating bases of the 3-row LP."""
    demand = [Fraction(0), Fraction(0), Fraction(len(pods))]
    for p in pods:
        for c in p["spec"].get("containers", []):
            req = (c.get("resources") or {}).get("requests") or {}
            demand[0] += _qty(req.get("cpu", "0"))
            demand[1] += _qty(req.get("memory", "0"))
    return verify.lp_cover(demand, types)


def _qty(s: str) -> Fraction:
    s = str(s)
    units = {"m": Fraction(1, 1000), "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    for u, f in units.items():
        if s.endswith(u):
            return Fraction(s[: -len(u)]) * f
    return Fraction(s)


def kwok_types_wide(lt: int | None = int(WIDE_LT)) -> list[tuple[Fraction, Fraction, Fraction, Fraction]]:
    """Allowed kwok types for the wide NodePool: linux, on-demand, instance-size < 32 (lt None: any size, the
    diverse NodePool)."""
    data = json.loads((ROOT / "karpy" / "cloudprovider" / "data" / "kwok.json").read_text())
    out = []
    for size in data["sizes"]:
        if size["os"] != "linux" or (lt is not None and size["vcpu"] >= lt):
            continue
        prices = [o["price"] for o in size["offerings"] if o["capacity_type"] == "on-demand" and o["available"]]
        if not prices:
            continue
        out.append((Fraction(str(min(prices))), Fraction(size["vcpu"]) - Fraction(1, 10),
                    Fraction(size["memory"] * MIB - 10 * MIB), Fraction(size["max_pods"])))
    return out


# --- the two benchmarks ------------------------------------------------------------------


def bench_diverse(n: int, workdir: Path) -> bool:
    out, secs, rss, jsecs = run_simulate(diverse_documents(n), "1h", workdir)
    s = summary(out)
    nodes = len([c for c in s["nodeClaims"] if c["deletedAt"] is None and not c["launchFailed"]])
    bound = s["pods"]["bound"]
    bad = verify.replay_binds(out)
    ok = bound == n and nodes <= 1.05 * (n // 5) and not bad
    lp = lp_bound(of(out, "Pod"), kwok_types_wide(None))
    upstream = _upstream(s, lp)
    print(f"diverse {n:>7} {secs:8.1f} s {rss:8.0f} MiB  (-o json {jsecs:.1f} s)  bound {bound}/{n}  nodes {nodes} (N/5 = {n // 5}, "
          f"x{nodes / max(1, n // 5):.3f})  inadmissible binds {len(bad)}  cost ${s['costPerHour']}/h  "
          f"LP ${float(lp):.4f}/h  cost/LP {float(Fraction(s['costPerHour']) / lp):.3f}{upstream}  "
          f"{'PASS' if ok else 'FAIL'}", flush=True)
    for line in bad[:5]:
        print("   ", line)
    return ok


def bench_wide(replicas: int, workdir: Path) -> bool:
    out, secs, rss, jsecs = run_simulate(wide_documents(replicas), "75m", workdir)
    s = summary(out)
    pods = [p for p in of(out, "Pod")]
    live = [c for c in s["nodeClaims"] if c["deletedAt"] is None and not c["launchFailed"]]
    peak = _peak_nodes(s["nodeClaims"])
    bound = s["pods"]["bound"]
    lp = lp_bound(pods, kwok_types_wide())
    cost = Fraction(s["costPerHour"])
    ratio = float(cost / lp) if lp else float("inf")
    ok = bound == len(pods) == s["pods"]["total"] and ratio <= 1.15
    upstream = _upstream(s, lp)
    print(f"wide {replicas:>4}x30 {secs:8.1f} s {rss:8.0f} MiB  (-o json {jsecs:.1f} s)  pods {len(pods)} bound {bound}  nodes peak {peak} "
          f"end {len(live)}  cost ${s['costPerHour']}/h  LP ${float(lp):.4f}/h  cost/LP {ratio:.3f}  "
          f"disruptions {len(s.get('disruptions') or [])}{upstream}  {'PASS' if ok else 'FAIL'}", flush=True)
    return ok


def _upstream(s: dict, lp: Fraction) -> str:
    """With a karpy gate on: upstream's cost (karpy simulate's baseline run) over the same LP bound."""
    fg = s.get("featureGates")
    if not fg or not lp:
        return ""
    return f"  upstream's decisions ${fg['costPerHourUpstream']}/h cost/LP {float(Fraction(fg['costPerHourUpstream']) / lp):.3f}"


def _peak_nodes(claims: list[dict]) -> int:
    events = []
    for c in claims:
        if c["launchFailed"]:
            continue
        events.append((c["createdAt"], 1))
        if c["deletedAt"]:
            events.append((c["deletedAt"], -1))
    peak = cur = 0
    for _, d in sorted(events, key=lambda e: (e[0], e[1])):
        cur += d
        peak = max(peak, cur)
    return peak


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workload", choices=["diverse", "wide", "all"])
    ap.add_argument("sizes", nargs="*", type=int, help="pods (diverse) or replicas per Deployment (wide)")
    ap.add_argument("--feature-gates", default="", metavar="NAME=true,...",
                    help="karpy feature gates for the Scenario (with a karpy gate on, karpy simulate also runs "
                         "upstream's decisions, and the line shows both costs)")
    ap.add_argument("--budget", default="100%", metavar="NODES",
                    help="the wide NodePool's disruption budget, nodes: (upstream's default is 10%%)")
    args = ap.parse_args(argv)
    BUDGET[0] = args.budget
    for part in filter(None, (x.strip() for x in args.feature_gates.split(","))):
        k, _, v = part.partition("=")
        GATES[k] = v.strip().lower() != "false"
    if not KARPY.exists():
        print(f"{KARPY} not found: install karpy into this virtualenv first", file=sys.stderr)
        return 2
    ok = True
    with tempfile.TemporaryDirectory(prefix="karpy-bench-") as tmp:
        work = Path(tmp)
        plan: list[tuple[str, int]] = []
        if args.workload == "all":
            plan = [("diverse", n) for n in (1000, 5000, 20000, 100000)] + [("wide", r) for r in (34, 100, 267)]
        else:
            plan = [(args.workload, n) for n in (args.sizes or ([1000, 5000, 20000] if args.workload == "diverse" else [34, 100]))]
        for kind, n in plan:
            ok &= (bench_diverse if kind == "diverse" else bench_wide)(n, work)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
