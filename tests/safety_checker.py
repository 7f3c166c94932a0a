"""An independent safety checker for `karpy simulate -o json` output.

It reads only the JSON a user gets (the SimulationSummary's ``nodeClaims`` and
``disruptions``, the Events in time order, the final Pods) plus what the test
itself wrote into the input (:class:`Knowledge`: the NodePools' budgets and
sizes over time, the Deployments' replicas over time, the PDB specs and when
they existed, which offerings were made unavailable). It never imports karpy.

Rules (each violation is reported as one line, ``RULE: details``), as upstream
Karpenter v1 and Kubernetes define them:

``budget``
    At the start of every voluntary disruption command (reason Empty,
    Underutilized or Drifted), for each NodePool among its candidates:
    candidates of that NodePool + NodeClaims of that NodePool already being
    disrupted <= the NodePool's allowance for that reason
    (kubernetes-sigs/karpenter ``BuildDisruptionBudgetMapping``): the minimum
    over the budgets in force that name the reason (or name none), a
    percentage of the NodePool's initialized nodes rounded up, a budget with a
    schedule only inside ``[firing, firing + duration)``; no budgets means
    ``10%``. "Being disrupted" is every candidate of an earlier command (any
    reason, Expired and Interrupted included) whose Node is not yet removed and
    whose command was not abandoned.

``audit``
    The audit trail is complete and consistent: every NodeClaim deleted with a
    disruption reason is a candidate of a ``disruptions`` entry with that
    reason; every voluntary entry carries ``budget`` with
    ``candidates + disrupting <= allowed``; every pod Event about a pod going
    away carries ``karpy.dev/owner`` and ``karpy.dev/labels`` matching the
    Deployment the pod belongs to.

``pdb``
    At every ``Evicted`` pod Event, the pod is covered by at most one PDB
    (Kubernetes refuses an eviction with more), and the PDB's healthy pods
    after the eviction are at least its ``desiredHealthy``, computed as
    Kubernetes' disruption controller does (``pkg/controller/disruption``):
    ``expectedPods`` is the summed ``replicas`` of the Deployments whose pods
    it selects (for ``maxUnavailable`` and a percentage ``minAvailable``; bare
    pods, having no controller, add nothing) and must be > 0; percentages
    round up. Healthy pods are those bound (a
    ``Scheduled`` Event) and not yet gone (``Evicted``, ``Killing``,
    ``Disrupted``, ``Preempted``), with labels from the pod's workload
    template (the ``Scheduled`` Event carries no labels, so a pod's labels are
    inferred from the input's Deployment or StatefulSet whose name prefixes
    the pod's, or the bare Pod of that name; going-away Events carry them and
    are cross-checked). StatefulSets count by their replicas too. In karpy a bound pod
    is Ready at once, so the unready-pod exceptions of the Eviction API
    (``unhealthyPodEvictionPolicy``) cannot apply to a bound pod and are not
    modelled. ``Disrupted`` deletions (the node's terminationGracePeriod
    deadline) and ``Killing`` (controllers, a node going away) are not
    evictions and bypass PDBs, as upstream.

``candidate``
    A command for Empty or Underutilized (and Drifted when the NodePool sets
    no terminationGracePeriod) never takes a node that hosts a do-not-disrupt
    pod, or a pod whose PDB allows no disruption or that several PDBs cover
    (karpenter ``NewCandidate`` / ``ValidatePodsDisruptable``).

``do-not-disrupt``
    A pod with ``karpenter.sh/do-not-disrupt: "true"`` is never ``Evicted``,
    whatever the reason, Expired and Interrupted included (karpenter
    ``pod.IsEvictable``); it goes only when its node's terminationGracePeriod
    deadline deletes it (``Disrupted``), or by its controller, or with a node
    that is gone.

``deadline``
    A ``Disrupted`` deletion (which bypasses PDBs and do-not-disrupt) happens
    only on a NodeClaim whose NodePool sets a terminationGracePeriod, no
    earlier than the pod's own grace period (30 s) before the deadline: the
    NodeClaim's deletion, no earlier than its disruption's start, plus the
    terminationGracePeriod (karpenter ``DeleteExpiringPods``).

``lost``
    A bound pod goes away through the drain (``Evicted``, or ``Disrupted`` at
    the deadline) or by its controller (``Killing`` in the very second a
    Scenario step scaled, restarted or deleted its Deployment); a ``Killing``
    otherwise means the pod went with its node, which bypasses PDBs and
    do-not-disrupt -- allowed only when the cloud took the node's spot instance
    back after its interruption notice: the NodeClaim was deleted for
    ``Interrupted``, is ``spot``, and the ``Killing`` comes no earlier than the
    interruption's start plus the notice (``SPOT_NOTICE``, kwok's 2 minutes);
    or, for a spot node already under another disruption (which an interruption
    does not restart, so the output does not show it), a Scenario ``interrupt``
    step on its NodePool at least the notice before could have taken it (its
    Node existed then, and fewer than ``count`` of the NodePool's Nodes that
    certainly existed sort before it by name).
    An ``Evicted`` pod's node is under disruption.

``pending``
    A pod left pending at the end whose CPU request fits the largest size its
    NodePool allows is a violation, unless every offering that fits it was
    made unavailable, or the NodePool's ``limits.cpu`` leaves no room for the
    smallest size that fits. When the run was cut short by ``--until`` (never
    settled: expiration cycles), only pods pending for over
    ``UNSETTLED_GRACE`` seconds count.

Times in the output are whole seconds; where an instant is ambiguous (a
Scenario step and a decision in the same second), the checker takes the
reading most favourable to karpy, so every violation it reports is real.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from croniter import croniter

DND = "karpenter.sh/do-not-disrupt"
VOLUNTARY = ("Empty", "Underutilized", "Drifted")
GRACEFUL = ("Empty", "Underutilized")
REASONS = VOLUNTARY + ("Expired", "Interrupted")
GONE = ("Evicted", "Killing", "Disrupted", "Preempted")
OWNER = "karpy.dev/owner"
LABELS = "karpy.dev/labels"
ZONES = ("test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d")
KWOK_RESERVED_CPU = 0.1
POD_GRACE = 30  # terminationGracePeriodSeconds of the test's pods (the API server's default)
UNSETTLED_GRACE = 300.0
SPOT_NOTICE = 120  # seconds from a spot interruption notice to the cloud reclaiming the instance (kwok, as AWS)


# =========================================================================================
# What the test knows about its own input
# =========================================================================================


@dataclass
class PoolSpec:
    name: str
    budgets: list[tuple[float, list[dict] | None]]  # (since, spec.disruption.budgets); None = upstream's default
    cpus: list[tuple[float, tuple[int, ...]]]  # (since, instance-cpu values its requirements allow)
    capacity_types: tuple[str, ...] = ("on-demand",)
    arch: str = "amd64"
    tgp: str | None = None
    limit_cpu: float | None = None


@dataclass
class DeploymentSpec:
    """A workload the test wrote: a Deployment, a StatefulSet or a bare Pod."""

    name: str
    labels: dict
    cpu: float
    pool: str
    dnd: bool = False
    replicas: list[tuple[float, int]] = field(default_factory=list)  # (since, replicas); deletion is 0
    kind: str = "Deployment"  # or StatefulSet (pods <name>-<ordinal>), or Pod: a bare pod of that name
    controller_steps: list[float] = field(default_factory=list)  # Scenario scale/restart/delete times

    @property
    def bare(self) -> bool:
        """A pod without a controller: "unmanaged", outside expectedPods."""
        return self.kind == "Pod"


@dataclass
class PDBSpec:
    name: str
    match_labels: dict
    min_available: int | str | None = None
    max_unavailable: int | str | None = None
    policy: str | None = None
    created: float = 0.0
    deleted: float | None = None


@dataclass
class Knowledge:
    pools: dict[str, PoolSpec]
    deployments: dict[str, DeploymentSpec]
    pdbs: dict[str, PDBSpec]
    availability: list[tuple[bool, dict]] = field(default_factory=list)  # (available, filter) in step order
    interrupts: list[tuple[float, str, int]] = field(default_factory=list)  # (time, NodePool, count) of interrupt steps
    until: float = 3600.0


# =========================================================================================
# Reading the output
# =========================================================================================


def epoch(ts: str) -> float:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


def at_step(history: list[tuple[float, object]], t: float) -> list:
    """The values in force at ``t`` (seconds after start): the latest with ``since <= t``; when one was set at
    ``t`` itself, the one before it too (the output cannot say which came first in that second)."""
    current = [v for since, v in history if since <= t]
    out = current[-1:] if current else []
    if any(since == t for since, _ in history):
        before = [v for since, v in history if since < t]
        out += before[-1:]
    return out


def scaled(value, total: int) -> int:
    """Kubernetes' GetScaledValueFromIntOrPercent with roundUp."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def budget_active(b: dict, when: float) -> bool:
    """Upstream Budget.IsActive: the next firing after (now - duration) is not after now."""
    if not b.get("schedule"):
        return True
    m = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", b["duration"])
    length = int(m.group(1) or 0) * 3600 + int(m.group(2) or 0) * 60 + int(m.group(3) or 0)
    now = datetime.fromtimestamp(when, tz=timezone.utc)
    nxt = croniter(b["schedule"], now - timedelta(seconds=length)).get_next(datetime)
    return nxt <= now


def allowed(budgets: list[dict] | None, num_nodes: int, reason: str, when: float) -> float:
    if budgets is None:
        budgets = [{"nodes": "10%"}]
    out = math.inf
    for b in budgets:
        if b.get("reasons") is not None and reason not in b["reasons"]:
            continue
        if not budget_active(b, when):
            continue
        out = min(out, scaled(str(b.get("nodes", "10%")), num_nodes))
    return out


def matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def cpu_of(instance_type: str | None) -> int:
    m = re.match(r"[a-z]+-(\d+)x-", instance_type or "")
    return int(m.group(1)) if m else 0


@dataclass
class _Pod:
    name: str
    deployment: str | None
    labels: dict
    node: str | None = None
    bound_at: float | None = None
    gone_at: float | None = None
    gone_by: str | None = None


class Checker:
    def __init__(self, output: dict, know: Knowledge):
        self.know = know
        items = output["items"]
        (self.summary,) = [i["status"] for i in items if i["kind"] == "SimulationSummary"]
        self.start = epoch(self.summary["start"])
        self.end = epoch(self.summary["end"]) - self.start
        self.events = [e for e in items if e["kind"] == "Event"]
        self.final_pods = [p for p in items if p["kind"] == "Pod"]
        self.claims = {c["name"]: c for c in self.summary["nodeClaims"]}
        self.disruptions = self.summary["disruptions"]
        self.violations: list[str] = []
        self.stats: Counter = Counter()  # what the rules looked at, for the suite's own coverage
        self._claim_times()

    # --- helpers ---------------------------------------------------------------------------
    def t(self, ts: str | None) -> float | None:
        return None if ts is None else epoch(ts) - self.start

    def when(self, t: float) -> str:
        return f"{int(t // 3600):02d}:{int(t % 3600 // 60):02d}:{int(t % 60):02d}"

    def fail(self, rule: str, msg: str) -> None:
        self.violations.append(f"{rule}: {msg}")

    def deployment_of(self, pod_name: str) -> str | None:
        best = None
        for d, spec in self.know.deployments.items():
            if spec.bare:
                if pod_name == d:
                    return d
                continue
            if pod_name.startswith(d + "-") and (best is None or len(d) > len(best)):
                best = d
        return best

    def _claim_times(self) -> None:
        self.initialized: dict[str, float] = {}
        self.node_of_claim: dict[str, str] = {}
        self.removed: dict[str, float] = {}  # node name -> RemovingNode time
        self.registered: dict[str, float] = {}  # NodeClaim name -> Registered time (its Node exists from then)
        for e in self.events:
            inv = e["involvedObject"]
            t = self.t(e["firstTimestamp"])
            if inv["kind"] == "NodeClaim" and e["reason"] == "Initialized":
                self.initialized.setdefault(inv["name"], t)
            if inv["kind"] == "NodeClaim" and e["reason"] == "Registered":
                m = re.search(r"\(node (\S+)\)", e["message"])
                if m:
                    self.node_of_claim[inv["name"]] = m.group(1)
                    self.registered.setdefault(inv["name"], t)
            if inv["kind"] == "Node" and e["reason"] == "RemovingNode":
                self.removed.setdefault(inv["name"], t)
        self.claim_of_node = {n: c for c, n in self.node_of_claim.items()}

    def gone(self, claim: str) -> float:
        """When a NodeClaim stopped counting as being disrupted: its Node removed, else the NodeClaim deleted."""
        c = self.claims[claim]
        times = [x for x in (self.removed.get(self.node_of_claim.get(claim, claim)), self.t(c["deletedAt"])) if x is not None]
        return min(times) if times else math.inf

    # --- rules -----------------------------------------------------------------------------
    def check(self) -> list[str]:
        self.check_budgets()
        self.check_audit()
        self.replay_pods()
        self.check_pending()
        return self.violations

    def check_budgets(self) -> None:
        for i, d in enumerate(self.disruptions):
            if d["reason"] not in VOLUNTARY:
                continue
            t = self.t(d["startedAt"])
            by_pool: dict[str, list[str]] = {}
            for c in d["candidates"]:
                by_pool.setdefault(self.claims[c]["nodePool"], []).append(c)
            for pool, cands in by_pool.items():
                self.stats[f"budget:{d['reason']}"] += 1
                disrupting = set()
                for e in self.disruptions[:i]:
                    if self.t(e["startedAt"]) > t:
                        continue
                    if e["outcome"] == "abandoned" and self.t(e["finishedAt"]) <= t:
                        continue
                    for c in e["candidates"]:
                        if c in cands or self.claims[c]["nodePool"] != pool:
                            continue
                        if self.gone(c) > t:
                            disrupting.add(c)
                # the most nodes the NodePool could have counted (initialized by t, not gone before t)
                num = sum(1 for n, c in self.claims.items() if c["nodePool"] == pool and n in self.initialized
                          and self.initialized[n] <= t and (c["deletedAt"] is None or self.t(c["deletedAt"]) >= t))
                spec = self.know.pools[pool]
                allowance = max(allowed(b, num, d["reason"], self.start + t) for b in at_step(spec.budgets, t))
                if len(cands) + len(disrupting) == allowance:
                    self.stats["budget:at-limit"] += 1
                if len(cands) + len(disrupting) > allowance:
                    self.fail("budget", f"{self.when(t)} {pool} {d['reason']} ({d['method']}): {len(cands)} candidate(s) "
                                        f"{sorted(cands)} + {len(disrupting)} disrupting {sorted(disrupting)} > "
                                        f"{allowance} allowed of {num} node(s) by {at_step(spec.budgets, t)}")

    def check_audit(self) -> None:
        listed: dict[str, set[str]] = {}
        for d in self.disruptions:
            for c in d["candidates"]:
                if c not in self.claims:
                    self.fail("audit", f"disruption at {d['startedAt']} names unknown NodeClaim {c}")
                listed.setdefault(c, set()).add(d["reason"])
            if d["reason"] in VOLUNTARY:
                b = d.get("budget")
                if not b:
                    self.fail("audit", f"voluntary disruption at {d['startedAt']} has no budget")
                elif len(d["candidates"]) + b["disrupting"] > b["allowed"]:
                    self.fail("audit", f"disruption at {d['startedAt']} records {len(d['candidates'])} candidate(s) + "
                                       f"{b['disrupting']} disrupting > {b['allowed']} allowed")
        for name, c in self.claims.items():
            r = c["disruptionReason"]
            if c["deletedAt"] is not None and r in REASONS and r not in listed.get(name, ()):
                self.fail("audit", f"{name} deleted for {r} at {c['deletedAt']} but no disruption entry lists it")

    def pdbs_at(self, t: float) -> list[PDBSpec]:
        """PDBs that certainly existed at ``t`` (created before, not deleted by then)."""
        return [p for p in self.know.pdbs.values() if p.created < t and (p.deleted is None or p.deleted > t)]

    def expected_and_desired(self, pdb: PDBSpec, t: float, pods: list[_Pod]) -> list[tuple[int, int]]:
        """(expectedPods, desiredHealthy) for each reading of the replicas in force at ``t``."""
        if pdb.max_unavailable is None and not isinstance(pdb.min_available, str):
            # an integer minAvailable: expectedPods is the number of matching pods, at least the one in question
            n = sum(1 for p in pods if (p.gone_at is None or p.gone_at >= t) and matches(pdb.match_labels, p.labels))
            return [(max(n, 1), int(pdb.min_available or 0))]
        # getExpectedScale: the scale of the pods' controllers; pods without one (bare) are skipped
        owners = [d for d in self.know.deployments.values() if not d.bare and matches(pdb.match_labels, d.labels)]
        readings = [[]]
        for d in owners:
            readings = [r + [v] for r in readings for v in (at_step(d.replicas, t) or [0])]
        out = []
        for r in readings:
            expected = sum(r)
            if pdb.max_unavailable is not None:
                desired = max(0, expected - scaled(pdb.max_unavailable, expected))
            else:
                desired = scaled(pdb.min_available, expected)
            out.append((expected, desired))
        return out

    def replay_pods(self) -> None:
        """Replays pod lives in Event order, checking every eviction against the PDBs at that point; then
        checks every voluntary command's candidates against the pods they hosted."""
        current: dict[str, _Pod] = {}  # pod name -> its latest life (a StatefulSet's pod comes back under its name)
        lives: list[_Pod] = []
        dnd = {d for d, s in self.know.deployments.items() if s.dnd}
        for e in self.events:
            inv = e["involvedObject"]
            if inv["kind"] != "Pod":
                continue
            t = self.t(e["firstTimestamp"])
            name, reason = inv["name"], e["reason"]
            p = current.get(name)
            if p is None or (reason == "Scheduled" and p.gone_at is not None):
                dep = self.deployment_of(name)
                p = current[name] = _Pod(name, dep, dict(self.know.deployments[dep].labels) if dep else {})
                lives.append(p)
            if reason == "Scheduled":
                m = re.search(r" to (\S+)$", e["message"])
                if p.bound_at is None and m:
                    p.node, p.bound_at = m.group(1), t
                continue
            if reason not in GONE:
                continue
            self._check_annotations(e, p)
            if p.gone_at is not None:
                continue
            self.stats[f"gone:{reason}" + (":do-not-disrupt" if p.deployment in dnd else "")] += 1
            if reason == "Evicted":
                self._check_eviction(p, t, lives, dnd)
            if p.bound_at is not None:
                self._check_way_out(p, t, reason)
            p.gone_at, p.gone_by = t, reason
        for d in self.disruptions:
            if d["reason"] in VOLUNTARY:
                self._check_candidates(d, lives, dnd)

    def _check_candidates(self, d: dict, pods: list[_Pod], dnd: set[str]) -> None:
        """Karpenter never takes a node whose pods may not be disrupted (do-not-disrupt, a PDB allowing
        nothing, several PDBs), except for drift when the NodeClaim has a terminationGracePeriod."""
        t = self.t(d["startedAt"])
        for c in d["candidates"]:
            pool = self.know.pools[self.claims[c]["nodePool"]]
            if d["reason"] == "Drifted" and pool.tgp:
                continue
            node = self.node_of_claim.get(c, c)
            # on the node when the command started: bound in an earlier second, and not gone before it (a pod
            # Evicted in that very second went in the command's own drain)
            here = [p for p in pods if p.node == node and p.bound_at is not None and p.bound_at < t
                    and (p.gone_at is None or p.gone_at > t or (p.gone_at == t and p.gone_by == "Evicted"))]
            for p in here:
                if p.deployment in dnd:
                    self.fail("candidate", f"{self.when(t)} {d['reason']} took {c} hosting do-not-disrupt pod {p.name}")
                covering = [b for b in self.pdbs_at(t) if matches(b.match_labels, p.labels)]
                if len(covering) > 1:
                    self.fail("candidate", f"{self.when(t)} {d['reason']} took {c} hosting {p.name}, covered by "
                                           f"PDBs {[b.name for b in covering]}")
                for b in covering:
                    # the most healthy pods the PDB could have counted then
                    healthy = sum(1 for q in pods if q.bound_at is not None and q.bound_at <= t
                                  and (q.gone_at is None or q.gone_at >= t) and matches(b.match_labels, q.labels))
                    readings = self.expected_and_desired(b, t, pods)
                    if all(exp <= 0 or healthy - des <= 0 for exp, des in readings):
                        self.fail("candidate", f"{self.when(t)} {d['reason']} took {c} hosting {p.name}, whose PDB "
                                               f"{b.name} {_pdb_text(b)} allows no disruption ({healthy} healthy, needs "
                                               f"{' or '.join(f'{des} of {exp} expected' for exp, des in readings)})")

    def _disruption_start(self, claim: str | None, t: float) -> float | None:
        """When the latest disruption of ``claim`` that started by ``t`` started."""
        starts = [self.t(d["startedAt"]) for d in self.disruptions if claim in d["candidates"] and self.t(d["startedAt"]) <= t]
        return max(starts) if starts else None

    def _check_way_out(self, p: _Pod, t: float, reason: str) -> None:
        when = self.when(t)
        claim = self.claim_of_node.get(p.node or "", p.node)
        started = self._disruption_start(claim, t)
        if reason == "Evicted":
            if started is None:
                self.fail("lost", f"{when} {p.name} Evicted from {p.node}, which no disruption had started on")
        elif reason == "Disrupted":
            pool = self.know.pools.get((self.claims.get(claim) or {}).get("nodePool", ""))
            if pool is None or not pool.tgp:
                self.fail("deadline", f"{when} {p.name} Disrupted on {p.node}, whose NodePool sets no terminationGracePeriod")
            elif started is None or t < started + _seconds(pool.tgp) - POD_GRACE:
                self.fail("deadline", f"{when} {p.name} Disrupted on {p.node} before its terminationGracePeriod "
                                      f"{pool.tgp} ran out (disruption started at "
                                      f"{'never' if started is None else self.when(started)})")
        elif reason == "Killing":
            spec = self.know.deployments.get(p.deployment or "")
            if spec is not None and t in spec.controller_steps:
                return
            if self._reclaimed(claim, t):
                self.stats["lost:reclaimed"] += 1
                return
            self.stats["lost:candidates"] += 1
            self.fail("lost", f"{when} {p.name} was deleted (Killing) from {p.node} without an eviction, a deadline "
                              f"or its controller")

    def _reclaimed(self, claim: str | None, t: float) -> bool:
        """Whether at ``t`` the cloud had reclaimed ``claim``'s spot instance: deleted for an interruption,
        spot capacity, and its notice run out since the interruption started."""
        c = self.claims.get(claim or "")
        if c is None or c["capacityType"] != "spot":
            return False
        if c["disruptionReason"] == "Interrupted":
            starts = [self.t(d["startedAt"]) for d in self.disruptions
                      if d["reason"] == "Interrupted" and claim in d["candidates"]]
            if starts and t >= min(starts) + SPOT_NOTICE:
                return True
        # an interruption of a node already being disrupted leaves no trace in the output: the Scenario's steps
        node = self.node_of_claim.get(claim or "", claim)
        for at, pool, count in self.know.interrupts:
            if pool != c["nodePool"] or t < at + SPOT_NOTICE or not self._existed(claim, at, certainly=False):
                continue
            before = [n for n, x in self.claims.items() if x["nodePool"] == pool and n != claim
                      and self._existed(n, at, certainly=True) and self.node_of_claim.get(n, n) < node]
            if len(before) < count:
                return True
        return False

    def _existed(self, claim: str, t: float, certainly: bool) -> bool:
        """Whether ``claim``'s Node existed at ``t``: certainly, or possibly (registered or removed that second)."""
        reg = self.registered.get(claim)
        removed = self.removed.get(self.node_of_claim.get(claim, claim))
        if reg is None:
            return False
        if certainly:
            return reg < t and (removed is None or removed > t)
        return reg <= t and (removed is None or removed >= t)

    def _check_annotations(self, e: dict, p: _Pod) -> None:
        ann = e["metadata"].get("annotations") or {}
        if OWNER not in ann or LABELS not in ann:
            self.fail("audit", f"{e['reason']} Event of {p.name} lacks {OWNER}/{LABELS}")
            return
        if p.deployment is None:
            return
        labels = json.loads(ann[LABELS])
        labels.pop("pod-template-hash", None)
        if labels != self.know.deployments[p.deployment].labels:
            self.fail("audit", f"{e['reason']} Event of {p.name} has labels {labels}, its workload's template "
                               f"{self.know.deployments[p.deployment].labels}")
        spec = self.know.deployments[p.deployment]
        owner_ok = {"Pod": ann[OWNER] == "", "StatefulSet": ann[OWNER] == f"StatefulSet/{p.deployment}",
                    "Deployment": ann[OWNER].startswith(f"ReplicaSet/{p.deployment}-")}[spec.kind]
        if not owner_ok:
            self.fail("audit", f"{e['reason']} Event of {p.name} names owner {ann[OWNER]!r}")

    def _check_eviction(self, p: _Pod, t: float, pods: list[_Pod], dnd: set[str]) -> None:
        when = self.when(t)
        if p.deployment in dnd:
            self.fail("do-not-disrupt", f"{when} do-not-disrupt pod {p.name} was Evicted")
        if p.bound_at is None:
            return  # an unbound (Pending) pod is evicted without consulting PDBs
        covering = self.pdbs_at(t)
        covering = [b for b in covering if matches(b.match_labels, p.labels)]
        if len(covering) > 1:
            self.fail("pdb", f"{when} {p.name} Evicted though {len(covering)} PDBs cover it "
                             f"({', '.join(b.name for b in covering)}): Kubernetes refuses that eviction")
            return
        for b in covering:
            self.stats[f"pdb:{_pdb_text(b)}"] += 1
            healthy_after = sum(1 for q in pods if q.bound_at is not None and q.gone_at is None
                                and q is not p and matches(b.match_labels, q.labels))
            readings = self.expected_and_desired(b, t, pods)
            if any(exp > 0 and healthy_after == des for exp, des in readings):
                self.stats["pdb:at-limit"] += 1
            if all(exp <= 0 or healthy_after < des for exp, des in readings):
                self.fail("pdb", f"{when} {p.name} Evicted from {p.node}: PDB {b.name} "
                                 f"{_pdb_text(b)} left {healthy_after} healthy, needs "
                                 f"{' or '.join(f'{des} of {exp} expected' for exp, des in readings)}")

    def check_pending(self) -> None:
        settled = self.end < self.know.until
        pending = {p["name"]: p for p in self.summary["pendingPods"]}
        for pobj in self.final_pods:
            name = pobj["metadata"]["name"]
            if name not in pending:
                continue
            dep = self.deployment_of(name)
            if dep is None:
                continue
            spec = self.know.deployments[dep]
            created = self.t(pobj["metadata"].get("creationTimestamp"))
            if not settled and created is not None and self.end - created <= UNSETTLED_GRACE:
                continue
            pool = self.know.pools[spec.pool]
            cpus = at_step(pool.cpus, self.end)[0]
            fitting = sorted(n for n in cpus if n - KWOK_RESERVED_CPU >= spec.cpu - 1e-9)
            self.stats["pending"] += 1
            if not fitting:
                self.stats["pending:too-big"] += 1
                continue
            offerings = [(f"c-{n}x-{pool.arch}-linux", z, ct) for n in fitting for z in ZONES for ct in pool.capacity_types]
            if not any(self.available(o) for o in offerings):
                self.stats["pending:unavailable"] += 1
                continue
            if pool.limit_cpu is not None:
                used = sum(cpu_of(c["instanceType"]) for c in self.claims.values()
                           if c["nodePool"] == pool.name and c["deletedAt"] is None and not c["launchFailed"])
                if used + fitting[0] > pool.limit_cpu:
                    self.stats["pending:limited"] += 1
                    continue
            self.fail("pending", f"{name} ({spec.cpu} CPU, NodePool {pool.name} sizes {cpus}) pending at the end "
                                 f"({'settled' if settled else 'cut short'}): {pending[name]['message']}")

    def available(self, offering: tuple[str, str, str]) -> bool:
        it, zone, ct = offering
        ok = True
        for avail, f in self.know.availability:
            if f.get("instanceTypes") is not None and it not in f["instanceTypes"]:
                continue
            if f.get("zones") is not None and zone not in f["zones"]:
                continue
            if f.get("capacityType") is not None and ct != f["capacityType"]:
                continue
            ok = avail
        return ok


def _seconds(d: str) -> float:
    m = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", d)
    return int(m.group(1) or 0) * 3600 + int(m.group(2) or 0) * 60 + int(m.group(3) or 0)


def _pdb_text(b: PDBSpec) -> str:
    spec = {"minAvailable": b.min_available} if b.min_available is not None else {"maxUnavailable": b.max_unavailable}
    if b.policy:
        spec["unhealthyPodEvictionPolicy"] = b.policy
    return json.dumps(spec)


def check(output: dict, know: Knowledge) -> list[str]:
    """Every violation of the rules above in one `karpy simulate -o json` result."""
    return Checker(output, know).check()
