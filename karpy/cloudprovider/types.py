"""What the engine needs to know about a cloud: instance types and their offerings."""

from __future__ import annotations

from dataclasses import dataclass, field

# Well-known labels (Kubernetes and karpenter.sh)
LABEL_ARCH = "kubernetes.io/arch"
LABEL_OS = "kubernetes.io/os"
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_CAPACITY_TYPE = "karpenter.sh/capacity-type"
LABEL_NODEPOOL = "karpenter.sh/nodepool"

CAPACITY_RESERVED = "reserved"
CAPACITY_SPOT = "spot"
CAPACITY_ON_DEMAND = "on-demand"


# Where the price a user sees for an offering comes from (``Offering.price_source``).
PRICE_FROM_CATALOG = "catalog"  # stated by the catalog's sources for this type, region, capacity type and OS
PRICE_ESTIMATED = "estimated"  # derived by a rule the catalog's notes state (another region, a ratio, a license)
PRICE_FROM_USER = "user"  # the user's own price or discount (``karpy simulate --prices FILE``)


@dataclass(frozen=True)
class RepairPolicy:
    """A node condition that makes a node unhealthy (upstream's ``cloudprovider.RepairPolicy``): when the
    Node's condition ``condition_type`` has ``status`` for ``toleration`` seconds, node repair
    (feature gate ``NodeRepair``) force-terminates its NodeClaim."""

    condition_type: str
    status: str  # "True" | "False" | "Unknown"
    toleration: float  # seconds


def kubelet_ready_policies(toleration: float) -> tuple[RepairPolicy, ...]:
    """Ready False or Unknown for ``toleration`` seconds: the kubelet policies every provider declares."""
    return (RepairPolicy("Ready", "False", toleration), RepairPolicy("Ready", "Unknown", toleration))


@dataclass(frozen=True)
class Offering:
    """One place an instance type can be bought: a zone and a capacity type, at a price.

    ``price`` is the price Karpenter ranks offerings by: the one upstream Karpenter
    would see. ``billed_price``, when set, is what the cloud bills instead (a
    Windows license upstream's Linux prices leave out, or the user's negotiated
    price); :attr:`bill` is the price a node of this offering costs.
    ``price_estimated`` and ``price_source`` describe :attr:`bill`.
    """

    zone: str
    capacity_type: str  # "on-demand" | "spot" | "reserved"
    price: float  # USD per hour (kwok: the catalog's synthetic unit)
    available: bool = True
    price_estimated: bool = False  # True when the catalog assumed this price (see the catalog's notes)
    reservation_id: str | None = None
    reservation_capacity: int | None = None  # a reserved offering's instances left in its reservation
    price_source: str = PRICE_FROM_CATALOG
    billed_price: float | None = None
    # provider labels whose value varies by zone, as (key, values a node launched into this offering may carry)
    # pairs; such a key is absent from its InstanceType's labels (Azure's sku-storage-ultra-ssd: "true" and
    # "false" in a zone with UltraSSD, "false" elsewhere)
    labels: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def bill(self) -> float:
        """USD per hour a node launched into this offering costs."""
        return self.price if self.billed_price is None else self.billed_price


@dataclass
class InstanceType:
    """An instance type (VM size) as the engine sees it.

    ``labels`` holds every single-valued label a node of this type carries
    (arch, os, instance-type and the provider's labels such as
    ``karpenter.azure.com/sku-cpu``); zone and capacity type come from
    ``offerings``, as do provider labels whose value varies by zone
    (``Offering.labels``). ``capacity`` and ``overhead`` are integer resource units
    (see karpy.resources); allocatable = capacity - overhead.
    """

    name: str
    labels: dict[str, str]
    capacity: dict[str, int]
    overhead: dict[str, int]
    offerings: list[Offering] = field(default_factory=list)

    def compatible_offerings(self, requirements) -> list[Offering]:
        """Available offerings whose zone, capacity type and labels the requirements allow.

        ``requirements`` is anything with ``get(key).has(value)``, such as
        :class:`karpy.scheduling.requirements.Requirements`.
        """
        zones = requirements.get(LABEL_ZONE)
        cts = requirements.get(LABEL_CAPACITY_TYPE)
        return [o for o in self.offerings if o.available and zones.has(o.zone) and cts.has(o.capacity_type)
                and (not o.labels or offering_labels_allowed(o, requirements))]

    def offering_label_values(self, key: str) -> frozenset[str]:
        """The values its available offerings give a label that varies by offering (none: the key is not such a
        label)."""
        return frozenset(v for o in self.offerings if o.available for k, vs in o.labels if k == key for v in vs)

    @property
    def allocatable(self) -> dict[str, int]:
        out = dict(self.capacity)
        for k, v in self.overhead.items():
            out[k] = out.get(k, 0) - v
        return out


def offering_labels_allowed(offering: Offering, requirements) -> bool:
    """Whether ``requirements`` allow one of the values of each label the offering carries."""
    return all(any(requirements.get(k).has(v) for v in vs) for k, vs in offering.labels)
