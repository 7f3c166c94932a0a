"""Disruption behaviour: which nodes Karpenter deletes or replaces, by what, and why it leaves the others alone.

The scenarios follow what upstream Karpenter's disruption suites check (budgets, candidate
filtering, emptiness, single- and multi-node consolidation, validation, drift), restated for
karpy's pure engine: :meth:`DisruptionEngine.step` reads a snapshot of the cluster and returns at
most one command plus the events it would emit.

Unless a test says otherwise the catalog is ``ladder()`` (std-1 .. std-16: N vCPU, 2N GiB, 0.07
per vCPU on-demand, spot 30% cheaper, in test-zone-1..3), nodes are on-demand in test-zone-1,
initialized, Ready and consolidatable, and "now" is Monday 2024-01-01 10:00 UTC.
"""

from __future__ import annotations

import math
from dataclasses import replace
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disruption_helpers import (
    HOUR,
    MONDAY_10AM,
    SATURDAY_10AM,
    Cluster,
    disruption_nodepool,
    dpod,
    events_for,
    names,
    replacement_types,
    utc,
)
from helpers import expr, instance_type, ladder, taint, toleration
from karpy import resources as res
from karpy.cloudprovider.types import (
    CAPACITY_ON_DEMAND,
    CAPACITY_SPOT,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_ZONE,
)
from karpy.disruption.budgets import UNLIMITED, allowed_disruptions, budget_mapping
from karpy.disruption.candidates import build_candidates, currently_reschedulable, pdb_blocks
from karpy.disruption.drift import (
    HASH_VERSION,
    NODECLASS_HASH,
    NODEPOOL_HASH,
    NODEPOOL_HASH_VERSION,
    drift_reason,
    nodeclass_hash,
    nodepool_hash,
)
from karpy.disruption.methods import DisruptionEngine, worst_launch_price

ON_DEMAND_ONLY = [expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_ON_DEMAND)]
DND = "karpenter.sh/do-not-disrupt"


def budgets_np(*budgets, name: str = "default") -> dict:
    return disruption_nodepool(name, budgets=list(budgets))


def allowed(np: dict, nodes: int, reason: str = "Underutilized", now: float = MONDAY_10AM) -> int:
    return allowed_disruptions(np, nodes, reason, now)


# =====================================================================================
# Budgets
# =====================================================================================


class TestBudgetArithmetic:
    def test_a_count_is_taken_as_is(self):
        assert allowed(budgets_np({"nodes": "3"}), 10) == 3

    @pytest.mark.parametrize("pct, nodes, want", [
        ("5%", 10, 1),     # 0.5 rounds up to one node rather than blocking
        ("34%", 10, 4),    # 3.4 -> 4
        ("10%", 25, 3),    # 2.5 -> 3
        ("50%", 3, 2),
        ("100%", 7, 7),
        ("0%", 10, 0),
        ("10%", 0, 0),
    ])
    def test_percentages_round_up(self, pct, nodes, want):
        assert allowed(budgets_np({"nodes": pct}), nodes) == want

    def test_default_is_ten_percent(self):
        np = disruption_nodepool()  # no budgets given
        assert allowed(np, 25) == 3
        assert allowed(np, 1) == 1

    def test_most_restrictive_active_budget_wins(self):
        np = budgets_np({"nodes": "50%"}, {"nodes": "2"}, {"nodes": "90%"})
        assert allowed(np, 10) == 2
        assert allowed(np, 2) == 1  # 50% of 2 beats the count of 2

    def test_reasons_scope_a_budget(self):
        np = budgets_np({"nodes": "0", "reasons": ["Drifted"]}, {"nodes": "5"})
        assert allowed(np, 10, "Drifted") == 0
        assert allowed(np, 10, "Empty") == 5
        assert allowed(np, 10, "Underutilized") == 5

    def test_a_budget_for_several_reasons(self):
        np = budgets_np({"nodes": "1", "reasons": ["Empty", "Underutilized"]}, {"nodes": "4"})
        assert allowed(np, 10, "Empty") == 1
        assert allowed(np, 10, "Underutilized") == 1
        assert allowed(np, 10, "Drifted") == 4

    def test_budgets_that_match_no_reason_leave_it_unbounded(self):
        np = budgets_np({"nodes": "0", "reasons": ["Empty"]})
        assert allowed(np, 10, "Drifted") == UNLIMITED


class TestBudgetSchedules:
    WEEKDAYS = {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}

    def test_business_hours_window_blocks_during_the_window(self):
        np = budgets_np(self.WEEKDAYS)
        assert allowed(np, 10, now=MONDAY_10AM) == 0

    def test_outside_the_window_the_budget_does_not_apply(self):
        np = budgets_np(self.WEEKDAYS)
        assert allowed(np, 10, now=SATURDAY_10AM) == UNLIMITED
        assert allowed(np, 10, now=utc(2024, 1, 1, 8, 59)) == UNLIMITED  # Monday, before 09:00
        assert allowed(np, 10, now=utc(2024, 1, 1, 17, 30)) == UNLIMITED  # Monday, after 17:00

    def test_outside_the_window_the_other_budgets_still_apply(self):
        np = budgets_np({"nodes": "10%"}, self.WEEKDAYS)
        assert allowed(np, 20, now=MONDAY_10AM) == 0
        assert allowed(np, 20, now=SATURDAY_10AM) == 2

    def test_window_opens_at_the_firing(self):
        np = budgets_np(self.WEEKDAYS)
        assert allowed(np, 10, now=utc(2024, 1, 1, 9, 0)) == 0
        assert allowed(np, 10, now=utc(2024, 1, 1, 16, 59, 59)) == 0

    def test_window_closes_at_fire_plus_duration(self):
        np = budgets_np(self.WEEKDAYS)
        assert allowed(np, 10, now=utc(2024, 1, 1, 17, 0)) == UNLIMITED

    def test_schedules_are_in_utc(self):
        # 23:30 UTC on Sunday is Monday morning east of UTC; a weekday schedule is still inactive
        np = budgets_np({"nodes": "0", "schedule": "0 0 * * mon", "duration": "1h"})
        assert allowed(np, 10, now=utc(2024, 1, 7, 23, 30)) == UNLIMITED
        assert allowed(np, 10, now=utc(2024, 1, 8, 0, 30)) == 0

    def test_duration_longer_than_the_recurrence_keeps_it_open(self):
        np = budgets_np({"nodes": "0", "schedule": "@daily", "duration": "48h"})
        assert allowed(np, 10, now=utc(2024, 1, 7, 0, 0)) == 0

    def test_descriptor_schedule(self):
        np = budgets_np({"nodes": "0", "schedule": "@yearly", "duration": "24h"})
        assert allowed(np, 10, now=utc(2024, 1, 1, 12, 0)) == 0
        assert allowed(np, 10, now=utc(2024, 1, 2, 12, 0)) == UNLIMITED

    def test_sunday_morning_window_is_over_by_noon_or_later(self):
        np = budgets_np({"nodes": "0", "schedule": "30 6 * * SUN", "duration": "6h"})
        assert allowed(np, 10, now=utc(2024, 1, 7, 0, 0)) == UNLIMITED  # before it opens
        assert allowed(np, 10, now=utc(2024, 1, 7, 7, 0)) == 0
        assert allowed(np, 10, now=utc(2024, 1, 7, 12, 31)) == UNLIMITED


class TestMalformedBudgets:
    def test_unparseable_schedule_blocks_everything(self):
        np = budgets_np({"nodes": "5"}, {"nodes": "10", "schedule": "@wrongly", "duration": "1h"})
        assert allowed(np, 10) == 0

    def test_a_malformed_budget_for_one_reason_blocks_the_others_too(self):
        np = budgets_np({"nodes": "5"}, {"nodes": "10", "reasons": ["Drifted"], "schedule": "@wrongly", "duration": "1h"})
        for reason in ("Empty", "Drifted", "Underutilized"):
            assert allowed(np, 10, reason) == 0, reason

    def test_unparseable_nodes_value_blocks(self):
        assert allowed(budgets_np({"nodes": "1000a%"}), 10) == 0

    @pytest.mark.parametrize("schedule", ["0 0 * * tue-mon", "0 9 * * 7"])
    def test_schedules_go_cron_rejects_fail_closed(self, schedule):
        np = budgets_np({"nodes": "10", "schedule": schedule, "duration": "6h"})
        assert allowed(np, 10, now=utc(2024, 1, 7, 0, 0)) == 0

    def test_malformed_budget_blocks_the_engine(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}, {"nodes": "1", "schedule": "@wrongly", "duration": "1h"}])
        for _ in range(3):
            c.node(itype="std-4")  # all empty
        r = c.step()
        assert r.command is None
        assert events_for(r, "default", "DisruptionBlocked") == [
            "No allowed disruptions for disruption reason Empty due to blocking budget"]


class TestBudgetMapping:
    """How many more nodes each NodePool may start disrupting, given what is already in flight."""

    def mapping(self, c: Cluster, reason: str = "Empty") -> dict[str, int]:
        snap = c.snapshot()
        return budget_mapping(snap.nodepools, [n for n in snap.nodes if n.managed], reason, snap.now)

    def test_nodes_already_disrupting_use_up_the_budget(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "2"}])
        for _ in range(4):
            c.node()
        assert self.mapping(c) == {"default": 2}
        c.nodes[0].marked_for_deletion = True
        assert self.mapping(c) == {"default": 1}
        c.nodes[1].ready = False
        assert self.mapping(c) == {"default": 0}
        c.nodes[2].marked_for_deletion = True
        assert self.mapping(c) == {"default": 0}  # never negative

    def test_percentages_count_initialized_nodes_only(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "50%"}])
        for _ in range(4):
            c.node()
        for _ in range(4):
            c.node(initialized=False, ready=False)  # launching replacements do not raise the budget
        assert self.mapping(c) == {"default": 2}

    def test_nodes_whose_instance_is_terminating_are_not_counted(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "50%"}])
        for _ in range(4):
            c.node()
        c.node(terminating=True, marked_for_deletion=True)
        c.node(terminating=True, marked_for_deletion=True)
        assert self.mapping(c) == {"default": 2}

    def test_unmanaged_nodes_are_not_counted(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "50%"}])
        c.node()
        c.node()
        c.node(managed=False)
        c.node(managed=False)
        assert self.mapping(c) == {"default": 1}

    def test_each_nodepool_has_its_own_budget(self):
        c = Cluster()
        c.nodepool("a", budgets=[{"nodes": "1"}])
        c.nodepool("b", budgets=[{"nodes": "100%"}])
        for _ in range(3):
            c.node(nodepool="a")
            c.node(nodepool="b")
        c.nodes[0].marked_for_deletion = True  # an "a" node
        assert self.mapping(c) == {"a": 0, "b": 3}

    def test_emptiness_deletes_no_more_than_the_budget(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "2"}])
        for _ in range(5):
            c.node(itype="std-2")
        r = c.step()
        assert r.command.method == "emptiness"
        assert len(r.command.candidates) == 2

    def test_in_flight_disruptions_shrink_the_next_command(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "3"}])
        for _ in range(5):
            c.node(itype="std-2")
        c.node(itype="std-2", marked_for_deletion=True)
        c.node(itype="std-2", ready=False)
        r = c.step()
        assert len(r.command.candidates) == 1

    def test_zero_budget_reports_the_blocked_nodepool(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "0"}])
        c.node(itype="std-2")
        r = c.step()
        assert r.command is None
        assert "No allowed disruptions for disruption reason Empty due to blocking budget" in events_for(
            r, "default", "DisruptionBlocked")

    def test_a_reason_specific_budget_blocks_only_that_method(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "0", "reasons": ["Empty"]}, {"nodes": "100%"}])
        c.node("empty", itype="std-2")
        c.node("busy", itype="std-8", pods=[dpod(cpu="1")])
        c.node("other", itype="std-8", pods=[dpod(cpu="1")])
        r = c.step()
        # emptiness is blocked; consolidation may still remove an underutilized node
        assert r.command is not None and r.command.reason == "Underutilized"
        assert "empty" not in names(r.command)

    def test_weekend_only_budget_blocks_weekday_consolidation(self):
        c = Cluster(now=MONDAY_10AM)
        c.nodepool(budgets=[{"nodes": "100%"}, {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}])
        c.node(itype="std-2")
        assert c.step().command is None
        c.now = SATURDAY_10AM
        assert c.step().command is not None


# =====================================================================================
# Candidates
# =====================================================================================


def blocked_messages(c: Cluster, klass: str = "graceful") -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    raw: list = []
    build_candidates(c.snapshot(), klass, raw)
    for node, reason, msg in raw:
        assert reason == "DisruptionBlocked"
        out.setdefault(node, []).append(msg)
    return out


def candidate_names(c: Cluster, klass: str = "graceful") -> list[str]:
    return sorted(x.name for x in build_candidates(c.snapshot(), klass, []))


class TestNodeLevelBlocks:
    @pytest.mark.parametrize("state, message", [
        ({"initialized": False}, "Node isn't initialized"),
        ({"nominated": True}, "Node is nominated for a pending pod"),
        ({"annotations": {DND: "true"}}, 'Disruption is blocked through the "karpenter.sh/do-not-disrupt" annotation'),
    ])
    def test_blocked_nodes_say_why(self, state, message):
        c = Cluster()
        c.nodepool()
        c.node("n", itype="std-2", **state)
        assert candidate_names(c) == []
        assert blocked_messages(c) == {"n": [message]}
        r = c.step()
        assert r.command is None
        assert message in events_for(r, "n", "DisruptionBlocked")

    def test_unregistered_nodeclaim(self):
        c = Cluster()
        c.nodepool()
        c.node("n", itype="std-2", registered=False, initialized=False, ready=False)
        assert blocked_messages(c) == {"n": ["Nodeclaim does not have an associated node"]}

    def test_unmanaged_nodes_are_silently_ignored(self):
        c = Cluster()
        c.nodepool()
        c.node("byo", itype="std-2", managed=False)
        assert candidate_names(c) == []
        r = c.step()
        assert r.command is None and r.events == []

    def test_marked_nodes_are_not_candidates(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}])
        c.node("going", itype="std-2", marked_for_deletion=True)
        c.node("stays", itype="std-2")
        r = c.step()
        assert names(r.command) == ["stays"]

    def test_a_node_being_deleted_reports_it(self):
        c = Cluster()
        c.nodepool()
        c.node("n", itype="std-2", marked_for_deletion=True, terminating=True)
        assert blocked_messages(c) == {"n": ["Node is deleting or marked for deletion"]}

    def test_node_do_not_disrupt_must_be_exactly_true(self):
        # durations are a pod feature; on a node only "true" counts
        c = Cluster()
        c.nodepool()
        c.node("n", itype="std-2", annotations={DND: "1h"})
        assert candidate_names(c) == ["n"]

    def test_node_without_nodepool_label(self):
        c = Cluster()
        c.nodepool()
        c.node("n", itype="std-2", nodepool=None)
        assert blocked_messages(c) == {"n": ["Node doesn't have required label (label=karpenter.sh/nodepool)"]}

    def test_node_of_a_missing_nodepool(self):
        c = Cluster()
        c.nodepool()
        c.node("n", itype="std-2", nodepool="ghost")
        assert blocked_messages(c) == {"n": ["NodePool not found (NodePool=ghost)"]}


class TestPodLevelBlocks:
    def test_do_not_disrupt_pod_blocks_its_node(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}])
        c.node("n", itype="std-8", pods=[dpod("job", do_not_disrupt="true")])
        c.node("m", itype="std-8", pods=[dpod(cpu="1")])
        assert blocked_messages(c) == {"n": ['Pod has "karpenter.sh/do-not-disrupt" annotation (Pod=default/job)']}
        r = c.step()
        assert "n" not in names(r.command)

    @pytest.mark.parametrize("age, blocks", [(10 * 60, True), (2 * HOUR, False)])
    def test_do_not_disrupt_duration_counts_from_pod_start(self, age, blocks):
        c = Cluster()
        c.nodepool()
        c.node("n", itype="std-2", pods=[dpod("p", do_not_disrupt="1h", start_time=MONDAY_10AM - age)])
        assert (candidate_names(c) == []) is blocks

    def test_do_not_disrupt_duration_without_start_time_blocks(self):
        c = Cluster()
        c.nodepool()
        c.node("n", itype="std-2", pods=[dpod("p", do_not_disrupt="30m", start_time=None)])
        assert candidate_names(c) == []

    @pytest.mark.parametrize("value", ["banana", "0s", "-5m", "false"])
    def test_invalid_do_not_disrupt_values_are_ignored(self, value):
        c = Cluster()
        c.nodepool()
        c.node("n", itype="std-2", pods=[dpod("p", do_not_disrupt=value, start_time=MONDAY_10AM)])
        assert candidate_names(c) == ["n"]

    def test_finished_pods_do_not_block(self):
        c = Cluster()
        c.nodepool()
        c.node("n", itype="std-2", pods=[dpod("done", do_not_disrupt="true", phase="Succeeded"),
                                        dpod("going", do_not_disrupt="true", terminating=True)])
        assert candidate_names(c) == ["n"]

    def test_daemonset_and_mirror_pods_can_block_with_the_annotation(self):
        c = Cluster()
        c.nodepool()
        c.node("a", itype="std-2", pods=[dpod("ds", owner="DaemonSet", do_not_disrupt="true")])
        c.node("b", itype="std-2", pods=[dpod("static", owner="Node", do_not_disrupt="true")])
        assert candidate_names(c) == []

    def test_pdb_with_no_disruptions_allowed_blocks(self):
        c = Cluster()
        c.nodepool()
        c.pdb("web", {"app": "web"}, allowed=0)
        c.node("n", itype="std-2", pods=[dpod("w", labels={"app": "web"})])
        c.node("m", itype="std-2", pods=[dpod("x", labels={"app": "other"})])
        assert blocked_messages(c) == {"n": ["Pdb prevents pod evictions (PodDisruptionBudget=[default/web])"]}

    def test_pdb_with_disruptions_left_does_not_block(self):
        c = Cluster()
        c.nodepool()
        c.pdb("web", {"app": "web"}, allowed=1)
        c.node("n", itype="std-2", pods=[dpod("w", labels={"app": "web"})])
        assert candidate_names(c) == ["n"]

    def test_pdb_in_another_namespace_does_not_apply(self):
        c = Cluster()
        c.nodepool()
        c.pdb("web", {"app": "web"}, allowed=0, namespace="prod")
        c.node("n", itype="std-2", pods=[dpod("w", labels={"app": "web"}, namespace="dev")])
        assert candidate_names(c) == ["n"]

    def test_a_pod_under_two_pdbs_blocks_even_if_both_allow(self):
        c = Cluster()
        c.nodepool()
        c.pdb("a", {"app": "web"}, allowed=5)
        c.pdb("b", {"tier": "front"}, allowed=5)
        c.node("n", itype="std-2", pods=[dpod("w", labels={"app": "web", "tier": "front"})])
        assert blocked_messages(c) == {
            "n": ["Eviction does not support multiple PDBs (PodDisruptionBudget(s)=[default/a default/b])"]}

    @pytest.mark.parametrize("ready, blocks", [(False, False), (True, True)])
    def test_always_allow_lets_unhealthy_pods_go(self, ready, blocks):
        c = Cluster()
        c.nodepool()
        c.pdb("web", {"app": "web"}, allowed=0, always_allow=True)
        c.node("n", itype="std-2", pods=[dpod("w", labels={"app": "web"}, ready=ready)])
        assert (candidate_names(c) == []) is blocks

    def test_pods_that_tolerate_the_disrupted_taint_are_not_evicted_so_do_not_block(self):
        c = Cluster()
        c.nodepool()
        c.pdb("agent", {"app": "agent"}, allowed=0)
        c.node("n", itype="std-2", pods=[dpod("a", owner="DaemonSet", labels={"app": "agent"},
                                             tolerations=[toleration(operator="Exists")])])
        assert candidate_names(c) == ["n"]

    def test_daemonset_pod_without_the_toleration_is_subject_to_its_pdb(self):
        c = Cluster()
        c.nodepool()
        c.pdb("agent", {"app": "agent"}, allowed=0)
        c.node("n", itype="std-2", pods=[dpod("a", owner="DaemonSet", labels={"app": "agent"})])
        assert candidate_names(c) == []

    def test_drift_tolerates_pod_blocks_when_the_nodeclaim_has_a_grace_period(self):
        c = Cluster()
        c.nodepool()
        c.pdb("web", {"app": "web"}, allowed=0)
        c.node("tgp", itype="std-2", pods=[dpod("w", labels={"app": "web"})], termination_grace_period=HOUR)
        c.node("no-tgp", itype="std-2", pods=[dpod("j", do_not_disrupt="true")])
        assert candidate_names(c, "eventual") == ["tgp"]
        assert candidate_names(c, "graceful") == []

    def test_grace_period_does_not_excuse_node_level_blocks(self):
        c = Cluster()
        c.nodepool()
        c.node("n", itype="std-2", termination_grace_period=HOUR, annotations={DND: "true"})
        assert candidate_names(c, "eventual") == []


class TestCurrentlyReschedulable:
    """Which pods the simulation tries to find room for."""

    def test_blocked_pods_are_left_out(self):
        c = Cluster()
        c.pdb("frozen", {"app": "frozen"}, allowed=0, fully_blocking=True)
        c.pdb("busy", {"app": "busy"}, allowed=0, fully_blocking=False)
        snap = c.snapshot()
        frozen = dpod(labels={"app": "frozen"})
        busy = dpod(labels={"app": "busy"})
        dnd = dpod(do_not_disrupt="true")
        plain = dpod()
        ds = dpod(owner="DaemonSet")
        mirror = dpod(owner="Node")
        done = dpod(phase="Failed")
        sts_going = dpod(owner="StatefulSet", terminating=True)
        rs_going = dpod(terminating=True)
        got = {name: currently_reschedulable(p, snap.pdbs, snap.now) for name, p in [
            ("frozen", frozen), ("busy", busy), ("dnd", dnd), ("plain", plain), ("ds", ds), ("mirror", mirror),
            ("done", done), ("sts_going", sts_going), ("rs_going", rs_going)]}
        # only a *fully* blocking PDB (maxUnavailable 0 / minAvailable 100%) keeps a pod out
        assert got == {"frozen": False, "busy": True, "dnd": False, "plain": True, "ds": False, "mirror": False,
                       "done": False, "sts_going": True, "rs_going": False}

    def test_pdb_blocks_reports_which_budget(self):
        c = Cluster()
        p = c.pdb("web", {"app": "web"}, allowed=0)
        assert pdb_blocks(dpod(labels={"app": "web"}), [p], MONDAY_10AM) == \
            "pdb prevents pod evictions (PodDisruptionBudget=[default/web])"
        assert pdb_blocks(dpod(labels={"app": "db"}), [p], MONDAY_10AM) is None


class TestOrdering:
    def test_emptiness_prefers_the_dearest_node_when_the_budget_is_tight(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "1"}])
        c.node("small", itype="std-2")
        c.node("big", itype="std-8")
        c.node("mid", itype="std-4")
        assert names(c.step().command) == ["big"]

    def test_consolidation_prefers_more_savings_per_evicted_pod(self):
        # same price: the node with fewer pods to move goes first
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "1"}])
        c.node("crowded", itype="std-8", pods=[dpod(cpu="1") for _ in range(3)])
        c.node("sparse", itype="std-8", pods=[dpod(cpu="1")])
        assert names(c.step().command) == ["sparse"]

    def test_high_priority_pods_make_a_node_costlier_to_disrupt(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "1"}])
        c.node("crowded", itype="std-8", pods=[dpod(cpu="1") for _ in range(3)])
        c.node("precious", itype="std-8", pods=[dpod(cpu="1", priority=2**30)])  # eviction cost clamps at 10
        assert names(c.step().command) == ["crowded"]

    def test_deletion_cost_annotation_counts_too(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "1"}])
        c.node("crowded", itype="std-8", pods=[dpod(cpu="1") for _ in range(3)])
        c.node("precious", itype="std-8", pods=[dpod(cpu="1", annotations={
            "controller.kubernetes.io/pod-deletion-cost": str(2**30)})])
        assert names(c.step().command) == ["crowded"]

    def test_pods_free_to_evict_leave_a_node_empty(self):
        # a negative deletion cost makes a pod free to move, so its node counts as empty
        c = Cluster()
        c.nodepool()
        c.node("n", itype="std-2", pods=[dpod(cpu="1", annotations={
            "controller.kubernetes.io/pod-deletion-cost": str(-(2**31))})])
        c.node("other", itype="std-4")
        [cand] = [x for x in build_candidates(c.snapshot(), "graceful", []) if x.name == "n"]
        assert cand.reschedule_cost == 1.0 and cand.empty


class TestEmptyMeansNothingToReschedule:
    @pytest.mark.parametrize("pod_kw", [
        {"owner": "DaemonSet"},
        {"owner": "Node"},  # mirror (static) pod
        {"phase": "Succeeded"},
        {"phase": "Failed"},
        {"terminating": True},
    ])
    def test_pods_that_would_not_move_leave_the_node_empty(self, pod_kw):
        c = Cluster()
        c.nodepool()
        c.node("n", itype="std-2", pods=[dpod(**pod_kw)])
        r = c.step()
        assert r.command.method == "emptiness" and names(r.command) == ["n"]

    def test_a_terminating_statefulset_pod_still_needs_a_home(self):
        c = Cluster()
        c.nodepool()
        c.node("n", itype="std-2", pods=[dpod(owner="StatefulSet", terminating=True)])
        [cand] = build_candidates(c.snapshot(), "graceful", [])
        assert not cand.empty


# =====================================================================================
# Emptiness
# =====================================================================================


class TestEmptiness:
    def test_empty_nodes_go_in_one_command(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}])
        c.node("e1", itype="std-2")
        c.node("e2", itype="std-4")
        c.node("busy", itype="std-4", pods=[dpod(cpu="3")])
        r = c.step()
        assert r.command.method == "emptiness" and r.command.reason == "Empty"
        assert names(r.command) == ["e1", "e2"]
        assert r.command.replacements == []

    def test_one_command_may_span_nodepools(self):
        c = Cluster()
        c.nodepool("a", budgets=[{"nodes": "1"}])
        c.nodepool("b", budgets=[{"nodes": "1"}])
        c.node("a1", nodepool="a", itype="std-2")
        c.node("a2", nodepool="a", itype="std-2")
        c.node("b1", nodepool="b", itype="std-2")
        cmd = c.step().command
        assert len(cmd.candidates) == 2
        assert sorted(x.node.nodepool for x in cmd.candidates) == ["a", "b"]

    def test_consolidation_disabled(self):
        c = Cluster()
        c.nodepool(consolidate_after="Never")
        c.node("n", itype="std-2")
        r = c.step()
        assert r.command is None
        assert 'NodePool "default" has consolidation disabled' in events_for(r, "n", "Unconsolidatable")

    def test_not_yet_consolidatable(self):
        c = Cluster()
        c.nodepool(consolidate_after="10m")
        c.node("n", itype="std-2", consolidatable=False)
        r = c.step()
        assert r.command is None
        assert r.events == []

    def test_when_empty_policy_still_deletes_empty_nodes(self):
        c = Cluster()
        c.nodepool(policy="WhenEmpty")
        c.node("n", itype="std-2")
        assert names(c.step().command) == ["n"]

    def test_emptiness_wins_over_consolidation(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}])
        c.node("empty", itype="std-2")
        c.node("under", itype="std-8", pods=[dpod(cpu="1")])
        r = c.step()
        assert r.command.method == "emptiness" and names(r.command) == ["empty"]


# =====================================================================================
# Consolidation
# =====================================================================================


def assert_strictly_cheaper(cmd) -> None:
    price = sum(x.price for x in cmd.candidates)
    [rep] = cmd.replacements
    assert rep.instance_types
    for it in rep.instance_types:
        assert worst_launch_price(it, rep.requirements) < price, it.name


class TestSingleNodeConsolidation:
    def test_delete_when_the_pods_fit_elsewhere(self):
        c = Cluster()
        c.nodepool()
        c.node("a", itype="std-4", pods=[dpod("p", cpu="1")])
        c.node("b", itype="std-4", pods=[dpod(cpu="2")])
        r = c.step()
        cmd = r.command
        assert cmd.method == "single" and cmd.reason == "Underutilized"
        assert cmd.decision == "delete" and names(cmd) == ["a"]
        assert {k: [p.key for p in v] for k, v in cmd.results.existing.items()} == {"b": [cmd.candidates[0].node.pods[0].key]}

    def test_replace_with_one_cheaper_node(self):
        c = Cluster()
        c.nodepool(requirements=ON_DEMAND_ONLY)
        c.node("a", itype="std-8", pods=[dpod(cpu="1")])
        cmd = c.step().command
        assert cmd.decision == "replace" and len(cmd.replacements) == 1
        assert replacement_types(cmd) == ["std-1", "std-2", "std-4"]  # std-8 is not cheaper than itself
        assert_strictly_cheaper(cmd)
        assert cmd.savings == pytest.approx(0.56 - 0.07)

    def test_never_replace_with_an_equally_priced_node(self):
        c = Cluster()
        c.nodepool(requirements=ON_DEMAND_ONLY)
        c.node("a", itype="std-1", pods=[dpod(cpu="1")])
        r = c.step()
        assert r.command is None
        assert events_for(r, "a", "Unconsolidatable") == ["Can't replace with a cheaper node"]

    def test_never_replace_with_a_dearer_node(self):
        # a discounted node is cheaper than anything the NodePool can launch for its pods
        c = Cluster()
        c.nodepool(requirements=ON_DEMAND_ONLY)
        c.node("a", itype="std-4", pods=[dpod(cpu="3")], price=0.2)
        r = c.step()
        assert r.command is None
        assert events_for(r, "a", "Unconsolidatable") == ["Can't replace with a cheaper node"]

    def test_needing_two_new_nodes_is_not_consolidation(self):
        c = Cluster()
        c.nodepool(requirements=ON_DEMAND_ONLY + [expr(LABEL_INSTANCE_TYPE, "In", "std-1", "std-2", "std-4")])
        c.node("a", itype="std-8", pods=[dpod(cpu="3"), dpod(cpu="3")])
        r = c.step()
        assert r.command is None
        assert events_for(r, "a", "Unconsolidatable") == ["Can't remove without creating 2 candidates"]

    def test_when_empty_policy_leaves_busy_nodes(self):
        c = Cluster()
        c.nodepool(policy="WhenEmpty")
        c.node("a", itype="std-8", pods=[dpod(cpu="1")])
        c.node("b", itype="std-8", pods=[dpod(cpu="1")])
        r = c.step()
        assert r.command is None
        assert 'NodePool "default" has consolidation policy WhenEmpty, but node is not empty' in events_for(
            r, "a", "Unconsolidatable")

    def test_consolidation_disabled_for_busy_nodes(self):
        c = Cluster()
        c.nodepool(consolidate_after="Never")
        c.node("a", itype="std-8", pods=[dpod(cpu="1")])
        r = c.step()
        assert r.command is None
        assert 'NodePool "default" has consolidation disabled' in events_for(r, "a", "Unconsolidatable")

    def test_not_consolidatable_yet(self):
        c = Cluster()
        c.nodepool(consolidate_after="1h")
        c.node("a", itype="std-8", pods=[dpod(cpu="1")], consolidatable=False, under_consolidate_after=True)
        assert c.step().command is None

    def test_node_with_unknown_instance_type(self):
        c = Cluster()
        c.nodepool()
        n = c.node("a", itype="std-8", pods=[dpod(cpu="1")])
        n.instance_type = None
        r = c.step()
        assert r.command is None
        assert 'Instance Type "std-8" not found' in events_for(r, "a", "Unconsolidatable")

    def test_on_demand_replaced_by_spot_when_both_are_allowed(self):
        c = Cluster()
        c.nodepool()
        c.node("a", itype="std-8", pods=[dpod(cpu="1")])
        cmd = c.step().command
        [rep] = cmd.replacements
        assert rep.requirements.get(LABEL_CAPACITY_TYPE).values == {CAPACITY_SPOT}
        assert_strictly_cheaper(cmd)

    def test_spot_candidate_can_be_replaced_by_cheaper_on_demand(self):
        c = Cluster()
        c.nodepool(requirements=ON_DEMAND_ONLY)
        c.node("a", itype="std-8", capacity_type=CAPACITY_SPOT, pods=[dpod(cpu="1")])
        cmd = c.step().command
        assert cmd.decision == "replace"
        assert cmd.replacements[0].requirements.get(LABEL_CAPACITY_TYPE).values == {CAPACITY_ON_DEMAND}
        assert_strictly_cheaper(cmd)

    def test_pods_that_cannot_move_block(self):
        # only the candidate carries the label the pod selects
        c = Cluster()
        c.nodepool()
        c.node("a", itype="std-8", labels={"disk": "local-ssd"}, pods=[dpod("db", cpu="1", node_selector={"disk": "local-ssd"})])
        c.node("b", itype="std-8", pods=[dpod(cpu="1")])
        r = c.step()
        assert "a" not in names(r.command)
        msgs = events_for(r, "a", "Unconsolidatable")
        assert msgs and msgs[0].startswith("Not all pods would schedule, default/db => ")

    def test_uninitialized_nodes_are_not_destinations(self):
        c = Cluster()
        c.nodepool(requirements=ON_DEMAND_ONLY)
        c.node("a", itype="std-1", pods=[dpod("p", cpu="1")])
        c.node("fresh", itype="std-4", initialized=False, consolidatable=False)
        r = c.step()
        assert r.command is None
        assert any("uninitialized" in m for m in events_for(r, "a", "Unconsolidatable"))
        # once it is initialized, the pod can move there
        c.nodes[1].initialized = True
        c.nodes[1].existing.initialized = True
        c.nodes[1].labels["karpenter.sh/initialized"] = "true"
        assert names(c.step().command) == ["a"]

    def test_nodes_inside_consolidate_after_take_no_consolidated_pods(self):
        c = Cluster()
        c.nodepool(requirements=ON_DEMAND_ONLY, consolidate_after="1h")
        c.node("a", itype="std-1", pods=[dpod(cpu="1")])
        c.node("recent", itype="std-4", consolidatable=False, under_consolidate_after=True, pods=[dpod(cpu="1")])
        r = c.step()
        assert r.command is None

    def test_nodes_inside_consolidate_after_still_take_pending_pods(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}], consolidate_after="1h")
        c.node("recent", itype="std-4", pods=[dpod(cpu="1")], consolidatable=False, under_consolidate_after=True)
        c.node("b", itype="std-4", pods=[dpod(cpu="3")], consolidatable=False)
        c.node("a", itype="std-2", pods=[dpod(cpu="1")])
        c.pending.append(dpod("waiting", cpu="2").info)
        cmd = c.step().command
        # the pending pod fits on "recent" and a's pod on "b": a can simply be deleted
        assert cmd is not None and cmd.decision == "delete" and names(cmd) == ["a"]

    @pytest.mark.parametrize("room_type, deleted", [("std-4", False), ("std-8", True)])
    def test_pods_of_deleting_nodes_claim_room_first(self, room_type, deleted):
        # "room" holds a 1 vCPU pod; the 3 vCPU pod of a node being deleted needs a home too
        c = Cluster()
        c.nodepool(requirements=ON_DEMAND_ONLY, budgets=[{"nodes": "100%"}])
        c.node("doomed", itype="std-4", pods=[dpod(cpu="3")], marked_for_deletion=True)
        c.node("room", itype=room_type, pods=[dpod(cpu="1")], consolidatable=False)
        c.node("a", itype="std-1", pods=[dpod(cpu="1")])
        cmd = c.step().command
        assert (names(cmd) == ["a"] and cmd.decision == "delete") is deleted

    def test_pdb_blocked_pods_keep_their_node(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}])
        c.pdb("db", {"app": "db"}, allowed=0)
        c.node("a", itype="std-8", pods=[dpod(cpu="1", labels={"app": "db"})])
        c.node("b", itype="std-8", pods=[dpod(cpu="1")])
        r = c.step()
        assert names(r.command) == ["b"]


def spot_catalog(n: int = 20) -> list:
    """n two-vCPU types priced 0.10, 0.11, ... (spot 30% off), cheapest first."""
    return [instance_type(f"c-{i:02d}", cpu=2, memory_gib=4, price=round(0.10 + 0.01 * i, 4)) for i in range(n)]


class TestSpotToSpot:
    def test_disabled_by_default(self):
        c = Cluster(types=spot_catalog())
        c.nodepool()
        c.node("a", itype="c-19", capacity_type=CAPACITY_SPOT, pods=[dpod(cpu="1")])
        r = c.step()
        assert r.command is None
        assert events_for(r, "a", "Unconsolidatable") == [
            "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"]

    def test_deleting_a_spot_node_needs_no_feature_gate(self):
        c = Cluster(types=spot_catalog())
        c.nodepool()
        c.node("a", itype="c-19", capacity_type=CAPACITY_SPOT, pods=[dpod(cpu="1")])
        c.node("b", itype="c-19", capacity_type=CAPACITY_SPOT, pods=[dpod(cpu="0.5")])
        assert c.step().command.decision == "delete"

    def test_single_node_needs_fifteen_cheaper_types(self):
        c = Cluster(types=spot_catalog(), feature_gates={"SpotToSpotConsolidation": True})
        c.nodepool()
        c.node("a", itype="c-14", capacity_type=CAPACITY_SPOT, pods=[dpod(cpu="1")])
        r = c.step()
        assert r.command is None
        assert events_for(r, "a", "Unconsolidatable") == [
            "SpotToSpotConsolidation requires 15 cheaper instance type options than the current candidate to "
            "consolidate, got 14"]

    def test_single_node_with_enough_options_keeps_the_fifteen_cheapest(self):
        c = Cluster(types=spot_catalog(), feature_gates={"SpotToSpotConsolidation": True})
        c.nodepool()
        c.node("a", itype="c-19", capacity_type=CAPACITY_SPOT, pods=[dpod(cpu="1")])
        cmd = c.step().command
        assert cmd.decision == "replace"
        assert replacement_types(cmd) == [f"c-{i:02d}" for i in range(15)]
        assert cmd.replacements[0].requirements.get(LABEL_CAPACITY_TYPE).values == {CAPACITY_SPOT}
        assert_strictly_cheaper(cmd)

    def test_spot_candidate_stays_on_spot_even_if_nodepool_allows_on_demand(self):
        c = Cluster(types=spot_catalog(), feature_gates={"SpotToSpotConsolidation": True})
        c.nodepool(requirements=[expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_SPOT, CAPACITY_ON_DEMAND)])
        c.node("a", itype="c-19", capacity_type=CAPACITY_SPOT, pods=[dpod(cpu="1")])
        cmd = c.step().command
        assert cmd.replacements[0].requirements.get(LABEL_CAPACITY_TYPE).values == {CAPACITY_SPOT}

    def test_spot_nodes_merge_into_one_new_spot_node(self):
        # as upstream: a multi-node merge of spot nodes may launch one cheaper spot node, and needs no 15
        # spare types (that rule guards single-node spot replacement only)
        c = Cluster(feature_gates={"SpotToSpotConsolidation": True})
        c.nodepool(budgets=[{"nodes": "100%"}], requirements=[expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_SPOT)])
        for i in range(4):
            c.node(f"s{i}", itype="std-2", capacity_type=CAPACITY_SPOT, pods=[dpod(cpu="0.6")])
        cmd = c.step().command
        assert cmd.method == "multi" and names(cmd) == ["s0", "s1", "s2", "s3"]
        assert len(cmd.replacements) == 1
        assert cmd.replacements[0].requirements.get(LABEL_CAPACITY_TYPE).values == {CAPACITY_SPOT}
        assert_strictly_cheaper(cmd)


class TestMultiNodeConsolidation:
    def test_several_underutilized_nodes_merge_into_one_cheaper_node(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}], requirements=ON_DEMAND_ONLY)
        for i in range(4):
            c.node(f"n{i}", itype="std-2", pods=[dpod(cpu="0.6")])
        cmd = c.step().command
        assert cmd.method == "multi"
        assert names(cmd) == ["n0", "n1", "n2", "n3"]
        assert replacement_types(cmd)[0] == "std-4"
        assert_strictly_cheaper(cmd)

    def test_deletes_several_nodes_when_the_rest_can_hold_their_pods(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}], requirements=ON_DEMAND_ONLY)
        for i in range(3):
            c.node(f"n{i}", itype="std-4", pods=[dpod(cpu="1")])
        cmd = c.step().command
        assert cmd.method == "multi" and cmd.decision == "delete"
        assert len(cmd.candidates) == 2

    def test_never_replaces_several_nodes_by_one_of_a_type_being_removed(self):
        # all three together would fit one std-4 (0.28 < 0.63), but a std-4 is being removed: keeping it and
        # deleting the rest is the same outcome with less churn. So the biggest valid batch is the two std-4s -> std-2
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}], requirements=ON_DEMAND_ONLY)
        c.node("big1", itype="std-4", pods=[dpod(cpu="1")])
        c.node("big2", itype="std-4", pods=[dpod(cpu="1")])
        c.node("small", itype="std-1", pods=[dpod(cpu="0.2")])
        cmd = c.step().command
        assert cmd.method == "multi"
        assert names(cmd) == ["big1", "big2"]
        assert replacement_types(cmd) == ["std-2"]

    def test_a_type_being_removed_may_still_be_beaten_by_a_cheaper_one(self):
        # with a std-3 on offer, the three nodes merge into a std-3, cheaper than the std-4 being removed
        c = Cluster(types=ladder((1, 2, 3, 4, 8)))
        c.nodepool(budgets=[{"nodes": "100%"}], requirements=ON_DEMAND_ONLY)
        c.node("big1", itype="std-4", pods=[dpod(cpu="1")])
        c.node("big2", itype="std-4", pods=[dpod(cpu="1")])
        c.node("small", itype="std-1", pods=[dpod(cpu="0.2")])
        cmd = c.step().command
        assert names(cmd) == ["big1", "big2", "small"]
        assert replacement_types(cmd) == ["std-3"]
        assert_strictly_cheaper(cmd)

    def test_multi_node_respects_the_budget(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "2"}], requirements=ON_DEMAND_ONLY)
        for i in range(6):
            c.node(f"n{i}", itype="std-4", pods=[dpod(cpu="0.5")])
        cmd = c.step().command
        assert len(cmd.candidates) <= 2

    def test_multi_node_skips_blocked_nodes(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}], requirements=ON_DEMAND_ONLY)
        c.node("pinned", itype="std-2", pods=[dpod(cpu="0.6", do_not_disrupt="true")])
        for i in range(4):
            c.node(f"n{i}", itype="std-2", pods=[dpod(cpu="0.6")])
        cmd = c.step().command
        assert "pinned" not in names(cmd)


class LimitedCluster(Cluster):
    """A Cluster whose NodePools' limits are charged with their nodes' capacity, as the controller does
    (nodes marked for deletion or terminating excepted)."""

    def snapshot(self):
        snap = super().snapshot()
        usage: dict[str, dict[str, int]] = {}
        for n in self.nodes:
            if n.nodepool is None or n.marked_for_deletion or n.terminating:
                continue
            u = usage.setdefault(n.nodepool, {"nodes": 0})
            for k, v in n.instance_type.capacity.items():
                u[k] = u.get(k, 0) + v
            u["nodes"] += 1
        templates = []
        for t in snap.templates:
            limits = res.parse_resource_list(self.nodepools[t.nodepool]["spec"].get("limits"))
            if limits:
                u = usage.get(t.nodepool, {})
                t = replace(t, remaining={k: v - u.get(k, 0) for k, v in limits.items()})
            templates.append(t)
        snap.templates = templates
        return snap


class TestLimitsDuringConsolidation:
    """Upstream's SimulateScheduling builds its scheduler from the nodes that stay: a NodePool's remaining
    limits count the candidates' capacity as freed, and a replacement beyond what remains is not computed."""

    def _full(self, c, name: str):
        # full, and kept (do-not-disrupt): only the other node is a candidate
        return c.node(name, itype="std-4", pods=[dpod(cpu="1", do_not_disrupt="true") for _ in range(4)])

    def test_a_nodepool_at_its_limit_can_still_replace_a_node_by_a_cheaper_one(self):
        c = LimitedCluster()
        c.nodepool(requirements=ON_DEMAND_ONLY, limits={"cpu": "12"})
        c.node("a", itype="std-8", pods=[dpod(cpu="3")])
        self._full(c, "b")
        cmd = c.step().command
        assert cmd is not None and cmd.decision == "replace" and names(cmd) == ["a"]
        assert replacement_types(cmd) == ["std-4"]  # 8 of the 12 vCPU are the candidate's: 4 fit
        assert_strictly_cheaper(cmd)

    def test_a_replacement_beyond_the_remaining_limit_is_not_launched(self):
        # the limit was lowered below what runs: without the candidate 2 vCPU remain, the pods need 3
        c = LimitedCluster()
        c.nodepool(requirements=ON_DEMAND_ONLY, limits={"cpu": "6"})
        c.node("a", itype="std-8", pods=[dpod(cpu="3")])
        self._full(c, "b")
        r = c.step()
        assert r.command is None
        assert events_for(r, "a", "Unconsolidatable")

    def test_several_candidates_free_their_capacity_together(self):
        c = LimitedCluster()
        c.nodepool(budgets=[{"nodes": "100%"}], requirements=ON_DEMAND_ONLY, limits={"cpu": "16"})
        c.node("a", itype="std-8", pods=[dpod(cpu="1")])
        c.node("b", itype="std-8", pods=[dpod(cpu="1")])
        cmd = c.step().command
        assert cmd.method == "multi" and names(cmd) == ["a", "b"]
        assert cmd.decision == "replace" and replacement_types(cmd)[0] == "std-2"

    def test_a_node_count_limit_counts_the_candidate_as_gone(self):
        c = LimitedCluster()
        c.nodepool(requirements=ON_DEMAND_ONLY, limits={"nodes": "2"})
        c.node("a", itype="std-8", pods=[dpod(cpu="3")])
        self._full(c, "b")
        cmd = c.step().command
        assert cmd is not None and cmd.decision == "replace" and names(cmd) == ["a"]

    def test_other_nodepools_limits_are_untouched(self):
        c = LimitedCluster()
        c.nodepool("other", requirements=ON_DEMAND_ONLY, limits={"cpu": "0"}, weight=100)
        c.nodepool(requirements=ON_DEMAND_ONLY, limits={"cpu": "12"})
        c.node("a", itype="std-8", pods=[dpod(cpu="3")])
        self._full(c, "b")
        cmd = c.step().command
        assert cmd.decision == "replace" and cmd.replacements[0].template.nodepool == "default"


class TestNothingToDoIsRemembered:
    """A consolidation method that found nothing is not re-run until the cluster changes (or 5 minutes pass)."""

    def stuck_cluster(self) -> Cluster:
        c = Cluster()
        c.nodepool(requirements=ON_DEMAND_ONLY)
        c.node("a", itype="std-1", pods=[dpod(cpu="1")])  # nothing cheaper exists
        return c

    def test_same_state_is_not_reconsidered(self):
        c = self.stuck_cluster()
        engine = DisruptionEngine()
        first = engine.step(c.snapshot(), version=7)
        assert first.command is None and events_for(first, "a", "Unconsolidatable")
        again = engine.step(c.snapshot(), version=7)
        assert again.command is None and again.events == []

    def test_a_changed_cluster_is_reconsidered(self):
        c = self.stuck_cluster()
        engine = DisruptionEngine()
        engine.step(c.snapshot(), version=7)
        c.node("room", itype="std-4", consolidatable=False)
        assert names(engine.step(c.snapshot(), version=8).command) == ["a"]

    def test_reconsidered_after_five_minutes_anyway(self):
        c = self.stuck_cluster()
        engine = DisruptionEngine()
        engine.step(c.snapshot(), version=7)
        c.now += 301
        assert events_for(engine.step(c.snapshot(), version=7), "a", "Unconsolidatable")

    def test_budget_blocked_methods_are_not_remembered(self):
        # skipping a candidate only for budget reasons is not "nothing to do"
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "0"}])
        c.node("e", itype="std-2")
        engine = DisruptionEngine()
        assert engine.step(c.snapshot(), version=3).command is None
        c.nodepools["default"]["spec"]["disruption"]["budgets"] = [{"nodes": "1"}]
        assert names(engine.step(c.snapshot(), version=3).command) == ["e"]

    def test_drift_is_never_skipped(self):
        c = Cluster()
        c.nodepool()
        drifted_node(c, "d", MONDAY_10AM - HOUR, pods=[dpod(cpu="1")], annotations={DND: "true"})
        engine = DisruptionEngine()
        assert engine.step(c.snapshot(), version=1).command is None
        c.nodes[0].annotations = {}
        assert engine.step(c.snapshot(), version=1).command.method == "drift"


# =====================================================================================
# Validation (the re-check after the 15 s wait)
# =====================================================================================


class TestValidation:
    def delete_setup(self) -> tuple[Cluster, DisruptionEngine, object]:
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "1"}])
        c.node("a", itype="std-4", pods=[dpod(cpu="1")])
        c.node("b", itype="std-4", pods=[dpod(cpu="3")])
        c.node("c", itype="std-4", pods=[dpod(cpu="3")])
        engine = DisruptionEngine()
        cmd = engine.step(c.snapshot()).command
        assert cmd is not None and cmd.method == "single" and cmd.decision == "delete"
        return c, engine, cmd

    def test_nothing_changed_accepts(self):
        c, engine, cmd = self.delete_setup()
        got, why = engine.validate(c.snapshot(), cmd)
        assert why is None and got is cmd

    def test_a_candidate_nominated_meanwhile_rejects(self):
        c, engine, cmd = self.delete_setup()
        {x.name: x for x in c.nodes}[cmd.candidates[0].name].nominated = True
        got, why = engine.validate(c.snapshot(), cmd)
        assert got is None and why is not None

    def test_a_candidate_that_got_a_new_pod_rejects(self):
        c, engine, cmd = self.delete_setup()
        n = {x.name: x for x in c.nodes}[cmd.candidates[0].name]
        extra = dpod(cpu="2")  # no longer fits in the room left on the other nodes
        n.pods.append(extra)
        n.existing.requested = res.add(n.existing.requested, extra.info.requests)
        got, why = engine.validate(c.snapshot(), cmd)
        assert got is None and why == "scheduling"

    def test_a_candidate_no_longer_consolidatable_rejects(self):
        c, engine, cmd = self.delete_setup()
        {x.name: x for x in c.nodes}[cmd.candidates[0].name].consolidatable = False
        got, why = engine.validate(c.snapshot(), cmd)
        assert got is None and why == "churn"

    def test_budget_used_up_meanwhile_rejects(self):
        c, engine, cmd = self.delete_setup()
        other = [x for x in c.nodes if x.name != cmd.candidates[0].name][0]
        other.marked_for_deletion = True  # something else started disrupting this NodePool
        got, why = engine.validate(c.snapshot(), cmd)
        assert got is None and why == "budget"

    def test_replacement_still_needed_accepts(self):
        c = Cluster()
        c.nodepool(requirements=ON_DEMAND_ONLY)
        c.node("a", itype="std-8", pods=[dpod(cpu="1")])
        engine = DisruptionEngine()
        cmd = engine.step(c.snapshot()).command
        assert cmd.decision == "replace"
        got, why = engine.validate(c.snapshot(), cmd)
        assert why is None and got is cmd

    def test_replacement_now_too_small_rejects(self):
        c = Cluster()
        c.nodepool(requirements=ON_DEMAND_ONLY)
        n = c.node("a", itype="std-8", pods=[dpod(cpu="1")])
        engine = DisruptionEngine()
        cmd = engine.step(c.snapshot()).command
        extra = dpod(cpu="2")
        n.pods.append(extra)
        n.existing.requested = res.add(n.existing.requested, extra.info.requests)
        got, why = engine.validate(c.snapshot(), cmd)
        assert got is None and why == "scheduling"

    def test_replacement_no_longer_needed_rejects(self):
        c = Cluster()
        c.nodepool(requirements=ON_DEMAND_ONLY)
        c.node("a", itype="std-8", pods=[dpod(cpu="1")])
        engine = DisruptionEngine()
        cmd = engine.step(c.snapshot()).command
        assert cmd.decision == "replace"
        c.node("room", itype="std-4", consolidatable=False)  # a node with room joined meanwhile
        got, why = engine.validate(c.snapshot(), cmd)
        assert got is None and why == "scheduling"

    def test_emptiness_keeps_the_candidates_that_are_still_empty(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}])
        c.node("e1", itype="std-2")
        c.node("e2", itype="std-2")
        engine = DisruptionEngine()
        cmd = engine.step(c.snapshot()).command
        assert names(cmd) == ["e1", "e2"]
        c.nodes[0].pods.append(dpod(cpu="1"))
        got, why = engine.validate(c.snapshot(), cmd)
        assert why is None and names(got) == ["e2"]

    def test_emptiness_with_no_candidate_left_is_dropped(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}])
        c.node("e1", itype="std-2")
        engine = DisruptionEngine()
        cmd = engine.step(c.snapshot()).command
        c.nodes[0].pods.append(dpod(cpu="1"))
        got, why = engine.validate(c.snapshot(), cmd)
        assert got is None and why == "churn"

    def test_emptiness_trims_to_the_remaining_budget(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "2"}])
        c.node("e1", itype="std-2")
        c.node("e2", itype="std-2")
        c.node("busy", itype="std-4", pods=[dpod(cpu="1")])
        engine = DisruptionEngine()
        cmd = engine.step(c.snapshot()).command
        assert len(cmd.candidates) == 2
        c.nodes[2].marked_for_deletion = True
        got, why = engine.validate(c.snapshot(), cmd)
        assert why is None and len(got.candidates) == 1

    def test_emptiness_out_of_budget_is_a_budget_failure(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "1"}])
        c.node("e1", itype="std-2")
        c.node("busy", itype="std-4", pods=[dpod(cpu="1")])
        engine = DisruptionEngine()
        cmd = engine.step(c.snapshot()).command
        c.nodes[1].ready = False
        got, why = engine.validate(c.snapshot(), cmd)
        assert got is None and why == "budget"


# =====================================================================================
# Drift
# =====================================================================================


def np_with(**template_spec) -> dict:
    np = disruption_nodepool()
    np["spec"]["template"]["spec"].update(template_spec)
    return np


class TestNodePoolHash:
    @staticmethod
    def base() -> dict:
        return disruption_nodepool(budgets=[{"nodes": "10%"}])

    @pytest.mark.parametrize("change", [
        lambda np: np["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {}).update(team="a"),
        lambda np: np["spec"]["template"].setdefault("metadata", {}).setdefault("annotations", {}).update(x="y"),
        lambda np: np["spec"]["template"]["spec"].update(taints=[taint("dedicated", "gpu")]),
        lambda np: np["spec"]["template"]["spec"].update(startupTaints=[taint("init", effect="NoExecute")]),
        lambda np: np["spec"]["template"]["spec"]["nodeClassRef"].update(name="other"),
        lambda np: np["spec"]["template"]["spec"].update(expireAfter="24h"),
        lambda np: np["spec"]["template"]["spec"].update(terminationGracePeriod="1h"),
    ], ids=["labels", "annotations", "taints", "startupTaints", "nodeClassRef", "expireAfter", "terminationGracePeriod"])
    def test_template_fields_that_shape_a_node_change_the_hash(self, change):
        np = self.base()
        before = nodepool_hash(np)
        change(np)
        assert nodepool_hash(np) != before

    @pytest.mark.parametrize("change", [
        lambda np: np["spec"]["template"]["spec"].update(requirements=[expr(LABEL_ZONE, "In", "test-zone-2")]),
        lambda np: np["spec"]["disruption"].update(budgets=[{"nodes": "0"}]),
        lambda np: np["spec"].update(limits={"cpu": "100"}),
        lambda np: np["spec"].update(weight=50),
        lambda np: np["spec"]["disruption"].update(consolidationPolicy="WhenEmpty"),
        lambda np: np["spec"]["disruption"].update(consolidateAfter="10m"),
    ], ids=["requirements", "budgets", "limits", "weight", "policy", "consolidateAfter"])
    def test_other_fields_do_not(self, change):
        np = self.base()
        before = nodepool_hash(np)
        change(np)
        assert nodepool_hash(np) == before

    def test_taint_order_does_not_matter(self):
        a = np_with(taints=[taint("a"), taint("b")])
        b = np_with(taints=[taint("b"), taint("a")])
        assert nodepool_hash(a) == nodepool_hash(b)

    def test_equal_durations_hash_the_same(self):
        assert nodepool_hash(np_with(expireAfter="1h")) == nodepool_hash(np_with(expireAfter="60m"))
        assert nodepool_hash(np_with(terminationGracePeriod="1h")) == \
            nodepool_hash(np_with(terminationGracePeriod="60m"))

    def test_a_label_with_an_empty_value_is_still_a_change(self):
        a = disruption_nodepool(labels={"team": "a"})
        b = disruption_nodepool(labels={"team": "a", "canary": ""})
        assert nodepool_hash(a) != nodepool_hash(b)


def claim_annotations(np: dict, nodeclass: dict | None = None) -> dict:
    ann = {NODEPOOL_HASH: nodepool_hash(np), NODEPOOL_HASH_VERSION: HASH_VERSION}
    if nodeclass is not None:
        ann[NODECLASS_HASH] = nodeclass_hash(nodeclass)
    return ann


NODE_LABELS = {LABEL_INSTANCE_TYPE: "std-4", LABEL_ZONE: "test-zone-1", LABEL_CAPACITY_TYPE: CAPACITY_ON_DEMAND,
               "kubernetes.io/arch": "amd64", "karpenter.sh/nodepool": "default"}


class TestDriftReason:
    def test_unchanged_nodepool_is_not_drifted(self):
        np = disruption_nodepool()
        assert drift_reason(np, None, claim_annotations(np), NODE_LABELS) is None

    def test_changed_template_drifts(self):
        np = disruption_nodepool()
        ann = claim_annotations(np)
        np["spec"]["template"]["spec"]["taints"] = [taint("dedicated", "x")]
        assert drift_reason(np, None, ann, NODE_LABELS) == "NodePoolDrifted"

    def test_other_hash_version_is_not_compared(self):
        np = disruption_nodepool()
        ann = {NODEPOOL_HASH: "something-old", NODEPOOL_HASH_VERSION: "v2"}
        assert drift_reason(np, None, ann, NODE_LABELS) is None

    def test_requirement_no_longer_satisfied_drifts(self):
        np = disruption_nodepool(requirements=[expr("kubernetes.io/arch", "In", "arm64")])
        assert drift_reason(np, None, claim_annotations(np), NODE_LABELS) == "RequirementsDrifted"

    def test_requirement_still_satisfied(self):
        np = disruption_nodepool(requirements=[expr(LABEL_ZONE, "In", "test-zone-1", "test-zone-2"),
                                               expr(LABEL_INSTANCE_TYPE, "NotIn", "std-16")])
        assert drift_reason(np, None, claim_annotations(np), NODE_LABELS) is None

    def test_excluding_the_node_value_drifts(self):
        np = disruption_nodepool(requirements=[expr(LABEL_INSTANCE_TYPE, "NotIn", "std-4")])
        assert drift_reason(np, None, claim_annotations(np), NODE_LABELS) == "RequirementsDrifted"

    def test_does_not_exist_on_a_label_the_node_lacks(self):
        np = disruption_nodepool(requirements=[expr("example.com/gpu", "DoesNotExist")])
        assert drift_reason(np, None, claim_annotations(np), NODE_LABELS) is None

    def test_new_requirement_on_a_label_the_node_lacks_drifts(self):
        np = disruption_nodepool(requirements=[expr("example.com/team", "In", "a")])
        assert drift_reason(np, None, claim_annotations(np), NODE_LABELS) == "RequirementsDrifted"

    def test_nodepool_drift_takes_precedence_over_requirements(self):
        np = disruption_nodepool()
        ann = claim_annotations(np)
        np["spec"]["template"]["spec"]["requirements"] = [expr("kubernetes.io/arch", "In", "arm64")]
        np["spec"]["template"]["spec"]["expireAfter"] = "48h"
        assert drift_reason(np, None, ann, NODE_LABELS) == "NodePoolDrifted"


def kwok_class(**spec) -> dict:
    return {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": "default"},
            "spec": dict(spec)}


def ec2_class(**spec) -> dict:
    base = {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "KarpenterNodeRole",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}]}
    base.update(spec)
    return {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"}, "spec": base}


def aks_class(**spec) -> dict:
    base = {"imageFamily": "Ubuntu2204", "osDiskSizeGB": 128}
    base.update(spec)
    return {"apiVersion": "karpenter.azure.com/v1beta1", "kind": "AKSNodeClass", "metadata": {"name": "default"},
            "spec": base}


class TestNodeClassDrift:
    def drifted(self, before: dict, after: dict) -> str | None:
        np = disruption_nodepool()
        return drift_reason(np, after, claim_annotations(np, before), NODE_LABELS)

    def test_unchanged(self):
        assert self.drifted(ec2_class(), ec2_class()) is None

    @pytest.mark.parametrize("before, after", [
        (ec2_class(), ec2_class(userData="#!/bin/bash\necho hi")),
        (ec2_class(), ec2_class(role="OtherRole")),
        (ec2_class(), ec2_class(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi"}}])),
        (ec2_class(), ec2_class(detailedMonitoring=True)),
        (ec2_class(), ec2_class(kubelet={"maxPods": 50})),
        (aks_class(), aks_class(osDiskSizeGB=256)),
        (aks_class(), aks_class(imageFamily="AzureLinux")),
    ], ids=["ec2-userData", "ec2-role", "ec2-blockDeviceMappings", "ec2-detailedMonitoring", "ec2-kubelet", "aks-osDisk",
            "aks-imageFamily"])
    def test_node_shaping_fields_drift(self, before, after):
        assert self.drifted(before, after) == "NodeClassDrift"

    @pytest.mark.parametrize("before, after", [
        (ec2_class(), ec2_class(subnetSelectorTerms=[{"id": "subnet-1"}])),
        (ec2_class(), ec2_class(securityGroupSelectorTerms=[{"id": "sg-1"}])),
        (ec2_class(), ec2_class(amiSelectorTerms=[{"alias": "al2023@v20240807"}])),
        (ec2_class(), ec2_class(capacityReservationSelectorTerms=[{"id": "cr-1"}])),
        (aks_class(), aks_class(tags={"team": "a"})),
    ], ids=["ec2-subnets", "ec2-security-groups", "ec2-ami-version", "ec2-capacity-reservations", "aks-tags"])
    def test_dynamically_resolved_fields_and_azure_tags_do_not(self, before, after):
        assert self.drifted(before, after) is None

    def test_kwok_nodeclass_changes_do_not_drift(self):
        assert self.drifted(kwok_class(), kwok_class(nodeRegistrationDelay="30s")) is None

    def test_ec2_tags_drift(self):
        assert self.drifted(ec2_class(), ec2_class(tags={"team": "a"})) == "NodeClassDrift"

    @pytest.mark.parametrize("before, after", [
        (ec2_class(amiFamily="AL2023", amiSelectorTerms=[{"id": "ami-1"}]),
         ec2_class(amiFamily="Bottlerocket", amiSelectorTerms=[{"id": "ami-1"}])),
        (ec2_class(amiSelectorTerms=[{"alias": "al2023@latest"}]),
         ec2_class(amiSelectorTerms=[{"alias": "bottlerocket@latest"}])),
    ], ids=["amiFamily-field", "alias-family"])
    def test_ec2_ami_family_change_drifts(self, before, after):
        assert self.drifted(before, after) == "NodeClassDrift"


def drifted_node(c: Cluster, name: str, since: float, **kw):
    kw.setdefault("itype", "std-4")
    return c.node(name, drifted="NodePoolDrifted", drifted_since=since, **kw)


class TestDriftMethod:
    def test_drifted_node_is_replaced_first(self):
        c = Cluster()
        c.nodepool()
        drifted_node(c, "old", MONDAY_10AM - HOUR, pods=[dpod(cpu="3")])
        cmd = c.step().command
        assert cmd.method == "drift" and cmd.reason == "Drifted"
        assert names(cmd) == ["old"] and len(cmd.replacements) == 1

    def test_as_many_replacements_as_the_pods_need(self):
        c = Cluster()
        c.nodepool(requirements=[expr(LABEL_INSTANCE_TYPE, "In", "std-1", "std-2", "std-4")])
        drifted_node(c, "old", MONDAY_10AM - HOUR, itype="std-16", pods=[dpod(cpu="3.5") for _ in range(4)])
        cmd = c.step().command
        assert names(cmd) == ["old"] and len(cmd.replacements) == 4

    def test_no_price_check(self):
        # drift replaces even with a dearer node: the NodePool now only allows bigger types
        c = Cluster()
        c.nodepool(requirements=[expr(LABEL_INSTANCE_TYPE, "In", "std-16")] + ON_DEMAND_ONLY)
        drifted_node(c, "old", MONDAY_10AM - HOUR, itype="std-2", pods=[dpod(cpu="1")])
        cmd = c.step().command
        assert cmd.method == "drift" and replacement_types(cmd) == ["std-16"]

    def test_pods_that_fit_elsewhere_need_no_replacement(self):
        c = Cluster()
        c.nodepool()
        drifted_node(c, "old", MONDAY_10AM - HOUR, pods=[dpod(cpu="1")])
        c.node("room", itype="std-8", consolidatable=False, pods=[dpod(cpu="1")])
        cmd = c.step().command
        assert cmd.method == "drift" and cmd.replacements == []

    def test_oldest_drift_first(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}])
        drifted_node(c, "newer", MONDAY_10AM - 60, pods=[dpod(cpu="1")])
        drifted_node(c, "older", MONDAY_10AM - HOUR, pods=[dpod(cpu="1")])
        assert names(c.step().command) == ["older"]

    def test_empty_drifted_nodes_before_busy_ones(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}], consolidate_after="Never")  # keep emptiness out of the way
        drifted_node(c, "old-busy", MONDAY_10AM - HOUR, pods=[dpod(cpu="1")])
        drifted_node(c, "new-empty", MONDAY_10AM - 60)
        cmd = c.step().command
        assert cmd.method == "drift" and names(cmd) == ["new-empty"]

    def test_one_drift_command_per_step(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}])
        for i in range(3):
            drifted_node(c, f"d{i}", MONDAY_10AM - HOUR * (i + 1), pods=[dpod(cpu="1")])
        assert len(c.step().command.candidates) == 1

    def test_drift_budget(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "1", "reasons": ["Drifted"]}, {"nodes": "100%"}])
        drifted_node(c, "d0", MONDAY_10AM - HOUR, pods=[dpod(cpu="1")])
        drifted_node(c, "d1", MONDAY_10AM - HOUR, pods=[dpod(cpu="1")], marked_for_deletion=True)
        r = c.step()
        assert r.command is None or r.command.method != "drift"

    def test_drift_ignores_consolidation_settings(self):
        c = Cluster()
        c.nodepool(consolidate_after="Never", policy="WhenEmpty")
        drifted_node(c, "d", MONDAY_10AM - HOUR, pods=[dpod(cpu="1")], consolidatable=False)
        assert c.step().command.method == "drift"

    def test_blocked_when_pods_cannot_reschedule(self):
        c = Cluster()
        c.nodepool()
        drifted_node(c, "d", MONDAY_10AM - HOUR, labels={"disk": "local-ssd"},
                     pods=[dpod("db", cpu="1", node_selector={"disk": "local-ssd"})])
        r = c.step()
        assert r.command is None
        msgs = events_for(r, "d", "DisruptionBlocked")
        assert msgs and msgs[0].startswith("Not all pods would schedule, default/db => ")

    def test_blocked_node_does_not_stop_the_next_one(self):
        c = Cluster()
        c.nodepool(budgets=[{"nodes": "100%"}])
        drifted_node(c, "stuck", MONDAY_10AM - 2 * HOUR, labels={"disk": "local-ssd"},
                     pods=[dpod(cpu="1", node_selector={"disk": "local-ssd"})])
        drifted_node(c, "movable", MONDAY_10AM - HOUR, pods=[dpod(cpu="1")])
        assert names(c.step().command) == ["movable"]

    def test_do_not_disrupt_pod_blocks_drift_without_grace_period(self):
        c = Cluster()
        c.nodepool()
        drifted_node(c, "d", MONDAY_10AM - HOUR, pods=[dpod("job", cpu="1", do_not_disrupt="true")])
        r = c.step()
        assert r.command is None
        assert 'Pod has "karpenter.sh/do-not-disrupt" annotation (Pod=default/job)' in events_for(
            r, "d", "DisruptionBlocked")

    def test_grace_period_lets_drift_proceed_and_blocked_pods_get_no_new_capacity(self):
        c = Cluster()
        c.nodepool()
        drifted_node(c, "d", MONDAY_10AM - HOUR, termination_grace_period=HOUR,
                     pods=[dpod("job", cpu="3", do_not_disrupt="true")])
        cmd = c.step().command
        assert cmd.method == "drift" and names(cmd) == ["d"]
        # the do-not-disrupt pod waits for the grace period; nothing is launched for it
        assert cmd.replacements == []


# =====================================================================================
# Properties over random small clusters
# =====================================================================================

PROPERTY_TYPES = ladder((1, 2, 4, 8))
# budget windows and whether they are open at the properties' "now" (Monday 10:00 UTC)
PROPERTY_WINDOWS = {
    "weekday-hours": ({"schedule": "0 9 * * mon-fri", "duration": "8h"}, True),
    "saturday": ({"schedule": "0 0 * * sat", "duration": "24h"}, False),
}
REASON_OF = {"emptiness": "Empty", "drift": "Drifted", "multi": "Underutilized", "single": "Underutilized"}


@st.composite
def clusters(draw, min_pods: int = 0):
    gate = draw(st.booleans())
    c = Cluster(types=PROPERTY_TYPES, feature_gates={"SpotToSpotConsolidation": gate})
    budget_values = st.sampled_from(["0", "1", "2", "3", "10%", "34%", "50%", "100%"])
    nps = ["a", "b"][: draw(st.integers(1, 2))]
    for name in nps:
        budgets = []
        for _ in range(draw(st.integers(0, 2))):
            b = {"nodes": draw(budget_values)}
            window = draw(st.sampled_from([None, None, "weekday-hours", "saturday"]))
            if window is not None:
                b.update(PROPERTY_WINDOWS[window][0])
            if draw(st.booleans()):
                b["reasons"] = draw(st.lists(st.sampled_from(["Empty", "Drifted", "Underutilized"]), min_size=1,
                                             max_size=2, unique=True))
            budgets.append(b)
        kw = {"budgets": budgets} if budgets else {}
        if draw(st.booleans()):
            kw["requirements"] = ON_DEMAND_ONLY
        c.nodepool(name, **kw)
    c.pdb("guarded", {"app": "guarded"}, allowed=0, fully_blocking=draw(st.booleans()))
    c.pdb("relaxed", {"app": "relaxed"}, allowed=1)
    for i in range(draw(st.integers(2, 8))):
        it = draw(st.sampled_from(PROPERTY_TYPES))
        cap = it.allocatable[res.CPU]
        pods = []
        used = 0
        for j in range(draw(st.integers(min_pods, 4))):
            cpu = draw(st.sampled_from([100, 250, 500, 1000, 1500]))
            if used + cpu > cap:
                break
            used += cpu
            kind = draw(st.sampled_from(["plain"] * 5 + ["dnd", "dnd-active", "dnd-elapsed", "guarded", "relaxed",
                                                         "daemon"]))
            pods.append(dpod(
                f"n{i}-p{j}", cpu=f"{cpu}m",
                labels={"app": kind} if kind in ("guarded", "relaxed") else None,
                do_not_disrupt={"dnd": "true", "dnd-active": "1h", "dnd-elapsed": "1h"}.get(kind),
                start_time=MONDAY_10AM - (2 * HOUR if kind == "dnd-elapsed" else 600),
                owner="DaemonSet" if kind == "daemon" else "ReplicaSet",
            ))
        state = {}
        flag = draw(st.sampled_from(["normal"] * 6 + ["marked", "notready", "drifted", "drifted-tgp", "nominated"]))
        if flag == "marked":
            state["marked_for_deletion"] = True
        elif flag == "notready":
            state["ready"] = False
        elif flag.startswith("drifted"):
            state["drifted"] = "NodePoolDrifted"
            state["drifted_since"] = MONDAY_10AM - draw(st.integers(1, 10)) * 60
            if flag == "drifted-tgp":
                state["termination_grace_period"] = HOUR
        elif flag == "nominated":
            state["nominated"] = True
        c.node(f"n{i}", itype=it, nodepool=draw(st.sampled_from(nps)),
               capacity_type=draw(st.sampled_from([CAPACITY_ON_DEMAND, CAPACITY_ON_DEMAND, CAPACITY_SPOT])),
               pods=pods, **state)
    return c


def independent_budget(c: Cluster, np_name: str, reason: str) -> int:
    """What the NodePool's budgets allow for ``reason`` minus what is already disrupting, computed from scratch."""
    np = c.nodepools[np_name]
    counted = [n for n in c.nodes if n.managed and n.nodepool == np_name and n.initialized and not n.terminating]
    total = len(counted)
    busy = sum(1 for n in counted if n.marked_for_deletion or not n.ready)
    budgets = np["spec"]["disruption"].get("budgets", [{"nodes": "10%"}])
    allowed_ = math.inf
    for b in budgets:
        if "reasons" in b and reason not in b["reasons"]:
            continue
        if "schedule" in b and not next(active for spec, active in PROPERTY_WINDOWS.values()
                                        if spec["schedule"] == b["schedule"]):
            continue
        v = b["nodes"]
        n = math.ceil(int(v[:-1]) * total / 100) if v.endswith("%") else int(v)
        allowed_ = min(allowed_, n)
    return max(allowed_ - busy, 0)


def pod_blocked(c: Cluster, node) -> bool:
    for p in node.pods:
        if not p.active:
            continue
        dnd = p.annotations.get(DND)
        if dnd == "true" or (dnd == "1h" and MONDAY_10AM - p.start_time < HOUR):
            return True
        matching = [b for b in c.pdbs if b.selects(p)]
        if len(matching) > 1 or (matching and matching[0].disruptions_allowed == 0
                                 and not p.tolerates_disrupted_taint()):
            return True
    return False


def check_capacity(c: Cluster, cmd) -> None:
    """Every pod that must move has a destination, and no destination is over-filled."""
    gone = {x.name for x in cmd.candidates}
    snap = c.snapshot()
    must_move = {p.info.key for x in cmd.candidates for p in x.node.pods
                 if currently_reschedulable(p, snap.pdbs, snap.now)}
    if cmd.results is None:  # emptiness: nothing to place
        assert cmd.method == "emptiness" and not must_move
        return
    placed: dict[str, str] = {}
    by_name = {n.name: n for n in c.nodes}
    for target, infos in cmd.results.existing.items():
        node = by_name[target]
        assert target not in gone, f"pods placed on a node being removed: {target}"
        assert not node.marked_for_deletion and node.initialized
        total = res.add(node.existing.requested, res.total(p.requests for p in infos))
        for k, v in total.items():
            assert v <= node.existing.allocatable.get(k, 0), (target, k, v)
        placed.update((p.key, target) for p in infos)
    for rep in cmd.replacements:
        need = res.total(p.requests for p in rep.pods)
        assert rep.instance_types
        for it in rep.instance_types:
            for k, v in need.items():
                assert v <= it.allocatable.get(k, 0), (it.name, k, v)
        placed.update((p.key, rep.hostname) for p in rep.pods)
    if cmd.method != "drift":
        # consolidation keeps every new node in the command
        assert len(cmd.results.new_nodeclaims) == len(cmd.replacements)
    missing = must_move - set(placed)
    assert not missing, f"pods with nowhere to go: {missing}"


EXAMPLES = int(os.environ.get("DISRUPTION_EXAMPLES", "200"))
PROPERTY_SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def check_command(c: Cluster, cmd) -> None:
    """The invariants every disruption command must keep, re-derived from the cluster independently."""
    reason = REASON_OF[cmd.method]
    assert cmd.reason == reason
    # (a) never more nodes of a NodePool than its budget for this reason allows
    per_np: dict[str, int] = {}
    for x in cmd.candidates:
        per_np[x.node.nodepool] = per_np.get(x.node.nodepool, 0) + 1
    for np_name, count in per_np.items():
        assert count <= independent_budget(c, np_name, reason), (np_name, count, cmd.describe())
    # (b) graceful methods never touch blocked nodes; drift only with a grace period
    for x in cmd.candidates:
        n = x.node
        assert n.managed and n.initialized and not n.marked_for_deletion and not n.nominated
        assert n.annotations.get(DND) != "true"
        if pod_blocked(c, n):
            assert cmd.method == "drift" and n.termination_grace_period is not None, (n.name, cmd.describe())
        if cmd.method == "drift":
            assert n.drifted
        else:
            assert n.consolidatable
    # (c) every evicted pod has somewhere to go
    check_capacity(c, cmd)
    # (d) consolidation only ever replaces with something strictly cheaper, and at most one node
    if cmd.method in ("multi", "single"):
        assert len(cmd.replacements) <= 1
        if cmd.replacements:
            assert_strictly_cheaper(cmd)
            rep_ct = cmd.replacements[0].requirements.get(LABEL_CAPACITY_TYPE)
            if all(x.node.capacity_type == CAPACITY_SPOT for x in cmd.candidates) and rep_ct.has(CAPACITY_SPOT):
                assert c.feature_gates["SpotToSpotConsolidation"]
    if cmd.method == "emptiness":
        assert cmd.replacements == [] and all(x.empty for x in cmd.candidates)


@PROPERTY_SETTINGS
@given(clusters())
def test_commands_respect_budgets_blockers_capacity_and_price(c):
    cmd = c.step().command
    if cmd is not None:
        check_command(c, cmd)


@PROPERTY_SETTINGS
@given(clusters(min_pods=1))
def test_each_method_alone_respects_the_same_invariants(c):
    # emptiness usually acts first; run drift and both consolidations on their own so their
    # replacements get exercised as often as deletes
    snap = c.snapshot()
    engine = DisruptionEngine()
    for method in (engine._drift, engine._multi, engine._single):
        cmd, _ = method(snap, [])
        if cmd is not None:
            check_command(c, cmd)
