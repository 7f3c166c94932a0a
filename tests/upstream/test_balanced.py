"""consolidationPolicy Balanced: which consolidations karpy approves, which it turns down, and the events it emits.

A Balanced NodePool consolidates a node only when the share of the NodePool's price the move saves is at
least half the share of the NodePool's disruption cost it causes (score = savings fraction / disruption
fraction >= 0.50, k = 2). The first part checks the score on the worked numbers of the policy's design
(a pool of eight $4.84/day and two $9.68/day nodes, 80 pods: $58.08/day, disruption 90); the rest runs
the disruption engine on small clusters (``ladder()``: std-N costs 0.07·N per hour on-demand).
"""

from __future__ import annotations

import math

import pytest

from disruption_helpers import Cluster, dpod, events_for, names
from helpers import expr, instance_type
from karpy.cloudprovider.types import CAPACITY_ON_DEMAND, CAPACITY_SPOT, LABEL_CAPACITY_TYPE, Offering
from karpy.controllers.disruption import offering_price
from karpy.disruption import balanced
from karpy.disruption.balanced import NodePoolTotals, ScoreResult, evaluate_move, nodepool_totals, score_move
from karpy.disruption.candidates import GRACEFUL, build_candidates, sort_for_consolidation
from karpy.disruption.methods import DisruptionEngine

RFC = NodePoolTotals(total_cost=58.08, total_disruption=90)
APPROVED = "ConsolidationApproved"


ON_DEMAND = [expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_ON_DEMAND)]


def balanced_cluster(budget: str = "100%", **kw) -> Cluster:
    """One Balanced NodePool launching on-demand only (so a replacement's price is plain to read)."""
    c = Cluster(**kw)
    c.nodepool("default", policy="Balanced", budgets=[{"nodes": budget}], requirements=ON_DEMAND)
    return c


def pods(n: int, cpu: str = "1", **kw) -> list:
    return [dpod(cpu=cpu, **kw) for _ in range(n)]


def candidates(c: Cluster) -> list:
    return build_candidates(c.snapshot(), GRACEFUL, [])


def by_name(cands) -> dict:
    return {x.name: x for x in cands}


# =====================================================================================
# the score
# =====================================================================================


class TestScoreMove:
    def test_an_oversized_node_is_worth_replacing(self):
        # a $9.68/day node holding 3 pods replaced by a $2.42/day one
        r = score_move(9.68 - 2.42, 4.0, RFC)
        assert r.savings_fraction == pytest.approx(7.26 / 58.08, abs=1e-3)
        assert r.disruption_fraction == pytest.approx(4 / 90, abs=1e-3)
        assert r.score == pytest.approx((7.26 / 58.08) / (4 / 90), abs=0.02)
        assert r.approved

    def test_deleting_spare_capacity_is_approved(self):
        r = score_move(4.84, 5.0, RFC)
        assert r.score == pytest.approx((4.84 / 58.08) / (5 / 90), abs=0.02)
        assert r.approved

    def test_a_marginal_move_is_rejected(self):
        # saving $2.42/day by evicting 8 pods: 4.2 % of the price for 10 % of the disruption
        r = score_move(2.42, 9.0, RFC)
        assert r.score == pytest.approx((2.42 / 58.08) / (9 / 90), abs=0.01)
        assert not r.approved

    def test_a_well_packed_node_saving_nothing_is_rejected(self):
        r = score_move(0.0, 11.0, RFC)
        assert r.score == 0.0 and not r.approved

    def test_the_same_move_passes_in_a_uniform_cheaper_pool(self):
        uniform = NodePoolTotals(48.40, 90)
        r = score_move(2.42, 9.0, uniform)
        assert r.score == pytest.approx((2.42 / 48.40) / (9 / 90), abs=0.01)
        assert r.approved

    def test_low_disruption_nodes_pass_and_high_disruption_nodes_do_not(self):
        het = NodePoolTotals(58.08, 117)
        light, heavy = score_move(4.84, 5.0, het), score_move(4.84, 32.0, het)
        assert light.score == pytest.approx((4.84 / 58.08) / (5 / 117), abs=0.02) and light.approved
        assert heavy.score == pytest.approx((4.84 / 58.08) / (32 / 117), abs=0.01) and not heavy.approved

    def test_the_score_does_not_depend_on_the_pool_size(self):
        ten = score_move(7.26, 4.0, RFC)
        hundred = score_move(7.26, 4.0, NodePoolTotals(580.80, 900))
        # both fractions shrink tenfold in a pool ten times as large: the score stays
        assert hundred.savings_fraction == pytest.approx(ten.savings_fraction / 10)
        assert hundred.score == pytest.approx(ten.score, abs=0.01)

    def test_a_saving_without_disruption_scores_infinity(self):
        r = score_move(4.84, 0.0, RFC)
        assert math.isinf(r.score) and r.score > 0
        assert r.approved

    def test_no_saving_and_no_disruption_is_rejected(self):
        assert not score_move(0.0, 0.0, RFC).approved

    def test_a_pool_that_costs_nothing_rejects(self):
        r = score_move(4.84, 5.0, NodePoolTotals(0, 90))
        assert r.score == 0.0 and not r.approved

    def test_zero_disruption_does_not_divide_by_zero(self):
        assert score_move(4.84, 0.0, RFC).approved

    def test_proportionally_equal_moves_in_two_pools_score_alike(self):
        od = score_move(4.84, 4.0, NodePoolTotals(48.40, 90))
        spot = score_move(1.45, 4.0, NodePoolTotals(14.50, 90))
        assert od.score == pytest.approx(spot.score, abs=0.01)
        assert od.approved and spot.approved

    @pytest.mark.parametrize("savings, disruption, score, approved", [
        pytest.param(20.0, 5.0, 4.0, True, id="high savings low disruption"),
        pytest.param(10.0, 10.0, 1.0, True, id="equal fractions"),
        pytest.param(5.0, 50.0, 0.10, False, id="low savings high disruption"),
        pytest.param(10.0, 0.0, math.inf, True, id="zero disruption cost"),
        pytest.param(0.0, 10.0, 0.0, False, id="zero savings"),
        pytest.param(-5.0, 10.0, 0.0, False, id="negative savings"),
    ])
    def test_score_table(self, savings, disruption, score, approved):
        r = score_move(savings, disruption, NodePoolTotals(100.0, 100.0))
        if math.isinf(score):
            assert math.isinf(r.score)
        else:
            assert r.score == pytest.approx(score, abs=0.01)
        assert r.approved is approved

    def test_the_threshold_is_one_half(self):
        assert ScoreResult(0.05, 0.1).approved  # exactly 0.50
        assert not ScoreResult(0.0499, 0.1).approved


# =====================================================================================
# the NodePools' totals and the per-pool verdicts
# =====================================================================================


class TestTotals:
    def test_totals_count_every_node_not_only_the_consolidation_candidates(self):
        c = balanced_cluster()
        for _ in range(4):
            c.node(itype="std-4", pods=pods(1))
        c.node("empty", itype="std-4")  # a candidate consolidation itself leaves to emptiness
        c.node("pinned", itype="std-4", pods=pods(1, do_not_disrupt="true"))  # no candidate at all
        cands = candidates(c)
        assert "pinned" not in by_name(cands)
        t = nodepool_totals(cands, c.snapshot().nodes)["default"]
        assert t.total_cost == pytest.approx(6 * 0.28)
        # 1 per node + 1 per pod: four nodes with a pod, the empty node, the pinned node and its pod
        assert t.total_disruption == pytest.approx(4 * 2 + 1 + 2)

    def test_five_nodes_with_a_pod_each(self):
        c = balanced_cluster()
        for _ in range(5):
            c.node(itype="std-4", pods=pods(1))
        t = nodepool_totals(candidates(c), c.snapshot().nodes)["default"]
        assert t.total_cost == pytest.approx(5 * 0.28)
        assert t.total_disruption == pytest.approx(10.0)

    def test_a_node_without_a_price_still_counts_its_disruption(self):
        c = balanced_cluster()
        c.node("a", itype="std-4", pods=pods(1))
        c.node("free", itype="std-4", pods=pods(1), price=0.0)
        c.node("b", itype="std-4", pods=pods(1))
        t = nodepool_totals(candidates(c), c.snapshot().nodes)["default"]
        assert t.total_cost == pytest.approx(2 * 0.28)
        assert t.total_disruption == pytest.approx(6.0)


class TestEvaluateMove:
    def _pool(self, c: Cluster, n: int, nodepool: str = "default", prefix: str = "n") -> list[str]:
        return [c.node(f"{prefix}-{i}", itype="std-4", pods=pods(1), nodepool=nodepool).name for i in range(n)]

    def test_a_command_without_candidates_is_rejected(self):
        assert evaluate_move([], 1.0, {"default": NodePoolTotals(100, 50)}) == (False, None)

    def test_other_policies_are_not_scored(self):
        c = Cluster()
        c.nodepool("default", policy="WhenEmptyOrUnderutilized")
        self._pool(c, 5)
        cands = candidates(c)
        ok, per_pool = evaluate_move(cands[:2], 0.56, nodepool_totals(cands, c.snapshot().nodes))
        assert ok and "default" not in per_pool

    def test_a_pool_without_totals_scores_zero(self):
        c = balanced_cluster()
        self._pool(c, 1)
        ok, per_pool = evaluate_move(candidates(c), 0.28, {})
        assert per_pool["default"].score == 0.0 and not per_pool["default"].approved and not ok

    def test_deleting_one_of_ten_uniform_nodes_scores_one(self):
        c = balanced_cluster()
        self._pool(c, 10)
        cands = candidates(c)
        ok, per_pool = evaluate_move(cands[:1], cands[0].price, nodepool_totals(cands, c.snapshot().nodes))
        assert ok and per_pool["default"].score == pytest.approx(1.0, abs=0.05)

    def test_savings_across_nodepools_are_shared_by_source_price(self):
        c = Cluster()
        c.nodepool("balanced", policy="Balanced")
        c.nodepool("plain", policy="WhenEmptyOrUnderutilized")
        self._pool(c, 5, "balanced", "b")
        self._pool(c, 5, "plain", "p")
        cands = by_name(candidates(c))
        move = [cands["b-0"], cands["p-0"]]
        totals = nodepool_totals(list(cands.values()), c.snapshot().nodes)
        ok, per_pool = evaluate_move(move, 2 * 0.28, totals)
        # half of the saving is the balanced pool's: 1/5 of its price for 1/5 of its disruption
        assert ok and per_pool["balanced"].score == pytest.approx(1.0, abs=0.05)
        assert set(per_pool) == {"balanced"}

    def test_every_balanced_pool_must_approve(self):
        c = Cluster()
        c.nodepool("a", policy="Balanced")
        c.nodepool("b", policy="Balanced")
        self._pool(c, 10, "a", "a")
        c.node("b-heavy", itype="std-4", nodepool="b", pods=pods(60, cpu="10m"))
        for i in range(3):
            c.node(f"b-light-{i}", itype="std-4", nodepool="b", pods=pods(1))
        cands = by_name(candidates(c))
        totals = nodepool_totals(list(cands.values()), c.snapshot().nodes)
        move = [cands["a-0"], cands["b-heavy"]]
        ok, per_pool = evaluate_move(move, sum(x.price for x in move), totals)
        assert per_pool["a"].approved  # 1/10 of a's price for 1/10 of its disruption
        # b: a quarter of its price for 61/67 of its disruption
        assert per_pool["b"].score == pytest.approx(0.25 / (61 / 67), abs=0.01) and not per_pool["b"].approved
        assert not ok

    def test_the_only_node_of_a_pool_may_be_deleted(self):
        c = balanced_cluster()
        self._pool(c, 1)
        cands = candidates(c)
        ok, per_pool = evaluate_move(cands, cands[0].price, nodepool_totals(cands, c.snapshot().nodes))
        assert ok
        assert per_pool["default"].savings_fraction >= 1.0 and per_pool["default"].score == pytest.approx(1.0)


class TestPrices:
    def test_a_candidate_costs_its_offering_price(self):
        c = balanced_cluster()
        c.node("n", itype="std-4", zone="test-zone-2", capacity_type=CAPACITY_SPOT, pods=pods(1))
        cand = candidates(c)[0]
        assert cand.price == pytest.approx(0.28 * 0.7)

    def test_a_running_node_costs_its_offering_even_when_that_offering_is_out_of_capacity(self):
        it = instance_type("src", cpu=4, offers=[
            Offering("test-zone-1", CAPACITY_ON_DEMAND, 1.00, available=False),
            Offering("test-zone-2", CAPACITY_ON_DEMAND, 5.00),
        ])
        labels = {"topology.kubernetes.io/zone": "test-zone-1", "karpenter.sh/capacity-type": CAPACITY_ON_DEMAND}
        assert offering_price(it, labels, 0.0) == 1.00

    def test_savings_ratio_is_price_per_unit_of_disruption(self):
        c = balanced_cluster()
        c.node("bare", itype="std-4")
        c.node("three", itype="std-4", pods=pods(3))
        cands = by_name(candidates(c))
        assert cands["bare"].savings_ratio == pytest.approx(0.28)
        assert cands["three"].savings_ratio == pytest.approx(0.28 / 4)


class TestOrder:
    def test_candidates_are_taken_by_savings_ratio(self):
        c = balanced_cluster()
        c.node("b-cheap-busy", itype="std-1", pods=pods(8, cpu="100m"))  # 0.07 / 9
        c.node("c-medium", itype="std-8", pods=pods(3))  # 0.56 / 4
        c.node("a-dear-light", itype="std-16", pods=pods(1))  # 1.12 / 2
        assert [x.name for x in sort_for_consolidation(candidates(c))] == ["a-dear-light", "c-medium", "b-cheap-busy"]

    def test_candidates_of_every_policy_share_the_ratio_order(self):
        c = Cluster()
        c.nodepool("balanced", policy="Balanced")
        c.nodepool("default", policy="WhenEmptyOrUnderutilized")
        c.node("cheap-default", itype="std-1", nodepool="default", pods=pods(1, cpu="100m"))
        c.node("dear-balanced", itype="std-16", nodepool="balanced", pods=pods(1))
        assert [x.name for x in sort_for_consolidation(candidates(c))] == ["dear-balanced", "cheap-default"]


# =====================================================================================
# the engine
# =====================================================================================


class TestBalancedConsolidation:
    def test_an_oversized_node_is_replaced_and_the_approval_announced(self):
        c = balanced_cluster()
        c.node("big", itype="std-16", pods=pods(1, cpu="500m"))
        r = c.step()
        assert names(r.command) == ["big"] and r.command.decision == "replace"
        assert "std-16" not in [it.name for it in r.command.replacements[0].instance_types]
        msgs = events_for(r, "big", APPROVED)
        assert len(msgs) == 1 and "k: 2" in msgs[0] and ">= threshold 0.50" in msgs[0]

    def test_a_well_packed_node_is_kept(self):
        c = balanced_cluster()
        c.node("packed", itype="std-4", pods=pods(4))
        r = c.step()
        assert r.command is None
        assert events_for(r, reason=APPROVED) == []

    def test_several_underutilized_nodes_are_merged(self):
        c = balanced_cluster()
        for i in range(3):
            c.node(f"big-{i}", itype="std-16", pods=pods(1))
        r = c.step()
        assert r.command.method == "multi" and len(r.command.candidates) >= 2
        assert len(r.command.candidates) - len(r.command.replacements) >= 1  # fewer NodeClaims afterwards
        assert len(events_for(r, "default", APPROVED)) == 1

    def test_a_zero_budget_blocks_it(self):
        c = balanced_cluster(budget="0%")
        c.node("big", itype="std-16", pods=pods(1, cpu="500m"))
        r = c.step()
        assert r.command is None and events_for(r, reason=APPROVED) == []

    def test_an_empty_node_goes_before_an_underutilized_one_under_a_budget_of_one(self):
        c = balanced_cluster(budget="1")
        c.node("empty", itype="std-16")
        c.node("underutilized", itype="std-16", pods=pods(1, cpu="500m"))
        r = c.step()
        assert names(r.command) == ["empty"]

    def test_delete_when_the_pods_fit_on_other_nodes(self):
        c = balanced_cluster()
        c.node("a", itype="std-8", pods=pods(1))
        c.node("b", itype="std-16", pods=pods(14))
        r = c.step()
        assert names(r.command) == ["a"] and r.command.decision == "delete"
        assert r.command.savings == pytest.approx(0.56)

    def test_replace_when_the_pods_need_a_new_cheaper_node(self):
        c = balanced_cluster()
        c.node("a", itype="std-16", pods=pods(1, cpu="2"))
        r = c.step()
        assert r.command.decision == "replace"
        assert 0 < r.command.savings < 1.12

    def test_multi_node_takes_the_best_ratio_first(self):
        c = balanced_cluster()
        c.node("A", itype="std-16", pods=pods(10, cpu="100m"))  # 1.12 / 11
        c.node("B", itype="std-8", pods=pods(1, cpu="100m"))  # 0.56 / 2: the best value
        c.node("C", itype="std-1", pods=pods(8, cpu="100m"))  # 0.07 / 9: the worst
        r = c.step()
        order = [x.name for x in r.command.candidates]
        assert "B" in order
        if "C" in order:
            assert order.index("B") < order.index("C")

    def test_only_the_balanced_pool_is_scored_in_a_mixed_command(self):
        c = Cluster()
        c.nodepool("balanced", policy="Balanced", budgets=[{"nodes": "100%"}])
        c.nodepool("plain", policy="WhenEmptyOrUnderutilized", budgets=[{"nodes": "100%"}])
        c.node("bal", itype="std-16", nodepool="balanced", pods=pods(1, cpu="500m"))
        c.node("plain-node", itype="std-16", nodepool="plain", pods=pods(1, cpu="500m"))
        r = c.step()
        assert names(r.command) == ["bal", "plain-node"]
        assert len(events_for(r, "balanced", APPROVED)) == 1
        assert events_for(r, "plain", APPROVED) == []

    @pytest.mark.parametrize("policy", ["Balanced", "WhenEmptyOrUnderutilized"])
    def test_underutilized_nodes_of_either_policy_are_consolidation_candidates(self, policy):
        c = Cluster()
        c.nodepool("default", policy=policy)
        c.node("big", itype="std-16", pods=pods(1))
        r = c.step()
        assert names(r.command) == ["big"]
        assert events_for(r, "big", "Unconsolidatable") == []

    @pytest.mark.parametrize("policy, consolidated", [("Balanced", False), ("WhenEmptyOrUnderutilized", True)])
    def test_a_merge_not_worth_its_disruption_is_turned_down_silently(self, policy, consolidated):
        # two busy std-8 nodes (30 pods each) that would fit one std-8, in a pool whose other nodes are full and
        # pinned: the merge saves 1/12 of the pool's price for 62/72 of its disruption
        c = Cluster()
        c.nodepool("default", policy=policy, budgets=[{"nodes": "100%"}], requirements=ON_DEMAND)
        c.node("x", itype="std-8", pods=pods(30, cpu="100m"))
        c.node("y", itype="std-8", pods=pods(30, cpu="100m"))
        for i in range(5):
            c.node(f"full-{i}", itype="std-16", pods=pods(1, cpu="16", do_not_disrupt="true"))
        r = c.step()
        assert (r.command is not None) is consolidated
        assert events_for(r, reason=APPROVED) == []

    def test_a_high_disruption_node_is_kept_while_a_low_disruption_one_goes(self):
        c = balanced_cluster()
        c.node("light", itype="std-4", pods=pods(1, cpu="500m"))
        c.node("heavy", itype="std-4", pods=pods(30, cpu="10m"))
        for i in range(3):
            c.node(f"keep-{i}", itype="std-4", pods=pods(1, cpu="3"), annotations={"karpenter.sh/do-not-disrupt": "true"})
        engine = DisruptionEngine()
        r = c.step(engine)
        assert names(r.command) == ["light"]
        # with the light node gone, the heavy node alone would save a fifth of the price for most of the disruption
        c.nodes = [n for n in c.nodes if n.name != "light"]
        assert DisruptionEngine().step(c.snapshot()).command is None


class TestOnDemandOnlySavings:
    """A replacement's saving is priced in the capacity types the NodePool allows."""

    def _cluster(self, allow_spot: bool) -> Cluster:
        src = instance_type("source-type", cpu=8, offers=[Offering("test-zone-1", CAPACITY_ON_DEMAND, 0.50)])
        dst = instance_type("dest-type", cpu=4, offers=[Offering("test-zone-1", CAPACITY_SPOT, 0.10),
                                                        Offering("test-zone-1", CAPACITY_ON_DEMAND, 0.40)])
        c = Cluster(types=[src, dst])
        reqs = None if allow_spot else [expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_ON_DEMAND)]
        c.nodepool("default", policy="Balanced", requirements=reqs)
        c.node("source", itype="source-type", pods=pods(3))
        # the rest of the pool: $0.50/h and a disruption cost of 6, pinned
        c.node("other", itype="source-type", pods=pods(5, cpu="1500m"), annotations={"karpenter.sh/do-not-disrupt": "true"})
        return c

    def test_an_on_demand_only_pool_does_not_count_spot_prices(self):
        # saving 0.10 of 1.00 for 4 of 10 units of disruption: 0.25 < 0.50
        r = self._cluster(allow_spot=False).step()
        assert r.command is None

    def test_the_same_move_with_spot_allowed_is_approved(self):
        r = self._cluster(allow_spot=True).step()
        assert names(r.command) == ["source"] and r.command.savings == pytest.approx(0.40)
        assert balanced.K == 2
