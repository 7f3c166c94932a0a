"""The accepted kinds and the validation of one manifest."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable

from . import capacitybuffer, core, nodeclass, nodeoverlay, nodepool
from .schema import Ctx, Node, fmt_value, json_type, not_supported, required, walk


@dataclass(frozen=True)
class KindInfo:
    api_versions: tuple[str, ...]
    kind: str
    namespaced: bool
    schema: Node
    crd: bool = False
    prepare: Callable[[dict, Ctx], None] | None = None


_KINDS: list[KindInfo] = [
    KindInfo(("karpenter.sh/v1",), "NodePool", False, nodepool.NODEPOOL, crd=True, prepare=nodepool.prepare),
    KindInfo(("karpenter.sh/v1",), "NodeClaim", False, nodepool.NODECLAIM, crd=True, prepare=nodepool.prepare),
    KindInfo((nodeoverlay.API_VERSION,), nodeoverlay.KIND, False, nodeoverlay.NODEOVERLAY, crd=True),
    KindInfo(
        ("karpenter.azure.com/v1alpha2", "karpenter.azure.com/v1beta1"), "AKSNodeClass", False, nodeclass.AKS_NODE_CLASS, crd=True
    ),
    KindInfo(("karpenter.k8s.aws/v1",), "EC2NodeClass", False, nodeclass.EC2_NODE_CLASS, crd=True),
    KindInfo(("karpenter.kwok.sh/v1alpha1",), "KWOKNodeClass", False, nodeclass.KWOK_NODE_CLASS, crd=True),
    KindInfo((capacitybuffer.API_VERSION,), capacitybuffer.KIND, True, capacitybuffer.CAPACITYBUFFER, crd=True),
    KindInfo(("v1",), "Pod", True, core.POD),
    KindInfo(("v1",), "PodTemplate", True, capacitybuffer.POD_TEMPLATE),
    KindInfo(("v1",), "Node", False, core.NODE),
    KindInfo(("v1",), "Namespace", False, core.NAMESPACE),
    KindInfo(("v1",), "PersistentVolumeClaim", True, core.PVC),
    KindInfo(("v1",), "PersistentVolume", False, core.PV),
    KindInfo(("v1",), "Service", True, core.SERVICE),
    KindInfo(("apps/v1",), "Deployment", True, core.DEPLOYMENT),
    KindInfo(("apps/v1",), "ReplicaSet", True, core.REPLICASET),
    KindInfo(("apps/v1",), "StatefulSet", True, core.STATEFULSET),
    KindInfo(("apps/v1",), "DaemonSet", True, core.DAEMONSET),
    KindInfo(("batch/v1",), "Job", True, core.JOB, prepare=core.prepare_job),
    KindInfo(("policy/v1",), "PodDisruptionBudget", True, core.PDB),
    KindInfo(("node.k8s.io/v1",), "RuntimeClass", False, core.RUNTIME_CLASS),
    KindInfo(("scheduling.k8s.io/v1",), "PriorityClass", False, core.PRIORITY_CLASS),
    KindInfo(("storage.k8s.io/v1",), "StorageClass", False, core.STORAGE_CLASS),
]

SCENARIO_API_VERSION = "karpy.dev/v1alpha1"


def _register_scenario() -> None:
    import sys

    from . import scenario

    scenario.bind_kinds(sys.modules[__name__])
    _KINDS.append(KindInfo((SCENARIO_API_VERSION,), "Scenario", False, scenario.SCENARIO, crd=True))


_register_scenario()

BY_KIND: dict[str, KindInfo] = {k.kind: k for k in _KINDS}

ACCEPTED_KINDS: list[tuple[str, str]] = [(v, k.kind) for k in _KINDS for v in k.api_versions]


def accepted_kinds_text() -> str:
    return ", ".join(f"{v} {k}" for v, k in ACCEPTED_KINDS)


def kind_info(api_version: Any, kind: Any) -> KindInfo | None:
    info = BY_KIND.get(kind) if isinstance(kind, str) else None
    if info is None or api_version not in info.api_versions:
        return None
    return info


def is_namespaced(kind: str) -> bool:
    info = BY_KIND.get(kind)
    return bool(info and info.namespaced)


def duplicate_object_message(kind: str, namespace: str | None, name: str, where: str) -> str:
    """The error for a second object of the same kind, namespace and name ("Duplicate value: ...")."""
    scope = f" in namespace {fmt_value(namespace)}" if is_namespaced(kind) else ""
    return f"Duplicate value: {fmt_value(name)}: a {kind} of that name{scope} was already given in {where}"


_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def generated_suffix(seed: str) -> str:
    """A deterministic 5-character suffix for generateName (same alphabet as the API server)."""
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(_SUFFIX_ALPHABET[b % len(_SUFFIX_ALPHABET)] for b in digest[:5])


@dataclass
class Validated:
    """The result of validating one manifest."""

    obj: Any
    errors: list[tuple[str, str]]
    kind: str | None
    api_version: str | None
    name: str | None
    namespace: str | None

    @property
    def ok(self) -> bool:
        return not self.errors


def _prefixed(prefix: str, field: str) -> str:
    if not prefix:
        return field
    if not field:
        return prefix
    return f"{prefix}{field}" if field.startswith("[") else f"{prefix}.{field}"


def validate_manifest(raw: Any, *, prefix: str = "", seed: str = "", nested: bool = False) -> Validated:
    """Validate one manifest (a parsed YAML/JSON object), applying defaults in place.

    ``prefix`` is prepended to every field path (for manifests inside a
    Scenario); ``seed`` makes generateName deterministic.
    """
    errors: list[tuple[str, str]] = []
    if not isinstance(raw, dict):
        errors.append((prefix, f"Invalid value: {fmt_value(json_type(raw))}: a manifest must be a map (a Kubernetes object)"))
        return Validated(raw, errors, None, None, None, None)
    api_version, kind = raw.get("apiVersion"), raw.get("kind")
    name = None
    meta = raw.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("name"), str):
        name = meta["name"]
    kind_s = kind if isinstance(kind, str) else None
    av_s = api_version if isinstance(api_version, str) else None
    if api_version is None or api_version == "":
        errors.append((_prefixed(prefix, "apiVersion"), required()))
    elif not isinstance(api_version, str):
        errors.append((_prefixed(prefix, "apiVersion"), f"Invalid value: {fmt_value(api_version)}: must be a string"))
    if kind is None or kind == "":
        errors.append((_prefixed(prefix, "kind"), required()))
    elif not isinstance(kind, str):
        errors.append((_prefixed(prefix, "kind"), f"Invalid value: {fmt_value(kind)}: must be a string"))
    if errors:
        return Validated(raw, errors, kind_s, av_s, name, None)
    info = BY_KIND.get(kind)
    if info is None:
        errors.append(
            (
                _prefixed(prefix, "kind"),
                f"Unsupported value: {fmt_value(f'{api_version} {kind}')}: unknown kind; accepted kinds: "
                + accepted_kinds_text(),
            )
        )
        return Validated(raw, errors, kind, api_version, name, None)
    if api_version not in info.api_versions:
        errors.append(
            (_prefixed(prefix, "apiVersion"), not_supported(api_version, info.api_versions) + f" (for kind {kind})")
        )
        return Validated(raw, errors, kind, api_version, name, None)
    if nested and kind == "Scenario":
        errors.append((_prefixed(prefix, "kind"), "Forbidden: a Scenario cannot be applied by a Scenario"))
        return Validated(raw, errors, kind, api_version, name, None)

    ctx = Ctx(crd=info.crd)
    if meta is None:
        meta = raw["metadata"] = {}
    namespace = None
    if isinstance(meta, dict):
        if (meta.get("name") in (None, "")) and isinstance(meta.get("generateName"), str) and meta["generateName"]:
            meta["name"] = meta["generateName"] + generated_suffix(f"{seed}|{prefix}|{kind}|{meta['generateName']}")
        if info.namespaced:
            if meta.get("namespace") in (None, ""):
                meta["namespace"] = "default"
            if isinstance(meta["namespace"], str):
                namespace = meta["namespace"]
        else:
            meta.pop("namespace", None)
        if isinstance(meta.get("name"), str):
            name = meta["name"]
    if info.prepare is not None:
        ctx.run(info.prepare, raw, ctx)
    walk(raw, info.schema, "", ctx)
    errors.extend((_prefixed(prefix, f), m) for f, m in ctx.cel_outcome(info.schema))
    return Validated(raw, errors, kind, api_version, name, namespace)
