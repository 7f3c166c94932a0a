"""A small envtest-like harness for Karpenter's controllers, on simulated time.

Modelled on upstream's controller suites (kubernetes-sigs/karpenter pkg/controllers/**/suite_test.go):
tests create objects, reconcile ONE controller for a key, and assert on the API objects. No simulated
world runs unless a test asks for it: tests play kubelet (``make_ready``) and kube-scheduler (``bind``,
``mark_unschedulable``) themselves.

    h = Harness()
    h.create(h.nodeclass(), h.nodepool())
    claim = h.launch_node()                     # NodeClaim -> launched -> registered -> Ready -> initialized
    h.reconcile("nodeclaim.lifecycle", name)    # one controller, then pump the changes into the cache
    h.run_for(30)                               # fire timers and let every controller run (as sim.py does)

Everything runs on a :class:`~karpy.runtime.clock.SimClock`; nothing sleeps.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any, Iterable

from karpy.cloudprovider.simulated import SimulatedCloud, SimulatedCloudProvider
from karpy.controllers.env import Settings
from karpy.controllers.operator import build
from karpy.kube import errors as E
from karpy.kube.memory import MemoryAPI
from karpy.kube.times import fmt_time, parse_time
from karpy.runtime.clock import SimClock
from karpy.runtime.events import Recorder
from karpy.runtime.log import Logger
from karpy.runtime.manager import Manager, condition

START = parse_time("2026-01-01T00:00:00Z")
KWOK_REF = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
ZONES = ("test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d")
FINALIZER = "karpenter.sh/termination"
DISRUPTED_TAINT = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
HOSTNAME_LABEL = "kubernetes.io/hostname"

_seq = itertools.count(1)


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_seq)}"


# --- object builders (plain manifests, as a user writes them) -------------------------------------


def nodeclass(name: str = "default", delay: str | None = None, spec: dict | None = None) -> dict:
    obj: dict = {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": name}}
    s = dict(spec or {})
    if delay:
        s["nodeRegistrationDelay"] = delay
    if s:
        obj["spec"] = s
    return obj


def nodepool(name: str = "default", *, family=("c",), capacity=("on-demand",), arch=("amd64",), zones=None,
             requirements: Iterable[dict] | None = None, consolidate_after: str | None = "Never",
             policy: str | None = None, budgets: list | None = None, labels: dict | None = None,
             annotations: dict | None = None, taints=None, startup_taints=None, expire_after: str | None = None,
             termination_grace_period: str | None = None, limits: dict | None = None, weight: int | None = None,
             node_class: str = "default") -> dict:
    reqs = [
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": list(arch)},
        {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": list(capacity)},
    ]
    if family:
        reqs.append({"key": "karpenter.kwok.sh/instance-family", "operator": "In", "values": list(family)})
    if zones:
        reqs.append({"key": ZONE_LABEL, "operator": "In", "values": list(zones)})
    reqs.extend(requirements or ())
    tspec: dict = {"requirements": reqs, "nodeClassRef": dict(KWOK_REF, name=node_class)}
    if taints:
        tspec["taints"] = [dict(t) for t in taints]
    if startup_taints:
        tspec["startupTaints"] = [dict(t) for t in startup_taints]
    if expire_after is not None:
        tspec["expireAfter"] = expire_after
    if termination_grace_period is not None:
        tspec["terminationGracePeriod"] = termination_grace_period
    template: dict = {"spec": tspec}
    tmeta: dict = {}
    if labels:
        tmeta["labels"] = dict(labels)
    if annotations:
        tmeta["annotations"] = dict(annotations)
    if tmeta:
        template["metadata"] = tmeta
    disruption: dict = {}
    if consolidate_after is not None:
        disruption["consolidateAfter"] = consolidate_after
    if policy is not None:
        disruption["consolidationPolicy"] = policy
    if budgets is not None:
        disruption["budgets"] = [dict(b) for b in budgets]
    spec: dict = {"template": template, "disruption": disruption}
    if limits:
        spec["limits"] = dict(limits)
    if weight is not None:
        spec["weight"] = weight
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def pod(name: str | None = None, cpu: str | None = "1", memory: str | None = None, *, namespace: str = "default",
        labels: dict | None = None, annotations: dict | None = None, node_selector: dict | None = None,
        tolerations: list | None = None, owner: dict | None = None, priority_class: str | None = None,
        host_port: int | None = None, unschedulable: bool = False, **spec: Any) -> dict:
    """A pod manifest; ``unschedulable`` pre-marks it as kube-scheduler would (PodScheduled=False)."""
    c: dict = {"name": "main", "image": "registry.example.com/app:1"}
    req = {}
    if cpu is not None:
        req["cpu"] = str(cpu)
    if memory is not None:
        req["memory"] = memory
    if req:
        c["resources"] = {"requests": req}
    if host_port is not None:
        c["ports"] = [{"containerPort": host_port, "hostPort": host_port, "protocol": "TCP"}]
    s: dict = {"containers": [c]}
    if node_selector:
        s["nodeSelector"] = dict(node_selector)
    if tolerations:
        s["tolerations"] = [dict(t) for t in tolerations]
    if priority_class:
        s["priorityClassName"] = priority_class
    s.update(spec)
    meta: dict = {"name": name or unique("pod"), "namespace": namespace}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner:
        meta["ownerReferences"] = [dict(owner)]
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": s}
    if unschedulable:
        obj["status"] = {"phase": "Pending", "conditions": [_unschedulable_condition(START)]}
    return obj


def node(name: str, cpu: str = "4", memory: str = "16Gi", pods: str = "110", labels: dict | None = None,
         taints: list | None = None, ready: bool = True, unschedulable: bool = False,
         provider_id: str | None = None) -> dict:
    """A Node manifest (as a kubelet registers it)."""
    lbls = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", HOSTNAME_LABEL: name}
    lbls.update(labels or {})
    spec: dict = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    if provider_id:
        spec["providerID"] = provider_id
    cap = {"cpu": cpu, "memory": memory, "pods": pods}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": lbls}, "spec": spec,
            "status": {"capacity": cap, "allocatable": dict(cap),
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                       "lastTransitionTime": fmt_time(START)}]}}


def owner_ref(obj: dict, controller: bool = True) -> dict:
    return {"apiVersion": obj.get("apiVersion", "apps/v1"), "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": controller, "blockOwnerDeletion": True}


def pdb(name: str, selector: dict, *, min_available=None, max_unavailable=None, namespace: str = "default",
        policy: str | None = None) -> dict:
    spec: dict = {"selector": {"matchLabels": dict(selector)}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    if policy:
        spec["unhealthyPodEvictionPolicy"] = policy
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def _unschedulable_condition(t: float) -> dict:
    return {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/0 nodes are available", "lastTransitionTime": fmt_time(t)}


# --- reading API objects ---------------------------------------------------------------------------


def labels(obj: dict) -> dict:
    return (obj.get("metadata") or {}).get("labels") or {}


def annotations(obj: dict) -> dict:
    return (obj.get("metadata") or {}).get("annotations") or {}


def finalizers(obj: dict) -> list:
    return list((obj.get("metadata") or {}).get("finalizers") or ())


def taints(obj: dict) -> list:
    return list((obj.get("spec") or {}).get("taints") or ())


def has_taint(obj: dict, key: str, effect: str | None = None) -> bool:
    return any(t.get("key") == key and (effect is None or t.get("effect") == effect) for t in taints(obj))


def cond(obj: dict, ctype: str) -> dict | None:
    return condition(obj, ctype)


def cond_status(obj: dict, ctype: str) -> str | None:
    c = condition(obj, ctype)
    return None if c is None else c.get("status")


def deleting(obj: dict | None) -> bool:
    return bool(((obj or {}).get("metadata") or {}).get("deletionTimestamp"))


# --- the harness -----------------------------------------------------------------------------------


class Harness:
    def __init__(self, start: float = START, settings: Settings | None = None, world: bool = False):
        self.clock = SimClock(start)
        self.api = MemoryAPI(self.clock)
        self.mgr = Manager(self.api, self.clock, strict=True)
        self.cloud = SimulatedCloud(self.api, self.clock)
        self.log = Logger(self.clock, level="error", keep=False)
        self.records: list[dict] = []
        self.log.listeners.append(self.records.append)
        self.recorder = Recorder(self.api, self.clock)
        self.provider = SimulatedCloudProvider(self.cloud, lambda kind, name: self.mgr.get(kind, name), self.clock,
                                               self.recorder)
        self.settings = settings or Settings()
        self.karpenter = build(self.mgr, self.api, self.clock, self.provider, self.settings, log=self.log,
                               recorder=self.recorder)
        self.world = None
        if world:
            from karpy.simulator.sim import World

            self.world = World(self.mgr, self.api, self.clock, self.cloud, self.karpenter.cluster.compiler)
        self.mgr.start()
        self.controllers = {c.name: c for c in self.mgr.controllers}
        self.conflicts = 0

    # --- shortcuts ---------------------------------------------------------------------------
    @property
    def cluster(self):
        return self.karpenter.cluster

    @property
    def disruption(self):
        return self.karpenter.disruption

    @property
    def provisioner(self):
        return self.karpenter.provisioner

    def now(self) -> float:
        return self.clock.now()

    def controller(self, name: str):
        return self.controllers[name]

    # --- writing -----------------------------------------------------------------------------
    def create(self, *objs: dict) -> list[dict]:
        out = [self.api.create(copy.deepcopy(o)) for o in objs]
        self.mgr.pump()
        return out

    def create_one(self, obj: dict) -> dict:
        return self.create(obj)[0]

    def patch(self, kind: str, name: str, patch: Any, namespace: str = "", subresource: str | None = None) -> dict:
        out = self.api.patch(kind, name, patch, namespace, subresource=subresource)
        self.mgr.pump()
        return out

    def delete(self, kind: str, name: str, namespace: str = "", **kw: Any) -> dict | None:
        out = self.api.delete(kind, name, namespace, **kw)
        self.mgr.pump()
        return out

    def setup(self, *pools: dict, nodeclass_obj: dict | None = None) -> None:
        """The default KWOKNodeClass and the given NodePools (one ``default`` NodePool when none)."""
        self.create(nodeclass_obj or nodeclass(), *(pools or (nodepool(),)))

    # --- reading -----------------------------------------------------------------------------
    def get(self, kind: str, name: str, namespace: str = "") -> dict | None:
        return self.api.try_get(kind, name, namespace)

    def list(self, kind: str) -> list[dict]:
        items, _ = self.api.list(kind)
        return sorted(items, key=lambda o: (o["metadata"].get("creationTimestamp") or "", o["metadata"]["name"]))

    def nodeclaims(self) -> list[dict]:
        return self.list("NodeClaim")

    def nodes(self) -> list[dict]:
        return self.list("Node")

    def pods(self) -> list[dict]:
        return self.list("Pod")

    def events(self, reason: str | None = None, involved: str | None = None) -> list[dict]:
        items, _ = self.api.list("Event")
        items = sorted(items, key=lambda e: int(e["metadata"]["resourceVersion"]))
        return [e for e in items if (reason is None or e.get("reason") == reason)
                and (involved is None or (e.get("involvedObject") or {}).get("name") == involved)]

    def logs(self, message: str) -> list[dict]:
        return [r for r in self.records if r.get("message") == message]

    # --- running controllers --------------------------------------------------------------------
    def reconcile(self, controller: str | Any, key: Any = "") -> float | None:
        """Run ONE controller's reconcile for ``key``, then deliver its changes to the cache (upstream's
        ExpectObjectReconciled / ExpectSingletonReconciled). Other controllers' queued work does not run."""
        c = self.controllers[controller] if isinstance(controller, str) else controller
        for attempt in range(4):
            self.mgr.pump()
            try:
                out = c.reconcile(key)
            except E.Conflict:
                # controller-runtime requeues a reconcile that hit a stale cache; so do we
                self.conflicts += 1
                if attempt == 3:
                    raise
                continue
            except E.NotFound:
                out = None  # the manager drops these too
            self.mgr.pump()
            return out
        return None

    def clear_queue(self) -> None:
        """Forget queued reconciles (work the handlers queued while a test drives controllers by hand)."""
        self.mgr._queue.clear()
        self.mgr._idle.clear()
        self.mgr._queued.clear()

    def drain(self) -> None:
        """Run everything queued at this instant, until nothing is left (timers are not fired)."""
        self.mgr.drain()

    def tick(self, seconds: float) -> None:
        """Move the clock without firing anything (for tests that reconcile by hand)."""
        self.clock.set(self.clock.now() + seconds)

    def run_for(self, seconds: float) -> None:
        """Fire every timer due in the next ``seconds`` and run every controller, as ``karpy simulate`` does."""
        self.run_until(self.clock.now() + seconds)

    def run_until(self, t_end: float) -> None:
        while True:
            self.mgr.drain()
            nt = self.clock.next_time()
            if nt is None or nt > t_end:
                self.clock.set(t_end)
                self.mgr.drain()
                return
            batch = self.clock.pop_next_batch()
            if batch:
                self.clock.set(batch[0].when)
            for t in batch:
                t.fn()
            self.mgr.drain()

    def fire_cloud(self) -> None:
        """Run the cloud's timers that are due now (instances registering as Nodes), nothing else."""
        due = [t for t in list(self.clock._timers) if not t.cancelled and t.label.startswith("register/")
               and t.when <= self.clock.now()]
        for t in due:
            t.cancel()
            t.fn()
        self.mgr.pump()

    # --- playing kubelet and kube-scheduler -----------------------------------------------------
    def mark_unschedulable(self, *pods: dict) -> None:
        """kube-scheduler's verdict: PodScheduled=False, reason Unschedulable."""
        for p in pods:
            cur = self.api.get("Pod", p["metadata"]["name"], p["metadata"].get("namespace", "default"))
            st = dict(cur.get("status") or {})
            conds = [c for c in st.get("conditions") or () if c.get("type") != "PodScheduled"]
            conds.append(_unschedulable_condition(self.now()))
            st["conditions"] = conds
            self.api.patch("Pod", cur["metadata"]["name"], {"status": st}, cur["metadata"]["namespace"],
                           subresource="status")
        self.mgr.pump()

    def bind(self, p: dict, node_name: str, running: bool = True, ready: bool = True) -> dict:
        """Bind a pod (the binding subresource), and start it as a kubelet would."""
        name, ns = p["metadata"]["name"], p["metadata"].get("namespace", "default")
        self.api.bind(name, ns, node_name)
        if running:
            self.set_pod_running(name, ns, ready=ready)
        self.mgr.pump()
        return self.api.get("Pod", name, ns)

    def set_pod_running(self, name: str, ns: str = "default", ready: bool = True) -> None:
        cur = self.api.get("Pod", name, ns)
        ts = fmt_time(self.now())
        st = dict(cur.get("status") or {})
        st["phase"] = "Running"
        st["startTime"] = ts
        conds = [c for c in st.get("conditions") or () if c.get("type") not in ("Ready", "ContainersReady")]
        conds += [{"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": ts},
                  {"type": "ContainersReady", "status": "True" if ready else "False", "lastTransitionTime": ts}]
        st["conditions"] = conds
        self.api.patch("Pod", name, {"status": st}, ns, subresource="status")
        self.mgr.pump()

    def set_pod_phase(self, name: str, phase: str, ns: str = "default") -> None:
        self.api.patch("Pod", name, {"status": {"phase": phase}}, ns, subresource="status")
        self.mgr.pump()

    def make_ready(self, node_name: str, ready: bool = True) -> dict:
        """The kubelet posts Ready (or NotReady)."""
        n = self.api.get("Node", node_name)
        st = dict(n.get("status") or {})
        conds = [c for c in st.get("conditions") or () if c.get("type") != "Ready"]
        conds.append({"type": "Ready", "status": "True" if ready else "False",
                      "reason": "KubeletReady" if ready else "KubeletNotReady", "lastTransitionTime": fmt_time(self.now())})
        st["conditions"] = conds
        out = self.api.patch("Node", node_name, {"status": st}, subresource="status")
        self.mgr.pump()
        return out

    def remove_taint(self, node_name: str, key: str) -> dict:
        n = self.api.get("Node", node_name)
        out = self.api.patch("Node", node_name, {"spec": {"taints": [t for t in taints(n) if t.get("key") != key]}})
        self.mgr.pump()
        return out

    # --- NodeClaims and Nodes, step by step (as upstream's Expect... helpers) ---------------------
    def nodeclaim(self, nodepool_name: str = "default", *, instance_types: Iterable[str] | None = None,
                  requirements: Iterable[dict] | None = None, cpu: str = "1", name: str | None = None,
                  spec: dict | None = None, labels: dict | None = None, annotations: dict | None = None) -> dict:
        """A NodeClaim manifest for a NodePool, as the provisioner would stamp it (hash annotations included)."""
        from karpy.disruption.drift import HASH_VERSION, NODECLASS_HASH, NODEPOOL_HASH, NODEPOOL_HASH_VERSION, \
            nodeclass_hash, nodepool_hash

        np = self.api.get("NodePool", nodepool_name)
        tspec = np["spec"]["template"].get("spec") or {}
        reqs = [dict(r) for r in tspec.get("requirements") or ()]
        if instance_types:
            reqs.append({"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": list(instance_types)})
        reqs.extend(requirements or ())
        ref = dict(tspec.get("nodeClassRef") or KWOK_REF)
        nc = self.api.try_get(ref.get("kind", "KWOKNodeClass"), ref.get("name", "default"))
        s: dict = {"nodeClassRef": ref, "requirements": reqs, "resources": {"requests": {"cpu": cpu}}}
        for k in ("taints", "startupTaints", "expireAfter", "terminationGracePeriod"):
            if tspec.get(k) is not None:
                s[k] = copy.deepcopy(tspec[k])
        s.update(spec or {})
        ann = {NODEPOOL_HASH: nodepool_hash(np), NODEPOOL_HASH_VERSION: HASH_VERSION, NODECLASS_HASH: nodeclass_hash(nc)}
        ann.update(((np["spec"]["template"].get("metadata") or {}).get("annotations")) or {})
        ann.update(annotations or {})
        lbls = {NODEPOOL_LABEL: nodepool_name}
        lbls.update(((np["spec"]["template"].get("metadata") or {}).get("labels")) or {})
        lbls.update(labels or {})
        meta: dict = {"labels": lbls, "annotations": ann,
                      "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "name": nodepool_name,
                                           "uid": np["metadata"]["uid"], "blockOwnerDeletion": True}]}
        if name:
            meta["name"] = name
        else:
            meta["generateName"] = f"{nodepool_name}-"
        return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": meta, "spec": s}

    def launch(self, claim_name: str) -> dict:
        """Reconcile the lifecycle controller once (finalizer + launch)."""
        self.reconcile("nodeclaim.lifecycle", claim_name)
        return self.api.get("NodeClaim", claim_name)

    def register(self, claim_name: str) -> dict:
        """The instance's kubelet registers its Node (what the cloud does after the registration delay)."""
        claim = self.api.get("NodeClaim", claim_name)
        inst = self.cloud.find(claim["status"]["providerID"])
        assert inst is not None, f"no instance for {claim_name}"
        self.cloud._register(inst)
        self.mgr.pump()
        return self.api.get("Node", inst.node_name)

    def launch_node(self, nodepool_name: str = "default", *, ready: bool = True, initialize: bool = True,
                    **claim_kw: Any) -> tuple[dict, dict]:
        """A NodeClaim taken through launch, registration, Ready and initialization (upstream's
        ExpectMakeNodesAndNodeClaimsInitializedAndStateUpdated); returns (NodeClaim, Node) as they now are."""
        claim = self.create_one(self.nodeclaim(nodepool_name, **claim_kw))
        name = claim["metadata"]["name"]
        self.launch(name)
        n = self.register(name)
        self.reconcile("nodeclaim.lifecycle", name)
        if ready:
            self.make_ready(n["metadata"]["name"])
            # startup taints are removed by their owners (tests play them)
            for t in (self.api.get("NodeClaim", name).get("spec") or {}).get("startupTaints") or ():
                self.remove_taint(n["metadata"]["name"], t["key"])
            if initialize:
                self.reconcile("nodeclaim.lifecycle", name)
        return self.api.get("NodeClaim", name), self.api.get("Node", n["metadata"]["name"])

    def node_of(self, claim: dict) -> dict | None:
        nn = (self.api.get("NodeClaim", claim["metadata"]["name"]).get("status") or {}).get("nodeName")
        return self.get("Node", nn) if nn else None

    def claim_named(self, name: str) -> dict | None:
        return self.get("NodeClaim", name)

    def refresh(self, obj: dict) -> dict | None:
        m = obj["metadata"]
        return self.get(obj["kind"], m["name"], m.get("namespace", ""))

    # --- workloads ---------------------------------------------------------------------------------
    def replicaset(self, name: str, replicas: int, labels_: dict | None = None) -> dict:
        lbl = labels_ or {"app": name}
        return self.create_one({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                "metadata": {"name": name, "namespace": "default"},
                                "spec": {"replicas": replicas, "selector": {"matchLabels": lbl},
                                         "template": {"metadata": {"labels": lbl}, "spec": {"containers": []}}}})

    def pod_on(self, node_name: str, cpu: str = "1", **kw: Any) -> dict:
        """A running, Ready pod bound to ``node_name``."""
        p = self.create_one(pod(cpu=cpu, **kw))
        return self.bind(p, node_name)


def is_gone(h: Harness, obj: dict) -> bool:
    return h.refresh(obj) is None


