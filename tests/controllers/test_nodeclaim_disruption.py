"""NodeClaim disruption conditions and pod events (karpy/controllers/nodeclaim_disruption.py).

Mirrors upstream pkg/controllers/nodeclaim/disruption/{drift,consolidation,suite}_test.go and
pkg/controllers/nodeclaim/podevents/suite_test.go.
"""

from __future__ import annotations

import pytest

from controllers.harness import Harness, cond, cond_status, nodepool, pod
from karpy.kube.times import fmt_time, parse_time

DISRUPTION = "nodeclaim.disruption"
PODEVENTS = "nodeclaim.podevents"
IT = "c-4x-amd64-linux"  # instance-cpu 4, instance-memory 8Gi


def _drifted(h: Harness, name: str) -> str | None:
    """The Drifted reason, None when the condition is absent (asserting it is never False/Unknown)."""
    h.reconcile(DISRUPTION, name)
    c = cond(h.get("NodeClaim", name), "Drifted")
    if c is None:
        return None
    assert c["status"] == "True"
    return c["reason"]


def _set_requirements(h: Harness, reqs: list[dict]) -> None:
    np = h.get("NodePool", "default")
    tspec = dict(np["spec"]["template"]["spec"])
    tspec["requirements"] = reqs
    h.patch("NodePool", "default", {"spec": {"template": {"spec": tspec}}})


BASE = [
    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
]


@pytest.fixture
def launched(h):
    """A NodePool and one initialized NodeClaim on c-4x-amd64-linux; returns the NodeClaim's name."""
    h.setup(nodepool(labels={"team": "a"}))
    c, _ = h.launch_node(instance_types=[IT])
    name = c["metadata"]["name"]
    assert _drifted(h, name) is None
    return name


# --- drift --------------------------------------------------------------------------------------


def test_nodepool_template_change_drifts(h, launched):
    """Context("NodePool Static Drift"): a template field in the hash changes -> NodePoolDrifted."""
    h.patch("NodePool", "default", {"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}})
    assert _drifted(h, launched) == "NodePoolDrifted"
    c = cond(h.get("NodeClaim", launched), "Drifted")
    assert c["message"] == "NodePoolDrifted"
    assert c["lastTransitionTime"] == fmt_time(h.now())


@pytest.mark.parametrize("patch", [
    {"spec": {"template": {"spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}}}},
    {"spec": {"template": {"spec": {"startupTaints": [{"key": "k", "effect": "NoSchedule"}]}}}},
    {"spec": {"template": {"metadata": {"annotations": {"example.com/a": "1"}}}}},
    {"spec": {"template": {"spec": {"expireAfter": "48h"}}}},
    {"spec": {"template": {"spec": {"terminationGracePeriod": "1h"}}}},
], ids=["taints", "startupTaints", "annotations", "expireAfter", "terminationGracePeriod"])
def test_every_static_template_field_drifts(h, launched, patch):
    """It("should update the drift hash when NodePool static field is updated")"""
    h.patch("NodePool", "default", patch)
    assert _drifted(h, launched) == "NodePoolDrifted"


@pytest.mark.parametrize("patch", [
    {"spec": {"disruption": {"consolidateAfter": "5m", "budgets": [{"nodes": "1"}]}}},
    {"spec": {"limits": {"cpu": "100"}}},
    {"spec": {"weight": 10}},
], ids=["disruption", "limits", "weight"])
def test_behaviour_fields_do_not_drift(h, launched, patch):
    """It("should not update the drift hash when NodePool behavior field is updated")"""
    h.patch("NodePool", "default", patch)
    assert _drifted(h, launched) is None


def test_hash_version_mismatch_does_not_drift(h, launched):
    """It("should not return drifted if the NodeClaim's karpenter.sh/nodepool-hash-version annotation does not match")"""
    h.patch("NodeClaim", launched, {"metadata": {"annotations": {"karpenter.sh/nodepool-hash-version": "v1"}}})
    h.patch("NodePool", "default", {"spec": {"template": {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}}})
    assert _drifted(h, launched) is None


def test_missing_hash_annotation_does_not_drift(h, launched):
    """It("should not return drifted if karpenter.sh/nodepool-hash annotation is not present on the NodeClaim")"""
    h.patch("NodeClaim", launched, {"metadata": {"annotations": {"karpenter.sh/nodepool-hash": None}}})
    h.patch("NodePool", "default", {"spec": {"template": {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}}})
    assert _drifted(h, launched) is None


def test_template_labels_are_not_requirements_for_drift(h, launched):
    """Upstream areRequirementsDrifted: NewNodeSelectorRequirementsWithMinValues(Spec.Template.Spec.Requirements).
    A label change is static drift (hash) only; a NodeClaim without the hash annotation is not drifted by it."""
    h.patch("NodeClaim", launched, {"metadata": {"annotations": {"karpenter.sh/nodepool-hash": None}}})
    h.patch("NodePool", "default", {"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}})
    assert _drifted(h, launched) is None


# The NodeClaim's labels include: capacity-type on-demand, os linux, zone test-zone-a,
# karpenter.kwok.sh/instance-cpu "4", karpenter.kwok.sh/instance-family "c", team "a".
REQUIREMENT_CASES = [
    ("In-changed", {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}, True),
    ("In-expanded", {"key": "kubernetes.io/os", "operator": "In", "values": ["linux", "windows"]}, False),
    ("In-zone-reduced", {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-b"]}, True),
    ("In-new-key", {"key": "example.com/new", "operator": "In", "values": ["x"]}, True),
    ("NotIn-own-value", {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["test-zone-a"]}, True),
    ("NotIn-other-value", {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["test-zone-d"]}, False),
    ("NotIn-new-key", {"key": "example.com/new", "operator": "NotIn", "values": ["x"]}, False),
    ("Exists-present", {"key": "kubernetes.io/os", "operator": "Exists"}, False),
    ("DoesNotExist-present", {"key": "team", "operator": "DoesNotExist"}, True),
    ("DoesNotExist-new-key", {"key": "example.com/new", "operator": "DoesNotExist"}, False),
    ("Gt-above", {"key": "karpenter.kwok.sh/instance-cpu", "operator": "Gt", "values": ["8"]}, True),
    ("Gt-below", {"key": "karpenter.kwok.sh/instance-cpu", "operator": "Gt", "values": ["2"]}, False),
    ("Lt-below", {"key": "karpenter.kwok.sh/instance-cpu", "operator": "Lt", "values": ["4"]}, True),
    ("Lt-above", {"key": "karpenter.kwok.sh/instance-cpu", "operator": "Lt", "values": ["16"]}, False),
]


@pytest.mark.parametrize("req,drifted", [c[1:] for c in REQUIREMENT_CASES], ids=[c[0] for c in REQUIREMENT_CASES])
def test_requirement_changes_drift_as_upstream(h, launched, req, drifted):
    """Context("NodeRequirement Drift"): the NodeClaim's labels must stay compatible with the NodePool's
    requirements (upstream's nodeClaimReq.Compatible(nodepoolReq))."""
    _set_requirements(h, BASE + [req])
    assert _drifted(h, launched) == ("RequirementsDrifted" if drifted else None)


UNDEFINED_KEY_CASES = [
    ("Exists", {"key": "example.com/new", "operator": "Exists"}),
    ("Gt", {"key": "example.com/generation", "operator": "Gt", "values": ["1"]}),
    ("Lt", {"key": "example.com/generation", "operator": "Lt", "values": ["9"]}),
]


@pytest.mark.parametrize("req", [c[1] for c in UNDEFINED_KEY_CASES], ids=[c[0] for c in UNDEFINED_KEY_CASES])
def test_a_new_requirement_on_a_label_the_nodeclaim_lacks_drifts(h, launched, req):
    """"label %q does not have known values" (scheduling.Requirements.Compatible): a NodePool requirement
    Exists/Gt/Lt on a key the NodeClaim does not carry drifts it."""
    _set_requirements(h, BASE + [req])
    assert _drifted(h, launched) == "RequirementsDrifted"


def test_drift_is_removed_when_the_nodepool_reverts(h, launched):
    """It("should remove the status condition from the nodeClaim if the nodeClaim is no longer drifted")"""
    np = h.get("NodePool", "default")
    before = np["spec"]["template"]["spec"]["requirements"]
    _set_requirements(h, BASE + [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}])
    assert _drifted(h, launched) == "RequirementsDrifted"
    _set_requirements(h, before)
    assert _drifted(h, launched) is None


def test_only_nodeclaims_of_the_changed_nodepool_drift(h):
    """It("should return drifted only on NodeClaims that are drifted from an updated nodePool")"""
    h.setup(nodepool("a"), nodepool("b"))
    a, _ = h.launch_node("a", instance_types=[IT])
    b, _ = h.launch_node("b", instance_types=[IT])
    h.patch("NodePool", "a", {"spec": {"template": {"metadata": {"labels": {"x": "y"}}}}})
    assert _drifted(h, a["metadata"]["name"]) == "NodePoolDrifted"
    assert _drifted(h, b["metadata"]["name"]) is None


def test_a_nodeclaim_that_has_not_launched_is_not_drifted(h):
    """It("should remove the status condition from the nodeClaim when the nodeClaim launch condition is unknown")"""
    h.setup()
    c = h.create_one(h.nodeclaim(instance_types=[IT]))
    name = c["metadata"]["name"]
    h.patch("NodePool", "default", {"spec": {"template": {"metadata": {"labels": {"x": "y"}}}}})
    assert _drifted(h, name) is None


def test_a_nodeclaim_whose_nodepool_is_gone_is_not_drifted(h, launched):
    """It("should not detect drift if the nodePool does not exist")"""
    h.patch("NodeClaim", launched, {"metadata": {"labels": {"karpenter.sh/nodepool": "elsewhere"}}})
    assert _drifted(h, launched) is None


def _ec2_setup(h: Harness) -> str:
    np = nodepool(family=None)
    np["spec"]["template"]["spec"]["nodeClassRef"] = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "ec2"}
    h.create({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "ec2"},
              "spec": {"role": "KarpenterNodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                       "subnetSelectorTerms": [{"tags": {"net": "a"}}],
                       "securityGroupSelectorTerms": [{"tags": {"sg": "a"}}]}}, np)
    c, _ = h.launch_node(instance_types=["m5.large"])
    assert _drifted(h, c["metadata"]["name"]) is None
    return c["metadata"]["name"]


def test_nodeclass_change_drifts(h):
    """A NodeClass field that shapes the instance changes -> NodeClassDrift (the provider's IsDrifted)."""
    name = _ec2_setup(h)
    h.patch("EC2NodeClass", "ec2", {"spec": {"role": "AnotherRole"}})
    assert _drifted(h, name) == "NodeClassDrift"


def test_dynamically_resolved_nodeclass_fields_do_not_drift(h):
    """EC2NodeClass selector terms are resolved at launch; changing them is not drift (AWS provider docs)."""
    name = _ec2_setup(h)
    h.patch("EC2NodeClass", "ec2", {"spec": {"subnetSelectorTerms": [{"tags": {"net": "b"}}]}})
    assert _drifted(h, name) is None


def test_kwok_nodeclass_changes_never_drift(h, launched):
    """Upstream's kwok provider reports no NodeClass drift."""
    h.patch("KWOKNodeClass", "default", {"spec": {"nodeRegistrationDelay": "30s"}})
    assert _drifted(h, launched) is None


# --- consolidatable -----------------------------------------------------------------------------


def test_consolidatable_after_consolidate_after_from_initialization(h):
    """It("should mark NodeClaims as consolidatable based on the nodeclaim initialized time")"""
    h.setup(nodepool(consolidate_after="30s"))
    c, _ = h.launch_node(instance_types=[IT])
    name = c["metadata"]["name"]
    assert h.reconcile(DISRUPTION, name) == pytest.approx(30.0)
    assert cond(h.get("NodeClaim", name), "Consolidatable") is None
    h.tick(20)
    assert h.reconcile(DISRUPTION, name) == pytest.approx(10.0)
    h.tick(10)
    assert h.reconcile(DISRUPTION, name) is None
    assert cond_status(h.get("NodeClaim", name), "Consolidatable") == "True"


def test_a_recent_pod_event_removes_consolidatable(h):
    """It("should remove the status condition from the nodeClaim when lastPodEvent is too recent")"""
    h.setup(nodepool(consolidate_after="30s"))
    c, _ = h.launch_node(instance_types=[IT])
    name = c["metadata"]["name"]
    h.tick(60)
    h.reconcile(DISRUPTION, name)
    assert cond_status(h.get("NodeClaim", name), "Consolidatable") == "True"
    h.patch("NodeClaim", name, {"status": {"lastPodEventTime": fmt_time(h.now() - 5)}}, subresource="status")
    assert h.reconcile(DISRUPTION, name) == pytest.approx(25.0)
    assert cond(h.get("NodeClaim", name), "Consolidatable") is None


def test_consolidate_after_never_removes_consolidatable(h):
    """It("should remove the status condition from the nodeClaim when consolidateAfter is never")"""
    h.setup(nodepool(consolidate_after="0s"))
    c, _ = h.launch_node(instance_types=[IT])
    name = c["metadata"]["name"]
    h.reconcile(DISRUPTION, name)
    assert cond_status(h.get("NodeClaim", name), "Consolidatable") == "True"
    h.patch("NodePool", "default", {"spec": {"disruption": {"consolidateAfter": "Never"}}})
    h.reconcile(DISRUPTION, name)
    assert cond(h.get("NodeClaim", name), "Consolidatable") is None


def test_an_uninitialized_nodeclaim_is_not_consolidatable(h):
    """It("should remove the status condition from the nodeClaim when the nodeClaim is not initialized")"""
    h.setup(nodepool(consolidate_after="0s"))
    c, _ = h.launch_node(instance_types=[IT], ready=False)
    h.tick(600)
    h.reconcile(DISRUPTION, c["metadata"]["name"])
    assert cond(h.get("NodeClaim", c["metadata"]["name"]), "Consolidatable") is None


def test_drifted_and_consolidatable_are_set_together(h):
    """It("should set multiple disruption conditions simultaneously")"""
    h.setup(nodepool(consolidate_after="0s"))
    c, _ = h.launch_node(instance_types=[IT])
    name = c["metadata"]["name"]
    h.patch("NodePool", "default", {"spec": {"template": {"metadata": {"labels": {"x": "y"}}}}})
    h.reconcile(DISRUPTION, name)
    got = h.get("NodeClaim", name)
    assert cond_status(got, "Drifted") == "True" and cond_status(got, "Consolidatable") == "True"


# --- pod events ---------------------------------------------------------------------------------


def test_a_pod_binding_stamps_last_pod_event_time(h):
    """It("should set the nodeclaim lastPodEvent")"""
    h.setup()
    c, n = h.launch_node(instance_types=[IT])
    h.tick(42)
    h.pod_on(n["metadata"]["name"], name="p")
    assert ("nodeclaim.podevents" in h.controllers)
    h.reconcile(PODEVENTS, n["metadata"]["name"])
    assert h.get("NodeClaim", c["metadata"]["name"])["status"]["lastPodEventTime"] == fmt_time(h.now())


def test_last_pod_event_time_is_deduplicated_for_ten_seconds(h):
    """It("should only set the nodeclaim lastPodEvent once within the dedupe timeframe"),
    It("should set the nodeclaim lastPodEvent when it's been set before")"""
    h.setup()
    c, n = h.launch_node(instance_types=[IT])
    node_name, name = n["metadata"]["name"], c["metadata"]["name"]
    h.reconcile(PODEVENTS, node_name)
    first = h.get("NodeClaim", name)["status"]["lastPodEventTime"]
    h.tick(9)
    h.reconcile(PODEVENTS, node_name)
    assert h.get("NodeClaim", name)["status"]["lastPodEventTime"] == first
    h.tick(1)
    h.reconcile(PODEVENTS, node_name)
    assert parse_time(h.get("NodeClaim", name)["status"]["lastPodEventTime"]) == parse_time(first) + 10


def test_pod_events_that_count(h):
    """The pod event filter: bound, terminal, terminating or gone -- not any other update, not DaemonSet pods."""
    h.setup()
    _, n = h.launch_node(instance_types=[IT])
    node_name = n["metadata"]["name"]
    h.clear_queue()

    def queued() -> bool:
        hit = any(c is h.controllers[PODEVENTS] for c, _ in h.mgr._queue)
        h.clear_queue()
        return hit

    p = h.create_one(pod("p"))
    assert not queued()  # created, unbound
    h.api.bind("p", "default", node_name)
    h.mgr.pump()
    assert queued()  # bound
    h.patch("Pod", "p", {"metadata": {"labels": {"x": "y"}}}, "default")
    assert not queued()  # an unrelated update
    h.set_pod_phase("p", "Succeeded")
    assert queued()  # terminal
    h.delete("Pod", "p", "default")
    assert queued()  # gone
    ds = h.create_one({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ds", "namespace": "default"},
                       "spec": {"selector": {"matchLabels": {"a": "b"}},
                                "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": []}}}})
    d = h.create_one(pod("d", owner={"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds",
                                     "uid": ds["metadata"]["uid"], "controller": True}))
    h.bind(d, node_name)
    assert not queued()
    _ = p


def test_pod_events_on_a_node_without_nodeclaim_are_ignored(h):
    """It("should not set the nodeclaim lastPodEvent when the node does not exist") / unmanaged nodes"""
    from controllers.harness import node

    h.setup()
    h.create(node("byo"))
    h.pod_on("byo", name="p")
    assert h.reconcile(PODEVENTS, "byo") is None
    assert h.reconcile(PODEVENTS, "no-such-node") is None


def test_nodepool_status_write_queues_no_nodeclaim_but_spec_change_drifts(h, launched):
    """A NodePool's status changes with every node it gains or loses, and no NodeClaim condition depends on it:
    such a write runs no NodeClaim reconcile. A template change still reaches the NodeClaim through the watch
    (drifted without a reconcile run by hand)."""
    h.drain()
    ran: list[str] = []
    before = h.mgr.on_reconcile

    def seen(name, seconds, failed):
        ran.append(name)
        if before is not None:
            before(name, seconds, failed)

    h.mgr.on_reconcile = seen
    h.patch("NodePool", "default", {"status": {"resources": {"cpu": "8", "nodes": "2"}, "nodes": 2}}, subresource="status")
    h.drain()
    assert DISRUPTION not in ran
    h.patch("NodePool", "default", {"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}})
    h.drain()
    assert DISRUPTION in ran
    c = cond(h.get("NodeClaim", launched), "Drifted")
    assert c is not None and c["status"] == "True" and c["reason"] == "NodePoolDrifted"
