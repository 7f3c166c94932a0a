"""The scheduling simulation: where would pending pods go, and which NodeClaims must launch?

Given pending pods, the cluster's nodes (registered or still launching) and one
:class:`NodeClaimTemplate` per NodePool (its requirements, taints and the
instance types its NodeClass offers), :meth:`Scheduler.solve` decides, as
upstream Karpenter does:

* pods are taken largest first (CPU, then memory);
* each pod tries the existing nodes, then the NodeClaims this solve has
  already opened, then a new NodeClaim from each NodePool in weight order;
* a NodeClaim keeps every instance type that could still hold all its pods,
  so it grows until its largest compatible type is full;
* a pod that fits nowhere has its soft constraints relaxed in upstream's order
  (extra required node-affinity terms, preferred pod affinity, preferred pod
  anti-affinity, preferred node affinity, ScheduleAnyway spreads, then
  PreferNoSchedule taints) and is tried again.

Pods with identical constraints are scheduled together as one *class*: the
solver asks once how many of them a node can take (resources, host ports and
topology caps) and places them in bulk. Topology constraints are answered from
indexed per-domain counts (:mod:`karpy.scheduling.topology`), and a NodeClaim
that is full for a request size is skipped by a cursor, never rescanned.
The engine is pure: no I/O, no clock, deterministic for the same input.
"""

from __future__ import annotations

import heapq

from collections import Counter
from dataclasses import dataclass, field
from typing import Collection, Iterable, Mapping, Sequence

import numpy as np

from .. import resources as res
from ..cloudprovider.types import (
    CAPACITY_RESERVED,
    LABEL_CAPACITY_TYPE,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_ZONE,
    InstanceType,
)
from .dra import DRA_ERROR
from .pods import PodInfo, Taint, Toleration, copy_for_relaxation, class_key
from .requirements import IN, NOT_IN, Requirement, Requirements
from .reservations import RESERVED_OFFERING_ERROR, ReservationManager, offerings_to_reserve, reserved_offerings
from .topology import ANTI_AFFINITY, SPREAD, Topology, TopologyGroup
from .volumes import exceeds_limits

# Upstream's core keeps at most this many instance types in a NodeClaim's requirements
# (providers may send fewer to their launch API: AWS sends the 60 cheapest).
MAX_INSTANCE_TYPES = 600

# Labels Karpenter (or the provider) fills in at launch, so a pod may require them
# even when a NodePool does not name them.
CORE_WELL_KNOWN_LABELS = frozenset({
    LABEL_HOSTNAME,
    LABEL_ZONE,
    "topology.kubernetes.io/region",
    LABEL_INSTANCE_TYPE,
    "kubernetes.io/arch",
    "kubernetes.io/os",
    LABEL_CAPACITY_TYPE,
    LABEL_NODEPOOL,
    "node.kubernetes.io/windows-build",
})

def launched_node_requirements() -> Requirements:
    """Labels every node Karpenter launches carries once it joins (karpenter.sh/registered and
    karpenter.sh/initialized, both "true"): DaemonSets that wait for them still run there, so their overhead
    counts. They constrain DaemonSets only, never a NodeClaim's own requirements."""
    return Requirements([Requirement.new("karpenter.sh/registered", "In", ["true"]),
                         Requirement.new("karpenter.sh/initialized", "In", ["true"])])


_PREFER_NO_SCHEDULE_TOLERATION = Toleration("", "Exists", "", "PreferNoSchedule")
_HUGE = 2**61  # resource amounts are capped here inside the solver's int64 arrays


def tolerates_all(tolerations: Sequence[Toleration], taints: Sequence[Taint]) -> Taint | None:
    """The first taint (any effect, PreferNoSchedule included) not tolerated, as Karpenter checks."""
    for t in taints:
        if not any(tol.tolerates(t) for tol in tolerations):
            return t
    return None


# --- inputs ----------------------------------------------------------------------------


@dataclass(eq=False)
class NodeClaimTemplate:
    """What one NodePool can launch."""

    nodepool: str
    weight: int
    requirements: Requirements  # NodePool requirements + template labels + the nodepool label
    taints: tuple[Taint, ...]
    startup_taints: tuple[Taint, ...]
    labels: dict[str, str]
    instance_types: list[InstanceType]  # compatible with the requirements, with an available offering
    daemon_overhead: dict[str, int] = field(default_factory=dict)  # of the daemons every type runs (for messages)
    remaining: dict[str, int] | None = None  # NodePool limits minus what exists; None: unlimited
    well_known_labels: frozenset[str] = CORE_WELL_KNOWN_LABELS
    nodeclass: str = ""
    daemon_pods: list[PodInfo] = field(default_factory=list)  # DaemonSet pods that tolerate the taints


@dataclass(eq=False)
class ExistingNode:
    """A Node, or a launched NodeClaim not yet registered, that pods may be placed on."""

    name: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    allocatable: dict[str, int]
    requested: dict[str, int]  # pods already bound or nominated there, daemons included
    host_ports: set[tuple[str, int, str]] = field(default_factory=set)
    nodepool: str | None = None
    bound_pods: list[PodInfo] = field(default_factory=list)  # for topology counts
    schedulable: bool = True  # False: cordoned or being deleted
    initialized: bool = True  # False: a NodeClaim still launching or registering
    takes_moving: bool = True  # False: pods moved by consolidation may not land here
    capacity: dict[str, int] | None = None  # what it counts against its NodePool's limits (None: allocatable)
    volume_limits: Mapping[str, int] | None = None  # CSI driver -> volumes it may attach (its CSINode), if known


# --- outputs ---------------------------------------------------------------------------


@dataclass(eq=False)
class NewNodeClaim:
    template: NodeClaimTemplate
    hostname: str
    requirements: Requirements
    instance_types: list[InstanceType]  # cheapest first, capped at MAX_INSTANCE_TYPES
    pods: list[PodInfo]
    requests: dict[str, int]  # daemon overhead + pods
    # whether minValuesPolicy BestEffort lowered a requirement's minValues (None: not decided by a solve)
    min_values_relaxed: bool | None = None


@dataclass
class Results:
    new_nodeclaims: list[NewNodeClaim]
    existing: dict[str, list[PodInfo]]  # node name -> pods placed there
    errors: dict[str, str]  # pod key -> why it fits nowhere
    failed_pods: list[PodInfo]
    # with Scheduler.zone_census: pending pods by effective zone, before the solve placed any (a zone, "flexible",
    # "none"; upstream's pending_pods_by_effective_zone_count)
    effective_zones: dict[str, int] = field(default_factory=dict)


# --- internals -------------------------------------------------------------------------


class _TemplateState:
    """Per-solve, per-template arrays over its instance types."""

    def __init__(self, tpl: NodeClaimTemplate, index: int, rindex: dict[str, int], nres: int):
        self.tpl = tpl
        self.index = index
        self.types = tpl.instance_types
        n = len(self.types)
        alloc = np.zeros((n, nres), dtype=np.int64)
        cap = np.zeros((n, nres), dtype=np.int64)
        for i, it in enumerate(self.types):
            for k, v in it.allocatable.items():
                j = rindex.get(k)
                if j is not None:
                    alloc[i, j] = v
            for k, v in it.capacity.items():
                j = rindex.get(k)
                if j is not None:
                    cap[i, j] = v
        self.capacity = cap
        self.label_keys = set()
        for it in self.types:
            self.label_keys.update(it.labels)
        # per type, the labels its offerings carry (a value varying by zone); none for most catalogs
        self.offer_keys = [frozenset(k for o in it.offerings for k, _ in o.labels) for it in self.types]
        self.offering_keys = tuple(sorted(frozenset().union(*self.offer_keys)))
        self._label_masks: dict[tuple, np.ndarray] = {}
        self._prices: dict[tuple, np.ndarray] = {}
        # DaemonSet overhead per instance type: a daemon counts on the types it can run on
        daemon = np.zeros((n, nres), dtype=np.int64)
        # host ports of DaemonSets, each with the types it runs on: a pod's ports conflict only where they run
        self.daemon_ports: list[tuple[frozenset, np.ndarray]] = []
        self._port_masks: dict[frozenset, np.ndarray] = {}
        node_reqs = tpl.requirements.union(launched_node_requirements())
        for p in tpl.daemon_pods:
            terms = p.required_terms or [Requirements()]
            mask = np.zeros(n, dtype=bool)
            for term in terms:
                r = p.node_selector.union(term)
                if node_reqs.compatible(r, allow_undefined=tpl.well_known_labels) is not None:
                    continue
                both = tpl.requirements.union(r)
                mask |= self.label_mask(both) & self.offering_mask(both)
            if not mask.any():
                continue
            vec = np.zeros(nres, dtype=np.int64)
            for k, v in p.requests.items():
                j = rindex.get(k)
                if j is not None:
                    vec[j] = v
            daemon[mask] += vec
            if p.host_ports:
                self.daemon_ports.append((p.host_ports, mask))
        self.daemon = daemon
        self.alloc = alloc - daemon  # what pods can use on each type
        self._columns: dict[tuple, np.ndarray] = {}  # see columns
        self._launchable: tuple | None = None  # see launchable
        self.all_idx = np.arange(n, dtype=np.int64)
        self.fits_daemons = (self.alloc >= 0).all(axis=1) if nres else np.ones(n, dtype=bool)
        order = sorted(range(n), key=lambda i: self.types[i].name)
        self.name_rank = np.empty(n, dtype=np.int64)
        self.name_rank[order] = np.arange(n, dtype=np.int64)

    def launchable(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The types the NodePool's requirements allow with an available offering, those of them with room for
        the DaemonSets, and the largest allocatable among the latter: what a new NodeClaim starts with when
        no limit narrows it (taken once: the requirements and offerings of a solve never change)."""
        hit = self._launchable
        if hit is None:
            reqs = self.tpl.requirements
            masked = self.all_idx[(self.label_mask(reqs) & self.offering_mask(reqs))[self.all_idx]]
            final = masked[self.fits_daemons[masked]]
            largest = self.alloc[final].max(axis=0) if len(final) else np.zeros(self.alloc.shape[1], dtype=np.int64)
            hit = self._launchable = (masked, final, largest)
        return hit

    def columns(self, nz: list[int]) -> np.ndarray:
        """The types' allocatable for pods in the resources ``nz`` only (a pod class's requests)."""
        key = tuple(nz)
        m = self._columns.get(key)
        if m is None:
            m = self._columns[key] = np.ascontiguousarray(self.alloc[:, nz])
        return m

    def port_mask(self, ports: frozenset) -> np.ndarray | None:
        """Types on which no DaemonSet that runs there uses one of ``ports`` (None: every type)."""
        if not self.daemon_ports:
            return None
        m = self._port_masks.get(ports)
        if m is None:
            m = np.ones(len(self.types), dtype=bool)
            for dports, runs in self.daemon_ports:
                if _ports_conflict(ports, dports):
                    m &= ~runs
            self._port_masks[ports] = m
        return m

    def prices(self, reqs: Requirements) -> np.ndarray:
        """Per type, the cheapest available offering the zone and capacity-type requirements allow (inf if none)."""
        sig = (reqs.get(LABEL_ZONE).signature(), reqs.get(LABEL_CAPACITY_TYPE).signature())
        if self.offering_keys:
            sig += tuple(reqs.get(k).signature() for k in self.offering_keys)
        p = self._prices.get(sig)
        if p is None:
            p = np.array(
                [min((o.price for o in it.compatible_offerings(reqs)), default=np.inf) for it in self.types],
                dtype=float,
            )
            self._prices[sig] = p
        return p

    def label_mask(self, reqs: Requirements) -> np.ndarray:
        """Types whose labels satisfy the type-level keys of ``reqs``."""
        relevant = [r for r in reqs if r.key in self.label_keys and r.key not in (LABEL_ZONE, LABEL_CAPACITY_TYPE)]
        sig = tuple(sorted(r.signature() for r in relevant))
        m = self._label_masks.get(sig)
        if m is None:
            m = np.ones(len(self.types), dtype=bool)
            for i, it in enumerate(self.types):
                for r in relevant:
                    v = it.labels.get(r.key)
                    if v is None and r.key in self.offer_keys[i]:
                        continue  # its offerings carry the label: offering_mask decides
                    if (v is None and not r.allows_absent()) or (v is not None and not r.has(v)):
                        m[i] = False
                        break
            self._label_masks[sig] = m
        return m

    def offering_mask(self, reqs: Requirements) -> np.ndarray:
        """Types with an available offering in the allowed zones and capacity types."""
        return np.isfinite(self.prices(reqs))


class _Claim:
    """A NodeClaim being built by this solve."""

    __slots__ = ("ts", "hostname", "req", "idx", "used", "pods", "host_ports", "max_alloc", "seq", "placed", "rank", "row",
                 "reserved", "to_reserve")

    def __init__(self, ts: _TemplateState, hostname: str, req: Requirements, idx: np.ndarray, seq: int,
                 max_alloc: np.ndarray | None = None):
        self.ts = ts
        self.hostname = hostname
        self.req = req
        self.idx = idx
        self.used = np.zeros(ts.alloc.shape[1], dtype=np.int64)
        self.pods: list[PodInfo] = []
        self.host_ports: set = set()  # of its pods (DaemonSets' ports are per instance type: ts.port_mask)
        self.seq = seq
        self.placed: list[tuple["_Class", int]] = []
        # its place among NodeClaims holding as many pods (see Scheduler._place_in_flight): a new one comes after
        # the others; one that just took pods comes before those that reached its count earlier
        self.rank = seq
        self.row = -1  # its row in the solver's matrices of open NodeClaims, once opened
        self.reserved: set[str] = set()  # the capacity reservations it holds (karpy.scheduling.reservations)
        self.to_reserve: set[str] | None = None  # what the last fit computed it would hold
        if max_alloc is None:
            self._refresh_max()
        else:  # the largest of the types ``idx``, known already (never changed in place: replaced)
            self.max_alloc = max_alloc

    def _refresh_max(self) -> None:
        if len(self.idx):
            self.max_alloc = self.ts.alloc[self.idx].max(axis=0)
        else:
            self.max_alloc = np.zeros_like(self.used)

    def domain(self, key: str) -> str | None:
        if key == LABEL_HOSTNAME:
            return self.hostname
        r = self.req._reqs.get(key)
        if r is not None and not r.complement and len(r.values) == 1:
            return next(iter(r.values))
        return None


# the kinds of hostname topology terms Scheduler._known_topology_cap reads itself
_HOST_SPREAD_SELF, _HOST_SPREAD, _HOST_ANTI_SELF, _HOST_ANTI, _HOST_INVERSE = range(5)
_SPREAD = 5  # a spread on another key (Scheduler._domains_cap; the anti-affinity and inverse kinds serve there too)

_RANK_SHIFT = 32
_RANK_OFFSET = 1 << 31


class _Run:
    """NodeClaims in order, read lazily: the smallest keys are sorted in growing chunks as they are reached, so a
    class that tries a few NodeClaims out of thousands pays for a partial selection, not a full sort."""

    __slots__ = ("keys", "rows", "head", "pos", "chunk")

    def __init__(self, keys: np.ndarray, rows: np.ndarray):
        self.keys = keys  # (count << 32) + rank + 2**31: ordered as (count, rank)
        self.rows = rows
        self.head: list[tuple[int, int, int]] = []
        self.pos = 0
        self.chunk = 8

    def peek(self) -> tuple[int, int, int] | None:
        if self.pos == len(self.head):
            if not len(self.keys):
                return None
            self._next_chunk()
        return self.head[self.pos]

    def _next_chunk(self) -> None:
        keys, rows = self.keys, self.rows
        k = self.chunk
        self.chunk = 2 * k
        if k >= len(keys):
            order = np.argsort(keys)
            take, self.keys, self.rows = order, keys[:0], rows[:0]
        else:
            part = np.argpartition(keys, k - 1)
            take = part[:k]
            take = take[np.argsort(keys[take])]
            rest = part[k:]
            self.keys, self.rows = keys[rest], rows[rest]
        sk = keys[take]
        self.head = list(zip((sk >> _RANK_SHIFT).tolist(),
                             ((sk & ((1 << _RANK_SHIFT) - 1)) - _RANK_OFFSET).tolist(), rows[take].tolist()))
        self.pos = 0


class _Buckets:
    """The in-flight NodeClaims a topology-bound class may try, in the order of :meth:`Scheduler._in_flight`,
    held per domain of ``key`` (None: a domain not yet known, or no key). When every topology term of the
    class is keyed on that label, a domain the counts refuse for a pod is passed over as a whole: its
    NodeClaims are never looked at for that pod, so a pod costs the same however many NodeClaims the refused
    domains hold.

    Each domain keeps the NodeClaims found at the start in a :class:`_Run` (sorted lazily, as far as they are
    reached) and a heap of those pushed since (a NodeClaim that took a pod, one set aside for a pod, a new
    one)."""

    __slots__ = ("key", "claims", "buckets")

    def __init__(self, key: str | None, claims: list["_Claim"]):
        self.key = key
        self.claims = claims
        self.buckets: dict[str | None, tuple[_Run | None, list[tuple[int, int, int]]]] = {}

    def add_run(self, domain: str | None, keys: np.ndarray, rows: np.ndarray) -> None:
        self.buckets[domain] = (_Run(keys, rows), [])

    def __bool__(self) -> bool:
        return any(h or (r is not None and r.peek() is not None) for r, h in self.buckets.values())

    def push(self, entry: tuple[int, int, int], domain: str | None = None, known: bool = False) -> None:
        if not known:
            domain = self.claims[entry[2]].domain(self.key) if self.key is not None else None
        b = self.buckets.get(domain)
        if b is None:
            self.buckets[domain] = (None, [entry])
        else:
            heapq.heappush(b[1], entry)

    def peek(self) -> tuple[int, int, int] | None:
        """The first entry, in order (of any domain), without taking it; None when none is left."""
        best = None
        for run, h in self.buckets.values():
            if run is not None:
                e = run.peek()
                if e is not None and (best is None or e < best):
                    best = e
            if h and (best is None or h[0] < best):
                best = h[0]
        return best

    def pop(self, refused: Collection[str] = ()) -> tuple[tuple[int, int, int] | None, str | None]:
        """The first entry, in order, outside the refused domains, and its domain; (None, None) when none is left."""
        best = None
        where = None
        from_run = False
        for d, (run, h) in self.buckets.items():
            if d is not None and d in refused:
                continue
            if run is not None:
                e = run.peek()
                if e is not None and (best is None or e < best):
                    best, where, from_run = e, d, True
            if h and (best is None or h[0] < best):
                best, where, from_run = h[0], d, False
        if best is None:
            return None, None
        run, h = self.buckets[where]
        if from_run:
            run.pos += 1
        else:
            heapq.heappop(h)
        return best, where


class _Node:
    """An existing node in a solve. What the solve places there lives in the solver (row ``row`` of
    its used matrix, and its ports), so prepared nodes are shared by many solves."""

    __slots__ = ("node", "alloc", "row")

    def __init__(self, node: ExistingNode, alloc: np.ndarray, row: int):
        self.node = node
        self.alloc = alloc
        self.row = row

    @property
    def req(self) -> Requirements:
        # built once per ExistingNode, however many simulations look at it
        r = getattr(self.node, "_karpy_requirements", None)
        if r is None:
            r = Requirements.from_labels(self.node.labels)
            self.node._karpy_requirements = r  # type: ignore[attr-defined]
        return r

    @property
    def labels(self) -> Mapping[str, str]:
        """The node's labels, its hostname included."""
        lab = getattr(self.node, "_karpy_labels", None)
        if lab is None:
            lab = dict(self.node.labels)
            lab.setdefault(LABEL_HOSTNAME, self.node.name)
            self.node._karpy_labels = lab  # type: ignore[attr-defined]
        return lab

    @property
    def hostname(self) -> str:
        return self.node.labels.get(LABEL_HOSTNAME, self.node.name)

    def domain(self, key: str) -> str | None:
        if key == LABEL_HOSTNAME:
            return self.hostname
        return self.node.labels.get(key)


class _Class:
    """Pods with one class key, and everything derived from their constraints."""

    def __init__(self, pods: list[PodInfo], solver: "Scheduler", key: tuple | None = None):
        self.pods = pods
        self.rep = pods[0]
        self.solver = solver
        self.prefer_no_schedule_tolerated = False
        self.reserved_wait = False  # its last new NodeClaim was refused for a reservation others hold
        self.derive(key)

    def derive(self, key: tuple | None = None) -> None:
        """Everything the scheduler reads of the representative's constraints. ``key``: the class key of a
        class not yet relaxed; a solve over a preparation derives each such class once for all its solves
        (see :meth:`_derive_memo`)."""
        s = self.solver
        p = self.rep
        memo = s._class_memo
        self._eligible: dict[tuple, list[str]] = {}  # see Scheduler._eligible_domains
        if memo is not None and key is not None and p.volume_requirements is None and not p.dra:
            key = (key, p.moving)
            # names what the preparation may remember of this class (see Scheduler._candidate_rows)
            self.memo_key: tuple | None = key
            hit = memo.get(key)
            if hit is not None and self._adopt(hit):
                return
        else:
            memo = None
            self.memo_key = None
        n_groups = len(s.topology.groups)
        self.reqs = p.requirements(with_preferences=s.respect_preferences)
        self.request_vec = s.vector(p.requests)
        self.nz = np.flatnonzero(self.request_vec)
        self.nz_list = [int(i) for i in self.nz]
        self.req_key = tuple(int(x) for x in self.request_vec)
        topo = s.topology
        self.strict = p.strict_requirements()
        # IgnoreDRARequests (on by default): a pod asking for devices is refused outright (karpy.scheduling.dra)
        self.dra_refused = p.dra and s.ignore_dra
        vt = p.volume_requirements
        self.volume_invalid = vt.invalid if vt is not None else None
        self.volumes = vt if vt is not None and vt.alternatives else None
        self.spreads: list[tuple[TopologyGroup, bool, tuple[str, str]]] = []
        for c in p.spread:
            if c.when_unsatisfiable == "ScheduleAnyway" and not s.respect_preferences:
                continue
            g = topo.spread_group(p.namespace, c)
            self.spreads.append((g, g.selects(p.namespace, p.labels), (c.node_affinity_policy, c.node_taints_policy)))
        aff_terms = list(p.affinity) + (list(p.preferred_affinity) if s.respect_preferences else [])
        anti_terms = list(p.anti_affinity) + (list(p.preferred_anti_affinity) if s.respect_preferences else [])
        self.affinities = [(g, g.selects(p.namespace, p.labels)) for g in (topo.affinity_group(t) for t in aff_terms)]
        self.antis = [(g, g.selects(p.namespace, p.labels)) for g in (topo.anti_group(t) for t in anti_terms)]
        # only required anti-affinity repels other pods (the inverse direction)
        self.required_antis = [topo.anti_group(t) for t in p.anti_affinity]
        self.tolerations = p.tolerations + ((_PREFER_NO_SCHEDULE_TOLERATION,) if self.prefer_no_schedule_tolerated else ())
        self.has_topology = bool(self.spreads or self.affinities or self.antis)
        self._selecting: list[TopologyGroup] | None = None
        self._inverse: list[TopologyGroup] | None = None
        self._bound: bool | None = None
        # remembered for the preparation's other solves unless deriving added a group only this solve has
        if memo is not None and len(s.topology.groups) == n_groups:
            memo[key] = (self.reqs, self.request_vec, self.nz, self.nz_list, self.req_key, self.strict,
                         [(g.ident, sel, policy) for g, sel, policy in self.spreads],
                         [(g.ident, sel) for g, sel in self.affinities], [(g.ident, sel) for g, sel in self.antis],
                         [g.ident for g in self.required_antis], self.tolerations)

    def _adopt(self, hit: tuple) -> bool:
        """Take a derivation another solve over the same preparation made for an equal class, with this
        solve's own topology groups (its counts); False when a group it names is not in this solve."""
        groups = self.solver.topology.groups
        reqs, vec, nz, nz_list, req_key, strict, spreads, affinities, antis, required_antis, tolerations = hit
        try:
            self.spreads = [(groups[i], sel, policy) for i, sel, policy in spreads]
            self.affinities = [(groups[i], sel) for i, sel in affinities]
            self.antis = [(groups[i], sel) for i, sel in antis]
            self.required_antis = [groups[i] for i in required_antis]
        except KeyError:
            return False
        # shared between solves, so never changed in place (nothing changes them: relaxing derives anew)
        self.reqs, self.request_vec, self.nz, self.nz_list, self.req_key = reqs, vec, nz, nz_list, req_key
        self.strict, self.tolerations = strict, tolerations
        self.dra_refused = False
        self.volume_invalid = None
        self.volumes = None
        self.has_topology = bool(self.spreads or self.affinities or self.antis)
        self._selecting = None
        self._inverse = None
        self._bound = None
        return True

    def topology_bound(self) -> bool:
        """Must topology be consulted to place these pods (their own terms, or others' that count them)?"""
        if self._bound is None:
            self._bound = bool(
                self.has_topology
                or self.inverse()
                or any(g.kind == SPREAD and g.key != LABEL_HOSTNAME for g in self.selecting())
            )
        return self._bound

    def selecting(self) -> list[TopologyGroup]:
        if self._selecting is None:
            p = self.rep
            self._selecting = self.solver.topology.selecting(p.namespace, p.labels, p.label_key)
        return self._selecting

    def inverse(self) -> list[TopologyGroup]:
        """Anti-affinity groups whose selector matches these pods (their owners repel us)."""
        if self._inverse is None:
            self._inverse = [g for g in self.selecting() if g.kind == ANTI_AFFINITY]
        return self._inverse

    def relax(self) -> str | None:
        """Drop one soft constraint, in upstream's order; None when nothing is left to relax (or when the pods
        wait for a reservation other NodeClaims hold: relaxing would not be needed once it is free)."""
        if self.reserved_wait or self.dra_refused:
            return None
        p = copy_for_relaxation(self.rep)
        reason = None
        if len(p.required_terms) > 1:
            p.required_terms = p.required_terms[1:]
            reason = "removing: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
        elif p.preferred_affinity:
            p.preferred_affinity = p.preferred_affinity[1:]
            reason = "removing: spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
        elif p.preferred_anti_affinity:
            p.preferred_anti_affinity = p.preferred_anti_affinity[1:]
            reason = "removing: spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
        elif p.preferred_terms:
            p.preferred_terms = p.preferred_terms[1:]
            reason = "removing: spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
        elif any(c.when_unsatisfiable == "ScheduleAnyway" for c in p.spread):
            i = next(i for i, c in enumerate(p.spread) if c.when_unsatisfiable == "ScheduleAnyway")
            p.spread = p.spread[:i] + p.spread[i + 1:]
            reason = "removing: spec.topologySpreadConstraints (ScheduleAnyway)"
        elif not self.prefer_no_schedule_tolerated:
            self.prefer_no_schedule_tolerated = True
            reason = "adding: toleration for PreferNoSchedule taints"
        if reason is None:
            return None
        self.rep = p
        self.derive()
        return reason


class Prepared:
    """What many simulations over one snapshot share (the disruption engine runs hundreds): the
    resource index, the templates' arrays, every node's vectors in order, and topology counts of
    every pod already placed, for groups of every constraint any pod in the snapshot carries.

    :meth:`Scheduler.from_prepared` then costs a copy of the mutable parts, not a rebuild.
    """

    def __init__(self, templates: Sequence[NodeClaimTemplate], existing: Sequence[ExistingNode],
                 pods: Sequence[PodInfo], respect_preferences: bool = True, ignore_dra: bool = True):
        base = Scheduler(templates, existing, respect_preferences=respect_preferences, ignore_dra=ignore_dra)
        # one pod of each class, in the order they first appear: pods of a class request the same resources
        # and carry the same constraints
        reps: dict[tuple, PodInfo] = {}
        seen: set[int] = set()  # class keys already read, by identity (pods of a shape share theirs)
        for p in list(pods) + [p for n in existing for p in n.bound_pods]:
            k = p.class_key
            if k and id(k) in seen:
                continue
            if k:
                seen.add(id(k))
            else:
                k = class_key(p)
            if k not in reps:
                reps[k] = p
        base._build(list(reps.values()))
        topo = base.topology
        for p in reps.values():
            for c in p.spread:
                topo.spread_group(p.namespace, c)
            for t in list(p.affinity) + list(p.preferred_affinity):
                topo.affinity_group(t)
            for t in list(p.anti_affinity) + list(p.preferred_anti_affinity):
                topo.anti_group(t)
        _register_prepared_topology(base)
        self.base = base
        self.index = {n.node.name: i for i, n in enumerate(base.nodes)}
        self.existing = {n.name: n for n in existing}
        # what every solve copies, less its excluded nodes (see Scheduler.from_prepared)
        self.rows = np.fromiter((n.row for n in base.nodes), dtype=np.int64, count=len(base.nodes))
        self.inputs = [n.node for n in base.nodes]
        # what a solve derived of each pod class not yet relaxed, for the other solves (see _Class.derive)
        self.class_memo: dict[tuple, tuple] = {}
        # per such class, which prepared nodes it may ever land on (see Scheduler._candidate_rows)
        self.static_memo: dict[tuple, tuple] = {}
        # see hosts_reaching: (group ident, threshold, owners) -> rows, and each hostname's rows, once asked
        self._host_refusals: dict[tuple, list[int]] = {}
        self._rows_by_host: dict[str, list[int]] | None = None
        self.takes_moving = np.fromiter((n.node.takes_moving for n in base.nodes), dtype=bool, count=len(base.nodes))
        by_taints: dict[tuple, list[int]] = {}
        for n in base.nodes:
            if n.node.taints:
                by_taints.setdefault(tuple(n.node.taints), []).append(n.row)
        self.taint_rows = [(list(t), np.array(rows, dtype=np.int64)) for t, rows in by_taints.items()]

    def hosts_reaching(self, ident: tuple, t: int, owners: bool) -> list[int]:
        """The rows of the prepared nodes whose hostname's count (``owners``: owner count) in the group ``ident``
        reaches ``t`` at the preparation's counts; worked out once per term, for every class it judges."""
        k = (ident, t, owners)
        rows = self._host_refusals.get(k)
        if rows is None:
            rows = []
            bg = self.base.topology.groups.get(ident)
            if bg is not None:
                if self._rows_by_host is None:
                    self._rows_by_host = {}
                    for i, n in enumerate(self.base.nodes):
                        self._rows_by_host.setdefault(n.hostname, []).append(i)
                by_host = self._rows_by_host
                rows = [i for h, c in (bg.owners if owners else bg.counts).items() if c >= t for i in by_host.get(h, ())]
            self._host_refusals[k] = rows
        return rows

    def room(self) -> tuple[np.ndarray, list[int], list[int]]:
        """Per prepared node (row), its free resources (none below zero); their sum per resource; and per
        resource, the most any instance type of any template offers (daemon overhead not taken off). Sums are
        Python integers (no overflow)."""
        hit = self.__dict__.get("_room")
        if hit is None:
            base = self.base
            free = np.maximum(base._alloc_mat - base._used_mat, 0)
            largest = np.zeros(base.nres, dtype=np.int64)
            for t in base.templates:
                for it in t.instance_types:
                    largest = np.maximum(largest, base.vector(it.allocatable))
            hit = self._room = (free, [int(x) for x in free.sum(axis=0, dtype=object)], largest.tolist())
        return hit

    def requests_of(self, pods: Iterable[PodInfo]) -> list[int]:
        """The pods' requests summed over the prepared resources, as Python integers (pods of a class request
        alike)."""
        memo = self.__dict__.setdefault("_class_requests", {})
        counts: dict[int, list] = {}
        loose: list[PodInfo] = []
        for p in pods:
            k = p.class_key
            if not k:
                loose.append(p)
                continue
            e = counts.get(id(k))
            if e is None:
                counts[id(k)] = [p, 1]
            else:
                e[1] += 1
        total = [0] * self.base.nres
        for i, (p, n) in counts.items():
            hit = memo.get(i)
            if hit is None or hit[0] is not p.class_key:
                hit = memo[i] = (p.class_key, self.base.vector(p.requests).tolist())
            for j, x in enumerate(hit[1]):
                total[j] += x * n
        for p in loose:
            for j, x in enumerate(self.base.vector(p.requests).tolist()):
                total[j] += x
        return total

    def held_counts(self, node: ExistingNode) -> list[tuple[tuple, str, int, bool]]:
        """What the node's bound pods add to the prepared topology counts, summed per group and domain: (group
        ident, domain, pods, whether as owners of an anti-affinity term), in the order first met. A solve that
        leaves the node out takes them off its copy of the counts. (Not kept: preparations outlive their pass,
        and every solve of a pass leaves out other nodes.)"""
        return _held_counts(self.base.topology, node)


class Scheduler:
    """One scheduling simulation over a snapshot of the cluster."""

    zone_census = False  # the provisioner's solves also count pending pods by effective zone (Results.effective_zones)

    @classmethod
    def from_prepared(cls, prep: Prepared, exclude: Iterable[str] = (), hostname_prefix: str = "hostname-placeholder",
                      min_values_best_effort: bool = False, pin_counted: bool = False) -> "Scheduler":
        """A solve over the prepared snapshot without the nodes in ``exclude`` (and their pods)."""
        base = prep.base
        s = cls(base.templates, (), respect_preferences=base.respect_preferences, hostname_prefix=hostname_prefix,
                ignore_dra=base.ignore_dra,
                min_values_best_effort=min_values_best_effort, refine=False, pin_counted=pin_counted)
        s.rnames, s.rindex, s.nres = base.rnames, base.rindex, base.nres
        s.tstates = base.tstates
        s.remaining = {k: (None if v is None else v.copy()) for k, v in base.remaining.items()}
        s.remaining_nodes = dict(base.remaining_nodes)
        gone = [prep.existing[n] for n in exclude if n in prep.existing]
        gone_names = {n.name for n in gone}
        # as upstream's SimulateScheduling: the NodePools' limits are judged without the nodes left out
        for n in gone:
            rem = s.remaining.get(n.nodepool) if n.nodepool is not None else None
            if rem is not None:
                s.remaining[n.nodepool] = rem + s.vector(n.capacity if n.capacity is not None else n.allocatable)
            if n.nodepool in s.remaining_nodes:
                s.remaining_nodes[n.nodepool] += 1
        # the prepared nodes without the excluded ones, in order (listed only if asked: see nodes)
        drop = sorted(prep.index[name] for name in gone_names if name in prep.index)
        s._nodes = None
        s._existing_input = None
        s._gone = [base.nodes[i] for i in drop]
        if drop:
            s._gone_rows = set(drop)  # (and _present, when first asked: see _place_existing)
        s._prep = prep
        s._class_memo = prep.class_memo
        s._rows = prep.rows  # read only without _present (see _place_existing)
        s._alloc_mat = base._alloc_mat
        s._used_mat = base._used_mat  # copied when this solve first places a pod on an existing node
        s._used_own = False
        # topology: the prepared counts, less what the excluded nodes held
        # (copy-on-write: a group's counts are copied when this solve first records into it)
        topo = base.topology.clone()
        groups = topo.groups
        for n in gone:
            for ident, d, k, owner in prep.held_counts(n):
                if owner:
                    groups[ident].record_owner(d, -k)
                else:
                    groups[ident].record(d, -k)
        s.topology = topo
        s._built = True
        return s

    def __init__(
        self,
        templates: Sequence[NodeClaimTemplate],
        existing: Sequence[ExistingNode] = (),
        bound_pods_elsewhere: Sequence[tuple[PodInfo, Mapping[str, str]]] = (),
        respect_preferences: bool = True,
        hostname_prefix: str = "hostname-placeholder",
        min_values_best_effort: bool = False,
        refine: bool = False,
        pin_counted: bool = False,
        reserved_strict: bool = False,
        ignore_dra: bool = True,
    ):
        self.templates = sorted(templates, key=lambda t: (-t.weight, t.nodepool))
        # the provisioner's strict reserved-offering mode (karpy.scheduling.reservations); off: counted, never refused
        self.reserved_strict = reserved_strict
        # upstream's IgnoreDRARequests (default on): pods asking for devices are refused (karpy.scheduling.dra)
        self.ignore_dra = ignore_dra
        self._rm: ReservationManager | None = None
        self.respect_preferences = respect_preferences
        self.hostname_prefix = hostname_prefix
        self.min_values_best_effort = min_values_best_effort
        self.refine = refine  # karpy's CostRefinement feature gate (off: upstream's packing)
        self.pin_counted = pin_counted  # karpy's ZonePinning feature gate (off: upstream's topology recording)
        self.topology = Topology()
        self._templates_input = list(self.templates)
        self._existing_input: list[ExistingNode] | None = list(existing)
        self._nodes: list[_Node] | None = None  # see nodes
        self._used_own = True  # whether _used_mat is this solve's own (see from_prepared)
        self._bound_elsewhere = list(bound_pods_elsewhere)
        self.claims: list[_Claim] = []
        self._seq = 0
        self._promotions = 0
        # the open NodeClaims' room, pod counts and order, row by row, for picking candidates without a loop
        self._cm_room: np.ndarray | None = None  # per open NodeClaim row, its largest type's room less its pods
        self._cm_key = np.zeros((0, 2), dtype=np.int64)
        self._cm_dom: dict[str, np.ndarray] = {}  # per label, the open NodeClaims' domain codes (see _domain_codes)
        self._dom_ids: dict[str, int] = {}
        self._dom_names: list[str] = []
        self._host_rows: dict[str, int] = {}  # open NodeClaims' hostnames -> rows
        self._refused_rows: dict[tuple, list] = {}  # see _hostname_refused
        self._judging: dict[int, tuple] = {}  # see _judging_groups
        self._universe_cache: dict[str, set[str]] = {}
        self._eligible_cache: dict[tuple, list[str]] = {}
        self._keys_cache: set[str] | None = None
        self._keys_seen = 0  # how many groups _keys_cache was taken from
        self._ports: dict[int, set] = {}  # host ports placed on existing nodes (by row)
        self._volumes: dict[int, dict[str, set]] = {}  # volumes by CSI driver on existing nodes with limits (by row)
        self._prep: Prepared | None = None  # a solve made by from_prepared: the shared base
        self._class_memo: dict[tuple, tuple] | None = None  # from_prepared: the preparation's class derivations
        self._gone: list[_Node] = []  # prepared nodes this solve leaves out
        self._present: np.ndarray | None = None  # from_prepared: per prepared node row, False for those left out
        self._gone_rows: set[int] = set()  # from_prepared: the rows of those left out
        self._touched: set[int] = set()  # rows of the existing nodes this solve placed pods on
        self._universe_parts_cache: dict = {}
        self._eligible_parts_cache: dict = {}
        # topology caps of existing nodes by their domains, per class, until the next pod is recorded (see
        # _known_topology_cap); _topo_version counts the records
        self._topo_version = 0
        self._node_caps: dict[int, tuple] = {}
        self._built = False

    @property
    def nodes(self) -> list[_Node]:
        """The existing nodes pods may be placed on, in order; for a solve over a preparation, its nodes less
        those left out, listed when first asked."""
        nodes = self._nodes
        if nodes is None and self._prep is not None:
            gone = self._gone_rows
            nodes = self._nodes = [n for n in self._prep.base.nodes if n.row not in gone]
        return nodes  # type: ignore[return-value]

    @nodes.setter
    def nodes(self, value: list[_Node]) -> None:
        self._nodes = value

    def _inputs(self) -> list[ExistingNode]:
        """The ExistingNodes of this solve (for a solve over a preparation, those of its nodes)."""
        if self._existing_input is None:
            self._existing_input = [n.node for n in self.nodes]
        return self._existing_input

    def _build(self, pods: Sequence[PodInfo]) -> None:
        """Index every resource any node, type, daemon or pod names, and build the arrays."""
        names: set[str] = {res.CPU, res.MEMORY, res.PODS}
        for t in self.templates:
            for it in t.instance_types:
                names.update(it.allocatable)
            for p in t.daemon_pods:
                names.update(p.requests)
        for n in self._inputs():
            names.update(n.allocatable)
            names.update(n.requested)
        for p in pods:
            names.update(p.requests)
        self.rnames = sorted(names)
        self.rindex = {k: i for i, k in enumerate(self.rnames)}
        self.nres = len(self.rnames)
        self.tstates = [_TemplateState(t, i, self.rindex, self.nres) for i, t in enumerate(self.templates)]
        self.remaining = {
            t.nodepool: (None if t.remaining is None else self.vector_signed(t.remaining)) for t in self.templates
        }
        self.remaining_nodes = {
            t.nodepool: t.remaining["nodes"] for t in self.templates if t.remaining is not None and "nodes" in t.remaining
        }
        # initialized nodes first, then by name, as upstream orders them
        ordered = [n for n in sorted(self._inputs(), key=lambda n: (not n.initialized, n.name)) if n.schedulable]
        vectors = [self._node_vectors(n) for n in ordered]
        self.nodes = [_Node(n, v[0], i) for i, (n, v) in enumerate(zip(ordered, vectors))]
        # allocatable and used of every node as matrices, so a class looks only at nodes it could fit
        if self.nodes:
            self._alloc_mat = np.stack([v[0] for v in vectors])
            self._used_mat = np.stack([v[1] for v in vectors])
        else:
            self._alloc_mat = self._used_mat = np.zeros((0, self.nres), dtype=np.int64)
        self._rows = np.arange(len(self.nodes), dtype=np.int64)
        self._built = True

    def _node_vectors(self, n: ExistingNode) -> tuple[np.ndarray, np.ndarray]:
        """Allocatable and requested as vectors, cached on the node for this resource index."""
        key = (tuple(self.rnames), tuple(n.allocatable.items()), tuple(n.requested.items()))
        hit = getattr(n, "_karpy_vectors", None)
        if hit is not None and hit[0] == key:
            return hit[1], hit[2].copy()
        alloc, used = self.vector(n.allocatable), self.vector(n.requested)
        n._karpy_vectors = (key, alloc, used.copy())  # type: ignore[attr-defined]
        return alloc, used

    # --- vectors -------------------------------------------------------------------
    def vector(self, d: Mapping[str, int]) -> np.ndarray:
        v = np.zeros(self.nres, dtype=np.int64)
        for k, x in d.items():
            j = self.rindex.get(k)
            if j is not None:
                v[j] = min(x, _HUGE)  # larger than any node: still never fits, without overflow
        return v

    def vector_signed(self, d: Mapping[str, int]) -> np.ndarray:
        v = np.full(self.nres, np.iinfo(np.int64).max // 4, dtype=np.int64)
        for k, x in d.items():
            j = self.rindex.get(k)
            if j is not None:
                v[j] = x
        return v

    # --- topology set-up -----------------------------------------------------------
    def _register_existing_topology(self, classes: list[_Class]) -> None:
        """Count pods already running (and their anti-affinity terms) into the groups."""
        # pods of one class on one node count alike: counted together, in the order they first appear (so every
        # group meets its domains in the same order as pod by pod); a class by its key's identity (pods of a
        # shape share it; equal keys apart are counted apart, to the same counts)
        together: dict[tuple, list] = {}
        for n in self._inputs():
            labels = _Node(n, None, -1).labels  # type: ignore[arg-type]
            for k, p, count in _pod_classes(n):
                k = (id(labels), k)
                e = together.get(k)
                if e is None:
                    together[k] = [p, labels, count]
                else:
                    e[2] += count
        for p, labels in self._bound_elsewhere:
            k = (id(labels), id(p.class_key) if p.class_key else class_key(p))
            e = together.get(k)
            if e is None:
                together[k] = [p, labels, 1]
            else:
                e[2] += 1
        for p, labels, n in together.values():
            for t in p.anti_affinity:
                self.topology.anti_group(t)
        selecting = _registry_selecting(self.topology)
        for p, labels, n in together.values():
            for g in selecting(p):
                d = labels.get(g.key)
                if d is not None:
                    g.record(d, n)
            for t in p.anti_affinity:
                g = self.topology.anti_group(t)
                d = labels.get(g.key)
                if d is not None:
                    g.record_owner(d, n)

    def universe(self, key: str) -> set[str]:
        """Every domain of ``key`` a pod could land in: existing nodes and what NodePools can launch."""
        u = self._universe_cache.get(key)
        if u is not None:
            return u
        src = self._prep.base if self._prep is not None else self
        parts = src._universe_parts_cache.get(key) if self._prep is not None else None
        if parts is None:
            parts = src._universe_parts(key)
            if self._prep is not None:
                src._universe_parts_cache[key] = parts
        nodes, templates = parts
        u = set(templates)
        if self._gone:
            gone = Counter(d for d in (n.domain(key) for n in self._gone) if d is not None)
            u.update(d for d, c in nodes.items() if c > gone.get(d, 0))
        else:
            u.update(nodes)
        self._universe_cache[key] = u
        return u

    def _universe_parts(self, key: str) -> tuple[Counter, set[str]]:
        nodes: Counter = Counter()
        for n in self.nodes:
            v = n.domain(key)
            if v is not None:
                nodes[v] += 1
        u: set[str] = set()
        for ts in self.tstates:
            r = ts.tpl.requirements.get(key)
            if key == LABEL_ZONE:
                u.update(o.zone for it in ts.types for o in it.offerings if o.available and r.has(o.zone))
            elif key == LABEL_CAPACITY_TYPE:
                u.update(o.capacity_type for it in ts.types for o in it.offerings if o.available and r.has(o.capacity_type))
            elif key in ts.offering_keys:
                u.update(v for it in ts.types for v in _label_values(it, key) if r.has(v))
            elif key in ts.label_keys:
                u.update(it.labels[key] for it in ts.types if key in it.labels and r.has(it.labels[key]))
            elif not r.complement:
                u.update(r.values)
        return nodes, u

    # --- the solve -----------------------------------------------------------------
    def solve(self, pods: Iterable[PodInfo]) -> Results:
        pods = list(pods)
        prepared = self._built
        if not prepared:
            self._build(pods)
        groups: dict[tuple, list[PodInfo]] = {}
        order: list[tuple] = []
        for p in pods:
            k = p.class_key or class_key(p)
            lst = groups.get(k)
            if lst is None:
                groups[k] = lst = []
                order.append(k)
            lst.append(p)
        classes = [_Class(groups[k], self, k) for k in order]
        # register every constraint before counting anything, so each pod is recorded into all groups
        if not prepared:
            self._register_existing_topology(classes)
        census = self._zone_census(classes) if self.zone_census else {}
        # Largest first (CPU, then memory), as upstream's queue orders pods.
        classes.sort(key=lambda c: (-c.rep.requests.get(res.CPU, 0), -c.rep.requests.get(res.MEMORY, 0)))

        placed_existing: dict[str, list[PodInfo]] = {}
        errors: dict[str, str] = {}
        failed: list[_Class] = []
        queue = list(classes)
        while True:
            progress = False
            retry: list[_Class] = []
            for cls in queue:
                before = len(cls.pods)
                reason = self._schedule_class(cls, placed_existing)
                while cls.pods and reason is not None:
                    if cls.relax() is None:
                        break
                    reason = self._schedule_class(cls, placed_existing)
                if len(cls.pods) < before:
                    progress = True
                if cls.pods:
                    retry.append(cls)
                    for p in cls.pods:
                        errors[p.key] = reason or "no capacity"
            if not retry or not progress:
                failed = retry
                break
            queue = retry
        for cls in failed:
            for p in cls.pods:
                errors.setdefault(p.key, "no capacity")
        if self.refine:
            self._refine()
        kept_claims = []
        for c in self.claims:
            why = self._truncation_breaks_min_values(c)
            if why is None:
                kept_claims.append(c)
                continue
            for p in c.pods:
                errors[p.key] = (f'incompatible with nodepool "{c.ts.tpl.nodepool}", pod didn\u2019t schedule because '
                                 f"NodePool couldn\u2019t meet minValues requirements, {why}")
        self.claims = kept_claims
        done = {p.key for c in self.claims for p in c.pods}
        for pods_ in placed_existing.values():
            done.update(p.key for p in pods_)
        errors = {k: v for k, v in errors.items() if k not in done}
        return Results(
            new_nodeclaims=[self._finalize(c) for c in self.claims],
            existing=placed_existing,
            errors=errors,
            failed_pods=[p for p in pods if p.key in errors],
            effective_zones=census,
        )

    # --- effective zones (a census for metrics; placement never reads it) ---------------------------
    def _zone_census(self, classes: list[_Class]) -> dict[str, int]:
        out: Counter = Counter()
        for cls in classes:
            n = sum(1 for p in cls.pods if not p.moving and ((p.obj or {}).get("status") or {}).get("phase") == "Pending")
            if n:
                out[self._effective_zone(cls)] += n
        return dict(out)

    def _effective_zone(self, cls: _Class) -> str:
        """The one zone the pod's zone requirement, its volumes' zones and its zonal topology constraints leave,
        "flexible" when several do (or nothing constrains it), "none" when none does (upstream's
        computeEffectiveZoneFromPod)."""
        tsc, satisfiable = self._topology_zones(cls)
        if not satisfiable:
            return "none"
        zr = cls.strict.get(LABEL_ZONE)
        vol: set[str] | None = None
        if cls.volumes is not None:
            vol = set()
            for alt in cls.volumes.alternatives:
                r = alt.get(LABEL_ZONE)
                if r.complement or not r.values:
                    vol = None
                    break
                vol.update(r.values)
        if not zr.complement and zr.values:
            values = zr.values
        elif vol is not None:
            values = vol
        elif tsc:
            values = tsc
        else:
            return "flexible"
        match = [z for z in sorted(values) if zr.has(z) and (vol is None or z in vol) and (not tsc or z in tsc)]
        return match[0] if len(match) == 1 else ("flexible" if match else "none")

    def _topology_zones(self, cls: _Class) -> tuple[set[str] | None, bool]:
        """The zones the pod's own zonal spread, affinity and anti-affinity constraints allow right now (their
        intersection; None when it has none), and False when one of them allows no zone."""
        pod_zones = cls.reqs.get(LABEL_ZONE)
        out: set[str] | None = None
        groups = [(g, sel, "spread", policy) for g, sel, policy in cls.spreads]
        groups += [(g, sel, "affinity", None) for g, sel in cls.affinities]
        groups += [(g, sel, "anti", None) for g, sel in cls.antis]
        for g, self_selecting, kind, policy in groups:
            if g.key != LABEL_ZONE:
                continue
            if kind == "spread":
                eligible = self._eligible_domains(LABEL_ZONE, cls, policy)
                low = min((g.counts.get(d, 0) for d in eligible), default=0)
                if g.min_domains is not None and len(eligible) < g.min_domains:
                    low = 0
                valid = {d for d in eligible if pod_zones.has(d)
                         and g.counts.get(d, 0) + (1 if self_selecting else 0) - low <= g.max_skew}
            elif kind == "affinity":
                valid = {d for d, c in g.counts.items() if c > 0 and pod_zones.has(d)}
                if not valid and self_selecting:  # the first of pods that attract each other may go anywhere
                    valid = {d for d in self.universe(LABEL_ZONE) if pod_zones.has(d)}
            else:
                valid = {d for d in self.universe(LABEL_ZONE) if pod_zones.has(d) and not g.counts.get(d, 0)}
            if not valid:
                return None, False
            out = valid if out is None else out & valid
        return out, True

    def _schedule_class(self, cls: _Class, placed_existing: dict[str, list[PodInfo]]) -> str | None:
        """Place as many of the class's pods as possible; the failure reason if some remain."""
        if cls.dra_refused:
            return DRA_ERROR
        if cls.volume_invalid is not None:
            return f"ignoring pod, {cls.volume_invalid}"
        # existing nodes first (those with room for one pod of the class, in order). Upstream tries every
        # existing node again for each pod, so a node whose domain was too full for the first pods of a class
        # takes later ones once topology has moved on: a pass that placed pods with topology is followed by another
        while self._place_existing(cls, placed_existing) and cls.pods and cls.topology_bound():
            pass
        if not cls.pods:
            return None
        # then the NodeClaims this solve opened, then a new one, one NodePool after another in weight order
        reason = None
        heap = self._in_flight(cls)
        dead: set[int] = set()
        while cls.pods:
            if heap and self._place_in_flight(cls, heap, dead):
                continue
            # a pod with topology terms may let the NodeClaims already open take the next one once it is counted
            opened = len(self.claims)
            ok, reason = self._new_claim(cls, 1 if cls.topology_bound() else len(cls.pods))
            if not ok:
                return reason
            for i in range(opened, len(self.claims)):
                heap.push((len(self.claims[i].pods), self.claims[i].rank, i))
        return None

    def _place_existing(self, cls: _Class, placed_existing: dict[str, list[PodInfo]]) -> bool:
        """One pass over the existing nodes with room for a pod of the class; whether it placed any."""
        if not cls.pods:
            return False
        if self._nodes is None and self._prep is not None:  # (without listing them)
            if len(self._prep.base.nodes) <= len(self._gone_rows):
                return False
        elif not self.nodes:
            return False
        nz = cls.nz_list
        # the nodes with room for one pod of the class, in order, and how many its free resources hold (a node's
        # free resources change only when it takes pods, and a pass visits each node once)
        quota: list[int] | None = None
        cand = self._candidate_rows(cls)
        gone: Collection[int] = ()
        touched: Collection[int] = ()
        if cand is not None:  # rows of the preparation's nodes, and how many pods each held there
            nodes = self._prep.base.nodes
            order, quota = cand
            gone, touched = self._gone_rows, self._touched  # left out; took pods in this solve (asked again)
        else:
            nodes = self.nodes
            if nz:
                if self._gone_rows and self._present is None:
                    self._present = np.ones(len(self._prep.base.nodes), dtype=bool)
                    self._present[sorted(self._gone_rows)] = False
                rows = self._rows if self._present is None else self._prep.rows[self._present]
                room = np.all(self._alloc_mat[rows][:, nz] - self._used_mat[rows][:, nz] >= cls.request_vec[nz], axis=1)
                order = np.flatnonzero(room).tolist()
            else:
                order = range(len(self.nodes))
        checked = cand is not None
        placed = False
        for j, i in enumerate(order):
            if not cls.pods:
                break
            if i in gone:
                continue
            q = None
            if quota is not None:
                q = quota[j]
                if i in touched:
                    free = self._alloc_mat[i] - self._used_mat[i]
                    q = min(int(free[r]) // int(cls.request_vec[r]) for r in nz)
                    if q <= 0:
                        continue
            node = nodes[i]
            n, req = self._cap_node(cls, node, len(cls.pods), checked, q)
            if n > 0:
                placed = True
                taken, cls.pods = cls.pods[:n], cls.pods[n:]
                if not self._used_own:
                    self._used_mat = self._used_mat.copy()
                    self._used_own = True
                self._used_mat[node.row] += cls.request_vec * n
                self._touched.add(node.row)
                if cls.rep.host_ports:
                    ports = self._ports.get(node.row)
                    if ports is None:
                        ports = self._ports[node.row] = set(node.node.host_ports)
                    ports.update(cls.rep.host_ports)
                if node.node.volume_limits:
                    used = self._node_volumes(node)
                    for p in taken:
                        for driver, ids in (p.volume_usage or {}).items():
                            used.setdefault(driver, set()).update(ids)
                self._record(cls, node, n)
                placed_existing.setdefault(node.node.name, []).extend(taken)
        return placed

    def _in_flight(self, cls: _Class) -> _Buckets:
        """The NodeClaims this solve opened that might take a pod of the class, in the order upstream's
        scheduler tries them: by how many pods they hold, fewest first, with a stable sort (among equals, the
        NodeClaim that reached that count last comes first, and a new NodeClaim after older ones); for a
        topology-bound class, by the domain of its one key (see :class:`_Buckets`)."""
        n = len(self.claims)
        bucketed = cls.topology_bound() and not self._counted_only(cls)
        key = self._single_key(cls) if bucketed else None
        queue = _Buckets(key, self.claims)
        if not n:
            return queue
        nz = cls.nz
        if len(nz):  # those where some instance type left has room for one more of these pods
            ok = (self._cm_room[:n][:, nz] >= cls.request_vec[nz]).all(axis=1)
            rows = np.flatnonzero(ok)
        else:
            rows = np.arange(n)
        if bucketed and self._hostname_only(cls):
            refused = self._hostname_refused(cls, n)
            if refused is not None:
                rows = rows[~refused[rows]]
        keys = self._cm_key[rows]
        # (count, rank) is unique per NodeClaim: one integer key in that order
        ck = (keys[:, 0] << _RANK_SHIFT) + (keys[:, 1] + _RANK_OFFSET)
        if key is None:
            queue.add_run(None, ck, rows)
            return queue
        codes = self._domain_codes(key)[rows]
        present = np.flatnonzero(np.bincount(codes + 1))
        if len(present) == 1:
            code = int(present[0]) - 1
            queue.add_run(self._dom_names[code] if code >= 0 else None, ck, rows)
            return queue
        for c1 in present.tolist():
            sel = codes == c1 - 1
            queue.add_run(self._dom_names[c1 - 1] if c1 > 0 else None, ck[sel], rows[sel])
        return queue

    def _hostname_refused(self, cls: _Class, n: int) -> np.ndarray | None:
        """Which of the first ``n`` open NodeClaims the class's hostname counts refuse now, and so for the rest
        of its placement (for a class whose topology terms are all keyed on the hostname, see
        :meth:`_hostname_only`): the conditions of :meth:`_topology_cap`, read from domain lists the groups keep
        as pods are recorded, turned into rows once. None when it refuses none."""
        watched = self._count_refusals(cls)
        if not watched:
            return None
        rows = self._host_rows
        for c in self.claims[len(rows):]:
            rows[c.hostname] = c.row
        size = len(self._cm_key)
        out = None
        for g, t, owners in watched:
            if t <= 0:  # refuses every NodeClaim, whatever the counts: left to the NodeClaims' own checks
                continue
            lst = g.reached(t, owners)
            k = (id(g), t, owners)
            hit = self._refused_rows.get(k)
            if hit is None or hit[0] is not lst:
                hit = self._refused_rows[k] = [lst, 0, np.zeros(size, dtype=bool), g]
            if len(hit[2]) < size:
                hit[2] = np.concatenate([hit[2], np.zeros(size - len(hit[2]), dtype=bool)])
            mask = hit[2]
            for h in lst[hit[1]:]:
                r = rows.get(h)
                if r is not None:
                    mask[r] = True
            hit[1] = len(lst)
            out = mask[:n].copy() if out is None else out | mask[:n]
        return out

    @staticmethod
    def _count_refusals(cls: _Class) -> list[tuple[TopologyGroup, int, bool]]:
        """The class's terms as refusals of a domain by its counts alone, as :meth:`_topology_cap` judges them
        in a domain of their own key: ``(group, threshold, owners)``, a domain whose count of the group's pods
        (``owners``: of pods carrying the group's term) reaches the threshold is refused (a spread at its skew,
        an anti-affinity's pods or, for the pod's own term, its owners, another pod's term that selects the
        class)."""
        out: list[tuple[TopologyGroup, int, bool]] = []
        for g, self_sel, _ in cls.spreads:
            out.append((g, g.max_skew if self_sel else g.max_skew + 1, False))
        for g, self_sel in cls.antis:
            out.append((g, 1, False))
            if self_sel:
                out.append((g, 1, True))
        for g in cls.inverse():
            out.append((g, 1, True))
        return out

    def _domain_codes(self, key: str) -> np.ndarray:
        """Per open NodeClaim row, the code of its domain of ``key`` (-1: not known yet), kept up to date by
        :meth:`_sync_claim` once asked for."""
        codes = self._cm_dom.get(key)
        if codes is None:
            codes = np.full(len(self._cm_key), -1, dtype=np.int64)
            for c in self.claims:
                codes[c.row] = self._dom_code(c.domain(key))
            self._cm_dom[key] = codes
        return codes

    def _dom_code(self, d: str | None) -> int:
        if d is None:
            return -1
        code = self._dom_ids.get(d)
        if code is None:
            code = self._dom_ids[d] = len(self._dom_names)
            self._dom_names.append(d)
        return code

    def _sync_claim(self, claim: _Claim) -> None:
        """Copy an open NodeClaim's room, pod count and rank into the solver's matrices."""
        r = claim.row
        if self._cm_room is None or r >= len(self._cm_room):
            old = len(self._cm_key)
            size = old + max(64, 2 * old)
            room = np.zeros((size, len(claim.used)), dtype=np.int64)
            keys = np.zeros((size, 2), dtype=np.int64)
            if old:
                room[:old] = self._cm_room
                keys[:old] = self._cm_key
            self._cm_room, self._cm_key = room, keys
            for key, codes in self._cm_dom.items():
                self._cm_dom[key] = np.concatenate([codes, np.full(size - old, -1, dtype=np.int64)])
        self._cm_room[r] = claim.max_alloc - claim.used
        self._cm_key[r, 0] = len(claim.pods)
        self._cm_key[r, 1] = claim.rank
        for key, codes in self._cm_dom.items():
            codes[r] = self._dom_code(claim.domain(key))

    def _place_in_flight(self, cls: _Class, queue: _Buckets, dead: set[int]) -> bool:
        """Place pods of the class on the NodeClaims of ``queue`` (see :meth:`_in_flight`), the first that takes
        a pod winning it. False when none takes the class's next pod.

        Pods of a class without topology terms are placed in bulk: a NodeClaim's acceptance can only shrink as it
        takes them, so the first NodeClaim in order keeps the pods until it holds one more than the next
        NodeClaim that accepts them. Pods with topology terms (whose acceptance follows the counts) go one at a
        time; a NodeClaim refused for anything but the counts (requirements, taints, ports, room) never takes a
        pod of the class, and neither does one refused by hostname terms alone (counts on a hostname only grow)."""
        claims = self.claims
        placed = False
        if not cls.topology_bound() or self._counted_only(cls):
            while cls.pods:
                entry, _ = queue.pop()
                if entry is None:
                    break
                i = entry[2]
                c = claims[i]
                limit = len(cls.pods)
                while (nxt := queue.peek()) is not None:  # up to one more than the next NodeClaim holds, if that one
                    n_next, _, j = nxt                    # takes such a pod at all
                    if self._fit_claim(cls, claims[j], 1)[0] > 0:
                        limit = min(limit, n_next - len(c.pods) + 1)
                        break
                    queue.pop()  # it never will, for this class
                n, new_req, new_idx, _ = self._fit_claim(cls, c, limit)
                if n <= 0:
                    continue
                self._commit(cls, c, n, new_req, new_idx)
                placed = True
                queue.push((len(c.pods), c.rank, i))
            return placed
        permanent = self._hostname_only(cls)
        # when every topology term of the class is keyed on one label (the zone), a NodeClaim pinned to a domain
        # the counts refuse tells the same of every NodeClaim pinned there, for this pod: the queue passes over
        # that domain's NodeClaims without looking at them
        while cls.pods:
            skipped = []
            refused: set[str] = set()
            took = False
            while True:
                entry, d = queue.pop(refused)
                if entry is None:
                    break
                i = entry[2]
                if i in dead:
                    continue
                c = claims[i]
                n, new_req, new_idx, why = self._fit_claim(cls, c, 1)
                if n > 0:
                    self._commit(cls, c, n, new_req, new_idx)
                    queue.push((len(c.pods), c.rank, i))
                    took = placed = True
                    break
                if why == "would violate topology constraints" and not permanent:
                    skipped.append((entry, d))  # the counts may allow it for a later pod
                    if d is not None:
                        refused.add(d)
                else:
                    dead.add(i)
            for e, d in skipped:
                queue.push(e, d, known=True)
            if not took:
                break
        return placed

    def _judging_groups(self, cls: _Class) -> list[TopologyGroup]:
        """The topology groups whose counts can refuse a pod of the class, or narrow where it goes: its own
        spreads and pod (anti-)affinity terms, the anti-affinity terms of others that select it, and (with
        ZonePinning) the spreads that count it. Without ZonePinning a spread that only counts the class never
        decides where it goes. Kept per class until it is relaxed (a relaxed class has a new representative)."""
        hit = self._judging.get(id(cls))
        if hit is not None and hit[0] is cls.rep:
            return hit[1]
        groups = [g for g, *_ in cls.spreads] + [g for g, _ in cls.affinities] + [g for g, _ in cls.antis]
        groups += cls.inverse()
        if self.pin_counted:
            groups += [g for g in cls.selecting() if g.kind == SPREAD]
        self._judging[id(cls)] = (cls.rep, groups, cls)
        return groups

    def _counted_only(self, cls: _Class) -> bool:
        """Whether topology only counts the class's pods, never judges them: they are placed in bulk, as pods
        without topology (acceptance does not follow the counts, and recording n pods at once counts as n
        pods recorded one by one)."""
        return not self._judging_groups(cls)

    def _single_key(self, cls: _Class) -> str | None:
        """The one label every topology term that can refuse the class is keyed on, if it is not the hostname."""
        keys = {g.key for g in self._judging_groups(cls)}
        if len(keys) == 1 and LABEL_HOSTNAME not in keys:
            return next(iter(keys))
        return None

    def _hostname_only(self, cls: _Class) -> bool:
        """Whether every topology term that can refuse the class is keyed on the hostname (and none is pod
        affinity): a refusal is then for good, as counts on a hostname only grow."""
        return all(g.key == LABEL_HOSTNAME for g in self._judging_groups(cls)) and not cls.affinities

    # --- capacity of one node or claim for a class -------------------------------------
    def _node_volumes(self, node: _Node) -> dict[str, set]:
        """The volumes on an existing node, by CSI driver: its bound pods' and those this solve placed there."""
        used = self._volumes.get(node.row)
        if used is None:
            used = self._volumes[node.row] = {}
            for p in node.node.bound_pods:
                for driver, ids in (p.volume_usage or {}).items():
                    used.setdefault(driver, set()).update(ids)
        return used

    def _volume_cap(self, cls: _Class, node: _Node, k: int) -> int:
        """How many of the class's next ``k`` pods the node's volume limits (its CSINode) take, in order: none
        once a driver would be over its limit with the node's volumes and theirs (upstream's ExceedsLimits)."""
        limits = node.node.volume_limits or {}
        acc = {d: set(ids) for d, ids in self._node_volumes(node).items()}
        if exceeds_limits(acc, limits):
            return 0
        for i, p in enumerate(cls.pods[:k]):
            for driver, ids in (p.volume_usage or {}).items():
                acc.setdefault(driver, set()).update(ids)
            if exceeds_limits(acc, limits):
                return i
        return k

    def _candidate_rows(self, cls: _Class) -> tuple[list[int], list[int] | None] | None:
        """For a solve over a preparation, the rows of the prepared nodes (in order) that may take a pod of the
        class at all: nodes :meth:`_static_refusal` does not refuse, that no hostname term of the class refuses
        (:meth:`_host_refused`), with room for one pod in the preparation (a solve only adds pods to a node, so
        a node without room there never has room in a solve). Remembered
        by the preparation for the classes it remembers: their constraints are the same in every solve over it.
        None for other classes (relaxed, with volumes, or in a solve of its own): their nodes are asked one by
        one, those with room. With the rows, how many pods of the class each node's free resources held in the
        preparation (None: the class requests nothing)."""
        key = cls.memo_key
        if key is None or self._prep is None:
            return None
        prep = self._prep
        memo = prep.static_memo
        hit = memo.get(key)
        if hit is None:
            # the nodes' shares of the answer: which take moved pods, and their taints (few kinds), then the labels
            hit = prep.takes_moving.copy() if cls.rep.moving else np.ones(len(prep.takes_moving), dtype=bool)
            for taints, rows in prep.taint_rows:
                if tolerates_all(cls.tolerations, taints) is not None:
                    hit[rows] = False
            refused = self._host_refused(cls) if cls.topology_bound() else ()
            if refused:
                hit[refused] = False
            nz = cls.nz_list
            quot = None
            if nz:
                base = prep.base
                quot = ((base._alloc_mat[:, nz] - base._used_mat[:, nz]) // cls.request_vec[nz]).min(axis=1)
                hit &= quot > 0
            if len(cls.reqs):
                nodes = prep.base.nodes
                for i in np.flatnonzero(hit).tolist():
                    if not cls.reqs.satisfied_by_labels(nodes[i].labels):
                        hit[i] = False
            rows = np.flatnonzero(hit)
            hit = memo[key] = (rows.tolist(), None if quot is None else quot[rows].tolist())
        return hit

    def _host_refused(self, cls: _Class) -> list[int]:
        """The rows of the preparation's nodes that a term of the class keyed on the hostname refuses at the
        preparation's counts: pods (or, for the pod's own anti-affinity, owners) of an anti-affinity term there,
        owners of another pod's anti-affinity term that selects the class, or a hostname spread at its skew.
        Each of these refusals reads only the counts at the node's own hostname, and a solve over the
        preparation only adds to those (it takes away only what its excluded nodes held, and their rows): such
        a node refuses the class in every solve over it, so its row need not be asked (a required pod
        anti-affinity on the hostname, one pod a node, would otherwise ask every node of the cluster)."""
        out: list[int] = []
        for g, t, owners in self._count_refusals(cls):
            if g.key == LABEL_HOSTNAME and t > 0:
                out += self._prep.hosts_reaching(g.ident, t, owners)
        return out

    @staticmethod
    def _static_refusal(cls: _Class, node: _Node) -> bool:
        """Whether the node refuses the class whatever is placed there: a node that takes no moved pods, a taint
        not tolerated, requirements its labels miss (a node has every label it will ever have)."""
        if cls.rep.moving and not node.node.takes_moving:
            return True
        if tolerates_all(cls.tolerations, node.node.taints) is not None:
            return True
        if len(cls.reqs) and not cls.reqs.satisfied_by_labels(node.labels):
            return True
        return cls.volumes is not None and not cls.volumes.satisfied_by_labels(node.labels)

    def _cap_node(self, cls: _Class, node: _Node, want: int, checked: bool = False,
                  quota: int | None = None) -> tuple[int, None]:
        """How many of the class's next ``want`` pods the existing node takes (``checked``: the node passed
        :meth:`_static_refusal` already; ``quota``: how many its free resources hold, if known)."""
        if not checked and self._static_refusal(cls, node):
            return 0, None
        if cls.rep.host_ports and _ports_conflict(cls.rep.host_ports, self._ports.get(node.row, node.node.host_ports)):
            return 0, None
        if quota is not None:
            k = min(want, quota)
        else:
            avail = node.alloc - self._used_mat[node.row]
            k = want
            for j in cls.nz_list:
                q = int(avail[j]) // int(cls.request_vec[j])
                if q < k:
                    k = q
        if k <= 0:
            return 0, None
        if cls.rep.host_ports:
            k = 1
        if node.node.volume_limits:
            k = self._volume_cap(cls, node, k)
            if k <= 0:
                return 0, None
        if cls.topology_bound():
            known = self._known_topology_cap(cls, node, k, None)
            k = self._topology_cap(cls, node, k, None)[0] if known is None else known
            if k <= 0:
                return 0, None
        elif self._blocked_by_inverse(cls, node):
            return 0, None
        return k, None


    def _fit_claim(self, cls: _Class, claim: _Claim, want: int) -> tuple[int, Requirements | None, np.ndarray | None, str | None]:
        ts = claim.ts
        tpl = ts.tpl
        if tolerates_all(cls.tolerations, tpl.taints) is not None:
            t = tolerates_all(cls.tolerations, tpl.taints)
            return 0, None, None, f"did not tolerate taint {t}"
        if cls.rep.host_ports and _ports_conflict(cls.rep.host_ports, claim.host_ports):
            return 0, None, None, "host port conflict"
        reqs = cls.reqs
        if len(reqs):
            hr = reqs._reqs.get(LABEL_HOSTNAME)
            if hr is not None and not hr.has(claim.hostname):
                # a new NodeClaim's hostname is not known until it launches: no pod can ask for it
                return 0, None, None, f"incompatible requirements, {LABEL_HOSTNAME} {hr} cannot match a new node"
            why = claim.req.compatible(reqs, allow_undefined=tpl.well_known_labels)
            if why is not None:
                return 0, None, None, f"incompatible requirements, {why}"
            new_req = claim.req.union(reqs)
        else:
            new_req = claim.req
        if cls.volumes is None:
            return self._fit_claim_with(cls, claim, want, new_req)
        # the volumes' alternatives, in order: the first the claim can take the pods with wins
        why = None
        for alt in cls.volumes.alternatives:
            if len(alt):
                hr = alt._reqs.get(LABEL_HOSTNAME)
                bad = None if hr is None or hr.has(claim.hostname) else f"{LABEL_HOSTNAME} {hr} cannot match a new node"
                bad = bad or new_req.compatible(alt, allow_undefined=tpl.well_known_labels)
                if bad is not None:
                    why = f"incompatible volume requirements, {bad}"
                    continue
                fit = self._fit_claim_with(cls, claim, want, new_req.union(alt))
            else:
                fit = self._fit_claim_with(cls, claim, want, new_req)
            if fit[0] > 0:
                return fit
            why = fit[3]
        return 0, None, None, why

    def _fit_claim_with(self, cls: _Class, claim: _Claim, want: int,
                        new_req: Requirements) -> tuple[int, Requirements | None, np.ndarray | None, str | None]:
        ts = claim.ts
        k = want
        if cls.rep.host_ports:
            k = 1
        if cls.topology_bound():
            # ZonePinning may pin a NodeClaim for a spread that only counts the class: asked as a whole then
            known = None if self.pin_counted else self._known_topology_cap(cls, claim, k, new_req)
            if known is None:
                k, narrowed = self._topology_cap(cls, claim, k, new_req)
            else:
                k, narrowed = known, None
            if k <= 0:
                return 0, None, None, "would violate topology constraints"
            if narrowed is not None:
                new_req = narrowed
        idx = claim.idx
        if new_req is not claim.req:
            mask = ts.label_mask(new_req) & ts.offering_mask(new_req)
            idx = idx[mask[idx]]
            if not len(idx):
                return 0, None, None, "no instance type satisfied the requirements"
        if cls.rep.host_ports:
            ports_ok = ts.port_mask(cls.rep.host_ports)
            if ports_ok is not None:
                idx = idx[ports_ok[idx]]
                if not len(idx):
                    return 0, None, None, "host port conflict"
        # how many pods of this size each remaining type can still take
        nz = cls.nz
        per_type = None
        if len(nz) and k == 1:
            # one pod (a class placed one at a time): the types with room for it, compared rather than divided;
            # per_type is read below only for more than one pod
            per_type = (ts.columns(cls.nz_list)[idx] >= claim.used[nz] + cls.request_vec[nz]).all(axis=1)
            if not per_type.any():
                return 0, None, None, "no instance type has enough resources"
            idx_k = idx[per_type]
        elif len(nz):
            avail = ts.columns(cls.nz_list)[idx] - claim.used[nz]
            per_type = (avail // cls.request_vec[nz]).min(axis=1)
            best = int(per_type.max()) if len(per_type) else 0
            if best <= 0:
                return 0, None, None, "no instance type has enough resources"
            k = min(k, best)
            idx_k = idx[per_type >= k]
        else:
            idx_k = idx
        if _has_min_values(new_req):
            mv = _min_values_short(new_req, ts, idx_k)
            if mv is not None and per_type is not None:
                # fewer pods of the class may leave enough instance types: the rest go elsewhere
                while k > 1 and mv is not None:
                    k -= 1
                    idx_k = idx[per_type >= k]
                    mv = _min_values_short(new_req, ts, idx_k)
            if mv is not None:
                # minValuesPolicy BestEffort relaxes minValues only when a NodeClaim is opened; a NodeClaim already
                # holding pods keeps the minValues it was opened with, as upstream's in-flight check is strict
                if not self.min_values_best_effort or claim.pods:
                    return 0, None, None, mv
                new_req = _relax_min_values(new_req, ts, idx_k)
        rm = self._reservations()
        if rm is not None:
            def reserve(ix: np.ndarray):
                return offerings_to_reserve(rm, claim.hostname, claim.reserved, new_req, ts.reserved, ix,
                                            self.reserved_strict)
            ofs = reserve(idx_k)
            if self.reserved_strict and k > 1 and per_type is not None and not (isinstance(ofs, set) and ofs):
                # upstream adds pods one at a time: if the first would hold a reservation (or be refused), only as
                # many pods as keep one held go together
                first = reserve(idx[per_type >= 1])
                if not isinstance(first, set) or first:
                    while k > 1 and not (isinstance(ofs, set) and ofs):
                        k -= 1
                        idx_k = idx[per_type >= k]
                        ofs = reserve(idx_k)
            if not isinstance(ofs, set):
                return 0, None, None, ofs.reason
            claim.to_reserve = ofs
        return k, new_req, idx_k, None

    def _reservations(self) -> ReservationManager | None:
        """This solve's reservation manager; None when no NodePool offers a reserved offering."""
        rm = self._rm
        if rm is None:
            for ts in self.tstates:
                if not hasattr(ts, "reserved"):
                    ts.reserved = reserved_offerings(ts.types)
            rm = self._rm = ReservationManager(o for ts in self.tstates for ofs in ts.reserved for o in ofs)
        return rm if rm.capacity else None

    def _commit(self, cls: _Class, claim: _Claim, n: int, new_req: Requirements, new_idx: np.ndarray) -> None:
        taken, cls.pods = cls.pods[:n], cls.pods[n:]
        if claim.pods:  # it holds more pods now: first among those that hold as many (a stable sort by count)
            self._promotions += 1
            claim.rank = -self._promotions
        claim.pods.extend(taken)
        claim.used = claim.used + cls.request_vec * n
        if new_req is not claim.req:
            old_req = claim.req
            claim.req = new_req
            if claim.placed:
                self._catch_up(claim, old_req)
        if len(new_idx) != len(claim.idx):
            claim.idx = new_idx
            claim._refresh_max()
        if claim.row >= 0:
            self._sync_claim(claim)
        if cls.rep.host_ports:
            claim.host_ports.update(cls.rep.host_ports)
        self._record(cls, claim, n)
        claim.placed.append((cls, n))
        if claim.to_reserve is not None and self._rm is not None:
            self._rm.hold_only(claim.hostname, claim.to_reserve)
            claim.reserved, claim.to_reserve = claim.to_reserve, None

    def _catch_up(self, claim: _Claim, old_req: Requirements) -> None:
        """A claim's domain for some key just became known: count the pods it already holds there.

        Upstream only counts a pod in a domain once its NodeClaim is known to be in it, and
        never revisits; counting them when the domain is fixed keeps later spread decisions
        honest (kube-scheduler will count them when it binds).
        """
        keys = self._group_keys()
        self._topo_version += 1
        for key in keys:
            r_old = old_req._reqs.get(key)
            if r_old is not None and not r_old.complement and len(r_old.values) == 1:
                continue
            d = claim.domain(key)
            if d is None:
                continue
            for cls, n in claim.placed:
                for g in cls.selecting():
                    if g.key == key and g.kind != ANTI_AFFINITY:
                        g.record(d, n)

    def _group_keys(self) -> set[str]:
        keys = self._keys_cache
        if keys is None or self._keys_seen != len(self.topology.groups):
            keys = self.topology.keys() - {LABEL_HOSTNAME}
            self._keys_cache = keys
            self._keys_seen = len(self.topology.groups)
        return keys

    def _new_claim(self, cls: _Class, want: int | None = None) -> tuple[bool, str | None]:
        reasons = []
        for ts in self.tstates:
            tpl = ts.tpl
            idx = ts.all_idx
            rem = self.remaining.get(tpl.nodepool)
            if rem is not None and len(idx):
                within = (ts.capacity <= rem).all(axis=1)
                before, idx = idx, idx[within[idx]]
                if not len(idx):
                    reasons.append(f'incompatible with nodepool "{tpl.nodepool}", all available instance types exceed '
                                   f'limits for nodepool ({self._limit_hit(ts, before, rem)})')
                    continue
            if self.remaining_nodes.get(tpl.nodepool, 1) <= 0:
                reasons.append(f'incompatible with nodepool "{tpl.nodepool}", node limits have been exhausted for nodepool')
                continue
            largest = None
            if rem is None:  # the same types for every NodeClaim of the NodePool
                masked, idx, largest = ts.launchable()
            else:
                masked = idx[(ts.label_mask(tpl.requirements) & ts.offering_mask(tpl.requirements))[idx]]
                idx = masked[ts.fits_daemons[masked]]
            if not len(masked):
                reasons.append(f'incompatible with nodepool "{tpl.nodepool}", no instance types are available')
                continue
            if not len(idx):
                daemon = {k: v for k, v in tpl.daemon_overhead.items() if v}
                reasons.append(f'incompatible with nodepool "{tpl.nodepool}", daemonset overhead={_fmt_res(daemon)}, '
                               f"no instance type has room for the daemonsets")
                continue
            self._seq += 1
            claim = _Claim(ts, f"{self.hostname_prefix}-{self._seq:05d}", tpl.requirements, idx, self._seq, largest)
            n, new_req, new_idx, why = self._fit_claim(cls, claim, want or len(cls.pods))
            cls.reserved_wait = bool(why and why.startswith(RESERVED_OFFERING_ERROR))
            if cls.reserved_wait:  # as upstream: no fallback to a lighter NodePool while a reservation is held
                reasons.append(f'incompatible with nodepool "{tpl.nodepool}", {why}')
                return False, "; ".join(reasons)
            if n <= 0:
                reasons.append(self._incompatible_message(cls, ts, why))
                continue
            self._commit(cls, claim, n, new_req, new_idx)
            claim.row = len(self.claims)
            self.claims.append(claim)
            self._sync_claim(claim)
            if rem is not None:
                self.remaining[tpl.nodepool] = rem - ts.capacity[claim.idx].max(axis=0)
            if tpl.nodepool in self.remaining_nodes:
                self.remaining_nodes[tpl.nodepool] -= 1
            return True, None
        if not self.tstates:
            return False, "no nodepools found"
        return False, "; ".join(reasons)

    def _limit_hit(self, ts: _TemplateState, idx: np.ndarray, rem: np.ndarray) -> str:
        """The NodePool limits that no instance type fits within, with what is left of each."""
        over = (ts.capacity[idx] > rem).all(axis=0)
        hit = [f"{k} remaining {res.format_units(k, max(int(rem[j]), 0))}" for j, k in enumerate(self.rnames) if over[j]]
        return ", ".join(hit) or "no single limit excludes every type"

    def _incompatible_message(self, cls: _Class, ts: _TemplateState, why: str | None) -> str:
        tpl = ts.tpl
        msg = f'incompatible with nodepool "{tpl.nodepool}"'
        if why and why.startswith(("did not tolerate", "incompatible volume requirements")):
            return f"{msg}, {why}"
        if why and why.startswith("incompatible requirements"):
            return f"{msg}, {why[len('incompatible requirements, '):]}"
        daemon = {k: v for k, v in tpl.daemon_overhead.items() if v}
        req = res.add(cls.rep.requests, daemon)
        return (
            f"{msg}, daemonset overhead={_fmt_res(daemon)}, {why or 'no instance type fits'}"
            f" (requests {_fmt_res(req)}, requirements {cls.reqs or '<none>'})"
        )

    # --- topology -------------------------------------------------------------------
    def _possible(self, target, key: str, req: Requirements | None) -> list[str]:
        """Domains of ``key`` the node/claim could still be in, sorted."""
        d = target.domain(key) if req is None else _domain_of(target, key, req)
        if d is not None:
            return [d]
        r = (req or target.req).get(key)
        return sorted(x for x in self.universe(key) if r.has(x))

    def _eligible_domains(self, key: str, cls: _Class, policy: tuple[str, str]) -> list[str]:
        """The domains a spread's minimum is taken over, per its node inclusion policies.

        nodeAffinityPolicy Honor (the default) keeps only domains of nodes, and of what
        NodePools can launch, that match the pod's required node selector and affinity;
        nodeTaintsPolicy Honor also drops those whose taints the pod does not tolerate.
        """
        own = cls._eligible.get((key, policy))  # the class's constraints do not change until it is relaxed
        if own is not None:
            return own
        affinity_policy, taints_policy = policy
        strict = cls.strict if affinity_policy == "Honor" else Requirements()
        tolerations = cls.tolerations if taints_policy == "Honor" else None
        ck = (key, strict.signature(), affinity_policy, tolerations)
        hit = self._eligible_cache.get(ck)
        if hit is not None:
            cls._eligible[(key, policy)] = hit
            return hit
        src = self._prep.base if self._prep is not None else self
        parts = src._eligible_parts_cache.get(ck) if self._prep is not None else None
        if parts is None:
            nodes, templates = src._eligible_parts(key, strict, tolerations)
            # with every domain, sorted once: a solve leaving nodes out drops only the domains they emptied
            parts = (nodes, templates, sorted(set(templates).union(nodes)))
            if self._prep is not None:
                src._eligible_parts_cache[ck] = parts
        nodes, templates, every = parts
        result = every
        if self._gone:
            gone: dict[str, int] = {}
            for n in self._gone:
                d = n.domain(key)
                if d is not None and self._eligible_node(n, strict, tolerations):
                    gone[d] = gone.get(d, 0) + 1
            # the nodes left out are prepared nodes, so their domains are among the nodes' counted ones
            emptied = {d for d, c in gone.items() if nodes[d] <= c and d not in templates}
            if emptied:
                result = [d for d in every if d not in emptied]
        self._eligible_cache[ck] = cls._eligible[(key, policy)] = result
        return result

    @staticmethod
    def _eligible_node(n: "_Node", strict: Requirements, tolerations) -> bool:
        if tolerations is not None and tolerates_all(tolerations, [t for t in n.node.taints if t.effect != "PreferNoSchedule"]) is not None:
            return False
        if len(strict) and not strict.satisfied_by_labels({**n.node.labels, LABEL_HOSTNAME: n.hostname}):
            return False
        return True

    def _eligible_parts(self, key: str, strict: Requirements, tolerations) -> tuple[Counter, set[str]]:
        nodes: Counter = Counter()
        for n in self.nodes:
            v = n.domain(key)
            if v is None or not self._eligible_node(n, strict, tolerations):
                continue
            nodes[v] += 1
        out: set[str] = set()
        for ts in self.tstates:
            tpl = ts.tpl
            if tolerations is not None and tolerates_all(tolerations, [t for t in tpl.taints if t.effect != "PreferNoSchedule"]) is not None:
                continue
            if len(strict) and tpl.requirements.compatible(strict, allow_undefined=tpl.well_known_labels) is not None:
                continue
            both = tpl.requirements.union(strict) if len(strict) else tpl.requirements
            mask = ts.label_mask(both) & ts.offering_mask(both) & ts.fits_daemons
            r = both.get(key)
            types = [ts.types[i] for i in np.flatnonzero(mask)]
            if key == LABEL_ZONE:
                cr = both.get(LABEL_CAPACITY_TYPE)
                out.update(o.zone for it in types for o in it.offerings if o.available and r.has(o.zone) and cr.has(o.capacity_type))
            elif key == LABEL_CAPACITY_TYPE:
                zr = both.get(LABEL_ZONE)
                out.update(o.capacity_type for it in types for o in it.offerings if o.available and r.has(o.capacity_type) and zr.has(o.zone))
            elif key in ts.offering_keys:
                out.update(v for it in types for v in _label_values(it, key) if r.has(v))
            elif key in ts.label_keys:
                out.update(it.labels[key] for it in types if key in it.labels and r.has(it.labels[key]))
            elif not r.complement:
                out.update(r.values)
        return nodes, out

    def _topology_cap(self, cls: _Class, target, k: int, req: Requirements | None,
                      hostname: bool | None = None) -> tuple[int, Requirements | None]:
        """How many of the class the target can take under topology rules, and the narrowed requirements.
        ``hostname`` True or False: only the terms keyed (or not) on the hostname (see _known_topology_cap)."""
        narrowed = req
        pod_reqs = cls.reqs
        for g, self_sel, policy in cls.spreads:
            key = g.key
            if hostname is not None and (key == LABEL_HOSTNAME) is not hostname:
                continue
            if key == LABEL_HOSTNAME:
                count = g.counts.get(target.hostname, 0)
                if self_sel:
                    k = min(k, g.max_skew - count)
                elif count > g.max_skew:
                    k = 0
                if k <= 0:
                    return 0, None
                continue
            eligible = self._eligible_domains(key, cls, policy)
            pr = pod_reqs.get(key)
            counts = g.counts
            if g.min_domains is not None and len(eligible) < g.min_domains:
                gmin = 0
            else:
                gmin = min((counts.get(d, 0) for d in eligible), default=0)
            options = self._possible(target, key, narrowed)
            best = None
            for d in options:
                if pr is not None and not pr.has(d):
                    continue
                c = counts.get(d, 0) + (1 if self_sel else 0)
                if c - gmin <= g.max_skew and (best is None or c < best[0]):
                    best = (c, d)
            if best is None:
                return 0, None
            d = best[1]
            if self_sel:
                others = min((counts.get(x, 0) for x in eligible if x != d), default=None)
                if others is not None:
                    if g.min_domains is not None and len(eligible) < g.min_domains:
                        others = 0
                    k = min(k, g.max_skew + others - counts.get(d, 0))
                    if k <= 0:
                        return 0, None
            if len(options) > 1:
                narrowed = _pin(narrowed if narrowed is not None else target.req, key, d)
        for g, self_sel in cls.affinities:
            key = g.key
            if hostname is not None and (key == LABEL_HOSTNAME) is not hostname:
                continue
            options = self._possible(target, key, narrowed)
            pr = pod_reqs.get(key)
            with_pods = [d for d in options if g.counts.get(d, 0) > 0 and pr.has(d)]
            if not with_pods:
                bootstrap = self_sel and not any(c > 0 and pr.has(d) for d, c in g.counts.items())
                if not bootstrap:
                    return 0, None
                with_pods = [d for d in options if pr.has(d)]
                if not with_pods:
                    return 0, None
            if len(options) > 1 and key != LABEL_HOSTNAME:
                narrowed = _pin(narrowed if narrowed is not None else target.req, key, with_pods[0])
        for g, self_sel in cls.antis:
            key = g.key
            if hostname is not None and (key == LABEL_HOSTNAME) is not hostname:
                continue
            options = self._possible(target, key, narrowed)
            empty = [d for d in options if g.counts.get(d, 0) == 0 and g.owners.get(d, 0) == 0] if self_sel else [
                d for d in options if g.counts.get(d, 0) == 0
            ]
            if not empty:
                return 0, None
            if self_sel:
                k = min(k, 1)
            if len(options) > 1 and key != LABEL_HOSTNAME:
                narrowed = _pin(narrowed if narrowed is not None else target.req, key, empty[0])
        # ZonePinning (a karpy feature gate): pods that other pods' zone spreads count must land in a
        # known domain, or the spread would be judged on counts that miss them: pin the claim to the
        # domain where they keep that spread most even. Upstream leaves the domain open (and counts
        # such pods only once it is known).
        for g in (cls.selecting() if self.pin_counted and hostname is None else ()):
            if g.kind != SPREAD or g.key == LABEL_HOSTNAME:
                continue
            options = self._possible(target, g.key, narrowed)
            if len(options) > 1:
                d = min(options, key=lambda x: (g.counts.get(x, 0), x))
                narrowed = _pin(narrowed if narrowed is not None else target.req, g.key, d)
        for g in cls.inverse():
            key = g.key
            if hostname is not None and (key == LABEL_HOSTNAME) is not hostname:
                continue
            options = self._possible(target, key, narrowed)
            free = [d for d in options if g.owners.get(d, 0) == 0]
            if not free:
                return 0, None
            if len(free) < len(options):
                base = narrowed if narrowed is not None else target.req
                narrowed = base.copy()
                narrowed.add(Requirement.new(key, NOT_IN, [d for d in options if d not in free]))
        if req is None:
            return k, None
        return k, narrowed

    def _known_topology_cap(self, cls: _Class, target, k: int, req: Requirements | None) -> int | None:
        """:meth:`_topology_cap`'s first value for an existing node (``req`` None) or a NodeClaim with the
        requirements ``req`` whose domains of the class's topology keys are all known; None when one is not
        (then terms may narrow where it goes: asked of _topology_cap as a whole). With every domain known, each
        term caps the pods the target takes, or refuses it, from the counts in its domain of the term's key
        alone: the terms not keyed on the hostname answer the same for every node and NodeClaim in the same
        domains, so their cap is asked once per domains and remembered until the next pod is recorded; the
        hostname terms are read per target."""
        plan = self._node_caps.get(id(cls))
        if plan is None or plan[0] is not cls.rep:
            groups = [g for g, *_ in cls.spreads] + [g for g, _ in cls.affinities] + [g for g, _ in cls.antis]
            groups += cls.inverse()
            keys = tuple(sorted({g.key for g in groups} - {LABEL_HOSTNAME}))
            # the hostname terms, each read from its group's counts at the node's hostname (see below); None: a
            # pod affinity on the hostname, asked of _topology_cap
            on_host: list | None = []
            for g, self_sel, _ in cls.spreads:
                if g.key == LABEL_HOSTNAME:
                    on_host.append((_HOST_SPREAD_SELF if self_sel else _HOST_SPREAD, g))
            for g, self_sel in cls.antis:
                if g.key == LABEL_HOSTNAME:
                    on_host.append((_HOST_ANTI_SELF if self_sel else _HOST_ANTI, g))
            for g in cls.inverse():
                if g.key == LABEL_HOSTNAME:
                    on_host.append((_HOST_INVERSE, g))
            if any(g.key == LABEL_HOSTNAME for g, _ in cls.affinities):
                on_host = None
            # the other terms, each read from its group's counts in the target's domain of its key (the
            # position of the key in ``keys``); None: a pod affinity, asked of _topology_cap
            others: list | None = []
            for g, self_sel, policy in cls.spreads:
                if g.key != LABEL_HOSTNAME:
                    others.append((_SPREAD, g, keys.index(g.key), self_sel, self._eligible_domains(g.key, cls, policy),
                                   cls.reqs.get(g.key)))
            for g, self_sel in cls.antis:
                if g.key != LABEL_HOSTNAME:
                    others.append((_HOST_ANTI_SELF if self_sel else _HOST_ANTI, g, keys.index(g.key), None, None, None))
            for g in cls.inverse():
                if g.key != LABEL_HOSTNAME:
                    others.append((_HOST_INVERSE, g, keys.index(g.key), None, None, None))
            if any(g.key != LABEL_HOSTNAME for g, _ in cls.affinities):
                others = None
            plan = [cls.rep, keys, on_host, -1, {}, cls, others]
            self._node_caps[id(cls)] = plan
        _, keys, on_host, version, caps, _, others = plan
        if req is None:
            labels = target.node.labels
            if len(keys) == 1:
                d = labels.get(keys[0])
                if d is None:
                    return None
                doms = (d,)
            else:
                doms = tuple(labels.get(key) for key in keys)
                if None in doms:
                    return None
        else:
            known = []
            for key in keys:
                r = req._reqs.get(key)
                if r is None or r.complement or len(r.values) != 1:
                    return None
                known.append(next(iter(r.values)))
            doms = tuple(known)
        if keys:
            if version != self._topo_version:
                caps = plan[4] = {}
                plan[3] = self._topo_version
            cap = caps.get(doms)
            if cap is None:
                if others is None:
                    cap = self._topology_cap(cls, target, _HUGE, req, hostname=False)[0]
                else:
                    cap = self._domains_cap(others, doms)
                caps[doms] = cap
            if cap <= 0:
                return 0
            k = min(k, cap)
        if on_host is None:
            return self._topology_cap(cls, target, k, req, hostname=True)[0]
        if on_host:
            # as _topology_cap asks them, of the target's own hostname
            h = target.hostname
            for kind, g in on_host:
                if kind == _HOST_SPREAD_SELF:
                    k = min(k, g.max_skew - g.counts.get(h, 0))
                elif kind == _HOST_SPREAD:
                    if g.counts.get(h, 0) > g.max_skew:
                        return 0
                elif kind == _HOST_ANTI_SELF:
                    if g.counts.get(h, 0) or g.owners.get(h, 0):
                        return 0
                    k = min(k, 1)
                elif kind == _HOST_ANTI:
                    if g.counts.get(h, 0):
                        return 0
                elif g.owners.get(h, 0):  # _HOST_INVERSE
                    return 0
        return k

    @staticmethod
    def _domains_cap(terms: list, doms: tuple) -> int:
        """The cap of the topology terms not keyed on the hostname (no pod affinity among them) for a target in
        the domains ``doms``, as _topology_cap asks each of a target whose only domain of the key is known;
        0: refused."""
        k = _HUGE
        for kind, g, i, self_sel, eligible, pr in terms:
            d = doms[i]
            if kind == _SPREAD:
                if not pr.has(d):
                    return 0
                counts = g.counts
                # the fewest pods in an eligible domain, and in one other than d, in one pass
                gmin = low = None
                for x in eligible:
                    c = counts.get(x, 0)
                    if gmin is None or c < gmin:
                        gmin = c
                    if x != d and (low is None or c < low):
                        low = c
                few = g.min_domains is not None and len(eligible) < g.min_domains
                if few or gmin is None:
                    gmin = 0
                here = counts.get(d, 0)
                if here + (1 if self_sel else 0) - gmin > g.max_skew:
                    return 0
                if self_sel and low is not None:
                    k = min(k, g.max_skew + (0 if few else low) - here)
                    if k <= 0:
                        return 0
            elif kind == _HOST_ANTI_SELF:
                if g.counts.get(d, 0) or g.owners.get(d, 0):
                    return 0
                k = min(k, 1)
            elif kind == _HOST_ANTI:
                if g.counts.get(d, 0):
                    return 0
            elif g.owners.get(d, 0):  # _HOST_INVERSE
                return 0
        return k

    def _blocked_by_inverse(self, cls: _Class, node: _Node) -> bool:
        for g in cls.inverse():
            d = node.domain(g.key)
            if d is not None and g.owners.get(d, 0) > 0:
                return True
        return False

    def _record(self, cls: _Class, target, n: int) -> None:
        self._topo_version += 1
        for g in cls.selecting():
            d = target.domain(g.key)
            if d is not None:
                g.record(d, n)
            elif g.kind == ANTI_AFFINITY:
                for x in self._possible(target, g.key, None):
                    g.record(x, n)
        for g in cls.required_antis:
            d = target.domain(g.key)
            if d is not None:
                g.record_owner(d, n)
            else:
                for x in self._possible(target, g.key, None):
                    g.record_owner(x, n)

    # --- cost refinement ----------------------------------------------------------------
    REFINE_UTILIZATION = 0.8  # claims fuller than this on their cheapest type are left alone
    REFINE_CAPS = 6  # price caps tried per claim

    def _refine(self) -> None:
        """Split under-used NodeClaims into cheaper smaller ones where that costs less.

        Growing a NodeClaim until its largest type is full, as upstream does, leaves the
        last claim of a batch partly empty on a large type; upstream pays for it until
        consolidation replaces it. Here, a claim whose pods carry no topology or host-port
        constraints (and are counted by no topology group) and that uses under 80% of its
        cheapest type is re-packed on its own with the instance types capped below a few
        price levels; the cheapest packing that beats the single claim replaces it.
        """
        out: list[_Claim] = []
        for claim in self.claims:
            better = self._split(claim)
            if better is None:
                out.append(claim)
            else:
                out.extend(better)
        self.claims = out

    def _split(self, claim: _Claim) -> list[_Claim] | None:
        if len(claim.pods) < 2:
            return None
        for cls, _ in claim.placed:
            if cls.has_topology or cls.rep.host_ports or cls.selecting():
                return None
        ts = claim.ts
        prices = ts.prices(claim.req)
        idx = claim.idx
        cheapest = int(idx[np.argmin(prices[idx])])
        current = float(prices[cheapest])
        if not np.isfinite(current):
            return None
        alloc = ts.alloc[cheapest]
        used = claim.used
        util = max(float(used[j]) / float(alloc[j]) for j in (self.rindex[res.CPU], self.rindex[res.MEMORY]) if alloc[j] > 0)
        if util > self.REFINE_UTILIZATION:
            return None
        allowed = prices[ts.all_idx]
        caps = sorted({float(x) for x in allowed if np.isfinite(x) and x < current}, reverse=True)
        if not caps:
            return None
        step = max(1, len(caps) // self.REFINE_CAPS)
        tried = caps[::step][: self.REFINE_CAPS]
        tpl = ts.tpl
        best: tuple[float, list[_Claim]] | None = None
        for cap in tried:
            types = [ts.types[i] for i in range(len(ts.types)) if prices[i] <= cap]
            sub_tpl = NodeClaimTemplate(
                tpl.nodepool, tpl.weight, claim.req, tpl.taints, tpl.startup_taints, tpl.labels, types,
                tpl.daemon_overhead, None, tpl.well_known_labels, tpl.nodeclass, tpl.daemon_pods,
            )
            sub = Scheduler([sub_tpl], hostname_prefix=f"{claim.hostname}-", refine=False, ignore_dra=self.ignore_dra)
            r = sub.solve(claim.pods)
            if r.errors or len(sub.claims) < 2:
                continue
            total = 0.0
            for c in sub.claims:
                p = c.ts.prices(c.req)[c.idx]
                total += float(p.min())
            if total < current - 1e-9 and (best is None or total < best[0] - 1e-9):
                best = (total, sub.claims)
        if best is None:
            return None
        rem = self.remaining.get(tpl.nodepool)
        if rem is not None:
            before = ts.capacity[claim.idx].max(axis=0)
            after = sum(c.ts.capacity[c.idx].max(axis=0) for c in best[1])
            if ((after - before) > rem).any():
                return None
            self.remaining[tpl.nodepool] = rem - (after - before)
        return best[1]

    # --- results --------------------------------------------------------------------
    def _finalize(self, claim: _Claim) -> NewNodeClaim:
        ts = claim.ts
        req = claim.req
        idx = claim.idx
        prices = ts.prices(req)[idx]
        order = np.lexsort((ts.name_rank[idx], prices))[:MAX_INSTANCE_TYPES]
        kept = idx[order]
        all_types = ts.types
        types = [all_types[i] for i in kept.tolist()]
        final = req.copy()
        final.add(Requirement.new(LABEL_INSTANCE_TYPE, IN, [it.name for it in types]))
        if claim.reserved:  # as upstream's FinalizeScheduling: a NodeClaim holding reservations launches into one
            final.add(Requirement.new(LABEL_CAPACITY_TYPE, IN, [CAPACITY_RESERVED]))
        total = claim.used + ts.daemon[int(kept[0])] if len(kept) else claim.used
        requests = {self.rnames[j]: v for j, v in enumerate(total.tolist()) if v}
        return NewNodeClaim(ts.tpl, claim.hostname, final, types, claim.pods, requests,
                            min_values_relaxed=_min_values_lowered(ts.tpl.requirements, final))

    def _truncation_breaks_min_values(self, claim: _Claim) -> str | None:
        """Upstream sends at most 60 instance types; minValues must still hold on those."""
        if not _has_min_values(claim.req) or self.min_values_best_effort:
            return None
        ts = claim.ts
        idx = claim.idx
        prices = ts.prices(claim.req)[idx]
        kept = idx[np.lexsort((ts.name_rank[idx], prices))[:MAX_INSTANCE_TYPES]]
        return _min_values_short(claim.req, ts, kept)


# (the idents of the last registry counted into, {label key: positions of the groups selecting it}), replaced whole
_SELECTING: list = [None]
# the groups (by ident, in order), the nodes counted and each group's counts of the last preparation (see
# _register_prepared_topology); the entry keeps the nodes alive, so the ids in its keys name them
_LAST_TOPOLOGY: list = [None]


def _topology_source(n: ExistingNode) -> tuple:
    """What a node's pods count into the groups depends on: its labels and name (its domains) and its bound pods
    (neither is changed in place; a copy of the node for another solve shares them, and so the key)."""
    return (id(n.labels), n.name, id(n.bound_pods), len(n.bound_pods))


def _held_counts(topo: Topology, node: ExistingNode) -> list[tuple]:
    """What the node's bound pods count into the registry's groups, summed per group and domain: (group ident,
    domain, pods, whether as owners of an anti-affinity term), in the order first met."""
    labels = _Node(node, None, -1).labels  # type: ignore[arg-type]
    sums: dict[tuple, int] = {}
    for _, p, n in _pod_classes(node):  # pods of a class are selected alike
        for g in topo.selecting(p.namespace, p.labels, p.label_key):
            d = labels.get(g.key)
            if d is not None:
                k = (g.ident, d, False)
                sums[k] = sums.get(k, 0) + n
        for t in p.anti_affinity:
            g = topo.anti_group(t)
            d = labels.get(g.key)
            if d is not None:
                k = (g.ident, d, True)
                sums[k] = sums.get(k, 0) + n
    return [(ident, d, k, owner) for (ident, d, owner), k in sums.items()]


def _register_prepared_topology(base: "Scheduler") -> None:
    """Count the pods bound to a preparation's nodes into its groups (as ``_register_existing_topology``).

    A cluster's successive consolidation passes prepare nearly the same nodes with the same groups. When the
    groups are the last preparation's, its counts are copied and only the nodes that came or went since (a node
    whose bound pods changed is a new one) are counted in or out. Counts are sums, so each group ends with the
    counts a fresh count gives; only the order in which a group lists its domains may differ, and the solves
    read that order only to build sets, masks and minima."""
    topo = base.topology
    sig = tuple(topo.groups)
    inputs = base._inputs()
    now = {_topology_source(n): n for n in inputs}
    last = _LAST_TOPOLOGY[0]
    if last is not None and last[0] == sig and not base._bound_elsewhere:
        before = last[1]
        gone = [n for k, n in before.items() if k not in now]
        came = [n for k, n in now.items() if k not in before]
        if 2 * (len(gone) + len(came)) <= len(inputs):
            changes = [(-1, c) for n in gone for c in _held_counts(topo, n)]
            changes += [(1, c) for n in came for c in _held_counts(topo, n)]
            if tuple(topo.groups) == sig:  # no node brought a group of its own (it is counted afresh below)
                groups = topo.groups
                for g, (counts, owners, total) in zip(groups.values(), last[2]):
                    g.counts, g.owners, g.total = dict(counts), dict(owners), total
                for sign, (ident, d, count, owner) in changes:
                    g = groups[ident]
                    src = g.owners if owner else g.counts
                    left = src.get(d, 0) + sign * count
                    if left:
                        src[d] = left
                    else:
                        del src[d]
                    if not owner:
                        g.total += sign * count
                _LAST_TOPOLOGY[0] = (sig, now, [(g.counts, g.owners, g.total) for g in groups.values()])
                return
            sig = tuple(topo.groups)
    base._register_existing_topology([])
    _LAST_TOPOLOGY[0] = (sig, now, [(g.counts, g.owners, g.total) for g in topo.groups.values()])


def _registry_selecting(topo: Topology):
    """``topo.selecting`` for the pods counted into a registry just built: which groups select a pod follows from
    its namespace and labels and the groups' idents (kind, key, namespaces, selector), so registries with the same
    idents in the same order (a cluster's successive snapshots) share the answers, by position."""
    groups = topo.groups
    sig = tuple(groups)
    entry = _SELECTING[0]
    if entry is None or entry[0] != sig:
        entry = _SELECTING[0] = (sig, {})
    found: dict[tuple, tuple[int, ...]] = entry[1]
    ordered: list[TopologyGroup] | None = None
    position: dict[tuple, int] | None = None
    cache = topo._selecting_cache

    def selecting(p: PodInfo) -> list[TopologyGroup]:
        nonlocal ordered, position
        lk = p.label_key
        hit = cache.get(lk)
        if hit is not None:
            return hit
        if ordered is None:
            ordered = list(groups.values())
        at = found.get(lk)
        if at is not None:
            out = cache[lk] = [ordered[i] for i in at]
            return out
        out = topo.selecting(p.namespace, p.labels, lk)
        if position is None:
            position = {g.ident: i for i, g in enumerate(ordered)}
        found[lk] = tuple(position[g.ident] for g in out)
        return out

    return selecting


def _pod_classes(node: ExistingNode) -> list[tuple[object, PodInfo, int]]:
    """The node's bound pods by class (its key's identity, or the key itself when a pod has none), in the order
    they first appear: (key, first pod, how many). Kept on the node, whose pods are never changed in place (a
    snapshot reuses the nodes that did not change, and with them this answer)."""
    pods = node.bound_pods
    hit = node.__dict__.get("_karpy_pod_classes")
    if hit is not None and hit[0] is pods and hit[1] == len(pods):
        return hit[2]
    found: dict[object, list] = {}
    for p in pods:
        k = id(p.class_key) if p.class_key else class_key(p)
        e = found.get(k)
        if e is None:
            found[k] = [k, p, 1]
        else:
            e[2] += 1
    out = [(k, p, count) for k, p, count in found.values()]
    node.__dict__["_karpy_pod_classes"] = (pods, len(pods), out)
    return out


def _domain_of(target, key: str, req: Requirements) -> str | None:
    if key == LABEL_HOSTNAME:
        return target.hostname
    if isinstance(target, _Node):
        return target.node.labels.get(key)
    r = req._reqs.get(key)
    if r is not None and not r.complement and len(r.values) == 1:
        return next(iter(r.values))
    return None


def _pin(req: Requirements, key: str, value: str) -> Requirements:
    out = req.copy()
    out.add(Requirement.new(key, IN, [value]))
    return out


def _ports_conflict(a: Iterable[tuple[str, int, str]], b: Iterable[tuple[str, int, str]]) -> bool:
    for ip, port, proto in a:
        for ip2, port2, proto2 in b:
            if port == port2 and proto == proto2 and (ip == ip2 or ip == "0.0.0.0" or ip2 == "0.0.0.0"):
                return True
    return False


def _label_values(it: InstanceType, key: str) -> frozenset[str]:
    """The values a label takes on the type: its own, else those its available offerings give it."""
    v = it.labels.get(key)
    return frozenset((v,)) if v is not None else it.offering_label_values(key)


def _has_min_values(req: Requirements) -> bool:
    return any(r.min_values is not None for r in req)


def _min_values_counts(req: Requirements, ts: _TemplateState, idx: np.ndarray) -> Iterable[tuple[Requirement, int]]:
    """Each requirement with minValues, and how many of its values the instance types ``idx`` offer."""
    for r in req:
        if r.min_values is None:
            continue
        if r.key == LABEL_INSTANCE_TYPE:
            values = {ts.types[int(i)].name for i in idx}
        elif r.key == LABEL_ZONE:
            values = {o.zone for i in idx for o in ts.types[int(i)].offerings if o.available and r.has(o.zone)}
        elif r.key == LABEL_CAPACITY_TYPE:
            values = {o.capacity_type for i in idx for o in ts.types[int(i)].offerings if o.available}
        elif r.key in ts.offering_keys:
            values = {v for i in idx for v in _label_values(ts.types[int(i)], r.key)}
        else:
            values = {ts.types[int(i)].labels[r.key] for i in idx if r.key in ts.types[int(i)].labels}
        yield r, len({v for v in values if r.has(v)})


def _min_values_short(req: Requirements, ts: _TemplateState, idx: np.ndarray) -> str | None:
    """Why the remaining instance types cannot meet a requirement's minValues, if they cannot."""
    for r, n in _min_values_counts(req, ts, idx):
        if n < r.min_values:
            return f"minValues requirement is not met for label(s) ({r.key}: needs {r.min_values}, has {n})"
    return None


def _relax_min_values(req: Requirements, ts: _TemplateState, idx: np.ndarray) -> Requirements:
    """minValuesPolicy BestEffort: each minValues the instance types ``idx`` cannot meet lowered to what they offer."""
    out = req.copy()
    for r, n in list(_min_values_counts(req, ts, idx)):
        if n < r.min_values:
            out._reqs[r.key] = Requirement(r.key, r.complement, r.values, r.gte, r.lte, n)
    return out


def _min_values_lowered(template: Requirements, final: Requirements) -> bool:
    """Whether some requirement ends with a lower minValues than the NodePool set (upstream's relaxed annotation)."""
    for r in template:
        if r.min_values is None:
            continue
        now = final.get(r.key).min_values
        if now is not None and now < r.min_values:
            return True
    return False


def _fmt_res(d: Mapping[str, int]) -> str:
    return "{" + ", ".join(f'"{k}":"{res.format_units(k, v)}"' for k, v in sorted(d.items())) + "}"
