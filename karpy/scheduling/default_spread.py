"""Cluster-level default topology spread constraints (``schedulerConfig.podTopologySpread.defaultConstraints``).

kube-scheduler's PodTopologySpread plugin applies its configured default constraints to a pod that declares no
``topologySpreadConstraints`` of its own, with a label selector it deduces per pod (``helper.DefaultSelector``):
the selectors of the Services that select the pod, plus the selector of the pod's controller when that is a
ReplicationController, ReplicaSet or StatefulSet. Upstream Karpenter (``DefaultTopologySpreadInjector``) deduces the
same selector so that it counts the same pods:

* every Service of the pod's namespace whose (equality) selector matches the pod's labels contributes its selector
  as ``matchLabels`` (a later Service's value wins on a shared key); a Service with no selector contributes nothing;
* a controlling ReplicationController's selector is merged into those ``matchLabels``, overwriting a shared key;
* a controlling ReplicaSet's or StatefulSet's selector is flattened into ``matchExpressions`` (each ``matchLabels``
  entry a single-value ``In``, its ``matchExpressions`` verbatim), ANDed with the Services' labels.

A pod for which nothing is deduced (no matching Service and no such controller, a non-controller owner reference
only, an owner that no longer exists, an owner with an empty selector) gets no default: an empty selector would count
every pod of the namespace. The Services are read from the API: the input's in ``karpy simulate``, the sandbox's,
a cluster's.

The defaults exist only in the compiled form of the pod the engine reads; the stored pod is never changed.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Iterable, Mapping

# the owner kinds whose selector kube-scheduler deduces a default selector from: (apiVersion, kind)
OWNER_KINDS = (("apps/v1", "ReplicaSet"), ("apps/v1", "StatefulSet"), ("v1", "ReplicationController"))

Lookup = Callable[[str, str, str], "Mapping[str, Any] | None"]  # (kind, namespace, name) -> the object, or None
Services = Callable[[str], "Iterable[Mapping[str, Any]]"]  # namespace -> its Services


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

    def __init__(self, constraints: list[Mapping[str, Any]], lookup: Lookup, services: Services | None = None):
        self.constraints = [dict(c) for c in constraints or ()]
        self.lookup = lookup
        self.services = services

    def _service_labels(self, ns: str, labels: Mapping[str, Any]) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.services is None:
            return out
        for svc in sorted(self.services(ns), key=lambda o: str((o.get("metadata") or {}).get("name") or "")):
            sel = (svc.get("spec") or {}).get("selector")
            if sel is None:
                continue  # a Service with no selector selects nothing (and contributes nothing)
            if all(labels.get(k) == v for k, v in sel.items()):
                out.update({str(k): str(v) for k, v in sel.items()})
        return out

    def selector(self, pod: Mapping[str, Any]) -> dict | None:
        """The selector kube-scheduler deduces for the pod, or None when none can be deduced."""
        meta = pod.get("metadata") or {}
        ns = str(meta.get("namespace") or "default")
        match_labels = self._service_labels(ns, meta.get("labels") or {})
        exprs: list[dict] = []
        ref = controller_ref(pod)
        if ref is not None and (ref.get("apiVersion"), ref.get("kind")) in OWNER_KINDS:
            owner = self.lookup(str(ref["kind"]), ns, str(ref.get("name") or ""))
            # (an owner that is gone, or not yet seen, contributes nothing, as upstream)
            sel = (owner.get("spec") or {}).get("selector") if owner is not None else None
            if ref["kind"] == "ReplicationController":
                match_labels.update({str(k): str(v) for k, v in (sel or {}).items()})
            else:
                exprs = requirements_from(sel)
        if not match_labels and not exprs:
            return None
        out: dict = {}
        if match_labels:
            out["matchLabels"] = match_labels
        if exprs:
            out["matchExpressions"] = exprs
        return out

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
