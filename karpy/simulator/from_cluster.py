"""``karpy simulate --from-cluster``: start a simulation from a live cluster's state.

The cluster is read through the same API port ``karpy controller`` uses
(:class:`karpy.kube.client.KubeClient`): NodePools, NodeClasses, NodeClaims,
Nodes, Pods, PodDisruptionBudgets, PriorityClasses, storage, and the workloads.
The simulation then starts from that state, the manifests given on the command
line are applied on top (a changed NodePool, a new Deployment), and it runs as
``karpy simulate`` does: "what would Karpenter do if I applied this?".

How the state is carried over:

* NodePools, NodeClasses, Nodes (with their status) and PDBs are copied as
  they are; NodeClaims with their status, and the instances behind them are
  handed to the simulated cloud (:func:`~karpy.cloudprovider.simulated.
  adopt_instances`), so Karpenter sees its nodes as launched, registered and
  initialized rather than launching them again.
* Workloads (Deployments, StatefulSets, DaemonSets, Jobs) are copied; their
  pods are stamped anew by the simulated workload controllers and placed by the
  kube-scheduler stand-in onto the copied Nodes (first fit; kube-scheduler's
  scoring is not modelled), so counts and shapes are the cluster's, exact
  placement may differ. ReplicaSets owned by a Deployment, and pods owned by
  any controller, are not copied for that reason; pods without a controller
  are copied with their node.
* Ages start at the simulation's start: a NodeClaim's ``expireAfter`` counts
  from there, not from its real creation time.
"""

from __future__ import annotations

from typing import Any

from ..kube import errors as E

# read in this order: what others refer to comes first
KINDS = ("Namespace", "PriorityClass", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
         "AKSNodeClass", "EC2NodeClass", "KWOKNodeClass", "NodePool", "Node", "NodeClaim",
         "PodDisruptionBudget", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "Pod")
SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                 "deletionGracePeriodSeconds", "managedFields", "ownerReferences", "selfLink")
WITH_STATUS = ("Node", "NodeClaim", "NodePool")


def read_cluster(api: Any) -> tuple[list[dict], list[str]]:
    """The objects to start from, and notes on what was left out (kinds the server does not serve)."""
    out: list[dict] = []
    notes: list[str] = []
    for kind in KINDS:
        try:
            objs, _ = api.list(kind)
        except (E.NotFound, E.Forbidden) as e:  # a CRD not installed, or RBAC without read access
            notes.append(f"{kind}: not read ({e.code} {e.reason})")
            continue
        for obj in objs:
            if _skip(kind, obj):
                continue
            out.append(_clean(kind, obj))
    return out, notes


def _controlled(obj: dict) -> bool:
    return any(r.get("controller") for r in (obj.get("metadata") or {}).get("ownerReferences") or ())


def _skip(kind: str, obj: dict) -> bool:
    meta = obj.get("metadata") or {}
    if meta.get("deletionTimestamp") and kind in ("Pod", "NodeClaim", "Node"):
        return True  # on its way out
    if kind in ("Pod", "ReplicaSet", "Job") and _controlled(obj):
        return True  # stamped anew by its controller in the simulated world
    if kind == "Pod" and (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return True
    if kind == "Namespace" and meta.get("name") in ("default", "kube-system", "kube-public", "kube-node-lease"):
        return True
    if kind == "PriorityClass" and str(meta.get("name", "")).startswith("system-"):
        return True
    return False


def _clean(kind: str, obj: dict) -> dict:
    out = {k: v for k, v in obj.items() if k != "status" or kind in WITH_STATUS}
    out["kind"] = kind
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in SERVER_FIELDS}
    ann = {k: v for k, v in (meta.get("annotations") or {}).items()
           if k != "kubectl.kubernetes.io/last-applied-configuration"}
    if ann:
        meta["annotations"] = ann
    else:
        meta.pop("annotations", None)
    out["metadata"] = meta
    return out


def seed(sim: Any, objects: list[dict]) -> None:
    """Create the cluster's objects in the simulation's API, statuses included, and give the simulated
    cloud the instances of the NodeClaims (before the simulation's own manifests are applied)."""
    from ..cloudprovider.simulated import adopt_instances

    api = sim.api
    sim.seeded = objects
    for obj in objects:
        kind = obj["kind"]
        body = {k: v for k, v in obj.items() if k != "status"}
        try:
            created = api.create(body)
        except E.ApiError:
            continue  # e.g. a name the simulated world made already (a DaemonSet pod)
        if kind in WITH_STATUS and obj.get("status"):
            api.update({**created, "status": obj["status"]}, subresource="status")
    claims, _ = api.list("NodeClaim")
    nodes, _ = api.list("Node")
    adopt_instances(sim.provider, claims, nodes)
