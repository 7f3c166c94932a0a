"""The viewer's model: a snapshot of the cluster (or of a replayed instant) turned into what the screens show.

Pure: no I/O, ``now`` is given. Every figure is recomputed from the snapshot, never kept incrementally, so a pod
listed before its node, or a resized pod, is counted right.

Counting rules (where eks-node-viewer and aks-node-viewer differ from each other or are wrong):

* only nodes the ``--node-selector`` matches appear, and only pods bound to them are counted (pending pods, which
  have no node, are all counted);
* a pod's requests follow Kubernetes' formula (init and sidecar containers, pod overhead, pod-level resources):
  the same function karpy's scheduler uses;
* terminal (Succeeded/Failed) and terminating pods request nothing;
* the pods line counts the workload's pods; DaemonSet pods are counted apart (they are on every node and hide the
  workload), though their requests are in every bar and the ``pods`` resource counts them;
* a NodeClaim that has no Node yet is shown as its own row (launching, or its launch failed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .. import resources as res
from ..kube.times import fmt_time, parse_time
from ..scheduling.pods import pod_requests
from .prices import NO_PRICE, Price, PriceBook, capacity_type

HOURS_PER_MONTH = 730  # 365 * 24 / 12, as both viewers
DISRUPTED_TAINTS = ("karpenter.sh/disrupted", "karpenter.sh/disruption")  # v1, and v1beta1 clusters
REASONS = ("Underutilized", "Empty", "Drifted")
FAILED_PREFIX = "Failed to schedule pod, "
LABEL_NODEPOOL = "karpenter.sh/nodepool"
UNMANAGED = "(unmanaged)"


@dataclass
class Snapshot:
    """What a source read: nodes and NodeClaims already filtered by the selector, every pod, NodePools, Events."""

    now: float
    nodes: list[dict]
    nodeclaims: list[dict]
    pods: list[dict]
    nodepools: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    disruptions: list[dict] | None = None  # replay: the summary's disruption entries in flight at ``now``
    cost_history: list[tuple[float, float]] = field(default_factory=list)
    unknown_requests: int = 0  # replay: pods whose requests the result no longer holds


@dataclass
class NodeRow:
    name: str
    nodeclaim: str | None
    nodepool: str | None
    instance_type: str | None
    capacity_type: str | None
    zone: str | None
    arch: str | None
    price: Price
    pods: int
    daemon_pods: int
    max_pods: int | None
    requested: dict[str, int]
    allocatable: dict[str, int]
    status: str  # Ready | NotReady | Cordoned | Deleting | Disrupting
    lifecycle: str  # Launching | Registered | Initialized | Ready | LaunchFailed | Node (not Karpenter's)
    ready_since: float | None  # when the Ready condition last changed (or the creation, never Ready)
    ready: bool
    created: float
    labels: dict[str, str]
    disruption_reason: str | None = None
    drifted: bool = False

    def usage(self, resource: str) -> float | None:
        alloc = self.allocatable.get(resource)
        if not alloc:
            return None
        return self.requested.get(resource, 0) / alloc


@dataclass
class NodePoolRow:
    name: str
    nodes: int
    price_per_hour: float
    limits: dict[str, int]
    usage: dict[str, int]
    budgets_left: dict[str, int]
    weight: int | None = None
    consolidation: str | None = None


@dataclass
class PendingPod:
    pod: str
    reason: str
    nominated: str | None = None
    since: float | None = None


@dataclass
class Frame:
    time: float
    resources: list[str]
    nodes: list[NodeRow]
    nodepools: list[NodePoolRow]
    pending: list[PendingPod]
    pods: dict[str, int]
    disruptions: list[dict]
    cost_history: list[tuple[float, float]]
    pricing: bool = True
    unknown_requests: int = 0

    # --- totals over the visible nodes -------------------------------------------------------------------------
    def total(self, resource: str) -> tuple[int, int]:
        return (sum(n.requested.get(resource, 0) for n in self.nodes),
                sum(n.allocatable.get(resource, 0) for n in self.nodes))

    @property
    def price_per_hour(self) -> float:
        return sum(n.price.per_hour or 0.0 for n in self.nodes if _costs(n))

    @property
    def unpriced(self) -> int:
        return sum(1 for n in self.nodes if _costs(n) and n.price.per_hour is None)

    def price_sources(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nodes:
            if _costs(n):
                out[n.price.source] = out.get(n.price.source, 0) + 1
        return out

    def split(self, attr: str) -> dict[str, tuple[int, float]]:
        """Nodes and $/hour by capacity type (``capacity_type``) or architecture (``arch``)."""
        out: dict[str, tuple[int, float]] = {}
        for n in self.nodes:
            if not _costs(n):
                continue
            key = getattr(n, attr) or "-"
            count, cost = out.get(key, (0, 0.0))
            out[key] = (count + 1, cost + (n.price.per_hour or 0.0))
        return dict(sorted(out.items()))


def _costs(n: NodeRow) -> bool:
    """Is the node paid for? A NodeClaim whose launch failed has no instance."""
    return n.lifecycle != "LaunchFailed"


# --- small readers -------------------------------------------------------------------------------------------

def _meta(o: Mapping) -> Mapping:
    return o.get("metadata") or {}


def _labels(o: Mapping) -> dict[str, str]:
    return dict(_meta(o).get("labels") or {})


def _annotations(o: Mapping) -> dict[str, str]:
    return dict(_meta(o).get("annotations") or {})


def _condition(o: Mapping, type_: str) -> Mapping | None:
    for c in (o.get("status") or {}).get("conditions") or ():
        if c.get("type") == type_:
            return c
    return None


def _true(o: Mapping, type_: str) -> bool:
    c = _condition(o, type_)
    return c is not None and c.get("status") == "True"


def pod_key(p: Mapping) -> str:
    m = _meta(p)
    return f"{m.get('namespace') or 'default'}/{m.get('name', '')}"


def is_daemon(p: Mapping) -> bool:
    refs = _meta(p).get("ownerReferences") or ()
    return any(r.get("kind") == "DaemonSet" for r in refs if r.get("controller", True))


def is_active(p: Mapping) -> bool:
    """Not terminal and not terminating: the pod holds its requests."""
    phase = (p.get("status") or {}).get("phase") or "Pending"
    return phase not in ("Succeeded", "Failed") and not _meta(p).get("deletionTimestamp")


_REQUESTS_CACHE: dict[str, dict[str, int]] = {}


def requests_of(p: Mapping) -> dict[str, int]:
    """Kubernetes' pod request formula; an unreadable spec requests one pod slot only."""
    spec = p.get("spec") or {}
    uid = str(_meta(p).get("uid") or "")
    key = uid + "|" + str(_meta(p).get("resourceVersion") or "") if uid else ""
    hit = _REQUESTS_CACHE.get(key) if key else None
    if hit is not None:
        return hit
    try:
        out = pod_requests(spec)
    except Exception:  # noqa: BLE001 - a malformed quantity (the API server would refuse it) requests nothing
        out = {res.PODS: 1}
    if key:
        if len(_REQUESTS_CACHE) > 200_000:
            _REQUESTS_CACHE.clear()
        _REQUESTS_CACHE[key] = out
    return out


def _taints(o: Mapping) -> list[Mapping]:
    return list((o.get("spec") or {}).get("taints") or ())


def _disrupted(*objs: Mapping | None) -> bool:
    return any(t.get("key") in DISRUPTED_TAINTS and t.get("effect", "NoSchedule") == "NoSchedule"
               for o in objs if o for t in _taints(o))


def _resource_list(o: Mapping | None, field_: str) -> dict[str, int]:
    if not o:
        return {}
    try:
        return res.parse_resource_list((o.get("status") or {}).get(field_))
    except Exception:  # noqa: BLE001 - a malformed quantity shows as unknown, not as a crash
        return {}


# --- building the frame ----------------------------------------------------------------------------------------

def build(snap: Snapshot, resources: Iterable[str] = ("cpu",), prices: PriceBook | None = None) -> Frame:
    prices = prices or PriceBook()
    resources = list(resources)
    now = snap.now
    by_node_name: dict[str, dict] = {}
    by_provider_id: dict[str, dict] = {}
    for c in snap.nodeclaims:
        st = c.get("status") or {}
        if st.get("nodeName"):
            by_node_name[st["nodeName"]] = c
        if st.get("providerID"):
            by_provider_id[st["providerID"]] = c
    pods_on: dict[str, list[dict]] = {}
    for p in snap.pods:
        node = (p.get("spec") or {}).get("nodeName")
        if node and is_active(p):
            pods_on.setdefault(node, []).append(p)

    rows: list[NodeRow] = []
    claimed: set[str] = set()
    for node in snap.nodes:
        name = _meta(node)["name"]
        claim = by_node_name.get(name) or by_provider_id.get((node.get("spec") or {}).get("providerID") or "")
        if claim is not None:
            claimed.add(_meta(claim)["name"])
        rows.append(_node_row(node, claim, pods_on.get(name, []), prices, now))
    for claim in snap.nodeclaims:
        if _meta(claim)["name"] not in claimed:
            rows.append(_claim_row(claim, prices, now))

    visible = {r.name for r in rows}
    pods = {"total": 0, "pending": 0, "running": 0, "bound": 0, "daemonSet": 0}
    for p in snap.pods:
        if not is_active(p):
            continue
        node = (p.get("spec") or {}).get("nodeName")
        if node and node not in visible:
            continue  # the pods of nodes the selector hides are not counted
        if is_daemon(p):
            pods["daemonSet"] += 1 if node else 0
            continue
        pods["total"] += 1
        phase = (p.get("status") or {}).get("phase") or "Pending"
        pods["pending"] += phase == "Pending"
        pods["running"] += phase == "Running"
        pods["bound"] += bool(node)

    return Frame(time=now, resources=resources, nodes=rows, nodepools=_nodepools(snap, rows, now),
                 pending=_pending(snap), pods=pods,
                 disruptions=snap.disruptions if snap.disruptions is not None else _live_disruptions(rows),
                 cost_history=list(snap.cost_history), pricing=not prices.disabled,
                 unknown_requests=snap.unknown_requests)


def _common(obj: Mapping, claim: Mapping | None) -> dict[str, Any]:
    labels = {**(_labels(claim) if claim else {}), **_labels(obj)}
    return {
        "labels": labels,
        "nodepool": labels.get(LABEL_NODEPOOL),
        "instance_type": labels.get("node.kubernetes.io/instance-type"),
        "capacity_type": capacity_type(labels),
        "zone": labels.get("topology.kubernetes.io/zone"),
        "arch": labels.get("kubernetes.io/arch"),
    }


def _price_of(obj: Mapping, claim: Mapping | None, labels: Mapping[str, str], prices: PriceBook) -> Price:
    ann = {**_annotations(obj), **(_annotations(claim) if claim else {})}
    pid = (obj.get("spec") or {}).get("providerID") or ((claim or {}).get("status") or {}).get("providerID") or ""
    return prices.price(labels, ann, pid)


def _claim_state(claim: Mapping | None) -> tuple[str | None, bool]:
    if claim is None:
        return None, False
    c = _condition(claim, "DisruptionReason")
    reason = c.get("reason") if c is not None and c.get("status") == "True" else None
    return reason, _true(claim, "Drifted")


def _node_row(node: dict, claim: dict | None, pods: list[dict], prices: PriceBook, now: float) -> NodeRow:
    common = _common(node, claim)
    meta = _meta(node)
    created = parse_time(meta.get("creationTimestamp")) or now
    ready_c = _condition(node, "Ready")
    ready = ready_c is not None and ready_c.get("status") == "True"
    since = parse_time(ready_c.get("lastTransitionTime")) if ready_c else None
    allocatable = _resource_list(node, "allocatable") or _resource_list(claim, "allocatable")
    requested: dict[str, int] = {}
    daemon = 0
    for p in pods:
        requested = res.add(requested, requests_of(p))
        daemon += is_daemon(p)
    reason, drifted = _claim_state(claim)
    deleting = bool(meta.get("deletionTimestamp") or (claim and _meta(claim).get("deletionTimestamp")))
    if deleting:
        status = "Deleting"
    elif _disrupted(node, claim):
        status = "Disrupting"
    elif (node.get("spec") or {}).get("unschedulable"):
        status = "Cordoned"
    else:
        status = "Ready" if ready else "NotReady"
    if claim is None:
        lifecycle = "Node"
    elif _true(claim, "Initialized"):
        lifecycle = "Ready" if ready else "Initialized"
    else:
        lifecycle = "Registered"
    return NodeRow(name=meta["name"], nodeclaim=_meta(claim)["name"] if claim else None,
                   price=_price_of(node, claim, common["labels"], prices), pods=len(pods) - daemon,
                   daemon_pods=daemon, max_pods=allocatable.get(res.PODS), requested=requested,
                   allocatable=allocatable, status=status, lifecycle=lifecycle,
                   ready_since=since if since is not None else created, ready=ready, created=created,
                   disruption_reason=reason, drifted=drifted, **common)


def _claim_row(claim: dict, prices: PriceBook, now: float) -> NodeRow:
    common = _common(claim, None)
    meta = _meta(claim)
    created = parse_time(meta.get("creationTimestamp")) or now
    launched = _condition(claim, "Launched")
    failed = launched is not None and launched.get("status") == "False" and bool(meta.get("deletionTimestamp"))
    lifecycle = "LaunchFailed" if failed else ("Registered" if _true(claim, "Registered") else "Launching")
    reason, drifted = _claim_state(claim)
    if meta.get("deletionTimestamp") and not failed:
        status = "Deleting"
    elif _disrupted(claim):
        status = "Disrupting"
    else:
        status = "NotReady"
    allocatable = _resource_list(claim, "allocatable")
    price = NO_PRICE if failed else _price_of(claim, None, common["labels"], prices)
    return NodeRow(name=meta["name"], nodeclaim=meta["name"], price=price, pods=0, daemon_pods=0,
                   max_pods=allocatable.get(res.PODS), requested={}, allocatable=allocatable, status=status,
                   lifecycle=lifecycle, ready_since=created, ready=False, created=created,
                   disruption_reason=reason, drifted=drifted, **common)


def _nodepools(snap: Snapshot, rows: list[NodeRow], now: float) -> list[NodePoolRow]:
    from ..disruption.budgets import allowed_disruptions

    out: list[NodePoolRow] = []
    by_pool: dict[str, list[NodeRow]] = {}
    for r in rows:
        by_pool.setdefault(r.nodepool or UNMANAGED, []).append(r)
    for np in sorted(snap.nodepools, key=lambda o: _meta(o).get("name", "")):
        name = _meta(np)["name"]
        spec = np.get("spec") or {}
        mine = by_pool.pop(name, [])
        status_nodes = (np.get("status") or {}).get("nodes")
        total = int(status_nodes) if isinstance(status_nodes, (int, str)) and str(status_nodes).isdigit() \
            else sum(1 for r in mine if r.lifecycle in ("Initialized", "Ready", "Node") and r.status != "Deleting")
        disrupting = sum(1 for r in mine if r.status in ("Deleting", "Disrupting")
                         or (r.lifecycle in ("Initialized", "Ready", "Node") and not r.ready))
        left = {reason: max(allowed_disruptions(np, total, reason, now) - disrupting, 0) for reason in REASONS}
        try:
            limits = res.parse_resource_list(spec.get("limits"))
        except Exception:  # noqa: BLE001
            limits = {}
        usage = _resource_list(np, "resources")
        disruption = spec.get("disruption") or {}
        out.append(NodePoolRow(name=name, nodes=len(mine), price_per_hour=sum(r.price.per_hour or 0 for r in mine
                                                                             if _costs(r)),
                               limits=limits, usage=usage, budgets_left=left, weight=spec.get("weight"),
                               consolidation=disruption.get("consolidationPolicy")))
    for name, mine in sorted(by_pool.items()):
        # nodes of NodePools the cluster no longer has (or that are not Karpenter's): no limits, no budgets
        out.append(NodePoolRow(name=name, nodes=len(mine), price_per_hour=sum(r.price.per_hour or 0 for r in mine
                                                                             if _costs(r)),
                               limits={}, usage={}, budgets_left={}))
    return out


def _pending(snap: Snapshot) -> list[PendingPod]:
    reasons: dict[str, tuple[str, float | None]] = {}
    nominated: dict[str, str] = {}
    for e in sorted(snap.events, key=_event_time):
        inv = e.get("involvedObject") or {}
        if inv.get("kind") != "Pod":
            continue
        key = f"{inv.get('namespace') or 'default'}/{inv.get('name')}"
        msg = str(e.get("message") or "")
        if e.get("reason") == "FailedScheduling":
            karpenter = (e.get("source") or {}).get("component") == "karpenter" or \
                e.get("reportingComponent") == "karpenter"
            if karpenter or key not in reasons:
                reasons[key] = (msg[len(FAILED_PREFIX):] if msg.startswith(FAILED_PREFIX) else msg, _event_time(e))
        elif e.get("reason") == "Nominated":
            nominated[key] = msg.rsplit(": ", 1)[-1]
    out: list[PendingPod] = []
    for p in snap.pods:
        if (p.get("spec") or {}).get("nodeName") or not is_active(p):
            continue
        if ((p.get("status") or {}).get("phase") or "Pending") != "Pending":
            continue
        key = pod_key(p)
        why, since = reasons.get(key, (None, None))
        if why is None:
            c = _condition(p, "PodScheduled")
            why = (c or {}).get("message") or "waiting for Karpenter or the scheduler"
        nom = (p.get("status") or {}).get("nominatedNodeName") or nominated.get(key)
        out.append(PendingPod(key, why, nom, since or parse_time(_meta(p).get("creationTimestamp"))))
    return sorted(out, key=lambda x: x.pod)


def _event_time(e: Mapping) -> float:
    for k in ("lastTimestamp", "eventTime", "firstTimestamp"):
        t = parse_time(e.get(k))
        if t is not None:
            return t
    return parse_time(_meta(e).get("creationTimestamp")) or 0.0


def _live_disruptions(rows: list[NodeRow]) -> list[dict]:
    """Disruptions in progress, as the cluster shows them: NodeClaims tainted for disruption or deleting."""
    out = []
    for r in rows:
        if r.status in ("Disrupting", "Deleting") and r.nodeclaim:
            out.append({"nodePool": r.nodepool, "candidates": [r.nodeclaim], "reason": r.disruption_reason or
                        ("Drifted" if r.drifted else None), "state": r.status})
    return out


# --- sorting --------------------------------------------------------------------------------------------------

def _natural(s: str) -> list:
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", s) if t]


def computed_label(row: NodeRow, key: str, now: float) -> str | None:
    """eks-node-viewer's computed labels (``eks-node-viewer/node-age``, ``eks-node-viewer/node-cpu-usage``),
    also spelled ``karpy/...``."""
    for prefix in ("eks-node-viewer/", "karpy/"):
        if key.startswith(prefix):
            what = key[len(prefix):]
            if what == "node-age":
                return human_duration(now - row.created)
            m = re.fullmatch(r"node-(.+)-usage", what)
            if m:
                u = row.usage(m.group(1))
                return f"{u * 100:.0f}%" if u is not None else None
    return None


def parse_sort(spec: str) -> tuple[str, bool]:
    """``KEY[=asc|dsc]`` to (key, descending). ValueError for another suffix."""
    key, _, order = spec.partition("=")
    if order not in ("", "asc", "dsc"):
        raise ValueError(f"{spec!r}: the order after '=' must be asc or dsc")
    if not key:
        raise ValueError(f"{spec!r}: a sort key is required (creation, or a label)")
    return key, order == "dsc"


def sort_nodes(rows: list[NodeRow], spec: str, now: float) -> list[NodeRow]:
    """``creation`` sorts oldest first (``creation=dsc``: newest first); any other key sorts by that label (or
    computed label) in natural order, nodes without it last, ties by name."""
    key, desc = parse_sort(spec)
    if key == "creation":
        return sorted(rows, key=lambda r: (r.created, _natural(r.name)), reverse=desc)

    def value(r: NodeRow) -> str | None:
        v = r.labels.get(key)
        return v if v is not None else computed_label(r, key, now)

    def sort_key(r: NodeRow) -> tuple:
        v = value(r)
        if key.endswith("-usage") and v is not None:
            return (0, float(v.rstrip("%")), [])
        return (0, 0.0, _natural(v)) if v is not None else (1, 0.0, [])

    have = sorted((r for r in rows if value(r) is not None), key=lambda r: (sort_key(r), _natural(r.name)),
                  reverse=desc)
    return have + sorted((r for r in rows if value(r) is None), key=lambda r: _natural(r.name))


# --- formatting shared by every output ---------------------------------------------------------------------------

def human_duration(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 120:
        return f"{m}m"
    h = m // 60
    if h < 48:
        return f"{h}h{m % 60}m" if h < 10 and m % 60 else f"{h}h"
    return f"{h // 24}d"


def fmt_price(x: float | None) -> str | None:
    return None if x is None else f"{x:.4f}"


def fmt_quantity(resource: str, units: int) -> str:
    return res.format_units(resource, units)


def to_json(frame: Frame) -> dict:
    """The ``--once -o json`` object of the viewer contract (plus the fields the contract allows to be added)."""
    resources = frame.resources

    def rl(requested: Mapping[str, int], allocatable: Mapping[str, int]) -> dict:
        return {r: {"requested": fmt_quantity(r, requested.get(r, 0)),
                    "allocatable": fmt_quantity(r, allocatable.get(r, 0))} for r in resources}

    req = {r: frame.total(r)[0] for r in resources}
    alloc = {r: frame.total(r)[1] for r in resources}
    pph = frame.price_per_hour if frame.pricing else None
    return {
        "time": fmt_time(frame.time),
        "summary": {
            "nodes": len(frame.nodes),
            "pricePerHour": fmt_price(pph),
            "pricePerMonth": None if pph is None else f"{pph * HOURS_PER_MONTH:.2f}",
            "unpricedNodes": frame.unpriced,
            "priceSources": frame.price_sources(),
            "resources": rl(req, alloc),
            "pods": dict(frame.pods),
            "byCapacityType": {k: {"nodes": n, "pricePerHour": fmt_price(c)}
                               for k, (n, c) in frame.split("capacity_type").items()},
            "byArch": {k: {"nodes": n, "pricePerHour": fmt_price(c)} for k, (n, c) in frame.split("arch").items()},
        },
        "nodes": [{
            "name": n.name, "nodeClaim": n.nodeclaim, "nodePool": n.nodepool, "instanceType": n.instance_type,
            "capacityType": n.capacity_type, "zone": n.zone, "arch": n.arch,
            "pricePerHour": fmt_price(n.price.per_hour), "priceSource": n.price.source,
            **({"priceEstimated": True} if n.price.estimated else {}),
            "pods": n.pods, "daemonSetPods": n.daemon_pods, "maxPods": n.max_pods,
            "resources": rl(n.requested, n.allocatable),
            "status": n.status, "lifecycle": n.lifecycle, "ready": n.ready,
            "readySince": fmt_time(n.ready_since), "age": fmt_time(n.created),
            **({"disruptionReason": n.disruption_reason} if n.disruption_reason else {}),
            **({"drifted": True} if n.drifted else {}),
        } for n in frame.nodes],
        "nodePools": [{
            "name": p.name, "nodes": p.nodes, "pricePerHour": fmt_price(p.price_per_hour if frame.pricing else None),
            "limits": res.format_resource_list(p.limits), "usage": res.format_resource_list(p.usage),
            "budgetsLeft": dict(p.budgets_left),
        } for p in frame.nodepools],
        "pending": [{"pod": p.pod, "reason": p.reason, **({"nominated": p.nominated} if p.nominated else {})}
                    for p in frame.pending],
        "disruptions": list(frame.disruptions),
    }
