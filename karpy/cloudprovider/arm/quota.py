"""The subscription's vCPU quota per VM family (upstream's quota provider and controller).

``GET /subscriptions/{sub}/providers/Microsoft.Compute/locations/{location}/usages`` every 10 minutes: each
family's ``limit`` and ``currentValue`` (vCPUs). An on-demand offering of a size whose family has fewer vCPUs
left than the size has is unavailable, so karpy picks another family instead of trying a launch Azure refuses
with a quota error. As upstream it fails open: a family the usages do not list, an entry without numbers, no
data yet, or data older than 15 minutes (failed refreshes) leave every size available. Spot quota
(``lowPriorityCores``) is regional and not used for selection, as upstream.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

REFRESH = 600.0
MAX_STALENESS = REFRESH + 300.0


class Quota:
    def __init__(self, list_usages: Callable[[], list[dict]], now: Callable[[], float] = time.time, log: Any = None):
        self._list, self.now, self.log = list_usages, now, log
        self.usages: dict[str, tuple[int, int]] = {}  # family -> (current vCPUs, limit)
        self.updated = 0.0  # the last successful update
        self.seq = 0  # changes when the usages do (the instance types' availability is computed again)
        self.lock = threading.Lock()

    def update(self) -> bool:
        """One refresh; whether it succeeded. After failures beyond 15 minutes the data is dropped (fail open)."""
        try:
            rows = self._list()
        except Exception as e:  # noqa: BLE001 - the next refresh; stale data is dropped below
            self._log("error", "failed updating quota usages", error=str(e))
            if self.usages and self.now() - self.updated > MAX_STALENESS:
                self._log("info", "quota data is stale beyond max staleness, resetting to fail open")
                self.reset()
            return False
        fresh: dict[str, tuple[int, int]] = {}
        for u in rows:
            name = (u.get("name") or {}).get("value")
            cur, lim = u.get("current_value", u.get("currentValue")), u.get("limit")
            if name and isinstance(cur, int) and isinstance(lim, int):
                fresh[name] = (cur, lim)
        with self.lock:
            changed = fresh != self.usages
            self.usages = fresh
            self.updated = self.now()
            if changed:
                self.seq += 1
        if changed:
            self._log("info", "updated quota usages", **{"family-quotas": len(fresh)})
        return True

    def reset(self) -> None:
        with self.lock:
            if self.usages:
                self.usages = {}
                self.seq += 1

    def has_quota_for(self, family: str, vcpus: int) -> bool:
        """Whether ``family`` has ``vcpus`` vCPUs of quota left (True when unknown)."""
        if not family or vcpus <= 0:
            return True
        with self.lock:
            u = self.usages.get(family)
        if u is None:
            return True
        return vcpus <= u[1] - u[0]

    def _log(self, level: str, msg: str, **kv: Any) -> None:
        if self.log is not None:
            getattr(self.log, level)(msg, controller="quota", **kv)


def list_usages_via(compute: Any, location: str) -> Callable[[], list[dict]]:
    """A usages lister over ``ComputeManagementClient.usage`` (dicts in the SDK's attribute names)."""
    def run() -> list[dict]:
        return [u.as_dict() for u in compute.usage.list(location)]
    return run


class QuotaRefresher:
    """The background worker of ``karpy controller``: the usages read at start, then every 10 minutes."""

    def __init__(self, quota: Quota, period: float = REFRESH):
        self.quota, self.period = quota, period
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="azure-quota", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.quota.update()
            self._stop.wait(self.period)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
