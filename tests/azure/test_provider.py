"""karpy's Azure provider against the fake ARM, through the real Azure SDK clients (auth, retries, LRO polling)."""

from __future__ import annotations

import time

import pytest

from karpy.cloudprovider.arm.bootstrap import parse_custom_data
from karpy.cloudprovider.arm.clients import make_clients
from karpy.cloudprovider.arm.offerings import HOUR, LOW_QUOTA_TTL, SKU_NOT_AVAILABLE_ON_DEMAND_TTL
from karpy.cloudprovider.arm.skus import InstanceTypes, list_skus_via
from karpy.cloudprovider.provider import InsufficientCapacityError, NodeClaimNotFoundError
from karpy.controller.settings import SettingsError, resolve

from .conftest import IDENTITY, SSH, SUBNET, TOKEN, gc_keeping, make_provider
from .fakearm import CIG_UBUNTU, NODE_RG, SUBSCRIPTION

NODECLASS = {"kind": "AKSNodeClass", "metadata": {"name": "default"},
             "spec": {"imageFamily": "Ubuntu2204", "tags": {"team": "payments", "cost/center": "42"}}}


def claim(name="default-demo-abcde", types=("Standard_D2pls_v6", "Standard_D4pls_v6"), ct=("on-demand",), zones=None):
    reqs = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": list(types)},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": list(ct)}]
    if zones:
        reqs.append({"key": "topology.kubernetes.io/zone", "operator": "In", "values": list(zones)})
    return {"metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default-demo", "aks-karpenter": "demo"}},
            "spec": {"nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
                     "requirements": reqs,
                     "startupTaints": [{"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"}]}}


@pytest.fixture
def provider(fake, env):
    deleted: list[str] = []
    nodeclass = {"obj": NODECLASS}
    p, clock = make_provider(lambda kind, name: nodeclass["obj"], delete_nodeclaim=deleted.append)
    p.clock, p.deleted_claims, p.nodeclass = clock, deleted, nodeclass
    yield p
    p.close()


def wait(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    raise AssertionError("timed out")


# --- settings -----------------------------------------------------------------------------------------
def test_settings_use_upstreams_names_and_arm_fallbacks(env, monkeypatch):
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID")
    monkeypatch.setenv("ARM_SUBSCRIPTION_ID", SUBSCRIPTION)
    s = resolve({"cloud_provider": "azure"}).azure
    assert (s.subscription_id, s.location, s.node_resource_group, s.vnet_subnet_id) == (SUBSCRIPTION, "eastus", NODE_RG, SUBNET)
    assert (s.network_plugin, s.network_plugin_mode, s.network_policy, s.provision_mode) == ("azure", "overlay", "cilium", "aksscriptless")
    assert s.node_identities == [IDENTITY] and s.cloud.from_file and s.cloud.scope == "https://management.core.windows.net/.default"
    s = resolve({"cloud_provider": "azure", "location": "westus2"}).azure  # a flag wins over the variable
    assert s.location == "westus2"


@pytest.mark.parametrize("var,value,message", [
    ("KUBELET_BOOTSTRAP_TOKEN", "not-a-token", "KUBELET_BOOTSTRAP_TOKEN (--kubelet-bootstrap-token): invalid value"),
    ("VNET_SUBNET_ID", "subnet-1", "VNET_SUBNET_ID (--vnet-subnet-id): invalid value \"subnet-1\""),
    ("NETWORK_PLUGIN", "kubenet", "must be azure or none"),
    ("PROVISION_MODE", "aksmachineapiheaderbatch", "not supported by karpy yet"),
    ("ARM_CLOUD", "AzurePublicCloud", "ARM_CLOUD and AZURE_ENVIRONMENT_FILEPATH are both set"),
    ("AZURE_ENVIRONMENT_FILEPATH", "/nonexistent.json", "AZURE_ENVIRONMENT_FILEPATH: cannot read"),
])
def test_bad_settings_are_named(env, monkeypatch, var, value, message):
    monkeypatch.setenv(var, value)
    with pytest.raises(SettingsError, match=None) as e:
        resolve({"cloud_provider": "azure"})
    assert message in str(e.value)
    assert TOKEN not in str(e.value)  # the bootstrap token is a secret


def test_missing_settings_exit_2_naming_each(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "karpy.cli", "controller", "--cloud-provider", "azure",
                        "--cluster-name", "c"], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert r.returncode == 2 and "Traceback" not in r.stderr
    for name in ("CLUSTER_ENDPOINT", "AZURE_SUBSCRIPTION_ID", "LOCATION", "AZURE_NODE_RESOURCE_GROUP", "VNET_SUBNET_ID",
                 "KUBELET_BOOTSTRAP_TOKEN", "SSH_PUBLIC_KEY"):
        assert name in r.stderr
    assert "CLUSTER_NAME" not in r.stderr


# --- instance types -----------------------------------------------------------------------------------
def test_instance_types_from_skus_match_karpys_catalog(provider):
    from karpy.cloudprovider.azure import provider as catalog

    live = {it.name: it for it in provider.get_instance_types({}, NODECLASS)}
    offline = {it.name: it for it in catalog.instance_types("eastus", NODECLASS)}
    for name in ("Standard_D2pls_v6", "Standard_D4pls_v6", "Standard_D4s_v5"):
        # (the SKU path lists a GPU-less size's nvidia.com/gpu as 0, as upstream; the offline catalog leaves it out)
        assert {k: v for k, v in live[name].allocatable.items() if v} == offline[name].allocatable
        assert live[name].allocatable.get("nvidia.com/gpu") == 0
        # the SKU's own capabilities add labels the offline catalog's data cannot give (and a capability the SKU
        # does not name is "false", where the offline catalog, lacking the value, leaves the label out)
        only_live = {"karpenter.azure.com/sku-hyperv-generation", "karpenter.azure.com/sku-storage-ultra-ssd",
                     "karpenter.azure.com/sku-storage-ephemeralos-maxsize", "kubernetes.azure.com/cluster"}
        only_live |= {"karpenter.azure.com/sku-networking-accelerated"} - set(offline[name].labels)
        assert {k: v for k, v in live[name].labels.items() if k not in only_live} == offline[name].labels
        # the sizes' zonal offerings are the offline catalog's; the SKU API adds a regional one ("0") at the same price
        assert sorted((o.zone, o.capacity_type, o.price) for o in live[name].offerings if o.zone != "0") == \
            sorted((o.zone, o.capacity_type, o.price) for o in offline[name].offerings)
        assert sorted((o.capacity_type, o.price) for o in live[name].offerings if o.zone == "0") == \
            sorted((o.capacity_type, o.price) for o in offline[name].offerings if o.zone == "eastus-1")


def test_sku_restrictions_and_missing_spot_shape_offerings(fake, env):
    sku = next(s for s in fake.skus if s["name"] == "Standard_D2pls_v6")
    sku["restrictions"] = [{"type": "Zone", "values": ["eastus"], "restrictionInfo": {"zones": ["2"]},
                            "reasonCode": "NotAvailableForSubscription"}]
    for c in sku["capabilities"]:
        if c["name"] == "LowPriorityCapable":
            c["value"] = "False"
    gone = next(s for s in fake.skus if s["name"] == "Standard_D4pls_v6")
    gone["restrictions"] = [{"type": "Location", "values": ["eastus"], "reasonCode": "NotAvailableForSubscription"}]
    s = resolve({"cloud_provider": "azure"}).azure
    types = InstanceTypes(list_skus_via(make_clients(s).compute, "eastus"), "eastus")
    types.refresh()
    its = {it.name: it for it in types.list(NODECLASS)}
    assert "Standard_D4pls_v6" not in its
    assert sorted((o.zone, o.capacity_type) for o in its["Standard_D2pls_v6"].offerings) == \
        [("0", "on-demand"), ("eastus-1", "on-demand"), ("eastus-3", "on-demand")]


# --- launch -------------------------------------------------------------------------------------------
def test_create_puts_nic_then_vm_with_upstreams_shape(fake, provider):
    out = provider.create(claim())
    name = "aks-default-demo-abcde"
    assert out["status"]["providerID"] == (f"azure:///subscriptions/{SUBSCRIPTION}/resourceGroups/{NODE_RG.lower()}"
                                           f"/providers/Microsoft.Compute/virtualMachines/{name}")
    puts = [r for r in fake.requests if r["method"] == "PUT"]
    assert [r["path"].rsplit("/", 2)[-2] for r in puts[:2]] == ["networkInterfaces", "virtualMachines"]
    nic, vm = puts[0]["body"], puts[1]["body"]
    ip = nic["properties"]["ipConfigurations"][0]
    assert ip["properties"]["subnet"]["id"] == SUBNET and ip["properties"]["primary"] is True
    assert [p["id"].rsplit("/", 1)[-1] for p in ip["properties"]["loadBalancerBackendAddressPools"]] == \
        ["kubernetes", "aksOutboundBackendPool"]  # IPv6 pools left out
    assert nic["properties"]["networkSecurityGroup"]["id"].endswith("/aks-agentpool-12345678-nsg")  # BYO subnet
    tags = {"karpenter.azure.com_cluster": "workshop", "karpenter.sh_nodepool": "default-demo",
            "compute.aks.billing": "linux", "team": "payments", "cost_center": "42"}
    assert nic["tags"] == tags and vm["tags"] == tags
    p = vm["properties"]
    assert p["hardwareProfile"]["vmSize"] == "Standard_D2pls_v6" and vm["zones"] == [out["metadata"]["labels"]["topology.kubernetes.io/zone"][-1]]
    assert p["priority"] == "Regular" and "evictionPolicy" not in p
    assert p["storageProfile"]["imageReference"] == {"communityGalleryImageId":
        f"/CommunityGalleries/{CIG_UBUNTU}/images/2204gen2arm64containerd/versions/202506.01.0"}
    assert p["storageProfile"]["osDisk"]["diskSizeGB"] == 128 and "diffDiskSettings" not in p["storageProfile"]["osDisk"]
    assert p["osProfile"]["computerName"] == name and p["osProfile"]["adminUsername"] == "azureuser"
    assert p["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"] == [{"path": "/home/azureuser/.ssh/authorized_keys", "keyData": SSH}]
    assert vm["identity"] == {"type": "UserAssigned", "userAssignedIdentities": {IDENTITY: {}}}
    assert p["networkProfile"]["networkInterfaces"][0]["properties"]["deleteOption"] == "Delete"
    boot = parse_custom_data(p["osProfile"]["customData"])
    assert boot["APISERVER_NAME"] == "workshop-dns-12345678.hcp.eastus.azmk8s.io"
    assert (boot["TLS_BOOTSTRAP_TOKEN"], boot["KUBE_CA_CRT"], boot["KUBERNETES_VERSION"]) == (TOKEN, "Q0EgUEVN", "1.33.2")
    assert (boot["NETWORK_PLUGIN"], boot["NETWORK_POLICY"], boot["MAX_PODS"]) == ("none", "cilium", "250")
    assert "aks-karpenter=demo" in boot["KUBELET_NODE_LABELS"].split(",")
    assert "karpenter.sh/nodepool=default-demo" in boot["KUBELET_NODE_LABELS"].split(",")
    assert ("--register-with-taints=node.cilium.io/agent-not-ready=true:NoExecute,karpenter.sh/unregistered:NoExecute"
            in boot["KUBELET_FLAGS"].split(" "))
    assert "--max-pods=250" in boot["KUBELET_FLAGS"].split(" ")
    assert (boot["VIRTUAL_NETWORK"], boot["SUBNET"], boot["RESOURCE_GROUP"]) == ("vnet-1", "nodes", NODE_RG)
    # create() returned before the operation finished; the billing extension follows it
    wait(lambda: (name, "computeAksLinuxBilling") in fake.extensions)
    assert fake.vms[name]["properties"]["provisioningState"] == "Succeeded"
    assert fake.tokens_issued >= 1 and all(r["headers"]["authorization"].startswith("Bearer ")
                                           for r in fake.requests if r["path"].startswith("/subscriptions"))


def test_spot_and_ephemeral_os_disk(fake, provider):
    provider.create(claim(types=("Standard_D8ds_v5",), ct=("spot",)))  # a 200 GiB cache disk
    vm = fake.calls("PUT", r"/virtualMachines/")[0]["body"]
    assert vm["properties"]["priority"] == "Spot" and vm["properties"]["evictionPolicy"] == "Delete"
    assert vm["properties"]["billingProfile"] == {"maxPrice": -1}
    assert vm["properties"]["storageProfile"]["osDisk"]["diffDiskSettings"] == {"option": "Local", "placement": "CacheDisk"}
    assert vm["properties"]["storageProfile"]["osDisk"]["caching"] == "ReadOnly"


def test_restart_reuses_the_vm_instead_of_a_second_put(fake, provider):
    first = provider.create(claim())
    wait(lambda: fake.vms["aks-default-demo-abcde"]["properties"]["provisioningState"] == "Succeeded")
    again = provider.create(claim())  # a restarted controller launching the same NodeClaim
    assert len(fake.calls("PUT", r"/virtualMachines/[^/]+$")) == 1
    assert again["status"]["providerID"] == first["status"]["providerID"]
    assert again["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "Standard_D2pls_v6"


def test_throttling_is_retried_by_the_sdk(fake, provider):
    fake.throttle("vm.put", times=2)
    provider.create(claim())
    assert len(fake.calls("PUT", r"/virtualMachines/[^/]+$")) == 3
    assert "aks-default-demo-abcde" in fake.vms


# --- capacity errors ----------------------------------------------------------------------------------
def _unavailable(provider, name):
    return sorted((o.zone, o.capacity_type) for it in provider.get_instance_types({}, NODECLASS) if it.name == name
                  for o in it.offerings if not o.available)


@pytest.mark.parametrize("code,message,ct,expect,ttl", [
    ("ZonalAllocationFailed", "Allocation failed in zone", "on-demand",
     [("eastus-{z}", "on-demand"), ("eastus-{z}", "spot")], HOUR),
    ("AllocationFailed", "Allocation failed", "on-demand",
     [(f"eastus-{i}", ct) for i in (1, 2, 3) for ct in ("on-demand", "spot")], HOUR),
    ("SkuNotAvailable", "The requested size is not available", "on-demand",
     [(f"eastus-{i}", "on-demand") for i in (1, 2, 3)], SKU_NOT_AVAILABLE_ON_DEMAND_TTL),
    ("SkuNotAvailable", "The requested size is not available", "spot",
     [(f"eastus-{i}", "spot") for i in (1, 2, 3)], HOUR),
    ("OverconstrainedZonalAllocationRequest", "overconstrained", "on-demand", [("eastus-{z}", "on-demand")], HOUR),
    ("OverconstrainedAllocationRequest", "overconstrained", "on-demand",
     [(f"eastus-{i}", "on-demand") for i in (1, 2, 3)], HOUR),
])
def test_capacity_errors_mark_offerings_for_upstreams_ttl(fake, provider, code, message, ct, expect, ttl):
    fake.fail("vm.put", code, message)
    with pytest.raises(InsufficientCapacityError, match=code):
        provider.create(claim(types=("Standard_D2pls_v6",), ct=(ct,)))
    zone = fake.calls("PUT", r"/virtualMachines/")[0]["body"]["zones"][0]
    assert _unavailable(provider, "Standard_D2pls_v6") == sorted((z.format(z=zone), c) for z, c in expect)
    assert not fake.vms and not fake.nics  # VM and NIC cleaned up
    provider.clock.t += ttl - 5
    assert _unavailable(provider, "Standard_D2pls_v6")
    provider.clock.t += 10
    assert _unavailable(provider, "Standard_D2pls_v6") == []


def test_family_quota_blocks_the_family_at_or_above_the_size(fake, provider):
    fake.fail("vm.put", "OperationNotAllowed", "Operation could not be completed as it results in exceeding approved "
              "standardDPLSv6Family Cores quota. Current Limit: 10, Current Usage: 8, Additional Required: 4")
    with pytest.raises(InsufficientCapacityError, match="SubscriptionQuotaReached"):
        provider.create(claim(types=("Standard_D4pls_v6",)))
    # the size's three zonal offerings and its regional one
    assert len(_unavailable(provider, "Standard_D4pls_v6")) == 4 and len(_unavailable(provider, "Standard_D8pls_v6")) == 4
    assert _unavailable(provider, "Standard_D2pls_v6") == []  # smaller sizes of the family may still fit
    provider.clock.t += LOW_QUOTA_TTL + 1
    assert _unavailable(provider, "Standard_D4pls_v6") == []


def test_low_priority_quota_blocks_all_spot(fake, provider):
    fake.fail("vm.put", "OperationNotAllowed", "exceeding approved LowPriorityCores quota")
    with pytest.raises(InsufficientCapacityError):
        provider.create(claim(types=("Standard_D2pls_v6",), ct=("spot",)))
    its = provider.get_instance_types({}, NODECLASS)
    assert all(not o.available for it in its for o in it.offerings if o.capacity_type == "spot")
    assert all(o.available for it in its for o in it.offerings if o.capacity_type == "on-demand")


def test_late_allocation_failure_deletes_vm_nic_and_nodeclaim(fake, provider):
    fake.fail("vm.put", "AllocationFailed", "Allocation failed. We do not have sufficient capacity", late=True)
    out = provider.create(claim(types=("Standard_D2pls_v6",)))
    assert out["status"]["providerID"].endswith("/aks-default-demo-abcde")  # accepted first
    wait(lambda: provider.deleted_claims == ["default-demo-abcde"])
    wait(lambda: not fake.vms and not fake.nics)
    assert _unavailable(provider, "Standard_D2pls_v6")


def test_other_errors_are_launch_errors_marking_nothing(fake, provider):
    from karpy.cloudprovider.arm.provider import LaunchError

    fake.fail("vm.put", "LinkedAuthorizationFailed", "The client has permission to perform action on scope, however "
              "it does not have permission to perform action(s) 'Microsoft.ManagedIdentity/.../assign/action'", status=403)
    with pytest.raises(LaunchError, match="LinkedAuthorizationFailed") as e:
        provider.create(claim())
    assert e.value.reason == "CreateInstanceFailed"
    assert _unavailable(provider, "Standard_D2pls_v6") == []


# --- get / list / delete / gc -------------------------------------------------------------------------
def test_get_list_delete(fake, provider):
    out = provider.create(claim())
    pid = out["status"]["providerID"]
    wait(lambda: fake.vms["aks-default-demo-abcde"]["properties"]["provisioningState"] == "Succeeded")
    got = provider.get(pid)
    assert got["metadata"]["name"] == "default-demo-abcde" and got["status"]["imageID"] == out["status"]["imageID"]
    assert got["metadata"]["labels"]["karpenter.sh/nodepool"] == "default-demo"
    fake.vms["aks-other-cluster"] = {**fake.vms["aks-default-demo-abcde"], "name": "aks-other-cluster",
                                     "id": fake.vms["aks-default-demo-abcde"]["id"].replace("abcde", "x").replace("default-demo-x", "other-cluster"),
                                     "tags": {"karpenter.sh_nodepool": "p", "karpenter.azure.com_cluster": "another"}}
    assert [c["status"]["providerID"] for c in provider.list()] == [pid]  # another cluster's VM is not ours
    provider.delete(out)
    wait(lambda: "aks-default-demo-abcde" not in fake.vms and "aks-default-demo-abcde" not in fake.nics
         and not provider.deleting)
    with pytest.raises(NodeClaimNotFoundError):
        provider.delete(out)
    with pytest.raises(NodeClaimNotFoundError):
        provider.get(pid)


def test_list_pages_through_resource_graph(fake, provider):
    fake.page_size = 2
    for i in range(5):
        provider.create(claim(name=f"np-{i}"))
    assert len(provider.list()) == 5 and len(fake.calls("POST", "ResourceGraph")) == 3


def test_garbage_collection_of_unclaimed_vms_and_orphan_nics(fake, provider):
    kept = provider.create(claim(name="kept"))
    provider.create(claim(name="orphan"))
    fake.nics["aks-lost"] = {**{k: v for k, v in fake.nics["aks-kept"].items() if k != "_vm"}, "name": "aks-lost",
                             "id": fake.nics["aks-kept"]["id"].replace("kept", "lost")}  # a NIC whose VM never came
    gc = gc_keeping(provider, kept)
    wait(lambda: not provider.pending)
    assert gc.collect() == ["aks-lost"]  # VMs younger than 5 minutes are kept (Resource Graph lags)
    provider.clock.t += 400
    gc.last_nic_pass = provider.clock.t  # VMs only on this pass
    assert [p.rsplit("/", 1)[-1] for p in gc.collect()] == ["aks-orphan"]
    wait(lambda: set(fake.vms) == {"aks-kept"} and set(fake.nics) == {"aks-kept"})


# --- drift --------------------------------------------------------------------------------------------
def test_image_drift_when_a_newer_version_is_published(fake, provider):
    out = provider.create(claim())
    image, ready = out["status"]["imageID"], [{"type": "ImagesReady", "status": "True"}]
    assert provider.is_drifted(out, {**NODECLASS, "status": {"images": [{"id": image}], "conditions": ready}}) is None
    newer = image.rsplit("/", 1)[0] + "/202507.01.0"  # the AKSNodeClass controller moved to a newer version
    assert provider.is_drifted(out, {**NODECLASS, "status": {"images": [{"id": newer}], "conditions": ready}}) == \
        "ImageDrift"
    assert provider.is_drifted(out, NODECLASS) is None  # as upstream: no status images, nothing to compare with
