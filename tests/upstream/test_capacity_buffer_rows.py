"""Upstream's CapacityBuffer rows (feature gate ``CapacityBuffer``): the disruption suites' "Buffer Pods" and
"Buffer pod protection" contexts, and provisioning/buffers_test.go.

The disruption rows run through ``karpy simulate`` (the gate on, a KWOK cloud): nodes that hold a buffer's
virtual pods are kept as room, the others are not. The buffers_test.go rows exercise the functions of
``karpy.controllers.capacitybuffer`` that do what upstream's helpers do (which pods are virtual, which buffer
they stand for, how a scheduling pass is counted per buffer and per node, the ``Provisioning`` condition), and
through ``karpy simulate`` that virtual pods never get a pod event or a nomination.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from karpy.cli import main
from karpy.controllers import capacitybuffer as cb
from karpy.state.cluster import PodEntry

# --- through karpy simulate ------------------------------------------------------------------------------

NODECLASS = """
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
"""


def nodepool(sizes: str = "") -> str:
    only = f"\n      - {{key: node.kubernetes.io/instance-type, operator: In, values: [{sizes}]}}" if sizes else ""
    return f"""
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: default}}
spec:
  disruption: {{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 1m}}
  template:
    spec:
      requirements:
      - {{key: kubernetes.io/arch, operator: In, values: [amd64]}}
      - {{key: kubernetes.io/os, operator: In, values: [linux]}}
      - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
      - {{key: karpenter.kwok.sh/instance-family, operator: In, values: [c]}}{only}
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}
"""


def template(cpu: str, node_selector: str = "") -> str:
    selector = f"\n    nodeSelector: {{{node_selector}}}" if node_selector else ""
    return f"""
apiVersion: v1
kind: PodTemplate
metadata: {{name: chunk, namespace: default}}
template:
  spec:{selector}
    containers:
    - {{name: c, image: pause, resources: {{requests: {{cpu: '{cpu}', memory: 512Mi}}}}}}
"""


def buffer(spec: str = "{replicas: 1, podTemplateRef: {name: chunk}}") -> str:
    return f"""
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata: {{name: headroom, namespace: default}}
spec: {spec}
"""


def deployment(name: str, replicas: int, cpu: str) -> str:
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
      - {{name: app, image: nginx, resources: {{requests: {{cpu: '{cpu}', memory: 1Gi}}}}}}
"""


def scenario(steps: str = "") -> str:
    return f"""
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {{name: buffer-rows}}
spec:
  settings: {{featureGates: {{CapacityBuffer: true}}}}
  steps:
  - advance: 5m
{steps}"""


def indent(doc: str, by: int) -> str:
    return "\n".join(" " * by + line for line in doc.strip("\n").splitlines())


def apply_step(*docs: str) -> str:
    """A Scenario step applying the documents (each a list item of ``apply``)."""
    items = "\n".join("    - " + indent(d, 6).lstrip() for d in docs)
    return f"  - apply:\n{items}\n"


def simulate(tmp_path: Path, *docs: str, until: str = "1h") -> tuple[dict, list[dict]]:
    f = tmp_path / "in.yaml"
    f.write_text("\n---\n".join(d.strip("\n") for d in docs) + "\n")
    r = CliRunner().invoke(main, ["simulate", str(f), "-o", "json", "--until", until])
    assert r.exit_code == 0, r.output
    items = json.loads(r.stdout)["items"]
    return next(i for i in items if i["kind"] == "SimulationSummary")["status"], items


def alive(summary: dict) -> dict[str, str]:
    """Live NodeClaims: name -> instance type."""
    return {c["name"]: c["instanceType"] for c in summary["nodeClaims"] if c["deletedAt"] is None and not c["launchFailed"]}


def events(items: list[dict], reason: str) -> list[tuple[str, str]]:
    return [(e["involvedObject"]["name"], e["message"]) for e in items if e["kind"] == "Event" and e["reason"] == reason]


def kept_as_room(items: list[dict]) -> set[str]:
    return {name for name, msg in events(items, "Unconsolidatable") if "has buffer pods" in msg}


def conditions(items: list[dict]) -> dict[str, tuple[str, str]]:
    st = next(i for i in items if i["kind"] == "CapacityBuffer")["status"]
    return {c["type"]: (c["status"], c["reason"]) for c in st.get("conditions") or ()}


class TestConsolidationWithBufferPods:
    def test_a_node_with_real_and_buffer_pods_is_replaced_by_a_cheaper_one_that_holds_both(self, tmp_path):
        # a 5-CPU pod, a 1-CPU pod and a 0.5-CPU buffer chunk share a c-8x; once the 5-CPU pod goes, the node
        # is replaced by a c-2x that holds the 1-CPU pod and the chunk (1.5 CPU)
        s, items = simulate(tmp_path, NODECLASS, nodepool(), template("500m"), buffer(), deployment("big", 1, "5"),
                            deployment("small", 1, "1"),
                            scenario("  - scale: {kind: Deployment, name: big, replicas: 0}\n  - advance: 20m\n"))
        first = next(c for c in s["nodeClaims"] if c["instanceType"] == "c-8x-amd64-linux")
        [d] = s["disruptions"]
        assert (d["reason"], d["candidates"], d["outcome"]) == ("Underutilized", [first["name"]], "succeeded")
        assert list(alive(s).values()) == ["c-2x-amd64-linux"] and alive(s).keys() == set(d["replacements"])
        # the replacement was sized for the real pod and the buffer's virtual pod
        [(_, created)] = [e for e in events(items, "Created") if e[0] == d["replacements"][0]]
        assert 'for 2 pod(s), requests {"cpu":"1500m"' in created
        assert s["pods"]["pending"] == 0

    def test_a_buffer_only_node_is_never_a_consolidation_candidate(self, tmp_path):
        # the buffer's node exists first (a c-2x: the chunk asks for one); the workloads (too big for a c-2x)
        # then land on a c-8x; scaling the big one away replaces the c-8x by a c-4x, never the buffer's node
        later = apply_step(deployment("big", 1, "5"), deployment("small", 1, "2"))
        chunk = template("1500m", "node.kubernetes.io/instance-type: c-2x-amd64-linux")
        s, items = simulate(tmp_path, NODECLASS, nodepool(), chunk, buffer(),
                            scenario(later + "  - advance: 5m\n  - scale: {kind: Deployment, name: big, replicas: 0}\n"
                                     "  - advance: 20m\n"))
        [room] = [c["name"] for c in s["nodeClaims"] if c["instanceType"] == "c-2x-amd64-linux"
                  and c["name"] in kept_as_room(items)]
        [d] = s["disruptions"]
        assert d["reason"] == "Underutilized" and [alive(s)[r] for r in d["replacements"]] == ["c-4x-amd64-linux"]
        assert room not in d["candidates"]
        assert room in alive(s)
        assert s["pods"]["pending"] == 0


class TestEmptinessWithBufferPods:
    def test_only_the_node_holding_buffer_pods_is_protected(self, tmp_path):
        # one c-2x per 1.5-CPU pod: the chunk's node and the web pod's node; the web pod scaled away, its node
        # is empty and removed, the chunk's node stays
        s, items = simulate(tmp_path, NODECLASS, nodepool("c-2x-amd64-linux"), template("1500m"), buffer(),
                            deployment("web", 1, "1500m"),
                            scenario("  - scale: {kind: Deployment, name: web, replicas: 0}\n  - advance: 20m\n"))
        assert len(s["nodeClaims"]) == 2
        [d] = s["disruptions"]
        assert d["reason"] == "Empty" and d["outcome"] == "succeeded"
        [kept] = alive(s)
        assert kept not in d["candidates"] and kept in kept_as_room(items)

    def test_a_node_with_a_real_pod_and_buffer_pods_is_not_empty(self, tmp_path):
        s, items = simulate(tmp_path, NODECLASS, nodepool("c-2x-amd64-linux"), template("500m"), buffer(),
                            deployment("web", 1, "1"), scenario())
        assert len(alive(s)) == 1 and s["pods"]["bound"] == 1  # the pod and the chunk share the node
        assert s["disruptions"] == []

    def test_a_buffer_down_to_zero_chunks_no_longer_protects_its_node(self, tmp_path):
        # half of a 2-replica Deployment: one chunk and three c-2x; the Deployment scaled to 0 leaves the buffer
        # with zero chunks (BufferEmpty) and every node empty, so all three go
        s, items = simulate(tmp_path, NODECLASS, nodepool("c-2x-amd64-linux"), deployment("web", 2, "1500m"),
                            buffer("{percentage: 50, scalableRef: {kind: Deployment, name: web}}"),
                            scenario("  - scale: {kind: Deployment, name: web, replicas: 0}\n  - advance: 20m\n"))
        assert len(s["nodeClaims"]) == 3
        assert alive(s) == {}
        assert {d["reason"] for d in s["disruptions"]} == {"Empty"}
        assert conditions(items)["Provisioning"] == ("False", "BufferEmpty")


class TestVirtualPodsStayOutOfPodEvents:
    def test_virtual_pods_that_fit_nowhere_get_no_failed_scheduling_event(self, tmp_path):
        # a chunk and a real pod that no c-2x can hold: only the real pod is reported
        s, items = simulate(tmp_path, NODECLASS, nodepool("c-2x-amd64-linux"), template("3"),
                            buffer("{replicas: 2, podTemplateRef: {name: chunk}}"), deployment("web", 1, "3"),
                            scenario())
        failed = {name for name, _ in events(items, "FailedScheduling")}
        assert failed and all(name.startswith("web-") for name in failed)
        assert [p["name"] for p in s["pendingPods"]] == sorted(failed)
        assert alive(s) == {}
        assert conditions(items)["Provisioning"][0:2] == ("False", "RequiresNewCapacity")

    def test_only_real_pods_are_nominated(self, tmp_path):
        s, items = simulate(tmp_path, NODECLASS, nodepool("c-2x-amd64-linux"), template("500m"), buffer(),
                            deployment("web", 1, "1"), scenario())
        nominated = {name for name, _ in events(items, "Nominated")}
        assert nominated and all(name.startswith("web-") for name in nominated)

    def test_a_buffer_alone_nominates_no_pod(self, tmp_path):
        s, items = simulate(tmp_path, NODECLASS, nodepool("c-2x-amd64-linux"), template("500m"), buffer(), scenario())
        assert len(alive(s)) == 1
        assert events(items, "Nominated") == [] and events(items, "FailedScheduling") == []


# --- the functions behind upstream's buffer helpers --------------------------------------------------------


class FakeMgr:
    def __init__(self, *objs: dict):
        self.objs = list(objs)

    def list(self, kind: str, namespace: str | None = None) -> list[dict]:
        return [o for o in self.objs if o["kind"] == kind
                and (namespace is None or o["metadata"].get("namespace") == namespace)]

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        return next((o for o in self.list(kind, namespace) if o["metadata"]["name"] == name), None)


class FakeApi:
    def __init__(self, mgr: FakeMgr):
        self.mgr = mgr

    def patch(self, kind, name, body, namespace=None, subresource=None):
        self.mgr.get(kind, name, namespace)["status"] = body["status"]


def fake_env(*objs: dict) -> SimpleNamespace:
    mgr = FakeMgr(*objs)
    return SimpleNamespace(mgr=mgr, api=FakeApi(mgr), now=lambda: 0.0,
                           cluster=SimpleNamespace(compiler=SimpleNamespace(compile=lambda pod: None)))


def ready_buffer(name: str, replicas: int, namespace: str = "default", ready: bool = True,
                 scalable: bool = False) -> dict:
    source = {"scalableRef": {"kind": "Deployment", "name": "web"}} if scalable else {"podTemplateRef": {"name": "chunk"}}
    return {"kind": cb.KIND, "metadata": {"name": name, "namespace": namespace, "generation": 1},
            "spec": {"replicas": replicas, **source},
            "status": {"replicas": replicas, "conditions": [
                {"type": cb.READY, "status": "True" if ready else "False", "reason": "Resolved"}]}}


def chunk_template(namespace: str = "default") -> dict:
    return {"kind": "PodTemplate", "metadata": {"name": "chunk", "namespace": namespace},
            "template": {"spec": {"containers": [{"name": "c", "image": "pause"}]}}}


WEB = {"kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
       "spec": {"replicas": 4, "template": {"spec": {"containers": [{"name": "c", "image": "pause"}]}}}}


def virtual(*buffers: dict) -> dict[str, list[PodEntry]]:
    """The virtual pods karpy builds for the buffers, per ``namespace/name``."""
    namespaces = {b["metadata"]["namespace"] for b in buffers}
    env = fake_env(*buffers, *(chunk_template(ns) for ns in namespaces), WEB)
    out: dict[str, list[PodEntry]] = {}
    for e in cb.virtual_pods(env):
        out.setdefault(cb.buffer_key(e.obj), []).append(e)
    return out


def real(name: str = "real") -> PodEntry:
    pod = {"metadata": {"name": name, "namespace": "default"}, "spec": {}}
    return PodEntry(pod, f"default/{name}", None)


def marked(annotations: dict | None = None, labels: dict | None = None) -> dict:
    meta: dict = {"name": "virt", "namespace": "default"}
    if annotations is not None:
        meta["annotations"] = annotations
    if labels is not None:
        meta["labels"] = labels
    return {"metadata": meta}


VIRTUAL = {cb.VIRTUAL_ANNOTATION: "true"}


class TestBufferKey:
    def test_no_pod_has_no_buffer(self):
        assert cb.buffer_key(None) == ""

    def test_a_real_pod_has_no_buffer(self):
        assert cb.buffer_key(marked(labels={cb.BUFFER_NAME_LABEL: "b", cb.BUFFER_NAMESPACE_LABEL: "default"})) == ""

    def test_a_virtual_pod_without_its_buffers_namespace_has_no_buffer(self):
        assert cb.buffer_key(marked(VIRTUAL, {cb.BUFFER_NAME_LABEL: "my-buffer"})) == ""

    def test_a_virtual_pod_without_its_buffers_name_has_no_buffer(self):
        assert cb.buffer_key(marked(VIRTUAL, {cb.BUFFER_NAMESPACE_LABEL: "default"})) == ""

    def test_a_complete_virtual_pod_names_namespace_and_buffer(self):
        pod = marked(VIRTUAL, {cb.BUFFER_NAME_LABEL: "my-buffer", cb.BUFFER_NAMESPACE_LABEL: "default"})
        assert cb.buffer_key(pod) == "default/my-buffer"
        [[e]] = virtual(ready_buffer("my-buffer", 1)).values()
        assert cb.buffer_key(e.obj) == "default/my-buffer"


class TestIsVirtual:
    def test_no_pod_is_not_virtual(self):
        assert not cb.is_virtual("", None)

    def test_a_pod_without_annotations_is_not_virtual(self):
        assert not cb.is_virtual("default/real", marked())

    def test_the_buffer_annotation_makes_a_pod_virtual(self):
        assert cb.is_virtual("default/virt", marked(VIRTUAL))

    def test_other_annotations_do_not(self):
        assert not cb.is_virtual("default/virt", marked({"other": "value"}))


class TestClassify:
    def test_virtual_pods_are_counted_per_buffer_on_existing_and_new_capacity(self):
        pods = virtual(ready_buffer("a", 3), ready_buffer("b", 2))
        a, b = pods["default/a"], pods["default/b"]
        counts = cb.classify({"node-1": [a[0], a[1]]}, [[a[2], b[0], b[1]]], [])
        assert counts == {"default/a": {"existing": 2, "new": 1, "failed": 0},
                          "default/b": {"existing": 0, "new": 2, "failed": 0}}

    def test_real_pods_are_not_counted(self):
        assert cb.classify({"node-1": [real()]}, [[real("other")]], [real("failed")]) == {}

    def test_buffers_of_the_same_name_in_two_namespaces_are_apart(self):
        pods = virtual(ready_buffer("buffer", 2, "ns-a"), ready_buffer("buffer", 3, "ns-b"))
        a, b = pods["ns-a/buffer"], pods["ns-b/buffer"]
        counts = cb.classify({"node-1": [a[0], b[0], b[1]]}, [[a[1], b[2]]], [])
        assert counts["ns-a/buffer"] == {"existing": 1, "new": 1, "failed": 0}
        assert counts["ns-b/buffer"] == {"existing": 2, "new": 1, "failed": 0}


class TestProvisioningCondition:
    @pytest.mark.parametrize("scalable", [False, True], ids=["podTemplateRef", "scalableRef"])
    def test_all_chunks_on_existing_capacity_fit(self, scalable):
        cond = cb.provisioning_condition(ready_buffer("web", 3, scalable=scalable), {"existing": 3, "new": 0, "failed": 0})
        assert cond[:2] == ("True", "FitsExistingCapacity")

    @pytest.mark.parametrize("scalable", [False, True], ids=["podTemplateRef", "scalableRef"])
    def test_chunks_on_new_nodeclaims_require_new_capacity(self, scalable):
        cond = cb.provisioning_condition(ready_buffer("web", 3, scalable=scalable), {"existing": 1, "new": 2, "failed": 0})
        assert cond[:2] == ("False", "RequiresNewCapacity")
        assert cond[2] == "2/3 virtual pods required new capacity, 0 failed"

    def test_a_buffer_not_ready_is_not_ready_for_provisioning(self):
        assert cb.provisioning_condition(ready_buffer("web", 3, ready=False), None)[:2] == \
            ("False", "NotReadyForProvisioning")

    def test_zero_chunks_is_an_empty_buffer(self):
        assert cb.provisioning_condition(ready_buffer("web", 0), None)[:2] == ("False", "BufferEmpty")

    def test_a_pass_that_placed_none_of_a_ready_buffers_chunks_leaves_the_condition(self):
        assert cb.provisioning_condition(ready_buffer("web", 3), None) is None
        b = ready_buffer("web", 3)
        b["status"]["conditions"].append({"type": cb.PROVISIONING, "status": "True", "reason": "FitsExistingCapacity"})
        env = fake_env(b)
        cb.record(env, {}, [], [])
        assert [c["reason"] for c in b["status"]["conditions"] if c["type"] == cb.PROVISIONING] == ["FitsExistingCapacity"]


class TestBufferPodsPerNode:
    def test_virtual_pods_are_counted_per_existing_node_and_new_nodeclaims_are_left_out(self):
        pods = virtual(ready_buffer("a", 3), ready_buffer("b", 2))
        a, b = pods["default/a"], pods["default/b"]
        existing = {"node-a": [a[0], a[1], real()], "node-b": [b[0], b[1]]}
        assert cb.buffer_pods_per_node(existing) == {"node-a": 2, "node-b": 2}
        env = fake_env(ready_buffer("a", 3), ready_buffer("b", 2))
        assert cb.record(env, existing, [[a[2]]], []) == {"node-a": 2, "node-b": 2}

    def test_an_empty_pass_counts_nothing(self):
        assert cb.buffer_pods_per_node({}) == {}

    def test_real_pods_alone_count_nothing(self):
        assert cb.buffer_pods_per_node({"node-a": [real()]}) == {}
