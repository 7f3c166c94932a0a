"""Scheduling benchmark: upstream's makeDiversePods workload against 400 fake instance types.

A port, in our own words, of kubernetes-sigs/karpenter
pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go
(BenchmarkScheduling1 .. BenchmarkScheduling20000):

* one NodePool with no limits and no requirements, offering
  fake_instance_types(400) (upstream: fake.InstanceTypes(400));
* makeDiversePods(N): N//5 pods each of
  1. generic pods (label ``my-label: <a-g>``),
  2. zone topology spread (maxSkew 1, DoNotSchedule, selector ``my-label: <a-g>``
     drawn independently of the pod's own ``my-label``),
  3. the same spread on ``kubernetes.io/hostname``,
  4. required zone pod affinity to itself (label ``my-affininity: <a-g>``,
     upstream's spelling),
  5. required hostname pod anti-affinity on ``app: nginx`` (all these pods
     repel each other),
  then generic pods for the remainder of N/5;
* every pod requests a CPU from {100m, 250m, 500m, 1000m, 1500m} and a memory
  from {100Mi, 256Mi, 512Mi, 1Gi, 2Gi, 4Gi}, drawn from random.Random(42) in
  upstream's draw order (labels, selector, cpu, memory). Go's math/rand stream
  differs, so individual pods differ from upstream's; the mix does not.

For each N the script times the set-up (building and compiling the pods) apart
from the solve, times a fresh solve (a new Scheduler each run; best of
--repeat), measures the peak memory of one more, untimed solve with
tracemalloc, and verifies the placement with the checker in bench/verify.py,
which does not use the engine's scheduling logic. With several sizes it also
prints how the solve time grows against the pod count (linear is 1.00; the
solver indexes open NodeClaims, so a pod's cost should not grow with them),
and ``--profile`` prints where one more solve of the largest size spends its
time (cProfile, by own time; proportions hold on a busy machine where seconds
do not).

Run from the repository root:

    .venv/bin/python bench/scheduling.py [--sizes 1,50,100] [--repeat 3] [--no-mem] [--profile]
"""

from __future__ import annotations

import argparse
import gc
import random
import resource
import sys
import time
import tracemalloc
from dataclasses import dataclass, field

import _util  # noqa: F401  (puts the repository root on sys.path)
from _util import HOSTNAME, MIB, ZONE, launched, pod_manifest

from karpy.cloudprovider.fake import fake_instance_types
from karpy.provisioning.templates import build_template
from karpy.scheduling.pods import compile_pod
from karpy.scheduling.scheduler import Scheduler

import verify

DEFAULT_SIZES = [1, 50, 100, 500, 1000, 2000, 5000, 10000, 20000]
LABEL_VALUES = "abcdefg"
CPUS_M = [100, 250, 500, 1000, 1500]
MEMS_MIB = [100, 256, 512, 1024, 2048, 4096]
NUM_TYPES = 400


@dataclass
class BenchPod:
    """What the generator asked for, kept beside the manifest for the checker."""

    name: str
    kind: str  # generic | zone-spread | host-spread | zone-affinity | host-anti
    labels: dict
    cpu_m: int
    mem_bytes: int
    spread_key: str | None = None
    spread_selector: dict = field(default_factory=dict)
    manifest: dict = field(default_factory=dict, repr=False)


class DiversePods:
    """makeDiversePods, with one random stream shared by every draw (as upstream's global ``r``)."""

    def __init__(self, seed: int = 42):
        self.r = random.Random(seed)
        self.i = 0

    def _value(self) -> str:
        return self.r.choice(LABEL_VALUES)

    def _resources(self) -> tuple[int, int]:
        cpu = self.r.choice(CPUS_M)
        mem = self.r.choice(MEMS_MIB) * MIB
        return cpu, mem

    def _name(self) -> str:
        self.i += 1
        return f"pod-{self.i:05d}"

    def generic(self, n: int) -> list[BenchPod]:
        out = []
        for _ in range(n):
            labels = {"my-label": self._value()}
            cpu, mem = self._resources()
            name = self._name()
            out.append(BenchPod(name, "generic", labels, cpu, mem, manifest=pod_manifest(name, labels, cpu, mem)))
        return out

    def spread(self, n: int, key: str) -> list[BenchPod]:
        out = []
        kind = "zone-spread" if key == ZONE else "host-spread"
        for _ in range(n):
            labels = {"my-label": self._value()}
            selector = {"my-label": self._value()}
            cpu, mem = self._resources()
            name = self._name()
            extra = {"topologySpreadConstraints": [{
                "maxSkew": 1,
                "topologyKey": key,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": dict(selector)},
            }]}
            out.append(BenchPod(name, kind, labels, cpu, mem, key, selector,
                                manifest=pod_manifest(name, labels, cpu, mem, extra)))
        return out

    def affinity(self, n: int, key: str) -> list[BenchPod]:
        out = []
        for _ in range(n):
            labels = {"my-affininity": self._value()}
            cpu, mem = self._resources()
            name = self._name()
            extra = {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": dict(labels)}, "topologyKey": key},
            ]}}}
            out.append(BenchPod(name, "zone-affinity", labels, cpu, mem, manifest=pod_manifest(name, labels, cpu, mem, extra)))
        return out

    def anti_affinity(self, n: int, key: str) -> list[BenchPod]:
        out = []
        labels = {"app": "nginx"}
        for _ in range(n):
            cpu, mem = self._resources()
            name = self._name()
            extra = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": dict(labels)}, "topologyKey": key},
            ]}}}
            out.append(BenchPod(name, "host-anti", dict(labels), cpu, mem, manifest=pod_manifest(name, labels, cpu, mem, extra)))
        return out


def make_diverse_pods(count: int, seed: int = 42) -> list[BenchPod]:
    g = DiversePods(seed)
    q = count // 5
    pods = g.generic(q)
    pods += g.spread(q, ZONE)
    pods += g.spread(q, HOSTNAME)
    pods += g.affinity(q, ZONE)
    pods += g.anti_affinity(q, HOSTNAME)
    pods += g.generic(count - len(pods))
    return pods


NODEPOOL = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "default"},
    "spec": {"template": {"spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.sh", "kind": "FakeNodeClass", "name": "default"}}}},
}


def solve_once(template, infos, pin: bool = False):
    t0 = time.perf_counter()
    results = Scheduler([template], pin_counted=pin).solve(infos)
    return time.perf_counter() - t0, results


def peak_memory_mb(template, infos, pin: bool = False) -> float:
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    results = Scheduler([template], pin_counted=pin).solve(infos)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del results
    return (peak - base) / 1e6


def profile_solve(template, infos, pin: bool = False, top: int = 15) -> None:
    """cProfile one solve; print its top functions by own time, with their share of the solve."""
    import cProfile
    import pstats

    gc.collect()
    prof = cProfile.Profile()
    s = Scheduler([template], pin_counted=pin)
    prof.enable()
    s.solve(infos)
    prof.disable()
    stats = pstats.Stats(prof)
    total = sum(v[2] for v in stats.stats.values()) or 1.0  # own times add up to the whole solve
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    print(f"profile of one solve of {len(infos)} pods (cProfile, own time; the profiler slows Python code down):")
    print(f"{'own %':>6} {'cum %':>6} {'calls':>9}  function")
    for (path, line, name), (_, calls, own, cum, _) in rows:
        where = f"{path.split('karpy/')[-1] if 'karpy/' in path else path}:{line}({name})"
        print(f"{100 * own / total:>6.1f} {100 * cum / total:>6.1f} {calls:>9}  {where}")
    print()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="comma-separated pod counts")
    ap.add_argument("--repeat", type=int, default=1, help="timed solves per size; the best is reported")
    ap.add_argument("--no-mem", action="store_true", help="skip the extra tracemalloc solve")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--zone-pinning", action="store_true",
                    help="karpy's ZonePinning gate on (off: upstream's decisions, the default)")
    ap.add_argument("--profile", action="store_true",
                    help="profile one more solve of the largest size and print the top functions by own time")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    t0 = time.perf_counter()
    instance_types = fake_instance_types(NUM_TYPES)
    template = build_template(NODEPOOL, instance_types, daemon_pods=(), usage={})
    t_tpl = time.perf_counter() - t0
    print(f"karpy scheduling benchmark: makeDiversePods(N), {len(template.instance_types)} fake instance types, "
          f"1 unlimited NodePool (template built in {t_tpl * 1000:.1f} ms)")
    print(f"solve = best of {args.repeat} fresh Scheduler([...]).solve(); setup = build + compile_pod the N pods; "
          f"mem = tracemalloc peak over one extra, untimed solve (Python + numpy allocations)")
    header = f"{'N':>6} {'setup s':>8} {'solve s':>8} {'pods/s':>9} {'nodes':>6} {'cost $/h':>10} {'peak MB':>8}  check"
    print(header)
    print("-" * len(header))
    all_ok = True
    failures_out = []
    notes = []
    timed: list[tuple[int, float]] = []
    for n in sizes:
        t0 = time.perf_counter()
        pods = make_diverse_pods(n, args.seed)
        infos = [compile_pod(p.manifest) for p in pods]
        setup = time.perf_counter() - t0

        best = None
        results = None
        nodes_seen = set()
        for _ in range(max(1, args.repeat)):
            gc.collect()
            dt, res = solve_once(template, infos, args.zone_pinning)
            nodes_seen.add(len(res.new_nodeclaims))
            if best is None or dt < best:
                best = dt
            results = res
        cost = 0.0
        for nc in results.new_nodeclaims:
            pick = launched(nc)
            cost += pick[1].price if pick else float("nan")
        mem = float("nan") if args.no_mem else peak_memory_mb(template, infos, args.zone_pinning)

        info: dict = {}
        problems = verify.check_diverse(pods, results, instance_types, info, final_zones=args.zone_pinning)
        notes.append((n, info))
        if len(nodes_seen) > 1:
            problems.append(f"repeated solves gave different node counts: {sorted(nodes_seen)}")
        ok = not problems
        all_ok &= ok
        timed.append((n, best))
        pps = n / best if best > 0 else float("inf")
        mem_s = "-" if args.no_mem else f"{mem:.1f}"
        print(f"{n:>6} {setup:>8.3f} {best:>8.3f} {pps:>9.0f} {len(results.new_nodeclaims):>6} {cost:>10.2f} {mem_s:>8}  "
              f"{'PASS' if ok else 'FAIL'}", flush=True)
        for p in problems:
            failures_out.append(f"N={n}: {p}")
    print()
    growth = [(a, b) for a, b in zip(timed, timed[1:]) if a[0] > 0 and a[1] > 0]
    if growth:
        print("solve time growth against pod count (1.00: linear; above: a pod costs more as the solve grows):")
        for (n0, t0), (n1, t1) in growth:
            print(f"  {n0:>6} -> {n1:>6}: time x{t1 / t0:.2f} for pods x{n1 / n0:.2f}  ({(t1 / t0) / (n1 / n0):.2f})")
        print()
    if args.profile and sizes:
        profile_solve(template, [compile_pod(p.manifest) for p in make_diverse_pods(max(sizes), args.seed)],
                      args.zone_pinning)
    if args.zone_pinning:
        print("ZonePinning on: zone spread is checked above with every pod counted in the zone its NodeClaim")
        print("launches in (what kube-scheduler will see). Upstream's view counts a pod in a zone only once a")
        print("zone-constrained pod pinned its NodeClaim; spread pods that view would reject:")
    else:
        print("Upstream's decisions (ZonePinning off): a NodeClaim's zone is open until a zone-constrained pod")
        print("pins it, so zone spread is not checked above. Reported: skews kube-scheduler would see with every")
        print("pod in its NodeClaim's final zone (the simulation's kube-scheduler refuses those binds and")
        print("Karpenter launches again), and the skews in upstream's own view:")
    print(f"{'N':>6} {'final-zone violations':>22} {'upstream-view violations':>24}")
    for n, info in notes:
        if info:
            print(f"{n:>6} {info.get('zone_spread_final_violations', 0):>22} "
                  f"{info['zone_spread_late_pin_violations']:>24}")
    for f in failures_out[:200]:
        print("  FAIL", f)
    if len(failures_out) > 200:
        print(f"  ... and {len(failures_out) - 200} more")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"process max RSS at exit (resource.getrusage, whole run incl. tracemalloc runs): {rss:.0f} MB")
    print("ALL PASS" if all_ok else "SOME CHECKS FAILED")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
