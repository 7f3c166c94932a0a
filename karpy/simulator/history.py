"""What a simulation records for its report: every NodeClaim's life, the cost over time, and every
disruption Karpenter started, read from the API's watch events and Karpenter's own log records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..kube.port import DELETED
from ..runtime.manager import Manager, condition, is_true

PRICE = "karpy.dev/price-per-hour"
PRICE_ESTIMATED = "karpy.dev/price-estimated"
PRICE_SOURCE = "karpy.dev/price-source"


@dataclass
class ClaimLife:
    name: str
    nodepool: str
    created: float
    instance_type: str | None = None
    capacity_type: str | None = None
    zone: str | None = None
    arch: str | None = None
    price: float | None = None
    price_estimated: bool = False
    price_source: str | None = None  # catalog | estimated | user: where ``price`` comes from
    launched: bool = False
    registered: float | None = None
    initialized: float | None = None
    deleting: float | None = None
    deleted: float | None = None
    reason: str | None = None
    node: str | None = None
    pods: int = 0


@dataclass
class DisruptionRecord:
    started: float
    reason: str
    method: str
    nodepool: str
    candidates: list[str]
    replacements: list[str]
    budget: dict | None
    cost_before: float
    outcome: str = "in-progress"
    message: str | None = None
    finished: float | None = None
    cost_after: float | None = None
    command_id: Any = None


class History:
    name = "world.history"
    # Karpenter's log records a report is built from
    # NodeClaims deleted at once, outside the disruption queue: expiry, interruption, node repair
    DIRECT_DELETES = ("deleting expired nodeclaim", "initiating delete from interruption message", "deleting unhealthy node")
    LOG_MESSAGES = ("disrupting node(s)", "command succeeded", "failed terminating nodes while executing a disruption command",
                    *DIRECT_DELETES)

    def __init__(self, mgr: Manager, clock: Any, exact_price: Any = None):
        self.mgr = mgr
        self.clock = clock
        self.exact_price = exact_price  # provider ID -> the launched offering's price (the annotation is rounded)
        self.claims: dict[str, ClaimLife] = {}
        self.costs: list[tuple[float, float]] = []
        self.cost = 0.0
        self.node_counts: list[tuple[float, int]] = []  # (time, launched NodeClaims not yet gone), at each change
        self.disruptions: list[DisruptionRecord] = []
        self._by_command: dict[Any, DisruptionRecord] = {}
        self._pending_reason: dict[str, str] = {}

    def setup(self, mgr: Manager) -> None:
        mgr.watch("NodeClaim", self._on_claim)

    def reconcile(self, key: Any) -> None:
        return None

    # --- NodeClaims --------------------------------------------------------------------------------
    def _on_claim(self, etype: str, obj: dict, old: dict | None) -> None:
        now = self.clock.now()
        meta = obj["metadata"]
        name = meta["name"]
        life = self.claims.get(name)
        labels = meta.get("labels") or {}
        if life is None:
            life = self.claims[name] = ClaimLife(name, labels.get("karpenter.sh/nodepool", ""), now)
        if not life.launched and is_true(obj, "Launched"):
            life.launched = True
            life.instance_type = labels.get("node.kubernetes.io/instance-type")
            life.capacity_type = labels.get("karpenter.sh/capacity-type")
            life.zone = labels.get("topology.kubernetes.io/zone")
            life.arch = labels.get("kubernetes.io/arch")
            ann = meta.get("annotations") or {}
            exact = self.exact_price((obj.get("status") or {}).get("providerID") or "") if self.exact_price else None
            try:
                life.price = exact if exact is not None else float(ann.get(PRICE, "0"))
            except ValueError:
                life.price = 0.0
            life.price_estimated = ann.get(PRICE_ESTIMATED) == "true"
            life.price_source = ann.get(PRICE_SOURCE)
            self._set_cost(self.cost + life.price, now)
            self._count_nodes(1, now)
        if life.registered is None and is_true(obj, "Registered"):
            life.registered = now
            life.node = (obj.get("status") or {}).get("nodeName")
        if life.initialized is None and is_true(obj, "Initialized"):
            life.initialized = now
        if life.deleting is None and meta.get("deletionTimestamp"):
            life.deleting = now
            if life.reason is None:
                life.reason = self._pending_reason.pop(name, None)
        cond = condition(obj, "DisruptionReason")
        if cond is not None and cond.get("status") == "True" and life.reason is None and etype != DELETED:
            life.reason = cond.get("reason")
        if etype == DELETED and life.deleted is None:
            life.deleted = now
            if life.reason is None:
                life.reason = self._pending_reason.pop(name, None)
            if life.launched and life.price:
                self._set_cost(self.cost - life.price, now)
            if life.launched:
                self._count_nodes(-1, now)
            self._finish(name, now)

    def _set_cost(self, cost: float, now: float) -> None:
        self.cost = max(0.0, cost)
        if abs(self.cost) < 1e-9:
            self.cost = 0.0
        if self.costs and self.costs[-1][0] == now:
            self.costs[-1] = (now, self.cost)
        else:
            self.costs.append((now, self.cost))

    def _count_nodes(self, delta: int, now: float) -> None:
        n = (self.node_counts[-1][1] if self.node_counts else 0) + delta
        if self.node_counts and self.node_counts[-1][0] == now:
            self.node_counts[-1] = (now, n)
        else:
            self.node_counts.append((now, n))

    def cost_at(self, t: float) -> float:
        cost = 0.0
        for when, c in self.costs:
            if when <= t:
                cost = c
        return cost

    # --- Karpenter's log records --------------------------------------------------------------------
    def on_log(self, rec: dict) -> None:
        msg = rec.get("message")
        now = self.clock.now()
        if msg == "disrupting node(s)":
            d = DisruptionRecord(now, rec.get("reason", ""), rec.get("method", ""), rec.get("nodepool", ""),
                                 list(rec.get("candidates") or ()), list(rec.get("replacements") or ()), rec.get("budget"),
                                 float(rec.get("cost-before") or self.cost), command_id=rec.get("command-id"))
            self.disruptions.append(d)
            self._by_command[d.command_id] = d
            for c in d.candidates:
                if c in self.claims and self.claims[c].reason is None:
                    self.claims[c].reason = d.reason
        elif rec.get("outcome") == "abandoned":
            d = self._by_command.get(rec.get("command-id"))
            if d is not None:
                d.outcome = "abandoned"
                d.message = rec.get("error")
                d.finished = now
                d.cost_after = self.cost
                for c in d.candidates:
                    life = self.claims.get(c)
                    if life is not None and life.deleted is None and life.reason == d.reason:
                        life.reason = None
        elif msg in self.DIRECT_DELETES:
            name = (rec.get("NodeClaim") or {}).get("name", "")
            reason = rec.get("reason") or ("Expired" if msg.startswith("deleting expired") else "Interrupted")
            life = self.claims.get(name)
            if life is not None and life.reason is None:
                life.reason = reason
            else:
                self._pending_reason[name] = reason
            method = {"Expired": "expiration", "Unhealthy": "repair"}.get(reason, "interruption")
            d = DisruptionRecord(now, reason, method,
                                 rec.get("nodepool") or (life.nodepool if life else ""), [name], [], None, self.cost)
            self.disruptions.append(d)

    def _finish(self, claim: str, now: float) -> None:
        for d in self.disruptions:
            if d.outcome != "in-progress" or claim not in d.candidates:
                continue
            if all(self.claims.get(c) is not None and self.claims[c].deleted is not None for c in d.candidates):
                d.outcome = "succeeded"
                d.finished = now
                d.cost_after = self.cost
