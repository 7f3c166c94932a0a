"""Where the viewer finds a node's price, first hit wins, and says which it used.

1. ``annotation``: the NodeClaim's (or Node's) ``karpy.dev/price-per-hour`` annotation, which karpy writes
   for the offering it launched, or the ``eks-node-viewer/instance-price`` label people already set to
   override a price;
2. ``catalog``: karpy's own instance-type catalogs (the same data ``karpy simulate`` prices with), by the
   node's provider, instance type, region or zone and capacity type: no network, so prices show offline;
3. ``none``: no price known; the node is counted as unpriced instead of silently adding nothing.

Live price lists (Azure Retail Prices, AWS Pricing) are not fetched: karpy's catalogs carry those prices
already, and the viewer must start at once without a network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

PRICE_ANNOTATION = "karpy.dev/price-per-hour"
PRICE_ESTIMATED = "karpy.dev/price-estimated"
PRICE_LABEL = "eks-node-viewer/instance-price"  # eks-node-viewer's override label

LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_CAPACITY_TYPE = "karpenter.sh/capacity-type"


@dataclass(frozen=True)
class Price:
    per_hour: float | None
    source: str  # annotation | catalog | live | none
    estimated: bool = False  # a spot price the catalog estimated from the on-demand price


NO_PRICE = Price(None, "none")


def provider_of(provider_id: str, labels: Mapping[str, str]) -> str | None:
    """azure, aws or kwok, from the providerID's scheme or the provider's labels."""
    scheme = provider_id.split(":", 1)[0] if ":" in provider_id else ""
    if scheme in ("azure", "aws", "kwok"):
        return scheme
    keys = " ".join(labels)
    if "karpenter.azure.com/" in keys or "kubernetes.azure.com/" in keys:
        return "azure"
    if "karpenter.k8s.aws/" in keys or "eks.amazonaws.com/" in keys:
        return "aws"
    if "karpenter.kwok.sh/" in keys:
        return "kwok"
    return None


def region_of(provider: str, labels: Mapping[str, str]) -> str | None:
    region = labels.get(LABEL_REGION)
    if region:
        return region
    zone = labels.get(LABEL_ZONE) or ""
    if provider == "azure" and "-" in zone:
        return zone.rsplit("-", 1)[0]  # eastus-1
    if provider == "aws" and zone[-1:].isalpha():
        return zone[:-1]  # us-east-1a
    return None


class PriceBook:
    """Prices for nodes. ``disabled`` (``--disable-pricing``) answers ``none`` for every node."""

    def __init__(self, disabled: bool = False):
        self.disabled = disabled
        self._types: dict[tuple[str, str], dict[str, list[Any]]] = {}

    def _offerings(self, provider: str, region: str | None) -> dict[str, list[Any]]:
        """Instance type name -> its offerings, from karpy's catalog for that provider and region."""
        key = (provider, region or "")
        hit = self._types.get(key)
        if hit is None:
            from ..cloudprovider.catalog import get_provider

            try:
                types = get_provider(provider).instance_types(region, None)
            except (ValueError, KeyError):
                types = []  # a region the catalog does not know: no catalog price
            hit = self._types[key] = {it.name: list(it.offerings) for it in types}
        return hit

    def price(self, labels: Mapping[str, str], annotations: Mapping[str, str], provider_id: str = "") -> Price:
        if self.disabled:
            return NO_PRICE
        for value, est in ((annotations.get(PRICE_ANNOTATION), annotations.get(PRICE_ESTIMATED) == "true"),
                           (labels.get(PRICE_LABEL), False)):
            if value:
                try:
                    return Price(float(value), "annotation", est)
                except ValueError:
                    pass
        return self.catalog_price(labels, provider_id)

    def catalog_price(self, labels: Mapping[str, str], provider_id: str = "") -> Price:
        """The catalog's price of the node's offering: its instance type, capacity type and zone (any zone of
        the region when the zone is not offered: karpy's catalogs price by region)."""
        provider = provider_of(provider_id, labels)
        itype = labels.get(LABEL_INSTANCE_TYPE)
        if provider is None or not itype:
            return NO_PRICE
        capacity = capacity_type(labels) or "on-demand"
        if capacity == "reserved":
            return NO_PRICE  # a reservation's price is the customer's contract, not a list price
        region = None if provider == "kwok" else region_of(provider, labels)
        if provider != "kwok" and region is None:
            return NO_PRICE
        offers = [o for o in self._offerings(provider, region).get(itype, ()) if o.capacity_type == capacity]
        zone = labels.get(LABEL_ZONE)
        exact = [o for o in offers if o.zone == zone] or offers
        if not exact:
            return NO_PRICE
        return Price(float(exact[0].price), "catalog", bool(exact[0].price_estimated))


def capacity_type(labels: Mapping[str, str]) -> str | None:
    """on-demand, spot or reserved: Karpenter's label, else the labels AKS and EKS put on their own node pools."""
    ct = labels.get(LABEL_CAPACITY_TYPE)
    if ct:
        return ct
    if labels.get("kubernetes.azure.com/scalesetpriority") == "spot":
        return "spot"
    eks = labels.get("eks.amazonaws.com/capacityType")
    if eks:
        return {"ON_DEMAND": "on-demand", "SPOT": "spot"}.get(eks, eks.lower())
    if labels.get("kubernetes.azure.com/scalesetpriority") == "regular":
        return "on-demand"
    return None
