"""compile_pod: a pod manifest as the scheduler sees it (requests, constraints, class key)."""

from __future__ import annotations

import copy

import pytest

from karpy.scheduling.pods import LabelSelector, Taint, Toleration, compile_pod, untolerated
from karpy.scheduling.requirements import IN

GIB = 2**30
MIB = 2**20


def container(cpu=None, memory=None, limits=None, extra=None, restart_policy=None, ports=None, name="c"):
    c: dict = {"name": name, "image": "busybox", "resources": {}}
    req = {}
    if cpu is not None:
        req["cpu"] = cpu
    if memory is not None:
        req["memory"] = memory
    req.update(extra or {})
    if req:
        c["resources"]["requests"] = req
    if limits:
        c["resources"]["limits"] = limits
    if restart_policy:
        c["restartPolicy"] = restart_policy
    if ports:
        c["ports"] = ports
    return c


def manifest(containers=(), init=(), overhead=None, name="p", namespace=None, labels=None, **spec_extra) -> dict:
    spec: dict = {"containers": list(containers) or [container()]}
    if init:
        spec["initContainers"] = list(init)
    if overhead:
        spec["overhead"] = overhead
    spec.update(spec_extra)
    meta: dict = {"name": name, "labels": dict(labels or {})}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def requests_of(m: dict) -> dict:
    return compile_pod(m).requests


# ---------------------------------------------------------------------------------------
# requests


class TestRequests:
    def test_every_pod_takes_one_pod_slot(self):
        assert requests_of(manifest()) == {"pods": 1}

    def test_containers_add_up(self):
        r = requests_of(manifest([container("250m", "64Mi"), container("1", "1Gi"), container("0.5")]))
        assert r == {"cpu": 1750, "memory": GIB + 64 * MIB, "pods": 1}

    def test_quantities_in_any_notation(self):
        r = requests_of(manifest([container("1500m", "1G"), container(0.25, "512Ki")]))
        assert r["cpu"] == 1750
        assert r["memory"] == 10**9 + 512 * 1024

    def test_an_init_container_larger_than_the_app_sets_the_request(self):
        r = requests_of(manifest([container("1", "1Gi")], init=[container("2", "512Mi")]))
        # max per resource, not a sum
        assert r["cpu"] == 2000 and r["memory"] == GIB

    def test_init_containers_take_the_largest_not_the_sum(self):
        r = requests_of(manifest([container("100m")], init=[container("1"), container("3"), container("2")]))
        assert r["cpu"] == 3000

    def test_a_sidecar_runs_beside_the_app(self):
        sidecar = container("500m", "128Mi", restart_policy="Always")
        r = requests_of(manifest([container("1", "1Gi")], init=[sidecar]))
        assert r["cpu"] == 1500 and r["memory"] == GIB + 128 * MIB

    def test_init_container_after_a_sidecar_runs_with_it(self):
        # init (10) runs alone; the sidecar (4.9) then runs with the app (6): max(10, 10.9) = 10.9
        init = container("10", "4Gi")
        sidecar = container("4.9", "2.9Gi", restart_policy="Always")
        r = requests_of(manifest([container("6", "2Gi")], init=[init, sidecar]))
        assert r["cpu"] == 10900
        assert r["memory"] == pytest.approx(4.9 * GIB, abs=1)

    def test_sidecar_first_then_a_big_init_container(self):
        # sidecar (1) starts, then init (5) runs beside it: 6; afterwards app (2) + sidecar (1) = 3
        sidecar = container("1", restart_policy="Always")
        r = requests_of(manifest([container("2")], init=[sidecar, container("5")]))
        assert r["cpu"] == 6000

    def test_sidecar_first_then_a_small_init_container(self):
        # sidecar (1) + init (1) = 2 < app (5) + sidecar (1) = 6
        sidecar = container("1", restart_policy="Always")
        r = requests_of(manifest([container("5")], init=[sidecar, container("1")]))
        assert r["cpu"] == 6000

    def test_several_sidecars_accumulate(self):
        init = [container("1", restart_policy="Always"), container("2", restart_policy="Always"), container("4")]
        r = requests_of(manifest([container("1")], init=init))
        # during the last init container: 1 + 2 + 4 = 7; steady state: 1 + 2 + 1 = 4
        assert r["cpu"] == 7000

    def test_pod_overhead_is_added(self):
        r = requests_of(manifest([container("1", "1Gi")], overhead={"cpu": "250m", "memory": "64Mi"}))
        assert r["cpu"] == 1250 and r["memory"] == GIB + 64 * MIB

    def test_overhead_is_added_after_the_init_maximum(self):
        r = requests_of(manifest([container("1")], init=[container("3")], overhead={"cpu": "500m"}))
        assert r["cpu"] == 3500

    def test_runtime_class_overhead_applies_when_the_pod_has_none(self):
        m = manifest([container("1")])
        assert compile_pod(m, runtime_overhead={"cpu": 2000}).requests["cpu"] == 3000
        m2 = manifest([container("1")], overhead={"cpu": "100m"})
        # the pod's own (admission-filled) overhead wins
        assert compile_pod(m2, runtime_overhead={"cpu": 2000}).requests["cpu"] == 1100

    def test_limits_stand_in_for_missing_requests(self):
        r = requests_of(manifest([container(limits={"cpu": "2", "memory": "1Gi"})]))
        assert r["cpu"] == 2000 and r["memory"] == GIB

    def test_explicit_requests_win_over_limits(self):
        r = requests_of(manifest([container("500m", limits={"cpu": "2", "memory": "1Gi"})]))
        assert r["cpu"] == 500 and r["memory"] == GIB

    def test_limits_default_init_container_requests_too(self):
        r = requests_of(manifest([container("1")], init=[container(limits={"cpu": "4"})]))
        assert r["cpu"] == 4000

    def test_extended_resources(self):
        gpu = container("1", extra={"nvidia.com/gpu": "1"})
        r = requests_of(manifest([gpu, container(limits={"nvidia.com/gpu": "2", "example.com/fpga": "1"})]))
        assert r["nvidia.com/gpu"] == 3
        assert r["example.com/fpga"] == 1

    def test_zero_requests_are_dropped(self):
        r = requests_of(manifest([container(extra={"foo.com/weird": "0"}, limits={"foo.com/weird": "0"})]))
        assert "foo.com/weird" not in r

    def test_pod_level_resources_replace_the_container_total(self):
        m = manifest(
            [container("5", "1Gi")],
            init=[container("6", "2Gi"), container("4", "2Gi", restart_policy="Always")],
            resources={"requests": {"cpu": "9.9", "memory": "3.9Gi"}, "limits": {"cpu": "10", "memory": "4Gi"}},
        )
        r = requests_of(m)
        assert r["cpu"] == 9900
        assert r["memory"] == pytest.approx(3.9 * GIB, abs=1)


# ---------------------------------------------------------------------------------------
# constraints


class TestConstraints:
    def test_namespace_defaults_to_default(self):
        p = compile_pod(manifest())
        assert p.namespace == "default" and p.key == "default/p"
        assert compile_pod(manifest(namespace="team-a")).key == "team-a/p"

    def test_node_selector_becomes_in_requirements(self):
        p = compile_pod(manifest(nodeSelector={"kubernetes.io/arch": "arm64", "team": "a"}))
        r = p.strict_requirements()
        assert r.get("kubernetes.io/arch").values == {"arm64"} and r.get("team").operator == IN

    def test_required_terms_are_kept_in_order_and_only_the_first_applies(self):
        terms = [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
        ]
        p = compile_pod(manifest(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}))
        assert [t.get("zone").values for t in p.required_terms] == [{"a"}, {"b"}]
        assert p.strict_requirements().get("zone").values == {"a"}

    def test_preferences_are_ordered_heaviest_first_and_only_in_the_soft_view(self):
        prefs = [
            {"weight": 1, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["light"]}]}},
            {"weight": 50, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["heavy"]}]}},
            {"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["mid"]}]}},
        ]
        p = compile_pod(manifest(affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": prefs}}))
        assert [w for w, _ in p.preferred_terms] == [50, 10, 1]
        assert p.requirements().get("zone").values == {"heavy"}
        assert not p.strict_requirements().has("zone")

    def test_match_fields_on_metadata_name_pins_the_hostname(self):
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}
        p = compile_pod(manifest(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}))
        assert p.strict_requirements().get("kubernetes.io/hostname").values == {"node-1"}

    def test_host_ports_are_collected_from_all_containers(self):
        c1 = container(ports=[{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81}])
        c2 = container(ports=[{"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"}], name="d")
        init = container(ports=[{"containerPort": 9000, "hostPort": 9000}], name="i")
        p = compile_pod(manifest([c1, c2], init=[init]))
        assert p.host_ports == {("0.0.0.0", 8080, "TCP"), ("10.0.0.1", 53, "UDP"), ("0.0.0.0", 9000, "TCP")}

    def test_topology_spread_defaults(self):
        p = compile_pod(manifest(topologySpreadConstraints=[{"topologyKey": "zone", "labelSelector": {"matchLabels": {"a": "b"}}}]))
        (c,) = p.spread
        assert c.max_skew == 1 and c.when_unsatisfiable == "DoNotSchedule"
        assert c.node_affinity_policy == "Honor" and c.node_taints_policy == "Ignore" and c.min_domains is None

    def test_match_label_keys_narrow_the_selector_to_the_pods_own_value(self):
        tsc = {"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["rev", "absent"]}
        p = compile_pod(manifest(labels={"app": "web", "rev": "v2"}, topologySpreadConstraints=[tsc]))
        sel = p.spread[0].selector
        assert sel.matches({"app": "web", "rev": "v2"})
        assert not sel.matches({"app": "web", "rev": "v1"})
        assert not sel.matches({"app": "web"})

    def test_affinity_terms_default_to_the_pods_namespace(self):
        term = {"topologyKey": "zone", "labelSelector": {"matchLabels": {"a": "b"}}}
        aff = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
        p = compile_pod(manifest(namespace="ns1", affinity=aff))
        assert p.anti_affinity[0].namespaces == {"ns1"}
        term2 = dict(term, namespaces=["x", "y"])
        p2 = compile_pod(manifest(namespace="ns1", affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term2]}}))
        assert p2.affinity[0].namespaces == {"x", "y"}
        term3 = dict(term, namespaceSelector={})
        p3 = compile_pod(manifest(namespace="ns1", affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term3]}}))
        assert p3.affinity[0].namespaces is None  # an empty namespaceSelector means every namespace

    def test_preferred_pod_affinity_terms_are_ordered_by_weight(self):
        def wt(w, v):
            return {"weight": w, "podAffinityTerm": {"topologyKey": "zone", "labelSelector": {"matchLabels": {"v": v}}}}

        aff = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [wt(5, "a"), wt(80, "b"), wt(20, "c")]}}
        p = compile_pod(manifest(affinity=aff))
        assert [t.weight for t in p.preferred_affinity] == [80, 20, 5]


class TestLabelSelector:
    def test_operators(self):
        sel = LabelSelector(
            {
                "matchLabels": {"app": "web"},
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["fe", "be"]},
                    {"key": "env", "operator": "NotIn", "values": ["dev"]},
                    {"key": "team", "operator": "Exists"},
                    {"key": "legacy", "operator": "DoesNotExist"},
                ],
            }
        )
        good = {"app": "web", "tier": "fe", "team": "x"}
        assert sel.matches(good)
        assert sel.matches({**good, "env": "prod"})
        assert not sel.matches({**good, "env": "dev"})
        assert not sel.matches({**good, "app": "api"})
        assert not sel.matches({**good, "tier": "db"})
        assert not sel.matches({k: v for k, v in good.items() if k != "team"})
        assert not sel.matches({**good, "legacy": "1"})

    def test_an_empty_selector_matches_everything(self):
        assert LabelSelector({}).matches({"anything": "at all"})
        assert LabelSelector({}).matches({})


class TestTolerations:
    @pytest.mark.parametrize(
        "tol, taint, expected",
        [
            ({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}, ("k", "v", "NoSchedule"), True),
            ({"key": "k", "value": "v"}, ("k", "v", "NoExecute"), True),  # operator defaults to Equal; empty effect matches all
            ({"key": "k", "operator": "Equal", "value": "w"}, ("k", "v", "NoSchedule"), False),
            ({"key": "k", "operator": "Exists"}, ("k", "v", "NoSchedule"), True),
            ({"key": "k", "operator": "Exists", "effect": "NoExecute"}, ("k", "v", "NoSchedule"), False),
            ({"key": "other", "operator": "Exists"}, ("k", "v", "NoSchedule"), False),
            ({"operator": "Exists"}, ("k", "v", "NoExecute"), True),
            ({"operator": "Exists", "effect": "NoSchedule"}, ("k", "v", "NoExecute"), False),
        ],
    )
    def test_tolerates(self, tol, taint, expected):
        assert Toleration.from_obj(tol).tolerates(Taint(*taint)) is expected

    def test_prefer_no_schedule_never_blocks_a_daemon_check(self):
        taints = (Taint("soft", "", "PreferNoSchedule"), Taint("hard", "", "NoSchedule"))
        assert untolerated((), taints) == Taint("hard", "", "NoSchedule")
        assert untolerated((Toleration.from_obj({"key": "hard", "operator": "Exists"}),), taints) is None


# ---------------------------------------------------------------------------------------
# class keys


def base_manifest() -> dict:
    return manifest(
        [container("1", "1Gi", ports=[{"containerPort": 80, "hostPort": 8080}])],
        labels={"app": "web"},
        nodeSelector={"team": "a"},
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1", "z2"]}]}]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}}
                ],
            },
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "db"}}}
                ]
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}
                ],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "podAffinityTerm": {"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "web"}}}}
                ],
            },
        },
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}],
        topologySpreadConstraints=[
            {"topologyKey": "zone", "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}
        ],
    )


def _spec(m):
    return m["spec"]


def _aff(m):
    return m["spec"]["affinity"]


MUTATIONS = {
    "namespace": lambda m: m["metadata"].__setitem__("namespace", "other"),
    "labels": lambda m: m["metadata"]["labels"].__setitem__("tier", "fe"),
    "cpu request": lambda m: _spec(m)["containers"][0]["resources"]["requests"].__setitem__("cpu", "2"),
    "memory request": lambda m: _spec(m)["containers"][0]["resources"]["requests"].__setitem__("memory", "2Gi"),
    "extended resource": lambda m: _spec(m)["containers"][0]["resources"].__setitem__("limits", {"nvidia.com/gpu": "1"}),
    "init container": lambda m: _spec(m).__setitem__("initContainers", [container("4")]),
    "overhead": lambda m: _spec(m).__setitem__("overhead", {"cpu": "100m"}),
    "node selector": lambda m: _spec(m)["nodeSelector"].__setitem__("team", "b"),
    "required term": lambda m: _aff(m)["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"
    ][0].__setitem__("values", ["z3"]),
    "extra required term": lambda m: _aff(m)["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"].append(
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z3"]}]}
    ),
    "preference weight": lambda m: _aff(m)["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0].__setitem__("weight", 20),
    "preference": lambda m: _aff(m)["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"][
        "matchExpressions"
    ][0].__setitem__("operator", "NotIn"),
    "toleration": lambda m: _spec(m)["tolerations"][0].__setitem__("value", "db"),
    "spread skew": lambda m: _spec(m)["topologySpreadConstraints"][0].__setitem__("maxSkew", 2),
    "spread key": lambda m: _spec(m)["topologySpreadConstraints"][0].__setitem__("topologyKey", "kubernetes.io/hostname"),
    "spread when": lambda m: _spec(m)["topologySpreadConstraints"][0].__setitem__("whenUnsatisfiable", "ScheduleAnyway"),
    "spread selector": lambda m: _spec(m)["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"].__setitem__("app", "api"),
    "spread minDomains": lambda m: _spec(m)["topologySpreadConstraints"][0].__setitem__("minDomains", 3),
    "spread nodeAffinityPolicy": lambda m: _spec(m)["topologySpreadConstraints"][0].__setitem__("nodeAffinityPolicy", "Ignore"),
    "pod affinity key": lambda m: _aff(m)["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0].__setitem__(
        "topologyKey", "kubernetes.io/hostname"
    ),
    "pod affinity selector": lambda m: _aff(m)["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"][
        "matchLabels"
    ].__setitem__("app", "cache"),
    "pod affinity namespaces": lambda m: _aff(m)["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0].__setitem__(
        "namespaces", ["elsewhere"]
    ),
    "anti-affinity": lambda m: _aff(m)["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0].__setitem__(
        "topologyKey", "zone"
    ),
    "preferred anti-affinity": lambda m: _aff(m)["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0].__setitem__(
        "weight", 50
    ),
    "host port": lambda m: _spec(m)["containers"][0]["ports"][0].__setitem__("hostPort", 9090),
    "host port protocol": lambda m: _spec(m)["containers"][0]["ports"][0].__setitem__("protocol", "UDP"),
}


class TestClassKey:
    def test_identical_pods_share_a_class(self):
        a = base_manifest()
        b = base_manifest()
        b["metadata"]["name"] = "another-name"
        b["metadata"]["uid"] = "1234"
        b["metadata"]["annotations"] = {"note": "not scheduling relevant"}
        b["spec"]["containers"][0]["image"] = "nginx"
        assert compile_pod(a).class_key == compile_pod(b).class_key

    def test_key_is_insensitive_to_map_order(self):
        a = base_manifest()
        b = base_manifest()
        b["spec"]["nodeSelector"] = {"x": "1", "team": "a"}
        a["spec"]["nodeSelector"] = {"team": "a", "x": "1"}
        b["metadata"]["labels"] = {"z": "1", "app": "web"}
        a["metadata"]["labels"] = {"app": "web", "z": "1"}
        assert compile_pod(a).class_key == compile_pod(b).class_key

    def test_the_same_requests_from_different_container_splits_share_a_class(self):
        a = manifest([container("1", "1Gi"), container("1", "1Gi")])
        b = manifest([container("2", "2Gi")])
        assert compile_pod(a).class_key == compile_pod(b).class_key

    @pytest.mark.parametrize("what", sorted(MUTATIONS))
    def test_any_scheduling_relevant_difference_splits_the_class(self, what):
        a = base_manifest()
        b = copy.deepcopy(a)
        MUTATIONS[what](b)
        assert compile_pod(a).class_key != compile_pod(b).class_key, what
