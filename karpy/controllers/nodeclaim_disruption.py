"""The NodeClaim disruption conditions and pod events (upstream ``nodeclaim/disruption``, ``nodeclaim/podevents``).

* **Drifted**: a NodeClaim whose NodePool template hash, requirements or
  NodeClass hash no longer match what it was launched with gets
  ``Drifted=True`` with the reason (``NodePoolDrifted``, ``RequirementsDrifted``,
  ``NodeClassDrift``, or the cloud provider's own, such as ``CapacityReservationDrift``
  for a node whose capacity reservation is gone); the condition goes when the drift does.
* **Consolidatable**: ``consolidateAfter`` after the last pod event (or after
  initialization), the NodeClaim is ``Consolidatable=True``; it is requeued for
  that moment.
* **lastPodEventTime**: a pod binding to, finishing on or leaving a node stamps
  the node's NodeClaim, at most once per 10 seconds (upstream's dedupe).
"""

from __future__ import annotations

from .. import resources as res
from ..disruption.drift import drift_reason, instance_type_not_found
from ..disruption.methods import is_static
from ..kube.port import DELETED
from ..kube.times import fmt_time, parse_time
from ..runtime.events import ref
from ..runtime.manager import condition, deleting, is_true
from ..state import pods as P
from .env import Env
from .lifecycle import clear_condition, set_condition

POD_EVENT_DEDUPE = 10.0
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
INSTANCE_TYPE_CHECK_AFTER = 3600.0  # upstream checks a NodeClaim's instance type only once it is an hour old
INSTANCE_TYPE_CHECK_TTL = 1800.0  # and then, while it finds it, at most every 30 minutes


class NodeClaimDisruption:
    name = "nodeclaim.disruption"

    def __init__(self, env: Env):
        self.env = env
        self._types_found: dict[str, float] = {}  # NodeClaim UID -> when its instance type and offering were found
        # NodeClaim name -> (NodePool, NodeClass, annotations, labels, drift reason): stored objects are never
        # changed in place, so while the same four objects come back the reason is the same (drift is worked
        # out again when the NodeClaim's labels or annotations, its NodePool or its NodeClass change)
        self._drift: dict[str, tuple] = {}

    def setup(self, mgr) -> None:
        mgr.watch("NodeClaim", self._on_claim)
        mgr.watch("NodePool", self._on_nodepool)
        for kind in ("AKSNodeClass", "EC2NodeClass", "KWOKNodeClass"):
            mgr.watch(kind, self._on_nodeclass)
        subscribe = getattr(self.env.cloud, "subscribe_drift", None)
        if subscribe is not None:  # the cloud's side of drift changed (a capacity reservation went away)
            subscribe(self._on_cloud)

    def _on_cloud(self) -> None:
        for name in sorted(self.env.cluster.by_claim):
            self.env.mgr.enqueue(self, name)

    def _on_claim(self, etype: str, obj: dict, old: dict | None) -> None:
        if etype == DELETED:
            self._drift.pop(obj["metadata"]["name"], None)
            return
        if old is not None and _inputs(old) == _inputs(obj):
            return  # only what this controller writes (or ignores) changed
        self.env.mgr.enqueue(self, obj["metadata"]["name"])

    def _on_nodepool(self, etype: str, obj: dict, old: dict | None) -> None:
        if etype != DELETED and old is not None and _nodepool_inputs(old) == _nodepool_inputs(obj):
            return  # a status-only change (its node count, its resources): no NodeClaim's conditions depend on it
        for name in sorted(self.env.cluster.claims_by_nodepool.get(obj["metadata"]["name"], ())):
            self.env.mgr.enqueue(self, name)

    def _on_nodeclass(self, etype: str, obj: dict, old: dict | None) -> None:
        c = self.env.cluster
        for npname, np in c.nodepools.items():
            ref_ = (((np.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
            if ref_.get("kind") == obj["kind"] and ref_.get("name") == obj["metadata"]["name"]:
                for name in sorted(c.claims_by_nodepool.get(npname, ())):
                    self.env.mgr.enqueue(self, name)

    def reconcile(self, name: str) -> float | None:
        env = self.env
        claim = env.mgr.get("NodeClaim", name)
        if claim is None or deleting(claim) or not env.manages(claim):
            return None  # (a NodeClaim of another Karpenter's NodeClass keeps its conditions as they are)
        labels = claim["metadata"].get("labels") or {}
        np = env.cluster.nodepools.get(labels.get("karpenter.sh/nodepool", ""))
        if np is None:
            return None
        if not is_true(claim, "Launched"):
            # as upstream: a NodeClaim not launched (its launch failed, or not made yet) is neither drifted nor
            # consolidatable; conditions it carries from before are removed
            status = dict(claim.get("status") or {})
            clear_condition(status, "Drifted")
            clear_condition(status, "Consolidatable")
            if status != (claim.get("status") or {}):
                env.api.patch("NodeClaim", name, {"status": status}, subresource="status")
            return None
        now = env.now()
        status = dict(claim.get("status") or {})
        # drift
        nodeclass, _ = env.cluster.nodeclass_for(np)
        reason = self._drift_reason(name, np, nodeclass, claim["metadata"].get("annotations") or {}, labels)
        if reason in (None, "NodeClassDrift") and \
                now - (parse_time(claim["metadata"].get("creationTimestamp")) or now) > INSTANCE_TYPE_CHECK_AFTER and \
                self._instance_type_not_found(claim, np, nodeclass, labels, now):
            # upstream's InstanceTypeNotFound drift, checked before the cloud's own: a NodeClaim over an hour old
            # whose instance type label is gone, or whose instance type or offering its NodePool no longer has
            reason = "InstanceTypeNotFound"
        if reason is None and nodeclass is not None:
            reason = env.cloud.is_drifted(claim, nodeclass)
        was = condition(claim, "Drifted")
        if reason:
            if set_condition(status, "Drifted", "True", now, reason=reason, message=reason) and \
                    (was is None or was.get("status") != "True"):
                env.recorder.publish(ref(claim), "Drifted",
                                     f"Status condition transitioned, Type: Drifted, Status: True, Reason: {reason}")
                env.log.info("marking drifted", controller=self.name, NodeClaim={"name": name}, reason=reason)
        elif was is not None:
            clear_condition(status, "Drifted")
        # consolidatable
        requeue = None
        after = ((np.get("spec") or {}).get("disruption") or {}).get("consolidateAfter", "0s")
        if is_static(np):
            pass  # a static NodePool's nodes are never consolidated: the condition is not kept
        elif after in (None, "Never") or not is_true(claim, "Initialized"):
            clear_condition(status, "Consolidatable")
        else:
            init = parse_time((condition(claim, "Initialized") or {}).get("lastTransitionTime")) or now
            last = parse_time(status.get("lastPodEventTime"))
            t0 = last if last is not None else init
            at = t0 + res.parse_duration(after)
            if now + 1e-9 < at:
                clear_condition(status, "Consolidatable")
                requeue = at - now
            else:
                set_condition(status, "Consolidatable", "True", now)
        if status != (claim.get("status") or {}):
            env.api.patch("NodeClaim", name, {"status": status}, subresource="status")
        return requeue

    def _drift_reason(self, name: str, np: dict, nodeclass: dict | None, annotations: dict, labels: dict) -> str | None:
        hit = self._drift.get(name)
        if hit is not None and hit[0] is np and hit[1] is nodeclass and hit[2] is annotations and hit[3] is labels:
            return hit[4]
        reason = drift_reason(np, nodeclass, annotations, labels, memo=True)
        self._drift[name] = (np, nodeclass, annotations, labels, reason)
        return reason

    def _instance_type_not_found(self, claim: dict, np: dict, nodeclass: dict | None, labels: dict, now: float) -> bool:
        """No instance-type label, or no instance type of the NodePool's with an offering in the NodeClaim's zone and
        capacity type (karpy.disruption.drift.instance_type_not_found); a check that found one is trusted for 30
        minutes, as upstream's cache."""
        if not labels.get(LABEL_INSTANCE_TYPE):
            return True
        if nodeclass is None:
            return False
        uid = claim["metadata"].get("uid") or claim["metadata"]["name"]
        found = self._types_found.get(uid)
        if found is not None and now - found < INSTANCE_TYPE_CHECK_TTL:
            return False
        if instance_type_not_found(self.env.cloud.get_instance_types(np, nodeclass), labels):
            return True
        if len(self._types_found) > 4096:  # entries of NodeClaims long gone
            self._types_found = {k: t for k, t in self._types_found.items() if now - t < INSTANCE_TYPE_CHECK_TTL}
        self._types_found[uid] = now
        return False


def _nodepool_inputs(nodepool: dict) -> tuple:
    """What the Drifted and Consolidatable conditions read of a NodePool: its spec (template, requirements,
    consolidateAfter, replicas, NodeClass reference), its name (overlays) and its annotations (the template hash).
    Its status, which changes with every node it gains or loses, is not among them."""
    meta = nodepool.get("metadata") or {}
    return (meta.get("name"), meta.get("annotations"), meta.get("labels"), nodepool.get("spec"))


def _inputs(claim: dict) -> tuple:
    """What the Drifted and Consolidatable conditions depend on, from the NodeClaim itself."""
    meta = claim["metadata"]
    status = claim.get("status") or {}
    return (id(meta.get("labels")), id(meta.get("annotations")), meta.get("deletionTimestamp"),
            status.get("lastPodEventTime"), is_true(claim, "Launched"), is_true(claim, "Initialized"),
            id(claim.get("spec")))


class PodEvents:
    """Stamps ``status.lastPodEventTime`` on the NodeClaim of a node a pod binds to, finishes on or leaves."""

    name = "nodeclaim.podevents"

    def __init__(self, env: Env):
        self.env = env

    def setup(self, mgr) -> None:
        mgr.watch("Pod", self._on_pod)

    def _on_pod(self, etype: str, obj: dict, old: dict | None) -> None:
        node = P.node_name(obj) or (P.node_name(old) if old is not None else "")
        if not node or P.is_daemon(obj):
            return
        if etype == DELETED:
            hit = True
        elif old is None:
            hit = bool(P.node_name(obj))
        else:
            bound = not P.node_name(old) and bool(P.node_name(obj))
            terminal = not P.is_terminal(old) and P.is_terminal(obj)
            terminating = not P.is_terminating(old) and P.is_terminating(obj)
            hit = bound or terminal or terminating
        if hit:
            self.env.mgr.enqueue(self, node)

    def reconcile(self, node: str) -> float | None:
        env = self.env
        sn = env.cluster.by_node.get(node)
        if sn is None or sn.claim is None:
            return None
        claim = sn.claim
        now = env.now()
        last = parse_time((claim.get("status") or {}).get("lastPodEventTime"))
        if last is not None and now - last < POD_EVENT_DEDUPE:
            return None
        env.api.patch("NodeClaim", sn.claim_name, {"status": {"lastPodEventTime": fmt_time(now)}}, subresource="status")
        return None
