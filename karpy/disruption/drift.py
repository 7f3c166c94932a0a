"""Drift: a NodeClaim that no longer matches its NodePool or NodeClass is replaced.

Karpenter stamps every NodeClaim with a hash of the NodePool template fields
that shape a node (labels, annotations, taints, startup taints, the
NodeClass reference, expireAfter and terminationGracePeriod — requirements
are left out of the hash and checked on their own), and of its NodeClass's
spec. A NodeClaim is drifted when its NodePool's hash changed (under the same
hash version), when its labels no longer satisfy the NodePool's requirements,
or when its NodeClass's hash changed.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

from .. import resources as res
from ..cloudprovider.types import CAPACITY_ON_DEMAND, CAPACITY_RESERVED, LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, \
    LABEL_ZONE, InstanceType
from ..scheduling.requirements import Requirements

NODEPOOL_HASH = "karpenter.sh/nodepool-hash"
NODEPOOL_HASH_VERSION = "karpenter.sh/nodepool-hash-version"
# karpy's own version of the NodePool hash: karpy hashes the template in its own way, so its hashes never
# equal upstream's. A version other than upstream's ("v3") makes either controller, taking over NodeClaims the
# other stamped, re-stamp them rather than call every one of them drifted (upstream's drift hash versioning).
HASH_VERSION = "karpy-v1"
NODECLASS_HASH = "karpy.dev/nodeclass-hash"

# NodeClass spec fields that do not drift nodes when they change (they are resolved
# dynamically, or are only tags), per provider.
_NODECLASS_IGNORED = {
    "AKSNodeClass": {"tags"},
    "EC2NodeClass": {"subnetSelectorTerms", "securityGroupSelectorTerms", "capacityReservationSelectorTerms",
                     "amiSelectorTerms", "amiFamily", "ipPrefixCount"},
    "KWOKNodeClass": set(),
}


def _canonical(value: Any) -> Any:
    """Unset and empty fields dropped, lists as sets (order-insensitive), maps sorted."""
    if isinstance(value, Mapping):
        out = {k: _canonical(v) for k, v in value.items()}
        return {k: v for k, v in sorted(out.items()) if v is not None and v != [] and v != {}}
    if isinstance(value, (list, tuple)):
        items = [_canonical(v) for v in value]
        return sorted(items, key=lambda x: json.dumps(x, sort_keys=True))
    return value


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(_canonical(value), sort_keys=True).encode()).hexdigest()[:16]


_MEMO: dict[tuple[str, int], tuple[Any, Any]] = {}


def _memo(kind: str, key_obj: Any, fn) -> Any:
    """Results for stored objects, which are never mutated: keyed by identity (the object kept alive)."""
    k = (kind, id(key_obj))
    hit = _MEMO.get(k)
    if hit is not None and hit[0] is key_obj:
        return hit[1]
    if len(_MEMO) > 10_000:
        _MEMO.clear()
    value = fn()
    _MEMO[k] = (key_obj, value)
    return value


def nodepool_hash(nodepool: Mapping, memo: bool = False) -> str:
    """The template hash. ``memo``: the NodePool is a stored object that is never mutated, so the result
    may be remembered by the template's identity."""
    template = (nodepool.get("spec") or {}).get("template") or {}
    if not memo:
        return _nodepool_hash(template)
    return _memo("nodepool-hash", template, lambda: _nodepool_hash(template))


def _nodepool_hash(template: Mapping) -> str:
    meta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    return _digest({
        "labels": meta.get("labels"),
        "annotations": meta.get("annotations"),
        "taints": spec.get("taints"),
        "startupTaints": spec.get("startupTaints"),
        "nodeClassRef": spec.get("nodeClassRef"),
        # durations by value: "1h" and "60m" are the same template
        "terminationGracePeriod": _duration(spec.get("terminationGracePeriod")),
        "expireAfter": _duration(spec.get("expireAfter")),
    })


def _duration(v: Any) -> Any:
    if v in (None, "Never"):
        return v
    try:
        return res.parse_duration(v)
    except ValueError:
        return v


def nodeclass_hash(nodeclass: Mapping | None, memo: bool = False) -> str:
    """Hash of the NodeClass fields whose change drifts nodes ("" when the provider never reports drift)."""
    if not nodeclass:
        return ""
    kind = str(nodeclass.get("kind"))
    if kind == "KWOKNodeClass":
        return ""  # upstream's kwok provider reports no NodeClass drift
    full = nodeclass.get("spec") or {}

    def compute() -> str:
        ignored = _NODECLASS_IGNORED.get(kind, set())
        spec = {k: v for k, v in full.items() if k not in ignored}
        if kind == "EC2NodeClass":
            spec["resolvedAMIFamily"] = _ami_family(full)
        return _digest(spec)

    return _memo(f"nodeclass-hash/{kind}", full, compute) if memo else compute()


def _ami_family(spec: Mapping) -> str | None:
    """The AMI family an EC2NodeClass resolves to: amiFamily, else the alias' family."""
    if spec.get("amiFamily"):
        return str(spec["amiFamily"]).lower()
    for term in spec.get("amiSelectorTerms") or ():
        alias = term.get("alias") if isinstance(term, Mapping) else None
        if alias:
            return str(alias).split("@")[0].lower()
    return None


def _drift_requirements(nodepool: Mapping) -> Requirements:
    spec = ((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}
    return Requirements.from_node_selector(spec.get("requirements") or ())


def requirements_drifted(nodepool: Mapping, node_labels: Mapping[str, str], memo: bool = False) -> bool:
    """Are the NodeClaim's labels no longer strictly compatible with the NodePool's
    ``spec.template.spec.requirements``? (The template's labels are static drift, through the hash.)

    Strict compatibility, as upstream: a requirement on a key the NodeClaim has no label for drifts it
    unless the requirement is NotIn or DoesNotExist; the rest must intersect the labels."""
    if not memo:
        return _requirements_drifted(_drift_requirements(nodepool), node_labels)
    reqs, sig = _memo("nodepool-drift-requirements", nodepool, lambda: _drift_requirements_signed(nodepool))
    # the answer for requirements of this content and the same labels, remembered (a controller asks it of every
    # NodeClaim on every change; a NodePool's status updates leave its requirements, and labels rarely change)
    key = (sig, tuple(node_labels.items()))
    try:
        hit = _LABELS_DRIFTED.get(key)
    except TypeError:  # a label value that is not a string: asked afresh
        return _requirements_drifted(reqs, node_labels)
    if hit is not None:
        return hit
    out = _requirements_drifted(reqs, node_labels)
    if len(_LABELS_DRIFTED) >= _LABELS_DRIFTED_MAX:
        _LABELS_DRIFTED.clear()
    _LABELS_DRIFTED[key] = out
    return out


_LABELS_DRIFTED: dict[tuple, bool] = {}  # (the requirements' signature, the labels) -> drifted
_LABELS_DRIFTED_MAX = 20_000


def _drift_requirements_signed(nodepool: Mapping) -> tuple[Requirements, tuple]:
    reqs = _drift_requirements(nodepool)
    return reqs, tuple(r.signature() for r in reqs)


def _requirements_drifted(reqs: Requirements, node_labels: Mapping[str, str]) -> bool:
    for r in reqs:
        if r.key not in node_labels and not r.allows_absent():
            return True
    return Requirements.from_labels(node_labels).intersects(reqs) is not None


def drift_reason(nodepool: Mapping, nodeclass: Mapping | None, claim_annotations: Mapping[str, str],
                 node_labels: Mapping[str, str], memo: bool = False) -> str | None:
    """Why this NodeClaim is drifted, or None (``memo``: see :func:`nodepool_hash`)."""
    stamped = claim_annotations.get(NODEPOOL_HASH)
    if stamped is not None and claim_annotations.get(NODEPOOL_HASH_VERSION) == HASH_VERSION:
        if stamped != nodepool_hash(nodepool, memo):
            return "NodePoolDrifted"
    if requirements_drifted(nodepool, node_labels, memo):
        return "RequirementsDrifted"
    stamped_class = claim_annotations.get(NODECLASS_HASH)
    if stamped_class is not None and nodeclass is not None and stamped_class != nodeclass_hash(nodeclass, memo):
        return "NodeClassDrift"
    return None


INSTANCE_TYPE_NOT_FOUND = "InstanceTypeNotFound"


def instance_type_not_found(types: list[InstanceType], node_labels: Mapping[str, str]) -> bool:
    """Upstream's InstanceTypeNotFound drift: the NodeClaim's instance type is no longer among its NodePool's
    instance types, or none of that type's offerings (available or not) matches the NodeClaim's zone and capacity
    type. A ``reserved`` NodeClaim also matches ``on-demand`` offerings and any reservation (it may have been
    demoted to on-demand since, and a reservation that is gone is the provider's own drift)."""
    name = node_labels.get(LABEL_INSTANCE_TYPE)
    it = next((t for t in types if t.name == name), None) if name is not None else None
    if it is None:
        return True
    zone = node_labels.get(LABEL_ZONE)
    ct = node_labels.get(LABEL_CAPACITY_TYPE)
    allowed = None if ct is None else \
        ({CAPACITY_RESERVED, CAPACITY_ON_DEMAND} if ct == CAPACITY_RESERVED else {ct})
    return not any((zone is None or o.zone == zone) and (allowed is None or o.capacity_type in allowed)
                   for o in it.offerings)
