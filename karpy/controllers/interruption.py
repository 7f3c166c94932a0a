"""Interruption (upstream AWS ``interruption`` controller): the cloud's interruption notices delete
the NodeClaims concerned at once (without budgets); a spot interruption also marks that offering
unavailable for 3 minutes, so the capacity launched for the pods goes elsewhere."""

from __future__ import annotations

from ..runtime.events import ref
from ..runtime.manager import deleting
from .env import Env


class Interruption:
    name = "interruption"

    def __init__(self, env: Env):
        self.env = env

    def setup(self, mgr) -> None:
        sub = getattr(self.env.cloud, "subscribe_interruptions", None)
        if sub is not None:
            sub(lambda: mgr.enqueue(self, ""))

    def reconcile(self, key: str) -> float | None:
        env = self.env
        c = env.cluster
        for msg in env.cloud.interruption_messages():
            sn = c.by_provider.get(msg.get("providerID", ""))
            if sn is None or sn.claim is None or deleting(sn.claim):
                continue
            claim = sn.claim
            if msg.get("kind") == "SpotInterruption":
                mark = getattr(env.cloud, "mark_unavailable", None)
                if mark is not None:
                    mark(msg.get("instanceType", ""), msg.get("zone", ""), "spot")
                env.recorder.publish(ref(claim), "SpotInterrupted", "Spot interruption warning was triggered", "Warning")
            else:
                env.recorder.publish(ref(claim), "InstanceTerminating", "Instance is terminating", "Warning")
            msg_text = "Interruption triggered termination for the Node"
            if sn.node is not None:
                env.recorder.publish(ref(sn.node), "TerminatingOnInterruption", msg_text)
            env.recorder.publish(ref(claim), "TerminatingOnInterruption", msg_text)
            env.api.delete("NodeClaim", sn.claim_name)
            env.log.info("initiating delete from interruption message", controller=self.name,
                         NodeClaim={"name": sn.claim_name}, messageKind=msg.get("kind"), reason="Interrupted",
                         nodepool=sn.nodepool)
        return None
