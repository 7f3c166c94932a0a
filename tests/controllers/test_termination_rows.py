"""Node termination rows (upstream pkg/controllers/node/termination/suite_test.go) not covered elsewhere."""

from __future__ import annotations

from controllers.harness import Harness, nodepool, pdb
from karpy.controllers.termination import MIN_DRAIN_TIME

TERMINATION = "node.termination"
IT = "c-8x-amd64-linux"
RS_OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": True}


def _names(h: Harness) -> list[str]:
    return sorted(p["metadata"]["name"] for p in h.pods())


def test_a_past_deadline_critical_pod_is_not_held_behind_an_earlier_tier(h):
    # node terminationGracePeriod 300 s; a critical pod whose own 600 s grace period already runs past the
    # deadline is deleted at once, while the non-critical pod ahead of it is still held by its PDB
    h.setup(nodepool(termination_grace_period="5m"))
    c, n = h.launch_node(instance_types=[IT])
    claim, name = c["metadata"]["name"], n["metadata"]["name"]
    h.create(pdb("hold", {"app": "hold"}, max_unavailable=0))
    h.patch("PodDisruptionBudget", "hold", {"status": {
        "observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1,
        "expectedPods": 1}}, "default", subresource="status")
    h.pod_on(name, name="web", labels={"app": "hold"}, owner=RS_OWNER, terminationGracePeriodSeconds=30)
    h.pod_on(name, name="critical", owner=RS_OWNER, priorityClassName="system-node-critical",
             terminationGracePeriodSeconds=600)
    h.delete("NodeClaim", claim)
    h.reconcile("nodeclaim.lifecycle", claim)  # stamps the deadline, deletes the Node
    h.tick(2 * MIN_DRAIN_TIME)
    h.reconcile(TERMINATION, name)
    assert _names(h) == ["web"]
    assert {e["involvedObject"]["name"] for e in h.events("Disrupted")} == {"critical"}
