"""Node lifecycle in the simulated cluster: disruption, expiration, interruption and termination.

Every 10 simulated seconds the disruption controller takes a snapshot of the
cluster and asks the engine (:mod:`karpy.disruption`) for a command. A
consolidation or emptiness command waits 15 s and is validated again before
it starts; drift starts at once. Starting a command taints its nodes
``karpenter.sh/disrupted:NoSchedule`` and launches the replacements; once every
replacement is initialized, the nodes are deleted. Deleting a node drains it
(non-critical pods first, DaemonSet pods last, PodDisruptionBudgets honoured,
``karpenter.sh/do-not-disrupt`` pods waited on) until the NodeClaim's
``terminationGracePeriod`` runs out, then removes the node and its instance.
Expiration and spot interruptions delete NodeClaims directly, without budgets,
while the provisioner launches capacity for their pods in parallel.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from .. import resources as res
from ..cloudprovider.types import CAPACITY_SPOT, LABEL_CAPACITY_TYPE, LABEL_ZONE
from ..disruption.candidates import pdb_blocks
from ..disruption.drift import drift_reason
from ..disruption.methods import POLL_PERIOD, VALIDATION_DELAY, Command, DisruptionEngine
from ..disruption.state import DISRUPTED_TAINT, ClusterSnapshot, NodeState, PDBState, PodState
from ..scheduling.pods import LabelSelector

DRAIN_RETRY = 1.0  # seconds between drain passes while pods are being evicted
DRAIN_BLOCKED_RETRY = 10.0  # between passes when every remaining pod is blocked
REPLACEMENT_TIMEOUT = 600.0  # a command whose replacements do not initialize is abandoned
EVENT_DEDUPE = {"Unconsolidatable": 900.0, "DisruptionBlocked": 120.0, "FailedDraining": 120.0}


class Lifecycle:
    """Mixed into :class:`karpy.simulator.sim.Simulation`."""

    # --- set-up -----------------------------------------------------------------------------
    def _init_lifecycle(self) -> None:
        self.engine = DisruptionEngine()
        self.validating: Command | None = None
        self.orchestrating: list[dict] = []
        self._event_seen: dict[tuple, float] = {}
        self.cost_history: list[tuple[float, float]] = []
        self._tick_scheduled = False
        self._last_key: tuple | None = None
        self._drift_cache: dict[tuple, str | None] = {}

    def _ensure_tick(self) -> None:
        if not self._tick_scheduled:
            self._tick_scheduled = True
            self.at(self.now + POLL_PERIOD, "disrupt", None)

    def _dedupe_event(self, kind: str, name: str, reason: str, message: str, etype: str = "Normal") -> None:
        key = (kind, name, reason, message)
        window = EVENT_DEDUPE.get(reason, 120.0)
        last = self._event_seen.get(key)
        if last is not None and self.now - last < window:
            return
        self._event_seen[key] = self.now
        self.event(kind, name, reason, message, etype)

    def current_cost(self) -> float:
        return sum(c.offering.price for c in self.claims.values() if c.deleted is None and c.offering is not None)

    def record_cost(self) -> None:
        cost = self.current_cost()
        if not self.cost_history or abs(self.cost_history[-1][1] - cost) > 1e-12:
            self.cost_history.append((self.now, cost))

    def cost_at(self, t: float) -> float:
        cost = 0.0
        for when, c in self.cost_history:
            if when <= t:
                cost = c
        return cost

    # --- snapshot -----------------------------------------------------------------------------
    def _nodepool_setting(self, nodepool: str, key: str, default: Any = None) -> Any:
        np = self.objects.get(("NodePool", "", nodepool)) or {}
        return ((np.get("spec") or {}).get("disruption") or {}).get(key, default)

    def _pdb_states(self) -> list[PDBState]:
        out = []
        for (kind, ns, name), obj in sorted(self.objects.items()):
            if kind != "PodDisruptionBudget":
                continue
            spec = obj.get("spec") or {}
            sel = LabelSelector(spec.get("selector") if spec.get("selector") is not None else None)
            matching = [p for p in self.pods.values() if p.info.namespace == ns and sel.matches(p.info.labels)
                        and p.phase in ("Pending", "Running")]
            healthy = sum(1 for p in matching if p.node is not None and p.phase == "Running")
            expected = len(matching)
            allowed = 0
            if spec.get("minAvailable") is not None:
                allowed = healthy - _scaled(spec["minAvailable"], expected)
            elif spec.get("maxUnavailable") is not None:
                allowed = _scaled(spec["maxUnavailable"], expected) - (expected - healthy)
            else:
                allowed = healthy - 1
            mu = spec.get("maxUnavailable")
            fully = mu == 0 or mu == "0%" or spec.get("minAvailable") == "100%"
            out.append(PDBState(ns, name, sel, max(0, allowed), fully,
                                spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow"))
        return out

    def _pod_state(self, p) -> PodState:
        meta = p.obj.get("metadata") or {}
        owner = p.owner[0] if p.owner else None
        return PodState(
            info=p.info, phase=p.phase, owner_kind=owner, annotations=meta.get("annotations") or {},
            start_time=p.started, priority_class=(p.obj.get("spec") or {}).get("priorityClassName"),
        )

    def snapshot(self) -> ClusterSnapshot:
        templates, _, _ = self.templates()
        existing, _ = self._karpenter_view()
        by_name = {e.name: e for e in existing}
        pods_on: dict[str, list] = {}
        leaving = {n.name for n in self.nodes.values() if self._leaving(n)}
        for p in self.pods.values():
            if p.node and p.phase in ("Pending", "Running"):
                if p.node in leaving and p.nominated and p.nominated != p.node and self._live_target(p.nominated):
                    continue  # already planned on (and counted against) its replacement
                pods_on.setdefault(p.node, []).append(p)
        nominated_targets = {p.nominated for p in self.pods.values() if p.nominated and p.node is None}
        queued = {name for entry in self.orchestrating for name in entry["claims"]}
        if self.validating is not None:
            queued.update(self.nodes[c.name].claim for c in self.validating.candidates if c.name in self.nodes)
        nodes: list[NodeState] = []
        for n in sorted(self.nodes.values(), key=lambda n: (n.created, n.name)):
            c = self.claims.get(n.claim) if n.claim else None
            labels = n.labels
            price = c.offering.price if c is not None and c.offering is not None else 0.0
            after = self._nodepool_setting(c.nodepool, "consolidateAfter", "0s") if c else None
            consolidatable = under = False
            if c is not None and c.initialized is not None and after not in (None, "Never"):
                t0 = max(c.initialized, c.last_pod_event or 0.0)
                d = res.parse_duration(after)
                consolidatable = self.now - t0 >= d
                under = d > 0 and not consolidatable
            nodes.append(NodeState(
                name=n.name, nodeclaim=c.name if c else None, nodepool=c.nodepool if c else None, labels=labels,
                instance_type=c.instance_type if c else None, price=price,
                pods=[self._pod_state(p) for p in pods_on.get(n.name, [])], existing=by_name[n.name],
                initialized=n.ready and (c is None or c.initialized is not None), ready=n.ready,
                # a deleting node counts against budgets until its instance is gone (instantly, here)
                marked_for_deletion=bool(c and c.marked), terminating=False, queued=bool(c and c.name in queued),
                nominated=n.name in nominated_targets,
                annotations=(n.obj or {}).get("metadata", {}).get("annotations", {}) if n.obj else (c.node_annotations if c else {}),
                consolidatable=consolidatable, under_consolidate_after=under,
                drifted=c.drifted if c else None, drifted_since=c.drifted_since if c else None,
                termination_grace_period=c.tgp if c else None,
                capacity_type=labels.get(LABEL_CAPACITY_TYPE), zone=labels.get(LABEL_ZONE),
            ))
        # launched NodeClaims that have not registered yet are capacity too (never candidates)
        for c in self.claims.values():
            if c.deleted is None and c.node is None and c.instance_type is not None and c.name in by_name:
                nodes.append(NodeState(
                    name=c.name, nodeclaim=c.name, nodepool=c.nodepool, labels=by_name[c.name].labels,
                    instance_type=c.instance_type, price=c.offering.price, pods=[], existing=by_name[c.name],
                    initialized=False, ready=False, registered=False, marked_for_deletion=c.marked,
                ))
        pending = [p.info for p in self._provisionable() if p.node is None]
        return ClusterSnapshot(
            now=self.now, nodes=nodes,
            nodepools={name: obj for (kind, _, name), obj in self.objects.items() if kind == "NodePool"},
            templates=templates, pending_pods=pending, pdbs=self._pdb_states(),
            feature_gates=self.feature_gates,
        )

    # --- the disruption loop ------------------------------------------------------------------
    def _update_conditions(self) -> None:
        """Drift, as the NodeClaim disruption controller marks it."""
        for c in self.claims.values():
            if c.deleted is not None or c.instance_type is None:
                continue
            np = self.objects.get(("NodePool", "", c.nodepool))
            if np is None:
                continue
            nc, _ = self._nodeclass(np)
            ck = (c.name, id(np), id(nc))
            if ck in self._drift_cache:
                reason = self._drift_cache[ck]
            else:
                reason = drift_reason(np, nc, c.annotations, self._claim_labels(c))
                self._drift_cache[ck] = reason
            if reason and not c.drifted:
                c.drifted = reason
                c.drifted_since = self.now
                self.event("NodeClaim", c.name, "Drifted", f"Status condition transitioned, Type: Drifted, Status: True, Reason: {reason}")
            elif not reason and c.drifted:
                c.drifted = None
                c.drifted_since = None

    def _expire(self) -> None:
        for c in list(self.claims.values()):
            if c.deleted is not None or c.deleting_since is not None or c.expire_after is None or c.instance_type is None:
                continue
            if self.now >= c.created + c.expire_after:
                self.event("NodeClaim", c.name, "Expired", f"NodeClaim expired after {res.format_duration(c.expire_after)}")
                self.delete_claim(c, "Expired")

    def _on_disrupt(self, _: Any) -> None:
        self._tick_scheduled = False
        self.reconcile()  # let pods bind to nodes that just became ready before judging them
        live = [c for c in self.claims.values() if c.deleted is None]
        if live:
            self._ensure_tick()
        else:
            return
        self._update_conditions()
        self._expire()
        self._progress_commands()
        if self.validating is not None:
            return
        key = self._disruption_key()
        if key == self._last_key:
            return  # nothing the methods look at has changed since they last found nothing to do
        snap = self.snapshot()
        step = self.engine.step(snap, hash(key))
        for e in step.events:
            self._emit(e)
        cmd = step.command
        if cmd is None:
            self._last_key = key
            return
        self._last_key = None
        if cmd.method in ("emptiness", "multi", "single"):
            self.validating = cmd
            self.at(self.now + VALIDATION_DELAY, "validate", None)
        else:
            self.start_command(cmd)

    def _disruption_key(self) -> tuple:
        """What the disruption methods depend on: cluster changes, which nodes have become
        consolidatable or drifted, and the budgets' current allowances (schedules open and close)."""
        from ..disruption.budgets import REASONS, allowed_disruptions

        consolidatable = []
        counts: dict[str, int] = {}
        for c in self.claims.values():
            if c.deleted is not None or c.initialized is None:
                continue
            counts[c.nodepool] = counts.get(c.nodepool, 0) + 1
            after = self._nodepool_setting(c.nodepool, "consolidateAfter", "0s")
            if after in (None, "Never"):
                continue
            t0 = max(c.initialized, c.last_pod_event or 0.0)
            if self.now - t0 >= res.parse_duration(after):
                consolidatable.append(c.name)
        budgets = []
        for (kind, _, name), np in sorted(self.objects.items()):
            if kind == "NodePool":
                budgets.append(tuple(allowed_disruptions(np, counts.get(name, 0), r, self.now) for r in REASONS))
        drifted = tuple(sorted(c.name for c in self.claims.values() if c.drifted and c.deleted is None))
        # pod do-not-disrupt durations run out with time; upstream also re-checks every 5 minutes
        guarded = tuple(sorted(p.key for p in self.pods.values() if p.node and p.phase == "Running"
                               and self._pod_state(p).do_not_disrupt(self.now)))
        return (self.version, tuple(consolidatable), tuple(budgets), drifted, guarded, int(self.now // 300))

    def _emit(self, e) -> None:
        if e.kind == "Node":
            node = self.nodes.get(e.name)
            claim = node.claim if node else e.name
            self._dedupe_event("Node", e.name, e.reason, e.message, e.etype)
            if claim:
                self._dedupe_event("NodeClaim", claim, e.reason, e.message, e.etype)
        else:
            self._dedupe_event(e.kind, e.name, e.reason, e.message, e.etype)

    def _on_validate(self, _: Any) -> None:
        cmd, self.validating = self.validating, None
        if cmd is None:
            return
        snap = self.snapshot()
        fresh, why = self.engine.validate(snap, cmd)
        if fresh is None:
            if cmd.method == "single":
                for c in cmd.candidates:
                    self._emit_node(c.name, "ConsolidationRejected",
                                    f"Consolidation rejected: {cmd.describe()}, reason: {why} (savings: ${cmd.savings:.2f})")
            return
        self.start_command(fresh)

    def _emit_node(self, node: str, reason: str, message: str, etype: str = "Normal") -> None:
        n = self.nodes.get(node)
        self.event("Node", node, reason, message, etype)
        if n is not None and n.claim:
            self.event("NodeClaim", n.claim, reason, message, etype)

    def start_command(self, cmd: Command) -> None:
        claims = []
        for cand in cmd.candidates:
            node = self.nodes.get(cand.name)
            c = self.claims.get(node.claim) if node and node.claim else None
            if c is None or c.deleted is not None or c.marked:
                return
            claims.append((node, c))
        before = self.current_cost()
        for node, c in claims:
            if DISRUPTED_TAINT not in node.taints:
                node.taints.append(DISRUPTED_TAINT)
            c.disruption_reason = cmd.reason
            c.cost_before = before
            c.disruption_started = self.now
            if cmd.replacements or cmd.reason != "Empty":
                self._emit_node(node.name, "ConsolidationCandidate" if cmd.reason == "Underutilized" else "DisruptionStarted",
                                f"{'Consolidation candidate' if cmd.reason == 'Underutilized' else 'Disrupting'}: "
                                f"{cmd.describe()}" + (f" (savings: ${cmd.savings:.2f})" if cmd.reason == "Underutilized" else ""))
        replacements = []
        for rep in cmd.replacements:
            nodeclass, provider = self._classes_for(rep.template.nodepool)
            claim = self._launch(rep, nodeclass, provider, nominate=False)
            replacements.append(claim.name)
            for _, cc in claims:
                cc.replaced_by.append(claim.name)
            self.event("NodeClaim", claim.name, "DisruptionLaunching", f"Launching NodeClaim: {cmd.reason}")
            # the candidates' pods are expected on the replacement
            for p in rep.pods:
                rec = self.pods.get(p.key)
                if rec is not None:
                    rec.nominated = claim.name
        for _, c in claims:
            c.marked = True
        self.touch()
        self.orchestrating.append({"command": cmd, "claims": [c.name for _, c in claims], "replacements": replacements,
                                   "started": self.now})
        self._progress_commands()

    def _live_target(self, name: str) -> bool:
        c = self.claims.get(name)
        if c is not None:
            return c.deleted is None
        return name in self.nodes

    def _classes_for(self, nodepool: str):
        np = self.objects.get(("NodePool", "", nodepool))
        return self._nodeclass(np)

    def _progress_commands(self) -> None:
        still = []
        for entry in self.orchestrating:
            reps = [self.claims.get(r) for r in entry["replacements"]]
            failed = any(r is None or r.launch_failed or (r.deleted is not None and r.initialized is None) for r in reps)
            timed_out = self.now - entry["started"] > REPLACEMENT_TIMEOUT
            if failed or timed_out:
                for name in entry["claims"]:
                    c = self.claims.get(name)
                    if c is None or c.deleted is not None:
                        continue
                    c.marked = False
                    c.disruption_reason = None
                    node = self.nodes.get(c.node) if c.node else None
                    if node is not None and DISRUPTED_TAINT in node.taints:
                        node.taints.remove(DISRUPTED_TAINT)
                self.event("Karpenter", "disruption", "DisruptionAbandoned",
                           f"abandoned {entry['command'].describe()}: replacement "
                           f"{'failed to launch' if failed else 'did not initialize in time'}", "Warning")
                self.touch()
                continue
            if all(r.initialized is not None for r in reps):
                for name in entry["claims"]:
                    c = self.claims.get(name)
                    if c is not None and c.deleted is None and c.deleting_since is None:
                        self._emit_node(c.node or c.name, "DisruptionTerminating", f"Disrupting Node: {entry['command'].reason}")
                        self.delete_claim(c, entry["command"].reason)
                continue
            for r in reps:
                if r.initialized is None:
                    self._dedupe_event("NodeClaim", r.name, "DisruptionWaitingReadiness", "Waiting on readiness to continue disruption")
            still.append(entry)
        self.orchestrating = still

    # --- deletion and drain -----------------------------------------------------------------
    def delete_claim(self, c, reason: str | None) -> None:
        """Start deleting a NodeClaim: taint, drain within the grace period, then terminate."""
        if c.deleted is not None or c.deleting_since is not None:
            return
        c.deleting_since = self.now
        c.marked = True
        if c.cost_before is None:
            c.cost_before = self.current_cost()
        if c.disruption_started is None:
            c.disruption_started = self.now
        if reason and not c.disruption_reason:
            c.disruption_reason = reason
        if c.tgp is not None:
            c.deadline = self.now + c.tgp
            self.event("NodeClaim", c.name, "TerminationGracePeriodExpiring",
                       f"All pods will be deleted by {self._fmt(c.deadline)}", "Warning")
        node = self.nodes.get(c.node) if c.node else None
        if node is None:
            self._finish_termination(c)
            return
        if DISRUPTED_TAINT not in node.taints:
            node.taints.append(DISRUPTED_TAINT)
        self.touch()
        self._drain(c.name)

    def _fmt(self, t: float) -> str:
        from .sim import fmt_time

        return fmt_time(t) or ""

    def _on_drain(self, name: str) -> None:
        self._drain(name)

    def _drain(self, name: str) -> None:
        c = self.claims.get(name)
        if c is None or c.deleted is not None:
            return
        node = self.nodes.get(c.node) if c.node else None
        if node is None:
            self._finish_termination(c)
            return
        forced = c.deadline is not None and self.now >= c.deadline
        waiting = []
        for p in list(self.pods.values()):
            if p.node != node.name or p.phase not in ("Pending", "Running"):
                continue
            st = self._pod_state(p)
            if st.mirror or st.tolerates_disrupted_taint():
                continue
            waiting.append((p, st))
        if not waiting:
            self._finish_termination(c)
            return
        evicted = 0
        if forced:
            for p, _ in waiting:
                self.event("Pod", p.info.name, "Disrupted",
                           f"Deleting the pod to accommodate the terminationTime {self._fmt(c.deadline)} of the node. "
                           "This bypasses the PDB of the pod and the do-not-disrupt annotation.", namespace=p.info.namespace)
                self._evict(p)
                evicted += 1
        else:
            groups = [[], [], [], []]
            for p, st in waiting:
                groups[(2 if st.critical else 0) + (1 if st.daemon else 0)].append((p, st))
            group = next(g for g in groups if g)
            for p, st in sorted(group, key=lambda x: x[0].key):
                if st.do_not_disrupt(self.now):
                    self._dedupe_event("Node", node.name, "FailedDraining",
                                       f'Failed to drain node, pod {p.key} has "karpenter.sh/do-not-disrupt" annotation', "Warning")
                    continue
                why = pdb_blocks(st, self._pdb_states(), self.now)
                if why:
                    self._dedupe_event("Node", node.name, "FailedDraining",
                                       f"Failed to drain node, evicting pod violates a PDB (Pod={p.key})", "Warning")
                    continue
                self.event("Pod", p.info.name, "Evicted", f"Evicted pod: {c.disruption_reason or 'Forceful Termination'}",
                           namespace=p.info.namespace)
                self._evict(p)
                evicted += 1
        delay = DRAIN_RETRY if evicted else DRAIN_BLOCKED_RETRY
        if c.deadline is not None and not forced:
            delay = min(delay, max(0.0, c.deadline - self.now))
        self.at(self.now + max(delay, 0.001), "drain", name)

    def _evict(self, p) -> None:
        """The pod is gone; its controller (if any) creates a replacement that goes pending."""
        self._delete_pod(p)

    def _finish_termination(self, c) -> None:
        node = self.nodes.pop(c.node, None) if c.node else None
        if node is not None:
            for p in list(self.pods.values()):
                if p.node == node.name:
                    self.pods.pop(p.key, None)
        c.deleted = self.now
        c.marked = True
        self.event("NodeClaim", c.name, "Terminated",
                   f"instance terminated and NodeClaim removed ({c.disruption_reason or 'deleted'})")
        self.touch()
        self.record_cost()
        c.cost_after = self.current_cost()

    # --- interruption -----------------------------------------------------------------------
    def interrupt(self, spec: Mapping) -> None:
        targets = []
        if spec.get("node"):
            n = self.nodes.get(spec["node"])
            if n is not None:
                targets.append(n)
        else:
            sel = LabelSelector(spec.get("selector") or {})
            matching = sorted((n for n in self.nodes.values() if sel.matches(n.labels)), key=lambda n: n.name)
            targets = matching[: int(spec.get("count", 1))]
        for n in targets:
            c = self.claims.get(n.claim) if n.claim else None
            if c is None or c.deleted is not None:
                continue
            if c.offering is not None and c.offering.capacity_type == CAPACITY_SPOT:
                self.ice[(c.instance_type.name, c.offering.zone, CAPACITY_SPOT)] = self.now + 180.0
                self.event("NodeClaim", c.name, "SpotInterrupted", "Spot interruption warning was triggered", "Warning")
            else:
                self.event("NodeClaim", c.name, "InstanceTerminating", "Instance is terminating", "Warning")
            self._emit_node(n.name, "TerminatingOnInterruption", "Interruption triggered termination for the Node")
            self.delete_claim(c, "Interrupted")


def _scaled(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)
