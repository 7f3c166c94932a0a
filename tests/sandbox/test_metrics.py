"""`kubectl top nodes` and `kubectl top pods` on karpy sandbox: metrics.k8s.io/v1beta1 served from the simulated
usage (a container uses its requests, or the pod's `karpy.dev/usage`; a node its running pods plus half of what it
reserves for the system), read by the real kubectl after the AKS workshop's Deployment is provisioned."""

from __future__ import annotations

import json
import math

import pytest

from karpy import resources as res

from .harness import EXAMPLE, RunningSandbox, kubectl_binary

pytestmark = pytest.mark.skipif(kubectl_binary() is None, reason="kubectl is not installed")


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    b = RunningSandbox(tmp_path_factory.mktemp("metrics"), ["--speed", "100"])
    try:
        b.kubectl("apply", "-f", str(EXAMPLE))
        b.kubectl("wait", "--for=jsonpath={.status.readyReplicas}=4", "deployment/inflate", "-n", "workshop",
                  "--timeout=90s")
        yield b
    finally:
        assert b.stop() == 0, b.log("stderr")
        assert "Traceback" not in b.log("stderr"), b.log("stderr")


def table(text: str) -> list[dict[str, str]]:
    head, *rows = text.strip().splitlines()
    cols = head.split()
    return [dict(zip(cols, r.split())) for r in rows]


def items(box, *args: str) -> list[dict]:
    return json.loads(box.kubectl("get", *args, "-o", "json").stdout)["items"]


def requests(pod: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in pod["spec"]["containers"]:
        out = res.add(out, res.parse_resource_list((c.get("resources") or {}).get("requests")))
    return out


def test_top_pods_shows_each_pods_requests(box):
    pods = {p["metadata"]["name"]: p for p in items(box, "pods", "-n", "workshop")}
    rows = table(box.kubectl("top", "pods", "-n", "workshop").stdout)
    assert sorted(r["NAME"] for r in rows) == sorted(pods)
    for r in rows:
        want = requests(pods[r["NAME"]])
        assert r["CPU(cores)"] == f"{want.get('cpu', 0)}m"
        assert r["MEMORY(bytes)"] == f"{want.get('memory', 0) // 2**20}Mi"
    # one pod, its containers, and the ones of every namespace (Karpenter's own pod among them)
    name = sorted(pods)[0]
    (one,) = table(box.kubectl("top", "pod", name, "-n", "workshop", "--containers").stdout)
    assert (one["POD"], one["NAME"]) == (name, pods[name]["spec"]["containers"][0]["name"])
    everywhere = table(box.kubectl("top", "pods", "-A").stdout)
    assert {"workshop", "karpenter"} <= {r["NAMESPACE"] for r in everywhere}


def test_top_nodes_adds_up_the_pods_and_a_system_share(box):
    nodes = {n["metadata"]["name"]: n for n in items(box, "nodes")}
    pods = [p for p in items(box, "pods", "-A") if p["spec"].get("nodeName") and p["status"].get("phase") == "Running"]
    rows = table(box.kubectl("top", "nodes").stdout)
    assert sorted(r["NAME"] for r in rows) == sorted(nodes) and len(rows) == 2
    for r in rows:
        n = nodes[r["NAME"]]
        cap = res.parse_resource_list(n["status"]["capacity"])
        alloc = res.parse_resource_list(n["status"]["allocatable"])
        on = res.total(requests(p) for p in pods if p["spec"]["nodeName"] == r["NAME"])
        assert on.get("cpu")  # the workshop's pods and the daemons run here
        cpu = on.get("cpu", 0) + (cap["cpu"] - alloc["cpu"]) // 2
        mem = on.get("memory", 0) + (cap["memory"] - alloc["memory"]) // 2
        assert r["CPU(cores)"] == f"{cpu}m"
        assert r["MEMORY(bytes)"] == f"{mem // 2**20}Mi"
        # kubectl's percentages are of what the node can give pods
        assert r["CPU(%)"] == f"{math.floor(cpu * 100 / alloc['cpu'])}%"
        assert r["MEMORY(%)"] == f"{math.floor((mem // 1024 * 1024) * 100 / alloc['memory'])}%"
        assert cpu <= cap["cpu"] and mem <= cap["memory"]


def test_a_usage_annotation_overrides_the_requests_and_moves_the_node(box):
    pod = sorted(items(box, "pods", "-n", "workshop"), key=lambda p: p["metadata"]["name"])[0]
    name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]

    def node_cpu() -> int:
        (row,) = [r for r in table(box.kubectl("top", "nodes").stdout) if r["NAME"] == node]
        return int(row["CPU(cores)"].rstrip("m"))

    before = node_cpu()
    box.kubectl("annotate", "pod", name, "-n", "workshop", "karpy.dev/usage=cpu=250m,memory=300Mi")
    (row,) = table(box.kubectl("top", "pod", name, "-n", "workshop").stdout)
    assert (row["CPU(cores)"], row["MEMORY(bytes)"]) == ("250m", "300Mi")
    assert node_cpu() == before - requests(pod)["cpu"] + 250
    box.kubectl("annotate", "pod", name, "-n", "workshop", "karpy.dev/usage-")
    assert node_cpu() == before


def test_the_metrics_api_is_discovered_and_answers_as_metrics_server(box):
    assert "metrics.k8s.io/v1beta1" in box.kubectl("api-versions").stdout
    rl = box.get_json("/apis/metrics.k8s.io/v1beta1")
    assert {(r["name"], r["kind"], r["namespaced"], tuple(r["verbs"])) for r in rl["resources"]} == {
        ("nodes", "NodeMetrics", False, ("get", "list")), ("pods", "PodMetrics", True, ("get", "list"))}
    node = items(box, "nodes")[0]["metadata"]["name"]
    nm = box.get_json(f"/apis/metrics.k8s.io/v1beta1/nodes/{node}")
    assert nm["kind"] == "NodeMetrics" and nm["window"] and set(nm["usage"]) == {"cpu", "memory"}
    selected = box.get_json("/apis/metrics.k8s.io/v1beta1/namespaces/workshop/pods?labelSelector=app%3Dinflate")
    assert selected["kind"] == "PodMetricsList" and len(selected["items"]) == 4
    missing = box.kubectl("top", "node", "no-such-node", check=False)
    assert missing.returncode != 0 and 'nodemetrics.metrics.k8s.io "no-such-node" not found' in missing.stderr
    assert "Traceback" not in missing.stderr
    pending = box.kubectl("run", "never-scheduled", "-n", "workshop", "--image=pause",
                          "--overrides", json.dumps({"spec": {"nodeSelector": {"no": "such-node"}}}))
    assert pending.returncode == 0
    p = box.kubectl("top", "pod", "never-scheduled", "-n", "workshop", check=False)
    assert p.returncode != 0 and 'podmetrics.metrics.k8s.io "never-scheduled" not found' in p.stderr
