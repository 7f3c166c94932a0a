"""Static NodePools (``spec.replicas``, feature gate ``StaticCapacity``): upstream's
``static/provisioning`` and ``static/deprovisioning`` controllers.

A static NodePool keeps ``replicas`` NodeClaims whether or not any pod needs them:

* **provisioning** creates the missing NodeClaims when the NodePool is Ready, within
  ``limits.nodes`` (the NodeClaims it has, being deleted or being disrupted included, plus the new
  ones never exceed it). A NodeClaim of the NodePool that is deleted (expired, repaired, interrupted,
  deleted by hand) is replaced the same way. NodeClaims being replaced by drift count as present, so
  drift and provisioning do not both replace them.
* **deprovisioning** deletes NodeClaims above ``replicas``: first those not launched yet, then empty
  nodes (nothing but DaemonSet pods, none with an active ``karpenter.sh/do-not-disrupt``), then the
  others in increasing order of disruption cost, nodes holding a do-not-disrupt pod last.

The NodeClaims carry the NodePool template's requirements only; the cloud provider launches the
cheapest offering they allow. The provisioner never launches from a static NodePool for pending pods,
and emptiness and consolidation leave its nodes alone; drift replaces them one for one
(:mod:`karpy.disruption.methods`).
"""

from __future__ import annotations

from .. import resources as res
from ..disruption.methods import is_static
from ..kube import errors as E
from ..kube.port import ADDED, DELETED
from ..kube.times import parse_time
from ..runtime.manager import deleting, is_true
from ..state import pods as P
from ..state.cluster import Cluster, StateNode
from .env import Env
from .provisioning import Provisioner

RESYNC = 60.0  # upstream requeues every minute
LIMIT_RETRY = 30.0


def node_limit(nodepool: dict) -> float:
    """``limits.nodes`` of a NodePool, or infinity."""
    raw = ((nodepool.get("spec") or {}).get("limits") or {}).get("nodes")
    return float("inf") if raw is None else float(res.parse_quantity(raw))


def node_counts(cluster: Cluster, nodepool: str) -> tuple[int, int, int]:
    """(running, deleting, pending disruption) NodeClaims of a NodePool, as upstream's NodePool state
    counts them: a NodeClaim is running from its creation until it is marked for disruption or
    deleted."""
    running = gone = pending = 0
    for sn in cluster.nodes.values():
        if sn.claim is None or sn.nodepool != nodepool:
            continue
        if sn.deleting():
            gone += 1
        elif sn.marked:
            pending += 1
        else:
            running += 1
    return running, gone, pending


class _StaticBase:
    periodic = True  # the minute's resync finds nothing new while the cluster stays as it is

    def __init__(self, env: Env):
        self.env = env

    def setup(self, mgr) -> None:
        mgr.watch("NodePool", self._on_nodepool)
        mgr.watch("NodeClaim", self._on_claim)

    def _on_nodepool(self, etype: str, obj: dict, old: dict | None) -> None:
        if etype != DELETED and is_static(obj):
            self.env.mgr.enqueue(self, obj["metadata"]["name"])

    def _on_claim(self, etype: str, obj: dict, old: dict | None) -> None:
        np = (obj["metadata"].get("labels") or {}).get("karpenter.sh/nodepool")
        if np and self._claim_event(etype, obj, old) and is_static(self.env.cluster.nodepools.get(np)):
            self.env.mgr.enqueue(self, np)

    def _claim_event(self, etype: str, obj: dict, old: dict | None) -> bool:
        raise NotImplementedError

    def _nodepool(self, name: str) -> dict | None:
        np = self.env.mgr.get("NodePool", name)
        if np is None or deleting(np) or not is_static(np):
            return None
        return np


class StaticProvisioning(_StaticBase):
    """Creates the NodeClaims a static NodePool lacks."""

    name = "static.provisioning"

    def __init__(self, env: Env, provisioner: Provisioner):
        super().__init__(env)
        self.provisioner = provisioner

    def _claim_event(self, etype: str, obj: dict, old: dict | None) -> bool:
        # a NodeClaim going away (deleted, or its deletion begun) may leave the NodePool short
        return etype == DELETED or (deleting(obj) and not deleting(old))

    def reconcile(self, name: str) -> float | None:
        env = self.env
        np = self._nodepool(name)
        if np is None or not is_true(np, "Ready"):
            return None
        if not env.cluster.synced():
            return 1.0  # as upstream: no count is trusted while a NodeClaim is not launched yet
        running, gone, pending = node_counts(env.cluster, name)
        desired = int(np["spec"]["replicas"])
        if running + pending >= desired:
            return RESYNC
        room = node_limit(np) - (running + gone + pending)
        count = int(min(desired - running, room))
        if count <= 0:
            env.log.info("nodepool node limit reached", controller=self.name, NodePool={"name": name})
            return LIMIT_RETRY
        nodeclass, _ = env.cluster.nodeclass_for(np)
        if nodeclass is None:
            return RESYNC
        env.log.info("provisioning nodeclaims to satisfy replica count", controller=self.name,
                     NodePool={"name": name}, current=running, desired=desired, **{"provision-count": count})
        for _ in range(count):
            self.provisioner.create_static_nodeclaim(np, nodeclass, reason="provisioned")
        return RESYNC


class StaticDeprovisioning(_StaticBase):
    """Deletes the NodeClaims above a static NodePool's replicas."""

    name = "static.deprovisioning"

    def _claim_event(self, etype: str, obj: dict, old: dict | None) -> bool:
        return etype == ADDED and old is None  # a new NodeClaim may overshoot the count

    def reconcile(self, name: str) -> float | None:
        env = self.env
        np = self._nodepool(name)
        if np is None:
            return None
        running, _, _ = node_counts(env.cluster, name)
        excess = running - int(np["spec"]["replicas"])
        if excess <= 0:
            return RESYNC
        env.log.info("deprovisioning nodeclaims to satisfy replica count", controller=self.name,
                     NodePool={"name": name}, current=running, desired=int(np["spec"]["replicas"]),
                     **{"deprovision-count": excess})
        for claim in self.candidates(np, excess):
            try:
                env.api.delete("NodeClaim", claim)
            except E.NotFound:
                continue
            env.log.debug("deleting nodeclaim", controller=self.name, NodeClaim={"name": claim})
        return RESYNC

    def candidates(self, np: dict, count: int) -> list[str]:
        """The NodeClaims to delete: not launched first, then empty nodes, then by disruption cost (a node
        with an active do-not-disrupt pod last)."""
        env = self.env
        c = env.cluster
        now = env.now()
        name = np["metadata"]["name"]
        mine = sorted((sn for sn in c.nodes.values() if sn.claim is not None and sn.nodepool == name
                       and not sn.deleting() and not sn.marked), key=_created)
        unlaunched = [sn for sn in mine if not sn.launched()]
        out = [sn.claim_name for sn in unlaunched][:count]
        if len(out) == count:
            return out
        launched = [sn for sn in mine if sn.launched()]

        def pods_of(sn: StateNode) -> list:
            return [e for e in sn.pods.values() if e.active and P.owner_kind(e.obj) != "Node"]

        def guarded(sn: StateNode) -> bool:
            return any(c.pod_state(e).do_not_disrupt(now) for e in pods_of(sn))

        empty = [sn for sn in launched if all(e.daemon for e in pods_of(sn)) and not guarded(sn)]
        out += [sn.claim_name for sn in empty][: count - len(out)]
        if len(out) == count:
            return out
        rest = [sn for sn in launched if sn not in empty]
        rest.sort(key=lambda sn: (guarded(sn),
                                  sum(c.pod_state(e).eviction_cost() for e in pods_of(sn))
                                  * _lifetime_remaining(sn.claim, now), _created(sn)))
        out += [sn.claim_name for sn in rest][: count - len(out)]
        return out


def _lifetime_remaining(claim: dict | None, now: float) -> float:
    """The share of its ``expireAfter`` a NodeClaim has still to live (1 without one)."""
    after = ((claim or {}).get("spec") or {}).get("expireAfter")
    if after in (None, "Never"):
        return 1.0
    total = res.parse_duration(after)
    born = parse_time((claim or {}).get("metadata", {}).get("creationTimestamp")) or now
    return 1.0 if total <= 0 else min(1.0, max(0.0, (total - (now - born)) / total))


def _created(sn: StateNode) -> tuple:
    return ((sn.claim or {}).get("metadata", {}).get("creationTimestamp") or "", sn.claim_name or "")
