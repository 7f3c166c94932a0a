"""Variants of a base configuration: the well-known knobs, patches, and sweep files.

A **variant spec** is a mapping of knob to value, plus optional ``patches``::

    capacityTypes: [spot]                 # karpenter.sh/capacity-type In [spot]
    architectures: [arm64]                # kubernetes.io/arch In [arm64]
    families: [D]                         # the provider's family label (sku-family, instance-family) In [...]
    consolidationPolicy: WhenEmpty
    consolidateAfter: 10m
    budgets: "10%"                        # or a list of budgets, as spec.disruption.budgets
    minValues: 3                          # instance types (or {label: N, ...}); null removes every minValues
    expireAfter: 720h
    featureGates: {SpotToSpotConsolidation: true}   # the Scenario's settings (one is added if there is none)
    patches:
    - target: {kind: NodePool, name: default}       # namespace too, for namespaced kinds
      merge: {spec: {limits: {cpu: "10"}}}          # JSON merge patch; or strategic: {...}; or jsonPatch: [...]

Knobs change every NodePool, or those named by ``nodePools``. A **sweep file** names axes and their values;
the variants are their cross product, or the combinations listed under ``variants``::

    nodePools: [default-demo]             # optional
    axes:
      capacityTypes: [[on-demand], [spot]]
      architectures: [[amd64], [arm64]]
      consolidationPolicy: [WhenEmpty, WhenEmptyOrUnderutilized]
      limits:                             # an axis of patch sets: each value is a named variant spec
      - {name: tight, patches: [...]}
      - {name: loose, patches: [...]}
    variants:                             # optional: only these, in this order
    - {capacityTypes: [spot], architectures: [arm64], consolidationPolicy: WhenEmpty, limits: tight}

Every changed object is validated as ``karpy simulate`` validates its input; an error names the file, the
variant and the field.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from typing import Any

import yaml

from .run import InputError

FAMILY_LABELS = {
    "karpenter.azure.com": "karpenter.azure.com/sku-family",
    "karpenter.k8s.aws": "karpenter.k8s.aws/instance-family",
    "karpenter.kwok.sh": "karpenter.kwok.sh/instance-family",
}
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
KNOBS = ("capacityTypes", "architectures", "families", "consolidationPolicy", "consolidateAfter", "budgets",
         "minValues", "expireAfter", "featureGates")
PATCH_KINDS = ("merge", "strategic", "jsonPatch")


@dataclass
class Variant:
    index: int
    name: str
    values: dict  # axis -> the value as written (a patch-set axis: its name)
    spec: dict  # the variant spec applied to the base
    changed: dict = field(default_factory=dict)  # what it changes in the base: see apply()


def _requirement(pool: dict, key: str, values: list) -> None:
    reqs = pool["spec"]["template"]["spec"].setdefault("requirements", [])
    old = next((r for r in reqs if r.get("key") == key), None)
    new = {"key": key, "operator": "In", "values": [str(v) for v in values]}
    if old is not None and old.get("minValues") is not None:
        new["minValues"] = old["minValues"]
    reqs[:] = [r for r in reqs if r.get("key") != key] + [new]


def _min_values(pool: dict, value: Any) -> None:
    reqs = pool["spec"]["template"]["spec"].setdefault("requirements", [])
    if value is None:
        for r in reqs:
            r.pop("minValues", None)
        return
    wanted = value if isinstance(value, dict) else {INSTANCE_TYPE: value}
    for key, n in wanted.items():
        r = next((r for r in reqs if r.get("key") == key), None)
        if r is None:
            r = {"key": key, "operator": "Exists"}
            reqs.append(r)
        r["minValues"] = n


def _pool_knob(pool: dict, knob: str, value: Any) -> None:
    spec = pool.setdefault("spec", {})
    spec.setdefault("template", {}).setdefault("spec", {})
    disruption = spec.setdefault("disruption", {})
    if knob == "capacityTypes":
        _requirement(pool, "karpenter.sh/capacity-type", _as_list(value))
    elif knob == "architectures":
        _requirement(pool, "kubernetes.io/arch", _as_list(value))
    elif knob == "families":
        group = ((spec["template"]["spec"].get("nodeClassRef") or {}).get("group")) or ""
        if group not in FAMILY_LABELS:
            raise ValueError(f"families: the NodeClass group {group!r} has no known family label")
        _requirement(pool, FAMILY_LABELS[group], _as_list(value))
    elif knob == "consolidationPolicy":
        disruption["consolidationPolicy"] = value
    elif knob == "consolidateAfter":
        disruption["consolidateAfter"] = value
    elif knob == "budgets":
        disruption["budgets"] = [{"nodes": str(value)}] if isinstance(value, (str, int)) else value
    elif knob == "minValues":
        _min_values(pool, value)
    elif knob == "expireAfter":
        spec["template"]["spec"]["expireAfter"] = value


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def apply(base: list[dict], spec: dict, node_pools: list[str] | None = None, label: str = "variant") -> dict[int, dict]:
    """The objects a variant spec changes, validated: {index in ``base``: object}; an index past the end is a
    Scenario added for the variant's settings. Raises InputError naming ``label`` and the field."""
    from ..api.loader import validate_object
    from ..kube import errors as E
    from ..kube.patch import json_patch, merge_patch
    from ..kube.strategic import strategic_merge_patch

    if not isinstance(spec, dict):
        raise InputError([f"{label}: Invalid value: must be a mapping of knobs and patches"])
    changed: dict[int, dict] = {}

    def obj(i: int) -> dict:
        if i not in changed:
            changed[i] = copy.deepcopy(base[i])
        return changed[i]

    unknown = [k for k in spec if k not in KNOBS and k not in ("patches", "name")]
    if unknown:
        raise InputError([f"{label}: Unsupported value: {unknown[0]!r}: knobs are {', '.join(KNOBS)}, "
                          "or patches"])
    pools = [i for i, d in enumerate(base) if d.get("kind") == "NodePool"
             and (node_pools is None or d["metadata"]["name"] in node_pools)]
    for knob, value in spec.items():
        if knob in ("patches", "name"):
            continue
        if knob == "featureGates":
            if not isinstance(value, dict):
                raise InputError([f"{label}.featureGates: Invalid value: must be a map of gate to boolean"])
            i = next((i for i, d in enumerate(base) if d.get("kind") == "Scenario"), None)
            if i is None:
                i = len(base)
                changed[i] = {"apiVersion": "karpy.dev/v1alpha1", "kind": "Scenario", "metadata": {"name": "variant"},
                              "spec": {}}
            settings = obj(i).setdefault("spec", {}).setdefault("settings", {})
            settings["featureGates"] = {**(settings.get("featureGates") or {}), **value}
            continue
        if not pools:
            raise InputError([f"{label}.{knob}: no NodePool to change"
                              + (f" (nodePools: {', '.join(node_pools)})" if node_pools else "")])
        for i in pools:
            try:
                _pool_knob(obj(i), knob, value)
            except (ValueError, TypeError, AttributeError) as e:
                raise InputError([f"{label}.{knob}: Invalid value: {e}"]) from None
    for j, p in enumerate(spec.get("patches") or []):
        where = f"{label}.patches[{j}]"
        if not isinstance(p, dict) or not isinstance(p.get("target"), dict):
            raise InputError([f"{where}.target: Required value: {{kind, name}} of the object to patch"])
        t = p["target"]
        ops = [k for k in PATCH_KINDS if k in p]
        if len(ops) != 1:
            raise InputError([f"{where}: Required value: exactly one of {', '.join(PATCH_KINDS)}"])
        i = next((i for i, d in enumerate(base) if d.get("kind") == t.get("kind")
                  and d["metadata"].get("name") == t.get("name")
                  and (t.get("namespace") is None or d["metadata"].get("namespace", "default") == t["namespace"])),
                 None)
        if i is None:
            raise InputError([f"{where}.target: Not found: {t.get('kind')}/{t.get('name')} is not in the base"])
        try:
            if ops[0] == "merge":
                changed[i] = merge_patch(obj(i), p["merge"])
            elif ops[0] == "strategic":
                changed[i] = strategic_merge_patch(obj(i), p["strategic"], kind=t.get("kind"))
            else:
                changed[i] = json_patch(obj(i), p["jsonPatch"])
        except (E.ApiError, ValueError, TypeError, KeyError) as e:
            raise InputError([f"{where}.{ops[0]}: Invalid value: {e}"]) from None
    out: dict[int, dict] = {}
    for i, o in sorted(changed.items()):
        o = copy.deepcopy(o)
        o.pop("status", None)
        doc, errors = validate_object(o, file=label)
        if errors:
            raise InputError([str(e) for e in errors])
        out[i] = doc.obj
    return out


def documents(base: list[dict], changed: dict[int, dict]) -> list[dict]:
    """The base with a variant's changed objects in place."""
    out = [changed.get(i, d) for i, d in enumerate(base)]
    out.extend(changed[i] for i in sorted(changed) if i >= len(base))
    return out


def read_file(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            return yaml.safe_load(f)
    except OSError as e:
        raise InputError([f"{path}: {e.strerror}"]) from None
    except yaml.YAMLError as e:
        raise InputError([f"{path}: not YAML: {str(e).splitlines()[0]}"]) from None


def _value_name(v: Any) -> str:
    if isinstance(v, dict):
        return str(v.get("name")) if "name" in v else ",".join(f"{k}:{_value_name(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return "+".join(_value_name(x) for x in v)
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def sweep_variants(path: str, base: list[dict]) -> list[Variant]:
    """The variants a sweep file names, each checked against the base (errors name the file and field)."""
    data = read_file(path)
    if not isinstance(data, dict) or not isinstance(data.get("axes"), dict) or not data["axes"]:
        raise InputError([f"{path}: axes: Required value: a mapping of axis to its values"])
    unknown = [k for k in data if k not in ("axes", "variants", "nodePools")]
    if unknown:
        raise InputError([f"{path}: {unknown[0]}: Unsupported value: expected axes, variants, nodePools"])
    node_pools = data.get("nodePools")
    if node_pools is not None and not (isinstance(node_pools, list) and all(isinstance(x, str) for x in node_pools)):
        raise InputError([f"{path}: nodePools: Invalid value: a list of NodePool names"])
    axes: dict[str, list] = {}
    for axis, values in data["axes"].items():
        if not isinstance(values, list) or not values:
            raise InputError([f"{path}: axes.{axis}: Required value: a list of values"])
        if axis not in KNOBS:
            for j, v in enumerate(values):
                if not isinstance(v, dict) or not v.get("name"):
                    raise InputError([f"{path}: axes.{axis}[{j}]: Required value: {axis} is not a knob "
                                      f"({', '.join(KNOBS)}), so each value is a variant spec with a name"])
        axes[str(axis)] = values
    combos: list[dict] = []
    if data.get("variants") is not None:
        if not isinstance(data["variants"], list):
            raise InputError([f"{path}: variants: Invalid value: a list of axis values"])
        for j, v in enumerate(data["variants"]):
            if not isinstance(v, dict) or set(v) - set(axes):
                raise InputError([f"{path}: variants[{j}]: Invalid value: a mapping of axes ({', '.join(axes)})"])
            combo = {}
            for axis, value in v.items():
                if axis in KNOBS:
                    combo[axis] = value
                else:
                    match = [x for x in axes[axis] if x["name"] == value]
                    if not match:
                        raise InputError([f"{path}: variants[{j}].{axis}: Not found: {value!r}"])
                    combo[axis] = match[0]
            combos.append(combo)
    else:
        names = list(axes)
        combos = [dict(zip(names, vs)) for vs in itertools.product(*(axes[a] for a in names))]
    out = []
    for i, combo in enumerate(combos):
        spec: dict = {}
        patches: list = []
        for axis, value in combo.items():
            if axis in KNOBS:
                spec[axis] = value
            else:
                patches.extend(value.get("patches") or [])
                spec.update({k: v for k, v in value.items() if k not in ("name", "patches")})
        if patches:
            spec["patches"] = patches
        values = {a: (v["name"] if a not in KNOBS else v) for a, v in combo.items()}
        name = ",".join(f"{a}={_value_name(v)}" for a, v in values.items())
        out.append(Variant(i, name, values, spec))
    for v in out:  # every variant checked before any runs
        v.changed = apply(base, v.spec, node_pools, f"{path}: {v.name}")
    return out
