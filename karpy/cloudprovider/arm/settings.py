"""Settings of ``karpy controller --cloud-provider azure``, with upstream's names.

Each is a flag and an environment variable (the flag wins). Required for the VM path
(``PROVISION_MODE=aksscriptless``, the default): ``CLUSTER_NAME``, ``CLUSTER_ENDPOINT``,
``AZURE_SUBSCRIPTION_ID`` (else ``ARM_SUBSCRIPTION_ID``), ``LOCATION``, ``AZURE_NODE_RESOURCE_GROUP``,
``VNET_SUBNET_ID``, ``KUBELET_BOOTSTRAP_TOKEN`` and ``SSH_PUBLIC_KEY``; a missing one exits 2 and every
missing one is named. Optional: ``ARM_RESOURCE_GROUP`` (the cluster's resource group), ``AZURE_TENANT_ID``,
``NETWORK_PLUGIN`` (azure), ``NETWORK_PLUGIN_MODE`` (overlay), ``NETWORK_POLICY``, ``NETWORK_DATAPLANE``
(cilium), ``VNET_GUID``, ``NODE_IDENTITIES`` (the
kubelet identity's resource ID, comma separated), ``LINUX_ADMIN_USERNAME`` (azureuser), ``ADDITIONAL_TAGS``
(k=v,...), ``DNS_SERVICE_IP`` (10.0.0.10), ``KUBELET_IDENTITY_CLIENT_ID``, ``VM_MEMORY_OVERHEAD_PERCENT``
(0.075). The cloud: ``ARM_CLOUD`` (AzurePublicCloud, AzureChinaCloud, AzureUSGovernmentCloud) or
``AZURE_ENVIRONMENT_FILEPATH`` (a JSON file with ``resourceManagerEndpoint``, ``activeDirectoryEndpoint`` and
``tokenAudience``, for Azure Stack and other clouds), not both. ``PROVISION_MODE=aksmachineapi`` (machines of
an AKS agent pool of mode ``Machines``, :mod:`.machines`) also needs ``AKS_MACHINES_POOL_NAME`` and
``ARM_RESOURCE_GROUP``, as upstream.

This module does not import the Azure SDK.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Callable, Mapping

# setting -> (upstream's environment variable, help); the flag is --<setting with dashes>
OPTIONS: dict[str, tuple[str, str]] = {
    "subscription_id": ("AZURE_SUBSCRIPTION_ID", "azure: the subscription of the node resource group [AZURE_SUBSCRIPTION_ID, else ARM_SUBSCRIPTION_ID]."),
    "tenant_id": ("AZURE_TENANT_ID", "azure: the Microsoft Entra tenant [AZURE_TENANT_ID, else ARM_TENANT_ID]."),
    "location": ("LOCATION", "azure: the region of the cluster, e.g. eastus [LOCATION]."),
    "arm_resource_group": ("ARM_RESOURCE_GROUP", "azure: the cluster's resource group [ARM_RESOURCE_GROUP]."),
    "node_resource_group": ("AZURE_NODE_RESOURCE_GROUP", "azure: the node resource group, MC_... [AZURE_NODE_RESOURCE_GROUP]."),
    "vnet_subnet_id": ("VNET_SUBNET_ID", "azure: the subnet nodes join, an ARM ID [VNET_SUBNET_ID]."),
    "network_plugin": ("NETWORK_PLUGIN", "azure: azure or none [NETWORK_PLUGIN; default: azure]."),
    "network_plugin_mode": ("NETWORK_PLUGIN_MODE", "azure: overlay or empty [NETWORK_PLUGIN_MODE; default: overlay]."),
    "network_policy": ("NETWORK_POLICY", "azure: azure, cilium, calico or empty [NETWORK_POLICY]."),
    "network_dataplane": ("NETWORK_DATAPLANE", "azure: azure, cilium or none [NETWORK_DATAPLANE; default: cilium]."),
    "vnet_guid": ("VNET_GUID", "azure: the resource GUID of the cluster's virtual network, the nodes' "
                               "kubernetes.azure.com/nodenetwork-vnetguid label with Azure CNI overlay [VNET_GUID]."),
    "kubelet_bootstrap_token": ("KUBELET_BOOTSTRAP_TOKEN", "azure: the TLS bootstrap token id.secret [KUBELET_BOOTSTRAP_TOKEN]."),
    "ssh_public_key": ("SSH_PUBLIC_KEY", "azure: the nodes' SSH public key [SSH_PUBLIC_KEY]."),
    "linux_admin_username": ("LINUX_ADMIN_USERNAME", "azure: the nodes' admin user [LINUX_ADMIN_USERNAME; default: azureuser]."),
    "node_identities": ("NODE_IDENTITIES", "azure: user-assigned identities of the nodes, comma separated [NODE_IDENTITIES]."),
    "kubelet_identity_client_id": ("KUBELET_IDENTITY_CLIENT_ID", "azure: the kubelet identity's client ID [KUBELET_IDENTITY_CLIENT_ID]."),
    "provision_mode": ("PROVISION_MODE", "azure: aksscriptless (VMs karpy creates) or aksmachineapi (machines of an "
                                         "AKS agent pool) [PROVISION_MODE; default: aksscriptless]."),
    "aks_machines_pool_name": ("AKS_MACHINES_POOL_NAME", "azure: the agent pool (mode Machines) of the AKS machines, "
                                                         "required with PROVISION_MODE=aksmachineapi [AKS_MACHINES_POOL_NAME]."),
    "additional_tags": ("ADDITIONAL_TAGS", "azure: tags of every VM and NIC, k=v,... [ADDITIONAL_TAGS]."),
    "dns_service_ip": ("DNS_SERVICE_IP", "azure: the cluster DNS address kubelet uses [DNS_SERVICE_IP; default: 10.0.0.10]."),
    "arm_cloud": ("ARM_CLOUD", "azure: AzurePublicCloud, AzureChinaCloud or AzureUSGovernmentCloud [ARM_CLOUD]."),
    "azure_environment_filepath": ("AZURE_ENVIRONMENT_FILEPATH",
                                   "azure: JSON file of another cloud's endpoints [AZURE_ENVIRONMENT_FILEPATH]."),
    "retail_prices_endpoint": ("AZURE_RETAIL_PRICES_ENDPOINT",
                               "azure: the Azure Retail Prices API karpy reads VM prices from, none for karpy's static "
                               "prices [AZURE_RETAIL_PRICES_ENDPOINT; default: https://prices.azure.com/api/retail/prices "
                               "in the public cloud, none elsewhere]."),
}
ENV = {k: v[0] for k, v in OPTIONS.items()}
FALLBACK_ENV = {"subscription_id": "ARM_SUBSCRIPTION_ID", "tenant_id": "ARM_TENANT_ID"}

PROVISION_MODES = ("aksscriptless", "aksmachineapi", "aksmachineapiheaderbatch", "bootstrappingclient")
SUPPORTED_MODES = ("aksscriptless", "aksmachineapi")
MACHINE_MODES = ("aksmachineapi", "aksmachineapiheaderbatch")
_POOL = re.compile(r"^[a-z][a-z0-9]{0,11}$")  # an AKS agent pool name

# ARM endpoint, Entra authority and token audience of the named clouds (as upstream's ARM_CLOUD)
CLOUDS = {
    "AzurePublicCloud": ("https://management.azure.com/", "https://login.microsoftonline.com/",
                         "https://management.azure.com/"),
    "AzureChinaCloud": ("https://management.chinacloudapi.cn/", "https://login.chinacloudapi.cn/",
                        "https://management.chinacloudapi.cn/"),
    "AzureUSGovernmentCloud": ("https://management.usgovcloudapi.net/", "https://login.microsoftonline.us/",
                               "https://management.usgovcloudapi.net/"),
}

_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_SUBNET = re.compile(r"(?i)^/subscriptions/([^/]+)/resourceGroups/([^/]+)/providers/Microsoft\.Network/"
                     r"virtualNetworks/([^/]+)/subnets/([^/]+)$")
_IDENTITY = re.compile(r"(?i)^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/"
                       r"Microsoft\.ManagedIdentity/userAssignedIdentities/[^/]+$")
_TOKEN = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")
_ADMIN = re.compile(r"^[A-Za-z][-A-Za-z0-9_]*$")


@dataclass
class Cloud:
    name: str
    resource_manager: str  # https://management.azure.com/
    authority: str  # https://login.microsoftonline.com/
    audience: str  # the token scope is <audience>/.default
    from_file: bool = False  # read from AZURE_ENVIRONMENT_FILEPATH

    @property
    def scope(self) -> str:
        return self.audience.rstrip("/") + "/.default"

    @property
    def billing_extension(self) -> bool:
        """Upstream installs the AKS billing extension in the public, China and US Government clouds only."""
        return self.name in CLOUDS


@dataclass
class AzureSettings:
    cluster_name: str
    cluster_endpoint: str
    subscription_id: str
    location: str
    node_resource_group: str
    vnet_subnet_id: str
    kubelet_bootstrap_token: str
    ssh_public_key: str
    cloud: Cloud
    tenant_id: str = ""
    arm_resource_group: str = ""
    network_plugin: str = "azure"
    network_plugin_mode: str = "overlay"
    network_policy: str = ""
    network_dataplane: str = "cilium"
    linux_admin_username: str = "azureuser"
    node_identities: list[str] = field(default_factory=list)
    kubelet_identity_client_id: str = ""
    provision_mode: str = "aksscriptless"
    aks_machines_pool_name: str = ""  # the Machines agent pool, with PROVISION_MODE=aksmachineapi
    additional_tags: dict[str, str] = field(default_factory=dict)
    dns_service_ip: str = "10.0.0.10"
    vnet_guid: str = ""  # upstream's VNET_GUID (overlay with a cluster's own virtual network): the node label's value
    vm_memory_overhead_percent: float = 0.075
    retail_prices_endpoint: str = ""  # "": karpy's static prices only

    def subnet_parts(self) -> tuple[str, str, str, str]:
        """(subscription, resource group, virtual network, subnet) of VNET_SUBNET_ID."""
        m = _SUBNET.match(self.vnet_subnet_id)
        assert m is not None
        return m.group(1), m.group(2), m.group(3), m.group(4)


REQUIRED = ("cluster_name", "cluster_endpoint", "subscription_id", "location", "node_resource_group",
            "vnet_subnet_id", "kubelet_bootstrap_token", "ssh_public_key")
_NAMES = {"cluster_name": "CLUSTER_NAME (--cluster-name)", "cluster_endpoint": "CLUSTER_ENDPOINT (--cluster-endpoint)",
          "subscription_id": "AZURE_SUBSCRIPTION_ID (or ARM_SUBSCRIPTION_ID)"}


def _display(key: str) -> str:
    return _NAMES.get(key) or f"{ENV[key]} (--{key.replace('_', '-')})"


def load_environment_file(path: str, error: Callable[[str], Exception]) -> Cloud:
    """The endpoints of AZURE_ENVIRONMENT_FILEPATH, as upstream reads that file."""
    name = "AZURE_ENVIRONMENT_FILEPATH"
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise error(f'{name}: cannot read "{path}": {e.strerror}') from None
    except ValueError as e:
        raise error(f'{name}: "{path}" is not JSON: {e}') from None
    if not isinstance(doc, dict):
        raise error(f'{name}: "{path}" must hold a JSON object')
    missing = [k for k in ("resourceManagerEndpoint", "activeDirectoryEndpoint", "tokenAudience")
               if not isinstance(doc.get(k), str) or not doc.get(k)]
    if missing:
        raise error(f'{name}: "{path}" lacks {", ".join(missing)}')
    for k in ("resourceManagerEndpoint", "activeDirectoryEndpoint"):
        if not doc[k].startswith("https://"):
            raise error(f'{name}: "{path}": {k} "{doc[k]}" must be an https:// URL')
    rm = doc["resourceManagerEndpoint"].rstrip("/") + "/"
    return Cloud(str(doc.get("name") or "AzureStackCloud"), rm, doc["activeDirectoryEndpoint"].rstrip("/") + "/",
                 doc["tokenAudience"], from_file=True)


def resolve_azure(cluster_name: str, picked: Mapping[str, tuple[str | None, str]], environ: Mapping[str, str],
                  error: Callable[[str], Exception] = ValueError,
                  vm_memory_overhead: tuple[str | None, str] = (None, "")) -> AzureSettings:
    """``picked``: setting -> (value or None, the flag or variable it came from); ``environ`` for the
    ARM_* fallbacks of the subscription and tenant."""
    values: dict[str, str] = {}
    for key in (*OPTIONS, "cluster_endpoint"):
        v, _ = picked.get(key, (None, ""))
        if v is None and key in FALLBACK_ENV:
            v = environ.get(FALLBACK_ENV[key]) or None
        if v is not None:
            values[key] = v.strip()
    values["cluster_name"] = cluster_name
    mode = values.get("provision_mode") or "aksscriptless"
    if mode not in PROVISION_MODES:
        raise error(f'PROVISION_MODE (--provision-mode): invalid value "{mode}": must be one of {", ".join(PROVISION_MODES)}')
    if mode not in SUPPORTED_MODES:
        raise error(f'PROVISION_MODE (--provision-mode): "{mode}" is not supported by karpy yet: use aksscriptless '
                    f"(VMs and NICs karpy creates itself) or aksmachineapi (one machine PUT per NodeClaim)")
    missing = [_display(k) for k in REQUIRED if not values.get(k)]
    if missing:
        raise error("missing required settings for --cloud-provider azure: " + ", ".join(missing))

    def bad(key: str, why: str) -> Exception:
        return error(f'{_display(key)}: invalid value "{values[key]}": {why}')

    if not values["cluster_endpoint"].startswith(("https://", "http://")) or "//" == values["cluster_endpoint"][-2:]:
        raise bad("cluster_endpoint", "must be the API server's URL (https://...)")
    if not _UUID.match(values["subscription_id"]):
        raise bad("subscription_id", "must be a subscription ID (a UUID)")
    if values.get("tenant_id") and not _UUID.match(values["tenant_id"]):
        raise bad("tenant_id", "must be a tenant ID (a UUID)")
    if not re.match(r"^[a-z0-9]+$", values["location"]):
        raise bad("location", "must be an Azure region name such as eastus")
    m = _SUBNET.match(values["vnet_subnet_id"])
    if m is None:
        raise bad("vnet_subnet_id", "must be a subnet ID, /subscriptions/<id>/resourceGroups/<rg>/providers/"
                                    "Microsoft.Network/virtualNetworks/<vnet>/subnets/<subnet>")
    if not _TOKEN.match(values["kubelet_bootstrap_token"]):
        raise error("KUBELET_BOOTSTRAP_TOKEN (--kubelet-bootstrap-token): invalid value: must be a bootstrap token "
                    "<6 characters [a-z0-9]>.<16 characters [a-z0-9]>")  # the value is a secret: not echoed
    if not values["ssh_public_key"].startswith(("ssh-", "ecdsa-", "sk-")):
        raise error("SSH_PUBLIC_KEY (--ssh-public-key): invalid value: must be an OpenSSH public key (ssh-rsa AAAA...)")
    s = AzureSettings(cluster_name, values["cluster_endpoint"].rstrip("/"), values["subscription_id"], values["location"],
                      values["node_resource_group"], values["vnet_subnet_id"], values["kubelet_bootstrap_token"],
                      values["ssh_public_key"], Cloud("AzurePublicCloud", *CLOUDS["AzurePublicCloud"]))
    s.tenant_id = values.get("tenant_id", "")
    s.arm_resource_group = values.get("arm_resource_group", "")
    s.provision_mode = mode
    if mode in MACHINE_MODES:  # as upstream: the machines' agent pool is required; the cluster's group names it
        missing = [_display(k) for k in ("aks_machines_pool_name", "arm_resource_group") if not values.get(k)]
        if missing:
            raise error(f"PROVISION_MODE={mode} needs " + " and ".join(missing))
        if not _POOL.match(values["aks_machines_pool_name"]):
            raise bad("aks_machines_pool_name", "must be an AKS agent pool name: a lowercase letter, then at most 11 "
                                                "lowercase letters and digits")
    s.aks_machines_pool_name = values.get("aks_machines_pool_name", "")
    plugin = values.get("network_plugin") or "azure"
    if plugin not in ("azure", "none"):
        raise bad("network_plugin", "must be azure or none")
    s.network_plugin = plugin
    if "network_plugin_mode" in values:
        if values["network_plugin_mode"] not in ("overlay", ""):
            raise bad("network_plugin_mode", "must be overlay or empty")
        s.network_plugin_mode = values["network_plugin_mode"]
    policy = values.get("network_policy", "")
    if policy not in ("", "azure", "cilium", "calico"):
        raise bad("network_policy", "must be azure, cilium, calico or empty")
    s.network_policy = policy
    dataplane = values.get("network_dataplane") or "cilium"
    if dataplane not in ("azure", "cilium", "none"):
        raise bad("network_dataplane", "must be azure, cilium or none")
    s.network_dataplane = dataplane
    guid = values.get("vnet_guid", "")
    if guid and not _UUID.match(guid):
        raise bad("vnet_guid", "must be the virtual network's resource GUID (a UUID)")
    s.vnet_guid = guid
    user = values.get("linux_admin_username") or "azureuser"
    if len(user) > 32 or not _ADMIN.match(user):
        raise error(f'LINUX_ADMIN_USERNAME (--linux-admin-username): invalid value "{user}": at most 32 characters, '
                    "a letter then letters, digits, - and _")
    s.linux_admin_username = user
    ids = [i.strip() for i in (values.get("node_identities") or "").split(",") if i.strip()]
    for i in ids:
        if not _IDENTITY.match(i):
            raise error(f'NODE_IDENTITIES (--node-identities): invalid value "{i}": must be a user-assigned identity\'s '
                        "resource ID (.../providers/Microsoft.ManagedIdentity/userAssignedIdentities/<name>)")
    s.node_identities = ids
    cid = values.get("kubelet_identity_client_id", "")
    if cid and not _UUID.match(cid):
        raise bad("kubelet_identity_client_id", "must be a client ID (a UUID)")
    s.kubelet_identity_client_id = cid
    tags: dict[str, str] = {}
    for part in (values.get("additional_tags") or "").split(","):
        if not part.strip():
            continue
        k, sep, v = part.partition("=")
        if not sep or not k.strip():
            raise error(f'ADDITIONAL_TAGS (--additional-tags): invalid tag "{part}": expected key=value')
        tags[k.strip()] = v.strip()
    s.additional_tags = tags
    if values.get("dns_service_ip"):
        import ipaddress

        try:
            ipaddress.ip_address(values["dns_service_ip"])
        except ValueError:
            raise bad("dns_service_ip", "must be an IP address") from None
        s.dns_service_ip = values["dns_service_ip"]
    cloud_name, env_file = values.get("arm_cloud"), values.get("azure_environment_filepath")
    if cloud_name and env_file:
        raise error("ARM_CLOUD and AZURE_ENVIRONMENT_FILEPATH are both set: set one")
    if env_file:
        s.cloud = load_environment_file(env_file, error)
    elif cloud_name:
        if cloud_name not in CLOUDS:
            raise bad("arm_cloud", f"must be one of {', '.join(CLOUDS)}")
        s.cloud = Cloud(cloud_name, *CLOUDS[cloud_name])
    prices = values.get("retail_prices_endpoint")
    if prices is None:  # upstream reads prices in the public cloud only
        prices = "https://prices.azure.com/api/retail/prices" if s.cloud.name == "AzurePublicCloud" else "none"
    if prices.lower() != "none" and not re.match(r"^https?://[^/\s]+", prices):
        raise bad("retail_prices_endpoint", "must be a URL (https://prices.azure.com/api/retail/prices) or none")
    s.retail_prices_endpoint = "" if prices.lower() == "none" else prices
    v, name = vm_memory_overhead
    if v is not None:
        try:
            f = float(v)
        except ValueError:
            f = -1.0
        if not 0 <= f < 1:
            raise error(f'{name}: invalid value "{v}": must be a fraction between 0 and 1 (0.075 is 7.5 %)')
        s.vm_memory_overhead_percent = f
    return s
