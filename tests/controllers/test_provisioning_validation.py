"""Pods the provisioner ignores (upstream's Provisioner.Validate), and labels NodeClaims get from requirements.

Mirrors upstream pkg/controllers/provisioning/suite_test.go "Volume Topology Requirements" and "Labels",
and scheduling/suite_test.go "Constraints Validation" / "VolumeUsage": an ignored pod gets no capacity (not
even room on an existing node), stays pending with ``FailedScheduling: Failed to schedule pod, ignoring pod,
<why>``, and does not stop other pods from being provisioned.
"""

from __future__ import annotations

import pytest

from controllers.harness import Harness, labels, node, nodepool, pod

TRIGGER = "provisioner.trigger.pod"
PROVISIONER = "provisioner"
ZONE = "topology.kubernetes.io/zone"


def _provision(h: Harness, *pods: dict) -> None:
    made = h.create(*pods)
    for p in made:
        h.reconcile(TRIGGER, f"{p['metadata']['namespace']}/{p['metadata']['name']}")
    h.tick(h.settings.batch_idle)
    h.reconcile(PROVISIONER)


def _messages(h: Harness, name: str) -> list[str]:
    return [e["message"] for e in h.events("FailedScheduling", involved=name)]


def _nominated(h: Harness, name: str) -> list[str]:
    return [e["message"] for e in h.events("Nominated", involved=name)]


def _pods_of_claims(h: Harness) -> int:
    return sum(int(c["spec"]["resources"]["requests"]["pods"]) for c in h.nodeclaims())


def claim_pod(name: str, *claims: str, **kw) -> dict:
    return pod(name, unschedulable=True, volumes=[{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}}
                                                  for i, c in enumerate(claims)], **kw)


def pvc(name: str, storage_class: str | None = None, volume: str | None = None, finalizers=None,
        bind_completed: bool = True) -> dict:
    spec: dict = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if volume:
        spec["volumeName"] = volume
    meta: dict = {"name": name, "namespace": "default"}
    if volume and bind_completed:  # bound, as the persistent-volume controller leaves a claim it bound
        meta["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def pv(name: str, zone: str | None = None, finalizers=None) -> dict:
    spec: dict = {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                  "csi": {"driver": "disk.example.com", "volumeHandle": name}}
    if zone:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}]}}
    meta: dict = {"name": name}
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": meta, "spec": spec}


def storage_class(name: str, binding: str = "WaitForFirstConsumer") -> dict:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
            "provisioner": "disk.example.com", "volumeBindingMode": binding}


def _assert_ignored(h: Harness, name: str, why: str) -> None:
    assert h.nodeclaims() == []
    assert _nominated(h, name) == []
    assert _messages(h, name) == [f"Failed to schedule pod, ignoring pod, {why}"]


# --- claims upstream rejects ----------------------------------------------------------------------


def test_a_pod_whose_claim_does_not_exist_is_ignored(h):
    """It("should not schedule if invalid pvc")"""
    h.setup()
    _provision(h, claim_pod("p", "invalid"))
    _assert_ignored(h, "p", 'getting persistent volume claim, persistentvolumeclaims "invalid" not found')


def test_an_unbound_claim_with_an_empty_storage_class_is_ignored(h):
    """It("should not schedule with an empty storage class if the pvc is not bound")"""
    h.setup()
    h.create(pvc("c", ""))
    _provision(h, claim_pod("p", "c"))
    _assert_ignored(h, "p", "unbound pvc must define a storage class")


def test_an_unbound_claim_with_a_missing_storage_class_is_ignored(h):
    """It("should not schedule with a missing storage class if the pvc is not bound")"""
    h.setup()
    h.create(pvc("c", "invalid-storage-class"))
    _provision(h, claim_pod("p", "c"))
    _assert_ignored(h, "p", 'failed to validate pvc, failed to get storage class, '
                            'storageclasses.storage.k8s.io "invalid-storage-class" not found')


@pytest.mark.parametrize("storage_class_name", ["", "invalid-storage-class"])
def test_a_bound_claim_schedules_whatever_its_storage_class(h, storage_class_name):
    """It("should schedule with an empty storage class if the pvc is bound"),
    It("should schedule with a missing storage class if the pvc is bound")"""
    h.setup()
    h.create(pv("vol"), pvc("c", storage_class_name, volume="vol"))
    _provision(h, claim_pod("p", "c"))
    assert len(h.nodeclaims()) == 1
    assert _messages(h, "p") == []


@pytest.mark.parametrize("case", ["pvc", "storage class", "volume name"])
def test_a_pod_with_an_invalid_claim_does_not_block_a_valid_pod(h, case):
    """It("should schedule valid pods when a pod with an invalid pvc is encountered (pvc)"),
    (storage class), (volume name): batch 1 holds the invalid pod, batch 2 a plain one."""
    h.setup()
    if case == "pvc":
        bad = claim_pod("bad", "invalid")
    elif case == "storage class":
        h.create(pvc("c", "invalid-storage-class"))
        bad = claim_pod("bad", "c")
    else:
        h.create(pvc("c", "", volume="invalid-volume"))
        bad = claim_pod("bad", "c")
    _provision(h, bad)
    assert h.nodeclaims() == []
    _provision(h, pod("good", unschedulable=True))
    (c,) = h.nodeclaims()
    assert c["spec"]["resources"]["requests"]["pods"] == "1"
    assert [e["involvedObject"]["name"] for e in h.events("Nominated")] == ["good"]
    assert _messages(h, "bad")[0].startswith("Failed to schedule pod, ignoring pod, ")


def test_an_unbound_claim_whose_storage_class_binds_immediately_is_ignored(h):
    """It("should not launch nodes for pod with unbound volume for volumeBindingMode immediate")"""
    h.setup()
    h.create(storage_class("now", binding="Immediate"), pvc("c", "now"))
    _provision(h, claim_pod("p", "c"))
    _assert_ignored(h, "p", "failed to validate pvc, pvc with immediate volume binding mode must be bound")


def test_a_pod_whose_claim_is_being_deleted_is_ignored(h):
    """It("should not launch nodes for pod with deleting persistentVolumeClaim")"""
    h.setup()
    h.create(storage_class("wffc"), pvc("c", "wffc", finalizers=["kubernetes.io/pvc-protection"]))
    h.delete("PersistentVolumeClaim", "c", "default")
    _provision(h, claim_pod("p", "c"))
    _assert_ignored(h, "p", "persistentvolumeclaim is being deleted")


def test_a_pod_whose_bound_volume_is_being_deleted_is_ignored(h):
    """It("should not launch nodes for pod with bound persistentVolume that is marked for deletion")"""
    h.setup()
    h.create(pv("vol", finalizers=["kubernetes.io/pv-protection"]), pvc("c", "", volume="vol"))
    h.delete("PersistentVolume", "vol")
    _provision(h, claim_pod("p", "c"))
    _assert_ignored(h, "p", "failed to validate pvc, persistentvolume is being deleted")


def test_a_pod_whose_claim_is_lost_is_ignored(h):
    """It("should not launch nodes for pod with Lost persistentVolumeClaim")"""
    h.setup()
    h.create(pv("vol"), pvc("c", "", volume="vol"))
    h.patch("PersistentVolumeClaim", "c", {"status": {"phase": "Lost"}}, "default", subresource="status")
    _provision(h, claim_pod("p", "c"))
    _assert_ignored(h, "p", "persistentvolumeclaim bound to non-existent persistentvolume")


def test_a_claim_naming_its_volume_before_the_binding_completed_is_unbound(h):
    """kube-scheduler (and upstream, volumetopology.go) treat a claim with volumeName as bound only once the
    persistent-volume controller annotated it pv.kubernetes.io/bind-completed: until then the pod is ignored."""
    h.setup()
    h.create(pv("vol", zone="test-zone-b"), pvc("c", "", volume="vol", bind_completed=False))
    _provision(h, claim_pod("p", "c"))
    _assert_ignored(h, "p", "pvc is considered unbound because it does not contain annotation")
    h.patch("PersistentVolumeClaim", "c", {"metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}}},
            "default")
    _provision(h, claim_pod("p2", "c"))
    assert len(h.list("NodeClaim")) == 1


def test_an_ignored_pod_is_not_placed_on_an_existing_node_either(h):
    """Ignored means ignored: the missing-claim pod is not nominated to an existing node with room."""
    h.setup()
    h.create(node("roomy", cpu="8", memory="32Gi"))
    _provision(h, claim_pod("p", "missing"), pod("plain", unschedulable=True))
    assert _nominated(h, "p") == []
    assert _nominated(h, "plain") == ["Pod should schedule on: node/roomy"]


def test_ignored_pods_are_not_pending_pods_for_consolidation(h):
    """Upstream's disruption simulation starts from GetPendingPods, which validates: an ignored pod is not a
    pod consolidation must make room for."""
    h.setup()
    _provision(h, claim_pod("p", "missing"))
    pending, _ = h.provisioner.provisionable()
    assert pending == []
    assert [e.key for e, _ in h.provisioner.ignored] == ["default/p"]


# --- node constraints upstream restricts ----------------------------------------------------------


def test_a_pod_requiring_a_hostname_is_ignored_even_when_the_node_exists(h):
    """It("should not schedule pods that have node selectors with restricted labels"): kubernetes.io/hostname."""
    h.setup()
    h.create(node("test", cpu="8", memory="32Gi"))
    p = pod("p", unschedulable=True, affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["test"]}]}]}}})
    _provision(h, p)
    assert h.nodeclaims() == [] and _nominated(h, "p") == []
    (msg,) = _messages(h, "p")
    assert msg.startswith("Failed to schedule pod, ignoring pod, using label kubernetes.io/hostname is not allowed "
                          "as it might interfere with the internal provisioning logic")


def test_a_pod_requiring_a_label_in_the_karpenter_domain_is_ignored(h):
    """It("should not schedule pods that have node selectors with restricted domains"): karpenter.sh/test."""
    h.setup()
    h.create(node("carries-it", cpu="8", memory="32Gi", labels={"karpenter.sh/test": "test"}))
    _provision(h, pod("p", unschedulable=True, node_selector={"karpenter.sh/test": "test"}),
               pod("sub", unschedulable=True, node_selector={"sub.karpenter.sh/test": "test"}))
    assert h.nodeclaims() == [] and _nominated(h, "p") == [] and _nominated(h, "sub") == []
    assert "using label karpenter.sh/test is not allowed" in _messages(h, "p")[0]
    assert "using label sub.karpenter.sh/test is not allowed" in _messages(h, "sub")[0]


def test_well_known_labels_in_the_karpenter_domain_are_allowed(h):
    h.setup()
    _provision(h, pod("p", unschedulable=True, node_selector={"karpenter.sh/nodepool": "default",
                                                             "karpenter.sh/capacity-type": "on-demand"}))
    assert len(h.nodeclaims()) == 1


def test_a_pod_that_avoids_karpenter_nodes_is_ignored_quietly(h):
    """validateKarpenterManagedLabelCanExist: karpenter.sh/nodepool DoesNotExist -> ignored, no event."""
    h.setup()
    p = pod("p", unschedulable=True, affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]}]}}})
    _provision(h, p)
    assert h.nodeclaims() == [] and _messages(h, "p") == []
    assert [e.key for e, _ in h.provisioner.ignored] == ["default/p"]


@pytest.mark.parametrize("term, why", [
    ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
     "node selector term with matchFields is not supported"),
    ({"matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["cheap"]}]},
     "no valid values found in ['cheap'] for karpenter.sh/capacity-type"),
    ({"matchExpressions": [{"key": "example.com/gen", "operator": "Gt", "values": ["-1"]}]},
     "key example.com/gen with operator Gt must have a single positive integer value"),
], ids=["matchFields", "capacity-type-value", "negative-gt"])
def test_other_invalid_node_affinity_is_ignored(h, term, why):
    h.setup()
    p = pod("p", unschedulable=True, affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]}}})
    _provision(h, p)
    assert h.nodeclaims() == []
    (msg,) = _messages(h, "p")
    assert why in msg


@pytest.mark.parametrize("domain", ["kubernetes.io", "k8s.io", "subdomain.kubernetes.io", "subdomain.k8s.io"])
def test_nodepool_requirements_in_the_kubernetes_domains_label_the_node(h, domain):
    """It("should schedule pods that have node selectors with label in the kubernetes domains"),
    It("... with label in subdomain from kubernetes domains")"""
    h.setup(nodepool(requirements=[{"key": f"{domain}/test", "operator": "In", "values": ["test-value"]}]))
    _provision(h, pod("p", unschedulable=True))
    (c,) = h.nodeclaims()
    assert labels(c)[f"{domain}/test"] == "test-value"


@pytest.mark.parametrize("domain", ["kubernetes.io", "k8s.io", "subdomain.kubernetes.io", "subdomain.k8s.io"])
def test_template_labels_in_the_kubernetes_domains_may_be_required_by_pods(h, domain):
    """It("should label nodes with labels in the kubernetes domains"),
    It("should label nodes with labels in the subdomain from kubernetes domains")"""
    h.setup(nodepool(labels={f"{domain}/test": "test-value"}))
    _provision(h, pod("p", unschedulable=True, affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": f"{domain}/test", "operator": "In", "values": ["test-value"]}]}]}}}))
    (c,) = h.nodeclaims()
    assert labels(c)[f"{domain}/test"] == "test-value"


def test_requirements_of_every_operator_label_the_node(h):
    """It("should label nodes"): In gives its value; NotIn, Lt, Gt and Exists an allowed value; DoesNotExist none."""
    h.setup(nodepool(labels={"test-key-1": "test-value-1"}, requirements=[
        {"key": "test-key-2", "operator": "In", "values": ["test-value-2"]},
        {"key": "test-key-3", "operator": "NotIn", "values": ["test-value-3"]},
        {"key": "test-key-4", "operator": "Lt", "values": ["4"]},
        {"key": "test-key-5", "operator": "Gt", "values": ["5"]},
        {"key": "test-key-6", "operator": "Exists"},
        {"key": "test-key-7", "operator": "DoesNotExist"},
    ]))
    _provision(h, pod("p", unschedulable=True))
    (c,) = h.nodeclaims()
    got = labels(c)
    assert got["karpenter.sh/nodepool"] == "default"
    assert got["test-key-1"] == "test-value-1" and got["test-key-2"] == "test-value-2"
    assert got["test-key-3"] != "test-value-3"
    assert int(got["test-key-4"]) < 4 and int(got["test-key-5"]) > 5
    assert "test-key-6" in got and "test-key-7" not in got


def test_well_known_requirements_do_not_become_labels(h):
    """It("should not label nodes with well-known labels from requirements")"""
    h.setup(nodepool(requirements=[{"key": "foo", "operator": "In", "values": ["bar"]},
                                   {"key": "node.kubernetes.io/windows-build", "operator": "NotIn",
                                    "values": ["test-value"]}]))
    _provision(h, pod("p", unschedulable=True))
    (c,) = h.nodeclaims()
    assert labels(c)["foo"] == "bar"
    assert "node.kubernetes.io/windows-build" not in labels(c)


def test_a_providers_own_domain_is_restricted_but_its_well_known_labels_are_not(h):
    """Providers add their domain to RestrictedLabelDomains (kwok: karpenter.kwok.sh) and register their labels
    as well known."""
    h.setup()
    _provision(h, pod("odd", unschedulable=True, node_selector={"karpenter.kwok.sh/unknown": "x"}),
               pod("family", unschedulable=True, node_selector={"karpenter.kwok.sh/instance-family": "c"}))
    assert "using label karpenter.kwok.sh/unknown is not allowed" in _messages(h, "odd")[0]
    assert _messages(h, "family") == [] and len(h.nodeclaims()) == 1
