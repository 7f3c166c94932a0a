"""Kubelets and node agents of the simulated world, and the pod garbage collector.

* A Node that registers turns Ready at once (an ``NodeReady`` Event marks the
  moment) and, once Karpenter has registered it, its startup taints are
  removed, as the agents that own them (a CNI, a GPU plugin) would do.
* The kubelet of a spot instance the cloud reclaimed is gone: its Node turns
  NotReady (``NodeStatusUnknown``, as kube-controller-manager's node lifecycle
  controller marks a node whose kubelet stopped posting status) and is never
  marked Ready again.
* A pod bound to a node starts running at once (``Running``, ``Ready``); a pod
  annotated ``karpy.dev/run-for: <duration>`` succeeds that long after it
  started, and its Job counts it.
* Addresses (:class:`Addresses`): a Node without ``status.addresses`` gets an
  ``InternalIP`` from 172.16.0.0/12 and its ``Hostname``; a running pod gets
  ``status.podIP``/``podIPs`` from its node's pod CIDR (a /24 of 10.0.0.0/8,
  10.244.0.0/24 first, taken when the node's first pod runs; a node running
  more than 254 pods takes another) and ``hostIP``; a
  ``hostNetwork`` pod gets its node's InternalIP. An address is free again
  once its pod has finished or is gone, a CIDR once its node is gone.
* A pod deleted by anything but the Eviction API (a controller scaling down or
  replacing it, its node going away, a user) gets a ``Killing`` Event; every
  Event about a pod going away names the pod's owner and labels.
* When a Node is gone, the pods still bound to it are deleted (kube-controller-
  manager's pod garbage collector); a ``RemovingNode`` Event marks the moment.

Pods terminate at once: their ``terminationGracePeriodSeconds`` is not waited
on, and volumes detach instantly.
"""

from __future__ import annotations

from typing import Any

from .. import resources as res
from ..kube import errors as E
from ..kube.port import ADDED, DELETED
from ..kube.times import fmt_time
from ..runtime.events import pod_annotations, ref
from ..runtime.manager import Manager, deleting, is_true
from ..state import pods as P
from .agents import without_startup_taints

RUN_FOR = "karpy.dev/run-for"
READY_CONDITIONS = ("Initialized", "Ready", "ContainersReady", "PodScheduled")

POD_CIDRS = 1 << 16  # the /24s of 10.0.0.0/8
FIRST_POD_CIDR = 244 << 8  # 10.244.0.0/24, the pod network most clusters start from
NODE_NET = (172 << 24) | (16 << 16)  # 172.16.0.0/12
NODE_NET_SIZE = 1 << 20


def _ipv4(n: int) -> str:
    return f"{n >> 24}.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"


class Addresses:
    """The cluster network's addresses: nodes' InternalIPs, a pod CIDR per node, an IP per running pod.

    Allocation is a counter and a free list per pool (no scan, no ``ipaddress``), so it costs a
    simulation of 20,000 pods nothing it would notice.
    """

    def __init__(self) -> None:
        self._next_cidr = 0
        self._free_cidrs: list[int] = []
        # node -> [its CIDRs (the 16 bits after "10."), next host in the last one, addresses given back]
        self._nodes: dict[str, list] = {}
        self._pods: dict[str, int] = {}  # pod uid -> its address (the 24 bits after "10.")
        self._next_node_ip = 0
        self._free_node_ips: list[int] = []
        self._node_ips: dict[str, int] = {}

    def node_ip(self, node: str) -> str | None:
        n = self._node_ips.get(node)
        if n is None:
            if self._free_node_ips:
                n = self._free_node_ips.pop()
            else:
                while True:
                    self._next_node_ip += 1
                    if self._next_node_ip >= NODE_NET_SIZE - 1:
                        return None
                    n = NODE_NET | self._next_node_ip
                    if n & 255 not in (0, 255):
                        break
            self._node_ips[node] = n
        return _ipv4(n)

    def pod_ip(self, uid: str, node: str) -> str | None:
        got = self._pods.get(uid)
        if got is not None:
            return _ipv4((10 << 24) | got)
        st = self._nodes.get(node)
        if st is None:
            st = self._nodes[node] = [[], 255, []]
        if st[2]:
            n = st[2].pop()
        else:
            if st[1] > 254:
                if self._free_cidrs:
                    cidr = self._free_cidrs.pop()
                elif self._next_cidr < POD_CIDRS:
                    cidr = (FIRST_POD_CIDR + self._next_cidr) % POD_CIDRS
                    self._next_cidr += 1
                else:
                    return None  # every /24 of 10.0.0.0/8 is some node's: more than 65,536 nodes run pods
                st[0].append(cidr)
                st[1] = 1
            n = (st[0][-1] << 8) | st[1]
            st[1] += 1
        self._pods[uid] = n
        return _ipv4((10 << 24) | n)

    def release_pod(self, uid: str, node: str) -> None:
        n = self._pods.pop(uid, None)
        if n is not None:
            st = self._nodes.get(node)
            if st is not None and n >> 8 in st[0]:  # not a CIDR the node gave back and another node took
                st[2].append(n)

    def release_node(self, node: str) -> None:
        st = self._nodes.pop(node, None)
        if st is not None:
            self._free_cidrs.extend(st[0])
        n = self._node_ips.pop(node, None)
        if n is not None:
            self._free_node_ips.append(n)


def internal_ip(node: dict) -> str | None:
    for a in (node.get("status") or {}).get("addresses") or ():
        if a.get("type") == "InternalIP" and a.get("address"):
            return a["address"]
    return None


class Kubelets:
    name = "world.kubelet"

    def __init__(self, mgr: Manager, api: Any, clock: Any, recorder: Any, workloads: Any, cloud: Any = None):
        self.mgr = mgr
        self.cloud = cloud  # the SimulatedCloud: the nodes whose instance it reclaimed have no kubelet
        self.api = api
        self.clock = clock
        self.recorder = recorder
        self.workloads = workloads
        self.bound: dict[str, set[str]] = {}  # node -> pod keys bound to it
        self.addresses = Addresses()
        self._ready: tuple[str | None, dict[str, dict]] = (None, {})  # the Ready conditions of pods started at one instant
        self.not_ready: set[str] = set()  # nodes whose kubelet a Scenario `condition` step made report Ready != True

    def setup(self, mgr: Manager) -> None:
        mgr.watch("Node", self._on_node)
        mgr.watch("Pod", self._on_pod)
        mgr.watch("NodeClaim", self._on_claim)
        if self.cloud is not None:
            self.cloud.on_reclaim(lambda inst: mgr.enqueue(self, ("node", inst.node_name)))

    # --- nodes --------------------------------------------------------------------------------
    def _on_node(self, etype: str, obj: dict, old: dict | None) -> None:
        name = obj["metadata"]["name"]
        if etype == DELETED:
            self.addresses.release_node(name)
            self.not_ready.discard(name)
            self.recorder.publish(ref(obj), "RemovingNode", f"Node {name} event: Removing Node {name} from Controller",
                                  component="node-controller")
            self.mgr.enqueue(self, ("gc", name))
            return
        self.mgr.enqueue(self, ("node", name))

    def _on_claim(self, etype: str, obj: dict, old: dict | None) -> None:
        node = (obj.get("status") or {}).get("nodeName")
        if node and etype != DELETED:
            self.mgr.enqueue(self, ("node", node))

    def _reconcile_node(self, name: str) -> None:
        node = self.mgr.get("Node", name)
        if node is None:
            return
        if self.cloud is not None and (node.get("spec") or {}).get("providerID") in self.cloud.reclaimed:
            self._lost(node)
            return
        if deleting(node):
            return
        ready = is_true(node, "Ready") or name in self.not_ready
        addressed = bool((node.get("status") or {}).get("addresses"))
        if not ready or not addressed:
            st = dict(node.get("status") or {})
            if not ready:
                conds = [c for c in st.get("conditions") or () if c.get("type") != "Ready"]
                conds.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                              "message": "kubelet is posting ready status",
                              "lastTransitionTime": fmt_time(self.clock.now())})
                st["conditions"] = conds
                st["phase"] = "Running"
            if not addressed:
                ip = self.addresses.node_ip(name)
                st["addresses"] = ([{"type": "InternalIP", "address": ip}] if ip else []) + \
                    [{"type": "Hostname", "address": name}]
            self.api.patch("Node", name, {"status": st}, subresource="status")
            if not ready:
                self.recorder.publish(ref(node), "NodeReady", f"Node {name} status is now: NodeReady",
                                      component="kubelet")
            node = self.mgr.get("Node", name) or node
        taints = without_startup_taints(self.mgr, node)  # the node's agents (a CNI's, a device plugin's)
        if taints is not None:
            self.api.patch("Node", name, {"spec": {"taints": taints}})

    def report_condition(self, name: str, ctype: str, status: str, reason: str | None, message: str | None) -> None:
        """The node's kubelet (or agent) reports a condition from now on (a Scenario ``condition`` step): set
        it on the Node, its ``lastTransitionTime`` now when its status changes. A kubelet reporting Ready
        other than True keeps doing so until a step sets it True again."""
        node = self.mgr.get("Node", name)
        if node is None or deleting(node):
            return
        if ctype == "Ready":
            (self.not_ready.discard if status == "True" else self.not_ready.add)(name)
        st = dict(node.get("status") or {})
        conds = list(st.get("conditions") or ())
        old = next((c for c in conds if c.get("type") == ctype), None)
        now = fmt_time(self.clock.now())
        new = {"type": ctype, "status": status, "reason": reason or ctype,
               "message": message if message is not None else (old or {}).get("message", ""),
               "lastHeartbeatTime": now,
               "lastTransitionTime": (old or {}).get("lastTransitionTime") if old and old.get("status") == status else now}
        st["conditions"] = [c for c in conds if c.get("type") != ctype] + [new]
        self.api.patch("Node", name, {"status": st}, subresource="status")

    def _lost(self, node: dict) -> None:
        """The node's instance is gone and its kubelet with it: Ready turns False."""
        ready = next((c for c in (node.get("status") or {}).get("conditions") or () if c.get("type") == "Ready"), None)
        if ready is not None and ready.get("status") == "False" and ready.get("reason") == "NodeStatusUnknown":
            return
        st = dict(node.get("status") or {})
        conds = [c for c in st.get("conditions") or () if c.get("type") != "Ready"]
        conds.append({"type": "Ready", "status": "False", "reason": "NodeStatusUnknown",
                      "message": "Kubelet stopped posting node status.", "lastTransitionTime": fmt_time(self.clock.now())})
        st["conditions"] = conds
        try:
            self.api.patch("Node", node["metadata"]["name"], {"status": st}, subresource="status")
        except E.NotFound:
            pass

    # --- pods ---------------------------------------------------------------------------------
    def _on_pod(self, etype: str, obj: dict, old: dict | None) -> None:
        key = P.pod_key(obj)
        node = P.node_name(obj)
        if etype == DELETED:
            if node:
                self.bound.get(node, set()).discard(key)
            uid = obj["metadata"].get("uid", "")
            self.addresses.release_pod(uid or key, node)
            evicted = getattr(self.api, "evicted_uids", set())
            if uid in evicted:
                evicted.discard(uid)
            elif not P.is_terminal(obj):
                self.recorder.publish(ref(obj), "Killing", "Stopping container", component="kubelet",
                                      annotations=pod_annotations(obj))
            return
        if node:
            self.bound.setdefault(node, set()).add(key)
            phase = P.phase(obj)
            if phase == "Pending" and not deleting(obj):
                self.mgr.enqueue(self, ("pod", key))
            elif phase in ("Succeeded", "Failed"):  # its containers are gone, and its address with them
                self.addresses.release_pod(obj["metadata"].get("uid") or key, node)

    def _reconcile_pod(self, key: str) -> None:
        ns, _, name = key.partition("/")
        pod = self.mgr.get("Pod", name, ns)
        if pod is None or P.phase(pod) != "Pending" or not P.node_name(pod) or deleting(pod):
            return
        node = self.mgr.get("Node", P.node_name(pod))
        if node is None:
            return
        now = self.clock.now()
        ts = fmt_time(now)
        status = dict(pod.get("status") or {})
        status["phase"] = "Running"
        status["startTime"] = ts
        host_ip = internal_ip(node)
        if host_ip:
            status["hostIP"] = host_ip
        if (pod.get("spec") or {}).get("hostNetwork"):
            pod_ip = host_ip
        else:
            pod_ip = self.addresses.pod_ip(pod["metadata"].get("uid") or key, P.node_name(pod))
        if pod_ip:
            status["podIP"] = pod_ip
            status["podIPs"] = [{"ip": pod_ip}]
        conds = {c.get("type"): c for c in status.get("conditions") or ()}
        if self._ready[0] != ts:  # pods started at one instant share their conditions (stored objects are never mutated)
            self._ready = (ts, {t: {"type": t, "status": "True", "lastTransitionTime": ts} for t in READY_CONDITIONS})
        for t in READY_CONDITIONS:
            if t == "PodScheduled" and t in conds:
                continue
            conds[t] = self._ready[1][t]
        status["conditions"] = [conds[t] for t in READY_CONDITIONS if t in conds]
        self.api.patch("Pod", name, {"status": status}, ns, subresource="status")
        run_for = (pod["metadata"].get("annotations") or {}).get(RUN_FOR)
        if run_for:
            uid = pod["metadata"].get("uid")
            self.clock.call_later(res.parse_duration(run_for), lambda: self._finish(key, uid), keepalive=True,
                                  label=f"run-for/{key}")

    def _finish(self, key: str, uid: str | None) -> None:
        ns, _, name = key.partition("/")
        pod = self.mgr.get("Pod", name, ns)
        if pod is None or pod["metadata"].get("uid") != uid or P.phase(pod) != "Running":
            return
        status = dict(pod.get("status") or {})
        status["phase"] = "Succeeded"
        ts = fmt_time(self.clock.now())
        status["conditions"] = [dict(c, status="False", lastTransitionTime=ts) if c.get("type") in ("Ready", "ContainersReady")
                                else c for c in status.get("conditions") or ()]
        self.api.patch("Pod", name, {"status": status}, ns, subresource="status")
        self.workloads.job_pod_succeeded(pod)

    # --- garbage collection ----------------------------------------------------------------------
    def _gc(self, node: str) -> None:
        if self.mgr.get("Node", node) is not None:
            return
        for key in sorted(self.bound.pop(node, set())):
            ns, _, name = key.partition("/")
            try:
                self.api.delete("Pod", name, ns)
            except E.NotFound:
                pass

    def reconcile(self, key: tuple[str, str]) -> float | None:
        what, name = key
        if what == "node":
            self._reconcile_node(name)
        elif what == "pod":
            self._reconcile_pod(name)
        elif what == "gc":
            self._gc(name)
        return None
