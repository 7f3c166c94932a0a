"""More of what the scheduler decides: which pods land where, which NodeClaims are computed, which instance types
they keep, and how NodeClaims already in flight take pods from the next batch.

Each solve is karpy's pure engine (NodeClaim templates, existing or in-flight nodes, pending pods → new NodeClaims,
placements, per-pod errors). A second provisioning batch is a second solve whose existing nodes are the first
solve's NodeClaims, in flight (``in_flight``). Unless a test says otherwise the catalog is ``ladder()`` (std-1 ..
std-16, on-demand and spot in test-zone-1..3).
"""

from __future__ import annotations

from collections import Counter

import pytest

from helpers import (
    GIB,
    LABEL_ARCH,
    LABEL_CAPACITY_TYPE,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_OS,
    LABEL_ZONE,
    affinity_term,
    claim_of,
    domain_counts,
    existing_node,
    expr,
    instance_type,
    ladder,
    nodepool,
    offered_capacity_types,
    offered_zones,
    placement,
    pod,
    pod_manifest,
    pods,
    scheduled,
    single,
    solve,
    spread,
    taint,
    template,
    toleration,
    type_names,
)
from karpy import resources as res
from karpy.cloudprovider import fake
from karpy.cloudprovider.types import CAPACITY_ON_DEMAND, CAPACITY_SPOT
from karpy.provisioning.launch import launch_candidates
from karpy.scheduling.pods import Taint, compile_pod
from karpy.scheduling.scheduler import ExistingNode, NewNodeClaim, Results

WEB = {"app": "web"}


def all_scheduled(r: Results, ps) -> None:
    assert r.errors == {}, r.errors
    assert scheduled(r) == {p.key for p in ps}


def in_flight(c: NewNodeClaim, name: str | None = None, *, initialized: bool = False, taints=(),
              extra_labels=None) -> ExistingNode:
    """The NodeClaim ``c`` once launched (its cheapest offering) and not yet initialized: labelled with the launched
    type's labels and offering, its pods counted, the rest of the launched type's allocatable free."""
    cand = launch_candidates(c.requirements, c.instance_types)[0]
    it, off = cand.instance_type, cand.offering
    labels = {**it.labels, LABEL_ZONE: off.zone, LABEL_CAPACITY_TYPE: off.capacity_type,
              LABEL_NODEPOOL: c.template.nodepool}
    for k in c.requirements.keys():
        v = single(c, k)
        if v is not None and k not in labels:
            labels[k] = v
    labels.update(extra_labels or {})
    name = name or c.hostname
    labels[LABEL_HOSTNAME] = name
    return ExistingNode(name=name, labels=labels, taints=tuple(Taint.from_obj(t) for t in taints),
                        allocatable=dict(it.allocatable), requested=dict(c.requests), nodepool=c.template.nodepool,
                        bound_pods=list(c.pods), initialized=initialized)


def in_flight_all(r: Results, prefix: str = "nc") -> list[ExistingNode]:
    return [in_flight(c, f"{prefix}-{i}") for i, c in enumerate(r.new_nodeclaims)]


def zones_of(r: Results, existing: list[ExistingNode] = (), selector=WEB) -> dict[str, int]:
    return domain_counts(r, LABEL_ZONE, selector, {n.name: n.labels for n in existing})


# =====================================================================================
# node selection against NodePool requirements and the catalog
# =====================================================================================


class TestNodePoolRequirements:
    def test_a_nodepool_requirement_labels_an_unconstrained_pods_node(self):
        np = nodepool(requirements=[expr("test-key", "In", "test-value")])
        p = pod()
        r = solve(template(np), [p])
        all_scheduled(r, [p])
        (c,) = r.new_nodeclaims
        assert single(c, "test-key") == "test-value"

    def test_provider_and_nodepool_constraints_intersect_before_the_pods_labels(self):
        # the only ios type is arm64; the NodePool allows amd64 only
        types = ladder() + [instance_type("ios-arm", arch="arm64", os="ios")]
        np = nodepool(requirements=[expr(LABEL_ARCH, "In", "amd64")])
        p = pod(required=[[expr(LABEL_OS, "In", "ios")]])
        r = solve(template(np, types), [p])
        assert r.new_nodeclaims == [] and p.key in r.errors
        r = solve(template(nodepool(), types), [p])  # without the arch requirement it does schedule
        assert type_names(r.new_nodeclaims[0]) == ["ios-arm"]

    def test_resources_only_an_excluded_arch_offers_are_not_scheduled(self):
        types = ladder((1, 2, 4, 8)) + [instance_type("big-arm", cpu=16, memory_gib=32, arch="arm64")]
        np = nodepool(requirements=[expr(LABEL_ARCH, "In", "amd64")])
        p = pod(cpu="14")
        r = solve(template(np, types), [p])
        assert r.new_nodeclaims == [] and p.key in r.errors
        r = solve(template(nodepool(), types), [p])
        assert type_names(r.new_nodeclaims[0]) == ["big-arm"]

    def test_pods_selecting_different_zones_get_one_nodeclaim_each(self):
        a = pod(node_selector={LABEL_ZONE: "test-zone-1"})
        b = pod(node_selector={LABEL_ZONE: "test-zone-2"})
        r = solve(template(), [a, b])
        all_scheduled(r, [a, b])
        assert len(r.new_nodeclaims) == 2
        assert offered_zones(claim_of(r, a)) == {"test-zone-1"}
        assert offered_zones(claim_of(r, b)) == {"test-zone-2"}


class TestProviderLabels:
    def fake_template(self):
        return template(nodepool(), fake.fake_instance_types(5), provider_labels=fake.WELL_KNOWN_LABELS)

    @pytest.mark.parametrize("size, cheapest", [("large", "fake-it-4"), ("small", "fake-it-0")])
    def test_a_provider_label_selects_the_types_carrying_it(self, size, cheapest):
        p = pod(node_selector={fake.LABEL_INSTANCE_SIZE: size})
        r = solve(self.fake_template(), [p])
        all_scheduled(r, [p])
        (c,) = r.new_nodeclaims
        assert type_names(c)[0] == cheapest
        assert all(it.labels[fake.LABEL_INSTANCE_SIZE] == size for it in c.instance_types)

    @pytest.mark.parametrize("size, itype", [("large", "fake-it-0"), ("small", "fake-it-4")])
    def test_a_provider_label_contradicting_the_instance_type_is_not_scheduled(self, size, itype):
        p = pod(node_selector={fake.LABEL_INSTANCE_SIZE: size, LABEL_INSTANCE_TYPE: itype})
        r = solve(self.fake_template(), [p])
        assert r.new_nodeclaims == [] and p.key in r.errors


class TestSizing:
    def test_an_init_container_larger_than_every_type_is_not_scheduled(self):
        m = pod_manifest(cpu="1", memory="1Gi")
        m["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"memory": "1Ti"}}}]
        p = compile_pod(m)
        r = solve(template(), [p])
        assert r.new_nodeclaims == [] and p.key in r.errors
        m["spec"]["initContainers"][0]["resources"]["requests"]["memory"] = "1Gi"
        ok = compile_pod(m)
        assert solve(template(), [ok]).errors == {}


class TestTaintsFromTolerations:
    def test_a_toleration_never_becomes_a_taint(self):
        p = pod(tolerations=[toleration("test-key", "Exists", effect="NoExecute")])
        tpl = template()
        r = solve(tpl, [p])
        all_scheduled(r, [p])
        (c,) = r.new_nodeclaims
        assert list(c.template.taints) == []


class Batches:
    """Provisioning batch after batch: each batch's NodeClaims are in flight for the next (launched at their
    cheapest offering, not yet initialized), and pods placed on them are counted there."""

    def __init__(self, templates, existing=()):
        self.templates = templates
        self.nodes: list[ExistingNode] = list(existing)
        self.launched = 0

    def provision(self, ps, **kw) -> Results:
        r = solve(self.templates, ps, existing=self.nodes, **kw)
        by_name = {n.name: n for n in self.nodes}
        for name, placed in r.existing.items():
            n = by_name[name]
            n.bound_pods.extend(placed)
            n.requested = res.add(n.requested, res.total(p.requests for p in placed))
        for c in r.new_nodeclaims:
            self.nodes.append(in_flight(c, f"nc-{self.launched}"))
            self.launched += 1
        return r

    def counts(self, key: str, selector=WEB) -> dict[str, int]:
        out: Counter = Counter()
        for n in self.nodes:
            k = sum(1 for p in n.bound_pods if all(p.labels.get(a) == b for a, b in selector.items()))
            if k and key in n.labels:
                out[n.labels[key]] += k
        return dict(out)


# =====================================================================================
# instance type selection on an assorted catalog
# =====================================================================================


def assorted(zones_for_arch=None) -> list:
    """Every arch × os × zone × capacity type, each a single offering, in two sizes; the cheapest of every
    combination costs the same (0.1), so only the constraints decide which offering is launched."""
    out = []
    for arch in ("amd64", "arm64"):
        for os_ in ("linux", "windows"):
            for zone in (zones_for_arch or {}).get(arch, ("test-zone-1", "test-zone-2", "test-zone-3")):
                for ct in (CAPACITY_ON_DEMAND, CAPACITY_SPOT):
                    for size in (1, 2):
                        from karpy.cloudprovider.types import Offering

                        out.append(instance_type(f"{arch}-{os_}-{zone}-{ct}-{size}", cpu=2 * size, memory_gib=4 * size,
                                                 arch=arch, os=os_,
                                                 offers=[Offering(zone=zone, capacity_type=ct, price=0.1 * size)]))
    return out


SELECTION = {
    "prov-os-windows": ([expr(LABEL_OS, "In", "windows")], {}),
    "pod-ct-spot": ([], {LABEL_CAPACITY_TYPE: CAPACITY_SPOT}),
    "prov-ct-ondemand-zone-1": ([expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_ON_DEMAND),
                                 expr(LABEL_ZONE, "In", "test-zone-1")], {}),
    "pod-ct-spot-zone-1": ([], {LABEL_CAPACITY_TYPE: CAPACITY_SPOT, LABEL_ZONE: "test-zone-1"}),
    "prov-spot-pod-zone-2": ([expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_SPOT)], {LABEL_ZONE: "test-zone-2"}),
    "prov-ondemand-zone-1-arm64-windows": ([expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_ON_DEMAND),
                                            expr(LABEL_ZONE, "In", "test-zone-1"), expr(LABEL_ARCH, "In", "arm64"),
                                            expr(LABEL_OS, "In", "windows")], {}),
    "prov-spot-zone-2-pod-amd64-linux": ([expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_SPOT),
                                          expr(LABEL_ZONE, "In", "test-zone-2")],
                                         {LABEL_ARCH: "amd64", LABEL_OS: "linux"}),
    "pod-spot-zone-2-amd64-linux": ([], {LABEL_CAPACITY_TYPE: CAPACITY_SPOT, LABEL_ZONE: "test-zone-2",
                                         LABEL_ARCH: "amd64", LABEL_OS: "linux"}),
}


class TestAssortedSelection:
    @pytest.mark.parametrize("case", list(SELECTION))
    def test_the_cheapest_allowed_offering_of_types_meeting_every_constraint(self, case):
        np_reqs, selector = SELECTION[case]
        p = pod(cpu="1", node_selector=selector)
        r = solve(template(nodepool(requirements=np_reqs), assorted()), [p])
        all_scheduled(r, [p])
        (c,) = r.new_nodeclaims
        wanted = {e["key"]: set(e["values"]) for e in np_reqs}
        for k, v in selector.items():
            wanted[k] = wanted.get(k, {v}) & {v}
        for it in c.instance_types:
            (off,) = it.offerings
            got = {LABEL_ARCH: it.labels[LABEL_ARCH], LABEL_OS: it.labels[LABEL_OS], LABEL_ZONE: off.zone,
                   LABEL_CAPACITY_TYPE: off.capacity_type}
            assert all(got[k] in v for k, v in wanted.items()), (it.name, wanted)
        cand = launch_candidates(c.requirements, c.instance_types)[0]
        assert cand.offering.price == pytest.approx(0.1)  # one of the cheapest
        assert cand.instance_type.name.endswith("-1")

    @pytest.mark.parametrize("where", ["pod", "nodepool"])
    def test_no_type_with_the_arch_in_the_zone_launches_nothing(self, where):
        types = assorted({"arm64": ("test-zone-1", "test-zone-3")})
        if where == "pod":
            t, p = template(nodepool(), types), pod(node_selector={LABEL_ARCH: "arm64", LABEL_ZONE: "test-zone-2"})
        else:
            t = template(nodepool(requirements=[expr(LABEL_ARCH, "In", "arm64")]), types)
            p = pod(node_selector={LABEL_ZONE: "test-zone-2"})
        r = solve(t, [p])
        assert r.new_nodeclaims == [] and p.key in r.errors
        assert solve(t, [pod(node_selector={LABEL_ZONE: "test-zone-1"})]).errors == {}


# =====================================================================================
# minValues over numeric operators and several keys
# =====================================================================================


GEN = "example.com/gen"


def gen_types():
    # gen 1..4 with growing size: gen-N has 2^(N-1) vCPU
    return [instance_type(f"gen-{g}", cpu=2 ** (g - 1), memory_gib=2 ** g, labels={GEN: str(g)}) for g in (1, 2, 3, 4)]


def gen_template(*reqs):
    return template(nodepool(requirements=list(reqs)), gen_types(), provider_labels=frozenset({GEN}))


class TestMinValuesOperators:
    def test_a_pod_narrowing_gt_below_min_values_is_not_scheduled(self):
        t = gen_template(expr(GEN, "Exists", min_values=2))
        ps = pods(2, cpu="100m", required=[[expr(GEN, "Gt", "3")]])
        r = solve(t, ps)
        assert r.new_nodeclaims == []
        assert all("minValues requirement is not met" in r.errors[p.key] for p in ps)
        ok = pods(2, cpu="100m", required=[[expr(GEN, "Gt", "2")]])  # gen 3 and 4: two values
        assert solve(t, ok).errors == {}

    def test_lt_min_values_splits_pods_to_keep_two_generations(self):
        t = gen_template(expr(GEN, "Lt", "4", min_values=2))
        ps = pods(2, cpu="1500m")  # one fits gen-2 and gen-3; both together only gen-3
        r = solve(t, ps)
        all_scheduled(r, ps)
        assert len(r.new_nodeclaims) == 2
        for c in r.new_nodeclaims:
            assert sorted(type_names(c)) == ["gen-2", "gen-3"]

    def test_lt_min_values_with_one_fitting_generation_is_not_scheduled(self):
        t = gen_template(expr(GEN, "Lt", "4", min_values=2))
        ps = pods(2, cpu="3")  # only gen-3 (4 vCPU) of gen < 4 fits
        r = solve(t, ps)
        assert r.new_nodeclaims == []
        assert all("minValues requirement is not met" in r.errors[p.key] for p in ps)

    def test_min_values_on_two_keys_are_both_kept(self):
        types = [instance_type("it-1", cpu=2, memory_gib=4, arch="amd64"),
                 instance_type("it-2", cpu=4, memory_gib=8, arch="arm64")]
        np = nodepool(requirements=[expr(LABEL_ARCH, "Exists", min_values=2),
                                    expr(LABEL_INSTANCE_TYPE, "In", "it-1", "it-2", min_values=1)])
        ps = pods(2, cpu="1500m")  # both together fit it-2 only, which would leave one arch
        r = solve(template(np, types), ps)
        all_scheduled(r, ps)
        assert len(r.new_nodeclaims) == 2
        for c in r.new_nodeclaims:
            assert {it.labels[LABEL_ARCH] for it in c.instance_types} == {"amd64", "arm64"}


# =====================================================================================
# topology spread
# =====================================================================================


def taints_policy(c: dict, policy: str) -> dict:
    return {**c, "nodeTaintsPolicy": policy}


def full(name: str, labels, bound=(), **kw) -> ExistingNode:
    """An existing node with room for nothing more."""
    return existing_node(name, labels=labels, cpu=0, memory_gib=0, pods_cap=len(bound), bound=bound, **kw)


class TestHostnameSpreadPacking:
    def test_a_wide_max_skew_packs_the_pods_onto_one_node(self):
        ps = pods(4, labels=WEB, spread=[spread(LABEL_HOSTNAME, 4, WEB)])
        r = solve(template(), ps)
        all_scheduled(r, ps)
        assert len(r.new_nodeclaims) == 1

    def test_two_deployments_with_their_own_hostname_spread_share_nodes(self):
        a = pods(2, labels={"app": "a"}, spread=[spread(LABEL_HOSTNAME, 1, {"app": "a"})])
        b = pods(2, labels={"app": "b"}, spread=[spread(LABEL_HOSTNAME, 1, {"app": "b"})])
        r = solve(template(), a + b)
        all_scheduled(r, a + b)
        assert len(r.new_nodeclaims) == 2
        for c in r.new_nodeclaims:
            assert sorted(p.labels["app"] for p in c.pods) == ["a", "b"]

    def test_two_deployments_of_different_archs_cannot_share(self):
        types = ladder() + ladder(arch="arm64", prefix="arm")
        a = pods(2, labels={"app": "a"}, spread=[spread(LABEL_HOSTNAME, 1, {"app": "a"})],
                 node_selector={LABEL_ARCH: "amd64"})
        b = pods(2, labels={"app": "b"}, spread=[spread(LABEL_HOSTNAME, 1, {"app": "b"})],
                 node_selector={LABEL_ARCH: "arm64"})
        r = solve(template(nodepool(), types), a + b)
        all_scheduled(r, a + b)
        assert len(r.new_nodeclaims) == 4


class TestCapacityTypeAndArchSpread:
    def test_a_required_capacity_type_leaves_the_other_domain_out(self):
        running = pod("od", labels=WEB)
        node = full("od-node", {LABEL_ZONE: "test-zone-1", LABEL_CAPACITY_TYPE: CAPACITY_ON_DEMAND}, [running])
        ps = pods(5, labels=WEB, spread=[spread(LABEL_CAPACITY_TYPE, 1, WEB)],
                  required=[[expr(LABEL_ZONE, "In", "test-zone-2"), expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_SPOT)]])
        r = solve(template(), ps, existing=[node])
        all_scheduled(r, ps)
        assert all(offered_capacity_types(c) == {CAPACITY_SPOT} for c in r.new_nodeclaims)

    def test_an_arch_no_nodepool_offers_still_counts_for_the_skew(self):
        running = pod("amd", labels=WEB)
        node = full("amd-node", {LABEL_ARCH: "amd64"}, [running])
        np = nodepool(requirements=[expr(LABEL_ARCH, "In", "arm64")])
        ps = pods(5, labels=WEB, spread=[spread(LABEL_ARCH, 1, WEB)])
        r = solve(template(np, ladder(arch="arm64")), ps, existing=[node])
        assert len(scheduled(r)) == 2  # arm64 reaches 2 against amd64's 1
        assert len(r.errors) == 3

    def test_pods_balance_over_values_split_between_nodepools(self):
        key = "capacity.spread.4-1"
        spot = nodepool("spot", requirements=[expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_SPOT),
                                              expr(key, "In", "2", "3", "4", "5")])
        od = nodepool("od", requirements=[expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_ON_DEMAND), expr(key, "In", "1")])
        ps = pods(20, labels=WEB, spread=[spread(key, 1, WEB)])
        r = solve([template(spot), template(od)], ps)
        all_scheduled(r, ps)
        assert domain_counts(r, key, WEB) == {v: 4 for v in ("1", "2", "3", "4", "5")}
        by_ct = Counter()
        for c in r.new_nodeclaims:
            (ct,) = offered_capacity_types(c)
            by_ct[ct] += len(c.pods)
        assert by_ct == {CAPACITY_SPOT: 16, CAPACITY_ON_DEMAND: 4}

    def test_node_selectors_limit_capacity_type_domains(self):
        c = spread(LABEL_CAPACITY_TYPE, 1, WEB)
        s = pods(5, labels=WEB, spread=[c], node_selector={LABEL_CAPACITY_TYPE: CAPACITY_SPOT})
        o = pods(5, labels=WEB, spread=[c], node_selector={LABEL_CAPACITY_TYPE: CAPACITY_ON_DEMAND})
        b = Batches(template())
        r = b.provision(s + o)
        all_scheduled(r, s + o)
        assert b.counts(LABEL_CAPACITY_TYPE) == {CAPACITY_SPOT: 5, CAPACITY_ON_DEMAND: 5}

    def test_node_affinity_limits_capacity_type_domains(self):
        c = spread(LABEL_CAPACITY_TYPE, 1, WEB)
        b = Batches(template())
        b.provision(pods(3, labels=WEB, spread=[c], required=[[expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_SPOT)]]))
        assert b.counts(LABEL_CAPACITY_TYPE) == {CAPACITY_SPOT: 3}
        b.provision([pod(labels=WEB, spread=[c])])
        assert b.counts(LABEL_CAPACITY_TYPE) == {CAPACITY_SPOT: 3, CAPACITY_ON_DEMAND: 1}
        r = b.provision(pods(5, labels=WEB, spread=[c]))
        assert r.errors == {}
        assert b.counts(LABEL_CAPACITY_TYPE) == {CAPACITY_SPOT: 5, CAPACITY_ON_DEMAND: 4}


class TestCombinedSpreads:
    def test_a_zone_only_a_nodepool_without_capacity_offers_still_counts(self):
        a = nodepool("a", requirements=[expr(LABEL_ZONE, "In", "test-zone-1", "test-zone-2")])
        bpool = nodepool("b", requirements=[expr(LABEL_ZONE, "In", "test-zone-3")], limits={"cpu": "0"})
        cs = [spread(LABEL_ZONE, 1, WEB), spread(LABEL_HOSTNAME, 1, WEB, when="ScheduleAnyway")]
        ps = pods(10, labels=WEB, spread=cs)
        r = solve([template(a), template(bpool)], ps)
        assert domain_counts(r, LABEL_ZONE, WEB) == {"test-zone-1": 1, "test-zone-2": 1}
        assert sorted(len(c.pods) for c in r.new_nodeclaims) == [1, 1]
        assert len(r.errors) == 8

    def test_capacity_type_and_hostname_spreads_over_batches(self):
        cs = [spread(LABEL_CAPACITY_TYPE, 1, WEB), spread(LABEL_HOSTNAME, 3, WEB)]
        b = Batches(template())
        for n, want in ((2, [1, 1]), (3, [2, 3]), (5, [5, 5]), (11, [10, 11])):
            r = b.provision(pods(n, labels=WEB, spread=cs))
            assert r.errors == {}
            assert sorted(b.counts(LABEL_CAPACITY_TYPE).values()) == want
            assert max(b.counts(LABEL_HOSTNAME).values()) <= 3

    def test_capacity_type_zone_and_hostname_spreads_over_growing_batches(self):
        cs = [spread(LABEL_CAPACITY_TYPE, 1, WEB), spread(LABEL_ZONE, 2, WEB), spread(LABEL_HOSTNAME, 3, WEB)]
        b = Batches(template(nodepool(), assorted()))
        for i in range(1, 15):
            r = b.provision(pods(i, labels=WEB, spread=cs, cpu="100m"))
            assert r.errors == {}, i
            for key, skew in ((LABEL_CAPACITY_TYPE, 1), (LABEL_ZONE, 2), (LABEL_HOSTNAME, 3)):
                counts = b.counts(key)
                domains = {CAPACITY_SPOT, CAPACITY_ON_DEMAND} if key == LABEL_CAPACITY_TYPE else (
                    {"test-zone-1", "test-zone-2", "test-zone-3"} if key == LABEL_ZONE else set(counts))
                values = [counts.get(d, 0) for d in domains]
                assert max(values) - min(values) <= skew, (i, key, counts)


class TestNodeTaintsPolicy:
    KEY = "fake-label"

    def test_ignore_counts_tainted_nodes_domains(self):
        t = template(nodepool(labels={self.KEY: "baz"}), provider_labels=frozenset())
        nodes = [existing_node(f"n{i}", labels={self.KEY: v}, cpu=0.1, taints=[taint("taintname", "taintvalue")])
                 for i, v in enumerate(["foo", "bar"])]
        ps = pods(5, labels=WEB, cpu="1", spread=[taints_policy(spread(self.KEY, 1, WEB), "Ignore")])
        r = solve(t, ps, existing=nodes)
        assert domain_counts(r, self.KEY, WEB) == {"baz": 1}
        assert len(r.errors) == 4

    def pools(self):
        plain = nodepool("plain", requirements=[expr(self.KEY, "In", "foo")])
        tainted = nodepool("tainted", requirements=[expr(LABEL_CAPACITY_TYPE, "Exists"), expr(self.KEY, "In", "bar")],
                           taints=[taint("taint-key", "taint-value")])
        return [template(plain, provider_labels=frozenset()), template(tainted, provider_labels=frozenset())]

    @pytest.mark.parametrize("policy, counts, pending", [pytest.param("Ignore", {"foo": 1}, 1, id="Ignore"),
                                                         pytest.param("Honor", {"foo": 2}, 0, id="Honor")])
    def test_a_tainted_nodepools_domain(self, policy, counts, pending):
        ps = pods(2, labels=WEB, spread=[taints_policy(spread(self.KEY, 1, WEB), policy)])
        r = solve(self.pools(), ps)
        assert domain_counts(r, self.KEY, WEB) == counts
        assert len(r.errors) == pending

    def test_tainted_nodepools_sharing_a_domain(self):
        tpls = [template(nodepool(f"np{i}", requirements=[expr(LABEL_CAPACITY_TYPE, "Exists"),
                                                          expr(self.KEY, "In", "foo", other)],
                                  taints=[taint("taint-key", f"nodepool-{i}")]), provider_labels=frozenset())
                for i, other in enumerate(("bar", "baz"))]
        c = taints_policy(spread(self.KEY, 1, WEB), "Honor")
        ps = [p for i in range(2) for p in pods((i + 1) * 2, labels=WEB, spread=[c],
                                                 tolerations=[toleration("taint-key", value=f"nodepool-{i}",
                                                                         effect="NoSchedule")])]
        r = solve(tpls, ps)
        all_scheduled(r, ps)
        counts = domain_counts(r, self.KEY, WEB)
        # the two-pod group spreads over foo/bar, the four-pod group over foo/baz: 3, 2 and 1 between them
        assert sorted(counts.values()) == [1, 2, 3] and set(counts) == {"foo", "bar", "baz"}
        assert counts["bar"] == 1


# =====================================================================================
# pod affinity and anti-affinity
# =====================================================================================


class TestPodAffinityMore:
    def test_empty_pod_affinity_and_anti_affinity_schedule(self):
        m = pod_manifest(cpu="1")
        m["spec"]["affinity"] = {"podAffinity": {}, "podAntiAffinity": {}}
        p = compile_pod(m)
        r = solve(template(), [p])
        all_scheduled(r, [p])

    def test_zone_anti_affinity_to_a_pod_of_the_same_batch_leaves_the_anti_pod_pending(self):
        target = pod("target", labels=WEB)
        anti = pod("anti", pod_anti_affinity=[affinity_term(LABEL_ZONE, WEB)])
        r = solve(template(), [target, anti])
        assert placement(r, target) is not None
        assert placement(r, anti) is None and anti.key in r.errors

    def test_zone_anti_affinity_schedules_once_the_targets_zone_is_known(self):
        target = pod("target", labels=WEB)
        anti = pod("anti", pod_anti_affinity=[affinity_term(LABEL_ZONE, WEB)])
        b = Batches(template())
        r = b.provision([target, anti])
        assert anti.key in r.errors
        (node,) = b.nodes
        r = b.provision([anti])
        assert r.errors == {}
        (c,) = r.new_nodeclaims
        assert node.labels[LABEL_ZONE] not in offered_zones(c)

    def test_a_preferred_affinity_gives_way_to_a_required_hostname_spread(self):
        ps = pods(3, labels=WEB, spread=[spread(LABEL_HOSTNAME, 1, WEB)],
                  preferred_pod_affinity=[(50, affinity_term(LABEL_HOSTNAME, WEB))])
        r = solve(template(), ps)
        all_scheduled(r, ps)
        assert len(r.new_nodeclaims) == 3

    def test_zone_affinity_to_an_unconstrained_target_of_the_same_batch(self):
        target = pod("target", labels=WEB)
        followers = pods(10, pod_affinity=[affinity_term(LABEL_ZONE, WEB)])
        b = Batches(template())
        r = b.provision([target] + followers)
        assert placement(r, target) is not None
        assert all(f.key in r.errors for f in followers)
        zone = b.nodes[0].labels[LABEL_ZONE]
        r = b.provision(followers)
        assert r.errors == {}
        for n in b.nodes:
            assert n.labels[LABEL_ZONE] == zone
        assert sum(len(n.bound_pods) for n in b.nodes) == 11

    @pytest.mark.parametrize("seed", range(10))
    def test_a_chain_of_dependent_affinities_schedules_in_one_batch(self, seed):
        import random

        def on_host_with(app):
            return [affinity_term(LABEL_HOSTNAME, {"app": app})]

        chain = [pod(f"db-{seed}", labels={"app": "db"}),
                 pod(f"web-{seed}", labels={"app": "web"}, pod_affinity=on_host_with("db")),
                 pod(f"cache-{seed}", labels={"app": "cache"}, pod_affinity=on_host_with("web")),
                 pod(f"ui-{seed}", labels={"app": "ui"}, pod_affinity=on_host_with("cache"))]
        random.Random(seed).shuffle(chain)
        r = solve(template(), chain)
        all_scheduled(r, chain)
        assert len(r.new_nodeclaims) == 1

    def test_an_empty_namespace_selector_matches_every_namespace(self):
        other = compile_pod(pod_manifest("target", namespace="other-ns", labels=WEB, cpu="1"))
        term = {**affinity_term(LABEL_HOSTNAME, WEB), "namespaceSelector": {}}
        follower = pod("follower", cpu="1", pod_affinity=[term])
        r = solve(template(), [other, follower])
        all_scheduled(r, [other, follower])
        assert claim_of(r, follower) is claim_of(r, other)
        r = solve(template(), [other, pod("f2", cpu="1", pod_affinity=[affinity_term(LABEL_HOSTNAME, WEB)])])
        assert "default/f2" in r.errors  # without the selector only its own namespace counts


# =====================================================================================
# NodeClaims in flight and existing nodes
# =====================================================================================


class TestInFlight:
    def test_an_in_flight_nodeclaim_takes_pods_whose_zones_allow_it(self):
        first = solve(template(), [pod(cpu="100m", node_selector={LABEL_ZONE: "test-zone-2"})])
        node = in_flight(first.new_nodeclaims[0], "inflight")
        assert node.labels[LABEL_ZONE] == "test-zone-2"
        two = pod(cpu="100m", required=[[expr(LABEL_ZONE, "In", "test-zone-1", "test-zone-2")]])
        r = solve(template(), [two], existing=[node])
        assert placement(r, two) == "inflight" and r.new_nodeclaims == []
        three = pod(cpu="100m", required=[[expr(LABEL_ZONE, "In", "test-zone-1", "test-zone-3")]])
        r = solve(template(), [three], existing=[node])
        assert r.existing == {} and len(r.new_nodeclaims) == 1

    def test_zones_balance_with_in_flight_nodeclaims(self):
        c = spread(LABEL_ZONE, 1, WEB)
        b = Batches(template())
        b.provision(pods(4, labels=WEB, spread=[c]))
        assert sorted(b.counts(LABEL_ZONE).values()) == [1, 1, 2]
        r = b.provision(pods(5, labels=WEB, spread=[c]))
        assert r.errors == {} and r.new_nodeclaims == []
        assert b.counts(LABEL_ZONE) == {z: 3 for z in ("test-zone-1", "test-zone-2", "test-zone-3")}

    def test_a_startup_taint_does_not_keep_pods_off_an_in_flight_node(self):
        startup = taint("example.com/booting")
        np = nodepool(startup_taints=[startup])
        first = solve(template(np), [pod(cpu="100m")])
        # registered, not initialized: the startup taint is still on the node
        node = in_flight(first.new_nodeclaims[0], "booting", initialized=False)
        p = pod(cpu="100m")
        r = solve(template(np), [p], existing=[node])
        assert placement(r, p) == "booting" and r.new_nodeclaims == []

    def test_the_initialized_node_is_tried_first(self):
        # 100 nodes with room (registered or still in flight alike); only n057 is initialized
        nodes = [existing_node(f"n{i:03}", labels={LABEL_ZONE: "test-zone-1"}, cpu=4) for i in range(100)]
        for i, n in enumerate(nodes):
            n.initialized = i == 57
        p = pod(cpu="1")
        r = solve(template(), [p], existing=nodes)
        assert placement(r, p) == "n057"

    def test_a_daemonset_not_strictly_compatible_with_an_existing_node_is_not_charged_there(self):
        ds = pod("ds", cpu="100", required=[[expr(LABEL_ZONE, "In", "test-zone-1")]])
        tpl = template(nodepool(), ladder(), daemons=[ds])  # no type holds the daemon's 100 vCPU
        node = existing_node("nozone", cpu=1, memory_gib=4)
        assert LABEL_ZONE not in node.labels
        one, two = pod("one", cpu="1"), pod("two", cpu="1")
        r = solve(tpl, [one, two], existing=[node])
        assert placement(r, one) == "nozone" or placement(r, two) == "nozone"
        assert len(r.errors) == 1 and r.new_nodeclaims == []

    def test_self_zone_affinity_joins_the_in_flight_nodeclaim(self):
        aff = [affinity_term(LABEL_ZONE, WEB)]
        b = Batches(template())
        r = b.provision([pod("first", labels=WEB, pod_affinity=aff)])
        assert r.errors == {}
        r = b.provision([pod("second", labels=WEB, pod_affinity=aff)])
        assert r.errors == {} and r.new_nodeclaims == []
        assert len(b.nodes) == 1 and len(b.nodes[0].bound_pods) == 2


class TestDaemonSetsOnNewNodes:
    @pytest.mark.parametrize("label", ["karpenter.sh/initialized", "karpenter.sh/registered"])
    def test_a_daemonset_waiting_for_a_karpenter_lifecycle_label_counts(self, label):
        ds = pod("ds", cpu="1", required=[[expr(label, "In", "true")]])
        tpl = template(nodepool(), ladder(), daemons=[ds])
        p = pod(cpu="1500m")
        r = solve(tpl, [p])
        all_scheduled(r, [p])
        (c,) = r.new_nodeclaims
        assert type_names(c)[0] == "std-4"  # 1.5 vCPU + the daemon's 1 vCPU: std-2 is too small
        assert c.requests[res.CPU] == 2500
        assert label not in c.requirements.keys()

    def test_both_lifecycle_daemonsets_count_together(self):
        dss = [pod("ds-i", cpu="1", required=[[expr("karpenter.sh/initialized", "In", "true")]]),
               pod("ds-r", cpu="1", required=[[expr("karpenter.sh/registered", "In", "true")]])]
        r = solve(template(nodepool(), ladder(), daemons=dss), [pod(cpu="1500m")])
        (c,) = r.new_nodeclaims
        assert c.requests[res.CPU] == 3500 and type_names(c)[0] == "std-4"
