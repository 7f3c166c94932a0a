"""The cluster state's view of a node (the scheduler's ExistingNode) is kept while its NodeClaim changes only in
what that view does not read (the Consolidatable condition, status.lastPodEventTime, which the disruption
controller reads afresh on every pass), and built again when it reads something that changed."""

from __future__ import annotations

from karpy.kube.port import ADDED, MODIFIED
from karpy.runtime.clock import SimClock
from karpy.state.cluster import Cluster

PID = "kwok://node-a"


def _claim(conditions: list[dict], **status) -> dict:
    return {"kind": "NodeClaim",
            "metadata": {"name": "default-a", "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"requirements": []},
            "status": {"providerID": PID, "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                       "allocatable": {"cpu": "3900m", "memory": "15Gi", "pods": "110"},
                       "conditions": conditions, **status}}


LAUNCHED = [{"type": "Launched", "status": "True"}, {"type": "Initialized", "status": "True",
                                                      "lastTransitionTime": "2026-01-01T00:00:01Z"}]


def _cluster_with(claim: dict) -> Cluster:
    c = Cluster(SimClock(1767225600.0))
    c.on_nodeclaim(ADDED, claim, None)
    return c


def _write(c: Cluster, old: dict, **changes) -> dict:
    new = {**old, **changes}
    c.on_nodeclaim(MODIFIED, new, old)
    return new


def test_a_consolidatable_condition_keeps_the_node_view():
    claim = _claim(LAUNCHED)
    c = _cluster_with(claim)
    sn = c.by_claim["default-a"]
    view = c.existing_node(sn)
    status = dict(claim["status"], conditions=LAUNCHED + [{"type": "Consolidatable", "status": "True"}],
                  lastPodEventTime="2026-01-01T00:00:02Z")
    _write(c, claim, status=status)
    assert c.existing_node(sn) is view


def test_what_the_view_reads_builds_it_again():
    claim = _claim([{"type": "Launched", "status": "True"}])
    c = _cluster_with(claim)
    sn = c.by_claim["default-a"]
    view = c.existing_node(sn)
    assert not view.initialized
    initialized = _write(c, claim, status=dict(claim["status"], conditions=LAUNCHED))
    again = c.existing_node(sn)
    assert again is not view and again.initialized
    relabelled = _write(c, initialized, metadata={**initialized["metadata"],
                                                  "labels": {"karpenter.sh/nodepool": "default", "team": "a"}})
    third = c.existing_node(sn)
    assert third is not again and third.labels.get("team") == "a"
    _write(c, relabelled, status=dict(relabelled["status"], allocatable={"cpu": "3", "memory": "15Gi", "pods": "110"}))
    assert c.existing_node(sn).allocatable != third.allocatable
