"""Rows of upstream's Azure instance-type suite (Azure/karpenter-provider-azure pkg/providers/instancetype/suite_test.go,
v1.14) that depend on what the Resource SKUs API reports of each size, checked against karpy's Azure provider on
the fake ARM through the real SDK: the SKU list is what ``Microsoft.Compute/skus`` answers, refreshed by the
provider."""

from __future__ import annotations

import copy

import pytest

from .test_provider import NODECLASS, provider  # noqa: F401 - the provider fixture on the fake ARM

NO_ENCRYPTION = "Standard_D2_v2"  # upstream's fake SKU data: EncryptionAtHostSupported False
WITH_ENCRYPTION = ("Standard_D2s_v3", "Standard_D2_v5")  # EncryptionAtHostSupported True
NODEPOOL = {"kind": "NodePool", "metadata": {"name": "default-demo"}, "spec": {"template": {"spec": {
    "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"}}}}}


def _set_capability(fake, size: str, name: str, value: str) -> None:
    (sku,) = [s for s in fake.skus if s["name"] == size]
    caps = [c for c in sku["capabilities"] if c["name"] != name]
    sku["capabilities"] = [*caps, {"name": name, "value": value}]


def _names(provider, nodeclass: dict) -> set[str]:  # noqa: F811 - the fixture's object
    return {it.name for it in provider.get_instance_types(NODEPOOL, nodeclass)}


def _with_encryption(value) -> dict:
    nc = copy.deepcopy(NODECLASS)
    nc["spec"]["security"] = {"encryptionAtHost": value}
    return nc


def test_encryption_at_host_keeps_only_skus_that_support_it(fake, provider):  # noqa: F811
    """Context("when encryption at host is enabled") It("should only include SKUs that support encryption at
    host"): with ``spec.security.encryptionAtHost: true`` a SKU whose EncryptionAtHostSupported is False (or
    unnamed) is not offered; those reporting True are."""
    _set_capability(fake, NO_ENCRYPTION, "EncryptionAtHostSupported", "False")
    provider.types.refresh(force=True)
    names = _names(provider, _with_encryption(True))
    assert NO_ENCRYPTION not in names
    assert set(WITH_ENCRYPTION) <= names
    # a SKU that does not name the capability at all is not taken to support it
    (sku,) = [s for s in fake.skus if s["name"] == WITH_ENCRYPTION[0]]
    sku["capabilities"] = [c for c in sku["capabilities"] if c["name"] != "EncryptionAtHostSupported"]
    provider.types.refresh(force=True)
    names = _names(provider, _with_encryption(True))
    assert WITH_ENCRYPTION[0] not in names and WITH_ENCRYPTION[1] in names


def test_without_encryption_at_host_every_sku_is_offered(fake, provider):  # noqa: F811
    """Context("when encryption at host is disabled or not set") It("should include SKUs regardless of encryption
    at host support"): no ``security`` block, or ``encryptionAtHost: false``, filters nothing."""
    _set_capability(fake, NO_ENCRYPTION, "EncryptionAtHostSupported", "False")
    provider.types.refresh(force=True)
    for nc in (NODECLASS, _with_encryption(False)):
        names = _names(provider, nc)
        assert {NO_ENCRYPTION, *WITH_ENCRYPTION} <= names
    # the same provider, asked for encryption at host afterwards, still filters (no answer is reused across)
    assert NO_ENCRYPTION not in _names(provider, _with_encryption(True))


# --- Bootstrap: the image credential provider (ProvisionMode = AKSScriptless > Bootstrap) ---------------------------

def _kubelet_flags_and_data(fake, provider, version: str) -> tuple[dict[str, str], str]:  # noqa: F811
    """Launch one VM for a cluster at ``version``: (its kubelet flags, its decoded custom data)."""
    import base64

    from karpy.cloudprovider.arm.bootstrap import parse_custom_data

    from .test_provider import claim

    provider.nodeclass["obj"] = {**NODECLASS, "status": {"kubernetesVersion": version}}
    provider.create(claim())
    (vm,) = [r["body"] for r in fake.calls("PUT", r"/virtualMachines/[^/]+$")]
    data = vm["properties"]["osProfile"]["customData"]
    boot = parse_custom_data(data)
    flags = dict(f.split("=", 1) for f in boot["KUBELET_FLAGS"].split(" "))
    labels = dict(kv.split("=", 1) for kv in boot["KUBELET_NODE_LABELS"].split(","))
    flags["arch"] = labels["kubernetes.io/arch"]  # (not a flag: the node's architecture, for the URL)
    return flags, base64.b64decode(data).decode()


def test_from_kubernetes_1_30_nodes_use_the_out_of_tree_credential_provider(fake, provider):  # noqa: F811
    """It("should include correct flags and credential provider URL when CredentialProviderURL is not empty"): the
    kubelet gets the credential provider's config and binary directory, not ``--azure-container-registry-config``,
    and the custom data carries the provider's download URL (the release for the cluster's minor, the node's
    architecture)."""
    flags, data = _kubelet_flags_and_data(fake, provider, "1.31.4")
    assert "--azure-container-registry-config" not in flags
    assert flags["--image-credential-provider-config"] == "/var/lib/kubelet/credential-provider-config.yaml"
    assert flags["--image-credential-provider-bin-dir"] == "/var/lib/kubelet/credential-provider"
    arch = flags["arch"]
    assert arch == "arm64"  # the claim's sizes are Ampere (D*pls_v6)
    url = ("https://acs-mirror.azureedge.net/cloud-provider-azure/v1.31.6/binaries/"
           f"azure-acr-credential-provider-linux-{arch}-v1.31.6.tar.gz")
    assert url in data


def test_before_kubernetes_1_30_nodes_use_the_in_tree_credential_provider(fake, provider):  # noqa: F811
    """It("should include correct flags when CredentialProviderURL is empty"): before 1.30 upstream has no
    credential provider URL; the kubelet gets ``--azure-container-registry-config`` and no credential provider
    flags."""
    flags, data = _kubelet_flags_and_data(fake, provider, "1.29.9")
    assert flags["--azure-container-registry-config"] == "/etc/kubernetes/azure.json"
    assert flags["--feature-gates"] == "DisableKubeletCloudCredentialProviders=false"
    assert "--image-credential-provider-config" not in flags and "--image-credential-provider-bin-dir" not in flags
    assert "azure-acr-credential-provider" not in data


# --- CloudProvider Create Error Cases ---------------------------------------------------------------------------

def _with_ready(status: str, message: str) -> dict:
    nc = copy.deepcopy(NODECLASS)
    nc["status"] = {"conditions": [{"type": "Ready", "status": status, "reason": "Testing", "message": message}]}
    return nc


def test_a_nodeclass_whose_readiness_is_unknown_refuses_to_launch(fake, provider):  # noqa: F811
    """It("should return error when NodeClass readiness is Unknown"): Create fails with a create error saying the
    NodeClass is in Ready=Unknown, and no VM or NIC is created; Ready=False is the not-ready error; Ready=True
    launches."""
    from karpy.cloudprovider.arm.provider import LaunchError
    from karpy.cloudprovider.provider import InsufficientCapacityError, NodeClassNotReadyError

    from .test_provider import claim

    provider.nodeclass["obj"] = _with_ready("Unknown", "images not resolved yet")
    with pytest.raises(LaunchError, match="resolving NodeClass readiness, NodeClass is in Ready=Unknown") as e:
        provider.create(claim())
    assert not isinstance(e.value, InsufficientCapacityError)
    provider.nodeclass["obj"] = _with_ready("False", "SubnetsReady=False")
    with pytest.raises(NodeClassNotReadyError, match="SubnetsReady=False"):
        provider.create(claim())
    assert fake.calls("PUT", r"/virtualMachines/[^/]+$") == [] and fake.calls("PUT", r"/networkInterfaces/") == []
    provider.nodeclass["obj"] = _with_ready("True", "")
    assert provider.create(claim())["status"]["providerID"]
