"""Single-node consolidation's timeout, as upstream's (pkg/controllers/disruption/singlenodeconsolidation.go,
SingleNodeConsolidationTimeoutDuration): a pass that runs past 3 minutes on the engine's clock gives up with no
command, and the NodePools it did not reach are evaluated first on the next pass. karpy's controller gives the engine
its clock; a simulated clock stands still during a pass, so simulations never time out."""

from __future__ import annotations

from disruption_helpers import Cluster, dpod
from karpy.disruption.methods import SINGLE_NODE_TIMEOUT, DisruptionEngine

POOLS = ("nodepool-1", "nodepool-2", "nodepool-3")


def _cluster(nodes_per_pool: int, shrinkable: bool = True) -> Cluster:
    """Three NodePools, each with nodes whose one pod would fit a cheaper node (or, not ``shrinkable``, nodes
    costing nothing: no replacement is cheaper)."""
    c = Cluster()
    for pool in POOLS:
        c.nodepool(pool, budgets=[{"nodes": "100%"}])
        for i in range(nodes_per_pool):
            if shrinkable:
                c.node(f"{pool}-{i}", itype="std-8", nodepool=pool, pods=[dpod(cpu="500m")])
            else:
                c.node(f"{pool}-{i}", itype="std-1", nodepool=pool, pods=[dpod(cpu="900m")], price=0.0)
    return c


def _single(engine: DisruptionEngine, c: Cluster):
    cmd, _ = engine._single(c.snapshot(), [])
    return cmd


def test_nodepools_a_timed_out_pass_did_not_reach_are_evaluated_first():
    c = _cluster(3)
    assert _single(DisruptionEngine(), c).candidates[0].node.nodepool == "nodepool-1"  # NodePools in name order
    engine = DisruptionEngine()
    engine.unseen_nodepools = {"nodepool-2"}
    cmd = _single(engine, c)
    assert cmd is not None and cmd.candidates[0].node.nodepool == "nodepool-2"


def test_a_pass_that_evaluates_every_nodepool_forgets_the_timed_out_ones():
    c = _cluster(1, shrinkable=False)
    engine = DisruptionEngine()
    engine.unseen_nodepools = {"nodepool-2"}
    assert _single(engine, c) is None  # every candidate evaluated, none consolidatable
    assert engine.unseen_nodepools == set()


def test_a_pass_past_its_timeout_gives_up_and_marks_every_nodepool_it_did_not_reach():
    c = _cluster(10)
    engine = DisruptionEngine(clock=lambda: c.now)
    engine.single_node_timeout = -5.0  # as upstream's test: the deadline has passed before the first candidate
    assert _single(engine, c) is None
    assert engine.unseen_nodepools == set(POOLS)
    assert engine.timeouts == {"single": 1}


def test_a_pass_running_out_of_time_midway_resumes_with_the_nodepools_it_missed():
    c = _cluster(1, shrinkable=False)
    ticks = iter(range(0, 10_000, 100))  # each look at the clock is 100 s later: the deadline passes at the 3rd
    engine = DisruptionEngine(clock=lambda: float(next(ticks)))
    assert SINGLE_NODE_TIMEOUT == 180.0
    assert _single(engine, c) is None
    assert engine.unseen_nodepools == {"nodepool-2", "nodepool-3"}  # nodepool-1 was evaluated before the timeout
    assert engine.timeouts == {"single": 1}


def test_without_a_clock_or_with_a_clock_standing_still_a_pass_never_times_out():
    for engine in (DisruptionEngine(), DisruptionEngine(clock=lambda: 0.0)):
        assert _single(engine, _cluster(1, shrinkable=False)) is None
        assert engine.unseen_nodepools == set() and engine.timeouts == {}
