"""iam/azure-controller-role-machines.json allows every ARM request karpy sends with PROVISION_MODE=aksmachineapi,
and grants nothing beyond those and the VM path's role (VMs from before a switch to machines are still managed).

The machine calls go through an ARM pipeline by URL (the containerservice SDK has no machine PUT), so the role is
checked against what goes over the wire: a run of every machine call path against the fake ARM."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .conftest import gc_keeping
from .test_machines import claim, machine_env, provider, wait  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parents[2]
VM_ROLE = json.loads((ROOT / "iam" / "azure-controller-role.json").read_text())
ROLE = json.loads((ROOT / "iam" / "azure-controller-role-machines.json").read_text())

_POOL = (r"(?i)^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.ContainerService/managedClusters/"
         r"[^/]+/agentPools/[^/]+")
# a machine request -> the Azure RBAC action it needs
MACHINE_ROUTES = [
    ("PUT", _POOL + r"/machines/[^/]+$", "Microsoft.ContainerService/managedClusters/agentPools/machines/write"),
    ("GET", _POOL + r"/machines/[^/]+$", "Microsoft.ContainerService/managedClusters/agentPools/machines/read"),
    ("GET", _POOL + r"/machines$", "Microsoft.ContainerService/managedClusters/agentPools/machines/read"),
    ("POST", _POOL + r"/deleteMachines$", "Microsoft.ContainerService/managedClusters/agentPools/deleteMachines/action"),
]
# ARM answers the machine PUT and deleteMachines with operations polled at the provider's operation status URLs
MACHINE_POLLING = {"Microsoft.ContainerService/locations/operations/read"}


def test_the_machine_role_is_the_vm_role_plus_exactly_the_machine_actions():
    extra = set(ROLE["Actions"]) - set(VM_ROLE["Actions"])
    assert extra == {a for _, _, a in MACHINE_ROUTES} | MACHINE_POLLING
    assert set(VM_ROLE["Actions"]) <= set(ROLE["Actions"])
    assert not any("*" in a for a in ROLE["Actions"]) and ROLE["IsCustom"] and ROLE["DataActions"] == []


def test_a_run_of_every_machine_call_path_sends_only_requests_the_role_allows(fake, provider):  # noqa: F811
    kept = provider.create(claim(name="kept-00001"))
    provider.create(claim(name="orphan-00001"))
    wait(lambda: not provider.machines_pending)
    provider.get(kept["status"]["providerID"])
    provider.clock.t += 400  # past the garbage collector's grace period
    assert gc_keeping(provider, kept).collect()
    wait(lambda: set(fake.machines) == {"kept-00001"})
    machine_actions = set()
    for r in fake.requests:
        if r["path"].startswith("/fakeops/") or "/oauth2/" in r["path"] or "openid-configuration" in r["path"]:
            continue  # operation polling and Entra
        action = next((a for m, rx, a in MACHINE_ROUTES if m == r["method"] and re.search(rx, r["path"])), None)
        if action is not None:
            machine_actions.add(action)
        else:  # the SKU, quota, gallery and Resource Graph reads the VM path's role test maps
            assert "ContainerService" not in r["path"], f"a machine request the table does not know: {r['path']}"
    assert machine_actions == {a for _, _, a in MACHINE_ROUTES}  # PUT, GET, list and deleteMachines all ran
    assert machine_actions | MACHINE_POLLING <= set(ROLE["Actions"])
    assert not fake.calls("PUT", r"/virtualMachines/") and not fake.calls("PUT", r"/networkInterfaces/")
