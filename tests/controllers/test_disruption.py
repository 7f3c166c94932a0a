"""The disruption controller and its orchestration queue (karpy/controllers/disruption.py).

Mirrors upstream pkg/controllers/disruption/{suite,queue,emptiness,drift,consolidation}_test.go: managed
nodes and pods are set up by hand, the singleton disruption controller is reconciled (ExpectSingletonReconciled),
then the queue (ExpectObjectReconciled(queue, ...)); the tests play kubelet for the replacements.
"""

from __future__ import annotations

import pytest

from controllers.harness import (
    DISRUPTED_TAINT, DO_NOT_DISRUPT, INSTANCE_TYPE_LABEL, Harness, cond, cond_status, deleting, has_taint, labels,
    nodepool, pdb,
)
from karpy.kube.times import fmt_time

DISRUPTION = "disruption"
QUEUE = "disruption.queue"
RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": True}
BIG = "c-16x-amd64-linux"
SMALL = "c-4x-amd64-linux"


def _pool(**kw) -> dict:
    kw.setdefault("consolidate_after", "0s")
    kw.setdefault("policy", "WhenEmptyOrUnderutilized")
    return nodepool(**kw)


def _node(h: Harness, it: str = BIG, pods: int = 0, cpu: str = "1", pool: str = "default", **pod_kw) -> tuple[str, str]:
    """An initialized managed node with ``pods`` ReplicaSet pods; its NodeClaim's disruption conditions computed."""
    c, n = h.launch_node(pool, instance_types=[it])
    for _ in range(pods):
        h.pod_on(n["metadata"]["name"], cpu=cpu, owner=RS, **pod_kw)
    h.reconcile("nodeclaim.disruption", c["metadata"]["name"])
    return c["metadata"]["name"], n["metadata"]["name"]


def _pass(h: Harness) -> float | None:
    """One disruption pass (ExpectSingletonReconciled)."""
    h.clear_queue()
    return h.reconcile(DISRUPTION)


def _validated_pass(h: Harness) -> None:
    """A consolidation/emptiness pass and its 15 s validation."""
    assert _pass(h) == pytest.approx(15.0)
    h.tick(15)
    _pass(h)


def _running(h: Harness):
    return list(h.disruption.queue.values())


def _process(h: Harness) -> float | None:
    """ExpectObjectReconciled(queue, ...) for the one command in flight."""
    (r,) = _running(h)
    return h.reconcile(QUEUE, r.id)


def _initialize(h: Harness, claim_name: str) -> None:
    """Play the replacement's instance and kubelet: launch, register, Ready, initialized."""
    h.launch(claim_name)
    n = h.register(claim_name)
    h.reconcile("nodeclaim.lifecycle", claim_name)
    h.make_ready(n["metadata"]["name"])
    h.reconcile("nodeclaim.lifecycle", claim_name)
    assert cond_status(h.get("NodeClaim", claim_name), "Initialized") == "True"


def _drift(h: Harness) -> None:
    """Change the NodePool template so every NodeClaim of it drifts, and let the conditions be computed."""
    h.patch("NodePool", "default", {"spec": {"template": {"metadata": {"labels": {"rev": "2"}}}}})
    for c in h.nodeclaims():
        h.reconcile("nodeclaim.disruption", c["metadata"]["name"])
        assert cond_status(h.get("NodeClaim", c["metadata"]["name"]), "Drifted") == "True"


def _new_claims(h: Harness, *old: str) -> list[dict]:
    return [c for c in h.nodeclaims() if c["metadata"]["name"] not in old]


# --- emptiness ----------------------------------------------------------------------------------


def test_an_empty_node_is_deleted_after_the_validation_wait(h):
    """It("can delete empty nodes"): emptiness waits 15 s, re-validates, then deletes without replacement."""
    h.setup(_pool())
    claim, node = _node(h)
    assert _pass(h) == pytest.approx(15.0)
    assert not has_taint(h.get("Node", node), DISRUPTED_TAINT["key"])
    assert not deleting(h.get("NodeClaim", claim))
    h.tick(15)
    _pass(h)
    assert has_taint(h.get("Node", node), DISRUPTED_TAINT["key"], "NoSchedule")
    reason = cond(h.get("NodeClaim", claim), "DisruptionReason")
    assert reason["status"] == "True" and reason["reason"] == "Empty"
    assert _process(h) is None  # no replacement to wait for
    assert deleting(h.get("NodeClaim", claim))
    assert [(e["involvedObject"]["kind"], e["message"]) for e in h.events("DisruptionTerminating", involved=node)] == \
        [("Node", "Disrupting Node: Empty"), ("NodeClaim", "Disrupting Node: Empty")]
    assert h.disruption.queue == {}


def test_validation_rejects_an_emptiness_command_when_a_pod_arrives_during_the_wait(h):
    """The 15 s validation: a node that is no longer empty is left alone (upstream validation.go: churn)."""
    h.setup(_pool())
    claim, node = _node(h)
    assert _pass(h) == pytest.approx(15.0)
    h.tick(10)
    h.pod_on(node, cpu="1", owner=RS)
    h.tick(5)
    _pass(h)
    assert h.disruption.queue == {}
    assert not has_taint(h.get("Node", node), DISRUPTED_TAINT["key"])
    assert cond(h.get("NodeClaim", claim), "DisruptionReason") is None
    assert not deleting(h.get("NodeClaim", claim))
    assert h.logs("abandoning disruption command, validation failed")


def test_validation_rejects_a_consolidation_when_the_candidate_gets_busier(h):
    """Consolidation validation: the replacement computed 15 s ago no longer fits the node's pods."""
    h.setup(_pool())
    claim, node = _node(h, pods=1)
    assert _pass(h) == pytest.approx(15.0)
    assert h.disruption.validating is not None and h.disruption.validating.method == "single"
    h.tick(10)
    h.pod_on(node, cpu="8", owner=RS)
    h.tick(5)
    _pass(h)
    assert h.disruption.queue == {}
    assert _new_claims(h, claim) == []
    assert not has_taint(h.get("Node", node), DISRUPTED_TAINT["key"])
    assert any(e["reason"] == "ConsolidationRejected" for e in h.events(involved=node))


def test_emptiness_waits_for_consolidate_after(h):
    """It("should wait for the node TTL for empty nodes before consolidating")"""
    h.setup(_pool(consolidate_after="5m"))
    claim, _ = _node(h)
    assert _pass(h) == pytest.approx(10.0)
    assert h.disruption.validating is None
    h.tick(300)
    h.reconcile("nodeclaim.disruption", claim)
    assert cond_status(h.get("NodeClaim", claim), "Consolidatable") == "True"
    _validated_pass(h)
    assert cond(h.get("NodeClaim", claim), "DisruptionReason")["reason"] == "Empty"


def test_consolidate_after_never_leaves_empty_nodes(h):
    """It("should ignore nodes without the consolidatable status condition") -- consolidateAfter: Never."""
    h.setup(_pool(consolidate_after="Never"))
    claim, node = _node(h)
    _pass(h)
    assert h.disruption.validating is None and h.disruption.queue == {}
    assert any(e["message"] == 'NodePool "default" has consolidation disabled'
               for e in h.events("Unconsolidatable", involved=node))


def test_a_node_says_why_it_is_unconsolidatable_once_in_fifteen_minutes_whatever_the_reason(h):
    """Upstream's Unconsolidatable events are deduplicated on the node (and NodeClaim) alone for 15 minutes: the
    first reason stands for the window even when the next pass finds another; after it the new reason is told."""
    h.setup(_pool(policy="WhenEmpty"))
    claim, node = _node(h, pods=1)
    _pass(h)
    h.patch("NodePool", "default", {"spec": {"disruption": {"consolidateAfter": "Never"}}})
    h.reconcile("nodeclaim.disruption", claim)
    h.tick(60)
    _pass(h)

    def said(kind, name):
        return [e["message"] for e in h.events("Unconsolidatable", involved=name) if e["involvedObject"]["kind"] == kind]

    busy = 'NodePool "default" has consolidation policy WhenEmpty, but node is not empty'
    disabled = 'NodePool "default" has consolidation disabled'
    assert said("Node", node) == [busy]
    assert said("NodeClaim", claim) == [busy]
    h.tick(15 * 60)
    _pass(h)
    assert said("Node", node) == [busy, disabled]
    assert said("NodeClaim", claim) == [busy, disabled]


def test_a_reason_worked_out_on_demand_is_worked_out_only_when_published(h):
    """The engine may hand over an Unconsolidatable reason as a function (its whole simulation, run only when
    asked): a repeat the recorder drops within the window never calls it, the first one after it does, once for the node and its NodeClaim."""
    h.setup(_pool(policy="WhenEmpty"))
    _, node = _node(h, pods=1)
    _pass(h)
    asked = []

    def reason():
        asked.append(1)
        return "Can't replace with a cheaper node"

    h.disruption.emit_node(node, "Unconsolidatable", reason, dedupe=True)
    assert asked == []
    h.tick(15 * 60)
    h.disruption.emit_node(node, "Unconsolidatable", reason, dedupe=True)
    assert asked == [1]  # once, for the Node's event and the NodeClaim's
    assert [e["message"] for e in h.events("Unconsolidatable", involved=node)][-1] == "Can't replace with a cheaper node"


def test_when_empty_policy_does_not_consolidate_busy_nodes(h):
    """consolidationPolicy WhenEmpty: an underutilized node is left alone, and says why."""
    h.setup(_pool(policy="WhenEmpty"))
    _, node = _node(h, pods=1)
    _pass(h)
    assert h.disruption.validating is None and h.disruption.queue == {}
    assert any("consolidation policy WhenEmpty" in e["message"] for e in h.events("Unconsolidatable", involved=node))


# --- consolidation and the orchestration queue --------------------------------------------------


def test_consolidation_launches_a_cheaper_replacement_before_deleting_the_candidate(h):
    """It("should keep nodes tainted when replacements haven't finished initialization"),
    It("should fully handle a command when replacements are initialized")"""
    h.setup(_pool())
    claim, node = _node(h, pods=1)
    _validated_pass(h)
    (rep,) = _new_claims(h, claim)
    rep_name = rep["metadata"]["name"]
    assert INSTANCE_TYPE_LABEL not in labels(rep) or labels(rep)[INSTANCE_TYPE_LABEL] != BIG
    its = next(r["values"] for r in rep["spec"]["requirements"] if r["key"] == INSTANCE_TYPE_LABEL)
    assert BIG not in its and "c-2x-amd64-linux" in its
    assert [e["message"] for e in h.events("DisruptionLaunching", involved=rep_name)] == ["Launching NodeClaim: Underutilized"]
    assert has_taint(h.get("Node", node), DISRUPTED_TAINT["key"])
    assert cond(h.get("NodeClaim", claim), "DisruptionReason")["reason"] == "Underutilized"
    assert any(e["message"].startswith("Consolidation candidate: replace [") for e in h.events("ConsolidationCandidate"))
    # the replacement has not initialized: the candidate stays, tainted
    assert _process(h) == pytest.approx(10.0)
    assert not deleting(h.get("NodeClaim", claim))
    assert has_taint(h.get("Node", node), DISRUPTED_TAINT["key"])
    assert h.events("DisruptionWaitingReadiness", involved=rep_name)
    h.tick(10)
    _initialize(h, rep_name)
    assert _process(h) is None
    assert deleting(h.get("NodeClaim", claim))
    assert h.disruption.queue == {}
    assert not deleting(h.get("NodeClaim", rep_name))


def test_pods_of_the_candidate_are_expected_on_the_replacement(h):
    """The candidate's pods are nominated to the replacement (the provisioner will not launch for them again)."""
    h.setup(_pool())
    claim, node = _node(h, pods=2, cpu="500m")
    _validated_pass(h)
    (rep,) = _new_claims(h, claim)
    sn = h.cluster.by_claim[rep["metadata"]["name"]]
    pods_on_candidate = {f"default/{p['metadata']['name']}" for p in h.pods() if p["spec"].get("nodeName") == node}
    assert {k for k, t in h.cluster.nominations.items() if t == sn.key} == pods_on_candidate


def test_rollback_when_the_replacement_is_deleted(h):
    """It("should add and remove taints from NodeClaims that fail to disrupt"),
    It("should untaint nodes when drift replacement fails")"""
    h.setup(_pool())
    claim, node = _node(h, pods=1)
    _validated_pass(h)
    (rep,) = _new_claims(h, claim)
    h.delete("NodeClaim", rep["metadata"]["name"])
    h.reconcile("nodeclaim.lifecycle", rep["metadata"]["name"])  # never launched: goes at once
    assert h.get("NodeClaim", rep["metadata"]["name"]) is None
    assert _process(h) is None
    assert h.disruption.queue == {}
    assert not has_taint(h.get("Node", node), DISRUPTED_TAINT["key"])
    assert cond(h.get("NodeClaim", claim), "DisruptionReason") is None
    assert not deleting(h.get("NodeClaim", claim))
    assert not h.cluster.by_claim[claim].marked
    (ev,) = h.events("DisruptionAbandoned")
    assert ev["type"] == "Warning" and "replacement was deleted" in ev["message"]


def test_rollback_when_the_replacement_does_not_initialize_in_ten_minutes(h):
    """It("should untaint nodes when a command times out")"""
    h.setup(_pool())
    claim, node = _node(h, pods=1)
    _validated_pass(h)
    (rep,) = _new_claims(h, claim)
    h.launch(rep["metadata"]["name"])  # launched, never registers
    for _ in range(59):
        h.tick(10)
        assert _process(h) == pytest.approx(10.0)
    assert has_taint(h.get("Node", node), DISRUPTED_TAINT["key"])
    h.tick(11)
    assert _process(h) is None
    assert h.disruption.queue == {}
    assert not has_taint(h.get("Node", node), DISRUPTED_TAINT["key"])
    assert cond(h.get("NodeClaim", claim), "DisruptionReason") is None
    assert not deleting(h.get("NodeClaim", claim))
    (ev,) = h.events("DisruptionAbandoned")
    assert "command reached timeout" in ev["message"]


def test_a_command_finishes_only_when_every_replacement_is_initialized(h):
    """It("should only finish a command when all replacements are initialized"), It("can replace drifted nodes
    with multiple nodes"): two pods that may not share a node need two replacements."""
    h.setup(_pool(consolidate_after="Never"))
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    claim, node = _node(h)
    for i in range(2):
        h.pod_on(node, name=f"spread-{i}", cpu="1", owner=RS, labels={"app": "spread"}, affinity=anti)
    _drift(h)
    _pass(h)
    reps = _new_claims(h, claim)
    assert len(reps) == 2
    _initialize(h, reps[0]["metadata"]["name"])
    assert _process(h) == pytest.approx(10.0)
    assert not deleting(h.get("NodeClaim", claim))
    _initialize(h, reps[1]["metadata"]["name"])
    assert _process(h) is None
    assert deleting(h.get("NodeClaim", claim))


def test_provisioning_does_not_duplicate_capacity_for_a_candidate_being_replaced(h):
    """It("should ensure that we do not duplicate capacity for disrupted nodes with provisioning"): the node
    trigger fires for the tainted candidate, but its pods are expected on the replacement already."""
    h.setup(_pool())
    claim, node = _node(h, pods=2, cpu="500m")
    _validated_pass(h)
    assert len(_new_claims(h, claim)) == 1
    assert h.reconcile("provisioner.trigger.node", node) == pytest.approx(10.0)
    h.tick(1)
    h.reconcile("provisioner")
    assert len(_new_claims(h, claim)) == 1


def test_consolidation_end_to_end_moves_the_pods_to_a_cheaper_node(h):
    """With the simulated world (kube-scheduler, kubelets, workloads): a Deployment scaled down from 12 to 1 pod
    leaves a big node underutilized; it is replaced by a cheaper one, and the pod runs there."""
    h = Harness(world=True)
    h.setup(_pool(consolidate_after="30s"))
    h.create({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
              "spec": {"replicas": 12, "selector": {"matchLabels": {"app": "web"}},
                       "template": {"metadata": {"labels": {"app": "web"}},
                                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}})
    h.run_for(60)
    (big,) = h.nodeclaims()
    h.api.scale("Deployment", "web", "default", 1)
    h.run_for(300)
    (small,) = h.nodeclaims()
    assert small["metadata"]["name"] != big["metadata"]["name"]
    assert float(small["metadata"]["annotations"]["karpy.dev/price-per-hour"]) < \
        float(big["metadata"]["annotations"]["karpy.dev/price-per-hour"])
    (p,) = h.pods()
    assert p["status"]["phase"] == "Running" and p["spec"]["nodeName"] == small["status"]["nodeName"]
    launching = h.events("DisruptionLaunching", involved=small["metadata"]["name"])
    terminating = [e for e in h.events("DisruptionTerminating") if e["involvedObject"]["kind"] == "NodeClaim"]
    assert launching and terminating
    assert terminating[0]["involvedObject"]["name"] == big["metadata"]["name"]
    assert int(launching[0]["metadata"]["resourceVersion"]) < int(terminating[0]["metadata"]["resourceVersion"])
    (init,) = h.events("Initialized", involved=small["metadata"]["name"])
    assert int(init["metadata"]["resourceVersion"]) < int(terminating[0]["metadata"]["resourceVersion"])


# --- drift --------------------------------------------------------------------------------------


def test_drift_replaces_a_drifted_node_without_a_validation_wait(h):
    """It("should replace drifted nodes")"""
    h.setup(_pool(consolidate_after="Never"))
    claim, node = _node(h, it=SMALL, pods=1)
    _drift(h)
    assert _pass(h) == pytest.approx(10.0)
    (rep,) = _new_claims(h, claim)
    assert labels(rep).get("rev") == "2"  # the replacement comes from the current template
    c = h.get("NodeClaim", claim)
    assert cond(c, "DisruptionReason")["reason"] == "Drifted"
    assert has_taint(h.get("Node", node), DISRUPTED_TAINT["key"])
    assert [e["message"] for e in h.events("DisruptionLaunching", involved=rep["metadata"]["name"])] == \
        ["Launching NodeClaim: Drifted"]
    _initialize(h, rep["metadata"]["name"])
    _process(h)
    assert deleting(h.get("NodeClaim", claim))


def test_an_empty_drifted_node_is_deleted_without_replacement(h):
    """It("should delete drifted nodes when they are empty and consolidation is disabled")"""
    h.setup(_pool(consolidate_after="Never"))
    claim, _ = _node(h)
    _drift(h)
    _pass(h)
    assert _new_claims(h, claim) == []
    _process(h)
    assert deleting(h.get("NodeClaim", claim))


def test_do_not_disrupt_pods_block_drift(h):
    """It("should not create replacements for drifted nodes that have pods with the karpenter.sh/do-not-disrupt
    annotation set to true")"""
    h.setup(_pool(consolidate_after="Never"))
    claim, node = _node(h, it=SMALL, pods=1, annotations={DO_NOT_DISRUPT: "true"})
    _drift(h)
    _pass(h)
    assert h.disruption.queue == {}
    assert _new_claims(h, claim) == []
    assert any("do-not-disrupt" in e["message"] for e in h.events("DisruptionBlocked", involved=node))


def test_do_not_disrupt_pods_do_not_block_drift_with_a_termination_grace_period(h):
    """It("should consider candidates that have do-not-disrupt pods scheduled with a terminationGracePeriod set
    for eventual disruption"), It("should not create replacements for drifted nodes that have pods with the
    karpenter.sh/do-not-disrupt annotation set to true when the NodePool's TerminationGracePeriod is not nil"):
    the node is disrupted, but the pod that cannot be evicted gets no replacement capacity."""
    h.setup(_pool(consolidate_after="Never", termination_grace_period="1h"))
    claim, _ = _node(h, it=SMALL, pods=1, annotations={DO_NOT_DISRUPT: "true"})
    _drift(h)
    _pass(h)
    assert _new_claims(h, claim) == []
    (r,) = _running(h)
    assert r.command.describe() == f"delete [{claim}]"
    assert cond(h.get("NodeClaim", claim), "DisruptionReason")["reason"] == "Drifted"
    _process(h)
    assert deleting(h.get("NodeClaim", claim))


def test_do_not_disrupt_pods_block_consolidation(h):
    """It("should not consider candidates that have do-not-disrupt pods scheduled and no terminationGracePeriod")"""
    h.setup(_pool())
    _node(h, pods=1, annotations={DO_NOT_DISRUPT: "true"})
    _pass(h)
    assert h.disruption.validating is None and h.disruption.queue == {}


def test_do_not_disrupt_nodes_are_not_candidates(h):
    """It("should not consider candidates that have do-not-disrupt on nodes"),
    It("should ignore nodes with the karpenter.sh/do-not-disrupt annotation")"""
    h.setup(_pool())
    claim, node = _node(h)
    h.patch("Node", node, {"metadata": {"annotations": {DO_NOT_DISRUPT: "true"}}})
    _pass(h)
    assert h.disruption.validating is None and h.disruption.queue == {}
    _drift(h)
    _pass(h)
    assert h.disruption.queue == {} and not deleting(h.get("NodeClaim", claim))


def test_fully_blocking_pdbs_keep_a_node_out_of_consolidation(h):
    """It("should not consider candidates that have fully blocking PDBs")"""
    h.setup(_pool())
    _node(h, pods=1, labels={"app": "guarded"})
    h.create(pdb("guard", {"app": "guarded"}, max_unavailable=0))
    h.patch("PodDisruptionBudget", "guard", {"status": {"observedGeneration": 1, "disruptionsAllowed": 0,
                                                         "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}},
            "default", subresource="status")
    _pass(h)
    assert h.disruption.validating is None and h.disruption.queue == {}


def test_a_node_with_a_pending_pod_nominated_to_it_is_not_a_candidate(h):
    """It("should not consider candidates that are nominated")"""
    from controllers.harness import pod

    h.setup(_pool())
    claim, node = _node(h)
    p = h.create_one(pod("waiting", cpu="1", owner=RS, unschedulable=True))
    h.reconcile("provisioner.trigger.pod", "default/waiting")
    h.tick(1)
    h.reconcile("provisioner")
    (ev,) = h.events("Nominated", involved="waiting")
    assert ev["message"] == f"Pod should schedule on: node/{node}"
    _pass(h)
    assert h.disruption.validating is None and h.disruption.queue == {}
    _ = p, claim


# --- budgets ------------------------------------------------------------------------------------


def test_a_zero_budget_blocks_disruption(h):
    """It("should allow no empty nodes to be disrupted")"""
    h.setup(_pool(budgets=[{"nodes": "0"}]))
    _node(h)
    _node(h)
    _pass(h)
    assert h.disruption.validating is None and h.disruption.queue == {}
    assert any(e["involvedObject"]["kind"] == "NodePool" and
               e["message"] == "No allowed disruptions for disruption reason Empty due to blocking budget"
               for e in h.events("DisruptionBlocked"))


def test_a_percentage_budget_limits_one_emptiness_command(h):
    """It("should only allow 3 empty nodes to be disrupted"): 50% of 4 nodes -> 2 in the command."""
    h.setup(_pool(budgets=[{"nodes": "50%"}]))
    claims = [_node(h)[0] for _ in range(4)]
    _validated_pass(h)
    (r,) = _running(h)
    assert len(r.candidates) == 2
    _process(h)
    assert sum(deleting(h.get("NodeClaim", c)) for c in claims) == 2


def test_budgets_count_commands_in_flight(h):
    """It("should disrupt 3 nodes, taking into account commands in progress"): nodes: 1 -> one drift at a time."""
    h.setup(_pool(consolidate_after="Never", budgets=[{"nodes": "1"}]))
    claims = [_node(h, it=SMALL, pods=1)[0] for _ in range(3)]
    _drift(h)
    _pass(h)
    assert len(_running(h)) == 1
    h.tick(10)
    _pass(h)
    assert len(_running(h)) == 1  # the first is still waiting on its replacement
    assert sum(cond(h.get("NodeClaim", c), "DisruptionReason") is not None for c in claims) == 1


def test_budgets_are_per_reason(h):
    """A budget limited to reason Drifted does not hold back emptiness."""
    h.setup(_pool(budgets=[{"nodes": "0", "reasons": ["Drifted"]}]))
    claim, _ = _node(h)
    _drift(h)
    _validated_pass(h)
    (r,) = _running(h)
    assert r.command.reason == "Empty"
    _ = claim


def test_stale_disrupted_taints_are_removed(h):
    """It("should remove taints from NodeClaims that were left tainted from a previous disruption action")"""
    h.setup(_pool(consolidate_after="Never"))
    claim, node = _node(h, pods=1)
    n = h.get("Node", node)
    h.patch("Node", node, {"spec": {"taints": list(n["spec"].get("taints") or []) + [dict(DISRUPTED_TAINT)]}})
    c = h.get("NodeClaim", claim)
    st = dict(c["status"])
    st["conditions"] = list(st["conditions"]) + [{"type": "DisruptionReason", "status": "True", "reason": "Drifted",
                                                   "message": "Drifted", "lastTransitionTime": fmt_time(h.now())}]
    h.patch("NodeClaim", claim, {"status": st}, subresource="status")
    _pass(h)
    assert not has_taint(h.get("Node", node), DISRUPTED_TAINT["key"])
    assert cond(h.get("NodeClaim", claim), "DisruptionReason") is None
