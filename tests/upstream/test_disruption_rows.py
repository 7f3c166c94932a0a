"""Consolidation's remaining upstream rows: spot nodes merged into one spot node, minValues kept through the
price filter and the spot-to-spot truncation, and the preferencePolicy / minValuesPolicy settings carried
into consolidation's scheduling simulation.

Catalog ``ladder()`` (std-N: N vCPU, 0.07·N per hour on-demand, spot 30 % cheaper); nodes on-demand in
test-zone-1, initialized and consolidatable unless a test says otherwise.
"""

from __future__ import annotations

import pytest

from disruption_helpers import Cluster, dpod, events_for, names, replacement_types
from helpers import expr, instance_type, ladder, spread
from karpy.cloudprovider.types import (
    CAPACITY_ON_DEMAND,
    CAPACITY_SPOT,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_ZONE,
    Offering,
)
from karpy.disruption.methods import VALIDATION_DELAY, DisruptionEngine

SPOT_ON = {"SpotToSpotConsolidation": True}
ALL = [{"nodes": "100%"}]
LADDER_24 = tuple(range(1, 25))


def spot_only(*more):
    return [expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_SPOT), *more]


def price_order(c: Cluster, capacity_type: str) -> list[str]:
    """The catalog's types, cheapest first, in one capacity type."""
    return [it.name for it in sorted(c.types, key=lambda it: min(o.price for o in it.offerings
                                                                 if o.capacity_type == capacity_type))]


# =====================================================================================
# several spot nodes merged into one spot node
# =====================================================================================


def three_spot_nodes(gates) -> Cluster:
    """Three std-4 spot nodes with a 2.5-cpu pod each: no node takes another's pod; two fit a std-6 and all
    three a std-8, each cheaper than the nodes it replaces."""
    c = Cluster(types=ladder((1, 2, 4, 6, 8, 16)), feature_gates=gates)
    c.nodepool(budgets=ALL, requirements=spot_only())
    for i in range(3):
        c.node(f"s{i}", itype="std-4", capacity_type=CAPACITY_SPOT, pods=[dpod(cpu="2.5")])
    return c


class TestSpotMerges:
    def test_three_spot_nodes_merge_into_one_cheaper_spot_node(self):
        c = three_spot_nodes(SPOT_ON)
        r = c.step()
        cmd = r.command
        assert cmd.method == "multi" and names(cmd) == ["s0", "s1", "s2"]
        (rep,) = cmd.replacements
        assert rep.requirements.get(LABEL_CAPACITY_TYPE).values == {CAPACITY_SPOT}
        # no 15-type floor for a merge: the one spot type that holds 7.5 cpu for less than the three nodes
        assert replacement_types(cmd) == ["std-8"]
        assert cmd.savings > 0

    def test_the_merge_needs_the_spot_to_spot_gate(self):
        c = three_spot_nodes({})
        cmd = c.step().command
        assert cmd is None or not cmd.replacements

    def test_two_spot_nodes_of_the_cheapest_type_are_not_merged_into_that_type(self):
        # two std-2 spot nodes (std-2 the only type), 1 cpu each: one goes, its pod joins the other, no launch
        c = Cluster(feature_gates=SPOT_ON)
        c.nodepool(budgets=ALL, requirements=spot_only(expr(LABEL_INSTANCE_TYPE, "In", "std-2")))
        for name in ("a", "b"):
            c.node(name, itype="std-2", capacity_type=CAPACITY_SPOT, pods=[dpod(cpu="0.5")])
        cmd = c.step().command
        assert cmd.decision == "delete" and len(cmd.candidates) == 1 and cmd.replacements == []

    def test_a_spot_merge_still_holds_after_the_validation_wait(self):
        c = three_spot_nodes(SPOT_ON)
        engine = DisruptionEngine()
        cmd = c.step(engine).command
        assert cmd.method == "multi" and cmd.replacements
        c.now += VALIDATION_DELAY
        fresh, why = engine.validate(c.snapshot(), cmd)
        assert why is None and names(fresh) == ["s0", "s1", "s2"] and len(fresh.replacements) == 1


# =====================================================================================
# minValues through the price filter and the spot-to-spot truncation
# =====================================================================================


class TestMinValuesInConsolidation:
    @pytest.mark.parametrize("min_values, kept", [(16, 16), (10, 15)])
    def test_a_spot_replacement_keeps_the_larger_of_15_and_min_values(self, min_values, kept):
        c = Cluster(types=ladder(LADDER_24), feature_gates=SPOT_ON)
        c.nodepool(requirements=spot_only(expr(LABEL_INSTANCE_TYPE, "Exists", min_values=min_values)))
        c.node("big", itype="std-24", capacity_type=CAPACITY_SPOT, pods=[dpod(cpu="0.5")])
        cmd = c.step().command
        assert names(cmd) == ["big"] and cmd.decision == "replace"
        assert replacement_types(cmd) == price_order(c, CAPACITY_SPOT)[:kept]
        assert cmd.replacements[0].requirements.get(LABEL_INSTANCE_TYPE).values == set(price_order(c, CAPACITY_SPOT)[:kept])

    @pytest.mark.parametrize("capacity_type", [CAPACITY_ON_DEMAND, CAPACITY_SPOT])
    def test_no_replacement_when_the_cheaper_types_break_min_values(self, capacity_type):
        # 24 types meet minValues 20, but only the 15 below std-16 are cheaper than the node
        c = Cluster(types=ladder(LADDER_24), feature_gates=SPOT_ON)
        c.nodepool(requirements=[expr(LABEL_CAPACITY_TYPE, "In", capacity_type),
                                 expr(LABEL_INSTANCE_TYPE, "Exists", min_values=20)])
        c.node("n", itype="std-16", capacity_type=capacity_type, pods=[dpod(cpu="0.5")])
        r = c.step()
        assert r.command is None
        assert events_for(r, "n", "Unconsolidatable") == [
            "Filtering by price: minValues requirement is not met for label(s) (label(s)=[node.kubernetes.io/instance-type])"]

    def test_without_min_values_the_same_node_is_replaced(self):
        c = Cluster(types=ladder(LADDER_24))
        c.nodepool(requirements=[expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_ON_DEMAND)])
        c.node("n", itype="std-16", pods=[dpod(cpu="0.5")])
        assert c.step().command.decision == "replace"

    def test_a_merge_that_loses_min_values_to_the_same_type_filter_falls_back_to_a_delete(self):
        # two 5-cpu types, "current" 0.5 and "other" 0.4, minValues 2; three "current" nodes with 2, 2 and 4 cpu
        # of pods. Merging the first two would launch only "other" once "current" is filtered out: minValues 2
        # fails, so the merge is dropped and one of the first two nodes is deleted into the other.
        types = [instance_type("current", cpu=5, offers=[Offering("test-zone-1", CAPACITY_ON_DEMAND, 0.5)]),
                 instance_type("other", cpu=5, offers=[Offering("test-zone-1", CAPACITY_ON_DEMAND, 0.4)])]
        c = Cluster(types=types)
        c.nodepool(budgets=ALL, requirements=[expr(LABEL_INSTANCE_TYPE, "Exists", min_values=2),
                                              expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_ON_DEMAND)])
        c.node("a", itype="current", pods=[dpod(cpu="2")])
        c.node("b", itype="current", pods=[dpod(cpu="2")])
        c.node("c", itype="current", pods=[dpod(cpu="2"), dpod(cpu="2")])
        cmd = c.step().command
        assert cmd.decision == "delete" and len(cmd.candidates) == 1 and names(cmd)[0] in ("a", "b")

    def test_best_effort_does_not_relax_min_values_to_find_a_replacement(self):
        # minValues 3 over a catalog of 2: BestEffort lets the simulation place the pod, but the price filter
        # keeps one type and the replacement would relax minValues further, so the node stays
        types = [instance_type("cheap", cpu=4, offers=[Offering("test-zone-1", CAPACITY_ON_DEMAND, 0.1)]),
                 instance_type("dear", cpu=8, offers=[Offering("test-zone-1", CAPACITY_ON_DEMAND, 1.0)])]
        c = Cluster(types=types)
        c.nodepool(budgets=ALL, requirements=[expr(LABEL_INSTANCE_TYPE, "In", "cheap", "dear", min_values=3)])
        c.node("n", itype="dear", pods=[dpod(cpu="1")])
        snap = c.snapshot()
        snap.min_values_best_effort = True
        r = DisruptionEngine().step(snap)
        assert r.command is None
        assert events_for(r, "n", "Unconsolidatable") == [
            "Filtering by price: minValues requirement is not met for label(s) (label(s)=[node.kubernetes.io/instance-type])"]


# =====================================================================================
# preferencePolicy Ignore in consolidation's simulation
# =====================================================================================


def _step(c: Cluster, respect: bool):
    snap = c.snapshot()
    snap.respect_preferences = respect
    return DisruptionEngine().step(snap)


class TestPreferencePolicy:
    @pytest.mark.parametrize("respect", [True, False])
    def test_a_preferred_anti_affinity_does_not_keep_a_node_when_ignored(self, respect):
        # two std-8 nodes, the only type; app=foo pods prefer apart: 2 on "a", 1 on "b"
        c = Cluster()
        c.nodepool(budgets=ALL, requirements=[expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_ON_DEMAND), expr(LABEL_INSTANCE_TYPE, "In", "std-8")])
        apart = [(1, {"labelSelector": {"matchLabels": {"app": "foo"}}, "topologyKey": "kubernetes.io/hostname"})]

        def foo():
            return dpod(cpu="1", labels={"app": "foo"}, preferred_pod_anti_affinity=apart)

        c.node("a", itype="std-8", pods=[foo(), foo()])
        c.node("b", itype="std-8", pods=[foo()])
        cmd = _step(c, respect).command
        if respect:
            assert cmd is None  # respected, the preference keeps each pod on a host of its own
        else:
            assert names(cmd) == ["b"] and cmd.decision == "delete"

    @pytest.mark.parametrize("respect", [True, False])
    def test_a_preferred_instance_type_does_not_pin_the_replacement_when_ignored(self, respect):
        c = Cluster()
        c.nodepool(requirements=[expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_ON_DEMAND)])
        prefers = [(1, [expr(LABEL_INSTANCE_TYPE, "In", "std-16")])]
        c.node("n", itype="std-16", pods=[dpod(cpu="1", preferred=prefers)])
        cmd = _step(c, respect).command
        if respect:
            assert cmd is None
        else:
            assert cmd.decision == "replace" and "std-16" not in replacement_types(cmd)
            assert replacement_types(cmd)[0] == "std-1"


# =====================================================================================
# topology
# =====================================================================================


class TestTopology:
    def test_a_replacement_keeps_the_zonal_spread(self):
        # one app pod per zone (maxSkew 1); the zone-2 node is a dear std-16: its replacement must stay in zone 2
        c = Cluster()
        c.nodepool(requirements=[expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_ON_DEMAND)])
        zonal = [spread(LABEL_ZONE, 1, labels={"app": "web"})]
        for zone, itype in (("test-zone-1", "std-2"), ("test-zone-2", "std-16"), ("test-zone-3", "std-2")):
            c.node(zone, itype=itype, zone=zone, pods=[dpod(cpu="1", labels={"app": "web"}, spread=zonal)],
                   annotations={} if itype == "std-16" else {"karpenter.sh/do-not-disrupt": "true"})
        cmd = c.step().command
        assert names(cmd) == ["test-zone-2"] and cmd.decision == "replace"
        assert cmd.replacements[0].requirements.get(LABEL_ZONE).values == {"test-zone-2"}
        assert replacement_types(cmd)[0] == "std-1"


class TestParallelization:
    @pytest.mark.parametrize("old_node_deleting", [True, False])
    def test_a_node_launched_for_a_deleting_nodes_pods_is_not_consolidated(self, old_node_deleting):
        # "new" (std-8) was launched for the five 1-cpu pods of "old", being deleted; two have moved so far
        c = Cluster()
        c.nodepool(requirements=[expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_ON_DEMAND)])
        if old_node_deleting:
            c.node("old", itype="std-8", pods=[dpod(cpu="1") for _ in range(3)], marked_for_deletion=True)
        c.node("new", itype="std-8", pods=[dpod(cpu="1") for _ in range(2)])
        cmd = c.step().command
        if old_node_deleting:
            assert cmd is None  # the three pods still to come need the room
        else:
            assert names(cmd) == ["new"] and replacement_types(cmd)[0] == "std-2"
