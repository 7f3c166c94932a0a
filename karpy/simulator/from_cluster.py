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
* The simulation starts at the cluster's present: the latest time its objects
  carry (creation, condition transitions), or the caller's clock if later.
  Ages start there: a NodeClaim's ``expireAfter`` counts from the start, not
  from its real creation time.
"""

from __future__ import annotations

from typing import Any

from ..kube import errors as E
from ..kube.times import fmt_time, parse_time

# read in this order: what others refer to comes first
KINDS = ("Namespace", "PriorityClass", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
         "AKSNodeClass", "EC2NodeClass", "KWOKNodeClass", "NodePool", "Node", "NodeClaim",
         "PodDisruptionBudget", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "Pod")
SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                 "deletionGracePeriodSeconds", "managedFields", "ownerReferences", "selfLink")
WITH_STATUS = ("Node", "NodeClaim", "NodePool")


def read_cluster(api: Any) -> tuple[list[dict], list[str], float | None]:
    """The objects to start from, notes on what was left out (kinds the server does not serve), and the
    latest time the objects carry (the cluster's present, as far as its objects tell)."""
    out: list[dict] = []
    notes: list[str] = []
    latest: float | None = None
    for kind in KINDS:
        try:
            objs, _ = api.list(kind)
        except (E.NotFound, E.Forbidden) as e:  # a CRD not installed, or RBAC without read access
            notes.append(f"{kind}: not read ({e.code} {e.reason})")
            continue
        for obj in objs:
            t = _latest_time(obj)
            if t is not None and (latest is None or t > latest):
                latest = t
            if _skip(kind, obj):
                continue
            out.append(_clean(kind, obj))
    return out, notes, latest


def _latest_time(obj: dict) -> float | None:
    times = [(obj.get("metadata") or {}).get("creationTimestamp")]
    times += [c.get("lastTransitionTime") for c in (obj.get("status") or {}).get("conditions") or ()
              if isinstance(c, dict)]
    parsed = [parse_time(t) for t in times if isinstance(t, str)]
    parsed = [t for t in parsed if t is not None]
    return max(parsed) if parsed else None


def starting_at(documents: list[Any], start: float) -> list[Any]:
    """The documents with the Scenario's ``spec.start`` set to ``start`` (a Scenario added when there is
    none); a Scenario that names its own start keeps it."""
    out = []
    found = False
    for d in documents:
        obj = d.obj if hasattr(d, "obj") else d
        if obj.get("kind") == "Scenario":
            found = True
            spec = dict(obj.get("spec") or {})
            if not spec.get("start"):
                spec["start"] = fmt_time(start)
                obj = {**obj, "spec": spec}
            out.append(obj)
        else:
            out.append(d)
    if not found:
        out.append({"apiVersion": "karpy.dev/v1alpha1", "kind": "Scenario", "metadata": {"name": "from-cluster"},
                    "spec": {"start": fmt_time(start)}})
    return out


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
