"""The simulated cluster and cloud: objects, a clock, and the controllers that act on them.

Everything runs on a simulated clock (seconds since the Unix epoch, as a float)
advanced from one timed event to the next; after each event the controllers
are reconciled until nothing changes:

* workload controllers stamp pods out of Deployments, ReplicaSets,
  StatefulSets, Jobs and DaemonSets (a DaemonSet pod per eligible node);
* a kube-scheduler stand-in binds pending pods to ready nodes (pods go to the
  node Karpenter nominated for them first), using the engine's predicates;
* Karpenter's provisioner batches pending pods (closing a batch after
  ``batchIdleDuration`` without new pods, or ``batchMaxDuration`` after it
  opened), runs the scheduling simulation and launches NodeClaims;
* the cloud launches the chosen offering (falling back past offerings that are
  out of capacity), and the node registers after the NodeClass's registration
  delay, at which point its startup taints are removed and it becomes Ready.

All decisions come from the engine (:mod:`karpy.scheduling`,
:mod:`karpy.provisioning`); this module only carries them out.
"""

from __future__ import annotations

import copy
import heapq
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from .. import resources as res
from ..cloudprovider.catalog import get_provider
from ..cloudprovider.types import (
    LABEL_CAPACITY_TYPE,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_REGION,
    LABEL_ZONE,
    InstanceType,
    Offering,
)
from ..provisioning.launch import launch_candidates
from ..provisioning.templates import build_template
from ..scheduling.pods import PodInfo, Taint, compile_pod, untolerated
from ..scheduling.requirements import Requirements
from ..scheduling.scheduler import ExistingNode, NodeClaimTemplate, Results, Scheduler
from ..disruption.drift import HASH_VERSION, NODECLASS_HASH, NODEPOOL_HASH, NODEPOOL_HASH_VERSION, nodeclass_hash, nodepool_hash
from ..disruption.candidates import currently_reschedulable
from .lifecycle import Lifecycle
from .names import NameGenerator
from .workloads import WORKLOAD_KINDS, desired_replicas, new_pod_names, pod_from_template, replicaset_name

DEFAULT_START = "2026-01-01T00:00:00Z"
SETTLE_QUIET = 15 * 60.0  # the simulation is settled after 15 quiet minutes
ICE_TTL = 180.0  # upstream keeps an offering marked out of capacity for 3 minutes
RUN_FOR = "karpy.dev/run-for"
PRICE_ANNOTATION = "karpy.dev/price-per-hour"
PRICE_ESTIMATED_ANNOTATION = "karpy.dev/price-estimated"

NODECLASS_KINDS = {"AKSNodeClass", "EC2NodeClass", "KWOKNodeClass"}
CLUSTER_SCOPED = {"NodePool", "NodeClaim", "Node", "Namespace", "PriorityClass", "RuntimeClass",
                  "StorageClass", "PersistentVolume"} | NODECLASS_KINDS


def parse_time(s: str) -> float:
    return datetime.strptime(s.replace("Z", "+00:00")[:25], "%Y-%m-%dT%H:%M:%S%z").timestamp() if "T" in s else float(s)


def fmt_time(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(int(t), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def object_key(obj: Mapping) -> tuple[str, str, str]:
    kind = obj.get("kind", "")
    meta = obj.get("metadata") or {}
    ns = "" if kind in CLUSTER_SCOPED else str(meta.get("namespace") or "default")
    return kind, ns, str(meta.get("name", ""))


@dataclass(eq=False)
class PodRec:
    obj: dict
    info: PodInfo
    created: float
    owner: tuple[str, str] | None = None  # (kind, name) of the controlling workload
    daemon: bool = False
    node: str | None = None
    nominated: str | None = None  # NodeClaim or Node name Karpenter planned it for
    phase: str = "Pending"
    started: float | None = None
    message: str | None = None

    @property
    def key(self) -> str:
        return self.info.key


@dataclass(eq=False)
class ClaimRec:
    name: str
    nodepool: str
    nodeclass: dict
    template: NodeClaimTemplate
    requirements: Requirements
    requests: dict[str, int]
    created: float
    instance_type: InstanceType | None = None
    offering: Offering | None = None
    launch_failed: bool = False
    registered: float | None = None
    initialized: float | None = None
    node: str | None = None
    deleted: float | None = None
    disruption_reason: str | None = None
    options: list[str] = field(default_factory=list)
    provider: str = ""
    hostname: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    node_annotations: dict[str, str] = field(default_factory=dict)
    last_pod_event: float | None = None
    drifted: str | None = None
    drifted_since: float | None = None
    marked: bool = False  # claimed by a disruption command or a deletion
    deleting_since: float | None = None
    deadline: float | None = None  # when the drain stops waiting (terminationGracePeriod)
    expire_after: float | None = None
    tgp: float | None = None
    disruption_started: float | None = None
    cost_before: float | None = None  # cluster $/h when its disruption started
    cost_after: float | None = None  # cluster $/h once it was gone
    replaced_by: list[str] = field(default_factory=list)


@dataclass(eq=False)
class NodeRec:
    name: str
    labels: dict[str, str]
    taints: list[Taint]
    capacity: dict[str, int]
    allocatable: dict[str, int]
    created: float
    ready: bool = True
    claim: str | None = None
    obj: dict | None = None
    startup_taints: list[Taint] = field(default_factory=list)
    unschedulable: bool = False


class Simulation(Lifecycle):
    def __init__(self, documents: Iterable[Any], region: str | None = None, until: float = 3600.0):
        self.events: list[dict] = []
        self.version = 0
        self.names = NameGenerator()
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.pods: dict[str, PodRec] = {}
        self.claims: dict[str, ClaimRec] = {}
        self.nodes: dict[str, NodeRec] = {}
        self.timers: list[tuple[float, int, str, Any]] = []
        self._seq = 0
        self.scenario: dict | None = None
        initial: list[dict] = []
        for d in documents:
            obj = d.obj if hasattr(d, "obj") else d
            if obj.get("kind") == "Scenario":
                self.scenario = obj
            else:
                initial.append(obj)
        spec = (self.scenario or {}).get("spec") or {}
        settings = spec.get("settings") or {}
        self.start = parse_time(spec.get("start") or DEFAULT_START)
        self.now = self.start
        self.until = self.start + until
        self.region_override = region or spec.get("region")
        self.batch_idle = res.parse_duration(settings.get("batchIdleDuration") or "1s")
        self.batch_max = res.parse_duration(settings.get("batchMaxDuration") or "10s")
        self.min_values_best_effort = settings.get("minValuesPolicy") == "BestEffort"
        self.feature_gates = dict(settings.get("featureGates") or {})
        self.initial = initial
        self.last_action = self.start
        # provisioning batch state
        self.batch_start: float | None = None
        self.batch_last: float | None = None
        self.tried: set[str] = set()  # pending pods already part of a solve that left them pending
        # offerings out of capacity: scenario rules, and what launches learned (the ICE cache)
        self.availability_rules: list[tuple[frozenset | None, frozenset | None, str | None, bool]] = []
        self.ice: dict[tuple[str, str, str], float] = {}
        self._info_cache: dict[str, PodInfo] = {}
        self.region_by_provider: dict[str, str] = {}
        self._init_lifecycle()

    def touch(self) -> None:
        """Something changed: remember when (for settling) and bump the state version (for the disruption engine)."""
        self.last_action = self.now
        self.version += 1

    # --- clock and timers ------------------------------------------------------------
    def at(self, t: float, action: str, arg: Any = None) -> None:
        # at equal times the periodic disruption check runs after everything else
        self._seq += 1
        heapq.heappush(self.timers, (t, (1 if action == "disrupt" else 0, self._seq), action, arg))

    def event(self, kind: str, name: str, reason: str, message: str, etype: str = "Normal", namespace: str = "") -> None:
        self.events.append({
            "time": self.now, "type": etype, "reason": reason, "message": message,
            "involvedObject": {"kind": kind, "name": name, **({"namespace": namespace} if namespace else {})},
        })

    # --- running -----------------------------------------------------------------------
    def run(self) -> None:
        for obj in self.initial:
            self.apply(obj)
        steps = ((self.scenario or {}).get("spec") or {}).get("steps") or []
        for step in steps:
            if self.now >= self.until:
                break
            self.step(step)
        self.run_until_settled()

    def step(self, step: Mapping) -> None:
        self.reconcile()
        if "apply" in step:
            for obj in step["apply"]:
                self.apply(obj)
        elif "advance" in step:
            self.run_until(min(self.until, self.now + res.parse_duration(step["advance"])))
            return
        elif "scale" in step:
            s = step["scale"]
            key = (s["kind"], s.get("namespace") or "default", s["name"])
            obj = self.objects.get(key)
            if obj is not None:
                if s["kind"] == "Job":
                    obj.setdefault("spec", {})["parallelism"] = int(s["replicas"])
                else:
                    obj.setdefault("spec", {})["replicas"] = int(s["replicas"])
        elif "patch" in step:
            p = step["patch"]
            kind = p["kind"]
            ns = "" if kind in CLUSTER_SCOPED else (p.get("namespace") or "default")
            key = (kind, ns, p["name"])
            obj = self.objects.get(key)
            if obj is not None:
                patched = _merge_patch(copy.deepcopy(obj), p.get("merge") or {})
                patched.pop("status", None)
                from ..api.loader import validate_object

                doc, errors = validate_object(patched, file="Scenario patch", old=obj)
                if errors:
                    # the API server would refuse the patch; the cluster carries on unchanged
                    self.event(kind, p["name"], "PatchRejected", "; ".join(str(e) for e in errors), "Warning", ns)
                else:
                    self.apply(doc.obj if doc is not None else patched)
        elif "delete" in step:
            d = step["delete"]
            kind = d["kind"]
            ns = "" if kind in CLUSTER_SCOPED else (d.get("namespace") or "default")
            self.delete((kind, ns, d["name"]))
        elif "unavailable" in step or "available" in step:
            available = "available" in step
            r = step["available"] if available else step["unavailable"]
            self.availability_rules.append((
                frozenset(r["instanceTypes"]) if r.get("instanceTypes") else None,
                frozenset(r["zones"]) if r.get("zones") else None,
                r.get("capacityType"),
                available,
            ))
            if available:
                self.ice.clear()
                self.tried.clear()
        elif "interrupt" in step:
            self.interrupt(step["interrupt"])
        self.reconcile()

    def run_until(self, t_end: float) -> None:
        while True:
            self.reconcile()
            if not self.timers or self.timers[0][0] > t_end:
                self.now = max(self.now, t_end)
                self.reconcile()
                return
            t = self.timers[0][0]
            self.now = max(self.now, t)
            while self.timers and self.timers[0][0] <= self.now:
                _, _, action, arg = heapq.heappop(self.timers)
                getattr(self, f"_on_{action}")(arg)

    def run_until_settled(self) -> None:
        """Run until nothing has happened for 15 minutes and only the periodic disruption
        check is left to run, or until ``--until``."""
        while True:
            self.reconcile()
            if not self.timers:
                break
            t = self.timers[0][0]
            if t > self.until:
                if not all(action == "disrupt" for _, _, action, _ in self.timers):
                    self.now = self.until  # cut short: something was still due
                    return
                break
            only_polling = all(action == "disrupt" for _, _, action, _ in self.timers)
            if only_polling and t >= self.last_action + SETTLE_QUIET and not self.orchestrating and self.validating is None:
                break
            self.now = max(self.now, t)
            while self.timers and self.timers[0][0] <= self.now:
                _, _, action, arg = heapq.heappop(self.timers)
                getattr(self, f"_on_{action}")(arg)
        self.now = min(self.until, max(self.now, self.last_action + SETTLE_QUIET))

    # --- objects -----------------------------------------------------------------------
    def apply(self, obj: dict) -> None:
        obj = copy.deepcopy(obj)
        kind = obj.get("kind")
        key = object_key(obj)
        meta = obj.setdefault("metadata", {})
        if key[1]:
            meta.setdefault("namespace", key[1])
        if kind == "Pod":
            self._add_pod(obj, owner=None)
            return
        if kind == "Node":
            self._add_node_manifest(obj)
            return
        previous = self.objects.get(key)
        meta.setdefault("creationTimestamp", fmt_time(self.now))
        self.objects[key] = obj
        if kind in ("NodePool",) or kind in NODECLASS_KINDS:
            self.tried.clear()
        if kind == "Deployment" and previous is not None:
            old_rs, _ = replicaset_name(previous)
            new_rs, _ = replicaset_name(obj)
            if old_rs != new_rs:
                for p in list(self.pods.values()):
                    if p.owner == ("ReplicaSet", old_rs):
                        self._delete_pod(p)

    def delete(self, key: tuple[str, str, str]) -> None:
        kind = key[0]
        if kind == "Pod":
            p = self.pods.get(f"{key[1]}/{key[2]}")
            if p:
                self._delete_pod(p)
            return
        obj = self.objects.pop(key, None)
        if obj is None:
            return
        if kind in WORKLOAD_KINDS:
            owners = {(kind, key[2])}
            if kind == "Deployment":
                owners.add(("ReplicaSet", replicaset_name(obj)[0]))
            for p in list(self.pods.values()):
                if p.owner in owners and p.info.namespace == key[1]:
                    self._delete_pod(p)
        if kind == "NodePool":
            for c in list(self.claims.values()):
                if c.nodepool == key[2] and c.deleted is None:
                    self.delete_claim(c, None)

    def _delete_pod(self, p: PodRec) -> None:
        self.pods.pop(p.key, None)
        self._pod_event(p)
        self.touch()

    def _pod_event(self, p: PodRec) -> None:
        """A pod arrived on or left a node: its NodeClaim's consolidateAfter clock restarts."""
        if p.node is None or p.daemon:
            return
        n = self.nodes.get(p.node)
        c = self.claims.get(n.claim) if n is not None and n.claim else None
        if c is not None:
            c.last_pod_event = self.now

    def _priority(self, spec: Mapping) -> int:
        name = spec.get("priorityClassName")
        for (kind, _, n), obj in self.objects.items():
            if kind != "PriorityClass":
                continue
            if (name and n == name) or (not name and obj.get("globalDefault")):
                return int(obj.get("value") or 0)
        return int(spec.get("priority") or 0)

    def _add_pod(self, obj: dict, owner: tuple[str, str] | None, daemon: bool = False, node: str | None = None) -> PodRec:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta.setdefault("creationTimestamp", fmt_time(self.now))
        spec = obj.setdefault("spec", {})
        rc = spec.get("runtimeClassName")
        if rc and not spec.get("overhead"):
            rc_obj = self.objects.get(("RuntimeClass", "", rc))
            fixed = ((rc_obj or {}).get("overhead") or {}).get("podFixed")
            if fixed:
                spec["overhead"] = dict(fixed)
        priority = self._priority(spec)
        if spec.get("priorityClassName") or priority:
            spec["priority"] = priority  # as the Priority admission plugin fills it in
        info = compile_pod(obj, priority=priority)
        info.volume_requirements = self._volume_requirements(obj)
        if info.volume_requirements is not None:
            from ..scheduling.pods import class_key
            info.class_key = class_key(info)
        rec = PodRec(obj=obj, info=info, created=self.now, owner=owner, daemon=daemon)
        self.names.reserve(meta["name"])
        self.pods[rec.key] = rec
        if node:
            self._bind(rec, node, quiet=True)
        self.touch()
        return rec

    def _volume_requirements(self, pod: Mapping) -> Requirements | None:
        """Zonal volumes pin their pods' zone: a bound PV's node affinity, or the StorageClass's allowed topologies."""
        reqs = None
        ns = pod["metadata"].get("namespace", "default")
        for v in (pod.get("spec") or {}).get("volumes") or ():
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if not claim:
                continue
            pvc = self.objects.get(("PersistentVolumeClaim", ns, claim))
            if pvc is None:
                continue
            terms = None
            pv_name = (pvc.get("spec") or {}).get("volumeName")
            pv = self.objects.get(("PersistentVolume", "", pv_name)) if pv_name else None
            if pv is not None:
                terms = (((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms")
            else:
                sc_name = (pvc.get("spec") or {}).get("storageClassName")
                sc = self.objects.get(("StorageClass", "", sc_name)) if sc_name else None
                topo = (sc or {}).get("allowedTopologies")
                if topo:
                    terms = [{"matchExpressions": [{"key": e["key"], "operator": "In", "values": e.get("values", [])}
                                                   for e in t.get("matchLabelExpressions") or ()]} for t in topo]
            if terms:
                r = Requirements.from_node_selector(terms[0].get("matchExpressions") or ())
                reqs = r if reqs is None else reqs.union(r)
        return reqs

    def _add_node_manifest(self, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        spec = obj.get("spec") or {}
        cap = res.parse_resource_list(status.get("capacity"))
        alloc = res.parse_resource_list(status.get("allocatable")) or dict(cap)
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        labels.setdefault(LABEL_HOSTNAME, meta["name"])
        n = NodeRec(
            name=meta["name"], labels=labels, taints=[Taint.from_obj(t) for t in spec.get("taints") or ()],
            capacity=cap or alloc, allocatable=alloc, created=self.now, obj=obj,
            unschedulable=bool(spec.get("unschedulable")),
        )
        self.nodes[n.name] = n
        self.names.reserve(n.name)

    # --- reconcile ------------------------------------------------------------------------
    def reconcile(self) -> None:
        for _ in range(100):
            changed = self._workloads()
            changed |= self._kube_scheduler()
            changed |= self._provisioner_trigger()
            if not changed:
                return

    def _workloads(self) -> bool:
        changed = False
        owned: dict[tuple[str, str, str], list[PodRec]] = {}
        for p in self.pods.values():
            if p.owner:
                owned.setdefault((p.owner[0], p.info.namespace, p.owner[1]), []).append(p)
        for (kind, ns, name), obj in list(self.objects.items()):
            if kind not in WORKLOAD_KINDS or kind == "DaemonSet":
                continue
            if kind == "Deployment":
                rs_name, h = replicaset_name(obj)
                owner = ("ReplicaSet", rs_name)
                prefix_obj = {"kind": "ReplicaSet", "metadata": {"name": rs_name, "namespace": ns}}
                extra = {"pod-template-hash": h}
            else:
                owner = (kind, name)
                prefix_obj = obj
                extra = {}
            pods = owned.get((owner[0], ns, owner[1]), [])
            want = desired_replicas(obj)
            if kind == "Job":
                spec = obj.get("spec") or {}
                completions = spec.get("completions")
                done = int((obj.get("status") or {}).get("succeeded") or 0)
                active = [p for p in pods if p.phase in ("Pending", "Running")]
                total = int(completions) if completions is not None else None
                if total is not None:
                    want = min(want, max(0, total - done))
                elif done > 0:
                    want = 0
                pods = active
            if len(pods) < want:
                for pname in new_pod_names(prefix_obj, want - len(pods), self.names, len(pods)):
                    pobj = pod_from_template(obj, pname, extra, owner[0], owner[1])
                    pobj["metadata"]["namespace"] = ns
                    self._add_pod(pobj, owner)
                changed = True
            elif len(pods) > want and kind != "Job":
                # scale down: unbound pods first, then the newest
                victims = sorted(pods, key=lambda p: (p.node is not None, -p.created, p.key))[: len(pods) - want]
                for p in victims:
                    self._delete_pod(p)
                changed = True
        # DaemonSets: one pod per registered node that the pod template can run on
        for (kind, ns, name), obj in list(self.objects.items()):
            if kind != "DaemonSet":
                continue
            have = {p.node for p in owned.get((kind, ns, name), [])}
            tmpl = self._daemon_info(obj)
            for node in self.nodes.values():
                # the DaemonSet controller places its pods on cordoned nodes too
                if node.name in have:
                    continue
                if not _daemon_runs_on(tmpl, node):
                    continue
                pobj = pod_from_template(obj, self.names.generate(f"{name}-"))
                pobj["metadata"]["namespace"] = ns
                pobj["spec"]["nodeName"] = node.name
                self._add_pod(pobj, (kind, name), daemon=True, node=node.name)
                changed = True
        return changed

    def _daemon_info(self, ds: Mapping) -> PodInfo:
        key = f"{ds['metadata'].get('namespace', 'default')}/{ds['metadata']['name']}"
        info = self._info_cache.get(key)
        if info is None:
            tmpl = (ds.get("spec") or {}).get("template") or {}
            pobj = {"metadata": {**(tmpl.get("metadata") or {}), "name": ds["metadata"]["name"],
                                 "namespace": ds["metadata"].get("namespace", "default")},
                    "spec": tmpl.get("spec") or {}}
            info = compile_pod(pobj, priority=self._priority(pobj["spec"]))
            self._info_cache[key] = info
        return info

    # --- kube-scheduler ----------------------------------------------------------------------
    def _node_usage(self) -> dict[str, list[PodRec]]:
        usage: dict[str, list[PodRec]] = {}
        for p in self.pods.values():
            if p.node and p.phase in ("Pending", "Running"):
                usage.setdefault(p.node, []).append(p)
        return usage

    def _existing_node(self, n: NodeRec, pods: list[PodRec], for_karpenter: bool, nominated: list[PodRec] = ()) -> ExistingNode:
        requested = res.total([p.info.requests for p in pods] + [p.info.requests for p in nominated])
        taints = n.taints
        if for_karpenter:
            # Karpenter expects startup taints to go away; they do not block its simulation.
            taints = [t for t in n.taints if t not in n.startup_taints]
        labels = dict(n.labels)
        ports: set = set()
        for p in pods:
            ports.update(p.info.host_ports)
        return ExistingNode(
            name=n.name, labels=labels, taints=tuple(taints), allocatable=n.allocatable, requested=requested,
            host_ports=ports, nodepool=n.labels.get(LABEL_NODEPOOL), bound_pods=[p.info for p in pods] + [p.info for p in nominated],
            schedulable=not n.unschedulable, initialized=n.ready,
        )

    def _kube_scheduler(self) -> bool:
        pending = [p for p in self.pods.values() if p.node is None and p.phase == "Pending" and not p.daemon]
        if not pending:
            return False
        ready = [n for n in self.nodes.values() if n.ready and not n.unschedulable]
        if not ready:
            return False
        usage = self._node_usage()
        changed = False
        # pods go to the node Karpenter nominated for them first
        by_target: dict[str, list[PodRec]] = {}
        for p in pending:
            if p.nominated and p.nominated in self.nodes and self.nodes[p.nominated].ready:
                by_target.setdefault(p.nominated, []).append(p)
        for name, pods in sorted(by_target.items()):
            n = self.nodes[name]
            s = Scheduler([], [self._existing_node(n, usage.get(name, []), False)], self._bound_elsewhere(usage, exclude=name))
            r = s.solve([p.info for p in sorted(pods, key=lambda p: (-p.info.priority, p.created, p.key))])
            for node_name, infos in r.existing.items():
                for info in infos:
                    self._bind(self.pods[info.key], node_name)
                    usage.setdefault(node_name, []).append(self.pods[info.key])
                    changed = True
        rest = [p for p in pending if p.node is None and not (p.nominated and p.nominated in self.claims
                                                                and self.claims[p.nominated].deleted is None
                                                                and self.claims[p.nominated].node is None)]
        if rest:
            nodes = [self._existing_node(n, usage.get(n.name, []), False) for n in sorted(ready, key=lambda n: (n.created, n.name))]
            s = Scheduler([], nodes)
            r = s.solve([p.info for p in sorted(rest, key=lambda p: (-p.info.priority, p.created, p.key))])
            for node_name, infos in r.existing.items():
                for info in infos:
                    self._bind(self.pods[info.key], node_name)
                    changed = True
        return changed

    def _bound_elsewhere(self, usage: Mapping[str, list[PodRec]], exclude: str) -> list[tuple[PodInfo, Mapping[str, str]]]:
        out = []
        for name, pods in usage.items():
            if name == exclude or name not in self.nodes:
                continue
            labels = self.nodes[name].labels
            out.extend((p.info, labels) for p in pods)
        return out

    def _bind(self, p: PodRec, node: str, quiet: bool = False) -> None:
        p.node = node
        p.nominated = None
        p.phase = "Running"
        p.started = self.now
        p.message = None
        p.obj.setdefault("spec", {})["nodeName"] = node
        self.tried.discard(p.key)
        self._pod_event(p)
        if not quiet:
            self.event("Pod", p.info.name, "Scheduled", f"Successfully assigned {p.key} to {node}", namespace=p.info.namespace)
        self.touch()
        run_for = ((p.obj.get("metadata") or {}).get("annotations") or {}).get(RUN_FOR)
        if run_for:
            self.at(self.now + res.parse_duration(run_for), "pod_done", p.key)

    def _leaving(self, n: NodeRec) -> bool:
        c = self.claims.get(n.claim) if n.claim else None
        return c is not None and (c.marked or c.deleting_since is not None)

    def _on_pod_done(self, key: str) -> None:
        p = self.pods.get(key)
        if p is None or p.phase != "Running":
            return
        p.phase = "Succeeded"
        self._pod_event(p)
        self.touch()
        if p.owner and p.owner[0] == "Job":
            job = self.objects.get(("Job", p.info.namespace, p.owner[1]))
            if job is not None:
                st = job.setdefault("status", {})
                st["succeeded"] = int(st.get("succeeded") or 0) + 1
                spec = job.get("spec") or {}
                completions = spec.get("completions")
                total = int(completions) if completions is not None else int(spec.get("parallelism") or 1)
                if st["succeeded"] >= total and not st.get("completionTime"):
                    st["completionTime"] = fmt_time(self.now)
                    self.event("Job", p.owner[1], "Completed", "Job completed", namespace=p.info.namespace)

    # --- provisioning ------------------------------------------------------------------------
    def _provisionable(self) -> list[PodRec]:
        """Pending pods Karpenter should find capacity for, and the pods of nodes being deleted
        (capacity for them is launched while their node drains)."""
        out = []
        leaving = {c.node for c in self.claims.values() if c.deleting_since is not None and c.deleted is None and c.node}
        pdbs = self._pdb_states() if leaving else []
        for p in self.pods.values():
            if p.daemon:
                continue
            if p.node is not None:
                if p.node not in leaving or p.phase != "Running" or (p.owner and p.owner[0] == "Node"):
                    continue
                if not currently_reschedulable(self._pod_state(p), pdbs, self.now):
                    continue  # the drain will not evict it (do-not-disrupt, a PDB allowing nothing)
                if p.nominated:
                    c = self.claims.get(p.nominated)
                    if c is not None and c.deleted is None:
                        continue
                    n = self.nodes.get(p.nominated)
                    if n is not None and p.nominated != p.node and not self._leaving(n):
                        continue
                    p.nominated = None
                out.append(p)
                continue
            if p.phase != "Pending":
                continue
            if p.nominated:
                c = self.claims.get(p.nominated)
                if c is not None and c.deleted is None:
                    continue
                n = self.nodes.get(p.nominated)
                if n is not None and not n.ready:
                    continue
                p.nominated = None
            out.append(p)
        return out

    def _provisioner_trigger(self) -> bool:
        fresh = [p for p in self._provisionable() if p.key not in self.tried]
        if not fresh:
            return False
        if self.batch_start is None:
            self.batch_start = self.now
            self.batch_last = self.now
            self.at(self.now + self.batch_idle, "batch", None)
        elif any(p.created > (self.batch_last or 0) for p in fresh):
            self.batch_last = self.now
            self.at(min(self.now + self.batch_idle, self.batch_start + self.batch_max), "batch", None)
        for p in fresh:
            self.tried.add(p.key)
        return False

    def _on_batch(self, _: Any) -> None:
        if self.batch_start is None:
            return
        deadline = min((self.batch_last or self.batch_start) + self.batch_idle, self.batch_start + self.batch_max)
        if self.now + 1e-9 < deadline:
            return
        self.batch_start = self.batch_last = None
        self.provision()

    def region_for(self, provider) -> str:
        return self.region_override or provider.default_region

    def _nodeclass(self, nodepool: Mapping) -> tuple[dict | None, Any]:
        ref = (((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
        provider = get_provider(ref.get("group") or ref.get("kind") or "karpenter.kwok.sh")
        nc = self.objects.get((ref.get("kind") or provider.nodeclass_kind, "", ref.get("name", "")))
        return nc, provider

    def _offering_unavailable(self, it: InstanceType, o: Offering) -> bool:
        """Scenario rules: does launching this offering fail right now?"""
        verdict = False
        for types, zones, ct, available in self.availability_rules:
            if types is not None and it.name not in types:
                continue
            if zones is not None and o.zone not in zones:
                continue
            if ct is not None and o.capacity_type != ct:
                continue
            verdict = not available
        return verdict

    def _known_unavailable(self, it: InstanceType, o: Offering) -> bool:
        t = self.ice.get((it.name, o.zone, o.capacity_type))
        return t is not None and t > self.now

    def _with_ice(self, types: list[InstanceType]) -> list[InstanceType]:
        """Instance types as Karpenter sees them: offerings it learned are out of capacity are unavailable."""
        if not self.ice:
            return types
        out = []
        for it in types:
            if any(self._known_unavailable(it, o) for o in it.offerings):
                it = InstanceType(it.name, it.labels, it.capacity, it.overhead,
                                  [Offering(o.zone, o.capacity_type, o.price, o.available and not self._known_unavailable(it, o),
                                            o.price_estimated, o.reservation_id) for o in it.offerings])
            out.append(it)
        return out

    def templates(self) -> tuple[list[NodeClaimTemplate], dict[str, str], dict[str, tuple[dict, Any]]]:
        daemon_infos = [self._daemon_info(obj) for (kind, _, _), obj in sorted(self.objects.items()) if kind == "DaemonSet"]
        usage: dict[str, dict[str, int]] = {}
        for c in self.claims.values():
            if c.deleted is None and c.instance_type is not None:
                usage[c.nodepool] = res.add(usage.get(c.nodepool, {}), c.instance_type.capacity)
                usage[c.nodepool]["nodes"] = usage[c.nodepool].get("nodes", 0) + 1
        out = []
        problems: dict[str, str] = {}
        classes: dict[str, tuple[dict, Any]] = {}
        for (kind, _, name), np_obj in sorted(self.objects.items()):
            if kind != "NodePool":
                continue
            nc, provider = self._nodeclass(np_obj)
            if nc is None:
                problems[name] = f'incompatible with nodepool "{name}", nodeclass not found'
                continue
            region = self.region_for(provider)
            types = self._with_ice(provider.instance_types(region, nc))
            tpl = build_template(np_obj, types, daemon_infos, usage.get(name, {}), provider.WELL_KNOWN_LABELS)
            out.append(tpl)
            classes[name] = (nc, provider)
        return out, problems, classes

    def _karpenter_view(self) -> tuple[list[ExistingNode], list[tuple[PodInfo, Mapping[str, str]]]]:
        """Nodes and launched-but-unregistered NodeClaims, with the pods bound or nominated to them."""
        usage = self._node_usage()
        nominated: dict[str, list[PodRec]] = {}
        leaving = {n.name for n in self.nodes.values() if self._leaving(n)}
        for p in self.pods.values():
            # pods waiting for capacity, and pods of leaving nodes, hold room where they were planned
            if p.nominated and p.phase in ("Pending", "Running") and (p.node is None or p.node in leaving) \
                    and p.nominated != p.node:
                nominated.setdefault(p.nominated, []).append(p)
        existing: list[ExistingNode] = []
        for n in sorted(self.nodes.values(), key=lambda n: (n.created, n.name)):
            e = self._existing_node(n, usage.get(n.name, []), True, nominated.get(n.name, []))
            if self._leaving(n):
                e.schedulable = False
            existing.append(e)
        for c in self.claims.values():
            if c.deleted is not None or c.node is not None or c.instance_type is None:
                continue
            labels = self._claim_labels(c)
            noms = nominated.get(c.name, [])
            existing.append(ExistingNode(
                name=c.name, labels=labels, taints=c.template.taints, allocatable=c.instance_type.allocatable,
                requested=res.add(_daemons_on(c.template.daemon_pods, labels), res.total(p.info.requests for p in noms)),
                nodepool=c.nodepool, bound_pods=[p.info for p in noms], initialized=False,
            ))
        return existing, []

    def provision(self) -> None:
        pods = self._provisionable()
        if not pods:
            return
        templates, problems, classes = self.templates()
        existing, elsewhere = self._karpenter_view()
        s = Scheduler(templates, existing, elsewhere, min_values_best_effort=self.min_values_best_effort)
        ordered = sorted(pods, key=lambda p: (p.created, p.key))
        results = s.solve([p.info for p in ordered])
        self._apply_results(results, problems, classes)

    def _apply_results(self, results: Results, problems: Mapping[str, str], classes: Mapping[str, tuple[dict, Any]]) -> None:
        for target, infos in results.existing.items():
            for info in infos:
                p = self.pods[info.key]
                p.nominated = target
                kind = "nodeclaim" if target in self.claims else "node"
                self.event("Pod", info.name, "Nominated", f"Pod should schedule on: {kind}/{target}", namespace=info.namespace)
        if results.new_nodeclaims:
            self.event("Karpenter", "provisioner", "ComputedNodeClaims",
                       f"computed new nodeclaim(s) to fit pod(s): nodeclaims={len(results.new_nodeclaims)}, "
                       f"pods={sum(len(c.pods) for c in results.new_nodeclaims)}")
        for nc in results.new_nodeclaims:
            nodeclass, provider = classes[nc.template.nodepool]
            self._launch(nc, nodeclass, provider)
        for key, why in results.errors.items():
            p = self.pods.get(key)
            if p is None:
                continue
            extra = "; ".join(v for v in problems.values())
            msg = why if not extra else (f"{why}; {extra}" if why else extra)
            if p.message != msg:
                self.event("Pod", p.info.name, "FailedScheduling", f"Failed to schedule pod, {msg}", "Warning", p.info.namespace)
            p.message = msg

    def _claim_labels(self, c: ClaimRec) -> dict[str, str]:
        labels = dict(c.template.labels)
        # every requirement with listed values becomes a label (one value chosen where several are allowed)
        for r in c.requirements:
            if not r.complement and r.values and r.key not in (LABEL_HOSTNAME, LABEL_INSTANCE_TYPE):
                labels[r.key] = sorted(r.values)[0]
        labels.update(c.requirements.labels())
        if c.instance_type is not None:
            labels.update(c.instance_type.labels)
        if c.offering is not None:
            labels[LABEL_ZONE] = c.offering.zone
            labels[LABEL_CAPACITY_TYPE] = c.offering.capacity_type
        labels[LABEL_NODEPOOL] = c.nodepool
        labels.pop(LABEL_HOSTNAME, None)
        return labels

    def _launch(self, nc, nodeclass: dict, provider, nominate: bool = True) -> ClaimRec:
        name = self.names.generate(f"{nc.template.nodepool}-")
        np_obj = self.objects.get(("NodePool", "", nc.template.nodepool)) or {}
        tspec = ((np_obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        expire = tspec.get("expireAfter", "720h")
        tgp = tspec.get("terminationGracePeriod")
        c = ClaimRec(
            name=name, nodepool=nc.template.nodepool, nodeclass=nodeclass, template=nc.template,
            requirements=nc.requirements, requests=nc.requests, created=self.now,
            options=[it.name for it in nc.instance_types], provider=provider.name,
            annotations={NODEPOOL_HASH: nodepool_hash(np_obj), NODEPOOL_HASH_VERSION: HASH_VERSION,
                         NODECLASS_HASH: nodeclass_hash(nodeclass)},
            node_annotations={str(k): str(v) for k, v in
                              ((((np_obj.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("annotations") or {}).items()},
            expire_after=None if expire in (None, "Never") else res.parse_duration(expire),
            tgp=None if tgp in (None, "Never") else res.parse_duration(tgp),
        )
        self.claims[name] = c
        self.touch()
        shown = ", ".join(c.options[:5]) + (f" and {len(c.options) - 5} other(s)" if len(c.options) > 5 else "")
        self.event("NodeClaim", name, "Created",
                   f"created nodeclaim for {len(nc.pods)} pod(s), requests {_fmt_requests(nc.requests)}, "
                   f"instance-types {shown}")
        for p in nc.pods if nominate else ():
            rec = self.pods.get(p.key)
            if rec is None:
                continue
            rec.nominated = name
            self.event("Pod", p.name, "Nominated", f"Pod should schedule on: nodeclaim/{name}", namespace=p.namespace)
        candidates = launch_candidates(nc.requirements, nc.instance_types, self._known_unavailable)
        for cand in candidates:
            if self._offering_unavailable(cand.instance_type, cand.offering):
                self.ice[(cand.instance_type.name, cand.offering.zone, cand.offering.capacity_type)] = self.now + ICE_TTL
                self.event("NodeClaim", name, "InsufficientCapacity",
                           f"{cand.instance_type.name} {cand.offering.capacity_type} in {cand.offering.zone} is out of capacity, "
                           f"trying the next offering", "Warning")
                continue
            c.instance_type = cand.instance_type
            c.offering = cand.offering
            break
        if c.instance_type is None:
            c.launch_failed = True
            c.deleted = self.now
            self.event("NodeClaim", name, "LaunchFailed",
                       "InsufficientCapacityError: all requested instance types were unavailable during launch", "Warning")
            for p in nc.pods:
                rec = self.pods.get(p.key)
                if rec is not None and rec.nominated == name:
                    rec.nominated = None
                    self.tried.discard(p.key)
            return c
        it, o = c.instance_type, c.offering
        cheaper_note = ""
        if o.price_estimated:
            cheaper_note = " (spot price estimated)"
        self.event("NodeClaim", name, "Launched",
                   f"launched {it.name} ({o.capacity_type}, {o.zone}) at ${o.price:.4f}/h{cheaper_note}: the cheapest "
                   f"{o.capacity_type} offering of {len(c.options)} compatible instance type(s) for "
                   f"{len(nc.pods)} pod(s) requesting {_fmt_requests(nc.requests)}")
        self.at(self.now + provider.registration_delay(nodeclass), "register", name)
        self.record_cost()
        self._ensure_tick()
        return c

    def _on_register(self, name: str) -> None:
        c = self.claims.get(name)
        if c is None or c.deleted is not None:
            return
        provider = get_provider(c.provider)
        node_name = self._node_name(c, provider)
        labels = self._claim_labels(c)
        labels[LABEL_HOSTNAME] = node_name
        if provider.name != "kwok":  # upstream's kwok provider sets no region label
            labels[LABEL_REGION] = self.region_for(provider)
        startup = list(c.template.startup_taints)
        n = NodeRec(
            name=node_name, labels=labels, taints=list(c.template.taints) + startup,
            capacity=dict(c.instance_type.capacity), allocatable=c.instance_type.allocatable,
            created=self.now, ready=False, claim=c.name, startup_taints=startup,
        )
        self.nodes[node_name] = n
        c.node = node_name
        c.registered = self.now
        for p in self.pods.values():
            if p.nominated == c.name:
                p.nominated = node_name
        self.event("NodeClaim", c.name, "Registered", f"Status condition transitioned, Type: Registered, Status: True (node {node_name})")
        # the node's agents start, remove the startup taints and report Ready
        n.taints = [t for t in n.taints if t not in startup]
        n.ready = True
        c.initialized = self.now
        self.event("NodeClaim", c.name, "Initialized", "Status condition transitioned, Type: Initialized, Status: True")
        self.touch()
        self._progress_commands()

    def _node_name(self, c: ClaimRec, provider) -> str:
        if provider.name == "azure":
            name = f"aks-{c.name}"
        elif provider.name == "aws":
            i = len(self.nodes) + 1
            region = self.region_for(provider)
            domain = "ec2.internal" if region == "us-east-1" else f"{region}.compute.internal"
            name = f"ip-192-168-{(i // 250) % 250}-{i % 250 + 1}.{domain}"
        else:
            name = c.name
        self.names.reserve(name)
        return name



def _fmt_requests(r: Mapping[str, int]) -> str:
    return "{" + ",".join(f'"{k}":"{v}"' for k, v in res.format_resource_list(r).items()) + "}"


def _daemons_on(daemons: Iterable[PodInfo], labels: Mapping[str, str]) -> dict[str, int]:
    """Requests of the DaemonSet pods whose node selector and affinity match these node labels."""
    out: dict[str, int] = {}
    for d in daemons:
        if not d.node_selector.satisfied_by_labels(labels):
            continue
        if d.required_terms and not any(t.satisfied_by_labels(labels) for t in d.required_terms):
            continue
        out = res.add(out, d.requests)
    return out


def _daemon_runs_on(info: PodInfo, node: NodeRec) -> bool:
    # DaemonSet pods tolerate the node lifecycle taints automatically.
    taints = [t for t in node.taints if not t.key.startswith("node.kubernetes.io/")]
    if untolerated(info.tolerations, taints) is not None:
        return False
    if not info.node_selector.satisfied_by_labels(node.labels):
        return False
    if info.required_terms and not any(t.satisfied_by_labels(node.labels) for t in info.required_terms):
        return False
    return True


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        else:
            target[k] = _merge_patch(target.get(k), v)
    return target
