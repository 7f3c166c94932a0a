"""Field ownership: ``metadata.managedFields`` and server-side apply, as kube-apiserver keeps them.

A set of fields is a Python set of paths; a path is a tuple of path elements written as in ``FieldsV1``:
``f:<field>`` (a field of a struct or a key of a map), ``k:<json>`` (an item of a list keyed by some of its
fields, ``k:{"name":"app"}``), ``v:<json>`` (an item of a list of distinct values, ``v:"a/b"``) and ``i:<n>``.
A path in the set means its node is owned; ``FieldsV1`` writes a node that is owned and has owned children with
a ``"."`` key.

What kube-apiserver derives from the OpenAPI schema of each type, :class:`Shape` answers from a table of the
built-in kinds' list types and atomic structs, and from a CRD's structural schema
(``x-kubernetes-list-type``, ``x-kubernetes-list-map-keys``, ``x-kubernetes-map-type``) for custom resources.

* An update (create, replace, patch) gives its manager the fields it changed: those added or modified, compared
  with the object before (for a create, the kind's empty object as Go writes it, which holds the structs Go
  never omits), and takes them from any other manager; fields it removed leave every manager.
* An apply gives its manager exactly the fields of its configuration; fields another manager owns and the
  apply would change are conflicts (409, unless forced, which takes them over); fields the manager applied
  before and no longer does are removed from the object when nobody else owns them.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

Path = tuple[str, ...]
MISSING = object()

# fields kube-apiserver never tracks (set by the server, or the object's identity)
_STRIPPED: frozenset[Path] = frozenset({
    ("f:apiVersion",), ("f:kind",), ("f:metadata",), ("f:metadata", "f:name"), ("f:metadata", "f:namespace"),
    ("f:metadata", "f:creationTimestamp"), ("f:metadata", "f:selfLink"), ("f:metadata", "f:uid"),
    ("f:metadata", "f:clusterName"), ("f:metadata", "f:generation"), ("f:metadata", "f:managedFields"),
    ("f:metadata", "f:resourceVersion"), ("f:metadata", "f:deletionTimestamp"),
    ("f:metadata", "f:deletionGracePeriodSeconds"),
})

# --- shapes -------------------------------------------------------------------------------------------------

# lists of the built-in kinds whose items are told apart by some of their fields (list-type map)
_KEYED = {
    "containers": ("name",), "initContainers": ("name",), "ephemeralContainers": ("name",), "env": ("name",),
    "volumeMounts": ("mountPath",), "volumes": ("name",), "volumeDevices": ("devicePath",),
    "imagePullSecrets": ("name",), "conditions": ("type",), "ownerReferences": ("uid",), "hostAliases": ("ip",),
    "topologySpreadConstraints": ("topologyKey", "whenUnsatisfiable"), "resourceClaims": ("name",),
    "schedulingGates": ("name",), "podIPs": ("ip",), "hostIPs": ("ip",), "secrets": ("name",),
    "addresses": ("type",),
}
_KEY_DEFAULTS = {"protocol": "TCP"}
_SETS = frozenset({"finalizers"})
# maps (string keys chosen by users) rather than structs
_MAPS = frozenset({"labels", "annotations", "data", "binaryData", "stringData", "requests", "limits",
                   "capacity", "allocatable", "matchLabels", "hard", "used", "parameters", "overhead", "podFixed",
                   "allocatedResources"})
# structs and maps kube-apiserver replaces as a whole (structType/mapType atomic)
_ATOMIC_STRUCTS = frozenset({"labelSelector", "namespaceSelector", "roleRef", "involvedObject", "regarding",
                             "related", "configMapKeyRef", "secretKeyRef", "fieldRef", "resourceFieldRef",
                             "nodeSelectorTerm", "nodeSelector"})
# lists of conditions kube-apiserver keeps atomic
_ATOMIC_CONDITIONS = frozenset({"Job"})
# the workload kinds whose spec.selector is a LabelSelector (atomic), and Services, whose selector is a map (atomic)
_SELECTOR_OWNERS = frozenset({"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "PodDisruptionBudget",
                              "Service"})


class Shape:
    """How a kind's fields behave: struct or map, list types and keys, atomic parts.

    A node is the tuple of field names from the root (``"*"`` for a list item or a map entry) for the
    built-in kinds, or a piece of the CRD's schema (with the tuple beside it, for ``metadata``)."""

    def __init__(self, kind: str, crd_schema: dict | None = None):
        self.kind = kind
        self.schema = crd_schema

    def root(self) -> tuple[Path, dict | None]:
        return (), self.schema

    def field(self, node: tuple[Path, dict | None], name: str) -> tuple[tuple[Path, dict | None], bool]:
        """The node of a field or map entry, and whether it is a declared field (not a map entry)."""
        names, sch = node
        if sch is not None:  # a custom resource: its schema says (its metadata is every object's)
            if not names and name == "metadata":
                return (("metadata",), None), True
            props = sch.get("properties") or {}
            if name in props:
                return (names + (name,), props[name]), True
            extra = sch.get("additionalProperties")
            return (names + ("*",), extra if isinstance(extra, dict) else {}), False
        if names and names[-1] in _MAPS:
            return (names + ("*",), None), False
        return (names + (name,), None), True

    def item(self, node: tuple[Path, dict | None]) -> tuple[Path, dict | None]:
        names, sch = node
        if sch is not None:
            items = sch.get("items")
            return (names + ("*",), items if isinstance(items, dict) else {})
        return (names + ("*",), None)

    def list_type(self, node: tuple[Path, dict | None]) -> tuple[str, tuple[str, ...]]:
        """("atomic" | "set" | "map", the keys of a map list)."""
        names, sch = node
        if sch is not None:
            return sch.get("x-kubernetes-list-type") or "atomic", tuple(sch.get("x-kubernetes-list-map-keys") or ())
        last = names[-1] if names else ""
        if last in _SETS:
            return "set", ()
        if last == "ports":
            return "map", (("containerPort", "protocol") if "containers" in names or "initContainers" in names
                           or "ephemeralContainers" in names else ("port", "protocol"))
        if last == "conditions" and self.kind in _ATOMIC_CONDITIONS:
            return "atomic", ()
        if last == "secrets" and self.kind != "ServiceAccount":
            return "atomic", ()
        if last in _KEYED:
            return "map", _KEYED[last]
        return "atomic", ()

    def atomic_map(self, node: tuple[Path, dict | None]) -> bool:
        names, sch = node
        if sch is not None:
            return sch.get("x-kubernetes-map-type") == "atomic"
        last = names[-1] if names else ""
        if last == "selector":
            return names == ("spec", "selector") and self.kind in _SELECTOR_OWNERS
        return last in _ATOMIC_STRUCTS


def _key_json(item: dict, keys: tuple[str, ...]) -> str:
    kv = {k: item.get(k, _KEY_DEFAULTS.get(k)) for k in keys if k in item or k in _KEY_DEFAULTS}
    return json.dumps(kv, sort_keys=True, separators=(",", ":"))


def _item_pe(item: Any, ltype: str, keys: tuple[str, ...], index: int) -> str:
    if ltype == "map" and isinstance(item, dict):
        return "k:" + _key_json(item, keys)
    if ltype == "set":
        return "v:" + json.dumps(item, separators=(",", ":"))
    return f"i:{index}"


def _empty(v: Any) -> bool:
    return v is MISSING or v is None or (isinstance(v, (dict, list)) and not v)


# --- sets from objects --------------------------------------------------------------------------------------

def field_set(obj: Any, shape: Shape) -> set[Path]:
    """The fields an object (an apply configuration) sets: every scalar, atomic part and list item, and every map
    entry (structs themselves only when empty)."""
    out: set[Path] = set()
    _to_set(obj, shape, shape.root(), (), out)
    return {p for p in out if p not in _STRIPPED}


def _to_set(v: Any, shape: Shape, node: Any, path: Path, out: set[Path]) -> None:
    if isinstance(v, dict):
        if shape.atomic_map(node):
            out.add(path)
            return
        for k, x in v.items():
            child, declared = shape.field(node, k)
            p = path + (f"f:{k}",)
            _to_set(x, shape, child, p, out)
            if x is None or (isinstance(x, dict) and not x) or not declared:
                out.add(p)
    elif isinstance(v, list):
        ltype, keys = shape.list_type(node)
        if ltype == "atomic":
            out.add(path)
            return
        item = shape.item(node)
        for i, x in enumerate(v):
            p = path + (_item_pe(x, ltype, keys, i),)
            _to_set(x, shape, item, p, out)
            out.add(p)
    else:
        out.add(path)


def compare(old: Any, new: Any, shape: Shape) -> tuple[set[Path], set[Path], set[Path]]:
    """(added, modified, removed) paths going from ``old`` to ``new``."""
    added: set[Path] = set()
    modified: set[Path] = set()
    removed: set[Path] = set()
    _compare(old, new, shape, shape.root(), (), added, modified, removed)
    return ({p for p in added if p not in _STRIPPED and p}, {p for p in modified if p not in _STRIPPED and p},
            {p for p in removed if p not in _STRIPPED and p})


def _compare(a: Any, b: Any, shape: Shape, node: Any, path: Path, added: set, modified: set, removed: set) -> None:
    v = b if b is not MISSING else a
    if isinstance(v, dict) and not shape.atomic_map(node) and not (_empty(a) and _empty(b)):
        da = a if isinstance(a, dict) else {}
        db = b if isinstance(b, dict) else {}
        for k in list(da) + [k for k in db if k not in da]:
            child, _ = shape.field(node, k)
            _compare(da.get(k, MISSING), db.get(k, MISSING), shape, child, path + (f"f:{k}",), added, modified,
                     removed)
    elif isinstance(v, list) and shape.list_type(node)[0] != "atomic" and not (_empty(a) and _empty(b)):
        ltype, keys = shape.list_type(node)
        item = shape.item(node)
        la = a if isinstance(a, list) else []
        lb = b if isinstance(b, list) else []
        ia = {_item_pe(x, ltype, keys, i): x for i, x in enumerate(la)}
        ib = {_item_pe(x, ltype, keys, i): x for i, x in enumerate(lb)}
        for pe in list(ia) + [pe for pe in ib if pe not in ia]:
            _compare(ia.get(pe, MISSING), ib.get(pe, MISSING), shape, item, path + (pe,), added, modified, removed)
    else:  # a leaf: a scalar, an atomic part, or a map or list empty on both sides
        if a is MISSING:
            added.add(path)
        elif b is MISSING:
            removed.add(path)
        elif a != b:
            modified.add(path)
        return
    if a is MISSING:
        added.add(path)
    elif b is MISSING:
        removed.add(path)


# --- FieldsV1 -------------------------------------------------------------------------------------------------

def to_fields_v1(paths: Iterable[Path]) -> dict:
    root: dict = {}
    members: set[Path] = set(paths)
    for p in sorted(members):
        cur = root
        for pe in p:
            cur = cur.setdefault(pe, {})
    for p in members:
        cur = root
        for pe in p:
            cur = cur[pe]
        if cur:
            cur["."] = {}
    return _sorted(root)


def _sorted(d: dict) -> dict:
    return {k: _sorted(d[k]) for k in sorted(d, key=lambda k: (k != ".", k))}


def from_fields_v1(doc: Any) -> set[Path]:
    out: set[Path] = set()

    def walk(d: Any, path: Path) -> None:
        if not isinstance(d, dict):
            return
        if not d and path:
            out.add(path)
            return
        for k, v in d.items():
            if k == ".":
                out.add(path)
            else:
                walk(v, path + (k,))

    walk(doc, ())
    return out


def path_text(p: Path) -> str:
    """A path as kube-apiserver prints it in a conflict (``.spec.template.spec.containers[name="app"].image``)."""
    out = []
    for pe in p:
        kind, _, rest = pe.partition(":")
        if kind == "f":
            out.append("." + rest)
        elif kind == "k":
            keys = json.loads(rest)
            out.append("[" + ",".join(f"{k}={json.dumps(v)}" for k, v in keys.items()) + "]")
        elif kind == "v":
            out.append(f"[={rest}]")
        else:
            out.append(f"[{rest}]")
    return "".join(out)


# --- removing and merging -------------------------------------------------------------------------------------

def remove_paths(obj: Any, paths: Iterable[Path], shape: Shape) -> Any:
    """``obj`` without the owned nodes at ``paths`` (maps and lists emptied by it go too)."""
    out = json.loads(json.dumps(obj))
    for p in sorted(paths, key=len, reverse=True):
        _remove(out, p, shape, shape.root())
    return out


def _remove(v: Any, p: Path, shape: Shape, node: Any) -> bool:
    """Remove path ``p`` under ``v``; True when ``v`` is left empty by it."""
    if not p:
        return False
    pe = p[0]
    if isinstance(v, dict) and pe.startswith("f:"):
        k = pe[2:]
        if k not in v:
            return False
        if len(p) == 1:
            del v[k]
        else:
            child, _ = shape.field(node, k)
            if _remove(v[k], p[1:], shape, child) and isinstance(v[k], (dict, list)) and not v[k]:
                del v[k]
        return not v
    if isinstance(v, list):
        ltype, keys = shape.list_type(node)
        item = shape.item(node)
        for i, x in enumerate(v):
            if _item_pe(x, ltype, keys, i) == pe:
                if len(p) == 1:
                    del v[i]
                else:
                    _remove(x, p[1:], shape, item)
                break
        return not v
    return False


def apply_merge(live: Any, config: Any, shape: Shape) -> Any:
    """``config`` merged into ``live`` as server-side apply merges: maps and structs key by key, keyed lists
    item by item, lists of distinct values as their union, anything atomic replaced."""
    return _merge(live, config, shape, shape.root())


def _merge(a: Any, b: Any, shape: Shape, node: Any) -> Any:
    if isinstance(b, dict) and isinstance(a, dict) and not shape.atomic_map(node):
        out = dict(a)
        for k, x in b.items():
            child, _ = shape.field(node, k)
            if x is None:
                out.pop(k, None)
            else:
                out[k] = _merge(a.get(k, MISSING), x, shape, child)
        return out
    if isinstance(b, list) and isinstance(a, list):
        ltype, keys = shape.list_type(node)
        if ltype == "set":
            return list(a) + [x for x in b if x not in a]
        if ltype == "map":
            item = shape.item(node)
            pes = [_item_pe(x, ltype, keys, i) for i, x in enumerate(a)]
            out = list(a)
            for i, x in enumerate(b):
                pe = _item_pe(x, ltype, keys, i)
                if pe in pes:
                    j = pes.index(pe)
                    out[j] = _merge(out[j], x, shape, item)
                else:
                    out.append(x)
                    pes.append(pe)
            return out
    return json.loads(json.dumps(b))


# --- managedFields entries ------------------------------------------------------------------------------------

def entry_key(e: dict) -> tuple:
    """What tells two entries apart: the manager, the operation, the subresource and (for updates) apiVersion."""
    op = e.get("operation")
    return (e.get("manager"), op, e.get("apiVersion") if op == "Update" else None, e.get("subresource") or "")


def sort_entries(entries: list[dict]) -> list[dict]:
    """kube-apiserver's order: Apply before Update, then by time, manager, apiVersion, subresource."""
    return sorted(entries, key=lambda e: (e.get("operation") or "", e.get("time") or "", e.get("manager") or "",
                                          e.get("apiVersion") or "", e.get("subresource") or ""))


def entry(manager: str, operation: str, api_version: str, time: str | None, paths: set[Path],
          subresource: str | None) -> dict:
    out: dict[str, Any] = {"manager": manager, "operation": operation, "apiVersion": api_version}
    if time is not None:
        out["time"] = time
    out["fieldsType"] = "FieldsV1"
    out["fieldsV1"] = to_fields_v1(paths)
    if subresource:
        out["subresource"] = subresource
    return out


# --- the empty object of each kind, as Go writes it ----------------------------------------------------------
# (what a create is compared with: structs Go never omits are there already, so creating them owns their
# fields but not the struct itself)

def _template() -> dict:
    return {"metadata": {"creationTimestamp": None}, "spec": {"containers": None}}


_EMPTY: dict[str, Any] = {
    "Pod": lambda: {"spec": {"containers": None}, "status": {}},
    "Deployment": lambda: {"spec": {"selector": None, "template": _template(), "strategy": {}}, "status": {}},
    "ReplicaSet": lambda: {"spec": {"selector": None, "template": _template()}, "status": {"replicas": 0}},
    "StatefulSet": lambda: {"spec": {"selector": None, "template": _template(), "updateStrategy": {}},
                            "status": {"replicas": 0, "availableReplicas": 0}},
    "DaemonSet": lambda: {"spec": {"selector": None, "template": _template(), "updateStrategy": {}},
                          "status": {"currentNumberScheduled": 0, "numberMisscheduled": 0,
                                     "desiredNumberScheduled": 0, "numberReady": 0}},
    "Job": lambda: {"spec": {"template": _template()}, "status": {}},
    "Service": lambda: {"spec": {}, "status": {"loadBalancer": {}}},
    "Node": lambda: {"spec": {}, "status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 0}}, "nodeInfo": {
        k: "" for k in ("machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion",
                        "kubeletVersion", "kubeProxyVersion", "operatingSystem", "architecture")}}},
    "Namespace": lambda: {"spec": {}, "status": {}},
    "PodDisruptionBudget": lambda: {"spec": {}, "status": {"disruptionsAllowed": 0, "currentHealthy": 0,
                                                           "desiredHealthy": 0, "expectedPods": 0}},
    "PersistentVolumeClaim": lambda: {"spec": {"resources": {}}, "status": {}},
    "PersistentVolume": lambda: {"spec": {}, "status": {}},
    "Event": lambda: {"involvedObject": {}, "source": {}, "firstTimestamp": None, "lastTimestamp": None,
                      "eventTime": None, "reportingComponent": "", "reportingInstance": ""},
    "Lease": lambda: {"spec": {}},
    "Role": lambda: {"rules": None},
    "ClusterRole": lambda: {"rules": None},
    "RoleBinding": lambda: {"roleRef": {"apiGroup": "", "kind": "", "name": ""}},
    "ClusterRoleBinding": lambda: {"roleRef": {"apiGroup": "", "kind": "", "name": ""}},
    "PriorityClass": lambda: {"value": 0},
    "StorageClass": lambda: {"provisioner": ""},
    "RuntimeClass": lambda: {"handler": ""},
    "CustomResourceDefinition": lambda: {"spec": {"group": "", "names": {"plural": "", "kind": ""}, "scope": "",
                                                  "versions": None},
                                         "status": {"acceptedNames": {"plural": "", "kind": ""},
                                                    "storedVersions": None}},
}


def empty_object(kind: str, custom: bool) -> dict:
    """The object a create starts from: a built-in kind's zero value, or nothing for a custom resource."""
    if custom:
        return {}
    make = _EMPTY.get(kind)
    out = make() if make is not None else {}
    out["metadata"] = {"creationTimestamp": None}
    return out
