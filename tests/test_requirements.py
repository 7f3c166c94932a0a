"""The node requirement algebra: single requirements, their intersection, and sets of them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from karpy.scheduling.requirements import (
    DOES_NOT_EXIST,
    EXISTS,
    GT,
    GTE,
    IN,
    LT,
    LTE,
    NOT_IN,
    Requirement,
    Requirements,
)

R = Requirement.new
ZONE = "topology.kubernetes.io/zone"


def reqs(*rs: Requirement) -> Requirements:
    return Requirements(rs)


# ---------------------------------------------------------------------------------------
# single requirements


class TestOperators:
    def test_in_allows_exactly_its_values(self):
        r = R("k", IN, ["a", "b"])
        assert r.has("a") and r.has("b")
        assert not r.has("c")
        assert r.operator == IN

    def test_not_in_allows_everything_else(self):
        r = R("k", NOT_IN, ["a"])
        assert not r.has("a")
        assert r.has("b") and r.has("anything")
        assert r.operator == NOT_IN

    def test_exists_allows_every_value(self):
        r = R("k", EXISTS)
        assert r.has("a") and r.has("") and r.has("42")
        assert r.operator == EXISTS

    def test_does_not_exist_allows_no_value(self):
        r = R("k", DOES_NOT_EXIST)
        assert not r.has("a") and not r.has("")
        assert r.operator == DOES_NOT_EXIST

    def test_values_are_stringified(self):
        assert R("k", IN, [1, 2]).has("2")

    @pytest.mark.parametrize(
        "op, n, inside, outside",
        [
            (GT, 8, ["9", "100"], ["8", "7", "-1"]),
            (LT, 8, ["7", "0", "-3"], ["8", "9"]),
            (GTE, 8, ["8", "9"], ["7"]),
            (LTE, 8, ["8", "-20"], ["9"]),
        ],
    )
    def test_numeric_bounds(self, op, n, inside, outside):
        r = R("k", op, [str(n)])
        for v in inside:
            assert r.has(v), (op, n, v)
        for v in outside:
            assert not r.has(v), (op, n, v)

    @pytest.mark.parametrize("op", [GT, LT, GTE, LTE])
    def test_bounds_reject_values_that_are_not_integers(self, op):
        r = R("k", op, ["5"])
        for v in ("five", "5.5", "", "5Gi"):
            assert not r.has(v)

    @pytest.mark.parametrize("op", [GT, LT, GTE, LTE])
    def test_bound_operators_need_an_integer(self, op):
        with pytest.raises(ValueError):
            R("k", op, ["abc"])
        with pytest.raises(ValueError):
            R("k", op, [])

    def test_unknown_operator_is_rejected(self):
        with pytest.raises(ValueError):
            R("k", "Like", ["a"])

    @pytest.mark.parametrize(
        "legacy, current",
        [
            ("failure-domain.beta.kubernetes.io/zone", "topology.kubernetes.io/zone"),
            ("failure-domain.beta.kubernetes.io/region", "topology.kubernetes.io/region"),
            ("beta.kubernetes.io/arch", "kubernetes.io/arch"),
            ("beta.kubernetes.io/os", "kubernetes.io/os"),
            ("beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type"),
        ],
    )
    def test_legacy_label_keys_are_normalised(self, legacy, current):
        assert R(legacy, IN, ["x"]).key == current
        r = Requirements.from_node_selector([{"key": legacy, "operator": "In", "values": ["x"]}])
        assert r.has(current) and not r.has(legacy)


class TestAllowsAbsent:
    @pytest.mark.parametrize(
        "op, values, expected",
        [
            (NOT_IN, ["a"], True),
            (DOES_NOT_EXIST, [], True),
            (IN, ["a"], False),
            (EXISTS, [], False),
            (GT, ["1"], False),
            (LT, ["1"], False),
            (GTE, ["1"], False),
            (LTE, ["1"], False),
        ],
    )
    def test_a_node_without_the_label_satisfies_only_not_in_and_does_not_exist(self, op, values, expected):
        assert R("k", op, values).allows_absent() is expected

    def test_a_bounded_not_in_does_not_allow_an_absent_label(self):
        # Gt 3 and NotIn [5]: a node without the label has no number to compare.
        r = R("k", GT, ["3"]).intersection(R("k", NOT_IN, ["5"]))
        assert r.operator == NOT_IN
        assert not r.allows_absent()


class TestIntersection:
    def test_in_and_in_keep_the_common_values(self):
        r = R("k", IN, ["a", "b", "c"]).intersection(R("k", IN, ["b", "c", "d"]))
        assert r.operator == IN and r.values == {"b", "c"}

    def test_in_and_not_in_subtract(self):
        r = R("k", IN, ["a", "b"]).intersection(R("k", NOT_IN, ["a"]))
        assert r.operator == IN and r.values == {"b"}

    def test_not_in_and_not_in_exclude_both(self):
        r = R("k", NOT_IN, ["a"]).intersection(R("k", NOT_IN, ["b"]))
        assert r.operator == NOT_IN and r.values == {"a", "b"}

    def test_exists_does_not_widen_an_in(self):
        r = R("k", IN, ["a"]).intersection(R("k", EXISTS))
        assert r.operator == IN and r.values == {"a"}

    def test_disjoint_in_sets_leave_nothing(self):
        r = R("k", IN, ["a"]).intersection(R("k", IN, ["b"]))
        assert not r.has("a") and not r.has("b")
        assert not R("k", IN, ["a"]).intersects(R("k", IN, ["b"]))

    def test_gt_and_lt_make_a_range(self):
        r = R("k", GT, ["2"]).intersection(R("k", LT, ["6"]))
        assert [v for v in map(str, range(0, 9)) if r.has(v)] == ["3", "4", "5"]

    def test_crossing_bounds_leave_nothing(self):
        a, b = R("k", GT, ["5"]), R("k", LT, ["5"])
        r = a.intersection(b)
        assert not any(r.has(str(v)) for v in range(-10, 20))
        assert not a.intersects(b)

    def test_bounds_filter_a_finite_set(self):
        r = R("k", GTE, ["4"]).intersection(R("k", IN, ["2", "4", "8", "x"]))
        assert r.operator == IN and r.values == {"4", "8"}

    def test_min_values_takes_the_larger(self):
        a = R("k", IN, ["a", "b", "c"], min_values=2)
        b = R("k", EXISTS, min_values=3)
        assert a.intersection(b).min_values == 3
        assert b.intersection(a).min_values == 3
        assert a.intersection(R("k", EXISTS)).min_values == 2


# ---------------------------------------------------------------------------------------
# property-based: intersection against pointwise membership on a finite universe


POOL = ["a", "b", "c", "0", "3", "5", "7", "10"]
# every integer the bounds can reach and a bit beyond, the pool, and values no requirement names
UNIVERSE = sorted(set(POOL) | {str(i) for i in range(-2, 13)} | {"fresh", "zzz", "5.5"})


@st.composite
def requirement(draw, key: str = "k") -> Requirement:
    op = draw(st.sampled_from([IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT, GTE, LTE]))
    mv = draw(st.none() | st.integers(min_value=1, max_value=4))
    if op in (IN, NOT_IN):
        values = draw(st.lists(st.sampled_from(POOL), min_size=1, max_size=4, unique=True))
    elif op in (GT, LT, GTE, LTE):
        values = [str(draw(st.integers(min_value=0, max_value=10)))]
    else:
        values = []
    return Requirement.new(key, op, values, min_values=mv)


def members(r: Requirement) -> set[str]:
    return {v for v in UNIVERSE if r.has(v)}


@settings(max_examples=150, deadline=None)
@given(requirement(), requirement())
def test_intersection_is_pointwise_and(a, b):
    both = a.intersection(b)
    for v in UNIVERSE:
        assert both.has(v) == (a.has(v) and b.has(v)), v


@settings(max_examples=150, deadline=None)
@given(requirement(), requirement())
def test_intersection_is_commutative(a, b):
    ab, ba = a.intersection(b), b.intersection(a)
    assert members(ab) == members(ba)
    assert ab.min_values == ba.min_values
    assert ab.allows_absent() == ba.allows_absent()


@settings(max_examples=150, deadline=None)
@given(requirement(), requirement(), requirement())
def test_intersection_is_associative(a, b, c):
    left = a.intersection(b).intersection(c)
    right = a.intersection(b.intersection(c))
    assert members(left) == members(right)
    assert left.min_values == right.min_values


@settings(max_examples=150, deadline=None)
@given(requirement())
def test_intersection_with_itself_and_with_exists_changes_nothing(a):
    assert members(a.intersection(a)) == members(a)
    assert members(a.intersection(Requirement.exists("k"))) == members(a)


@settings(max_examples=100, deadline=None)
@given(requirement(), requirement())
def test_intersects_agrees_with_the_intersection(a, b):
    common = members(a) & members(b)
    if common:
        # never a false "no"
        assert a.intersects(b) and b.intersects(a)
    if not (a.complement and b.complement):
        # with a finite side, the answer is exact
        assert a.intersects(b) == bool(common)
        assert b.intersects(a) == bool(common)
    elif a.gte is None and a.lte is None and b.gte is None and b.lte is None:
        # two unbounded complements always share some value
        assert a.intersects(b)
        assert "fresh" in common


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=-5, max_value=15), st.sampled_from(UNIVERSE))
def test_bound_operators_compare_as_integers(n, v):
    try:
        x = int(v)
    except ValueError:
        x = None
    assert R("k", GT, [str(n)]).has(v) == (x is not None and x > n)
    assert R("k", LT, [str(n)]).has(v) == (x is not None and x < n)
    assert R("k", GTE, [str(n)]).has(v) == (x is not None and x >= n)
    assert R("k", LTE, [str(n)]).has(v) == (x is not None and x <= n)


@settings(max_examples=100, deadline=None)
@given(requirement(), requirement())
def test_node_selector_round_trip_keeps_the_meaning(a, b):
    r = a.intersection(b)
    back = Requirements.from_node_selector(Requirements([r]).to_node_selector()).get("k")
    assert members(back) == members(r)
    assert back.min_values == r.min_values


@settings(max_examples=100, deadline=None)
@given(st.lists(requirement(), min_size=1, max_size=4))
def test_adding_requirements_on_one_key_is_order_independent(rs):
    forward = Requirements(rs).get("k")
    backward = Requirements(list(reversed(rs))).get("k")
    assert members(forward) == members(backward)
    expected = set(UNIVERSE)
    for r in rs:
        expected &= members(r)
    assert members(forward) == expected


@settings(max_examples=150, deadline=None)
@given(
    requirement("k1"),
    requirement("k2"),
    st.none() | st.sampled_from(UNIVERSE),
    st.none() | st.sampled_from(UNIVERSE),
)
def test_satisfied_by_labels_checks_every_key(r1, r2, v1, v2):
    labels = {}
    if v1 is not None:
        labels["k1"] = v1
    if v2 is not None:
        labels["k2"] = v2
    labels["other"] = "x"  # labels the requirements do not mention never matter

    def ok(r, v):
        return r.allows_absent() if v is None else r.has(v)

    assert reqs(r1, r2).satisfied_by_labels(labels) == (ok(r1, v1) and ok(r2, v2))


# ---------------------------------------------------------------------------------------
# sets of requirements


class TestRequirements:
    def test_adding_a_second_requirement_on_a_key_intersects(self):
        r = reqs(R(ZONE, IN, ["z1", "z2"]), R(ZONE, NOT_IN, ["z1"]))
        assert r.get(ZONE).values == {"z2"} and r.get(ZONE).operator == IN
        assert len(r) == 1

    def test_an_undefined_key_reads_as_exists(self):
        r = reqs()
        assert not r.has("k")
        assert r.get("k").operator == EXISTS and r.get("k").has("anything")

    def test_from_labels_pins_each_label(self):
        r = Requirements.from_labels({"a": "1", "b": "2"})
        assert r.get("a").values == {"1"} and r.get("b").values == {"2"}
        assert r.labels() == {"a": "1", "b": "2"}

    def test_labels_are_only_the_single_valued_in_requirements(self):
        r = reqs(R("one", IN, ["x"]), R("two", IN, ["x", "y"]), R("n", NOT_IN, ["x"]), R("e", EXISTS))
        assert r.labels() == {"one": "x"}

    def test_union_does_not_modify_either_side(self):
        a = reqs(R(ZONE, IN, ["z1", "z2"]))
        b = reqs(R(ZONE, IN, ["z2", "z3"]), R("k", IN, ["v"]))
        u = a.union(b)
        assert u.get(ZONE).values == {"z2"} and u.has("k")
        assert a.get(ZONE).values == {"z1", "z2"} and not a.has("k")
        assert b.get(ZONE).values == {"z2", "z3"}

    def test_copy_is_independent(self):
        a = reqs(R(ZONE, IN, ["z1", "z2"]))
        c = a.copy()
        c.add(R(ZONE, IN, ["z1"]))
        assert a.get(ZONE).values == {"z1", "z2"}

    def test_intersects_ignores_keys_only_one_side_has(self):
        assert reqs(R("a", IN, ["1"])).intersects(reqs(R("b", IN, ["2"]))) is None

    def test_intersects_reports_the_conflicting_key(self):
        why = reqs(R(ZONE, IN, ["z1"])).intersects(reqs(R(ZONE, IN, ["z2"])))
        assert why is not None and ZONE in why

    def test_two_requirements_that_both_allow_an_absent_label_are_compatible(self):
        node = reqs(R("k", DOES_NOT_EXIST))
        assert node.intersects(reqs(R("k", NOT_IN, ["a"]))) is None
        assert node.intersects(reqs(R("k", DOES_NOT_EXIST))) is None
        assert node.intersects(reqs(R("k", IN, ["a"]))) is not None
        assert node.intersects(reqs(R("k", EXISTS))) is not None


class TestCompatible:
    """``node.compatible(pod)``: can a node described by ``node`` satisfy ``pod``?"""

    def test_an_undefined_custom_key_the_pod_requires_is_not_satisfiable(self):
        node = reqs(R(ZONE, IN, ["z1"]))
        for pod_req in (R("team", IN, ["a"]), R("team", EXISTS), R("team", GT, ["1"])):
            why = node.compatible(reqs(pod_req))
            assert why is not None and '"team" does not have known values' in why

    def test_an_undefined_key_the_pod_excludes_is_fine(self):
        node = reqs(R(ZONE, IN, ["z1"]))
        assert node.compatible(reqs(R("team", NOT_IN, ["a"]))) is None
        assert node.compatible(reqs(R("team", DOES_NOT_EXIST))) is None

    def test_allow_undefined_lets_well_known_keys_through(self):
        node = reqs(R(ZONE, IN, ["z1"]))
        pod = reqs(R("node.kubernetes.io/instance-type", IN, ["m5.large"]))
        assert node.compatible(pod) is not None
        assert node.compatible(pod, allow_undefined={"node.kubernetes.io/instance-type"}) is None

    def test_allow_undefined_does_not_skip_a_defined_key_that_conflicts(self):
        node = reqs(R(ZONE, IN, ["z1"]))
        assert node.compatible(reqs(R(ZONE, IN, ["z2"])), allow_undefined={ZONE}) is not None
        assert node.compatible(reqs(R(ZONE, IN, ["z1", "z2"])), allow_undefined={ZONE}) is None

    def test_defined_keys_must_intersect(self):
        node = reqs(R("team", IN, ["a", "b"]))
        assert node.compatible(reqs(R("team", IN, ["b"]))) is None
        assert node.compatible(reqs(R("team", NOT_IN, ["a", "b"]))) is not None
        assert node.compatible(reqs(R("team", EXISTS))) is None
        assert node.compatible(reqs(R("team", DOES_NOT_EXIST))) is not None

    def test_numeric_requirements_against_a_defined_key(self):
        node = reqs(R("cpu", IN, ["2", "4", "8"]))
        assert node.compatible(reqs(R("cpu", GT, ["4"]))) is None
        assert node.compatible(reqs(R("cpu", GT, ["8"]))) is not None
        assert node.compatible(reqs(R("cpu", LT, ["2"]))) is not None
        assert node.compatible(reqs(R("cpu", LTE, ["2"]))) is None


class TestSatisfiedByLabels:
    def test_matching_and_mismatching_labels(self):
        r = reqs(R(ZONE, IN, ["z1", "z2"]), R("cpu", GT, ["2"]))
        assert r.satisfied_by_labels({ZONE: "z2", "cpu": "4"})
        assert not r.satisfied_by_labels({ZONE: "z3", "cpu": "4"})
        assert not r.satisfied_by_labels({ZONE: "z1", "cpu": "2"})

    def test_a_missing_label_fails_in_exists_and_bounds(self):
        assert not reqs(R("k", IN, ["a"])).satisfied_by_labels({})
        assert not reqs(R("k", EXISTS)).satisfied_by_labels({})
        assert not reqs(R("k", GTE, ["0"])).satisfied_by_labels({})

    def test_a_missing_label_satisfies_not_in_and_does_not_exist(self):
        assert reqs(R("k", NOT_IN, ["a"])).satisfied_by_labels({})
        assert reqs(R("k", DOES_NOT_EXIST)).satisfied_by_labels({})
        assert not reqs(R("k", DOES_NOT_EXIST)).satisfied_by_labels({"k": "a"})
        assert not reqs(R("k", NOT_IN, ["a"])).satisfied_by_labels({"k": "a"})


class TestNodeSelectorOutput:
    def test_bounds_and_exclusions_are_written_separately(self):
        r = R("cpu", GT, ["2"]).intersection(R("cpu", LT, ["9"])).intersection(R("cpu", NOT_IN, ["4"]))
        out = Requirements([r]).to_node_selector()
        ops = sorted((e["operator"], tuple(e.get("values", ()))) for e in out)
        assert ops == [("Gte", ("3",)), ("Lte", ("8",)), ("NotIn", ("4",))]

    def test_min_values_is_carried(self):
        out = Requirements([R("node.kubernetes.io/instance-type", EXISTS, min_values=3)]).to_node_selector()
        assert out == [{"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 3}]

    def test_string_form_mentions_operator_values_and_min_values(self):
        s = str(R(ZONE, IN, ["z2", "z1"], min_values=2))
        assert s == f"{ZONE} In [z1, z2] minValues 2"
