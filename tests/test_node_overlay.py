"""NodeOverlay (karpenter.sh/v1alpha1, feature gate NodeOverlay): prices and capacities Karpenter sees, the
order and conflicts of overlays, their status, the CRD's validation, and the gate left off."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from karpy.api.loader import load_text
from karpy.cli import main
from karpy.cloudprovider.overlay import adjusted_price, evaluate, order_by_weight
from karpy.cloudprovider.types import InstanceType, Offering

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "node-overlay"

KWOK = """
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    metadata: {labels: {team: web}}
    spec:
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      - {key: kubernetes.io/os, operator: In, values: [linux]}
      - {key: kubernetes.io/arch, operator: In, values: [amd64]}
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
"""

GATE_ON = """
---
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: s}
spec:
  settings: {featureGates: {NodeOverlay: true}}
"""


def _pod(name: str = "app", cpu: str = "1", extra: dict | None = None) -> str:
    requests = {"cpu": cpu, **(extra or {})}
    return "---\n" + yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "nginx",
                                 "resources": {"requests": requests, **({"limits": extra} if extra else {})}}]}})


def _deployment(name: str = "web", cpu: str = "1") -> str:
    return "---\n" + yaml.safe_dump({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "nginx",
                                                       "resources": {"requests": {"cpu": cpu}}}]}}}})


def _overlay(name: str, spec: dict) -> str:
    return "---\n" + yaml.safe_dump({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
                                     "metadata": {"name": name}, "spec": spec})


def _family(values: list[str]) -> list[dict]:
    return [{"key": "karpenter.kwok.sh/instance-family", "operator": "In", "values": values}]


def _simulate(tmp_path: Path, text: str, *args: str):
    f = tmp_path / "in.yaml"
    f.write_text(text)
    return CliRunner().invoke(main, ["simulate", str(f), "-o", "json", *args])


def _items(r) -> list[dict]:
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["items"]


def _claims(r) -> list[dict]:
    return _items(r)[-1]["status"]["nodeClaims"]


def _condition(obj: dict, ctype: str) -> dict:
    return next(c for c in obj["status"]["conditions"] if c["type"] == ctype)


# --- the example: the c family doubled moves a 1-CPU pod off it ------------------------------------------

def test_doubling_the_c_family_moves_a_one_cpu_pod_to_the_s_family():
    r = CliRunner().invoke(main, ["simulate", str(EXAMPLE), "-o", "json"])
    claims = _claims(r)
    assert [c["instanceType"] for c in claims] == ["s-2x-amd64-linux"]
    assert claims[0]["pricePerHour"] == "0.0586"
    overlay = next(i for i in _items(r) if i["kind"] == "NodeOverlay")
    assert _condition(overlay, "ValidationSucceeded")["status"] == "True"
    assert _condition(overlay, "Ready")["status"] == "True"


def test_with_the_gate_off_the_overlay_is_ignored_and_said_so(tmp_path):
    d = tmp_path / "example"
    shutil.copytree(EXAMPLE, d)
    (d / "scenario.yaml").write_text((d / "scenario.yaml").read_text().replace("NodeOverlay: true",
                                                                                "NodeOverlay: false"))
    r = CliRunner().invoke(main, ["simulate", str(d), "-o", "json"])
    assert [c["instanceType"] for c in _claims(r)] == ["c-2x-amd64-linux"]
    assert "1 NodeOverlay ignored (c-family-doubled): the NodeOverlay feature gate is off" in r.stderr


def test_without_a_scenario_the_gate_is_off(tmp_path):
    r = _simulate(tmp_path, KWOK + _overlay("x", {"requirements": _family(["c"]), "price": "9"}) + _pod())
    assert [c["instanceType"] for c in _claims(r)] == ["c-2x-amd64-linux"]
    assert "NodeOverlay feature gate is off" in r.stderr


# --- prices ------------------------------------------------------------------------------------------------

M4X = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m-4x-amd64-linux"]}]


@pytest.mark.parametrize("spec,expected_type,price", [
    ({"requirements": M4X, "price": "0.01"}, "m-4x-amd64-linux", "0.0100"),  # a price replaces the catalog's
    ({"requirements": _family(["m"]), "priceAdjustment": "-0.02"}, "m-1x-amd64-linux", "0.0136"),  # an amount
    ({"requirements": M4X, "priceAdjustment": "-100%"}, "m-4x-amd64-linux", "0.0000"),  # a percentage
])
def test_a_price_overlay_decides_the_launch_and_the_printed_price(tmp_path, spec, expected_type, price):
    r = _simulate(tmp_path, KWOK + _overlay("m", spec) + _pod(cpu="500m") + GATE_ON)
    claims = _claims(r)
    assert [c["instanceType"] for c in claims] == [expected_type]
    assert claims[0]["pricePerHour"] == price
    claim = next(i for i in _items(r) if i["kind"] == "NodeClaim")
    assert claim["metadata"]["annotations"]["karpenter.sh/price-overlay-applied"] == "true"
    assert claim["metadata"]["annotations"]["karpy.dev/price-source"] == "overlay"


def test_adjusted_price_arithmetic():
    assert adjusted_price(1.0, "2.5") == 2.5
    assert adjusted_price(1.0, "+0.5") == 1.5
    assert adjusted_price(2.0, "+10%") == pytest.approx(2.2)
    assert adjusted_price(2.0, "-15%") == pytest.approx(1.7)
    assert adjusted_price(0.3, "-1") == 0.0


def test_requirements_over_nodepool_template_labels_and_nodepool_name(tmp_path):
    # team=web is the NodePool template's label: it matches; team=db matches no NodePool
    hit = {"requirements": [{"key": "team", "operator": "In", "values": ["web"]},
                            *_family(["c"])], "priceAdjustment": "+100%"}
    miss = {"requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["other"]}],
            "price": "0.001", "weight": 5}
    r = _simulate(tmp_path, KWOK + _overlay("hit", hit) + _overlay("miss", miss) + _pod() + GATE_ON)
    assert [c["instanceType"] for c in _claims(r)] == ["s-2x-amd64-linux"]


def test_consolidation_replaces_a_node_an_overlay_made_dear(tmp_path):
    # the pod lands on c-2x; then an overlay (applied at 5m) triples the c family: consolidation replaces it
    text = KWOK + _deployment() + f"""
---
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {{name: s}}
spec:
  settings: {{featureGates: {{NodeOverlay: true}}}}
  steps:
  - advance: 5m
  - apply:
    - {json.dumps(yaml.safe_load(_overlay("c-dear", {"requirements": _family(["c"]), "priceAdjustment": "+200%"})))}
  - advance: 30m
"""
    r = _simulate(tmp_path, text)
    claims = _claims(r)
    assert claims[0]["instanceType"] == "c-2x-amd64-linux" and claims[0]["deletedAt"] is not None
    assert claims[0]["disruptionReason"] == "Underutilized"
    assert claims[-1]["instanceType"] == "s-2x-amd64-linux" and claims[-1]["deletedAt"] is None


# --- capacity ------------------------------------------------------------------------------------------------

def test_a_capacity_overlay_lets_a_pod_asking_for_an_extended_resource_launch(tmp_path):
    pod = _pod(extra={"example.com/fpga": "1"})
    without = _simulate(tmp_path, KWOK + pod + GATE_ON)
    assert _claims(without) == []
    overlay = _overlay("fpga", {"requirements": _family(["m"]), "capacity": {"example.com/fpga": "2"}})
    r = _simulate(tmp_path, KWOK + overlay + pod + GATE_ON)
    claims = _claims(r)
    assert [c["instanceType"] for c in claims] == ["m-2x-amd64-linux"]
    claim = next(i for i in _items(r) if i["kind"] == "NodeClaim")
    assert claim["metadata"]["annotations"]["karpenter.sh/capacity-overlay-applied"] == "true"
    assert claim["status"]["capacity"]["example.com/fpga"] == "2"
    assert _items(r)[-1]["status"]["pods"]["pending"] == 0


# --- weights, order and conflicts -----------------------------------------------------------------------------

def _it(name: str, family: str, price: float = 1.0) -> InstanceType:
    return InstanceType(name, {"node.kubernetes.io/instance-type": name, "family": family}, {"cpu": 2000}, {},
                        [Offering("z1", "on-demand", price), Offering("z1", "spot", price / 2)])


def _ov(name: str, weight: int | None = None, **spec) -> dict:
    s = {"requirements": spec.pop("requirements", [{"key": "family", "operator": "Exists"}]), **spec}
    if weight is not None:
        s["weight"] = weight
    return {"metadata": {"name": name}, "spec": s}


NP = {"metadata": {"name": "np"}, "spec": {"template": {"metadata": {"labels": {}}}}}


def test_order_is_weight_first_then_the_later_name():
    names = [o["metadata"]["name"] for o in order_by_weight([_ov("a"), _ov("b"), _ov("c", 5), _ov("ba")])]
    assert names == ["c", "ba", "b", "a"]


def test_a_higher_weight_wins_and_a_lower_one_does_not_conflict():
    store = evaluate([_ov("low", 1, price="5"), _ov("high", 10, price="7")], [(NP, [_it("t", "x")])])
    [it] = store.apply("np", [_it("t", "x")])
    assert [o.price for o in it.offerings] == [7.0, 7.0]
    assert store.conflicts == ()


def test_equal_weights_on_the_same_offering_conflict_and_the_second_is_not_applied_anywhere():
    # b is taken first (later name); a conflicts on type t, so a's change of type u is dropped too
    a = _ov("a", 3, price="5", requirements=[{"key": "family", "operator": "In", "values": ["x", "y"]}])
    b = _ov("b", 3, price="7", requirements=[{"key": "family", "operator": "In", "values": ["x"]}])
    store = evaluate([a, b], [(NP, [_it("t", "x"), _it("u", "y", 2.0)])])
    t, u = store.apply("np", [_it("t", "x"), _it("u", "y", 2.0)])
    assert store.conflicts == ("a",)
    assert [o.price for o in t.offerings] == [7.0, 7.0]
    assert [o.price for o in u.offerings] == [2.0, 1.0]


def test_equal_weights_on_different_offerings_do_not_conflict():
    spot = _ov("spot", None, priceAdjustment="-50%",
               requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}])
    od = _ov("od", None, priceAdjustment="+1",
             requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}])
    store = evaluate([spot, od], [(NP, [_it("t", "x")])])
    [it] = store.apply("np", [_it("t", "x")])
    assert store.conflicts == ()
    assert [o.price for o in it.offerings] == [2.0, 0.25]


def test_capacity_overlays_merge_by_weight_and_conflict_on_a_shared_resource_at_equal_weight():
    hi = _ov("hi", 10, capacity={"example.com/a": "1"})
    lo = _ov("lo", 1, capacity={"example.com/a": "5", "example.com/b": "2"})
    store = evaluate([hi, lo], [(NP, [_it("t", "x")])])
    [it] = store.apply("np", [_it("t", "x")])
    assert it.capacity["example.com/a"] == 1 and it.capacity["example.com/b"] == 2
    clash = evaluate([_ov("p", 4, capacity={"example.com/a": "1"}), _ov("q", 4, capacity={"example.com/a": "2"})],
                     [(NP, [_it("t", "x")])])
    assert clash.conflicts == ("p",)


def test_a_requirement_on_a_label_nothing_defines_matches_nothing():
    store = evaluate([_ov("x", price="1", requirements=[{"key": "team", "operator": "In", "values": ["a"]}])],
                     [(NP, [_it("t", "x")])])
    assert store.updates == {}


def test_conflicting_and_invalid_overlays_are_reported_in_status(tmp_path):
    a = _overlay("a", {"requirements": _family(["c"]), "price": "1", "weight": 2})
    b = _overlay("b", {"requirements": _family(["c", "s"]), "price": "2", "weight": 2})
    long_key = "example.com/" + "k" * 70  # the CRD admits it; the name part is longer than 63 characters
    bad = _overlay("bad", {"requirements": [{"key": long_key, "operator": "Exists"}], "price": "1"})
    r = _simulate(tmp_path, KWOK + a + b + bad + _pod() + GATE_ON)
    overlays = {i["metadata"]["name"]: i for i in _items(r) if i["kind"] == "NodeOverlay"}
    assert _condition(overlays["b"], "ValidationSucceeded")["status"] == "True"
    cond = _condition(overlays["a"], "ValidationSucceeded")
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Conflict", "conflict with another overlay")
    assert _condition(overlays["a"], "Ready")["status"] == "False"
    cond = _condition(overlays["bad"], "ValidationSucceeded")
    assert (cond["status"], cond["reason"]) == ("False", "RuntimeValidation")
    assert "spec.requirements[0].key" in cond["message"] and "no more than 63 characters" in cond["message"]


# --- the CRD's validation ------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec,field,message", [
    ({"requirements": _family(["c"]), "price": "1", "priceAdjustment": "+1"}, "spec",
     "cannot set both 'price' and 'priceAdjustment'"),
    ({"requirements": _family(["c"]), "capacity": {"cpu": "1"}}, "spec.capacity", "invalid resource restricted"),
    ({"requirements": _family(["c"]), "priceAdjustment": "10%"}, "spec.priceAdjustment", "should match"),
    ({"requirements": _family(["c"]), "priceAdjustment": "-101%"}, "spec.priceAdjustment", "should match"),
    ({"requirements": _family(["c"]), "price": "-1"}, "spec.price", "should match"),
    ({"requirements": _family(["c"]), "weight": 0}, "spec.weight", "should be greater than or equal to 1"),
    ({"requirements": [{"key": "karpenter.sh/nodepool", "operator": "NotIn"}]}, "spec.requirements",
     "requirements with operator 'NotIn' must have a value defined"),
    ({"requirements": [{"key": "karpenter.sh/foo", "operator": "Exists"}]}, "spec.requirements[0].key",
     'label domain "karpenter.sh" is restricted'),
    ({"price": "1"}, "spec.requirements", "Required value"),
])
def test_the_crd_refuses_what_upstreams_crd_refuses(spec, field, message):
    result = load_text(_overlay("x", spec), "in.yaml")
    assert result.errors, spec
    e = result.errors[0]
    assert e.field == field and message in e.message, (e.field, e.message)


def test_a_bad_overlay_exits_2_naming_the_file_document_and_field(tmp_path):
    r = _simulate(tmp_path, KWOK + _overlay("x", {"requirements": _family(["c"]), "price": "1",
                                                  "priceAdjustment": "+1"}))
    assert r.exit_code == 2
    assert "in.yaml" in r.stderr and "NodeOverlay/x" in r.stderr and "cannot set both" in r.stderr
    assert "Traceback" not in r.output


def test_the_crd_file_is_published():
    crd = yaml.safe_load((Path(__file__).resolve().parent.parent / "deploy" / "crds" /
                          "karpenter.sh_nodeoverlays.yaml").read_text())
    assert crd["spec"]["names"]["shortNames"] == ["overlays"]
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1"
    assert [c["name"] for c in version["additionalPrinterColumns"]] == ["Ready", "Age", "Weight"]
    assert version["schema"]["openAPIV3Schema"]["properties"]["spec"]["required"] == ["requirements"]
