"""The ReplicaSet controller's burstReplicas: at most that many pods per sync, then another sync, until
the ReplicaSet has its replicas (karpy sandbox uses 500, so a scale to thousands lets requests in)."""

from __future__ import annotations

from karpy.simulator.sim import Simulation


def _replicaset(n: int) -> dict:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": n, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "x"}]}}}}


def _pods(sim: Simulation) -> int:
    return len(sim.api.list("Pod")[0])


def test_one_sync_creates_at_most_the_burst_and_the_next_syncs_finish():
    sim = Simulation([])
    wl = sim.world.workloads
    wl.burst_replicas = 3
    sim.api.create(_replicaset(10))
    sim.mgr.pump()
    wl.reconcile(("ReplicaSet", "default", "web"))
    assert _pods(sim) == 3
    sim.drain()
    assert _pods(sim) == 10


def test_without_a_burst_one_sync_creates_them_all():
    sim = Simulation([])
    wl = sim.world.workloads
    sim.api.create(_replicaset(10))
    sim.mgr.pump()
    wl.reconcile(("ReplicaSet", "default", "web"))
    assert _pods(sim) == 10
