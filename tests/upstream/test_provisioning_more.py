"""More of what the provisioner decides: which NodeClaims it writes (requirements, terminationGracePeriod), how
DaemonSets size the nodes, how preferences are relaxed or (preferencePolicy Ignore) left out, and how pods of a
node being deleted behind a fully blocking PDB are left where they are.

Engine-level cases solve karpy's pure scheduler (catalog ``ladder()``: std-1 .. std-16); controller-level cases run
the provisioner in the controller harness (KWOK catalog), playing kube-scheduler as upstream's suite does.
"""

from __future__ import annotations

import pytest

from controllers.harness import DISRUPTED_TAINT, Harness, nodepool as h_nodepool, pdb, pod as h_pod
from helpers import (
    LABEL_ARCH,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_OS,
    LABEL_ZONE,
    affinity_term,
    claim_of,
    expr,
    instance_type,
    ladder,
    nodepool,
    pod,
    pod_manifest,
    pods,
    scheduled,
    solve,
    spread,
    template,
    type_names,
)
from karpy import resources as res
from karpy.controllers.env import Settings
from karpy.scheduling.pods import compile_pod

PROVISIONER = "provisioner"
TRIGGER = "provisioner.trigger.pod"
WEB = {"app": "web"}


def provision(h: Harness, *objs: dict) -> list[dict]:
    """Pods pending, the batch window passes, the provisioner runs once."""
    made = h.create(*objs)
    for p in made:
        h.reconcile(TRIGGER, f"{p['metadata']['namespace']}/{p['metadata']['name']}")
    h.tick(h.settings.batch_idle)
    h.reconcile(PROVISIONER)
    return made


def daemon(name: str, containers: list[dict], init: list[dict] | None = None, host_port: int | None = None, **spec):
    """The pod a DaemonSet runs on every node, compiled as the scheduler sees it."""
    cs = [{"name": f"c{i}", "resources": r} for i, r in enumerate(containers)]
    if host_port:
        cs[0]["ports"] = [{"containerPort": host_port, "hostPort": host_port}]
    s: dict = {"containers": cs, **spec}
    if init:
        s["initContainers"] = [{"name": f"i{i}", "resources": r} for i, r in enumerate(init)]
    return compile_pod({"metadata": {"name": name, "namespace": "kube-system"}, "spec": s})


# =====================================================================================
# NodeClaims written
# =====================================================================================


class TestNodeClaimSpec:
    def test_no_termination_grace_period_on_the_nodepool_leaves_it_unset(self):
        h = Harness()
        h.setup(h_nodepool())
        provision(h, h_pod("a", unschedulable=True))
        (c,) = h.nodeclaims()
        assert "terminationGracePeriod" not in c["spec"]

    def test_the_nodepools_termination_grace_period_is_copied(self):
        h = Harness()
        h.setup(h_nodepool(termination_grace_period="223h"))
        provision(h, h_pod("a", unschedulable=True))
        (c,) = h.nodeclaims()
        assert c["spec"]["terminationGracePeriod"] == "223h"

    def test_custom_nodepool_requirements_are_carried_into_the_nodeclaim(self):
        h = Harness()
        h.setup(h_nodepool(requirements=[{"key": "custom-requirement-key", "operator": "In", "values": ["value"]},
                                         {"key": "custom-requirement-key2", "operator": "In", "values": ["value"]}]))
        provision(h, h_pod("a", unschedulable=True))
        (c,) = h.nodeclaims()
        reqs = {r["key"]: r for r in c["spec"]["requirements"]}
        for k in ("custom-requirement-key", "custom-requirement-key2"):
            assert reqs[k]["operator"] == "In" and reqs[k]["values"] == ["value"]
        assert reqs[LABEL_NODEPOOL]["values"] == ["default"]
        assert reqs[LABEL_INSTANCE_TYPE]["operator"] == "In" and reqs[LABEL_INSTANCE_TYPE]["values"]

    def test_an_operating_system_only_one_type_offers_restricts_the_types(self):
        types = ladder() + [instance_type("ios-arm", arch="arm64", os="ios")]
        r = solve(template(nodepool(requirements=[expr(LABEL_OS, "In", "ios")]), types), [pod(cpu="1")])
        (c,) = r.new_nodeclaims
        assert c.requirements.get(LABEL_OS).values == {"ios"}
        assert c.requirements.get(LABEL_INSTANCE_TYPE).values == {"ios-arm"}
        assert type_names(c) == ["ios-arm"]


class TestSupportedNodeAffinity:
    LABELS = {
        LABEL_ZONE: ("test-zone-2", "unknown-zone"),
        LABEL_ARCH: ("arm64", "s390x"),
        LABEL_OS: ("linux", "plan9"),
        LABEL_INSTANCE_TYPE: ("std-4", "huge-9"),
        "karpenter.sh/capacity-type": ("spot", "unknown-ct"),
        LABEL_NODEPOOL: ("default", "other-pool"),
    }

    @pytest.mark.parametrize("key", list(LABELS))
    def test_required_node_affinity_on_a_well_known_label(self, key):
        types = ladder() + ladder(arch="arm64", prefix="arm")
        good, bad = self.LABELS[key]
        ok = pod(required=[[expr(key, "In", good)]])
        r = solve(template(nodepool(), types), [ok])
        assert r.errors == {}
        (c,) = r.new_nodeclaims
        assert c.requirements.get(key).values == {good}
        no = pod(required=[[expr(key, "In", bad)]])
        r = solve(template(nodepool(), types), [no])
        assert r.new_nodeclaims == [] and no.key in r.errors


# =====================================================================================
# DaemonSet overhead
# =====================================================================================


class TestDaemonSetOverhead:
    def test_limits_alone_act_as_requests_and_too_large_blocks(self):
        ds = daemon("ds", [{"limits": {"cpu": "10000", "memory": "10000Gi"}}])
        assert ds.requests[res.CPU] == 10_000_000
        p = pod(cpu="1")
        r = solve(template(nodepool(), ladder(), daemons=[ds]), [p])
        assert r.new_nodeclaims == [] and p.key in r.errors

    def test_the_larger_of_init_and_containers_sizes_the_node(self):
        ds = daemon("ds", [{"requests": {"cpu": "1", "memory": "1Gi"}}],
                    init=[{"requests": {"cpu": "3", "memory": "1Gi"}}])
        r = solve(template(nodepool(), ladder(), daemons=[ds]), [pod(cpu="500m")])
        (c,) = r.new_nodeclaims
        assert c.requests[res.CPU] == 3500
        assert type_names(c)[0] == "std-4"  # 3 vCPU of init + 0.5: std-2 cannot

    def test_combined_max_too_large_for_any_node_blocks(self):
        ds = daemon("ds", [{"requests": {"cpu": "10", "memory": "1Gi"}}, {"requests": {"cpu": "7"}}],
                    init=[{"requests": {"cpu": "12"}}])
        assert ds.requests[res.CPU] == 17_000
        p = pod(cpu="1")
        r = solve(template(nodepool(), ladder(), daemons=[ds]), [p])
        assert r.new_nodeclaims == [] and p.key in r.errors

    def test_an_oversized_init_container_blocks(self):
        ds = daemon("ds", [{"requests": {"cpu": "1"}}], init=[{"requests": {"memory": "1Ti"}}])
        p = pod(cpu="1")
        r = solve(template(nodepool(), ladder(), daemons=[ds]), [p])
        assert r.new_nodeclaims == [] and p.key in r.errors

    def test_no_requests_or_limits_anywhere_schedules(self):
        ds = daemon("ds", [{}])
        p = compile_pod(pod_manifest("bare"))
        r = solve(template(nodepool(), ladder(), daemons=[ds]), [p])
        assert r.errors == {} and scheduled(r) == {p.key}


# =====================================================================================
# preferences
# =====================================================================================


class TestUnsatisfiablePreferences:
    @pytest.mark.parametrize("key", [LABEL_ZONE, LABEL_HOSTNAME])
    def test_an_unsatisfiable_node_preference_does_not_stop_packing(self, key):
        a = pod("a", cpu="2")
        b = pod("b", cpu="1", preferred=[(1, [expr(key, "In", "value-1")])])
        r = solve(template(), [a, b])
        assert r.errors == {}
        assert len(r.new_nodeclaims) == 1 and claim_of(r, a) is claim_of(r, b)


def ignoring() -> Harness:
    h = Harness(settings=Settings(preference_policy="Ignore"))
    h.setup(h_nodepool(zones=["test-zone-a", "test-zone-b", "test-zone-c"]))
    return h


def zone_of(h: Harness, claim: dict) -> list[str]:
    for r in claim["spec"]["requirements"]:
        if r["key"] == LABEL_ZONE and r["operator"] == "In":
            return r["values"]
    return []


class TestPreferencePolicyIgnore:
    def test_node_affinity_preferences_are_left_out(self):
        respect = Harness()
        respect.setup(h_nodepool(zones=["test-zone-a", "test-zone-b", "test-zone-c"]))
        pref = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [{"key": LABEL_ZONE, "operator": "In",
                                                                "values": ["test-zone-b"]}]}}]}}
        provision(respect, h_pod("p", unschedulable=True, affinity=pref))
        (c,) = respect.nodeclaims()
        assert zone_of(respect, c) == ["test-zone-b"]  # respected by default
        h = ignoring()
        provision(h, h_pod("p", unschedulable=True, affinity=pref))
        (c,) = h.nodeclaims()
        assert zone_of(h, c) != ["test-zone-b"]

    @pytest.mark.parametrize("key", [LABEL_ZONE, LABEL_HOSTNAME])
    def test_schedule_anyway_spreads_are_left_out(self, key):
        h = ignoring()
        c = spread(key, 1, WEB, when="ScheduleAnyway")
        provision(h, *[h_pod(f"p{i}", unschedulable=True, labels=WEB, topologySpreadConstraints=[c]) for i in range(4)])
        (claim,) = h.nodeclaims()
        assert claim["spec"]["resources"]["requests"]["pods"] == "4"

    @pytest.mark.parametrize("key", [LABEL_ZONE, LABEL_HOSTNAME])
    def test_preferred_anti_affinity_is_left_out(self, key):
        h = ignoring()
        aff = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "podAffinityTerm": affinity_term(key, WEB)}]}}
        provision(h, *[h_pod(f"p{i}", unschedulable=True, labels=WEB, affinity=aff) for i in range(3)])
        (claim,) = h.nodeclaims()
        assert claim["spec"]["resources"]["requests"]["pods"] == "3"

    @pytest.mark.parametrize("key, policy", [(LABEL_ZONE, "Ignore"), (LABEL_HOSTNAME, "Ignore"), (LABEL_ZONE, "Respect")])
    def test_preferred_pod_affinity_is_left_out(self, key, policy):
        h = Harness(settings=Settings(preference_policy=policy))
        h.setup(h_nodepool(zones=["test-zone-a", "test-zone-b", "test-zone-c"]))
        zone = lambda z: [{"key": LABEL_ZONE, "operator": "In", "values": [z]}]  # noqa: E731
        _, room = h.launch_node(instance_types=["c-4x-amd64-linux"], requirements=zone("test-zone-a"))
        _, busy = h.launch_node(instance_types=["c-4x-amd64-linux"], requirements=zone("test-zone-b"))
        h.pod_on(busy["metadata"]["name"], name="target", cpu="3", labels=WEB)
        aff = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "podAffinityTerm": affinity_term(key, WEB)}]}}
        provision(h, h_pod("follower", cpu="2", unschedulable=True, affinity=aff))
        new = [c for c in h.nodeclaims() if not (c.get("status") or {}).get("nodeName")]
        if policy == "Ignore":  # the node with room in zone a takes it
            assert new == []
            assert h.events("Nominated", involved="follower")[-1]["message"].endswith(room["metadata"]["name"])
        else:  # respected: a new NodeClaim beside the target
            (c,) = new
            assert zone_of(h, c) == ["test-zone-b"]


# =====================================================================================
# pods of a node being deleted, behind a fully blocking PDB
# =====================================================================================


@pytest.mark.parametrize("budgets", [
    pytest.param([{"max_unavailable": "0%"}], id="0%-max-unavailable"),
    pytest.param([{"min_available": "100%"}], id="100%-min-available"),
    pytest.param([{"min_available": "100%"}, {"min_available": "100%"}], id="two-pdbs"),
])
def test_pods_a_fully_blocking_pdb_holds_on_a_deleting_node_get_no_capacity(budgets):
    h = Harness()
    h.setup()
    old, n = h.launch_node(instance_types=["c-4x-amd64-linux"])
    name = n["metadata"]["name"]
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": True}
    h.pod_on(name, name="w1", cpu="1", owner=owner, labels=WEB)
    for i, b in enumerate(budgets):
        h.create(pdb(f"pdb-{i}", WEB, **b))
    h.patch("Node", name, {"spec": {"taints": list(n["spec"].get("taints") or []) + [dict(DISRUPTED_TAINT)]}})
    h.patch("Node", name, {"metadata": {"finalizers": ["karpenter.sh/termination"]}})
    h.delete("Node", name)
    h.reconcile("provisioner.trigger.node", name)
    h.tick(1)
    h.reconcile(PROVISIONER)
    assert [c["metadata"]["name"] for c in h.nodeclaims()] == [old["metadata"]["name"]]


# =====================================================================================
# minValues on zones
# =====================================================================================


def test_strict_zone_min_values_beyond_the_offered_zones_is_not_scheduled():
    types = [instance_type(f"it-{i}", cpu=4, memory_gib=8, zones=("test-zone-1", "test-zone-2")) for i in (1, 2, 3)]
    three = nodepool(requirements=[expr(LABEL_ZONE, "In", "test-zone-1", "test-zone-2", "test-zone-3", min_values=3)])
    p = pod(cpu="1")
    r = solve(template(three, types), [p])
    assert r.new_nodeclaims == [] and "minValues requirement is not met" in r.errors[p.key]
    two = nodepool(requirements=[expr(LABEL_ZONE, "In", "test-zone-1", "test-zone-2", "test-zone-3", min_values=2)])
    assert solve(template(two, types), [p]).errors == {}
