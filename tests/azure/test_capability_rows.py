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


# --- Basic: the SKU's values become requirements and capacity ------------------------------------------------------

NORMAL, GPU = "Standard_D2_v2", "Standard_NC24ads_A100_v4"


def _basic_types(fake, provider) -> dict:  # noqa: F811
    """upstream's fake SKUs for the two sizes (D2_v2: 2 vCPUs, 7 GB, HyperV V1; NC24ads_A100_v4: 24 vCPUs,
    220 GB, V2, one GPU), as the SKU API answers them, read by the provider."""
    for size, caps in ((NORMAL, {"vCPUs": "2", "MemoryGB": "7", "HyperVGenerations": "V1"}),
                       (GPU, {"vCPUs": "24", "MemoryGB": "220", "HyperVGenerations": "V2", "GPUs": "1"})):
        for k, v in caps.items():
            _set_capability(fake, size, k, v)
    provider.types.refresh(force=True)
    return {it.name: it for it in provider.get_instance_types(NODEPOOL, NODECLASS)}


def test_sku_values_become_requirements_and_capacity(fake, provider):  # noqa: F811
    """It("should propagate all values to requirements from skewer"), all but the memory capacity (see the next
    test): sku-name, sku-hyperv-generation, sku-version, sku-cpu and sku-memory (MiB) from the SKU; CPU capacity
    its vCPUs; one nvidia.com/gpu for the A100 size."""
    types = _basic_types(fake, provider)
    normal, gpu = types[NORMAL], types[GPU]
    g = "karpenter.azure.com/"
    assert (normal.labels[g + "sku-name"], gpu.labels[g + "sku-name"]) == (NORMAL, GPU)
    assert (normal.labels[g + "sku-hyperv-generation"], gpu.labels[g + "sku-hyperv-generation"]) == ("1", "2")
    assert (normal.labels[g + "sku-version"], gpu.labels[g + "sku-version"]) == ("2", "4")
    assert (normal.labels[g + "sku-cpu"], gpu.labels[g + "sku-cpu"]) == ("2", "24")
    assert (normal.capacity["cpu"], gpu.capacity["cpu"]) == (2000, 24000)  # millicores
    assert (normal.labels[g + "sku-memory"], gpu.labels[g + "sku-memory"]) == (str(7 * 1024), str(220 * 1024))
    assert gpu.capacity["nvidia.com/gpu"] == 1
    assert normal.capacity.get("nvidia.com/gpu", 0) == 0


def test_with_no_vm_memory_overhead_memory_capacity_is_the_skus_memory(fake, env, monkeypatch):
    """The same It's memory part: upstream's context sets the VM memory overhead to 0, so the capacity is the SKU's
    7 GiB (220 GiB); a size without GPUs lists nvidia.com/gpu 0."""
    from .conftest import make_provider

    monkeypatch.setenv("VM_MEMORY_OVERHEAD_PERCENT", "0")
    p, _ = make_provider(lambda kind, name: NODECLASS)
    try:
        types = _basic_types(fake, p)
        assert types[NORMAL].capacity["memory"] == 7 * 2**30
        assert types[GPU].capacity["memory"] == 220 * 2**30
        assert types[NORMAL].capacity["nvidia.com/gpu"] == 0
    finally:
        p.close()


# --- Ephemeral Disk: FindMaxEphemeralSizeGBAndPlacement(nil) ----------------------------------------------------

def test_a_sku_without_capabilities_has_no_ephemeral_os_disk():
    """Entry("Nil SKU"): nothing to read gives size 0 and no placement. karpy's nearest input is a SKU the API lists
    without any capabilities."""
    from karpy.cloudprovider.arm.skus import sku_info

    info = sku_info({"name": "Standard_X2_v9", "resourceType": "virtualMachines", "capabilities": None}, "eastus")
    assert (info.ephemeral_max_gb, info.ephemeral_placement) == (0, "")
