"""Checks on a simulation's input beyond each document's own validation: the regions its catalogs know,
and how many pods it asks for (shared by ``karpy simulate`` and ``karpy sandbox``)."""

from __future__ import annotations

# The most pods one simulation holds. A pod costs about 25 KiB of memory end to end (100,000 pods peak at
# 2.5 GiB), so 500,000 pods need about 12 GiB: more than a laptop has to spare, and minutes of running.
# Past it karpy refuses at once rather than swapping for an hour.
MAX_PODS = 500_000
WORKLOAD_KINDS = ("Deployment", "ReplicaSet", "StatefulSet")
REPLACING_KINDS = ("Deployment",)  # a new pod template replaces every pod (a new ReplicaSet)


def check_size(documents) -> list[str]:
    """Refuse inputs that create more pods than one simulation holds, naming the field that goes past.

    Counts every pod the input creates over the whole run: each workload's replicas (a Job's
    ``parallelism``, or its ``completions`` when its pods finish by ``karpy.dev/run-for``), and every
    pod a Scenario step adds: a scale-up adds its increase, a workload applied again with another pod
    template (or after a ``delete``) adds all its replicas. Scaling down and up again creates pods twice."""
    from ..errors import FieldError

    live: dict[tuple, tuple[int, str]] = {}  # workload -> (replicas, its pod template as text)
    total = 0

    def create(key: tuple, n: int, template: str | None, d, field: str) -> str | None:
        nonlocal total
        before, old_template = live.get(key, (0, None))
        if template is None:
            template = old_template or ""
        replaced = key[0] in REPLACING_KINDS and old_template is not None and template != old_template
        added = n if replaced else max(0, n - before)
        live[key] = (n, template)
        if added == 0:
            return None
        total += added
        if total <= MAX_PODS:
            return None
        return str(FieldError(d.file, d.index, d.kind, d.name, field,
                              f"Invalid value: {n}: the input creates {total} pods in all (every workload's "
                              f"replicas and every pod the Scenario's steps add); one simulation holds at most "
                              f"{MAX_PODS} (about 25 KiB of memory each)"))

    def count(obj: dict, d, prefix: str) -> str | None:
        kind = obj.get("kind")
        meta = obj.get("metadata") or {}
        key = (kind, meta.get("namespace") or "default", meta.get("name") or meta.get("generateName") or id(obj))
        spec = obj.get("spec") or {}
        template = _text(spec.get("template"))
        if kind == "Pod":  # a Pod applied again is deleted and created again
            return create(key, live.get(key, (0, ""))[0] + 1, None, d, prefix + "metadata.name")
        if kind in WORKLOAD_KINDS:
            return create(key, _int(spec.get("replicas"), 1), template, d, prefix + "spec.replicas")
        if kind == "Job":
            n, field = _int(spec.get("parallelism"), 1), "spec.parallelism"
            tmeta = (spec.get("template") or {}).get("metadata") or {}
            completions = spec.get("completions")
            if isinstance(completions, int) and not isinstance(completions, bool):
                # pods that finish (karpy.dev/run-for) are followed by new ones until the Job completes
                if completions < n or "karpy.dev/run-for" in (tmeta.get("annotations") or {}):
                    n, field = completions, "spec.completions"
            return create(key, n, template, d, prefix + field)
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
            problem = _count_step(i, step, d, count, create, live)
            if problem:
                return [problem]
    return []


def _count_step(i: int, step, d, count, create, live: dict) -> str | None:
    if not isinstance(step, dict):
        return None
    for j, obj in enumerate(step.get("apply") or ()):
        if isinstance(obj, dict):
            problem = count(obj, d, f"spec.steps[{i}].apply[{j}].")
            if problem:
                return problem
    sc = step.get("scale")
    if isinstance(sc, dict) and sc.get("kind") in WORKLOAD_KINDS and isinstance(sc.get("replicas"), int):
        key = (sc["kind"], sc.get("namespace") or "default", sc.get("name"))
        if key in live:  # scaling a workload that does not exist does nothing
            return create(key, sc["replicas"], None, d, f"spec.steps[{i}].scale.replicas")
    p = step.get("patch")
    if isinstance(p, dict) and p.get("kind") in WORKLOAD_KINDS:
        key = (p["kind"], p.get("namespace") or "default", p.get("name"))
        spec = (p.get("merge") or {}).get("spec")
        if key in live and isinstance(spec, dict):
            n = _int(spec.get("replicas"), live[key][0])
            template = None if "template" not in spec else _text(spec["template"]) + "|patched"
            return create(key, n, template, d, f"spec.steps[{i}].patch.merge.spec")
    gone = step.get("delete")
    if isinstance(gone, dict):
        live.pop((gone.get("kind"), gone.get("namespace") or "default", gone.get("name")), None)
    return None


def _int(v, default: int) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _text(v) -> str:
    import json

    return json.dumps(v, sort_keys=True, default=str)


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
