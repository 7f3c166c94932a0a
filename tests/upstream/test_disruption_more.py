"""More of what the disruption engine decides: which nodes are candidates, which consolidations go ahead, which
events say why not, and how drift and emptiness treat special nodes.

Catalog ``ladder()`` (std-N: N vCPU, 0.07·N per hour on-demand, spot 30 % cheaper); nodes on-demand in
test-zone-1, initialized and consolidatable unless a test says otherwise.
"""

from __future__ import annotations

import pytest

from disruption_helpers import HOUR, MONDAY_10AM, Cluster, dpod, events_for, names
from helpers import expr, instance_type, ladder
from karpy import resources as res
from karpy.cloudprovider.types import (
    CAPACITY_ON_DEMAND,
    CAPACITY_SPOT,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_ZONE,
    Offering,
)
from karpy.disruption.candidates import EVENTUAL, GRACEFUL, build_candidates
from karpy.disruption.methods import DisruptionEngine, StaticReplacement, simulate
from karpy.disruption.state import DELETION_COST

DND = "karpenter.sh/do-not-disrupt"
ON_DEMAND = [expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_ON_DEMAND)]


def candidate_names(c: Cluster, klass: str = GRACEFUL) -> list[str]:
    return sorted(x.name for x in build_candidates(c.snapshot(), klass, []))


def node(c: Cluster, name: str):
    return next(n for n in c.nodes if n.name == name)


def add_pod(c: Cluster, name: str, pod) -> None:
    n = node(c, name)
    n.pods.append(pod)
    n.existing.requested = res.add(n.existing.requested, pod.info.requests)


def drifted(c: Cluster, name: str, **kw):
    kw.setdefault("itype", "std-4")
    return c.node(name, drifted="NodePoolDrifted", drifted_since=MONDAY_10AM - HOUR, **kw)


# =====================================================================================
# eviction cost
# =====================================================================================


class TestEvictionCost:
    def test_a_higher_deletion_cost_costs_more(self):
        costs = [dpod(annotations={DELETION_COST: v}).eviction_cost() for v in ("99", "100", "101")]
        assert costs[0] < costs[1] < costs[2]

    def test_a_lower_priority_costs_less(self):
        assert dpod(priority=-1).eviction_cost() < dpod(priority=0).eviction_cost() == 1.0


# =====================================================================================
# candidates
# =====================================================================================


class TestCandidates:
    def test_a_do_not_disrupt_pod_blocks_graceful_methods_even_with_a_grace_period(self):
        c = Cluster()
        c.nodepool()
        c.node("n", itype="std-4", pods=[dpod(do_not_disrupt="true")], termination_grace_period=HOUR)
        assert candidate_names(c, GRACEFUL) == []
        assert candidate_names(c, EVENTUAL) == ["n"]  # drift may take it: the drain forces the pod by then

    def test_a_pdb_blocked_pod_blocks_eventual_methods_without_a_grace_period(self):
        c = Cluster()
        c.nodepool()
        c.node("n", itype="std-4", pods=[dpod(labels={"app": "db"})])
        c.pdb("db", {"app": "db"}, allowed=0)
        r = build_candidates(c.snapshot(), EVENTUAL, events := [])
        assert r == []
        assert any("pdb prevents pod evictions" in m.lower() for _, _, m in events)

    @pytest.mark.parametrize("pod_kw", [
        pytest.param({"owner": "Node"}, id="mirror"),
        pytest.param({"phase": "Succeeded"}, id="succeeded"),
        pytest.param({"phase": "Failed"}, id="failed"),
        pytest.param({"terminating": True}, id="terminating"),
    ])
    def test_a_fully_blocking_pdb_over_a_pod_that_will_not_be_evicted_does_not_block(self, pod_kw):
        c = Cluster()
        c.nodepool()
        c.node("n", itype="std-4", pods=[dpod(labels={"app": "db"}, **pod_kw), dpod()])
        c.pdb("db", {"app": "db"}, allowed=0)
        assert candidate_names(c) == ["n"]

    @pytest.mark.parametrize("label", [LABEL_CAPACITY_TYPE, LABEL_ZONE, LABEL_INSTANCE_TYPE])
    def test_a_node_missing_a_well_known_label_is_still_a_candidate(self, label):
        c = Cluster()
        c.nodepool()
        n = c.node("n", itype="std-4", pods=[dpod()])
        n.labels = {k: v for k, v in n.labels.items() if k != label}
        if label == LABEL_CAPACITY_TYPE:
            n.capacity_type = None
        if label == LABEL_ZONE:
            n.zone = None
        assert candidate_names(c) == ["n"]

    def test_a_node_of_an_unknown_instance_type_is_still_a_candidate_and_drift_replaces_it(self):
        c = Cluster()
        c.nodepool()
        n = drifted(c, "n", pods=[dpod()])
        n.instance_type = None
        assert candidate_names(c, EVENTUAL) == ["n"]
        r = c.step()
        assert names(r.command) == ["n"] and r.command.method == "drift"


# =====================================================================================
# consolidation: events
# =====================================================================================


class TestUnconsolidatableEvents:
    def test_no_consolidation_disabled_event_under_when_empty_or_underutilized(self):
        c = Cluster()
        c.nodepool(policy="WhenEmptyOrUnderutilized")
        c.node("busy", itype="std-4", pods=[dpod(cpu="4")])
        r = c.step()
        assert not any("consolidation disabled" in m for m in events_for(r, "busy"))

    @pytest.mark.parametrize("label, attr", [(LABEL_CAPACITY_TYPE, "capacity_type"), (LABEL_ZONE, "zone")])
    def test_a_node_missing_a_price_label_is_unconsolidatable(self, label, attr):
        c = Cluster()
        c.nodepool()
        n = c.node("n", itype="std-16", pods=[dpod()])
        n.labels = {k: v for k, v in n.labels.items() if k != label}
        setattr(n, attr, None)
        r = c.step()
        assert r.command is None
        assert f'Node does not have label "{label}"' in events_for(r, "n", "Unconsolidatable")


# =====================================================================================
# consolidation: budgets do not mark the cluster consolidated
# =====================================================================================


class TestBudgetBlockedIsNotConsolidated:
    @pytest.mark.parametrize("pools", [1, 10])
    @pytest.mark.parametrize("method", ["multi", "single"])
    def test_a_pass_blocked_only_by_budgets_is_retried_on_the_same_cluster(self, pools, method):
        c = Cluster()
        per_pool = 2 if method == "multi" else 1
        for p in range(pools):
            c.nodepool(f"pool-{p}", budgets=[{"nodes": "0%"}])
            for i in range(per_pool):
                c.node(f"n-{p}-{i}", nodepool=f"pool-{p}", itype="std-16", pods=[dpod(cpu="1")])
        engine = DisruptionEngine()
        assert engine.step(c.snapshot(), version=7).command is None
        for np in c.nodepools.values():
            np["spec"]["disruption"]["budgets"] = [{"nodes": "100%"}]
        cmd = engine.step(c.snapshot(), version=7).command  # nothing else changed
        assert cmd is not None and cmd.method == ("multi" if pools * per_pool > 1 else "single")


# =====================================================================================
# consolidation: delete and replace
# =====================================================================================


class TestConsolidationDecisions:
    @pytest.mark.parametrize("capacity_type, gates", [(CAPACITY_ON_DEMAND, {}),
                                                      (CAPACITY_SPOT, {"SpotToSpotConsolidation": True})])
    def test_a_nodepool_without_instance_types_does_not_stop_a_replace(self, capacity_type, gates):
        # 24 sizes: a spot replacement needs 15 cheaper spot types to choose from
        c = Cluster(types=ladder(tuple(range(1, 25))), feature_gates=gates)
        c.nodepool("default")
        c.nodepool("nothing", types=[])
        c.node("big", itype="std-24", capacity_type=capacity_type, pods=[dpod(cpu="1")])
        r = c.step()
        assert names(r.command) == ["big"] and r.command.decision == "replace"
        assert r.command.replacements[0].template.nodepool == "default"

    def test_no_replace_when_a_spot_offering_it_could_land_on_is_dearer(self):
        src = instance_type("src", cpu=8, offers=[Offering("test-zone-1", CAPACITY_ON_DEMAND, 0.5)])
        dst = instance_type("dst", cpu=4, offers=[Offering("test-zone-1", CAPACITY_SPOT, 1.0),
                                                  Offering("test-zone-2", CAPACITY_SPOT, 0.2),
                                                  Offering("test-zone-3", CAPACITY_SPOT, 0.4)])
        c = Cluster(types=[src, dst])
        c.nodepool()
        c.node("n", itype="src", pods=[dpod(cpu="1")])
        r = c.step()
        assert r.command is None
        assert "Can't replace with a cheaper node" in events_for(r, "n", "Unconsolidatable")

    def test_pods_that_fit_on_unmanaged_capacity_let_both_nodes_go(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}])
        c.node("a", itype="std-4", pods=[dpod(cpu="1")])
        c.node("b", itype="std-4", pods=[dpod(cpu="1")])
        c.node("byo", itype="std-16", managed=False)
        r = c.step()
        assert names(r.command) == ["a", "b"] and r.command.decision == "delete"

    def test_a_do_not_disrupt_pod_keeps_its_node_from_consolidation_despite_a_grace_period(self):
        c = Cluster()
        c.nodepool(termination_grace_period="1h")
        c.node("kept", itype="std-16", pods=[dpod(do_not_disrupt="true")], termination_grace_period=HOUR)
        c.node("room", itype="std-16", pods=[dpod(cpu="1")], annotations={DND: "true"})
        r = c.step()
        assert r.command is None

    def test_a_bare_pod_does_not_keep_its_node(self):
        c = Cluster()
        c.nodepool()
        c.node("bare", itype="std-4", pods=[dpod(cpu="1", owner=None)])
        c.node("other", itype="std-4", pods=[dpod(cpu="1"), dpod(cpu="1")])
        r = c.step()
        assert names(r.command) == ["bare"] and r.command.decision == "delete"

    def test_a_node_that_never_consolidates_is_still_a_destination(self):
        c = Cluster()
        c.nodepool("default")
        c.nodepool("never", consolidate_after="Never")
        c.node("source", itype="std-4", pods=[dpod("mover", cpu="1")])
        c.node("dest", itype="std-16", nodepool="never", pods=[dpod(cpu="8")])
        r = c.step()
        assert names(r.command) == ["source"] and r.command.decision == "delete"
        assert [p.name for p in r.command.results.existing["dest"]] == ["mover"]

    def test_a_replace_goes_ahead_while_other_nodes_wait_out_consolidate_after(self):
        c = Cluster()
        c.nodepool(requirements=ON_DEMAND)
        c.node("dear", itype="std-16", pods=[dpod(cpu="1")])
        for i in range(2):
            c.node(f"fresh-{i}", itype="std-2", pods=[dpod(cpu="2")], consolidatable=False, under_consolidate_after=True)
        r = c.step()
        assert names(r.command) == ["dear"] and r.command.decision == "replace"

    def test_an_initialized_node_with_room_takes_the_pod_among_uninitialized_ones(self):
        c = Cluster()
        c.nodepool(requirements=ON_DEMAND)
        c.node("small", itype="std-4", pods=[dpod(cpu="1")])
        for i in range(20):
            c.node(f"new-{i}", itype="std-16", initialized=False)
        c.node("ready", itype="std-8", pods=[dpod(cpu="4")], annotations={DND: "true"})
        r = c.step()
        assert names(r.command) == ["small"] and r.command.decision == "delete"
        assert not any("uninitialized" in m for m in events_for(r, "small"))

    def test_a_permanently_pending_pod_does_not_block_a_delete(self):
        c = Cluster()
        c.nodepool()
        c.node("a", itype="std-4", pods=[dpod(cpu="1")])
        c.node("b", itype="std-4", pods=[dpod(cpu="1")], annotations={DND: "true"})
        c.pending.append(dpod("nowhere", node_selector={"example.com/none": "x"}).info)
        r = c.step()
        assert names(r.command) == ["a"] and r.command.decision == "delete"
        assert "default/nowhere" in r.command.results.errors  # it stays pending

    def test_deleting_nodes_pods_may_land_on_uninitialized_nodes(self):
        c = Cluster()
        c.nodepool()
        c.node("leaving", itype="std-4", pods=[dpod("leaver", cpu="2")], marked_for_deletion=True)
        c.node("new", itype="std-2", initialized=False)  # only the leaving node's pod fits here
        c.node("cand", itype="std-4", pods=[dpod(cpu="1")])
        c.node("room", itype="std-4", pods=[dpod(cpu="3")], annotations={DND: "true"})
        snap = c.snapshot()
        sim = simulate(snap, [x for x in build_candidates(snap, GRACEFUL, []) if x.name == "cand"], True)
        assert sim.ok and not sim.results.new_nodeclaims
        assert [p.name for p in sim.results.existing.get("new", [])] == ["leaver"]

    def test_three_mixed_capacity_nodes_merge_into_one(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}],
                   requirements=ON_DEMAND + [expr(LABEL_INSTANCE_TYPE, "In", "std-4", "std-8")])
        c.node("od-1", itype="std-8", pods=[dpod(cpu="1")])
        c.node("od-2", itype="std-8", pods=[dpod(cpu="1")])
        c.node("spot", itype="std-8", capacity_type=CAPACITY_SPOT, pods=[dpod(cpu="1")])
        r = c.step()
        assert names(r.command) == ["od-1", "od-2", "spot"]
        assert len(r.command.replacements) == 1
        assert [it.name for it in r.command.replacements[0].instance_types] == ["std-4"]

    @pytest.mark.parametrize("anti_affinity", [True, False])
    def test_mutual_anti_affinity_keeps_both_nodes(self, anti_affinity):
        # two std-2 nodes (the only type) with a 1-cpu pod each: room enough to delete one, unless the pods repel
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}], requirements=ON_DEMAND + [expr(LABEL_INSTANCE_TYPE, "In", "std-2")])
        anti = [{"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]
        for name in ("a", "b"):
            c.node(name, itype="std-2", pods=[dpod(cpu="1", labels={"app": "db"},
                                                   pod_anti_affinity=anti if anti_affinity else None)])
        r = c.step()
        if anti_affinity:
            assert r.command is None
        else:
            assert r.command.decision == "delete" and len(r.command.candidates) == 1

    def test_a_static_nodepools_nodes_are_never_consolidated(self):
        c = Cluster()
        np = c.nodepool()
        np["spec"]["replicas"] = 3
        for i in range(3):
            c.node(f"s-{i}", itype="std-16", pods=[dpod(cpu="1")] if i else [])
        r = c.step()
        assert r.command is None


# =====================================================================================
# validation after the wait
# =====================================================================================


class TestValidationBlockers:
    def setup_cmd(self, replace: bool):
        c = Cluster()
        c.nodepool(requirements=ON_DEMAND)
        if replace:
            c.node("cand", itype="std-16", pods=[dpod(cpu="1")])
        else:
            c.node("cand", itype="std-4", pods=[dpod(cpu="1")])
            c.node("room", itype="std-4", pods=[dpod(cpu="2")], annotations={DND: "true"})
        engine = DisruptionEngine()
        cmd = engine.step(c.snapshot()).command
        assert names(cmd) == ["cand"] and cmd.decision == ("replace" if replace else "delete")
        return c, engine, cmd

    @pytest.mark.parametrize("replace", [True, False], ids=["replace", "delete"])
    @pytest.mark.parametrize("blocker", ["do-not-disrupt", "pdb"])
    def test_a_pod_that_blocks_disruption_arriving_during_the_wait_cancels(self, replace, blocker):
        c, engine, cmd = self.setup_cmd(replace)
        if blocker == "pdb":
            c.pdb("guard", {"app": "guarded"}, allowed=0)
            add_pod(c, "cand", dpod(cpu="100m", labels={"app": "guarded"}))
        else:
            add_pod(c, "cand", dpod(cpu="100m", do_not_disrupt="true"))
        got, why = engine.validate(c.snapshot(), cmd)
        assert got is None and why is not None


# =====================================================================================
# drift and emptiness
# =====================================================================================


class TestDriftSpecialCases:
    def test_no_replacement_is_launched_for_a_pod_a_blocking_pdb_holds(self):
        c = Cluster()
        c.nodepool(termination_grace_period="1h")
        drifted(c, "d", pods=[dpod("held", cpu="1", labels={"app": "db"}), dpod("free", cpu="1")],
                termination_grace_period=HOUR)
        c.pdb("db", {"app": "db"}, allowed=0)
        r = c.step()
        assert names(r.command) == ["d"] and r.command.method == "drift"
        moved = [p.name for rep in r.command.replacements for p in rep.pods]
        assert moved == ["free"]

    def test_an_active_do_not_disrupt_duration_holds_drift(self):
        c = Cluster()
        c.nodepool()
        drifted(c, "d", pods=[dpod(do_not_disrupt="10m", start_time=MONDAY_10AM - 120)])
        assert c.step().command is None
        c.now = MONDAY_10AM + 9 * 60  # 11 minutes after the pod started
        assert names(c.step().command) == ["d"]

    def test_drift_waits_for_the_longest_do_not_disrupt_duration(self):
        c = Cluster()
        c.nodepool()
        start = MONDAY_10AM
        drifted(c, "d", pods=[dpod(do_not_disrupt="5m", start_time=start), dpod(do_not_disrupt="10m", start_time=start)])
        c.now = start + 6 * 60
        assert c.step().command is None
        c.now = start + 10 * 60 + 1
        assert names(c.step().command) == ["d"]

    @pytest.mark.parametrize("policy", ["WhenEmptyOrUnderutilized", "WhenEmpty"])
    def test_an_empty_drifted_node_is_deleted_without_a_replacement(self, policy):
        c = Cluster()
        c.nodepool(policy=policy)
        drifted(c, "d")
        r = c.step()
        assert names(r.command) == ["d"] and r.command.replacements == []

    def test_a_static_nodepools_drifted_node_is_replaced_from_its_template(self):
        c = Cluster()
        np = c.nodepool()
        np["spec"]["replicas"] = 1
        drifted(c, "s", pods=[dpod(cpu="1")])
        snap = c.snapshot()
        snap.nodepool_counts = {"default": (1, 0, 0)}
        r = DisruptionEngine().step(snap)
        assert names(r.command) == ["s"]
        assert [type(x) for x in r.command.replacements] == [StaticReplacement]

    @pytest.mark.parametrize("case", ["not drifted", "do-not-disrupt"])
    def test_a_static_node_that_is_not_drifted_or_is_pinned_is_not_replaced(self, case):
        c = Cluster()
        np = c.nodepool()
        np["spec"]["replicas"] = 1
        if case == "not drifted":
            c.node("s", itype="std-4", pods=[dpod(cpu="1")])
        else:
            drifted(c, "s", pods=[dpod(cpu="1")], annotations={DND: "true"})
        snap = c.snapshot()
        snap.nodepool_counts = {"default": (1, 0, 0)}
        assert DisruptionEngine().step(snap).command is None

    def test_emptiness_leaves_a_static_nodepools_empty_nodes(self):
        c = Cluster()
        np = c.nodepool()
        np["spec"]["replicas"] = 2
        c.node("s-1", itype="std-4")
        c.node("s-2", itype="std-4")
        assert c.step().command is None

    @pytest.mark.parametrize("pending", [True, False])
    def test_pending_pods_keep_a_node_that_only_they_could_use(self, pending):
        c = Cluster()
        c.nodepool(requirements=ON_DEMAND)
        c.node("big", itype="std-16", pods=[dpod(cpu="1")])
        if pending:
            c.pending.append(dpod("large", cpu="15").info)  # fits beside the 1-cpu pod on a std-16 only
        r = c.step()
        if pending:
            assert r.command is None
        else:
            assert names(r.command) == ["big"] and r.command.decision == "replace"
