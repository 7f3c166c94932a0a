"""The disruption controller and its orchestration queue (upstream ``pkg/controllers/disruption``).

Every 10 seconds the controller takes a snapshot of the cluster state and asks
the pure engine (:mod:`karpy.disruption.methods`) for a command: emptiness,
drift, multi-node and single-node consolidation, in that order, within the
NodePools' budgets. A consolidation or emptiness command is validated again
after 15 seconds (upstream's validation wait) before it starts; drift starts
at once.

Starting a command (the queue): taint the candidates
``karpenter.sh/disrupted:NoSchedule``, set their ``DisruptionReason``
condition, create the replacement NodeClaims, mark the candidates for deletion
in the cluster state, and wait. Once every replacement is initialized the
candidates are deleted (their termination drains them); if a replacement fails
to launch, is deleted, or is not initialized within 10 minutes, the command is
rolled back: taint and condition removed, candidates unmarked. A re-packing
of karpy's ConsolidationOptimizer gate is handed over one replacement at a
time before its candidates are deleted (``Orchestrator._hand_over``).

Every command is logged ("disrupting node(s)") with its reason, method,
candidates, replacements and the budget in force, and its outcome.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from .. import resources as res
from ..cloudprovider.types import LABEL_INSTANCE_TYPE, InstanceType
from ..disruption.budgets import REASONS, allowed_disruptions, window_changes_at
from ..disruption.methods import (
    POLL_PERIOD,
    VALIDATION_DELAY,
    Command,
    DisruptionEngine,
    Event,
    StaticReplacement,
    is_static,
)
from ..disruption import optimizer
from ..disruption.state import DISRUPTED_TAINT, ClusterSnapshot, NodeState
from ..kube import errors as E
from ..kube.port import DELETED
from ..metrics import CONSOLIDATION_TYPES
from ..kube.times import fmt_time, parse_time
from ..runtime.events import ref
from ..runtime.manager import condition, deleting, is_true
from ..state import pods as P
from ..state.cluster import StateNode
from .env import Env
from .lifecycle import clear_condition, set_condition
from .provisioning import Provisioner
from .static import node_counts
from .termination import evict

REPLACEMENT_TIMEOUT = 600.0  # a command whose replacements do not initialize is abandoned
WAVE_TIMEOUT = 60.0  # a re-packing's hand-over moves to its next replacement after this, settled or not
WAVE_POLL = 1.0  # and looks whether the pods are back this often
PLAN_WINDOW = 2 * REPLACEMENT_TIMEOUT  # how long a re-packing's placement plan holds room for its pods' classes
# how long upstream's recorder keeps a repeat of each event away; the Node and NodeClaim events of the
# disruption controller are repeats whatever their message (upstream's DedupeValues name only the object), a
# NodePool's DisruptionBlocked only for the same disruption reason (its message names the reason), for a minute
EVENT_DEDUPE = {"Unconsolidatable": 900.0, "DisruptionBlocked": 120.0, "FailedDraining": 120.0}
NODEPOOL_BLOCKED_DEDUPE = 60.0
FORCED_RECHECK = 300.0


@dataclass(eq=False)
class Running:
    """A command in the orchestration queue."""

    id: int
    command: Command
    candidates: list[StateNode]
    claims: list[str]
    replacements: list[str]
    started: float
    nodepool: str
    budget: dict
    cost_before: float
    initialized: set[str] = field(default_factory=set)
    # a re-packing's hand-over (karpy's ConsolidationOptimizer): per replacement, the pods planned on it; the
    # replacement being filled now (-1: not begun), since when, and the pods evicted for it
    waves: list[tuple[str, list[str]]] = field(default_factory=list)
    wave: int = -1
    wave_at: float = 0.0
    evicted: list[str] = field(default_factory=list)
    expect: Counter = field(default_factory=Counter)  # the evicted pods' workloads: their running pods before


class Disruption:
    name = "disruption"
    periodic = True  # polls every POLL_PERIOD; see quiet_until()
    priority = 1  # at equal times, the disruption pass runs after everything else has settled

    def __init__(self, env: Env, provisioner: Provisioner):
        self.env = env
        self.provisioner = provisioner
        # the engine reads the clock for single-node consolidation's timeout (a simulated clock stands still)
        self.engine = DisruptionEngine(clock=env.now)
        self.validating: Command | None = None
        self.validate_at: float | None = None
        self.queue: dict[int, Running] = {}
        self._ids = itertools.count(1)
        self._last_key: tuple | None = None
        self._key_base: tuple | None = None
        self._node_states: dict[str, tuple] = {}  # StateNode key -> (what it was built from, NodeState)
        self._types: dict[str, tuple[tuple, dict[str, InstanceType]]] = {}
        self.orchestrator = Orchestrator(self)
        self.started = False

    def setup(self, mgr) -> None:
        mgr.watch("NodeClaim", self._on_claim)

    def _on_claim(self, etype: str, obj: dict, old: dict | None) -> None:
        if not self.started and etype != DELETED:
            self.started = True
            self.env.mgr.requeue_after(self, "", POLL_PERIOD)

    def busy(self) -> bool:
        return self.validating is not None or bool(self.queue)

    # --- the loop ------------------------------------------------------------------------------
    def reconcile(self, key: Any) -> float | None:
        env = self.env
        if self.validating is not None:
            if self.validate_at is not None and env.now() + 1e-9 < self.validate_at:
                return self.validate_at - env.now()
            self._validate()
            if self.validating is not None:  # the pass went on to single-node consolidation
                return max(self.validate_at - env.now(), 0.0)
            return POLL_PERIOD
        c = env.cluster
        if not c.by_claim:
            self.started = False
            return None
        if not c.synced():
            return 1.0  # as upstream: no disruption decision while a NodeClaim is not launched yet
        self._remove_stale_taints()
        key = self._key()
        if key == self._last_key:
            return POLL_PERIOD  # nothing the methods look at has changed since they last found nothing
        snap = self.snapshot()
        step = self.engine.step(snap, hash(key))
        self._eligible(step.eligible)
        self._count_timeouts()
        for e in step.events:
            self.emit(e)
        cmd = step.command
        if cmd is None:
            self._last_key = key
            return POLL_PERIOD
        self._last_key = None
        if cmd.method in ("emptiness", "multi", "single", "optimizer"):
            self.validating = cmd
            self.validate_at = env.now() + VALIDATION_DELAY
            return VALIDATION_DELAY
        self.start(cmd)
        return POLL_PERIOD

    def _validate(self) -> None:
        cmd, self.validating, self.validate_at = self.validating, None, None
        if cmd is None:
            return
        snap = self.snapshot()
        fresh, why = self.engine.validate(snap, cmd)
        if self.engine.failed_validations:
            self.env.metrics.failed_validations.labels(CONSOLIDATION_TYPES.get(cmd.method, "")).inc(
                self.engine.failed_validations)
        if fresh is None:
            if cmd.method == "single":
                for cand in cmd.candidates:
                    self.emit_node(cand.name, "ConsolidationRejected",
                                   f"Consolidation rejected: {cmd.describe()}, reason: {why} (savings: ${cmd.savings:.2f})")
            self.env.log.info("abandoning disruption command, validation failed", controller=self.name,
                              command=cmd.describe(), reason=why)
            if cmd.method == "multi":
                # as upstream's pass: a multi-node command invalidated by the wait leaves the pass to
                # single-node consolidation, computed now and validated after its own wait
                step = self.engine.step(snap, after="multi")
                self._eligible(step.eligible)
                self._count_timeouts()
                for e in step.events:
                    self.emit(e)
                nxt = step.command
                if nxt is not None:
                    self._last_key = None
                    self.validating = nxt
                    self.validate_at = self.env.now() + VALIDATION_DELAY
            return
        self.start(fresh)

    def _count_timeouts(self) -> None:
        """karpenter_voluntary_disruption_consolidation_timeouts_total, and upstream's log line."""
        for ctype, n in self.engine.timeouts.items():
            self.env.metrics.consolidation_timeouts.labels(ctype).inc(n)
            self.env.log.debug("abandoning single-node consolidation due to timeout" if ctype == "single" else
                               "stopping multi-node consolidation after timeout", controller=self.name)
        self.engine.timeouts.clear()

    def _eligible(self, counts: dict[str, int]) -> None:
        gauge = self.env.metrics.eligible_nodes
        for reason, n in counts.items():
            gauge.labels(reason).set(n)

    def _remove_stale_taints(self) -> None:
        """Nodes that carry the disrupted taint but no command or deletion holds any more (upstream
        removes the taint and the DisruptionReason condition at the start of each pass)."""
        env = self.env
        held = {id(sn) for r in self.queue.values() for sn in r.candidates}
        for name in sorted(env.cluster.tainted):
            sn = env.cluster.by_node.get(name)
            if sn is None or sn.claim is None or sn.node is None or id(sn) in held or sn.marked or sn.deleting():
                continue
            self.orchestrator.untaint(sn)

    def _key(self) -> tuple:
        """What the disruption methods depend on: cluster changes, nodes becoming consolidatable,
        the budgets' allowances (schedules open and close), do-not-disrupt durations, and a forced
        re-check every 5 minutes, as upstream."""
        env = self.env
        c = env.cluster
        now = env.now()
        if self._key_base is None or self._key_base[0] != c.version:
            # per cluster version: nodes per NodePool, and when each node becomes consolidatable
            counts: dict[str, int] = {}
            times: list[float] = []
            for sn in c.nodes.values():
                if sn.claim is None or not sn.initialized() or sn.deleting():
                    continue
                np = sn.nodepool or ""
                counts[np] = counts.get(np, 0) + 1
                at = _consolidatable_at(sn, c.nodepools.get(np))
                if at is not None:
                    times.append(at)
            times.sort()
            self._key_base = (c.version, counts, times)
        _, counts, times = self._key_base
        consolidatable = bisect.bisect_right(times, now + 1e-9)
        budgets = []
        for name in sorted(c.nodepools):
            budgets.append(tuple(allowed_disruptions(c.nodepools[name], counts.get(name, 0), r, now) for r in REASONS))
        guarded = []
        for pk in c.do_not_disrupt:
            e = c.pods.get(pk)
            if e is not None and e.node and e.active and not e.daemon and c.pod_state(e).do_not_disrupt(now):
                guarded.append(e.key)
        return (c.version, consolidatable, tuple(budgets), tuple(sorted(guarded)), int(now // FORCED_RECHECK))

    def quiet_until(self) -> float:
        """Until when, if nothing else happens in the cluster, every disruption pass would decide as the
        last one did (found nothing): the next instant at which what the methods look at changes through
        the passage of time alone (a node becomes consolidatable, a budget's schedule window opens or
        closes, a do-not-disrupt duration runs out), or infinity. Now, when a pass has not yet looked at
        the present state or a command is under way. A simulation may jump the clock to that instant:
        the periodic re-checks in between would find the same nothing."""
        c = self.env.cluster
        now = self.env.now()
        if self.validating is not None or self.queue:
            return now
        if not c.by_claim:
            return float("inf")
        if self._last_key is None or self._last_key[:-1] != self._key()[:-1]:
            return now
        _, _, times = self._key_base if self._key_base is not None else (None, None, [])
        found: list[float] = []
        i = bisect.bisect_right(times, now + 1e-9)
        if i < len(times):
            found.append(times[i])
        for np in c.nodepools.values():
            for b in ((np.get("spec") or {}).get("disruption") or {}).get("budgets") or []:
                t = window_changes_at(b, now)
                if t is not None:
                    found.append(t)
        for pk in c.do_not_disrupt:
            e = c.pods.get(pk)
            if e is not None and e.node and e.active:
                t = c.pod_state(e).do_not_disrupt_until()
                if t is not None and now < t < float("inf"):
                    found.append(t)
        return min(found, default=float("inf"))

    # --- the snapshot ---------------------------------------------------------------------------
    def instance_types(self, nodepool_name: str) -> dict[str, InstanceType]:
        c = self.env.cluster
        np = c.nodepools.get(nodepool_name)
        if np is None:
            return {}
        nodeclass, _ = c.nodeclass_for(np)
        key = (np["metadata"].get("resourceVersion"), (nodeclass or {}).get("metadata", {}).get("resourceVersion"),
               self.env.cloud.ice_key() if hasattr(self.env.cloud, "ice_key") else ())
        hit = self._types.get(nodepool_name)
        if hit is not None and hit[0] == key:
            return hit[1]
        try:
            types = {it.name: it for it in self.env.cloud.get_instance_types(np, nodeclass)}
        except ValueError:
            types = {}
        self._types[nodepool_name] = (key, types)
        return types

    def snapshot(self) -> ClusterSnapshot:
        env = self.env
        c = env.cluster
        now = env.now()
        templates, _, _ = self.provisioner.templates()
        existing = {e.name: e for e in self.provisioner.existing()}
        queued = {name for r in self.queue.values() for name in r.claims}
        if self.validating is not None:
            for cand in self.validating.candidates:
                sn = c.state_node_by_name(cand.name)
                if sn is not None and sn.claim_name:
                    queued.add(sn.claim_name)
        nominated_targets = set()
        for pk, target in c.nominations.items():
            e = c.pods.get(pk)
            if e is not None and not e.node:
                nominated_targets.add(target)
        for name in self.orchestrator.handing_over():  # a re-packing's replacements waiting for their pods
            sn = c.by_claim.get(name)
            if sn is not None:
                nominated_targets.add(sn.key)
        nodes: list[NodeState] = []
        ordered = sorted(c.nodes.values(), key=_created_order)
        cache = self._node_states
        fresh: dict[str, tuple] = {}
        # per NodePool, once a pass (not once a node): its instance types, and its consolidateAfter in seconds
        catalogs: dict[str, dict[str, InstanceType]] = {}
        afters: dict[str, float | None] = {}

        def types_of(name: str) -> dict[str, InstanceType]:
            hit = catalogs.get(name)
            if hit is None:
                hit = catalogs[name] = self.instance_types(name)
            return hit

        def after_of(name: str, np: dict | None) -> float | None:
            if np is None:
                return None
            if name not in afters:
                afters[name] = _after_seconds(np)
            return afters[name]

        for sn in ordered:
            if sn.node is None:
                continue
            if sn.name not in existing:
                continue
            leaving = sn.marked or sn.deleting()
            npname = sn.nodepool or ""
            np = c.nodepools.get(npname) if sn.claim is not None else None
            types = types_of(npname) if sn.claim is not None else None
            it = types.get(sn.labels().get(LABEL_INSTANCE_TYPE, "")) if types is not None else None
            # what the node's state is built from: its NodePool only through consolidateAfter (a NodePool's
            # status changes with every node it gains or loses), its catalog only through its own instance type
            ck = (sn.version, sn.claim is None, id(sn.node), id(existing[sn.name]), sn.key in nominated_targets,
                  bool(sn.claim_name and sn.claim_name in queued), np is None, _consolidate_after(np), types is None,
                  id(it))
            hit = None if leaving else cache.get(sn.key)
            after_s = after_of(npname, np)
            if hit is not None and hit[0] == ck:
                st = hit[1]
                st.consolidatable, st.under_consolidate_after = _consolidation_clock(sn, after_s, now)
                fresh[sn.key] = hit
                nodes.append(st)
                continue
            pods = []
            for e in sn.pods.values():
                if not e.active:
                    continue
                target = c.nominations.get(e.key)
                if (sn.marked or sn.deleting()) and target is not None and target != sn.key and c.live_target(target):
                    continue  # already planned on (and counted against) its replacement
                pods.append(e)
            after = ((np or {}).get("spec") or {}).get("disruption", {}).get("consolidateAfter", "0s") if np else None
            st = c.node_state(sn, pods, now, after, sn.key in nominated_targets, bool(sn.claim_name and sn.claim_name in queued),
                              existing[sn.name])
            st.instance_type = it if sn.claim is not None else None
            st.price = offering_price(st.instance_type, sn.labels(), st.price)
            st.consolidatable, st.under_consolidate_after = _consolidation_clock(sn, after_s, now)
            if not leaving:
                fresh[sn.key] = (ck, st)
            nodes.append(st)
        self._node_states = fresh
        for st in nodes:
            st.buffer_pods = self.provisioner.buffer_pods.get(st.name, 0)
        # launched NodeClaims that have not registered yet are capacity too (never candidates)
        for sn in ordered:
            if sn.node is not None or sn.claim is None or not sn.launched() or sn.deleting() or sn.name not in existing:
                continue
            it = types_of(sn.nodepool or "").get(sn.labels().get(LABEL_INSTANCE_TYPE, ""))
            nodes.append(NodeState(
                name=sn.name, nodeclaim=sn.claim_name, nodepool=sn.nodepool, labels=existing[sn.name].labels,
                instance_type=it, price=offering_price(it, sn.labels(), sn.price()), pods=[], existing=existing[sn.name], initialized=False, ready=False, registered=False,
                marked_for_deletion=sn.marked,
            ))
        pending, _ = self.provisioner.provisionable(reserve_nominated=True)
        return ClusterSnapshot(
            now=now, nodes=nodes, nodepools=dict(c.nodepools), templates=templates,
            pending_pods=[c.pod_info(e) for e in pending], pdbs=c.pdb_states(),
            feature_gates=env.settings.feature_gates,
            respect_preferences=env.settings.respect_preferences,
            ignore_dra=env.settings.ignore_dra_requests,
            min_values_best_effort=env.settings.min_values_best_effort,
            nodepool_counts={name: node_counts(c, name) for name, np in c.nodepools.items() if is_static(np)},
        )

    # --- events ---------------------------------------------------------------------------------
    def emit(self, e: Event) -> None:
        if e.kind == "Node":
            self.emit_node(e.name, e.reason, e.lazy_message, e.etype, dedupe=True)
        else:
            obj = self.env.cluster.nodepools.get(e.name) if e.kind == "NodePool" else None
            blocked = e.kind == "NodePool" and e.reason == "DisruptionBlocked"
            self.env.recorder.publish(ref(obj, kind=e.kind, name=e.name), e.reason, e.message, e.etype,
                                      dedupe=NODEPOOL_BLOCKED_DEDUPE if blocked else EVENT_DEDUPE.get(e.reason, 120.0),
                                      dedupe_on=None if blocked else ())

    def emit_node(self, name: str, reason: str, message: str | Callable[[], str], etype: str = "Normal",
                  dedupe: bool = False) -> None:
        """The event on the node and its NodeClaim; ``message`` may be a function that works it out, called only
        if the event is published (a repeat within the window is dropped whatever its message)."""
        c = self.env.cluster
        rec = self.env.recorder
        sn = c.state_node_by_name(name)
        window = EVENT_DEDUPE.get(reason, 120.0) if dedupe else None
        node = sn.node if sn is not None else None
        targets = [("Node", name, lambda: ref(node, kind="Node", name=name))]
        if sn is not None and sn.claim is not None:
            targets.append(("NodeClaim", sn.claim_name or "", lambda: ref(sn.claim)))
        for kind, obj_name, involved in targets:
            if window and rec.suppressed(kind, obj_name, reason, "", window, dedupe_on=()):
                continue
            message = message if isinstance(message, str) else message()
            rec.publish(involved(), reason, message, etype, dedupe=window, dedupe_on=())

    # --- starting a command --------------------------------------------------------------------
    def start(self, cmd: Command) -> None:
        self.orchestrator.start(cmd)


class Orchestrator:
    """The orchestration queue: replacements first, then the candidates go; rollback on failure."""

    name = "disruption.queue"

    def __init__(self, disruption: Disruption):
        self.d = disruption
        self.env = disruption.env

    def setup(self, mgr) -> None:
        mgr.watch("NodeClaim", self._on_claim)

    def _on_claim(self, etype: str, obj: dict, old: dict | None) -> None:
        name = obj["metadata"]["name"]
        for r in self.d.queue.values():
            if name in r.replacements:
                self.env.mgr.enqueue(self, r.id)

    def start(self, cmd: Command) -> None:
        env = self.env
        c = env.cluster
        now = env.now()
        cands: list[StateNode] = []
        for cand in cmd.candidates:
            sn = c.state_node_by_name(cand.name)
            if sn is None or sn.claim is None or sn.marked or sn.deleting():
                return
            cands.append(sn)
        nodepool = cands[0].nodepool or ""
        budget = self._budget(nodepool, cmd.reason)
        before = cost_now(c)
        for sn in cands:
            self.taint(sn)
            st = dict(sn.claim.get("status") or {})
            set_condition(st, "DisruptionReason", "True", now, reason=cmd.reason, message=cmd.reason)
            env.api.patch("NodeClaim", sn.claim_name, {"status": st}, subresource="status")
            if cmd.replacements or cmd.reason != "Empty":
                under = cmd.reason == "Underutilized"
                self.d.emit_node(sn.name, "ConsolidationCandidate" if under else "DisruptionStarted",
                                 f"{'Consolidation candidate' if under else 'Disrupting'}: {cmd.describe()}"
                                 + (f" (savings: ${cmd.savings:.2f})" if under else ""))
        env.mgr.pump()
        replacements = []
        for rep in cmd.replacements:
            np = c.nodepools.get(rep.nodepool if isinstance(rep, StaticReplacement) else rep.template.nodepool)
            nodeclass, _ = c.nodeclass_for(np) if np is not None else (None, None)
            if np is None or nodeclass is None:
                continue
            if isinstance(rep, StaticReplacement):
                created = self.d.provisioner.create_static_nodeclaim(np, nodeclass, reason=cmd.reason.lower())
            else:
                created = self.d.provisioner.create_nodeclaim(rep, np, nodeclass, nominate=False, reason=cmd.reason.lower())
            name = created["metadata"]["name"]
            replacements.append(name)
            if cmd.pinned and not isinstance(rep, StaticReplacement):  # the re-packing's plan for the pods' classes
                c.placement_plans[name] = (Counter(optimizer.slot_key(p) for p in rep.pods), now + PLAN_WINDOW,
                                             frozenset(p.key for p in rep.pods))
            env.recorder.publish(ref(created), "DisruptionLaunching", f"Launching NodeClaim: {cmd.reason}")
            sn = c.by_claim.get(name)
            if sn is not None:
                # the candidates' pods are expected on the replacement
                window = max(2 * env.settings.batch_max, 10.0)
                for p in rep.pods:
                    if p.key in c.pods:
                        c.nominate(p.key, sn.key, window)
        c.mark_for_deletion(cands)
        r = Running(next(self.d._ids), cmd, cands, [sn.claim_name for sn in cands], replacements, now, nodepool,
                    budget, before)
        if cmd.pinned:
            r.waves = [(name, [p.key for p in rep.pods]) for name, rep in zip(replacements, cmd.replacements)]
        self.d.queue[r.id] = r
        m = env.metrics  # as upstream: counted once the command is in the queue
        decision, reason, ctype = cmd.decision, cmd.reason.lower(), CONSOLIDATION_TYPES.get(cmd.method, "")
        for np_name in dict.fromkeys(sn.nodepool or "" for sn in cands):
            m.decisions_by_nodepool.labels(np_name, decision, reason, ctype).inc()
        m.decisions.labels(decision, reason, ctype).inc()
        env.log.info("disrupting node(s)", controller=self.d.name, command=cmd.describe(), reason=cmd.reason,
                     method=cmd.method, nodepool=nodepool, candidates=list(r.claims), replacements=list(replacements),
                     budget=budget, decision=cmd.decision, savings=round(cmd.savings, 6),
                     **{"command-id": r.id, "cost-before": before})
        env.mgr.enqueue(self, r.id)

    def _budget(self, nodepool: str, reason: str) -> dict:
        """The NodePool's allowance for this reason and its nodes already being disrupted, right now."""
        c = self.env.cluster
        now = self.env.now()
        total = disrupting = 0
        for sn in c.nodes.values():
            if sn.claim is None or sn.nodepool != nodepool or not sn.initialized():
                continue
            total += 1
            if sn.marked or sn.deleting() or not sn.ready():
                disrupting += 1
        np = c.nodepools.get(nodepool)
        allowed = allowed_disruptions(np, total, reason, now) if np is not None else 0
        return {"allowed": allowed, "disrupting": disrupting}

    def reconcile(self, cid: int) -> float | None:
        env = self.env
        c = env.cluster
        r = self.d.queue.get(cid)
        if r is None:
            return None
        failed = None
        for name in r.replacements:
            sn = c.by_claim.get(name)
            claim = sn.claim if sn is not None else None
            if claim is None or deleting(claim):
                failed = "replacement was deleted" if claim is None else "replacement is being deleted"
                break
            if is_true(claim, "Initialized"):
                r.initialized.add(name)
        if failed is None and env.now() - r.started > REPLACEMENT_TIMEOUT and len(r.initialized) < len(r.replacements):
            failed = "command reached timeout"
        if failed is not None:
            self._rollback(r, failed)
            return None
        if len(r.initialized) < len(r.replacements):
            for name in r.replacements:
                if name not in r.initialized:
                    sn = c.by_claim.get(name)
                    env.recorder.publish(ref(sn.claim if sn else None, kind="NodeClaim", name=name),
                                         "DisruptionWaitingReadiness", "Waiting on readiness to continue disruption",
                                         dedupe=120.0)
            return 10.0
        if r.waves and self._hand_over(r):
            return WAVE_POLL
        consolidation = r.command.method in CONSOLIDATION_TYPES
        for sn, cand in zip(r.candidates, r.command.candidates):
            if sn.claim is None or deleting(sn.claim):
                continue
            self.d.emit_node(sn.name, "DisruptionTerminating", f"Disrupting Node: {r.command.reason}")
            try:
                env.api.delete("NodeClaim", sn.claim_name)
            except E.NotFound:
                continue
            policy = ((cand.nodepool.get("spec") or {}).get("disruption") or {}).get("consolidationPolicy") or \
                "WhenEmptyOrUnderutilized" if consolidation else ""
            env.metrics.disrupted(sn.claim, r.command.reason, len(cand.reschedulable), policy)
        del self.d.queue[cid]
        env.log.info("command succeeded", controller=self.name, **{"command-id": r.id}, outcome="succeeded")
        return None

    # --- karpy's ConsolidationOptimizer: a re-packing handed over one replacement at a time ------------------
    #
    # A re-packing plans which pods each replacement holds, and the replacements are filled to the brim. Were every
    # candidate drained at once, the scheduler would put the re-created pods wherever there is room first (in
    # the order their workloads re-create them), and the pods of the last workloads would find the room planned
    # for them taken. So, once every replacement is initialized, they are cordoned, and opened one at a time: each
    # is uncordoned and the very pods planned on it are evicted from the (tainted) candidates. Their re-created
    # pods then have room on that replacement whatever the order they come in and wherever else the scheduler
    # puts some of them; the next replacement opens once they are bound. The candidates are deleted after the last.

    def _hand_over(self, r: Running) -> bool:
        """Go on with the hand-over; whether it is still under way."""
        env = self.env
        c = env.cluster
        now = env.now()
        if r.wave < 0:
            for name, _ in r.waves:
                self._cordon(name, True)
        elif r.wave < len(r.waves) and now - r.wave_at < WAVE_TIMEOUT and not self._wave_settled(r):
            return True  # the workloads re-create the pods, and the scheduler binds them
        r.wave += 1
        if r.wave >= len(r.waves):
            for name, _ in r.waves:
                self._cordon(name, False)  # one the hand-over skipped (its pods gone already) included
            return False
        name, keys = r.waves[r.wave]
        self._cordon(name, False)
        r.wave_at = now
        r.evicted = []
        on = {sn.name for sn in r.candidates}
        moving = [c.pods[k] for k in keys if k in c.pods and c.pods[k].active and c.pods[k].node in on]
        # how many running pods each of their workloads has now: the wave is over once it has as many again
        owners = {o for o in (_owner(e) for e in moving) if o is not None}
        r.expect = Counter(o for o in (_owner(e) for e in c.pods.values() if e.active) if o in owners)
        for e in moving:
            # a pod a PodDisruptionBudget holds stays; the candidate's drain evicts it later
            if evict(env, e, r.command.reason, r.command.reason) is None:
                r.evicted.append(e.key)
        env.mgr.pump()
        return True

    def _wave_settled(self, r: Running) -> bool:
        """Are the pods evicted for the replacement being filled gone, re-created by their workloads, and bound?"""
        c = self.env.cluster
        if any(k in c.pods and c.pods[k].active for k in r.evicted):
            return False
        placed: Counter = Counter()
        for e in c.pods.values():
            if not e.active:
                continue
            if not e.node and c.nominations.get(e.key) is None:
                return False  # (one the provisioner found a place for, a NodeClaim it launches, is not waited on)
            o = _owner(e) if r.expect else None
            if o in r.expect:
                placed[o] += 1
        return all(placed[o] >= k for o, k in r.expect.items())

    def _cordon(self, claim_name: str, on: bool) -> None:
        sn = self.env.cluster.by_claim.get(claim_name)
        node = sn.node if sn is not None else None
        if node is None or bool((node.get("spec") or {}).get("unschedulable")) == on:
            return
        try:
            self.env.api.patch("Node", node["metadata"]["name"], {"spec": {"unschedulable": on or None}})
        except E.NotFound:
            pass

    def handing_over(self) -> set[str]:
        """The replacements of re-packings still being handed over (not to be disrupted meanwhile)."""
        return {name for r in self.d.queue.values() if r.waves and r.wave < len(r.waves) for name, _ in r.waves}

    def _rollback(self, r: Running, why: str) -> None:
        env = self.env
        c = env.cluster
        for name, _ in r.waves:
            self._cordon(name, False)
        for sn in r.candidates:
            if sn.claim is None or deleting(sn.claim):
                continue
            self.untaint(sn)
        c.unmark_for_deletion([sn for sn in r.candidates])
        env.recorder.publish({"kind": "Karpenter", "name": "disruption"}, "DisruptionAbandoned",
                             f"abandoned {r.command.describe()}: {why}", "Warning")
        env.log.error("failed terminating nodes while executing a disruption command", controller=self.name,
                      **{"command-id": r.id}, outcome="abandoned", error=why)
        del self.d.queue[r.id]

    def taint(self, sn: StateNode) -> None:
        node = sn.node
        if node is None:
            return
        taints = list((node.get("spec") or {}).get("taints") or ())
        if any(t.get("key") == DISRUPTED_TAINT.key for t in taints):
            return
        taints.append(DISRUPTED_TAINT.to_obj())
        self.env.api.patch("Node", node["metadata"]["name"], {"spec": {"taints": taints}})

    def untaint(self, sn: StateNode) -> None:
        env = self.env
        node = sn.node
        if node is not None:
            taints = [t for t in (node.get("spec") or {}).get("taints") or () if t.get("key") != DISRUPTED_TAINT.key]
            if len(taints) != len((node.get("spec") or {}).get("taints") or ()):
                env.api.patch("Node", node["metadata"]["name"], {"spec": {"taints": taints}})
        if sn.claim is not None and condition(sn.claim, "DisruptionReason") is not None:
            st = dict(sn.claim.get("status") or {})
            if clear_condition(st, "DisruptionReason"):
                env.api.patch("NodeClaim", sn.claim_name, {"status": st}, subresource="status")


def _owner(e) -> tuple | None:
    """The workload that re-creates a pod (its controller and namespace), or None for a bare pod."""
    ctl = P.controller_of(e.obj)
    return None if ctl is None else (e.obj["metadata"].get("namespace", "default"), *ctl)


def offering_price(it: InstanceType | None, labels: dict, default: float) -> float:
    """The price of the offering a node runs on: its instance type's offering in its zone and capacity type."""
    if it is None:
        return default
    zone, ct = labels.get("topology.kubernetes.io/zone"), labels.get("karpenter.sh/capacity-type")
    prices = [o.price for o in it.offerings if o.zone == zone and o.capacity_type == ct]
    return min(prices) if prices else default


def cost_now(c) -> float:
    """The cluster's $/h: every launched NodeClaim that is not gone."""
    return sum(sn.price() for sn in c.nodes.values() if sn.claim is not None and sn.launched())


def _created_order(sn: StateNode) -> tuple:
    return ((sn.node or sn.claim or {}).get("metadata", {}).get("creationTimestamp") or "", sn.name)


def _consolidate_after(np: dict | None) -> Any:
    if np is None:
        return None
    return ((np.get("spec") or {}).get("disruption") or {}).get("consolidateAfter", "0s")


_BASES: dict[str, tuple[dict, float | None]] = {}


def _pod_event_base(sn: StateNode) -> float | None:
    """When the node's consolidateAfter clock started: its last pod event, else its initialization."""
    claim = sn.claim or {}
    status = claim.get("status")
    name = sn.claim_name or ""
    hit = _BASES.get(name)
    if hit is not None and hit[0] is status:
        return hit[1]
    if not is_true(claim, "Initialized"):
        base = None
    else:
        init = parse_time((condition(claim, "Initialized") or {}).get("lastTransitionTime")) or 0.0
        last = parse_time((status or {}).get("lastPodEventTime"))
        base = last if last is not None else init
    if len(_BASES) > 200_000:
        _BASES.clear()
    _BASES[name] = (status, base)  # type: ignore[assignment]
    return base


def _consolidatable_at(sn: StateNode, np: dict | None) -> float | None:
    after = _consolidate_after(np)
    if sn.claim is None or after in (None, "Never"):
        return None
    t0 = _pod_event_base(sn)
    return None if t0 is None else t0 + res.parse_duration(after)


def _after_seconds(np: dict | None) -> float | None:
    """A NodePool's consolidateAfter in seconds; None when it has none ("Never", or no NodePool)."""
    after = _consolidate_after(np)
    return None if after in (None, "Never") else res.parse_duration(after)


def _consolidation_clock(sn: StateNode, after: float | None, now: float) -> tuple[bool, bool]:
    """Whether the node is consolidatable now (consolidateAfter has passed since its last pod event, or since
    its initialization), and whether it is still within consolidateAfter (a non-zero one)."""
    if sn.claim is None or after is None:
        return False, False
    t0 = _pod_event_base(sn)
    if t0 is None:
        return False, False
    return now - t0 >= after, after > 0 and now - t0 < after
