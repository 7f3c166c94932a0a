"""The cluster state when a bound pod's status alone changes (kube-scheduler's condition, the kubelet's phase and
addresses): the pod's entry is the new object, the node's requests count it once, the node's version moves, and a
pod that finishes stops counting."""

from __future__ import annotations

from karpy import resources as res
from karpy.kube.port import ADDED, MODIFIED
from karpy.runtime.clock import SimClock
from karpy.state.cluster import Cluster


def _node() -> dict:
    return {"kind": "Node", "metadata": {"name": "node-a", "labels": {}},
            "spec": {"providerID": "kwok://node-a"}, "status": {"allocatable": {"cpu": "4", "pods": "110"}}}


def _pod(name: str, cpu: str) -> dict:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {"nodeName": "node-a", "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Pending"}}


def test_a_status_change_keeps_the_count_and_a_finished_pod_leaves_it():
    c = Cluster(SimClock(0.0))
    c.on_node(ADDED, _node(), None)
    a, b = _pod("a", "1"), _pod("b", "500m")
    c.on_pod(ADDED, a, None)
    c.on_pod(ADDED, b, None)
    sn = c.by_node["node-a"]
    assert sn.requested[res.CPU] == 1500
    version = sn.version
    running = {**a, "status": {"phase": "Running", "podIP": "10.0.0.2"}}
    c.on_pod(MODIFIED, running, a)
    assert sn.requested[res.CPU] == 1500
    assert c.pods["default/a"].obj is running and sn.pods["default/a"].obj is running
    assert c.pods["default/a"].info.obj is running
    assert list(sn.pods) == ["default/b", "default/a"]  # as a removal and an addition leave it
    assert sn.version > version
    done = {**running, "status": {"phase": "Succeeded"}}
    c.on_pod(MODIFIED, done, running)
    assert sn.requested[res.CPU] == 500
    assert c.pods["default/a"].terminal
