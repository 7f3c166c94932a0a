"""The CustomResourceDefinitions the sandbox installs at start: karpenter.sh and the NodeClasses.

Served as ``apiextensions.k8s.io/v1`` objects, and read back by the Table
output for their ``additionalPrinterColumns`` (so a CRD a user updates changes
``kubectl get``'s columns, as on a real API server).

The full CRDs (schemas included) come from :mod:`karpy.api.crds` when that
module provides them; otherwise a minimal CRD per kind is derived from the
kinds table (:mod:`karpy.kube.registry`) with upstream's printer columns.
"""

from __future__ import annotations

from typing import Any

from ..kube.registry import BY_KIND, CRD_KINDS, ResourceType

# upstream's additionalPrinterColumns (karpenter.sh v1, karpenter.k8s.aws v1)
_READY = {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'}
_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
PRINTER_COLUMNS: dict[str, list[dict]] = {
    "NodePool": [
        {"name": "NodeClass", "type": "string", "jsonPath": ".spec.template.spec.nodeClassRef.name"},
        {"name": "Nodes", "type": "string", "jsonPath": ".status.resources.nodes"},
        _READY, _AGE,
        {"name": "Weight", "type": "integer", "jsonPath": ".spec.weight", "priority": 1},
        {"name": "CPU", "type": "string", "jsonPath": ".status.resources.cpu", "priority": 1},
        {"name": "Memory", "type": "string", "jsonPath": ".status.resources.memory", "priority": 1},
    ],
    "NodeClaim": [
        {"name": "Type", "type": "string", "jsonPath": ".metadata.labels.node\\.kubernetes\\.io/instance-type"},
        {"name": "Capacity", "type": "string", "jsonPath": ".metadata.labels.karpenter\\.sh/capacity-type"},
        {"name": "Zone", "type": "string", "jsonPath": ".metadata.labels.topology\\.kubernetes\\.io/zone"},
        {"name": "Node", "type": "string", "jsonPath": ".status.nodeName"},
        _READY, _AGE,
        {"name": "ID", "type": "string", "jsonPath": ".status.providerID", "priority": 1},
        {"name": "NodePool", "type": "string", "jsonPath": ".metadata.labels.karpenter\\.sh/nodepool", "priority": 1},
        {"name": "NodeClass", "type": "string", "jsonPath": ".spec.nodeClassRef.name", "priority": 1},
        {"name": "Drifted", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Drifted")].status',
         "priority": 1},
    ],
    "EC2NodeClass": [_READY, _AGE, {"name": "Role", "type": "string", "jsonPath": ".spec.role", "priority": 1}],
    "AKSNodeClass": [_READY, _AGE],
    "KWOKNodeClass": [_AGE],
}

# the Age column of a CRD without printer columns, described as the built-in column it is
_DEFAULT_AGE = {**_AGE, "description": "CreationTimestamp is a timestamp representing the server time when this "
                                       "object was created."}


def _from_api_module() -> list[dict] | None:
    """The full CRDs (schemas, printer columns, short names) of :func:`karpy.api.crds.crds`."""
    try:
        from ..api.crds import crds
    except ImportError:  # pragma: no cover - the module ships with karpy; kept for partial installs
        return None
    out = [c for c in crds() if isinstance(c, dict) and c.get("kind") == "CustomResourceDefinition"]
    return out or None


def _minimal(t: ResourceType) -> dict:
    names: dict[str, Any] = {"kind": t.kind, "listKind": t.list_kind, "plural": t.plural, "singular": t.singular}
    if t.short_names:
        names["shortNames"] = list(t.short_names)
    if t.categories:
        names["categories"] = list(t.categories)
    versions = []
    for i, v in enumerate(t.served_versions()):
        ver: dict[str, Any] = {
            "name": v, "served": True, "storage": i == 0,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            "additionalPrinterColumns": [dict(c) for c in PRINTER_COLUMNS.get(t.kind, [_AGE])],
        }
        if "status" in t.subresources:
            ver["subresources"] = {"status": {}}
        versions.append(ver)
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{t.plural}.{t.group}"},
        "spec": {"group": t.group, "names": names, "scope": "Namespaced" if t.namespaced else "Cluster",
                 "versions": versions},
    }


def installed_crds() -> list[dict]:
    """The CRDs to install, each with an ``Established`` status."""
    crds = _from_api_module() or [_minimal(BY_KIND[k]) for k in sorted(CRD_KINDS)]
    out = []
    for c in crds:
        c = dict(c)
        spec = c.get("spec") or {}
        c["status"] = {
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found"},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted"},
            ],
            "acceptedNames": spec.get("names") or {},
            "storedVersions": [v.get("name") for v in spec.get("versions") or () if v.get("storage")],
        }
        out.append(c)
    return out


def printer_columns(crd: dict | None, version: str, kind: str) -> list[dict]:
    """The additionalPrinterColumns of ``version`` in a stored CRD (upstream's when there is no CRD)."""
    if crd is not None:
        for v in (crd.get("spec") or {}).get("versions") or ():
            if v.get("name") == version:
                cols = v.get("additionalPrinterColumns")
                if cols is not None:
                    return list(cols) or [_DEFAULT_AGE]
                return [_DEFAULT_AGE]
        cols = (crd.get("spec") or {}).get("additionalPrinterColumns")
        if cols:
            return list(cols)
    return PRINTER_COLUMNS.get(kind, [_AGE])
