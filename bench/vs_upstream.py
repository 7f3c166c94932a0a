"""karpy beside upstream Karpenter on the same real control plane shape, the same catalog, the same workload.

For each workload, one fresh local control plane (scripts/local-cluster: kube-apiserver, etcd, kube-scheduler,
kube-controller-manager, kwok) is driven by upstream Karpenter v1.14.1's kwok build, then another by
`karpy controller --cloud-provider kwok` (one after the other, so neither slows the other down; both read
karpy's KWOK catalog). The workloads:

* ``diverse N``: bench/scheduling.py's makeDiversePods(N) mix as bare pods (zone and hostname spread, zone
  affinity, hostname anti-affinity), created through the API in 8 parallel connections;
* ``wide R``: upstream's wide-shapes fleet, 30 Deployments of R replicas with zone spread (some with hostname
  spread or anti-affinity), then every Deployment scaled to R/2 and the fleet consolidated
  (WhenEmptyOrUnderutilized, consolidateAfter 30s).

Reported per controller: seconds from the last pod created to every pod bound (by the real kube-scheduler, on
nodes kwok runs), NodeClaims created, the cost per hour at the end (the catalog's prices), for `wide` the
seconds from the scale-down until the fleet settles, and the controller's CPU seconds and peak RSS; then karpy's
figures as ratios of upstream's (VS_UPSTREAM_ONLY=karpy runs one controller only). Run from the repository root:

    .venv/bin/python bench/vs_upstream.py diverse 1000 diverse 5000 wide 34

Timings are reported, never asserted.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _util import load_script  # (puts the repository root on sys.path)
import yaml
from e2e import KWOK_NODECLASS, wide_documents
from scheduling import make_diverse_pods



diff = load_script("differential", "karpy_differential")

DIVERSE_NODEPOOL = {
    "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
    "spec": {"template": {"spec": {
        "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
        "requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                         {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}},
        "disruption": {"consolidateAfter": "Never"}},
}


class Client:
    """JSON over keep-alive HTTPS connections, one per thread, with the cluster's admin certificate."""

    def __init__(self, player):
        host, port = player.server.split("//", 1)[1].rsplit(":", 1)
        self.host, self.port, self.ctx = host, int(port), player.ctx
        self.local = threading.local()

    def request(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(5):
            c = getattr(self.local, "conn", None)
            if c is None:
                c = self.local.conn = http.client.HTTPSConnection(self.host, self.port, timeout=120, context=self.ctx)
            try:
                c.request(method, path, body=data, headers={"Content-Type": "application/json"})
                r = c.getresponse()
                out = r.read()
            except (OSError, http.client.HTTPException):
                self.local.conn = None
                time.sleep(0.2 * (attempt + 1))
                continue
            if r.status == 429 or r.status >= 500:
                time.sleep(0.2 * (attempt + 1))
                continue
            if r.status >= 300:
                raise RuntimeError(f"{method} {path}: {r.status} {out[:300]!r}")
            return json.loads(out) if out else {}
        raise RuntimeError(f"{method} {path}: gave up")


def _claims_seen(api: Client, seen: set[str]) -> list[dict]:
    items = api.request("GET", "/apis/karpenter.sh/v1/nodeclaims")["items"]
    seen.update(c["metadata"]["name"] for c in items)
    return items


def _cost(items: list[dict], price: dict) -> float:
    total = 0.0
    for c in items:
        if c["metadata"].get("deletionTimestamp"):
            continue
        lab = c["metadata"].get("labels") or {}
        total += price.get((lab.get("node.kubernetes.io/instance-type"), lab.get("karpenter.sh/capacity-type"),
                            lab.get("topology.kubernetes.io/zone")), 0.0)
    return total


def _bound(api: Client) -> int:
    pods = api.request("GET", "/api/v1/namespaces/default/pods")["items"]
    return sum(1 for p in pods if (p.get("spec") or {}).get("nodeName") and not p["metadata"].get("deletionTimestamp"))


def run(flavour: str, workload: str, n: int, work: Path, price: dict) -> dict:
    player = diff.Player(flavour, work / f"{workload}-{n}-{flavour}")
    player.dir.mkdir(parents=True, exist_ok=True)
    out: dict = {"controller": flavour}
    try:
        player.up()
        api = Client(player)
        seen: set[str] = set()
        time.sleep(3.0)  # the controller's caches sync
        if workload == "diverse":
            player.apply([KWOK_NODECLASS, DIVERSE_NODEPOOL])
            pods = [p.manifest for p in make_diverse_pods(n)]
            for p in pods:
                p.setdefault("metadata", {})["namespace"] = "default"
            expected = n
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda p: api.request("POST", "/api/v1/namespaces/default/pods", p), pods))
            steps = []
        else:
            docs = wide_documents(n)
            scenario = docs.pop()
            steps = [s for s in scenario["spec"]["steps"] if "scale" in s]
            player.apply(docs)
            expected = 30 * n
        t_created = time.monotonic()
        t_bound = None
        while time.monotonic() - t_created < 900:
            _claims_seen(api, seen)
            if _bound(api) >= expected:
                t_bound = time.monotonic()
                break
            time.sleep(1.0)
        out["bound_s"] = round(t_bound - t_created, 1) if t_bound else None
        out["bound"] = _bound(api)
        if steps:  # scale every deployment to half, then let consolidation settle
            for st in steps:
                player.step(st)
            t_scaled = time.monotonic()
            snap = player.settle(diff.QUIET_DISRUPTION)
            out["consolidated_s"] = round(time.monotonic() - t_scaled - (diff.QUIET_DISRUPTION if snap["settled"]
                                                                          else 0), 1)
            out["settled"] = snap["settled"]
        items = _claims_seen(api, seen)
        out["nodeclaims_created"] = len(seen)
        out["nodeclaims_end"] = len([c for c in items if not c["metadata"].get("deletionTimestamp")])
        out["cost_per_hour"] = round(_cost(items, price), 4)
    finally:
        out.update(player.down())
    return out


FLAVOURS = tuple(os.environ.get("VS_UPSTREAM_ONLY", "upstream,karpy").split(","))  # e.g. VS_UPSTREAM_ONLY=karpy


def main(argv: list[str]) -> int:
    if not argv or len(argv) % 2:
        print(__doc__)
        return 2
    jobs = [(argv[i], int(argv[i + 1])) for i in range(0, len(argv), 2)]
    price = diff.prices()
    work = Path(tempfile.mkdtemp(prefix="karpy-vs-upstream-"))
    rows = []
    for workload, n in jobs:
        pair = {}
        for flavour in FLAVOURS:
            print(f"{workload} {n}: {flavour} ...", file=sys.stderr, flush=True)
            pair[flavour] = run(flavour, workload, n, work, price)
            print(f"  {json.dumps(pair[flavour])}", file=sys.stderr, flush=True)
        u, k = pair.get("upstream", {}), pair.get("karpy", {})
        ratios = {}
        for key in ("bound_s", "consolidated_s", "nodeclaims_created", "cost_per_hour", "cpu_seconds", "peak_rss_mib"):
            if u.get(key) and k.get(key) is not None:
                ratios[key] = round(k[key] / u[key], 3)
        rows.append({"workload": f"{workload} {n}", "upstream": u, "karpy": k, "karpy/upstream": ratios})
    print(yaml.safe_dump(rows, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
