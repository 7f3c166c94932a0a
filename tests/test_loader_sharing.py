"""Pods written out one by one share their equal specs and labels once loaded (karpy.api.loader), and the
simulation's pod compiler then compiles each shape once; what karpy simulate decides and prints is the same."""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml

from karpy.api import loader
from karpy.api.loader import load_text
from karpy.simulator.output import render_json
from karpy.simulator.sim import Simulation

NODECLASS = {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": "default"}}
NODEPOOL = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass",
                                                            "name": "default"}, "requirements": []}}}}


def pod(name: str, cpu: Any = "1", labels: dict | None = None, **spec_extra) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                            "labels": labels or {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                                     "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}], **spec_extra}}


def _pods(docs: list[dict]) -> dict[str, dict]:
    loaded = load_text(yaml.safe_dump_all(docs, sort_keys=False))
    assert not loaded.errors, loaded.errors
    return {d.name: d.obj for d in loaded.documents if d.kind == "Pod"}


def test_equal_pod_specs_and_labels_are_one_object_after_loading():
    pods = _pods([pod("a"), pod("b"), pod("c", cpu="2"), pod("d", labels={"app": "db"})])
    a, b, c, d = pods["a"], pods["b"], pods["c"], pods["d"]
    assert a["spec"] is b["spec"] and a["metadata"]["labels"] is b["metadata"]["labels"]
    assert c["spec"] is not a["spec"] and c["metadata"]["labels"] is a["metadata"]["labels"]
    assert d["spec"] is a["spec"] and d["metadata"]["labels"] is not a["metadata"]["labels"]
    # parts equal between different specs are shared too; names stay each pod's own
    assert c["spec"]["containers"][0]["image"] == a["spec"]["containers"][0]["image"]
    assert a["metadata"] is not b["metadata"] and a["metadata"]["name"] == "a"


def test_values_equal_in_python_but_not_in_json_stay_apart():
    # 1, 1.0 and true compare equal in Python, 0.0 and -0.0 too; keys in another order print differently
    table: dict = {}
    vals = [{"x": 1}, {"x": 1.0}, {"x": True}, {"x": 0.0}, {"x": -0.0}, {"a": 1, "b": 2}, {"b": 2, "a": 1},
            [1], [1.0], [[1]], [[1.0]]]
    shared = [loader._shared(copy.deepcopy(v), table) for v in vals]
    assert len({id(v) for v in shared}) == len(vals)
    for v, s in zip(vals, shared):
        assert json.dumps(s) == json.dumps(v)
    again = [loader._shared(copy.deepcopy(v), table) for v in vals]
    assert all(a is b for a, b in zip(shared, again))
    # pods with the same spec but their keys in another order keep their own order
    n1 = pod("n1", nodeSelector={"a": "1", "b": "2"})
    n2 = pod("n2", nodeSelector={"b": "2", "a": "1"})
    pods = _pods([n1, n2])
    assert list(pods["n2"]["spec"]["nodeSelector"]) == ["b", "a"]
    assert pods["n1"]["spec"]["containers"] is pods["n2"]["spec"]["containers"]


def test_shared_pods_simulate_as_separate_ones():
    """The same pods, loaded shared and as separate copies (the path pods created through the API take), end
    in the same cluster with the same output."""
    docs = [NODECLASS, NODEPOOL] + [pod(f"p{i}", cpu=["1", "2", "500m"][i % 3]) for i in range(12)]
    loaded = load_text(yaml.safe_dump_all(docs, sort_keys=False))
    assert not loaded.errors
    shared = [d.obj for d in loaded.documents]
    assert shared[2]["spec"] is shared[5]["spec"]
    separate = [copy.deepcopy(o) for o in shared]
    assert separate[2]["spec"] is not separate[5]["spec"]
    outs = []
    for objs in (shared, separate):
        sim = Simulation(objs, until=600.0)
        sim.run()
        outs.append(render_json(sim))
    assert outs[0] == outs[1]
    summary = [i for i in json.loads(outs[0])["items"] if i["kind"] == "SimulationSummary"][0]["status"]
    assert summary["pods"]["bound"] == 12
