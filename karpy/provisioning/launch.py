"""Launch choice: which offering a NodeClaim becomes, as upstream's providers pick it.

A NodeClaim carries up to 60 instance types. At launch the provider keeps the
offerings (zone x capacity type) that its requirements allow and that are not
known to be out of capacity, then:

* drops exotic types (GPUs, accelerators, bare metal) when plainer ones remain
  and the requirements do not ask for them (nor, with
  ``keep_exotic_with_min_values``, as upstream's EC2 launch, carry a minValues);
* when both spot and on-demand are allowed, drops spot offerings dearer than
  the cheapest on-demand one;
* takes the capacity type in upstream's priority — reserved, then spot, then
  on-demand — among those still offered;
* launches the cheapest offering of that capacity type (lowest price, as the
  lowest-price / price-capacity-optimized strategies do in a world with no
  capacity signal), falling back to the next cheapest when one turns out to be
  unavailable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..cloudprovider.types import (
    CAPACITY_ON_DEMAND,
    CAPACITY_RESERVED,
    CAPACITY_SPOT,
    LABEL_CAPACITY_TYPE,
    LABEL_ZONE,
    InstanceType,
    Offering,
    offering_labels_allowed,
)
from ..scheduling.requirements import Requirements

CAPACITY_PRIORITY = (CAPACITY_RESERVED, CAPACITY_SPOT, CAPACITY_ON_DEMAND)

_EXOTIC_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "aws.amazon.com/neuron", "aws.amazon.com/neuroncore", "habana.ai/gaudi")


@dataclass(frozen=True)
class Candidate:
    instance_type: InstanceType
    offering: Offering


def _is_exotic(it: InstanceType) -> bool:
    if any(it.capacity.get(r, 0) for r in _EXOTIC_RESOURCES):
        return True
    size = it.labels.get("karpenter.k8s.aws/instance-size", "")
    return size.endswith("metal")


def launch_candidates(
    requirements: Requirements,
    instance_types: Sequence[InstanceType],
    is_unavailable: Callable[[InstanceType, Offering], bool] = lambda it, o: False,
    keep_exotic_with_min_values: bool = False,
) -> list[Candidate]:
    """Offerings in the order the provider would try them (first = launched if it has capacity)."""
    types = list(instance_types)
    asks_exotic = any(
        r.key.endswith(("gpu-count", "gpu-name", "gpu-manufacturer", "accelerator-name", "accelerator-count"))
        or r.key.endswith("instance-size")
        for r in requirements
    )
    # upstream's EC2 launch keeps exotic types when any requirement has minValues (their variety may count)
    if not asks_exotic and not (keep_exotic_with_min_values and any(r.min_values is not None for r in requirements)):
        plain = [it for it in types if not _is_exotic(it)]
        if plain:
            types = plain
    zones = requirements.get(LABEL_ZONE)
    cts = requirements.get(LABEL_CAPACITY_TYPE)
    allowed: dict[tuple[str, str], bool] = {}

    def ok(o: Offering) -> bool:
        k = (o.zone, o.capacity_type)
        v = allowed.get(k)
        if v is None:
            v = allowed[k] = zones.has(o.zone) and cts.has(o.capacity_type)
        return v

    offers = [Candidate(it, o) for it in types for o in it.offerings
              if o.available and ok(o) and (not o.labels or offering_labels_allowed(o, requirements))
              and not is_unavailable(it, o)]
    if not offers:
        return []
    cts = {c.offering.capacity_type for c in offers}
    if CAPACITY_SPOT in cts and CAPACITY_ON_DEMAND in cts:
        cheapest_od = min(c.offering.price for c in offers if c.offering.capacity_type == CAPACITY_ON_DEMAND)
        offers = [c for c in offers if c.offering.capacity_type != CAPACITY_SPOT or c.offering.price <= cheapest_od]
        cts = {c.offering.capacity_type for c in offers}
    chosen_ct = next(ct for ct in CAPACITY_PRIORITY if ct in cts)
    ordered = sorted(
        (c for c in offers if c.offering.capacity_type == chosen_ct),
        key=lambda c: (c.offering.price, c.instance_type.name, c.offering.zone),
    )
    # Within one launch the provider falls back across the offerings of the chosen capacity
    # type; should all of them fail, the launch fails and the next provisioning round,
    # knowing those offerings are out of capacity, chooses again.
    return ordered
