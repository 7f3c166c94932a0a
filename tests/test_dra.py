"""Dynamic Resource Allocation with upstream's default IgnoreDRARequests (karpy/scheduling/dra.py).

Upstream Karpenter v1.14 turns ``--ignore-dra-requests`` on by default: a pod that references a ResourceClaim
(``spec.resourceClaims``, a container's or init container's ``resources.claims``) is not scheduled at all, a
DaemonSet whose pods reference one adds no overhead, and a node holding such a pod cannot be consolidated (its
pods would not reschedule). Inputs follow upstream's suites: scheduling/suite_test.go "Dynamic Resource
Allocation (DRA)" and provisioning/dra_test.go "Enablement gating (N)".
"""

from __future__ import annotations

import pytest

from controllers.harness import Harness, cond_status, deleting, nodepool, pod as pod_manifest
from helpers import ladder, pod_manifest as solver_pod, template
from karpy import resources as res
from karpy.api.loader import load_text
from karpy.controllers.env import Settings
from karpy.scheduling.dra import DRA_ERROR, DRA_SKIP_LOG, has_dra_requirements
from karpy.scheduling.pods import compile_pod
from karpy.scheduling.scheduler import Scheduler

PROVISIONER, TRIGGER = "provisioner", "provisioner.trigger.pod"
CLAIMS_MESSAGE = "Failed to schedule pod, " + DRA_ERROR


# --- the scheduler: upstream's DescribeTable "should handle DRA pods correctly" ----------------------------------


def _container_claims() -> dict:
    m = solver_pod("dra-container-pod", cpu="1", memory="1Gi")
    m["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu-claim"}]
    return m


def _init_container_claims() -> dict:
    m = solver_pod("dra-init-container-pod", cpu="1", memory="1Gi")
    m["spec"]["initContainers"] = [{"name": "init", "image": "nvidia/cuda:latest",
                                    "resources": {"requests": {"cpu": "500m", "memory": "512Mi"},
                                                  "claims": [{"name": "gpu-init-claim"}]}}]
    return m


def _both_claims() -> dict:
    m = _container_claims()
    m["metadata"]["name"] = "dra-both-pod"
    m["spec"]["initContainers"] = [{"name": "init", "image": "busybox:latest",
                                    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                                                  "claims": [{"name": "storage-init-claim"}]}}]
    return m


def _no_claims() -> dict:
    return solver_pod("non-dra-pod", cpu="1", memory="1Gi")


@pytest.mark.parametrize("manifest,expect_nodeclaim,expect_dra_error", [
    pytest.param(_container_claims, False, True, id="container with resource claims"),
    pytest.param(_init_container_claims, False, True, id="init container with resource claims"),
    pytest.param(_both_claims, False, True, id="pod with both container and init container resource claims"),
    pytest.param(_no_claims, True, False, id="non-DRA pod without resource claims"),
])
def test_dra_pods_are_refused_with_a_dra_error(manifest, expect_nodeclaim, expect_dra_error):
    """Entries of DescribeTable("should handle DRA pods correctly"): a pod with resource claims gets a DRA error
    and no NodeClaim; a pod without gets one NodeClaim and no error."""
    p = compile_pod(manifest())
    results = Scheduler([template()]).solve([p])
    if expect_nodeclaim:
        assert len(results.new_nodeclaims) == 1
        assert results.errors == {}
    else:
        assert results.new_nodeclaims == []
    dra_errors = {k: v for k, v in results.errors.items() if v == DRA_ERROR}
    assert dra_errors == ({p.key: DRA_ERROR} if expect_dra_error else {})


def test_a_pod_level_resource_claim_is_a_dra_requirement():
    """upstream's HasDRARequirements: spec.resourceClaims alone is enough."""
    m = _no_claims()
    m["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]
    assert has_dra_requirements(m["spec"]) and not has_dra_requirements(_no_claims()["spec"])
    results = Scheduler([template()]).solve([compile_pod(m)])
    assert results.new_nodeclaims == [] and results.errors == {"default/non-dra-pod": DRA_ERROR}


def test_a_dra_pod_is_not_relaxed_and_does_not_take_its_twin_down():
    """The DRA error is permanent (trySchedule does not relax the pod's preferences), and a pod identical but for
    its claims is scheduled as usual in the same batch."""
    plain = _no_claims()
    plain["spec"]["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [{"key": "example.com/none", "operator": "In",
                                                           "values": ["x"]}]}}]}}
    dra = {**plain, "metadata": {**plain["metadata"], "name": "dra-pod"},
           "spec": {**plain["spec"], "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu"}]}}
    results = Scheduler([template()]).solve([compile_pod(dra), compile_pod(plain)])
    assert results.errors == {"default/dra-pod": DRA_ERROR}
    assert [p.key for nc in results.new_nodeclaims for p in nc.pods] == ["default/non-dra-pod"]


# --- the provisioner ------------------------------------------------------------------------------------------


def _dra_pod(name: str, cpu: str = "1") -> dict:
    """upstream's draPod: an unschedulable pod referencing the ResourceClaim gpu-claim from its container."""
    m = pod_manifest(name, cpu=cpu, unschedulable=True,
                     resourceClaims=[{"name": "gpu", "resourceClaimName": "gpu-claim"}])
    m["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return m


def _provision(h: Harness, *names: str) -> None:
    for n in names:
        h.reconcile(TRIGGER, f"default/{n}")
    h.tick(h.settings.batch_idle)
    h.reconcile(PROVISIONER)


def test_provisioner_rejects_dra_pods_when_ignore_dra_requests_is_enabled():
    """It("should reject DRA pods with a DRAError when IgnoreDRARequests is enabled (N1)"): the pod is not
    scheduled and no NodeClaim is created; upstream publishes the error on the pod and logs that it skips it."""
    h = Harness()
    h.setup()
    h.create(_dra_pod("dra"))
    _provision(h, "dra")
    assert h.nodeclaims() == []
    assert not (h.get("Pod", "dra", "default")["spec"].get("nodeName"))
    assert [e["message"] for e in h.events("FailedScheduling", involved="dra")] == [CLAIMS_MESSAGE]
    assert [r.get("Pod") for r in h.logs(DRA_SKIP_LOG)] == [{"name": "dra", "namespace": "default"}]


def test_a_dra_pod_beside_others_leaves_their_nodeclaim_alone():
    h = Harness()
    h.setup()
    h.create(_dra_pod("dra"), pod_manifest("web", cpu="1", unschedulable=True))
    _provision(h, "dra", "web")
    (claim,) = h.nodeclaims()
    assert [e["message"] for e in h.events("Nominated", involved="web")] == \
        [f"Pod should schedule on: nodeclaim/{claim['metadata']['name']}"]
    assert h.events("Nominated", involved="dra") == [] and h.events("FailedScheduling", involved="web") == []
    assert [e["message"] for e in h.events("FailedScheduling", involved="dra")] == [CLAIMS_MESSAGE]
    assert _requested_cpu(claim) == 1000  # the web pod's CPU alone


def _dra_daemonset(h: Harness, cpu: str) -> None:
    spec = {"containers": [{"name": "a", "resources": {"requests": {"cpu": cpu}, "claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}]}
    h.create({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "dra-daemon", "namespace": "default"},
              "spec": {"selector": {"matchLabels": {"app": "d"}},
                       "template": {"metadata": {"labels": {"app": "d"}}, "spec": spec}}})


def _cpu(obj: dict, where: str) -> int:
    return res.parse_resource_list({"cpu": obj["status"][where]["cpu"]})[res.CPU]


def _launched_cpu(ignore: bool) -> tuple[int, int]:
    h = Harness(settings=Settings(ignore_dra_requests=ignore))
    h.setup()
    _dra_daemonset(h, "3")
    h.create(pod_manifest("app", cpu="1", unschedulable=True))
    _provision(h, "app")
    (claim,) = h.nodeclaims()
    types = next(r["values"] for r in claim["spec"]["requirements"] if r["key"] == "node.kubernetes.io/instance-type")
    smallest = min(int(t.split("-")[1].rstrip("x")) for t in types)  # c-<vCPUs>x-amd64-linux
    return _requested_cpu(claim), smallest


def _requested_cpu(claim: dict) -> int:
    return res.parse_resource_list({"cpu": claim["spec"]["resources"]["requests"]["cpu"]})[res.CPU]


def test_daemonset_pods_with_dra_requirements_add_overhead_only_when_dra_requests_are_not_ignored():
    """It("should handle DaemonSet pods with DRA requirements based on IgnoreDRARequests flag value"): with
    IgnoreDRARequests (the default) only the application pod counts (1 CPU); with it off the DaemonSet's 3 CPUs
    count too, so a larger instance type is sized."""
    (ignored, ignored_vcpus), (counted, counted_vcpus) = _launched_cpu(True), _launched_cpu(False)
    assert ignored == 1000
    assert counted == 4000
    assert ignored_vcpus < counted_vcpus  # the smallest instance type the NodeClaim allows


def test_an_inflight_nodeclaim_holds_no_room_for_a_dra_daemonset():
    """The room an in-flight NodeClaim keeps for DaemonSet pods to come leaves out those upstream skips."""
    h = Harness()
    h.setup()
    _dra_daemonset(h, "3")
    claim, node = h.launch_node(instance_types=["c-4x-amd64-linux"])
    alloc = _cpu(node, "allocatable")
    h.create(pod_manifest("fits", cpu=f"{alloc - 500}m", unschedulable=True))
    _provision(h, "fits")
    assert [e["message"] for e in h.events("Nominated", involved="fits")] == \
        [f"Pod should schedule on: node/{node['metadata']['name']}"]
    assert len(h.nodeclaims()) == 1


# --- disruption -----------------------------------------------------------------------------------------------

RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": True}


def _consolidation_pass(h: Harness) -> None:
    h.clear_queue()
    h.reconcile("disruption")
    h.tick(15)
    h.clear_queue()
    h.reconcile("disruption")


@pytest.mark.parametrize("with_claim", [False, True], ids=["plain pod: replaced", "DRA pod: kept"])
def test_a_node_holding_a_dra_pod_is_not_consolidated(with_claim):
    """A candidate's pods must reschedule for consolidation; one that references a ResourceClaim never does while
    DRA requests are ignored, so its oversized node stays (the same node with a plain pod is replaced)."""
    h = Harness()
    h.setup(nodepool(consolidate_after="0s", policy="WhenEmptyOrUnderutilized"))
    claim, node = h.launch_node(instance_types=["c-16x-amd64-linux"])
    extra = {"resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}]} if with_claim else {}
    h.pod_on(node["metadata"]["name"], cpu="1", owner=RS, **extra)
    h.reconcile("nodeclaim.disruption", claim["metadata"]["name"])
    assert cond_status(h.get("NodeClaim", claim["metadata"]["name"]), "Consolidatable") == "True"
    _consolidation_pass(h)
    replacements = [c for c in h.nodeclaims() if c["metadata"]["name"] != claim["metadata"]["name"]]
    if with_claim:
        assert replacements == [] and h.disruption.queue == {}
        assert not deleting(h.get("NodeClaim", claim["metadata"]["name"]))
    else:
        assert len(replacements) == 1


def test_a_pending_dra_pod_does_not_hold_back_consolidation():
    """A pending pod's failure does not count against a candidate (upstream's AllNonPendingPodsScheduled): a pod
    refused for its resource claims leaves the oversized node's consolidation alone."""
    h = Harness()
    h.setup(nodepool(consolidate_after="0s", policy="WhenEmptyOrUnderutilized"))
    claim, node = h.launch_node(instance_types=["c-16x-amd64-linux"])
    h.pod_on(node["metadata"]["name"], cpu="1", owner=RS)
    h.create(_dra_pod("dra"))
    h.reconcile("nodeclaim.disruption", claim["metadata"]["name"])
    _consolidation_pass(h)
    assert len([c for c in h.nodeclaims() if c["metadata"]["name"] != claim["metadata"]["name"]]) == 1


def test_a_drifted_node_holding_a_dra_pod_is_not_replaced():
    """Drift replaces a node only when its pods reschedule; a pod referencing a ResourceClaim does not."""
    h = Harness()
    h.setup(nodepool(consolidate_after="Never"))
    claim, node = h.launch_node(instance_types=["c-4x-amd64-linux"])
    h.pod_on(node["metadata"]["name"], cpu="1", owner=RS,
             resourceClaims=[{"name": "gpu", "resourceClaimName": "gpu-claim"}])
    h.patch("NodePool", "default", {"spec": {"template": {"metadata": {"labels": {"rev": "2"}}}}})
    h.reconcile("nodeclaim.disruption", claim["metadata"]["name"])
    assert cond_status(h.get("NodeClaim", claim["metadata"]["name"]), "Drifted") == "True"
    h.clear_queue()
    h.reconcile("disruption")
    assert h.disruption.queue == {} and [c["metadata"]["name"] for c in h.nodeclaims()] == [claim["metadata"]["name"]]
    assert not deleting(h.get("NodeClaim", claim["metadata"]["name"]))


# --- input ----------------------------------------------------------------------------------------------------


def test_dra_kinds_are_skipped_and_ignore_dra_requests_false_is_refused():
    """The resource.k8s.io kinds do not change a decision while DRA requests are ignored: skipped, not refused.
    Asking for upstream's device allocation (ignoreDRARequests: false), which karpy does not simulate, is an error
    naming the field."""
    text = "".join(
        f"---\napiVersion: resource.k8s.io/v1\nkind: {kind}\nmetadata: {{name: gpu, namespace: default}}\nspec: {{}}\n"
        for kind in ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice"))
    loaded = load_text(text, "in.yaml")
    assert loaded.ok and loaded.documents == []
    assert sorted(d.kind for d in loaded.skipped) == ["DeviceClass", "ResourceClaim", "ResourceClaimTemplate",
                                                      "ResourceSlice"]
    refused = load_text("apiVersion: karpy.dev/v1alpha1\nkind: Scenario\nmetadata: {name: s}\n"
                        "spec: {settings: {ignoreDRARequests: false}}\n", "s.yaml")
    (err,) = refused.errors
    assert "spec.settings.ignoreDRARequests: Invalid value: false: karpy does not simulate" in str(err)
    assert load_text("apiVersion: karpy.dev/v1alpha1\nkind: Scenario\nmetadata: {name: s}\n"
                     "spec: {settings: {ignoreDRARequests: true}}\n", "s.yaml").ok
