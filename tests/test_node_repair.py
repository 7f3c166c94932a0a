"""Node repair (feature gate NodeRepair) and the Scenario `condition` step, in `karpy simulate`.

Upstream: kubernetes-sigs/karpenter pkg/controllers/node/health, and the RepairPolicies() of the kwok,
AWS and Azure providers. A node whose condition matches a policy past its toleration has its NodeClaim
force-terminated and its pods placed on new capacity; no repair while more than 20% of the NodePool's
nodes are unhealthy.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from karpy.cli import main

KWOK = """
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  disruption: {consolidateAfter: Never}
  template:
    spec:
      requirements:
      - {key: kubernetes.io/arch, operator: In, values: [amd64]}
      - {key: kubernetes.io/os, operator: In, values: [linux]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      - {key: node.kubernetes.io/instance-type, operator: In, values: [c-2x-amd64-linux]}
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
"""

AWS = """
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole-cluster
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: cluster}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: cluster}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  disruption: {consolidateAfter: Never}
  template:
    spec:
      requirements:
      - {key: kubernetes.io/arch, operator: In, values: [amd64]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
"""


def deployment(replicas: int, extra_template: str = "") -> str:
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata:
      labels: {{app: web}}
{extra_template}    spec:
      containers: [{{name: web, image: nginx, resources: {{requests: {{cpu: "1", memory: 1Gi}}}}}}]
"""


def scenario(steps: str, gate: bool = True) -> str:
    return f"""
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {{name: repair}}
spec:
  settings: {{featureGates: {{NodeRepair: {str(gate).lower()}}}}}
  steps:
  - advance: 2m
{steps}"""


FIRST_NODE_NOT_READY = ("  - condition: {selector: {matchLabels: {karpenter.sh/nodepool: general}}, count: 1, "
                        "type: Ready, status: \"False\", reason: KubeletNotReady}\n")


def run(tmp_path: Path, *docs: str, until: str = "1h", expect: int = 0) -> tuple[dict, list[dict], str]:
    f = tmp_path / "in.yaml"
    f.write_text("\n---\n".join(d.strip("\n") for d in docs) + "\n")
    r = CliRunner().invoke(main, ["simulate", str(f), "-o", "json", "--until", until])
    assert r.exit_code == expect, r.output
    if expect:
        return {}, [], r.output
    items = json.loads(r.stdout)["items"]
    return next(i for i in items if i["kind"] == "SimulationSummary")["status"], items, r.output


def repaired(summary: dict) -> list[dict]:
    return [c for c in summary["nodeClaims"] if c["disruptionReason"] == "Unhealthy"]


def test_a_node_not_ready_past_its_toleration_is_replaced(tmp_path):
    summary, items, _ = run(tmp_path, KWOK, deployment(3), scenario(FIRST_NODE_NOT_READY + "  - advance: 30m\n"))
    (gone,) = repaired(summary)
    # kwok tolerates Ready=False for 10 minutes from the transition at 00:02
    (d,) = [d for d in summary["disruptions"] if d["reason"] == "Unhealthy"]
    assert d["startedAt"] == "2026-01-01T00:12:00Z" and d["method"] == "repair" and d["outcome"] == "succeeded"
    assert d["candidates"] == [gone["name"]]
    assert gone["deletedAt"] is not None
    # its pod found new capacity: every pod runs, on three live NodeClaims
    assert summary["pods"] == {"total": 3, "bound": 3, "pending": 0}
    assert len([c for c in summary["nodeClaims"] if c["deletedAt"] is None]) == 3
    nodes = {n["metadata"]["name"] for n in items if n["kind"] == "Node"}
    assert all(p["spec"]["nodeName"] in nodes for p in items if p["kind"] == "Pod")


def test_the_horizon_stops_at_the_end_of_the_toleration(tmp_path):
    """No step after the condition: `--until` skips quiet stretches, and the health controller's timer for
    the toleration's end keeps the skip from passing over it."""
    summary, _, _ = run(tmp_path, KWOK, deployment(2), scenario(FIRST_NODE_NOT_READY), until="48h")
    (d,) = [d for d in summary["disruptions"] if d["reason"] == "Unhealthy"]
    assert d["startedAt"] == "2026-01-01T00:12:00Z"


def test_a_node_that_recovers_within_its_toleration_is_kept(tmp_path):
    steps = FIRST_NODE_NOT_READY + """  - advance: 9m
  - condition: {selector: {matchLabels: {karpenter.sh/nodepool: general}}, count: 1, type: Ready, status: "True"}
  - advance: 30m
"""
    summary, _, _ = run(tmp_path, KWOK, deployment(3), scenario(steps))
    assert repaired(summary) == []
    assert len(summary["nodeClaims"]) == 3


def test_without_the_gate_an_unhealthy_node_stays(tmp_path):
    summary, items, _ = run(tmp_path, KWOK, deployment(3), scenario(FIRST_NODE_NOT_READY + "  - advance: 30m\n",
                                                                        gate=False))
    assert repaired(summary) == []
    not_ready = [n for n in items if n["kind"] == "Node"
                 and any(c["type"] == "Ready" and c["status"] == "False" for c in n["status"]["conditions"])]
    assert len(not_ready) == 1  # the kubelet kept reporting what the step set


def test_repair_is_withheld_when_more_than_a_fifth_of_the_nodepool_is_unhealthy(tmp_path):
    """Two of three nodes unhealthy (more than ceil(20% of 3) = 1): no repair, a NodeRepairBlocked Warning."""
    steps = ("  - condition: {selector: {matchLabels: {karpenter.sh/nodepool: general}}, count: 2, "
             "type: Ready, status: Unknown}\n  - advance: 30m\n")
    summary, items, _ = run(tmp_path, KWOK, deployment(3), scenario(steps))
    assert repaired(summary) == []
    blocked = [e for e in items if e["kind"] == "Event" and e["reason"] == "NodeRepairBlocked"]
    assert blocked and all(e["type"] == "Warning" for e in blocked)
    assert "more than 20% nodes are unhealthy in the nodepool" in blocked[0]["message"]


def test_one_unhealthy_node_in_five_is_repaired(tmp_path):
    summary, _, _ = run(tmp_path, KWOK, deployment(5), scenario(FIRST_NODE_NOT_READY + "  - advance: 30m\n"))
    assert len(repaired(summary)) == 1


def test_repair_does_not_wait_for_a_blocking_pdb(tmp_path):
    """Forced termination: the NodeClaim's termination deadline is now, so a PDB allowing no eviction does
    not hold the unhealthy node."""
    pdb = """
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  maxUnavailable: 0
  selector: {matchLabels: {app: web}}
"""
    summary, _, _ = run(tmp_path, KWOK, deployment(3), pdb, scenario(FIRST_NODE_NOT_READY + "  - advance: 30m\n"))
    (gone,) = repaired(summary)
    assert gone["deletedAt"] is not None and gone["deletedAt"] < "2026-01-01T00:13:00Z"


def test_aws_tolerates_ready_false_for_30_minutes(tmp_path):
    summary, _, _ = run(tmp_path, AWS, deployment(3), scenario(FIRST_NODE_NOT_READY + "  - advance: 40m\n"))
    (d,) = [d for d in summary["disruptions"] if d["reason"] == "Unhealthy"]
    assert d["startedAt"] == "2026-01-01T00:32:00Z"


def test_aws_repairs_an_agent_condition_after_its_own_toleration(tmp_path):
    steps = ("  - condition: {selector: {matchLabels: {karpenter.sh/nodepool: general}}, count: 1, "
             "type: AcceleratedHardwareReady, status: \"False\"}\n  - advance: 40m\n")
    summary, _, _ = run(tmp_path, AWS, deployment(3), scenario(steps))
    (d,) = [d for d in summary["disruptions"] if d["reason"] == "Unhealthy"]
    assert d["startedAt"] == "2026-01-01T00:12:00Z"


def test_kwok_ignores_a_condition_it_has_no_policy_for(tmp_path):
    steps = ("  - condition: {selector: {matchLabels: {karpenter.sh/nodepool: general}}, count: 1, "
             "type: AcceleratedHardwareReady, status: \"False\"}\n  - advance: 40m\n")
    summary, _, _ = run(tmp_path, KWOK, deployment(3), scenario(steps))
    assert repaired(summary) == []


def test_a_condition_step_naming_neither_node_nor_selector_is_refused(tmp_path):
    _, _, out = run(tmp_path, KWOK, scenario("  - condition: {type: Ready, status: \"False\"}\n"), expect=2)
    assert "spec.steps[1].condition" in out and "exactly one of 'node' or 'selector'" in out
    assert "Traceback" not in out


def test_a_condition_step_with_a_bad_status_is_refused(tmp_path):
    _, _, out = run(tmp_path, KWOK, scenario("  - condition: {node: n, type: Ready, status: Maybe}\n"), expect=2)
    assert "spec.steps[1].condition.status" in out and "Traceback" not in out
