"""Upstream rows whose input now reaches karpy: CSINode volume limits, a DaemonSet pod carrying the per-node
affinity the DaemonSet controller adds, and pods replaced by one of the same name while a node drains.

Each test drives karpy's shared controllers through the in-memory API (tests/controllers/harness.py), as
``karpy controller`` runs them against a real API server, and asserts what upstream's It body asserts.
"""

from __future__ import annotations

import pytest

from karpy.cloudprovider.ec2.instancetypes import InstanceTypes, KubeletConfigError
from karpy.controllers.termination import MIN_DRAIN_TIME
from karpy.disruption.methods import DisruptionEngine
from disruption_helpers import Cluster, dpod
from controllers.harness import Harness, deleting, nodepool, owner_ref, pod
from controllers.harness import node as node_manifest
from test_world_conformance import _csinode, _nominated, _pvc, _running_node_for, _storage_class

CSI = "fake.csi.provider"


@pytest.fixture
def h() -> Harness:
    return Harness()


# --- scheduling/suite_test.go Context("VolumeUsage") -------------------------------------------------------------


def _claim_pod(name: str, *claims: str) -> dict:
    return pod(name, cpu="10m", unschedulable=True,
               volumes=[{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)])


def _provision_all(h: Harness, *objs: dict) -> None:
    h.create(*objs)
    for o in objs:
        h.reconcile("provisioner.trigger.pod", f"default/{o['metadata']['name']}")
    h.tick(h.settings.batch_idle)
    h.reconcile("provisioner")


def _first_node(h: Harness) -> str:
    """One running, initialized node of a NodePool allowing one large instance type (256 pods, as upstream's suite
    offers one large type), provisioned for a pod that mounts nothing: its name."""
    h.setup(nodepool(requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                    "values": ["c-16x-amd64-linux"]}]))
    _provision_all(h, pod("initial", cpu="10m", unschedulable=True))
    return _running_node_for(h, "initial")


@pytest.mark.parametrize("with_csinode", [True, False])
def test_a_csinode_limit_of_ten_volumes_sends_the_sixth_two_volume_pod_to_a_new_node(h, with_csinode):
    """suite_test.go It("should launch multiple nodes if required due to volume limits"): the node's CSINode lets
    the StorageClass's driver attach 10 volumes; six pods with two claims each of that class: five go to the node,
    the sixth opens a second NodeClaim (2 in all). Without the CSINode all six fit on the node."""
    node = _first_node(h)
    if with_csinode:
        h.create(_csinode(node, **{CSI: 10}))
    h.create(_storage_class("my-storage-class", CSI))
    pvcs = [_pvc(f"my-claim-{ab}-{i}", "my-storage-class") for i in range(6) for ab in "ab"]
    h.create(*pvcs)
    pods = [_claim_pod(f"p{i}", f"my-claim-a-{i}", f"my-claim-b-{i}") for i in range(6)]
    _provision_all(h, *pods)
    on_node = [p["metadata"]["name"] for p in pods if _nominated(h, p["metadata"]["name"]) == node]
    if with_csinode:
        assert len(on_node) == 5
        assert len(h.nodeclaims()) == 2
    else:
        assert len(on_node) == 6
        assert len(h.nodeclaims()) == 1


def test_a_hundred_pods_sharing_one_claim_count_one_volume(h):
    """suite_test.go It("should launch a single node if all pods use the same PVC"): the CSINode's limit is 10,
    the claim is bound to a PersistentVolume; 100 pods mounting that one claim all fit on the node, no new
    NodeClaim. (Upstream's volume names another driver; here it is the limited one, so a claim counted once per
    pod would overflow the limit.)"""
    node = _first_node(h)
    h.create(_csinode(node, **{CSI: 10}), _storage_class("my-storage-class", CSI))
    h.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "my-volume"},
              "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                       "storageClassName": "my-storage-class", "csi": {"driver": CSI, "volumeHandle": "vol-1"},
                       "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                           {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}]}]}}}})
    claim = _pvc("my-claim", "my-storage-class")
    claim["spec"]["volumeName"] = "my-volume"
    claim["metadata"]["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}  # as upstream's test.PVC sets it
    h.create(claim)
    pods = [pod(f"p{i}", cpu=None, unschedulable=True,
                volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "my-claim"}}]) for i in range(100)]
    _provision_all(h, *pods)
    assert len(h.nodeclaims()) == 1
    assert all(_nominated(h, p["metadata"]["name"]) == node for p in pods)


# --- provisioning/suite_test.go Context("Daemonsets") -----------------------------------------------------------


def _daemonset(h: Harness, cpu: str, memory: str, affinity: dict | None = None) -> dict:
    tspec: dict = {"containers": [{"name": "a", "image": "r.example.com/agent:1",
                                   "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    if affinity:
        tspec["affinity"] = affinity
    return h.create_one({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "default"},
                         "spec": {"selector": {"matchLabels": {"ds": "agent"}},
                                  "template": {"metadata": {"labels": {"ds": "agent"}}, "spec": tspec}}})


def _required(*exprs: dict) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": list(exprs)}]}}}


def test_a_daemonset_pods_per_node_name_affinity_is_replaced_by_the_daemonsets_own(h):
    """provisioning/suite_test.go It("should remove daemonset node hostname affinity when considering daemonset
    schedulability"): the NodePool labels its nodes foo=bar; the DaemonSet's template requires foo=bar and asks
    4 CPUs and 4Gi; its pod (a LimitRange changed it) asks 2 CPUs and 2Gi and carries the metadata.name affinity
    the DaemonSet controller gives each pod, naming another node. A 1-CPU pod selecting foo=bar gets an instance
    type holding it and the pod's 2 CPUs: 4 CPUs, neither 8 (the template's requests) nor 2 (the DaemonSet left
    out for the pod's node-name affinity)."""
    h.setup(nodepool(labels={"foo": "bar"}))
    ds = _daemonset(h, "4", "4Gi", _required({"key": "foo", "operator": "In", "values": ["bar"]}))
    ds_pod = pod("agent-x", cpu="2", memory="2Gi", labels={"ds": "agent"}, owner=owner_ref(ds), unschedulable=True)
    ds_pod["spec"]["affinity"] = _required({"key": "metadata.name", "operator": "In", "values": ["node-name"]})
    h.create(ds_pod)
    _provision_all(h, pod("app", cpu="1", memory="1Gi", unschedulable=True, node_selector={"foo": "bar"}))
    (claim,) = h.nodeclaims()
    launched = h.launch(claim["metadata"]["name"])
    assert launched["metadata"]["labels"]["foo"] == "bar"
    assert int(launched["metadata"]["labels"]["karpenter.kwok.sh/instance-cpu"]) == 4


# --- node/termination/suite_test.go ------------------------------------------------------------------------------

TERMINATION = "node.termination"
RS_OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": True}


def test_a_new_pod_of_a_drained_pods_name_is_not_evicted_on_its_account(h):
    """termination/suite_test.go It("should not evict a new pod with the same name using the old pod's eviction
    queue key"): a deleted node starts draining its pod test-pod (a PDB refuses the eviction, so it is left
    pending), something else deletes the pod, the node is released. A new Node of the same name (not being
    deleted) and a new pod named test-pod on it appear: with every controller running for ten minutes the new pod,
    of another UID, is never evicted or deleted."""
    h.setup(nodepool())
    _, n = h.launch_node(instance_types=["c-8x-amd64-linux"])
    name = n["metadata"]["name"]
    h.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "hold", "namespace": "default"},
              "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "hold"}}}})
    h.patch("PodDisruptionBudget", "hold", {"status": {"observedGeneration": 1, "disruptionsAllowed": 0,
                                                        "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}},
            "default", subresource="status")
    old = h.pod_on(name, name="test-pod", labels={"app": "hold"}, owner=RS_OWNER)
    h.delete("Node", name)
    assert h.reconcile(TERMINATION, name) is not None  # draining: the eviction is refused
    assert not deleting(h.get("Pod", "test-pod", "default"))
    h.api.delete("Pod", "test-pod", "default", grace_period_seconds=0)
    h.tick(2 * MIN_DRAIN_TIME)
    for _ in range(3):
        h.reconcile(TERMINATION, name)
    assert h.get("Node", name) is None

    h.create(node_manifest(name))
    h.api.patch("Node", name, {"metadata": {"finalizers": ["karpenter.sh/termination"]}})
    h.delete("PodDisruptionBudget", "hold", "default")
    new = h.pod_on(name, name="test-pod", labels={"app": "hold"}, owner=RS_OWNER)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    h.run_for(600)
    cur = h.get("Pod", "test-pod", "default")
    assert cur is not None and cur["metadata"]["uid"] == new["metadata"]["uid"] and not deleting(cur)
    assert [e for e in h.events("Evicted") if e["involvedObject"].get("uid") == new["metadata"]["uid"]] == []


def test_ten_nodes_of_one_nodeclaim_deleted_together_are_all_released(h):
    """termination/suite_test.go It("should not race if deleting nodes in parallel"): ten Nodes carry one
    NodeClaim's provider ID and are all deleted; the termination controller reconciles each in turn, four rounds
    (drain, volume detachment, instance termination and its check), the clock moving past the minimum drain time
    after the first: every Node is gone. (``karpy controller`` runs one reconcile at a time, so the rounds are
    interleaved rather than concurrent.)"""
    h.setup(nodepool())
    claim, first = h.launch_node(instance_types=["c-8x-amd64-linux"])
    pid = claim["status"]["providerID"]
    names = [first["metadata"]["name"]]
    for i in range(9):
        n = node_manifest(f"{names[0]}-{i}", provider_id=pid)
        n["metadata"]["finalizers"] = ["karpenter.sh/termination"]
        names.append(h.create_one(n)["metadata"]["name"])
    for name in names:
        h.delete("Node", name)
    for round_ in range(4):
        for i, name in enumerate(names):
            h.reconcile(TERMINATION, name)
            if i == 0:
                h.tick(2 * MIN_DRAIN_TIME)
    assert [n for n in names if h.get("Node", n) is not None] == []


# --- aws instancetype/suite_test.go Context("Undecodable Kubelet Configuration") ----------------------------------
# An EC2NodeClass read from the API server (``karpy controller``) is not checked against karpy's input schema:
# a spec.kubelet field of the wrong JSON type reaches the instance type provider as it is.


def _ec2_types() -> InstanceTypes:
    """karpy's EC2 instance type provider holding one described type, m5.large in two zones (no AWS call made)."""
    its = InstanceTypes(None, "us-west-2")
    its.infos = {"m5.large": {"InstanceType": "m5.large", "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
                              "VCpuInfo": {"DefaultVCpus": 2}, "MemoryInfo": {"SizeInMiB": 8192},
                              "NetworkInfo": {"MaximumNetworkInterfaces": 3, "Ipv4AddressesPerInterface": 10}}}
    its.zones = {"m5.large": {"us-west-2a", "us-west-2b"}}
    return its


def _ec2_nodeclass(kubelet: dict) -> dict:
    return {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
            "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "kubelet": kubelet}}


@pytest.mark.parametrize("kubelet, field", [({"clusterDNS": "10.0.0.10"}, "clusterDNS"),
                                            ({"kubeReserved": ["cpu=1"]}, "kubeReserved"),
                                            ({"podsPerCore": "2"}, "podsPerCore"),
                                            ({"maxPods": 29, "cpuCFSQuota": "yes"}, "cpuCFSQuota")])
def test_an_undecodable_kubelet_configuration_fails_the_instance_type_list(kubelet, field):
    """It("should fail List rather than resolve instance types from defaults"): the list fails with an error
    naming spec.kubelet and the field, and returns no instance types (none resolved from defaults)."""
    out = None
    with pytest.raises(KubeletConfigError, match=r"^parsing spec\.kubelet, ") as e:
        out = _ec2_types().list(_ec2_nodeclass(kubelet))
    assert out is None
    assert f"{field}: " in str(e.value)


def test_a_corrected_kubelet_configuration_resolves_instance_types_again():
    """It("should resolve normally once the configuration is corrected"): the failure is not remembered; with
    clusterDNS a list the same provider resolves m5.large."""
    its = _ec2_types()
    with pytest.raises(KubeletConfigError):
        its.list(_ec2_nodeclass({"clusterDNS": "10.0.0.10"}))
    out = its.list(_ec2_nodeclass({"clusterDNS": ["10.0.0.10"]}))
    assert [t.name for t in out] == ["m5.large"] and out[0].offerings


# --- disruption/suite_test.go Describe("Metrics") -----------------------------------------------------------------


def _three_underused_nodes() -> Cluster:
    """Three 8-CPU nodes holding one, one and two half-CPU pods: one smaller node could hold all four."""
    c = Cluster()
    c.nodepool("default", budgets=[{"nodes": "100%"}])
    for i, n in enumerate((1, 1, 2)):
        c.node(f"node-{i}", itype="std-8", pods=[dpod(cpu="500m") for _ in range(n)])
    return c


def test_multi_node_consolidation_past_its_deadline_stops_with_no_command():
    """disruption/suite_test.go It("should stop multi-node consolidation after context deadline is reached"): the
    deadline has passed before the search starts (as upstream's test, a timeout in the past); multi-node
    consolidation gives up with no command and counts one multi-node timeout, and with single-node consolidation
    past its deadline too the pass disrupts nothing. With time left the same cluster is consolidated."""
    c = _three_underused_nodes()
    cmd, _ = DisruptionEngine(clock=lambda: c.now)._multi(c.snapshot(), [])
    assert cmd is not None and len(cmd.candidates) == 3
    engine = DisruptionEngine(clock=lambda: c.now)
    engine.multi_node_timeout = engine.single_node_timeout = -60.0
    cmd, _ = engine._multi(c.snapshot(), [])
    assert cmd is None and engine.timeouts == {"multi": 1}
    assert engine.step(c.snapshot()).command is None


def test_multi_node_consolidation_running_out_of_time_keeps_the_batch_it_found():
    """Upstream returns the last batch its binary search found consolidatable when the deadline passes midway: with
    a clock that moves 40 s per look the search stops after its first probe (two nodes, consolidatable) and keeps
    those two, not the three a full search finds."""
    c = _three_underused_nodes()
    t = [c.now]

    def clock() -> float:
        t[0] += 40.0
        return t[0]

    engine = DisruptionEngine(clock=clock)
    cmd, _ = engine._multi(c.snapshot(), [])
    assert engine.timeouts == {"multi": 1}
    assert cmd is not None and len(cmd.candidates) == 2
