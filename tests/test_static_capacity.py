"""Static NodePools (`spec.replicas`, feature gate StaticCapacity) in `karpy simulate`.

Upstream: kubernetes-sigs/karpenter pkg/controllers/static/{provisioning,deprovisioning} and
pkg/controllers/disruption/staticdrift.go. A static NodePool keeps `replicas` NodeClaims with no pod
needing them, within `limits.nodes`; pending pods never launch from it; emptiness and consolidation
leave its nodes alone; drift and expiration replace them one for one.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from karpy.cli import main

ROOT = Path(__file__).resolve().parents[1]

NODECLASS = """
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
"""


def nodepool(replicas: int | None = 3, *, instance_type: str = "c-2x-amd64-linux", extra: str = "",
             template_extra: str = "", name: str = "static") -> str:
    rep = f"  replicas: {replicas}\n" if replicas is not None else ""
    return f"""
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
{rep}{extra}  template:
    spec:
{template_extra}      requirements:
      - {{key: kubernetes.io/arch, operator: In, values: [amd64]}}
      - {{key: kubernetes.io/os, operator: In, values: [linux]}}
      - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
      - {{key: node.kubernetes.io/instance-type, operator: In, values: [{instance_type}]}}
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}
"""


def scenario(steps: str = "", gate: bool = True) -> str:
    return f"""
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {{name: static}}
spec:
  settings: {{featureGates: {{StaticCapacity: {str(gate).lower()}}}}}
  steps:
  - advance: 1m
{steps}"""


def simulate(tmp_path: Path, *docs: str, until: str = "1h") -> tuple[dict, list[dict]]:
    f = tmp_path / "in.yaml"
    f.write_text("\n---\n".join(d.strip("\n") for d in docs) + "\n")
    r = CliRunner().invoke(main, ["simulate", str(f), "-o", "json", "--until", until])
    assert r.exit_code == 0, r.output
    items = json.loads(r.stdout)["items"]
    summary = next(i for i in items if i["kind"] == "SimulationSummary")["status"]
    return summary, items


def alive(summary: dict, nodepool: str = "static") -> list[dict]:
    return [c for c in summary["nodeClaims"] if c["nodePool"] == nodepool and c["deletedAt"] is None
            and not c["launchFailed"]]


def test_a_static_nodepool_keeps_its_replicas_with_no_pod(tmp_path):
    summary, _ = simulate(tmp_path, NODECLASS, nodepool(3), scenario())
    assert len(alive(summary)) == 3
    assert all(c["instanceType"] == "c-2x-amd64-linux" for c in alive(summary))
    assert summary["pods"]["total"] == 0
    # nothing consolidated these empty nodes in the hour
    assert summary["disruptions"] == []
    assert len(summary["nodeClaims"]) == 3


def test_without_the_gate_replicas_launch_nothing(tmp_path):
    summary, _ = simulate(tmp_path, NODECLASS, nodepool(3), scenario(gate=False))
    assert summary["nodeClaims"] == []


def test_scaling_a_static_nodepool_down_and_up_within_its_node_limit(tmp_path):
    steps = """  - scale: {kind: NodePool, name: static, replicas: 1}
  - advance: 5m
  - apply:
    - apiVersion: v1
      kind: Pod
      metadata: {name: probe, namespace: default}
      spec: {containers: [{name: c, image: nginx, resources: {requests: {cpu: 100m}}}]}
  - advance: 5m
  - scale: {kind: NodePool, name: static, replicas: 7}
  - advance: 5m
"""
    summary, items = simulate(tmp_path, NODECLASS, nodepool(3, extra="  limits: {nodes: 5}\n"), scenario(steps))
    claims = summary["nodeClaims"]
    # 3 created, 2 removed on the scale-down, then up to the limit of 5 (not 7)
    assert len([c for c in claims if c["deletedAt"] is not None]) == 2
    assert len(alive(summary)) == 5
    nodepool_obj = next(i for i in items if i["kind"] == "NodePool")
    assert nodepool_obj["status"]["nodes"] == 5
    # the pod runs on a static node; none was launched for it
    assert summary["pods"] == {"total": 1, "bound": 1, "pending": 0}


def test_scale_down_removes_empty_nodes_before_those_running_pods(tmp_path):
    """Upstream's deprovisioning order: NodeClaims not launched, then empty nodes, then by disruption cost
    with do-not-disrupt last. Two pods land on two of three nodes; scaled to 2, the empty one goes."""
    pods = """  - apply:
    - apiVersion: v1
      kind: Pod
      metadata: {name: a, namespace: default}
      spec: {containers: [{name: c, image: nginx, resources: {requests: {cpu: "1"}}}]}
    - apiVersion: v1
      kind: Pod
      metadata: {name: b, namespace: default}
      spec: {containers: [{name: c, image: nginx, resources: {requests: {cpu: "1"}}}]}
  - advance: 1m
  - scale: {kind: NodePool, name: static, replicas: 2}
  - advance: 5m
"""
    summary, items = simulate(tmp_path, NODECLASS, nodepool(3), scenario(pods))
    assert len(alive(summary)) == 2
    bound_to = {p["spec"]["nodeName"] for p in items if p["kind"] == "Pod"}
    assert len(bound_to) == 2  # neither pod was moved
    alive_nodes = {n["metadata"]["name"] for n in items if n["kind"] == "Node"}
    assert bound_to <= alive_nodes
    assert summary["pods"]["pending"] == 0


def test_pending_pods_never_launch_from_a_static_nodepool(tmp_path):
    """Upstream's provisioner skips static NodePools: a pod that fits no static node stays pending."""
    big = """  - apply:
    - apiVersion: v1
      kind: Pod
      metadata: {name: big, namespace: default}
      spec: {containers: [{name: c, image: nginx, resources: {requests: {cpu: "8"}}}]}
  - advance: 10m
"""
    summary, _ = simulate(tmp_path, NODECLASS, nodepool(2), scenario(big))
    assert len(summary["nodeClaims"]) == 2
    assert [p["name"] for p in summary["pendingPods"]] == ["big"]


def test_empty_static_nodes_are_not_consolidated_while_dynamic_ones_are(tmp_path):
    dynamic = nodepool(None, name="dynamic", extra="  disruption: {consolidateAfter: 0s}\n")
    pod = """  - apply:
    - apiVersion: v1
      kind: Pod
      metadata: {name: big, namespace: default}
      spec: {containers: [{name: c, image: nginx, resources: {requests: {cpu: "1500m"}}}]}
  - advance: 2m
  - delete: {kind: Pod, name: big}
  - advance: 20m
"""
    static = nodepool(2, extra="  disruption: {consolidateAfter: 0s}\n", instance_type="c-1x-amd64-linux")
    summary, _ = simulate(tmp_path, NODECLASS, static, dynamic, scenario(pod))
    dyn = [c for c in summary["nodeClaims"] if c["nodePool"] == "dynamic"]
    assert len(dyn) == 1 and dyn[0]["disruptionReason"] == "Empty"
    assert len(alive(summary)) == 2
    assert all(d["nodePool"] == "dynamic" for d in summary["disruptions"])


def test_expired_static_nodes_are_replaced_one_for_one(tmp_path):
    np = nodepool(2, template_extra="      expireAfter: 20m\n")
    summary, _ = simulate(tmp_path, NODECLASS, np, scenario("  - advance: 30m\n"), until="30m")
    expired = [c for c in summary["nodeClaims"] if c["disruptionReason"] == "Expired"]
    assert len(expired) == 2
    assert len(alive(summary)) == 2
    replacements = [c for c in summary["nodeClaims"] if c not in expired]
    assert all(c["createdAt"] >= "2026-01-01T00:20:00Z" for c in replacements)


def test_drifted_static_nodes_are_replaced_one_for_one_from_the_new_template(tmp_path):
    steps = """  - patch:
      kind: NodePool
      name: static
      merge:
        spec:
          template:
            spec:
              requirements:
              - {key: kubernetes.io/arch, operator: In, values: [amd64]}
              - {key: kubernetes.io/os, operator: In, values: [linux]}
              - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
              - {key: node.kubernetes.io/instance-type, operator: In, values: [c-4x-amd64-linux]}
  - advance: 20m
"""
    summary, _ = simulate(tmp_path, NODECLASS, nodepool(3), scenario(steps))
    now = alive(summary)
    assert len(now) == 3
    assert {c["instanceType"] for c in now} == {"c-4x-amd64-linux"}
    drifts = summary["disruptions"]
    assert len(drifts) == 3
    for d in drifts:
        assert d["reason"] == "Drifted" and d["method"] == "drift"
        assert len(d["candidates"]) == 1 and len(d["replacements"]) == 1
        assert d["outcome"] == "succeeded"


def test_static_drift_waits_for_room_under_the_node_limit(tmp_path):
    """limits.nodes equal to replicas: no room for a replacement beside the drifted node, so the nodes
    stay (upstream reserves the replacement against the limit first)."""
    steps = """  - patch:
      kind: NodePool
      name: static
      merge: {spec: {template: {metadata: {labels: {team: blue}}}}}
  - advance: 20m
"""
    summary, _ = simulate(tmp_path, NODECLASS, nodepool(2, extra="  limits: {nodes: 2}\n"), scenario(steps))
    assert summary["disruptions"] == []
    assert len(summary["nodeClaims"]) == 2


DRIFT_TO_C4 = """  - patch:
      kind: NodePool
      name: static
      merge: {spec: {template: {metadata: {labels: {team: blue}}}}}
  - advance: 30m
"""


def test_static_drift_respects_a_one_node_budget(tmp_path):
    budget = "  disruption: {budgets: [{nodes: \"1\"}]}\n"
    summary, _ = simulate(tmp_path, NODECLASS, nodepool(3, extra=budget), scenario(DRIFT_TO_C4))
    drifts = summary["disruptions"]
    assert len(drifts) == 3 and len(alive(summary)) == 3
    for before, after in zip(drifts, drifts[1:]):
        assert after["startedAt"] >= before["finishedAt"]  # one node at a time
        assert after["budget"] == {"allowed": 1, "disrupting": 0}


def test_a_static_nodepool_of_zero_replicas_has_nothing_to_drift(tmp_path):
    summary, _ = simulate(tmp_path, NODECLASS, nodepool(0), scenario(DRIFT_TO_C4))
    assert summary["nodeClaims"] == [] and summary["disruptions"] == []
