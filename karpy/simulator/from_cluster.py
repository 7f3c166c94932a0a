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
* Workloads (Deployments, StatefulSets, DaemonSets, Jobs) are copied, and so
  are their pods, where they are: a bound pod stays on its node, a pending pod
  stays pending. The simulated workload controllers adopt them (a Deployment's
  pods belong to the ReplicaSet karpy's deployment controller makes for its
  template), so nothing is stamped again unless the manifests on top change a
  template or a replica count. Cordoned Nodes stay cordoned; NodeClaims and
  Nodes being deleted stay being deleted (Karpenter's termination goes on,
  through PodDisruptionBudgets). Pods already terminating or finished are left
  out. The result's ``fromCluster`` block gives the change against the present:
  NodeClaims added and removed, cost per hour before and after.
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


OWNER = "karpy.dev/seed-owner"  # on a copied pod: "Kind/name" of the workload that keeps it (read, then dropped)
DELETING = "karpy.dev/seed-deleting"  # on a copied NodeClaim or Node that the cluster is deleting


def read_cluster(api: Any) -> tuple[list[dict], list[str], float | None]:
    """The objects to start from, notes on what was left out (kinds the server does not serve), and the
    latest time the objects carry (the cluster's present, as far as its objects tell)."""
    out: list[dict] = []
    notes: list[str] = []
    latest: float | None = None
    deployment_of: dict[tuple[str, str], str] = {}  # (namespace, ReplicaSet) -> the Deployment owning it
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
            owner = _controller(obj)
            if kind == "ReplicaSet" and owner is not None and owner[0] == "Deployment":
                deployment_of[(_ns(obj), obj["metadata"]["name"])] = owner[1]
            if _skip(kind, obj):
                continue
            clean = _clean(kind, obj)
            if kind == "Pod" and owner is not None:
                okind, oname = owner
                if okind == "ReplicaSet" and (_ns(obj), oname) in deployment_of:
                    okind, oname = "Deployment", deployment_of[(_ns(obj), oname)]
                _annotate(clean, OWNER, f"{okind}/{oname}")
            if kind in ("NodeClaim", "Node") and (obj.get("metadata") or {}).get("deletionTimestamp"):
                _annotate(clean, DELETING, "true")
            out.append(clean)
    return out, notes, latest


def _ns(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("namespace") or "default"


def _controller(obj: dict) -> tuple[str, str] | None:
    for r in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if r.get("controller"):
            return str(r.get("kind") or ""), str(r.get("name") or "")
    return None


def _annotate(obj: dict, key: str, value: str) -> None:
    meta = obj.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), key: value}


def _take(obj: dict, key: str) -> str | None:
    """Remove and return one of the seed's own annotations."""
    ann = dict((obj.get("metadata") or {}).get("annotations") or {})
    value = ann.pop(key, None)
    if value is not None:
        obj["metadata"] = {**obj["metadata"], "annotations": ann}
        if not ann:
            obj["metadata"].pop("annotations")
    return value


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


def _skip(kind: str, obj: dict) -> bool:
    meta = obj.get("metadata") or {}
    if meta.get("deletionTimestamp") and kind == "Pod":
        return True  # on its way out
    owner = _controller(obj)
    if kind in ("ReplicaSet", "Job") and owner is not None:
        return True  # made anew by its own controller in the simulated world (its pods are kept)
    if kind == "Pod" and owner is not None and owner[0] not in ("ReplicaSet", "StatefulSet", "DaemonSet", "Job"):
        return True  # a controller karpy does not simulate (an operator's): nothing would keep the pod
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

    from .workloads import desired_replicas, owner_ref, replicaset_for, replicaset_name

    api = sim.api
    sim.seeded = objects
    owners: dict[tuple[str, str, str], dict] = {}  # (kind, namespace, name) -> the object pods hang from
    deleting: list[tuple[str, str]] = []
    for obj in objects:
        kind = obj["kind"]
        body = {k: v for k, v in obj.items() if k != "status"}
        body["metadata"] = dict(body.get("metadata") or {})
        owner = _take(body, OWNER) if kind == "Pod" else None
        if _take(body, DELETING):
            deleting.append((kind, body["metadata"].get("name", "")))
        if owner is not None:
            okind, _, oname = owner.partition("/")
            parent = owners.get((okind, _ns(body), oname))
            if parent is None:
                continue  # its workload was not copied: nothing in the simulation would keep it
            body["metadata"]["ownerReferences"] = [owner_ref(parent)]
            if okind == "Deployment":  # the pod now belongs to karpy's ReplicaSet for the template
                body["metadata"]["labels"] = {**(body["metadata"].get("labels") or {}),
                                              "pod-template-hash": parent["metadata"]["labels"]["pod-template-hash"]}
        try:
            created = api.create(body)
        except E.ApiError:
            continue  # e.g. a name the simulated world made already
        if kind in WITH_STATUS and obj.get("status"):
            api.update({**created, "status": obj["status"]}, subresource="status")
        if kind in ("ReplicaSet", "StatefulSet", "DaemonSet", "Job"):
            owners[(kind, _ns(created), created["metadata"]["name"])] = created
        elif kind == "Deployment":
            rs_name, _ = replicaset_name(created)
            try:
                rs = api.create(replicaset_for(created, desired_replicas(created)))
            except E.AlreadyExists:
                rs = api.get("ReplicaSet", rs_name, _ns(created))
            owners[("Deployment", _ns(created), created["metadata"]["name"])] = rs
    claims, _ = api.list("NodeClaim")
    nodes, _ = api.list("Node")
    adopt_instances(sim.provider, claims, nodes)
    for kind, name in deleting:  # the cluster was deleting them: Karpenter's termination carries on
        try:
            api.delete(kind, name)
        except E.NotFound:
            pass


def delta(sim: Any) -> dict | None:
    """The change against the cluster's present: NodeClaims added and removed, cost per hour before
    (the copied NodeClaims that were running) and after (at the end)."""
    if not sim.seeded:
        return None
    before = {o["metadata"]["name"] for o in sim.seeded if o["kind"] == "NodeClaim"}
    h = sim.history
    cost_before = sum(life.price or 0.0 for name, life in h.claims.items() if name in before and life.launched)
    return {
        "nodeClaimsAdded": [name for name, life in h.claims.items() if name not in before and life.launched],
        "nodeClaimsRemoved": [name for name, life in h.claims.items() if name in before and life.deleted is not None],
        "costPerHourBefore": cost_before,
        "costPerHourAfter": h.cost,
    }
