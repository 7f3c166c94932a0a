"""Provisioning (karpy/controllers/provisioning.py): pod and node triggers, the batcher, the provisioner.

Mirrors upstream pkg/controllers/provisioning/suite_test.go: pods marked unschedulable (tests play
kube-scheduler), the pod trigger reconciled for each, then the provisioner singleton; assertions on the
NodeClaims, Events and nominations it leaves behind.
"""

from __future__ import annotations

import pytest

from controllers.harness import (
    DISRUPTED_TAINT, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, Harness, annotations, labels, nodepool, pod,
)

TRIGGER = "provisioner.trigger.pod"
PROVISIONER = "provisioner"


def _pending(h: Harness, *pods: dict) -> list[dict]:
    """Create unschedulable pods and let the pod trigger see each (ExpectProvisioned's first half)."""
    made = h.create(*pods)
    for p in made:
        assert h.reconcile(TRIGGER, f"{p['metadata']['namespace']}/{p['metadata']['name']}") == pytest.approx(10.0)
    return made


def _provision(h: Harness, *pods: dict) -> list[dict]:
    """ExpectProvisioned: pods pending, the batch window passes, the provisioner runs once."""
    made = _pending(h, *pods)
    h.tick(h.settings.batch_idle)
    assert h.reconcile(PROVISIONER) is None
    return made


def _failed_scheduling(h: Harness, pod_name: str) -> list[str]:
    return [e["message"] for e in h.events("FailedScheduling", involved=pod_name)]


def test_batcher_waits_for_the_idle_duration(h):
    """It("should provision single pod if no other pod is received within the batch idle duration")"""
    h.setup()
    _pending(h, pod("a", unschedulable=True))
    h.tick(0.5)
    assert h.reconcile(PROVISIONER) == pytest.approx(0.5)
    assert h.nodeclaims() == []
    h.tick(0.5)
    assert h.reconcile(PROVISIONER) is None
    assert len(h.nodeclaims()) == 1


def test_batcher_is_not_extended_by_the_same_pod(h):
    """It("should not extend the timeout if we receive the same pod within the batch idle duration")"""
    h.setup()
    _pending(h, pod("a", unschedulable=True))
    h.tick(0.5)
    h.reconcile(TRIGGER, "default/a")
    h.tick(0.5)
    h.reconcile(PROVISIONER)
    assert len(h.nodeclaims()) == 1


def test_batcher_is_extended_by_a_new_pod_up_to_the_max_duration(h):
    """It("should extend the timeout if we receive a new pod within the batch idle duration"), batchMaxDuration 10 s"""
    h.setup()
    _pending(h, pod("p0", unschedulable=True))
    for i in range(1, 12):
        h.tick(0.9)
        _pending(h, pod(f"p{i}", unschedulable=True))
        assert h.reconcile(PROVISIONER) is not None  # still batching
        assert h.nodeclaims() == []
    # 11 * 0.9 s = 9.9 s of steady arrivals: the max duration (10 s) closes the batch regardless
    h.tick(0.1)
    assert h.reconcile(PROVISIONER) is None
    (claim,) = h.nodeclaims()
    assert claim["spec"]["resources"]["requests"]["pods"] == "12"


def test_provisions_a_nodeclaim_for_pending_pods(h):
    """It("should provision nodes"), It("Should provision nodes for multiple pods"),
    It("should create a nodeclaim request with the correct owner reference"),
    It("should create a nodeclaim request propagating the nodeClass reference"),
    It("should create a nodeclaim with resource requests")"""
    h.setup()
    _provision(h, pod("a", cpu="1", unschedulable=True), pod("b", cpu="2", memory="1Gi", unschedulable=True))
    (c,) = h.nodeclaims()
    np = h.get("NodePool", "default")
    assert labels(c)[NODEPOOL_LABEL] == "default"
    assert c["metadata"]["ownerReferences"] == [{"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "name": "default",
                                                 "uid": np["metadata"]["uid"], "blockOwnerDeletion": True}]
    assert c["spec"]["nodeClassRef"] == {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
    assert c["spec"]["resources"]["requests"] == {"cpu": "3", "memory": "1Gi", "pods": "2"}
    reqs = {r["key"]: r for r in c["spec"]["requirements"]}
    assert reqs["karpenter.sh/capacity-type"]["values"] == ["on-demand"]
    assert reqs[NODEPOOL_LABEL] == {"key": NODEPOOL_LABEL, "operator": "In", "values": ["default"]}
    types = reqs[INSTANCE_TYPE_LABEL]["values"]
    assert types and all(t.startswith("c-") for t in types)
    assert "c-1x-amd64-linux" not in types and "c-2x-amd64-linux" not in types  # too small for 3 cpu
    assert annotations(c)["karpenter.sh/nodepool-hash-version"] == "karpy-v1"
    assert annotations(c)["karpenter.sh/nodepool-hash"] == annotations(np).get("karpenter.sh/nodepool-hash",
                                                                                annotations(c)["karpenter.sh/nodepool-hash"])
    (created,) = h.events("Created", involved=c["metadata"]["name"])
    assert created["message"].startswith('created nodeclaim for 2 pod(s), requests {"cpu":"3","memory":"1Gi","pods":"2"}')


def test_pods_are_nominated_to_the_nodeclaim_launched_for_them(h):
    """The provisioner's Nominated events name the NodeClaim (what kube-scheduler's nominatedNodeName shows)."""
    h.setup()
    _provision(h, pod("a", unschedulable=True), pod("b", unschedulable=True))
    (c,) = h.nodeclaims()
    name = c["metadata"]["name"]
    for p in ("a", "b"):
        (ev,) = h.events("Nominated", involved=p)
        assert ev["message"] == f"Pod should schedule on: nodeclaim/{name}"
        assert ev["involvedObject"]["kind"] == "Pod"


def test_only_pods_kube_scheduler_marked_unschedulable_are_provisioned(h):
    """IsProvisionable: unbound, PodScheduled=False/Unschedulable, not a DaemonSet pod, not preempting."""
    h.setup()
    ds = h.create_one({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ds", "namespace": "default"},
                       "spec": {"selector": {"matchLabels": {"a": "b"}},
                                "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": []}}}})
    fresh, daemon, preempting = h.create(
        pod("fresh"),  # kube-scheduler has not looked at it yet
        pod("daemon", unschedulable=True, owner={"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds",
                                                 "uid": ds["metadata"]["uid"], "controller": True}),
        pod("preempting", unschedulable=True))
    h.patch("Pod", "preempting", {"status": {"nominatedNodeName": "some-node"}}, "default", subresource="status")
    for p in ("fresh", "daemon", "preempting"):
        assert h.reconcile(TRIGGER, f"default/{p}") is None
    h.tick(1)
    h.reconcile(PROVISIONER)
    assert h.nodeclaims() == []


def test_no_nodepool_publishes_failed_scheduling(h):
    """It("should mark pod as unschedulable if there are no valid nodepools")"""
    _provision(h, pod("a", unschedulable=True))
    assert h.nodeclaims() == []
    assert _failed_scheduling(h, "a") == ["Failed to schedule pod, no nodepools found"]
    (ev,) = h.events("FailedScheduling", involved="a")
    assert ev["type"] == "Warning" and ev["source"]["component"] == "karpenter"


def test_a_nodepool_whose_nodeclass_is_missing_cannot_launch(h):
    """NodePool readiness: the NodeClass must exist (the FailedScheduling message says so)."""
    h.create(nodepool())
    _provision(h, pod("a", unschedulable=True))
    assert h.nodeclaims() == []
    (msg,) = _failed_scheduling(h, "a")
    assert 'incompatible with nodepool "default", nodeclass not found' in msg


def test_nodepools_being_deleted_are_ignored(h):
    """It("should ignore NodePools that are deleting")"""
    h.setup()
    h.patch("NodePool", "default", {"metadata": {"finalizers": ["example.com/hold"]}})
    h.delete("NodePool", "default")
    assert h.get("NodePool", "default")["metadata"].get("deletionTimestamp")
    _provision(h, pod("a", unschedulable=True))
    assert h.nodeclaims() == []


def test_static_nodepools_do_not_provision_for_pending_pods(h):
    """Upstream's provisioner skips static NodePools (spec.replicas set; nodepoolutils.IsStatic): a pending pod
    launches from the dynamic NodePool beside it, never from the static one."""
    static = nodepool("a-static")
    static["spec"]["replicas"] = 1
    h.setup(static, nodepool("b-dynamic"))
    _provision(h, pod("a", unschedulable=True))
    assert [c["metadata"]["labels"]["karpenter.sh/nodepool"] for c in h.nodeclaims()] == ["b-dynamic"]


def test_the_same_failed_scheduling_message_is_not_repeated(h):
    """A pod that stays unschedulable for the same reason gets one FailedScheduling event, not one per batch."""
    h.create(nodepool())
    _provision(h, pod("a", unschedulable=True))
    for _ in range(3):
        h.tick(10)
        h.reconcile(TRIGGER, "default/a")
        h.tick(1)
        h.reconcile(PROVISIONER)
    assert len(_failed_scheduling(h, "a")) == 1


def test_limits_count_existing_nodeclaims(h):
    """It("should not schedule when limits are exceeded"): usage is the NodePool's launched capacity."""
    h.setup(nodepool(limits={"cpu": "4"}))
    c, n = h.launch_node(instance_types=["c-4x-amd64-linux"])
    h.bind(h.create_one(pod("filler", cpu="3500m")), n["metadata"]["name"])
    _provision(h, pod("a", cpu="1", unschedulable=True))
    assert [x["metadata"]["name"] for x in h.nodeclaims()] == [c["metadata"]["name"]]
    assert _failed_scheduling(h, "a") == [
        'Failed to schedule pod, incompatible with nodepool "default", all available instance types exceed limits for '
        'nodepool (cpu remaining 0)']


def test_node_limits(h):
    """It("should not schedule if limits would be exceeded (node)")"""
    h.setup(nodepool(limits={"nodes": "1"}))
    _, n = h.launch_node(instance_types=["c-4x-amd64-linux"])
    h.bind(h.create_one(pod("filler", cpu="3500m")), n["metadata"]["name"])
    _provision(h, pod("a", cpu="1", unschedulable=True))
    assert len(h.nodeclaims()) == 1
    (msg,) = _failed_scheduling(h, "a")
    assert msg.endswith("node limits have been exhausted for nodepool")


def test_a_pending_pod_that_fits_an_existing_node_is_nominated_there(h):
    """Existing capacity first: no NodeClaim is created, the pod is nominated to the node."""
    h.setup()
    c, n = h.launch_node(instance_types=["c-8x-amd64-linux"])
    _provision(h, pod("a", cpu="1", unschedulable=True))
    assert [x["metadata"]["name"] for x in h.nodeclaims()] == [c["metadata"]["name"]]
    (ev,) = h.events("Nominated", involved="a")
    assert ev["message"] == f"Pod should schedule on: node/{n['metadata']['name']}"


def test_daemonset_overhead_is_part_of_the_nodeclaim_requests(h):
    """It("should account for daemonsets"), It("should create a nodeclaim with resource requests with daemon overhead")"""
    h.setup()
    h.create({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "kube-system"},
              "spec": {"selector": {"matchLabels": {"app": "agent"}},
                       "template": {"metadata": {"labels": {"app": "agent"}},
                                    "spec": {"containers": [{"name": "c", "resources": {"requests": {
                                        "cpu": "500m", "memory": "128Mi"}}}]}}}})
    _provision(h, pod("a", cpu="1", unschedulable=True))
    (c,) = h.nodeclaims()
    assert c["spec"]["resources"]["requests"] == {"cpu": "1500m", "memory": "128Mi", "pods": "2"}


def test_daemonsets_that_do_not_tolerate_the_nodepool_taints_add_no_overhead(h):
    """It("should ignore daemonsets without matching tolerations")"""
    taint = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    h.setup(nodepool(taints=[taint]))
    h.create({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "kube-system"},
              "spec": {"selector": {"matchLabels": {"app": "agent"}},
                       "template": {"metadata": {"labels": {"app": "agent"}},
                                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m"}}}]}}}})
    _provision(h, pod("a", cpu="1", unschedulable=True,
                      tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]))
    (c,) = h.nodeclaims()
    assert c["spec"]["resources"]["requests"] == {"cpu": "1", "pods": "1"}


def test_nodeclaims_carry_the_nodepool_template(h):
    """It("should label nodes"), It("should annotate nodes"), and the template's taints, startupTaints,
    expireAfter and terminationGracePeriod are copied onto the NodeClaim."""
    taint = {"key": "dedicated", "value": "x", "effect": "NoSchedule"}
    startup = {"key": "example.com/booting", "effect": "NoSchedule"}
    h.setup(nodepool(labels={"team": "a"}, annotations={"example.com/owner": "me"}, taints=[taint],
                     startup_taints=[startup], expire_after="24h", termination_grace_period="1h"))
    _provision(h, pod("a", unschedulable=True, tolerations=[{"key": "dedicated", "operator": "Exists"}]))
    (c,) = h.nodeclaims()
    assert labels(c)["team"] == "a"
    assert annotations(c)["example.com/owner"] == "me"
    assert c["spec"]["taints"] == [taint]
    assert c["spec"]["startupTaints"] == [startup]
    assert c["spec"]["expireAfter"] == "24h"
    assert c["spec"]["terminationGracePeriod"] == "1h"


def test_pods_that_do_not_tolerate_the_nodepool_taints_are_not_provisioned(h):
    """It("should schedule pods that tolerate taints") and its converse."""
    h.setup(nodepool(taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]))
    _provision(h, pod("intolerant", unschedulable=True))
    assert h.nodeclaims() == []
    assert "did not tolerate" in _failed_scheduling(h, "intolerant")[0]
    _provision(h, pod("tolerant", unschedulable=True,
                      tolerations=[{"key": "dedicated", "operator": "Equal", "value": "x", "effect": "NoSchedule"}]))
    assert len(h.nodeclaims()) == 1


def test_a_pod_node_selector_on_a_custom_label_picks_the_label_value(h):
    """It("should provision nodes for pods with supported node selectors"): a requirement with several values,
    the pod selects one; the NodeClaim is labelled with it."""
    h.setup(nodepool(requirements=[{"key": "example.com/tier", "operator": "In", "values": ["gold", "silver"]}]))
    _provision(h, pod("a", unschedulable=True, node_selector={"example.com/tier": "silver"}))
    (c,) = h.nodeclaims()
    assert labels(c)["example.com/tier"] == "silver"
    h.launch(c["metadata"]["name"])  # in flight: pod a, still pending, is placed there again
    _provision(h, pod("b", unschedulable=True, node_selector={"example.com/tier": "bronze"}))
    assert len(h.nodeclaims()) == 1
    assert _failed_scheduling(h, "b")


def test_pods_of_a_node_being_deleted_get_capacity_before_it_drains(h):
    """The node trigger: a node tainted karpenter.sh/disrupted makes the provisioner place its pods elsewhere
    (It("should schedule all pods on one inflight node when node is in deleting state"))."""
    h.setup()
    old, n = h.launch_node(instance_types=["c-4x-amd64-linux"])
    name = n["metadata"]["name"]
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": True}
    h.pod_on(name, name="w1", cpu="1", owner=owner)
    h.pod_on(name, name="w2", cpu="1", owner=owner)
    taints = list(n["spec"].get("taints") or []) + [dict(DISRUPTED_TAINT)]
    h.patch("Node", name, {"spec": {"taints": taints}})
    h.patch("Node", name, {"metadata": {"finalizers": ["karpenter.sh/termination"]}})
    h.delete("Node", name)
    assert h.reconcile("provisioner.trigger.node", name) == pytest.approx(10.0)
    h.tick(1)
    h.reconcile(PROVISIONER)
    new = [c for c in h.nodeclaims() if c["metadata"]["name"] != old["metadata"]["name"]]
    assert len(new) == 1
    assert new[0]["spec"]["resources"]["requests"]["pods"] == "2"
    assert {e["involvedObject"]["name"] for e in h.events("Nominated")} == {"w1", "w2"}


def _nominated_to(h: Harness, pod_name: str) -> str:
    """Where the provisioner last nominated the pod (its latest Nominated event)."""
    evs = h.events("Nominated", involved=pod_name)
    assert evs, f"{pod_name} was never nominated"
    return evs[-1]["message"].rsplit("/", 1)[1]


def test_a_pod_whose_room_kube_scheduler_gave_away_is_nominated_to_another_inflight_nodeclaim(h):
    """Upstream re-solves every pending pod each batch against what is bound: nominations reserve nothing.
    Two hostname anti-affinity pods get a NodeClaim each; kube-scheduler binds the second onto the first
    NodeClaim's Node as soon as it is Ready (before Karpenter initializes it). The next batch nominates the
    first pod to the other, still empty, in-flight NodeClaim: no third NodeClaim, and no waiting for the
    taken NodeClaim to initialize."""
    h.setup()
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    a, b = _provision(h, pod("a", labels={"app": "web"}, affinity=anti, unschedulable=True),
                      pod("b", labels={"app": "web"}, affinity=anti, unschedulable=True))
    claims = {c["metadata"]["name"] for c in h.nodeclaims()}
    assert len(claims) == 2
    x, y = _nominated_to(h, "a"), _nominated_to(h, "b")
    assert {x, y} == claims
    for name in claims:
        h.launch(name)
    node_x = h.register(x)
    h.reconcile("nodeclaim.lifecycle", x)  # registered
    h.make_ready(node_x["metadata"]["name"])  # Ready; Karpenter has not initialized it yet
    h.bind(b, node_x["metadata"]["name"])  # kube-scheduler: b lands on a's NodeClaim
    h.tick(10)
    assert h.reconcile(TRIGGER, "default/a") == pytest.approx(10.0)
    h.tick(h.settings.batch_idle)
    h.reconcile(PROVISIONER)
    assert {c["metadata"]["name"] for c in h.nodeclaims()} == claims
    assert _nominated_to(h, "a") == y


def test_no_scheduling_decision_while_a_nodeclaim_is_not_launched(h):
    """Upstream's provisioner waits for its cluster state to sync: while a NodeClaim has no provider ID its
    offering is unknown, and its pods would be placed again against nothing. The batch is dropped (no second
    NodeClaim for pod a, none yet for pod b); once the NodeClaim is launched the pods' own triggers bring the
    next batch, which places a on it and opens one NodeClaim for b."""
    h.setup()
    _provision(h, pod("a", cpu="1", unschedulable=True))
    (first,) = h.nodeclaims()
    _provision(h, pod("b", cpu="1", unschedulable=True))
    assert [c["metadata"]["name"] for c in h.nodeclaims()] == [first["metadata"]["name"]]
    assert not h.events("Nominated", involved="b")
    h.launch(first["metadata"]["name"])
    h.tick(10)
    for name in ("a", "b"):
        assert h.reconcile(TRIGGER, f"default/{name}") == pytest.approx(10.0)
    h.tick(h.settings.batch_idle)
    h.reconcile(PROVISIONER)
    claims = h.nodeclaims()
    assert len(claims) <= 2
    assert _nominated_to(h, "a") == first["metadata"]["name"]
    assert h.events("Nominated", involved="b")


def test_the_log_says_how_many_pods_in_flight_nodeclaims_take_beside_new_ones(h):
    """Upstream's provisioner logs "computed unready node(s) will fit pod(s)" after "computed new nodeclaim(s) to
    fit pod(s)" when the same solve also placed pods on existing or in-flight nodes."""
    h.setup()
    _provision(h, pod("a", cpu="1", unschedulable=True))
    (first,) = h.nodeclaims()
    h.launch(first["metadata"]["name"])
    h.tick(10)
    h.reconcile(TRIGGER, "default/a")
    _provision(h, pod("b", cpu="6", unschedulable=True))
    assert len(h.nodeclaims()) == 2
    logs = [r for r in h.records if r.get("message", "").startswith("computed")]
    assert [(r["message"], r.get("nodes"), r.get("pods")) for r in logs[-2:]] == [
        ("computed new nodeclaim(s) to fit pod(s)", None, 1), ("computed unready node(s) will fit pod(s)", 1, 1)]
