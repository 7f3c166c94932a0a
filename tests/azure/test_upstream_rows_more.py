"""More of upstream's Azure provider rows (Azure/karpenter-provider-azure pkg/providers/instancetype/suite_test.go
and pkg/cloudprovider/suite_drift_test.go) played against karpy's Azure provider on the fake ARM: the image
each size boots, the tags and kubelet labels of the VM karpy PUTs, and when the Kubernetes version or the image
is drift."""

from __future__ import annotations

import copy

import pytest

from karpy.cloudprovider.arm.bootstrap import parse_custom_data

from .fakearm import CIG_AZURELINUX, CIG_UBUNTU
from .test_nodeclass import nodeclass, world  # noqa: F401 - the AKSNodeClass controller's world fixture
from .test_machines import drift_provider, machine_env  # noqa: F401 - the machine provider's fixtures
from .test_provider import NODECLASS, claim, provider  # noqa: F401 - the provider fixture on the fake ARM


def vm_puts(fake) -> list[dict]:
    return [r["body"] for r in fake.calls("PUT", r"/virtualMachines/[^/]+$")]


# --- which image a size boots (L1493-L1503) ------------------------------------------------------------------
@pytest.mark.parametrize("size, family, gallery, definition", [
    ("Standard_D2_v5", "Ubuntu2204", CIG_UBUNTU, "2204gen2containerd"),         # Gen1 and Gen2: the Gen2 image
    ("Standard_D2_v3", "Ubuntu2204", CIG_UBUNTU, "2204containerd"),             # Gen1 only (as upstream's SKU data)
    ("Standard_D16plds_v5", "Ubuntu2204", CIG_UBUNTU, "2204gen2arm64containerd"),
    ("Standard_D2_v5", "AzureLinux", CIG_AZURELINUX, "V3gen2"),                 # AzureLinux 3 from Kubernetes 1.32
    ("Standard_D2_v3", "AzureLinux", CIG_AZURELINUX, "V3"),
    ("Standard_D16plds_v5", "AzureLinux", CIG_AZURELINUX, "V3gen2arm64"),
])
def test_each_size_boots_the_community_image_of_its_architecture_and_generation(world, fake, size, family, gallery,
                                                                               definition):
    store, ctrl, p, version, clock = world
    for sku in fake.skus:  # upstream's data: D2_v3 is a Hyper-V generation 1 size only
        if sku["name"] == "Standard_D2_v3":
            sku["capabilities"] = [c if c["name"] != "HyperVGenerations" else {**c, "value": "V1"}
                                   for c in sku["capabilities"]]
    p.types.refresh(force=True)
    store.objs[("AKSNodeClass", "default")]["spec"]["imageFamily"] = family
    ctrl.reconcile("default")
    p.create(claim(name="img-1", types=(size,)))
    (vm,) = vm_puts(fake)
    assert vm["properties"]["hardwareProfile"]["vmSize"] == size
    parts = vm["properties"]["storageProfile"]["imageReference"]["communityGalleryImageId"].split("/")
    assert (parts[2], parts[4]) == (gallery, definition)


# --- tags and kubelet labels of the VM (L630, L3145-L3146, L1680) --------------------------------------------
def test_additional_tags_are_on_the_vm_and_its_nic(fake, provider, monkeypatch):
    provider.nodeclass["obj"] = {"kind": "AKSNodeClass", "metadata": {"name": "default"},
                                 "spec": {"imageFamily": "Ubuntu2204"}}
    monkeypatch.setattr(provider.s, "additional_tags", {"karpenter.azure.com/test-tag": "test-value"})
    provider.create(claim())
    want = {"karpenter.azure.com_test-tag": "test-value", "karpenter.azure.com_cluster": "workshop",
            "compute.aks.billing": "linux", "karpenter.sh_nodepool": "default-demo"}
    (vm,) = vm_puts(fake)
    (nic,) = [r["body"] for r in fake.calls("PUT", r"/networkInterfaces/[^/]+$")]
    assert vm["tags"] == want and nic["tags"] == want


@pytest.mark.parametrize("domain, kubelet_may_set", [("node-restriction.kubernetes.io", False),
                                                     ("node.kubernetes.io", True)])
def test_restricted_label_domains_reach_the_node_but_not_the_kubelet(fake, provider, domain, kubelet_may_set):
    wanted = {f"{domain}/team": "team-1", f"{domain}/custom-label": "custom-value",
              f"subdomain.{domain}/custom-label": "custom-value"}
    c = claim()
    c["spec"]["requirements"] += [{"key": k, "operator": "In", "values": [v]} for k, v in wanted.items()]
    out = provider.create(c)
    for k, v in wanted.items():
        assert out["metadata"]["labels"][k] == v  # the NodeClaim (and so its Node) carries it
    (vm,) = vm_puts(fake)
    kubelet = dict(kv.split("=", 1) for kv in parse_custom_data(vm["properties"]["osProfile"]["customData"])
                   ["KUBELET_NODE_LABELS"].split(","))
    for k, v in wanted.items():
        assert (kubelet.get(k) == v) is kubelet_may_set, k


def test_kubelet_flags_leave_out_keep_terminated_pod_volumes_from_kubernetes_1_31(fake, provider):
    provider.create(claim())  # the cluster runs 1.33.2
    (vm,) = vm_puts(fake)
    boot = parse_custom_data(vm["properties"]["osProfile"]["customData"])
    assert boot["KUBERNETES_VERSION"] == "1.33.2"
    flags = boot["KUBELET_FLAGS"].split(" ")
    assert "--max-pods=250" in flags
    assert not any(f.startswith("--keep-terminated-pod-volumes") for f in flags)


# --- drift (suite_drift_test.go L172, L196-L222) ---------------------------------------------------------------
@pytest.fixture
def drifting(world):
    """A NodeClaim on Node aks-a whose kubelet runs 1.33.2, after the control plane moved to 1.34.0: drifted on
    the Kubernetes version unless something stops the check."""
    store, ctrl, p, version, clock = world
    ctrl.reconcile("default")
    image = nodeclass(store)["status"]["images"][2]["id"]
    store.add({"kind": "Node", "metadata": {"name": "aks-a", "labels": {}},
               "status": {"nodeInfo": {"kubeletVersion": "v1.33.2"}}})
    nodeclaim = {"metadata": {"name": "a", "annotations": {}}, "status": {"nodeName": "aks-a", "imageID": image}}
    version["v"] = "1.34.0"
    ctrl.reconcile("default")
    assert p.is_drifted(nodeclaim, nodeclass(store)) == "K8sVersionDrift"
    return store, p, nodeclaim


def test_kubernetes_version_drift_needs_a_ready_version(drifting):
    store, p, nodeclaim = drifting
    nc = copy.deepcopy(nodeclass(store))
    for c in nc["status"]["conditions"]:
        if c["type"] == "KubernetesVersionReady":
            c["status"], c["reason"] = "False", "K8sVersionNoLongerReady"
    assert p.is_drifted(nodeclaim, nc) is None
    nc = copy.deepcopy(nodeclass(store))
    nc["status"]["kubernetesVersion"] = ""
    assert p.is_drifted(nodeclaim, nc) is None


def test_kubernetes_version_drift_needs_the_nodeclaims_node(drifting):
    store, p, nodeclaim = drifting
    nameless = copy.deepcopy(nodeclaim)
    nameless["status"]["nodeName"] = ""
    assert p.is_drifted(nameless, nodeclass(store)) is None
    gone = copy.deepcopy(nodeclaim)
    gone["status"]["nodeName"] = "NodeWhoDoesNotExist"
    assert p.is_drifted(gone, nodeclass(store)) is None


def test_status_images_moving_to_another_gallery_drift_the_image(world):
    store, ctrl, p, version, clock = world
    ctrl.reconcile("default")
    nc = nodeclass(store)
    nodeclaim = {"metadata": {"name": "a", "annotations": {}}, "status": {"imageID": nc["status"]["images"][2]["id"]}}
    assert p.is_drifted(nodeclaim, nc) is None
    sig = copy.deepcopy(nc)
    for img in sig["status"]["images"]:  # the same definitions and versions, now from a shared image gallery
        definition_and_version = img["id"].split("/images/", 1)[1]
        img["id"] = ("/subscriptions/10945678-1234-1234-1234-123456789012/resourceGroups/AKS-Ubuntu/providers/"
                     f"Microsoft.Compute/galleries/AKSUbuntu/images/{definition_and_version}")
    assert p.is_drifted(nodeclaim, sig) == "ImageDrift"


def test_a_node_without_the_kubelet_identity_label_is_not_drifted_on_it(world, monkeypatch):
    store, ctrl, p, version, clock = world
    ctrl.reconcile("default")
    image = nodeclass(store)["status"]["images"][2]["id"]
    store.add({"kind": "Node", "metadata": {"name": "aks-a", "labels": {}},
               "status": {"nodeInfo": {"kubeletVersion": "v1.33.2"}}})
    nodeclaim = {"metadata": {"name": "a", "annotations": {}}, "status": {"nodeName": "aks-a", "imageID": image}}
    monkeypatch.setattr(p.s, "kubelet_identity_client_id", "22222222-2222-2222-2222-222222222222")
    assert p.is_drifted(nodeclaim, nodeclass(store)) is None
    store.objs[("Node", "aks-a")]["metadata"]["labels"]["kubernetes.azure.com/kubelet-identity-client-id"] = \
        "33333333-3333-3333-3333-333333333333"
    assert p.is_drifted(nodeclaim, nodeclass(store)) == "KubeletIdentityDrift"


# --- create-VM failures, then the next launch (L346, L378) ----------------------------------------------------
LOW_PRIORITY_QUOTA = ("Operation could not be completed as it results in exceeding approved Low Priority Cores quota. "
                      "Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 0, "
                      "Current Usage: 0, Additional Required: 32, (Minimum) New Limit Required: 32. Submit a request "
                      "for Quota increase at https://aka.ms/ProdportalCRP/#blade/Microsoft_Azure_Capacity/"
                      "UsageAndQuota.ReactView/Parameters/%7B%22resourceName%22:%22LowPriorityCores%22%7D")


def test_low_priority_quota_fails_the_spot_launch_and_the_next_one_is_on_demand(fake, provider):
    from karpy.cloudprovider.provider import InsufficientCapacityError

    fake.fail("vm.put", "OperationNotAllowed", LOW_PRIORITY_QUOTA, times=1)
    with pytest.raises(InsufficientCapacityError):
        provider.create(claim(ct=("on-demand", "spot")))  # spot is cheaper: tried first
    assert vm_puts(fake)[0]["properties"]["priority"] == "Spot"
    out = provider.create(claim(ct=("on-demand", "spot")))
    assert out["metadata"]["labels"]["karpenter.sh/capacity-type"] == "on-demand"
    assert vm_puts(fake)[-1]["properties"]["priority"] == "Regular"


def test_overconstrained_zonal_allocation_moves_the_next_launch_to_another_zone(fake, provider):
    from karpy.cloudprovider.provider import InsufficientCapacityError

    fake.fail("vm.put", "OverconstrainedZonalAllocationRequest", "Allocation failed. VM(s) with the following "
              "constraints cannot be allocated, because the condition is too restrictive.", times=1)
    with pytest.raises(InsufficientCapacityError):
        provider.create(claim(types=("Standard_D2pls_v6",)))
    first_zone = vm_puts(fake)[0]["zones"]
    out = provider.create(claim(types=("Standard_D2pls_v6",)))
    assert vm_puts(fake)[-1]["zones"] != first_zone
    assert out["metadata"]["labels"]["topology.kubernetes.io/zone"] != f"eastus-{first_zone[0]}"


# --- networking of the VM (L279, L1192, L1565) ------------------------------------------------------------------
def nic_puts(fake) -> list[dict]:
    return [r["body"] for r in fake.calls("PUT", r"/networkInterfaces/[^/]+$")]


def test_the_nodeclass_subnet_replaces_vnet_subnet_id(fake, provider):
    subnet = ("/subscriptions/12345678-1234-1234-1234-123456789012/resourceGroups/sillygeese/providers/"
              "Microsoft.Network/virtualNetworks/karpenter/subnets/nodeclassSubnet")
    provider.nodeclass["obj"] = {"kind": "AKSNodeClass", "metadata": {"name": "default"},
                                 "spec": {"imageFamily": "Ubuntu2204", "vnetSubnetID": subnet}}
    provider.create(claim())
    (nic,) = nic_puts(fake)
    assert nic["properties"]["ipConfigurations"][0]["properties"]["subnet"]["id"] == subnet


def test_azure_cni_overlay_gives_the_vm_one_nic_with_one_ip_configuration(fake, provider):
    assert (provider.s.network_plugin, provider.s.network_plugin_mode) == ("azure", "overlay")
    provider.create(claim())
    (vm,) = vm_puts(fake)
    (nic_ref,) = vm["properties"]["networkProfile"]["networkInterfaces"]
    assert nic_ref["properties"]["primary"] is True
    (nic,) = nic_puts(fake)
    (ip,) = nic["properties"]["ipConfigurations"]  # no secondary IPs for pods: overlay gives them their own range
    assert ip["properties"]["primary"] is True


def test_the_cluster_dns_setting_is_the_kubelets_cluster_dns(fake, provider, monkeypatch):
    monkeypatch.setattr(provider.s, "dns_service_ip", "10.244.0.1")
    provider.create(claim())
    (vm,) = vm_puts(fake)
    flags = parse_custom_data(vm["properties"]["osProfile"]["customData"])["KUBELET_FLAGS"].split(" ")
    assert "--cluster-dns=10.244.0.1" in flags


def test_network_plugin_none_gives_every_size_250_pods(fake, env, monkeypatch):
    from .conftest import make_provider

    monkeypatch.setenv("NETWORK_PLUGIN", "none")
    p, _ = make_provider(lambda kind, name: NODECLASS)
    try:
        assert p.s.network_plugin == "none"
        its = p.get_instance_types({}, NODECLASS)
        assert its and {int(it.capacity["pods"]) for it in its} == {250}
    finally:
        p.close()


# --- ephemeral OS disk (L1079, L1131, L1151) ---------------------------------------------------------------------
@pytest.mark.parametrize("os_disk_gb, ephemeral", [(None, True), (150, True), (256, False)])
def test_the_os_disk_is_ephemeral_only_where_the_sizes_local_disk_holds_it(fake, provider, os_disk_gb, ephemeral):
    """Standard_D8ds_v5 has a 200 GiB cache disk (the fake's SKU data)."""
    spec = {"imageFamily": "Ubuntu2204", **({"osDiskSizeGB": os_disk_gb} if os_disk_gb else {})}
    provider.nodeclass["obj"] = {"kind": "AKSNodeClass", "metadata": {"name": "default"}, "spec": spec}
    provider.create(claim(types=("Standard_D8ds_v5",)))
    (vm,) = vm_puts(fake)
    disk = vm["properties"]["storageProfile"]["osDisk"]
    assert disk["diskSizeGB"] == (os_disk_gb or 128)
    if ephemeral:
        assert disk["diffDiskSettings"]["option"] == "Local" and "managedDisk" not in disk
    else:
        assert "diffDiskSettings" not in disk and disk["managedDisk"]["storageAccountType"]


# --- the largest ephemeral OS disk of a size and where it goes (L998-L1005) -----------------------------------
# the ephemeral-disk capabilities of upstream's recorded SKU data for each size
EPHEMERAL_CAPS = {
    "Standard_B20ms": {"EphemeralOSDiskSupported": "True", "SupportedEphemeralOSDiskPlacements": "ResourceDisk,CacheDisk",
                       "CachedDiskBytes": "32212254720", "MaxResourceVolumeMB": "163840"},
    "Standard_D128ds_v6": {"EphemeralOSDiskSupported": "True", "SupportedEphemeralOSDiskPlacements": "NvmeDisk",
                           "NvmeDiskSizeInMiB": "7208960", "MaxResourceVolumeMB": "0"},
    "Standard_D16plds_v5": {"EphemeralOSDiskSupported": "True", "SupportedEphemeralOSDiskPlacements": "ResourceDisk,CacheDisk",
                            "CachedDiskBytes": "429496729600", "MaxResourceVolumeMB": "614400"},
    "Standard_D2as_v6": {"EphemeralOSDiskSupported": "False", "MaxResourceVolumeMB": "0"},
    "Standard_NC24ads_A100_v4": {"EphemeralOSDiskSupported": "True",
                                 "SupportedEphemeralOSDiskPlacements": "ResourceDisk,CacheDisk",
                                 "CachedDiskBytes": "274877906944", "NvmeDiskSizeInMiB": "915527",
                                 "MaxResourceVolumeMB": "65536"},
    "Standard_D64s_v3": {"EphemeralOSDiskSupported": "True", "SupportedEphemeralOSDiskPlacements": "ResourceDisk,CacheDisk",
                         "CachedDiskBytes": "1717986918400", "MaxResourceVolumeMB": "524288"},
    "Standard_A0": {"EphemeralOSDiskSupported": "False", "MaxResourceVolumeMB": "20480"},
    "Standard_D2_v2": {"EphemeralOSDiskSupported": "False", "MaxResourceVolumeMB": "102400"},
}


@pytest.mark.parametrize("size, gb, placement", [
    ("Standard_B20ms", 32, "CacheDisk"), ("Standard_D128ds_v6", 7559, "NvmeDisk"),
    ("Standard_D16plds_v5", 429, "CacheDisk"), ("Standard_D2as_v6", 0, ""),
    ("Standard_NC24ads_A100_v4", 274, "CacheDisk"),  # an NVMe disk, but NVMe placement is not supported
    ("Standard_D64s_v3", 1717, "CacheDisk"), ("Standard_A0", 0, ""), ("Standard_D2_v2", 0, ""),
])
def test_the_largest_ephemeral_os_disk_of_a_size_and_its_placement(size, gb, placement):
    from karpy.cloudprovider.arm.skus import sku_info

    caps = {"vCPUs": "2", "HyperVGenerations": "V1,V2", **EPHEMERAL_CAPS[size]}
    sku = {"name": size, "resourceType": "virtualMachines", "family": "x", "locations": ["eastus"],
           "locationInfo": [{"location": "eastus", "zones": ["1", "2", "3"]}],
           "capabilities": [{"name": k, "value": v} for k, v in caps.items()]}
    info = sku_info(sku, "eastus")
    assert (info.ephemeral_max_gb, info.ephemeral_placement) == (gb, placement)


def test_overconstrained_allocation_moves_the_next_launch_of_the_size_to_the_other_capacity_type(fake, provider):
    from karpy.cloudprovider.provider import InsufficientCapacityError

    fake.fail("vm.put", "OverconstrainedAllocationRequest", "Allocation failed. VM(s) with the following constraints "
              "cannot be allocated, because the condition is too restrictive.", times=1)
    zonal = {"key": "karpenter.azure.com/placement-scope", "operator": "In", "values": ["zonal"]}  # as upstream's NodePool
    first = claim(types=("Standard_D2pls_v6",), ct=("on-demand", "spot"))
    first["spec"]["requirements"].append(zonal)
    with pytest.raises(InsufficientCapacityError):
        provider.create(first)  # spot first: cheaper
    assert vm_puts(fake)[0]["properties"]["priority"] == "Spot"
    retry = claim(name="retry", types=("Standard_D2pls_v6",), ct=("on-demand", "spot"))
    retry["spec"]["requirements"].append(zonal)
    out = provider.create(retry)
    labels = out["metadata"]["labels"]
    assert (labels["node.kubernetes.io/instance-type"], labels["karpenter.sh/capacity-type"],
            labels["karpenter.azure.com/placement-scope"]) == ("Standard_D2pls_v6", "on-demand", "zonal")


def test_a_zero_family_quota_blocks_the_family_for_an_hour(fake, provider):
    from karpy.cloudprovider.arm.offerings import HOUR, LOW_QUOTA_TTL
    from karpy.cloudprovider.provider import InsufficientCapacityError

    fake.fail("vm.put", "OperationNotAllowed", "Operation could not be completed as it results in exceeding approved "
              "standardDPLSv6Family Cores quota. Additional details - Deployment Model: Resource Manager, Location: "
              "eastus, Current Limit: 0, Current Usage: 0, Additional Required: 2", times=1)
    with pytest.raises(InsufficientCapacityError):
        provider.create(claim(types=("Standard_D2pls_v6",)))
    with pytest.raises(InsufficientCapacityError):  # no size of the family is tried while the block lasts
        provider.create(claim(types=("Standard_D2pls_v6",)))
    assert len(vm_puts(fake)) == 1
    provider.clock.t += LOW_QUOTA_TTL + 1  # a non-zero limit's block would have ended here
    with pytest.raises(InsufficientCapacityError):
        provider.create(claim(types=("Standard_D2pls_v6",)))
    provider.clock.t += HOUR
    provider.create(claim(types=("Standard_D2pls_v6",)))
    assert len(vm_puts(fake)) == 2


def test_total_regional_cores_quota_is_insufficient_capacity(fake, provider):
    from karpy.cloudprovider.provider import InsufficientCapacityError

    fake.fail("vm.put", "OperationNotAllowed", "Operation could not be completed as it results in exceeding approved "
              "Total Regional Cores quota. Additional details - Deployment Model: Resource Manager, Location: eastus, "
              "Current Limit: 100, Current Usage: 100, Additional Required: 2")
    with pytest.raises(InsufficientCapacityError):
        provider.create(claim(types=("Standard_D2pls_v6",)))


# --- kubelet flags and labels of the VM (L1216, L3095) ---------------------------------------------------------
def _boot(fake) -> dict[str, str]:
    (vm,) = vm_puts(fake)
    return parse_custom_data(vm["properties"]["osProfile"]["customData"])


def test_nodeclass_kubelet_settings_become_kubelet_flags(fake, provider):
    provider.nodeclass["obj"] = {"kind": "AKSNodeClass", "metadata": {"name": "default"}, "spec": {
        "imageFamily": "Ubuntu2204", "kubelet": {
            "cpuManagerPolicy": "static", "cpuCFSQuota": True, "imageGCHighThresholdPercent": 30,
            "imageGCLowThresholdPercent": 20, "topologyManagerPolicy": "best-effort",
            "allowedUnsafeSysctls": ["kernel.msg*", "net.ipv4.route.min_pmtu"], "containerLogMaxSize": "42Mi",
            "containerLogMaxFiles": 13, "podPidsLimit": 99}}}
    provider.create(claim(types=("Standard_D2pls_v6",)))
    flags = dict(f.split("=", 1) for f in _boot(fake)["KUBELET_FLAGS"].split(" "))
    assert flags["--allowed-unsafe-sysctls"] == "kernel.msg*,net.ipv4.route.min_pmtu"
    assert flags["--system-reserved"] == "cpu=0,memory=0"
    assert flags["--max-pods"] == "250"
    assert (flags["--cpu-manager-policy"], flags["--cpu-cfs-quota"], flags["--topology-manager-policy"]) == \
        ("static", "true", "best-effort")
    assert (flags["--image-gc-high-threshold"], flags["--image-gc-low-threshold"]) == ("30", "20")
    assert (flags["--container-log-max-size"], flags["--container-log-max-files"], flags["--pod-max-pids"]) == \
        ("42Mi", "13", "99")


def test_without_unsafe_sysctls_the_flag_is_left_out(fake, provider):
    provider.create(claim(types=("Standard_D2pls_v6",)))
    flags = dict(f.split("=", 1) for f in _boot(fake)["KUBELET_FLAGS"].split(" "))
    assert "--allowed-unsafe-sysctls" not in flags and flags["--system-reserved"] == "cpu=0,memory=0"


def test_non_schedulable_labels_reach_the_kubelet(fake, provider, monkeypatch):
    monkeypatch.setattr(provider.s, "kubelet_identity_client_id", "61f71907-753f-4802-a901-47361c3664f2")
    monkeypatch.setattr(provider.s, "vnet_guid", "a519e60a-cac0-40b2-b883-084477fe6f5c")
    provider.create(claim(types=("Standard_D2pls_v6",)))
    labels = dict(kv.split("=", 1) for kv in _boot(fake)["KUBELET_NODE_LABELS"].split(","))
    assert {k: labels.get(k) for k in (
        "kubernetes.azure.com/role", "kubernetes.azure.com/kubelet-identity-client-id", "kubernetes.azure.com/mode",
        "kubernetes.azure.com/network-subnet", "kubernetes.azure.com/nodenetwork-vnetguid",
        "kubernetes.azure.com/azure-cni-overlay", "kubernetes.azure.com/podnetwork-type",
        "karpenter.sh/do-not-sync-taints")} == {
        "kubernetes.azure.com/role": "agent",
        "kubernetes.azure.com/kubelet-identity-client-id": "61f71907-753f-4802-a901-47361c3664f2",
        "kubernetes.azure.com/mode": "user", "kubernetes.azure.com/network-subnet": "nodes",
        "kubernetes.azure.com/nodenetwork-vnetguid": "a519e60a-cac0-40b2-b883-084477fe6f5c",
        "kubernetes.azure.com/azure-cni-overlay": "true", "kubernetes.azure.com/podnetwork-type": "overlay",
        "karpenter.sh/do-not-sync-taints": "true"}


def test_network_labels_are_for_azure_cni_overlay_only(fake, provider, monkeypatch):
    monkeypatch.setattr(provider.s, "network_plugin", "none")
    provider.create(claim(types=("Standard_D2pls_v6",)))
    labels = dict(kv.split("=", 1) for kv in _boot(fake)["KUBELET_NODE_LABELS"].split(","))
    assert labels["kubernetes.azure.com/mode"] == "user"
    assert not {"kubernetes.azure.com/azure-cni-overlay", "kubernetes.azure.com/podnetwork-type"} & labels.keys()


# --- max pods on the node subnet (L2693) -----------------------------------------------------------------------
@pytest.mark.parametrize("mode, pods", [("", 30), ("overlay", 250)])
def test_azure_cni_on_the_node_subnet_gives_30_pods(fake, env, monkeypatch, mode, pods):
    from .conftest import make_provider

    monkeypatch.setenv("NETWORK_PLUGIN_MODE", mode)  # set but empty: Azure CNI on the node subnet
    p, _ = make_provider(lambda kind, name: NODECLASS)
    try:
        assert p.s.network_plugin_mode == mode
        types = p.get_instance_types({"metadata": {"name": "default"}, "spec": {}}, NODECLASS)
        assert types and {it.capacity["pods"] for it in types} == {pods}
        p.create(claim(types=("Standard_D2pls_v6",)))
        assert "--max-pods=%d" % pods in _boot(fake)["KUBELET_FLAGS"].split(" ")
    finally:
        p.close()


# --- ZonalAllocationFailed (L2098) -----------------------------------------------------------------------------
def test_zonal_allocation_failure_blocks_the_family_at_or_above_the_size_in_that_zone(fake, provider):
    from karpy.cloudprovider.provider import InsufficientCapacityError

    from .test_provider import _unavailable

    fake.fail("vm.put", "ZonalAllocationFailed", "Allocation failed in zone", times=1)
    with pytest.raises(InsufficientCapacityError, match="ZonalAllocationFailed"):
        provider.create(claim(types=("Standard_D4pls_v6",)))
    zone = vm_puts(fake)[0]["zones"][0]
    both = [(f"eastus-{zone}", "on-demand"), (f"eastus-{zone}", "spot")]
    for size in ("Standard_D4pls_v6", "Standard_D8pls_v6", "Standard_D16pls_v6", "Standard_D96pls_v6"):
        assert _unavailable(provider, size) == both, size  # only that zone, both capacity types
    assert _unavailable(provider, "Standard_D2pls_v6") == []  # smaller sizes of the family still fit
    provider.create(claim(name="retry", types=("Standard_D4pls_v6",)))
    assert vm_puts(fake)[1]["zones"][0] != zone  # the retry lands in another zone


# --- drift: images not ready, no status images, a Node being deleted (drift L153, L163, L229; machines L250) --
def test_no_image_drift_while_the_nodeclass_images_are_not_ready(world):
    store, ctrl, p, version, clock = world
    ctrl.reconcile("default")
    nc = copy.deepcopy(nodeclass(store))
    nodeclaim = {"metadata": {"name": "a", "annotations": {}}, "status": {"imageID": nc["status"]["images"][2]["id"]}}
    nc["status"]["images"] = [{**i, "id": i["id"].rsplit("/", 1)[0] + "/209901.01.0"} for i in nc["status"]["images"]]
    assert p.is_drifted(nodeclaim, nc) == "ImageDrift"  # the NodeClaim's image is no longer listed
    for c in nc["status"]["conditions"]:
        if c["type"] == "ImagesReady":
            c["status"], c["reason"] = "False", "KubernetesUpgrade"
    assert p.is_drifted(nodeclaim, nc) is None


def test_empty_status_images_are_no_image_drift(fake, provider):
    out = provider.create(claim())
    fake.publish_image(CIG_UBUNTU, "2204gen2arm64containerd", "202507.01.0", "2025-07-02T00:00:00Z")
    provider.clock.t += 301  # past the image cache: a newer version of the NodeClaim's image definition exists
    nc = {**NODECLASS, "status": {"images": [], "conditions": [{"type": "ImagesReady", "status": "True"}]}}
    assert provider.is_drifted(out, nc) is None
    moved = {**nc, "spec": {**NODECLASS["spec"], "imageFamily": "AzureLinux"}}
    assert provider.is_drifted(out, moved) is None


def test_a_node_being_deleted_is_not_kubernetes_version_drift(drifting):
    store, p, nodeclaim = drifting
    node = store.objs[("Node", "aks-a")]
    node["metadata"].update(deletionTimestamp="2025-07-01T00:00:00Z", finalizers=["test/hold"])
    assert p.is_drifted(nodeclaim, nodeclass(store)) is None


def test_a_machines_node_being_deleted_is_not_kubernetes_version_drift(fake, drift_provider):
    p = drift_provider
    out = p.create(claim())
    node = {"metadata": {"name": "aks-machines-a-vm"}, "status": {"nodeInfo": {"kubeletVersion": "v1.33.2"}}}
    p.objects[("Node", "aks-machines-a-vm")] = node
    nodeclaim = {**claim(), "metadata": {**claim()["metadata"], "annotations": out["metadata"]["annotations"]},
                 "status": {"providerID": out["status"]["providerID"], "imageID": out["status"]["imageID"],
                            "nodeName": "aks-machines-a-vm"}}
    image = f"/CommunityGalleries/{CIG_UBUNTU}/images/2204gen2arm64containerd/versions/202506.01.0"
    nc = {**NODECLASS, "status": {"kubernetesVersion": "1.34.0", "images": [{"id": image}],
                                  "conditions": [{"type": t, "status": "True"}
                                                 for t in ("ImagesReady", "KubernetesVersionReady")]}}
    assert p.is_drifted(nodeclaim, nc) == "K8sVersionDrift"
    node["metadata"].update(deletionTimestamp="2025-07-01T00:00:00Z", finalizers=["test/hold"])
    assert p.is_drifted(nodeclaim, nc) is None


# --- create() honours every requirement on the sizes' labels; ephemeral max size (L1100, L1112) ------------------
def _sizes_without_ephemeral_disk(provider) -> list[str]:
    return [it.name for it in provider.get_instance_types({}, NODECLASS)
            if "karpenter.azure.com/sku-storage-ephemeralos-maxsize" not in it.labels]


def test_create_launches_only_sizes_meeting_the_nodeclaims_label_requirements(fake, provider):
    types = provider.get_instance_types({}, NODECLASS)
    with_disk = sorted(it.name for it in types if int(it.labels.get(
        "karpenter.azure.com/sku-storage-ephemeralos-maxsize", "0")) > 0)
    without = _sizes_without_ephemeral_disk(provider)
    assert with_disk and without
    provider.nodeclass["obj"] = {"kind": "AKSNodeClass", "metadata": {"name": "default"},
                                 "spec": {"imageFamily": "Ubuntu2204", "osDiskSizeGB": 30}}
    c = claim(types=tuple(sorted({*with_disk, *without})))
    c["spec"]["requirements"].append({"key": "karpenter.azure.com/sku-storage-ephemeralos-maxsize",
                                      "operator": "Gt", "values": ["0"]})
    provider.create(c)
    (vm,) = vm_puts(fake)
    assert vm["properties"]["hardwareProfile"]["vmSize"] in with_disk
    os_disk = vm["properties"]["storageProfile"]["osDisk"]
    assert os_disk["diskSizeGB"] == 30 and os_disk["diffDiskSettings"]["option"] == "Local"


def test_create_refuses_when_no_size_meets_the_label_requirements(fake, provider):
    from karpy.cloudprovider.provider import InsufficientCapacityError

    c = claim()
    c["spec"]["requirements"].append({"key": "karpenter.azure.com/sku-storage-ephemeralos-maxsize",
                                      "operator": "Gt", "values": ["100000"]})
    with pytest.raises(InsufficientCapacityError):
        provider.create(c)
    assert vm_puts(fake) == []


# --- AllocationFailed without a regional placement (L503) -------------------------------------------------------
def test_allocation_failure_of_a_zonal_only_size_blocks_it_with_no_second_attempt(fake, provider):
    from karpy.cloudprovider.provider import InsufficientCapacityError

    for ct in ("on-demand", "spot"):  # as upstream's test: the size's regional placement already unavailable
        provider.unavailable.mark(ct, "Standard_D2pls_v6", "0", 3600.0)
    fake.fail("vm.put", "AllocationFailed", "Allocation failed", times=1)
    with pytest.raises(InsufficientCapacityError, match="AllocationFailed"):
        provider.create(claim(types=("Standard_D2pls_v6",)))
    with pytest.raises(InsufficientCapacityError):  # every zone of its placement scope blocked, the regional one too
        provider.create(claim(name="retry", types=("Standard_D2pls_v6",)))
    assert len(vm_puts(fake)) == 1
