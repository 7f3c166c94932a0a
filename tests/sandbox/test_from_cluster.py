"""`karpy simulate --from-cluster`: "what would Karpenter do in this cluster if I applied this?", read from a
running `karpy sandbox` through the same client `karpy controller` uses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .harness import EXAMPLE, RunningSandbox, wait_for

EXTRA = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: extra}
spec:
  replicas: 3
  selector: {matchLabels: {app: extra}}
  template:
    metadata: {labels: {app: extra}}
    spec:
      nodeSelector: {kubernetes.io/arch: arm64}
      containers: [{name: c, image: x, resources: {requests: {cpu: "1"}}}]
"""


@pytest.fixture(scope="module")
def workshop(tmp_path_factory):
    """The AKS workshop applied to a sandbox with Karpenter: two arm64 NodeClaims hold its four pods."""
    box = RunningSandbox(tmp_path_factory.mktemp("workshop"), [str(EXAMPLE), "--speed", "100"])
    try:
        wait_for(lambda: len(_ready_claims(box)) == 2, 60, 0.2, "two ready NodeClaims")
        yield box
    finally:
        assert box.stop() == 0, box.log("stderr")


def _ready_claims(box: RunningSandbox) -> list[dict]:
    items = box.get_json("/apis/karpenter.sh/v1/nodeclaims")["items"]
    return [c for c in items if any(x.get("type") == "Ready" and x.get("status") == "True"
                                    for x in (c.get("status") or {}).get("conditions") or ())]


def _simulate(box: RunningSandbox, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "karpy.cli", "simulate", "--from-cluster", "--kubeconfig",
                           str(box.kubeconfig), *args], capture_output=True, text=True, timeout=120, cwd=box.tmp)


def test_the_cluster_as_it_is_needs_nothing_new(workshop):
    live = sorted(c["metadata"]["name"] for c in _ready_claims(workshop))
    p = _simulate(workshop, "-o", "json")
    assert p.returncode == 0, p.stderr
    status = json.loads(p.stdout)["items"][-1]["status"]
    # the cluster's NodeClaims carry over as launched; nothing is launched again or removed
    assert sorted(c["name"] for c in status["nodeClaims"]) == live
    assert all(c["deletedAt"] is None for c in status["nodeClaims"])
    assert status["pods"]["pending"] == 0


def test_a_new_deployment_on_top_gets_its_own_node(workshop, tmp_path):
    live = {c["metadata"]["name"] for c in _ready_claims(workshop)}
    extra = tmp_path / "extra.yaml"
    extra.write_text(EXTRA)
    p = _simulate(workshop, str(extra), "-o", "json")
    assert p.returncode == 0, p.stderr
    items = json.loads(p.stdout)["items"]
    status = items[-1]["status"]
    new = [c for c in status["nodeClaims"] if c["name"] not in live]
    assert len(new) == 1 and new[0]["arch"] == "arm64" and new[0]["nodePool"] == "default-demo"
    extra_pods = [i for i in items if i["kind"] == "Pod" and i["metadata"]["name"].startswith("extra-")]
    assert len(extra_pods) == 3 and all(pod["spec"].get("nodeName") for pod in extra_pods)
    assert status["pods"]["pending"] == 0
    # the live cluster is only read
    assert {c["metadata"]["name"] for c in _ready_claims(workshop)} == live
    assert all(d["metadata"]["name"] != "extra" for d in workshop.get_json("/apis/apps/v1/deployments")["items"])


def test_an_unreadable_kubeconfig_exits_2_without_a_traceback(tmp_path):
    bad = tmp_path / "kc"
    bad.write_text("not: [a kubeconfig")
    p = subprocess.run([sys.executable, "-m", "karpy.cli", "simulate", "--from-cluster", "--kubeconfig", str(bad)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--kubeconfig" in p.stderr and "Traceback" not in p.stderr


def test_kubeconfig_without_from_cluster_is_refused(tmp_path):
    p = subprocess.run([sys.executable, "-m", "karpy.cli", "simulate", str(EXAMPLE), "--kubeconfig", "x"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "only with --from-cluster" in p.stderr


def test_the_workshop_moved_to_amd64_ends_on_amd64_with_the_arm64_nodeclaims_removed(workshop):
    """The seed's own comparison, as a what-if: the inflate Deployment pinned to amd64 instead."""
    live = {c["metadata"]["name"] for c in _ready_claims(workshop)}
    p = _simulate(workshop, str(EXAMPLE.parent / "aks-multiarch-amd64" / "workload.yaml"), "-o", "json")
    assert p.returncode == 0, p.stderr
    items = json.loads(p.stdout)["items"]
    status = items[-1]["status"]
    claims = {c["name"]: c for c in status["nodeClaims"]}
    assert all(claims[n]["deletedAt"] is not None and claims[n]["disruptionReason"] == "Empty" for n in live)
    remaining = [c for c in claims.values() if c["deletedAt"] is None]
    assert remaining and all(c["arch"] == "amd64" for c in remaining)
    inflate = [i for i in items if i["kind"] == "Pod" and i["metadata"]["name"].startswith("inflate-")]
    assert len(inflate) == 4 and all(pod["spec"].get("nodeName") for pod in inflate)
    # it started at the cluster's present (the sandbox runs on this machine's clock), not at karpy's
    # default start of 2026-01-01, so the copied conditions are in the past and the nodes consolidate
    assert status["start"] > "2026-01-02T00:00:00Z"


def test_pods_stay_where_they_are_and_a_cordoned_node_under_a_pdb_is_not_disrupted(tmp_path_factory):
    """An honest what-if: the simulation starts from the cluster's actual placements. One workshop node
    is cordoned and a PodDisruptionBudget allows no eviction of the workshop's pods: nothing is
    launched, nothing removed, every pod where the cluster has it, and the cost unchanged."""
    box = RunningSandbox(tmp_path_factory.mktemp("cordoned"), [str(EXAMPLE), "--speed", "100"])
    try:
        wait_for(lambda: len(_ready_claims(box)) == 2, 60, 0.2, "two ready NodeClaims")
        wait_for(lambda: len(_bound(box)) >= 4, 60, 0.2, "the workshop's pods bound")
        kubernetes = pytest.importorskip("kubernetes")
        api = box.client()
        core = kubernetes.client.CoreV1Api(api)
        policy = kubernetes.client.PolicyV1Api(api)
        small = min(_ready_claims(box), key=lambda c: int(c["status"]["capacity"]["cpu"]))["status"]["nodeName"]
        core.patch_node(small, {"spec": {"unschedulable": True}})
        policy.create_namespaced_pod_disruption_budget("default", {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "inflate"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "inflate"}}}})
        live = {c["metadata"]["name"] for c in _ready_claims(box)}
        placed = _bound(box)
        assert small in placed.values()
        p = _simulate(box, "-o", "json")
        assert p.returncode == 0, p.stderr
        items = json.loads(p.stdout)["items"]
        status = items[-1]["status"]
        sim_placed = {f"{i['metadata'].get('namespace', 'default')}/{i['metadata']['name']}": i["spec"].get("nodeName")
                      for i in items if i["kind"] == "Pod"}
        for pod, node in placed.items():
            assert sim_placed.get(pod) == node, pod
        assert {c["name"] for c in status["nodeClaims"]} == live
        assert not [d for d in status["disruptions"] if d["outcome"] == "succeeded"]
        fc = status["fromCluster"]
        assert fc["nodeClaimsAdded"] == [] and fc["nodeClaimsRemoved"] == []
        assert fc["costPerHourBefore"] == fc["costPerHourAfter"] == status["costPerHour"]
        (node,) = [i for i in items if i["kind"] == "Node" and i["metadata"]["name"] == small]
        assert node["spec"].get("unschedulable") is True
    finally:
        assert box.stop() == 0, box.log("stderr")


def _bound(box: RunningSandbox) -> dict[str, str]:
    """Workload pods (not DaemonSet pods) and the node each is bound to."""
    out = {}
    for p in box.get_json("/api/v1/pods")["items"]:
        owners = p["metadata"].get("ownerReferences") or ()
        if p["spec"].get("nodeName") and not any(o.get("kind") == "DaemonSet" for o in owners):
            out[f"{p['metadata'].get('namespace', 'default')}/{p['metadata']['name']}"] = p["spec"]["nodeName"]
    return out
