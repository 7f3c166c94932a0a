"""Capacity reservations during one scheduling solve (upstream's ReservationManager).

A ``reserved`` offering stands for a capacity reservation with some instances left (``reservation_capacity``). While
the solver builds NodeClaims it does not know which instance type or offering each will launch with, so it holds,
pessimistically, one instance of *every* reservation a NodeClaim could launch into: a reservation with one instance
left is held by one NodeClaim of the solve, whichever NodePool it comes from (reservations are counted by ID,
across NodePools).

In strict mode (the provisioner's, upstream's ``DisableReservedCapacityFallback``) a pod is refused where it would
need a reserved offering that is available but already held by other NodeClaims, or where it would take away the
last reservation a NodeClaim holds: the pod waits for the next solve (the launches of this one will have used
the reservations up, or not) instead of falling back to a lighter NodePool, to on-demand, or to relaxed
preferences. The disruption controller's simulations use the fallback mode: reservations are counted, never refused.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from ..cloudprovider.types import CAPACITY_RESERVED, LABEL_CAPACITY_TYPE, LABEL_ZONE, InstanceType, Offering
from .requirements import Requirements

# the start of the reason a pod gets when a reserved offering it needs is held by other NodeClaims of the solve:
# upstream publishes no FailedScheduling event for it (the pod is retried next time)
RESERVED_OFFERING_ERROR = "reserved offering error"


class ReservationError(RuntimeError):
    """The scheduler asked for a reservation the solve does not know, or for more instances than it has left."""


class _Refused:
    """Why offerings_to_reserve refused (strict mode)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason


def reserved_offerings(types: Sequence[InstanceType]) -> list[list[Offering]]:
    """Per instance type, its available ``reserved`` offerings."""
    return [[o for o in it.offerings if o.capacity_type == CAPACITY_RESERVED and o.available and o.reservation_id]
            for it in types]


class ReservationManager:
    """Instances left per reservation ID, and which reservations each NodeClaim (by hostname) holds."""

    def __init__(self, offerings: Iterable[Offering]):
        self.capacity: dict[str, int] = {}
        for o in offerings:
            left = o.reservation_capacity if o.reservation_capacity is not None else 1
            rid = o.reservation_id
            # several NodePools may list one reservation: the smallest count seen wins, as upstream
            if rid not in self.capacity or self.capacity[rid] > left:
                self.capacity[rid] = left
        self.held: dict[str, set[str]] = {}

    def _left(self, rid: str) -> int:
        left = self.capacity.get(rid)
        if left is None:  # only offerings the manager was built from can be reserved: a scheduler bug otherwise
            raise ReservationError(f"reservation {rid!r} is not one of this solve's reserved offerings")
        return left

    def can_reserve(self, hostname: str, rid: str) -> bool:
        """Whether the NodeClaim ``hostname`` holds ``rid`` already or ``rid`` has an instance left."""
        return rid in self.held.get(hostname, ()) or self._left(rid) > 0

    def has_reservation(self, hostname: str, rid: str) -> bool:
        return rid in self.held.get(hostname, ())

    def remaining_capacity(self, rid: str) -> int:
        return self.capacity.get(rid, 0)

    def reserve(self, hostname: str, rids: Iterable[str]) -> None:
        """Hold one instance of each of ``rids`` for the NodeClaim ``hostname`` (idempotent per ID)."""
        held = self.held.setdefault(hostname, set())
        for rid in rids:
            if rid in held:
                continue
            if self._left(rid) <= 0:  # callers check can_reserve first: a scheduler bug otherwise
                raise ReservationError(f"reservation {rid!r} has no instance left to hold for {hostname}")
            self.capacity[rid] -= 1
            held.add(rid)

    def release(self, hostname: str, rids: Iterable[str]) -> None:
        """Give back the instances ``hostname`` holds of ``rids``; IDs it does not hold are ignored."""
        held = self.held.get(hostname)
        if not held:
            return
        for rid in rids:
            if rid in held:
                held.discard(rid)
                self.capacity[rid] += 1

    def hold_only(self, hostname: str, rids: set[str]) -> None:
        """The NodeClaim now holds exactly ``rids``: reserve the new ones, give back the others."""
        self.reserve(hostname, rids)
        self.release(hostname, self.held.get(hostname, set()) - rids)


def offerings_to_reserve(rm: ReservationManager, hostname: str, holding: set[str] | None, req: Requirements,
                         offerings: list[list[Offering]], idx: np.ndarray, strict: bool) -> set[str] | _Refused:
    """The reservations a NodeClaim with requirements ``req`` and instance types ``idx`` would hold (upstream's
    offeringsToReserve); in strict mode, a refusal when it could launch into a reservation but holds none."""
    ct = req.get(LABEL_CAPACITY_TYPE)
    out: set[str] = set()
    compatible = False
    if ct.has(CAPACITY_RESERVED):
        zr = req.get(LABEL_ZONE)
        for i in idx:
            for o in offerings[int(i)]:
                if not zr.has(o.zone):
                    continue
                compatible = True
                if rm.can_reserve(hostname, o.reservation_id):
                    out.add(o.reservation_id)
    if strict and not out:
        if compatible:
            return _Refused(f"{RESERVED_OFFERING_ERROR}, one or more instance types with compatible reserved offerings "
                            f"are available, but could not be reserved")
        if holding:
            return _Refused(f"{RESERVED_OFFERING_ERROR}, satisfying updated nodeclaim constraints would remove all "
                            f"compatible reserved offering options")
    return out
