"""A simulated cloud, and the CloudProvider that launches into it (``kwok`` and ``simulated``).

:class:`SimulatedCloud` is the cloud itself, part of the simulated world: it
knows which offerings have capacity (the Scenario's ``unavailable`` and
``available`` steps), runs instances, and -- as upstream's kwok provider does
-- turns each instance into a Node object in the API server once the
NodeClass's registration delay has passed. It also delivers interruption
notices (the Scenario's ``interrupt`` step) and, as a real cloud does, reclaims
an interrupted spot instance once its notice has run out (AWS and kwok 2
minutes, Azure 30 seconds): the instance is terminated, and the simulated
world turns its Node NotReady (its kubelet stops posting status).

:class:`SimulatedCloudProvider` is Karpenter's side, behind the
:class:`~karpy.cloudprovider.provider.CloudProvider` interface: instance types
from the catalog each NodeClass kind selects (only the kwok catalog for the
``kwok`` provider), an unavailable-offerings cache (offerings that failed to
launch are skipped for 3 minutes, as upstream's providers do), and the launch
choice of :mod:`karpy.provisioning.launch`.

Node names follow each provider: the NodeClaim's name on kwok, ``aks-<name>``
on Azure, ``ip-192-168-X-Y.<region domain>`` on AWS.

Capacity reservations (feature gate ``ReservedCapacity``, on by default): the cloud holds the
reservations a Scenario declares (:class:`Reservation`: an instance type, a zone, a count of instances,
a price). Each adds a ``reserved`` offering to its instance type, as upstream's providers offer one per
reservation, available while fewer than ``count`` running instances use it. A node launched into it
carries ``karpenter.sh/capacity-type: reserved`` and the reservation's ID (:data:`RESERVATION_ID_LABELS`);
once the reservation is full the launch falls back to the next capacity type; a node whose reservation
is gone is drifted (``CapacityReservationDrift``, as upstream's AWS provider reports it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from ..kube import errors as E
from ..kube.times import fmt_time
from ..provisioning.launch import launch_candidates
from ..scheduling.requirements import Requirements
from .catalog import CatalogProvider, get_provider
from .provider import InsufficientCapacityError, NodeClaimNotFoundError
from .types import (
    LABEL_CAPACITY_TYPE,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_REGION,
    LABEL_ZONE,
    InstanceType,
    Offering,
)

ICE_TTL = 180.0
SPOT_NOTICE = 120.0  # seconds between a spot interruption notice and the reclaim (AWS; kwok uses AWS's)
SPOT_NOTICE_BY_SCHEME = {"azure://": 30.0}  # Azure evicts spot VMs 30 seconds after the notice
PRICE_ANNOTATION = "karpy.dev/price-per-hour"
PRICE_ESTIMATED_ANNOTATION = "karpy.dev/price-estimated"
PRICE_SOURCE_ANNOTATION = "karpy.dev/price-source"  # catalog | estimated | user (see types.Offering)


def billed(o: Offering) -> Offering:
    """The offering an instance runs in, at the price it is billed (Karpenter chose it by ``o.price``)."""
    return replace(o, price=o.bill, billed_price=None)


def price_annotations(o: Offering) -> dict[str, str]:
    """The NodeClaim and Node annotations that say what a node costs and where that price comes from."""
    return {PRICE_ANNOTATION: f"{o.bill:.4f}", PRICE_SOURCE_ANNOTATION: o.price_source,
            **({PRICE_ESTIMATED_ANNOTATION: "true"} if o.price_estimated else {})}
UNREGISTERED_TAINT = {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}
NODECLASS_HASH_ANNOTATIONS = {
    "azure": "karpenter.azure.com/aksnodeclass-hash",
    "aws": "karpenter.k8s.aws/ec2nodeclass-hash",
    "kwok": "karpenter.kwok.sh/kwoknodeclass-hash",
}


# the node label carrying the capacity reservation a node was launched into: upstream's AWS provider's own,
# karpy's for the providers whose upstream has no reservations (kwok, Azure)
RESERVATION_ID_LABELS = {"aws": "karpenter.k8s.aws/capacity-reservation-id"}
RESERVATION_ID_LABEL = "karpy.dev/reservation-id"
CAPACITY_RESERVATION_DRIFT = "CapacityReservationDrift"


def reservation_label(provider: str) -> str:
    return RESERVATION_ID_LABELS.get(provider, RESERVATION_ID_LABEL)


@dataclass(frozen=True)
class Reservation:
    """A capacity reservation: ``count`` instances of ``instance_type`` in ``zone``, at ``price`` per hour
    (None: the type's on-demand price in that zone)."""

    id: str
    instance_type: str
    zone: str
    count: int
    price: float | None = None

    @classmethod
    def from_spec(cls, spec: dict) -> "Reservation":
        price = spec.get("price")
        return cls(str(spec["id"]), str(spec["instanceType"]), str(spec["zone"]), int(spec.get("count") or 0),
                   None if price is None else float(price))


@dataclass(eq=False)
class Instance:
    provider_id: str
    node_name: str
    nodeclaim: str
    instance_type: InstanceType
    offering: Offering
    catalog: CatalogProvider
    region: str
    launched: float
    labels: dict[str, str]
    taints: list[dict]
    annotations: dict[str, str]
    terminated: bool = False


class SimulatedCloud:
    """The cloud: capacity, instances, and the Nodes they register as."""

    def __init__(self, api: Any, clock: Any, region: str | None = None, prices: Any = None):
        self.api = api
        self.clock = clock
        self.region_override = region
        self.prices = prices  # the user's own prices (user_prices.UserPrices), applied to what nodes are billed
        self.instances: dict[str, Instance] = {}
        self.rules: list[tuple[frozenset | None, frozenset | None, str | None, bool]] = []
        self.rules_version = 0
        self._aws_seq = 0
        self._messages: list[dict] = []
        self._subscribers: list[Callable[[], None]] = []
        self.reclaimed: set[str] = set()  # provider IDs of spot instances reclaimed after their notice
        self._reclaim_subscribers: list[Callable[[Instance], None]] = []
        self.reservations: dict[str, Reservation] = {}  # by ID
        self._drift_subscribers: list[Callable[[], None]] = []

    # --- capacity reservations ---------------------------------------------------------------
    def set_reservations(self, specs: Any) -> None:
        """Replace the cloud's capacity reservations (a Scenario's ``reservations``)."""
        self.reservations = {r.id: r for r in (Reservation.from_spec(x) for x in specs or ())}
        for fn in self._drift_subscribers:
            fn()

    def subscribe_drift(self, fn: Callable[[], None]) -> None:
        self._drift_subscribers.append(fn)

    def reservation_used(self, reservation_id: str) -> int:
        return sum(1 for i in self.instances.values() if i.offering.reservation_id == reservation_id)

    def reservation_state(self) -> tuple:
        """Changes whenever a reservation, or how much of it is used, changes."""
        if not self.reservations:
            return ()
        return tuple((r.id, r.count, r.price, self.reservation_used(r.id)) for r in self.reservations.values())

    def with_reservations(self, types: list[InstanceType]) -> list[InstanceType]:
        """``types`` with a ``reserved`` offering for every reservation of one of them, in a zone the type is
        offered in, available while the reservation has room."""
        if not self.reservations:
            return types
        by_type: dict[str, list[Reservation]] = {}
        for r in self.reservations.values():
            by_type.setdefault(r.instance_type, []).append(r)
        out = []
        for it in types:
            rs = by_type.get(it.name)
            if rs:
                od = {o.zone: o for o in it.offerings if o.capacity_type == "on-demand"}
                extra = [Offering(zone=r.zone, capacity_type="reserved", reservation_id=r.id,
                                  price=r.price if r.price is not None else od[r.zone].price,
                                  available=self.reservation_used(r.id) < r.count,
                                  reservation_capacity=max(r.count - self.reservation_used(r.id), 0))
                         for r in rs if r.zone in od or r.price is not None]
                it = replace(it, offerings=list(it.offerings) + extra)
            out.append(it)
        return out

    def region_for(self, catalog: CatalogProvider) -> str:
        return self.region_override or catalog.default_region

    def billed_offering(self, it: InstanceType, o: Offering, region: str) -> Offering:
        """The launched offering at the price it is billed: the user's price where a row matches."""
        if self.prices is not None:
            o = self.prices.apply(it.name, region, o)
        return billed(o)

    # --- capacity ----------------------------------------------------------------------------
    def set_availability(self, types: Any, zones: Any, capacity_type: str | None, available: bool) -> None:
        self.rules.append((frozenset(types) if types else None, frozenset(zones) if zones else None,
                           capacity_type or None, available))
        self.rules_version += 1

    def has_capacity(self, it: InstanceType, o: Offering) -> bool:
        if o.reservation_id is not None:
            r = self.reservations.get(o.reservation_id)
            if r is None or self.reservation_used(r.id) >= r.count:
                return False  # the reservation is gone or full: the launch into it fails
        verdict = True
        for types, zones, ct, available in self.rules:
            if types is not None and it.name not in types:
                continue
            if zones is not None and o.zone not in zones:
                continue
            if ct is not None and o.capacity_type != ct:
                continue
            verdict = available
        return verdict

    # --- instances ---------------------------------------------------------------------------
    def run_instance(self, nodeclaim: dict, it: InstanceType, o: Offering, catalog: CatalogProvider,
                     nodeclass: dict | None, labels: dict[str, str]) -> Instance | None:
        """Launch one offering; None when it has no capacity."""
        if not self.has_capacity(it, o):
            return None
        claim = nodeclaim["metadata"]["name"]
        region = self.region_for(catalog)
        node_name = self._node_name(claim, catalog.name, region)
        pid = self._provider_id(catalog.name, node_name, o.zone, region)
        spec = nodeclaim.get("spec") or {}
        taints = [dict(t) for t in spec.get("taints") or ()] + [dict(t) for t in spec.get("startupTaints") or ()]
        taints.append(dict(UNREGISTERED_TAINT))
        o = self.billed_offering(it, o, region)
        inst = Instance(pid, node_name, claim, it, o, catalog, region, self.clock.now(), dict(labels), taints,
                        price_annotations(o))
        self.instances[pid] = inst
        delay = catalog.registration_delay(nodeclass)
        self.clock.call_later(delay, lambda: self._register(inst), keepalive=True, label=f"register/{node_name}")
        return inst

    def _node_name(self, claim: str, provider: str, region: str) -> str:
        if provider == "azure":
            name = f"aks-{claim}"
        elif provider == "aws":
            self._aws_seq += 1
            i = self._aws_seq
            domain = "ec2.internal" if region == "us-east-1" else f"{region}.compute.internal"
            name = f"ip-192-168-{(i // 250) % 250}-{i % 250 + 1}.{domain}"
        else:
            name = claim
        self.api.names.reserve(name) if hasattr(self.api, "names") else None
        return name

    @staticmethod
    def _provider_id(provider: str, node_name: str, zone: str, region: str) -> str:
        if provider == "azure":
            return (f"azure:///subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/karpy-{region}/"
                    f"providers/Microsoft.Compute/virtualMachines/{node_name}")
        if provider == "aws":
            import hashlib

            return f"aws:///{zone}/i-{hashlib.sha1(node_name.encode()).hexdigest()[:17]}"
        return f"kwok://{node_name}"

    def _register(self, inst: Instance) -> None:
        """The instance boots and its kubelet registers a Node (as kwok creates one)."""
        if inst.terminated:
            return
        labels = dict(inst.labels)
        labels[LABEL_HOSTNAME] = inst.node_name
        cap = inst.instance_type.capacity
        alloc = inst.instance_type.allocatable
        from ..resources import format_resource_list

        node = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": inst.node_name, "labels": dict(sorted(labels.items())),
                         "annotations": dict(inst.annotations)},
            "spec": {"providerID": inst.provider_id, "taints": [dict(t) for t in inst.taints]},
            "status": {
                "capacity": format_resource_list(cap), "allocatable": format_resource_list(alloc),
                "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                                "lastTransitionTime": fmt_time(self.clock.now())}],
                "phase": "Pending",
            },
        }
        try:
            self.api.create(node)
        except E.AlreadyExists:
            pass

    def terminate(self, provider_id: str) -> bool:
        """Terminate an instance; False when there is none (any more)."""
        inst = self.instances.pop(provider_id, None)
        if inst is None:
            return False
        inst.terminated = True
        return True

    def find(self, provider_id: str) -> Instance | None:
        return self.instances.get(provider_id)

    def by_node_name(self, name: str) -> Instance | None:
        for inst in self.instances.values():
            if inst.node_name == name:
                return inst
        return None

    # --- interruptions -----------------------------------------------------------------------
    def interrupt(self, inst: Instance) -> None:
        kind = "SpotInterruption" if inst.offering.capacity_type == "spot" else "InstanceStopping"
        self._messages.append({"kind": kind, "providerID": inst.provider_id, "instanceType": inst.instance_type.name,
                               "zone": inst.offering.zone, "capacityType": inst.offering.capacity_type,
                               "time": self.clock.now()})
        if inst.offering.capacity_type == "spot":
            pid = inst.provider_id
            self.clock.call_later(spot_notice(pid), lambda: self._reclaim(pid), keepalive=True,
                                  label=f"reclaim/{inst.node_name}")
        for fn in self._subscribers:
            fn()

    def _reclaim(self, provider_id: str) -> None:
        """The spot notice has run out: the cloud takes the instance back (nothing happens when it is gone
        already). Its kubelet stops posting status; the simulated world (karpy.simulator.kubelet), told
        through :meth:`on_reclaim`, marks the Node NotReady as kube-controller-manager would."""
        inst = self.instances.get(provider_id)
        if inst is None:
            return
        self.terminate(provider_id)
        self.reclaimed.add(provider_id)
        for fn in self._reclaim_subscribers:
            fn(inst)

    def on_reclaim(self, fn: Callable[[Instance], None]) -> None:
        self._reclaim_subscribers.append(fn)

    def subscribe(self, fn: Callable[[], None]) -> None:
        self._subscribers.append(fn)

    def take_messages(self) -> list[dict]:
        out, self._messages = self._messages, []
        return out


def spot_notice(provider_id: str) -> float:
    """Seconds from a spot interruption notice to the reclaim of the instance, by provider."""
    for scheme, seconds in SPOT_NOTICE_BY_SCHEME.items():
        if provider_id.startswith(scheme):
            return seconds
    return SPOT_NOTICE


class SimulatedCloudProvider:
    """Karpenter's CloudProvider over a :class:`SimulatedCloud`.

    ``nodeclass_lookup(kind, name)`` returns a NodeClass object (from the informer
    cache). ``kinds`` restricts the NodeClass kinds served (``{"KWOKNodeClass"}``
    for the ``kwok`` provider).
    """

    def __init__(self, cloud: SimulatedCloud, nodeclass_lookup: Callable[[str, str], dict | None], clock: Any,
                 recorder: Any = None, kinds: frozenset[str] | None = None, name: str = "simulated"):
        self.cloud = cloud
        self.lookup = nodeclass_lookup
        self.clock = clock
        self.recorder = recorder
        self.kinds = kinds
        self.name = name
        self.ice: dict[tuple[str, str, str], float] = {}
        self.ice_version = 0
        self._cand_cache: dict[tuple, tuple[Any, list]] = {}
        self.overlays: Any = None  # the NodeOverlays' OverlayStore (karpy/cloudprovider/overlay.py), gate on
        self.reserved_capacity = True  # feature gate ReservedCapacity: reservations are offered
        self.gates: dict[str, bool] = {}  # the feature gates that change instance types (NodeClassCEL)

    # --- catalogs ----------------------------------------------------------------------------
    def catalog(self, nodeclass_ref: dict | None) -> CatalogProvider:
        ref = nodeclass_ref or {}
        return get_provider(ref.get("group") or ref.get("kind") or "karpenter.kwok.sh")

    def serves(self, nodeclass_ref: dict | None) -> bool:
        ref = nodeclass_ref or {}
        try:
            cat = self.catalog(ref)
        except ValueError:
            return False
        return self.kinds is None or cat.nodeclass_kind in self.kinds

    def _unavailable(self, it: InstanceType, o: Offering) -> bool:
        t = self.ice.get((it.name, o.zone, o.capacity_type))
        return t is not None and t > self.clock.now()

    def ice_key(self) -> tuple:
        """Changes whenever the set of offerings known to be out of capacity changes."""
        now = self.clock.now()
        key = tuple(sorted(k for k, t in self.ice.items() if t > now))
        if self.reserved_capacity and self.cloud.reservations:
            key = (*key, ("reservations", self.cloud.reservation_state()))
        return key if self.overlays is None else (*key, ("overlays", self.overlays.version))

    def _catalog_types(self, cat: CatalogProvider, region: str, nodeclass: dict | None) -> list[InstanceType]:
        """The catalog's instance types, with the cloud's capacity reservations as ``reserved`` offerings
        (feature gate ``ReservedCapacity``)."""
        types = cat.instance_types(region, nodeclass, self.gates)
        return self.cloud.with_reservations(types) if self.reserved_capacity else types

    def get_instance_types(self, nodepool: dict, nodeclass: dict | None) -> list[InstanceType]:
        ref = (((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
        cat = self.catalog(ref)
        types = self._catalog_types(cat, self.cloud.region_for(cat), nodeclass)
        if self.overlays is not None:
            types = self.overlays.apply((nodepool.get("metadata") or {}).get("name") or "", types)
        now = self.clock.now()
        if not any(t > now for t in self.ice.values()):
            return types
        out = []
        for it in types:
            if any(self._unavailable(it, o) for o in it.offerings):
                it = replace(it, offerings=[replace(o, available=o.available and not self._unavailable(it, o))
                                            for o in it.offerings])
            out.append(it)
        return out

    def well_known_labels(self, nodepool: dict) -> frozenset[str]:
        ref = (((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
        try:
            return self.catalog(ref).WELL_KNOWN_LABELS
        except ValueError:
            return frozenset()

    def registration_delay(self, nodeclass_ref: dict | None, nodeclass: dict | None) -> float:
        return self.catalog(nodeclass_ref).registration_delay(nodeclass)

    # --- launch ------------------------------------------------------------------------------
    def create(self, nodeclaim: dict) -> dict:
        spec = nodeclaim.get("spec") or {}
        ref = spec.get("nodeClassRef") or {}
        cat = self.catalog(ref)
        nodeclass = self.lookup(ref.get("kind") or cat.nodeclass_kind, ref.get("name", ""))
        if nodeclass is None:
            raise InsufficientCapacityError(f"resolving node class from nodeclaim, {cat.nodeclass_kind} "
                                            f"\"{ref.get('name', '')}\" not found")
        reqs = Requirements.from_node_selector(spec.get("requirements") or ())
        allowed = reqs.get(LABEL_INSTANCE_TYPE)
        region = self.cloud.region_for(cat)
        name = nodeclaim["metadata"]["name"]
        nodepool = ((nodeclaim.get("metadata") or {}).get("labels") or {}).get(LABEL_NODEPOOL) or ""
        for cand in self._candidates(cat, region, nodeclass, reqs, allowed, nodepool):
            it, o = cand.instance_type, cand.offering
            labels = self._labels(nodeclaim, reqs, it, o, cat, region)
            inst = self.cloud.run_instance(nodeclaim, it, o, cat, nodeclass, labels)
            if inst is None:
                self.ice[(it.name, o.zone, o.capacity_type)] = self.clock.now() + ICE_TTL
                self.ice_version += 1
                if self.recorder is not None:
                    from ..runtime.events import ref as obj_ref

                    self.recorder.publish(obj_ref(nodeclaim), "InsufficientCapacity",
                                          f"{it.name} {o.capacity_type} in {o.zone} is out of capacity, trying the next offering",
                                          "Warning")
                continue
            return self._as_nodeclaim(nodeclaim, inst)
        raise InsufficientCapacityError("all requested instance types were unavailable during launch")

    def _candidates(self, cat: CatalogProvider, region: str, nodeclass: dict, reqs: Requirements, allowed,
                    nodepool: str = "") -> list:
        """Launch candidates, remembered for identical requests while no offering's availability changes
        (NodeClaims computed together often ask for the same instance types). With NodeOverlays, ranked by
        the NodePool's overlaid prices, as upstream's AWS and Azure providers launch."""
        key = (cat.name, region, id(nodeclass.get("spec")), reqs.signature(), self.ice_key(), nodepool)
        hit = self._cand_cache.get(key)
        if hit is not None and hit[0] is nodeclass.get("spec"):
            return hit[1]
        types = [it for it in self._catalog_types(cat, region, nodeclass) if allowed.has(it.name)]
        if self.overlays is not None and nodepool:
            types = self.overlays.apply(nodepool, types)
        cands = launch_candidates(reqs, types, self._unavailable)
        if len(self._cand_cache) > 2000:
            self._cand_cache.clear()
        self._cand_cache[key] = (nodeclass.get("spec"), cands)
        return cands

    @staticmethod
    def _labels(nodeclaim: dict, reqs: Requirements, it: InstanceType, o: Offering, cat: CatalogProvider,
                region: str) -> dict[str, str]:
        labels = dict((nodeclaim.get("metadata") or {}).get("labels") or {})
        for r in reqs:
            if not r.complement and r.values and r.key not in (LABEL_HOSTNAME, LABEL_INSTANCE_TYPE):
                labels.setdefault(r.key, sorted(r.values)[0])
        labels.update(reqs.labels())
        labels.pop(LABEL_INSTANCE_TYPE, None)
        labels.update(it.labels)
        labels.update(cat.offering_labels(o))
        labels[LABEL_ZONE] = o.zone
        labels[LABEL_CAPACITY_TYPE] = o.capacity_type
        if o.reservation_id is not None:
            labels[reservation_label(cat.name)] = o.reservation_id
        if cat.name != "kwok":  # upstream's kwok provider sets no region label
            labels[LABEL_REGION] = region
        labels.pop(LABEL_HOSTNAME, None)
        np = labels.get(LABEL_NODEPOOL)
        if np:
            labels[LABEL_NODEPOOL] = np
        return labels

    def _as_nodeclaim(self, nodeclaim: dict, inst: Instance) -> dict:
        from ..resources import format_resource_list

        return {
            "metadata": {"name": nodeclaim["metadata"]["name"], "labels": dict(inst.labels),
                         "annotations": dict(inst.annotations)},
            "status": {
                "providerID": inst.provider_id,
                "capacity": format_resource_list(inst.instance_type.capacity),
                "allocatable": format_resource_list(inst.instance_type.allocatable),
                "imageID": f"{inst.catalog.name}-image",
            },
        }

    def delete(self, nodeclaim: dict) -> None:
        pid = (nodeclaim.get("status") or {}).get("providerID") or ""
        if not self.cloud.terminate(pid):
            raise NodeClaimNotFoundError(f"instance {pid} not found")
        raise NodeClaimNotFoundError("instance terminated")

    def get(self, provider_id: str) -> dict:
        inst = self.cloud.find(provider_id)
        if inst is None:
            raise NodeClaimNotFoundError(f"instance {provider_id} not found")
        return self._as_nodeclaim({"metadata": {"name": inst.nodeclaim}}, inst)

    def list(self) -> list[dict]:
        return [self._as_nodeclaim({"metadata": {"name": i.nodeclaim}}, i) for i in self.cloud.instances.values()]

    def provider_ids(self) -> set[str]:
        """The provider IDs of what :meth:`list` returns, without building each NodeClaim."""
        return {i.provider_id for i in self.cloud.instances.values()}

    def offering_of(self, provider_id: str) -> tuple[InstanceType, Offering] | None:
        inst = self.cloud.find(provider_id)
        return (inst.instance_type, inst.offering) if inst is not None else None

    def is_drifted(self, nodeclaim: dict, nodeclass: dict | None) -> str | None:
        """``CapacityReservationDrift`` for a node launched into a capacity reservation the cloud no longer
        has (upstream's AWS provider); NodeClass drift is judged from the NodeClass hash annotation
        (karpy.disruption.drift)."""
        inst = self.cloud.find((nodeclaim.get("status") or {}).get("providerID") or "")
        rid = inst.offering.reservation_id if inst is not None else None
        if rid is not None and rid not in self.cloud.reservations:
            return CAPACITY_RESERVATION_DRIFT
        return None

    def subscribe_drift(self, callback: Callable[[], None]) -> None:
        self.cloud.subscribe_drift(callback)

    def subscribe_interruptions(self, callback: Callable[[], None]) -> None:
        self.cloud.subscribe(callback)

    def interruption_messages(self) -> list[dict]:
        return self.cloud.take_messages()

    def mark_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> None:
        self.ice[(instance_type, zone, capacity_type)] = self.clock.now() + ICE_TTL
        self.ice_version += 1


# --- a restarted controller: the instances it launched before, rebuilt from the cluster -----------------
_PROVIDER_ID_SCHEMES = {"kwok": "kwok://", "azure": "azure://", "aws": "aws://"}


def adopt_instances(provider: SimulatedCloudProvider, nodeclaims: list[dict], nodes: list[dict]) -> list[str]:
    """Give back to ``provider``'s cloud the instances of launched NodeClaims (``karpy controller``
    keeps instances in memory; after a restart or a change of leader they are rebuilt from the API).

    A NodeClaim whose Node has not registered yet registers after what is left of the registration
    delay. A NodeClaim without a provider ID was never launched and is left to the lifecycle
    controller, which launches it (upstream relaunches such a NodeClaim through Create). Returns the
    names of the Nodes this provider launched that no NodeClaim claims (orphans, for garbage collection)."""
    from ..kube.times import parse_time

    cloud = provider.cloud
    now = provider.clock.now()
    by_pid = {(n.get("spec") or {}).get("providerID"): n for n in nodes if (n.get("spec") or {}).get("providerID")}
    claimed: set[str] = set()
    for claim in nodeclaims:
        status = claim.get("status") or {}
        pid = status.get("providerID")
        if not pid:
            continue
        claimed.add(pid)
        ref = (claim.get("spec") or {}).get("nodeClassRef") or {}
        if pid in cloud.instances or not provider.serves(ref):
            continue
        labels = dict((claim.get("metadata") or {}).get("labels") or {})
        cat = provider.catalog(ref)
        nodeclass = provider.lookup(ref.get("kind") or cat.nodeclass_kind, ref.get("name", ""))
        region = cloud.region_for(cat)
        it = next((t for t in provider._catalog_types(cat, region, nodeclass)
                   if t.name == labels.get(LABEL_INSTANCE_TYPE)), None)
        if it is None or not it.offerings:
            continue
        rid = labels.get(reservation_label(cat.name))
        o = next((x for x in it.offerings if x.zone == labels.get(LABEL_ZONE)
                  and x.capacity_type == labels.get(LABEL_CAPACITY_TYPE) and x.reservation_id == rid),
                 it.offerings[0])
        node = by_pid.get(pid)
        claim_name = claim["metadata"]["name"]
        if node is not None:
            node_name = node["metadata"]["name"]
        elif cat.name == "azure":
            node_name = f"aks-{claim_name}"
        elif cat.name == "aws":
            node_name = status.get("nodeName") or claim_name
        else:
            node_name = claim_name
        launched = now
        for c in status.get("conditions") or ():
            if c.get("type") == "Launched":
                launched = parse_time(c.get("lastTransitionTime")) or now
        spec = claim.get("spec") or {}
        taints = [dict(t) for t in spec.get("taints") or ()] + [dict(t) for t in spec.get("startupTaints") or ()]
        taints.append(dict(UNREGISTERED_TAINT))
        labels.pop(LABEL_HOSTNAME, None)
        o = cloud.billed_offering(it, o, region)
        inst = Instance(pid, node_name, claim_name, it, o, cat, region, launched, labels, taints,
                        price_annotations(o))
        cloud.instances[pid] = inst
        if node is None:
            delay = max(0.0, launched + cat.registration_delay(nodeclass) - now)
            provider.clock.call_later(delay, lambda inst=inst: cloud._register(inst), keepalive=True,
                                      label=f"register/{node_name}")
    schemes = tuple(_PROVIDER_ID_SCHEMES[c] for c in _PROVIDER_ID_SCHEMES
                    if provider.kinds is None or get_provider(c).nodeclass_kind in provider.kinds)
    orphans = []
    for pid, n in by_pid.items():
        if pid in claimed or not str(pid).startswith(schemes):
            continue
        if ((n.get("metadata") or {}).get("labels") or {}).get(LABEL_NODEPOOL):
            orphans.append(n["metadata"]["name"])
    return sorted(orphans)
