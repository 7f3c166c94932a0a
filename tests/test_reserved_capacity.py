"""Capacity reservations (feature gate ReservedCapacity, on by default) in `karpy simulate`.

Upstream: kubernetes-sigs/karpenter pkg/cloudprovider (reserved offerings with a reservation ID and a
capacity), the launch's capacity-type priority (reserved first), and the AWS provider's
CapacityReservationDrift. A Scenario declares the cloud's reservations; each adds a `reserved` offering
that Karpenter prefers until the reservation is full, then falls back to on-demand; a node whose
reservation is removed drifts and is replaced.
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
  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 1m}
  template:
    spec:
      requirements:
      - {key: kubernetes.io/arch, operator: In, values: [amd64]}
      - {key: kubernetes.io/os, operator: In, values: [linux]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [reserved, on-demand]}
      - {key: node.kubernetes.io/instance-type, operator: In, values: [c-2x-amd64-linux, c-4x-amd64-linux]}
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
"""


def deployment(replicas: int = 3) -> str:
    # one pod per node (hostname anti-affinity)
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
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - {{labelSelector: {{matchLabels: {{app: web}}}}, topologyKey: kubernetes.io/hostname}}
      containers:
      - name: app
        image: nginx
        resources: {{requests: {{cpu: 1, memory: 1Gi}}}}
"""


RESERVATION = "[{id: cr-web, instanceType: c-2x-amd64-linux, zone: test-zone-b, count: 2}]"


def scenario(reservations: str = RESERVATION, steps: str = "", gates: str = "{}") -> str:
    return f"""
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {{name: reserved}}
spec:
  settings: {{featureGates: {gates}}}
  reservations: {reservations}
  steps:
  - advance: 5m
{steps}"""


def simulate(tmp_path: Path, *docs: str, until: str = "1h") -> dict:
    f = tmp_path / "in.yaml"
    f.write_text("\n---\n".join(d.strip("\n") for d in docs) + "\n")
    r = CliRunner().invoke(main, ["simulate", str(f), "-o", "json", "--until", until])
    assert r.exit_code == 0, r.output
    items = json.loads(r.stdout)["items"]
    return next(i for i in items if i["kind"] == "SimulationSummary")["status"]


def run_cli(tmp_path: Path, *docs: str) -> object:
    f = tmp_path / "in.yaml"
    f.write_text("\n---\n".join(d.strip("\n") for d in docs) + "\n")
    return CliRunner().invoke(main, ["simulate", str(f), "-o", "json"])


def alive(summary: dict) -> list[dict]:
    return [c for c in summary["nodeClaims"] if c["deletedAt"] is None and not c["launchFailed"]]


def test_the_first_two_nodes_use_the_reservation_and_the_third_is_on_demand(tmp_path):
    s = simulate(tmp_path, NODECLASS, NODEPOOL, deployment(3), scenario())
    nodes = alive(s)
    assert len(nodes) == 3 and s["pods"]["pending"] == 0
    reserved = [c for c in nodes if c["capacityType"] == "reserved"]
    assert len(reserved) == 2
    assert all(c["zone"] == "test-zone-b" and c["instanceType"] == "c-2x-amd64-linux" for c in reserved)
    assert [c["capacityType"] for c in nodes if c not in reserved] == ["on-demand"]
    # nothing was disrupted: the reserved nodes are kept
    assert s["disruptions"] == []


def test_the_reserved_nodes_carry_the_capacity_type_and_the_reservation_id(tmp_path):
    f = tmp_path / "in.yaml"
    f.write_text("\n---\n".join(d.strip("\n") for d in (NODECLASS, NODEPOOL, deployment(2), scenario())) + "\n")
    r = CliRunner().invoke(main, ["simulate", str(f), "-o", "json", "--until", "10m"])
    items = json.loads(r.stdout)["items"]
    nodes = [i for i in items if i["kind"] == "Node"]
    assert len(nodes) == 2
    for n in nodes:
        assert n["metadata"]["labels"]["karpenter.sh/capacity-type"] == "reserved"
        assert n["metadata"]["labels"]["karpy.dev/reservation-id"] == "cr-web"


def test_a_reservation_price_is_what_the_node_costs(tmp_path):
    cheap = "[{id: cr-web, instanceType: c-2x-amd64-linux, zone: test-zone-b, count: 2, price: 0.01}]"
    s = simulate(tmp_path, NODECLASS, NODEPOOL, deployment(2), scenario(cheap))
    assert [c["capacityType"] for c in alive(s)] == ["reserved", "reserved"]
    assert [c["pricePerHour"] for c in alive(s)] == ["0.0100", "0.0100"]
    assert s["costPerHour"] == "0.0200"


def test_removing_the_reservation_drifts_its_nodes_onto_on_demand(tmp_path):
    s = simulate(tmp_path, NODECLASS, NODEPOOL, deployment(3),
                 scenario(steps="  - reservations: []\n  - advance: 30m\n"))
    nodes = alive(s)
    assert len(nodes) == 3 and s["pods"]["pending"] == 0
    assert {c["capacityType"] for c in nodes} == {"on-demand"}
    drifted = [d for d in s["disruptions"] if d["reason"] == "Drifted"]
    assert len(drifted) == 2, s["disruptions"]


def test_without_the_gate_reservations_are_not_offered(tmp_path):
    s = simulate(tmp_path, NODECLASS, NODEPOOL, deployment(3), scenario(gates="{ReservedCapacity: false}"))
    assert {c["capacityType"] for c in alive(s)} == {"on-demand"}


def test_a_nodepool_that_allows_only_reserved_stops_at_the_reservation(tmp_path):
    only = NODEPOOL.replace("values: [reserved, on-demand]", "values: [reserved]")
    s = simulate(tmp_path, NODECLASS, only, deployment(3), scenario())
    assert [c["capacityType"] for c in alive(s)] == ["reserved", "reserved"]
    assert s["pods"]["pending"] == 1


def test_bad_reservations_exit_2_naming_the_field(tmp_path):
    dup = "[{id: a, instanceType: c-2x-amd64-linux, zone: test-zone-b, count: 1}, " \
          "{id: a, instanceType: c-2x-amd64-linux, zone: test-zone-a, count: -1}]"
    r = run_cli(tmp_path, NODECLASS, NODEPOOL, scenario(dup))
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "spec.reservations[1].id" in r.output and "duplicate reservation ID" in r.output
    assert "spec.reservations[1].count" in r.output
    r = run_cli(tmp_path, NODECLASS, NODEPOOL, scenario("[{id: a, zone: z, count: 1}]"))
    assert r.exit_code == 2 and "spec.reservations[0].instanceType" in r.output
