"""The custom data of an AKS node VM (``PROVISION_MODE=aksscriptless``): a bash script for the AKS node image.

The AKS node image carries its provisioning scripts (``/opt/azure/containers/provision_start.sh``); the
custom data marks the image's manifest, waits for those scripts, exports the variables they read and runs
them, as upstream's scriptless bootstrap does: the API server, the TLS bootstrap token, the cluster CA, the
Kubernetes version, azure.json's fields (tenant, subscription, node resource group, location, subnet, virtual
network, NSG, route table, the kubelet identity), the network plugin and policy, the node labels, and the
kubelet flags (taints to register with, max pods, kube-reserved, eviction, cluster DNS; from Kubernetes 1.30 the
out-of-tree ACR credential provider's flags and download URL, before it ``--azure-container-registry-config``).
"""

from __future__ import annotations

import base64
import shlex
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .settings import AzureSettings

KUBELET_BASE_FLAGS = {
    "--cloud-provider": "external",
    "--kubeconfig": "/var/lib/kubelet/kubeconfig",
    "--bootstrap-kubeconfig": "/var/lib/kubelet/bootstrap-kubeconfig",
    "--image-gc-high-threshold": "85",
    "--image-gc-low-threshold": "80",
    "--eviction-hard": "memory.available<750Mi,nodefs.available<10%,nodefs.inodesFree<5%",
    "--system-reserved": "cpu=0,memory=0",  # as upstream: nothing reserved for the system, all in kube-reserved
    "--rotate-certificates": "true",
    "--read-only-port": "0",
}


@dataclass
class NodeBootstrap:
    kubernetes_version: str
    ca_bundle_b64: str  # the cluster CA, base64 PEM
    arch: str
    labels: dict[str, str]
    taints: list[dict]
    max_pods: int
    kube_reserved: dict[str, str]  # {"cpu": "100m", "memory": "1843Mi"}
    nsg: str = ""
    route_table: str = ""
    extra_kubelet_flags: dict[str, str] = field(default_factory=dict)


# the out-of-tree ACR credential provider's release per Kubernetes minor (upstream's CredentialProviderURL): used
# from 1.30; newer minors take the latest
_CREDENTIAL_PROVIDER = {30: "1.30.12", 31: "1.31.6", 32: "1.32.5"}
_CREDENTIAL_PROVIDER_LATEST = "1.33.0"


def _minor(version: str) -> int:
    try:
        return int((version.split(".") + ["0", "0"])[1] or 0)
    except ValueError:
        return 0


def credential_provider_url(kubernetes_version: str, arch: str) -> str:
    """Where the node downloads the ACR credential provider, or "" before Kubernetes 1.30 (kubelet's in-tree
    provider, configured by ``--azure-container-registry-config``), as upstream."""
    minor = _minor(kubernetes_version)
    if minor < 30:
        return ""
    v = _CREDENTIAL_PROVIDER.get(minor, _CREDENTIAL_PROVIDER_LATEST)
    return (f"https://acs-mirror.azureedge.net/cloud-provider-azure/v{v}/binaries/"
            f"azure-acr-credential-provider-linux-{arch}-v{v}.tar.gz")


def _taint(t: dict) -> str:
    v = t.get("value")
    return f"{t['key']}={v}:{t['effect']}" if v not in (None, "") else f"{t['key']}:{t['effect']}"


def kubelet_flags(s: AzureSettings, b: NodeBootstrap) -> dict[str, str]:
    flags = dict(KUBELET_BASE_FLAGS)
    minor = int((b.kubernetes_version.split(".") + ["0", "0"])[1] or 0)
    if minor < 34:  # removed from kubelet in 1.34
        flags["--cloud-config"] = ""
    if credential_provider_url(b.kubernetes_version, b.arch):  # the out-of-tree ACR credential provider
        flags["--image-credential-provider-config"] = "/var/lib/kubelet/credential-provider-config.yaml"
        flags["--image-credential-provider-bin-dir"] = "/var/lib/kubelet/credential-provider"
    else:  # before 1.30: kubelet's in-tree provider
        flags["--feature-gates"] = "DisableKubeletCloudCredentialProviders=false"
        flags["--azure-container-registry-config"] = "/etc/kubernetes/azure.json"
    flags.update({
        "--max-pods": str(b.max_pods), "--cluster-dns": s.dns_service_ip,
        "--kube-reserved": ",".join(f"{k}={v}" for k, v in sorted(b.kube_reserved.items())),
    })
    if b.taints:
        flags["--register-with-taints"] = ",".join(_taint(t) for t in b.taints)
    flags.update(b.extra_kubelet_flags)
    return flags


def variables(s: AzureSettings, b: NodeBootstrap) -> dict[str, str]:
    """The variables the node image's provisioning scripts read."""
    sub, vnet_rg, vnet, subnet = s.subnet_parts()
    flags = kubelet_flags(s, b)
    overlay = s.network_plugin == "azure" and s.network_plugin_mode == "overlay"
    cilium_node_subnet = s.network_plugin == "azure" and not s.network_plugin_mode and s.network_dataplane == "cilium"
    return {
        "APISERVER_NAME": urlsplit(s.cluster_endpoint).hostname or "",
        "KUBE_CA_CRT": b.ca_bundle_b64,
        "TLS_BOOTSTRAP_TOKEN": s.kubelet_bootstrap_token,
        "KUBERNETES_VERSION": b.kubernetes_version,
        "KUBE_BINARY_URL": (f"https://acs-mirror.azureedge.net/kubernetes/v{b.kubernetes_version}/binaries/"
                            f"kubernetes-node-linux-{b.arch}.tar.gz"),
        "TENANT_ID": s.tenant_id,
        "SUBSCRIPTION_ID": s.subscription_id,
        "RESOURCE_GROUP": s.node_resource_group,
        "LOCATION": s.location,
        "VM_TYPE": "standard",
        "SUBNET": subnet,
        "VIRTUAL_NETWORK": vnet,
        "VIRTUAL_NETWORK_RESOURCE_GROUP": vnet_rg,
        "NETWORK_SECURITY_GROUP": b.nsg,
        "ROUTE_TABLE": b.route_table,
        "USER_ASSIGNED_IDENTITY_ID": s.kubelet_identity_client_id,
        "USE_MANAGED_IDENTITY_EXTENSION": "true",
        "LOAD_BALANCER_SKU": "Standard",
        # as upstream: Azure CNI overlay, Cilium on the node subnet and no plugin leave the CNI to the cluster
        "NETWORK_PLUGIN": "none" if overlay or cilium_node_subnet or s.network_plugin == "none" else "azure",
        "NETWORK_POLICY": s.network_policy,
        "MAX_PODS": str(b.max_pods),
        "KUBELET_NODE_LABELS": ",".join(f"{k}={v}" for k, v in sorted(b.labels.items())),
        "KUBELET_FLAGS": " ".join(f"{k}={v}" for k, v in sorted(flags.items())),
        "CREDENTIAL_PROVIDER_DOWNLOAD_URL": credential_provider_url(b.kubernetes_version, b.arch),
        "NEEDS_CGROUPV2": "true",
        "CSE_TIMEOUT": "15m",
    }


def script(s: AzureSettings, b: NodeBootstrap) -> str:
    lines = [
        "#!/bin/bash",
        "# karpy: bootstrap of an AKS node (scriptless: the node image's own provisioning scripts)",
        "echo '#EOF' >> /opt/azure/manifest.json",
        "for i in $(seq 1 1200); do grep -Fq 'EOF' /opt/azure/containers/provision.sh && break; sleep 1; done",
    ]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in variables(s, b).items()]
    lines += ["nohup /bin/bash /opt/azure/containers/provision_start.sh >> /var/log/azure/cluster-provision.log 2>&1 &", ""]
    return "\n".join(lines)


def custom_data(s: AzureSettings, b: NodeBootstrap) -> str:
    """The VM's ``osProfile.customData``: the script, base64."""
    return base64.b64encode(script(s, b).encode()).decode()


def parse_custom_data(data: str) -> dict[str, str]:
    """The variables a custom data exports (for tests and for the node bootstrap stand-in)."""
    out: dict[str, str] = {}
    for line in base64.b64decode(data).decode().splitlines():
        if line.startswith("export "):
            k, _, v = line[len("export "):].partition("=")
            parts = shlex.split(v)
            out[k] = parts[0] if parts else ""
    return out
