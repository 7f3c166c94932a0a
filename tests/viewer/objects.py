"""Small Kubernetes objects for the viewer's tests, as an API server would return them."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
T0 = 1767225600.0  # 2026-01-01T00:00:00Z


def ts(seconds: float) -> str:
    from karpy.kube.times import fmt_time

    return fmt_time(T0 + seconds)


def node(name: str, *, cpu: str = "4", pods: str = "110", labels: dict | None = None, ready: bool = True,
         created: float = 0, taints: list | None = None, unschedulable: bool = False, deleting: bool = False,
         annotations: dict | None = None, provider_id: str | None = None) -> dict:
    meta = {"name": name, "labels": {"kubernetes.io/arch": "amd64", **(labels or {})},
            "annotations": dict(annotations or {}), "creationTimestamp": ts(created), "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = ts(created + 1)
    spec: dict = {"taints": list(taints or [])}
    if unschedulable:
        spec["unschedulable"] = True
    if provider_id:
        spec["providerID"] = provider_id
    return {"kind": "Node", "metadata": meta, "spec": spec,
            "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": pods},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                       "lastTransitionTime": ts(created + 30)}]}}


def claim(name: str, *, node_name: str | None = None, labels: dict | None = None, annotations: dict | None = None,
          conditions: list | None = None, created: float = 0, deleting: bool = False, cpu: str = "4") -> dict:
    meta = {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {}),
            "creationTimestamp": ts(created)}
    if deleting:
        meta["deletionTimestamp"] = ts(created + 5)
    status: dict = {"conditions": list(conditions or []), "allocatable": {"cpu": cpu, "pods": "110"}}
    if node_name:
        status["nodeName"] = node_name
    return {"kind": "NodeClaim", "metadata": meta, "spec": {}, "status": status}


def pod(name: str, node_name: str | None = None, *, cpu: str = "1", ns: str = "default", phase: str | None = None,
        spec: dict | None = None, daemon: bool = False, deleting: bool = False, owner: str | None = "ReplicaSet/web"):
    meta: dict = {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "creationTimestamp": ts(0)}
    if daemon:
        meta["ownerReferences"] = [{"kind": "DaemonSet", "name": "agent", "controller": True}]
    elif owner:
        kind, _, oname = owner.partition("/")
        meta["ownerReferences"] = [{"kind": kind, "name": oname, "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = ts(10)
    s = spec if spec is not None else {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    s = dict(s)
    if node_name:
        s["nodeName"] = node_name
    return {"kind": "Pod", "metadata": meta, "spec": s,
            "status": {"phase": phase or ("Running" if node_name else "Pending")}}


def nodepool(name: str, budgets: list | None = None, limits: dict | None = None, nodes: int | None = None) -> dict:
    np = {"kind": "NodePool", "metadata": {"name": name},
          "spec": {"disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized"}}}
    if budgets is not None:
        np["spec"]["disruption"]["budgets"] = budgets
    if limits:
        np["spec"]["limits"] = limits
    if nodes is not None:
        np["status"] = {"nodes": nodes}
    return np


def event(reason: str, pod_name: str, message: str, at: float, component: str = "karpenter", ns: str = "default"):
    return {"kind": "Event", "metadata": {"name": f"{pod_name}.{reason}.{at}", "namespace": ns},
            "involvedObject": {"kind": "Pod", "name": pod_name, "namespace": ns}, "reason": reason,
            "message": message, "source": {"component": component}, "lastTimestamp": ts(at)}
