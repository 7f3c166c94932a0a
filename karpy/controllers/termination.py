"""Node termination (upstream ``pkg/controllers/node/termination``): the ``karpenter.sh/termination`` finalizer.

A Karpenter Node being deleted is tainted ``karpenter.sh/disrupted:NoSchedule``
and drained through the Eviction API in upstream's order -- non-critical
pods, then non-critical DaemonSet pods, then critical pods, then critical
DaemonSet pods, each group only once the one before is gone. Pods that
tolerate the disrupted taint and static pods are left alone. An eviction a
PodDisruptionBudget refuses (429) is retried; a ``karpenter.sh/do-not-disrupt``
pod is waited on. When the NodeClaim's ``terminationGracePeriod`` deadline
(the ``karpenter.sh/nodeclaim-termination-timestamp`` annotation) comes, the
remaining pods are deleted regardless. Once drained, the instance is
terminated and the finalizer removed.
"""

from __future__ import annotations

from ..cloudprovider.provider import NodeClaimNotFoundError
from ..disruption.state import DISRUPTED_TAINT
from ..kube import errors as E
from ..kube.port import DELETED
from ..kube.times import fmt_time, parse_time
from ..runtime.events import pod_annotations, ref
from ..runtime.log import pretty_slice
from ..runtime.manager import condition, deleting, is_true
from ..state import pods as P
from .env import Env
from .lifecycle import FINALIZER, TERMINATION_TIMESTAMP, set_condition

DRAIN_RETRY = 1.0  # seconds between drain passes while pods are being evicted
MIN_DRAIN_TIME = 5.0  # a drain lasts at least this long, so pods bound late are drained too
EXCLUDE_LB_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
DEFAULT_POD_GRACE = 30  # seconds: the API server's default terminationGracePeriodSeconds
DRAIN_BLOCKED_RETRY = 10.0  # between passes when every remaining pod is blocked
CRITICAL = ("system-cluster-critical", "system-node-critical")
NODEPOOL_LABEL = "karpenter.sh/nodepool"
STUCK_TERMINATING_AFTER = 60.0  # seconds past its deletionTimestamp after which a terminating pod is not waited on


class Termination:
    name = "node.termination"

    def __init__(self, env: Env):
        self.env = env
        # Node UID -> the earliest termination deadline seen while draining it: a NodeClaim annotation moved later
        # never loosens a deadline already acted on (upstream's eviction queue keeps the earlier one)
        self._deadlines: dict[str, float] = {}

    def setup(self, mgr) -> None:
        mgr.watch("Node", self._on_node)
        mgr.watch("VolumeAttachment", self._on_attachment)

    def _on_node(self, etype: str, obj: dict, old: dict | None) -> None:
        if etype != DELETED and deleting(obj):
            self.env.mgr.enqueue(self, obj["metadata"]["name"])

    def _on_attachment(self, etype: str, obj: dict, old: dict | None) -> None:
        node = (obj.get("spec") or {}).get("nodeName") or ""
        if node and deleting(self.env.mgr.get("Node", node)):
            self.env.mgr.enqueue(self, node)

    def reconcile(self, name: str) -> float | None:
        env = self.env
        node = env.mgr.get("Node", name)
        if node is None or not deleting(node) or FINALIZER not in (node["metadata"].get("finalizers") or ()):
            return None
        pid = (node.get("spec") or {}).get("providerID") or ""
        sn = env.cluster.by_node.get(name)
        claim = sn.claim if sn is not None else None
        if claim is not None and pid and _claims_with_provider_id(env, pid) > 1:
            claim = None  # as upstream: duplicate NodeClaims leave no single source of truth, the Node goes alone
        if claim is not None and not deleting(claim):
            env.api.delete("NodeClaim", claim["metadata"]["name"])
            env.mgr.pump()
            claim = env.mgr.get("NodeClaim", claim["metadata"]["name"])
        if not is_true(node, "Ready") and pid:
            try:
                env.cloud.get(pid)
            except NodeClaimNotFoundError:
                return self._remove_finalizer(node)
        deadline = self._earliest_deadline(node, parse_time(
            ((claim or {}).get("metadata", {}).get("annotations") or {}).get(TERMINATION_TIMESTAMP)))
        self._taint(node)
        waiting = self._drain(node, claim, deadline)
        if waiting is None:
            since = parse_time(node["metadata"].get("deletionTimestamp"))
            if since is not None and env.now() < since + MIN_DRAIN_TIME:
                waiting = since + MIN_DRAIN_TIME - env.now()
        if waiting is not None:
            if claim is not None:
                self._set_drained(claim, "Unknown", "Draining")
            return waiting
        if claim is not None and not is_true(claim, "Drained"):
            self._set_drained(env.mgr.get("NodeClaim", claim["metadata"]["name"]) or claim, "True")
            env.metrics.nodes_drained.labels((node["metadata"].get("labels") or {}).get(NODEPOOL_LABEL, "")).inc()
        if claim is not None:
            claim = env.mgr.get("NodeClaim", claim["metadata"]["name"]) or claim
        waiting = self._await_volume_detachment(node, claim, deadline)
        if waiting is not None:
            return waiting
        if pid:
            try:
                env.cloud.delete(claim or {"status": {"providerID": pid}})
            except NodeClaimNotFoundError:
                pass
            else:
                return 5.0
        return self._remove_finalizer(node)

    def _earliest_deadline(self, node: dict, deadline: float | None) -> float | None:
        key = node["metadata"].get("uid") or node["metadata"]["name"]
        seen = self._deadlines.get(key)
        if seen is not None and (deadline is None or seen < deadline):
            return seen
        if deadline is not None:
            self._deadlines[key] = deadline
        return deadline

    def _await_volume_detachment(self, node: dict, claim: dict | None, deadline: float | None) -> float | None:
        """Wait (seconds until the next look) while VolumeAttachments of drained pods' volumes remain on the node,
        as upstream: the attach-detach controller deletes them; Karpenter only waits, until the NodeClaim's
        terminationGracePeriod deadline passes. None when the instance may be terminated."""
        pending = self._pending_attachments(node)
        if not pending:
            value, reason = "True", None
        elif deadline is None or self.env.now() <= deadline:
            value, reason = "Unknown", "AwaitingVolumeDetachment"
        else:
            value, reason = "False", "TerminationGracePeriodElapsed"
        if claim is not None:
            self._set_drained(claim, value, reason, ctype="VolumesDetached")
        if value != "Unknown":
            return None
        names = pretty_slice(sorted(va["metadata"]["name"] for va in pending), 5)
        self.env.recorder.publish(ref(node), "AwaitingVolumeDetachment",
                                  f"Awaiting deletion of bound volumeattachments ({names})", dedupe=120.0,
                                  dedupe_on=())  # upstream's DedupeValues: the node alone
        return 1.0

    def _pending_attachments(self, node: dict) -> list[dict]:
        """The node's VolumeAttachments of a PersistentVolume, less those of the volumes of pods the drain leaves
        (pods tolerating the disrupted taint, static pods, pods stuck terminating)."""
        env = self.env
        name = node["metadata"]["name"]
        attached = [va for va in env.mgr.list("VolumeAttachment")
                    if (va.get("spec") or {}).get("nodeName") == name
                    and (((va.get("spec") or {}).get("source") or {}).get("persistentVolumeName"))]
        if not attached:
            return []
        now, kept = env.now(), set()
        sn = env.cluster.by_node.get(name)
        for e in (sn.pods.values() if sn is not None else ()):
            if not (P.owner_kind(e.obj) == "Node" or _stuck_terminating(e.obj, now)
                    or any(t.tolerates(DISRUPTED_TAINT) for t in e.info.tolerations)):
                continue
            ns = e.obj["metadata"].get("namespace") or "default"
            for v in (e.obj.get("spec") or {}).get("volumes") or ():
                claim_name = (v.get("persistentVolumeClaim") or {}).get("claimName")
                if claim_name is None and v.get("ephemeral") is not None:
                    claim_name = f"{e.obj['metadata']['name']}-{v.get('name')}"  # the ephemeral volume's PVC
                pvc = env.cluster.volume_lookup("PersistentVolumeClaim", ns, claim_name) if claim_name else None
                if pvc is not None and (pvc.get("spec") or {}).get("volumeName"):
                    kept.add(pvc["spec"]["volumeName"])
        return [va for va in attached if va["spec"]["source"]["persistentVolumeName"] not in kept]

    def _set_drained(self, claim: dict, value: str, reason: str | None = None, ctype: str = "Drained") -> None:
        st = dict(claim.get("status") or {})
        if set_condition(st, ctype, value, self.env.now(), reason=reason, message=reason):
            try:
                self.env.api.patch("NodeClaim", claim["metadata"]["name"], {"status": st}, subresource="status")
            except E.NotFound:
                pass
            self.env.mgr.pump()

    def _taint(self, node: dict) -> None:
        """Taint the node karpenter.sh/disrupted:NoSchedule and take it out of external load balancers."""
        taints = list((node.get("spec") or {}).get("taints") or ())
        tainted = any(t.get("key") == DISRUPTED_TAINT.key and t.get("effect") == DISRUPTED_TAINT.effect for t in taints)
        labelled = (node["metadata"].get("labels") or {}).get(EXCLUDE_LB_LABEL) == "karpenter"
        if tainted and labelled:
            return
        patch: dict = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}}
        if not tainted:
            taints.append(DISRUPTED_TAINT.to_obj())
            patch["spec"] = {"taints": taints}
        if not labelled:
            patch["metadata"]["labels"] = {EXCLUDE_LB_LABEL: "karpenter"}
        self.env.api.patch("Node", node["metadata"]["name"], patch)
        self.env.mgr.pump()

    def _drain(self, node: dict, claim: dict | None, deadline: float | None) -> float | None:
        """Evict the next group of pods; None when the node is drained, else seconds until the next pass."""
        env = self.env
        now = env.now()
        sn = env.cluster.by_node.get(node["metadata"]["name"])
        if sn is None:
            return None
        waiting = []
        for e in sorted(sn.pods.values(), key=lambda e: e.key):
            if e.terminal or P.owner_kind(e.obj) == "Node":
                continue
            if any(t.tolerates(DISRUPTED_TAINT) for t in e.info.tolerations):
                continue
            if _stuck_terminating(e.obj, now):
                continue  # its kubelet never finished it: the node does not wait on it any longer
            waiting.append(e)
        if not waiting:
            return None
        reason = _eviction_reason(claim)
        metric_reason = "" if claim is None else reason  # upstream's label: empty when the node has no NodeClaim
        drained = env.metrics.pods_drained
        evicted = 0
        if deadline is not None:
            # each pod is deleted early enough to get its terminationGracePeriodSeconds before the node's
            # deadline; PDBs and do-not-disrupt no longer hold it
            keep = []
            for e in waiting:
                if _needs_force_delete(e.obj, deadline, now):
                    # at least 1 s: a grace period of 0 would remove the pod from etcd before its kubelet stopped it
                    grace = max(1, int(deadline - now))
                    env.recorder.publish(ref(e.obj), "Disrupted",
                                         f"Deleting the pod to accommodate the terminationTime {fmt_time(deadline)} of the node. "
                                         f"The pod was granted {grace} seconds of grace-period of its "
                                         f"{_pod_grace(e.obj)} terminationGracePeriodSeconds. "
                                         "This bypasses the PDB of the pod and the do-not-disrupt annotation.",
                                         annotations=pod_annotations(e.obj))
                    meta = e.obj["metadata"]
                    uid = {"uid": meta["uid"]} if meta.get("uid") else None
                    try:
                        env.api.delete("Pod", meta["name"], meta.get("namespace", "default"), preconditions=uid,
                                       grace_period_seconds=grace)
                    except (E.NotFound, E.Conflict):
                        continue  # already gone, or replaced by a pod of the same name the cache has not seen yet
                    drained.labels(metric_reason).inc()
                    evicted += 1
                else:
                    keep.append(e)
            waiting = keep
        if waiting:
            groups: list[list] = [[], [], [], []]
            for e in waiting:
                critical = (e.obj.get("spec") or {}).get("priorityClassName") in CRITICAL
                groups[(2 if critical else 0) + (1 if e.daemon else 0)].append(e)
            group = next(g for g in groups if g)
            for e in group:
                st = env.cluster.pod_state(e)
                if st.do_not_disrupt(now):
                    env.recorder.publish(ref(node), "FailedDraining",
                                         f'Failed to drain node, pod {e.key} has "karpenter.sh/do-not-disrupt" annotation',
                                         "Warning", dedupe=120.0, dedupe_on=())  # per node, as upstream
                    continue
                why = evict(env, e, reason, metric_reason)
                if why == PDB_BLOCKED:
                    env.recorder.publish(ref(node), "FailedDraining",
                                         f"Failed to drain node, evicting pod violates a PDB (Pod={e.key})", "Warning",
                                         dedupe=120.0, dedupe_on=())
                elif why == MULTIPLE_PDBS:
                    env.recorder.publish(ref(node), "FailedDraining",
                                         f"Failed to drain node, eviction does not support multiple PDBs (Pod={e.key})",
                                         "Warning", dedupe=120.0, dedupe_on=())
                elif why is None:
                    evicted += 1
        env.mgr.pump()
        delay = DRAIN_RETRY if evicted else DRAIN_BLOCKED_RETRY
        if deadline is not None and waiting:
            live = [deadline - _pod_grace(e.obj) for e in waiting if not P.is_terminating(e.obj)]
            if live:
                delay = min(delay, max(0.0, min(live) - now))
        return max(delay, 0.001)

    def _remove_finalizer(self, node: dict) -> None:
        env = self.env
        try:
            env.api.patch("Node", node["metadata"]["name"], {"metadata": {
                "finalizers": [f for f in node["metadata"].get("finalizers") or () if f != FINALIZER]}})
        except E.NotFound:
            return None
        self._deadlines.pop(node["metadata"].get("uid") or node["metadata"]["name"], None)
        labels = node["metadata"].get("labels") or {}
        nodepool, now, m = labels.get(NODEPOOL_LABEL, ""), env.now(), env.metrics
        m.nodes_terminated.labels(nodepool, labels.get("topology.kubernetes.io/zone", "")).inc()
        since = parse_time(node["metadata"].get("deletionTimestamp"))
        if since is not None:
            m.termination_duration.labels(nodepool).observe(max(0.0, now - since))
        born = parse_time(node["metadata"].get("creationTimestamp"))
        if born is not None:
            m.lifetime.labels(nodepool).observe(max(0.0, now - born))
        env.log.info("deleted node", controller=self.name, Node={"name": node["metadata"]["name"]})
        return None


def _claims_with_provider_id(env: Env, pid: str) -> int:
    return len(env.cluster.claims_by_provider_id.get(pid, ()))


def _stuck_terminating(pod: dict, now: float) -> bool:
    """A pod still there a minute after its deletionTimestamp (the end of its grace period)."""
    since = parse_time((pod.get("metadata") or {}).get("deletionTimestamp"))
    return since is not None and now - since > STUCK_TERMINATING_AFTER


def _needs_force_delete(pod: dict, deadline: float, now: float) -> bool:
    """Whether the pod is deleted now rather than evicted: its grace period would run past the node's deadline.
    A pod already terminating is deleted again (with a shorter grace period) when its deletionTimestamp is later than
    the deadline."""
    since = parse_time((pod.get("metadata") or {}).get("deletionTimestamp"))
    if since is not None:
        return since > deadline
    return now >= deadline - _pod_grace(pod)


def _pod_grace(pod: dict) -> int:
    v = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return DEFAULT_POD_GRACE if v is None else int(v)


PDB_BLOCKED, MULTIPLE_PDBS, GONE = "pdb", "multiple-pdbs", "gone"  # why an eviction did not happen


def evict(env: Env, e, reason: str, metric_reason: str) -> str | None:
    """Evict one pod through the Eviction API as upstream's eviction queue does: the request counted by the code of
    its answer and, once evicted, the pod counted as drained (``metric_reason``) and its ``Evicted`` Event
    published. None when it was evicted, else why not: PDB_BLOCKED (429), MULTIPLE_PDBS (a 500 naming them) or
    GONE (404, 409: already gone, or replaced by a pod of the same name)."""
    requests = env.metrics.eviction_requests
    meta = e.obj["metadata"]
    try:
        env.api.evict(meta["name"], meta.get("namespace", "default"), uid=meta.get("uid"))
    except E.TooManyRequests:
        requests.labels("429").inc()
        return PDB_BLOCKED
    except E.InternalError as err:
        requests.labels("500").inc()
        if "more than one PodDisruptionBudget" in str(err):
            return MULTIPLE_PDBS
        raise
    except (E.NotFound, E.Conflict) as err:
        requests.labels("404" if isinstance(err, E.NotFound) else "409").inc()
        return GONE
    requests.labels("200").inc()
    env.metrics.pods_drained.labels(metric_reason).inc()
    env.recorder.publish(ref(e.obj), "Evicted", f"Evicted pod: {reason}", annotations=pod_annotations(e.obj))
    return None


def _eviction_reason(claim: dict | None) -> str:
    c = condition(claim, "DisruptionReason")
    if c is not None and c.get("status") == "True":
        return str(c.get("reason"))
    return "Forceful Termination"
