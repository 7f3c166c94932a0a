"""The official ``kubernetes`` Python client against ``karpy sandbox``."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from .harness import wait_for

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, watch  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402


def _ns(api: client.ApiClient, name: str) -> None:
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})


def _cm(name: str, **data: str) -> dict:
    return {"metadata": {"name": name}, "data": data or {"k": "v"}}


# --- API semantics ---------------------------------------------------------------------------------------

def test_list_then_watch_from_resource_version(sandbox):
    api = sandbox.client()
    v1 = client.CoreV1Api(api)
    _ns(api, "listwatch")
    v1.create_namespaced_config_map("listwatch", _cm("a"))
    listed = v1.list_namespaced_config_map("listwatch")
    # kube-root-ca.crt: kube-controller-manager puts one in every namespace
    assert [c.metadata.name for c in listed.items] == ["a", "kube-root-ca.crt"]
    rv = listed.metadata.resource_version
    v1.create_namespaced_config_map("listwatch", _cm("b"))
    v1.patch_namespaced_config_map("a", "listwatch", {"data": {"k": "changed"}})
    v1.delete_namespaced_config_map("a", "listwatch")
    seen = []
    w = watch.Watch()
    for ev in w.stream(v1.list_namespaced_config_map, "listwatch", resource_version=rv, timeout_seconds=5):
        seen.append((ev["type"], ev["object"].metadata.name))
        if len(seen) == 3:
            w.stop()
    assert seen == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "a")]
    # label and field selectors
    v1.create_namespaced_config_map("listwatch", {"metadata": {"name": "c", "labels": {"tier": "x"}}, "data": {}})
    assert [c.metadata.name for c in v1.list_namespaced_config_map("listwatch", label_selector="tier=x").items] == ["c"]
    assert [c.metadata.name for c in v1.list_namespaced_config_map("listwatch", field_selector="metadata.name=b").items] == ["b"]


def test_watch_from_a_compacted_resource_version_is_410(sandbox):
    api = sandbox.client()
    v1 = client.CoreV1Api(api)
    _ns(api, "churn")
    rv = v1.list_namespaced_config_map("churn").metadata.resource_version
    for i in range(110):  # the sandbox keeps 100 watch events per kind (--watch-history 100)
        v1.create_namespaced_config_map("churn", _cm(f"cm-{i}"))
    with pytest.raises(ApiException) as e:
        for _ in watch.Watch().stream(v1.list_namespaced_config_map, "churn", resource_version=rv, timeout_seconds=5):
            pass
    assert e.value.status == 410


def test_conflicts_and_not_found(sandbox):
    api = sandbox.client()
    v1 = client.CoreV1Api(api)
    _ns(api, "conflicts")
    v1.create_namespaced_config_map("conflicts", _cm("x"))
    stale = v1.read_namespaced_config_map("x", "conflicts")
    fresh = v1.read_namespaced_config_map("x", "conflicts")
    fresh.data = {"k": "fresh"}
    v1.replace_namespaced_config_map("x", "conflicts", fresh)
    stale.data = {"k": "stale"}
    with pytest.raises(ApiException) as e:
        v1.replace_namespaced_config_map("x", "conflicts", stale)
    assert e.value.status == 409 and json.loads(e.value.body)["reason"] == "Conflict"
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_config_map("conflicts", _cm("x"))
    assert e.value.status == 409 and json.loads(e.value.body)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as e:
        v1.read_namespaced_config_map("missing", "conflicts")
    assert e.value.status == 404
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_config_map("no-such-namespace", _cm("y"))
    assert e.value.status == 404


def test_invalid_nodepool_is_422_naming_the_field(sandbox):
    co = client.CustomObjectsApi(sandbox.client())
    bad = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "invalid"},
           "spec": {"template": {"spec": {
               "requirements": [{"key": "kubernetes.io/arch", "operator": "Sometimes", "values": ["arm64"]}],
               "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "x"}}}}}
    with pytest.raises(ApiException) as e:
        co.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", bad)
    assert e.value.status == 422
    status = json.loads(e.value.body)
    assert status["reason"] == "Invalid"
    assert "spec.template.spec.requirements[0].operator" in status["message"]
    # an unsupported value keeps kube-apiserver from running the CRD's CEL rules, which it says in a cause of its own
    assert [c["field"] for c in status["details"]["causes"]] == ["spec.template.spec.requirements[0].operator", "<nil>"]


def test_discovery_version_and_events(sandbox):
    api = sandbox.client()
    assert client.VersionApi(api).get_code().major == "1"
    groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
    assert {"apps", "karpenter.sh", "karpenter.azure.com", "coordination.k8s.io", "events.k8s.io"} <= groups
    # Leases, as a controller's leader election uses them
    coord = client.CoordinationV1Api(api)
    lease = coord.create_namespaced_lease("kube-system", {"metadata": {"name": "karpenter-leader-election"},
                                                          "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15}})
    lease.spec.holder_identity = "other"
    assert coord.replace_namespaced_lease("karpenter-leader-election", "kube-system", lease).spec.holder_identity == "other"


# --- the simulated cluster -------------------------------------------------------------------------------

def test_pods_provision_bind_and_consolidate(sandbox):
    api = sandbox.client()
    v1, apps, co = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
    co.create_cluster_custom_object("karpenter.azure.com", "v1beta1", "aksnodeclasses", {
        "apiVersion": "karpenter.azure.com/v1beta1", "kind": "AKSNodeClass", "metadata": {"name": "py"},
        "spec": {"imageFamily": "Ubuntu2204"}})
    co.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", {
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "py"},
        "spec": {"disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5s"},
                 "template": {"metadata": {"labels": {"pool": "py"}}, "spec": {
                     "expireAfter": "Never",
                     "requirements": [{"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["D"]},
                                      {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                                      {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                                      {"key": "karpenter.azure.com/sku-cpu", "operator": "Lt", "values": ["5"]}],
                     "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "py"}}}}})
    _ns(api, "py")
    apps.create_namespaced_deployment("py", {
        "metadata": {"name": "app"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "py"}},
                 "template": {"metadata": {"labels": {"app": "py"}}, "spec": {
                     "nodeSelector": {"pool": "py"},
                     "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]}}}})

    def claims():
        items = co.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", label_selector="karpenter.sh/nodepool=py")
        return items["items"]

    def all_running():
        pods = v1.list_namespaced_pod("py", label_selector="app=py").items
        return len(pods) == 3 and all(p.spec.node_name and p.status.phase == "Running" for p in pods) and pods

    pods = wait_for(all_running, timeout=60, interval=0.2, what="3 pods bound and running")
    nodes = {n.metadata.name for n in v1.list_node(label_selector="pool=py").items}
    assert {p.spec.node_name for p in pods} <= nodes
    assert claims() and all(c["status"].get("nodeName") in nodes for c in claims())

    apps.patch_namespaced_deployment_scale("app", "py", {"spec": {"replicas": 1}})
    assert apps.read_namespaced_deployment_scale("app", "py").spec.replicas == 1

    def consolidated():
        cs = claims()
        ready = [c for c in cs if any(x["type"] == "Ready" and x["status"] == "True" for x in c["status"].get("conditions", []))]
        pods = v1.list_namespaced_pod("py", label_selector="app=py").items
        return len(cs) == 1 and len(ready) == 1 and cs[0]["metadata"]["labels"]["karpenter.azure.com/sku-cpu"] == "2" \
            and len(pods) == 1 and pods[0].spec.node_name == cs[0]["status"].get("nodeName") and cs

    wait_for(consolidated, timeout=60, interval=0.3, what="consolidation to one 2-vCPU node")
    co.delete_cluster_custom_object("karpenter.sh", "v1", "nodepools", "py")
    wait_for(lambda: not claims(), timeout=60, interval=0.3, what="the NodePool's NodeClaims to go")


# --- without Karpenter: nodes made by a client, eviction, binding ----------------------------------------

STATIC_NODE = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "static-1", "labels": {"kubernetes.io/hostname": "static-1", "kubernetes.io/os": "linux",
                                                "kubernetes.io/arch": "amd64", "static": "true"}},
    "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
               "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
}


def _ready_node(v1: client.CoreV1Api, name: str) -> bool:
    n = v1.read_node(name)
    return any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))


def test_start_manifest_is_applied(bare):
    api = bare.client()
    assert client.SchedulingV1Api(api).read_priority_class("preloaded-high").value == 1000
    assert client.CoreV1Api(api).read_namespace("preloaded").status.phase == "Active"
    client.CoreV1Api(api).create_namespaced_config_map("preloaded", _cm("hello"))


def test_eviction_respects_the_pod_disruption_budget(bare):
    api = bare.client()
    v1, apps, policy = client.CoreV1Api(api), client.AppsV1Api(api), client.PolicyV1Api(api)
    v1.create_node(STATIC_NODE)
    wait_for(lambda: _ready_node(v1, "static-1"), what="the sandbox's kubelet to make the node Ready")
    _ns(api, "guarded")
    apps.create_namespaced_deployment("guarded", {
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                     "nodeSelector": {"static": "true"},
                     "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}]}}}})
    policy.create_namespaced_pod_disruption_budget("guarded", {
        "metadata": {"name": "web"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}})

    def healthy():
        pdb = policy.read_namespaced_pod_disruption_budget("web", "guarded")
        return pdb.status is not None and pdb.status.current_healthy == 2 and pdb.status.observed_generation == 1

    wait_for(healthy, what="the PodDisruptionBudget to count 2 healthy pods")
    pods = v1.list_namespaced_pod("guarded").items
    assert {p.spec.node_name for p in pods} == {"static-1"}
    victim = pods[0].metadata.name
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": victim, "namespace": "guarded"}}
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_pod_eviction(victim, "guarded", eviction)
    assert e.value.status == 429
    assert "disruption budget" in json.loads(e.value.body)["message"]

    policy.patch_namespaced_pod_disruption_budget("web", "guarded", {"spec": {"minAvailable": 1}})
    wait_for(lambda: (policy.read_namespaced_pod_disruption_budget("web", "guarded").status.disruptions_allowed or 0) == 1,
             what="the budget to allow one disruption")
    v1.create_namespaced_pod_eviction(victim, "guarded", eviction)
    assert victim not in {p.metadata.name for p in v1.list_namespaced_pod("guarded").items}


def test_binding_assigns_a_pod(bare):
    api = bare.client()
    v1 = client.CoreV1Api(api)
    if not any(n.metadata.name == "static-1" for n in v1.list_node().items):
        v1.create_node(STATIC_NODE)
    _ns(api, "manual")
    v1.create_namespaced_pod("manual", {"metadata": {"name": "p"}, "spec": {
        "nodeSelector": {"nowhere": "true"}, "containers": [{"name": "c", "image": "pause"}]}})
    assert v1.read_namespaced_pod("p", "manual").spec.node_name is None
    # the API server answers a Binding with a Status, which the client's model cannot hold (as with any
    # Kubernetes): read the raw answer
    r = v1.create_namespaced_pod_binding("p", "manual", {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
                                                         "target": {"apiVersion": "v1", "kind": "Node", "name": "static-1"}},
                                         _preload_content=False)
    assert json.loads(r.data)["status"] == "Success"
    wait_for(lambda: v1.read_namespaced_pod("p", "manual").status.phase == "Running", what="the bound pod to run")
    assert v1.read_namespaced_pod("p", "manual").spec.node_name == "static-1"


def test_raw_watch_stream_and_table(bare):
    # a watch that allows bookmarks gets one 2 seconds before it times out, as from kube-apiserver's watch cache
    req = urllib.request.Request(bare.url + "/api/v1/namespaces/preloaded/configmaps?watch=1&timeoutSeconds=3"
                                 "&allowWatchBookmarks=true&fieldSelector=metadata.name%3Dhello")
    with bare.urlopen(req, timeout=10) as r:
        assert r.headers["Transfer-Encoding"] == "chunked"
        lines = [json.loads(line) for line in r.read().decode().splitlines() if line.strip()]
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in lines] == [("ADDED", "hello"), ("BOOKMARK", None)]
    assert set(lines[1]["object"]["metadata"]) == {"resourceVersion", "creationTimestamp"}
    # sendInitialEvents needs the WatchList feature gate, which kube-apiserver v1.33 leaves off
    req = urllib.request.Request(bare.url + "/api/v1/namespaces/preloaded/configmaps?watch=1&timeoutSeconds=1"
                                 "&sendInitialEvents=true&resourceVersionMatch=NotOlderThan")
    with pytest.raises(urllib.error.HTTPError) as e:
        bare.urlopen(req, timeout=10)
    assert e.value.code == 422
    req = urllib.request.Request(bare.url + "/apis/karpenter.sh/v1/nodepools",
                                 headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"})
    with bare.urlopen(req, timeout=10) as r:
        table = json.loads(r.read())
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]][:5] == ["Name", "NodeClass", "Nodes", "Ready", "Age"]
