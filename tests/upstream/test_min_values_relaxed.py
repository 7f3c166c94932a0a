"""minValuesPolicy BestEffort: what the provisioner writes when a NodePool's minValues cannot be met.

Upstream's scheduler lowers each unmet minValues to what the instance types left actually offer when it opens a
NodeClaim, writes the lowered minValues into the NodeClaim's requirements, annotates the NodeClaim (and so the
Node it registers) ``karpenter.sh/nodeclaim-min-values-relaxed: "true"`` (``"false"`` on every other NodeClaim it
computes), and keeps using the heaviest NodePool rather than falling back to a lighter one whose minValues hold.

The cases run the provisioner in the controller harness on the KWOK catalog; a NodePool requirement naming a type
(or zone) that does not exist is how the suite's "only two of three" instance types is written here.
"""

from __future__ import annotations

from controllers.harness import INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, ZONE_LABEL, Harness, nodepool, pod
from karpy.controllers.env import Settings

RELAXED = "karpenter.sh/nodeclaim-min-values-relaxed"
SMALL, MEDIUM, MISSING = "c-1x-amd64-linux", "c-2x-amd64-linux", "c-does-not-exist"
THREE_TYPES = [SMALL, MEDIUM, MISSING]


def _harness(policy: str = "BestEffort") -> Harness:
    return Harness(settings=Settings(min_values_policy=policy))


def _provision(h: Harness, *pods: dict) -> None:
    for p in h.create(*pods):
        h.reconcile("provisioner.trigger.pod", f"default/{p['metadata']['name']}")
    h.tick(h.settings.batch_idle)
    h.reconcile("provisioner")


def _req(claim: dict, key: str) -> dict:
    (r,) = [r for r in claim["spec"]["requirements"] if r["key"] == key]
    return r


def _types(values, min_values=None) -> dict:
    r = {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": list(values)}
    if min_values is not None:
        r["minValues"] = min_values
    return r


def _zones(values, min_values) -> dict:
    return {"key": ZONE_LABEL, "operator": "In", "values": list(values), "minValues": min_values}


def _node_of(h: Harness, claim: dict) -> dict:
    """The NodeClaim launched and its Node registered (the lifecycle controller syncs the Node's metadata)."""
    name = claim["metadata"]["name"]
    h.launch(name)
    node = h.register(name)
    h.reconcile("nodeclaim.lifecycle", name)
    return h.get("Node", node["metadata"]["name"])


def test_unmet_instance_type_min_values_schedules_relaxed_and_annotated():
    h = _harness()
    h.setup(nodepool(requirements=[_types(THREE_TYPES, 3)]))
    _provision(h, pod("a", cpu="100m", unschedulable=True))
    (claim,) = h.nodeclaims()
    assert claim["metadata"]["annotations"][RELAXED] == "true"
    assert _req(claim, INSTANCE_TYPE_LABEL) == _types([SMALL, MEDIUM], 2)
    node = _node_of(h, claim)
    assert node["metadata"]["annotations"][RELAXED] == "true"
    assert node["metadata"]["labels"][INSTANCE_TYPE_LABEL] == SMALL


def test_met_min_values_is_annotated_not_relaxed():
    h = _harness()
    h.setup(nodepool(requirements=[_types(THREE_TYPES, 2)]))
    _provision(h, pod("a", cpu="100m", unschedulable=True))
    (claim,) = h.nodeclaims()
    assert claim["metadata"]["annotations"][RELAXED] == "false"
    assert _req(claim, INSTANCE_TYPE_LABEL)["minValues"] == 2


def test_strict_policy_leaves_the_pod_pending():
    h = _harness("Strict")
    h.setup(nodepool(requirements=[_types(THREE_TYPES, 3)]))
    _provision(h, pod("a", cpu="100m", unschedulable=True))
    assert h.nodeclaims() == []


def test_relaxing_min_values_comes_before_falling_back_to_a_lighter_nodepool():
    h = _harness()
    h.setup(nodepool("heavy", requirements=[_types(THREE_TYPES, 3)], weight=100),
            nodepool("light", requirements=[_types(THREE_TYPES)], weight=10))
    _provision(h, pod("a", cpu="100m", unschedulable=True))
    (claim,) = h.nodeclaims()
    assert claim["metadata"]["labels"][NODEPOOL_LABEL] == "heavy"
    assert claim["metadata"]["annotations"][RELAXED] == "true"
    assert _req(claim, INSTANCE_TYPE_LABEL) == _types([SMALL, MEDIUM], 2)


def test_the_heavier_of_two_relaxed_nodepools_is_chosen():
    h = _harness()
    h.setup(nodepool("light", requirements=[_types(THREE_TYPES, 3)], weight=10),
            nodepool("heavy", requirements=[_types(THREE_TYPES, 3)], weight=100))
    _provision(h, pod("a", cpu="100m", unschedulable=True))
    (claim,) = h.nodeclaims()
    assert claim["metadata"]["labels"][NODEPOOL_LABEL] == "heavy"
    assert claim["metadata"]["annotations"][RELAXED] == "true"
    assert _req(claim, INSTANCE_TYPE_LABEL) == _types([SMALL, MEDIUM], 2)


def test_unmet_zone_min_values_is_relaxed_to_the_zones_offered():
    h = _harness()
    wanted = ["test-zone-a", "test-zone-b", "test-zone-nowhere"]
    h.setup(nodepool(requirements=[_zones(wanted, 3)]))
    _provision(h, pod("a", cpu="100m", unschedulable=True))
    (claim,) = h.nodeclaims()
    assert claim["metadata"]["annotations"][RELAXED] == "true"
    assert _req(claim, ZONE_LABEL) == _zones(wanted, 2)
    node = _node_of(h, claim)
    assert node["metadata"]["labels"][ZONE_LABEL] in ("test-zone-a", "test-zone-b")
    assert node["metadata"]["annotations"][RELAXED] == "true"


def test_unmet_instance_type_and_zone_min_values_are_both_relaxed():
    h = _harness()
    wanted = ["test-zone-a", "test-zone-b", "test-zone-nowhere"]
    h.setup(nodepool(requirements=[_types([SMALL, "c-nope-1", "c-nope-2"], 3), _zones(wanted, 3)], weight=100))
    _provision(h, pod("a", cpu="100m", unschedulable=True))
    (claim,) = h.nodeclaims()
    assert _req(claim, INSTANCE_TYPE_LABEL) == _types([SMALL], 1)
    assert _req(claim, ZONE_LABEL) == _zones(wanted, 2)
    assert claim["metadata"]["annotations"][RELAXED] == "true"
    node = _node_of(h, claim)
    assert node["metadata"]["labels"][INSTANCE_TYPE_LABEL] == SMALL
    assert node["metadata"]["labels"][ZONE_LABEL] in ("test-zone-a", "test-zone-b")
    assert node["metadata"]["annotations"][RELAXED] == "true"


def test_a_nodeclaim_holding_pods_keeps_its_relaxed_min_values():
    # the second pod does not fit the 1-vCPU type: adding it would leave one type, below the relaxed minValues 2,
    # so it gets a NodeClaim of its own (relaxed again) rather than relaxing the first one further
    h = _harness()
    h.setup(nodepool(requirements=[_types(THREE_TYPES, 3)]))
    _provision(h, pod("a", cpu="500m", unschedulable=True), pod("b", cpu="500m", unschedulable=True))
    claims = h.nodeclaims()
    assert len(claims) == 2
    for c in claims:
        assert _req(c, INSTANCE_TYPE_LABEL)["minValues"] <= 2
        assert c["metadata"]["annotations"][RELAXED] == "true"
