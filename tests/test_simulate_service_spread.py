"""`karpy simulate` with kube-scheduler default spread constraints and a Service selecting a Job's pods.

kube-scheduler (and upstream's DefaultTopologySpreadInjector) deduce a pod's default spread selector from the
Services that select it as well as from its ReplicaSet or StatefulSet, so four Job pods a Service selects are spread
over the three zones. `karpy simulate` skips Service documents in its input (docs/inputs.md, docs/departures.md), so
it never sees the Service and packs them together. The library path, with the Service in the API, is covered by
tests/test_world_conformance.py::test_a_service_gives_a_job_pod_the_default_spread.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from click.testing import CliRunner

from karpy.cli import main

ZONE = "topology.kubernetes.io/zone"

BASE = """\
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: default-spread}
spec:
  settings:
    schedulerConfig:
      podTopologySpread:
        defaultConstraints:
        - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}
---
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
      - {key: topology.kubernetes.io/zone, operator: In, values: [test-zone-a, test-zone-b, test-zone-c]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: batch, namespace: default}
spec:
  parallelism: 4
  template:
    metadata: {labels: {app: batch}}
    spec:
      restartPolicy: Never
      containers: [{name: c, image: worker:1, resources: {requests: {cpu: "1"}}}]
"""

SERVICE = """\
---
apiVersion: v1
kind: Service
metadata: {name: batch, namespace: default}
spec:
  selector: {app: batch}
  ports: [{port: 80}]
"""


def _pods_per_zone(tmp_path, text: str) -> list[int]:
    path = tmp_path / "input.yaml"
    path.write_text(text)
    r = CliRunner().invoke(main, ["simulate", str(path), "-o", "json", "-q"])
    assert r.exit_code == 0, r.output
    items = json.loads(r.stdout)["items"]
    zone_of = {i["metadata"]["name"]: i["metadata"]["labels"][ZONE] for i in items if i["kind"] == "Node"}
    pods = [i for i in items if i["kind"] == "Pod"]
    assert len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods)
    return sorted(Counter(zone_of[p["spec"]["nodeName"]] for p in pods).values())


def test_job_pods_no_service_selects_get_no_default_spread(tmp_path):
    """A Job is not an owner kube-scheduler deduces a selector from: without a Service the pods are not defaulted
    and share one node."""
    assert _pods_per_zone(tmp_path, BASE) == [4]


def test_job_pods_a_service_selects_are_spread_over_the_zones(tmp_path):
    assert _pods_per_zone(tmp_path, BASE + SERVICE) == [1, 1, 2]
