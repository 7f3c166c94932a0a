"""The kube-scheduler stand-in of the simulated world.

It binds pending pods to nodes with kube-scheduler's filters, each bind
admissible at the moment it is made:

* the node is Ready, not cordoned, not being deleted; its NoSchedule and
  NoExecute taints are tolerated;
* the pod's node selector, required node affinity and volume topology match
  the node's labels;
* the pod's requests fit the node's allocatable beside the pods already bound;
  no host port clash;
* a pod that references a ResourceClaim is never bound: no DRA driver
  publishes devices in the simulated cluster, so its claims cannot be
  allocated;
* required pod affinity and anti-affinity hold (both the pod's own terms and
  the anti-affinity of pods already placed);
* every ``DoNotSchedule`` topology spread holds with the skew computed, as
  kube-scheduler does, over every domain of every node that passes the pod's
  node affinity (``nodeAffinityPolicy``) and, with ``nodeTaintsPolicy: Honor``,
  tolerates its taints -- whether or not a matching pod is there yet --, with
  ``minDomains``.

Which node among those that pass is environment, not Karpenter: a pod
Karpenter nominated (its ``Nominated`` Event) waits for that node while the
NodeClaim is launching and goes there if it fits; any other pod goes to the
first node that fits, in the order nodes were created. A pod that fits nowhere
is marked ``PodScheduled=False`` with reason ``Unschedulable`` (what Karpenter
looks for), and is tried again when a node comes, changes or frees room.

Counts are indexed: per node its free CPU, memory and pod slots in arrays,
and per topology group (selector, namespaces, key) the matching pods per node
and per domain, with a histogram of the per-domain counts so the minimum over
all domains is a look-up. Nothing is rescanned per bind.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from .. import resources as res
from ..kube import errors as E
from ..kube.port import DELETED
from ..kube.times import parse_time
from ..runtime.events import ref
from ..runtime.manager import Manager, deleting, is_true
from ..scheduling.pods import AffinityTerm, LabelSelector, PodInfo, SpreadConstraint, Taint, untolerated
from ..scheduling.volumes import claim_name, has_volume_claims, volume_requirements
from ..state import pods as P

DO_NOT_SCHEDULE = "DoNotSchedule"
_HARD = ("NoSchedule", "NoExecute")
_BIG = np.iinfo(np.int64).max // 4


class _Group:
    """Pods matching (namespaces, selector), counted per node and per domain of one key."""

    __slots__ = ("key", "namespaces", "selector", "by_node", "by_domain", "hist", "total", "_sel_cache", "_min",
                 "by_slot")

    def __init__(self, key: str, namespaces: frozenset[str] | None, selector: LabelSelector):
        self.key = key
        self.namespaces = namespaces
        self.selector = selector
        self.by_node: Counter = Counter()
        self.by_domain: Counter = Counter()
        self.hist: Counter = Counter()  # count -> number of domains (of existing nodes) with that count
        self.total = 0
        self._sel_cache: dict[tuple, bool] = {}
        self._min: int | None = None
        self.by_slot = np.zeros(64, dtype=np.int64)  # matching pods per node slot (for vectorised filters)

    def selects(self, info: PodInfo) -> bool:
        lk = info.label_key
        hit = self._sel_cache.get(lk)
        if hit is None:
            hit = (self.namespaces is None or info.namespace in self.namespaces) and self.selector.matches(info.labels)
            if len(self._sel_cache) > 50_000:
                self._sel_cache.clear()
            self._sel_cache[lk] = hit
        return hit

    def bump(self, node: str, domain: str | None, delta: int, domain_present: bool, slot: int = -1) -> None:
        self.by_node[node] += delta
        self.total += delta
        if slot >= 0:
            if slot >= len(self.by_slot):
                self.by_slot = np.concatenate([self.by_slot, np.zeros(max(64, slot + 1 - len(self.by_slot), len(self.by_slot)),
                                                                      dtype=np.int64)])
            self.by_slot[slot] += delta
        if domain is None:
            return
        if domain_present:
            self.hist_move(self.by_domain[domain], self.by_domain[domain] + delta)
        self.by_domain[domain] += delta

    def hist_move(self, old: int | None, new: int | None) -> None:
        """A domain's count moves from ``old`` to ``new`` (None: the domain appears or goes)."""
        if old is not None:
            self.hist[old] -= 1
            if self.hist[old] <= 0:
                del self.hist[old]
        if new is not None:
            self.hist[new] += 1
        self._min = None

    def minimum(self) -> int:
        if self._min is None:
            self._min = min(self.hist, default=0)
        return self._min


class _Node:
    __slots__ = ("name", "slot", "labels", "hard_taints", "all_taints", "alloc", "alloc_raw", "ready", "cordoned",
                 "deleting", "ports", "pods", "claim", "extended")

    def __init__(self, name: str, slot: int):
        self.name = name
        self.slot = slot
        self.labels: dict[str, str] = {}
        self.hard_taints: list[Taint] = []
        self.all_taints: list[Taint] = []
        self.alloc: dict[str, int] = {}
        self.alloc_raw: Any = None  # the Node's allocatable as written (a stored object: the same while unchanged)
        self.ready = False
        self.cordoned = False
        self.deleting = False
        self.ports: Counter = Counter()
        self.pods: set[str] = set()
        self.claim: str | None = None
        self.extended: dict[str, int] = {}  # requested amounts of resources beyond cpu, memory, pods

    @property
    def usable(self) -> bool:
        return self.ready and not self.cordoned and not self.deleting


class KubeScheduler:
    name = "world.kube-scheduler"
    idle = True  # binds once everything else that happened at this instant has been seen

    def __init__(self, mgr: Manager, api: Any, clock: Any, recorder: Any, compiler: Any):
        self.mgr = mgr
        self.api = api
        self.clock = clock
        self.recorder = recorder
        self.compiler = compiler
        self.nodes: dict[str, _Node] = {}
        self.slots: list[_Node | None] = []
        self._free = np.zeros((0, 3), dtype=np.int64)
        self._usable = np.zeros(0, dtype=bool)
        self.domains: dict[str, Counter] = {}  # topology key -> domain -> number of nodes
        self.groups: dict[tuple, _Group] = {}
        # label key (namespace, labels) -> (len(groups) when computed, the groups selecting such pods): a bind
        # bumps only those, rather than asking every group (groups are only ever added)
        self._selecting: dict[tuple, tuple[int, list[_Group]]] = {}
        self.owner_groups: dict[tuple, _Group] = {}  # anti-affinity terms of placed pods
        self.bound: dict[str, tuple[str, PodInfo]] = {}  # pod key -> (node, info)
        self.pending: dict[str, PodInfo] = {}
        self.created: dict[str, float] = {}
        self.active: set[str] = set()
        self.parked: set[str] = set()  # tried and did not fit
        self.nominated: dict[str, tuple[str, str]] = {}  # pod key -> ("node"|"nodeclaim", name)
        self.waiting: dict[tuple[str, str], set[str]] = {}
        self.claim_node: dict[str, str] = {}  # NodeClaim -> its Node
        self.marked: set[str] = set()  # pods already marked Unschedulable
        self.early: dict[str, set[str]] = {}  # node -> pods bound to it before it was seen
        self.claim_users: dict[tuple[str, str], set[str]] = {}  # (namespace, claim) -> pending pods using it
        self.groups_by_key: dict[str, list[_Group]] = {}
        self.nom_order: dict[str, int] = {}  # the order Karpenter nominated pods in
        self._nom_seq = 0
        self.dirty: set[str] = set()  # nodes that changed since parked pods were last tried
        self.nodes_version = 0  # nodes added, removed or relabelled
        self._dom_arrays: dict[str, tuple[int, np.ndarray, dict[str, int]]] = {}
        self.wake_topo = False
        self.binds = 0

    def setup(self, mgr: Manager) -> None:
        mgr.watch("Node", self._on_node)
        mgr.watch("Pod", self._on_pod)
        mgr.watch("Event", self._on_event, cache=False, only=_nominated)  # only Nominated ones matter, once each
        mgr.watch("NodeClaim", self._on_claim)
        mgr.watch("PersistentVolumeClaim", self._on_volume_claim)

    # --- volumes ------------------------------------------------------------------------------------
    def _on_volume_claim(self, etype: str, obj: dict, old: dict | None) -> None:
        """A claim changed (bound, deleted): the pending pods using it are judged again, as kube-scheduler
        moves them back to its active queue on a PersistentVolumeClaim event."""
        key = (obj["metadata"].get("namespace") or "default", obj["metadata"]["name"])
        for pk in list(self.claim_users.get(key, ())):
            if pk not in self.pending:
                self.claim_users[key].discard(pk)
                continue
            ns, _, name = pk.partition("/")
            pod = self.mgr.get("Pod", name, ns)
            if pod is not None:
                self.pending[pk] = self._info(pod)
                self.active.add(pk)
                self.parked.discard(pk)
                self.mgr.enqueue(self, "")

    # --- nodes --------------------------------------------------------------------------------------
    def _slot(self, name: str) -> _Node:
        n = self.nodes.get(name)
        if n is None:
            n = _Node(name, len(self.slots))
            self.nodes[name] = n
            self.slots.append(n)
            if n.slot >= len(self._free):
                grow = max(64, len(self._free))
                self._free = np.vstack([self._free, np.zeros((grow, 3), dtype=np.int64)])
                self._usable = np.concatenate([self._usable, np.zeros(grow, dtype=bool)])
        return n

    def _domain_ids(self, key: str) -> tuple[np.ndarray, dict[str, int]]:
        """Per node slot, the id of its ``key`` domain (-1 without the label)."""
        hit = self._dom_arrays.get(key)
        if hit is not None and hit[0] == self.nodes_version and len(hit[1]) == len(self._usable):
            return hit[1], hit[2]
        ids: dict[str, int] = {}
        arr = np.full(len(self._usable), -1, dtype=np.int64)
        for n in self.nodes.values():
            d = n.labels.get(key)
            if d is not None:
                arr[n.slot] = ids.setdefault(d, len(ids))
        self._dom_arrays[key] = (self.nodes_version, arr, ids)
        return arr, ids

    def _domain_mask(self, key: str, domains) -> np.ndarray:
        arr, ids = self._domain_ids(key)
        wanted = [ids[d] for d in domains if d in ids]
        if not wanted:
            return np.zeros(len(arr), dtype=bool)
        return np.isin(arr, np.array(wanted, dtype=np.int64))

    def _slot_counts(self, g: "_Group") -> np.ndarray:
        n = len(self._usable)
        if len(g.by_slot) < n:
            g.by_slot = np.concatenate([g.by_slot, np.zeros(n - len(g.by_slot), dtype=np.int64)])
        return g.by_slot[:n]

    def _topology_mask(self, info: PodInfo) -> np.ndarray | None:
        """Nodes whose domains pass the pod's spreads and pod (anti-)affinities, computed for all nodes at
        once from the per-domain counts (a superset check: survivors are still checked one by one)."""
        mask = None

        def narrow(m: np.ndarray) -> None:
            nonlocal mask
            mask = m if mask is None else (mask & m)

        for c in info.spread:
            if c.when_unsatisfiable != DO_NOT_SCHEDULE:
                continue
            restricted = (c.node_affinity_policy != "Ignore" and (info.node_selector.keys() or info.required_terms)) \
                or c.node_taints_policy == "Honor"
            if restricted:
                continue
            key = c.topology_key
            g = self._group(self.groups, key, frozenset((info.namespace,)), c.selector)
            self_match = 1 if g.selects(info) else 0
            low = g.minimum()
            if c.min_domains is not None and len(self.domains.get(key, ())) < c.min_domains:
                low = 0
            room = c.max_skew + low - self_match
            if key == "kubernetes.io/hostname":
                arr, _ = self._domain_ids(key)
                narrow((self._slot_counts(g) <= room) & (arr >= 0))
            else:
                narrow(self._domain_mask(key, [d for d in self.domains.get(key, ()) if g.by_domain.get(d, 0) <= room]))
        for t in info.anti_affinity:
            g = self._group(self.groups, t.topology_key, t.namespaces, t.selector)
            if g.total > 0:
                narrow(~self._domain_mask(t.topology_key, [d for d, c in g.by_domain.items() if c > 0]))
        for g in self.owner_groups.values():
            if g.total > 0 and g.selects(info):
                narrow(~self._domain_mask(g.key, [d for d, c in g.by_domain.items() if c > 0]))
        for t in info.affinity:
            g = self._group(self.groups, t.topology_key, t.namespaces, t.selector)
            if g.total > 0:
                narrow(self._domain_mask(t.topology_key, [d for d, c in g.by_domain.items() if c > 0]))
        return mask

    def _set_domains(self, n: _Node, labels: dict[str, str], delta: int) -> None:
        for key, d in labels.items():
            c = self.domains.setdefault(key, Counter())
            before = c[d]
            c[d] += delta
            if (before == 0) != (c[d] == 0):
                for g in self.groups_by_key.get(key, ()):
                    if c[d] > 0:
                        g.hist_move(None, g.by_domain[d])
                    else:
                        g.hist_move(g.by_domain[d], None)
            if c[d] == 0:
                del c[d]

    def _on_node(self, etype: str, obj: dict, old: dict | None) -> None:
        name = obj["metadata"]["name"]
        if etype == DELETED:
            n = self.nodes.get(name)
            if n is None:
                return
            for key in list(n.pods):
                self._unbind_accounting(key)
            self._set_domains(n, n.labels, -1)
            del self.nodes[name]
            self.nodes_version += 1
            self._usable[n.slot] = False
            self.slots[n.slot] = None
            self._wake_topological()
            return
        new = name not in self.nodes
        n = self._slot(name)
        labels = dict(obj["metadata"].get("labels") or {})
        if labels != n.labels:
            self.nodes_version += 1
            # only the labels that changed move the node between domains (a node gains a label or two at a time)
            self._set_domains(n, {k: d for k, d in n.labels.items() if labels.get(k) != d}, -1)
            self._set_domains(n, {k: d for k, d in labels.items() if n.labels.get(k) != d}, +1)
            # placed pods move domains with their node
            for key in n.pods:
                info = self.bound[key][1]
                self._account(key, info, n, -1, labels=n.labels)
                self._account(key, info, n, +1, labels=labels)
            n.labels = labels
        taints = [Taint.from_obj(t) for t in (obj.get("spec") or {}).get("taints") or ()]
        n.all_taints = taints
        n.hard_taints = [t for t in taints if t.effect in _HARD]
        raw = (obj.get("status") or {}).get("allocatable") or (obj.get("status") or {}).get("capacity")
        if raw is not n.alloc_raw or raw is None:
            alloc = res.parse_resource_list(raw)
            n.alloc_raw = raw
        else:
            alloc = n.alloc
        if alloc != n.alloc:
            used = self._used(n)
            n.alloc = alloc
            self._free[n.slot] = [alloc.get(res.CPU, 0) - used[0], alloc.get(res.MEMORY, 0) - used[1],
                                  alloc.get(res.PODS, 0) - used[2]]
        n.ready = is_true(obj, "Ready")
        n.cordoned = bool((obj.get("spec") or {}).get("unschedulable"))
        n.deleting = deleting(obj)
        was = bool(self._usable[n.slot])
        self._usable[n.slot] = n.usable
        for r in obj["metadata"].get("ownerReferences") or ():
            if r.get("kind") == "NodeClaim":
                n.claim = r.get("name")
                self.claim_node[n.claim] = name
        if new:
            for key in sorted(self.early.pop(name, ())):
                ns_, _, pname = key.partition("/")
                pod = self.mgr.get("Pod", pname, ns_)
                if pod is not None and P.node_name(pod) == name and key not in self.bound and not P.is_terminal(pod):
                    self._bind_accounting(key, self._info(pod), n)
        if n.usable:
            self._wake((("node", name),) + ((("nodeclaim", n.claim),) if n.claim else ()))
            if not was or old is None or old.get("spec") is not obj.get("spec") or labels != (old["metadata"].get("labels") or {}):
                self._wake_node(name)

    def _used(self, n: _Node) -> tuple[int, int, int]:
        cpu = mem = pods = 0
        for key in n.pods:
            r = self.bound[key][1].requests
            cpu += r.get(res.CPU, 0)
            mem += r.get(res.MEMORY, 0)
            pods += 1
        return cpu, mem, pods

    def _on_claim(self, etype: str, obj: dict, old: dict | None) -> None:
        name = obj["metadata"]["name"]
        if etype == DELETED:
            self.claim_node.pop(name, None)
            self._wake((("nodeclaim", name),))
            return
        node = (obj.get("status") or {}).get("nodeName")
        if node:
            self.claim_node[name] = node
            if node in self.nodes and self.nodes[node].usable:
                self._wake((("nodeclaim", name),))

    # --- pods ---------------------------------------------------------------------------------------
    def _on_pod(self, etype: str, obj: dict, old: dict | None) -> None:
        key = P.pod_key(obj)
        if etype == DELETED or P.is_terminal(obj) or deleting(obj):
            self._forget_pending(key)
            if key in self.bound:
                node = self.bound[key][0]
                self._unbind_accounting(key)
                self._wake_node(node)
                self._wake_topological()
            return
        node = P.node_name(obj)
        if node:
            self._forget_pending(key)
            if key not in self.bound:
                n = self.nodes.get(node)
                if n is None:
                    self.early.setdefault(node, set()).add(key)  # bound to a node not seen yet
                    return
                self._bind_accounting(key, self._info(obj), n)
            return
        if (obj.get("spec") or {}).get("schedulerName") not in (None, "", "default-scheduler"):
            return
        if key not in self.pending:
            self.pending[key] = self._info(obj)
            self.created[key] = P.parse_time(obj["metadata"].get("creationTimestamp")) or 0.0
            self.active.add(key)
            self.mgr.enqueue(self, "")

    def _info(self, obj: dict) -> PodInfo:
        info = self.compiler.compile(obj)
        if has_volume_claims(obj):
            info = P.with_volume_requirements(info, volume_requirements(obj, self._lookup))
            ns, key = obj["metadata"].get("namespace") or "default", P.pod_key(obj)
            for v in (obj.get("spec") or {}).get("volumes") or ():
                claim = claim_name(obj, v)
                if claim:
                    self.claim_users.setdefault((ns, claim), set()).add(key)
        return info

    def _lookup(self, kind: str, ns: str, name: str) -> dict | None:
        return self.mgr.get(kind, name, ns)

    def _forget_pending(self, key: str) -> None:
        if self.pending.pop(key, None) is not None:
            self.created.pop(key, None)
            self.active.discard(key)
            self.parked.discard(key)
            self.marked.discard(key)
            self.nom_order.pop(key, None)
            target = self.nominated.pop(key, None)
            if target is not None:
                self.waiting.get(target, set()).discard(key)

    def _on_event(self, etype: str, obj: dict, old: dict | None) -> None:
        if etype == DELETED or obj.get("reason") != "Nominated":
            return
        inv = obj.get("involvedObject") or {}
        if inv.get("kind") != "Pod":
            return
        key = f"{inv.get('namespace') or 'default'}/{inv.get('name')}"
        if key not in self.pending:
            return
        msg = str(obj.get("message") or "")
        target_s = msg.rsplit(": ", 1)[-1]
        kind, _, name = target_s.partition("/")
        if kind not in ("node", "nodeclaim") or not name:
            return
        prev = self.nominated.get(key)
        if prev is not None:
            self.waiting.get(prev, set()).discard(key)
        self.nominated[key] = (kind, name)
        self._nom_seq += 1
        self.nom_order[key] = self._nom_seq
        self.waiting.setdefault((kind, name), set()).add(key)
        self.active.add(key)
        self.mgr.enqueue(self, "")

    def _wake(self, targets) -> None:
        woke = False
        for t in targets:
            for key in self.waiting.get(t, ()):
                self.active.add(key)
                woke = True
        if woke:
            self.mgr.enqueue(self, "")

    def _wake_node(self, name: str) -> None:
        """Something changed on this node: parked pods that fit it now are tried again (at the next pass)."""
        if self.parked:
            self.dirty.add(name)
            self.mgr.enqueue(self, "")

    def _wake_topological(self) -> None:
        """Domains or placed pods changed: parked pods with spreads or affinities are tried again."""
        if self.parked:
            self.wake_topo = True
            self.mgr.enqueue(self, "")

    def _unpark(self) -> None:
        dirty = [self.nodes[d] for d in sorted(self.dirty) if d in self.nodes and self.nodes[d].usable]
        wake_topo = self.wake_topo
        self.dirty = set()
        self.wake_topo = False
        seen: dict[tuple, bool] = {}
        for k in sorted(self.parked):
            info = self.pending.get(k)
            if info is None:
                self.parked.discard(k)
                continue
            if _topological(info) or info.anti_affinity:
                hit = wake_topo or any(self.feasible(info, n) for n in dirty)
            else:
                hit = seen.get(info.class_key)
                if hit is None:
                    hit = seen[info.class_key] = any(self.feasible(info, n) for n in dirty)
            if hit:
                self.parked.discard(k)
                self.active.add(k)

    # --- accounting -----------------------------------------------------------------------------------
    def _group(self, table: dict, key: str, namespaces: frozenset[str] | None, selector: LabelSelector) -> _Group:
        gk = (key, namespaces, selector.sig)
        g = table.get(gk)
        if g is None:
            g = table[gk] = _Group(key, namespaces, selector)
            self.groups_by_key.setdefault(key, []).append(g)
            for d in self.domains.get(key, {}):
                g.hist_move(None, 0)
            for pk, (node, info) in self.bound.items():
                n = self.nodes.get(node)
                if n is None:
                    continue
                if table is self.groups:
                    if g.selects(info):
                        d = n.labels.get(key)
                        g.bump(node, d, +1, d is not None and d in self.domains.get(key, {}), n.slot)
                else:
                    for t in info.anti_affinity:
                        if (t.topology_key, t.namespaces, t.selector.sig) == gk:
                            d = n.labels.get(key)
                            g.bump(node, d, +1, d is not None and d in self.domains.get(key, {}), n.slot)
        return g

    def _account(self, key: str, info: PodInfo, n: _Node, delta: int, labels: dict | None = None) -> None:
        labels = n.labels if labels is None else labels
        lk = info.label_key
        hit = self._selecting.get(lk)
        if hit is None or hit[0] != len(self.groups):
            if len(self._selecting) > 50_000:
                self._selecting.clear()
            hit = self._selecting[lk] = (len(self.groups), [g for g in self.groups.values() if g.selects(info)])
        for g in hit[1]:
            d = labels.get(g.key)
            g.bump(n.name, d, delta, d is not None and d in self.domains.get(g.key, {}), n.slot)
        for t in info.anti_affinity:
            g = self._group(self.owner_groups, t.topology_key, t.namespaces, t.selector) if delta > 0 else \
                self.owner_groups.get((t.topology_key, t.namespaces, t.selector.sig))
            if g is None:
                continue
            d = labels.get(t.topology_key)
            g.bump(n.name, d, delta, d is not None and d in self.domains.get(t.topology_key, {}), n.slot)

    def _bind_accounting(self, key: str, info: PodInfo, n: _Node) -> None:
        # register the pod's anti-affinity groups before counting it, so it is counted once
        for t in info.anti_affinity:
            self._group(self.owner_groups, t.topology_key, t.namespaces, t.selector)
        self.bound[key] = (n.name, info)
        n.pods.add(key)
        r = info.requests
        self._free[n.slot] -= [r.get(res.CPU, 0), r.get(res.MEMORY, 0), 1]
        for k, v in r.items():
            if k not in (res.CPU, res.MEMORY, res.PODS):
                n.extended[k] = n.extended.get(k, 0) + v
        for p in info.host_ports:
            n.ports[p] += 1
        self._account(key, info, n, +1)

    def _unbind_accounting(self, key: str) -> None:
        hit = self.bound.pop(key, None)
        if hit is None:
            return
        node, info = hit
        n = self.nodes.get(node)
        if n is None:
            # the node is gone: its counts go with the pod
            for g in self.groups.values():
                if g.selects(info) and g.by_node.get(node):
                    g.by_node[node] -= 1
                    g.total -= 1
            return
        n.pods.discard(key)
        r = info.requests
        self._free[n.slot] += [r.get(res.CPU, 0), r.get(res.MEMORY, 0), 1]
        for k, v in r.items():
            if k not in (res.CPU, res.MEMORY, res.PODS):
                n.extended[k] = n.extended.get(k, 0) - v
        for p in info.host_ports:
            n.ports[p] -= 1
            if n.ports[p] <= 0:
                del n.ports[p]
        self._account(key, info, n, -1)

    # --- filters ----------------------------------------------------------------------------------------
    def _static_ok(self, info: PodInfo, n: _Node) -> bool:
        if untolerated(info.tolerations, n.hard_taints) is not None:
            return False
        return self._affinity_ok(info, n)

    @staticmethod
    def _affinity_ok(info: PodInfo, n: _Node) -> bool:
        if not info.node_selector.satisfied_by_labels(n.labels):
            return False
        if info.required_terms and not any(t.satisfied_by_labels(n.labels) for t in info.required_terms):
            return False
        if info.volume_requirements is not None and not info.volume_requirements.satisfied_by_labels(n.labels):
            return False
        return True

    def _fits(self, info: PodInfo, n: _Node) -> bool:
        r = info.requests
        f = self._free[n.slot]
        if r.get(res.CPU, 0) > f[0] or r.get(res.MEMORY, 0) > f[1] or f[2] < 1:
            return False
        for k, v in r.items():
            if k not in (res.CPU, res.MEMORY, res.PODS) and v > n.alloc.get(k, 0) - n.extended.get(k, 0):
                return False
        for p in info.host_ports:
            if _port_clash(p, n.ports):
                return False
        return True

    def _topology_ok(self, info: PodInfo, n: _Node) -> bool:
        labels = n.labels
        for t in info.anti_affinity:
            d = labels.get(t.topology_key)
            if d is None:
                continue
            g = self._group(self.groups, t.topology_key, t.namespaces, t.selector)
            if g.by_domain.get(d, 0) > 0:
                return False
        for g in self.owner_groups.values():
            if g.total <= 0:
                continue
            d = labels.get(g.key)
            if d is not None and g.by_domain.get(d, 0) > 0 and g.selects(info):
                return False
        for t in info.affinity:
            g = self._group(self.groups, t.topology_key, t.namespaces, t.selector)
            d = labels.get(t.topology_key)
            if g.total <= 0:
                if not g.selects(info) or d is None:
                    return False
            elif d is None or g.by_domain.get(d, 0) <= 0:
                return False
        for c in info.spread:
            if c.when_unsatisfiable != DO_NOT_SCHEDULE:
                continue
            if not self._spread_ok(info, c, n):
                return False
        return True

    def _spread_ok(self, info: PodInfo, c: SpreadConstraint, n: _Node) -> bool:
        key = c.topology_key
        d = n.labels.get(key)
        if d is None:
            return False
        g = self._group(self.groups, key, frozenset((info.namespace,)), c.selector)
        self_match = 1 if g.selects(info) else 0
        restricted = (c.node_affinity_policy != "Ignore" and (info.node_selector.keys() or info.required_terms)) \
            or c.node_taints_policy == "Honor"
        if not restricted:
            count = g.by_domain.get(d, 0)
            n_domains = len(self.domains.get(key, ()))
            low = g.minimum()
        else:
            counts: Counter = Counter()
            for m in self.nodes.values():
                dm = m.labels.get(key)
                if dm is None:
                    continue
                if c.node_affinity_policy != "Ignore" and not self._affinity_ok(info, m):
                    continue
                if c.node_taints_policy == "Honor" and untolerated(info.tolerations, m.hard_taints) is not None:
                    continue
                counts[dm] += g.by_node.get(m.name, 0)
            if d not in counts:
                return False
            count = counts[d]
            n_domains = len(counts)
            low = min(counts.values())
        if c.min_domains is not None and n_domains < c.min_domains:
            low = 0
        return count + self_match - low <= c.max_skew

    def feasible(self, info: PodInfo, n: _Node) -> bool:
        return n.usable and self._fits(info, n) and self._static_ok(info, n) and self._topology_ok(info, n)

    # --- scheduling ---------------------------------------------------------------------------------------
    def reconcile(self, key: Any) -> float | None:
        if self.dirty or self.wake_topo:
            self._unpark()
        if not self.active:
            return None
        active, self.active = self.active, set()
        # 1. pods go to the node Karpenter nominated for them, in the order Karpenter placed them, while
        #    any of them still binds there (a pod a spread or affinity holds back may fit once others are)
        #    (every sort key here ends with the pod's key, so an order depends on nothing but the pods)
        rest: list[str] = []
        todo = sorted(active, key=lambda k: (-self.pending[k].priority, self.nom_order.get(k, 0), k)
                      if k in self.pending else (0, 0, k))
        while todo:
            bound = 0
            again: list[str] = []
            for k in todo:
                info = self.pending.get(k)
                if info is None:
                    continue
                n, wait = self._nominated_node(k)
                if wait:
                    continue  # waits for the node Karpenter launched for it
                if n is None:
                    rest.append(k)
                elif self.feasible(info, n):
                    self._bind(k, info, n)
                    bound += 1
                else:
                    again.append(k)
            if not bound:
                rest.extend(again)
                break
            todo = again
        # 2. everything else goes to the first node, in creation order, that fits
        order = sorted(rest, key=lambda k: (-self.pending[k].priority, self.created.get(k, 0.0), k))
        while order:
            failed_classes: set[tuple] = set()
            bound = 0
            for k in order:
                info = self.pending.get(k)
                if info is None:
                    continue
                node = self._scan(k, info, failed_classes)
                if node is None:
                    continue
                self._bind(k, info, node)
                bound += 1
            # a pod just placed can make room for pods its spread or affinity held back (as
            # kube-scheduler requeues pods on AssignedPodAdd): try those again while binds happen
            order = [k for k in order if k in self.parked and _topological(self.pending[k])] if bound else []
            for k in order:
                self.parked.discard(k)
        return None

    def _nominated_node(self, key: str) -> tuple[_Node | None, bool]:
        """The usable node Karpenter nominated the pod for, and whether the pod should wait for it."""
        target = self.nominated.get(key)
        if target is None:
            return None, False
        kind, name = target
        node_name = name if kind == "node" else self.claim_node.get(name)
        n = self.nodes.get(node_name) if node_name else None
        if kind == "nodeclaim" and (n is None or not n.usable):
            claim = self.mgr.get("NodeClaim", name)
            if claim is not None and not deleting(claim):
                return None, True
            return None, False
        if n is not None and not n.usable:
            return None, (not n.deleting)
        return n, False

    def _scan(self, key: str, info: PodInfo, failed_classes: set[tuple]) -> _Node | None:
        if info.dra:  # no DRA driver publishes devices in the simulated cluster: its claims cannot be allocated
            self._park(key, info)
            return None
        pure = not (info.spread or info.affinity or info.anti_affinity)
        ck = info.class_key
        if pure and ck in failed_classes:
            self._park(key, info)
            return None
        r = info.requests
        f = self._free
        mask = self._usable & (f[:, 0] >= r.get(res.CPU, 0)) & (f[:, 1] >= r.get(res.MEMORY, 0)) & (f[:, 2] >= 1)
        if not pure and mask.any():
            tm = self._topology_mask(info)
            if tm is not None:
                mask &= tm[: len(mask)]
        for slot in np.flatnonzero(mask):
            n = self.slots[int(slot)]
            if n is not None and self._fits(info, n) and self._static_ok(info, n) and self._topology_ok(info, n):
                return n
        if pure:
            failed_classes.add(ck)
        self._park(key, info)
        return None

    def _park(self, key: str, info: PodInfo) -> None:
        self.parked.add(key)
        if key in self.marked:
            return
        self.marked.add(key)
        ns, _, name = key.partition("/")
        pod = self.mgr.get("Pod", name, ns)
        if pod is None or P.failed_to_schedule(pod):
            return
        status = dict(pod.get("status") or {})
        conds = [c for c in status.get("conditions") or () if c.get("type") != "PodScheduled"]
        usable = int(np.count_nonzero(self._usable))  # the usable nodes (kept per slot as nodes change)
        conds.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                      "message": f"0/{usable} nodes are available: no node fits the pod's requirements.",
                      "lastTransitionTime": self.api_time()})
        status["conditions"] = conds
        try:
            self.api.patch("Pod", name, {"status": status}, ns, subresource="status")
        except E.NotFound:
            pass

    def api_time(self) -> str:
        from ..kube.times import fmt_time

        return fmt_time(self.clock.now()) or ""

    def _bind(self, key: str, info: PodInfo, n: _Node) -> None:
        ns, _, name = key.partition("/")
        try:
            self.api.bind(name, ns, n.name)
        except (E.NotFound, E.Conflict):
            self._forget_pending(key)
            return
        self.binds += 1
        self._forget_pending(key)
        self._bind_accounting(key, info, n)
        pod = self.mgr.get("Pod", name, ns)
        self.recorder.publish(ref(pod, kind="Pod", name=name, namespace=ns), "Scheduled",
                              f"Successfully assigned {key} to {n.name}", component="default-scheduler")


def _nominated(event: dict) -> bool:
    return event.get("reason") == "Nominated"


def _topological(info: PodInfo) -> bool:
    return bool(info.spread or info.affinity)


def _port_clash(p: tuple[str, int, str], used: Counter) -> bool:
    ip, port, proto = p
    for (uip, uport, uproto), c in used.items():
        if c > 0 and uport == port and uproto == proto and (ip == uip or ip == "0.0.0.0" or uip == "0.0.0.0"):
            return True
    return False
