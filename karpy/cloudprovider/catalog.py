"""The shared base of karpy's catalog-backed cloud providers.

A provider turns its embedded catalog (``karpy/cloudprovider/data/<name>.json``,
written by ``scripts/build_catalogs.py``) into :class:`InstanceType` objects for
one region and one NodeClass: labels, capacity, overhead (kube-reserved +
system-reserved + eviction threshold, by that provider's own formula) and
offerings with prices.

Every provider exposes the same small interface::

    provider.name, .group, .nodeclass_kind, .default_region, .regions
    provider.LABEL_DOMAIN, .WELL_KNOWN_LABELS
    provider.registration_delay(nodeclass) -> seconds
    provider.instance_types(region, nodeclass) -> list[InstanceType]
    provider.offering_labels(offering) -> extra node labels of one offering

``instance_types`` is cached on the region and on the NodeClass fields that
change the result (each provider says which in ``_params``). The catalog JSON
is read once per process. The InstanceType objects in the cache are shared:
callers get a fresh list, but must not mutate the objects in it.

Prices the data does not know (spot prices, on-demand prices of regions
without their own table, Windows licenses) are estimated by the rules each
provider and its catalog's notes state, and flagged with
``Offering.price_estimated`` and ``Offering.price_source`` ("estimated").

The Azure and AWS catalogs are stored gzip-compressed (``<name>.json.gz``).
"""

from __future__ import annotations

import gzip
import importlib
import json
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, Hashable, Mapping

from .types import PRICE_ESTIMATED, PRICE_FROM_CATALOG, InstanceType, Offering, RepairPolicy

DATA_DIR = Path(__file__).resolve().parent / "data"


@lru_cache(maxsize=None)
def load_catalog(name: str) -> dict[str, Any]:
    """The parsed catalog ``data/<name>.json[.gz]`` (read once per process; do not mutate)."""
    packed = DATA_DIR / f"{name}.json.gz"
    if packed.exists():
        with gzip.open(packed, "rt", encoding="utf-8") as f:
            return json.load(f)
    with (DATA_DIR / f"{name}.json").open(encoding="utf-8") as f:
        return json.load(f)


def spot_price(prices: Mapping[str, Any], ratio: float) -> tuple[float, bool]:
    """The spot price of one size in one region, and whether it was estimated.

    ``prices`` is the catalog's ``{"on_demand": x, "spot": y | None}`` for that
    region. A known spot price is used as is; an unknown one is estimated as
    the on-demand price times the catalog's data-derived ratio, rounded to 6
    decimals (the precision of the price sources).
    """
    known = prices.get("spot")
    if known is not None:
        return float(known), False
    return round(float(prices["on_demand"]) * ratio, 6), True


def priced_offering(zone: str, capacity_type: str, price: float, estimated: bool = False,
                    bill: float | None = None) -> Offering:
    """An offering at ``price`` (what Karpenter ranks by), billed ``bill`` when that differs, its price
    source ``estimated`` or ``catalog``."""
    return Offering(
        zone=zone,
        capacity_type=capacity_type,
        price=price,
        price_estimated=estimated,
        price_source=PRICE_ESTIMATED if estimated else PRICE_FROM_CATALOG,
        billed_price=None if bill is None or bill == price else bill,
    )


def spec(nodeclass: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``nodeclass["spec"]`` or an empty mapping."""
    if not nodeclass:
        return {}
    s = nodeclass.get("spec")
    return s if isinstance(s, Mapping) else {}


def freeze(value: Any) -> Hashable:
    """A hashable, order-independent copy of a JSON-like value (for cache keys)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


class CatalogProvider:
    """Base class: region checks, catalog loading and the instance-type cache."""

    name: str = ""
    group: str = ""
    nodeclass_kind: str = ""
    default_region: str = ""
    LABEL_DOMAIN: str = ""
    WELL_KNOWN_LABELS: frozenset[str] = frozenset()
    # the node conditions the provider's RepairPolicies() declare (node repair, feature gate NodeRepair)
    REPAIR_POLICIES: tuple[RepairPolicy, ...] = ()
    # Seconds from launch until the Node registers and is Ready, when the
    # NodeClass does not say otherwise.
    DEFAULT_REGISTRATION_DELAY: float = 0.0

    def __init__(self) -> None:
        self._cache: dict[tuple[str, Hashable], list[InstanceType]] = {}
        self._lock = threading.Lock()

    # -- catalog ------------------------------------------------------------

    @property
    def catalog(self) -> dict[str, Any]:
        return load_catalog(self.name)

    @property
    def regions(self) -> list[str]:
        return list(self.catalog["regions"])

    @property
    def notes(self) -> str:
        return self.catalog["notes"]

    def zones(self, region: str) -> list[str]:
        """The zone names of a known region, as the catalog lists them."""
        return list(self.catalog["zones"][region])

    def check_region(self, region: str | None) -> str:
        """The region to use (the default for None/empty); ValueError for an unknown one."""
        if not region:
            return self.default_region
        if region not in self.catalog["regions"]:
            raise ValueError(
                f"unknown {self.name} region {region!r}: known regions are {', '.join(self.catalog['regions'])}"
            )
        return region

    # -- the interface --------------------------------------------------------

    def registration_delay(self, nodeclass: Mapping[str, Any] | None) -> float:
        return self.DEFAULT_REGISTRATION_DELAY

    def instance_types(self, region: str | None, nodeclass: Mapping[str, Any] | None,
                       gates: Mapping[str, bool] | None = None) -> list[InstanceType]:
        region = self.check_region(region)
        params = self.gated_params(nodeclass, gates or {})
        key = (region, freeze(params))
        with self._lock:
            cached = self._cache.get(key)
            if cached is None:
                cached = self._build(region, params)
                self._cache[key] = cached
        return list(cached)

    def offering_labels(self, offering: Offering) -> dict[str, str]:
        """Labels a node launched into ``offering`` carries besides zone and capacity type
        (upstream puts them in the offering's requirements). None by default."""
        return {}

    # -- for subclasses -------------------------------------------------------

    def _params(self, nodeclass: Mapping[str, Any] | None) -> Any:
        """The NodeClass fields that change the instance types (must be freezable)."""
        return None

    def gated_params(self, nodeclass: Mapping[str, Any] | None, gates: Mapping[str, bool]) -> Any:
        """:meth:`_params` under the feature gates that change what a NodeClass means (none by default)."""
        return self._params(nodeclass)

    def _build(self, region: str, params: Any) -> list[InstanceType]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


# --------------------------------------------------------------------------
# lookup

_PROVIDER_MODULES = ("azure", "aws", "kwok")


def all_providers() -> list[CatalogProvider]:
    """The azure, aws and kwok provider objects."""
    return [importlib.import_module(f"{__package__}.{m}").provider for m in _PROVIDER_MODULES]


def get_provider(name_or_kind_or_group: str) -> CatalogProvider:
    """See :func:`_get_provider` (results cached per key)."""
    key = name_or_kind_or_group or ""
    hit = _PROVIDERS.get(key)
    if hit is None:
        hit = _PROVIDERS[key] = _get_provider(key)
    return hit


_PROVIDERS: dict[str, CatalogProvider] = {}


def _get_provider(name_or_kind_or_group: str) -> CatalogProvider:
    """The provider for a name ("azure"), NodeClass kind ("AKSNodeClass"), API group
    ("karpenter.azure.com") or apiVersion ("karpenter.azure.com/v1beta1").

    Raises ValueError naming the accepted values when nothing matches.
    """
    key = (name_or_kind_or_group or "").strip()
    group = key.split("/", 1)[0]
    for p in all_providers():
        if key.lower() == p.name or key == p.nodeclass_kind or group == p.group:
            return p
    accepted = []
    for p in all_providers():
        accepted += [p.name, p.nodeclass_kind, p.group]
    raise ValueError(f"unknown cloud provider {name_or_kind_or_group!r}: expected one of {', '.join(accepted)}")
