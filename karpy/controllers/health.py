"""Node repair (feature gate ``NodeRepair``): upstream's ``node/health`` controller.

A Node of a NodeClaim is unhealthy when one of its conditions matches a repair policy of the cloud
provider serving its NodeClass (``RepairPolicy`` in :mod:`karpy.cloudprovider.types`: kwok and Azure
Ready False/Unknown for 10 minutes, AWS for 30 minutes, and each provider's own agent conditions).
Once the condition has held for the policy's toleration (from its ``lastTransitionTime``), the
NodeClaim's termination deadline is stamped at now (``karpenter.sh/nodeclaim-termination-timestamp``:
its drain does not wait for PodDisruptionBudgets or do-not-disrupt) and the NodeClaim is deleted; a
static NodePool or the provisioner then replaces the capacity. Until then the controller requeues
itself for the instant the toleration ends, so a simulation skipping quiet stretches stops there.

Repair is withheld while more than 20 % of the NodePool's nodes (rounded up; the cluster's nodes for
a NodeClaim without a NodePool) are unhealthy: a ``NodeRepairBlocked`` Warning is published and the
node is looked at again 5 minutes later.
"""

from __future__ import annotations

import math

from ..kube import errors as E
from ..kube.port import DELETED
from ..kube.times import fmt_time, parse_time
from ..metrics import reschedulable_pods
from ..runtime.events import ref
from ..runtime.manager import deleting
from .env import Env
from .lifecycle import TERMINATION_TIMESTAMP

ALLOWED_UNHEALTHY = 0.20  # upstream's allowedUnhealthyPercent, "20%", rounded up
BLOCKED_RECHECK = 300.0
BLOCKED_DEDUPE = 900.0


def _conditions(node: dict) -> dict[str, dict]:
    return {c.get("type"): c for c in (node.get("status") or {}).get("conditions") or ()}


def _condition_signature(node: dict | None) -> tuple:
    return tuple(sorted((str(t), c.get("status"), c.get("lastTransitionTime")) for t, c in _conditions(node or {}).items()))


class NodeHealth:
    name = "node.health"

    def __init__(self, env: Env):
        self.env = env

    def setup(self, mgr) -> None:
        mgr.watch("Node", self._on_node)

    def _on_node(self, etype: str, obj: dict, old: dict | None) -> None:
        if etype == DELETED:
            return
        if old is None or _condition_signature(old) != _condition_signature(obj):
            self.env.mgr.enqueue(self, obj["metadata"]["name"])

    def policies(self, claim: dict | None) -> tuple:
        """The repair policies of the provider serving the NodeClaim's NodeClass (upstream's RepairPolicies())."""
        catalog = getattr(self.env.cloud, "catalog", None)
        if catalog is None or claim is None:
            return ()
        try:
            return tuple(catalog(((claim.get("spec") or {}).get("nodeClassRef")) or {}).REPAIR_POLICIES)
        except ValueError:
            return ()

    def unhealthy(self, node: dict, policies: tuple) -> tuple[dict, float] | None:
        """The matching condition whose toleration ends first, and when it ends; None when healthy."""
        conds = _conditions(node)
        best = None
        for p in policies:
            c = conds.get(p.condition_type)
            if c is None or c.get("status") != p.status:
                continue
            since = parse_time(c.get("lastTransitionTime")) or self.env.now()
            at = since + p.toleration
            if best is None or at < best[1]:
                best = (c, at)
        return best

    def reconcile(self, name: str) -> float | None:
        env = self.env
        node = env.mgr.get("Node", name)
        sn = env.cluster.by_node.get(name)
        claim = sn.claim if sn is not None else None
        if node is None or claim is None:
            return None
        policies = self.policies(claim)
        found = self.unhealthy(node, policies)
        if found is None:
            return None
        cond, at = found
        now = env.now()
        if now + 1e-9 < at:
            return at - now  # wake up when the toleration ends
        if deleting(claim):
            return None
        nodepool = (claim["metadata"].get("labels") or {}).get("karpenter.sh/nodepool")
        if not self._healthy_enough(nodepool, policies):
            where = "nodepool" if nodepool else "cluster"
            msg = f"more than 20% nodes are unhealthy in the {where}"
            env.recorder.publish(ref(node), "NodeRepairBlocked", msg, "Warning", dedupe=BLOCKED_DEDUPE, dedupe_on=())
            env.recorder.publish(ref(claim), "NodeRepairBlocked", msg, "Warning", dedupe=BLOCKED_DEDUPE, dedupe_on=())
            if nodepool and nodepool in env.cluster.nodepools:
                env.recorder.publish(ref(env.cluster.nodepools[nodepool]), "NodeRepairBlocked", msg, "Warning",
                                     dedupe=BLOCKED_DEDUPE, dedupe_on=())
            return BLOCKED_RECHECK
        claim_name = claim["metadata"]["name"]
        stamped = parse_time((claim["metadata"].get("annotations") or {}).get(TERMINATION_TIMESTAMP))
        try:
            if stamped is None or stamped > now:
                env.api.patch("NodeClaim", claim_name, {"metadata": {"annotations": {TERMINATION_TIMESTAMP: fmt_time(now)}}})
            env.api.delete("NodeClaim", claim_name)
        except E.NotFound:
            return None
        env.metrics.disrupted(claim, "Unhealthy", reschedulable_pods(env.cluster.by_claim.get(claim_name)))
        env.recorder.publish(ref(node), "NodeRepair",
                             f"Repairing unhealthy node: condition {cond.get('type')}={cond.get('status')} "
                             f"past its toleration", "Warning")
        env.log.info("deleting unhealthy node", controller=self.name, NodeClaim={"name": claim_name},
                     Node={"name": name}, nodepool=nodepool, reason="Unhealthy",
                     condition=cond.get("type"), status=cond.get("status"))
        return None

    def _healthy_enough(self, nodepool: str | None, policies: tuple) -> bool:
        """At most 20 % (rounded up) of the NodePool's nodes (of the cluster's, without a NodePool) unhealthy."""
        nodes = []
        for n in self.env.mgr.list("Node"):
            if nodepool is None or (n["metadata"].get("labels") or {}).get("karpenter.sh/nodepool") == nodepool:
                nodes.append(n)
        bad = sum(1 for n in nodes if self._matches(n, policies))
        return bad <= math.ceil(ALLOWED_UNHEALTHY * len(nodes) - 1e-9)

    @staticmethod
    def _matches(node: dict, policies: tuple) -> bool:
        conds = _conditions(node)
        return any((conds.get(p.condition_type) or {}).get("status") == p.status for p in policies)
