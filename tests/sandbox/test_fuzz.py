"""Property-based fuzzing of what a client may send the sandbox: arbitrary JSON, YAML and JSON patches as bodies of
creates, updates and every patch type, against the sandbox's REST layer in this process (no sockets: thousands
of requests in seconds).

Whatever comes in, the answer is a Kubernetes Status of a client error (4xx) or a success -- never a 500 nor an
exception -- and afterwards every object of the kind still renders (a list and each get answer 200). Bounded:
``max_examples`` per property, no deadline per example, a derandomized run so CI sees the same cases."""

from __future__ import annotations

import json

import orjson
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from karpy.sandbox.rest import RestAPI  # noqa: E402
from karpy.sandbox.runtime import Sandbox  # noqa: E402

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

KINDS = {  # collection path, item path of "fuzzed", a valid object
    "configmaps": ("/api/v1/namespaces/default/configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                                             "metadata": {"name": "fuzzed"}, "data": {"a": "b"}}),
    "leases": ("/apis/coordination.k8s.io/v1/namespaces/default/leases",
               {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "fuzzed"},
                "spec": {"holderIdentity": "x"}}),
    "deployments": ("/apis/apps/v1/namespaces/default/deployments",
                    {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "fuzzed"},
                     "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "f"}},
                              "template": {"metadata": {"labels": {"app": "f"}},
                                           "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
    "nodepools": ("/apis/karpenter.sh/v1/nodepools", None),
}

_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
_keys = st.one_of(st.sampled_from(["metadata", "spec", "data", "name", "replicas", "kind", "apiVersion", "labels",
                                   "status", "managedFields", "template", "selector", "a", "", "/", "~1"]),
                  st.text(max_size=8))
json_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                             st.dictionaries(_keys, inner, max_size=5)),
                           max_leaves=30)
_pointer = st.lists(st.one_of(_keys, st.sampled_from(["0", "-", "1"])), max_size=4).map(
    lambda parts: "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts))
json_patch_ops = st.lists(st.fixed_dictionaries(
    {"op": st.sampled_from(["add", "remove", "replace", "move", "copy", "test", "bogus"]), "path": _pointer},
    optional={"from": _pointer, "value": json_values}), max_size=8)


@pytest.fixture(scope="module")
def rest():
    box = Sandbox([], karpenter=False)
    r = RestAPI(box.api, box.lock, box.clock)
    for path, obj in KINDS.values():
        if obj is not None:
            assert r.handle("POST", path, {"Content-Type": "application/json"}, orjson.dumps(obj)).status == 201
    return r


def _check(resp) -> None:
    assert resp.status < 500, (resp.status, resp.body)
    if resp.stream is None:
        resp.payload()  # it renders
    if resp.status >= 400 and isinstance(resp.body, dict):
        assert resp.body["kind"] == "Status" and resp.body["code"] == resp.status


def _still_renders(rest: RestAPI, path: str) -> None:
    lst = rest.handle("GET", path, {}, b"")
    assert lst.status == 200
    for item in orjson.loads(lst.payload())["items"]:
        got = rest.handle("GET", f"{path}/{item['metadata']['name']}", {}, b"")
        assert got.status == 200, got.body
        got.payload()


def _body(value) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # an integer past 64 bits: the JSON text of it
        return json.dumps(value).encode()


@SETTINGS
@given(kind=st.sampled_from(sorted(KINDS)), method=st.sampled_from(["POST", "PUT"]), body=json_values,
       dry=st.sampled_from(["", "?dryRun=All", "?dryRun=true", "?fieldValidation=Strict"]))
def test_any_json_body(rest, kind, method, body, dry):
    path = KINDS[kind][0]
    target = path if method == "POST" else f"{path}/fuzzed"
    _check(rest.handle(method, target + dry, {"Content-Type": "application/json"}, _body(body)))
    _still_renders(rest, path)


@SETTINGS
@given(kind=st.sampled_from(sorted(KINDS)), ops=json_patch_ops)
def test_any_json_patch(rest, kind, ops):
    path = KINDS[kind][0]
    _check(rest.handle("PATCH", f"{path}/fuzzed", {"Content-Type": "application/json-patch+json"}, _body(ops)))
    _still_renders(rest, path)


@SETTINGS
@given(kind=st.sampled_from(sorted(KINDS)), patch=json_values,
       ctype=st.sampled_from(["application/merge-patch+json", "application/strategic-merge-patch+json"]))
def test_any_merge_patch(rest, kind, patch, ctype):
    path = KINDS[kind][0]
    _check(rest.handle("PATCH", f"{path}/fuzzed", {"Content-Type": ctype}, _body(patch)))
    _still_renders(rest, path)


_yaml_texts = st.one_of(
    st.text(alphabet=st.sampled_from(list("abc:-[]{}&*!,'\"\n #|>0123456789")), max_size=200),
    json_values.map(lambda v: json.dumps(v)),
)


@SETTINGS
@given(kind=st.sampled_from(sorted(KINDS)), text=_yaml_texts, anchors=st.integers(min_value=0, max_value=12))
def test_any_apply_yaml(rest, kind, text, anchors):
    path, obj = KINDS[kind]
    head = "apiVersion: %s\nkind: %s\nmetadata: {name: fuzzed}\n" % (
        (obj or {}).get("apiVersion", "karpenter.sh/v1"), (obj or {}).get("kind", "NodePool"))
    # an alias ladder of the given height (9 ** anchors values), then the fuzzed text as a field
    ladder = "".join(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9 if i else ["x"] * 9) + "]\n" for i in range(anchors))
    body = (head + ladder + "extra: " + json.dumps(text) + "\n").encode()
    _check(rest.handle("PATCH", f"{path}/fuzzed?fieldManager=fuzz", {"Content-Type": "application/apply-patch+yaml"},
                       body))
    _check(rest.handle("PATCH", f"{path}/fuzzed?fieldManager=fuzz", {"Content-Type": "application/apply-patch+yaml"},
                       text.encode()))
    _still_renders(rest, path)
