"""Small helpers shared by the benchmark scripts (not part of karpy).

Quantities here are the benchmark's own: each workload generator records the
CPU (millicores) and memory (bytes) it asked for, so the checks never need the
engine's quantity parser.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    # after the trees PYTHONPATH names, so that bench/compare_commits.py's base tree (given that way) is the
    # karpy a benchmark imports, and before everything else
    _named = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path.insert(max((sys.path.index(p) + 1 for p in _named if p in sys.path), default=0), ROOT)

MIB = 2**20
GIB = 2**30

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"


def load_script(name: str, module: str):
    """A script of scripts/ (no .py suffix, e.g. ``differential``) imported as the module ``module``."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader(module, os.path.join(ROOT, "scripts", name))
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader(module, loader))
    loader.exec_module(mod)
    return mod


def pod_manifest(name: str, labels: dict, cpu_m: int, mem_bytes: int, extra_spec: dict | None = None,
                 namespace: str = "default") -> dict:
    """A plain Pod object with one container requesting ``cpu_m`` millicores and ``mem_bytes``."""
    mem = f"{mem_bytes // MIB}Mi" if mem_bytes % MIB == 0 else str(mem_bytes)
    spec = {
        "containers": [{
            "name": "app",
            "image": "registry.k8s.io/pause:3.9",
            "resources": {"requests": {"cpu": f"{cpu_m}m", "memory": mem}},
        }],
    }
    if extra_spec:
        spec.update(extra_spec)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": spec,
    }


def single_value(requirements, key: str) -> str | None:
    """The one value a NodeClaim's requirements allow for ``key``, if exactly one (an ``In`` of one value)."""
    r = requirements.get(key)
    if r is None or r.complement:
        return None
    vals = list(r.values)
    return vals[0] if len(vals) == 1 else None


def launched(nodeclaim):
    """(instance type, offering) the provider would launch first for this NodeClaim, or None."""
    from karpy.provisioning.launch import launch_candidates

    cands = launch_candidates(nodeclaim.requirements, nodeclaim.instance_types)
    if not cands:
        return None
    return cands[0].instance_type, cands[0].offering


def nodeclaim_zone(nodeclaim) -> str | None:
    """The zone a NodeClaim lands in: its requirements' zone when pinned, else the launched offering's."""
    z = single_value(nodeclaim.requirements, ZONE)
    if z is not None:
        return z
    pick = launched(nodeclaim)
    return pick[1].zone if pick else None


def allocatable(it) -> dict:
    """capacity - overhead, computed here rather than through InstanceType.allocatable."""
    out = dict(it.capacity)
    for k, v in it.overhead.items():
        out[k] = out.get(k, 0) - v
    return out
