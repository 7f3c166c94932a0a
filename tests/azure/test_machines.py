"""karpy's Azure provider on the AKS Machine API path (PROVISION_MODE=aksmachineapi) against the fake ARM, through
the SDK's own pipeline (bearer tokens, retries, ARM long-running-operation polling)."""

from __future__ import annotations

import time

import pytest

from karpy.cloudprovider.arm.machines import (
    MACHINE_ANNOTATION,
    AKSMachineProvider,
    kubelet_may_set,
    machine_name,
    machine_of_vm,
    node_image_version,
)
from karpy.cloudprovider.arm.offerings import HOUR, SKU_NOT_AVAILABLE_ON_DEMAND_TTL
from karpy.cloudprovider.arm.provider import LaunchError
from karpy.cloudprovider.provider import InsufficientCapacityError, NodeClaimNotFoundError
from karpy.controller.settings import SettingsError, resolve

from .conftest import Clock, first_read_kept, gc_keeping
from .fakearm import CIG_UBUNTU, NODE_RG, SUBSCRIPTION

NODECLASS = {"kind": "AKSNodeClass", "metadata": {"name": "default"},
             "spec": {"imageFamily": "Ubuntu2204", "tags": {"team": "payments"}}}
POOL = "machines"
MACHINES = (f"/subscriptions/{SUBSCRIPTION}/resourceGroups/rg/providers/Microsoft.ContainerService/managedClusters/"
            f"workshop/agentPools/{POOL}")


def claim(name="default-demo-abcde", types=("Standard_D2pls_v6", "Standard_D4pls_v6"), ct=("on-demand",)):
    return {"metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default-demo", "aks-karpenter": "demo"}},
            "spec": {"nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
                     "requirements": [
                         {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": list(types)},
                         {"key": "karpenter.sh/capacity-type", "operator": "In", "values": list(ct)}],
                     "startupTaints": [{"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"}]}}


@pytest.fixture
def machine_env(env, monkeypatch):
    monkeypatch.setenv("PROVISION_MODE", "aksmachineapi")
    monkeypatch.setenv("AKS_MACHINES_POOL_NAME", POOL)
    return env


def make(lookup, clock=None, **kw):
    from karpy.cloudprovider.arm.clients import make_clients
    from karpy.cloudprovider.arm.skus import InstanceTypes, list_skus_via

    s = resolve({"cloud_provider": "azure"}).azure
    clients = make_clients(s)
    clock = clock or Clock()
    types = InstanceTypes(first_read_kept(list_skus_via(clients.compute, s.location), s.location), s.location,
                          now=clock)
    types.refresh()
    p = AKSMachineProvider(clients, s, types, lookup, lambda: {"ca": "Q0EgUEVN", "version": "1.33.2"}, now=clock,
                           poll_interval=0, **kw)
    return p, clock


@pytest.fixture
def provider(fake, machine_env):
    deleted: list[str] = []
    p, clock = make(lambda kind, name: NODECLASS, delete_nodeclaim=deleted.append)
    p.clock, p.deleted_claims = clock, deleted
    yield p
    p.close()


def wait(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    raise AssertionError("timed out")


def machine_puts(fake):
    return fake.calls("PUT", r"/agentPools/[^/]+/machines/[^/]+$")


def _unavailable(provider, name):
    return sorted((o.zone, o.capacity_type) for it in provider.get_instance_types({}, NODECLASS) if it.name == name
                  for o in it.offerings if not o.available)


# --- names, images, labels ----------------------------------------------------------------------------
def test_machine_names_as_upstream():
    assert machine_name("default-a1b2c") == "default-a1b2c"
    assert machine_name("123456789-123456789-12345678-a1b2c") == "123456789-123456789-12345678-a1b2c"  # 34: kept
    long = machine_name("123456789-123456789-123456789-a1b2c")
    # "3456789" past the 22 kept characters, hashed as upstream (hashstructure v2.0.2, checked with Go)
    assert long == "123456789-123456789-12zc32rh-a1b2c"
    assert long != machine_name("123456789-123456789-12345678X-a1b2c")  # the hashed part counts
    assert machine_name("extremely-long-nodepool-name-that-definitely-exceeds-limits-xyz7890").endswith("-xyz7890")
    with pytest.raises(LaunchError, match="no AKS machine name"):
        machine_name("x" * 40)


def test_vm_names_tell_machines_from_vms():
    assert machine_of_vm(POOL, "aks-machines-default-demo-abcde-12345678-vm") == "default-demo-abcde"
    assert machine_of_vm(POOL, "aks-default-demo-abcde") is None  # a VM karpy created on the VM path
    assert machine_of_vm(POOL, "aks-other-default-demo-abcde-12345678-vm") is None  # another pool
    assert machine_of_vm("", "aks--x-1-vm") is None


def test_node_image_versions_from_gallery_images():
    assert node_image_version(f"/CommunityGalleries/{CIG_UBUNTU}/images/2204gen2arm64containerd/versions/202506.01.0") \
        == "AKSUbuntu-2204gen2arm64containerd-202506.01.0"
    assert node_image_version("/subscriptions/109a5e88-1234-1234-1234-123456789012/resourceGroups/AKS-Ubuntu/providers/"
                              "Microsoft.Compute/galleries/AKSUbuntu/images/2204gen2containerd/versions/2022.10.03") \
        == "AKSUbuntu-2204gen2containerd-2022.10.03"
    with pytest.raises(LaunchError, match="not a gallery image version"):
        node_image_version("Canonical:ubuntu:22_04:latest")


def test_labels_aks_and_kubelet_keep_are_not_sent():
    for key in ("kubernetes.azure.com/mode", "agentpool", "kubernetes.io/arch", "topology.kubernetes.io/zone",
                "node.kubernetes.io/instance-type", "kubernetes.io/role", "node-role.kubernetes.io/worker"):
        assert not kubelet_may_set(key), key
    for key in ("karpenter.sh/nodepool", "karpenter.azure.com/sku-family", "aks-karpenter",
                "node.kubernetes.io/exclude-from-external-load-balancers", "x.kubelet.kubernetes.io/y"):
        assert kubelet_may_set(key), key


# --- settings -----------------------------------------------------------------------------------------
def test_machine_mode_needs_the_pool(env, monkeypatch):
    monkeypatch.setenv("PROVISION_MODE", "aksmachineapi")
    with pytest.raises(SettingsError) as e:
        resolve({"cloud_provider": "azure"})
    assert "AKS_MACHINES_POOL_NAME" in str(e.value) and "ARM_RESOURCE_GROUP" not in str(e.value)
    monkeypatch.setenv("AKS_MACHINES_POOL_NAME", "Machines!")
    with pytest.raises(SettingsError, match='AKS_MACHINES_POOL_NAME .*invalid value "Machines!"'):
        resolve({"cloud_provider": "azure"})
    monkeypatch.setenv("AKS_MACHINES_POOL_NAME", POOL)
    s = resolve({"cloud_provider": "azure"}).azure
    assert (s.provision_mode, s.aks_machines_pool_name, s.arm_resource_group) == ("aksmachineapi", POOL, "rg")
    monkeypatch.setenv("PROVISION_MODE", "aksmachineapiheaderbatch")
    with pytest.raises(SettingsError, match="not supported by karpy yet"):
        resolve({"cloud_provider": "azure"})


# --- create -------------------------------------------------------------------------------------------
def test_create_puts_one_machine_with_upstreams_shape(fake, provider):
    out = provider.create(claim())
    puts = machine_puts(fake)
    assert len(puts) == 1 and not fake.calls("PUT", r"/virtualMachines/") and not fake.calls("PUT", r"/networkInterfaces/")
    put = puts[0]
    assert put["path"] == f"{MACHINES}/machines/default-demo-abcde"
    assert put["headers"]["allowspotvmsystemnode"] == "true" and put["query"]["api-version"].endswith("-preview")
    assert put["headers"]["authorization"].startswith("Bearer fake-arm-token-")
    body, p = put["body"], put["body"]["properties"]
    zone = out["metadata"]["labels"]["topology.kubernetes.io/zone"]
    assert body["zones"] == [zone[-1]] and p["hardware"] == {"vmSize": "Standard_D2pls_v6", "ultraSsdEnabled": False}
    assert p["priority"] == "Regular" and p["mode"] == "User"
    assert p["nodeImageVersion"] == "AKSUbuntu-2204gen2arm64containerd-202506.01.0"
    assert p["operatingSystem"] == {"osType": "Linux", "osSKU": "Ubuntu2204", "osDiskType": "Managed", "enableFIPS": False}
    assert p["tags"] == {"karpenter.azure.com_cluster": "workshop", "karpenter.sh_nodepool": "default-demo",
                         "compute.aks.billing": "linux", "team": "payments",
                         "karpenter.azure.com_aksmachine_nodeclaim": "default-demo-abcde"}
    k = p["kubernetes"]
    assert k["orchestratorVersion"] == "1.33.2" and k["nodeTaints"] == []
    assert k["nodeInitializationTaints"] == ["node.cilium.io/agent-not-ready=true:NoExecute",
                                             "karpenter.sh/unregistered:NoExecute"]
    assert k["nodeLabels"]["karpenter.sh/nodepool"] == "default-demo" and k["nodeLabels"]["aks-karpenter"] == "demo"
    assert k["nodeLabels"]["karpenter.sh/capacity-type"] == "on-demand"
    assert not [x for x in k["nodeLabels"] if x.startswith(("kubernetes.azure.com/", "kubernetes.io/", "topology."))]
    assert p["security"] == {"sshAccess": "LocalUser", "enableEncryptionAtHost": False, "enableVTPM": False,
                             "enableSecureBoot": False}
    # the NodeClaim: the VM AKS makes for the machine, the machine's ID, its node image version
    assert out["status"]["providerID"] == (f"azure:///subscriptions/{SUBSCRIPTION}/resourceGroups/{NODE_RG.lower()}/"
                                           f"providers/Microsoft.Compute/virtualMachines/"
                                           f"aks-{POOL}-default-demo-abcde-12345678-vm")
    assert out["metadata"]["annotations"][MACHINE_ANNOTATION] == f"{MACHINES}/machines/default-demo-abcde"
    assert out["status"]["imageID"] == "AKSUbuntu-2204gen2arm64containerd-202506.01.0"
    assert out["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "Standard_D2pls_v6"
    assert out["status"]["allocatable"]["cpu"] and out["status"]["capacity"]["memory"]
    wait(lambda: fake.machines["default-demo-abcde"]["properties"]["provisioningState"] == "Succeeded")


def test_spot_machines_and_ephemeral_disks(fake, provider):
    out = provider.create(claim(types=("Standard_D8ds_v5",), ct=("spot",)))  # a 200 GiB cache disk
    p = machine_puts(fake)[0]["body"]["properties"]
    assert p["priority"] == "Spot" and p["operatingSystem"]["osDiskType"] == "Ephemeral"
    assert out["metadata"]["labels"]["karpenter.sh/capacity-type"] == "spot"
    assert "priority" in fake.machines["default-demo-abcde"]["properties"]
    got = provider.get(out["status"]["providerID"])
    assert got["metadata"]["labels"]["karpenter.sh/capacity-type"] == "spot"


def test_restart_reuses_the_machine_instead_of_a_second_put(fake, provider, machine_env):
    first = provider.create(claim())
    restarted, _ = make(lambda kind, name: NODECLASS)
    try:
        again = restarted.create(claim())
        assert len(machine_puts(fake)) == 1
        assert again["status"]["providerID"] == first["status"]["providerID"]
        assert again["metadata"]["labels"]["node.kubernetes.io/instance-type"] == \
            first["metadata"]["labels"]["node.kubernetes.io/instance-type"]
        # a machine of that name made for another NodeClaim is not taken over
        fake.machines["default-demo-abcde"]["properties"]["tags"]["karpenter.azure.com_aksmachine_nodeclaim"] = "other"
        with pytest.raises(LaunchError, match="does not name NodeClaim"):
            restarted.create(claim())
        assert len(machine_puts(fake)) == 1
    finally:
        restarted.close()


# --- errors -------------------------------------------------------------------------------------------
def test_late_capacity_error_marks_offerings_and_deletes_machine_and_nodeclaim(fake, provider):
    fake.fail("machine.put", "AllocationFailed", "Allocation failed. We do not have sufficient capacity", late=True)
    out = provider.create(claim(types=("Standard_D2pls_v6",)))
    assert out["status"]["providerID"]  # accepted: the failure comes with the operation
    wait(lambda: provider.deleted_claims == ["default-demo-abcde"])
    wait(lambda: not fake.machines)
    assert fake.calls("POST", r"/deleteMachines$")[0]["body"] == {"machineNames": ["default-demo-abcde"]}
    assert _unavailable(provider, "Standard_D2pls_v6") == sorted(
        (f"eastus-{i}", ct) for i in (1, 2, 3) for ct in ("on-demand", "spot"))
    provider.clock.t += HOUR + 5
    assert _unavailable(provider, "Standard_D2pls_v6") == []


def test_unsupported_size_is_unavailable_everywhere_and_the_next_size_is_tried(fake, provider):
    fake.fail("machine.put", "VMSizeNotSupported", "The VM size Standard_D2pls_v6 is not supported", status=400)
    with pytest.raises(InsufficientCapacityError, match="SKUNotAvailable"):
        provider.create(claim())
    assert len(_unavailable(provider, "Standard_D2pls_v6")) == 8  # three zones and regional, both capacity types
    provider.clock.t += SKU_NOT_AVAILABLE_ON_DEMAND_TTL - 60
    provider.create(claim())
    assert machine_puts(fake)[-1]["body"]["properties"]["hardware"]["vmSize"] == "Standard_D4pls_v6"


def test_other_errors_are_launch_errors_marking_nothing(fake, provider):
    fake.fail("machine.put", "InvalidParameter", "nodeImageVersion is invalid", status=400)
    with pytest.raises(LaunchError, match="InvalidParameter"):
        provider.create(claim(types=("Standard_D2pls_v6",)))
    assert _unavailable(provider, "Standard_D2pls_v6") == [] and not fake.machines


def test_throttled_machine_calls_are_retried_by_the_sdk(fake, provider):
    fake.throttle("machine.put")
    fake.throttle("machine.get")
    provider.create(claim())
    assert len(machine_puts(fake)) == 2 and fake.machines


# --- get / list / delete / drift ----------------------------------------------------------------------
def test_get_list_delete(fake, provider):
    out = provider.create(claim())
    pid = out["status"]["providerID"]
    wait(lambda: fake.machines["default-demo-abcde"]["properties"]["provisioningState"] == "Succeeded")
    got = provider.get(pid)
    assert got["metadata"]["name"] == "default-demo-abcde" and got["status"]["providerID"] == pid
    assert got["metadata"]["labels"]["karpenter.sh/nodepool"] == "default-demo"
    assert got["metadata"]["creationTimestamp"]
    listed = provider.list()
    assert [c["status"]["providerID"] for c in listed] == [pid]
    assert listed[0]["metadata"]["annotations"][MACHINE_ANNOTATION].endswith("/machines/default-demo-abcde")
    nodeclaim = {**claim(), "metadata": {**claim()["metadata"], **{"annotations": out["metadata"]["annotations"]}},
                 "status": {"providerID": pid}}
    provider.delete(nodeclaim)
    provider.delete(nodeclaim)  # in flight: one delete only
    wait(lambda: not fake.machines and not provider.machines_deleting)
    assert len(fake.calls("POST", r"/deleteMachines$")) == 1
    with pytest.raises(NodeClaimNotFoundError):
        provider.delete(nodeclaim)
    with pytest.raises(NodeClaimNotFoundError):
        provider.get(pid)
    assert provider.list() == []


def test_list_pages_through_machines(fake, provider):
    fake.machines_page_size = 2
    for i in range(5):
        provider.create(claim(name=f"default-demo-{i:05d}"))
    assert len(provider.list()) == 5


def test_machine_drift(fake, provider):
    out = provider.create(claim())
    nodeclass = {**NODECLASS, "status": {"images": [{"id": f"/CommunityGalleries/{CIG_UBUNTU}/images/"
                                                           "2204gen2arm64containerd/versions/202506.01.0"}]}}
    nodeclaim = {**claim(), "metadata": {**claim()["metadata"], "annotations": out["metadata"]["annotations"]},
                 "status": {"providerID": out["status"]["providerID"], "imageID": out["status"]["imageID"]}}
    assert provider.is_drifted(nodeclaim, nodeclass) is None
    fake.machines["default-demo-abcde"]["properties"]["status"]["driftAction"] = "Recreate"
    assert provider.is_drifted(nodeclaim, nodeclass) == "ClusterConfigDrift"
    newer = {**nodeclass, "status": {"images": [{"id": f"/CommunityGalleries/{CIG_UBUNTU}/images/"
                                                       "2204gen2arm64containerd/versions/202601.01.0"}]}}
    assert provider.is_drifted(nodeclaim, newer) == "ImageDrift"


@pytest.fixture
def drift_provider(fake, machine_env):
    objects: dict = {}
    p, _ = make(lambda kind, name: objects.get((kind, name)) or (NODECLASS if kind == "AKSNodeClass" else None))
    p.objects = objects
    yield p
    p.close()


def _ready(types=("ImagesReady", "KubernetesVersionReady"), false=()):
    return [{"type": t, "status": "False" if t in false else "True"} for t in types]


@pytest.mark.parametrize("change,expect", [
    ("nothing", None),
    ("images not ready", None),  # a newer image, but ImagesReady is False: no drift yet
    ("newer image", "ImageDrift"),
    ("no status images", None),
    ("kubernetes version empty", None),
    ("kubernetes version not ready", None),
    ("node name missing", None),
    ("node not found", None),
    ("kubernetes version new", "K8sVersionDrift"),
])
def test_machine_drift_rows(fake, drift_provider, change, expect):
    """upstream's suite_aksmachineapi_drift_test.go: image and Kubernetes version drift of a machine's NodeClaim."""
    p = drift_provider
    out = p.create(claim())
    image = f"/CommunityGalleries/{CIG_UBUNTU}/images/2204gen2arm64containerd/versions/"
    status = {"kubernetesVersion": "1.33.2", "images": [{"id": image + "202506.01.0"}], "conditions": _ready()}
    node = {"metadata": {"name": "aks-machines-default-demo-abcde-12345678-vm"},
            "status": {"nodeInfo": {"kubeletVersion": "v1.33.2"}}}
    p.objects[("Node", node["metadata"]["name"])] = node
    nodeclaim = {**claim(), "metadata": {**claim()["metadata"], "annotations": out["metadata"]["annotations"]},
                 "status": {"providerID": out["status"]["providerID"], "imageID": out["status"]["imageID"],
                            "nodeName": node["metadata"]["name"]}}
    if change == "images not ready":
        status.update(images=[{"id": image + "202601.01.0"}], conditions=_ready(false=("ImagesReady",)))
    elif change == "newer image":
        status["images"] = [{"id": image + "202601.01.0"}]
    elif change == "no status images":
        status["images"] = []
    elif change == "kubernetes version empty":
        status["kubernetesVersion"] = ""
    elif change == "kubernetes version not ready":
        status.update(kubernetesVersion="1.34.0", conditions=_ready(false=("KubernetesVersionReady",)))
    elif change == "node name missing":
        status["kubernetesVersion"] = "1.34.0"
        nodeclaim["status"]["nodeName"] = ""
    elif change == "node not found":
        status["kubernetesVersion"] = "1.34.0"
        nodeclaim["status"]["nodeName"] = "node-who-does-not-exist"
    elif change == "kubernetes version new":
        status["kubernetesVersion"] = "1.34.0"
    assert p.is_drifted(nodeclaim, {**NODECLASS, "status": status}) == expect


def test_garbage_collection_of_unclaimed_machines(fake, provider):
    kept = provider.create(claim(name="kept-00001"))
    provider.create(claim(name="orphan-00001"))
    gc = gc_keeping(provider, kept)
    wait(lambda: not provider.machines_pending)
    assert gc.collect() == []  # machines younger than 5 minutes are kept
    provider.clock.t += 400
    assert [p.rsplit("/", 1)[-1] for p in gc.collect()] == [f"aks-{POOL}-orphan-00001-12345678-vm"]
    wait(lambda: set(fake.machines) == {"kept-00001"})
    assert fake.calls("POST", r"/deleteMachines$")[-1]["body"] == {"machineNames": ["orphan-00001"]}


def test_controller_exits_2_naming_the_missing_pool(tmp_path):
    import subprocess
    import sys

    from .conftest import IDENTITY, SSH, SUBNET, TOKEN

    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CLUSTER_ENDPOINT": "https://x.hcp.eastus.azmk8s.io:443",
           "AZURE_SUBSCRIPTION_ID": SUBSCRIPTION, "LOCATION": "eastus", "AZURE_NODE_RESOURCE_GROUP": NODE_RG,
           "VNET_SUBNET_ID": SUBNET, "KUBELET_BOOTSTRAP_TOKEN": TOKEN, "SSH_PUBLIC_KEY": SSH, "NODE_IDENTITIES": IDENTITY,
           "PROVISION_MODE": "aksmachineapi"}
    r = subprocess.run([sys.executable, "-m", "karpy.cli", "controller", "--cloud-provider", "azure",
                        "--cluster-name", "c"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "AKS_MACHINES_POOL_NAME" in r.stderr and "ARM_RESOURCE_GROUP" in r.stderr


def test_nodeclass_settings_reach_the_machine(fake, drift_provider):
    from .conftest import SUBNET

    p = drift_provider
    p.objects[("AKSNodeClass", "default")] = {
        "kind": "AKSNodeClass", "metadata": {"name": "default"},
        "spec": {"imageFamily": "AzureLinux", "osDiskSizeGB": 64, "maxPods": 50, "vnetSubnetID": SUBNET,
                 "security": {"encryptionAtHost": True},
                 "kubelet": {"cpuManagerPolicy": "static", "imageGCHighThresholdPercent": 80,
                             "containerLogMaxSize": "50Mi", "podPidsLimit": 4096,
                             "allowedUnsafeSysctls": ["net.core.somaxconn"]}},
        "status": {"kubernetesVersion": "1.33.2"}}
    c = claim(types=("Standard_D8ds_v5",))
    c["spec"]["taints"] = [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]
    p.create(c)
    body = machine_puts(fake)[0]["body"]["properties"]
    assert body["network"] == {"vnetSubnetID": SUBNET}
    assert body["operatingSystem"] == {"osType": "Linux", "osSKU": "AzureLinux", "osDiskSizeGB": 64,
                                       "osDiskType": "Ephemeral", "enableFIPS": False}
    assert body["nodeImageVersion"] == "AKSAzureLinux-V3gen2-202506.01.0"
    k = body["kubernetes"]
    assert k["maxPods"] == 50 and k["nodeInitializationTaints"][0] == "dedicated=batch:NoSchedule"
    assert k["kubeletConfig"] == {"cpuManagerPolicy": "static", "imageGcHighThreshold": 80, "containerLogMaxSizeMB": 50,
                                  "podMaxPids": 4096, "allowedUnsafeSysctls": ["net.core.somaxconn"]}
    assert body["security"]["enableEncryptionAtHost"] is True
