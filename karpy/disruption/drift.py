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

from ..scheduling.requirements import Requirements
from ..provisioning.templates import nodepool_requirements

NODEPOOL_HASH = "karpenter.sh/nodepool-hash"
NODEPOOL_HASH_VERSION = "karpenter.sh/nodepool-hash-version"
HASH_VERSION = "v3"
NODECLASS_HASH = "karpy.dev/nodeclass-hash"

# NodeClass spec fields that do not drift nodes when they change (they are resolved
# dynamically, or are only tags), per provider.
_NODECLASS_IGNORED = {
    "AKSNodeClass": {"tags"},
    "EC2NodeClass": {"subnetSelectorTerms", "securityGroupSelectorTerms", "capacityReservationSelectorTerms",
                     "amiSelectorTerms", "amiFamily", "ipPrefixCount", "tags"},
    "KWOKNodeClass": set(),
}


def _canonical(value: Any) -> Any:
    """Zero values dropped, lists as sets (order-insensitive), maps sorted."""
    if isinstance(value, Mapping):
        out = {k: _canonical(v) for k, v in value.items()}
        return {k: v for k, v in sorted(out.items()) if v not in (None, "", [], {}, 0, False)}
    if isinstance(value, (list, tuple)):
        items = [_canonical(v) for v in value]
        return sorted(items, key=lambda x: json.dumps(x, sort_keys=True))
    return value


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(_canonical(value), sort_keys=True).encode()).hexdigest()[:16]


def nodepool_hash(nodepool: Mapping) -> str:
    template = (nodepool.get("spec") or {}).get("template") or {}
    meta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    return _digest({
        "labels": meta.get("labels"),
        "annotations": meta.get("annotations"),
        "taints": spec.get("taints"),
        "startupTaints": spec.get("startupTaints"),
        "nodeClassRef": spec.get("nodeClassRef"),
        "terminationGracePeriod": spec.get("terminationGracePeriod"),
        "expireAfter": spec.get("expireAfter"),
    })


def nodeclass_hash(nodeclass: Mapping | None) -> str:
    if not nodeclass:
        return ""
    ignored = _NODECLASS_IGNORED.get(str(nodeclass.get("kind")), set())
    spec = {k: v for k, v in (nodeclass.get("spec") or {}).items() if k not in ignored}
    return _digest(spec)


def requirements_drifted(nodepool: Mapping, node_labels: Mapping[str, str]) -> bool:
    """Do the node's labels still satisfy every NodePool requirement?"""
    reqs = nodepool_requirements(nodepool)
    # Keys the node has no label for are not judged: a NodeClaim only carries labels for
    # requirements that settled on one value.
    return Requirements.from_labels(node_labels).intersects(reqs) is not None


def drift_reason(nodepool: Mapping, nodeclass: Mapping | None, claim_annotations: Mapping[str, str],
                 node_labels: Mapping[str, str]) -> str | None:
    """Why this NodeClaim is drifted, or None."""
    stamped = claim_annotations.get(NODEPOOL_HASH)
    if stamped is not None and claim_annotations.get(NODEPOOL_HASH_VERSION) == HASH_VERSION:
        if stamped != nodepool_hash(nodepool):
            return "NodePoolDrifted"
    if requirements_drifted(nodepool, node_labels):
        return "RequirementsDrifted"
    stamped_class = claim_annotations.get(NODECLASS_HASH)
    if stamped_class is not None and nodeclass is not None and stamped_class != nodeclass_hash(nodeclass):
        return "NodeClassDrift"
    return None
