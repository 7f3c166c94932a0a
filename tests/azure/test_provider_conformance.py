"""Upstream's Azure instance-type suite (Azure/karpenter-provider-azure pkg/providers/instancetype/suite_test.go,
v1.14) against karpy's Azure provider on the fake ARM, through the real SDK: regional (zone "0") offerings of
sizes with and without zones, the VM and NIC requests, the nodes' network labels in the custom data, and the
LocalDNS size filter. Pods are scheduled by karpy's engine against the provider's instance types where the
upstream It provisions pods, and the NodeClaims it plans are launched by the provider."""

from __future__ import annotations

import itertools

import pytest

from karpy.cloudprovider.arm.bootstrap import parse_custom_data
from karpy.cloudprovider.provider import InsufficientCapacityError
from karpy.provisioning.templates import build_template
from karpy.scheduling.scheduler import Scheduler
from tests.helpers import pod, spread

from .test_provider import NODECLASS, claim, provider  # noqa: F401 - the provider fixture on the fake ARM

ZONE = "topology.kubernetes.io/zone"
SCOPE = "karpenter.azure.com/placement-scope"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
A100 = "Standard_NC24ads_A100_v4"
VNET_GUID = "a519e60a-cac0-40b2-b883-084477fe6f5c"
_names = itertools.count()


def vm_puts(fake) -> list[dict]:
    return [r["body"] for r in fake.calls("PUT", r"/virtualMachines/[^/]+$")]


def nic_puts(fake) -> list[dict]:
    return [r for r in fake.calls("PUT", r"/networkInterfaces/[^/]+$")]


def without_zones(fake, provider, *names: str) -> None:
    """Make SKUs regional only (every SKU without names): no zones in the location, as a non-zonal region or a
    size Azure offers without availability zones."""
    for sku in fake.skus:
        if not names or sku["name"] in names:
            for li in sku["locationInfo"]:
                li["zones"] = []
    provider.types.refresh(force=True)


def nodepool(*requirements: dict) -> dict:
    return {"kind": "NodePool", "metadata": {"name": "default-demo"}, "spec": {"template": {"spec": {
        "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
        "requirements": list(requirements)}}}}


def req(key: str, *values: str) -> dict:
    return {"key": key, "operator": "In", "values": list(values)}


def provision(provider, np: dict, pods: list) -> tuple[object, list[dict]]:
    """Schedule ``pods`` with karpy's engine against the provider's instance types for NodePool ``np``, and
    launch every NodeClaim planned: (the scheduling results, the NodeClaims the provider returned)."""
    tpl = build_template(np, provider.get_instance_types(np, NODECLASS), [], {}, provider.well_known_labels(np))
    results = Scheduler([tpl], []).solve(pods)
    created = []
    for nc in results.new_nodeclaims:
        reqs = [r for r in nc.requirements.to_node_selector() if r["key"] != "kubernetes.io/hostname"]
        created.append(provider.create({
            "metadata": {"name": f"default-demo-{next(_names):05d}",
                         "labels": {**nc.template.labels, "karpenter.sh/nodepool": "default-demo"}},
            "spec": {"nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
                     "requirements": reqs}}))
    return results, created


def custom_data(vm: dict) -> dict[str, str]:
    return parse_custom_data(vm["properties"]["osProfile"]["customData"])


def kubelet_labels(vm: dict) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in custom_data(vm)["KUBELET_NODE_LABELS"].split(",") if kv)


# --- regional placement (L466, L1793, L1817, L1861-L1947) -----------------------------------------------------
def test_allocation_failure_moves_the_next_launch_of_the_size_to_regional_placement(fake, provider):
    fake.fail("vm.put", "AllocationFailed", "Allocation failed. We do not have sufficient capacity for the requested "
              "VM size in this region.", times=1)
    with pytest.raises(InsufficientCapacityError, match="AllocationFailed"):
        provider.create(claim(types=("Standard_D2_v3", "Standard_D64s_v3")))
    (first,) = vm_puts(fake)
    size, zone = first["properties"]["hardwareProfile"]["vmSize"], f"eastus-{first['zones'][0]}"
    assert size == "Standard_D2_v3"  # the cheaper size, in a zone (zonal before regional at the same price)
    blocked = {(o.zone, o.capacity_type) for it in provider.get_instance_types({}, NODECLASS) if it.name == size
               for o in it.offerings if not o.available}
    assert {(zone, "spot"), (zone, "on-demand")} <= blocked and not {z for z, _ in blocked} & {"0"}
    out = provider.create(claim(name="retry", types=("Standard_D2_v3", "Standard_D64s_v3")))
    labels = out["metadata"]["labels"]
    assert (labels[INSTANCE_TYPE], labels[ZONE], labels[SCOPE]) == (size, "0", "regional")
    assert "zones" not in vm_puts(fake)[-1]


def test_a_size_with_zones_launches_zonally_by_default(fake, provider):
    out = provider.create(claim(types=(A100,)))
    assert out["metadata"]["labels"][SCOPE] == "zonal" and out["metadata"]["labels"][ZONE] != "0"
    assert vm_puts(fake)[0]["zones"]


def test_a_size_with_zones_launches_regionally_when_the_nodepool_asks_for_regional_placement(fake, provider):
    np = nodepool(req(INSTANCE_TYPE, A100), req(CAPACITY_TYPE, "on-demand"), req(SCOPE, "regional"))
    (it,) = [it for it in provider.get_instance_types(np, NODECLASS) if it.name == A100]
    assert {o.zone for o in it.offerings} == {"0"} and it.labels[SCOPE] == "regional"
    results, (out,) = provision(provider, np, [pod("p", cpu="1")])
    assert not results.errors
    assert (out["metadata"]["labels"][ZONE], out["metadata"]["labels"][SCOPE]) == ("0", "regional")
    (vm,) = vm_puts(fake)
    assert vm["properties"]["hardwareProfile"]["vmSize"] == A100 and "zones" not in vm


def test_a_region_without_zones_launches_regional_vms(fake, provider):
    without_zones(fake, provider)
    results, (out,) = provision(provider, nodepool(req(CAPACITY_TYPE, "on-demand")), [pod("p", cpu="1")])
    assert not results.errors and out["metadata"]["labels"][ZONE] == "0"
    (vm,) = vm_puts(fake)
    assert "zones" not in vm


def test_a_size_without_zones_in_a_zonal_region_launches_with_zone_label_0(fake, provider):
    without_zones(fake, provider, "Standard_NC6s_v3")
    (it,) = [it for it in provider.get_instance_types({}, NODECLASS) if it.name == "Standard_NC6s_v3"]
    assert {o.zone for o in it.offerings} == {"0"}
    results, (out,) = provision(provider, nodepool(req(INSTANCE_TYPE, "Standard_NC6s_v3")), [pod("p", cpu="1")])
    assert not results.errors and out["metadata"]["labels"][ZONE] == "0"
    (vm,) = vm_puts(fake)
    assert "zones" not in vm


def test_no_offering_has_an_empty_zone(fake, provider):
    without_zones(fake, provider, "Standard_NC6s_v3", "Standard_D2_v2")
    its = provider.get_instance_types(nodepool(), NODECLASS)
    assert its and all(o.zone for it in its for o in it.offerings)
    assert {o.zone for it in its for o in it.offerings} == {"0", "eastus-1", "eastus-2", "eastus-3"}


@pytest.mark.parametrize("zones", [("eastus-1",), ("eastus-1", "eastus-2", "eastus-3")], ids=["one-zone", "all-zones"])
def test_zone_requirements_exclude_a_size_without_zones(fake, provider, zones):
    without_zones(fake, provider, "Standard_NC6s_v3")
    np = nodepool(req(INSTANCE_TYPE, "Standard_NC6s_v3"), req(ZONE, *zones))
    results, created = provision(provider, np, [pod("p", cpu="1")])
    assert results.errors and created == [] and vm_puts(fake) == []  # the pod stays pending
    with pytest.raises(InsufficientCapacityError):
        provider.create(claim(types=("Standard_NC6s_v3",), zones=zones))
    assert vm_puts(fake) == []


def test_zonal_topology_spread_schedules_with_sizes_without_zones(fake, provider):
    without_zones(fake, provider, "Standard_NC6s_v3", "Standard_D2_v2")
    labels = {"app": "tsc-repro"}
    pods = [pod(f"p{i}", cpu="1", labels=labels, spread=[spread(ZONE, labels=labels)]) for i in range(3)]
    results, created = provision(provider, nodepool(req(CAPACITY_TYPE, "on-demand")), pods)
    assert not results.errors and sum(len(c.pods) for c in results.new_nodeclaims) == 3
    zones = [c["metadata"]["labels"][ZONE] for c in created]
    assert len(zones) == 3 and len(set(zones)) == 3  # one pod per zone: the spread holds


# --- unavailable offerings (L2191, L2282) ---------------------------------------------------------------------
def test_unavailable_offerings_are_not_returned_in_a_region_without_zones(fake, provider):
    without_zones(fake, provider)
    for ct in ("spot", "on-demand"):
        provider.unavailable.mark(ct, "Standard_D2_v2", "0", 3600.0)
    its = {it.name: it for it in provider.get_instance_types({}, NODECLASS)}
    assert not [o for o in its["Standard_D2_v2"].offerings if o.available]
    assert all(any(o.available for o in it.offerings) for name, it in its.items() if name != "Standard_D2_v2")


def test_zonal_unavailable_offerings_leave_the_regional_ones(fake, provider):
    for zone in ("eastus-1", "eastus-2", "eastus-3"):
        for ct in ("spot", "on-demand"):
            provider.unavailable.mark(ct, "Standard_D2_v2", zone, 3600.0)
    (it,) = [it for it in provider.get_instance_types({}, NODECLASS) if it.name == "Standard_D2_v2"]
    assert [o.zone for o in it.offerings if o.available] == ["0", "0"]


def test_a_size_launches_again_in_a_region_without_zones_once_its_unavailability_expires(fake, provider):
    without_zones(fake, provider)
    for ct in ("spot", "on-demand"):
        provider.unavailable.mark(ct, "Standard_D2_v2", "0", 3600.0)
    np = nodepool(req(CAPACITY_TYPE, "on-demand", "spot"))
    results, created = provision(provider, np, [pod("p", cpu="1", node_selector={INSTANCE_TYPE: "Standard_D2_v2"})])
    assert results.errors and created == []
    provider.clock.t += 3601  # the capacity shortage is over
    results, (out,) = provision(provider, np, [pod("p", cpu="1", node_selector={INSTANCE_TYPE: "Standard_D2_v2"})])
    assert not results.errors and out["metadata"]["labels"][INSTANCE_TYPE] == "Standard_D2_v2"


# --- the VM and NIC requests (L292, L317, L1515, L1541, L2001, L2043) -----------------------------------------
def test_a_vm_created_before_is_not_created_again(fake, provider):
    name = "aks-default-demo-abcde"
    fake.vms[name] = {"id": f"/subscriptions/x/resourceGroups/{fake.node_rg}/providers/Microsoft.Compute/"
                            f"virtualMachines/{name}", "name": name, "location": "eastus", "zones": ["fantasy-zone"],
                      "type": "Microsoft.Compute/virtualMachines",
                      "properties": {"hardwareProfile": {"vmSize": "Basic_A3"}, "provisioningState": "Succeeded",
                                     "timeCreated": "2026-01-01T00:00:00Z"}}
    out = provider.create(claim())  # the VM of an earlier attempt, of a size and zone karpy does not offer
    assert out["status"]["providerID"].endswith(f"/virtualMachines/{name}")
    assert out["metadata"]["labels"][INSTANCE_TYPE] == "Basic_A3"
    assert vm_puts(fake) == []


def test_a_failed_vm_put_deletes_its_network_interface_and_the_next_launch_succeeds(fake, provider):
    from karpy.cloudprovider.arm.provider import LaunchError

    fake.fail("vm.put", "404", "test error", status=404)
    with pytest.raises(LaunchError, match="test error"):
        provider.create(claim())
    assert len(nic_puts(fake)) == 1 and fake.nics == {} and fake.vms == {}
    out = provider.create(claim(name="again"))
    assert out["status"]["providerID"].endswith("/aks-again") and "aks-again" in fake.vms


def test_the_vm_carries_every_node_identity(fake, provider, monkeypatch):
    ids = [f"/subscriptions/1234/resourceGroups/mcrg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/{n}"
           for n in ("myid1", "myid2")]
    monkeypatch.setattr(provider.s, "node_identities", ids)
    provider.create(claim())
    (vm,) = vm_puts(fake)
    assert vm["identity"] == {"type": "UserAssigned", "userAssignedIdentities": {i: {} for i in ids}}


def test_os_disk_and_network_interfaces_are_deleted_with_the_vm(fake, provider):
    provider.create(claim())
    (vm,) = vm_puts(fake)
    assert vm["properties"]["storageProfile"]["osDisk"]["deleteOption"] == "Delete"
    assert vm["properties"]["storageProfile"]["imageReference"]
    nics = vm["properties"]["networkProfile"]["networkInterfaces"]
    assert nics and all(n["properties"]["deleteOption"] == "Delete" for n in nics)


def test_an_unreadable_sku_list_fails_the_launch_resolving_instance_types(fake, env):
    from karpy.cloudprovider.arm.provider import AzureVMProvider, LaunchError
    from karpy.cloudprovider.arm.clients import make_clients
    from karpy.cloudprovider.arm.skus import InstanceTypes, list_skus_via
    from karpy.controller.settings import resolve

    s = resolve({"cloud_provider": "azure"}).azure
    clients = make_clients(s)
    types = InstanceTypes(list_skus_via(clients.compute, s.location), s.location)  # never read yet
    p = AzureVMProvider(clients, s, types, lambda kind, name: NODECLASS, lambda: {"ca": "", "version": "1.33.2"},
                        poll_interval=0)
    try:
        fake.fail("skus", "InternalServerError", "sku api down", status=500, times=10)
        with pytest.raises(LaunchError, match="resolving instance types") as e:
            p.create(claim())
        assert e.value.reason == "InstanceTypeResolutionFailed"
        assert vm_puts(fake) == [] and nic_puts(fake) == []
    finally:
        p.close()


def test_a_refused_vm_put_is_a_launch_error_not_capacity(fake, provider):
    from karpy.cloudprovider.arm.provider import LaunchError

    fake.fail("vm.put", "OperationNotAllowed", "Failed to create VM")
    with pytest.raises(LaunchError, match="Failed to create VM") as e:
        provider.create(claim())
    assert not isinstance(e.value, InsufficientCapacityError) and e.value.reason == "CreateInstanceFailed"


# --- network labels and the agent's network plugin (L238-L266, L1278, L1732-L1757) ----------------------------
def test_azure_cni_overlay_with_cilium_writes_every_network_label(fake, provider, monkeypatch):
    monkeypatch.setattr(provider.s, "vnet_guid", VNET_GUID)
    provider.create(claim())
    labels = kubelet_labels(vm_puts(fake)[0])
    assert {k: labels.get(k) for k in (
        "kubernetes.azure.com/ebpf-dataplane", "kubernetes.azure.com/network-subnet",
        "kubernetes.azure.com/nodenetwork-vnetguid", "kubernetes.azure.com/podnetwork-type",
        "kubernetes.azure.com/azure-cni-overlay")} == {
        "kubernetes.azure.com/ebpf-dataplane": "cilium", "kubernetes.azure.com/network-subnet": "nodes",
        "kubernetes.azure.com/nodenetwork-vnetguid": VNET_GUID, "kubernetes.azure.com/podnetwork-type": "overlay",
        "kubernetes.azure.com/azure-cni-overlay": "true"}


@pytest.mark.parametrize("version, stateless", [("1.34.0", "true"), ("1.33.0", "false")])
def test_stateless_cni_label_follows_the_kubernetes_version(fake, provider, version, stateless):
    provider.nodeclass["obj"] = {**NODECLASS, "status": {"kubernetesVersion": version}}
    provider.create(claim())
    assert kubelet_labels(vm_puts(fake)[0])["kubernetes.azure.com/network-stateless-cni"] == stateless


OVERLAY_LABELS = {"kubernetes.azure.com/azure-cni-overlay=true", "kubernetes.azure.com/network-subnet=nodes",
                  f"kubernetes.azure.com/nodenetwork-vnetguid={VNET_GUID}", "kubernetes.azure.com/podnetwork-type=overlay"}


@pytest.mark.parametrize("plugin, mode, dataplane, agent_plugin, expected", [
    ("azure", "", "azure", "azure", set()),                                    # Azure CNI V1
    ("azure", "overlay", "azure", "none", OVERLAY_LABELS),                     # Azure CNI with overlay
    ("none", "", "azure", "none", set()),                                      # network plugin none
    ("azure", "overlay", "cilium", "none", OVERLAY_LABELS | {"kubernetes.azure.com/ebpf-dataplane=cilium"}),
    ("azure", "", "cilium", "none", {"kubernetes.azure.com/ebpf-dataplane=cilium"}),  # Cilium on the node subnet
], ids=["azure-cni-v1", "overlay", "none", "overlay-cilium", "cilium-node-subnet"])
def test_network_labels_and_the_agents_network_plugin(fake, provider, monkeypatch, plugin, mode, dataplane,
                                                       agent_plugin, expected):
    for k, v in (("network_plugin", plugin), ("network_plugin_mode", mode), ("network_dataplane", dataplane),
                 ("vnet_guid", VNET_GUID)):
        monkeypatch.setattr(provider.s, k, v)
    provider.create(claim())
    boot = custom_data(vm_puts(fake)[0])
    assert boot["NETWORK_PLUGIN"] == agent_plugin
    labels = {f"{k}={v}" for k, v in kubelet_labels(vm_puts(fake)[0]).items()}
    network = {x for x in labels if x.split("=")[0] in {y.split("=")[0] for y in OVERLAY_LABELS}
               | {"kubernetes.azure.com/ebpf-dataplane"}}
    assert network == expected


def test_network_settings_are_read_and_checked(env, monkeypatch):
    from karpy.controller.settings import SettingsError, resolve

    monkeypatch.setenv("NETWORK_DATAPLANE", "azure")
    monkeypatch.setenv("VNET_GUID", VNET_GUID)
    s = resolve({"cloud_provider": "azure"}).azure
    assert (s.network_dataplane, s.vnet_guid) == ("azure", VNET_GUID)
    monkeypatch.delenv("NETWORK_DATAPLANE")
    assert resolve({"cloud_provider": "azure"}).azure.network_dataplane == "cilium"  # upstream's default
    for var, value, message in (("NETWORK_DATAPLANE", "calico", "NETWORK_DATAPLANE (--network-dataplane): invalid"),
                                ("VNET_GUID", "not-a-guid", "VNET_GUID (--vnet-guid): invalid value")):
        monkeypatch.setenv(var, value)
        with pytest.raises(SettingsError) as e:
            resolve({"cloud_provider": "azure"})
        assert message in str(e.value)
        monkeypatch.delenv(var)


@pytest.mark.parametrize("var, value, message", [
    # upstream's own validation refuses kubenet too: network-plugin must be azure or none
    ("NETWORK_PLUGIN", "kubenet", "NETWORK_PLUGIN (--network-plugin): invalid value \"kubenet\": must be azure or none"),
    ("PROVISION_MODE", "bootstrappingclient", "not supported by karpy yet"),
], ids=["kubenet", "bootstrappingclient"])
def test_settings_karpy_refuses_at_start_up_are_named(env, monkeypatch, var, value, message):
    from karpy.controller.settings import SettingsError, resolve

    monkeypatch.setenv(var, value)
    with pytest.raises(SettingsError) as e:
        resolve({"cloud_provider": "azure"})
    assert message in str(e.value)


# --- LocalDNS (L762-L770) -------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode, state, two_vcpus", [
    ("Required", "Enabled", False),
    ("Preferred", "Enabled", False),   # Kubernetes >= 1.36: the AKSNodeClass's LocalDNS resolved to Enabled
    ("Preferred", "Disabled", True),   # Kubernetes < 1.36: resolved to Disabled
    ("Disabled", "Disabled", True),
    ("", "Disabled", True),
], ids=["required", "preferred-1.36", "preferred-1.35", "disabled", "unset"])
def test_localdns_keeps_sizes_of_four_vcpus_or_more(provider, mode, state, two_vcpus):
    nc = {**NODECLASS, "spec": {**NODECLASS["spec"], "localDNS": {"mode": mode}} if mode else NODECLASS["spec"],
          "status": {"localDNSState": state}}
    names = {it.name for it in provider.get_instance_types({}, nc)}
    assert ("Standard_D2s_v3" in names) is two_vcpus
    assert "Standard_D4s_v3" in names
