"""Spot evictions and scheduled terminations of Azure VMs, handled as interruptions.

Azure gives no queue of interruption notices: on AKS, node-problem-detector polls each VM's Scheduled Events
and sets Node conditions. Upstream's Azure provider only lists ``PreemptionScheduled=True`` among its node
repair policies (behind the NodeRepair gate, with the 20 % unhealthy circuit breaker); karpy also acts on it
at once, as an interruption, so that the pods' capacity is launched before Azure takes the VM (a spot notice
is 30 s at most):

* ``PreemptionScheduled=True``: a spot eviction; the NodeClaim is deleted and replaced, and the offering
  (size, zone, spot) is marked unavailable for 3 minutes;
* ``VMEventScheduled=True`` whose message names a ``Preempt`` or ``Terminate`` event: the NodeClaim is
  deleted and replaced (a ``Reboot``, ``Redeploy`` or ``Freeze`` gives the VM back: nothing is done).

Each VM is handed over once; Nodes that are not this provider's (their provider ID is not ``azure://``) are
left alone.
"""

from __future__ import annotations

import re
from typing import Any

from ...kube.port import DELETED

PREEMPTION = "PreemptionScheduled"
SCHEDULED_EVENT = "VMEventScheduled"
_TERMINAL_EVENT = re.compile(r"(?i)\b(preempt|terminate)")


def notice(node: dict) -> dict | None:
    """The interruption message a Node's conditions call for, or None."""
    pid = (node.get("spec") or {}).get("providerID") or ""
    if not pid.lower().startswith("azure://"):
        return None
    labels = (node.get("metadata") or {}).get("labels") or {}
    base = {"providerID": pid, "instanceType": labels.get("node.kubernetes.io/instance-type", ""),
            "zone": labels.get("topology.kubernetes.io/zone", "")}
    for c in (node.get("status") or {}).get("conditions") or ():
        if c.get("status") != "True":
            continue
        if c.get("type") == PREEMPTION:
            return {"kind": "SpotInterruption", **base, "message": c.get("message") or ""}
        if c.get("type") == SCHEDULED_EVENT and _TERMINAL_EVENT.search(c.get("message") or ""):
            return {"kind": "ScheduledTermination", **base, "message": c.get("message") or ""}
    return None


class NodeConditionInterruption:
    """Watches Nodes; hands a VM's eviction or scheduled termination to the provider's interruption queue."""

    name = "interruption.nodecondition"

    def __init__(self, provider: Any, log: Any):
        self.provider, self.log = provider, log
        self.sent: set[str] = set()

    def setup(self, mgr: Any) -> None:
        self.mgr = mgr

        def on_node(etype: str, obj: dict, old: dict | None) -> None:
            pid = ((obj.get("spec") or {}).get("providerID") or "")
            if etype == DELETED:
                self.sent.discard(pid)
            elif pid not in self.sent and notice(obj) is not None:
                mgr.enqueue(self, obj["metadata"]["name"])
        mgr.watch("Node", on_node)

    def reconcile(self, name: str) -> float | None:
        node = self.mgr.get("Node", name)
        msg = notice(node) if node is not None else None
        if msg is None or msg["providerID"] in self.sent:
            return None
        self.sent.add(msg["providerID"])
        self.log.info("vm interruption noticed", controller=self.name, Node={"name": name}, kind=msg["kind"],
                      **{"provider-id": msg["providerID"], "event": msg["message"][:300]})
        self.provider.push_interruption(msg)
        return None
