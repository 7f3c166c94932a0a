"""The provisioner: pending pods in, NodeClaims out (upstream ``pkg/controllers/provisioning``).

* The pod trigger watches pods: a pod kube-scheduler marked unschedulable
  triggers the batcher, and keeps triggering every 10 s while it stays so.
  The node trigger does the same for nodes carrying the ``karpenter.sh/disrupted``
  taint (their pods need a new home).
* The batcher collects triggers until ``batchIdleDuration`` passes without a
  new pod, or ``batchMaxDuration`` after the first.
* The provisioner then runs the scheduling simulation over every pending pod
  and the pods of nodes being deleted, against the nodes that stay (their bound
  pods) and one template per NodePool, nominates pods to existing nodes and
  in-flight NodeClaims, and creates the new NodeClaims. As upstream, a
  nomination reserves nothing: a pod nominated to a NodeClaim still coming up
  is scheduled again in the next batch against what is bound, so a pod whose
  room kube-scheduler gave to another pod finds room on another in-flight
  NodeClaim instead of waiting for its own to initialize.

A solve whose inputs (the cluster state, the NodePools and NodeClasses, the
offerings known to be out of capacity, and the pods) are what a previous solve
that created nothing already saw is skipped: the engine would answer the same.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import resources as res
from ..api import labels as api_labels
from ..cloudprovider.kubelet_cel import KubeletExpressionError
from ..cloudprovider.overlay import overlay_annotations
from ..cloudprovider.types import LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_ZONE
from ..disruption import optimizer
from ..disruption.candidates import currently_reschedulable
from ..disruption.drift import HASH_VERSION, NODECLASS_HASH, NODEPOOL_HASH, NODEPOOL_HASH_VERSION, nodeclass_hash, nodepool_hash
from ..kube.port import DELETED
from ..provisioning.templates import build_template
from ..runtime.events import ref

# upstream's NodePool event and pod error when a NodePool's requirements leave no available instance type
NO_COMPATIBLE_INSTANCE_TYPES = "NoCompatibleInstanceTypes"
NO_COMPATIBLE_MESSAGE = "NodePool requirements filtered out all compatible available instance types"
FILTERED_OUT_ERROR = "nodepool requirements filtered out all available instance types"
from ..runtime.log import go_duration, pretty_slice
from ..scheduling.scheduler import CORE_WELL_KNOWN_LABELS, ExistingNode, NewNodeClaim, NodeClaimTemplate, Results, Scheduler
from ..scheduling.reservations import RESERVED_OFFERING_ERROR
from ..scheduling.dra import DRA_ERROR, DRA_SKIP_LOG
from ..scheduling.validation import AVOIDS_KARPENTER, RESTRICTED_LABEL_DOMAINS, pod_problem
from ..scheduling.volumes import has_volume_claims
from ..state import pods as P
from ..state.cluster import PodEntry, StateNode
from . import capacitybuffer
from .env import Env
from .nodepool import nodeclass_readiness
from ..runtime.manager import deleting

POD_REQUEUE = 10.0
PLAN_PATIENCE = 30.0  # ConsolidationOptimizer: seconds a pod placed on its planned node may stay pending there
CREATE_CONCURRENCY = 32  # NodeClaim creates in flight at once against a real API server
DISRUPTED_TAINT_KEY = "karpenter.sh/disrupted"
SIMULATION_KEYS = frozenset({"karpenter.sh/registered", "karpenter.sh/initialized"})  # never NodeClaim labels
# "true" on a NodeClaim whose requirements' minValues minValuesPolicy BestEffort lowered, else "false"
MIN_VALUES_RELAXED = "karpenter.sh/nodeclaim-min-values-relaxed"


class PodTrigger:
    """Upstream's provisioner pod controller."""

    name = "provisioner.trigger.pod"

    def __init__(self, env: Env, provisioner: "Provisioner"):
        self.env = env
        self.provisioner = provisioner

    def setup(self, mgr) -> None:
        mgr.watch("Pod", self._on_pod)

    def _on_pod(self, etype: str, obj: dict, old: dict | None) -> None:
        if etype != DELETED and P.is_provisionable(obj):
            self.env.mgr.enqueue(self, P.pod_key(obj))
        elif etype == DELETED:
            self.provisioner.forget(P.pod_key(obj))

    def reconcile(self, key: str) -> float | None:
        e = self.env.cluster.pods.get(key)
        if e is None or not P.is_provisionable(e.obj):
            return None
        self.provisioner.trigger(e.uid or key)
        self.provisioner.acked.setdefault(key, self.env.now())  # first seen (upstream's AckPods)
        return POD_REQUEUE


class NodeTrigger:
    """Upstream's provisioner node controller: nodes tainted for disruption need their pods placed."""

    name = "provisioner.trigger.node"

    def __init__(self, env: Env, provisioner: "Provisioner"):
        self.env = env
        self.provisioner = provisioner

    def setup(self, mgr) -> None:
        mgr.watch("Node", self._on_node)

    def _on_node(self, etype: str, obj: dict, old: dict | None) -> None:
        if etype != DELETED and _has_disrupted_taint(obj):
            self.env.mgr.enqueue(self, obj["metadata"]["name"])

    def reconcile(self, key: str) -> float | None:
        node = self.env.mgr.get("Node", key)
        if node is None or not _has_disrupted_taint(node):
            return None
        self.provisioner.trigger(node["metadata"].get("uid") or key)
        return POD_REQUEUE


def _has_disrupted_taint(node: dict) -> bool:
    return any(t.get("key") == DISRUPTED_TAINT_KEY for t in (node.get("spec") or {}).get("taints") or ())


class Provisioner:
    """The batcher and the provisioning loop (a singleton reconciler)."""

    name = "provisioner"

    def __init__(self, env: Env):
        self.env = env
        self.batch_start: float | None = None
        self.batch_last: float | None = None
        self.batch_uids: set[str] = set()
        self._last_noop: tuple | None = None
        self._messages: dict[str, str] = {}  # pod key -> the last FailedScheduling message published
        self._tpl_cache: dict[str, tuple[tuple, NodeClaimTemplate]] = {}
        self._well_known_cache: tuple[int, tuple[frozenset[str], frozenset[str]]] | None = None
        self.ignored: list[tuple[PodEntry, str]] = []  # pending pods the last provisionable() left out, and why
        self.solves = 0
        # pod key -> when the pod controller first saw it pending, and the pods a decision was made for
        # (karpenter_pods_scheduling_decision_duration_seconds); both forget a pod when it is deleted
        self.acked: dict[str, float] = {}
        self.plan_tries: dict[str, float] = {}  # ConsolidationOptimizer: pod key -> when _planned first placed it
        self.decided: set[str] = set()
        self.buffer_pods: dict[str, int] = {}  # node name -> CapacityBuffer virtual pods the last pass put there
        # id(instance type) -> (it, whether a NodeOverlay changed its price, its capacity): a solve's NodeClaims
        # share the catalog's instance types, each with every offering to look at
        self._overlaid: dict[int, tuple[Any, bool, bool]] = {}

    def setup(self, mgr) -> None:
        pass

    # --- the batcher -------------------------------------------------------------------------
    def trigger(self, uid: str) -> None:
        now = self.env.now()
        if self.batch_start is None:
            self.batch_start = now
            self.batch_last = now
            self.batch_uids = {uid}
        elif uid not in self.batch_uids:
            self.batch_uids.add(uid)
            self.batch_last = now
        else:
            return
        s = self.env.settings
        self.env.mgr.requeue_after(self, "", min(self.batch_last + s.batch_idle, self.batch_start + s.batch_max) - now)

    def reconcile(self, key: Any) -> float | None:
        if self.batch_start is None:
            return None
        with self.env.log.reconcile(self.name):  # a singleton's reconcile: no namespace, no name
            return self._reconcile_batch()

    def _reconcile_batch(self) -> float | None:
        s = self.env.settings
        deadline = min((self.batch_last or self.batch_start) + s.batch_idle, self.batch_start + s.batch_max)
        now = self.env.now()
        if now + 1e-9 < deadline:
            return deadline - now
        self.batch_start = self.batch_last = None
        self.batch_uids = set()
        if not self.env.cluster.synced():
            # upstream: a batch closed while a NodeClaim is not launched yet is dropped; the pods' own
            # triggers (every 10 s while they stay pending) open the next one
            self.env.log.debug("waiting on cluster sync", controller=self.name,
                               nodeclaims=len(self.env.cluster.unlaunched))
            return None
        self.schedule()
        return None

    # --- inputs ------------------------------------------------------------------------------
    def templates(self) -> tuple[list[NodeClaimTemplate], dict[str, str], dict[str, tuple[dict, dict]]]:
        """One template per NodePool whose NodeClass exists; why the others cannot launch."""
        env = self.env
        c = env.cluster
        daemons = None
        usage = c.usage_for_limits()
        out: list[NodeClaimTemplate] = []
        problems: dict[str, str] = {}
        classes: dict[str, tuple[dict, dict]] = {}
        ice = env.cloud.ice_key() if hasattr(env.cloud, "ice_key") else ()
        for name in sorted(c.nodepools):
            np = c.nodepools[name]
            if deleting(np):
                continue  # upstream ignores NodePools being deleted
            if (np.get("spec") or {}).get("replicas") is not None:
                continue  # a static NodePool keeps its own count of nodes; pending pods never launch from it
            nodeclass, nref = c.nodeclass_for(np)
            if nodeclass is None or (hasattr(env.cloud, "serves") and not env.cloud.serves(nref)):
                ref_ = ((np.get("spec") or {}).get("template") or {}).get("spec", {}).get("nodeClassRef") or {}
                problems[name] = (f'incompatible with nodepool "{name}", nodeclass not found '
                                  f'({ref_.get("kind") or "NodeClass"} "{ref_.get("name") or ""}")')
                continue
            ready, _, why = nodeclass_readiness(nodeclass)
            if not ready:
                problems[name] = f'incompatible with nodepool "{name}", nodeclass not ready' + (f" ({why})" if why else "")
                continue
            key = (np["metadata"].get("resourceVersion"), id(np), nodeclass["metadata"].get("resourceVersion"),
                   id(nodeclass), c.daemonsets_version, ice)
            hit = self._tpl_cache.get(name)
            if hit is not None and hit[0] == key:
                base = hit[1]
            else:
                if daemons is None:
                    # IgnoreDRARequests: DaemonSet pods asking for devices add no overhead (karpy.scheduling.dra)
                    daemons = [d for d in c.daemon_pods() if not (d.dra and env.settings.ignore_dra_requests)]
                try:
                    types = env.cloud.get_instance_types(np, nodeclass)
                except KubeletExpressionError as e:  # upstream skips a NodePool whose instance types fail to resolve
                    problems[name] = f'incompatible with nodepool "{name}", unable to resolve instance types, {e}'
                    continue
                base = build_template(np, types, daemons, {}, env.cloud.well_known_labels(np))
                self._tpl_cache[name] = (key, base)
            if not base.instance_types:  # upstream's scheduler drops the NodePool and says so on it
                env.recorder.publish(ref(np), NO_COMPATIBLE_INSTANCE_TYPES, NO_COMPATIBLE_MESSAGE, "Warning",
                                     dedupe=60.0)
                problems[name] = f'incompatible with nodepool "{name}", {FILTERED_OUT_ERROR}'
                continue
            limits = res.parse_resource_list((np.get("spec") or {}).get("limits"))
            tpl = base
            if limits:
                u = usage.get(name, {})
                tpl = dataclasses.replace(base, remaining={k: v - u.get(k, 0) for k, v in limits.items()})
            out.append(tpl)
            classes[name] = (np, nodeclass)
        return out, problems, classes

    def label_rules(self) -> tuple[frozenset[str], frozenset[str]]:
        """(well-known labels, restricted domains) for pod validation: upstream's WellKnownLabels and
        RestrictedLabelDomains, Karpenter's own plus those of every provider the NodePools use."""
        c = self.env.cluster
        hit = self._well_known_cache
        if hit is None or hit[0] != c.nodepools_version:
            wk = set(CORE_WELL_KNOWN_LABELS) - {LABEL_HOSTNAME}
            domains = set(RESTRICTED_LABEL_DOMAINS)
            for np in c.nodepools.values():
                wk |= self.env.cloud.well_known_labels(np)
                ref = (((np.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
                prov = api_labels.provider_labels(ref.get("group"))
                if prov is not None:
                    wk |= api_labels.well_known_labels(prov)
                    domains |= api_labels.restricted_domains(prov)
            hit = self._well_known_cache = (c.nodepools_version, (frozenset(wk), frozenset(domains)))
        return hit[1]

    def ignore_reason(self, e: PodEntry) -> str | None:
        """Why upstream's provisioner would ignore this pending pod (Provisioner.Validate), or None."""
        rules = self.label_rules()
        cached = e.info.__dict__.get("_karpy_ignore")
        if cached is not None and cached[0] is rules:
            why = cached[1]
        else:
            why = pod_problem(e.obj, *rules)
            e.info.__dict__["_karpy_ignore"] = (rules, why)
        if why is None and has_volume_claims(e.obj):
            vt = self.env.cluster.pod_info(e).volume_requirements
            if vt is not None and vt.invalid is not None:
                why = vt.invalid
        return why

    def provisionable(self, reserve_nominated: bool = False) -> tuple[list[PodEntry], list[PodEntry]]:
        """Pending pods to place, and the pods of nodes being deleted (capacity for them is
        launched while their node drains; those already nominated to a replacement are planned there).
        Every pending pod is placed again, nominated or not (upstream's GetPendingPods); with
        ``reserve_nominated`` (the disruption controller's view), pending pods nominated to a node
        still coming up keep their room there and are left out.
        Pending pods upstream's validation rejects are left out (and kept in ``self.ignored``)."""
        c = self.env.cluster
        now = self.env.now()
        pending: list[PodEntry] = []
        ignored: list[tuple[PodEntry, str]] = []
        for key in c.pending:
            e = c.pods[key]
            if not P.is_provisionable(e.obj):
                continue
            why = self.ignore_reason(e)
            if why is not None:
                ignored.append((e, why))
                continue
            target = c.nominations.get(key)
            if target is not None:
                sn = c.nodes.get(target)
                coming_up = sn is not None and c.live_target(target) and not (
                    sn.node is not None and sn.ready() and sn.initialized())
                if not coming_up:
                    c.clear_nomination(key)
                elif reserve_nominated:
                    continue
            pending.append(e)
        deleting: list[PodEntry] = []
        pdbs = None
        for sn in c.nodes.values():
            if not (sn.marked or sn.deleting()) or sn.node is None:
                continue
            for e in sn.pods.values():
                if e.daemon or not e.active or P.owner_kind(e.obj) == "Node":
                    continue
                if pdbs is None:
                    pdbs = c.pdb_states()
                if not currently_reschedulable(c.pod_state(e), pdbs, now):
                    continue  # the drain will not evict it (do-not-disrupt, a PDB allowing nothing)
                target = c.nominations.get(e.key)
                if target is not None:
                    if target != sn.key and c.live_target(target):
                        continue  # planned on (and counted against) its replacement
                    c.clear_nomination(e.key)
                deleting.append(e)
        key = lambda e: (P.parse_time(e.obj["metadata"].get("creationTimestamp")) or 0.0, e.key)  # noqa: E731
        self.ignored = sorted(ignored, key=lambda t: key(t[0]))
        pending = sorted(pending, key=key)
        if self.env.settings.gate(capacitybuffer.GATE):  # after validation, as upstream's GetPendingPods
            pending += capacitybuffer.virtual_pods(self.env)
        return pending, sorted(deleting, key=key)

    def existing(self, reserve_nominated: bool = True) -> list[ExistingNode]:
        """Nodes and launched NodeClaims with their bound pods and the pods of nodes being deleted that
        are nominated to them (a disruption's replacements). Pending pods nominated to them count only
        with ``reserve_nominated`` (the disruption controller's view): upstream's provisioner places every
        pending pod again against what is bound. Nodes being deleted stay in the view (their pods count
        for topology) but take nothing."""
        c = self.env.cluster
        nominated: dict[str, list[PodEntry]] = {}
        for pk, target in c.nominations.items():
            e = c.pods.get(pk)
            if e is None or not e.active or (not e.node and not reserve_nominated):
                continue
            sn = c.nodes.get(target)
            if sn is None:
                continue
            if e.node and (e.node == sn.name or not (self._leaving(c.by_node.get(e.node)))):
                continue  # bound where it was meant to go, or bound elsewhere for good
            nominated.setdefault(target, []).append(e)
        out: list[ExistingNode] = []
        for sn in sorted(c.nodes.values(), key=_order):
            if sn.node is None and not sn.launched():
                continue
            if sn.claim is not None and sn.node is None and sn.deleting():
                continue
            e = c.existing_node(sn, nominated.get(sn.key, []))
            if self._leaving(sn):
                e = dataclasses.replace(e, schedulable=False)
            out.append(e)
        return out

    def _planned(self, infos: list, pending: set[str], existing: list[ExistingNode]) -> tuple[list, dict[str, list]]:
        """karpy's ConsolidationOptimizer: pods of a class a re-packing planned on a replacement go there
        (nominated, their room taken in ``existing``) before the scheduler places the rest; the plan holds as many
        of each class as it planned, less those already bound there. That is both the pods still on the
        re-packing's candidates (each on the replacement planned for it, so the scheduling simulation, which packs
        otherwise, launches nothing for them) and their re-created pods, pending. A pod still pending PLAN_PATIENCE
        seconds after it was first placed so (what places pods found the planned node did not suit it: a zone
        spread's skew, say) goes through the scheduling simulation like any other."""
        c = self.env.cluster
        now = self.env.now()
        where = {e.name: i for i, e in enumerate(existing)}
        room: dict[str, Counter] = {}
        planned_for: dict[str, str] = {}  # a pod still on its candidate -> the node planned for it
        for claim, (want, until, keys) in list(c.placement_plans.items()):
            sn = c.by_claim.get(claim)
            if until < now or sn is None or sn.deleting() or sn.marked:
                del c.placement_plans[claim]
                continue
            i = where.get(sn.name)
            if i is None:  # (a replacement cordoned is still planned on: the hand-over opens it in its turn)
                continue
            left = Counter(want)
            for e in sn.pods.values():
                if not e.terminal:
                    k = optimizer.slot_key(e.info)
                    if left.get(k, 0) > 0:
                        left[k] -= 1
            if +left:
                room[sn.name] = left
                planned_for.update(dict.fromkeys(keys, sn.name))
        if not room:
            return infos, {}
        # a class's pods come back zone by zone as they left: each goes to the planned node in the zone that now
        # holds fewest of its class (a zone spread holds), among those with room for it
        wanted = {k for left in room.values() for k in left}
        zone_of = {e.name: e.labels.get(LABEL_ZONE) for e in existing}
        held: Counter = Counter()
        for e in c.pods.values():
            if e.node and not e.terminal and e.active:
                k = optimizer.slot_key(e.info)
                if k in wanted:
                    held[(k, zone_of.get(e.node))] += 1
        free = {name: res.subtract(existing[where[name]].allocatable, existing[where[name]].requested) for name in room}
        order = {name: i for i, name in enumerate(room)}
        take: dict[str, list] = {}
        rest = []
        tries, self.plan_tries = self.plan_tries, {}
        # the pods re-created first (they are what the room is for now), then those still on their candidates
        for info in sorted(infos, key=lambda i: i.key not in pending):
            waiting = info.key in pending
            first = tries.get(info.key) if waiting else None
            if first is not None:
                self.plan_tries[info.key] = first
                if now - first > PLAN_PATIENCE:
                    rest.append(info)
                    continue
            k = optimizer.slot_key(info)
            fits = [name for name, left in room.items() if left.get(k, 0) > 0
                    and all(free[name].get(r, 0) >= v for r, v in info.requests.items())]
            if not waiting:  # a pod still on its candidate: the replacement planned for it, or the simulation
                fits = [name for name in fits if name == planned_for.get(info.key)]
            if not fits:
                rest.append(info)
                continue
            target = min(fits, key=lambda name: (held[(k, zone_of.get(name))], order[name]))
            room[target][k] -= 1
            held[(k, zone_of.get(target))] += 1
            free[target] = res.subtract(free[target], info.requests)
            take.setdefault(target, []).append(info)
            if waiting:
                self.plan_tries.setdefault(info.key, now)
        for target, placed in take.items():
            i = where[target]
            e = existing[i]
            existing[i] = dataclasses.replace(e, requested=res.add(e.requested, res.total(p.requests for p in placed)),
                                              bound_pods=list(e.bound_pods) + placed)
        return rest, take

    @staticmethod
    def _leaving(sn: StateNode | None) -> bool:
        return sn is not None and (sn.marked or sn.deleting())

    def forget(self, key: str) -> None:
        self.acked.pop(key, None)
        self.decided.discard(key)

    def _decided(self, entries) -> None:
        """A first scheduling decision (placed, failed or ignored) for these pods: how long they waited for it."""
        now = self.env.now()
        hist = self.env.metrics.scheduling_decision
        for e in entries:
            t = self.acked.get(e.key)
            if t is not None and e.key not in self.decided:
                self.decided.add(e.key)
                hist.observe(now - t)

    # --- the loop ------------------------------------------------------------------------------
    def schedule(self) -> None:
        started = time.perf_counter()  # upstream logs how long finding the pods and solving took
        env = self.env
        c = env.cluster
        pending, deleting = self.provisionable()
        for e, why in self.ignored:
            # upstream: "ignoring pod" (no event for a pod that asks to stay off Karpenter's nodes)
            msg = f"ignoring pod, {why}"
            if why != AVOIDS_KARPENTER and self._messages.get(e.key) != msg:
                env.recorder.publish(ref(e.obj), "FailedScheduling", f"Failed to schedule pod, {msg}", "Warning")
            self._messages[e.key] = msg
        pods = pending + deleting
        if self.buffer_pods and not any(capacitybuffer.is_virtual(e.key, e.obj) for e in pending):
            self.buffer_pods = {}  # no CapacityBuffer keeps room any more
        if not pods:
            if env.settings.gate(capacitybuffer.GATE):  # upstream updates the buffers' status after every pass
                capacitybuffer.record(env, {}, [], [])
            return
        noop_key = (c.version, tuple(e.key for e in pods), env.cloud.ice_key() if hasattr(env.cloud, "ice_key") else ())
        if noop_key == self._last_noop:
            return
        templates, problems, classes = self.templates()
        existing = self.existing(reserve_nominated=False)
        infos = [c.pod_info(e) for e in pods]
        planned: dict[str, list] = {}
        if c.placement_plans and env.settings.gate(optimizer.GATE):
            infos, planned = self._planned(infos, {e.key for e in pending}, existing)
        self.solves += 1
        s = Scheduler(templates, existing, min_values_best_effort=env.settings.min_values_best_effort,
                      respect_preferences=env.settings.respect_preferences,
                      refine=env.settings.gate("CostRefinement"), pin_counted=env.settings.gate("ZonePinning"),
                      reserved_strict=True,  # upstream's provisioner: DisableReservedCapacityFallback
                      ignore_dra=env.settings.ignore_dra_requests)
        s.zone_census = True
        m = env.metrics
        m.queue(self.name, str(self.solves), len(infos))
        solve_started = time.perf_counter()
        results = s.solve(infos)
        took = time.perf_counter() - solve_started
        for target, placed in planned.items():
            results.existing.setdefault(target, []).extend(placed)
        m.queue(self.name, str(self.solves), 0)
        m.scheduling_duration.labels(self.name).observe(took)
        m.provisioner_scheduling_duration.observe(took)
        m.unschedulable_pods.labels(self.name).set(
            sum(1 for why in results.errors.values() if RESERVED_OFFERING_ERROR not in why))
        m.pending_zones(self.name, results.effective_zones)
        if env.settings.gate(capacitybuffer.GATE):
            failed = [i for i in infos if i.key in results.errors and capacitybuffer.is_virtual(i.key, i.obj)]
            self.buffer_pods = capacitybuffer.record(env, results.existing, [nc.pods for nc in results.new_nodeclaims],
                                                     failed)
        if results.new_nodeclaims:
            env.log.info("found provisionable pod(s)", controller=self.name, Pods=pretty_slice([e.key for e in pods], 5),
                         duration=go_duration(time.perf_counter() - started))
        self._apply(results, problems, classes)
        self._decided(e for e, _ in self.ignored)
        self._decided(pending)
        self._last_noop = None if results.new_nodeclaims or results.existing else (c.version, noop_key[1], noop_key[2])

    def _apply(self, results: Results, problems: dict[str, str], classes: dict[str, tuple[dict, dict]]) -> None:
        env = self.env
        c = env.cluster
        window = max(2 * env.settings.batch_max, 10.0)
        for target, infos in results.existing.items():
            sn = c.state_node_by_name(target)
            if sn is None:
                continue
            kind = "node" if sn.node is not None else "nodeclaim"
            for info in infos:
                e = c.pods.get(info.key)
                if e is None:
                    continue
                c.nominate(info.key, sn.key, window)
                env.recorder.publish(ref(e.obj), "Nominated", f"Pod should schedule on: {kind}/{target}")
        if results.new_nodeclaims:
            n_pods = sum(len(nc.pods) for nc in results.new_nodeclaims)
            env.log.info("computed new nodeclaim(s) to fit pod(s)", controller=self.name,
                         nodeclaims=len(results.new_nodeclaims), pods=n_pods)
            env.recorder.publish({"kind": "Karpenter", "name": "provisioner"}, "ComputedNodeClaims",
                                 f"computed new nodeclaim(s) to fit pod(s): nodeclaims={len(results.new_nodeclaims)}, "
                                 f"pods={n_pods}")
            placed = [infos for infos in results.existing.values() if infos]
            if placed:  # as upstream: the existing and in-flight nodes this solve put pods on
                env.log.info("computed unready node(s) will fit pod(s)", controller=self.name, nodes=len(placed),
                             pods=sum(len(infos) for infos in placed))
        if results.new_nodeclaims:
            self.create_nodeclaims([(nc, *classes[nc.template.nodepool]) for nc in results.new_nodeclaims])
        for key, why in results.errors.items():
            e = c.pods.get(key)
            if e is None or RESERVED_OFFERING_ERROR in why:
                continue  # as upstream: a pod waiting for a reservation other NodeClaims hold is retried silently
            others = list(problems.values())
            if why == "no nodepools found" and any(p.endswith(FILTERED_OUT_ERROR) for p in others):
                why = FILTERED_OUT_ERROR  # NodePools exist; their requirements left no instance type (upstream's error)
                others = [p for p in others if not p.endswith(FILTERED_OUT_ERROR)]
            if why == DRA_ERROR:  # as upstream: the DRA error alone, and an info line rather than an error
                others = []
                if self._messages.get(key) != why:
                    meta = e.obj.get("metadata") or {}
                    env.log.info(DRA_SKIP_LOG, controller=self.name,
                                 Pod={"name": meta.get("name", ""), "namespace": meta.get("namespace", "")})
            extra = "; ".join(others)
            msg = why if not extra else (f"{why}; {extra}" if why else extra)
            if self._messages.get(key) != msg:
                env.recorder.publish(ref(e.obj), "FailedScheduling", f"Failed to schedule pod, {msg}", "Warning")
            self._messages[key] = msg
        if len(self._messages) > 4 * max(1, len(c.pods)):
            self._messages = {k: v for k, v in self._messages.items() if k in c.pods}

    def create_nodeclaims(self, todo: list[tuple[NewNodeClaim, dict, dict]]) -> None:
        """Create a batch's NodeClaims. Against an API server that takes concurrent writes they are sent
        in parallel, as upstream's CreateNodeClaims does (one create's round trip, not one per NodeClaim);
        the rest (logs, events, nominations) follows in the engine's order. The first failure is raised
        once the others are done (the batch is retried, as upstream's reconcile error is)."""
        objs = [self.nodeclaim_object(nc, np, ncl) for nc, np, ncl in todo]
        answers: list[Any] = []
        if getattr(self.env.api, "concurrent", False) and len(objs) > 1:
            with ThreadPoolExecutor(min(CREATE_CONCURRENCY, len(objs))) as ex:
                futures = [ex.submit(self.env.api.create, o) for o in objs]
            for f in futures:
                e = f.exception()
                answers.append(e if e is not None else f.result())
        else:
            for o in objs:
                answers.append(self.env.api.create(o))
        self.env.mgr.pump()
        failed = None
        for (nc, np, _), created in zip(todo, answers):
            if isinstance(created, BaseException):
                failed = failed or created
                continue
            self._created(nc, np, created, nominate=True, reason="provisioning")
        if failed is not None:
            raise failed

    def create_nodeclaim(self, nc: NewNodeClaim, nodepool: dict, nodeclass: dict, nominate: bool,
                         reason: str = "provisioning") -> dict:
        """Create the NodeClaim object for a NodeClaim the engine computed (upstream's ToNodeClaim)."""
        created = self.env.api.create(self.nodeclaim_object(nc, nodepool, nodeclass))
        self.env.mgr.pump()
        return self._created(nc, nodepool, created, nominate, reason)

    def create_static_nodeclaim(self, nodepool: dict, nodeclass: dict, reason: str) -> dict:
        """A NodeClaim of a static NodePool (``spec.replicas``): the template's requirements, no pods; the
        cloud provider launches the cheapest offering they allow (upstream's static ToNodeClaim)."""
        tpl = build_template(nodepool, [], [], {}, self.env.cloud.well_known_labels(nodepool))
        return self.create_nodeclaim(NewNodeClaim(tpl, "", tpl.requirements, [], [], {}), nodepool, nodeclass,
                                     nominate=False, reason=reason)

    def nodeclaim_object(self, nc: NewNodeClaim, nodepool: dict, nodeclass: dict) -> dict:
        """The NodeClaim manifest for a NodeClaim the engine computed (upstream's ToNodeClaim)."""
        tmpl = (nodepool.get("spec") or {}).get("template") or {}
        tspec = tmpl.get("spec") or {}
        name_np = nodepool["metadata"]["name"]
        labels = dict(nc.template.labels)
        labels[LABEL_NODEPOOL] = name_np
        for r in nc.requirements:
            # upstream's resolveCustomLabelsFromRequirements: every custom label with a value to give
            if r.key in CORE_WELL_KNOWN_LABELS or r.key in nc.template.well_known_labels or r.key in SIMULATION_KEYS:
                continue
            value = _label_value(r)
            if value is not None:
                labels.setdefault(r.key, value)
        annotations = {str(k): str(v) for k, v in ((tmpl.get("metadata") or {}).get("annotations") or {}).items()}
        annotations.update({NODEPOOL_HASH: nodepool_hash(nodepool, memo=True), NODEPOOL_HASH_VERSION: HASH_VERSION,
                            NODECLASS_HASH: nodeclass_hash(nodeclass, memo=True)})
        annotations.update(overlay_annotations(nc.instance_types, self._overlaid))
        if nc.min_values_relaxed is not None:  # as upstream's scheduler, on every NodeClaim a solve computed
            annotations[MIN_VALUES_RELAXED] = "true" if nc.min_values_relaxed else "false"
        reqs = [r for r in nc.requirements.to_node_selector() if r["key"] != LABEL_HOSTNAME]
        spec: dict[str, Any] = {
            "nodeClassRef": dict(tspec.get("nodeClassRef") or {}),
            "requirements": reqs,
            "resources": {"requests": res.format_resource_list(nc.requests)},
        }
        for k in ("taints", "startupTaints", "expireAfter", "terminationGracePeriod"):
            if tspec.get(k) is not None:
                spec[k] = tspec[k]
        obj = {
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {
                "generateName": f"{name_np}-", "labels": labels, "annotations": annotations,
                "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "name": name_np,
                                     "uid": nodepool["metadata"].get("uid", ""), "blockOwnerDeletion": True}],
            },
            "spec": spec,
        }
        return obj

    def _created(self, nc: NewNodeClaim, nodepool: dict, created: dict, nominate: bool, reason: str) -> dict:
        env = self.env
        name_np = nodepool["metadata"]["name"]
        name = created["metadata"]["name"]
        # as upstream: the NodeClaim's instance-type requirement, whose values are sorted by name
        types = _instance_types_of(created) or sorted(it.name for it in nc.instance_types)
        shown = pretty_slice(types, 5)
        if env.log.wants("info", "created nodeclaim"):
            env.log.info("created nodeclaim", controller=self.name, unlogged={"reason": reason}, NodePool={"name": name_np},
                         NodeClaim={"name": name}, requests=res.format_resource_list(nc.requests),
                         **{"instance-types": shown})
        env.recorder.publish(ref(created), "Created",
                             f"created nodeclaim for {len(nc.pods)} pod(s), requests {_fmt_requests(nc.requests)}, "
                             f"instance-types {shown}")
        sn = env.cluster.by_claim.get(name)
        if nominate and sn is not None:
            window = max(2 * env.settings.batch_max, 10.0)
            for p in nc.pods:
                e = env.cluster.pods.get(p.key)
                if e is None:
                    continue
                env.cluster.nominate(p.key, sn.key, window)
                env.recorder.publish(ref(e.obj), "Nominated", f"Pod should schedule on: nodeclaim/{name}")
        return created


def _label_value(r) -> str | None:
    """A value for a node label the requirement allows: the first of an In set; for NotIn, Exists,
    Gt and Lt the smallest non-negative integer within the bounds and not excluded (upstream picks
    a random one); none for DoesNotExist."""
    if not r.complement:
        vals = sorted(v for v in r.values if r.has(v))
        return vals[0] if vals else None
    i = max(r.gte or 0, 0)
    while r.lte is None or i <= r.lte:
        if str(i) not in r.values:
            return str(i)
        i += 1
    return None


def _order(sn: StateNode) -> tuple:
    created = (sn.node or sn.claim or {}).get("metadata", {}).get("creationTimestamp") or ""
    return (created, sn.name)


def _fmt_requests(r: dict[str, int]) -> str:
    return "{" + ",".join(f'"{k}":"{v}"' for k, v in res.format_resource_list(r).items()) + "}"


def _instance_types_of(claim: dict) -> list[str]:
    """The instance types a NodeClaim's requirements allow, sorted by name (empty when they name none)."""
    for r in (claim.get("spec") or {}).get("requirements") or ():
        if r.get("key") == LABEL_INSTANCE_TYPE and r.get("operator") == "In":
            return sorted(str(v) for v in r.get("values") or ())
    return []
