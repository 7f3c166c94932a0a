"""Expiration (upstream ``nodeclaim/expiration``): a NodeClaim older than its ``expireAfter`` is deleted,
without budgets; capacity for its pods is launched while it drains."""

from __future__ import annotations

from .. import resources as res
from ..kube.port import DELETED
from ..kube.times import parse_time
from ..runtime.events import ref
from ..metrics import reschedulable_pods
from ..runtime.manager import deleting
from .env import Env


class Expiration:
    name = "nodeclaim.expiration"

    def __init__(self, env: Env):
        self.env = env

    def setup(self, mgr) -> None:
        mgr.watch("NodeClaim", self._on_claim)

    def _on_claim(self, etype: str, obj: dict, old: dict | None) -> None:
        if etype != DELETED and (old is None or (old.get("spec") or {}).get("expireAfter") != (obj.get("spec") or {}).get("expireAfter")):
            self.env.mgr.enqueue(self, obj["metadata"]["name"])

    def reconcile(self, name: str) -> float | None:
        env = self.env
        claim = env.mgr.get("NodeClaim", name)
        if claim is None or deleting(claim) or not env.manages(claim):
            return None  # (a NodeClaim of another Karpenter's NodeClass is its business)
        after = (claim.get("spec") or {}).get("expireAfter")
        if after in (None, "Never"):
            return None
        d = res.parse_duration(after)
        at = (parse_time(claim["metadata"].get("creationTimestamp")) or env.now()) + d
        now = env.now()
        if now + 1e-9 < at:
            return at - now
        env.recorder.publish(ref(claim), "Expired", f"NodeClaim expired after {res.format_duration(d)}")
        env.api.delete("NodeClaim", name)
        env.metrics.disrupted(claim, "Expired", reschedulable_pods(env.cluster.by_claim.get(name)))
        env.log.info("deleting expired nodeclaim", controller=self.name, NodeClaim={"name": name},
                     nodepool=(claim["metadata"].get("labels") or {}).get("karpenter.sh/nodepool"), reason="Expired")
        return None
