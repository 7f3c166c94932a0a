"""CEL expressions in EC2NodeClass kubelet fields (feature gate NodeClassCEL, off by default), as upstream's
aws/karpenter-provider-aws pkg/providers/instancetype/suite_test.go "Resolution Failures": the same inputs on
m5.large (2 vCPUs, 8192 MiB, 3 ENIs of 10 IPv4 addresses), through karpy's offline EC2 catalog and through the
instance types karpy's AWS provider builds from DescribeInstanceTypes."""

from __future__ import annotations

import pytest

from karpy.cloudprovider import aws
from karpy.cloudprovider.ec2.instancetypes import InstanceTypes
from karpy.cloudprovider.kubelet_cel import KubeletExpressionError
from karpy.resources import CPU, EPHEMERAL, MEMORY, PODS

GATE_ON = {"NodeClassCEL": True}
MIB = 2**20
GIB = 2**30
M5_LARGE = {
    "InstanceType": "m5.large",
    "VCpuInfo": {"DefaultVCpus": 2},
    "MemoryInfo": {"SizeInMiB": 8192},
    "ProcessorInfo": {"SupportedArchitectures": ["x86_64"], "Manufacturer": "Intel"},
    "NetworkInfo": {"DefaultNetworkCardIndex": 0, "MaximumNetworkInterfaces": 3, "Ipv4AddressesPerInterface": 10,
                    "NetworkCards": [{"NetworkCardIndex": 0, "MaximumNetworkInterfaces": 3}]},
    "SupportedUsageClasses": ["on-demand", "spot"],
    "Hypervisor": "nitro",
}
T3_LARGE = {**M5_LARGE, "InstanceType": "t3.large",
            "NetworkInfo": {"DefaultNetworkCardIndex": 0, "MaximumNetworkInterfaces": 3, "Ipv4AddressesPerInterface": 12,
                            "NetworkCards": [{"NetworkCardIndex": 0, "MaximumNetworkInterfaces": 3}]}}


def _nodeclass(kubelet: dict) -> dict:
    return {"metadata": {"name": "default"},
            "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "kubelet": kubelet}}


def _catalog(kubelet: dict, gates: dict | None = GATE_ON) -> list:
    return aws.provider.instance_types("us-east-1", _nodeclass(kubelet), gates)


def _ec2(kubelet: dict, gates: dict | None = GATE_ON) -> list:
    its = InstanceTypes(None, "us-east-1")
    its.infos = {"m5.large": M5_LARGE, "t3.large": T3_LARGE}
    its.zones = {"m5.large": {"us-east-1a"}, "t3.large": {"us-east-1a"}}
    return its.list(_nodeclass(kubelet), gates=gates)


PATHS = pytest.mark.parametrize("listed", [_catalog, _ec2], ids=["catalog", "ec2"])


def _m5(types: list):
    return next(it for it in types if it.name == "m5.large")


@PATHS
@pytest.mark.parametrize("max_pods", ["0 - 1", f"{2**31 - 1} + 1", "1 / (vcpus - vcpus)"],
                         ids=["a negative result", "a result above math.MaxInt32", "a runtime evaluation error"])
def test_a_max_pods_expression_that_cannot_be_resolved_fails_the_instance_type_list(listed, max_pods):
    with pytest.raises(KubeletExpressionError, match="resolving maxPods"):
        listed({"maxPods": max_pods})
    # the failure is not remembered: the same NodeClass with a resolvable expression lists every type
    assert _m5(listed({"maxPods": "min(110, vcpus * 8)"})).capacity[PODS] == 16


@PATHS
def test_max_pods_resolves_from_an_expression_in_range(listed):
    m5 = _m5(listed({"maxPods": "min(110, vcpus * 8)"}))
    assert m5.capacity[PODS] == 16  # min(110, 2 x 8), not the ENI-limited 29
    # the gate off: the expression is ignored and m5.large keeps its 29 ENI-limited pods
    assert _m5(listed({"maxPods": "min(110, vcpus * 8)"}, gates={})).capacity[PODS] == 29


@PATHS
def test_kube_reserved_expressions_resolve_into_the_reserved_overhead(listed):
    # cpu: 2 x 30 = 60m; memory: 8192 / 100 = 81 MiB rounded up to 96Mi; ephemeral-storage stays 3Gi
    m5 = _m5(listed({"kubeReserved": {"cpu": "vcpus * 30", "memory": "memory_mib / 100", "ephemeral-storage": "3Gi"}}))
    static = _m5(listed({"kubeReserved": {"cpu": "60m", "memory": "96Mi", "ephemeral-storage": "3Gi"}}, gates={}))
    default = _m5(listed({}))
    assert m5.overhead == static.overhead
    assert m5.overhead[CPU] == 60  # nothing but kube-reserved reserves CPU
    assert m5.overhead[MEMORY] - default.overhead[MEMORY] == (96 - (11 * 29 + 255)) * MIB
    assert m5.overhead[EPHEMERAL] - default.overhead[EPHEMERAL] == 3 * GIB - GIB


@PATHS
def test_a_max_pods_reference_in_kube_reserved_sees_the_resolved_max_pods(listed):
    m5 = _m5(listed({"maxPods": "min(110, vcpus * 8)", "kubeReserved": {"memory": "max_pods * 11"}}))
    assert m5.capacity[PODS] == 16
    # 16 x 11 = 176Mi (the ENI-limited 29 would give 319, rounded to 320Mi)
    static = _m5(listed({"maxPods": 16, "kubeReserved": {"memory": "176Mi"}}, gates={}))
    assert m5.overhead == static.overhead
    assert m5.overhead[MEMORY] - _m5(listed({})).overhead[MEMORY] == (176 - (11 * 29 + 255)) * MIB


@PATHS
def test_system_reserved_expressions_resolve_into_the_reserved_overhead(listed):
    m5 = _m5(listed({"systemReserved": {"cpu": "vcpus * 30", "memory": "memory_mib / 100"}}))
    static = _m5(listed({"systemReserved": {"cpu": "60m", "memory": "96Mi"}}, gates={}))
    default = _m5(listed({}))
    assert m5.overhead == static.overhead
    assert m5.overhead[CPU] - default.overhead[CPU] == 60
    assert m5.overhead[MEMORY] - default.overhead[MEMORY] == 96 * MIB


# --- through `karpy simulate` and the controller's settings -------------------------------------------------------

SCENARIO = """
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  kubelet: {maxPods: "MAX_PODS"}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 20
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: nginx, resources: {requests: {cpu: 10m}}}]
---
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: s}
spec:
  settings: {featureGates: {NodeClassCEL: GATE}}
"""


def _simulate(tmp_path, max_pods: str, gate: bool) -> tuple[dict, list[int]]:
    """The simulation's summary and how many pods each node took, fewest first."""
    import json

    from click.testing import CliRunner

    from karpy.cli import main

    f = tmp_path / "cel.yaml"
    f.write_text(SCENARIO.replace("MAX_PODS", max_pods).replace("GATE", str(gate).lower()))
    r = CliRunner().invoke(main, ["simulate", str(f), "-o", "json"])
    assert r.exit_code == 0, r.output
    items = json.loads(r.stdout)["items"]
    per_node: dict[str, int] = {}
    for pod in (i for i in items if i["kind"] == "Pod" and i["spec"].get("nodeName")):
        per_node[pod["spec"]["nodeName"]] = per_node.get(pod["spec"]["nodeName"], 0) + 1
    return items[-1]["status"], sorted(per_node.values())


def test_a_simulation_packs_nodes_to_the_resolved_max_pods_only_with_the_gate_on(tmp_path):
    _, on = _simulate(tmp_path, "min(110, vcpus * 8)", True)
    assert on == [4, 16]  # m5.large takes 16 pods, not its 29 ENI-limited ones
    _, off = _simulate(tmp_path, "min(110, vcpus * 8)", False)
    assert off == [20]


def test_an_unresolvable_max_pods_expression_leaves_the_pods_pending_and_says_why(tmp_path):
    out, per_node = _simulate(tmp_path, "0 - 1", True)
    assert out["nodeClaims"] == [] and per_node == []
    reasons = {p["message"] for p in out["pendingPods"]}
    assert len(out["pendingPods"]) == 20 and all("resolving maxPods" in r for r in reasons), reasons


def test_the_controller_takes_the_gate_from_aws_feature_gates_as_upstream():
    from karpy.controller.settings import SettingsError, resolve

    flags = {"cloud_provider": "aws", "cluster_name": "demo"}
    assert resolve(flags, {"AWS_FEATURE_GATES": "NodeClassCEL=true,Unknown=false"}).aws.node_class_cel is True
    assert resolve(flags, {}).aws.node_class_cel is False
    with pytest.raises(SettingsError, match="AWS_FEATURE_GATES"):
        resolve(flags, {"AWS_FEATURE_GATES": "NodeClassCEL"})


def test_a_node_is_configured_with_resolved_reserved_resources_never_an_expression():
    from karpy.cloudprovider.kubelet_cel import InstanceTypeVars, reserved_for_launch

    m5 = InstanceTypeVars(vcpus=2, memory_mib=8192, default_enis=3, ips_per_eni=10, max_pods=16,
                          instance_type="m5.large")
    values = {"cpu": "vcpus * 30", "memory": "max_pods * 11", "ephemeral-storage": "3Gi"}
    assert reserved_for_launch(values, True, lambda: m5) == {"cpu": "60m", "memory": "176Mi",
                                                             "ephemeral-storage": "3Gi"}
    # the gate off: the expressions are left out, the quantities kept
    assert reserved_for_launch(values, False, lambda: m5) == {"ephemeral-storage": "3Gi"}


def _validated(kubelet: dict, gates: dict, dependencies: str = "True") -> tuple:
    """ValidationSucceeded after karpy's AWS NodeClass controller looked at the kubelet expressions."""
    from types import SimpleNamespace

    from karpy.cloudprovider.ec2.controllers import NodeClassController

    its = InstanceTypes(None, "us-east-1")
    its.infos = {"m5.large": M5_LARGE, "t3.large": T3_LARGE}
    its.zones = {"m5.large": {"us-east-1a"}, "t3.large": {"us-east-1a"}}
    ctrl = NodeClassController(None, None, None, None, None, None, provider=SimpleNamespace(gates=gates, types=its))
    cond = {"ValidationSucceeded": (dependencies, "ValidationSucceeded" if dependencies == "True" else "Dependencies",
                                    "")}
    ctrl._validate_kubelet_expressions(_nodeclass(kubelet), {}, cond)
    return cond["ValidationSucceeded"][:2]


def test_the_nodeclass_is_not_valid_while_a_kubelet_expression_does_not_compile_or_evaluate():
    assert _validated({"maxPods": "vcpus +"}, GATE_ON) == ("False", "KubeletExpressionInvalid")
    assert _validated({"kubeReserved": {"cpu": "vcpus > 1"}}, GATE_ON, "Unknown") == ("False", "KubeletExpressionInvalid")
    # compiles, but is negative for every type: resolution would drop it, validation refuses it
    assert _validated({"kubeReserved": {"memory": "0 - vcpus"}}, GATE_ON) == ("False", "KubeletExpressionEvaluationFailed")
    assert _validated({"maxPods": "1 / (vcpus - vcpus)"}, GATE_ON) == ("False", "KubeletExpressionEvaluationFailed")
    assert _validated({"maxPods": "min(110, vcpus * 8)", "kubeReserved": {"memory": "max_pods * 11"}},
                      GATE_ON) == ("True", "ValidationSucceeded")
    # the gate off: any expression leaves the NodeClass not valid, as upstream (nothing launches from it)
    assert _validated({"maxPods": "vcpus +"}, {}) == ("False", "KubeletExpressionsDisabled")
    assert _validated({"maxPods": 29, "kubeReserved": {"cpu": "100m"}}, {}) == ("True", "ValidationSucceeded")
