"""The node agents (karpy/simulator/agents.py): a NodeClaim's startup taints leave its node once the node is
Ready and Karpenter has registered it, as the agents that own them (a CNI's, a device plugin's) would do;
nothing else is touched."""

from __future__ import annotations

from karpy.kube.memory import MemoryAPI
from karpy.runtime.clock import SimClock
from karpy.runtime.manager import Manager
from karpy.simulator.agents import NodeAgents

STARTUP = {"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"}
OTHER = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def world():
    clock = SimClock(0.0)
    api = MemoryAPI(clock)
    mgr = Manager(api, clock, strict=True)
    mgr.add(NodeAgents(mgr, api))
    mgr.start()
    api.create({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "claim"},
                "spec": {"startupTaints": [STARTUP], "taints": [OTHER],
                         "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "d"},
                         "requirements": []}})
    return api, mgr


def node(registered: bool, ready: bool, taints: list[dict]) -> dict:
    labels = {"karpenter.sh/registered": "true"} if registered else {}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n", "labels": labels,
                         "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "claim",
                                              "uid": "u"}]},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def taints(api) -> list[dict]:
    return api.get("Node", "n")["spec"].get("taints") or []


def test_a_registered_ready_node_loses_only_its_startup_taints():
    api, mgr = world()
    api.create(node(True, True, [STARTUP, OTHER]))
    mgr.drain()
    assert taints(api) == [OTHER]


def test_nothing_before_registration_or_readiness():
    for registered, ready in ((False, True), (True, False)):
        api, mgr = world()
        api.create(node(registered, ready, [STARTUP, OTHER]))
        mgr.drain()
        assert taints(api) == [STARTUP, OTHER], (registered, ready)


def test_registration_later_triggers_the_removal():
    api, mgr = world()
    api.create(node(False, True, [STARTUP]))
    mgr.drain()
    assert taints(api) == [STARTUP]
    api.patch("Node", "n", {"metadata": {"labels": {"karpenter.sh/registered": "true"}}})
    mgr.drain()
    assert taints(api) == []
