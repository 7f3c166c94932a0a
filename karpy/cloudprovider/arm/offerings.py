"""Azure's capacity errors and the unavailable-offerings cache, with upstream's scopes and TTLs.

A failed launch is classified by ARM's error code (and, for quota, the message), first match wins:

=====================================================  ==========================================  ==========
error                                                  offerings marked unavailable                TTL
=====================================================  ==========================================  ==========
OperationNotAllowed + "LowPriorityCores"               every spot offering                         1 h
OperationNotAllowed + "Family Cores quota"             the family at >= this size's vCPUs, this    1 h if the
                                                       capacity type, every zone                   limit is 0,
                                                                                                   else 10 min
SkuNotAvailable                                        the size, this capacity type, every zone    spot 1 h,
                                                       of its placement scope                      else 23 h
ZonalAllocationFailed                                  the size's family at >= its vCPUs           1 h
                                                       in this zone, both capacity types
AllocationFailed                                       the size in its placement scope, both       1 h
OverconstrainedZonalAllocationRequest                  the size in this zone and capacity type     1 h
OverconstrainedAllocationRequest                       the size, capacity type, placement scope    1 h
OperationNotAllowed + "Total Regional Cores quota"     nothing (no other size helps)               -
=====================================================  ==========================================  ==========

Everything else is a launch error (upstream's ``CreateInstanceFailed``) and marks nothing. A marked offering is
skipped by instance-type listing and launch until its TTL ends; :meth:`Unavailable.key` changes whenever the
set does, which is what the engine watches to re-plan.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from ..types import CAPACITY_ON_DEMAND, CAPACITY_SPOT

HOUR = 3600.0
DEFAULT_TTL = 180.0
LOW_QUOTA_TTL = 600.0
SKU_NOT_AVAILABLE_ON_DEMAND_TTL = 23 * HOUR


@dataclass(frozen=True)
class Classified:
    reason: str  # upstream's CreateError reason
    capacity: bool  # a capacity error: the NodeClaim is deleted and planned again elsewhere
    ttl: float = 0.0


def classify(code: str, message: str) -> Classified:
    if code == "OperationNotAllowed" and "LowPriorityCores" in message:
        return Classified("SubscriptionQuotaReached", True, HOUR)
    if code == "OperationNotAllowed" and "Family Cores quota" in message:
        return Classified("SubscriptionQuotaReached", True, HOUR if "Current Limit: 0" in message else LOW_QUOTA_TTL)
    if code == "SkuNotAvailable":
        return Classified("SKUNotAvailable", True)
    if code == "ZonalAllocationFailed":
        return Classified("ZonalAllocationFailure", True, HOUR)
    if code == "AllocationFailed":
        return Classified("AllocationFailure", True, HOUR)
    if code == "OverconstrainedZonalAllocationRequest":
        return Classified("OverconstrainedZonalAllocationFailure", True, HOUR)
    if code == "OverconstrainedAllocationRequest":
        return Classified("OverconstrainedAllocationFailure", True, HOUR)
    if code == "OperationNotAllowed" and "Total Regional Cores quota" in message:
        return Classified("SubscriptionQuotaReached", True)
    return Classified("CreateInstanceFailed", False)


class Unavailable:
    """Offerings known to be out of capacity: (capacity type, size, zone), whole capacity types, and VM
    families at or above a vCPU count."""

    def __init__(self, now: Callable[[], float] = time.time):
        self.now = now
        self.lock = threading.Lock()
        self.offerings: dict[tuple[str, str, str], float] = {}
        self.families: dict[tuple[str, str, str], tuple[int, float]] = {}  # (family, zone, ct) -> (min vCPUs, until)
        self.all_spot_until = 0.0
        self.seq = 0

    def mark(self, ct: str, size: str, zone: str, ttl: float) -> None:
        with self.lock:
            self.offerings[(ct, size, zone)] = max(self.offerings.get((ct, size, zone), 0.0), self.now() + ttl)
            self.seq += 1

    def mark_family(self, family: str, zone: str, ct: str, vcpus: int, ttl: float) -> None:
        key = (family.lower(), zone, ct)
        with self.lock:
            old = self.families.get(key)
            threshold = min(vcpus, old[0]) if old and old[1] > self.now() else vcpus
            self.families[key] = (threshold, self.now() + ttl)
            self.seq += 1

    def mark_all_spot(self, ttl: float) -> None:
        with self.lock:
            self.all_spot_until = self.now() + ttl
            self.seq += 1

    def is_unavailable(self, ct: str, size: str, zone: str, family: str = "", vcpus: int = 0) -> bool:
        now = self.now()
        if ct == CAPACITY_SPOT and self.all_spot_until > now:
            return True
        if self.offerings.get((ct, size, zone), 0.0) > now:
            return True
        fam = self.families.get((family.lower(), zone, ct)) if family else None
        return fam is not None and fam[1] > now and vcpus >= fam[0]

    def key(self) -> tuple:
        """Changes whenever the set of unavailable offerings changes (entries expiring included)."""
        now = self.now()
        return (tuple(sorted(k for k, t in self.offerings.items() if t > now)),
                tuple(sorted((k, v[0]) for k, v in self.families.items() if v[1] > now)),
                self.all_spot_until > now)

    def record(self, c: Classified, code: str, ct: str, size: str, zone: str, zones: list[str], family: str,
               vcpus: int, message: str = "") -> list[str]:
        """Mark what a classified launch error says is unavailable; a description of each mark, for the log."""
        marks: list[str] = []
        regional = zone == "0"
        scope = [z for z in zones if (z == "0") == regional]  # the attempted placement scope's zones
        if c.reason == "SubscriptionQuotaReached" and "LowPriorityCores" in message:
            self.mark_all_spot(c.ttl)
            marks.append("every spot offering")
        elif c.reason == "SubscriptionQuotaReached" and c.ttl:
            for z in zones:
                self.mark_family(family, z, ct, vcpus, c.ttl)
            marks.append(f"family {family} at >= {vcpus} vCPUs, {ct}, every zone")
        elif code == "SkuNotAvailable":
            ttl = HOUR if ct == CAPACITY_SPOT else SKU_NOT_AVAILABLE_ON_DEMAND_TTL
            for z in scope:
                self.mark(ct, size, z, ttl)
            marks.append(f"{size} {ct} in {', '.join(scope)}")
        elif code == "ZonalAllocationFailed":  # as upstream: the family's sizes at least as large fail there too
            for t in (CAPACITY_ON_DEMAND, CAPACITY_SPOT):
                self.mark(t, size, zone, c.ttl)
                if family and vcpus:
                    self.mark_family(family, zone, t, vcpus, c.ttl)
            marks.append(f"{size} (and family {family} at >= {vcpus} vCPUs) in {zone}, both capacity types")
        elif code == "AllocationFailed":
            for z in scope:
                for t in (CAPACITY_ON_DEMAND, CAPACITY_SPOT):
                    self.mark(t, size, z, c.ttl)
            marks.append(f"{size} in {', '.join(scope)}, both capacity types")
        elif code == "OverconstrainedZonalAllocationRequest":
            self.mark(ct, size, zone, c.ttl)
            marks.append(f"{size} {ct} in {zone}")
        elif code == "OverconstrainedAllocationRequest":
            for z in scope:
                self.mark(ct, size, z, c.ttl)
            marks.append(f"{size} {ct} in {', '.join(scope)}")
        return marks
