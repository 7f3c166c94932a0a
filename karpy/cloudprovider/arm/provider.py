"""karpy's Azure CloudProvider on the VM path (``PROVISION_MODE=aksscriptless``): NICs and VMs it creates itself.

* **Create**: the cheapest available offering the NodeClaim allows (one per attempt, as upstream), then
  ``PUT networkInterfaces/aks-<nodeclaim>`` (in VNET_SUBNET_ID, or the AKSNodeClass's ``vnetSubnetID``; in the
  ``kubernetes`` load balancers' IPv4 backend pools; with the managed NSG ``aks-agentpool-<id>-nsg`` when the
  subnet is not AKS-managed), ``GET virtualMachines/aks-<nodeclaim>`` (a VM left by an earlier attempt or a
  restart is reused), and ``PUT virtualMachines/aks-<nodeclaim>``: the size, the zone, spot priority with
  eviction policy Delete and no price cap, an ephemeral OS disk where the size's cache, resource or NVMe disk
  holds ``osDiskSizeGB``, the image from the community gallery, the node identities, the SSH key, upstream's
  tags, and the bootstrap custom data. ``create()`` returns once Azure accepted the VM; the operation is polled
  in the background (every 3 s), then the billing extension is added. A capacity error marks offerings
  unavailable (:mod:`.offerings`), deletes the VM and NIC and, when it came late, the NodeClaim.
* **Get / List / Delete**: GET of the VM named in the provider ID; Resource Graph for every VM of this cluster
  (tags ``karpenter.sh_nodepool`` and ``karpenter.azure.com_cluster``); delete of the VM (force) then its NIC,
  one delete in flight per VM.
* **Drift** (:meth:`AzureVMProvider.is_drifted`): the NodeClass hash, the Kubernetes version, the kubelet
  identity and the image, as upstream; the AKSNodeClass's status comes from :mod:`.nodeclass`.
* **Garbage collection**: VMs of this cluster no NodeClaim claims, older than 5 minutes, and NICs named
  ``aks-*`` with neither a VM nor a NodeClaim (:class:`GarbageCollector`).
"""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from ...scheduling.requirements import Requirements
from .. import azure as static
from ..provider import CloudProviderError, InsufficientCapacityError, NodeClaimNotFoundError, NodeClassNotReadyError
from ..types import (
    CAPACITY_ON_DEMAND,
    CAPACITY_SPOT,
    LABEL_ARCH,
    LABEL_CAPACITY_TYPE,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_REGION,
    LABEL_ZONE,
    InstanceType,
    Offering,
)
from .bootstrap import NodeBootstrap, custom_data
from .clients import error_code, error_message, is_not_found
from .offerings import Unavailable, classify
from .settings import AzureSettings
from .skus import InstanceTypes, cluster_label

TAG_CLUSTER = "karpenter.azure.com_cluster"
TAG_NODEPOOL = "karpenter.sh_nodepool"
TAG_BILLING = "compute.aks.billing"
_SKU_LABEL_PREFIX = "karpenter.azure.com/sku-"  # a size without one of these labels lacks the feature
NODE_SUBNET_MAX_PODS = 30  # upstream's default max pods for Azure CNI without overlay
NODECLASS_HASH_ANNOTATION = "karpenter.azure.com/aksnodeclass-hash"
NODECLASS_HASH_VERSION_ANNOTATION = "karpenter.azure.com/aksnodeclass-hash-version"
NODECLASS_HASH_VERSION = "karpy-v1"  # karpy's hash of the AKSNodeClass, not upstream's v3
PRICE_ANNOTATION = "karpy.dev/price-per-hour"
POLL_INTERVAL = 3.0
GC_GRACE = 300.0  # a VM younger than this is never garbage collected (Resource Graph lags)
IMAGE_TTL = 300.0
CIG = {"ubuntu": "AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2",
       "azurelinux": "AKSAzureLinux-f7c7cda5-1c9a-4bdc-a222-9614c968580b"}
BILLING_EXTENSION = "computeAksLinuxBilling"
_MANAGED_NSG = re.compile(r"(?i)^aks-agentpool-(\d{8})-nsg$")


class LaunchError(CloudProviderError):
    """Azure refused the VM for a reason other than capacity (upstream's CreateInstanceFailed and others)."""

    def __init__(self, reason: str, message: str):
        super().__init__(f"{reason}: {message}")
        self.reason = reason


def network_labels(s: AzureSettings, subnet_id: str, k8s_minor: int) -> dict[str, str]:
    """The kubernetes.azure.com network labels of a node, as upstream writes them: with Azure CNI overlay the
    subnet's name, the virtual network's GUID (VNET_GUID), azure-cni-overlay, podnetwork-type overlay and
    network-stateless-cni (true from Kubernetes 1.34); with the Cilium dataplane ebpf-dataplane=cilium (the
    Cilium agent's DaemonSet selects nodes by it)."""
    out: dict[str, str] = {}
    if s.network_plugin == "azure" and s.network_plugin_mode == "overlay":
        out.update({"kubernetes.azure.com/network-subnet": subnet_id.rstrip("/").rsplit("/", 1)[-1],
                    "kubernetes.azure.com/nodenetwork-vnetguid": s.vnet_guid,
                    "kubernetes.azure.com/azure-cni-overlay": "true",
                    "kubernetes.azure.com/podnetwork-type": "overlay",
                    "kubernetes.azure.com/network-stateless-cni": "true" if k8s_minor >= 34 else "false"})
    if s.network_dataplane == "cilium":
        out["kubernetes.azure.com/ebpf-dataplane"] = "cilium"
    return out


def _scopes_allowed(requirements: Any) -> set[str] | None:
    """The placement scopes a NodePool's requirements allow, None when they do not name the label."""
    reqs = Requirements.from_node_selector(requirements)
    if static.LABEL_PLACEMENT_SCOPE not in reqs.keys():
        return None
    r = reqs.get(static.LABEL_PLACEMENT_SCOPE)
    return {s for s in ("zonal", "regional") if r.has(s)}


def _in_scopes(it: InstanceType, scopes: set[str]) -> InstanceType | None:
    """An instance type with only its offerings in ``scopes`` (None when none is), labelled with their placement
    scope: a size with zones is offered zonally and regionally, and a NodePool asking for one scope gets those
    offerings, as upstream's offering requirements give them."""
    from dataclasses import replace

    offerings = [o for o in it.offerings if static.placement_scope(o.zone) in scopes]
    if not offerings:
        return None
    have = {static.placement_scope(o.zone) for o in offerings}
    label = "zonal" if "zonal" in have else "regional"
    return replace(it, offerings=offerings, labels={**it.labels, static.LABEL_PLACEMENT_SCOPE: label})


def vm_name(claim: str) -> str:
    return f"aks-{claim}"


def image_definitions(family: str, k8s_minor: int) -> tuple[str, dict[tuple[str, str], str]]:
    """(gallery, {(arch, hyper-v generation): image definition}) of an AKSNodeClass imageFamily."""
    if family == "AzureLinux":
        v = "V3" if k8s_minor >= 32 else "V2"
        return CIG["azurelinux"], {("amd64", "V2"): f"{v}gen2", ("amd64", "V1"): v, ("arm64", "V2"): f"{v}gen2arm64"}
    u = "2404" if family == "Ubuntu2404" or (family == "Ubuntu" and k8s_minor >= 34) else "2204"
    return CIG["ubuntu"], {("amd64", "V2"): f"{u}gen2containerd", ("amd64", "V1"): f"{u}containerd",
                           ("arm64", "V2"): f"{u}gen2arm64containerd"}


def arm_zone(zone: str) -> list[str]:
    """ARM's zones of a karpy zone: eastus-2 -> ["2"]; the regional zone "0" -> []."""
    return [] if zone == static.REGIONAL_ZONE else [zone.rsplit("-", 1)[-1]]


class AzureVMProvider:
    name = "azure"

    def __init__(self, clients: Any, settings: AzureSettings, types: InstanceTypes,
                 nodeclass_lookup: Callable[[str, str], dict | None], cluster: Callable[[], dict],
                 delete_nodeclaim: Callable[[str], None] = lambda name: None, log: Any = None, recorder: Any = None,
                 now: Callable[[], float] = time.time, poll_interval: float = POLL_INTERVAL, quota: Any = None):
        from .quota import Quota, list_usages_via

        self.c = clients
        self.s = settings
        self.types = types
        types.cluster = cluster_label(settings.node_resource_group)  # kubernetes.azure.com/cluster of every size
        # as upstream: Azure CNI on the node subnet (no overlay) gives each node 30 pods by default, else 250
        types.default_max_pods = (NODE_SUBNET_MAX_PODS if settings.network_plugin == "azure"
                                  and settings.network_plugin_mode != "overlay" else static.DEFAULT_MAX_PODS)
        types.vm_memory_overhead = settings.vm_memory_overhead_percent
        self.lookup = nodeclass_lookup
        self.cluster = cluster  # {"ca": base64 PEM, "version": "1.33.2"}
        self.delete_nodeclaim = delete_nodeclaim
        self.log = log
        self.recorder = recorder
        self.now = now
        self.poll_interval = poll_interval
        self.unavailable = Unavailable(now)
        # the families' vCPU quota (refreshed by the controller's QuotaRefresher; unknown: every size available)
        self.quota = quota if quota is not None else Quota(list_usages_via(clients.compute, settings.location), now, log)
        self.lock = threading.RLock()
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="azure-lro")
        self.deleting: set[str] = set()
        self.pending: dict[str, Any] = {}  # VM name -> its create operation still polled
        self._images: dict[tuple[str, str], tuple[float, str]] = {}  # (gallery, definition) -> (fetched, version id)
        self._network: dict[str, Any] = {}
        self._interruptions: list[dict] = []
        self._subscribers: list[Callable[[], None]] = []

    # --- logging ----------------------------------------------------------------------------------
    def _info(self, msg: str, **kv: Any) -> None:
        if self.log is not None:
            self.log.info(msg, controller="cloudprovider", **kv)

    def _error(self, msg: str, **kv: Any) -> None:
        if self.log is not None:
            self.log.error(msg, controller="cloudprovider", **kv)

    # --- catalog ----------------------------------------------------------------------------------
    def serves(self, ref: dict | None) -> bool:
        return ((ref or {}).get("kind") or "AKSNodeClass") == "AKSNodeClass"

    def well_known_labels(self, nodepool: dict) -> frozenset[str]:
        return static.AzureProvider.WELL_KNOWN_LABELS

    def registration_delay(self, ref: dict | None, nodeclass: dict | None) -> float:
        return static.AzureProvider.DEFAULT_REGISTRATION_DELAY

    def repair_policies(self) -> tuple:
        return static.AzureProvider.REPAIR_POLICIES

    def ice_key(self) -> tuple:
        return (self.unavailable.key(), self.types.version, self.quota.seq)

    def _is_unavailable(self, it: InstanceType, o: Offering) -> bool:
        info = self.types.info(it.name)
        if o.capacity_type == CAPACITY_ON_DEMAND and info is not None and \
                not self.quota.has_quota_for(info.family, info.vcpus):
            return True  # the family's vCPU quota is used up
        return self.unavailable.is_unavailable(o.capacity_type, it.name, o.zone, info.family if info else "",
                                               info.vcpus if info else 0)

    def get_instance_types(self, nodepool: dict, nodeclass: dict | None) -> list[InstanceType]:
        from dataclasses import replace

        self.types.refresh()
        scopes = _scopes_allowed(((((nodepool or {}).get("spec") or {}).get("template") or {}).get("spec") or {})
                                 .get("requirements") or ())
        out = []
        for it in self.types.list(nodeclass):
            if scopes is not None:
                it = _in_scopes(it, scopes)
                if it is None:
                    continue
            if any(self._is_unavailable(it, o) for o in it.offerings):
                it = replace(it, offerings=[replace(o, available=o.available and not self._is_unavailable(it, o))
                                            for o in it.offerings])
            out.append(it)
        return out

    def mark_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> None:
        self.unavailable.mark(capacity_type, instance_type, zone, 180.0)

    # --- images -----------------------------------------------------------------------------------
    def kubernetes_version(self, nodeclass: dict | None = None) -> str:
        """The AKSNodeClass's ``status.kubernetesVersion`` (as upstream), else the API server's."""
        v = ((nodeclass or {}).get("status") or {}).get("kubernetesVersion") or self.cluster().get("version")
        return str(v or "1.33.0").lstrip("v")

    def _k8s_minor(self, nodeclass: dict | None = None) -> int:
        v = self.kubernetes_version(nodeclass)
        try:
            return int(v.lstrip("v").split(".")[1])
        except (IndexError, ValueError):
            return 33

    def image_id(self, nodeclass: dict | None, it: InstanceType) -> str:
        """The image for this size's architecture and Hyper-V generation: the first of the AKSNodeClass's
        ``status.images`` it meets (as upstream), else the newest community gallery version."""
        family = ((nodeclass or {}).get("spec") or {}).get("imageFamily") or "Ubuntu"
        info = self.types.info(it.name)
        gens = info.hyperv if info else ("V2",)
        arch = it.labels.get(LABEL_ARCH, "amd64")
        for img in ((nodeclass or {}).get("status") or {}).get("images") or ():
            want = {r.get("key"): set(r.get("values") or ()) for r in img.get("requirements") or ()}
            if arch in want.get(LABEL_ARCH, {arch}) and \
                    any(g[1:] in want.get("karpenter.azure.com/sku-hyperv-generation", {g[1:]}) for g in gens):
                return img["id"]
        gallery, defs = image_definitions(family, self._k8s_minor(nodeclass))
        definition = defs.get((arch, "V2")) if "V2" in gens else defs.get((arch, "V1"))
        if definition is None:
            raise LaunchError("ImageNotFound", f"no {family} image for {it.name} ({arch}, {','.join(gens)})")
        return self._latest_image(gallery, definition)

    def _latest_image(self, gallery: str, definition: str, fresh: bool = False) -> str:
        hit = self._images.get((gallery, definition))
        if hit is not None and not fresh and self.now() - hit[0] < IMAGE_TTL:
            return hit[1]
        versions = list(self.c.compute.community_gallery_image_versions.list(self.s.location, gallery, definition))
        if not versions:
            raise LaunchError("ImageNotFound", f"no version of {definition} in community gallery {gallery}")
        newest = max(versions, key=lambda v: (str(getattr(v.properties, "published_date", None) or ""), v.name))
        ident = f"/CommunityGalleries/{gallery}/images/{definition}/versions/{newest.name}"
        self._images[(gallery, definition)] = (self.now(), ident)
        return ident

    # --- network ----------------------------------------------------------------------------------
    def _network_facts(self) -> dict:
        """The managed NSG (once) and the load balancers' IPv4 backend pools (cached 2 hours)."""
        with self.lock:
            facts = self._network
            if "nsg" not in facts:
                nsgs = [n for n in self.c.network.network_security_groups.list(self.s.node_resource_group)
                        if _MANAGED_NSG.match(n.name or "")]
                if len(nsgs) != 1:
                    raise LaunchError("NetworkSecurityGroupNotFound",
                                      f"expected one aks-agentpool-<id>-nsg in {self.s.node_resource_group}, "
                                      f"found {len(nsgs)}")
                facts["nsg"] = nsgs[0].id
                facts["nsg_name"] = nsgs[0].name
                facts["cluster_id"] = _MANAGED_NSG.match(nsgs[0].name).group(1)
            if self.now() - facts.get("lbs_at", -1e18) > 7200:
                pools = []
                for lb in self.c.network.load_balancers.list(self.s.node_resource_group):
                    if lb.name not in ("kubernetes", "kubernetes-internal"):
                        continue
                    for p in lb.backend_address_pools or ():
                        if p.name in ("aksOutboundBackendPool-ipv6", "kubernetes-ipv6"):
                            continue
                        pools.append(p.id)
                facts["pools"] = pools
                facts["lbs_at"] = self.now()
            return facts

    def _aks_managed_subnet(self, subnet_id: str) -> bool:
        parts = subnet_id.split("/")
        return (len(parts) >= 11 and parts[4].lower() == self.s.node_resource_group.lower()
                and re.match(r"^aks-vnet-\d{8}$", parts[8]) is not None and parts[10] == "aks-subnet")

    # --- tags -------------------------------------------------------------------------------------
    def tags(self, nodeclaim: dict, nodeclass: dict | None) -> dict[str, str]:
        out = {k.replace("/", "_"): str(v) for k, v in self.s.additional_tags.items()}
        out.update({str(k).replace("/", "_"): str(v) for k, v in (((nodeclass or {}).get("spec") or {}).get("tags") or {}).items()})
        out.update({TAG_CLUSTER: self.s.cluster_name, TAG_BILLING: "linux",
                    TAG_NODEPOOL: ((nodeclaim.get("metadata") or {}).get("labels") or {}).get(LABEL_NODEPOOL, "")})
        return out

    # --- launch -----------------------------------------------------------------------------------
    def launch_inputs(self, nodeclaim: dict) -> tuple[dict, Requirements, list[InstanceType]]:
        """A NodeClaim's AKSNodeClass, requirements and the instance types it allows (both provision modes)."""
        spec = nodeclaim.get("spec") or {}
        ref = spec.get("nodeClassRef") or {}
        nc = self.lookup("AKSNodeClass", ref.get("name", ""))
        if nc is None:
            raise InsufficientCapacityError(f'resolving node class from nodeclaim, AKSNodeClass "{ref.get("name", "")}" not found')
        # as upstream's Create: an AKSNodeClass reporting Ready=False is not ready, Ready=Unknown a create error
        ready = next((c for c in (nc.get("status") or {}).get("conditions") or () if c.get("type") == "Ready"), None)
        if ready is not None and ready.get("status") == "False":
            raise NodeClassNotReadyError(f'AKSNodeClass "{ref.get("name", "")}" is not ready: {ready.get("message") or ""}')
        if ready is not None and ready.get("status") == "Unknown":
            raise LaunchError("NodeClassReadinessUnknown", "resolving NodeClass readiness, NodeClass is in Ready=Unknown, "
                              + (ready.get("message") or ""))
        reqs = Requirements.from_node_selector(spec.get("requirements") or ())
        # as upstream's launch: every requirement on a label the size carries must allow the size's value
        # (instance type, architecture, SKU family, ephemeral OS disk size, ...); zone, capacity type and placement
        # scope are offerings'
        keys = [k for k in reqs.keys() if k not in (LABEL_ZONE, LABEL_CAPACITY_TYPE, static.LABEL_PLACEMENT_SCOPE)]
        try:
            offered = self.get_instance_types({}, nc)
        except CloudProviderError:
            raise
        except Exception as e:  # noqa: BLE001 - the SKU list could not be read: upstream's InstanceTypeResolutionFailed
            raise LaunchError("InstanceTypeResolutionFailed", f"resolving instance types, {error_message(e)}") from None
        return nc, reqs, [it for it in offered if reqs.get(LABEL_INSTANCE_TYPE).has(it.name)
                          and all(reqs.get(k).has(it.labels[k]) if k in it.labels else
                                  bool(it.offering_label_values(k)) or  # the offerings' label: launch checks it
                                  not k.startswith(_SKU_LABEL_PREFIX) or reqs.get(k).allows_absent() for k in keys)]

    def cheapest_launch(self, reqs: Requirements, types: list[InstanceType]) -> tuple[InstanceType, Offering]:
        """The offering to launch: the first of the launch candidates not marked unavailable."""
        from ...provisioning.launch import launch_candidates

        scope = reqs.get(static.LABEL_PLACEMENT_SCOPE)
        cands = launch_candidates(reqs, types, lambda it, o: self._is_unavailable(it, o)
                                  or not scope.has(static.placement_scope(o.zone)))
        if not cands:
            raise InsufficientCapacityError("all requested instance types were unavailable during launch")
        # as upstream's offering rank: at the same price, a size's zonal offerings before its regional one
        cands.sort(key=lambda c: (c.offering.price, c.instance_type.name, c.offering.zone == static.REGIONAL_ZONE))
        return cands[0].instance_type, cands[0].offering

    def create(self, nodeclaim: dict) -> dict:
        nc, reqs, types = self.launch_inputs(nodeclaim)
        claim = nodeclaim["metadata"]["name"]
        name = vm_name(claim)
        existing = self._get_vm(name)
        if existing is not None:  # a restart, or a retry after the PUT landed: reuse the VM
            self._info("found existing instance, reusing it", NodeClaim={"name": claim}, vm=name)
            return self._vm_claim(existing, nodeclaim, types, nc)
        it, o = self.cheapest_launch(reqs, types)
        labels = self._labels(nodeclaim, reqs, it, o)
        image = self.image_id(nc, it)
        try:
            nic_id = self._create_nic(name, nc, it, nodeclaim)
            body = self._vm_body(name, nic_id, it, o, image, labels, nodeclaim, nc)
            poller = self.c.compute.virtual_machines.begin_create_or_update(
                self.s.node_resource_group, name, body, polling_interval=self.poll_interval)
        except CloudProviderError:
            raise
        except Exception as e:  # noqa: BLE001 - refused at once: mark, clean up, report
            raise self._failed(e, claim, name, it, o, late=False) from None
        with self.lock:
            self.pending[name] = poller
        self.pool.submit(self._wait, poller, claim, name, it, o)
        self._info("launched instance", NodeClaim={"name": claim}, vm=name, **{
            "instance-type": it.name, "zone": o.zone, "capacity-type": o.capacity_type, "image": image})
        return self._claim_out(nodeclaim, name, it, o, image, labels, nc)

    def _get_vm(self, name: str) -> Any | None:
        try:
            return self.c.compute.virtual_machines.get(self.s.node_resource_group, name)
        except Exception as e:  # noqa: BLE001
            if is_not_found(e):
                return None
            raise

    def _create_nic(self, name: str, nc: dict, it: InstanceType, nodeclaim: dict) -> str:
        facts = self._network_facts()
        subnet = ((nc.get("spec") or {}).get("vnetSubnetID")) or self.s.vnet_subnet_id
        info = self.types.info(it.name)
        props: dict[str, Any] = {
            "ipConfigurations": [{"name": name, "properties": {
                "primary": True, "privateIPAllocationMethod": "Dynamic", "subnet": {"id": subnet},
                "loadBalancerBackendAddressPools": [{"id": p} for p in facts.get("pools") or ()]}}],
            "enableAcceleratedNetworking": bool(info and info.accelerated_networking),
            "enableIPForwarding": False,
        }
        if not self._aks_managed_subnet(subnet):
            props["networkSecurityGroup"] = {"id": facts["nsg"]}
        if self.s.network_plugin == "azure" and self.s.network_plugin_mode != "overlay":
            pods = int(it.capacity.get("pods", 30))
            props["ipConfigurations"] += [{"name": f"ipconfig{i}", "properties": {
                "primary": False, "privateIPAllocationMethod": "Dynamic", "subnet": {"id": subnet}}}
                for i in range(1, pods)]
        body = {"location": self.s.location, "tags": self.tags(nodeclaim, nc), "properties": props}
        nic = self.c.network.network_interfaces.begin_create_or_update(
            self.s.node_resource_group, name, body, polling_interval=self.poll_interval).result()
        return nic.id

    def _vm_body(self, name: str, nic_id: str, it: InstanceType, o: Offering, image: str, labels: dict,
                 nodeclaim: dict, nc: dict) -> dict:
        ncspec = nc.get("spec") or {}
        disk_gb = int(ncspec.get("osDiskSizeGB") or static.DEFAULT_OS_DISK_SIZE_GB)
        info = self.types.info(it.name)
        os_disk: dict[str, Any] = {"name": name, "diskSizeGB": disk_gb, "createOption": "FromImage",
                                   "deleteOption": "Delete", "osType": "Linux"}
        if info is not None and info.ephemeral_placement and disk_gb <= info.ephemeral_max_gb:
            os_disk["diffDiskSettings"] = {"option": "Local", "placement": info.ephemeral_placement}
            os_disk["caching"] = "ReadOnly"
        else:
            os_disk["caching"] = "ReadWrite"
            os_disk["managedDisk"] = {"storageAccountType": "Premium_LRS"
                                      if it.labels.get(static.LABEL_SKU_PREMIUM_STORAGE) == "true" else "Standard_LRS"}
        spec = nodeclaim.get("spec") or {}
        taints = [*(spec.get("taints") or ()), *(spec.get("startupTaints") or ()),
                  {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]
        node_labels = {k: v for k, v in labels.items() if k not in (LABEL_HOSTNAME,) and kubelet_may_set(k)}
        node_labels.update({"kubernetes.azure.com/role": "agent", "karpenter.sh/do-not-sync-taints": "true"})
        if self.s.kubelet_identity_client_id:
            node_labels["kubernetes.azure.com/kubelet-identity-client-id"] = self.s.kubelet_identity_client_id
        node_labels.setdefault("kubernetes.azure.com/mode", "user")  # upstream's default; a NodeClaim may ask system
        node_labels.update(network_labels(self.s, ncspec.get("vnetSubnetID") or self.s.vnet_subnet_id,
                                          self._k8s_minor(nc)))
        from ...resources import format_resource_list

        reserved = format_resource_list(static.kube_reserved(int(it.capacity.get("cpu", 0)) // 1000,
                                                             int(it.labels.get(static.LABEL_SKU_MEMORY, "0")) / 1024))
        cluster = self.cluster()
        facts = self._network_facts()
        boot = NodeBootstrap(
            kubernetes_version=self.kubernetes_version(nc), ca_bundle_b64=cluster.get("ca", ""),
            arch=it.labels.get(LABEL_ARCH, "amd64"), labels=node_labels, taints=taints,
            max_pods=int(it.capacity.get("pods", 0)),
            kube_reserved={k: v for k, v in reserved.items() if k in ("cpu", "memory")},
            nsg=facts.get("nsg_name", ""), route_table=f"aks-agentpool-{facts.get('cluster_id', '')}-routetable",
            extra_kubelet_flags=_kubelet_fields(ncspec.get("kubelet") or {}))
        user = self.s.linux_admin_username
        body: dict[str, Any] = {
            "location": self.s.location,
            "tags": self.tags(nodeclaim, nc),
            "properties": {
                "hardwareProfile": {"vmSize": it.name},
                "storageProfile": {"osDisk": os_disk, "imageReference": {"communityGalleryImageId": image}},
                "networkProfile": {"networkInterfaces": [{"id": nic_id, "properties": {"primary": True,
                                                                                          "deleteOption": "Delete"}}]},
                "osProfile": {"adminUsername": user, "computerName": name, "customData": custom_data(self.s, boot),
                              "linuxConfiguration": {"disablePasswordAuthentication": True, "ssh": {"publicKeys": [
                                  {"path": f"/home/{user}/.ssh/authorized_keys", "keyData": self.s.ssh_public_key}]}}},
                "priority": "Spot" if o.capacity_type == CAPACITY_SPOT else "Regular",
            },
        }
        if arm_zone(o.zone):
            body["zones"] = arm_zone(o.zone)
        if o.capacity_type == CAPACITY_SPOT:
            body["properties"]["evictionPolicy"] = "Delete"
            body["properties"]["billingProfile"] = {"maxPrice": -1}
        if self.s.node_identities:
            body["identity"] = {"type": "UserAssigned", "userAssignedIdentities": {i: {} for i in self.s.node_identities}}
        security = ncspec.get("security") or {}
        if security.get("encryptionAtHost"):
            body["properties"]["securityProfile"] = {"encryptionAtHost": True}
        return body

    def _wait(self, poller: Any, claim: str, name: str, it: InstanceType, o: Offering) -> None:
        """The create operation, polled in the background: the billing extension on success; on failure the
        offerings marked, the VM, NIC and NodeClaim deleted."""
        try:
            poller.result()
        except Exception as e:  # noqa: BLE001
            self._failed(e, claim, name, it, o, late=True)
            return
        finally:
            with self.lock:
                self.pending.pop(name, None)
        if self.s.cloud.billing_extension:
            try:
                self.c.compute.virtual_machine_extensions.begin_create_or_update(
                    self.s.node_resource_group, name, BILLING_EXTENSION,
                    {"location": self.s.location, "tags": {TAG_CLUSTER: self.s.cluster_name, TAG_BILLING: "linux"},
                     "properties": {"publisher": "Microsoft.AKS", "type": "Compute.AKS.Linux.Billing",
                                    "typeHandlerVersion": "1.0", "autoUpgradeMinorVersion": True, "settings": {}}},
                    polling_interval=self.poll_interval).result()
            except Exception as e:  # noqa: BLE001 - the node works without it; say so
                self._error("failed creating billing extension", vm=name, error=error_message(e))

    def _failed(self, e: BaseException, claim: str, name: str, it: InstanceType, o: Offering,
                late: bool) -> CloudProviderError:
        """Classify a failed launch, mark the offerings it rules out, delete the VM and NIC (and, when the
        operation failed late, the NodeClaim); the error to raise."""
        code, message = error_code(e), error_message(e)
        c = classify(code, message)
        info = self.types.info(it.name)
        zones = [off.zone for off in it.offerings if off.capacity_type == o.capacity_type]
        marks = self.unavailable.record(c, code, o.capacity_type, it.name, o.zone, zones,
                                        info.family if info else "", info.vcpus if info else 0, message)
        self._error("failed launching instance", NodeClaim={"name": claim}, vm=name, code=code, reason=c.reason,
                    error=message[:1200], unavailable=marks, late=late)
        self._cleanup(name)
        if late:
            self.delete_nodeclaim(claim)
        if c.capacity:
            return InsufficientCapacityError(f"{c.reason}: {code}: {message[:1200]}")
        return LaunchError(c.reason, f"{code}: {message[:1200]}")

    def _cleanup(self, name: str) -> None:
        rg = self.s.node_resource_group
        try:
            self.c.compute.virtual_machines.begin_delete(rg, name, force_deletion=True,
                                                         polling_interval=self.poll_interval).result()
        except Exception as e:  # noqa: BLE001
            if not is_not_found(e):
                self._error("failed deleting vm", vm=name, error=error_message(e))
        try:
            self.c.network.network_interfaces.begin_delete(rg, name, polling_interval=self.poll_interval).result()
        except Exception as e:  # noqa: BLE001
            if not is_not_found(e):
                self._error("failed deleting network interface", nic=name, error=error_message(e))

    def _labels(self, nodeclaim: dict, reqs: Requirements, it: InstanceType, o: Offering) -> dict[str, str]:
        labels = dict((nodeclaim.get("metadata") or {}).get("labels") or {})
        for r in reqs:
            if not r.complement and r.values and r.key not in (LABEL_HOSTNAME, LABEL_INSTANCE_TYPE):
                labels.setdefault(r.key, sorted(r.values)[0])
        labels.update(reqs.labels())
        labels.pop(LABEL_HOSTNAME, None)
        labels.update(it.labels)
        labels.update(static.provider.offering_labels(o))
        labels.update({LABEL_ZONE: o.zone, LABEL_CAPACITY_TYPE: o.capacity_type, LABEL_REGION: self.s.location})
        return labels

    def provider_id(self, name: str) -> str:
        return (f"azure:///subscriptions/{self.s.subscription_id}/resourceGroups/{self.s.node_resource_group.lower()}"
                f"/providers/Microsoft.Compute/virtualMachines/{name}")

    def _claim_out(self, nodeclaim: dict, name: str, it: InstanceType, o: Offering, image: str, labels: dict,
                   nc: dict | None) -> dict:
        from ...disruption.drift import nodeclass_hash
        from ...resources import format_resource_list

        ann = {PRICE_ANNOTATION: f"{o.price:.4f}"}
        if nc is not None:
            ann[NODECLASS_HASH_ANNOTATION] = nodeclass_hash(nc)
            ann[NODECLASS_HASH_VERSION_ANNOTATION] = NODECLASS_HASH_VERSION
        return {"metadata": {"name": nodeclaim["metadata"]["name"], "labels": labels, "annotations": ann},
                "status": {"providerID": self.provider_id(name), "imageID": image,
                           "capacity": format_resource_list(it.capacity),
                           "allocatable": format_resource_list(it.allocatable)}}

    def _vm_claim(self, vm: Any, nodeclaim: dict, types: list[InstanceType], nc: dict | None) -> dict:
        size = vm.hardware_profile.vm_size
        it = next((t for t in types if t.name == size), None) or next(
            (t for t in self.types.list(nc) if t.name == size), None)
        zone = f"{self.s.location}-{vm.zones[0]}" if vm.zones else static.REGIONAL_ZONE
        ct = CAPACITY_SPOT if str(vm.priority or "").lower() == "spot" else "on-demand"
        if it is None:  # as upstream: the VM an earlier attempt made is this NodeClaim's, whatever its size now
            out = self._as_claim({"name": vm.name, "tags": vm.tags or {}, "zones": vm.zones, "properties": {
                "priority": str(vm.priority or ""), "hardwareProfile": {"vmSize": size}}})
            out["metadata"]["name"] = nodeclaim["metadata"]["name"]
            out["metadata"]["labels"] = {**((nodeclaim.get("metadata") or {}).get("labels") or {}),
                                         **out["metadata"]["labels"]}
            return out
        o = next((x for x in it.offerings if x.zone == zone and x.capacity_type == ct), Offering(zone, ct, 0.0))
        reqs = Requirements.from_node_selector((nodeclaim.get("spec") or {}).get("requirements") or ())
        image = (vm.storage_profile.image_reference.community_gallery_image_id or vm.storage_profile.image_reference.id
                 or "") if vm.storage_profile and vm.storage_profile.image_reference else ""
        return self._claim_out(nodeclaim, vm.name, it, o, image, self._labels(nodeclaim, reqs, it, o), nc)

    # --- get / list / delete ----------------------------------------------------------------------
    @staticmethod
    def name_of(pid: str) -> str:
        m = re.search(r"(?i)/virtualMachines/([^/]+)$", pid or "")
        return m.group(1) if m else ""

    def _as_claim(self, vm: dict) -> dict:
        """A VM (Resource Graph row or GET) as a NodeClaim, as upstream's vmInstanceToNodeClaim."""
        props = vm.get("properties") or {}
        tags = vm.get("tags") or {}
        name = vm["name"]
        zones = vm.get("zones") or []
        zone = f"{self.s.location}-{zones[0]}" if zones else static.REGIONAL_ZONE
        ct = CAPACITY_SPOT if str(props.get("priority") or "").lower() == "spot" else "on-demand"
        size = (props.get("hardwareProfile") or props.get("hardware_profile") or {})
        size = size.get("vmSize") or size.get("vm_size") or ""
        labels = {LABEL_INSTANCE_TYPE: size, LABEL_ZONE: zone, LABEL_CAPACITY_TYPE: ct,
                  LABEL_NODEPOOL: tags.get(TAG_NODEPOOL, ""), LABEL_REGION: self.s.location}
        meta: dict[str, Any] = {"name": name.removeprefix("aks-"), "labels": labels}
        created = props.get("timeCreated") or props.get("time_created")
        if created is not None:
            meta["creationTimestamp"] = created if isinstance(created, str) else created.isoformat()
        if str(props.get("provisioningState") or props.get("provisioning_state") or "") == "Deleting":
            meta["deletionTimestamp"] = "deleting"
        image = ((props.get("storageProfile") or props.get("storage_profile") or {}).get("imageReference")
                 or (props.get("storageProfile") or props.get("storage_profile") or {}).get("image_reference") or {})
        return {"metadata": meta, "status": {
            "providerID": self.provider_id(name),
            "imageID": image.get("communityGalleryImageId") or image.get("community_gallery_image_id") or image.get("id") or ""}}

    def get(self, pid: str) -> dict:
        name = self.name_of(pid)
        vm = self._get_vm(name) if name else None
        if vm is None:
            raise NodeClaimNotFoundError(f"instance {pid} not found")
        ref = vm.storage_profile.image_reference if vm.storage_profile else None
        return self._as_claim({"name": vm.name, "tags": vm.tags, "zones": vm.zones, "properties": {
            "priority": str(vm.priority or ""), "hardwareProfile": {"vmSize": vm.hardware_profile.vm_size},
            "timeCreated": vm.time_created, "provisioningState": vm.provisioning_state,
            "storageProfile": {"imageReference": {"communityGalleryImageId": getattr(ref, "community_gallery_image_id", None),
                                                  "id": getattr(ref, "id", None)}}}})

    def _graph(self, resource_type: str) -> list[dict]:
        from azure.mgmt.resourcegraph.models import QueryRequest, QueryRequestOptions

        kql = (f"Resources | where type =~ '{resource_type}' | where resourceGroup =~ '{self.s.node_resource_group.lower()}'"
               f" | where tags has_cs '{TAG_NODEPOOL}' | where tags['{TAG_CLUSTER}'] == '{self.s.cluster_name}'"
               f" | where not(tags has_cs 'karpenter.azure.com_aksmachine_nodeclaim')")
        rows: list[dict] = []
        token = None
        while True:
            res = self.c.graph.resources(QueryRequest(subscriptions=[self.s.subscription_id], query=kql,
                                                      options=QueryRequestOptions(result_format="objectArray",
                                                                                  skip_token=token)))
            rows.extend(res.data or [])
            token = res.skip_token
            if not token:
                return rows

    def list(self) -> list[dict]:
        out = []
        for row in self._graph("microsoft.compute/virtualmachines"):
            row = dict(row)
            row["name"] = row["id"].rsplit("/", 1)[-1].lower()  # Resource Graph's casing varies
            out.append(self._as_claim(row))
        return out

    def list_nics(self) -> list[str]:
        return [r["id"].rsplit("/", 1)[-1].lower() for r in self._graph("microsoft.network/networkinterfaces")]

    def delete(self, nodeclaim: dict) -> None:
        pid = (nodeclaim.get("status") or {}).get("providerID") or ""
        name = self.name_of(pid)
        with self.lock:
            if name in self.deleting:
                return  # a delete of this VM is already running
        vm = self._get_vm(name) if name else None
        if vm is None:
            self._delete_nic(name)
            raise NodeClaimNotFoundError(f"instance {pid} not found")
        if str(vm.provisioning_state or "") == "Deleting":
            return
        with self.lock:
            self.deleting.add(name)
        self.pool.submit(self._delete, name, pid)

    def _delete(self, name: str, pid: str) -> None:
        try:
            self.c.compute.virtual_machines.begin_delete(self.s.node_resource_group, name, force_deletion=True,
                                                         polling_interval=self.poll_interval).result()
            self._info("deleted instance", vm=name, **{"provider-id": pid})
        except Exception as e:  # noqa: BLE001 - the engine calls delete again
            if not is_not_found(e):
                self._error("failed deleting vm", vm=name, error=error_message(e))
        finally:
            self._delete_nic(name)
            with self.lock:
                self.deleting.discard(name)

    def _delete_nic(self, name: str) -> None:
        if not name:
            return
        try:
            self.c.network.network_interfaces.begin_delete(self.s.node_resource_group, name,
                                                           polling_interval=self.poll_interval).result()
        except Exception as e:  # noqa: BLE001 - best effort; NIC garbage collection retries
            if not is_not_found(e):
                self._error("failed deleting network interface", nic=name, error=error_message(e))

    def offering_of(self, pid: str) -> None:
        return None

    # --- drift ------------------------------------------------------------------------------------
    def is_drifted(self, nodeclaim: dict, nodeclass: dict | None) -> str | None:
        """Upstream's checks in upstream's order: NodeClassDrift (the hash, when both carry karpy's hash
        version), K8sVersionDrift (the Node's kubelet version is not the AKSNodeClass's
        ``status.kubernetesVersion``), KubeletIdentityDrift (the Node's kubelet identity label is not
        KUBELET_IDENTITY_CLIENT_ID), ImageDrift (the VM's image is not among ``status.images``; nothing while
        ImagesReady is not True or ``status.images`` is empty). A Node being deleted is not checked."""
        from ...disruption.drift import nodeclass_hash

        if nodeclass is None:
            return None
        ann = (nodeclaim.get("metadata") or {}).get("annotations") or {}
        nc_ann = (nodeclass.get("metadata") or {}).get("annotations") or {}
        if ann.get(NODECLASS_HASH_VERSION_ANNOTATION) == nc_ann.get(NODECLASS_HASH_VERSION_ANNOTATION) == \
                NODECLASS_HASH_VERSION and ann.get(NODECLASS_HASH_ANNOTATION) not in (None, nodeclass_hash(nodeclass)):
            return "NodeClassDrift"
        ncstatus = nodeclass.get("status") or {}
        node_name = (nodeclaim.get("status") or {}).get("nodeName") or ""
        node = self.lookup("Node", node_name) if node_name else None
        if node is not None and (node.get("metadata") or {}).get("deletionTimestamp"):
            node = None  # as upstream: a Node being deleted is not checked for drift
        want = ncstatus.get("kubernetesVersion") or ""
        k8s_ready = any(c.get("type") == "KubernetesVersionReady" and c.get("status") == "True"
                        for c in ncstatus.get("conditions") or ())
        if node is not None and want and k8s_ready:
            have = str(((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion") or "").lstrip("v")
            if have and have != want:
                return "K8sVersionDrift"
        if node is not None and self.s.kubelet_identity_client_id:
            label = ((node.get("metadata") or {}).get("labels") or {}).get("kubernetes.azure.com/kubelet-identity-client-id")
            if label and label != self.s.kubelet_identity_client_id:
                return "KubeletIdentityDrift"
        image = (nodeclaim.get("status") or {}).get("imageID") or ""
        if not image:
            return None
        if not all(c.get("status") == "True" for c in ncstatus.get("conditions") or () if c.get("type") == "ImagesReady"):
            return None  # as upstream: no image drift decision while the AKSNodeClass's images are not ready
        images = {i.get("id", "").lower() for i in ncstatus.get("images") or ()}
        if not images:
            return None  # as upstream: without status images there is nothing to compare with (upstream errors)
        return "ImageDrift" if image.lower() not in images else None

    # --- interruption -----------------------------------------------------------------------------
    def subscribe_interruptions(self, callback: Callable[[], None]) -> None:
        self._subscribers.append(callback)

    def push_interruption(self, msg: dict) -> None:
        """An eviction or scheduled termination noticed on a Node (:mod:`.interruption`)."""
        with self.lock:
            self._interruptions.append(msg)
        for callback in list(self._subscribers):
            callback()

    def interruption_messages(self) -> list[dict]:
        with self.lock:
            out, self._interruptions = self._interruptions, []
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


# Labels of the kubernetes.io and k8s.io domains the kubelet may set on its Node (--node-labels); the others of
# those domains reach the Node from the NodeClaim, as upstream leaves them out of the kubelet's labels.
_KUBELET_LABELS = frozenset({
    LABEL_HOSTNAME, "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type", "kubernetes.io/os", "kubernetes.io/arch",
    "beta.kubernetes.io/os", "beta.kubernetes.io/arch"})


def kubelet_may_set(key: str) -> bool:
    """Whether the kubelet may register its Node with label ``key``."""
    prefix, _, _ = key.rpartition("/")
    if not any(prefix == d or prefix.endswith("." + d) for d in ("kubernetes.io", "k8s.io")):
        return True
    return key in _KUBELET_LABELS or any(prefix == d or prefix.endswith("." + d)
                                         for d in ("kubelet.kubernetes.io", "node.kubernetes.io"))


def _kubelet_fields(k: dict) -> dict[str, str]:
    """The AKSNodeClass's ``spec.kubelet`` fields as kubelet flags."""
    flags = {}
    for field, flag in (("cpuManagerPolicy", "--cpu-manager-policy"), ("cpuCFSQuota", "--cpu-cfs-quota"),
                        ("topologyManagerPolicy", "--topology-manager-policy"),
                        ("imageGCHighThresholdPercent", "--image-gc-high-threshold"),
                        ("imageGCLowThresholdPercent", "--image-gc-low-threshold"),
                        ("containerLogMaxSize", "--container-log-max-size"),
                        ("containerLogMaxFiles", "--container-log-max-files"), ("podPidsLimit", "--pod-max-pids")):
        if k.get(field) is not None:
            flags[flag] = str(k[field]).lower() if isinstance(k[field], bool) else str(k[field])
    if k.get("allowedUnsafeSysctls"):  # as upstream: the patterns comma separated
        flags["--allowed-unsafe-sysctls"] = ",".join(str(x) for x in k["allowedUnsafeSysctls"])
    return flags
