"""What the sandbox serves, as the API server's discovery and OpenAPI documents describe it.

* ``SERVED``: every (group, version, plural) the HTTP front end routes, from the
  kinds table (:mod:`karpy.kube.registry`, every served version of a
  multi-version CRD) plus ``events.k8s.io/v1`` Events (a view of core Events).
* Discovery: ``/api``, ``/apis``, ``/api/v1``, ``/apis/<group>/<version>``
  (unaggregated: kubectl and client-go fall back to these when the aggregated
  ``apidiscovery.k8s.io`` form is not offered), with the subresources
  (``pods/status``, ``pods/eviction``, ``pods/binding``, ``pods/log``,
  ``*/status``, ``deployments/scale``, ...).
* OpenAPI v3: an index (``/openapi/v3``) and one document per group-version
  listing each resource's paths, their ``x-kubernetes-group-version-kind`` and
  the ``fieldValidation`` query parameter. That is what kubectl reads to send
  ``fieldValidation=Strict`` (validation happens here, server-side). Only the
  CRDs' documents carry schemas (their structural schemas, for ``kubectl
  explain``); PATCH declares no request body, so
  ``kubectl apply`` computes its patch from its own compiled-in types: a
  strategic merge patch for built-in kinds, a JSON merge patch for custom
  resources (exactly what it sends to a real cluster). ``/openapi/v2`` is a
  document without definitions (kubectl up to 1.27 needs one to exist before
  it validates; with no definition for a kind it skips client-side validation).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ..kube.registry import TYPES, ResourceType
from . import metrics as M

VERSION_INFO = {
    # the API of kube-apiserver v1.33, which the sandbox is held to (tests/realcluster/test_sandbox_parity.py);
    # kubectl dispatchers that pick a kubectl by the server's minor version pick the same one for both
    "major": "1", "minor": "33", "emulationMajor": "1", "emulationMinor": "33", "minCompatibilityMajor": "1",
    "minCompatibilityMinor": "32", "gitVersion": "v1.33.0-karpy", "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.0", "compiler": "gc",
    "platform": "linux/amd64",
}


@dataclass(frozen=True)
class Served:
    """One resource at one group-version: the stored kind and how it looks on the wire there."""

    group: str
    version: str
    plural: str
    type: ResourceType
    view: str = ""  # "" (the stored object) or "events.k8s.io" (core Events seen as events.k8s.io/v1)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def kind(self) -> str:
        return self.type.kind

    @property
    def namespaced(self) -> bool:
        return self.type.namespaced

    @property
    def subresources(self) -> tuple[str, ...]:
        """The kind's subresources, and those only the HTTP front end serves (a pod's ``log``)."""
        return self.type.subresources + FRONT_END_SUBRESOURCES.get(self.type.kind, ())


def _served() -> dict[tuple[str, str, str], Served]:
    out: dict[tuple[str, str, str], Served] = {}
    for t in TYPES:
        for v in t.served_versions():
            out[(t.group, v, t.plural)] = Served(t.group, v, t.plural, t)
    ev = next(t for t in TYPES if t.kind == "Event")
    out[("events.k8s.io", "v1", "events")] = Served("events.k8s.io", "v1", "events", ev, view="events.k8s.io")
    return out


SERVED = _served()
FRONT_END_SUBRESOURCES = {"Pod": ("log",)}  # served over HTTP only (karpy.sandbox.logs), not by the store

# review resources: created, answered, never stored (group, version, plural, kind, namespaced)
REVIEWS: tuple[tuple[str, str, str, str, bool], ...] = (
    ("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", False),
    ("authorization.k8s.io", "v1", "localsubjectaccessreviews", "LocalSubjectAccessReview", True),
    ("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False),
    ("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", False),
    ("authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", False),
)


def review(group: str, version: str, plural: str) -> tuple[str, bool] | None:
    """(kind, namespaced) of a review resource."""
    for g, v, p, kind, namespaced in REVIEWS:
        if (g, v, p) == (group, version, plural):
            return kind, namespaced
    return None


@functools.lru_cache(maxsize=1)
def group_versions() -> dict[str, list[str]]:
    """group -> versions (preferred first), in the order discovery lists them."""
    out: dict[str, list[str]] = {}
    for g, v in [(g, v) for (g, v, _) in SERVED] + [(g, v) for g, v, *_ in REVIEWS] + [(M.GROUP, M.VERSION)]:
        vs = out.setdefault(g, [])
        if v not in vs:
            vs.append(v)
    return out


@functools.lru_cache(maxsize=1)
def custom_resource_groups() -> frozenset[str]:
    """The groups whose kinds are custom resources (served from CRDs, not built in)."""
    from ..kube.registry import CRD_KINDS

    return frozenset(s.group for s in SERVED.values() if s.kind in CRD_KINDS)


def _storage_hash(s: Served) -> str:
    return hashlib.sha256(f"{s.group}/{s.version}/{s.kind}".encode()).digest()[:8].hex()


def resource_list(group: str, version: str) -> dict | None:
    items = [s for (g, v, _), s in SERVED.items() if g == group and v == version]
    reviews = [r for r in REVIEWS if r[:2] == (group, version)]
    metrics = list(M.RESOURCES.items()) if (group, version) == (M.GROUP, M.VERSION) else []
    if not items and not reviews and not metrics:
        return None
    resources: list[dict[str, Any]] = []
    if (group, version) == ("", "v1"):  # the legacy POST .../namespaces/{ns}/bindings
        resources.append({"name": "bindings", "singularName": "binding", "namespaced": True, "kind": "Binding",
                          "verbs": ["create"]})
    for _, _, plural, kind, namespaced in reviews:
        resources.append({"name": plural, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind,
                          "verbs": ["create"]})
    for plural, (kind, namespaced) in metrics:  # metrics-server's resources (karpy.sandbox.metrics)
        resources.append({"name": plural, "singularName": "", "namespaced": namespaced, "kind": kind,
                          "verbs": ["get", "list"]})
    for s in items:
        t = s.type
        r: dict[str, Any] = {"name": s.plural, "singularName": t.singular, "namespaced": t.namespaced, "kind": t.kind,
                             "verbs": list(t.verbs), "storageVersionHash": _storage_hash(s)}
        if t.short_names:
            r["shortNames"] = list(t.short_names)
        if t.categories:
            r["categories"] = list(t.categories)
        resources.append(r)
        for sub in s.subresources:
            if sub == "log":
                resources.append({"name": f"{s.plural}/log", "singularName": "", "namespaced": t.namespaced,
                                  "kind": t.kind, "verbs": ["get"]})
            elif sub == "status":
                resources.append({"name": f"{s.plural}/status", "singularName": "", "namespaced": t.namespaced,
                                  "kind": t.kind, "verbs": ["get", "patch", "update"]})
            elif sub == "scale":
                resources.append({"name": f"{s.plural}/scale", "singularName": "", "namespaced": t.namespaced,
                                  "group": "autoscaling", "version": "v1", "kind": "Scale",
                                  "verbs": ["get", "patch", "update"]})
            elif sub == "eviction":
                resources.append({"name": f"{s.plural}/eviction", "singularName": "", "namespaced": t.namespaced,
                                  "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]})
            elif sub == "binding":
                resources.append({"name": f"{s.plural}/binding", "singularName": "", "namespaced": t.namespaced,
                                  "kind": "Binding", "verbs": ["create"]})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources}


def api_versions(server_address: str) -> dict:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def _group(name: str, versions: list[str]) -> dict:
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list() -> dict:
    groups = [_group(g, vs) for g, vs in group_versions().items() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(name: str) -> dict | None:
    vs = group_versions().get(name)
    if not vs or not name:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, vs)}


# --- OpenAPI v3 ----------------------------------------------------------------------------------

def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _param(name: str, where: str = "query") -> dict:
    p = {"name": name, "in": where, "schema": {"type": "string", "uniqueItems": True}}
    if where == "path":
        p["required"] = True
    return p


_WRITE_PARAMS = [_param("dryRun"), _param("fieldManager"), _param("fieldValidation")]


def openapi_gv(group: str, version: str) -> dict | None:
    items = [s for (g, v, _), s in SERVED.items() if g == group and v == version]
    if not items:
        return None
    paths: dict[str, Any] = {}
    ok = {"200": {"description": "OK"}}
    for s in items:
        gvk = {"group": s.group, "version": s.version, "kind": s.kind}
        base = f"/{_gv_path(s.group, s.version)}"
        coll = f"{base}/namespaces/{{namespace}}/{s.plural}" if s.namespaced else f"{base}/{s.plural}"
        item = f"{coll}/{{name}}"

        def op(action: str, params: list[dict] | None = None, g: dict = gvk) -> dict:
            return {"x-kubernetes-action": action, "x-kubernetes-group-version-kind": g, "parameters": params or [],
                    "responses": ok}

        paths[coll] = {"get": op("list", [_param("labelSelector"), _param("fieldSelector"), _param("watch")]),
                       "post": op("post", _WRITE_PARAMS), "delete": op("deletecollection")}
        paths[item] = {"get": op("get"), "put": op("put", _WRITE_PARAMS), "patch": op("patch", _WRITE_PARAMS),
                       "delete": op("delete", [_param("dryRun")])}
        for sub in s.subresources:
            if sub == "log":
                paths[f"{item}/log"] = {"get": op("get", [_param(p) for p in (
                    "container", "follow", "insecureSkipTLSVerifyBackend", "limitBytes", "previous", "sinceSeconds",
                    "sinceTime", "stream", "tailLines", "timestamps")])}
            elif sub == "status":
                paths[f"{item}/status"] = {"get": op("get"), "put": op("put", _WRITE_PARAMS),
                                           "patch": op("patch", _WRITE_PARAMS)}
            elif sub == "scale":
                sg = {"group": "autoscaling", "version": "v1", "kind": "Scale"}
                paths[f"{item}/scale"] = {"get": op("get", g=sg), "put": op("put", _WRITE_PARAMS, g=sg),
                                          "patch": op("patch", _WRITE_PARAMS, g=sg)}
            elif sub == "eviction":
                paths[f"{item}/eviction"] = {"post": op("post", _WRITE_PARAMS,
                                                        g={"group": "policy", "version": "v1", "kind": "Eviction"})}
            elif sub == "binding":
                paths[f"{item}/binding"] = {"post": op("post", _WRITE_PARAMS,
                                                       g={"group": "", "version": "v1", "kind": "Binding"})}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": VERSION_INFO["gitVersion"]}, "paths": paths,
            "components": {"schemas": _crd_schemas(group, version)}}


_CRD_SCHEMAS: dict[tuple[str, str], dict] | None = None
_META = "io.k8s.apimachinery.pkg.apis.meta.v1"


def _ref(name: str) -> str:
    return f"#/components/schemas/{_META}.{name}"


def _str_map() -> dict:
    return {"type": "object", "additionalProperties": {"type": "string", "default": ""}}


def _items(name: str) -> dict:
    return {"default": {}, "allOf": [{"$ref": _ref(name)}]}


# the metadata every object has (apimachinery's ObjectMeta and what it refers to), as fields and types
_META_SCHEMAS = {
    f"{_META}.ObjectMeta": {"type": "object", "properties": {
        "annotations": _str_map(), "creationTimestamp": {"allOf": [{"$ref": _ref("Time")}]},
        "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
        "deletionTimestamp": {"allOf": [{"$ref": _ref("Time")}]},
        "finalizers": {"type": "array", "items": {"type": "string", "default": ""}, "x-kubernetes-list-type": "set",
                       "x-kubernetes-patch-strategy": "merge"},
        "generateName": {"type": "string"}, "generation": {"type": "integer", "format": "int64"},
        "labels": _str_map(),
        "managedFields": {"type": "array", "items": _items("ManagedFieldsEntry"), "x-kubernetes-list-type": "atomic"},
        "name": {"type": "string"}, "namespace": {"type": "string"},
        "ownerReferences": {"type": "array", "items": _items("OwnerReference"), "x-kubernetes-list-map-keys": ["uid"],
                            "x-kubernetes-list-type": "map", "x-kubernetes-patch-merge-key": "uid",
                            "x-kubernetes-patch-strategy": "merge"},
        "resourceVersion": {"type": "string"}, "selfLink": {"type": "string"}, "uid": {"type": "string"}}},
    f"{_META}.ManagedFieldsEntry": {"type": "object", "properties": {
        "apiVersion": {"type": "string"}, "fieldsType": {"type": "string"},
        "fieldsV1": {"allOf": [{"$ref": _ref("FieldsV1")}]}, "manager": {"type": "string"},
        "operation": {"type": "string"}, "subresource": {"type": "string"},
        "time": {"allOf": [{"$ref": _ref("Time")}]}}},
    f"{_META}.OwnerReference": {"type": "object", "required": ["apiVersion", "kind", "name", "uid"], "properties": {
        "apiVersion": {"type": "string", "default": ""}, "blockOwnerDeletion": {"type": "boolean"},
        "controller": {"type": "boolean"}, "kind": {"type": "string", "default": ""},
        "name": {"type": "string", "default": ""}, "uid": {"type": "string", "default": ""}},
        "x-kubernetes-map-type": "atomic"},
    f"{_META}.FieldsV1": {"type": "object"},
    f"{_META}.Time": {"type": "string", "format": "date-time"},
}


def _crd_schemas(group: str, version: str) -> dict:
    """The CRDs' structural schemas for one group-version, named and tagged as the API server publishes
    them (``x-kubernetes-group-version-kind``): what ``kubectl explain`` reads."""
    global _CRD_SCHEMAS
    if _CRD_SCHEMAS is None:
        from ..api.crds import crds

        table: dict[tuple[str, str], dict] = {}
        for crd in crds():
            g, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for v in crd["spec"]["versions"]:
                schema = dict((v.get("schema") or {}).get("openAPIV3Schema") or {"type": "object"})
                # what every object has, as kube-apiserver publishes it with a CRD's schema (the structure;
                # upstream's documentation of these fields is not repeated here)
                schema["properties"] = {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                        "metadata": {"allOf": [{"$ref": _ref("ObjectMeta")}]},
                                        **{k: p for k, p in (schema.get("properties") or {}).items()
                                           if k not in ("apiVersion", "kind", "metadata")}}
                schema["x-kubernetes-group-version-kind"] = [{"group": g, "version": v["name"], "kind": kind}]
                name = ".".join(reversed(g.split("."))) + f".{v['name']}.{kind}"
                table.setdefault((g, v["name"]), dict(_META_SCHEMAS))[name] = schema
        _CRD_SCHEMAS = table
    return _CRD_SCHEMAS.get((group, version), {})


def openapi_index() -> dict:
    paths = {}
    for g, vs in group_versions().items():
        for v in vs:
            doc = openapi_gv(g, v)
            if doc is None:
                continue
            h = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()
            paths[_gv_path(g, v)] = {"serverRelativeURL": f"/openapi/v3/{_gv_path(g, v)}?hash={h}"}
    return {"paths": paths}
