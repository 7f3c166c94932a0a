"""NodePool controllers: counters (``status.resources``), readiness (``NodeClassReady``, ``Ready``) and
the template hash annotation (upstream ``nodepool/counter``, ``nodepool/readiness``, ``nodepool/hash``)."""

from __future__ import annotations

from .. import resources as res
from ..disruption.drift import HASH_VERSION, NODEPOOL_HASH, NODEPOOL_HASH_VERSION, nodepool_hash
from ..kube.port import DELETED, JSON_PATCH
from ..kube import errors as E
from ..runtime.manager import condition, deleting
from .env import Env
from .lifecycle import set_condition


# upstream's BaseResources: always reported, at zero when the NodePool has no capacity
BASE_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage")


def nodeclass_readiness(nodeclass: dict | None) -> tuple[bool, str, str]:
    """Whether a NodePool's NodeClass lets it launch, and why not (upstream nodepool/readiness).

    A NodeClass without a ``Ready`` condition counts as ready: karpy's simulated providers have no
    NodeClass controller of their own to set one; a cloud's NodeClass controller reports it."""
    if nodeclass is None:
        return False, "NodeClassNotFound", "NodeClass not found on cluster"
    if deleting(nodeclass):
        return False, "NodeClassTerminating", "NodeClass is Terminating"
    ready = condition(nodeclass, "Ready")
    if ready is None or ready.get("status") == "True":
        return True, "", ""
    if ready.get("status") == "False":
        return False, ready.get("reason") or "NodeClassNotReady", ready.get("message") or ""
    return False, "NodeClassReadinessUnknown", "Node Class Readiness Unknown"


class NodePoolStatus:
    name = "nodepool.status"

    def __init__(self, env: Env):
        self.env = env

    def setup(self, mgr) -> None:
        mgr.watch("NodePool", lambda t, o, old: t != DELETED and mgr.enqueue(self, o["metadata"]["name"]))
        mgr.watch("NodeClaim", self._on_claim)
        for kind in ("AKSNodeClass", "EC2NodeClass", "KWOKNodeClass"):
            mgr.watch(kind, lambda t, o, old: [mgr.enqueue(self, n) for n in sorted(self.env.cluster.nodepools)])

    def _on_claim(self, etype: str, obj: dict, old: dict | None) -> None:
        np = (obj["metadata"].get("labels") or {}).get("karpenter.sh/nodepool")
        if np:
            self.env.mgr.enqueue(self, np)

    def _restamp_claims(self, name: str, h: str) -> None:
        """The NodePool was hashed under another hash version (by upstream Karpenter before a switch, or an
        older karpy): its NodeClaims' hashes cannot be compared with this one, so they take the NodePool's
        hash and this version instead of being called drifted. A NodeClaim already Drifted keeps its old hash
        and so stays drifted (upstream's drift hash versioning)."""
        env = self.env
        for nc in env.mgr.list("NodeClaim"):
            meta = nc["metadata"]
            if (meta.get("labels") or {}).get("karpenter.sh/nodepool") != name or deleting(nc):
                continue
            if (meta.get("annotations") or {}).get(NODEPOOL_HASH_VERSION) == HASH_VERSION:
                continue
            stamp = {NODEPOOL_HASH_VERSION: HASH_VERSION}
            if condition(nc, "Drifted") is None:
                stamp[NODEPOOL_HASH] = h
            try:
                env.api.patch("NodeClaim", meta["name"], {"metadata": {"annotations": stamp}})
            except E.NotFound:
                pass

    def reconcile(self, name: str) -> float | None:
        env = self.env
        np = env.mgr.get("NodePool", name)
        if np is None or deleting(np):
            return None
        # hash
        h = nodepool_hash(np, memo=True)
        ann = np["metadata"].get("annotations") or {}
        if ann.get(NODEPOOL_HASH_VERSION) != HASH_VERSION:
            self._restamp_claims(name, h)
        if ann.get(NODEPOOL_HASH) != h or ann.get(NODEPOOL_HASH_VERSION) != HASH_VERSION:
            np = env.api.patch("NodePool", name, {"metadata": {"annotations": {NODEPOOL_HASH: h, NODEPOOL_HASH_VERSION: HASH_VERSION}}})
        # counters: capacity of the NodePool's launched NodeClaims
        total = dict(env.cluster.usage.get(name, {}))
        nodes = total.pop("nodes", 0)
        resources = {k: "0" for k in BASE_RESOURCES}
        resources.update(res.format_resource_list({k: v for k, v in total.items() if v}))
        resources["nodes"] = str(nodes)
        status = dict(np.get("status") or {})
        status["resources"] = resources
        status["nodes"] = nodes
        nodeclass, ref_ = env.cluster.nodeclass_for(np)
        now = env.now()
        ready, why, detail = nodeclass_readiness(nodeclass)
        if ready:
            set_condition(status, "NodeClassReady", "True", now)
        else:
            set_condition(status, "NodeClassReady", "False", now, reason=why, message=detail)
        set_condition(status, "ValidationSucceeded", "True", now)
        set_condition(status, "Ready", "True" if ready else "False", now,
                      reason=None if ready else "NodeClassNotReady", message=None if ready else "NodeClassReady=False")
        if status != (np.get("status") or {}):
            # the whole status, replaced: a merge patch would keep resources that dropped to zero
            env.api.patch("NodePool", name, [{"op": "add", "path": "/status", "value": status}], patch_type=JSON_PATCH,
                          subresource="status")
        return None
