"""Strategic merge patch, as ``kubectl apply`` and ``kubectl patch`` send it for built-in kinds.

Maps merge recursively (``null`` deletes); lists whose Kubernetes type declares a
merge key (containers by ``name``, ports by ``containerPort``, conditions by
``type``, ...) merge element by element; lists of strings that declare the
merge strategy (finalizers) are unioned; every other list is replaced. The
directives ``$patch: replace|delete|merge``, ``$deleteFromPrimitiveList/<f>``,
``$setElementOrder/<f>`` and ``$retainKeys`` are understood. Custom resources do
not support strategic merge (Kubernetes answers 415), so a patch of one is
applied as a JSON merge patch.
"""

from __future__ import annotations

import copy
from typing import Any

from .registry import CRD_KINDS

# field name -> merge key, for the fields of built-in types that merge by key
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "conditions": "type",
    "ownerReferences": "uid",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "schedulingGates": "name",
    "secrets": "name",
    "subsets": "",
}
# the ports of a container merge by containerPort, a Service's by port
PORT_KEYS = {"containerPort", "port"}
PRIMITIVE_MERGE = {"finalizers"}


def _merge_key(field: str, items: list) -> str | None:
    if field == "ports":
        for it in items:
            if isinstance(it, dict):
                for k in ("containerPort", "port"):
                    if k in it:
                        return k
        return None
    return MERGE_KEYS.get(field) or None


def strategic_merge_patch(target: Any, patch: Any, kind: str | None = None) -> Any:
    if kind in CRD_KINDS:
        from .patch import merge_patch

        return merge_patch(target, patch)
    return _merge_map(target if isinstance(target, dict) else {}, patch)


def _merge_map(target: dict, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    out = dict(target)
    retain = patch.get("$retainKeys")
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys") or k.startswith("$setElementOrder/"):
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            field = k.split("/", 1)[1]
            if isinstance(out.get(field), list):
                out[field] = [x for x in out[field] if x not in (v or [])]
            continue
        if v is None:
            out.pop(k, None)
            continue
        cur = out.get(k)
        if isinstance(v, dict):
            merged = _merge_map(cur if isinstance(cur, dict) else {}, v)
            if merged is None:
                out.pop(k, None)
            else:
                out[k] = merged
        elif isinstance(v, list):
            out[k] = _merge_list(k, cur if isinstance(cur, list) else [], v)
        else:
            out[k] = copy.deepcopy(v)
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    for k, v in patch.items():
        if k.startswith("$setElementOrder/"):
            field = k.split("/", 1)[1]
            out[field] = _order(field, out.get(field), v)
    return out


def _merge_list(field: str, cur: list, patch: list) -> list:
    if field in PRIMITIVE_MERGE and all(not isinstance(x, (dict, list)) for x in patch):
        out = list(cur)
        for x in patch:
            if x not in out:
                out.append(x)
        return out
    key = _merge_key(field, patch) or _merge_key(field, cur)
    if not key or not all(isinstance(x, dict) for x in patch):
        if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
            return [copy.deepcopy({k: v for k, v in x.items() if k != "$patch"}) for x in patch if x.get("$patch") != "replace"]
        return copy.deepcopy(patch)
    if any(x.get("$patch") == "replace" for x in patch):
        return [copy.deepcopy(x) for x in patch if x.get("$patch") != "replace"]
    out = list(cur)
    index = {x.get(key): i for i, x in enumerate(out) if isinstance(x, dict)}
    for item in patch:
        k = item.get(key)
        if item.get("$patch") == "delete":
            if k in index:
                out[index[k]] = None
            continue
        if k in index and out[index[k]] is not None:
            out[index[k]] = _merge_map(out[index[k]], item)
        else:
            index[k] = len(out)
            out.append(_merge_map({}, item))
    return [x for x in out if x is not None]


def _order(field: str, items: Any, order: Any) -> Any:
    if not isinstance(items, list) or not isinstance(order, list):
        return items
    key = _merge_key(field, order)
    if not key:
        rank = {repr(v): i for i, v in enumerate(order)}
        return sorted(items, key=lambda x: rank.get(repr(x), len(rank)))
    rank = {o.get(key): i for i, o in enumerate(order) if isinstance(o, dict)}
    return sorted(items, key=lambda x: rank.get(x.get(key) if isinstance(x, dict) else None, len(rank)))
