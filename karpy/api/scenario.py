"""karpy.dev/v1alpha1 Scenario: settings and a timeline of steps.

```yaml
spec:
  start: "2026-01-01T00:00:00Z"   # default; any RFC 3339 date-time, stored in UTC, whole seconds
  region: westeurope               # optional
  settings: {...}                  # operator settings, as upstream's flags
  steps:                           # each step has exactly one action
  - apply: [ {manifest}, ... ]
  - advance: 10m
  - scale: {kind: Deployment, namespace: ns, name: web, replicas: 2}
  - scale: {kind: HorizontalPodAutoscaler, name: web, replicas: 8}   # what it chooses under load
  - patch: {kind: NodePool, name: default, merge: {spec: {...}}}
  - delete: {kind: Deployment, namespace: ns, name: web}
  - interrupt: {node: NODE_NAME}  |  {selector: {matchLabels: {...}}, count: 1}
  - unavailable: {instanceTypes: [..], zones: [..], capacityType: spot}
  - available: {instanceTypes: [..], zones: [..], capacityType: spot}
  - condition: {node: NODE_NAME, type: Ready, status: "False", reason: KubeletNotReady}
  - condition: {selector: {matchLabels: {...}}, count: 2, type: Ready, status: Unknown}
  - reservations: [{id: cr-1, instanceType: c-2x-amd64-linux, zone: test-zone-a, count: 2}]
  reservations: [...]              # the cloud's capacity reservations at the start (same form)
```

``reservations`` (at the start, and as a step that replaces them all) declare the cloud's capacity
reservations: ``count`` instances of ``instanceType`` in ``zone``, at ``price`` per hour (default: the type's
on-demand price there); IDs are unique (feature gate ReservedCapacity, docs/feature-gates.md).

Manifests inside ``apply`` are validated (and defaulted) exactly like
top-level documents, with their errors reported under
``spec.steps[i].apply[j]``. ``scale``/``patch``/``delete`` get ``namespace:
default`` for namespaced kinds; ``interrupt`` with a selector gets ``count: 1``; ``condition``
with a selector and no ``count`` sets the condition on every matching node.

Settings and their defaults (upstream Karpenter's): ``batchIdleDuration`` 1s,
``batchMaxDuration`` 10s, ``featureGates`` (NodeRepair false, ReservedCapacity
true, SpotToSpotConsolidation false, NodeOverlay false, StaticCapacity false,
CapacityBuffer false; unknown gates are errors), ``minValuesPolicy`` Strict,
``preferencePolicy`` Respect, ``ignoreDRARequests`` true; optional:
``schedulerConfig.podTopologySpread.defaultConstraints``,
``vmMemoryOverheadPercent`` (provider default when absent), ``reservedENIs``
(AWS), ``seed``.
"""

from __future__ import annotations

from typing import Any

from ..cloudprovider import kubelet_cel
from ..disruption import highs
from ..resources import DurationRangeError, parse_duration
from ..timeutil import normalize_rfc3339
from . import autoscaling
from .core import label_selector, topology_spread_constraints
from .meta import object_meta
from .schema import (
    Ctx,
    Node,
    arr,
    as_list,
    boolean,
    check_time_range,
    child,
    forbidden,
    index,
    int32,
    integer,
    invalid,
    mapping,
    not_supported,
    number,
    obj,
    opaque,
    opaque_obj,
    required,
    string,
)
from .unmodelled import SKIP, not_modelled

# The table of kinds (karpy.api.kinds) registers the Scenario kind and hands itself over here, so that a
# Scenario's steps can validate the objects they apply without this module importing it back.
_KINDS_MODULE: Any = None


def bind_kinds(module: Any) -> None:
    global _KINDS_MODULE
    _KINDS_MODULE = module


def _kinds() -> Any:
    return _KINDS_MODULE

DEFAULT_START = "2026-01-01T00:00:00Z"

FEATURE_GATE_DEFAULTS = {
    "NodeRepair": False,
    "ReservedCapacity": True,
    "SpotToSpotConsolidation": False,
    "NodeOverlay": False,
    "StaticCapacity": False,
    "CapacityBuffer": False,
    "NodeClassCEL": False,  # aws provider: CEL expressions in EC2NodeClass kubelet fields
    # karpy's own improvements on upstream's decisions (docs/feature-gates.md), off by default
    "CostRefinement": False,
    "ZonePinning": False,
    "ConsolidationOptimizer": False,
}

ACTIONS = ("apply", "advance", "scale", "patch", "delete", "interrupt", "unavailable", "available", "condition",
           "reservations")
# a HorizontalPodAutoscaler "scaled" is what it would choose under load (karpy.api.autoscaling)
SCALABLE_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "NodePool", autoscaling.KIND)
CAPACITY_TYPES = ("on-demand", "spot", "reserved")


def _duration_check(allow_zero: bool):
    def check(v: str, path: str, ctx: Ctx) -> None:
        try:
            secs = parse_duration(v)
        except DurationRangeError as e:
            ctx.err(path, invalid(v, str(e).split(": ", 1)[-1]))
            return
        except ValueError:
            ctx.err(path, invalid(v, 'must be a duration such as "30s", "10m" or "1h30m"'))
            return
        if secs < 0 or (secs == 0 and not allow_zero):
            ctx.err(path, invalid(v, "must be greater than 0" if not allow_zero else "must not be negative"))

    return check


def _default_feature_gates(gates: dict, ctx: Ctx) -> None:
    for k, v in FEATURE_GATE_DEFAULTS.items():
        gates.setdefault(k, v)


def _check_feature_gates(gates: dict, path: str, ctx: Ctx) -> None:
    for k in gates:
        if k not in FEATURE_GATE_DEFAULTS:
            ctx.err(child(path, k), not_supported(k, FEATURE_GATE_DEFAULTS))
        elif k == highs.GATE and gates[k] is True and highs.missing():
            ctx.err(child(path, k), highs.missing())
        elif k == kubelet_cel.GATE and gates[k] is True and kubelet_cel.missing():
            ctx.err(child(path, k), kubelet_cel.missing())


def _check_default_constraints(lst: list, path: str, ctx: Ctx) -> None:
    for i, c in enumerate(lst):
        if not isinstance(c, dict):
            continue
        p = index(path, i)
        if "labelSelector" in c:
            ctx.err(child(p, "labelSelector"), forbidden("must not be set, as selectors are deduced for each pod"))
        if c.get("matchLabelKeys"):
            ctx.err(child(p, "matchLabelKeys"), forbidden("must not be set, as it has no effect on default constraints"))


def _check_ignore_dra(v: Any, path: str, ctx: Ctx) -> None:
    if v is False:
        ctx.err(path, invalid(v, "karpy does not simulate the allocation of devices to ResourceClaims (upstream's "
                                 "DRA scheduling with IgnoreDRARequests off); true, upstream's default, does not "
                                 "schedule pods that reference a ResourceClaim"))


def _default_constraints() -> Node:
    n = topology_spread_constraints(defaults=True)
    n.checks = n.checks + (_check_default_constraints,)
    return n


SETTINGS = obj(
    {
        "batchIdleDuration": string(default="1s", checks=[_duration_check(False)]),
        "batchMaxDuration": string(default="10s", checks=[_duration_check(False)]),
        "featureGates": mapping(
            boolean(), default={}, defaulter=_default_feature_gates, checks=[_check_feature_gates]
        ),
        "minValuesPolicy": string(default="Strict", enum=("Strict", "BestEffort")),
        "preferencePolicy": string(default="Respect", enum=("Respect", "Ignore")),
        "ignoreDRARequests": boolean(default=True, checks=[_check_ignore_dra]),
        "schedulerConfig": obj(
            {"podTopologySpread": obj({"defaultConstraints": _default_constraints()})},
        ),
        "vmMemoryOverheadPercent": number(minimum=0, maximum=1),
        "reservedENIs": int32(minimum=0),
        "seed": integer(),
    },
    default={},
)


def _target_defaulter(step: dict, ctx: Ctx) -> None:
    is_namespaced = _kinds().is_namespaced

    kind = step.get("kind")
    if isinstance(kind, str) and (is_namespaced(kind) or kind == autoscaling.KIND):
        if step.get("namespace") in (None, ""):
            step["namespace"] = "default"
    elif isinstance(kind, str):
        step.pop("namespace", None)


def _target_checker(kinds: tuple[str, ...] | None):
    def check(step: dict, path: str, ctx: Ctx) -> None:
        ACCEPTED_KINDS, BY_KIND = _kinds().ACCEPTED_KINDS, _kinds().BY_KIND

        kind = step.get("kind")
        if not isinstance(kind, str):
            return
        allowed = kinds or tuple(k for _, k in ACCEPTED_KINDS if k != "Scenario")
        allowed = tuple(dict.fromkeys(allowed))
        if kind not in allowed:
            ctx.err(child(path, "kind"), not_supported(kind, allowed))
            return
        av = step.get("apiVersion")
        versions = autoscaling.API_VERSIONS if kind == autoscaling.KIND else BY_KIND[kind].api_versions
        if isinstance(av, str) and av not in versions:
            ctx.err(child(path, "apiVersion"), not_supported(av, versions) + f" (for kind {kind})")

    return check


def _target(extra: dict[str, Node], kinds: tuple[str, ...] | None, req: tuple[str, ...]) -> Node:
    props = {"apiVersion": string(), "kind": string(), "namespace": string(), "name": string(min_len=1)}
    props.update(extra)
    return obj(props, required=("kind", "name") + req, defaulter=_target_defaulter, checks=[_target_checker(kinds)])


def _check_apply(items: list, path: str, ctx: Ctx) -> None:
    """Each manifest is validated as a top-level one would be. Across steps an object may come
    again (that is an update), but one step may not name the same object twice."""
    k = _kinds()
    BY_KIND, duplicate_object_message, validate_manifest = k.BY_KIND, k.duplicate_object_message, k.validate_manifest

    seen: dict[tuple[str, str | None, str], str] = {}
    for i, item in enumerate(items):
        p = index(path, i)
        if isinstance(item, dict):
            kind = item.get("kind")
            if kind == autoscaling.KIND:
                ctx.err(child(p, "kind"), forbidden("a HorizontalPodAutoscaler is given beside the other manifests; "
                                                    "a Scenario step scales it (docs/inputs.md)"))
                continue
            outcome = not_modelled(item.get("apiVersion"), kind, item, BY_KIND)
            if outcome is not None:  # skipped (the loader drops it from the step), or an error naming it
                if outcome[0] != SKIP:
                    ctx.err(child(p, "kind"), outcome[1])
                continue
        result = validate_manifest(item, prefix=p, seed=f"{path}[{i}]", nested=True)
        ctx.errors.extend(result.errors)
        kind, name = result.kind, result.name
        if kind not in BY_KIND or not isinstance(name, str) or not name:
            continue
        key = (kind, result.namespace if BY_KIND[kind].namespaced else None, name)
        if key in seen:
            ctx.err(
                child(child(p, "metadata"), "name"),
                duplicate_object_message(kind, result.namespace, name, f"{seen[key]} of the same step"),
            )
        else:
            seen[key] = p


def _interrupt_defaulter(step: dict, ctx: Ctx) -> None:
    if "selector" in step and "count" not in step:
        step["count"] = 1


def _check_node_or_selector(step: dict, path: str, ctx: Ctx) -> None:
    has_node, has_sel = "node" in step, "selector" in step
    if has_node == has_sel:
        ctx.err(path, invalid(step, "must specify exactly one of 'node' or 'selector'"))
    if has_node and "count" in step:
        ctx.err(child(path, "count"), forbidden("may only be set with 'selector'"))


def _offerings() -> Node:
    return obj(
        {
            "instanceTypes": arr(string(min_len=1)),
            "zones": arr(string(min_len=1)),
            "capacityType": string(enum=CAPACITY_TYPES),
        }
    )


def _check_reservation_ids(items: list, path: str, ctx: Ctx) -> None:
    seen: set[str] = set()
    for i, r in enumerate(items):
        rid = r.get("id") if isinstance(r, dict) else None
        if isinstance(rid, str):
            if rid in seen:
                ctx.err(child(index(path, i), "id"), invalid(rid, "duplicate reservation ID"))
            seen.add(rid)


def _reservations() -> Node:
    """Capacity reservations: ``count`` instances of one instance type in one zone (ReservedCapacity)."""
    return arr(
        obj(
            {"id": string(min_len=1), "instanceType": string(min_len=1), "zone": string(min_len=1),
             "count": int32(minimum=0), "price": number(minimum=0)},
            required=("id", "instanceType", "zone", "count"),
        ),
        checks=[_check_reservation_ids],
    )


def validate_reservations(value: Any) -> list[tuple[str, str]]:
    """Validate a list of capacity reservations in the Scenario's form; the (field, message) errors."""
    from .schema import walk

    ctx = Ctx()
    walk(value, _reservations(), "reservations", ctx)
    return ctx.errors


def _check_step(step: dict, path: str, ctx: Ctx) -> None:
    present = [a for a in ACTIONS if a in step]
    if not present:
        ctx.err(path, required("each step needs exactly one of: " + ", ".join(ACTIONS)))
    elif len(present) > 1:
        ctx.err(path, forbidden(f"each step must have exactly one action, found {len(present)}: {', '.join(present)}"))


STEP = obj(
    {
        "apply": arr(opaque(), min_items=1, checks=[_check_apply]),
        "advance": string(checks=[_duration_check(False)]),
        "scale": _target({"replicas": int32(minimum=0)}, SCALABLE_KINDS, ("replicas",)),
        "patch": _target({"merge": opaque_obj()}, None, ("merge",)),
        "delete": _target({}, None, ()),
        "interrupt": obj(
            {"node": string(min_len=1), "selector": label_selector(), "count": int32(minimum=1)},
            defaulter=_interrupt_defaulter,
            checks=[_check_node_or_selector],
        ),
        "unavailable": _offerings(),
        "available": _offerings(),
        # a node condition its kubelet or an agent reports from now on (node repair, feature gate NodeRepair)
        "condition": obj(
            {"node": string(min_len=1), "selector": label_selector(), "count": int32(minimum=1),
             "type": string(min_len=1), "status": string(enum=("True", "False", "Unknown")),
             "reason": string(), "message": string()},
            required=("type", "status"),
            checks=[_check_node_or_selector],
        ),
        # replaces the cloud's capacity reservations (feature gate ReservedCapacity)
        "reservations": _reservations(),
    },
    checks=[_check_step],
)


def _normalize_start(spec: dict, ctx: Ctx) -> None:
    """``spec.start`` as the API server stores a metav1.Time: RFC 3339 in UTC, whole seconds.

    Every RFC 3339 form is accepted (fractional seconds, ``t``/``z``, numeric
    offsets); the simulated clock starts at the whole second at or before it,
    which is all the Output shows (times there have whole seconds).
    """
    start = spec.get("start")
    if isinstance(start, str):
        try:
            spec["start"] = normalize_rfc3339(start)
        except ValueError:
            pass  # reported by the field's checks


def _check_region(v: str, path: str, ctx: Ctx) -> None:
    if not v.strip():
        ctx.err(path, required())


SCENARIO = obj(
    {
        "apiVersion": string(),
        "kind": string(),
        "metadata": object_meta(),
        "spec": obj(
            {
                "start": string(default=DEFAULT_START, fmt="date-time", checks=[check_time_range]),
                "region": string(checks=[_check_region]),
                "settings": SETTINGS,
                "steps": arr(STEP, default=[]),
                "reservations": _reservations(),
            },
            default={},
            defaulter=_normalize_start,
        ),
    }
)


def steps(doc_obj: dict) -> list[tuple[str, Any]]:
    """The (action, argument) pairs of a validated Scenario, in order."""
    out = []
    for step in as_list((doc_obj.get("spec") or {}).get("steps")):
        for a in ACTIONS:
            if isinstance(step, dict) and a in step:
                out.append((a, step[a]))
                break
    return out


def feature_gates(doc_obj: dict | None) -> dict[str, bool]:
    """The effective feature gates (defaults when there is no Scenario)."""
    gates = dict(FEATURE_GATE_DEFAULTS)
    if doc_obj:
        gates.update(((doc_obj.get("spec") or {}).get("settings") or {}).get("featureGates") or {})
    return gates


__all__ = ["SCENARIO", "SETTINGS", "FEATURE_GATE_DEFAULTS", "ACTIONS", "steps", "feature_gates"]
