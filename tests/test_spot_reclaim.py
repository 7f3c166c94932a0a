"""A spot instance interrupted in the simulated cloud is reclaimed once its notice runs out.

The Scenario's ``interrupt`` step posts an interruption notice; Karpenter's interruption controller
deletes the NodeClaim and drains the node. The cloud does not wait for the drain: it takes the spot
instance back after the notice (AWS and kwok 2 minutes, Azure 30 seconds), the Node's kubelet stops
posting status and the Node turns NotReady, and Karpenter's termination controller ("not Ready and the
instance is gone") releases it, even with a drain that a PodDisruptionBudget blocks. The pod garbage
collector then deletes the pods still bound to it (``Killing``) and their controllers recreate them.
An on-demand interruption (``InstanceStopping``) is not reclaimed by this rule.
"""

from __future__ import annotations

import copy

import yaml

from karpy.cloudprovider.simulated import SPOT_NOTICE, spot_notice
from karpy.runtime.manager import condition
from karpy.simulator.sim import Simulation
from test_lifecycle import FIRST, MINUTE, advance, deployment, nodepool, pdb, scenario, simulate
from test_simulate import EXAMPLES, kwok_nodeclass

INTERRUPT_AT = 5 * MINUTE
HOLD = {"consolidateAfter": "Never", "budgets": [{"nodes": "0"}]}


def spot_blocked(capacity: str = "spot", tgp: str | None = None):
    """One 3-CPU pod, under a PDB that allows no disruption, on FIRST; FIRST interrupted at 5m."""
    steps = [advance("5m"), {"interrupt": {"node": FIRST}}, advance("10m")]
    return simulate([kwok_nodeclass(), nodepool(cpus=(4,), capacity=(capacity,), disruption=HOLD, tgp=tgp),
                     deployment("web", 1, "3"), pdb("web", "web", maxUnavailable=0), scenario(steps)])


def test_notice_by_provider():
    assert spot_notice("kwok://default-abc") == SPOT_NOTICE == 120.0
    assert spot_notice("aws:///us-west-2a/i-0123456789abcdef0") == 120.0
    assert spot_notice("azure:///subscriptions/0/resourceGroups/r/providers/Microsoft.Compute/virtualMachines/aks-x") == 30.0


def test_a_spot_node_whose_drain_a_pdb_blocks_is_gone_two_minutes_after_the_notice():
    out = spot_blocked()
    victim = out.lives[FIRST]
    assert victim.capacity_type == "spot" and victim.reason == "Interrupted"
    assert victim.started == out.at(INTERRUPT_AT)
    # the drain is refused by the PDB ...
    assert any("violates a PDB" in e["message"] for e in out.events_of(FIRST, "FailedDraining"))
    assert not out.events("Evicted")
    # ... until the cloud reclaims the instance: the Node goes, and its pod with it
    (removed,) = out.event_times("RemovingNode")
    assert removed == out.at(INTERRUPT_AT + 2 * MINUTE)
    assert victim.deleted == out.at(INTERRUPT_AT + 2 * MINUTE)
    (killed,) = out.events("Killing")
    assert killed["involvedObject"]["name"].startswith("web-")
    assert out.t(killed["firstTimestamp"]) == INTERRUPT_AT + 2 * MINUTE
    # the Deployment recreates the pod, which runs on another node
    (web,) = out.pods_of("web")
    assert web["spec"]["nodeName"] != FIRST and out.lives[web["spec"]["nodeName"]].deleted is None
    assert out.summary["pods"]["pending"] == 0


def test_the_reclaim_comes_before_a_longer_termination_grace_period():
    out = spot_blocked(tgp="10m")
    assert out.lives[FIRST].deleted == out.at(INTERRUPT_AT + 2 * MINUTE)
    assert not out.events("Disrupted") and len(out.events("Killing")) == 1


def test_an_on_demand_interruption_is_not_reclaimed():
    out = spot_blocked("on-demand")
    victim = out.lives[FIRST]
    assert victim.capacity_type == "on-demand" and victim.reason == "Interrupted"
    assert out.events_of(FIRST, "InstanceTerminating") and not out.events("SpotInterrupted")
    # the drain is still blocked at the end, ten minutes on: the node and its pod remain
    assert victim.deleted is None and not out.events("RemovingNode") and not out.events("Killing")
    (web,) = out.pods_of("web")
    assert web["spec"]["nodeName"] == FIRST


def test_an_azure_spot_node_is_reclaimed_thirty_seconds_after_the_notice():
    docs = [d for d in yaml.safe_load_all((EXAMPLES / "aks-multiarch-arm64" / "nodepool.yaml").read_text()) if d]
    np = copy.deepcopy(docs[0])
    np["spec"]["disruption"] = dict(HOLD)
    for r in np["spec"]["template"]["spec"]["requirements"]:
        if r["key"] == "karpenter.sh/capacity-type":
            r["values"] = ["spot"]
    web = deployment("web", 1, "1", nodeSelector={"aks-karpenter": "demo"})
    steps = [advance("5m"), {"interrupt": {"selector": {"matchLabels": {"aks-karpenter": "demo"}}}}, advance("10m")]
    out = simulate([np, docs[1], web, pdb("web", "web", maxUnavailable=0), scenario(steps)])
    (victim,) = out.deleted()
    assert victim.capacity_type == "spot" and victim.reason == "Interrupted"
    assert victim.started == out.at(INTERRUPT_AT)
    assert victim.deleted == out.at(INTERRUPT_AT + 30)
    (killed,) = out.events("Killing")
    assert out.t(killed["firstTimestamp"]) == INTERRUPT_AT + 30
    (pod,) = out.pods_of("web")
    assert pod["spec"]["nodeName"] != f"aks-{victim.name}" and out.summary["pods"]["pending"] == 0


def test_the_kubelet_of_a_reclaimed_instance_never_reports_ready_again():
    docs = [kwok_nodeclass(), nodepool(cpus=(4,), capacity=("spot",), disruption=HOLD), deployment("web", 1, "3")]
    sim = Simulation(docs)
    for obj in sim.initial:
        sim.apply(obj)
    sim.step("advance", "1m")
    (node,) = sim.api.list("Node")[0]
    name, pid = node["metadata"]["name"], node["spec"]["providerID"]
    assert condition(node, "Ready")["status"] == "True"
    # the cloud takes the instance back (no notice reaches Karpenter here, so nothing deletes the Node)
    sim.cloud._reclaim(pid)
    sim.drain()
    assert sim.cloud.find(pid) is None and pid in sim.cloud.reclaimed
    kubelets = sim.world.kubelets
    sim.mgr.enqueue(kubelets, ("node", name))
    sim.drain()
    ready = condition(sim.api.try_get("Node", name), "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", "NodeStatusUnknown",
                                                                   "Kubelet stopped posting node status.")
    # (without the cloud to ask, the stand-in would mark it Ready again)
    kubelets.cloud = None
    sim.mgr.enqueue(kubelets, ("node", name))
    sim.drain()
    assert condition(sim.api.try_get("Node", name), "Ready")["status"] == "True"
