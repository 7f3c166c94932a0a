"""The CustomResourceDefinitions of karpy's kinds, generated from its own schema.

karpy validates NodePools, NodeClaims and NodeClasses with the schema trees of
:mod:`karpy.api.nodepool` and :mod:`karpy.api.nodeclass` (see
:mod:`karpy.api.schema`). :func:`crds` walks those same trees into
``apiextensions.k8s.io/v1`` CustomResourceDefinitions, so what a cluster's API
server admits and what ``karpy simulate`` accepts come from one description:

- types and formats (``int32``, ``int64``, ``date-time``), enums, patterns
  (a case-insensitive pattern gets ``(?i)``), string, list and map bounds,
  ``required``, defaults, list types and map keys;
- quantities as ``x-kubernetes-int-or-string`` with the API server's quantity
  pattern; maps as ``additionalProperties``; untyped subtrees as
  ``x-kubernetes-preserve-unknown-fields``; ``metadata`` as a bare object;
- every rule as an ``x-kubernetes-validations`` entry: the Python predicate
  karpy evaluates carries upstream's CEL text for the same rule
  (:func:`karpy.api.schema.cel`), and ``transition_rules`` add the CEL rules
  over ``oldSelf``. A rule without CEL text is an error: the CRD would
  silently admit what karpy refuses.

What is *not* in the CRDs: the ``checks`` (karpy's Python counterparts of
Karpenter's runtime validation, e.g. well-known label values, cron syntax,
duration ranges, or the provider's label-domain rules that depend on
``nodeClassRef.group``); Karpenter reports those through the NodePool's
readiness, and ``karpy controller`` does the same.

Status is published from the ``*_STATUS`` schemas (upstream's status fields,
typed, keeping unknown fields), names, short names, categories, printer columns
and the status (and, for NodePool, scale) subresources follow upstream's CRDs.

``scripts/gen_crds.py`` writes :func:`render` of each CRD to ``deploy/crds/``.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from . import capacitybuffer, nodeclass, nodeoverlay, nodepool
from .schema import CRD_QUANTITY_PATTERN, NO_DEFAULT, Node, rule_cel

CRD_API_VERSION = "apiextensions.k8s.io/v1"
CATEGORY = "karpenter"


class CRDError(ValueError):
    """The schema cannot be published as a CRD (e.g. a rule without CEL text)."""


@dataclass(frozen=True)
class CRDKind:
    kind: str
    group: str
    plural: str
    versions: tuple[str, ...]  # served versions, in upstream's order
    storage: str
    schema: Node
    status: Node
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = (CATEGORY,)
    printer_columns: tuple[dict, ...] = ()
    scale: dict | None = None
    deprecated: tuple[tuple[str, str], ...] = ()  # (version, deprecation warning)
    namespaced: bool = False

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"

    @property
    def filename(self) -> str:
        """Upstream's file name: ``<group>_<plural>.yaml``."""
        return f"{self.group}_{self.plural}.yaml"


def _col(name: str, json_path: str, type_: str = "string", priority: int = 0) -> dict:
    c: dict[str, Any] = {"name": name, "type": type_, "jsonPath": json_path}
    if priority:
        c["priority"] = priority
    return c


_READY = '.status.conditions[?(@.type=="Ready")].status'
_AGE = _col("Age", ".metadata.creationTimestamp", "date")

KINDS: tuple[CRDKind, ...] = (
    CRDKind(
        kind="NodeClaim",
        group="karpenter.sh",
        plural="nodeclaims",
        versions=("v1",),
        storage="v1",
        schema=nodepool.NODECLAIM,
        status=nodepool.NODECLAIM_STATUS,
        printer_columns=(
            _col("Type", r".metadata.labels.node\.kubernetes\.io/instance-type"),
            _col("Capacity", r".metadata.labels.karpenter\.sh/capacity-type"),
            _col("Zone", r".metadata.labels.topology\.kubernetes\.io/zone"),
            _col("Node", ".status.nodeName"),
            _col("Ready", _READY),
            _AGE,
            _col("ImageID", ".status.imageID", priority=1),
            _col("ID", ".status.providerID", priority=1),
            _col("NodePool", r".metadata.labels.karpenter\.sh/nodepool", priority=1),
            _col("NodeClass", ".spec.nodeClassRef.name", priority=1),
            _col("Drifted", '.status.conditions[?(@.type=="Drifted")].status', priority=1),
        ),
    ),
    CRDKind(
        kind="NodePool",
        group="karpenter.sh",
        plural="nodepools",
        versions=("v1",),
        storage="v1",
        schema=nodepool.NODEPOOL,
        status=nodepool.NODEPOOL_STATUS,
        printer_columns=(
            _col("NodeClass", ".spec.template.spec.nodeClassRef.name"),
            _col("Nodes", ".status.nodes"),
            _col("Ready", _READY),
            _AGE,
            _col("Weight", ".spec.weight", "integer", priority=1),
            _col("CPU", ".status.resources.cpu", priority=1),
            _col("Memory", ".status.resources.memory", priority=1),
        ),
        scale={"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.nodes"},
    ),
    CRDKind(
        kind="NodeOverlay",
        group="karpenter.sh",
        plural="nodeoverlays",
        versions=("v1alpha1",),
        storage="v1alpha1",
        schema=nodeoverlay.NODEOVERLAY,
        status=nodeoverlay.NODEOVERLAY_STATUS,
        short_names=("overlays",),
        printer_columns=(_col("Ready", _READY), _AGE, _col("Weight", ".spec.weight", "integer", priority=1)),
    ),
    CRDKind(
        kind="CapacityBuffer",
        group=capacitybuffer.GROUP,
        plural="capacitybuffers",
        versions=("v1beta1",),
        storage="v1beta1",
        schema=capacitybuffer.CAPACITYBUFFER,
        status=capacitybuffer.STATUS,
        short_names=("cb",),
        categories=("autoscaling",),
        namespaced=True,
        printer_columns=(
            _col("Strategy", ".spec.provisioningStrategy"),
            _col("PodTemplate", ".status.podTemplateRef.name"),
            _col("Replicas", ".status.replicas", "integer"),
            _col("ConditionsType", ".status.conditions[*].type"),
            _col("ConditionsStatus", ".status.conditions[*].status"),
            _col("ConditionsReason", ".status.conditions[*].reason"),
            _AGE,
        ),
    ),
    CRDKind(
        kind="AKSNodeClass",
        group="karpenter.azure.com",
        plural="aksnodeclasses",
        versions=("v1alpha2", "v1beta1"),  # one schema for both, as upstream's
        storage="v1beta1",
        schema=nodeclass.AKS_NODE_CLASS,
        status=nodeclass.AKS_NODE_CLASS_STATUS,
        short_names=("aksnc", "aksncs"),
        categories=(CATEGORY, "nap"),
        printer_columns=(_col("Ready", _READY), _AGE, _col("ImageFamily", ".spec.imageFamily", priority=1)),
        deprecated=(("v1alpha2", "use v1beta1.AKSNodeClass instead"),),
    ),
    CRDKind(
        kind="EC2NodeClass",
        group="karpenter.k8s.aws",
        plural="ec2nodeclasses",
        versions=("v1",),
        storage="v1",
        schema=nodeclass.EC2_NODE_CLASS,
        status=nodeclass.EC2_NODE_CLASS_STATUS,
        short_names=("ec2nc", "ec2ncs"),
        printer_columns=(_col("Ready", _READY), _AGE, _col("Role", ".spec.role", priority=1)),
    ),
    CRDKind(
        kind="KWOKNodeClass",
        group="karpenter.kwok.sh",
        plural="kwoknodeclasses",
        versions=("v1alpha1",),
        storage="v1alpha1",
        schema=nodeclass.KWOK_NODE_CLASS,
        status=nodeclass.KWOK_NODE_CLASS_STATUS,
        short_names=("kwoknc", "kwokncs"),
    ),
)

BY_KIND: dict[str, CRDKind] = {k.kind: k for k in KINDS}


# --- schema nodes to OpenAPI v3 -------------------------------------------------------


@dataclass
class _Walk:
    path: list[str] = field(default_factory=list)

    def where(self) -> str:
        return "".join(self.path) or "<root>"


def _validations(n: Node, w: _Walk) -> list[dict]:
    out = []
    for r in (*n.rules, *n.item_rules):
        text = rule_cel(r)
        if text is None:
            raise CRDError(f"{w.where()}: rule {r[1]!r} has no CEL text (write it with karpy.api.schema.cel)")
        out.append({"message": r[1], "rule": text})
    for text, message in n.transition_rules:
        out.append({"message": message, "rule": text})
    return out


def _pattern(n: Node) -> str:
    src = n.pattern_src or ""
    if n.pattern is not None and n.pattern.flags & re.IGNORECASE and not src.startswith("(?i)"):
        return "(?i)" + src
    return src


def openapi(n: Node, _w: _Walk | None = None) -> dict:
    """The OpenAPI v3 (structural) schema of one schema node and everything under it."""
    w = _w or _Walk()
    out: dict[str, Any] = {}
    if n.description:
        out["description"] = n.description
    t = n.type
    if t == "object":
        out["type"] = "object"
        props = n.props or {}
        if props:
            out["properties"] = {}
            for k in sorted(props):
                w.path.append(f".{k}")
                out["properties"][k] = openapi(props[k], w)
                w.path.pop()
        if n.additional is not None:
            if props:
                raise CRDError(f"{w.where()}: an object with both properties and additionalProperties is not structural")
            w.path.append("{}")
            out["additionalProperties"] = openapi(n.additional, w)
            w.path.pop()
        if n.required:
            out["required"] = list(n.required)
        if n.max_props is not None:
            out["maxProperties"] = n.max_props
        if n.preserve:
            out["x-kubernetes-preserve-unknown-fields"] = True
    elif t == "array":
        out["type"] = "array"
        if n.item is not None:
            w.path.append("[]")
            out["items"] = openapi(n.item, w)
            w.path.pop()
        else:
            out["items"] = {"x-kubernetes-preserve-unknown-fields": True}
        if n.min_items is not None:
            out["minItems"] = n.min_items
        if n.max_items is not None:
            out["maxItems"] = n.max_items
        if n.list_type:
            out["x-kubernetes-list-type"] = n.list_type
        if n.map_keys:
            out["x-kubernetes-list-map-keys"] = list(n.map_keys)
    elif t in ("string", "int-or-string"):
        if t == "string":
            out["type"] = "string"
        else:
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            out["x-kubernetes-int-or-string"] = True
        if n.fmt:
            out["format"] = n.fmt
        if n.enum is not None:
            out["enum"] = list(n.enum)
        if n.pattern_src:
            out["pattern"] = _pattern(n)
        if n.min_len is not None:
            out["minLength"] = n.min_len
        if n.max_len is not None:
            out["maxLength"] = n.max_len
    elif t in ("integer", "number"):
        out["type"] = t
        if n.fmt:
            out["format"] = n.fmt
        if n.enum is not None:
            out["enum"] = list(n.enum)
        if n.minimum is not None:
            out["minimum"] = n.minimum
        if n.maximum is not None:
            out["maximum"] = n.maximum
    elif t == "boolean":
        out["type"] = "boolean"
        if n.enum is not None:
            out["enum"] = list(n.enum)
    elif t == "quantity":
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        out["pattern"] = CRD_QUANTITY_PATTERN
        out["x-kubernetes-int-or-string"] = True
    elif t == "any":
        out["x-kubernetes-preserve-unknown-fields"] = True
    else:
        raise CRDError(f"{w.where()}: no OpenAPI type for schema type {t!r}")
    if n.default is not NO_DEFAULT:
        out["default"] = copy.deepcopy(n.default)
    validations = _validations(n, w)
    if validations:
        out["x-kubernetes-validations"] = validations
    return out


def openapi_schema(k: CRDKind) -> dict:
    """The ``openAPIV3Schema`` of a kind: its schema with ``metadata`` left to the API server
    (a CRD may only constrain name and generateName) and the published status."""
    root = k.schema
    props = dict(root.props or {})
    props["status"] = k.status
    out = openapi(Node("object", props={}, required=root.required, description=root.description))
    w = _Walk()
    out["properties"] = {}
    for name in sorted(props):
        if name == "metadata":
            out["properties"][name] = {"type": "object"}
            continue
        w.path = [f".{name}"]
        out["properties"][name] = openapi(props[name], w)
    # the root's own rules, if any, belong at the root
    validations = _validations(root, _Walk())
    if validations:
        out["x-kubernetes-validations"] = validations
    return out


def crd(k: CRDKind) -> dict:
    """The CustomResourceDefinition of one kind."""
    schema = openapi_schema(k)
    subresources: dict[str, Any] = {"status": {}}
    if k.scale:
        subresources["scale"] = dict(k.scale)
    versions = []
    for v in k.versions:
        version: dict[str, Any] = {"name": v, "served": True, "storage": v == k.storage}
        if k.printer_columns:
            version["additionalPrinterColumns"] = [dict(c) for c in k.printer_columns]
        warning = dict(k.deprecated).get(v)
        if warning:
            version["deprecated"] = True
            version["deprecationWarning"] = warning
        version["schema"] = {"openAPIV3Schema": copy.deepcopy(schema)}
        version["subresources"] = copy.deepcopy(subresources)
        versions.append(version)
    names: dict[str, Any] = {
        "categories": list(k.categories),
        "kind": k.kind,
        "listKind": f"{k.kind}List",
        "plural": k.plural,
        "singular": k.singular,
    }
    if k.short_names:
        names["shortNames"] = list(k.short_names)
    return {
        "apiVersion": CRD_API_VERSION,
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": k.name,
            "labels": {"app.kubernetes.io/part-of": "karpy"},
        },
        "spec": {"group": k.group, "names": names, "scope": "Namespaced" if k.namespaced else "Cluster",
                 "versions": versions},
    }


def crds() -> list[dict]:
    """The CRDs of NodeClaim, NodePool (karpenter.sh/v1), AKSNodeClass
    (karpenter.azure.com/v1alpha2, v1beta1), EC2NodeClass (karpenter.k8s.aws/v1) and
    KWOKNodeClass (karpenter.kwok.sh/v1alpha1)."""
    return [crd(k) for k in KINDS]


# --- YAML -------------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:  # noqa: ARG002 - never write &anchors / *aliases
        return True


def _str(dumper: yaml.SafeDumper, s: str) -> yaml.ScalarNode:
    if "\n" in s:
        return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", s)


_Dumper.add_representer(str, _str)

HEADER = "# Generated by scripts/gen_crds.py from karpy's API schema (karpy/api); do not edit.\n"


def render(obj: dict) -> str:
    """A CRD as the YAML text ``deploy/crds/`` holds."""
    body = yaml.dump(obj, Dumper=_Dumper, sort_keys=True, default_flow_style=False, width=100000, allow_unicode=True)
    return HEADER + "---\n" + body


def files() -> dict[str, str]:
    """``deploy/crds/`` file name to text, for every CRD."""
    return {k.filename: render(crd(k)) for k in KINDS}


__all__ = ["KINDS", "BY_KIND", "CRDKind", "CRDError", "crd", "crds", "openapi", "openapi_schema", "render", "files"]
