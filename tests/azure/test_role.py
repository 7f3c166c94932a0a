"""iam/azure-controller-role.json allows every ARM call karpy's Azure provider makes, and nothing else.

Two views of "every call": the Azure SDK operations the code names (a new one fails here until the table
below and the role list its actions), and the requests a run of every call path sends to the fake ARM (each
mapped to the SDK operation it is, so that the table is checked against what goes over the wire)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from karpy.cloudprovider.arm.controllers import GarbageCollector
from karpy.cloudprovider.arm.nodeclass import NodeClassController

from .conftest import make_provider
from .test_nodeclass import Store
from .test_provider import claim

ROOT = Path(__file__).resolve().parents[2]
ROLE = json.loads((ROOT / "iam" / "azure-controller-role.json").read_text())

# SDK operation -> the Azure RBAC actions it needs (joins: what the request body references)
OPERATIONS = {
    "compute.resource_skus.list": {"Microsoft.Compute/skus/read"},
    "compute.usage.list": {"Microsoft.Compute/locations/usages/read"},
    "compute.community_gallery_image_versions.list": {"Microsoft.Compute/locations/communityGalleries/images/versions/read"},
    "compute.virtual_machines.get": {"Microsoft.Compute/virtualMachines/read"},
    "compute.virtual_machines.begin_create_or_update": {
        "Microsoft.Compute/virtualMachines/write", "Microsoft.Network/networkInterfaces/join/action",
        "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action"},
    "compute.virtual_machines.begin_delete": {"Microsoft.Compute/virtualMachines/delete"},
    "compute.virtual_machine_extensions.begin_create_or_update": {  # its poller ends with a GET of the extension
        "Microsoft.Compute/virtualMachines/extensions/write", "Microsoft.Compute/virtualMachines/extensions/read"},
    "network.network_interfaces.begin_create_or_update": {  # its poller ends with a GET of the NIC
        "Microsoft.Network/networkInterfaces/write", "Microsoft.Network/networkInterfaces/read", "Microsoft.Network/virtualNetworks/subnets/join/action",
        "Microsoft.Network/networkSecurityGroups/join/action",
        "Microsoft.Network/loadBalancers/backendAddressPools/join/action"},
    "network.network_interfaces.begin_delete": {"Microsoft.Network/networkInterfaces/delete"},
    "network.network_security_groups.list": {"Microsoft.Network/networkSecurityGroups/read"},
    "network.load_balancers.list": {"Microsoft.Network/loadBalancers/read"},
    "network.subnets.get": {"Microsoft.Network/virtualNetworks/subnets/read"},
    # Resource Graph shows only what the caller may read: the VMs and NICs it lists
    "graph.resources": {"Microsoft.ResourceGraph/resources/read", "Microsoft.Compute/virtualMachines/read",
                        "Microsoft.Network/networkInterfaces/read"},
}
# the SDK polls long-running operations (PUT, DELETE) at the provider's operation status URLs
POLLING = {"Microsoft.Compute/locations/operations/read", "Microsoft.Network/locations/operations/read"}

# a request to ARM -> the SDK operation it is
_RG = r"(?i)^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/"
ROUTES = [
    ("GET", r"(?i)^/subscriptions/[^/]+/providers/Microsoft\.Compute/skus$", "compute.resource_skus.list"),
    ("GET", r"(?i)^/subscriptions/[^/]+/providers/Microsoft\.Compute/locations/[^/]+/usages$", "compute.usage.list"),
    ("GET", r"(?i)/communityGalleries/[^/]+/images/[^/]+/versions$", "compute.community_gallery_image_versions.list"),
    ("GET", _RG + r"Microsoft\.Compute/virtualMachines/[^/]+$", "compute.virtual_machines.get"),
    ("PUT", _RG + r"Microsoft\.Compute/virtualMachines/[^/]+$", "compute.virtual_machines.begin_create_or_update"),
    ("DELETE", _RG + r"Microsoft\.Compute/virtualMachines/[^/]+$", "compute.virtual_machines.begin_delete"),
    ("PUT", _RG + r"Microsoft\.Compute/virtualMachines/[^/]+/extensions/[^/]+$",
     "compute.virtual_machine_extensions.begin_create_or_update"),
    ("GET", _RG + r"Microsoft\.Compute/virtualMachines/[^/]+/extensions/[^/]+$",
     "compute.virtual_machine_extensions.begin_create_or_update"),
    ("PUT", _RG + r"Microsoft\.Network/networkInterfaces/[^/]+$", "network.network_interfaces.begin_create_or_update"),
    ("GET", _RG + r"Microsoft\.Network/networkInterfaces/[^/]+$", "network.network_interfaces.begin_create_or_update"),
    ("DELETE", _RG + r"Microsoft\.Network/networkInterfaces/[^/]+$", "network.network_interfaces.begin_delete"),
    ("GET", _RG + r"Microsoft\.Network/networkSecurityGroups$", "network.network_security_groups.list"),
    ("GET", _RG + r"Microsoft\.Network/loadBalancers$", "network.load_balancers.list"),
    ("GET", _RG + r"Microsoft\.Network/virtualNetworks/[^/]+/subnets/[^/]+$", "network.subnets.get"),
    ("POST", r"(?i)^/providers/Microsoft\.ResourceGraph/resources$", "graph.resources"),
]


def operations_in_code() -> set[str]:
    ops = set()
    for f in (ROOT / "karpy" / "cloudprovider" / "arm").glob("*.py"):
        text = f.read_text()
        ops |= {f"{svc}.{group}.{method}" for svc, group, method in
                re.findall(r"\b(compute|network)\.([a-z_]+)\.([a-z_]+)\(", text)}
        ops |= {"graph.resources" for _ in re.findall(r"\bgraph\.resources\(", text)}
    return ops


def test_the_role_allows_exactly_the_actions_of_the_calls_in_the_code():
    ops = operations_in_code()
    assert len(ops) >= 12
    unknown = sorted(ops - OPERATIONS.keys())
    assert unknown == [], f"ARM calls this test does not know: add them to OPERATIONS and to the role: {unknown}"
    need = set().union(*(OPERATIONS[o] for o in ops)) | POLLING
    have = set(ROLE["Actions"])
    assert sorted(need - have) == [], "iam/azure-controller-role.json misses actions karpy calls"
    assert sorted(have - need) == [], "iam/azure-controller-role.json grants actions karpy never calls"
    assert not any("*" in a for a in have) and ROLE["IsCustom"] and ROLE["DataActions"] == []


def test_a_run_of_every_call_path_sends_only_calls_the_role_allows(fake, env, tmp_path):
    store = Store()
    store.add({"kind": "AKSNodeClass", "metadata": {"name": "default"}, "spec": {"imageFamily": "Ubuntu2204"}})
    p, clock = make_provider(store.get, fresh_skus=True)  # every call path, the SKU list's included
    try:
        NodeClassController(store, store, p, lambda: "1.33.2", clock, store, store).reconcile("default")
        assert p.quota.update()  # the families' vCPU quota
        out = p.create(claim())
        pid = out["status"]["providerID"]
        deadline = time.monotonic() + 10
        while not fake.calls("PUT", r"/extensions/") and time.monotonic() < deadline:
            time.sleep(0.05)
        p.get(pid)
        store.add({"kind": "NodeClaim", "metadata": {"name": "default-demo-abcde"}, "status": {"providerID": pid}})
        GarbageCollector(store, store, p, store, now=clock).collect()  # Resource Graph: VMs and NICs
        p.delete({"status": {"providerID": pid}})
        deadline = time.monotonic() + 10
        while not fake.calls("DELETE", r"/networkInterfaces/") and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        p.close()
    seen = set()
    for r in fake.requests:
        if r["path"].startswith("/fakeops/") or "/oauth2/" in r["path"] or "openid-configuration" in r["path"]:
            continue  # operation polling (POLLING) and Entra
        op = next((o for m, rx, o in ROUTES if m == r["method"] and re.search(rx, r["path"])), None)
        assert op is not None, f"a request no SDK operation of the table explains: {r['method']} {r['path']}"
        seen.add(op)
        if op == "network.network_interfaces.begin_create_or_update" and r["method"] == "PUT":  # the joins the NIC's body makes
            ipc = r["body"]["properties"]["ipConfigurations"][0]["properties"]
            assert ipc["subnet"]["id"] and ipc["loadBalancerBackendAddressPools"]
            assert r["body"]["properties"]["networkSecurityGroup"]["id"]
        if op == "compute.virtual_machines.begin_create_or_update":
            assert r["body"]["identity"]["userAssignedIdentities"]
            assert r["body"]["properties"]["networkProfile"]["networkInterfaces"]
    assert seen == operations_in_code()  # the run went through every call the code makes
    assert set().union(*(OPERATIONS[o] for o in seen)) <= set(ROLE["Actions"])
