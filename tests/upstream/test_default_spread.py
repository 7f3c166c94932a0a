"""Cluster-level default topology spread (Scenario ``settings.schedulerConfig.podTopologySpread.defaultConstraints``).

Upstream: topology_test.go "DefaultConstraints" and defaultconstraints_test.go. A pod that declares no
topologySpreadConstraints of its own gets the configured defaults, with a selector deduced from its controlling
ReplicaSet or StatefulSet (as kube-scheduler's PodTopologySpread plugin does); a pod with no such owner gets none.
Karpenter's scheduling simulation and the simulated kube-scheduler apply the same defaults, so the NodeClaims
Karpenter launches are the ones kube-scheduler binds the pods to: the simulation tests assert where every pod is
bound at the end of a ``karpy simulate`` run. The injector tests compile single pods as both schedulers read them.
"""

from __future__ import annotations

from collections import Counter

from karpy.scheduling.default_spread import DefaultSpread
from karpy.scheduling.pods import compile_pod
from karpy.state.pods import PodCompiler
from test_lifecycle import advance, simulate
from test_simulate import kwok_nodeclass, node, nodepool, pod, pod_spec, scenario

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
ZONES = ("test-zone-a", "test-zone-b", "test-zone-c")
ZONE_DEFAULT = {"topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "maxSkew": 1}
HOSTNAME_DEFAULT = {"topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule", "maxSkew": 1}
APP = {"app": "web"}


def zoned_pool(zones=ZONES) -> dict:
    np = nodepool()
    np["spec"]["template"]["spec"]["requirements"].append({"key": ZONE, "operator": "In", "values": list(zones)})
    return np


def replicaset(name: str, replicas: int, labels: dict, *, cpu="500m", selector: dict | None = None,
               kind: str = "ReplicaSet", **spec) -> dict:
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": selector or {"matchLabels": dict(labels)},
                     "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec(cpu, None, **spec)}}}


def run(defaults, *docs, zones=ZONES, steps=()):
    settings = {"schedulerConfig": {"podTopologySpread": {"defaultConstraints": list(defaults)}}} if defaults else None
    return simulate([kwok_nodeclass(), zoned_pool(zones), *docs, scenario([*steps, advance("2m")], settings=settings)])


def placed(out, prefix: str) -> dict[str, str | None]:
    """pod name -> the node it is bound to (None: pending), for the pods whose name starts with ``prefix``."""
    return {n: node_ for n, node_ in out.bound_pods().items() if n.startswith(prefix)}


def zone_counts(out, prefix: str) -> list[int]:
    ps = placed(out, prefix)
    assert None not in ps.values(), ps
    return sorted(Counter(out.lives[n].zone for n in ps.values()).values())


# --- topology_test.go "DefaultConstraints": where the pods land --------------------------------------------------


def test_default_zonal_spread_applies_to_a_pod_without_constraints():
    out = run([ZONE_DEFAULT], replicaset("web", 4, APP))
    assert zone_counts(out, "web-") == [1, 1, 2]


def test_default_hostname_spread_puts_each_pod_on_its_own_node():
    out = run([HOSTNAME_DEFAULT], replicaset("web", 3, APP))
    ps = placed(out, "web-")
    assert len(ps) == 3 and None not in ps.values() and len(set(ps.values())) == 3


def test_without_defaults_the_same_pods_share_one_node():
    out = run(None, replicaset("web", 3, APP))
    ps = placed(out, "web-")
    assert len(ps) == 3 and len(set(ps.values())) == 1 and None not in ps.values()


def test_a_pod_with_its_own_constraints_keeps_them():
    own = [{"topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule", "maxSkew": 3, "labelSelector":
            {"matchLabels": APP}}]
    out = run([HOSTNAME_DEFAULT], replicaset("web", 3, APP, topologySpreadConstraints=own))
    ps = placed(out, "web-")
    assert len(ps) == 3 and None not in ps.values() and len(set(ps.values())) == 1


def test_min_domains_is_carried_through_the_default():
    # minDomains 3 with two reachable zones: the global minimum counts as 0, so each zone takes one pod
    out = run([{**ZONE_DEFAULT, "minDomains": 3}], replicaset("web", 3, APP), zones=ZONES[:2])
    ps = placed(out, "web-")
    bound = [n for n in ps.values() if n is not None]
    assert len(ps) == 3 and len(bound) == 2
    assert sorted(out.lives[n].zone for n in bound) == list(ZONES[:2])


def test_an_unsatisfiable_do_not_schedule_default_leaves_pods_pending():
    out = run([{**ZONE_DEFAULT, "minDomains": 3}], replicaset("web", 3, APP), zones=ZONES[:1])
    ps = placed(out, "web-")
    assert len(ps) == 3 and sum(n is not None for n in ps.values()) == 1


def test_a_schedule_anyway_default_is_relaxed():
    out = run([{**ZONE_DEFAULT, "minDomains": 3, "whenUnsatisfiable": "ScheduleAnyway"}], replicaset("web", 3, APP),
              zones=ZONES[:1])
    ps = placed(out, "web-")
    assert len(ps) == 3 and None not in ps.values()


def test_a_pod_with_no_owner_is_not_defaulted():
    bare = [pod(f"bare-{i}", "500m", labels=APP) for i in range(3)]
    out = run([HOSTNAME_DEFAULT], *bare)
    ps = placed(out, "bare-")
    assert len(ps) == 3 and None not in ps.values() and len(set(ps.values())) == 1


def test_pods_already_running_count_through_the_deduced_selector():
    # two of the ReplicaSet's pods run on a node in zone a (it fits exactly two); of the four added, two go to zone b
    # before zone a takes another: 3/3 (counting nothing would give 4/2, no default at all one node for all four)
    existing = node("existing", cpu="1", zone="test-zone-a")
    out = run([ZONE_DEFAULT], existing, replicaset("web", 2, APP), zones=ZONES[:2],
              steps=[advance("1m"), {"scale": {"kind": "ReplicaSet", "name": "web", "replicas": 6}}])
    ps = placed(out, "web-")
    assert len(ps) == 6 and None not in ps.values()
    assert list(ps.values()).count("existing") == 2
    zones = Counter("test-zone-a" if n == "existing" else out.lives[n].zone for n in ps.values())
    assert zones == {"test-zone-a": 3, "test-zone-b": 3}


def test_each_workload_spreads_on_its_own():
    out = run([ZONE_DEFAULT], replicaset("web", 3, APP), replicaset("api", 3, {"app": "api"}))
    assert zone_counts(out, "web-") == [1, 1, 1]
    assert zone_counts(out, "api-") == [1, 1, 1]


def test_each_deployment_revision_spreads_on_its_own():
    old = {"test": "test", "pod-template-hash": "old"}
    new = {"test": "test", "pod-template-hash": "new"}
    out = run([ZONE_DEFAULT], replicaset("rev-old", 3, old), replicaset("rev-new", 3, new))
    assert zone_counts(out, "rev-old-") == [1, 1, 1]
    assert zone_counts(out, "rev-new-") == [1, 1, 1]


def test_statefulset_pods_spread_through_the_statefulset_selector():
    out = run([HOSTNAME_DEFAULT], replicaset("db", 3, {"app": "db"}, kind="StatefulSet"))
    ps = placed(out, "db-")
    assert len(ps) == 3 and None not in ps.values() and len(set(ps.values())) == 3


# --- defaultconstraints_test.go: the selector deduced for each pod ------------------------------------------------

RS_UID = "rs-uid"


def owner_ref(kind="ReplicaSet", name="web", api_version="apps/v1", controller=True) -> dict:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": f"{name}-uid", "controller": controller}


def owned_pod(labels: dict, *refs, spread=None, name="p") -> dict:
    spec = pod_spec("100m")
    if spread:
        spec["topologySpreadConstraints"] = spread
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": name,
            "labels": dict(labels), "ownerReferences": list(refs)}, "spec": spec}


def injector(*owners, defaults=(ZONE_DEFAULT,)) -> PodCompiler:
    """A compiler with the defaults, whose owner lookup sees ``owners`` (the cluster's ReplicaSets/StatefulSets)."""
    store = {(o["kind"], o["metadata"].get("namespace", "default"), o["metadata"]["name"]): o for o in owners}
    c = PodCompiler()
    if defaults:
        c.default_spread = DefaultSpread(list(defaults), lambda kind, ns, name: store.get((kind, ns, name)))
    return c


def deduced(c: PodCompiler, p: dict):
    """The selector the pod's injected zone constraint carries, as (matchLabels, matchExpressions); None: no default."""
    info = c.compile(p)
    if not info.spread:
        return None
    (sc,) = info.spread
    assert sc.topology_key == ZONE
    return sc.selector.match_labels, sorted((k, op, tuple(sorted(v))) for k, op, v in sc.selector.expressions)


def test_a_replicasets_selector_is_deduced_not_the_pods_labels():
    rs = replicaset("web", 1, {"app": "web", "pod-template-hash": "abc123"})
    p = owned_pod({"app": "web", "pod-template-hash": "abc123", "extra": "ignored"}, owner_ref())
    assert deduced(injector(rs), p) == ({}, [("app", "In", ("web",)), ("pod-template-hash", "In", ("abc123",))])


def test_a_statefulsets_selector_ignores_the_pods_volatile_labels():
    ss = replicaset("db", 1, {"app": "db"}, kind="StatefulSet")
    p = owned_pod({"app": "db", "controller-revision-hash": "db-6f8c", "statefulset.kubernetes.io/pod-name": "db-0",
                   "apps.kubernetes.io/pod-index": "0"}, owner_ref("StatefulSet", "db"))
    assert deduced(injector(ss), p) == ({}, [("app", "In", ("db",))])


def test_a_replicasets_match_expressions_are_carried_verbatim():
    rs = replicaset("web", 1, APP, selector={"matchExpressions": [{"key": "app", "operator": "NotIn",
                                                                    "values": ["other"]}]})
    c = injector(rs)
    p = owned_pod(APP, owner_ref())
    assert deduced(c, p) == ({}, [("app", "NotIn", ("other",))])
    # and it is a NotIn: a pod labelled app=other is not counted, one without the label is
    (sc,) = c.compile(p).spread
    assert sc.selector.matches({"app": "web"}) and sc.selector.matches({}) and not sc.selector.matches({"app": "other"})


def test_an_unsupported_owner_kind_gives_no_default():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "batch", "namespace": "default"},
           "spec": {"selector": {"matchLabels": {"app": "batch"}}}}
    assert deduced(injector(job), owned_pod({"app": "batch"}, owner_ref("Job", "batch", "batch/v1"))) is None


def test_a_non_controller_owner_reference_is_ignored():
    rs = replicaset("web", 1, APP)
    assert deduced(injector(rs), owned_pod(APP, owner_ref(controller=False))) is None
    assert deduced(injector(rs), owned_pod(APP, owner_ref(controller=True))) is not None


def test_an_owner_that_no_longer_exists_gives_no_default():
    assert deduced(injector(), owned_pod(APP, owner_ref(name="does-not-exist"))) is None


def test_a_pod_with_its_own_constraints_is_left_untouched():
    own = [{"topologyKey": HOSTNAME, "whenUnsatisfiable": "ScheduleAnyway", "maxSkew": 5,
            "labelSelector": {"matchLabels": APP}}]
    p = owned_pod(APP, owner_ref(), spread=own)
    info = injector(replicaset("web", 1, APP)).compile(p)
    assert info.spread == compile_pod(p).spread
    (sc,) = info.spread
    assert (sc.topology_key, sc.max_skew, sc.when_unsatisfiable, sc.selector.match_labels) == \
        (HOSTNAME, 5, "ScheduleAnyway", APP)
    assert info.obj is p and "topologySpreadConstraints" in p["spec"] and p["spec"]["topologySpreadConstraints"] == own


def test_no_defaults_configured_is_a_no_op():
    p = owned_pod(APP, owner_ref())
    assert deduced(injector(replicaset("web", 1, APP), defaults=()), p) is None


def test_the_configured_fields_are_kept_on_the_injected_constraint():
    cfg = {"topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway", "maxSkew": 4, "minDomains": 3,
           "nodeTaintsPolicy": "Honor", "nodeAffinityPolicy": "Ignore"}
    p = owned_pod(APP, owner_ref())
    info = injector(replicaset("web", 1, APP), defaults=[cfg]).compile(p)
    (sc,) = info.spread
    assert (sc.max_skew, sc.when_unsatisfiable, sc.min_domains, sc.node_taints_policy, sc.node_affinity_policy) == \
        (4, "ScheduleAnyway", 3, "Honor", "Ignore")
    assert sc.selector.matches(APP) and not sc.selector.nil
    # the stored pod is not changed: the defaults exist only in what the schedulers read
    assert "topologySpreadConstraints" not in p["spec"] and info.obj is p


def test_pods_of_different_workloads_get_independent_selectors_in_one_pass():
    web, api = replicaset("web", 1, APP), replicaset("api", 1, {"app": "api"})
    c = injector(web, api)
    pw = owned_pod(APP, owner_ref(name="web"), name="w")
    pa = owned_pod({"app": "api"}, owner_ref(name="api"), name="a")
    orphan = owned_pod({"app": "orphan"}, name="o")
    assert deduced(c, pw) == ({}, [("app", "In", ("web",))])
    assert deduced(c, pa) == ({}, [("app", "In", ("api",))])
    assert deduced(c, orphan) is None
