"""The fake ARM (tests/azure/fakearm.py) per test, and karpy's Azure provider pointed at it through the real SDK."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("azure.mgmt.compute")

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


@pytest.fixture
def fake():
    f = FakeARM().start()
    yield f
    f.stop()


@pytest.fixture
def env(fake, tmp_path, monkeypatch):
    e = settings_env(fake, tmp_path)
    for k, v in e.items():
        monkeypatch.setenv(k, v)
    return e
