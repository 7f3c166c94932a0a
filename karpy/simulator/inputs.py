"""Checks on a simulation's input beyond each document's own validation: the regions its catalogs know,
and how many pods it asks for (shared by ``karpy simulate`` and ``karpy sandbox``)."""

from __future__ import annotations

# The most pods one simulation holds. A pod costs about 25 KiB of memory end to end (100,000 pods peak at
# 2.5 GiB), so 500,000 pods need about 12 GiB: more than a laptop has to spare, and minutes of running.
# Past it karpy refuses at once rather than swapping for an hour.
MAX_PODS = 500_000
WORKLOAD_KINDS = ("Deployment", "ReplicaSet", "StatefulSet")


def check_size(documents) -> list[str]:
    """Refuse inputs that ask for more pods than one simulation holds, naming the field that goes past."""
    from ..errors import FieldError

    wanted: dict[tuple, int] = {}
    total = 0

    def ask(key: tuple, n: int, d, field: str) -> str | None:
        nonlocal total
        before = wanted.get(key, 0)
        if n <= before:
            return None
        wanted[key] = n
        total += n - before
        if total <= MAX_PODS:
            return None
        return str(FieldError(d.file, d.index, d.kind, d.name, field,
                              f"Invalid value: {n}: the input asks for {total} pods in all; one simulation holds at "
                              f"most {MAX_PODS} (about 25 KiB of memory each)"))

    def count(obj: dict, d, prefix: str) -> str | None:
        kind = obj.get("kind")
        meta = obj.get("metadata") or {}
        key = (kind, meta.get("namespace") or "default", meta.get("name") or meta.get("generateName") or id(obj))
        spec = obj.get("spec") or {}
        if kind == "Pod":
            return ask(key, 1, d, prefix + "metadata.name")
        if kind in WORKLOAD_KINDS:
            n = spec.get("replicas", 1)
            return ask(key, n if isinstance(n, int) else 1, d, prefix + "spec.replicas")
        if kind == "Job":
            n = spec.get("parallelism", 1)
            return ask(key, n if isinstance(n, int) else 1, d, prefix + "spec.parallelism")
        return None

    for d in documents:
        if d.kind == "Scenario":
            continue
        problem = count(d.obj, d, "")
        if problem:
            return [problem]
    for d in documents:
        if d.kind != "Scenario":
            continue
        for i, step in enumerate(((d.obj.get("spec") or {}).get("steps")) or ()):
            if not isinstance(step, dict):
                continue
            for j, obj in enumerate(step.get("apply") or ()):
                if isinstance(obj, dict):
                    problem = count(obj, d, f"spec.steps[{i}].apply[{j}].")
                    if problem:
                        return [problem]
            sc = step.get("scale")
            if isinstance(sc, dict) and sc.get("kind") in WORKLOAD_KINDS and isinstance(sc.get("replicas"), int):
                key = (sc["kind"], sc.get("namespace") or "default", sc.get("name"))
                problem = ask(key, sc["replicas"], d, f"spec.steps[{i}].scale.replicas")
                if problem:
                    return [problem]
    return []


def check_regions(documents, region: str | None) -> list[str]:
    """Every provider a NodePool uses must know the region asked for."""
    from ..cloudprovider.catalog import get_provider

    scenario_region = None
    scenario_doc = None
    for d in documents:
        if d.kind == "Scenario":
            scenario_region = ((d.obj.get("spec") or {}).get("region"))
            scenario_doc = d
    wanted = region or scenario_region
    if not wanted:
        return []
    out = []
    seen = set()
    for d in documents:
        if d.kind != "NodePool":
            continue
        ref = (((d.obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
        try:
            provider = get_provider(ref.get("group") or ref.get("kind") or "")
        except ValueError:
            continue
        if provider.name in seen or provider.name == "kwok":
            continue
        seen.add(provider.name)
        if wanted not in provider.regions:
            msg = (f"Unsupported value: \"{wanted}\": the {provider.name} catalog has prices for "
                   + ", ".join(f'"{r}"' for r in provider.regions))
            if region or scenario_doc is None:
                out.append(f"--region: {msg}")
            else:
                from ..errors import FieldError

                d = scenario_doc
                out.append(str(FieldError(d.file, d.index, d.kind, d.name, "spec.region", msg)))
    return out
