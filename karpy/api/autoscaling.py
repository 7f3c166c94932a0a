"""HorizontalPodAutoscalers (``autoscaling/v2`` and ``autoscaling/v1``) in ``karpy simulate``'s input.

karpy has no metrics, so an HPA acts as the Kubernetes HPA controller does before it reads any:

* a target at 0 replicas is left alone (the controller's "scaling is disabled");
* a target below ``minReplicas`` is raised to it, one above ``maxReplicas`` is lowered to it;
* a Scenario step ``scale: {kind: HorizontalPodAutoscaler, name: web, replicas: 12}`` says what the
  HPA would choose under load: its target is set to 12, within ``[minReplicas, maxReplicas]``, at once
  (``behavior`` rate limits and stabilization windows are not simulated);
* while an HPA holds a load recommendation, a Scenario ``scale``, ``apply`` or ``patch`` of its target
  lands on the recommendation (the HPA would put it back within its 15 s sync period).

The HPA is applied when the input is read (:func:`apply_autoscalers`): the target workloads' replicas
and the Scenario's steps are rewritten, and the simulation sees only workloads and ``scale`` steps.
"""

from __future__ import annotations

from typing import Any

from ..errors import FieldError
from .meta import object_meta
from .schema import Ctx, arr, child, int32, invalid, obj, opaque, opaque_obj, required, string, walk

KIND = "HorizontalPodAutoscaler"
API_VERSIONS = ("autoscaling/v2", "autoscaling/v1")
TARGET_KINDS = ("Deployment", "StatefulSet", "ReplicaSet")


def _check_spec(spec: dict, path: str, ctx: Ctx) -> None:
    lo = spec.get("minReplicas")
    hi = spec.get("maxReplicas")
    if "maxReplicas" not in spec:
        ctx.err(child(path, "maxReplicas"), required())
    elif isinstance(hi, int) and not isinstance(hi, bool):
        if hi < 1:
            ctx.err(child(path, "maxReplicas"), invalid(hi, "must be greater than 0"))
        elif isinstance(lo, int) and not isinstance(lo, bool) and hi < lo:
            ctx.err(child(path, "maxReplicas"), invalid(hi, "must be greater than or equal to `minReplicas`"))
    if isinstance(lo, int) and not isinstance(lo, bool) and lo < 1:
        ctx.err(child(path, "minReplicas"), invalid(lo, "must be greater than or equal to 1"))


def _check_ref(ref: dict, path: str, ctx: Ctx) -> None:
    for f in ("kind", "name"):
        v = ref.get(f)
        if v in (None, ""):
            ctx.err(child(path, f), required())
        elif isinstance(v, str) and (v in (".", "..") or "/" in v or "%" in v):
            ctx.err(child(path, f), invalid(v, "may not be '.' or '..' and may not contain '/' or '%'"))


def _schema(extra: dict) -> Any:
    return obj(
        {
            "apiVersion": string(),
            "kind": string(),
            "metadata": object_meta(),
            "spec": obj(
                {
                    "scaleTargetRef": obj({"apiVersion": string(), "kind": string(), "name": string()},
                                          checks=[_check_ref]),
                    "minReplicas": int32(default=1),
                    "maxReplicas": int32(),
                    **extra,
                },
                required=("scaleTargetRef",),
                checks=[_check_spec],
            ),
            "status": opaque(),
        },
        required=("spec",),
    )


SCHEMAS = {
    "autoscaling/v2": _schema({"metrics": arr(opaque_obj()), "behavior": opaque_obj()}),
    "autoscaling/v1": _schema({"targetCPUUtilizationPercentage": int32(minimum=1)}),
}


def validate(data: dict) -> list[tuple[str, str]]:
    """Validate (and default) one HPA manifest in place; the (field, message) errors."""
    ctx = Ctx()
    meta = data.get("metadata")
    if meta is None:
        data["metadata"] = {}
    elif isinstance(meta, dict) and meta.get("namespace") in (None, ""):
        meta["namespace"] = "default"
    walk(data, SCHEMAS[data["apiVersion"]], "", ctx)
    return ctx.errors


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


class _Hpa:
    def __init__(self, doc: Any):
        spec = doc.obj.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        self.doc = doc
        self.lo = _int(spec.get("minReplicas")) or 1
        self.hi = max(_int(spec.get("maxReplicas")) or self.lo, self.lo)
        self.target = (ref.get("kind"), doc.namespace or "default", ref.get("name"))
        self.api_version = ref.get("apiVersion")
        self.load: int | None = None  # what the Scenario says the HPA chooses under load

    @property
    def label(self) -> str:
        return f"{KIND} {self.doc.namespace}/{self.doc.name}"

    def replicas(self, asked: int) -> int:
        """What the target ends up with when something sets it to ``asked`` replicas."""
        if asked == 0:
            return 0  # the HPA controller does not scale a target at 0 ("scaling is disabled")
        return min(max(self.load if self.load is not None else asked, self.lo), self.hi)


def _workload_key(o: Any) -> tuple | None:
    if not isinstance(o, dict) or o.get("kind") not in TARGET_KINDS:
        return None
    meta = o.get("metadata") or {}
    return (o["kind"], meta.get("namespace") or "default", meta.get("name"))


def apply_autoscalers(documents: list, autoscalers: list, errors: list[FieldError], notes: list[str]) -> None:
    """Apply every HPA to its target, in the documents and along the Scenario's steps (in place)."""
    hpas: dict[tuple, _Hpa] = {}
    by_target: dict[tuple, _Hpa] = {}
    for d in autoscalers:
        h = _Hpa(d)
        if h.target[0] not in TARGET_KINDS or h.api_version not in (None, "", "apps/v1"):
            notes.append(f"{h.label}: its target {h.target[0]}/{h.target[2]} is not a workload karpy simulates: "
                         "it has no effect")
            continue
        other = by_target.get(h.target)
        if other is not None:
            errors.append(FieldError(d.file, d.index, d.kind, d.name, "spec.scaleTargetRef",
                                     f"Forbidden: {other.label} already scales {h.target[0]} {h.target[1]}/"
                                     f"{h.target[2]}; with two, the HPA controller scales it with neither"))
            continue
        by_target[h.target] = h
        hpas[(d.namespace, d.name)] = h
    present: dict[tuple, int] = {}  # target -> its replicas, for the targets that exist
    for d in documents:
        key = _workload_key(d.obj)
        if key is None:
            continue
        spec = d.obj.setdefault("spec", {})
        asked = _int(spec.get("replicas"))
        asked = 1 if asked is None else asked
        h = by_target.get(key)
        if h is not None:
            got = h.replicas(asked)
            if got != asked:
                spec["replicas"] = got
                notes.append(f"{h.label} sets {key[0]} {key[1]}/{key[2]} to {got} replicas (from {asked}; "
                             f"minReplicas {h.lo}, maxReplicas {h.hi})")
            asked = got
        present[key] = asked
    scenario = next((d for d in documents if d.kind == "Scenario"), None)
    if scenario is not None:
        _rewrite_steps(scenario, hpas, by_target, present, errors, notes)


def _rewrite_steps(scenario: Any, hpas: dict, by_target: dict, present: dict, errors: list, notes: list) -> None:
    spec = scenario.obj.get("spec") or {}
    steps = spec.get("steps") or []
    out = []
    for i, step in enumerate(steps):
        keep = _rewrite_step(i, step, hpas, by_target, present, scenario, errors, notes)
        if keep is not None:
            out.append(keep)
    spec["steps"] = out


def _rewrite_step(i: int, step: Any, hpas: dict, by_target: dict, present: dict, scenario: Any,
                  errors: list, notes: list) -> Any:
    if not isinstance(step, dict):
        return step
    where = f"Scenario step {i}"
    sc = step.get("scale")
    if isinstance(sc, dict) and sc.get("kind") == KIND:
        h = hpas.get((sc.get("namespace") or "default", sc.get("name")))
        if h is None:
            errors.append(FieldError(scenario.file, scenario.index, scenario.kind, scenario.name,
                                     f"spec.steps[{i}].scale.name",
                                     f"Not found: no {KIND} {sc.get('namespace') or 'default'}/{sc.get('name')} "
                                     "that scales a Deployment, StatefulSet or ReplicaSet in the input"))
            return None
        h.load = _int(sc.get("replicas")) or 0
        cur = present.get(h.target)
        if not cur:  # gone, or at 0: the HPA does not scale it
            notes.append(f"{where}: {h.label} under load: its {h.target[0]} {h.target[1]}/{h.target[2]} "
                         f"{'is at 0 replicas' if cur == 0 else 'does not exist then'}: nothing happens")
            return None
        got = h.replicas(cur)
        present[h.target] = got
        kind, ns, name = h.target
        return {"scale": {"kind": kind, "namespace": ns, "name": name, "replicas": got}}
    if isinstance(sc, dict) and sc.get("kind") in TARGET_KINDS:
        key = (sc.get("kind"), sc.get("namespace") or "default", sc.get("name"))
        _retarget(key, sc, by_target, present)
    for o in step.get("apply") or () if isinstance(step.get("apply"), list) else ():
        key = _workload_key(o)
        if key is not None:
            _retarget(key, o.setdefault("spec", {}), by_target, present)
    p = step.get("patch")
    if isinstance(p, dict) and p.get("kind") in TARGET_KINDS:
        key = (p.get("kind"), p.get("namespace") or "default", p.get("name"))
        merge_spec = (p.get("merge") or {}).get("spec")
        if key in present and isinstance(merge_spec, dict) and _int(merge_spec.get("replicas")) is not None:
            _retarget(key, merge_spec, by_target, present)
    d = step.get("delete")
    if isinstance(d, dict) and d.get("kind") in TARGET_KINDS:
        present.pop((d.get("kind"), d.get("namespace") or "default", d.get("name")), None)
    return step


def _retarget(key: tuple, holder: dict, by_target: dict, present: dict) -> None:
    """``holder["replicas"]`` (1 when unset) sets workload ``key``: what it ends up with under its HPA."""
    asked = _int(holder.get("replicas", 1))
    if asked is None:
        return
    h = by_target.get(key)
    got = h.replicas(asked) if h is not None else asked
    if got != asked:
        holder["replicas"] = got
    present[key] = got
