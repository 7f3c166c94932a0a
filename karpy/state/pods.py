"""Facts about Pod objects that several controllers need, and compiling them for the engine."""

from __future__ import annotations

import copy
import sys
from typing import Any, Mapping

from ..disruption.state import PodState
from ..kube.times import parse_time
from ..scheduling.default_spread import DefaultSpread
from ..scheduling.pods import PodInfo, class_key, compile_pod
from ..scheduling.requirements import Requirements

CRITICAL_PRIORITY = {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}


# the last pod asked about: every watch of a pod change asks for the same pod's key in turn. One tuple,
# replaced whole (watch threads of a controller may ask at once: none may see half of another's entry)
_LAST_KEY: list[tuple[Any, Any, Any, str]] = [(None, None, None, "")]  # metadata, its namespace, its name, the key


def pod_key(pod: Mapping[str, Any]) -> str:
    """``namespace/name``; one string object per pod however often it is asked (interned: the cluster state, the
    kube-scheduler and the controllers each keep pods by key, a copy each otherwise)."""
    meta = pod.get("metadata") or {}
    ns, name = meta.get("namespace"), meta.get("name", "")
    last = _LAST_KEY[0]
    if meta is last[0] and ns is last[1] and name is last[2]:
        return last[3]
    key = sys.intern(f"{ns or 'default'}/{name}")
    _LAST_KEY[0] = (meta, ns, name, key)
    return key


def phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def node_name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return phase(pod) in ("Succeeded", "Failed")


def is_terminating(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def controller_of(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    for r in (pod.get("metadata") or {}).get("ownerReferences") or ():
        if r.get("controller"):
            return str(r.get("kind")), str(r.get("name"))
    return None


def owner_kind(pod: Mapping[str, Any]) -> str | None:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or ()
    for r in refs:
        if r.get("controller"):
            return str(r.get("kind"))
    return str(refs[0].get("kind")) if refs else None


def is_daemon(pod: Mapping[str, Any]) -> bool:
    return owner_kind(pod) == "DaemonSet"


def failed_to_schedule(pod: Mapping[str, Any]) -> bool:
    """kube-scheduler marked it ``PodScheduled=False, reason=Unschedulable``."""
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled":
            return c.get("status") == "False" and c.get("reason") == "Unschedulable"
    return False


def is_ready(pod: Mapping[str, Any]) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def start_time(pod: Mapping[str, Any]) -> float | None:
    return parse_time((pod.get("status") or {}).get("startTime"))


def is_provisionable(pod: Mapping[str, Any]) -> bool:
    """Upstream's IsProvisionable: unbound, not preempting, marked unschedulable by kube-scheduler,
    not a DaemonSet or static pod, not terminal or terminating."""
    if node_name(pod) or is_terminal(pod) or is_terminating(pod):
        return False
    if (pod.get("status") or {}).get("nominatedNodeName"):
        return False
    kind = owner_kind(pod)
    if kind in ("DaemonSet", "Node"):
        return False
    return failed_to_schedule(pod)


class PodCompiler:
    """Compiles pods for the engine once, and again only when what the engine reads changes.

    Pods stamped from one template share their spec's values (stored objects share
    unchanged subtrees), so the compiled form of the first pod of a template is reused
    for the rest, with the name and object swapped.
    """

    def __init__(self) -> None:
        self._by_uid: dict[str, tuple[tuple, PodInfo]] = {}
        self._templates: dict[tuple, tuple[Any, PodInfo]] = {}
        # schedulerConfig.podTopologySpread.defaultConstraints (karpy.scheduling.default_spread), when configured
        self.default_spread: DefaultSpread | None = None

    @staticmethod
    def _inputs(pod: Mapping[str, Any]) -> tuple:
        """What the engine reads of a pod, as one flat tuple of the objects themselves (labels, namespace,
        then each spec field but nodeName, key and value): equal when a later version shares them, which
        tuple comparison sees by identity before it compares any value. Kept per pod, so small: no
        per-field pairs or id integers."""
        spec = pod.get("spec") or {}
        meta = pod.get("metadata") or {}
        out: list[Any] = [meta.get("labels"), meta.get("namespace")]
        for k, v in spec.items():
            if k != "nodeName":
                out.append(k)
                out.append(v)
        return tuple(out)

    @staticmethod
    def _shape(inputs: tuple) -> tuple:
        """The same by identity, hashable: the key of the pods stamped from one template (sharing the
        objects of their spec). Keys and the namespace are strings, kept as they are."""
        return tuple(x if type(x) is str or x is None else id(x) for x in inputs)

    def compile(self, pod: Mapping[str, Any]) -> PodInfo:
        meta = pod.get("metadata") or {}
        uid = meta.get("uid") or pod_key(pod)
        inputs = self._inputs(pod)
        seen = pod
        defaulted = None
        if self.default_spread is not None:
            # the defaults (with the selector deduced from the pod's owner) are part of what the engine reads
            seen = self.default_spread.apply(pod)
            if seen is not pod:
                defaulted = repr((seen.get("spec") or {}).get("topologySpreadConstraints"))
                inputs += (defaulted,)
        hit = self._by_uid.get(uid)
        if hit is not None and hit[0] == inputs:
            info = hit[1]
            if info.obj is not pod:
                info.obj = pod  # type: ignore[assignment]
            return info
        spec = pod.get("spec") or {}
        tkey = self._shape(inputs)
        t = self._templates.get(tkey)
        if t is not None:
            info = copy.copy(t[1])
            info.name = str(meta.get("name", ""))
            info.obj = pod  # type: ignore[assignment]
            info.__dict__.pop("_label_key", None)
        else:
            info = compile_pod(seen, priority=int(spec.get("priority") or 0))
            info.obj = pod  # type: ignore[assignment]
            # keep the values the shape's ids refer to alive (the inputs hold them), so the ids stay unique
            if len(self._templates) > 100_000:
                self._templates.clear()
            self._templates[tkey] = (inputs, info)
        self._by_uid[uid] = (inputs, info)
        return info

    def forget(self, pod: Mapping[str, Any]) -> None:
        self._by_uid.pop((pod.get("metadata") or {}).get("uid") or pod_key(pod), None)


def with_volume_requirements(info: PodInfo, reqs: Requirements | None, usage: Mapping | None = None) -> PodInfo:
    """The pod with its volumes' zone requirements and, when given, their volume usage (a copy; ``info`` is
    shared)."""
    if reqs is None and usage is None:
        return info
    out = copy.copy(info)
    if reqs is not None:
        out.volume_requirements = reqs
        out.class_key = class_key(out)
        out.__dict__.pop("_label_key", None)
    out.volume_usage = usage
    return out


def pod_state(pod: Mapping[str, Any], info: PodInfo) -> PodState:
    meta = pod.get("metadata") or {}
    return PodState(
        info=info, phase=phase(pod), owner_kind=owner_kind(pod), annotations=meta.get("annotations") or {},
        start_time=start_time(pod), terminating=is_terminating(pod),
        priority_class=(pod.get("spec") or {}).get("priorityClassName"), ready=is_ready(pod),
    )
