"""Cluster-level default topology spread constraints (``schedulerConfig.podTopologySpread.defaultConstraints``).

kube-scheduler's PodTopologySpread plugin applies its configured default constraints to a pod that declares no
``topologySpreadConstraints`` of its own, with a label selector it deduces per pod (``helper.DefaultSelector``):
the selectors of the Services that select the pod, plus the selector of the pod's controller when that is a
ReplicationController, ReplicaSet or StatefulSet. Upstream Karpenter (``DefaultTopologySpreadInjector``) deduces the
same selector so that it counts the same pods. karpy has no Services or ReplicationControllers, so the selector is the
controlling ReplicaSet's or StatefulSet's selector, flattened into requirements (each ``matchLabels`` entry becomes a
single-value ``In``; ``matchExpressions`` are carried verbatim). A pod with no such controller, a non-controller owner
reference only, an owner that no longer exists, or an owner with an empty selector gets no default: an empty selector
would count every pod of the namespace.

The defaults exist only in the compiled form of the pod the engine reads; the stored pod is never changed.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Mapping

# the owner kinds (apps/v1) whose selector kube-scheduler deduces a default selector from (ReplicationController too,
# which is not a karpy kind)
OWNER_KINDS = ("ReplicaSet", "StatefulSet")

Lookup = Callable[[str, str, str], "Mapping[str, Any] | None"]  # (kind, namespace, name) -> the object, or None


def controller_ref(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's ownerReference with ``controller: true`` (metav1.GetControllerOf), if any."""
    for r in (pod.get("metadata") or {}).get("ownerReferences") or ():
        if r.get("controller") is True:
            return r
    return None


def requirements_from(selector: Mapping[str, Any] | None) -> list[dict]:
    """A LabelSelector flattened into requirements: matchLabels as single-value ``In``, then matchExpressions."""
    if not selector:
        return []
    out = [{"key": str(k), "operator": "In", "values": [str(v)]}
           for k, v in (selector.get("matchLabels") or {}).items()]
    out += [copy.deepcopy(dict(e)) for e in selector.get("matchExpressions") or ()]
    return out


class DefaultSpread:
    """The configured default constraints, and the per-pod selector they are stamped with."""

    def __init__(self, constraints: list[Mapping[str, Any]], lookup: Lookup):
        self.constraints = [dict(c) for c in constraints or ()]
        self.lookup = lookup

    def selector(self, pod: Mapping[str, Any]) -> dict | None:
        """The selector kube-scheduler deduces for the pod, or None when none can be deduced."""
        ref = controller_ref(pod)
        if ref is None or ref.get("kind") not in OWNER_KINDS or ref.get("apiVersion") != "apps/v1":
            return None
        ns = str((pod.get("metadata") or {}).get("namespace") or "default")
        owner = self.lookup(str(ref["kind"]), ns, str(ref.get("name") or ""))
        if owner is None:
            return None  # the owner is gone (or not yet seen): proceed without it, as upstream does
        reqs = requirements_from((owner.get("spec") or {}).get("selector"))
        if not reqs:
            return None
        return {"matchExpressions": reqs}

    def constraints_for(self, pod: Mapping[str, Any]) -> list[dict] | None:
        """The constraints to apply to the pod, or None when it keeps its own (or gets none)."""
        if not self.constraints:
            return None
        if (pod.get("spec") or {}).get("topologySpreadConstraints"):
            return None  # all or nothing: a pod's own constraints take precedence over the defaults
        sel = self.selector(pod)
        if sel is None:
            return None
        return [{**copy.deepcopy(c), "labelSelector": copy.deepcopy(sel)} for c in self.constraints]

    def apply(self, pod: Mapping[str, Any]) -> Mapping[str, Any]:
        """The pod as the scheduler sees it: a shallow copy carrying the defaults, or the pod itself."""
        cons = self.constraints_for(pod)
        if cons is None:
            return pod
        return {**pod, "spec": {**(pod.get("spec") or {}), "topologySpreadConstraints": cons}}
