"""A consolidation simulation over a pass's prepared snapshot places the candidates' pods exactly where a
scheduler built from scratch, over the cluster without the candidates, places them.

The disruption engine prepares the cluster once per pass (``Prepared``) and runs every candidate's simulation
as a copy of it less the candidate's nodes (``Scheduler.from_prepared``); that copy must hold the same nodes,
in the same order, with the same room and the same topology counts as the cluster without those nodes.
"""

from __future__ import annotations

import itertools

import pytest

from disruption_helpers import Cluster, dpod, gib
from karpy.disruption.candidates import build_candidates, currently_reschedulable
from karpy.disruption.methods import simulate
from karpy.scheduling.pods import moving
from karpy.scheduling.scheduler import Scheduler

ZONES = ("test-zone-1", "test-zone-2", "test-zone-3")


def _spread(app: str, key: str) -> dict:
    return {"spread": [{"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": app}}}]}


def _anti(app: str) -> dict:
    return {"pod_anti_affinity": [{"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": app}}}]}


def _cluster(anti: bool = True) -> Cluster:
    """Twelve half-used nodes in three zones: zone-spread, hostname-spread, anti-affine (unless told not to)
    and plain pods."""
    c = Cluster()
    c.nodepool()
    for i in range(12):
        zone = ZONES[i % 3]
        pods = [
            dpod(f"zs-{i}", cpu="500m", memory="512Mi", labels={"app": "zs"},
                 **_spread("zs", "topology.kubernetes.io/zone")),
        ]
        if anti:
            pods.append(dpod(f"anti-{i}", cpu="250m", labels={"app": "anti"}, **_anti("anti")))
        if i % 2 == 0:
            pods.append(dpod(f"hs-{i}", cpu="1", labels={"app": "hs"}, **_spread("hs", "kubernetes.io/hostname")))
        if i % 3 != 2:
            pods.append(dpod(f"plain-{i}", cpu="750m", memory=f"{gib(1) // 2**20}Mi"))
        c.node(f"node-{i:02d}", itype="std-4" if i % 4 else "std-8", pods=pods, zone=zone)
    return c


def _from_scratch(snapshot, names: set[str]):
    """Where a scheduler built over the cluster without ``names`` puts their pods."""
    rest = [n.existing for n in snapshot.nodes if n.name not in names]
    pods = [moving(p.info) for n in snapshot.nodes if n.name in names for p in n.pods
            if currently_reschedulable(p, snapshot.pdbs, snapshot.now)]
    return Scheduler(snapshot.templates, rest, hostname_prefix="disruption-placeholder").solve(pods)


def _placements(results) -> tuple:
    existing = sorted((node, sorted(p.key for p in pods)) for node, pods in results.existing.items() if pods)
    new = [(sorted(p.key for p in c.pods), sorted(it.name for it in c.instance_types)) for c in results.new_nodeclaims]
    return existing, sorted(new), sorted(results.errors)


@pytest.mark.parametrize("names", [("node-00",), ("node-05",), ("node-11",), ("node-01", "node-02"),
                                   ("node-00", "node-03", "node-06"), ("node-04", "node-07", "node-08", "node-10")])
def test_prepared_simulation_places_pods_as_a_fresh_scheduler(names):
    snapshot = _cluster().snapshot()
    by_name = {n.name: n for n in snapshot.nodes}
    cands = {c.name: c for c in build_candidates(snapshot, "graceful", [])}
    sim = simulate(snapshot, [cands[n] for n in names], consolidation=True)
    assert set(names) <= set(by_name)
    assert _placements(sim.results) == _placements(_from_scratch(snapshot, set(names)))


def test_simulations_of_one_pass_do_not_leak_into_each_other():
    """Every candidate of a pass, simulated one after another over the same prepared snapshot, gets the
    answer it gets alone (the copies share nothing a solve changes)."""
    snapshot = _cluster().snapshot()
    cands = build_candidates(snapshot, "graceful", [])
    first = [_placements(simulate(snapshot, [c], consolidation=True).results) for c in cands]
    for c, pair in zip(cands, itertools.pairwise(cands)):
        simulate(snapshot, list(pair), consolidation=True)
    again = [_placements(simulate(snapshot, [c], consolidation=True).results) for c in cands]
    assert first == again
    assert first == [_placements(_from_scratch(snapshot, {c.name})) for c in cands]


@pytest.mark.parametrize("anti", [True, False])
@pytest.mark.parametrize("size", [2, 3, 5, 8, 12])
def test_multi_node_probe_stopped_at_a_second_nodeclaim_answers_as_the_full_simulation(size, anti):
    """A multi-node probe is given up once its simulation opens a second NodeClaim: the full simulation of
    the same batch then needs two or more new NodeClaims too (a rejected batch), and a probe that finishes
    places every pod where the full simulation does."""
    snapshot = _cluster(anti).snapshot()
    batch = build_candidates(snapshot, "graceful", [])[:size]
    probe = simulate(snapshot, batch, consolidation=True, probe=True)
    full = simulate(snapshot, batch, consolidation=True)
    if probe.ok:
        assert _placements(probe.results) == _placements(full.results)
    else:
        assert not full.ok or len(full.results.new_nodeclaims) > 1
    if full.ok and len(full.results.new_nodeclaims) > 1:
        assert not probe.ok and probe.results is None


def test_a_snapshot_with_one_node_changed_is_prepared_afresh():
    """Two snapshots of one pass after another share most nodes' states; a node whose pods changed in between
    must be seen as it is now (a preparation is reused only when every node, pod and template is the same)."""
    c = _cluster(anti=False)
    first = c.snapshot()
    cands = build_candidates(first, "graceful", [])
    simulate(first, [cands[0]], consolidation=True)
    # node-01 fills up: pods that went there before must now go elsewhere
    full = [dpod(f"filler-{i}", cpu="1") for i in range(3)]
    old = next(n for n in c.nodes if n.name == "node-01")
    c.nodes.remove(old)
    c.node("node-01", itype=old.instance_type, pods=list(old.pods) + full, zone=old.zone)
    second = c.snapshot()
    again = {x.name: x for x in build_candidates(second, "graceful", [])}
    for name in ("node-00", "node-02", "node-03"):
        sim = simulate(second, [again[name]], consolidation=True)
        assert _placements(sim.results) == _placements(_from_scratch(second, {name}))
    before = {c_.name: c_ for c_ in cands}
    assert "node-01" in simulate(first, [before["node-00"]], consolidation=True).results.existing
    assert "node-01" not in simulate(second, [again["node-00"]], consolidation=True).results.existing


def _sparse_hostname_terms() -> Cluster:
    """Twelve nodes where the hostname terms refuse only some nodes: anti-affine pods on every third node,
    pods whose anti-affinity repels them on others, and a hostname spread at its skew on the even ones."""
    c = Cluster()
    c.nodepool()
    for i in range(12):
        pods = [dpod(f"plain-{i}", cpu="500m")]
        if i % 3 == 0:
            pods.append(dpod(f"anti-{i}", cpu="250m", labels={"app": "anti"}, **_anti("anti")))
        if i % 4 == 1:
            pods.append(dpod(f"guard-{i}", cpu="250m", labels={"app": "guard"}, **_anti("anti")))
        for k in range(2 if i % 4 == 0 else 1 if i % 4 == 2 else 0):  # maxSkew 2: full at two
            spread = _spread("hs", "kubernetes.io/hostname")
            spread["spread"][0]["maxSkew"] = 2
            pods.append(dpod(f"hs-{i}-{k}", cpu="250m", labels={"app": "hs"}, **spread))
        c.node(f"node-{i:02d}", itype="std-4", pods=pods, zone=ZONES[i % 3])
    return c


@pytest.mark.parametrize("names", [("node-00",), ("node-03",), ("node-04",), ("node-00", "node-06"),
                                   ("node-00", "node-02", "node-03", "node-09"), ("node-04", "node-08")])
def test_nodes_a_hostname_term_refuses_are_skipped_without_changing_any_placement(names):
    """A simulation over a preparation does not ask the nodes whose hostname terms refuse a class at the
    preparation's counts (they refuse it in every simulation over it). The pods still go exactly where a fresh
    scheduler puts them: anti-affine pods onto the nodes holding none of theirs and no pod that repels them,
    hostname-spread pods onto nodes below the skew, the candidates' own nodes not counted against them."""
    snapshot = _sparse_hostname_terms().snapshot()
    cands = {c.name: c for c in build_candidates(snapshot, "graceful", [])}
    sim = simulate(snapshot, [cands[n] for n in names], consolidation=True)
    assert _placements(sim.results) == _placements(_from_scratch(snapshot, set(names)))
    moved_to = {p.key.rsplit("/", 1)[-1]: node for node, pods in sim.results.existing.items() for p in pods}
    for name in names:
        i = int(name.rsplit("-", 1)[1])
        if i % 3 == 0:  # its anti-affine pod lands on a node without one and without a guard
            j = int(moved_to[f"anti-{i}"].rsplit("-", 1)[1])
            assert j % 3 != 0 and j % 4 != 1
        for k in range(2 if i % 4 == 0 else 1 if i % 4 == 2 else 0):  # hostname-spread pods: below the skew
            j = int(moved_to[f"hs-{i}-{k}"].rsplit("-", 1)[1])
            assert j % 4 != 0


def _counts(prep) -> list:
    return [(ident, dict(g.counts), dict(g.owners), g.total) for ident, g in prep.base.topology.groups.items()]


def _prepare(snapshot):
    from karpy.scheduling.scheduler import Prepared
    nodes = [n.existing for n in snapshot.nodes]
    pods = [p.info for n in snapshot.nodes for p in n.pods]
    return Prepared(snapshot.templates, nodes, pods)


def test_a_pass_counts_only_the_nodes_that_changed_into_the_last_pass_topology(monkeypatch):
    """A preparation whose groups are the last one's starts from its counts and counts in or out only the nodes
    that came or went (a node whose pods changed is both): every group ends with the counts, owners and totals
    a fresh count gives, and the simulations over it place pods as a fresh scheduler does."""
    from karpy.scheduling import scheduler as sched
    c = _cluster()
    _prepare(c.snapshot())
    # a pass's command: node-04 goes, its zone-spread and plain pods move onto node-07, a replacement comes
    gone = next(n for n in c.nodes if n.name == "node-04")
    c.nodes.remove(gone)
    seven = next(n for n in c.nodes if n.name == "node-07")
    c.nodes.remove(seven)
    moved = [dpod("zs-4", cpu="500m", memory="512Mi", labels={"app": "zs"}, **_spread("zs", "topology.kubernetes.io/zone")),
             dpod("plain-4", cpu="750m", memory="512Mi")]
    c.node("node-07", itype=seven.instance_type, pods=list(seven.pods) + moved, zone=seven.zone)
    c.node("node-12", itype="std-8", zone=ZONES[1], pods=[
        dpod("anti-4", cpu="250m", labels={"app": "anti"}, **_anti("anti")),
        dpod("hs-4", cpu="1", labels={"app": "hs"}, **_spread("hs", "kubernetes.io/hostname"))])
    snapshot = c.snapshot()
    fresh_counts = []
    monkeypatch.setattr(sched.Scheduler, "_register_existing_topology",
                        lambda self, classes, _orig=sched.Scheduler._register_existing_topology:
                        (fresh_counts.append(1), _orig(self, classes)))
    incremental = _prepare(snapshot)
    assert fresh_counts == []  # counted from the last pass's counts
    sched._LAST_TOPOLOGY[0] = None
    fresh = _prepare(snapshot)
    assert fresh_counts == [1]
    assert _counts(incremental) == _counts(fresh)
    zs = next(g for g in incremental.base.topology.groups.values() if g.key == "topology.kubernetes.io/zone")
    assert zs.counts == {ZONES[0]: 4, ZONES[1]: 4, ZONES[2]: 4} and zs.total == 12
    anti = next(g for g in incremental.base.topology.groups.values() if g.kind == "anti-affinity")
    assert "node-04" not in anti.owners and anti.owners["node-12"] == 1
    cands = {x.name: x for x in build_candidates(snapshot, "graceful", [])}
    for names in (("node-12",), ("node-07",), ("node-00", "node-05")):
        sim = simulate(snapshot, [cands[n] for n in names], consolidation=True)
        assert _placements(sim.results) == _placements(_from_scratch(snapshot, set(names)))


def _mixed_cluster(seed: int) -> Cluster:
    """Ten nodes of random sizes and discounts holding random pods: zone-spread, anti-affine and plain, some
    too big for the smaller types. Single-node consolidation rejects most of them, for various reasons."""
    import random
    rng = random.Random(seed)
    c = Cluster()
    c.nodepool(requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}])
    for i in range(10):
        size = rng.choice((2, 4, 8, 16))
        pods = []
        room = size * 1000 - 200
        while room > 0 and len(pods) < 6:
            cpu = min(room, rng.choice((250, 500, 1000, 1500, 3000, 6000)))
            room -= cpu
            kind = rng.random()
            if kind < 0.25:
                pods.append(dpod(cpu=f"{cpu}m", labels={"app": "zs"}, **_spread("zs", "topology.kubernetes.io/zone")))
            elif kind < 0.4:
                pods.append(dpod(cpu=f"{cpu}m", labels={"app": "anti"}, **_anti("anti")))
            else:
                pods.append(dpod(cpu=f"{cpu}m"))
        price = None if rng.random() < 0.6 else round(rng.uniform(0.02, 0.3) * size / 4, 4)
        kw = {} if price is None else {"price": price}
        c.node(f"node-{i:02d}", itype=f"std-{size}", pods=pods, zone=ZONES[i % 3], **kw)
    return c


@pytest.mark.parametrize("seed", range(12))
def test_single_node_simulations_cut_short_decide_and_explain_as_whole_ones(seed, monkeypatch):
    """A single node's simulation is stopped once it opens a second NodeClaim or one no cheaper than the node,
    and the reason is worked out by the whole simulation only when read: the pass chooses the same command and
    publishes the same Unconsolidatable reasons as one whose simulations all run to the end."""
    from karpy.disruption import methods
    stopped = []
    cut = methods._SingleProbeScheduler._check_price

    def counting(self, claim):
        try:
            cut(self, claim)
        except methods._CutShort:
            stopped.append(claim)
            raise

    monkeypatch.setattr(methods._SingleProbeScheduler, "_check_price", counting)
    fast = _mixed_cluster(seed).step()
    fast_events = [(e.name, e.reason, e.message) for e in fast.events]
    exact = methods.DisruptionEngine.compute_consolidation
    monkeypatch.setattr(methods.DisruptionEngine, "compute_consolidation",
                        lambda self, s, c, e, m, exact_=False: exact(self, s, c, e, m, exact=True))
    whole = _mixed_cluster(seed).step()
    describe = (lambda r: r.command.describe() if r.command else None)
    assert describe(fast) == describe(whole)
    assert fast_events == [(e.name, e.reason, e.message) for e in whole.events]
    if any(e.message == "Can't replace with a cheaper node" for e in whole.events):
        assert stopped, "no simulation was stopped early: the test no longer checks the early stop"
