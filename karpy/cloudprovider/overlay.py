"""NodeOverlays applied to instance types: what Karpenter sees of a NodePool's instance types with the
``NodeOverlay`` feature gate on.

:func:`evaluate` reads every NodeOverlay against every NodePool's instance types (as the cloud lists
them) and gives an :class:`OverlayStore`; :meth:`OverlayStore.apply` then gives a NodePool's instance
types with their prices and capacities changed. The rules are upstream's (``nodeoverlay`` controller and
store, v1.14):

* An overlay applies to an instance type of a NodePool when its requirements are compatible with the
  NodePool's name (``karpenter.sh/nodepool``), the NodePool template's labels and the instance type's
  labels, zones and capacity types; a requirement on a key none of these defines never matches (unless it
  is ``NotIn``/``DoesNotExist``). Its price applies to the offerings whose zone and capacity type it allows.
* Overlays are taken highest ``weight`` first (unset = 0), equal weights by name, the later name first.
  The first overlay to change an offering's price (or a capacity resource) keeps it: lower weights
  never override higher ones.
* Two overlays *of the same weight* that would change the same offering's price, or the same capacity
  resource of the same instance type, conflict: the one taken second is not applied at all (for any
  NodePool) and is reported with ``ValidationSucceeded=False``, reason ``Conflict``.
* ``price`` replaces the offering's price; ``priceAdjustment`` adds a signed amount or percentage,
  never going below 0. ``capacity`` adds extended resources (replacing one the type already has).

An adjusted offering's ``price_source`` is ``overlay`` (:func:`price_overlaid`); an instance type with
overlaid capacity is an :class:`OverlaidInstanceType` with ``capacity_overlaid`` set. The launch choice (``karpy/cloudprovider/simulated.py``) ranks offerings by the
overlaid prices, as upstream's AWS and Azure providers do, and a node's printed price is the overlaid one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping

from ..resources import parse_resource_list
from ..scheduling.requirements import Requirement, Requirements
from .types import LABEL_CAPACITY_TYPE, LABEL_NODEPOOL, LABEL_ZONE, InstanceType, Offering

PRICE_FROM_OVERLAY = "overlay"  # Offering.price_source of a price a NodeOverlay changed
CONFLICT = "Conflict"
RUNTIME_VALIDATION = "RuntimeValidation"
CONFLICT_MESSAGE = "conflict with another overlay"


def adjusted_price(price: float, change: str) -> float:
    """The price of an offering after an overlay's ``price`` (no sign: the new price) or ``priceAdjustment``
    (``+0.5``, ``-0.1``, ``+10%``, ``-15%``), never below 0."""
    if not change:
        return price
    if change[0] not in "+-":
        return float(change)
    if change.endswith("%"):
        out = price * (1 + float(change[:-1]) / 100)
    else:
        out = price + float(change)
    return out if out >= 0 else 0.0


def weight(overlay: Mapping) -> int:
    w = (overlay.get("spec") or {}).get("weight")
    return w if isinstance(w, int) and not isinstance(w, bool) else 0


def name_of(obj: Mapping) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def order_by_weight(overlays: Iterable[Mapping]) -> list[Mapping]:
    """Highest weight first; between equal weights the name later in the alphabet first (upstream's order)."""
    by_name = sorted(overlays, key=name_of, reverse=True)
    return sorted(by_name, key=weight, reverse=True)  # stable: equal weights keep the reverse name order


@dataclass
class OverlaidInstanceType(InstanceType):
    """An instance type a NodeOverlay changed; ``capacity_overlaid`` when it added to ``capacity``."""

    capacity_overlaid: bool = False


def price_overlaid(it: InstanceType) -> bool:
    return any(o.price_source == PRICE_FROM_OVERLAY for o in it.offerings)


def capacity_overlaid(it: InstanceType) -> bool:
    return bool(getattr(it, "capacity_overlaid", False))


PRICE_OVERLAY_APPLIED = "karpenter.sh/price-overlay-applied"
CAPACITY_OVERLAY_APPLIED = "karpenter.sh/capacity-overlay-applied"


def overlay_annotations(types: Iterable[InstanceType], memo: dict | None = None) -> dict[str, str]:
    """A NodeClaim's annotations (upstream's) saying that overlays changed some of its instance types. ``memo``
    (id of a type -> (the type, price overlaid, capacity overlaid)), kept by a caller across NodeClaims, looks at
    each type's offerings once: a solve's NodeClaims share the catalog's types."""
    price = capacity = False
    for it in types:
        hit = memo.get(id(it)) if memo is not None else None
        if hit is None or hit[0] is not it:
            hit = (it, price_overlaid(it), capacity_overlaid(it))
            if memo is not None:
                if len(memo) > 100_000:
                    memo.clear()
                memo[id(it)] = hit
        price = price or hit[1]
        capacity = capacity or hit[2]
    out = {}
    if price:
        out[PRICE_OVERLAY_APPLIED] = "true"
    if capacity:
        out[CAPACITY_OVERLAY_APPLIED] = "true"
    return out


def _offering_key(o: Offering) -> tuple:
    return (o.zone, o.capacity_type, o.reservation_id)


@dataclass
class _Price:
    change: str
    lowest_weight: int


@dataclass
class _Capacity:
    resources: dict[str, int] = field(default_factory=dict)
    lowest_weight_resources: frozenset[str] = frozenset()
    lowest_weight: int = 0


@dataclass
class _Update:
    prices: dict[tuple, _Price] = field(default_factory=dict)
    capacity: _Capacity | None = None


@dataclass
class OverlayStore:
    """The evaluated overlays: per NodePool and instance type, the price and capacity changes."""

    updates: dict[str, dict[str, _Update]] = field(default_factory=dict)
    evaluated: frozenset[str] = frozenset()
    conflicts: tuple[str, ...] = ()
    invalid: dict[str, str] = field(default_factory=dict)  # overlay name -> runtime validation message
    version: int = 0

    def apply(self, nodepool: str, types: list[InstanceType]) -> list[InstanceType]:
        per_type = self.updates.get(nodepool)
        if not per_type:
            return types
        return [_apply(it, per_type[it.name]) if it.name in per_type else it for it in types]

    def touches(self, nodepool: str) -> bool:
        return bool(self.updates.get(nodepool))

    def updates_signature(self) -> tuple:
        """What the store changes, comparable between evaluations."""
        return tuple(
            (np, it, tuple(sorted((k, p.change) for k, p in u.prices.items())),
             tuple(sorted((u.capacity.resources if u.capacity else {}).items())))
            for np, per_type in sorted(self.updates.items()) for it, u in sorted(per_type.items()))


def _apply(it: InstanceType, u: _Update) -> InstanceType:
    offerings = it.offerings
    if u.prices:
        offerings = [_priced(o, u.prices[_offering_key(o)].change) if _offering_key(o) in u.prices else o
                     for o in it.offerings]
    capacity = it.capacity
    overlaid = capacity_overlaid(it)
    if u.capacity is not None and u.capacity.resources:
        capacity = {**it.capacity, **u.capacity.resources}
        overlaid = True
    return OverlaidInstanceType(it.name, it.labels, capacity, it.overhead, offerings, capacity_overlaid=overlaid)


def _priced(o: Offering, change: str) -> Offering:
    price = adjusted_price(o.price, change)
    absolute = change[0] not in "+-"
    billed = None if absolute or o.billed_price is None else adjusted_price(o.billed_price, change)
    return replace(o, price=price, billed_price=billed, price_source=PRICE_FROM_OVERLAY,
                   price_estimated=False if absolute else o.price_estimated)


def _requirements(overlay: Mapping) -> Requirements:
    reqs = Requirements()
    for r in (overlay.get("spec") or {}).get("requirements") or ():
        reqs.add(Requirement.new(r["key"], r["operator"], r.get("values") or ()))
    return reqs


def _matching_offerings(nodepool: Mapping, it: InstanceType, reqs: Requirements) -> list[Offering]:
    """The offerings of ``it`` (in ``nodepool``) whose price the overlay's requirements select; [] when the
    overlay does not select the instance type there."""
    labels = dict(((nodepool.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {})
    known = Requirements.from_labels({**{str(k): str(v) for k, v in labels.items()}, **it.labels,
                                      LABEL_NODEPOOL: name_of(nodepool)})
    known.add(Requirement.new(LABEL_ZONE, "In", sorted({o.zone for o in it.offerings})))
    known.add(Requirement.new(LABEL_CAPACITY_TYPE, "In", sorted({o.capacity_type for o in it.offerings})))
    if known.compatible(reqs) is not None:
        return []
    zones, cts = reqs.get(LABEL_ZONE), reqs.get(LABEL_CAPACITY_TYPE)
    return [o for o in it.offerings if zones.has(o.zone) and cts.has(o.capacity_type)]


def evaluate(overlays: Iterable[Mapping], nodepools: list[tuple[Mapping, list[InstanceType]]],
             runtime_errors: Callable[[Mapping], list[str]] = lambda o: [], version: int = 0) -> OverlayStore:
    """Read every overlay against every NodePool's instance types (see the module docstring)."""
    store = OverlayStore(evaluated=frozenset(name_of(np) for np, _ in nodepools), version=version)
    conflicts: list[str] = []
    for ov in order_by_weight(overlays):
        errs = runtime_errors(ov)
        if errs:
            store.invalid[name_of(ov)] = "; ".join(errs)
            continue
        spec = ov.get("spec") or {}
        change = spec.get("price") if spec.get("price") is not None else spec.get("priceAdjustment")
        capacity = parse_resource_list(spec.get("capacity")) if spec.get("capacity") else {}
        w = weight(ov)
        reqs = _requirements(ov)
        hits = [(name_of(np), it, offs) for np, types in nodepools for it in types
                for offs in [_matching_offerings(np, it, reqs)] if offs]
        if any(_conflicts(store, np, it.name, offs, change, capacity, w) for np, it, offs in hits):
            conflicts.append(name_of(ov))
            continue
        for np, it, offs in hits:
            _record(store, np, it.name, offs, change, capacity, w)
    store.conflicts = tuple(conflicts)
    return store


def _conflicts(store: OverlayStore, np: str, it: str, offs: list[Offering], change: str | None,
               capacity: dict[str, int], w: int) -> bool:
    u = store.updates.get(np, {}).get(it)
    if u is None:
        return False
    if change is not None:
        for o in offs:
            p = u.prices.get(_offering_key(o))
            if p is not None and p.lowest_weight == w:
                return True
    if capacity and u.capacity is not None and u.capacity.lowest_weight == w:
        if any(r in u.capacity.lowest_weight_resources for r in capacity):
            return True
    return False


def _record(store: OverlayStore, np: str, it: str, offs: list[Offering], change: str | None,
            capacity: dict[str, int], w: int) -> None:
    if change is None and not capacity:
        return
    u = store.updates.setdefault(np, {}).setdefault(it, _Update())
    if change is not None:
        for o in offs:
            p = u.prices.get(_offering_key(o))
            if p is None:
                u.prices[_offering_key(o)] = _Price(str(change), w)
            else:
                p.lowest_weight = w  # a lower weight reached it: kept for the conflict check, not applied
    if capacity:
        if u.capacity is None:
            u.capacity = _Capacity(dict(capacity), frozenset(capacity), w)
        else:
            for r, q in capacity.items():
                u.capacity.resources.setdefault(r, q)
            u.capacity.lowest_weight_resources = frozenset(capacity)
            u.capacity.lowest_weight = w


__all__ = ["CONFLICT", "CONFLICT_MESSAGE", "PRICE_FROM_OVERLAY", "RUNTIME_VALIDATION", "OverlaidInstanceType",
           "OverlayStore", "capacity_overlaid", "name_of", "overlay_annotations", "price_overlaid", "adjusted_price", "evaluate",
           "order_by_weight", "weight"]
