"""karpy's AWS CloudProvider: launch templates, CreateFleet, instances, drift, and its own controllers.

* **Create**: the NodeClass must be Ready (else NodeClassNotReadyError). The NodeClaim's offerings are
  ordered as upstream does (:func:`karpy.provisioning.launch.launch_candidates`: reserved, then spot, then
  on-demand; exotic types dropped), truncated to 60 types, grouped by the AMI each type matches, one launch
  template per group named ``karpenter.k8s.aws/<digest of its options>``; ``CreateFleet`` type ``instant``
  with one override per (type, zone subnet) and Priority = price, lowest-price on-demand or
  price-capacity-optimized spot, and upstream's tags on the instance, its volumes and the fleet. Fleet errors
  with a capacity code mark the offering unavailable for 3 minutes (``InsufficientFreeAddressesInSubnet`` its
  subnet); no instance at all is InsufficientCapacityError when every error is a capacity one, else
  :class:`LaunchError` with upstream's reason. The launch template's placement tenancy is ``default`` unless
  the NodeClaim allows only ``dedicated`` (label ``karpenter.k8s.aws/instance-tenancy``), as upstream.
* **Get / List / Delete** through DescribeInstances (tags ``karpenter.sh/nodepool``,
  ``karpenter.k8s.aws/ec2nodeclass``, ``eks:eks-cluster-name``) and TerminateInstances.
* **Drift**: AMI (the NodeClaim's ``status.imageID`` is not the AMI a launch would choose now), subnet, security
  groups (when the instance reports any); the static hash is judged by karpy's engine.
* **NodeOverlay prices** (gate ``NodeOverlay``): an offering that has no price (a preview type neither the Pricing
  API nor the spot history prices) takes the price of a validated NodeOverlay whose only requirement is
  ``node.kubernetes.io/instance-type In [...]`` and becomes available, as upstream's offering resolver does.
* Calls are batched (:mod:`.batcher`); launch templates unused for a minute are deleted
  (:meth:`EC2CloudProvider.collect_launch_templates`); capacity reservations give ``reserved`` offerings.
  The controllers are in :mod:`.controllers`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time
from typing import Any, Callable

from ...scheduling.requirements import Requirements
from ..provider import CloudProviderError, InsufficientCapacityError, NodeClaimNotFoundError, NodeClassNotReadyError
from ..types import (
    CAPACITY_ON_DEMAND,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_REGION,
    LABEL_ZONE,
    InstanceType,
    Offering,
)
from .. import aws as static
from .. import kubelet_cel
from .instancetypes import eni_limits, supports_interfaces
from .batcher import create_fleet_batcher, describe_instances_batcher, terminate_instances_batcher
from .clients import ICE_CODES, LAUNCH_REASONS, error_code, error_message, is_not_found
from .nodeclass import HASH_ANNOTATION, HASH_VERSION, HASH_VERSION_ANNOTATION, hash_annotations
from .userdata import Bootstrap, render

ICE_TTL = 180.0
MAX_TYPES = 60
LT_TTL = 60.0  # seconds an unused launch template is kept (upstream's cache TTL)
TYPES_TTL = 300.0  # seconds a NodeClass's instance-type list is reused
LT_PREFIX = "karpenter.k8s.aws/"
TAG_NODEPOOL = "karpenter.sh/nodepool"
TAG_NODECLAIM = "karpenter.sh/nodeclaim"
TAG_NODECLASS = "karpenter.k8s.aws/ec2nodeclass"
TAG_CLUSTER_NAME = "eks:eks-cluster-name"
PROFILE_ANNOTATION = "karpenter.k8s.aws/instance-profile-name"
PRICE_ANNOTATION = "karpy.dev/price-per-hour"
LIVE_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]


class LaunchError(CloudProviderError):
    """CreateFleet launched nothing for a reason other than capacity (upstream's CreateError)."""

    def __init__(self, reason: str, message: str):
        super().__init__(f"{reason}: {message}")
        self.reason = reason


def provider_id(zone: str, instance_id: str) -> str:
    return f"aws:///{zone}/{instance_id}"


def instance_id_of(pid: str) -> str:
    return pid.rsplit("/", 1)[-1]


def digest(value: Any) -> str:
    """A stable digest of JSON-able options (the same in every process, unlike Python's hash())."""
    return str(int(hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16], 16))


def tenancy_of(reqs: Requirements) -> str:
    """The tenancy a NodeClaim launches with (upstream's getTenancyType): default when its requirements allow
    it, else dedicated when they allow that, else default."""
    allowed = reqs.get(static.LABEL_INSTANCE_TENANCY)
    return next((t for t in ("default", "dedicated") if allowed.has(t)), "default")


def efa_interfaces(nc: dict, claim_spec: dict, it: InstanceType) -> int:
    """EFA interfaces a launch of ``it`` attaches (upstream): the type's vpc.amazonaws.com/efa when the NodeClaim
    requests that resource or the EC2NodeClass lists networkInterfaces, else none."""
    requested = static.RESOURCE_EFA in (((claim_spec.get("resources") or {}).get("requests")) or {})
    if not requested and (nc.get("spec") or {}).get("networkInterfaces") is None:
        return 0
    return int(it.capacity.get(static.RESOURCE_EFA, 0))


def network_interfaces(spec: dict, groups: list[str], efas: int) -> list[dict]:
    """The launch template's network interfaces, as upstream: the EC2NodeClass's ``networkInterfaces`` when it
    lists some (EFA-only ones without a public address), else one EFA interface per network card for ``efas``
    (device index 0 on card 0, 1 on the others), else one interface at device index 0."""
    public = ({"AssociatePublicIpAddress": spec["associatePublicIPAddress"]}
              if spec.get("associatePublicIPAddress") is not None else {})
    listed = spec.get("networkInterfaces") or []
    if listed:
        return [{"NetworkCardIndex": int(n.get("networkCardIndex") or 0), "DeviceIndex": int(n.get("deviceIndex") or 0),
                 "InterfaceType": n.get("interfaceType", "interface"), "Groups": groups,
                 **(public if n.get("interfaceType") != "efa-only" else {})} for n in listed]
    if efas:
        return [{"NetworkCardIndex": i, "DeviceIndex": 0 if i == 0 else 1, "InterfaceType": "efa", "Groups": groups,
                 **public} for i in range(efas)]
    return [{"DeviceIndex": 0, "Groups": groups, **public}]


def _matches(reqs: list[dict], it: InstanceType) -> bool:
    for r in reqs:
        v = it.labels.get(r["key"])
        op = r["operator"]
        if op == "In" and v not in (r.get("values") or ()):
            return False
        if op == "Exists" and v in (None, "0"):
            return False
        if op == "DoesNotExist" and v not in (None, "0"):
            return False
    return True


class EC2CloudProvider:
    name = "aws"

    def __init__(self, clients: Any, settings: Any, instance_types: Any, nodeclass_lookup: Callable[[str, str], dict | None],
                 cluster: Callable[[], dict], now: Callable[[], float] = time.time, recorder: Any = None, log: Any = None):
        self.c = clients
        self.settings = settings
        self.types = instance_types
        self.lookup = nodeclass_lookup
        self.cluster = cluster  # {"endpoint", "ca", "cidr", "dns"}
        self.now = now
        self.recorder = recorder
        self.log = log
        self.ice: dict[tuple[str, str, str], float] = {}
        self.ice_seq = 0
        self.lts: dict[str, float] = {}  # launch template name -> last use
        self.launched: dict[str, float] = {}  # instance id -> launch time (this process)
        self.lock = threading.RLock()
        self._interruptions: list[dict] = []
        self._subscribers: list[Callable[[], None]] = []
        self._recreate: dict[str, Callable[[], None]] = {}  # launch template name -> create it again
        self._types_cache: dict[tuple, tuple[float, list[InstanceType]]] = {}
        self._types_lock = threading.Lock()
        self._lt_lock = threading.Lock()
        self.reservations: dict[str, int] = {}  # capacity reservation id -> free instances (the NodeClass status pass)
        self.reserved_capacity = True  # feature gate ReservedCapacity: off, reservations give no offering
        self.gates: dict[str, bool] = {}  # the feature gates that change instance types (NodeClassCEL)
        self.overlays: Callable[[], list[dict]] = lambda: []  # the cluster's NodeOverlays (gate NodeOverlay)
        self.fleets = create_fleet_batcher(clients)
        self.describes = describe_instances_batcher(clients)
        self.terminations = terminate_instances_batcher(clients)

    # --- catalog ----------------------------------------------------------------------------------
    def serves(self, ref: dict | None) -> bool:
        return ((ref or {}).get("kind") or "EC2NodeClass") == "EC2NodeClass"

    def _nodeclass(self, ref: dict | None) -> dict | None:
        return self.lookup("EC2NodeClass", (ref or {}).get("name", ""))

    def unavailable(self, name: str, zone: str, ct: str) -> bool:
        t = self.ice.get((ct, name, zone))
        return t is not None and t > self.now()

    def ice_key(self) -> tuple:
        now = self.now()
        return tuple(sorted(k for k, t in self.ice.items() if t > now))

    def mark_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> None:
        with self.lock:
            self.ice[(capacity_type, instance_type, zone)] = self.now() + ICE_TTL
            self.ice_seq += 1

    def get_instance_types(self, nodepool: dict, nodeclass: dict | None) -> list[InstanceType]:
        """The NodeClass's instance types, kept 5 minutes (upstream's cache) while the catalog, prices, the
        NodeClass and the unavailable offerings stay the same."""
        self.types.refresh()
        nc = nodeclass or {}
        st = nc.get("status") or {}
        crs = st.get("capacityReservations") or []
        overlay_prices = self.overlay_prices()
        key = (self.types.version, self.ice_key(), tuple(sorted((r["id"], self.reservation_left(r["id"])) for r in crs)),
               digest([nc.get("spec"), st.get("amis"), st.get("subnets"), crs, (nc.get("metadata") or {}).get("name")]),
               tuple(sorted(overlay_prices.items())))
        now = self.now()
        with self._types_lock:  # concurrent callers wait for one computation
            hit = self._types_cache.get(key)
            if hit is not None and now - hit[0] < TYPES_TTL:
                return hit[1]
            out = self._with_reservations(self._overlay_priced(self.types.list(nodeclass, self.unavailable, self.gates),
                                                               nc, overlay_prices), crs)
            self._types_cache = {k: v for k, v in self._types_cache.items() if now - v[0] < TYPES_TTL}
            self._types_cache[key] = (now, out)
        return out

    def overlay_prices(self) -> dict[str, float]:
        """Instance type -> price of the validated NodeOverlays (gate NodeOverlay) that set a ``price`` with a single
        ``node.kubernetes.io/instance-type In`` requirement: upstream's prices for types no price list covers."""
        if not self.gates.get("NodeOverlay"):
            return {}
        out: dict[str, float] = {}
        for ov in self.overlays() or ():
            conds = (ov.get("status") or {}).get("conditions") or ()
            if not any(c.get("type") == "ValidationSucceeded" and c.get("status") == "True" for c in conds):
                continue
            spec = ov.get("spec") or {}
            reqs = spec.get("requirements") or []
            if spec.get("price") is None or len(reqs) != 1 or reqs[0].get("key") != LABEL_INSTANCE_TYPE \
                    or reqs[0].get("operator") != "In":
                continue
            try:
                price = float(spec["price"])
            except (TypeError, ValueError):
                continue
            for name in reqs[0].get("values") or ():
                out[str(name)] = price
        return out

    def _overlay_priced(self, types: list[InstanceType], nc: dict, prices: dict[str, float]) -> list[InstanceType]:
        """Offerings EC2 prices nowhere, of types a NodeOverlay prices: that price, available unless their capacity
        is known unavailable or the type cannot take the NodeClass's network interfaces."""
        if not prices:
            return types
        interfaces = (nc.get("spec") or {}).get("networkInterfaces")
        out = []
        for it in types:
            price = prices.get(it.name)
            info = self.types.infos.get(it.name)
            if price is None or info is None or not supports_interfaces(info, interfaces):
                out.append(it)
                continue
            unpriced = [o for o in it.offerings if not o.available and o.reservation_id is None and (
                self.types.on_demand.get(it.name) if o.capacity_type == CAPACITY_ON_DEMAND
                else self.types.spot_price(it.name, o.zone)) is None and not self.unavailable(it.name, o.zone, o.capacity_type)]
            if not unpriced:
                out.append(it)
                continue
            keys = {id(o) for o in unpriced}
            out.append(dataclasses.replace(it, offerings=[dataclasses.replace(o, price=price, available=True)
                                                          if id(o) in keys else o for o in it.offerings]))
        return out

    def reservation_left(self, rid: str) -> int:
        return self.reservations.get(rid, 0)

    def _with_reservations(self, types: list[InstanceType], crs: list[dict]) -> list[InstanceType]:
        """A ``reserved`` offering per selected capacity reservation (upstream: priced at the on-demand price
        / 10,000,000, available while the reservation has room and is not expiring); none with the gate off."""
        if not crs or not self.reserved_capacity:
            return types
        by_type: dict[str, list[dict]] = {}
        for r in crs:
            by_type.setdefault(r["instanceType"], []).append(r)
        out = []
        for it in types:
            rs = by_type.get(it.name)
            if rs:
                od = {o.zone: o for o in it.offerings if o.capacity_type == "on-demand"}
                extra = [Offering(r["availabilityZone"], "reserved", od[r["availabilityZone"]].price / 10_000_000,
                                  available=r.get("state") == "active" and self.reservation_left(r["id"]) > 0,
                                  reservation_id=r["id"], reservation_capacity=max(self.reservation_left(r["id"]), 0))
                         for r in rs if r["availabilityZone"] in od]
                it = dataclasses.replace(it, offerings=[*it.offerings, *extra])
            out.append(it)
        return out

    def well_known_labels(self, nodepool: dict) -> frozenset[str]:
        return static.AWSProvider.WELL_KNOWN_LABELS

    def registration_delay(self, ref: dict | None, nodeclass: dict | None) -> float:
        return static.AWSProvider.DEFAULT_REGISTRATION_DELAY

    # --- launch -----------------------------------------------------------------------------------
    def create(self, nodeclaim: dict) -> dict:
        spec = nodeclaim.get("spec") or {}
        ref = spec.get("nodeClassRef") or {}
        nc = self._nodeclass(ref)
        if nc is None:
            raise InsufficientCapacityError(f'resolving node class from nodeclaim, EC2NodeClass "{ref.get("name", "")}" not found')
        ready = next((c for c in (nc.get("status") or {}).get("conditions") or () if c.get("type") == "Ready"), None)
        if ready is None or ready.get("status") != "True":
            raise NodeClassNotReadyError(f'EC2NodeClass "{ref.get("name")}" is not ready'
                                         + (f": {ready.get('message')}" if ready and ready.get("message") else ""))
        from ...provisioning.launch import launch_candidates

        reqs = Requirements.from_node_selector(spec.get("requirements") or ())
        allowed = reqs.get(LABEL_INSTANCE_TYPE)
        types = [it for it in self.get_instance_types({}, nc) if allowed.has(it.name)]
        cands = launch_candidates(reqs, types, lambda it, o: self.unavailable(it.name, o.zone, o.capacity_type),
                                  keep_exotic_with_min_values=True)
        if not cands:
            raise InsufficientCapacityError("all requested instance types were unavailable during launch")
        names: list[str] = []
        for cand in cands:
            if cand.instance_type.name not in names:
                names.append(cand.instance_type.name)
        names = names[:MAX_TYPES]
        cands = [c for c in cands if c.instance_type.name in names]
        ct = cands[0].offering.capacity_type
        cands = [c for c in cands if c.offering.capacity_type == ct]  # one capacity type per fleet, as upstream
        status = nc.get("status") or {}
        subnet_by_zone: dict[str, dict] = {}
        for s in status.get("subnets") or ():  # ordered by free addresses: the first per zone
            subnet_by_zone.setdefault(s["zone"], s)
        labels_base = self._launch_labels(nodeclaim, reqs)
        tenancy = tenancy_of(reqs)
        tags = self._tags(nodeclaim, nc)
        configs: dict[str, dict] = {}
        for cand in cands:
            it, o = cand.instance_type, cand.offering
            subnet = subnet_by_zone.get(o.zone)
            ami = next((a for a in status.get("amis") or () if _matches(a.get("requirements") or [], it)), None)
            if subnet is None or ami is None:
                continue
            lt = self._ensure_launch_template(nc, ami["id"], it, labels_base, spec, tags, o.reservation_id, tenancy)
            configs.setdefault(lt, {"LaunchTemplateSpecification": {"LaunchTemplateName": lt, "Version": "$Latest"},
                                    "Overrides": []})["Overrides"].append(
                {"InstanceType": it.name, "SubnetId": subnet["id"], "ImageId": ami["id"], "AvailabilityZone": o.zone,
                 "Priority": round(o.price, 6)})
        if not configs:
            raise InsufficientCapacityError("no subnet or AMI for any offering of the requested instance types")
        req: dict[str, Any] = {
            "Type": "instant", "LaunchTemplateConfigs": list(configs.values()),
            "TargetCapacitySpecification": {"TotalTargetCapacity": 1,
                                            "DefaultTargetCapacityType": "spot" if ct == "spot" else "on-demand"},
            "TagSpecifications": [{"ResourceType": r, "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())]}
                                  for r in ("instance", "volume", "fleet")]}
        if ct == "spot":
            req["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized"}
        else:
            req["OnDemandOptions"] = {"AllocationStrategy": "lowest-price"}
        if spec.get("context") or (nc.get("spec") or {}).get("context"):
            req["Context"] = (nc.get("spec") or {}).get("context")
        out = self._create_fleet(req)
        inst = next(iter(out.get("Instances") or ()), None)
        self._handle_fleet_errors(out.get("Errors") or [], ct)
        if not inst or not inst.get("InstanceIds"):
            errs = out.get("Errors") or []
            if errs and all(e.get("ErrorCode") in ICE_CODES for e in errs) or not errs:
                raise InsufficientCapacityError("; ".join(sorted({f"{e.get('ErrorCode')}: {e.get('ErrorMessage')}" for e in errs}))
                                                or "CreateFleet launched no instance")
            e = errs[0]
            raise LaunchError(LAUNCH_REASONS.get(e.get("ErrorCode", ""), "LaunchFailed"), e.get("ErrorMessage", ""))
        iid = inst["InstanceIds"][0]
        ov = (inst.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        it = next(t for t in types if t.name == (ov.get("InstanceType") or inst.get("InstanceType")))
        zone = ov.get("AvailabilityZone") or next(c.offering.zone for c in cands if c.instance_type.name == it.name)
        offering = next((c.offering for c in cands if c.instance_type.name == it.name and c.offering.zone == zone), cands[0].offering)
        with self.lock:
            self.launched[iid] = self.now()
            if offering.reservation_id:  # one place fewer until the next NodeClass pass counts again
                self.reservations[offering.reservation_id] = max(0, self.reservation_left(offering.reservation_id) - 1)
        return self._as_nodeclaim(nodeclaim["metadata"]["name"], iid, it, offering, ov.get("ImageId", ""),
                                  labels_base, nc, tenancy)

    def _create_fleet(self, req: dict) -> dict:
        try:
            return self.fleets.add(req)
        except Exception as e:  # noqa: BLE001
            if error_code(e) != "InvalidLaunchTemplateName.NotFoundException":
                raise LaunchError(LAUNCH_REASONS.get(error_code(e), "LaunchFailed"), error_message(e)) from None
        with self.lock:  # a launch template was deleted under us: create it again, retry once
            self.lts.clear()
        for cfg in req["LaunchTemplateConfigs"]:
            self._recreate.get(cfg["LaunchTemplateSpecification"]["LaunchTemplateName"], lambda: None)()
        try:
            return self.fleets.add(req)
        except Exception as e:  # noqa: BLE001
            raise LaunchError(LAUNCH_REASONS.get(error_code(e), "LaunchFailed"), error_message(e)) from None

    def _handle_fleet_errors(self, errors: list[dict], ct: str) -> None:
        for e in errors:
            code = e.get("ErrorCode", "")
            ov = (e.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
            if code in ICE_CODES and ov.get("InstanceType") and ov.get("AvailabilityZone"):
                self.mark_unavailable(ov["InstanceType"], ov["AvailabilityZone"], ct)
                if self.log is not None:
                    self.log.info("removing offering from offerings", controller="cloudprovider", reason=code,
                                  instance_type=ov["InstanceType"], zone=ov["AvailabilityZone"], capacity_type=ct, ttl="3m0s")
            elif code == "AuthFailure.ServiceLinkedRoleCreationNotPermitted":
                for it in self.types.infos:
                    for z in {z for zs in self.types.zones.values() for z in zs}:
                        self.ice[("spot", it, z)] = self.now() + ICE_TTL
                self.ice_seq += 1

    def _launch_labels(self, nodeclaim: dict, reqs: Requirements) -> dict[str, str]:
        labels = dict((nodeclaim.get("metadata") or {}).get("labels") or {})
        labels.update(reqs.labels())
        return labels

    def _cel_variables(self, it: InstanceType) -> kubelet_cel.InstanceTypeVars:
        """What a kubelet expression sees for the type a NodeClaim launches on (its resolved pods as max_pods)."""
        enis, ips = eni_limits(self.types.infos.get(it.name) or {})
        return kubelet_cel.InstanceTypeVars(
            vcpus=int(it.labels.get(static.LABEL_INSTANCE_CPU) or 0),
            memory_mib=int(it.labels.get(static.LABEL_INSTANCE_MEMORY) or 0), default_enis=enis, ips_per_eni=ips,
            max_pods=int(it.capacity.get("pods") or 0), instance_type=it.name)

    def _tags(self, nodeclaim: dict, nc: dict) -> dict[str, str]:
        name = self.settings.cluster_name
        labels = (nodeclaim.get("metadata") or {}).get("labels") or {}
        return {**{str(k): str(v) for k, v in ((nc.get("spec") or {}).get("tags") or {}).items()},
                f"kubernetes.io/cluster/{name}": "owned", TAG_CLUSTER_NAME: name,
                TAG_NODEPOOL: labels.get(LABEL_NODEPOOL, ""), TAG_NODECLASS: nc["metadata"]["name"]}

    def _ensure_launch_template(self, nc: dict, ami: str, it: InstanceType, labels: dict, claim_spec: dict,
                                tags: dict, reservation: str | None = None, tenancy: str = "default") -> str:
        spec = nc.get("spec") or {}
        status = nc.get("status") or {}
        family = static.ami_family_name(nc)
        kubelet = dict(spec.get("kubelet") or {})
        max_pods = it.capacity.get("pods")
        for key in ("kubeReserved", "systemReserved"):  # expressions resolved for this type (gate NodeClassCEL)
            if kubelet.get(key):
                kubelet[key] = kubelet_cel.reserved_for_launch(kubelet[key], bool(self.gates.get(kubelet_cel.GATE)),
                                                               lambda: self._cel_variables(it))
        cluster = self.cluster()
        node_labels = {k: v for k, v in labels.items() if not (k.startswith("kubernetes.io/") or ".kubernetes.io/" in k
                                                              or k.startswith("k8s.io/") or ".k8s.io/" in k)}
        node_labels[LABEL_CAPACITY_TYPE] = labels.get(LABEL_CAPACITY_TYPE, "")
        node_labels.pop(LABEL_CAPACITY_TYPE) if not node_labels[LABEL_CAPACITY_TYPE] else None
        if family != "Custom":
            node_labels["karpenter.sh/do-not-sync-taints"] = "true"
        taints = [*(claim_spec.get("taints") or ()), *(claim_spec.get("startupTaints") or ()),
                  {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]
        boot = Bootstrap(self.settings.cluster_name, cluster.get("endpoint", ""), cluster.get("ca", ""), cluster.get("cidr"),
                         node_labels, taints, max_pods,
                         {k: v for k, v in kubelet.items() if k not in ("maxPods",)}, cluster.get("dns"), spec.get("userData"))
        meta = spec.get("metadataOptions") or {}
        data = {
            "ImageId": ami, "UserData": render(family, boot),
            "IamInstanceProfile": {"Name": status.get("instanceProfile", "")},
            "MetadataOptions": {"HttpEndpoint": meta.get("httpEndpoint", "enabled"),
                                "HttpProtocolIpv6": meta.get("httpProtocolIPv6", "disabled"),
                                "HttpPutResponseHopLimit": int(meta.get("httpPutResponseHopLimit", 1)),
                                "HttpTokens": meta.get("httpTokens", "required"), "InstanceMetadataTags": "disabled"},
            "NetworkInterfaces": network_interfaces(spec, [g["id"] for g in status.get("securityGroups") or ()],
                                                    efa_interfaces(nc, claim_spec, it)),
            "BlockDeviceMappings": [{"DeviceName": b.get("deviceName"), "Ebs": {
                k2: v for k2, v in {"VolumeSize": _gib((b.get("ebs") or {}).get("volumeSize")),
                                    "VolumeType": (b.get("ebs") or {}).get("volumeType"),
                                    "Encrypted": (b.get("ebs") or {}).get("encrypted"),
                                    "DeleteOnTermination": (b.get("ebs") or {}).get("deleteOnTermination")}.items()
                if v is not None}} for b in spec.get("blockDeviceMappings") or ()]
            or [{"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 20, "VolumeType": "gp3", "Encrypted": True}}],
            "Monitoring": {"Enabled": bool(spec.get("detailedMonitoring"))},
            "Placement": {"Tenancy": tenancy},
            "TagSpecifications": [{"ResourceType": "network-interface",
                                   "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())]}],
        }
        if reservation:  # a launch into a capacity reservation: only that reservation (one template each)
            data["CapacityReservationSpecification"] = {
                "CapacityReservationPreference": "capacity-reservations-only",
                "CapacityReservationTarget": {"CapacityReservationId": reservation}}
        name = LT_PREFIX + digest(data)
        with self.lock:
            if name in self.lts:
                self.lts[name] = self.now()
                return name

        def create() -> None:
            try:
                self.c.ec2.create_launch_template(
                    LaunchTemplateName=name, LaunchTemplateData=data,
                    TagSpecifications=[{"ResourceType": "launch-template", "Tags": [
                        {"Key": k, "Value": v} for k, v in sorted(tags.items()) if k != TAG_NODEPOOL]}])
            except Exception as e:  # noqa: BLE001
                if error_code(e) != "InvalidLaunchTemplateName.AlreadyExistsException":
                    raise LaunchError(LAUNCH_REASONS.get(error_code(e), "LaunchFailed"), error_message(e)) from None

        with self._lt_lock:  # one lookup (and creation) per template, however many launches want it
            with self.lock:
                if name in self.lts:
                    self.lts[name] = self.now()
                    return name
            try:
                self.c.ec2.describe_launch_templates(LaunchTemplateNames=[name])
            except Exception as e:  # noqa: BLE001
                if not is_not_found(e):
                    raise LaunchError(LAUNCH_REASONS.get(error_code(e), "LaunchFailed"), error_message(e)) from None
                create()
            self._recreate[name] = create
            with self.lock:
                self.lts[name] = self.now()
        return name

    # --- launch template garbage collection ----------------------------------------------------------
    def hydrate_launch_templates(self) -> int:
        """Learn the launch templates karpy made for this cluster (after a restart): each is kept one more
        TTL from now, then collected unless a launch uses it."""
        found = 0
        pages = self.c.ec2.get_paginator("describe_launch_templates").paginate(
            Filters=[{"Name": f"tag:{TAG_CLUSTER_NAME}", "Values": [self.settings.cluster_name]}],
            PaginationConfig={"PageSize": 200})
        now = self.now()
        for page in pages:
            for lt in page.get("LaunchTemplates") or ():
                if lt.get("LaunchTemplateName", "").startswith(LT_PREFIX):
                    with self.lock:
                        self.lts.setdefault(lt["LaunchTemplateName"], now)
                    found += 1
        return found

    def collect_launch_templates(self) -> list[str]:
        """Delete the launch templates no launch used for LT_TTL (an AMI, security group, user data or
        kubelet setting that changed leaves its old templates unused); the deleted names."""
        now = self.now()
        with self._lt_lock, self.lock:
            stale = [n for n, t in self.lts.items() if now - t >= LT_TTL]
            for n in stale:
                del self.lts[n]
                self._recreate.pop(n, None)
        gone = []
        for n in stale:
            try:
                self.c.ec2.delete_launch_template(LaunchTemplateName=n)
            except Exception as e:  # noqa: BLE001
                if not is_not_found(e):
                    if self.log is not None:
                        self.log.error("failed to delete launch template", controller="launchtemplate.garbagecollection",
                                       **{"launch-template": n}, error=error_message(e))
                    continue
            gone.append(n)
        return gone

    def delete_launch_templates(self, nodeclass_name: str) -> list[str]:
        """Delete every launch template karpy made for a NodeClass (its finalizer)."""
        names = []
        pages = self.c.ec2.get_paginator("describe_launch_templates").paginate(
            Filters=[{"Name": f"tag:{TAG_CLUSTER_NAME}", "Values": [self.settings.cluster_name]},
                     {"Name": f"tag:{TAG_NODECLASS}", "Values": [nodeclass_name]}], PaginationConfig={"PageSize": 200})
        for page in pages:
            names.extend(lt["LaunchTemplateName"] for lt in page.get("LaunchTemplates") or ())
        for n in names:
            try:
                self.c.ec2.delete_launch_template(LaunchTemplateName=n)
            except Exception as e:  # noqa: BLE001
                if not is_not_found(e):
                    raise
            with self._lt_lock, self.lock:
                self.lts.pop(n, None)
                self._recreate.pop(n, None)
        return names

    def create_tags(self, pid: str, tags: dict[str, str]) -> dict[str, str]:
        """Add the tags the instance lacks (it is read again first); the tags added."""
        inst = self._instance(pid)
        have = {t["Key"] for t in inst.get("Tags") or ()}
        missing = {k: v for k, v in tags.items() if k not in have}
        if missing:
            self.c.ec2.create_tags(Resources=[inst["InstanceId"]],
                                   Tags=[{"Key": k, "Value": v} for k, v in sorted(missing.items())])
        return missing

    def _as_nodeclaim(self, name: str, iid: str, it: InstanceType, o: Offering, image: str, labels: dict,
                      nc: dict | None, tenancy: str = "default") -> dict:
        from ...resources import format_resource_list

        zone_ids = {s["zone"]: s.get("zoneID", "") for s in ((nc or {}).get("status") or {}).get("subnets") or ()}
        out_labels = {**labels, **it.labels, LABEL_ZONE: o.zone, LABEL_CAPACITY_TYPE: o.capacity_type,
                      LABEL_REGION: self.c.region, static.LABEL_INSTANCE_TENANCY: tenancy}
        if zone_ids.get(o.zone):
            out_labels[static.LABEL_TOPOLOGY_ZONE_ID] = zone_ids[o.zone]
        if o.reservation_id:
            cr = next((r for r in ((nc or {}).get("status") or {}).get("capacityReservations") or ()
                       if r["id"] == o.reservation_id), {})
            out_labels[static.LABEL_CAPACITY_RESERVATION_ID] = o.reservation_id
            out_labels[static.LABEL_CAPACITY_RESERVATION_TYPE] = cr.get("reservationType", "default")
        ann = {PRICE_ANNOTATION: f"{o.price:.4f}"}
        if nc is not None:
            ann.update(hash_annotations(nc))
            if ((nc.get("status") or {}).get("instanceProfile")):
                ann[PROFILE_ANNOTATION] = nc["status"]["instanceProfile"]
        return {"metadata": {"name": name, "labels": out_labels, "annotations": ann},
                "status": {"providerID": provider_id(o.zone, iid), "imageID": image,
                           "capacity": format_resource_list(it.capacity),
                           "allocatable": format_resource_list(it.allocatable)}}

    # --- get / list / delete ----------------------------------------------------------------------
    def _describe(self, **kw: Any) -> list[dict]:
        if kw.get("InstanceIds"):  # lookups by id share one call (see .batcher)
            return [i for r in self.describes.add(kw) for i in r.get("Instances", [])]
        out = []
        for page in self.c.ec2.get_paginator("describe_instances").paginate(**kw):
            for r in page.get("Reservations", []):
                out.extend(r.get("Instances", []))
        return out

    def _instance(self, pid: str) -> dict:
        try:
            found = self._describe(InstanceIds=[instance_id_of(pid)],
                                   Filters=[{"Name": "instance-state-name", "Values": LIVE_STATES}])
        except Exception as e:  # noqa: BLE001
            if is_not_found(e):
                raise NodeClaimNotFoundError(f"instance {pid} not found") from None
            raise
        if not found:
            raise NodeClaimNotFoundError(f"instance {pid} not found")
        return found[0]

    def _instance_claim(self, inst: dict) -> dict:
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags") or ()}
        zone = (inst.get("Placement") or {}).get("AvailabilityZone", "")
        spot = inst.get("SpotInstanceRequestId") or inst.get("InstanceLifecycle") == "spot"
        ct = "spot" if spot else "on-demand"
        # as upstream: an instance launched into a reservation (only) and still in it is reserved; once EC2 reports
        # it in none (the reservation ended, the instance runs on), on-demand
        if not spot and self.reserved_capacity and inst.get("CapacityReservationId") and \
                (inst.get("CapacityReservationSpecification") or {}).get("CapacityReservationPreference") == \
                "capacity-reservations-only":
            ct = "reserved"
        labels = {LABEL_INSTANCE_TYPE: inst.get("InstanceType", ""), LABEL_ZONE: zone,
                  LABEL_CAPACITY_TYPE: ct, LABEL_NODEPOOL: tags.get(TAG_NODEPOOL, "")}
        meta: dict[str, Any] = {"name": tags.get(TAG_NODECLAIM, ""), "labels": labels}
        if (inst.get("State") or {}).get("Name") in ("shutting-down", "terminated"):
            meta["deletionTimestamp"] = "terminating"
        return {"metadata": meta, "status": {"providerID": provider_id(zone, inst["InstanceId"]),
                                             "imageID": inst.get("ImageId", "")},
                "_instance": inst}

    def get(self, pid: str) -> dict:
        c = self._instance_claim(self._instance(pid))
        c.pop("_instance")
        return c

    def list(self) -> list[dict]:
        out = []
        for inst in self._describe(Filters=[{"Name": "tag-key", "Values": [TAG_NODEPOOL]},
                                            {"Name": "tag-key", "Values": [TAG_NODECLASS]},
                                            {"Name": f"tag:{TAG_CLUSTER_NAME}", "Values": [self.settings.cluster_name]},
                                            {"Name": "instance-state-name", "Values": LIVE_STATES}]):
            c = self._instance_claim(inst)
            c["launchTime"] = inst.get("LaunchTime")
            c.pop("_instance")
            out.append(c)
        return out

    def delete(self, nodeclaim: dict) -> None:
        pid = (nodeclaim.get("status") or {}).get("providerID") or ""
        inst = self._instance(pid)
        if (inst.get("State") or {}).get("Name") == "shutting-down":
            return
        try:
            self.terminations.add({"InstanceIds": [inst["InstanceId"]]})
        except Exception as e:  # noqa: BLE001
            if is_not_found(e):
                raise NodeClaimNotFoundError(f"instance {pid} not found") from None
            raise
        if self.log is not None:
            self.log.info("terminated instance", controller="cloudprovider", **{"provider-id": pid})

    def offering_of(self, pid: str) -> None:
        return None

    # --- drift ------------------------------------------------------------------------------------
    def is_drifted(self, nodeclaim: dict, nodeclass: dict | None) -> str | None:
        if nodeclass is None:
            return None
        status = nodeclass.get("status") or {}
        pid = (nodeclaim.get("status") or {}).get("providerID") or ""
        ann = (nodeclaim.get("metadata") or {}).get("annotations") or {}
        # the hash the NodeClass controller stamped on the EC2NodeClass (karpy's own NodeClass hash while it has
        # not stamped one yet): compared only when both carry a hash and the same hash version, as upstream
        stamped = (nodeclass.get("metadata") or {}).get("annotations") or {}
        if HASH_ANNOTATION in stamped or HASH_VERSION_ANNOTATION in stamped:
            class_hash, class_version = stamped.get(HASH_ANNOTATION), stamped.get(HASH_VERSION_ANNOTATION)
        else:
            class_hash, class_version = hash_annotations(nodeclass)[HASH_ANNOTATION], HASH_VERSION
        if None not in (class_hash, class_version, ann.get(HASH_ANNOTATION)) and \
                ann.get(HASH_VERSION_ANNOTATION) == class_version and ann[HASH_ANNOTATION] != class_hash:
            return "NodeClassDrift"
        try:
            inst = self._instance(pid)
        except NodeClaimNotFoundError:
            return None
        # upstream's order: AMI, security groups, subnet, capacity reservation
        # the NodeClaim's instance type is its instance-type label, as upstream reads it (not the instance's own
        # type): a NodeClaim without the label, or naming a type the NodeClass no longer offers, is an error
        # upstream, so no drift decision is made
        name = ((nodeclaim.get("metadata") or {}).get("labels") or {}).get(LABEL_INSTANCE_TYPE)
        if not name:
            return None
        # every type the NodeClass allows whatever its AMIs (karpy's listing drops types no AMI fits)
        unfiltered = {**nodeclass, "status": {**status, "amis": []}}
        it = next((t for t in self.get_instance_types({}, unfiltered) if t.name == name), None)
        if it is None:
            return None
        amis = status.get("amis") or ()
        if not amis:  # upstream errors ("no amis exist given constraints"): no drift decision, nothing else checked
            return None
        # the image the NodeClaim was launched with, as its status records it (upstream reads it there, not from
        # the instance); without one upstream errors, so no drift decision is made
        image = (nodeclaim.get("status") or {}).get("imageID") or ""
        if not image:
            return None
        # the AMI a launch would choose for the instance's type now (the first whose requirements it meets),
        # so an AMI still listed but no longer applying to this type drifts too
        ami = next((a for a in amis if _matches(a.get("requirements") or [], it)), None)
        if ami is None or image != ami["id"]:
            return "AMIDrift"
        groups = {g["GroupId"] for g in inst.get("SecurityGroups") or ()}
        want = {g["id"] for g in status.get("securityGroups") or ()}
        if groups and want and groups != want:  # an instance always has a group; none reported is "unknown"
            return "SecurityGroupDrift"
        subnets = {s["id"] for s in status.get("subnets") or ()}
        if subnets and inst.get("SubnetId") and inst["SubnetId"] not in subnets:
            return "SubnetDrift"
        # the reservation the instance is in, as EC2 reports it: an instance that fell back to on-demand has none
        rid = inst.get("CapacityReservationId")
        if rid and rid not in {r["id"] for r in status.get("capacityReservations") or ()}:
            return "CapacityReservationDrift"  # its reservation is no longer selected (or ended)
        return None

    # --- interruption -----------------------------------------------------------------------------
    def subscribe_interruptions(self, callback: Callable[[], None]) -> None:
        self._subscribers.append(callback)

    def push_interruption(self, msg: dict) -> None:
        with self.lock:
            self._interruptions.append(msg)
        for fn in self._subscribers:
            fn()

    def interruption_messages(self) -> list[dict]:
        with self.lock:
            out, self._interruptions = self._interruptions, []
        return out


def _gib(v: Any) -> int | None:
    if v is None:
        return None
    from ...resources import to_units

    return -(-to_units("ephemeral-storage", v) // 2**30)
