"""The kube-scheduler stand-in follows a node that is relabelled: it moves between topology domains, so zone
spreads count it where it now is."""

from __future__ import annotations

from collections import Counter

from karpy.simulator.sim import Simulation

ZONE = "topology.kubernetes.io/zone"


def _node(name: str, zone: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {ZONE: zone, "kubernetes.io/os": "linux", "tier": "x"}},
            "spec": {},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                       "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": {"app": "s"}},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "100m"}}}],
                     "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                                                    "labelSelector": {"matchLabels": {"app": "s"}}}]}}


def _relabel(sim: Simulation, name: str, labels: dict) -> None:
    sim.api.patch("Node", name, {"metadata": {"labels": labels}})
    sim.drain()


def test_a_relabelled_node_moves_between_zones_for_spreads():
    sim = Simulation([], until=60.0, karpenter=False)
    for n in (_node("n1", "a"), _node("n2", "a"), _node("n3", "b")):
        sim.apply(n)
    sim.drain()
    ks = sim.world.scheduler
    assert ks.domains[ZONE] == {"a": 2, "b": 1}
    _relabel(sim, "n2", {ZONE: "c", "extra": "1"})  # one label changes, one is added, the rest stay
    assert ks.domains[ZONE] == {"a": 1, "b": 1, "c": 1}
    assert ks.domains["tier"] == {"x": 3} and ks.domains["extra"] == {"1": 1}
    for i in range(6):
        sim.api.create(_pod(f"p{i}"))
    sim.drain()
    zones = {n: n_zone for n, n_zone in (("n1", "a"), ("n2", "c"), ("n3", "b"))}
    placed = Counter(zones[(p.get("spec") or {}).get("nodeName")] for p in sim.api.list("Pod")[0])
    assert placed == {"a": 2, "b": 2, "c": 2}
    _relabel(sim, "n2", {ZONE: None, "extra": None})  # labels removed: n2 is in no zone
    assert ks.domains[ZONE] == {"a": 1, "b": 1}
    assert "1" not in ks.domains.get("extra", {})
    sim.api.create(_pod("p6"))
    sim.drain()
    p6 = sim.api.get("Pod", "p6", "default")
    assert (p6.get("spec") or {}).get("nodeName") in ("n1", "n3")


def test_a_pod_that_fits_no_node_is_marked_unschedulable_counting_the_usable_nodes():
    sim = Simulation([], until=60.0, karpenter=False)
    cordoned = _node("n3", "b")
    cordoned["spec"] = {"unschedulable": True}
    for n in (_node("n1", "a"), _node("n2", "a"), cordoned):
        sim.apply(n)
    sim.drain()
    big = _pod("big")
    big["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "100"
    sim.api.create(big)
    sim.drain()
    st = sim.api.get("Pod", "big", "default")["status"]
    cond = next(c for c in st["conditions"] if c["type"] == "PodScheduled")
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert cond["message"].startswith("0/2 nodes are available")
