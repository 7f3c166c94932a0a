"""CapacityBuffer (autoscaling.x-k8s.io/v1beta1, feature gate CapacityBuffer) in `karpy simulate`.

Upstream: kubernetes-sigs/karpenter v1.14 pkg/controllers/capacitybuffer (the status: replicas from
replicas / percentage / limits, ReadyForProvisioning) and pkg/controllers/provisioning/buffers.go (virtual
pods scheduled with the pending pods; the Provisioning condition; nodes holding virtual pods are not empty).
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from karpy.cli import main

NODECLASS = """
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
"""

NODEPOOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 1m}
  template:
    spec:
      requirements:
      - {key: kubernetes.io/arch, operator: In, values: [amd64]}
      - {key: kubernetes.io/os, operator: In, values: [linux]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      - {key: node.kubernetes.io/instance-type, operator: In, values: [c-2x-amd64-linux]}
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
"""

# one chunk per c-2x node (1.5 CPU of its 1.9 allocatable)
TEMPLATE = """
apiVersion: v1
kind: PodTemplate
metadata: {name: chunk, namespace: default}
template:
  metadata: {labels: {app: chunk}}
  spec:
    containers:
    - {name: c, image: pause, resources: {requests: {cpu: 1500m, memory: 1Gi}}}
"""


def buffer(spec: str = "{replicas: 2, podTemplateRef: {name: chunk}}", name: str = "headroom") -> str:
    return f"""
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata: {{name: {name}, namespace: default}}
spec: {spec}
"""


def deployment(replicas: int, cpu: str = "1500m") -> str:
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - {{name: app, image: nginx, resources: {{requests: {{cpu: {cpu}, memory: 1Gi}}}}}}
"""


def scenario(gate: bool = True, steps: str = "") -> str:
    return f"""
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {{name: buffers}}
spec:
  settings: {{featureGates: {{CapacityBuffer: {str(gate).lower()}}}}}
  steps:
  - advance: 2m
{steps}"""


def run(tmp_path: Path, *docs: str, until: str = "1h", args: tuple = ()):
    f = tmp_path / "in.yaml"
    f.write_text("\n---\n".join(d.strip("\n") for d in docs) + "\n")
    return CliRunner().invoke(main, ["simulate", str(f), "-o", "json", "--until", until, *args])


def simulate(tmp_path: Path, *docs: str, until: str = "1h") -> tuple[dict, list[dict]]:
    r = run(tmp_path, *docs, until=until)
    assert r.exit_code == 0, r.output
    items = json.loads(r.stdout)["items"]
    return next(i for i in items if i["kind"] == "SimulationSummary")["status"], items


def alive(summary: dict) -> list[dict]:
    return [c for c in summary["nodeClaims"] if c["deletedAt"] is None and not c["launchFailed"]]


def buffer_status(items: list[dict], name: str = "headroom") -> dict:
    return next(i for i in items if i["kind"] == "CapacityBuffer" and i["metadata"]["name"] == name)["status"]


def conditions(status: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or ()}


def test_a_buffer_of_two_chunks_launches_two_nodes_with_no_pod_and_keeps_them(tmp_path):
    s, items = simulate(tmp_path, NODECLASS, NODEPOOL, TEMPLATE, buffer(), scenario())
    assert len(alive(s)) == 2
    assert s["pods"]["total"] == 0
    # an hour with consolidation after 1 minute: the empty-looking nodes are kept as headroom
    assert s["disruptions"] == []
    st = buffer_status(items)
    assert st["replicas"] == 2 and st["podTemplateRef"] == {"name": "chunk"}
    assert conditions(st)["ReadyForProvisioning"] == ("True", "Resolved")
    assert conditions(st)["Provisioning"] == ("True", "FitsExistingCapacity")


def test_pods_that_take_the_headroom_are_placed_at_once_and_the_buffer_launches_more(tmp_path):
    s, _ = simulate(tmp_path, NODECLASS, NODEPOOL, TEMPLATE, buffer(), deployment(0),
                    scenario(steps="  - scale: {kind: Deployment, name: web, replicas: 2}\n  - advance: 10m\n"))
    assert s["pods"]["pending"] == 0 and s["pods"]["total"] == 2
    # two nodes for the pods (the buffer's first two) and two new ones for the buffer's headroom
    assert len(alive(s)) == 4


def test_without_the_gate_a_buffer_changes_nothing(tmp_path):
    s, _ = simulate(tmp_path, NODECLASS, NODEPOOL, TEMPLATE, buffer(), scenario(gate=False))
    assert alive(s) == []


def test_a_percentage_of_a_deployment_rounds_up(tmp_path):
    spec = "{percentage: 20, scalableRef: {kind: Deployment, name: web}}"
    s, items = simulate(tmp_path, NODECLASS, NODEPOOL, deployment(6), buffer(spec), scenario())
    st = buffer_status(items)
    assert st["replicas"] == 2  # ceil(6 * 20%)
    assert "podTemplateRef" not in st
    assert len(alive(s)) == 8 and s["pods"]["pending"] == 0


def test_limits_cap_the_chunks(tmp_path):
    spec = "{replicas: 5, limits: {cpu: '3'}, podTemplateRef: {name: chunk}}"
    s, items = simulate(tmp_path, NODECLASS, NODEPOOL, TEMPLATE, buffer(spec), scenario())
    assert buffer_status(items)["replicas"] == 2  # 3 CPU / 1.5 CPU
    assert len(alive(s)) == 2


def test_a_missing_pod_template_is_reported_and_launches_nothing(tmp_path):
    s, items = simulate(tmp_path, NODECLASS, NODEPOOL, buffer(), scenario())
    assert alive(s) == []
    st = buffer_status(items)
    assert conditions(st)["ReadyForProvisioning"][0:2] == ("False", "PodTemplateNotFound")


def test_deleting_the_buffer_lets_consolidation_remove_its_nodes(tmp_path):
    s, _ = simulate(tmp_path, NODECLASS, NODEPOOL, TEMPLATE, buffer(), scenario(
        steps="  - delete: {kind: CapacityBuffer, name: headroom}\n  - advance: 10m\n"))
    assert alive(s) == []
    assert {d["reason"] for d in s["disruptions"]} == {"Empty"}


def test_invalid_buffers_exit_2_naming_the_field(tmp_path):
    both = "{replicas: 1, podTemplateRef: {name: chunk}, scalableRef: {kind: Deployment, name: web}}"
    r = run(tmp_path, TEMPLATE, buffer(both))
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "CapacityBuffer/headroom" in r.output and "either PodTemplateRef or ScalableRef" in r.output
    r = run(tmp_path, TEMPLATE, buffer("{podTemplateRef: {name: chunk}}"))
    assert r.exit_code == 2 and "replicas or limits must also be set" in r.output
    r = run(tmp_path, TEMPLATE, buffer("{replicas: -1, podTemplateRef: {name: chunk}}"))
    assert r.exit_code == 2 and "spec.replicas" in r.output
