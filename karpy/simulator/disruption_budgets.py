"""The PodDisruptionBudget status, kept as Kubernetes' disruption controller keeps it.

For each PDB (a stand-in for kube-controller-manager's disruption controller):

* ``expectedPods``: with an integer ``minAvailable``, the number of pods the
  selector matches; with ``maxUnavailable`` or a percentage ``minAvailable``,
  the summed scale of the pods' controllers (a ReplicaSet a Deployment owns
  counts as the Deployment; StatefulSets and ReplicaSets by their replicas), so
  evicted pods do not shrink it. A pod with no controller at all is
  "unmanaged": it adds nothing to ``expectedPods`` (Kubernetes warns with an
  ``UnmanagedPods`` Event and carries on); a pod whose controller has no scale
  (a Job, a DaemonSet, a ReplicaSet whose Deployment is gone) makes the
  computation fail, and the PDB then allows no disruption (Kubernetes'
  failSafe);
* ``desiredHealthy``: ``minAvailable`` (a percentage of ``expectedPods``, rounded
  up), or ``expectedPods - maxUnavailable`` (a percentage rounded up);
* ``currentHealthy``: matching pods that are Ready and not being deleted or
  just evicted;
* pods terminate at once in the simulated world, where Kubernetes lists an
  evicted or deleted pod (terminating) for its ``terminationGracePeriodSeconds``
  (30 s by default): for that long the pod still counts towards
  ``expectedPods`` (its controller's scale, or itself with an integer
  ``minAvailable``), never towards ``currentHealthy``. Without this, a
  Deployment whose every pod was just evicted would drop out of
  ``expectedPods`` until its controller recreated them, and the PDB would
  allow evictions Kubernetes refuses;
* ``disruptionsAllowed``: ``currentHealthy - desiredHealthy``, at least 0;
* ``observedGeneration`` and the ``DisruptionAllowed`` condition.

The Eviction API (:meth:`karpy.kube.memory.MemoryAPI.evict`) reads this status,
decrements ``disruptionsAllowed`` and records the pod in ``disruptedPods``; the
next sync recounts.

Membership is kept incrementally per pod event, so a sync costs the number of
controllers involved, not the number of pods.
"""

from __future__ import annotations

import math
from typing import Any

from ..kube import errors as E
from ..kube.port import DELETED
from ..kube.times import fmt_time
from ..runtime.manager import Manager, deleting
from ..scheduling.pods import LabelSelector
from ..state import pods as P

SCALED = ("Deployment", "ReplicaSet", "StatefulSet")
TERMINATION_GRACE = 30  # seconds: a pod's terminationGracePeriodSeconds when it sets none (the API server's default)


def scaled_value(value: Any, total: int) -> int:
    """An IntOrString against a total, percentages rounded up (Kubernetes' GetScaledValueFromIntOrPercent)."""
    if isinstance(value, str):
        if value.endswith("%"):
            return math.ceil(int(value[:-1]) * total / 100)
        return int(value)
    return int(value)


class _Budget:
    __slots__ = ("selector", "members", "terminating")

    def __init__(self, selector: LabelSelector | None):
        self.selector = selector
        self.members: dict[str, tuple[bool, tuple[str, str, str] | None]] = {}  # pod key -> (healthy, controller)
        # pods deleted within their grace period: pod key -> (controller, until); see the module docstring
        self.terminating: dict[str, tuple[tuple[str, str, str] | None, float]] = {}


class DisruptionBudgets:
    name = "world.disruption-budgets"

    def __init__(self, mgr: Manager, api: Any, clock: Any):
        self.mgr = mgr
        self.api = api
        self.clock = clock
        self.budgets: dict[tuple[str, str], _Budget] = {}
        # namespace -> its PDBs' names, in creation order (a dict: a set's order would follow string hashing,
        # which changes from one process to the next, and with it the order of the PDBs' status updates)
        self.by_ns: dict[str, dict[str, None]] = {}

    def setup(self, mgr: Manager) -> None:
        mgr.watch("PodDisruptionBudget", self._on_pdb)
        mgr.watch("Pod", self._on_pod)
        for kind in SCALED:
            mgr.watch(kind, self._on_workload)

    def _on_pdb(self, etype: str, obj: dict, old: dict | None) -> None:
        ns = obj["metadata"].get("namespace", "default")
        name = obj["metadata"]["name"]
        if etype == DELETED:
            self.budgets.pop((ns, name), None)
            self.by_ns.get(ns, {}).pop(name, None)
            return
        spec_changed = old is None or old.get("spec") is not obj.get("spec")
        if spec_changed:
            sel = (obj.get("spec") or {}).get("selector")
            b = _Budget(LabelSelector(sel) if sel is not None else None)
            self.budgets[(ns, name)] = b
            self.by_ns.setdefault(ns, {})[name] = None
            if b.selector is not None:
                for pod in self.mgr.list("Pod", ns):
                    self._account(b, pod)
            self.mgr.enqueue(self, (ns, name))
        elif (obj.get("status") or {}).get("disruptedPods") != ((old or {}).get("status") or {}).get("disruptedPods"):
            self.mgr.enqueue(self, (ns, name))

    def _account(self, b: _Budget, pod: dict, gone: bool = False) -> bool:
        key = P.pod_key(pod)
        meta = pod["metadata"]
        if gone and key in b.members:
            # listed by the API server until its grace period is over, as a terminating pod would be
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
            b.terminating[key] = (b.members.pop(key)[1], self.clock.now() + (TERMINATION_GRACE if grace is None else int(grace)))
            return True
        if gone or b.selector is None or not b.selector.matches(meta.get("labels") or {}):
            return b.members.pop(key, None) is not None
        b.terminating.pop(key, None)  # a pod of that name again (a StatefulSet's): the old one is gone
        healthy = P.is_ready(pod) and not deleting(pod) and not P.is_terminal(pod)
        ctl = None
        for r in meta.get("ownerReferences") or ():
            if r.get("controller"):
                ctl = (str(r.get("kind")), meta.get("namespace", "default"), str(r.get("name")))
                break
        entry = (healthy, ctl)
        if b.members.get(key) == entry:
            return False
        b.members[key] = entry
        return True

    def _on_pod(self, etype: str, obj: dict, old: dict | None) -> None:
        ns = obj["metadata"].get("namespace", "default")
        for name in self.by_ns.get(ns, ()):
            if self._account(self.budgets[(ns, name)], obj, gone=etype == DELETED):
                self.mgr.enqueue(self, (ns, name))

    def _on_workload(self, etype: str, obj: dict, old: dict | None) -> None:
        ns = obj["metadata"].get("namespace", "default")
        if old is not None and etype != DELETED and (old.get("spec") or {}).get("replicas") == (obj.get("spec") or {}).get("replicas"):
            return
        for name in self.by_ns.get(ns, ()):
            self.mgr.enqueue(self, (ns, name))

    def _scale(self, ctl: tuple[str, str, str]) -> int | None:
        kind, ns, name = ctl
        if kind not in ("ReplicaSet", "StatefulSet", "Deployment"):
            return None
        obj = self.mgr.get(kind, name, ns)
        if obj is None:
            return None
        if kind == "ReplicaSet":
            for r in obj["metadata"].get("ownerReferences") or ():
                if r.get("controller") and r.get("kind") == "Deployment":
                    d = self.mgr.get("Deployment", r.get("name", ""), ns)
                    if d is not None:
                        return int((d.get("spec") or {}).get("replicas", 1) or 0)
        return int((obj.get("spec") or {}).get("replicas", 1) or 0)

    def _owner_key(self, ctl: tuple[str, str, str]) -> tuple[str, str, str]:
        kind, ns, name = ctl
        if kind == "ReplicaSet":
            rs = self.mgr.get("ReplicaSet", name, ns)
            for r in (rs or {}).get("metadata", {}).get("ownerReferences") or ():
                if r.get("controller") and r.get("kind") == "Deployment":
                    return ("Deployment", ns, str(r.get("name")))
        return ctl

    def reconcile(self, key: tuple[str, str]) -> float | None:
        ns, name = key
        pdb = self.mgr.get("PodDisruptionBudget", name, ns)
        b = self.budgets.get(key)
        if pdb is None or b is None:
            return None
        spec = pdb.get("spec") or {}
        now = self.clock.now()
        old_status = pdb.get("status") or {}
        for k in [k for k, (_, until) in b.terminating.items() if until <= now]:
            del b.terminating[k]
        disrupted = {p: t for p, t in (old_status.get("disruptedPods") or {}).items()
                     if f"{ns}/{p}" in b.members and (P.parse_time(t) or 0) + 120 > now}
        healthy = sum(1 for k, (h, _) in b.members.items() if h and k.split("/", 1)[1] not in disrupted)
        failure = None
        if spec.get("maxUnavailable") is not None or isinstance(spec.get("minAvailable"), str) and \
                str(spec.get("minAvailable")).endswith("%"):
            owners = {}
            for ctl in [c for _, c in b.members.values()] + [c for c, _ in b.terminating.values()]:
                if ctl is None:
                    continue  # unmanaged: counted as healthy when Ready, never in expectedPods (getExpectedScale)
                owners[self._owner_key(ctl)] = ctl
            expected = 0
            if failure is None:
                for okey in sorted(owners):
                    s = self._scale(okey)
                    if s is None:
                        failure = f"found no controllers for pod of {okey[0]} {okey[2]}"
                        break
                    expected += s
            if spec.get("maxUnavailable") is not None:
                desired = max(0, expected - scaled_value(spec["maxUnavailable"], expected))
            else:
                desired = scaled_value(spec["minAvailable"], expected)
        elif spec.get("minAvailable") is not None:
            expected = len(b.members) + len(b.terminating)
            desired = scaled_value(spec["minAvailable"], expected)
        else:
            expected = len(b.members) + len(b.terminating)
            desired = expected
        if failure is not None:
            allowed = 0
            cond = {"type": "DisruptionAllowed", "status": "False", "reason": "SyncFailed", "message": failure}
        else:
            allowed = max(0, healthy - desired) if expected > 0 else 0
            cond = {"type": "DisruptionAllowed", "status": "True" if allowed > 0 else "False",
                    "reason": "SufficientPods" if allowed > 0 else "InsufficientPods", "message": ""}
        prev = next((c for c in old_status.get("conditions") or () if c.get("type") == "DisruptionAllowed"), None)
        cond["lastTransitionTime"] = prev.get("lastTransitionTime") if prev is not None and prev.get("status") == cond["status"] \
            else fmt_time(now)
        cond["observedGeneration"] = pdb["metadata"].get("generation", 1)
        status = {"observedGeneration": pdb["metadata"].get("generation", 1), "disruptionsAllowed": allowed,
                  "currentHealthy": healthy, "desiredHealthy": desired, "expectedPods": expected,
                  "conditions": [cond]}
        if disrupted:
            status["disruptedPods"] = disrupted
        if status != old_status:
            if not disrupted and "disruptedPods" in old_status:
                status["disruptedPods"] = None  # merge patch: remove
            try:
                self.api.patch("PodDisruptionBudget", name, {"status": status}, ns, subresource="status")
            except E.NotFound:
                pass
        wake = [120.0] if disrupted else []
        wake += [until - now for _, until in b.terminating.values()]
        return min(wake) if wake else None
