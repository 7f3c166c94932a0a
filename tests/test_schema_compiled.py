"""The compiled validators (``schema.walk``) against the schema interpreter (``schema.walk_interpreted``).

Every manifest of the examples and fixtures, and many damaged copies of each (values of the wrong type,
nulls, floats, unknown fields, missing fields, repeated items), must come out of both with the same object,
the same defaults and the same errors in the same order.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest
import yaml

from karpy.api import kinds, schema
from karpy.api.kinds import validate_manifest

ROOT = Path(__file__).resolve().parents[1]

ODD_VALUES = [None, 0, 1, -1, 2.0, 1.5, 2**40, "", "x", "100m", "1Gi", "-1", "Never", "1e400", True, False,
              [], {}, [None], ["x"], {"a": 1}, {"zz": None}, "2026-01-01T00:00:00Z", "a" * 300]


def _corpus() -> list[dict]:
    docs: list[dict] = []
    for f in sorted([*ROOT.glob("examples/**/*.yaml"), *ROOT.glob("tests/fixtures/**/*.yaml")]):
        try:
            for d in yaml.safe_load_all(f.read_text()):
                if isinstance(d, dict) and d.get("kind") in kinds.BY_KIND:
                    docs.append(d)
        except (yaml.YAMLError, UnicodeError):
            continue
    return docs


def _places(v: object, out: list, parent: object = None, key: object = None) -> list:
    out.append((parent, key))
    if isinstance(v, dict):
        for k, x in v.items():
            _places(x, out, v, k)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _places(x, out, v, i)
    return out


def _damaged(doc: dict, rng: random.Random) -> dict:
    d = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        places = [p for p in _places(d, []) if p[0] is not None]
        if not places:
            break
        parent, key = rng.choice(places)
        what = rng.random()
        if what < 0.55:
            parent[key] = copy.deepcopy(rng.choice(ODD_VALUES))
        elif what < 0.7 and isinstance(parent, dict):
            del parent[key]
        elif what < 0.85 and isinstance(parent, dict):
            parent[rng.choice(["unknownField", "a/b", "x]y", "name"])] = copy.deepcopy(rng.choice(ODD_VALUES))
        elif isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))  # a repeated item (list-set and list-map keys)
        else:
            parent[key] = copy.deepcopy(parent[key])
    return d


def _outcome(doc: dict, monkeypatch: pytest.MonkeyPatch, interpreted: bool) -> tuple:
    with monkeypatch.context() as m:
        if interpreted:
            m.setattr(schema, "walk", schema.walk_interpreted)
            m.setattr(kinds, "walk", schema.walk_interpreted)
        v = validate_manifest(copy.deepcopy(doc), seed="doc#0")
    return json.dumps(v.obj, default=repr), v.errors, v.kind, v.name, v.namespace


def test_corpus_is_not_empty():
    kinds_seen = {d["kind"] for d in _corpus()}
    assert {"NodePool", "Pod", "Deployment", "Scenario"} <= kinds_seen


@pytest.mark.parametrize("seed", range(4))
def test_compiled_validators_agree_with_the_interpreter(seed: int, monkeypatch: pytest.MonkeyPatch):
    rng = random.Random(seed)
    docs = _corpus()
    differ = []
    errors_seen = 0
    for doc in docs:
        for d in [doc] + [_damaged(doc, rng) for _ in range(6)]:
            compiled = _outcome(d, monkeypatch, interpreted=False)
            interpreted = _outcome(d, monkeypatch, interpreted=True)
            errors_seen += bool(interpreted[1])
            if compiled != interpreted:
                differ.append((d, compiled, interpreted))
    assert not differ, differ[0]
    assert errors_seen > len(docs)  # the damaged copies did reach the error paths


def test_a_schema_changed_after_use_is_validated_as_changed():
    node = schema.obj({"size": schema.integer(minimum=1)})
    ctx = schema.Ctx()
    schema.walk({"size": 0}, node, "", ctx)
    assert ctx.errors == [("size", "Invalid value: 0: must be greater than or equal to 1")]
    node.props["size"].minimum = -5
    node.max_props = 1
    ctx = schema.Ctx()
    schema.walk({"size": 0, "other": 1}, node, "", ctx)
    assert ctx.errors == [("other", 'unknown field "other"'), ("", "Too many: 2: must have at most 1 items")]


def test_a_schema_that_holds_itself():
    tree = schema.obj({"name": schema.string(min_len=1)})
    tree.props["children"] = schema.arr(tree)
    ctx = schema.Ctx()
    doc = {"name": "a", "children": [{"name": "b", "children": [{"name": ""}, None]}]}
    schema.walk(doc, tree, "", ctx)
    assert ctx.errors == [("children[0].children[0].name", "Required value"),
                          ("children[0].children[1]", "Invalid value: null: must be of type object, got null")]


def _pod(i: int, spec: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}"}, "spec": copy.deepcopy(spec)}


def test_pods_sharing_a_spec_each_get_their_own_validated_copy():
    spec = {"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "1"}}}]}
    results = [validate_manifest(_pod(i, spec)) for i in range(3)]
    assert all(r.errors == [] for r in results)
    assert results[0].obj["spec"]["restartPolicy"] == "Always"  # defaults applied to every copy
    assert all(r.obj["spec"] == results[0].obj["spec"] for r in results)
    first, second = results[1].obj["spec"], results[2].obj["spec"]
    assert first["containers"][0] is not second["containers"][0]
    first["containers"][0]["name"] = "changed"  # the simulation may change one pod's spec ...
    again = validate_manifest(_pod(9, spec))
    assert again.obj["spec"]["containers"][0]["name"] == "app"  # ... and no other pod sees it


def test_a_spec_with_errors_reports_them_every_time():
    good = {"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "1"}}}]}
    bad = {"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "-1"}}}]}
    expected = [("spec.containers[0].resources.requests.cpu", 'Invalid value: "-1": must be greater than or equal to 0')]
    for spec in (good, bad, good, bad):
        errors = validate_manifest(_pod(0, spec)).errors
        assert errors == (expected if spec is bad else [])


def test_specs_that_differ_only_in_types_are_not_confused():
    ints = {"containers": [{"name": "app", "image": "nginx"}], "priority": 1}
    floats = {"containers": [{"name": "app", "image": "nginx"}], "priority": 1.5}
    bools = {"containers": [{"name": "app", "image": "nginx"}], "priority": True}
    assert validate_manifest(_pod(0, ints)).errors == []
    assert validate_manifest(_pod(0, floats)).errors == [
        ("spec.priority", "Invalid value: 1.5: must be of type integer, got number")]
    assert validate_manifest(_pod(0, bools)).errors == [
        ("spec.priority", "Invalid value: true: must be of type integer, got boolean")]


def test_a_spec_holding_a_tuple_is_not_taken_for_one_holding_a_list():
    as_list = {"containers": [{"name": "app", "image": "nginx"}]}
    as_tuple = {"containers": ({"name": "app", "image": "nginx"},)}
    assert validate_manifest(_pod(0, as_list)).errors == []
    errors = validate_manifest(_pod(0, as_tuple)).errors
    assert errors and errors[0][0] == "spec.containers"
