"""Karpenter's view of the cluster, kept up to date from watch events (upstream's ``state.Cluster``).

A :class:`StateNode` joins a Node and the NodeClaim it came from (by provider
ID; a NodeClaim before launch, or a Node no NodeClaim owns, stands alone) with
the pods bound to it and their summed requests and host ports, kept
incrementally as pods come and go. On top of the objects the cache keeps what
only Karpenter knows: which pods it nominated to which node or in-flight
NodeClaim, and which nodes a disruption has marked for deletion.

Indexes: pods by key and by node, pending pods, nodes by name and provider ID,
NodeClaims by name and by NodePool, PodDisruptionBudgets by namespace,
DaemonSets, NodePools, NodeClasses, volumes. The engine's inputs
(:class:`~karpy.scheduling.scheduler.ExistingNode`,
:class:`~karpy.disruption.state.NodeState`) are built per node and reused until
that node changes. ``version`` counts changes that matter to scheduling and
disruption decisions.
"""

from __future__ import annotations

import dataclasses

from collections import Counter
from typing import Any, Callable, Iterable, Mapping

from .. import resources as res
from ..cloudprovider.types import LABEL_CAPACITY_TYPE, LABEL_NODEPOOL, LABEL_ZONE
from ..disruption.state import NodeState, PDBState, PodState
from ..kube.port import DELETED
from ..kube.registry import NODECLASS_KINDS
from ..kube.times import parse_time
from ..runtime.manager import Manager, condition, deleting, is_true
from ..scheduling.pods import LabelSelector, PodInfo, Taint
from ..scheduling.scheduler import ExistingNode
from ..scheduling.volumes import has_volume_claims, volume_requirements, volume_usage
from . import pods as P

NODEPOOL_KIND = "NodePool"


class PodEntry:
    __slots__ = ("obj", "key", "info", "node", "daemon", "terminal", "uid", "state")

    def __init__(self, obj: dict, key: str, info: PodInfo):
        self.obj = obj
        self.key = key
        self.info = info
        self.node = P.node_name(obj)
        self.daemon = P.is_daemon(obj)
        self.terminal = P.is_terminal(obj)
        self.uid = (obj.get("metadata") or {}).get("uid", "")
        self.state: PodState | None = None

    @property
    def active(self) -> bool:
        return not self.terminal and not P.is_terminating(self.obj)


class Nominations:
    """Pod key -> the StateNode key Karpenter nominated it to, indexed both ways."""

    def __init__(self) -> None:
        self._of: dict[str, str] = {}
        self.by_target: dict[str, set[str]] = {}

    def get(self, pod: str) -> str | None:
        return self._of.get(pod)

    def items(self):
        return self._of.items()

    def __len__(self) -> int:
        return len(self._of)

    def set(self, pod: str, target: str) -> None:
        self.pop(pod)
        self._of[pod] = target
        self.by_target.setdefault(target, set()).add(pod)

    def pop(self, pod: str) -> str | None:
        t = self._of.pop(pod, None)
        if t is not None:
            s = self.by_target.get(t)
            if s is not None:
                s.discard(pod)
                if not s:
                    del self.by_target[t]
        return t

    def retarget(self, old: str, new: str) -> None:
        pods = self.by_target.pop(old, set())
        for p in pods:
            self._of[p] = new
        if pods:
            self.by_target.setdefault(new, set()).update(pods)

    def drop_target(self, target: str) -> None:
        for p in self.by_target.pop(target, set()):
            self._of.pop(p, None)


class StateNode:
    """A node as Karpenter tracks it: a NodeClaim, its Node, or both."""

    def __init__(self, key: str):
        self.key = key
        self.node: dict | None = None
        self.claim: dict | None = None
        self.pods: dict[str, PodEntry] = {}
        self.requested: dict[str, int] = {}
        self.daemon_requested: dict[str, int] = {}
        self.ports: Counter = Counter()
        self.marked = False
        self.nominated_until = 0.0
        self.version = 0
        self._existing: tuple[tuple[int, int], ExistingNode] | None = None
        self._state: tuple[tuple, NodeState] | None = None
        self._res: dict[str, tuple[Any, dict[str, int]]] = {}
        # (node, claim, answer) of the last deleting() / initialized(): stored objects are never changed in place,
        # so while the same two objects are held the answer holds (every pass asks it of every node, many times)
        self._deleting: tuple | None = None
        self._initialized: tuple | None = None

    # --- identity --------------------------------------------------------------------------
    @property
    def name(self) -> str:
        if self.node is not None:
            return self.node["metadata"]["name"]
        return self.claim["metadata"]["name"] if self.claim is not None else self.key

    @property
    def claim_name(self) -> str | None:
        return self.claim["metadata"]["name"] if self.claim is not None else None

    @property
    def provider_id(self) -> str:
        if self.claim is not None and (self.claim.get("status") or {}).get("providerID"):
            return self.claim["status"]["providerID"]
        return ((self.node or {}).get("spec") or {}).get("providerID") or ""

    @property
    def managed(self) -> bool:
        return self.claim is not None

    def labels(self) -> dict[str, str]:
        if self.node is not None:
            return (self.node["metadata"].get("labels") or {})
        return (self.claim or {}).get("metadata", {}).get("labels") or {}

    @property
    def nodepool(self) -> str | None:
        return self.labels().get(LABEL_NODEPOOL) or ((self.claim or {}).get("metadata", {}).get("labels") or {}).get(LABEL_NODEPOOL)

    def taints(self) -> list[dict]:
        if self.node is not None:
            return list((self.node.get("spec") or {}).get("taints") or ())
        spec = (self.claim or {}).get("spec") or {}
        return list(spec.get("taints") or ()) + list(spec.get("startupTaints") or ())

    def startup_taints(self) -> list[dict]:
        return list(((self.claim or {}).get("spec") or {}).get("startupTaints") or ())

    def _parsed(self, which: str, src: dict | None, slot: str | None = None) -> dict[str, int]:
        st = (src or {}).get("status") or {}
        raw = st.get(which) or st.get("capacity" if which == "allocatable" else "allocatable")
        hit = self._res.get(slot or which)
        if hit is None or hit[0] is not raw:
            hit = self._res[slot or which] = (raw, res.parse_resource_list(raw))
        return hit[1]

    def allocatable(self) -> dict[str, int]:
        if self.node is None:
            return self._parsed("allocatable", self.claim)
        node = self._parsed("allocatable", self.node)
        if self.claim is None or self.initialized():
            return node
        # as upstream: until the node is initialized, a resource its kubelet reports as zero (or not yet) counts
        # at the NodeClaim's value (a kubelet zeroes extended resources until their device plugin registers)
        claim = self._parsed("allocatable", self.claim, slot="claim-allocatable")
        missing = {k: v for k, v in claim.items() if not node.get(k)}
        return {**node, **missing} if missing else node

    def capacity(self) -> dict[str, int]:
        return self._parsed("capacity", self.claim if self.claim is not None else self.node)

    @property
    def registered(self) -> bool:
        return self.node is not None

    def launched(self) -> bool:
        return self.claim is not None and bool((self.claim.get("status") or {}).get("providerID"))

    def initialized(self) -> bool:
        node, claim = self.node, self.claim
        memo = self._initialized
        if memo is not None and memo[0] is node and memo[1] is claim:
            return memo[2]
        answer = is_true(claim, "Initialized") if claim is not None else self.ready()
        self._initialized = (node, claim, answer)
        return answer

    def ready(self) -> bool:
        return self.node is not None and is_true(self.node, "Ready")

    def deleting(self) -> bool:
        node, claim = self.node, self.claim
        memo = self._deleting
        if memo is not None and memo[0] is node and memo[1] is claim:
            return memo[2]
        answer = deleting(node) or deleting(claim)
        self._deleting = (node, claim, answer)
        return answer

    def unschedulable(self) -> bool:
        return bool(((self.node or {}).get("spec") or {}).get("unschedulable"))

    def price(self) -> float:
        ann = ((self.claim or self.node or {}).get("metadata") or {}).get("annotations") or {}
        try:
            return float(ann.get("karpy.dev/price-per-hour", "0") or 0)
        except ValueError:
            return 0.0

    def touch(self) -> None:
        self.version += 1

    # --- pods ------------------------------------------------------------------------------
    def add_pod(self, e: PodEntry) -> None:
        if e.key in self.pods:
            self.remove_pod(self.pods[e.key])
        self.pods[e.key] = e
        if not e.terminal:
            self.requested = res.add(self.requested, e.info.requests)
            if e.daemon:
                self.daemon_requested = res.add(self.daemon_requested, e.info.requests)
            for p in e.info.host_ports:
                self.ports[p] += 1
        self.version += 1

    def remove_pod(self, e: PodEntry) -> None:
        cur = self.pods.pop(e.key, None)
        if cur is None:
            return
        if not cur.terminal:
            self.requested = res.subtract(self.requested, cur.info.requests)
            if cur.daemon:
                self.daemon_requested = res.subtract(self.daemon_requested, cur.info.requests)
            for p in cur.info.host_ports:
                self.ports[p] -= 1
                if self.ports[p] <= 0:
                    del self.ports[p]
        self.version += 1


class Cluster:
    """The cache. ``volume_lookup`` and the engine views read only what the watches delivered."""

    def __init__(self, clock: Any):
        self.clock = clock
        self.compiler = P.PodCompiler()
        self.ignore_dra = True  # IgnoreDRARequests: DaemonSet pods asking for devices add no overhead
        self.pods: dict[str, PodEntry] = {}
        self.pending: set[str] = set()  # unbound, non-terminal pods
        self.pods_by_node: dict[str, set[str]] = {}  # node name -> pods bound to it (whether or not the node is known)
        self.nodes: dict[str, StateNode] = {}  # by key
        self.by_node: dict[str, StateNode] = {}
        self.by_claim: dict[str, StateNode] = {}
        self.claim_provider_ids: dict[str, str] = {}  # NodeClaim name -> its status.providerID, when it has one
        self.claims_by_provider_id: dict[str, set[str]] = {}  # provider ID -> NodeClaims naming it (more than one:
        # duplicates, which the termination controller does not trust)
        self.by_provider: dict[str, StateNode] = {}
        self.claims_by_nodepool: dict[str, set[str]] = {}
        self.usage: dict[str, dict[str, int]] = {}  # NodePool -> capacity of its launched NodeClaims, and "nodes"
        self._counted: dict[str, tuple[str, dict[str, int]]] = {}  # NodeClaim -> (NodePool, what it adds)
        self.nodepools: dict[str, dict] = {}
        self.nodeclasses: dict[tuple[str, str], dict] = {}
        self.daemonsets: dict[tuple[str, str], dict] = {}
        # DaemonSet (namespace, name) -> the newest pod it controls: what its pods really ask (a LimitRange or a
        # mutating webhook may have changed them from the template), used for overhead as upstream does
        self.daemonset_pods: dict[tuple[str, str], dict] = {}
        self.pdbs: dict[str, dict[str, dict]] = {}  # namespace -> name -> PDB
        self.volumes: dict[tuple[str, str, str], dict] = {}
        self.csinodes: dict[str, dict[str, int]] = {}  # node name -> CSI driver -> volumes it may attach there
        self.nominations = Nominations()  # pod key -> StateNode key it was nominated to
        # karpy's ConsolidationOptimizer: replacement NodeClaim -> (pods per class planned on it, until when, the
        # very pods planned on it)
        self.placement_plans: dict[str, tuple[dict, float, frozenset[str]]] = {}
        self.do_not_disrupt: set[str] = set()  # pods carrying karpenter.sh/do-not-disrupt
        self.deleting_claims: set[str] = set()  # NodeClaims with a deletionTimestamp
        self.unlaunched: set[str] = set()  # NodeClaims without a provider ID yet
        self.tainted: set[str] = set()  # Nodes carrying the karpenter.sh/disrupted taint
        self.version = 0
        self.pods_version = 0
        self.nodepools_version = 0
        self.daemonsets_version = 0
        self.listeners: list[Callable[[str, str], None]] = []  # (kind, what) after a change

    # --- wiring ------------------------------------------------------------------------------
    def setup(self, mgr: Manager) -> None:
        mgr.watch("Pod", self.on_pod)
        mgr.watch("Node", self.on_node)
        mgr.watch("NodeClaim", self.on_nodeclaim)
        mgr.watch("NodePool", self.on_nodepool)
        for k in sorted(NODECLASS_KINDS):
            mgr.watch(k, self.on_nodeclass)
        mgr.watch("DaemonSet", self.on_daemonset)
        mgr.watch("PodDisruptionBudget", self.on_pdb)
        for k in ("PersistentVolumeClaim", "PersistentVolume", "StorageClass"):
            mgr.watch(k, self.on_volume)
        mgr.watch("CSINode", self.on_csinode)

    def _changed(self) -> None:
        self.version += 1

    # --- pods --------------------------------------------------------------------------------
    def on_pod(self, etype: str, obj: dict, old: dict | None) -> None:
        key = P.pod_key(obj)
        prev = self.pods.get(key)
        if prev is not None and etype != DELETED and self._status_only(key, prev, obj):
            return
        if prev is not None and prev.node:
            sn = self.by_node.get(prev.node)
            if sn is not None:
                sn.remove_pod(prev)
            on = self.pods_by_node.get(prev.node)
            if on is not None:
                on.discard(key)
                if not on:
                    del self.pods_by_node[prev.node]
        if "karpenter.sh/do-not-disrupt" in ((obj.get("metadata") or {}).get("annotations") or {}) and etype != DELETED:
            self.do_not_disrupt.add(key)
        else:
            self.do_not_disrupt.discard(key)
        if etype == DELETED:
            self.pods.pop(key, None)
            self.pending.discard(key)
            self.nominations.pop(key)
            self.compiler.forget(obj)
            self.version += 1
            self.pods_version += 1
            return
        if P.is_daemon(obj):
            self._note_daemonset_pod(obj)
        if prev is not None and prev.obj.get("spec") is obj.get("spec") and \
                (prev.obj.get("metadata") or {}).get("labels") is (obj.get("metadata") or {}).get("labels"):
            info = prev.info  # a status change: what the engine reads is the same
            info.obj = obj  # type: ignore[assignment]
        else:
            info = self.compiler.compile(obj)
        e = PodEntry(obj, key, info)
        self.pods[key] = e
        if e.node:
            self.pods_by_node.setdefault(e.node, set()).add(key)
            self.pending.discard(key)
            self.nominations.pop(key)
            sn = self.by_node.get(e.node)
            if sn is not None:
                sn.add_pod(e)
        elif e.terminal or P.is_terminating(obj):
            self.pending.discard(key)
        else:
            self.pending.add(key)
        if prev is None or prev.node != e.node or prev.terminal != e.terminal or prev.obj.get("spec") is not obj.get("spec") \
                or (prev.obj.get("metadata") or {}).get("annotations") is not (obj.get("metadata") or {}).get("annotations"):
            self.version += 1
        self.pods_version += 1

    def _status_only(self, key: str, prev: PodEntry, obj: dict) -> bool:
        """A change of the pod's status alone (kube-scheduler's PodScheduled, the kubelet's phase and IPs) that
        leaves it where it was and as it was counted (same spec, labels, annotations, owners, deletion and
        terminal phase): the entry is replaced by one for the new object, the node's counts stay, and the node's
        version moves as a removal and an addition would move it. False, having done nothing, otherwise."""
        po, pm, om = prev.obj, prev.obj.get("metadata") or {}, obj.get("metadata") or {}
        if po.get("spec") is not obj.get("spec") or pm.get("labels") is not om.get("labels") or \
                pm.get("annotations") is not om.get("annotations") or \
                pm.get("ownerReferences") is not om.get("ownerReferences") or \
                pm.get("deletionTimestamp") != om.get("deletionTimestamp") or pm.get("uid") != om.get("uid") or \
                prev.terminal != P.is_terminal(obj):
            return False
        sn = self.by_node.get(prev.node) if prev.node else None
        if sn is not None and sn.pods.get(key) is not prev:
            return False
        if prev.daemon:
            self._note_daemonset_pod(obj)
        info = prev.info  # what the engine reads is the same
        info.obj = obj  # type: ignore[assignment]
        e = PodEntry.__new__(PodEntry)
        e.obj, e.key, e.info, e.node, e.daemon, e.terminal, e.uid, e.state = \
            obj, key, info, prev.node, prev.daemon, prev.terminal, prev.uid, None
        self.pods[key] = e
        if e.node:
            self.pending.discard(key)
            self.nominations.pop(key)
            if sn is not None:
                del sn.pods[key]  # to the end, where taking it out and putting it back leaves it
                sn.pods[key] = e
                sn.version += 2
        elif e.terminal or P.is_terminating(obj):
            self.pending.discard(key)
        else:
            self.pending.add(key)
        self.pods_version += 1
        return True

    def pod_info(self, e: PodEntry) -> PodInfo:
        """The pod as the engine sees it, with its volumes' zone requirements."""
        if not has_volume_claims(e.obj):
            return e.info
        # (volume usage only matters against a node's CSINode limits: not computed while no node has any)
        usage = volume_usage(e.obj, self.volume_lookup) if self.csinodes else None
        return P.with_volume_requirements(e.info, volume_requirements(e.obj, self.volume_lookup), usage)

    def pod_state(self, e: PodEntry) -> PodState:
        if e.state is None:
            e.state = P.pod_state(e.obj, e.info)
        return e.state

    def moving_pod_state(self, e: PodEntry) -> PodState:
        """The pod as a disruption simulation moves it: with its volumes' node requirements, as upstream's
        scheduler injects them into every pod it places (a zonal volume keeps its pod in the zone)."""
        st = self.pod_state(e)
        if not has_volume_claims(e.obj):
            return st
        return dataclasses.replace(st, info=self.pod_info(e))

    # --- nodes and nodeclaims ------------------------------------------------------------------
    def _state_node(self, key: str) -> StateNode:
        sn = self.nodes.get(key)
        if sn is None:
            sn = self.nodes[key] = StateNode(key)
        return sn

    def on_node(self, etype: str, obj: dict, old: dict | None) -> None:
        name = obj["metadata"]["name"]
        pid = (obj.get("spec") or {}).get("providerID") or ""
        sn = self.by_node.get(name)
        if etype != DELETED and any(t.get("key") == "karpenter.sh/disrupted" for t in (obj.get("spec") or {}).get("taints") or ()):
            self.tainted.add(name)
        else:
            self.tainted.discard(name)
        if etype == DELETED:
            if sn is not None:
                sn.node = None
                del self.by_node[name]
                for e in list(sn.pods.values()):
                    sn.remove_pod(e)
                self._drop_if_empty(sn)
            self.version += 1
            return
        if sn is None:
            sn = self.by_provider.get(pid) if pid else None
            if sn is None:
                sn = self._state_node(pid or f"node/{name}")
                if pid:
                    self.by_provider[pid] = sn
            self.by_node[name] = sn
            sn.node = obj
            for pk in sorted(self.pods_by_node.get(name, ())):  # pods bound before the node was seen
                e = self.pods[pk]
                if e.key not in sn.pods:
                    sn.add_pod(e)
        sn.node = obj
        sn.touch()
        self.version += 1

    def _count(self, name: str, np: str, cap: dict[str, int] | None) -> None:
        prev = self._counted.pop(name, None)
        if prev is not None:
            self.usage[prev[0]] = res.subtract(self.usage.get(prev[0], {}), prev[1])
        if cap is not None:
            add = dict(cap)
            add["nodes"] = 1
            self._counted[name] = (np, add)
            self.usage[np] = res.add(self.usage.get(np, {}), add)

    def on_nodeclaim(self, etype: str, obj: dict, old: dict | None) -> None:
        name = obj["metadata"]["name"]
        if etype != DELETED and (obj.get("metadata") or {}).get("deletionTimestamp"):
            self.deleting_claims.add(name)
        else:
            self.deleting_claims.discard(name)
        launched = etype != DELETED and bool((obj.get("status") or {}).get("providerID"))
        if launched or etype == DELETED:
            self.unlaunched.discard(name)
        else:
            self.unlaunched.add(name)
        np_ = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_NODEPOOL, "")
        if not launched:
            if name in self._counted:
                self._count(name, np_, None)
        elif name not in self._counted or old is None or (old.get("status") or {}).get("capacity") is not \
                (obj.get("status") or {}).get("capacity"):
            st = obj.get("status") or {}
            self._count(name, np_, res.parse_resource_list(st.get("capacity") or st.get("allocatable")))
        pid = (obj.get("status") or {}).get("providerID") or ""
        self._index_provider_id(name, "" if etype == DELETED else pid)
        np = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_NODEPOOL, "")
        sn = self.by_claim.get(name)
        if etype == DELETED:
            if sn is not None:
                sn.claim = None
                del self.by_claim[name]
                sn.marked = False
                self._drop_if_empty(sn)
            self.claims_by_nodepool.get(np, set()).discard(name)
            if sn is not None:
                self.nominations.drop_target(sn.key)
            self.version += 1
            return
        if sn is None:
            sn = self.by_provider.get(pid) if pid else None
            if sn is None:
                sn = self._state_node(pid or f"nodeclaim/{name}")
            self.by_claim[name] = sn
        elif pid and sn.key != pid:
            # launched: re-key from the NodeClaim's name to its provider ID
            other = self.by_provider.get(pid)
            self.nodes.pop(sn.key, None)
            old_key = sn.key
            if other is not None and other is not sn:
                # the Node arrived first: merge into it
                other.claim = obj
                self.by_claim[name] = other
                self.nominations.retarget(old_key, other.key)
                sn = other
            else:
                sn.key = pid
                self.nodes[pid] = sn
                self.nominations.retarget(old_key, pid)
        if pid:
            self.by_provider[pid] = sn
        if sn.claim is None or sn.claim is not old or _claim_facts(old) != _claim_facts(obj):
            sn.touch()
        sn.claim = obj
        self.claims_by_nodepool.setdefault(np, set()).add(name)
        self.version += 1

    def _index_provider_id(self, name: str, pid: str) -> None:
        was = self.claim_provider_ids.get(name, "")
        if was == pid:
            return
        if was:
            names = self.claims_by_provider_id.get(was)
            if names is not None:
                names.discard(name)
                if not names:
                    del self.claims_by_provider_id[was]
        if pid:
            self.claim_provider_ids[name] = pid
            self.claims_by_provider_id.setdefault(pid, set()).add(name)
        else:
            self.claim_provider_ids.pop(name, None)

    def _drop_if_empty(self, sn: StateNode) -> None:
        if sn.node is None and sn.claim is None:
            self.nodes.pop(sn.key, None)
            if self.by_provider.get(sn.key) is sn:
                del self.by_provider[sn.key]

    # --- other kinds -----------------------------------------------------------------------------
    def on_nodepool(self, etype: str, obj: dict, old: dict | None) -> None:
        name = obj["metadata"]["name"]
        if etype == DELETED:
            self.nodepools.pop(name, None)
        else:
            self.nodepools[name] = obj
        self.nodepools_version += 1
        self.version += 1

    def on_nodeclass(self, etype: str, obj: dict, old: dict | None) -> None:
        key = (obj["kind"], obj["metadata"]["name"])
        if etype == DELETED:
            self.nodeclasses.pop(key, None)
        else:
            self.nodeclasses[key] = obj
        self.nodepools_version += 1
        self.version += 1

    def _note_daemonset_pod(self, pod: dict) -> None:
        """Keep the newest pod of each DaemonSet (upstream's cluster state does, from its DaemonSet controller)."""
        meta = pod.get("metadata") or {}
        ref = next((r for r in meta.get("ownerReferences") or () if r.get("controller")), None)
        if ref is None:
            return
        key = (meta.get("namespace", "default"), str(ref.get("name")))
        cur = self.daemonset_pods.get(key)
        if cur is not None and cur["metadata"].get("name") != meta.get("name"):
            born, newest = parse_time(meta.get("creationTimestamp")), parse_time(cur["metadata"].get("creationTimestamp"))
            if (born or 0.0) < (newest or 0.0):
                return
        self.daemonset_pods[key] = pod
        if cur is None or _daemon_shape(cur) != _daemon_shape(pod):
            self.daemonsets_version += 1
            self.version += 1

    def on_daemonset(self, etype: str, obj: dict, old: dict | None) -> None:
        key = (obj["metadata"].get("namespace", "default"), obj["metadata"]["name"])
        if etype == DELETED:
            self.daemonsets.pop(key, None)
            self.daemonset_pods.pop(key, None)
        elif old is None or old.get("spec") is not obj.get("spec"):
            self.daemonsets[key] = obj
        else:
            self.daemonsets[key] = obj
            return
        self.daemonsets_version += 1
        self.version += 1

    def on_pdb(self, etype: str, obj: dict, old: dict | None) -> None:
        ns = obj["metadata"].get("namespace", "default")
        if etype == DELETED:
            self.pdbs.get(ns, {}).pop(obj["metadata"]["name"], None)
        else:
            self.pdbs.setdefault(ns, {})[obj["metadata"]["name"]] = obj
        self.version += 1

    def on_volume(self, etype: str, obj: dict, old: dict | None) -> None:
        kind = obj["kind"]
        ns = obj["metadata"].get("namespace", "default") if kind == "PersistentVolumeClaim" else ""
        key = (kind, ns, obj["metadata"]["name"])
        if etype == DELETED:
            self.volumes.pop(key, None)
        else:
            self.volumes[key] = obj
        self.version += 1

    def on_csinode(self, etype: str, obj: dict, old: dict | None) -> None:
        """A node's CSI drivers and how many volumes each may attach there (``allocatable.count``)."""
        name = obj["metadata"]["name"]
        limits = {str(d.get("name")): int((d.get("allocatable") or {})["count"])
                  for d in (obj.get("spec") or {}).get("drivers") or ()
                  if (d.get("allocatable") or {}).get("count") is not None}
        if etype == DELETED or not limits:
            self.csinodes.pop(name, None)
        else:
            self.csinodes[name] = limits
        sn = self.by_node.get(name)
        if sn is not None:
            sn.touch()
        self.version += 1

    def usage_for_limits(self) -> dict[str, dict[str, int]]:
        """NodePool -> what counts against its limits: the capacity (and "nodes") of its launched
        NodeClaims, less those marked for deletion or deleting (upstream's nodePoolResources)."""
        freed: dict[str, dict[str, int]] = {}
        for sn in self.nodes.values():
            if (sn.marked or sn.deleting()) and sn.claim_name in self._counted:
                np, counted = self._counted[sn.claim_name]
                freed[np] = res.add(freed.get(np, {}), counted)
        if not freed:
            return self.usage
        out = dict(self.usage)
        for np, f in freed.items():
            u = dict(out.get(np, {}))
            for k, v in f.items():
                u[k] = u.get(k, 0) - v
            out[np] = u
        return out

    def volume_lookup(self, kind: str, ns: str, name: str) -> dict | None:
        return self.volumes.get((kind, ns if kind == "PersistentVolumeClaim" else "", name))

    def nodeclass_for(self, nodepool: Mapping) -> tuple[dict | None, dict]:
        ref = (((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
        kind = ref.get("kind") or ""
        return self.nodeclasses.get((kind, ref.get("name", ""))), ref

    def nodeclass(self, kind: str, name: str) -> dict | None:
        return self.nodeclasses.get((kind, name))

    # --- Karpenter's own marks -------------------------------------------------------------------
    def nominate(self, pod_key: str, node_key: str, window: float) -> None:
        self.nominations.set(pod_key, node_key)
        sn = self.nodes.get(node_key)
        if sn is not None:
            sn.nominated_until = max(sn.nominated_until, self.clock.now() + window)
            sn.touch()
        self.version += 1

    def clear_nomination(self, pod_key: str) -> None:
        if self.nominations.pop(pod_key) is not None:
            self.version += 1

    def mark_for_deletion(self, nodes: Iterable[StateNode]) -> None:
        for sn in nodes:
            sn.marked = True
            sn.touch()
        self.version += 1

    def unmark_for_deletion(self, nodes: Iterable[StateNode]) -> None:
        for sn in nodes:
            sn.marked = False
            sn.touch()
        self.version += 1

    # --- queries -----------------------------------------------------------------------------------
    def state_node_by_name(self, name: str) -> StateNode | None:
        """By Node name, or by NodeClaim name for a NodeClaim without a Node."""
        sn = self.by_node.get(name)
        if sn is not None:
            return sn
        return self.by_claim.get(name)

    def synced(self) -> bool:
        """Whether every NodeClaim the watches delivered has been launched (has its provider ID), as
        upstream's cluster state requires before a scheduling decision: until then a new NodeClaim's
        offering and capacity are unknown, and its pods would be placed again against nothing."""
        return not self.unlaunched

    def live_target(self, node_key: str) -> bool:
        """Does the node (or in-flight NodeClaim) a pod was nominated to still exist and stay?"""
        sn = self.nodes.get(node_key)
        return sn is not None and (sn.claim is not None or sn.node is not None) and not sn.marked and not sn.deleting()

    def pdb_states(self) -> list[PDBState]:
        """PodDisruptionBudgets as the disruption controller's status reports them."""
        out = []
        for ns in sorted(self.pdbs):
            for name, obj in sorted(self.pdbs[ns].items()):
                spec = obj.get("spec") or {}
                sel = LabelSelector(spec.get("selector")) if spec.get("selector") is not None else _NOTHING
                st = obj.get("status") or {}
                allowed = int(st.get("disruptionsAllowed") or 0)
                mu = spec.get("maxUnavailable")
                fully = mu == 0 or mu == "0%" or spec.get("minAvailable") == "100%"
                out.append(PDBState(ns, name, sel, allowed, fully, spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow"))
        return out

    def daemon_pods(self) -> list[PodInfo]:
        """One compiled pod per DaemonSet template, for overhead."""
        hit = getattr(self, "_daemon_pods_cache", None)
        if hit is not None and hit[0] == self.daemonsets_version:
            return list(hit[1])
        out = []
        for (ns, name), ds in sorted(self.daemonsets.items()):
            tmpl = (ds.get("spec") or {}).get("template") or {}
            pod = self.daemonset_pods.get((ns, name))
            if pod is not None and any(r.get("uid") == ds["metadata"].get("uid")
                                       for r in pod["metadata"].get("ownerReferences") or ()):
                pobj = {"metadata": {**(pod.get("metadata") or {}), "name": name, "namespace": ns,
                                     "uid": f"ds/{ns}/{name}"},
                        "spec": _daemon_pod_spec(pod, tmpl)}
            else:
                pobj = {"metadata": {**(tmpl.get("metadata") or {}), "name": name, "namespace": ns,
                                     "uid": f"ds/{ns}/{name}"},
                        "spec": tmpl.get("spec") or {}}
            out.append(self.compiler.compile(pobj))
        self._daemon_pods_cache = (self.daemonsets_version, out)
        return list(out)

    def existing_node(self, sn: StateNode, nominated: list[PodEntry] = ()) -> ExistingNode:
        """How the scheduler sees this node: bound pods, plus pods nominated to it."""
        version = (sn.version, self.daemonsets_version)
        if not nominated and sn._existing is not None and sn._existing[0] == version:
            return sn._existing[1]
        # as upstream: startup taints are not held against a node until it is initialized; one back on an
        # initialized node (re-applied by whoever owns it) keeps pods that do not tolerate it off
        startup = {_taint_key(t) for t in sn.startup_taints()} if not sn.initialized() else set()
        # a Karpenter node not yet initialized will lose its known ephemeral taints (not-ready, unreachable, the
        # external cloud provider's, ...): the scheduler does not hold them against it, as upstream
        ephemeral_ok = sn.claim is not None and not sn.initialized()
        taints = tuple(Taint.from_obj(t) for t in sn.taints() if _taint_key(t) not in startup
                       and t.get("key") != "karpenter.sh/unregistered"
                       and not (ephemeral_ok and is_known_ephemeral_taint(t)))
        bound = [e for e in sn.pods.values() if not e.terminal]
        labels = dict(sn.labels())
        if sn.node is None:
            labels.pop("kubernetes.io/hostname", None)
        requested = dict(sn.requested)
        if sn.claim is not None:
            # as upstream: the DaemonSet pods that will run there hold their room until they bind (then they count
            # among the bound pods, once: what DaemonSet pods already bound request is taken off)
            bound_ds = sn.daemon_requested
            to_come = {k: v - bound_ds.get(k, 0) for k, v in self._claim_daemon_requests(sn).items() if v > bound_ds.get(k, 0)}
            requested = res.add(requested, to_come)
        if nominated:
            requested = res.add(requested, res.total(e.info.requests for e in nominated))
        ports = set(sn.ports)
        e = ExistingNode(
            name=sn.name, labels=labels, taints=taints, allocatable=sn.allocatable(), requested=requested,
            host_ports=ports, nodepool=sn.nodepool, bound_pods=[self.pod_info(x) for x in bound] + [x.info for x in nominated],
            schedulable=not sn.unschedulable(), initialized=sn.initialized(), capacity=sn.capacity(),
            volume_limits=self.csinodes.get(sn.name) if sn.node is not None else None,
        )
        if not nominated:
            sn._existing = (version, e)
        return e

    def _claim_daemon_requests(self, sn: StateNode) -> dict[str, int]:
        """DaemonSet pods that will run on an in-flight NodeClaim (they hold room before it registers; those
        waiting for karpenter.sh/registered or karpenter.sh/initialized too, as the node will carry them)."""
        labels = {**sn.labels(), "karpenter.sh/registered": "true", "karpenter.sh/initialized": "true"}
        taints = [Taint.from_obj(t) for t in sn.taints() if not str(t.get("key", "")).startswith("node.kubernetes.io/")]
        from ..scheduling.pods import untolerated

        out: dict[str, int] = {}
        for d in self.daemon_pods():
            if d.dra and self.ignore_dra:
                continue
            if untolerated(d.tolerations, taints) is not None:
                continue
            if not d.node_selector.satisfied_by_labels(labels):
                continue
            if d.required_terms and not any(t.satisfied_by_labels(labels) for t in d.required_terms):
                continue
            out = res.add(out, d.requests)
        return out

    def node_state(self, sn: StateNode, pods: list[PodEntry], now: float, consolidate_after: Any,
                   nominated: bool, queued: bool, existing: ExistingNode) -> NodeState:
        claim = sn.claim or {}
        labels = sn.labels()
        consolidatable = is_true(claim, "Consolidatable")
        under = False
        if sn.claim is not None and consolidate_after not in (None, "Never") and is_true(claim, "Initialized"):
            init = parse_time((condition(claim, "Initialized") or {}).get("lastTransitionTime")) or 0.0
            last = parse_time((claim.get("status") or {}).get("lastPodEventTime")) or init
            d = res.parse_duration(consolidate_after)
            under = d > 0 and now - max(last, init if not (claim.get("status") or {}).get("lastPodEventTime") else last) < d
        drift = condition(claim, "Drifted")
        drifted = drift.get("reason") if drift is not None and drift.get("status") == "True" else None
        tgp = (claim.get("spec") or {}).get("terminationGracePeriod")
        ann = ((sn.node or {}).get("metadata") or {}).get("annotations") or {}
        return NodeState(
            name=sn.name, nodeclaim=sn.claim_name, nodepool=sn.nodepool if sn.claim is not None else None, labels=labels,
            instance_type=None, price=sn.price(), pods=[self.moving_pod_state(e) for e in pods], existing=existing,
            initialized=sn.initialized(), ready=sn.ready() if sn.node is not None else False,
            registered=sn.node is not None, marked_for_deletion=sn.marked or sn.deleting(),
            terminating=False, queued=queued, nominated=nominated, annotations=ann,
            consolidatable=consolidatable, under_consolidate_after=under,
            drifted=drifted, drifted_since=parse_time((drift or {}).get("lastTransitionTime")) if drifted else None,
            termination_grace_period=None if tgp in (None, "Never") else res.parse_duration(tgp),
            capacity_type=labels.get(LABEL_CAPACITY_TYPE), zone=labels.get(LABEL_ZONE),
        )


def _claim_facts(claim: dict) -> tuple:
    """What the engine's views of a node (ExistingNode, NodeState) read of its NodeClaim: a NodeClaim change that
    leaves these as they were (its Consolidatable condition, status.lastPodEventTime, which the disruption
    controller reads afresh on every pass) leaves the node's views as they were. Compared by value (stored
    objects that did not change are the same objects, so most comparisons are identity checks)."""
    meta = claim.get("metadata") or {}
    status = claim.get("status") or {}
    return (meta.get("name"), meta.get("labels"), meta.get("annotations"), meta.get("deletionTimestamp"),
            claim.get("spec"), status.get("allocatable"), status.get("capacity"), status.get("providerID"),
            condition(claim, "Initialized"), condition(claim, "Drifted"), condition(claim, "Ready"))


class _Nothing(LabelSelector):
    def __init__(self) -> None:
        super().__init__({"matchLabels": {}})

    def matches(self, labels: Mapping[str, str]) -> bool:
        return False


_NOTHING = _Nothing()


# the taints a node carries while it starts (upstream's scheduling.KnownEphemeralTaints, matched on key and effect),
# and the key prefixes of taint families that are ephemeral too (the node readiness controller's)
KNOWN_EPHEMERAL_TAINTS = frozenset({
    ("node.kubernetes.io/not-ready", "NoSchedule"), ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoSchedule"), ("node.cloudprovider.kubernetes.io/uninitialized", "NoSchedule"),
    ("karpenter.sh/unregistered", "NoExecute"),
})
KNOWN_EPHEMERAL_TAINT_PREFIXES = ("readiness.k8s.io/",)


def is_known_ephemeral_taint(t: Mapping) -> bool:
    key = str(t.get("key") or "")
    return (key, t.get("effect")) in KNOWN_EPHEMERAL_TAINTS or key.startswith(KNOWN_EPHEMERAL_TAINT_PREFIXES)


def _daemon_shape(pod: Mapping) -> tuple:
    """What of a DaemonSet's pod its overhead reads: labels and spec, less the node it runs on."""
    spec = {k: v for k, v in (pod.get("spec") or {}).items() if k not in ("nodeName", "affinity")}
    return (pod.get("metadata") or {}).get("labels"), spec


def _daemon_pod_spec(pod: Mapping, template: Mapping) -> dict:
    """A DaemonSet pod's spec for overhead: the pod's own, with the required node affinity its template states
    (the DaemonSet controller pins each pod to its node by name; upstream puts the template's terms back)."""
    spec = {k: v for k, v in (pod.get("spec") or {}).items() if k != "nodeName"}
    required = ((((template.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    affinity = dict(spec.get("affinity") or {})
    node_affinity = {k: v for k, v in (affinity.get("nodeAffinity") or {}).items()
                     if k != "requiredDuringSchedulingIgnoredDuringExecution"}
    if required is not None:
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    if node_affinity:
        affinity["nodeAffinity"] = node_affinity
    else:
        affinity.pop("nodeAffinity", None)
    if affinity:
        spec["affinity"] = affinity
    else:
        spec.pop("affinity", None)
    return spec


def _taint_key(t: Mapping) -> tuple:
    return (t.get("key"), t.get("value") or "", t.get("effect"))
