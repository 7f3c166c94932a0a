"""NodeClaim garbage collection (upstream ``nodeclaim/garbagecollection``).

Every 2 minutes, a launched NodeClaim whose instance the cloud provider no longer lists is deleted,
unless its Node still reports Ready (its kubelet is alive, whatever the cloud says). That is how a
NodeClaim goes whose instance was lost outside Karpenter: a spot instance reclaimed, an instance
terminated by hand.
"""

from __future__ import annotations

from typing import Any

from ..kube import errors as E
from ..kube.port import DELETED
from ..metrics import reschedulable_pods
from ..runtime.events import ref
from ..runtime.manager import deleting, is_true
from .env import Env

GC_PERIOD = 120.0  # seconds between passes, as upstream


class GarbageCollection:
    name = "nodeclaim.garbagecollection"
    periodic = True  # polls every GC_PERIOD

    def __init__(self, env: Env):
        self.env = env
        self.started = False

    def setup(self, mgr) -> None:
        mgr.watch("NodeClaim", self._on_claim)

    def _on_claim(self, etype: str, obj: dict, old: dict | None) -> None:
        if not self.started and etype != DELETED:
            self.started = True
            self.env.mgr.requeue_after(self, "", GC_PERIOD)

    def reconcile(self, key: Any) -> float | None:
        env = self.env
        claims = env.mgr.list("NodeClaim")
        if not claims:
            self.started = False
            return None
        ids = getattr(env.cloud, "provider_ids", None)  # (a cloud that can say them without listing everything)
        listed = ids() if ids is not None else {((c.get("status") or {}).get("providerID")) for c in env.cloud.list()}
        for claim in claims:
            pid = (claim.get("status") or {}).get("providerID")
            if not pid or deleting(claim) or not is_true(claim, "Launched") or pid in listed:
                continue
            sn = env.cluster.by_claim.get(claim["metadata"]["name"])
            node = sn.node if sn is not None else None
            if node is not None and is_true(node, "Ready"):
                continue
            name = claim["metadata"]["name"]
            try:
                env.api.delete("NodeClaim", name)
            except E.NotFound:
                continue
            env.recorder.publish(ref(claim), "GarbageCollected", "NodeClaim has no cloud provider instance")
            env.metrics.disrupted(claim, "garbage_collected", reschedulable_pods(sn))
            env.log.info("garbage collecting nodeclaim with no cloudprovider representation", controller=self.name,
                         NodeClaim={"name": name}, **{"provider-id": pid})
        return GC_PERIOD
