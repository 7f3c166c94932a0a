"""karpy's Azure CloudProvider on the AKS Machine API path (``PROVISION_MODE=aksmachineapi``), as upstream's.

AKS creates the nodes: each NodeClaim is one *machine* of an agent pool of mode ``Machines``
(``AKS_MACHINES_POOL_NAME``) of the managed cluster ``CLUSTER_NAME`` in ``ARM_RESOURCE_GROUP``.

* **Name**: the NodeClaim's name when it has at most 34 characters; a longer one keeps its suffix after the last
  ``-`` and the first characters of its prefix, the rest of the prefix replaced by a 6-character base-36 hash
  (FNV-1, 64 bits, as upstream's hashstructure), so the name is stable across restarts. The VM AKS creates is
  ``aks-<pool>-<machine>-<8 digits>-vm`` in the node resource group; the provider ID is that VM's.
* **Create**: GET the machine first (a restart, or a retry after the PUT landed: the machine is reused when its
  ``karpenter.azure.com_aksmachine_nodeclaim`` tag names this NodeClaim), else the cheapest available offering
  and ``PUT .../managedClusters/{cluster}/agentPools/{pool}/machines/{name}`` with header
  ``AllowSpotVMSystemNode: true``: zones, ``nodeImageVersion`` (``AKSUbuntu-2204gen2containerd-202506.01.0``,
  from the image the AKSNodeClass resolves), the subnet of the AKSNodeClass, the size, OS SKU, disk size and
  type (ephemeral where the size's local disk holds it), FIPS, node labels (without AKS's and kubelet's own),
  the Kubernetes version, kubelet settings, every taint as an initialization taint, max pods, mode, security,
  priority, and upstream's tags plus ``karpenter.azure.com_aksmachine_nodeclaim``. The machine is read once
  right after the PUT (a ``Failed`` state is handled at once), then the operation is polled in the background.
* **Errors**: a PUT refused with ``VMSizeNotSupported`` (or a ``BadRequest`` saying the size "is not supported
  for subscription") marks the size unavailable everywhere for 23 hours; a machine that fails to provision is
  classified by the first detail of ``status.provisioningError`` exactly as a VM's error (:mod:`.offerings`).
  Either way the machine is deleted, and when the failure came late, the NodeClaim too.
* **Get / List / Delete**: the provider ID's VM name tells a machine from a VM; List returns the pool's
  machines and this cluster's VMs; a NodeClaim annotated ``karpenter.azure.com/aks-machine-resource-id`` is
  deleted with ``POST .../agentPools/{pool}/deleteMachines`` (one delete in flight per machine; a machine
  already ``Deleting`` is left alone; a missing one is NodeClaimNotFound).
* **Drift**: NodeClassDrift, K8sVersionDrift, ImageDrift (the machine's node image version among the
  AKSNodeClass's ``status.images``) and ClusterConfigDrift (AKS reports ``status.driftAction: Recreate``).

The stable azure-mgmt-containerservice has no machine PUT, so the calls go through an ``ARMPipelineClient``
(:func:`.clients.arm_pipeline`) with the management clients' policies and the SDK's ARM long-running-operation
polling. Upstream requires ``USE_SIG=true`` here; karpy reads images from the community galleries, whose
image definitions and version names are the node image versions AKS expects.
"""

from __future__ import annotations

import re
from typing import Any

from ...scheduling.requirements import Requirements
from .. import azure as static
from ..provider import CloudProviderError, InsufficientCapacityError, NodeClaimNotFoundError
from ..types import (
    CAPACITY_ON_DEMAND,
    CAPACITY_SPOT,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_REGION,
    LABEL_ZONE,
    InstanceType,
    Offering,
)
from .clients import error_code, error_message, is_not_found
from .offerings import SKU_NOT_AVAILABLE_ON_DEMAND_TTL, classify
from .provider import (
    NODECLASS_HASH_ANNOTATION,
    NODECLASS_HASH_VERSION,
    NODECLASS_HASH_VERSION_ANNOTATION,
    PRICE_ANNOTATION,
    TAG_NODEPOOL,
    AzureVMProvider,
    LaunchError,
    arm_zone,
)

API_VERSION = "2025-10-02-preview"  # a preview of Microsoft.ContainerService with machine PUT
MACHINE_ANNOTATION = "karpenter.azure.com/aks-machine-resource-id"
TAG_MACHINE_NODECLAIM = "karpenter.azure.com_aksmachine_nodeclaim"
MAX_NAME = 34
LABEL_ULTRA_SSD = "karpenter.azure.com/sku-storage-ultra-ssd"
_B36 = "0123456789abcdefghijklmnopqrstuvwxyz"
_KUBELET_LABELS = frozenset({
    "kubernetes.io/hostname", "kubernetes.io/arch", "kubernetes.io/os", "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type", "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
    "topology.kubernetes.io/zone", "topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region"})
_AKS_LEGACY_LABELS = frozenset({"agentpool", "storageprofile", "storagetier", "accelerator"})
_SIG_IMAGE = re.compile(r"(?i)^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Compute/galleries/"
                        r"([^/]+)/images/([^/]+)/versions/([^/]+)$")
_CIG_IMAGE = re.compile(r"(?i)^/CommunityGalleries/([^/]+?)(?:-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
                        r"[0-9a-f]{12})?/images/([^/]+)/versions/([^/]+)$")


# --- names --------------------------------------------------------------------------------------------
def alphanumeric_hash(text: str, length: int = 6) -> str:
    """``length`` base-36 digits of the FNV-1 64-bit hash of ``text`` (hashstructure's hash of a string, as
    upstream), most significant first."""
    h = 0xcbf29ce484222325
    for b in text.encode():
        h = ((h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF) ^ b
    out = []
    for _ in range(length):
        out.append(_B36[h % 36])
        h //= 36
    return "".join(reversed(out))


def machine_name(nodeclaim: str) -> str:
    """The AKS machine's name of a NodeClaim (at most 34 characters, stable)."""
    if len(nodeclaim) <= MAX_NAME:
        return nodeclaim
    prefix, dash, suffix = nodeclaim.rpartition("-")
    if not dash:
        raise LaunchError("InvalidNodeClaimName", f'NodeClaim name "{nodeclaim}" has no "-": no AKS machine name')
    keep = MAX_NAME - len(suffix) - 1 - 6
    return prefix[:keep] + alphanumeric_hash(prefix[keep:]) + "-" + suffix


def machine_of_vm(pool: str, vm: str) -> str | None:
    """The machine of a VM AKS created for it (``aks-<pool>-<machine>-<digits>-vm``), else None."""
    head = f"aks-{pool}-"
    if not pool or not vm.startswith(head) or not vm.endswith("-vm"):
        return None
    rest = vm[len(head):-3]
    machine, dash, _ = rest.rpartition("-")
    return machine if dash and machine else None


def node_image_version(image_id: str) -> str:
    """AKS's node image version of a gallery image: ``<gallery>-<definition>-<version>``, the gallery without
    the community gallery's GUID suffix."""
    m = _SIG_IMAGE.match(image_id) or _CIG_IMAGE.match(image_id)
    if m is None:
        raise LaunchError("ImageNotFound", f'image "{image_id}" is not a gallery image version: no node image version')
    return f"{m.group(1)}-{m.group(2)}-{m.group(3)}"


def kubelet_may_set(key: str) -> bool:
    """Whether a node label may be sent to AKS: not AKS's own, not one kubelet sets itself, and not in a
    Kubernetes namespace kubelet may not write (as the node restriction admission)."""
    if key.startswith("kubernetes.azure.com/") or key in _AKS_LEGACY_LABELS or key in _KUBELET_LABELS:
        return False
    ns = key.split("/", 1)[0] if "/" in key else ""
    if not (ns in ("kubernetes.io", "k8s.io") or ns.endswith((".kubernetes.io", ".k8s.io"))):
        return True
    return any(ns == a or ns.endswith("." + a) for a in ("kubelet.kubernetes.io", "node.kubernetes.io"))


def _taint(t: dict) -> str:
    value = t.get("value")
    return f"{t['key']}={value}:{t['effect']}" if value else f"{t['key']}:{t['effect']}"


# --- the API ------------------------------------------------------------------------------------------
class MachineAPI:
    """The AKS machine API's calls (get, list, create, deleteMachines) on an ARM pipeline; errors are the SDK's
    (``HttpResponseError`` with ARM's error, ``ResourceNotFoundError`` for 404), long-running operations the SDK's
    ``LROPoller`` with ARM polling."""

    def __init__(self, client: Any, settings: Any, poll_interval: float):
        self.client = client
        self.poll_interval = poll_interval
        s = settings
        self.base = (f"{s.cloud.resource_manager.rstrip('/')}/subscriptions/{s.subscription_id}/resourceGroups/"
                     f"{s.arm_resource_group}/providers/Microsoft.ContainerService/managedClusters/{s.cluster_name}/"
                     f"agentPools/{s.aks_machines_pool_name}")

    def _send(self, method: str, url: str, ok: tuple[int, ...], body: Any = None, headers: dict | None = None,
              params: bool = True) -> Any:
        from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
        from azure.core.rest import HttpRequest
        from azure.mgmt.core.exceptions import ARMErrorFormat

        req = HttpRequest(method, url, params={"api-version": API_VERSION} if params else None, json=body,
                          headers={"Accept": "application/json", **(headers or {})})
        pr = self.client.send_request(req, stream=False, _return_pipeline_response=True)
        r = pr.http_response
        if r.status_code not in ok:
            if r.status_code == 404:
                raise ResourceNotFoundError(response=r, error_format=ARMErrorFormat)
            raise HttpResponseError(response=r, error_format=ARMErrorFormat)
        return pr

    @staticmethod
    def _json(pr: Any) -> Any:
        r = pr.http_response
        return r.json() if r.text() else None

    def get(self, name: str) -> dict:
        return self._json(self._send("GET", f"{self.base}/machines/{name}", (200,)))

    def list(self) -> list[dict]:
        out: list[dict] = []
        page = self._json(self._send("GET", f"{self.base}/machines", (200,))) or {}
        while True:
            out.extend(page.get("value") or ())
            link = page.get("nextLink")
            if not link:
                return out
            page = self._json(self._send("GET", link, (200,), params=False)) or {}

    def _poller(self, initial: Any) -> Any:
        from azure.core.polling import LROPoller
        from azure.mgmt.core.polling.arm_polling import ARMPolling

        return LROPoller(self.client, initial, lambda pr: self._json(pr) if pr is not None else None,
                         ARMPolling(self.poll_interval))

    def begin_create(self, name: str, body: dict) -> Any:
        return self._poller(self._send("PUT", f"{self.base}/machines/{name}", (200, 201), body,
                                       {"AllowSpotVMSystemNode": "true"}))

    def begin_delete(self, names: list[str]) -> Any:
        return self._poller(self._send("POST", f"{self.base}/deleteMachines", (200, 202, 204),
                                       {"machineNames": list(names)}))


# --- the provider -------------------------------------------------------------------------------------
class AKSMachineProvider(AzureVMProvider):
    """The VM provider's catalog, images, tags, quota and interruption handling, with machines in place of VMs
    for new NodeClaims; VMs karpy created before (``aksscriptless``) are still listed, got and deleted."""

    def __init__(self, clients: Any, settings: Any, *args: Any, api: Any = None, **kw: Any):
        super().__init__(clients, settings, *args, **kw)
        self.machine_api = api if api is not None else MachineAPI(clients.arm, settings, self.poll_interval)
        self.pool_name = settings.aks_machines_pool_name
        self.machines_pending: dict[str, Any] = {}
        self.machines_deleting: set[str] = set()

    # --- create -----------------------------------------------------------------------------------
    def create(self, nodeclaim: dict) -> dict:
        nc, reqs, types = self.launch_inputs(nodeclaim)
        claim = nodeclaim["metadata"]["name"]
        name = machine_name(claim)
        existing = self._get_machine(name)
        if existing is not None:
            return self._reuse(existing, nodeclaim, reqs, types, nc)
        it, o = self.cheapest_launch(reqs, types)
        labels = self._labels(nodeclaim, reqs, it, o)
        body = self.machine_body(nodeclaim, reqs, it, o, nc)
        try:
            poller = self.machine_api.begin_create(name, body)
        except Exception as e:  # noqa: BLE001 - refused at once: mark, clean up, report
            raise self._refused(e, claim, name, it, o) from None
        got = self._get_machine(name)  # once: the VM's ID, and a failure AKS already reports
        if got is not None and _state(got) == "Failed":
            raise self._failed(got, claim, name, it, o, late=False)
        with self.lock:
            self.machines_pending[name] = poller
        self.pool.submit(self._wait_machine, poller, claim, name, it, o)
        self._info("launched new AKS machine instance", NodeClaim={"name": claim}, aksMachineName=name, **{
            "instance-type": it.name, "zone": o.zone, "capacity-type": o.capacity_type})
        return self._machine_claim(got or {"properties": body["properties"]}, nodeclaim, it, o, labels, nc)

    def machine_body(self, nodeclaim: dict, reqs: Requirements, it: InstanceType, o: Offering, nc: dict) -> dict:
        """The machine PUT's body, as upstream's buildAKSMachineTemplate."""
        ncspec = nc.get("spec") or {}
        info = self.types.info(it.name)
        image = self.image_id(nc, it)
        k8s = self.kubernetes_version(nc)
        labels = dict((nodeclaim.get("metadata") or {}).get("labels") or {})
        for r in reqs:
            if not r.complement and len(r.values) == 1:
                labels[r.key] = next(iter(r.values))
        labels.update({k: v for k, v in it.labels.items()})
        want = reqs.get(LABEL_ULTRA_SSD)
        ultra = not want.complement and set(want.values) == {"true"}
        labels.update({LABEL_CAPACITY_TYPE: o.capacity_type, static.LABEL_PLACEMENT_SCOPE: static.placement_scope(o.zone),
                       LABEL_ULTRA_SSD: str(ultra).lower()})
        mode = "System" if labels.get("kubernetes.azure.com/mode") == "system" else "User"
        node_labels = {k: str(v) for k, v in sorted(labels.items()) if kubelet_may_set(k)}
        spec = nodeclaim.get("spec") or {}
        taints: list[str] = []
        for t in [*(spec.get("taints") or ()), *(spec.get("startupTaints") or ()),
                  {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]:
            if _taint(t) not in taints:
                taints.append(_taint(t))
        family = ncspec.get("imageFamily") or "Ubuntu"
        fips = ncspec.get("fipsMode") == "FIPS"
        if family in ("Ubuntu2204", "Ubuntu2404", "AzureLinux"):
            os_sku = family
        else:
            os_sku = "Ubuntu" if fips else ("Ubuntu2404" if self._k8s_minor(nc) >= 34 else "Ubuntu2204")
        disk_gb = int(ncspec.get("osDiskSizeGB") or static.DEFAULT_OS_DISK_SIZE_GB)
        ephemeral = info is not None and bool(info.ephemeral_placement) and disk_gb <= info.ephemeral_max_gb
        os_profile: dict[str, Any] = {"osType": "Linux", "osSKU": os_sku,
                                      "osDiskType": "Ephemeral" if ephemeral else "Managed", "enableFIPS": fips}
        if ncspec.get("osDiskSizeGB"):
            os_profile["osDiskSizeGB"] = int(ncspec["osDiskSizeGB"])
        kube: dict[str, Any] = {"nodeLabels": node_labels, "orchestratorVersion": k8s,
                                "nodeInitializationTaints": taints, "nodeTaints": []}
        kubelet = _kubelet_config(ncspec.get("kubelet") or {})
        if kubelet:
            kube["kubeletConfig"] = kubelet
        if ncspec.get("maxPods"):
            kube["maxPods"] = int(ncspec["maxPods"])
        hardware: dict[str, Any] = {"vmSize": it.name, "ultraSsdEnabled": ultra}
        if it.capacity.get("nvidia.com/gpu") or it.capacity.get("amd.com/gpu"):
            install = (ncspec.get("gpu") or {}).get("mode", "Driver") != "None"
            hardware["gpuProfile"] = {"driver": "Install" if install else "None"}
        security = ncspec.get("security") or {}
        trusted = security.get("trustedLaunch") or {}
        props: dict[str, Any] = {
            "nodeImageVersion": node_image_version(image),
            "network": {"vnetSubnetID": ncspec["vnetSubnetID"]} if ncspec.get("vnetSubnetID") else {},
            "hardware": hardware,
            "operatingSystem": os_profile,
            "kubernetes": kube,
            "mode": mode,
            "security": {"sshAccess": "LocalUser", "enableEncryptionAtHost": bool(security.get("encryptionAtHost")),
                         "enableVTPM": bool(trusted.get("vtpm")), "enableSecureBoot": bool(trusted.get("secureBoot"))},
            "priority": "Spot" if o.capacity_type == CAPACITY_SPOT else "Regular",
            "tags": {**self.tags(nodeclaim, nc), TAG_MACHINE_NODECLAIM: nodeclaim["metadata"]["name"]},
        }
        body: dict[str, Any] = {"properties": props}
        if arm_zone(o.zone):
            body["zones"] = arm_zone(o.zone)
        return body

    def _get_machine(self, name: str) -> dict | None:
        try:
            m = self.machine_api.get(name)
        except Exception as e:  # noqa: BLE001
            if is_not_found(e):
                return None
            raise
        props = m.setdefault("properties", {})
        props.setdefault("priority", "Regular")  # the API reports priority only for spot machines
        return m

    def _reuse(self, m: dict, nodeclaim: dict, reqs: Requirements, types: list[InstanceType], nc: dict) -> dict:
        claim = nodeclaim["metadata"]["name"]
        name = m.get("name") or machine_name(claim)
        tag = ((m.get("properties") or {}).get("tags") or {}).get(TAG_MACHINE_NODECLAIM)
        if tag != claim:
            raise LaunchError("CreateInstanceFailed", f'found existing AKS machine {name}, but its '
                              f'{TAG_MACHINE_NODECLAIM} tag "{tag or ""}" does not name NodeClaim "{claim}"')
        it, o = self._offering(m, types, nc)
        if _state(m) == "Failed":
            raise self._failed(m, claim, name, it, o, late=False)
        self._info("found existing AKS machine, reusing it", NodeClaim={"name": claim}, aksMachineName=name)
        return self._machine_claim(m, nodeclaim, it, o, self._labels(nodeclaim, reqs, it, o), nc)

    def _offering(self, m: dict, types: list[InstanceType], nc: dict | None) -> tuple[InstanceType, Offering]:
        props = m.get("properties") or {}
        size = (props.get("hardware") or {}).get("vmSize") or ""
        it = next((t for t in types if t.name == size), None) or next(
            (t for t in self.types.list(nc) if t.name == size), None)
        if it is None:
            raise LaunchError("InstanceTypeNotFound", f"{size} of AKS machine {m.get('name')} is not an instance "
                                                      f"type in {self.s.location}")
        zones = m.get("zones") or []
        zone = f"{self.s.location}-{zones[0]}" if zones else static.REGIONAL_ZONE
        ct = CAPACITY_SPOT if str(props.get("priority") or "").lower() == "spot" else CAPACITY_ON_DEMAND
        o = next((x for x in it.offerings if x.zone == zone and x.capacity_type == ct), Offering(zone, ct, 0.0))
        return it, o

    def vm_provider_id(self, resource_id: str) -> str:
        """``azure://`` and the VM's resource ID, its resource group lower-cased (as upstream)."""
        parts = resource_id.split("/")
        if len(parts) > 4 and parts[3].lower() == "resourcegroups":
            parts[4] = parts[4].lower()
        return "azure://" + "/".join(parts)

    def _machine_claim(self, m: dict, nodeclaim: dict, it: InstanceType, o: Offering, labels: dict,
                       nc: dict | None) -> dict:
        from ...disruption.drift import nodeclass_hash
        from ...resources import format_resource_list

        props = m.get("properties") or {}
        ann = {PRICE_ANNOTATION: f"{o.price:.4f}", MACHINE_ANNOTATION: m.get("id") or f"{self.machine_api.base}/machines/"
               f"{machine_name(nodeclaim['metadata']['name'])}"}
        if nc is not None:
            ann[NODECLASS_HASH_ANNOTATION] = nodeclass_hash(nc)
            ann[NODECLASS_HASH_VERSION_ANNOTATION] = NODECLASS_HASH_VERSION
        return {"metadata": {"name": nodeclaim["metadata"]["name"], "labels": labels, "annotations": ann},
                "status": {"providerID": self.vm_provider_id(props.get("resourceId") or ""),
                           "imageID": props.get("nodeImageVersion") or "",
                           "capacity": format_resource_list(it.capacity),
                           "allocatable": format_resource_list(it.allocatable)}}

    # --- failures ---------------------------------------------------------------------------------
    def _refused(self, e: BaseException, claim: str, name: str, it: InstanceType, o: Offering) -> CloudProviderError:
        """The PUT was refused: an unsupported size is marked unavailable everywhere (both capacity types, 23
        hours), anything else is a launch error; the machine is deleted in case it was made."""
        code, message = error_code(e), error_message(e)
        self._delete_machine_now(name)
        if code == "VMSizeNotSupported" or (code == "BadRequest" and "is not supported for subscription" in message):
            for off in it.offerings:
                self.unavailable.mark(off.capacity_type, it.name, off.zone, SKU_NOT_AVAILABLE_ON_DEMAND_TTL)
            self._error("failed launching AKS machine", NodeClaim={"name": claim}, aksMachineName=name, code=code,
                        reason="SKUNotAvailable", error=message[:1200], unavailable=[f"{it.name} everywhere"])
            return InsufficientCapacityError(f"SKUNotAvailable: VM size {it.name} is not supported for this "
                                             "subscription in this location")
        self._error("failed launching AKS machine", NodeClaim={"name": claim}, aksMachineName=name, code=code,
                    error=message[:1200])
        return LaunchError("CreateInstanceFailed", f"{code}: {message[:1200]}")

    def _failed(self, m: dict | None, claim: str, name: str, it: InstanceType, o: Offering, late: bool,
                fallback: BaseException | None = None) -> CloudProviderError:
        """A machine that failed to provision: its provisioning error's first detail (the VM's error) is
        classified as a VM launch error; the machine is deleted, and the NodeClaim when it failed late."""
        err = ((m or {}).get("properties") or {}).get("status", {}).get("provisioningError") or {}
        inner = (err.get("details") or [None])[0] or err
        code = str(inner.get("code") or (error_code(fallback) if fallback is not None else ""))
        message = str(inner.get("message") or (error_message(fallback) if fallback is not None else ""))
        c = classify(code, message)
        info = self.types.info(it.name)
        zones = [off.zone for off in it.offerings if off.capacity_type == o.capacity_type]
        marks = self.unavailable.record(c, code, o.capacity_type, it.name, o.zone, zones,
                                        info.family if info else "", info.vcpus if info else 0, message)
        self._error("failed launching AKS machine", NodeClaim={"name": claim}, aksMachineName=name, code=code,
                    reason=c.reason, error=message[:1200], unavailable=marks, late=late)
        self._delete_machine_now(name)
        if late:
            self.delete_nodeclaim(claim)
        if c.capacity:
            return InsufficientCapacityError(f"{c.reason}: {code}: {message[:1200]}")
        return LaunchError(c.reason, f"{code}: {message[:1200]}")

    def _wait_machine(self, poller: Any, claim: str, name: str, it: InstanceType, o: Offering) -> None:
        try:
            poller.result()
        except Exception as e:  # noqa: BLE001 - read the machine's provisioning error, as upstream
            try:
                m = self._get_machine(name)
            except Exception:  # noqa: BLE001
                m = None
            self._failed(m, claim, name, it, o, late=True, fallback=e)
        finally:
            with self.lock:
                self.machines_pending.pop(name, None)

    def _delete_machine_now(self, name: str) -> None:
        try:
            self.machine_api.begin_delete([name]).result()
        except Exception as e:  # noqa: BLE001 - gone already, or garbage collection finds it
            if not is_not_found(e):
                self._error("failed deleting AKS machine", aksMachineName=name, error=error_message(e))

    # --- get / list / delete ----------------------------------------------------------------------
    def _as_machine_claim(self, m: dict) -> dict:
        """A machine as a NodeClaim (upstream's BuildNodeClaimFromAKSMachine), for Get, List and GC."""
        props = m.get("properties") or {}
        tags = props.get("tags") or {}
        zones = m.get("zones") or []
        zone = f"{self.s.location}-{zones[0]}" if zones else static.REGIONAL_ZONE
        ct = CAPACITY_SPOT if str(props.get("priority") or "").lower() == "spot" else CAPACITY_ON_DEMAND
        size = (props.get("hardware") or {}).get("vmSize") or ""
        labels = {LABEL_INSTANCE_TYPE: size, LABEL_ZONE: zone, LABEL_CAPACITY_TYPE: ct, LABEL_REGION: self.s.location,
                  static.LABEL_PLACEMENT_SCOPE: static.placement_scope(zone),
                  LABEL_ULTRA_SSD: str(bool((props.get("hardware") or {}).get("ultraSsdEnabled"))).lower()}
        if TAG_NODEPOOL in tags:
            labels[LABEL_NODEPOOL] = tags[TAG_NODEPOOL]
        meta: dict[str, Any] = {"name": tags.get(TAG_MACHINE_NODECLAIM) or m.get("name", ""), "labels": labels,
                                "annotations": {MACHINE_ANNOTATION: m.get("id", "")}}
        created = (props.get("status") or {}).get("creationTimestamp")
        if created:
            meta["creationTimestamp"] = created
        if _state(m) == "Deleting":
            meta["deletionTimestamp"] = "deleting"
        return {"metadata": meta, "status": {"providerID": self.vm_provider_id(props.get("resourceId") or ""),
                                             "imageID": props.get("nodeImageVersion") or ""}}

    def get(self, pid: str) -> dict:
        machine = machine_of_vm(self.pool_name, self.name_of(pid))
        if machine is None:
            return super().get(pid)
        m = self._get_machine(machine)
        if m is None:
            raise NodeClaimNotFoundError(f"AKS machine {machine} of instance {pid} not found")
        return self._as_machine_claim(m)

    def list(self) -> list[dict]:
        return [self._as_machine_claim(m) for m in self.machine_api.list()] + super().list()

    def delete(self, nodeclaim: dict) -> None:
        rid = ((nodeclaim.get("metadata") or {}).get("annotations") or {}).get(MACHINE_ANNOTATION)
        if not rid:
            return super().delete(nodeclaim)
        name = rid.rsplit("/", 1)[-1]
        with self.lock:
            if name in self.machines_deleting:
                return  # a delete of this machine is already running
        m = self._get_machine(name)
        if m is None:
            raise NodeClaimNotFoundError(f"AKS machine {name} not found")
        if _state(m) == "Deleting":
            return
        with self.lock:
            self.machines_deleting.add(name)
        self.pool.submit(self._delete_machine, name)

    def _delete_machine(self, name: str) -> None:
        try:
            self.machine_api.begin_delete([name]).result()
            self._info("deleted AKS machine", aksMachineName=name)
        except Exception as e:  # noqa: BLE001 - the engine calls delete again
            if not is_not_found(e):
                self._error("failed deleting AKS machine", aksMachineName=name, error=error_message(e))
        finally:
            with self.lock:
                self.machines_deleting.discard(name)

    # --- drift ------------------------------------------------------------------------------------
    def is_drifted(self, nodeclaim: dict, nodeclass: dict | None) -> str | None:
        """For machines, upstream's checks in its order: NodeClassDrift, K8sVersionDrift, ImageDrift (the
        machine's node image version is none of ``status.images``'), ClusterConfigDrift (AKS reports the
        machine's ``status.driftAction`` other than Synced); VMs as the VM provider."""
        ann = (nodeclaim.get("metadata") or {}).get("annotations") or {}
        if not ann.get(MACHINE_ANNOTATION):
            return super().is_drifted(nodeclaim, nodeclass)
        if nodeclass is None:
            return None
        image = (nodeclaim.get("status") or {}).get("imageID") or ""
        # the VM provider's NodeClass-hash and Kubernetes-version checks, without its image check
        reason = super().is_drifted({**nodeclaim, "status": {**(nodeclaim.get("status") or {}), "imageID": ""}},
                                    nodeclass)
        if reason in ("NodeClassDrift", "K8sVersionDrift"):
            return reason
        status = nodeclass.get("status") or {}
        images = status.get("images") or ()
        images_ready = all(c.get("status") == "True" for c in status.get("conditions") or ()
                           if c.get("type") == "ImagesReady")
        if image and images and images_ready:  # no image drift while the AKSNodeClass's images are not ready
            versions = set()
            for i in images:
                try:
                    versions.add(node_image_version(i.get("id", "")))
                except LaunchError:
                    continue
            if image not in versions:
                return "ImageDrift"
        m = self._get_machine(ann[MACHINE_ANNOTATION].rsplit("/", 1)[-1])
        action = ((m or {}).get("properties") or {}).get("status", {}).get("driftAction") or ""
        if action and action != "Synced":
            return "ClusterConfigDrift"
        return None



def _state(m: dict) -> str:
    return str(((m or {}).get("properties") or {}).get("provisioningState") or "")


def _kubelet_config(k: dict) -> dict[str, Any]:
    """The AKSNodeClass's ``spec.kubelet`` as the machine API's ``kubeletConfig``."""
    out: dict[str, Any] = {}
    for field, name in (("cpuManagerPolicy", "cpuManagerPolicy"), ("cpuCFSQuota", "cpuCfsQuota"),
                        ("topologyManagerPolicy", "topologyManagerPolicy"),
                        ("imageGCHighThresholdPercent", "imageGcHighThreshold"),
                        ("imageGCLowThresholdPercent", "imageGcLowThreshold"),
                        ("containerLogMaxFiles", "containerLogMaxFiles"), ("failSwapOn", "failSwapOn")):
        if k.get(field) not in (None, ""):
            out[name] = k[field]
    if k.get("cpuCFSQuotaPeriod"):
        out["cpuCfsQuotaPeriod"] = str(k["cpuCFSQuotaPeriod"])
    if k.get("allowedUnsafeSysctls"):
        out["allowedUnsafeSysctls"] = list(k["allowedUnsafeSysctls"])
    if k.get("containerLogMaxSize"):
        from ...resources import parse_quantity

        try:
            out["containerLogMaxSizeMB"] = int(parse_quantity(str(k["containerLogMaxSize"])) // (1024 * 1024))
        except Exception:  # noqa: BLE001 - the AKSNodeClass's validation names it
            pass
    if k.get("podPidsLimit") is not None:
        out["podMaxPids"] = int(k["podPidsLimit"])
    return out

