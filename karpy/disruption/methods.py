"""Disruption methods and the controller that runs them, as upstream Karpenter v1 does.

Each pass tries, in order, **emptiness** (delete empty nodes), **drift**
(replace nodes that no longer match their NodePool or NodeClass),
**multi-node consolidation** (delete several nodes, possibly replacing them by
one cheaper node) and **single-node consolidation** (delete or replace one
node by a cheaper one); the first method that finds something to do ends the
pass. Consolidation decisions come from the same scheduling simulation that
provisioning uses: the candidates' pods must all fit on the remaining nodes
plus at most one new NodeClaim, which must be strictly cheaper than what it
replaces. Every decision respects the NodePools' disruption budgets.

The engine is pure: :meth:`DisruptionEngine.step` reads a
:class:`~karpy.disruption.state.ClusterSnapshot` and returns a command and the
events to emit; the simulator (or a controller) carries them out.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

from ..cloudprovider.types import (
    CAPACITY_ON_DEMAND,
    CAPACITY_RESERVED,
    CAPACITY_SPOT,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_ZONE,
    InstanceType,
)
from ..resources import parse_quantity
from ..scheduling.requirements import IN, Requirement, Requirements
from ..scheduling.pods import moving
from ..scheduling.scheduler import ExistingNode, NewNodeClaim, Prepared, Results, Scheduler
from . import balanced, optimizer
from .budgets import budget_mapping, blocked_nodepools
from .candidates import (
    EVENTUAL,
    GRACEFUL,
    Candidate,
    build_candidates,
    currently_reschedulable,
    sentence,
    sort_for_consolidation,
    sort_for_drift,
)
from .state import ClusterSnapshot

EMPTY = "Empty"
DRIFTED = "Drifted"
UNDERUTILIZED = "Underutilized"

VALIDATION_DELAY = 15.0  # seconds a consolidation waits before re-checking and acting
POLL_PERIOD = 10.0
MULTI_NODE_MAX = 100
SPOT_TO_SPOT_MIN_TYPES = 15
FORCED_RECHECK = 300.0  # a method that found nothing is retried after this long even if nothing changed
# upstream's SingleNodeConsolidationTimeoutDuration: a single-node pass running longer (on the engine's clock) is
# abandoned, and the NodePools it did not reach go first next time
SINGLE_NODE_TIMEOUT = 180.0
# upstream's MultiNodeConsolidationTimeoutDuration: a multi-node binary search running longer (on the engine's clock)
# stops and keeps the largest batch it had found consolidatable, if any
MULTI_NODE_TIMEOUT = 60.0


@dataclass(eq=False)
class StaticReplacement:
    """The replacement of a static NodePool's node: a NodeClaim from the NodePool's template alone (no
    pods, no instance type chosen beforehand; the cloud provider launches the cheapest it allows)."""

    nodepool: str
    instance_types: list[InstanceType] = field(default_factory=list)
    pods: list = field(default_factory=list)


def is_static(nodepool: Mapping | None) -> bool:
    """A static NodePool (``spec.replicas`` set) keeps a count of nodes: no consolidation, no emptiness, and
    drift replaces its nodes one for one."""
    return ((nodepool or {}).get("spec") or {}).get("replicas") is not None


@dataclass(eq=False)
class Command:
    reason: str  # Empty | Drifted | Underutilized
    method: str  # emptiness | drift | multi | single
    candidates: list[Candidate]
    replacements: list[NewNodeClaim | StaticReplacement]
    savings: float = 0.0
    results: Results | None = None
    # karpy's ConsolidationOptimizer re-packing: each replacement is one type in one zone for the pods it names,
    # which the provisioner places there once they are re-created (the gate's placement plan)
    pinned: bool = False

    @property
    def decision(self) -> str:
        return "replace" if self.replacements else "delete"

    def describe(self) -> str:
        names = ", ".join(c.name for c in self.candidates)
        if not self.replacements:
            return f"delete [{names}]"
        reps = ", ".join(r.instance_types[0].name if r.instance_types else
                         (f"nodepool/{r.nodepool}" if isinstance(r, StaticReplacement) else "?") for r in self.replacements)
        return f"replace [{names}] -> [{reps}]"


class Event:
    """An event the engine asks its controller to publish. The message may be given as a function that works it
    out (see :meth:`DisruptionEngine.compute_consolidation`): it is called once, when the message is first read,
    so a controller whose recorder drops the event as a repeat never pays for it."""

    __slots__ = ("kind", "name", "reason", "_message", "etype")

    def __init__(self, kind: str, name: str, reason: str, message: str | Callable[[], str], etype: str = "Normal"):
        self.kind = kind  # Node | NodePool
        self.name = name
        self.reason = reason
        self._message = message
        self.etype = etype

    @property
    def message(self) -> str:
        m = self._message
        if not isinstance(m, str):
            m = self._message = m()
        return m

    @property
    def lazy_message(self) -> str | Callable[[], str]:
        """The message, or the function that works it out if it has not been read yet."""
        return self._message

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return (self.kind, self.name, self.reason, self.message, self.etype) == (
            other.kind, other.name, other.reason, other.message, other.etype)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Event({self.kind!r}, {self.name!r}, {self.reason!r}, {self.message!r}, {self.etype!r})"


@dataclass
class StepResult:
    command: Command | None
    events: list[Event] = field(default_factory=list)
    # disruption reason -> the candidates its method found this pass (upstream's eligible_nodes gauge)
    eligible: dict[str, int] = field(default_factory=dict)


# --- prices -------------------------------------------------------------------------------


def _price_key(reqs: Requirements) -> tuple:
    """What of ``reqs`` an offering's price answers to: its zone and capacity-type requirements."""
    z, ct = reqs.get(LABEL_ZONE), reqs.get(LABEL_CAPACITY_TYPE)
    return (z.complement, z.values, z.gte, z.lte, ct.complement, ct.values, ct.gte, ct.lte)


def _priced(it: InstanceType, reqs: Requirements, rkey: tuple | None = None) -> tuple:
    """``(type, it.compatible_offerings(reqs), cheapest price, dearest price in the capacity type the provider
    would pick)``, remembered per type and zone and capacity-type requirement: a consolidation pass prices the
    same types under the same few requirements for every candidate (``rkey``: ``_price_key(reqs)``, when the
    caller prices many types under one). An offering with labels of its own answers to other requirements too:
    those types are not remembered."""
    key = (id(it), rkey if rkey is not None else _price_key(reqs))
    hit = _OFFERINGS.get(key)
    if hit is not None and hit[0] is it:
        return hit
    out = it.compatible_offerings(reqs)
    worst = float("inf")
    for ct in (CAPACITY_RESERVED, CAPACITY_SPOT, CAPACITY_ON_DEMAND):
        prices = [o.price for o in out if o.capacity_type == ct]
        if prices:
            worst = max(prices)
            break
    hit = (it, out, min((o.price for o in out), default=float("inf")), worst)
    if not any(o.labels for o in it.offerings):
        if len(_OFFERINGS) >= _OFFERINGS_MAX:
            _OFFERINGS.clear()
        _OFFERINGS[key] = hit  # the type kept alive: its id names it (types are replaced, never changed)
    return hit


def _offerings(it: InstanceType, reqs: Requirements, rkey: tuple | None = None) -> list:
    return _priced(it, reqs, rkey)[1]


_OFFERINGS: dict[tuple, tuple] = {}
_OFFERINGS_MAX = 200_000


def _by_price(types: Sequence[InstanceType], reqs: Requirements, rkey: tuple) -> tuple[list, list[float]]:
    """``types`` cheapest first (a stable sort: upstream's OrderByPrice) and, in that order, each one's dearest
    launch price (``rkey``: ``_price_key(reqs)``). Remembered per list of types and zone and capacity-type
    requirement: a pass's simulations open NodeClaims with the same few lists of types, and each would sort
    them again. The lists returned are shared: read them, never change them."""
    key = (rkey, tuple(map(id, types)))
    hit = _BY_PRICE.get(key)
    if hit is not None:
        return hit[1], hit[2]
    priced = [_priced(it, reqs, rkey) for it in types]
    order = sorted(range(len(priced)), key=lambda i: priced[i][2])
    ordered = [types[i] for i in order]
    worst = [priced[i][3] for i in order]
    if all((id(it), rkey) in _OFFERINGS for it in types):  # (not a type whose offerings carry labels)
        if len(_BY_PRICE) >= _BY_PRICE_MAX:
            _BY_PRICE.clear()
        _BY_PRICE[key] = (list(types), ordered, worst)  # the types kept alive: their ids name them
    return ordered, worst


_BY_PRICE: dict[tuple, tuple[list, list, list[float]]] = {}
# A pass opens few distinct lists (34 in all over bench/consolidation.py's 500-node run); an entry holds three lists
# and a key as long as the catalog (about 45 KB for 800 types), so a long-running controller keeps at most ~11 MB.
_BY_PRICE_MAX = 256


def cheapest_launch_price(it: InstanceType, reqs: Requirements, rkey: tuple | None = None) -> float:
    return _priced(it, reqs, rkey)[2]


def worst_launch_price(it: InstanceType, reqs: Requirements, rkey: tuple | None = None) -> float:
    """The dearest offering the launch might land on, in the capacity type the provider would pick."""
    return _priced(it, reqs, rkey)[3]


def _min_values_keys(types: Sequence[InstanceType], reqs: Requirements) -> tuple[int, list[str]]:
    """Upstream's SatisfiesMinValues over price-ordered types: how many of the first types meet every
    requirement's minValues, and the keys that even all of them leave short."""
    mins = [r for r in reqs if r.min_values is not None]
    if not mins:
        return 0, []
    seen: dict[str, set] = {r.key: set() for r in mins}
    short = [r.key for r in mins]
    for i, it in enumerate(types):
        for r in mins:
            if r.key == LABEL_INSTANCE_TYPE:
                vals = {it.name}
            elif r.key == LABEL_ZONE:
                vals = {o.zone for o in it.offerings if o.available}
            elif r.key == LABEL_CAPACITY_TYPE:
                vals = {o.capacity_type for o in it.offerings if o.available}
            else:
                vals = {it.labels[r.key]} if r.key in it.labels else set()
            seen[r.key] |= {v for v in vals if r.has(v)}
        short = [r.key for r in mins if len(seen[r.key]) < r.min_values]
        if not short:
            return i + 1, []
    return len(types), sorted(short)


def _instance_types_req(reqs: Requirements, types: Sequence[InstanceType]) -> Requirement:
    """The replacement's instance-type requirement: the kept types, with the NodePool's minValues still on it."""
    old = reqs._reqs.get(LABEL_INSTANCE_TYPE)
    return Requirement.new(LABEL_INSTANCE_TYPE, IN, [it.name for it in types],
                           min_values=old.min_values if old is not None else None)


def min_values_needed(types: Sequence[InstanceType], reqs: Requirements) -> int:
    return _min_values_keys(types, reqs)[0]


def min_values_short(types: Sequence[InstanceType], reqs: Requirements) -> str | None:
    """Why these instance types break the requirements' minValues (None when they do not)."""
    keys = _min_values_keys(types, reqs)[1]
    if not keys:
        return None
    return f"minValues requirement is not met for label(s) (label(s)=[{' '.join(keys)}])"


def _consolidate_after(np: dict) -> str:
    return str(((np.get("spec") or {}).get("disruption") or {}).get("consolidateAfter", "0s"))


def _policy(np: dict) -> str:
    return str(((np.get("spec") or {}).get("disruption") or {}).get("consolidationPolicy", "WhenEmptyOrUnderutilized"))


# --- scheduling simulation ----------------------------------------------------------------


@dataclass
class Simulation:
    results: Results | None  # None: a probe cut short (see _ProbeScheduler)
    ok: bool
    why: str | None


class _CutShort(Exception):
    """A probe's simulation opened more NodeClaims than it may."""


class _ProbeScheduler(Scheduler):
    """The simulation of a multi-node consolidation probe, stopped as soon as it opens a second NodeClaim.

    Such a probe can no longer succeed: a solve only adds NodeClaims, except those it drops at the end for
    minValues, whose pods then fail to schedule; with no pending pods in the snapshot every pod it places
    is one the command must move, so either way the probe is rejected, and a multi-node probe reports no
    reason. Stopping early gives the same answer without placing the rest of the pods.
    """

    max_claims = 1

    def _new_claim(self, *args, **kwargs):
        out = super()._new_claim(*args, **kwargs)
        if len(self.claims) > self.max_claims:
            raise _CutShort
        return out


class _SingleProbeScheduler(_ProbeScheduler):
    """The simulation of a single-node candidate, stopped as soon as it opens a second NodeClaim or one that
    cannot be cheaper than the candidate (``price``): it is rejected either way (see
    DisruptionEngine.compute_consolidation). A solve that is not stopped is the full simulation."""

    price = float("inf")

    def _new_claim(self, *args, **kwargs):
        out = super()._new_claim(*args, **kwargs)
        if out[0]:
            self._check_price(self.claims[-1])
        return out

    def _commit(self, cls, claim, n, new_req, new_idx) -> None:
        narrowed = new_req is not claim.req or len(new_idx) != len(claim.idx)
        super()._commit(cls, claim, n, new_req, new_idx)
        if narrowed and claim.row >= 0:
            self._check_price(claim)

    def _check_price(self, claim) -> None:
        # every type the NodeClaim may still end with is one of these, at no less than its cheapest offering the
        # NodeClaim's requirements allow; pods placed on it later only narrow both
        if claim.ts.prices(claim.req)[claim.idx].min() >= self.price:
            raise _CutShort


SIMULATIONS = [0]  # scheduling simulations run by the disruption engine in this process (for benchmarks)


def _prepared(snapshot: ClusterSnapshot, consolidation: bool) -> tuple[Prepared, list]:
    """The snapshot's destinations prepared once for all the simulations of a pass."""
    memo = snapshot.__dict__.setdefault("_prepared", {})
    hit = memo.get(consolidation)
    if hit is not None:
        return hit
    sources: list[tuple[ExistingNode, bool]] = []  # each destination, and whether it takes the pods consolidation moves
    leaving = []  # pods of nodes already being deleted also need a home
    for n in snapshot.nodes:
        if n.marked_for_deletion or n.terminating:
            leaving.extend(p.info for p in n.pods if currently_reschedulable(p, snapshot.pdbs, snapshot.now))
            continue
        # a recently changed node takes pending pods, but not the pods consolidation moves
        sources.append((n.existing, not (consolidation and n.managed and n.under_consolidate_after)))
    # every pod that may move, for its constraints' topology groups (moving copies share them)
    placed = [p.info for n in snapshot.nodes for p in n.pods]
    pods = list(snapshot.pending_pods) + leaving + placed
    # The state of nodes, pods and templates a snapshot reuses is never changed in place: when a snapshot holds
    # the very objects the last prepared one did (a command's validation, 15 s after the pass that found it,
    # often does), that preparation is this one's too. The entry keeps the objects alive, so their ids name them.
    key = (snapshot.respect_preferences, snapshot.ignore_dra, tuple(map(id, snapshot.templates)),
           tuple((id(e), t) for e, t in sources),
           tuple(map(id, pods)))
    last = _LAST_PREPARED[0]
    if last is not None and last[0] == key:
        prep = last[2]
    else:
        destinations = [e if takes else replace(e, takes_moving=False) for e, takes in sources]
        prep = Prepared(snapshot.templates, destinations, pods, respect_preferences=snapshot.respect_preferences,
                        ignore_dra=snapshot.ignore_dra)
        _LAST_PREPARED[0] = (key, (list(snapshot.templates), sources, pods), prep)
    hit = memo[consolidation] = (prep, leaving)
    return hit


_LAST_PREPARED: list = [None]  # (key, the objects the key names, kept alive, Prepared) of the last preparation


def _pending_and_uninitialized(snapshot: ClusterSnapshot) -> tuple[set[str], set[str]]:
    """The snapshot's pending pod keys and uninitialized node names, once for all the simulations of a pass."""
    memo = snapshot.__dict__.get("_pending_uninitialized")
    if memo is None:
        memo = snapshot.__dict__["_pending_uninitialized"] = (
            {p.key for p in snapshot.pending_pods}, {n.existing.name for n in snapshot.nodes if not n.initialized})
    return memo


def _moving_pods(snapshot: ClusterSnapshot, candidates: Sequence[Candidate]) -> list:
    """The candidates' pods a simulation must find a new home for, as the pods consolidation moves."""
    memo = snapshot.__dict__.get("_moving_pods")
    if memo is None:
        memo = snapshot.__dict__["_moving_pods"] = {}
    out: list = []
    for c in candidates:
        node = c.node
        hit = memo.get(id(node))
        if hit is None or hit[0] is not node:  # (per node of this snapshot, which holds them all)
            hit = memo[id(node)] = (node, [moving(p.info) for p in node.pods
                                           if currently_reschedulable(p, snapshot.pdbs, snapshot.now)])
        out.extend(hit[1])
    return out


# Consolidation answers that found nothing, remembered for the simulation input they came from. A pass whose
# snapshot holds the very nodes, pods and templates an earlier pass simulated (the forced re-check every five
# minutes, a cluster change that reached no node) gets the same answer, and the same reason, without simulating
# again. Entries hold the objects their keys name by id and live as long as the preparation they were
# simulated over (see _prepared: a snapshot reuses a preparation only when it holds the very same objects).
_REJECTED: list = [None, {}]  # [that Prepared, {input key: (the pods it names, kept alive; reason)}]


def _rejection_key(snapshot: ClusterSnapshot, cands: Sequence[Candidate], probe: bool) -> tuple[dict, tuple, list]:
    """The rejections remembered for this snapshot's preparation, this consolidation's input key, and the
    pods it names (kept alive with a rejection: the key names them by id): pending, leaving, the candidates'."""
    prep, leaving = _prepared(snapshot, True)
    if _REJECTED[0] is not prep:
        _REJECTED[0], _REJECTED[1] = prep, {}
    own = _moving_pods(snapshot, cands)
    # what every key of this snapshot shares, worked out once: the pods pending and leaving by id (they and the
    # preparation are never changed in place), the uninitialized nodes and the feature gates
    shared = snapshot.__dict__.get("_rejection_shared")
    if shared is None or shared[0] is not leaving:
        _, uninitialized = _pending_and_uninitialized(snapshot)
        shared = snapshot.__dict__["_rejection_shared"] = (
            leaving, tuple(map(id, snapshot.pending_pods)), tuple(map(id, leaving)),
            (snapshot.min_values_best_effort, tuple(sorted(uninitialized)),
             tuple(sorted((k, bool(v)) for k, v in snapshot.feature_gates.items()))))
    _, pending_ids, leaving_ids, rest = shared
    key = (pending_ids, leaving_ids, tuple(map(id, own)),
           tuple((c.name, c.price, c.node.capacity_type) for c in cands), probe, rest)
    return _REJECTED[1], key, (snapshot.pending_pods, leaving, own)


class _Deferred:
    """A message worked out when first asked, once (events of one rejection share it)."""

    __slots__ = ("_make", "_text")

    def __init__(self, make: Callable[[], str]):
        self._make: Callable[[], str] | None = make
        self._text = ""

    def __call__(self) -> str:
        if self._make is not None:
            self._text, self._make = self._make(), None
        return self._text


def _beyond_one_nodeclaim(snapshot: ClusterSnapshot, cands: Sequence[Candidate], pods: Sequence) -> bool:
    """Whether the pods a multi-node probe must place ask, in some resource, for more than the free room of every
    node left plus the largest instance type any NodePool offers: then no solve places them all on one new
    NodeClaim at most (a pod goes only where its requests fit), and the probe is rejected without simulating."""
    if not pods:
        return False
    prep, _ = _prepared(snapshot, True)
    free, total, largest = prep.room()
    rows = [prep.index[c.name] for c in cands if c.name in prep.index]
    theirs = free[rows].sum(axis=0, dtype=object).tolist() if rows else [0] * len(total)
    need = prep.requests_of(pods)
    return any(n > t - x + big for n, t, x, big in zip(need, total, theirs, largest))


def simulate(snapshot: ClusterSnapshot, candidates: Sequence[Candidate], consolidation: bool,
             refine: bool = False, probe: bool = False, own: list | None = None,
             cheaper_than: float | None = None) -> Simulation:
    """Where would the candidates' pods go if the candidates were gone? (``refine``: with CostRefinement's
    re-packing of the new NodeClaims, for karpy's ConsolidationOptimizer; ``probe``: a multi-node probe,
    given up, without results, once it needs a second new NodeClaim; ``cheaper_than``: given up, without
    results, once it needs a second new NodeClaim or one that cannot cost less than this, for a snapshot
    without pending pods; ``own``: the candidates' pods to move, when the caller has them already)"""
    SIMULATIONS[0] += 1
    names = {c.name for c in candidates}
    prep, leaving = _prepared(snapshot, consolidation)
    if own is None:
        own = _moving_pods(snapshot, candidates)
    pods = list(snapshot.pending_pods) + leaving + own
    probe = probe and not refine and not snapshot.pending_pods
    if cheaper_than is not None and (refine or snapshot.pending_pods):
        raise ValueError("a simulation stopped by price places only the candidates' and leaving nodes' pods")
    kind = _SingleProbeScheduler if cheaper_than is not None else _ProbeScheduler if probe else Scheduler
    sched = kind.from_prepared(
        prep, exclude=names, hostname_prefix="disruption-placeholder",
        min_values_best_effort=snapshot.min_values_best_effort,
        pin_counted=bool(snapshot.feature_gates.get("ZonePinning", False)))
    sched.refine = refine
    if cheaper_than is not None:
        sched.price = cheaper_than
    try:
        r = sched.solve(pods)
    except _CutShort:
        return Simulation(None, False, "would need more than one new NodeClaim" if cheaper_than is None else
                          "would need more than one new NodeClaim or one no cheaper than the candidates")
    pending, uninitialized = _pending_and_uninitialized(snapshot)
    failed = [k for k in r.errors if k not in pending]
    if failed:
        shown = ", ".join(f"{k} => {r.errors[k]}" for k in failed[:5])
        more = f" and {len(failed) - 5} other(s)" if len(failed) > 5 else ""
        return Simulation(r, False, f"not all pods would schedule, {shown}{more}")
    own_keys = {p.key for p in own}
    for target, infos in r.existing.items():
        if target in uninitialized and any(p.key in own_keys for p in infos):
            return Simulation(r, False, f"not all pods would schedule, would schedule against uninitialized node/{target}")
    return Simulation(r, True, None)


# --- the engine ---------------------------------------------------------------------------


class DisruptionEngine:
    """Runs the disruption methods over snapshots; remembers which methods found nothing to do."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        # the time as a single-node pass runs, for its timeout (None: a pass never times out; a simulated clock
        # stands still during a pass, so there it never does either)
        self.clock = clock
        self.single_node_timeout = SINGLE_NODE_TIMEOUT
        self.multi_node_timeout = MULTI_NODE_TIMEOUT
        self.unseen_nodepools: set[str] = set()  # NodePools a timed-out single-node pass did not reach
        self.timeouts: dict[str, int] = {}  # consolidation type -> timeouts not yet counted in the metrics
        # method -> (state version, time) of its last no-op that budgets did not constrain
        self._consolidated: dict[str, tuple[int, float]] = {}
        self._eligible: dict[str, int] = {}  # what the methods of the current pass found (StepResult.eligible)
        # candidates the last validate() rejected, counted as upstream's failed_validations_total counts them
        self.failed_validations = 0
        self.repack_memo: optimizer.RepackMemo | None = None  # karpy's ConsolidationOptimizer re-packings

    def _skip(self, method: str, version: int, now: float) -> bool:
        seen = self._consolidated.get(method)
        return seen is not None and seen[0] == version and now - seen[1] < FORCED_RECHECK

    def _mark(self, method: str, version: int, now: float) -> None:
        self._consolidated[method] = (version, now)

    def step(self, snapshot: ClusterSnapshot, version: int = 0, after: str | None = None) -> StepResult:
        """One pass of the methods in order (``after``: only the methods after that one, as upstream's pass goes
        on when a method's command fails validation)."""
        out = StepResult(None)
        self._eligible = out.eligible
        methods = ("emptiness", "static_drift", "drift", "optimizer", "multi", "single")
        if after is not None:
            methods = methods[methods.index(after) + 1:]
        for method in methods:
            if method not in ("drift", "static_drift") and after is None and self._skip(method, version, snapshot.now):
                continue
            cmd, constrained = getattr(self, f"_{method}")(snapshot, out.events)
            if cmd is not None:
                out.command = cmd
                return out
            if method not in ("drift", "static_drift") and not constrained:
                self._mark(method, version, snapshot.now)
        return out

    # --- candidate filters ----------------------------------------------------------
    def _candidates(self, snapshot: ClusterSnapshot, klass: str, events: list[Event]) -> list[Candidate]:
        """The candidates of a class, built once per snapshot (the methods of one pass share them)."""
        memo = snapshot.__dict__.setdefault("_candidates", {})
        hit = memo.get(klass)
        if hit is None:
            raw: list[tuple[str, str, str]] = []
            cands = build_candidates(snapshot, klass, raw)
            hit = memo[klass] = (cands, [Event("Node", n, r, m) for n, r, m in raw])
            events.extend(hit[1])
        return list(hit[0])

    def _empty_filter(self, c: Candidate, events: list[Event]) -> bool:
        if is_static(c.nodepool):
            return False
        if _consolidate_after(c.nodepool) == "Never":
            if c.empty:
                events.append(Event("Node", c.name, "Unconsolidatable", f'NodePool "{c.node.nodepool}" has consolidation disabled'))
            return False
        if c.empty and c.node.buffer_pods:
            # a node holding a CapacityBuffer's virtual pods is kept room, not an empty node (upstream's emptiness)
            events.append(Event("Node", c.name, "Unconsolidatable", f'Node "{c.name}" has buffer pods'))
            return False
        return c.empty and c.node.consolidatable

    def _consolidation_filter(self, c: Candidate, events: list[Event]) -> bool:
        np_name = c.node.nodepool
        if is_static(c.nodepool):
            return False
        if c.node.instance_type is None:
            events.append(Event("Node", c.name, "Unconsolidatable",
                                f'Instance Type "{c.node.labels.get(LABEL_INSTANCE_TYPE, "")}" not found'))
            return False
        if not c.node.capacity_type:
            events.append(Event("Node", c.name, "Unconsolidatable", f'Node does not have label "{LABEL_CAPACITY_TYPE}"'))
            return False
        if not c.node.zone:
            events.append(Event("Node", c.name, "Unconsolidatable", f'Node does not have label "{LABEL_ZONE}"'))
            return False
        if _consolidate_after(c.nodepool) == "Never":
            events.append(Event("Node", c.name, "Unconsolidatable", f'NodePool "{np_name}" has consolidation disabled'))
            return False
        if c.empty:
            return False
        if _policy(c.nodepool) == "WhenEmpty":
            events.append(Event("Node", c.name, "Unconsolidatable",
                                f'NodePool "{np_name}" has consolidation policy WhenEmpty, but node is not empty'))
            return False
        return c.node.consolidatable

    def _budget_events(self, snapshot: ClusterSnapshot, reason: str, events: list[Event]) -> dict[str, int]:
        managed = [n for n in snapshot.nodes if n.managed]
        for np in blocked_nodepools(snapshot.nodepools, managed, reason, snapshot.now):
            events.append(Event("NodePool", np, "DisruptionBlocked",
                                f"No allowed disruptions for disruption reason {reason} due to blocking budget"))
        return budget_mapping(snapshot.nodepools, managed, reason, snapshot.now)

    # --- emptiness --------------------------------------------------------------------
    def _emptiness(self, snapshot: ClusterSnapshot, events: list[Event]) -> tuple[Command | None, bool]:
        cands = [c for c in self._candidates(snapshot, GRACEFUL, events) if self._empty_filter(c, events)]
        self._eligible["empty"] = len(cands)
        if not cands:
            return None, False
        budgets = self._budget_events(snapshot, EMPTY, events)
        kept, constrained = _take_within_budgets(sort_for_consolidation(cands), budgets)
        if not kept:
            return None, constrained
        return Command(EMPTY, "emptiness", kept, [], savings=sum(c.price for c in kept)), constrained

    # --- drift --------------------------------------------------------------------------
    def _drift(self, snapshot: ClusterSnapshot, events: list[Event]) -> tuple[Command | None, bool]:
        cands = [c for c in self._candidates(snapshot, EVENTUAL, events) if c.node.drifted and not is_static(c.nodepool)]
        self._eligible["drifted"] = len(cands)
        if not cands:
            return None, False
        budgets = self._budget_events(snapshot, DRIFTED, events)
        for c in sort_for_drift(cands):
            if budgets.get(c.node.nodepool, 0) <= 0:
                continue
            sim = simulate(snapshot, [c], consolidation=False)
            if not sim.ok:
                events.append(Event("Node", c.name, "DisruptionBlocked", sentence(sim.why or "")))
                continue
            return Command(DRIFTED, "drift", [c], list(sim.results.new_nodeclaims), results=sim.results), False
        return None, False

    # --- static drift --------------------------------------------------------------------
    def _static_drift(self, snapshot: ClusterSnapshot, events: list[Event]) -> tuple[Command | None, bool]:
        """A drifted node of a static NodePool is replaced by a NodeClaim from its template, one for one,
        within the Drifted budget and ``limits.nodes``, once the NodePool is not above its replicas."""
        cands = [c for c in self._candidates(snapshot, EVENTUAL, events) if c.node.drifted and is_static(c.nodepool)]
        if not cands:
            return None, False
        budgets = self._budget_events(snapshot, DRIFTED, events)
        for c in sort_for_drift(cands):
            np = c.nodepool
            name = c.node.nodepool or ""
            if budgets.get(name, 0) <= 0:
                continue
            running, gone, pending = snapshot.nodepool_counts.get(name, (0, 0, 0))
            if running + pending > int(np["spec"]["replicas"]):
                continue  # scaling down first
            raw = ((np.get("spec") or {}).get("limits") or {}).get("nodes")
            if raw is not None and float(parse_quantity(raw)) - (running + gone + pending) <= 0:
                continue
            return Command(DRIFTED, "drift", [c], [StaticReplacement(name)]), False
        return None, False

    # --- consolidation core ----------------------------------------------------------------
    def compute_consolidation(self, snapshot: ClusterSnapshot, cands: Sequence[Candidate], events: list[Event] | None,
                              method: str, exact: bool = False) -> Command | None:
        single = len(cands) == 1
        # a multi-node probe reports no reason: its simulation may stop at a second new NodeClaim
        probe = method == "multi" and events is None and not single
        rejected, key, named = _rejection_key(snapshot, cands, probe)

        def unconsolidatable(msg: str | Callable[[], str]) -> None:
            rejected[key] = (named, msg)
            if single and events is not None:
                events.append(Event("Node", cands[0].name, "Unconsolidatable", msg))

        hit = None if exact else rejected.get(key)
        if hit is not None:
            unconsolidatable(hit[1])
            return None
        if probe and _beyond_one_nodeclaim(snapshot, cands, named[1] + named[2]):
            unconsolidatable("would need more than one new NodeClaim")
            return None
        if single and not exact and not snapshot.pending_pods:
            # A single node's simulation that opens a second NodeClaim, or one whose types all cost at least the
            # node, ends rejected whatever else happens (a pod left out, two or more NodeClaims, or one and no
            # cheaper type): it is stopped there, and the reason, which only the whole simulation tells, is
            # worked out only if the event is published.
            sim = simulate(snapshot, cands, consolidation=True, own=named[2], cheaper_than=cands[0].price)
            if sim.results is None:
                unconsolidatable(_Deferred(lambda: self._reason(snapshot, cands, method)))
                return None
        else:
            sim = simulate(snapshot, cands, consolidation=True, probe=probe, own=named[2])
        if not sim.ok:
            unconsolidatable(sentence(sim.why or ""))
            return None
        new = sim.results.new_nodeclaims
        if not new:
            return Command(UNDERUTILIZED, method, list(cands), [], savings=sum(c.price for c in cands), results=sim.results)
        if len(new) > 1:
            unconsolidatable(f"Can't remove without creating {len(new)} candidates")
            return None
        rep = new[0]
        price = sum(c.price for c in cands)
        reqs = rep.requirements
        all_spot = all(c.node.capacity_type == CAPACITY_SPOT for c in cands)
        # cheapest first, before any truncation or minValues count (upstream's OrderByPrice)
        rkey = _price_key(reqs)
        ordered, worst = _by_price(rep.instance_types, reqs, rkey)
        if all_spot and reqs.get(LABEL_CAPACITY_TYPE).has(CAPACITY_SPOT):
            if not snapshot.feature_gates.get("SpotToSpotConsolidation", False):
                unconsolidatable("SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node")
                return None
            reqs = reqs.copy()
            reqs.add(Requirement.new(LABEL_CAPACITY_TYPE, IN, [CAPACITY_SPOT]))
            rkey = _price_key(reqs)
            types = [it for it in ordered if _offerings(it, reqs, rkey) and worst_launch_price(it, reqs, rkey) < price]
            short = min_values_short(types, reqs)
            if short is not None:
                unconsolidatable(f"Filtering by price: {short}")
                return None
            if not types:
                unconsolidatable("Can't replace with a cheaper node")
                return None
            if single:
                # a multi-node merge needs no spare flexibility; a single spot node is only replaced when 15
                # cheaper types leave it out of the launch set, which keeps max(15, what minValues needs)
                if len(types) < SPOT_TO_SPOT_MIN_TYPES:
                    unconsolidatable("SpotToSpotConsolidation requires 15 cheaper instance type options than the "
                                     f"current candidate to consolidate, got {len(types)}")
                    return None
                types = types[:max(SPOT_TO_SPOT_MIN_TYPES, min_values_needed(types, reqs))]
        else:
            types = [it for it, w in zip(ordered, worst) if w < price]
            short = min_values_short(types, reqs)
            if short is not None:
                unconsolidatable(f"Filtering by price: {short}")
                return None
            if not types:
                unconsolidatable("Can't replace with a cheaper node")
                return None
            cr = reqs.get(LABEL_CAPACITY_TYPE)
            if cr.has(CAPACITY_SPOT) and cr.has(CAPACITY_ON_DEMAND):
                # a cheaper spot replacement must not fall back to dearer on-demand at launch
                reqs = reqs.copy()
                reqs.add(Requirement.new(LABEL_CAPACITY_TYPE, IN, [CAPACITY_SPOT]))
                types = [it for it in types if _offerings(it, reqs)]
                if not types:
                    unconsolidatable("Can't replace with a cheaper node")
                    return None
        reqs = reqs.copy()
        reqs._reqs[LABEL_INSTANCE_TYPE] = _instance_types_req(reqs, types)
        replacement = NewNodeClaim(rep.template, rep.hostname, reqs, types, rep.pods, rep.requests)
        savings = price - cheapest_launch_price(types[0], reqs)
        return Command(UNDERUTILIZED, method, list(cands), [replacement], savings=savings, results=sim.results)

    def _reason(self, snapshot: ClusterSnapshot, cands: Sequence[Candidate], method: str) -> str:
        """Why the candidates cannot be consolidated, by the whole simulation (for a rejection decided early)."""
        events: list[Event] = []
        if self.compute_consolidation(snapshot, cands, events, method, exact=True) is not None:
            raise AssertionError(f"consolidating {[c.name for c in cands]} was rejected early but succeeds")
        return events[-1].message

    # --- karpy's ConsolidationOptimizer gate (karpy/disruption/optimizer.py) -------------------
    def _optimizer(self, snapshot: ClusterSnapshot, events: list[Event]) -> tuple[Command | None, bool]:
        if not snapshot.feature_gates.get(optimizer.GATE, False):
            return None, False
        cands = [c for c in self._candidates(snapshot, GRACEFUL, events) if self._consolidation_filter(c, events)]
        if not cands:
            return None, False
        budgets = self._budget_events(snapshot, UNDERUTILIZED, events)
        constrained = any(budgets.get(c.node.nodepool or "", 0) <= 0 for c in cands)
        if self.repack_memo is None:
            self.repack_memo = optimizer.RepackMemo()
        found = optimizer.propose(snapshot, cands, budgets, self.repack_memo, simulate)
        if found is None:
            return None, constrained
        cmd = Command(UNDERUTILIZED, "optimizer", found.candidates, list(found.replacements), savings=found.savings,
                      results=found.results, pinned=found.pinned)
        ok, _ = self._balanced_ok(snapshot, cmd, events)
        return (cmd if ok else None), constrained

    # --- multi-node ---------------------------------------------------------------------
    def _multi(self, snapshot: ClusterSnapshot, events: list[Event]) -> tuple[Command | None, bool]:
        cands = [c for c in self._candidates(snapshot, GRACEFUL, events) if self._consolidation_filter(c, events)]
        self._eligible["underutilized"] = len(cands)
        if len(cands) < 2:
            return None, False
        budgets = self._budget_events(snapshot, UNDERUTILIZED, events)
        disruptable, constrained = _take_within_budgets(sort_for_consolidation(cands), budgets)
        if len(disruptable) < 2:
            return None, constrained
        max_parallel = min(len(disruptable), MULTI_NODE_MAX)
        lo, hi = 1, (len(disruptable) - 1 if len(disruptable) <= max_parallel else max_parallel)
        best: Command | None = None
        best_scores: dict | None = None
        deadline = None if self.clock is None else self.clock() + self.multi_node_timeout
        while lo <= hi:
            if deadline is not None and self.clock() > deadline:  # as upstream: the last batch found stands
                self.timeouts["multi"] = self.timeouts.get("multi", 0) + 1
                break
            mid = (lo + hi) // 2
            batch = disruptable[: mid + 1]
            cmd = self.compute_consolidation(snapshot, batch, None, "multi")
            ok = cmd is not None
            if ok and cmd.replacements:
                ok = self._filter_same_type(cmd)
            if ok:
                ok, scores = self._balanced_ok(snapshot, cmd, events)
                if ok and scores is not None:
                    best_scores = scores
            if ok:
                best = cmd
                lo = mid + 1
            else:
                hi = mid - 1
        if best is not None and best_scores:
            for np_name in dict.fromkeys(c.node.nodepool or "" for c in best.candidates):
                result = best_scores.get(np_name)
                if result is not None and result.approved:
                    events.append(Event("NodePool", np_name, "ConsolidationApproved", result.message()))
        return best, constrained

    def _filter_same_type(self, cmd: Command) -> bool:
        """Never replace several nodes by one of a type being removed: deleting the others is cheaper."""
        own: dict[str, float] = {}
        for c in cmd.candidates:
            it = c.node.instance_type
            if it is None:
                continue
            own[it.name] = min(own.get(it.name, float("inf")), c.price)
        rep = cmd.replacements[0]
        max_price = min((own[it.name] for it in rep.instance_types if it.name in own), default=float("inf"))
        rkey = _price_key(rep.requirements)
        types = [it for it in rep.instance_types if worst_launch_price(it, rep.requirements, rkey) < max_price]
        if not types or min_values_short(types, rep.requirements) is not None:
            return False
        if len(types) != len(rep.instance_types):
            reqs = rep.requirements.copy()
            reqs._reqs[LABEL_INSTANCE_TYPE] = _instance_types_req(reqs, types)
            cmd.replacements = [NewNodeClaim(rep.template, rep.hostname, reqs, types, rep.pods, rep.requests)]
        return True

    # --- single-node --------------------------------------------------------------------
    def _single(self, snapshot: ClusterSnapshot, events: list[Event]) -> tuple[Command | None, bool]:
        cands = [c for c in self._candidates(snapshot, GRACEFUL, events) if self._consolidation_filter(c, events)]
        self._eligible["underutilized"] = len(cands)
        if not cands:
            return None, False
        budgets = self._budget_events(snapshot, UNDERUTILIZED, events)
        constrained = False
        order = _interleave_by_nodepool(sort_for_consolidation(cands), self.unseen_nodepools)
        unseen = {c.node.nodepool or "" for c in order}
        deadline = None if self.clock is None else self.clock() + self.single_node_timeout
        for c in order:
            if deadline is not None and self.clock() > deadline:  # abandoned, as upstream, with nothing to do
                self.timeouts["single"] = self.timeouts.get("single", 0) + 1
                self.unseen_nodepools = unseen
                return None, True
            unseen.discard(c.node.nodepool or "")
            if budgets.get(c.node.nodepool, 0) <= 0:
                constrained = True
                continue
            if not balanced.can_pass_threshold(c, self._totals(snapshot, events)):
                continue  # not even deleting it outright would be worth its disruption
            cmd = self.compute_consolidation(snapshot, [c], events, "single")
            if cmd is None:
                continue
            ok, scores = self._balanced_ok(snapshot, cmd, events)
            if not ok:
                continue
            result = (scores or {}).get(c.node.nodepool or "")
            if result is not None:
                events.append(Event("Node", c.name, "ConsolidationApproved", result.message()))
            return cmd, constrained
        self.unseen_nodepools = unseen
        return None, constrained

    # --- Balanced policy ------------------------------------------------------------------
    def _totals(self, snapshot: ClusterSnapshot, events: list[Event]) -> dict[str, balanced.NodePoolTotals]:
        """The NodePools' totals for Balanced scoring, from every candidate before the consolidation filter."""
        memo = snapshot.__dict__.setdefault("_balanced_totals", {})
        if "totals" not in memo:
            memo["totals"] = balanced.nodepool_totals(self._candidates(snapshot, GRACEFUL, events), snapshot.nodes)
        return memo["totals"]

    def _balanced_ok(self, snapshot: ClusterSnapshot, cmd: Command, events: list[Event]) -> tuple[bool, dict | None]:
        """consolidationPolicy Balanced: is the saving worth the disruption in every Balanced NodePool?"""
        return balanced.evaluate_move(cmd.candidates, cmd.savings, self._totals(snapshot, events))

    # --- validation ---------------------------------------------------------------------
    def validate(self, snapshot: ClusterSnapshot, cmd: Command) -> tuple[Command | None, str | None]:
        """Re-check a command after the validation wait: None and why when it no longer holds.
        :attr:`failed_validations` is set to the candidates rejected, as upstream counts them: every candidate
        when none is left (emptiness) or any changed, was nominated or is out of budget (consolidation); each
        candidate nominated or out of budget (emptiness); none when only the scheduling simulation differs."""
        events: list[Event] = []
        self.failed_validations = 0
        if cmd.method == "emptiness":
            cands = {c.name: c for c in self._candidates(snapshot, GRACEFUL, events) if self._empty_filter(c, events)}
            budgets = budget_mapping(snapshot.nodepools, [n for n in snapshot.nodes if n.managed], EMPTY, snapshot.now)
            kept = []
            why = "churn"
            if not any(c.name in cands for c in cmd.candidates):
                self.failed_validations = len(cmd.candidates)
            for c in cmd.candidates:
                fresh = cands.get(c.name)
                if fresh is None:
                    continue
                if fresh.node.nominated or budgets.get(fresh.node.nodepool, 0) <= 0:
                    why = "budget"
                    self.failed_validations += 1
                    continue
                budgets[fresh.node.nodepool] -= 1
                kept.append(fresh)
            if not kept:
                return None, why
            return Command(EMPTY, "emptiness", kept, [], savings=sum(c.price for c in kept)), None
        if cmd.method in ("multi", "single", "optimizer"):
            cands = {c.name: c for c in self._candidates(snapshot, GRACEFUL, events) if self._consolidation_filter(c, events)}
            fresh = [cands.get(c.name) for c in cmd.candidates]
            if any(f is None for f in fresh):
                self.failed_validations = len(cmd.candidates)
                return None, "churn"
            budgets = budget_mapping(snapshot.nodepools, [n for n in snapshot.nodes if n.managed], UNDERUTILIZED, snapshot.now)
            for f in fresh:
                if f.node.nominated or budgets.get(f.node.nodepool, 0) <= 0:
                    self.failed_validations = len(cmd.candidates)
                    return None, "budget"
                budgets[f.node.nodepool] -= 1
            if cmd.pinned:  # a re-packing: its plan must still hold as it was made
                if not optimizer.revalidate(snapshot, fresh, cmd.replacements):
                    return None, "scheduling"
                return Command(UNDERUTILIZED, "optimizer", fresh, list(cmd.replacements), savings=cmd.savings,
                               pinned=True), None
            sim = simulate(snapshot, fresh, consolidation=True, refine=cmd.method == "optimizer")
            if not sim.ok:
                return None, "scheduling"
            if cmd.method == "optimizer":
                reps, savings = optimizer.evaluate(fresh, sim.results)
                if not optimizer.worth_it(fresh, savings) or savings + 1e-9 < cmd.savings * 0.5:
                    return None, "scheduling"
                return Command(UNDERUTILIZED, "optimizer", fresh, reps, savings=savings, results=sim.results), None
            new = sim.results.new_nodeclaims
            if bool(new) != bool(cmd.replacements):
                return None, "scheduling"  # the simulation now gives a different answer
            if len(new) > 1:
                return None, "scheduling"
            if new and cmd.replacements:
                have = {it.name for it in new[0].instance_types}
                if not {it.name for it in cmd.replacements[0].instance_types} <= have:
                    return None, "scheduling"
            return cmd, None
        return cmd, None


def _take_within_budgets(cands: Sequence[Candidate], budgets: dict[str, int]) -> tuple[list[Candidate], bool]:
    """The candidates, in order, that their NodePools' budgets still allow (consuming them),
    and whether any was left out for lack of budget."""
    kept, constrained = [], False
    for c in cands:
        if budgets.get(c.node.nodepool, 0) <= 0:
            constrained = True
            continue
        budgets[c.node.nodepool] -= 1
        kept.append(c)
    return kept, constrained


def _interleave_by_nodepool(cands: list[Candidate], first: set[str] | frozenset[str] = frozenset()) -> list[Candidate]:
    """Take NodePools in turn, so one large NodePool does not starve the others; ``first``: NodePools a timed-out
    pass did not reach, which take their turn before the others."""
    groups: dict[str, list[Candidate]] = {}
    for c in cands:
        groups.setdefault(c.node.nodepool or "", []).append(c)
    out = []
    depth = max((len(g) for g in groups.values()), default=0)
    pools = sorted(groups, key=lambda name: (name not in first, name))
    for i in range(depth):
        for name in pools:
            if i < len(groups[name]):
                out.append(groups[name][i])
    return out
