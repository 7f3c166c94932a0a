"""The status kube-controller-manager and kubelets write, which ``karpy simulate`` does without.

A simulation reads pods and nodes, never the status of their owners, so the
simulated world does not keep it; clients of ``karpy sandbox`` do read it
(``kubectl get deployments`` READY, ``kubectl wait --for=condition=Available``,
``kubectl rollout status``). This controller, registered only in the sandbox,
keeps:

* ReplicaSets, StatefulSets, DaemonSets and Deployments: replica counts
  (``replicas``, ``readyReplicas``, ``availableReplicas``, ``updatedReplicas``
  ..., ``observedGeneration``) from the pods they own, and a Deployment's
  ``Available`` and ``Progressing`` conditions (available once at most
  ``maxUnavailable`` replicas are missing, as the deployment controller says)
  and ``deployment.kubernetes.io/revision`` annotations (on its ReplicaSets
  too, with their desired and maximum replicas);
* Jobs: ``active``, ``ready`` and ``startTime`` (the world's Job controller
  writes ``succeeded`` and completion);
* Nodes: ``status.nodeInfo`` (kubelet version, OS, architecture) and an
  ``InternalIP`` address the first time they are seen without one, and the
  ``node.kubernetes.io/not-ready`` taint taken off once they are Ready.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from ..kube import errors as E
from ..kube.port import DELETED
from ..kube.times import fmt_time
from ..runtime.manager import Manager, deleting
from ..state import pods as P
from .admission import NOT_READY
from .discovery import VERSION_INFO

OWNER_KINDS = ("ReplicaSet", "StatefulSet", "DaemonSet", "Job", "Deployment")


class WorkloadStatus:
    name = "sandbox.status"

    def __init__(self, mgr: Manager, api: Any, clock: Any):
        self.mgr = mgr
        self.api = api
        self.clock = clock
        self.pods_of: dict[str, set[tuple[str, str]]] = {}  # owner uid -> (namespace, pod name)
        self.owner_of: dict[tuple[str, str], str] = {}
        self.by_uid: dict[str, tuple[str, str, str]] = {}  # uid -> (kind, namespace, name)

    def setup(self, mgr: Manager) -> None:
        mgr.watch("Pod", self._on_pod)
        mgr.watch("Node", self._on_node)
        for k in OWNER_KINDS:
            mgr.watch(k, self._on_owner)

    # --- events ---------------------------------------------------------------------------------------
    def _on_owner(self, etype: str, obj: dict, old: dict | None) -> None:
        m = obj["metadata"]
        key = (obj["kind"], m.get("namespace", "default"), m["name"])
        if etype == DELETED:
            self.by_uid.pop(m.get("uid", ""), None)
            self.pods_of.pop(m.get("uid", ""), None)
        else:
            self.by_uid[m.get("uid", "")] = key
            if old is None or (obj.get("spec") is not old.get("spec")) or _gen(obj) != _gen(old):
                self.mgr.enqueue(self, key)
        self._enqueue_owner_of(obj)

    def _on_pod(self, etype: str, obj: dict, old: dict | None) -> None:
        m = obj["metadata"]
        pk = (m.get("namespace", "default"), m["name"])
        prev = self.owner_of.pop(pk, None)
        if prev is not None:
            self.pods_of.get(prev, set()).discard(pk)
            self._enqueue_uid(prev)
        if etype == DELETED:
            return
        for r in m.get("ownerReferences") or ():
            if r.get("controller") and r.get("kind") in OWNER_KINDS:
                uid = r.get("uid", "")
                self.owner_of[pk] = uid
                self.pods_of.setdefault(uid, set()).add(pk)
                self._enqueue_uid(uid)
                break

    def _enqueue_uid(self, uid: str) -> None:
        key = self.by_uid.get(uid)
        if key is not None:
            self.mgr.enqueue(self, key)

    def _enqueue_owner_of(self, obj: dict) -> None:
        for r in obj["metadata"].get("ownerReferences") or ():
            if r.get("controller"):
                self._enqueue_uid(r.get("uid", ""))

    def _on_node(self, etype: str, obj: dict, old: dict | None) -> None:
        if etype != DELETED and (not (obj.get("status") or {}).get("nodeInfo") or _ready_but_tainted(obj)):
            self.mgr.enqueue(self, ("Node", "", obj["metadata"]["name"]))

    # --- reconcile ------------------------------------------------------------------------------------
    def reconcile(self, key: tuple[str, str, str]) -> float | None:
        kind, ns, name = key
        obj = self.mgr.get(kind, name, ns)
        if obj is None or deleting(obj):
            return None
        if kind == "Node":
            self._node(obj)
            return None
        pods = self._pods(obj)
        st = dict(obj.get("status") or {})
        want = {"ReplicaSet": self._rs, "StatefulSet": self._sts, "DaemonSet": self._ds, "Job": self._job,
                "Deployment": self._deployment}[kind](obj, pods, st)
        if want != (obj.get("status") or {}):
            try:
                self.api.patch(kind, name, {"status": want}, ns, subresource="status")
            except E.NotFound:
                pass
        return None

    def _pods(self, owner: dict) -> list[dict]:
        out = []
        for ns, name in self.pods_of.get(owner["metadata"].get("uid", ""), ()):
            p = self.mgr.get("Pod", name, ns)
            if p is not None and not deleting(p):
                out.append(p)
        return out

    def _rs(self, rs: dict, pods: list[dict], st: dict) -> dict:
        live = [p for p in pods if not P.is_terminal(p)]
        ready = sum(1 for p in live if P.is_ready(p))
        st.update(replicas=len(live), fullyLabeledReplicas=len(live), readyReplicas=ready, availableReplicas=ready,
                  observedGeneration=_gen(rs))
        return _drop_zero(st, ("readyReplicas", "availableReplicas"))

    def _sts(self, sts: dict, pods: list[dict], st: dict) -> dict:
        live = [p for p in pods if not P.is_terminal(p)]
        ready = sum(1 for p in live if P.is_ready(p))
        st.update(replicas=len(live), readyReplicas=ready, currentReplicas=len(live), updatedReplicas=len(live),
                  availableReplicas=ready, observedGeneration=_gen(sts), collisionCount=st.get("collisionCount", 0))
        return _drop_zero(st, ("readyReplicas",))

    def _ds(self, ds: dict, pods: list[dict], st: dict) -> dict:
        live = [p for p in pods if not P.is_terminal(p)]
        scheduled = [p for p in live if P.node_name(p)]
        ready = sum(1 for p in scheduled if P.is_ready(p))
        st.update(desiredNumberScheduled=len(live), currentNumberScheduled=len(scheduled), numberReady=ready,
                  numberAvailable=ready, updatedNumberScheduled=len(scheduled), numberMisscheduled=0,
                  observedGeneration=_gen(ds))
        if len(live) - ready > 0:
            st["numberUnavailable"] = len(live) - ready
        else:
            st.pop("numberUnavailable", None)
        return _drop_zero(st, ("numberAvailable",))

    def _job(self, job: dict, pods: list[dict], st: dict) -> dict:
        active = [p for p in pods if not P.is_terminal(p)]
        st["active"] = len(active)
        st["ready"] = sum(1 for p in active if P.is_ready(p))
        suspended = (job.get("spec") or {}).get("suspend") is True
        conds = [c for c in st.get("conditions") or () if c.get("type") != "Suspended"]
        prev = next((c for c in st.get("conditions") or () if c.get("type") == "Suspended"), None)
        if suspended:
            now = fmt_time(self.clock.now())
            conds.append(prev if prev is not None and prev.get("status") == "True" else
                         {"type": "Suspended", "status": "True", "lastProbeTime": now, "lastTransitionTime": now,
                          "reason": "JobSuspended", "message": "Job suspended"})
            st.pop("startTime", None)
        elif prev is not None:
            now = fmt_time(self.clock.now())
            conds.append({"type": "Suspended", "status": "False", "lastProbeTime": now, "lastTransitionTime": now,
                          "reason": "JobResumed", "message": "Job resumed"})
        if conds:
            st["conditions"] = conds
        else:
            st.pop("conditions", None)
        if not st.get("startTime") and not suspended:
            st["startTime"] = fmt_time(self.clock.now())
        if not st["active"]:
            st.pop("active")
        return st

    def _deployment(self, d: dict, pods: list[dict], st: dict) -> dict:
        spec = d.get("spec") or {}
        desired = int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)
        from ..kube.names import template_hash

        h = template_hash(spec.get("template"))
        total = ready = updated = 0
        owned = []
        for uid in list(self.by_uid):
            kind, ns, name = self.by_uid[uid]
            if kind != "ReplicaSet" or ns != d["metadata"].get("namespace", "default"):
                continue
            rs = self.mgr.get("ReplicaSet", name, ns)
            if rs is None or not any(r.get("uid") == d["metadata"].get("uid") and r.get("controller")
                                     for r in rs["metadata"].get("ownerReferences") or ()):
                continue
            owned.append(rs)
        self._revisions(d, owned, h, desired)
        for rs in owned:
            rpods = [p for p in self._pods(rs) if not P.is_terminal(p)]
            n, r = len(rpods), sum(1 for p in rpods if P.is_ready(p))
            total += n
            ready += r
            if (rs["metadata"].get("labels") or {}).get("pod-template-hash") == h:
                updated += n
        max_unavailable = _max_unavailable(spec, desired)
        now = fmt_time(self.clock.now())
        available = ready >= desired - max_unavailable
        conds = {c.get("type"): c for c in st.get("conditions") or ()}
        _set_cond(conds, "Available", "True" if available else "False",
                  "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                  "Deployment has minimum availability." if available else
                  "Deployment does not have minimum availability.", now)
        progressing_done = updated == desired and ready >= desired
        _set_cond(conds, "Progressing", "True", "NewReplicaSetAvailable" if progressing_done else "ReplicaSetUpdated",
                  f'ReplicaSet "{d["metadata"]["name"]}-{h}" ' +
                  ("has successfully progressed." if progressing_done else "is progressing."), now)
        st.update(replicas=total, updatedReplicas=updated, readyReplicas=ready, availableReplicas=ready,
                  observedGeneration=_gen(d), conditions=[conds[t] for t in ("Available", "Progressing")])
        if total - ready > 0:
            st["unavailableReplicas"] = total - ready
        else:
            st.pop("unavailableReplicas", None)
        return _drop_zero(st, ("readyReplicas", "availableReplicas", "updatedReplicas"))

    def _revisions(self, d: dict, owned: list[dict], h: str, desired: int) -> None:
        """The deployment controller's annotations: each ReplicaSet's revision (one more than the newest for a
        new one), the Deployment's (its current ReplicaSet's), and the replica counts of the current ReplicaSet."""
        def revision(o: dict) -> int:
            try:
                return int((o["metadata"].get("annotations") or {}).get(REVISION, "0"))
            except ValueError:
                return 0

        newest = max((revision(rs) for rs in owned), default=0)
        current = None
        for rs in sorted(owned, key=lambda o: o["metadata"].get("creationTimestamp") or ""):
            ann = dict(rs["metadata"].get("annotations") or {})
            is_current = (rs["metadata"].get("labels") or {}).get("pod-template-hash") == h
            want = dict(ann)
            if not revision(rs) or (is_current and revision(rs) < newest):
                newest += 1
                want[REVISION] = str(newest)
            if is_current:
                current = int(want[REVISION])
                want["deployment.kubernetes.io/desired-replicas"] = str(desired)
                want["deployment.kubernetes.io/max-replicas"] = str(desired + _max_surge(d.get("spec") or {}, desired))
            if want != ann:
                try:
                    self.api.patch("ReplicaSet", rs["metadata"]["name"], {"metadata": {"annotations": want}},
                                   rs["metadata"].get("namespace", "default"))
                except E.NotFound:
                    pass
        if current is not None and (d["metadata"].get("annotations") or {}).get(REVISION) != str(current):
            try:
                self.api.patch("Deployment", d["metadata"]["name"], {"metadata": {"annotations": {REVISION: str(current)}}},
                               d["metadata"].get("namespace", "default"))
            except E.NotFound:
                pass

    def _node(self, node: dict) -> None:
        name = node["metadata"]["name"]
        if _ready_but_tainted(node):
            # the node lifecycle controller takes the not-ready taint off a node that turned Ready
            taints = [t for t in (node.get("spec") or {}).get("taints") or () if t.get("key") != NOT_READY]
            try:
                node = self.api.patch("Node", name, {"spec": {"taints": taints or None}})
            except E.NotFound:
                return
        if (node.get("status") or {}).get("nodeInfo"):
            return
        labels = node["metadata"].get("labels") or {}
        info = {"kubeletVersion": VERSION_INFO["gitVersion"].split("-")[0], "kubeProxyVersion": "",
                "operatingSystem": labels.get("kubernetes.io/os", "linux"),
                "architecture": labels.get("kubernetes.io/arch", "amd64"),
                "osImage": "Ubuntu 22.04.5 LTS", "kernelVersion": "5.15.0-1079-azure",
                "containerRuntimeVersion": "containerd://1.7.27", "machineID": "", "systemUUID": "", "bootID": ""}
        st: dict[str, Any] = {"nodeInfo": info}
        if not (node.get("status") or {}).get("addresses"):
            d = hashlib.sha256(name.encode()).digest()
            st["addresses"] = [{"type": "InternalIP", "address": f"10.{d[0] % 224}.{d[1]}.{max(1, d[2] % 255)}"},
                               {"type": "Hostname", "address": name}]
        try:
            self.api.patch("Node", name, {"status": st}, subresource="status")
        except E.NotFound:
            pass


def _ready_but_tainted(node: dict) -> bool:
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in (node.get("status") or {}).get("conditions") or ())
    return ready and any(t.get("key") == NOT_READY and t.get("effect") == "NoSchedule"
                         for t in (node.get("spec") or {}).get("taints") or ())


def _gen(obj: dict | None) -> int:
    return int(((obj or {}).get("metadata") or {}).get("generation") or 1)


def _drop_zero(st: dict, keys: tuple[str, ...]) -> dict:
    """The API server omits zero counts (``omitempty``)."""
    for k in keys:
        if not st.get(k):
            st.pop(k, None)
    return st


REVISION = "deployment.kubernetes.io/revision"


def _max_surge(spec: dict, desired: int) -> int:
    strategy = spec.get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0
    v = (strategy.get("rollingUpdate") or {}).get("maxSurge", "25%")
    if isinstance(v, str) and v.endswith("%"):
        try:
            return int(math.ceil(float(v[:-1]) * desired / 100.0))
        except ValueError:
            return 0
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def _max_unavailable(spec: dict, desired: int) -> int:
    strategy = spec.get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return desired
    v = (strategy.get("rollingUpdate") or {}).get("maxUnavailable", "25%")
    if isinstance(v, str) and v.endswith("%"):
        try:
            return int(math.floor(float(v[:-1]) * desired / 100.0))
        except ValueError:
            return 0
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def _set_cond(conds: dict, ctype: str, status: str, reason: str, message: str, now: str) -> None:
    prev = conds.get(ctype)
    if prev is not None and prev.get("status") == status and prev.get("reason") == reason:
        return
    conds[ctype] = {"type": ctype, "status": status, "lastUpdateTime": now,
                    "lastTransitionTime": prev.get("lastTransitionTime") if prev is not None and
                    prev.get("status") == status else now, "reason": reason, "message": message}
