"""Events Karpenter publishes on NodePools, and the pod errors that go with them: a NodePool whose requirements
leave no available instance type is dropped from scheduling with a NoCompatibleInstanceTypes warning, and a pod
no other NodePool takes says "nodepool requirements filtered out all available instance types" (upstream's
scheduler suite, "NodePool requirements instance filtering")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from karpy.cli import main

FILTERED = "nodepool requirements filtered out all available instance types"
EVENT = "NodePool requirements filtered out all compatible available instance types"


def _nodepool(name: str, requirements: list[dict]) -> dict:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {"spec": {"requirements": requirements, "nodeClassRef": {
                "group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}}}


def _pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "1"}}}]}}


def _run(tmp_path: Path, *docs: dict) -> list[dict]:
    nodeclass = {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": "default"}}
    f = tmp_path / "in.yaml"
    f.write_text(yaml.safe_dump_all([nodeclass, *docs]))
    r = CliRunner().invoke(main, ["simulate", str(f), "-o", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["items"]


def _req(key: str, *values: str) -> dict:
    return {"key": key, "operator": "In", "values": list(values)}


@pytest.mark.parametrize("requirements", [
    [_req("node.kubernetes.io/instance-type", "no-such-type")],
    [_req("kubernetes.io/arch", "amd64"), _req("karpenter.kwok.sh/instance-family", "no-such-family")],
    [_req("topology.kubernetes.io/zone", "no-zone-1", "no-zone-2")],
], ids=["instance-type", "family", "zone"])
def test_requirements_that_leave_no_instance_type_warn_on_the_nodepool_and_fail_the_pods(tmp_path, requirements):
    items = _run(tmp_path, _nodepool("default", requirements), _pod("a"), _pod("b"), _pod("c"))
    summary = items[-1]["status"]
    assert summary["nodeClaims"] == []
    assert [p["message"] for p in summary["pendingPods"]] == [FILTERED] * 3
    warnings = [e for e in items if e["kind"] == "Event" and e["reason"] == "NoCompatibleInstanceTypes"]
    assert warnings and all(e["type"] == "Warning" and e["message"] == EVENT for e in warnings)
    assert {(e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in warnings} == {("NodePool", "default")}
    # deduplicated for a minute, as upstream: the pods' retries do not repeat it every 10 seconds
    assert len(warnings) < 20


def test_the_other_nodepools_still_provision_and_the_empty_one_is_named(tmp_path):
    items = _run(tmp_path, _nodepool("empty", [_req("node.kubernetes.io/instance-type", "no-such-type")]),
                 _nodepool("ok", [_req("karpenter.sh/capacity-type", "on-demand")]), _pod("a"))
    summary = items[-1]["status"]
    assert [c["nodePool"] for c in summary["nodeClaims"]] == ["ok"]
    assert any(e["kind"] == "Event" and e["reason"] == "NoCompatibleInstanceTypes"
               and e["involvedObject"]["name"] == "empty" for e in items)


def test_a_pod_the_remaining_nodepool_cannot_take_names_both(tmp_path):
    items = _run(tmp_path, _nodepool("empty", [_req("node.kubernetes.io/instance-type", "no-such-type")]),
                 _nodepool("arm", [_req("kubernetes.io/arch", "arm64")]),
                 {**_pod("a"), "spec": {**_pod("a")["spec"], "nodeSelector": {"kubernetes.io/arch": "amd64"}}})
    [pending] = items[-1]["status"]["pendingPods"]
    assert 'incompatible with nodepool "arm"' in pending["message"]
    assert f'incompatible with nodepool "empty", {FILTERED}' in pending["message"]
