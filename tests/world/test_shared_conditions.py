"""Pods bound or started at one instant carry equal status conditions; each pod's status stays its own when
one of them changes later (the store may share what is equal, never what one write changes)."""

from __future__ import annotations

from karpy.kube.memory import MemoryAPI
from karpy.runtime.clock import SimClock
from karpy.simulator.sim import Simulation
from tests.test_simulate import kwok, pod


def _conds(p: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c.get("lastTransitionTime")) for c in (p.get("status") or {}).get("conditions") or ()}


def test_binding_two_pods_at_one_instant_then_changing_one():
    clock = SimClock(1_700_000_000.0)
    api = MemoryAPI(clock)
    for name in ("a", "b"):
        api.create({"kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [{"name": "c"}]}})
        api.bind(name, "default", "node-1")
    a, b = api.get("Pod", "a"), api.get("Pod", "b")
    assert _conds(a) == _conds(b) == {"PodScheduled": ("True", "2023-11-14T22:13:20Z")}
    status = {"conditions": [{**a["status"]["conditions"][0], "status": "False", "reason": "Changed"}]}
    api.patch("Pod", "a", {"status": status}, subresource="status")
    assert _conds(api.get("Pod", "a"))["PodScheduled"][0] == "False"
    assert _conds(api.get("Pod", "b")) == {"PodScheduled": ("True", "2023-11-14T22:13:20Z")}


def test_pods_started_together_are_each_running_and_ready():
    sim = Simulation(kwok(pod("p1", cpu="1"), pod("p2", cpu="1"), pod("p3", cpu="1")), until=600.0)
    sim.run()
    pods = {p["metadata"]["name"]: p for p in sim.api.list("Pod")[0]}
    assert sorted(pods) == ["p1", "p2", "p3"]
    for p in pods.values():
        assert p["status"]["phase"] == "Running"
        c = _conds(p)
        assert {t: s for t, (s, _) in c.items()} == {"Initialized": "True", "Ready": "True", "ContainersReady": "True",
                                                      "PodScheduled": "True"}
        assert c["Ready"][1] == p["status"]["startTime"]
