"""The pod compiler of Karpenter's cluster state: a pod is compiled again only when what the engine reads changes."""

from __future__ import annotations

from karpy import resources as res
from karpy.state.pods import PodCompiler


def _pod(name: str, cpu: str, spec: dict | None = None, uid: str | None = None) -> dict:
    spec = spec if spec is not None else {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": uid or name, "labels": {"app": name}},
            "spec": spec}


def test_binding_a_pod_keeps_its_compiled_form_and_a_new_request_recompiles_it():
    comp = PodCompiler()
    pod = _pod("a", "1")
    info = comp.compile(pod)
    bound = {**pod, "spec": {**pod["spec"], "nodeName": "node-1"}}  # what a bind writes: a new spec, same fields
    assert comp.compile(bound) is info and info.obj is bound
    resized = {**bound, "spec": {**bound["spec"], "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}}
    again = comp.compile(resized)
    assert again is not info
    assert again.requests[res.CPU] == 2 * info.requests[res.CPU]


def test_pods_stamped_from_one_template_share_the_compiled_form_under_their_own_names():
    comp = PodCompiler()
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m"}}}]}
    labels = {"app": "web"}
    a, b = _pod("web-a", "", spec), _pod("web-b", "", spec)
    a["metadata"]["labels"] = b["metadata"]["labels"] = labels
    ia, ib = comp.compile(a), comp.compile(b)
    assert ia is not ib
    assert (ia.name, ib.name) == ("web-a", "web-b")
    assert ia.requests == ib.requests
    assert ib.obj is b


def test_pods_with_equal_but_separate_specs_are_compiled_each_with_their_own_requests():
    comp = PodCompiler()
    a, b = _pod("a", "1"), _pod("b", "3")
    assert comp.compile(a).requests[res.CPU] * 3 == comp.compile(b).requests[res.CPU]
