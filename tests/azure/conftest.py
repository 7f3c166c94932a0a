"""The fake ARM (tests/azure/fakearm.py) per test, and karpy's Azure provider pointed at it through the real SDK."""

from __future__ import annotations

import json
import os
import pickle
import time

import pytest

if os.environ.get("CI", "").lower() == "true":  # under CI the suite runs or fails, never skips
    import azure.mgmt.compute  # noqa: F401  (the test extra pins it)
pytest.importorskip("azure.mgmt.compute", reason="the Azure SDK is not installed: pip install -e '.[test]'")

from .fakearm import NODE_RG, SUBSCRIPTION, FakeARM  # noqa: E402

SUBNET = (f"/subscriptions/{SUBSCRIPTION}/resourceGroups/rg-net/providers/Microsoft.Network/virtualNetworks/"
          "vnet-1/subnets/nodes")
IDENTITY = (f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{NODE_RG}/providers/Microsoft.ManagedIdentity/"
            "userAssignedIdentities/cluster-agentpool")
TOKEN = "abcdef.0123456789abcdef"
SSH = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKarpyTestKey karpy@test"


def settings_env(fake: FakeARM, directory) -> dict[str, str]:
    """Upstream's variables for a self-hosted cluster on the fake, plus the fake's endpoints and identity."""
    return {**fake.environment(directory), "CLUSTER_NAME": "workshop", "CLUSTER_ENDPOINT":
            "https://workshop-dns-12345678.hcp.eastus.azmk8s.io:443", "AZURE_SUBSCRIPTION_ID": SUBSCRIPTION,
            "LOCATION": "eastus", "AZURE_NODE_RESOURCE_GROUP": NODE_RG, "VNET_SUBNET_ID": SUBNET,
            "KUBELET_BOOTSTRAP_TOKEN": TOKEN, "SSH_PUBLIC_KEY": SSH, "NODE_IDENTITIES": IDENTITY,
            "ARM_RESOURCE_GROUP": "rg", "NETWORK_PLUGIN": "azure", "NETWORK_PLUGIN_MODE": "overlay",
            "NETWORK_POLICY": "cilium"}


# the fakes the ``fake`` fixture runs, by URL: make_provider finds the one the environment names
_RUNNING: dict[str, FakeARM] = {}
# (location, the fake's SKUs as JSON) -> what list_skus_via read for them: the SDK's deserialization of ~600
# SKUs takes seconds, and most tests only need the list read, not the read itself
_SKU_LISTS: dict[tuple[str, str], bytes] = {}


@pytest.fixture
def fake():
    f = FakeARM().start()
    _RUNNING[f.url] = f
    yield f
    _RUNNING.pop(f.url, None)
    f.stop()


@pytest.fixture
def env(fake, tmp_path, monkeypatch):
    e = settings_env(fake, tmp_path)
    for k, v in e.items():
        monkeypatch.setenv(k, v)
    return e


class NodeClaims:
    """The manager's cache as the garbage collector reads it: these NodeClaims, nothing else."""

    def __init__(self, claims=()):
        self.claims = list(claims)

    def list(self, kind):
        return self.claims if kind == "NodeClaim" else []


class QuietLog:
    def info(self, *a, **k):
        pass

    error = info


def gc_keeping(provider, *kept: dict):
    """karpy's Azure garbage collector over ``provider``, with only ``kept`` (launched NodeClaims) claimed."""
    from karpy.cloudprovider.arm.controllers import GarbageCollector

    claims = [{"metadata": {"name": c["metadata"]["name"]}, "status": {"providerID": c["status"]["providerID"]}}
              for c in kept]
    return GarbageCollector(NodeClaims(claims), None, provider, QuietLog(), now=provider.clock)


class Clock:
    """A clock the tests move: ``clock()`` and ``clock.now()`` are ``clock.t``."""

    def __init__(self):
        self.t = time.time()

    def now(self) -> float:
        return self.t

    __call__ = now


def first_read_kept(lister, location: str, fresh: bool = False):
    """``lister``, except its first read: when the fake of the ``fake`` fixture answers it with no fault
    pending, and this test session already read the same SKUs through the SDK, a copy of that read. Later
    reads (refreshes) always go to the fake."""
    first = [True]

    def run() -> list[dict]:
        if not first[0]:
            return lister()
        first[0] = False
        fake = _RUNNING.get(os.environ.get("AZURE_AUTHORITY_HOST", "").rstrip("/"))
        if fresh or fake is None or fake.faults or fake.throttles:
            return lister()
        key = (location, json.dumps(fake.skus, sort_keys=True))
        if key not in _SKU_LISTS:
            _SKU_LISTS[key] = pickle.dumps(lister())
        return pickle.loads(_SKU_LISTS[key])
    return run


def make_provider(lookup, cluster=lambda: {"ca": "Q0EgUEVN", "version": "1.33.2"}, fresh_skus: bool = False, **kw):
    """karpy's Azure provider on the fake (the settings of ``env``), its instance types read, its clock a
    :class:`Clock`: (provider, clock). The first SKU read may be a copy of an earlier read of the same SKUs
    (see :func:`first_read_kept`); ``fresh_skus`` sends it to the fake in any case."""
    from karpy.cloudprovider.arm.clients import make_clients
    from karpy.cloudprovider.arm.provider import AzureVMProvider
    from karpy.cloudprovider.arm.skus import InstanceTypes, list_skus_via
    from karpy.controller.settings import resolve

    s = resolve({"cloud_provider": "azure"}).azure
    clients = make_clients(s)
    clock = Clock()
    types = InstanceTypes(first_read_kept(list_skus_via(clients.compute, s.location), s.location, fresh_skus),
                          s.location, now=clock)
    types.refresh()
    return AzureVMProvider(clients, s, types, lookup, cluster, now=clock, poll_interval=0, **kw), clock
