"""Spot evictions and scheduled terminations, as node-problem-detector reports them on the Node, become
interruption messages of karpy's Azure provider (once per VM)."""

from __future__ import annotations

import threading

from karpy.cloudprovider.arm.interruption import NodeConditionInterruption, notice
from karpy.cloudprovider.arm.provider import AzureVMProvider

PID = ("azure:///subscriptions/12345678-1234-1234-1234-123456789012/resourceGroups/mc_rg_cluster_eastus/"
       "providers/Microsoft.Compute/virtualMachines/aks-default-demo-abcde")


def node(*conditions, pid=PID, name="aks-default-demo-abcde"):
    return {"metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": "Standard_D2pls_v6",
                                                  "topology.kubernetes.io/zone": "eastus-2"}},
            "spec": {"providerID": pid},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, *conditions]}}


PREEMPT = {"type": "PreemptionScheduled", "status": "True", "reason": "SpotEvictionIncoming",
           "message": "Preempt Scheduled: Tue, 01 Dec 2026 00:00:30 GMT. EventId: 5d1e3b5c-0000-4000-8000-000000000001"}


def event(kind):
    return {"type": "VMEventScheduled", "status": "True", "reason": "VMEventScheduled",
            "message": f"{kind} Scheduled: Tue, 01 Dec 2026 00:10:00 GMT. EventId: 5d1e3b5c-0000-4000-8000-000000000002"}


def test_which_conditions_are_interruptions():
    msg = notice(node(PREEMPT))
    assert msg["kind"] == "SpotInterruption" and msg["providerID"] == PID
    assert (msg["instanceType"], msg["zone"]) == ("Standard_D2pls_v6", "eastus-2")  # marked unavailable for spot
    assert notice(node(event("Terminate")))["kind"] == "ScheduledTermination"
    assert notice(node(event("Preempt")))["kind"] == "ScheduledTermination"
    for kind in ("Reboot", "Redeploy", "Freeze"):  # the VM comes back
        assert notice(node(event(kind))) is None
    assert notice(node({**PREEMPT, "status": "False"})) is None
    assert notice(node(PREEMPT, pid="aws:///us-west-2a/i-0123456789abcdef0")) is None  # not an Azure VM
    assert notice(node()) is None


class Mgr:
    def __init__(self):
        self.nodes, self.watchers, self.queued = {}, [], []

    def watch(self, kind, fn):
        self.watchers.append(fn)

    def enqueue(self, ctrl, key):
        self.queued.append(key)

    def get(self, kind, name):
        return self.nodes.get(name)

    def event(self, etype, obj):
        self.nodes[obj["metadata"]["name"]] = obj
        for fn in self.watchers:
            fn(etype, obj, None)


class Log:
    def __init__(self):
        self.lines = []

    def info(self, msg, **kv):
        self.lines.append((msg, kv))


def test_each_vm_is_handed_over_once_and_wakes_the_interruption_controller():
    p = AzureVMProvider.__new__(AzureVMProvider)  # only the interruption queue is used here
    p.lock, p._interruptions, p._subscribers = threading.RLock(), [], []
    woken = []
    p.subscribe_interruptions(lambda: woken.append(1))
    mgr, log = Mgr(), Log()
    w = NodeConditionInterruption(p, log)
    w.setup(mgr)
    mgr.event("ADDED", node())
    assert mgr.queued == []
    mgr.event("MODIFIED", node(PREEMPT))
    for key in mgr.queued:
        w.reconcile(key)
    assert [m["kind"] for m in p.interruption_messages()] == ["SpotInterruption"] and woken == [1]
    mgr.queued.clear()
    mgr.event("MODIFIED", node(PREEMPT, event("Terminate")))  # still the same VM: not again
    for key in mgr.queued:
        w.reconcile(key)
    assert p.interruption_messages() == [] and woken == [1]
    assert log.lines[0][0] == "vm interruption noticed" and log.lines[0][1]["provider-id"] == PID
    mgr.event("DELETED", node(PREEMPT))
    assert PID not in w.sent
