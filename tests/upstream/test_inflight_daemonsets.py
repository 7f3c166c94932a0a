"""DaemonSet usage on nodes already launched, as upstream's ExistingNode counts it.

A node Karpenter launched keeps room for the DaemonSet pods that will run there until they bind; once one binds,
its requests count among the node's pods and no longer among the room held for DaemonSets, so they are counted
once (upstream: remaining daemon resources = the DaemonSets' requests minus what DaemonSet pods bound there
request, never below zero).
"""

from __future__ import annotations

import pytest

from controllers.harness import Harness, pod
from karpy import resources as res

TRIGGER, PROVISIONER = "provisioner.trigger.pod", "provisioner"


@pytest.fixture
def h() -> Harness:
    h = Harness()
    h.setup()
    return h


def _daemonset(h: Harness, cpu: str, memory: str) -> dict:
    return h.create_one({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}}})


def _daemon_pod(h: Harness, ds: dict, node: str, cpu: str, memory: str) -> dict:
    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": ds["metadata"]["uid"], "controller": True}
    p = h.create_one(pod("agent-x", cpu=cpu, memory=memory, namespace="kube-system", owner=owner))
    return h.bind(p, node)


def _cpu_m(node: dict) -> int:
    return res.parse_resource_list({"cpu": node["status"]["allocatable"]["cpu"]})[res.CPU]


def _nominated_to(h: Harness, name: str) -> list[str]:
    return [e["message"] for e in h.events("Nominated") if e["involvedObject"]["name"] == name]


def _provision(h: Harness, name: str, cpu_m: int) -> None:
    h.create(pod(name, cpu=f"{cpu_m}m", unschedulable=True))
    h.reconcile(TRIGGER, f"default/{name}")
    h.tick(h.settings.batch_idle)
    h.reconcile(PROVISIONER)


def test_a_launched_node_holds_room_for_daemonset_pods_not_bound_yet(h):
    _daemonset(h, "1", "1Gi")
    claim, node = h.launch_node(instance_types=["c-4x-amd64-linux"])
    alloc = _cpu_m(node)
    _provision(h, "too-big", alloc - 500)  # would fit the node were the DaemonSet's 1 cpu not held
    assert f"Pod should schedule on: node/{node['metadata']['name']}" not in _nominated_to(h, "too-big")
    assert len(h.nodeclaims()) == 2


def test_a_bound_daemonset_pod_is_not_counted_twice(h):
    ds = _daemonset(h, "1", "1Gi")
    claim, node = h.launch_node(instance_types=["c-4x-amd64-linux"])
    alloc = _cpu_m(node)
    _daemon_pod(h, ds, node["metadata"]["name"], "1", "2Gi")  # asks more memory than its template: counts as bound
    _provision(h, "rest", alloc - 1000)  # exactly what the bound DaemonSet pod leaves
    assert _nominated_to(h, "rest") == [f"Pod should schedule on: node/{node['metadata']['name']}"]
    assert len(h.nodeclaims()) == 1
