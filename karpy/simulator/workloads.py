"""Workload controllers of the simulated world: what kube-controller-manager does for pods.

* Deployments own one ReplicaSet per pod template (``<name>-<pod-template-hash>``);
  a template change replaces the ReplicaSet, and its pods, at once (no rolling
  update).
* ReplicaSets keep ``replicas`` pods (``<replicaset>-<suffix>``); a scale-down
  removes unbound pods first, then the newest.
* StatefulSets keep pods ``<name>-0`` .. ``<name>-<replicas-1>``.
* Jobs run ``parallelism`` pods until ``completions`` have succeeded.
* DaemonSets run one pod on every node whose taints and selectors allow it
  (cordoned nodes included), bound directly to the node.

Pods stamped from one template share its spec (stored objects are never
mutated), which keeps large workloads cheap.
"""

from __future__ import annotations

from typing import Any

from ..kube import errors as E
from ..kube.names import template_hash
from ..kube.port import DELETED
from ..kube.times import fmt_time
from ..runtime.manager import Manager, deleting
from ..scheduling.pods import Taint, untolerated
from ..state import pods as P

WORKLOAD_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "Job", "DaemonSet")


def desired_replicas(obj: dict) -> int:
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind == "Job":
        parallelism = spec.get("parallelism", 1)
        completions = spec.get("completions")
        n = int(parallelism if parallelism is not None else 1)
        if completions is not None:
            n = min(n, int(completions))
        return n
    if kind == "DaemonSet":
        return 0
    r = spec.get("replicas", 1)
    return int(1 if r is None else r)


def replicaset_name(deployment: dict) -> tuple[str, str]:
    """The ReplicaSet a Deployment's current template maps to, and its pod-template-hash."""
    h = template_hash((deployment.get("spec") or {}).get("template"))
    return f"{deployment['metadata']['name']}-{h}", h


def replicaset_for(d: dict, replicas: int) -> dict:
    """The ReplicaSet the deployment controller makes for a Deployment's current template."""
    rs_name, h = replicaset_name(d)
    tmpl = (d.get("spec") or {}).get("template") or {}
    tmeta = tmpl.get("metadata") or {}
    labels = {**(tmeta.get("labels") or {}), "pod-template-hash": h}
    sel = dict((d.get("spec") or {}).get("selector") or {})
    sel["matchLabels"] = {**(sel.get("matchLabels") or {}), "pod-template-hash": h}
    return {
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": rs_name, "namespace": d["metadata"].get("namespace", "default"), "labels": labels,
                     "ownerReferences": [owner_ref(d)],
                     "annotations": {"deployment.kubernetes.io/desired-replicas": str(replicas)}},
        "spec": {"replicas": replicas, "selector": sel,
                 "template": {"metadata": {**tmeta, "labels": labels}, "spec": tmpl.get("spec") or {}}},
    }


def owner_ref(obj: dict) -> dict:
    """A controller ownerReference to ``obj``."""
    return {"apiVersion": obj.get("apiVersion") or "apps/v1", "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"].get("uid", ""), "controller": True, "blockOwnerDeletion": True}


class _Stamp:
    """The shared parts of the pods one owner stamps out."""

    __slots__ = ("key", "labels", "annotations", "spec", "owner")

    def __init__(self, key: tuple, labels: dict, annotations: dict | None, spec: dict, owner: list):
        self.key = key
        self.labels = labels
        self.annotations = annotations
        self.spec = spec
        self.owner = owner


class Workloads:
    """The Deployment, ReplicaSet, StatefulSet, Job and DaemonSet controllers."""

    name = "world.workloads"

    def __init__(self, mgr: Manager, api: Any, recorder: Any):
        self.mgr = mgr
        self.api = api
        self.recorder = recorder
        self.owned: dict[str, set[str]] = {}  # owner uid -> active pod keys
        self.owner_of: dict[str, str] = {}  # pod key -> owner uid
        self._stamps: dict[str, _Stamp] = {}  # owner uid -> stamp
        self.daemon_nodes: dict[str, set[str]] = {}  # DaemonSet uid -> nodes with a pod of it
        self._uid_key: dict[str, tuple[str, str, str]] = {}
        # keep a Deployment's earlier ReplicaSets, scaled to 0 (its revisionHistoryLimit of them), as the
        # deployment controller does; karpy simulate, which never shows them, deletes them
        self.keep_history = False
        # pods a ReplicaSet creates per sync at most before syncing again (kube-controller-manager's
        # burstReplicas, 500): karpy sandbox sets it, so a scale to thousands lets requests in between;
        # karpy simulate creates them in one sync (all at the same instant either way)
        self.burst_replicas: int | None = None

    def setup(self, mgr: Manager) -> None:
        for kind in WORKLOAD_KINDS:
            mgr.watch(kind, self._on_workload)
        mgr.watch("Pod", self._on_pod)
        mgr.watch("Node", self._on_node)

    # --- events ----------------------------------------------------------------------------------
    def _on_workload(self, etype: str, obj: dict, old: dict | None) -> None:
        meta = obj["metadata"]
        key = (obj["kind"], meta.get("namespace", "default"), meta["name"])
        if etype == DELETED:
            self._uid_key.pop(meta.get("uid", ""), None)
            self._stamps.pop(meta.get("uid", ""), None)
            return
        self._uid_key[meta.get("uid", "")] = key
        if old is not None and old.get("spec") is obj.get("spec") and etype != "ADDED":
            if obj["kind"] != "Job":
                return
        self.mgr.enqueue(self, key)

    def _on_pod(self, etype: str, obj: dict, old: dict | None) -> None:
        key = P.pod_key(obj)
        ref = None
        for r in obj["metadata"].get("ownerReferences") or ():
            if r.get("controller"):
                ref = r
                break
        if ref is None:
            return
        uid = ref.get("uid", "")
        active = etype != DELETED and not P.is_terminal(obj) and not deleting(obj)
        if ref.get("kind") == "DaemonSet":
            node = P.node_name(obj)
            nodes = self.daemon_nodes.setdefault(uid, set())
            if etype == DELETED:
                nodes.discard(node)
            elif node:
                nodes.add(node)
        if active:
            self.owned.setdefault(uid, set()).add(key)
            self.owner_of[key] = uid
        else:
            s = self.owned.get(uid)
            if s is not None:
                s.discard(key)
            self.owner_of.pop(key, None)
            owner = self._uid_key.get(uid)
            if owner is not None:
                self.mgr.enqueue(self, owner)

    def _on_node(self, etype: str, obj: dict, old: dict | None) -> None:
        if etype == DELETED:
            name = obj["metadata"]["name"]
            for nodes in self.daemon_nodes.values():
                nodes.discard(name)
            return
        if old is not None and old.get("spec") is obj.get("spec") and \
                (old.get("metadata") or {}).get("labels") is (obj.get("metadata") or {}).get("labels"):
            return
        for ds in self.mgr.list("DaemonSet"):
            self.mgr.enqueue(self, ("DaemonSet", ds["metadata"].get("namespace", "default"), ds["metadata"]["name"]))

    # --- reconcile --------------------------------------------------------------------------------
    def reconcile(self, key: tuple[str, str, str]) -> float | None:
        kind, ns, name = key
        obj = self.mgr.get(kind, name, ns)
        if obj is None or deleting(obj):
            return None
        getattr(self, f"_{kind.lower()}")(obj)
        return None

    def _deployment(self, d: dict) -> None:
        ns = d["metadata"].get("namespace", "default")
        rs_name, _ = replicaset_name(d)
        replicas = desired_replicas(d)
        old = []
        for rs in self.mgr.list("ReplicaSet", ns):
            refs = rs["metadata"].get("ownerReferences") or ()
            if any(r.get("uid") == d["metadata"].get("uid") for r in refs) and rs["metadata"]["name"] != rs_name:
                old.append(rs)
        limit = (d.get("spec") or {}).get("revisionHistoryLimit", 10) if self.keep_history else 0
        old.sort(key=lambda rs: (rs["metadata"].get("creationTimestamp") or "", rs["metadata"]["name"]))
        for i, rs in enumerate(old):
            name = rs["metadata"]["name"]
            try:
                if i < len(old) - int(limit or 0):
                    self.api.delete("ReplicaSet", name, ns)
                elif int((rs.get("spec") or {}).get("replicas") or 0) != 0:
                    self.api.scale("ReplicaSet", name, ns, 0)
            except E.NotFound:
                pass
        cur = self.mgr.get("ReplicaSet", rs_name, ns)
        if cur is None:
            try:
                self.api.create(replicaset_for(d, replicas))
            except E.AlreadyExists:
                pass
        elif int((cur.get("spec") or {}).get("replicas") or 0) != replicas:
            self.api.scale("ReplicaSet", rs_name, ns, replicas)

    def _stamp(self, owner: dict, labels: dict | None = None) -> _Stamp:
        uid = owner["metadata"].get("uid", "")
        tmpl = (owner.get("spec") or {}).get("template") or {}
        skey = (id(tmpl), id(labels))
        s = self._stamps.get(uid)
        if s is None or s.key != skey:
            tmeta = tmpl.get("metadata") or {}
            lbls = dict(labels if labels is not None else (tmeta.get("labels") or {}))
            s = _Stamp(skey, lbls, dict(tmeta["annotations"]) if tmeta.get("annotations") else None,
                       tmpl.get("spec") or {}, [owner_ref(owner)])
            self._stamps[uid] = s
        return s

    def _pod(self, owner: dict, s: _Stamp, name: str | None = None, node: str | None = None,
             generate: str | None = None) -> None:
        meta: dict[str, Any] = {"namespace": owner["metadata"].get("namespace", "default"), "labels": s.labels,
                                "ownerReferences": s.owner}
        if name:
            meta["name"] = name
        else:
            meta["generateName"] = generate or f"{owner['metadata']['name']}-"
        if s.annotations:
            meta["annotations"] = s.annotations
        spec = s.spec
        if node:
            spec = {**spec, "nodeName": node}
        try:
            self.api.create({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
        except E.AlreadyExists:
            pass

    def _active(self, owner: dict) -> list[dict]:
        ns = owner["metadata"].get("namespace", "default")
        out = []
        for k in self.owned.get(owner["metadata"].get("uid", ""), ()):
            pod_ns, _, pname = k.partition("/")
            p = self.mgr.get("Pod", pname, pod_ns)
            if p is not None and pod_ns == ns:
                out.append(p)
        return out

    def _replicaset(self, rs: dict) -> None:
        want = desired_replicas(rs)
        pods = self._active(rs)
        if len(pods) < want:
            s = self._stamp(rs)
            n = want - len(pods)
            if self.burst_replicas is not None and n > self.burst_replicas:
                # the ReplicaSet controller's burstReplicas: this many per sync, then sync again
                n = self.burst_replicas
                m = rs["metadata"]
                self.mgr.enqueue(self, ("ReplicaSet", m.get("namespace", "default"), m["name"]))
            for _ in range(n):
                self._pod(rs, s)
        elif len(pods) > want:
            self._scale_down(pods, len(pods) - want)

    def _scale_down(self, pods: list[dict], n: int) -> None:
        # unbound pods first, then the newest
        victims = sorted(pods, key=lambda p: (bool(P.node_name(p)),
                                              -(P.parse_time(p["metadata"].get("creationTimestamp")) or 0.0),
                                              -int(p["metadata"].get("resourceVersion") or 0), P.pod_key(p)))[:n]
        for p in victims:
            try:
                self.api.delete("Pod", p["metadata"]["name"], p["metadata"].get("namespace", "default"))
            except E.NotFound:
                pass

    def _statefulset(self, sts: dict) -> None:
        want = desired_replicas(sts)
        name = sts["metadata"]["name"]
        pods = {p["metadata"]["name"]: p for p in self._active(sts)}
        s = self._stamp(sts)
        for i in range(want):
            if f"{name}-{i}" not in pods:
                self._pod(sts, s, name=f"{name}-{i}")
        extra = sorted((p for n, p in pods.items() if _ordinal(n, name) >= want), key=lambda p: -_ordinal(p["metadata"]["name"], name))
        for p in extra:
            try:
                self.api.delete("Pod", p["metadata"]["name"], p["metadata"].get("namespace", "default"))
            except E.NotFound:
                pass

    def _job(self, job: dict) -> None:
        spec = job.get("spec") or {}
        status = job.get("status") or {}
        if status.get("completionTime"):
            return
        want = desired_replicas(job)
        completions = spec.get("completions")
        done = int(status.get("succeeded") or 0)
        if completions is not None:
            want = min(want, max(0, int(completions) - done))
        elif done > 0:
            want = 0
        pods = self._active(job)
        if spec.get("suspend") is True:  # a suspended Job runs nothing (its running pods go)
            for p in pods:
                try:
                    self.api.delete("Pod", p["metadata"]["name"], p["metadata"].get("namespace", "default"))
                except E.NotFound:
                    pass
            return
        if len(pods) < want:
            s = self._stamp(job)
            for _ in range(want - len(pods)):
                self._pod(job, s)

    def job_pod_succeeded(self, pod: dict) -> None:
        """A Job's pod finished: count it, and complete the Job when enough have."""
        ref = next((r for r in pod["metadata"].get("ownerReferences") or () if r.get("kind") == "Job"), None)
        if ref is None:
            return
        ns = pod["metadata"].get("namespace", "default")
        try:
            job = self.api.get("Job", ref.get("name", ""), ns)
        except E.NotFound:
            return
        st = dict(job.get("status") or {})
        st["succeeded"] = int(st.get("succeeded") or 0) + 1
        spec = job.get("spec") or {}
        completions = spec.get("completions")
        total = int(completions) if completions is not None else int(spec.get("parallelism") or 1)
        completed = st["succeeded"] >= total and not st.get("completionTime")
        if completed:
            st["completionTime"] = fmt_time(self.api.clock.now())
            st["conditions"] = [{"type": "Complete", "status": "True", "lastTransitionTime": st["completionTime"]}]
        self.api.patch("Job", job["metadata"]["name"], {"status": st}, ns, subresource="status")
        if completed:
            from ..runtime.events import ref as obj_ref

            self.recorder.publish(obj_ref(job), "Completed", "Job completed", component="job-controller")

    def _daemonset(self, ds: dict) -> None:
        tmpl = (ds.get("spec") or {}).get("template") or {}
        have = self.daemon_nodes.get(ds["metadata"].get("uid", ""), set())
        pobj = {"metadata": {**(tmpl.get("metadata") or {}), "name": ds["metadata"]["name"],
                             "namespace": ds["metadata"].get("namespace", "default"), "uid": f"ds/{ds['metadata'].get('uid')}"},
                "spec": tmpl.get("spec") or {}}
        from ..scheduling.pods import compile_pod

        info = compile_pod(pobj)
        s = None
        for node in self.mgr.list("Node"):
            name = node["metadata"]["name"]
            if name in have or deleting(node):
                continue
            if not daemon_runs_on(info, node):
                continue
            if s is None:
                s = self._stamp(ds)
            self._pod(ds, s, node=name, generate=f"{ds['metadata']['name']}-")
            have.add(name)
        self.daemon_nodes[ds["metadata"].get("uid", "")] = have


def daemon_runs_on(info, node: dict) -> bool:
    """DaemonSet pods tolerate the node lifecycle taints and run on cordoned nodes."""
    labels = node["metadata"].get("labels") or {}
    taints = [Taint.from_obj(t) for t in (node.get("spec") or {}).get("taints") or ()
              if not str(t.get("key", "")).startswith("node.kubernetes.io/")]
    if untolerated(info.tolerations, taints) is not None:
        return False
    if not info.node_selector.satisfied_by_labels(labels):
        return False
    if info.required_terms and not any(t.satisfied_by_labels(labels) for t in info.required_terms):
        return False
    return True


def _ordinal(pod_name: str, sts: str) -> int:
    try:
        return int(pod_name[len(sts) + 1:])
    except ValueError:
        return -1
