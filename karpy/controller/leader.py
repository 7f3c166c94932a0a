"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it.

The Lease ``karpenter-leader-election`` in the controller's namespace names its
holder. A candidate takes it when it does not exist, when its holder is empty
(released), or when it has not changed for ``leaseDurationSeconds`` as seen
from the candidate's own clock (client-go compares against the time it last
*observed* a change, not the timestamps in the Lease, so clock skew between
replicas does not matter). The leader renews every ``retry_period``; when
renewals keep failing for ``renew_deadline`` it has lost the lease and stops.
A leader that stops cleanly releases the Lease at once (empty holder,
``leaseDurationSeconds: 1``) so a standby takes over within one retry period.

Writes use the Lease's resourceVersion: of two candidates writing at the same
time, one gets a 409 Conflict and stays a candidate.

Timings default to controller-runtime's: lease 15 s, renew deadline 10 s,
retry period 2 s; a standby takes over at most 15 s + 2 s after the leader's
last renewal.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable

from ..kube import errors as E

LEASE_NAME = "karpenter-leader-election"


def micro_time(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, api: Any, namespace: str, identity: str, name: str = LEASE_NAME,
                 lease_duration: float = 15.0, renew_deadline: float = 10.0, retry_period: float = 2.0,
                 now: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 log: Any = None):
        self.api = api
        self.namespace = namespace
        self.identity = identity
        self.name = name
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.now = now
        self.wall = wall
        self.log = log
        self.is_leader = False
        self._observed: tuple | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self.stop_event = threading.Event()
        self.lost = False

    # --- one attempt ------------------------------------------------------------------------------
    def _observe(self, lease: dict) -> None:
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity") or "", spec.get("renewTime"), spec.get("acquireTime"),
                  spec.get("leaseTransitions"), spec.get("leaseDurationSeconds"))
        if record != self._observed:
            self._observed = record
            self._observed_at = self.now()

    def holder(self) -> str:
        return self._observed[0] if self._observed else ""

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this candidate holds the Lease afterwards."""
        now = self.now()
        wall = micro_time(self.wall())
        try:
            lease = self.api.get("Lease", self.name, self.namespace)
        except E.NotFound:
            try:
                created = self.api.create({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.lease_duration),
                             "acquireTime": wall, "renewTime": wall, "leaseTransitions": 0},
                })
            except (E.AlreadyExists, E.Conflict):
                return self._set(False)
            self._observe(created)
            self._last_renew = now
            return self._set(True)
        self._observe(lease)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and self._observed_at + duration > now:
            return self._set(False)  # someone else holds a live lease
        new_spec = dict(spec)
        new_spec["holderIdentity"] = self.identity
        new_spec["leaseDurationSeconds"] = int(self.lease_duration)
        new_spec["renewTime"] = wall
        if holder != self.identity:
            new_spec["acquireTime"] = wall
            # client-go counts every change of holder, a released Lease (no holder) taken over included
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        meta = lease["metadata"]
        new = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": self.name, "namespace": self.namespace,
                            "resourceVersion": meta.get("resourceVersion")},
               "spec": new_spec}
        try:
            updated = self.api.update(new)
        except (E.Conflict, E.NotFound):
            return self._set(False)
        self._observe(updated)
        self._last_renew = now
        return self._set(True)

    def _set(self, leader: bool) -> bool:
        if leader and not self.is_leader and self.log is not None:
            self.log.info("successfully acquired lease", controller="leader-election",
                          lease=f"{self.namespace}/{self.name}", identity=self.identity)
        self.is_leader = leader if leader or not self.is_leader else self.is_leader
        return leader

    def release(self) -> bool:
        """Give the Lease up at once (on a clean stop); True when it was released."""
        if not self.is_leader:
            return False
        try:
            lease = self.api.get("Lease", self.name, self.namespace)
            spec = lease.get("spec") or {}
            if (spec.get("holderIdentity") or "") != self.identity:
                self.is_leader = False
                return False
            wall = micro_time(self.wall())
            self.api.update({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                             "metadata": {"name": self.name, "namespace": self.namespace,
                                          "resourceVersion": lease["metadata"].get("resourceVersion")},
                             "spec": {"holderIdentity": None, "leaseDurationSeconds": 1, "acquireTime": wall,
                                      "renewTime": wall, "leaseTransitions": spec.get("leaseTransitions") or 0}})
        except E.ApiError as e:
            if self.log is not None:
                self.log.error("failed to release lease", controller="leader-election", error=str(e))
            return False
        self.is_leader = False
        if self.log is not None:
            self.log.info("released lease", controller="leader-election", lease=f"{self.namespace}/{self.name}",
                          identity=self.identity)
        return True

    # --- the loop ---------------------------------------------------------------------------------
    def _attempt(self) -> bool:
        try:
            return self.try_acquire_or_renew()
        except Exception as e:  # noqa: BLE001 - API unreachable: try again next period
            if self.log is not None:
                self.log.error("error retrieving resource lock", controller="leader-election",
                               lease=f"{self.namespace}/{self.name}", error=str(e))
            return False

    def run(self, on_started: Callable[[], None], on_lost: Callable[[], None]) -> None:
        """Acquire (retrying every ``retry_period``), call ``on_started``, renew until stopped or lost."""
        if self.log is not None:
            self.log.info("attempting to acquire leader lease", controller="leader-election",
                          lease=f"{self.namespace}/{self.name}", identity=self.identity)
        while not self.stop_event.is_set():
            if self._attempt():
                break
            self.stop_event.wait(self.retry_period)
        if self.stop_event.is_set():
            return
        on_started()
        while not self.stop_event.wait(self.retry_period):
            if self._attempt():
                continue
            if self.now() - self._last_renew >= self.renew_deadline or (self.holder() and self.holder() != self.identity):
                self.is_leader = False
                self.lost = True
                if self.log is not None:
                    self.log.error("leader election lost", controller="leader-election",
                                   lease=f"{self.namespace}/{self.name}", identity=self.identity)
                on_lost()
                return

    def start(self, on_started: Callable[[], None], on_lost: Callable[[], None]) -> threading.Thread:
        t = threading.Thread(target=self.run, args=(on_started, on_lost), name="leader-election", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        self.stop_event.set()
