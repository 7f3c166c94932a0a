"""Replaying a ``karpy simulate -o json`` result: the cluster as it was at any instant of the simulated time.

The result holds the final objects, every Event in time order and the ``SimulationSummary`` (every NodeClaim's
life with its price, every disruption). From those, the cluster at instant ``t`` is:

* NodeClaims: those created by ``t`` and not yet deleted (the summary), with their final object's labels and
  capacity when they survive, else the labels the summary gives and the allocatable of a surviving node of the
  same instance type (or karpy's catalog for it); registered and Ready from their ``Registered`` and
  ``NodeReady`` Events; tainted for disruption while a disruption of the summary that names them is in flight;
* pods: bound at their ``Scheduled`` Event (DaemonSet pods and pods bound without one: when their node
  registered), gone at their ``Evicted``/``Killing`` Event; a pod that did not survive to the end requests what
  its surviving siblings of the same owner request (counted in ``unknown_requests`` when none survives);
* cost per hour: the sum of the prices of the NodeClaims launched and not yet deleted, so at the end it equals
  the summary's ``costPerHour``.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..kube.selectors import parse_label_selector
from ..kube.times import fmt_time, parse_time
from .model import Snapshot, _event_time, is_daemon, pod_key


class ReplayError(Exception):
    """The file is not a ``karpy simulate -o json`` result (exit status 2, with this message)."""


@dataclass
class _PodLife:
    key: str
    owner: str | None
    spec: dict | None
    template: dict | None  # the final object, when it survived
    created: float | None
    bound_at: float | None = None
    node: str | None = None
    gone_at: float | None = None
    daemon: bool = False


@dataclass
class Replay:
    path: str
    start: float
    end: float
    summary: dict
    objects: dict[str, list[dict]]
    events: list[dict]
    event_times: list[float]
    claims: list[dict]  # the summary's nodeClaims
    marks: list[tuple[float, str]] = field(default_factory=list)  # disruption starts and ends: (time, label)
    _pods: list[_PodLife] = field(default_factory=list)
    _node_of_claim: dict[str, str] = field(default_factory=dict)
    _registered: dict[str, float] = field(default_factory=dict)
    _ready: dict[str, float] = field(default_factory=dict)
    _launched: dict[str, float] = field(default_factory=dict)
    _alloc_by_type: dict[str, dict] = field(default_factory=dict)
    _daemon_templates: list[_PodLife] = field(default_factory=list)
    _capacity: dict[str, dict] = field(default_factory=dict)  # NodeClaim name, or instance type -> capacity

    # --- the cluster at t ----------------------------------------------------------------------------------------
    def cost_at(self, t: float) -> float:
        return sum(float(c.get("pricePerHour") or 0) for c in self.claims if self._paid_at(c, t))

    def _paid_at(self, c: dict, t: float) -> bool:
        if c.get("launchFailed"):
            return False
        launched = self._launched.get(c["name"], parse_time(c.get("createdAt")) or self.start)
        deleted = parse_time(c.get("deletedAt"))
        return launched <= t and (deleted is None or t < deleted)

    def cost_history(self, t: float) -> list[tuple[float, float]]:
        times = sorted({self.start, *(self._launched.get(c["name"], parse_time(c.get("createdAt")) or self.start)
                                      for c in self.claims),
                        *(parse_time(c.get("deletedAt")) for c in self.claims if c.get("deletedAt"))})
        return [(x, self.cost_at(x)) for x in times if x <= t]

    def disruptions_at(self, t: float) -> list[dict]:
        out = []
        for d in self.summary.get("disruptions") or ():
            started = parse_time(d.get("startedAt"))
            finished = parse_time(d.get("finishedAt"))
            if started is not None and started <= t and (finished is None or t < finished):
                out.append(d)
        return out

    def snapshot(self, t: float, selector: str = "") -> Snapshot:
        t = min(max(t, self.start), self.end)
        matches = parse_label_selector(selector)
        disrupting: dict[str, str] = {}
        for d in self.disruptions_at(t):
            for c in d.get("candidates") or ():
                disrupting[c] = d.get("reason") or ""
        finals = {o["metadata"]["name"]: o for o in self.objects.get("NodeClaim", ())}
        final_nodes = {o["metadata"]["name"]: o for o in self.objects.get("Node", ())}
        claims: list[dict] = []
        nodes: list[dict] = []
        for c in self.claims:
            created = parse_time(c.get("createdAt")) or self.start
            deleted = parse_time(c.get("deletedAt"))
            if created > t or (deleted is not None and deleted <= t):
                continue
            claim, node = self._claim_at(c, finals.get(c["name"]), t, disrupting.get(c["name"]))
            node_name = self._node_of_claim.get(c["name"])
            if node is not None and node_name in final_nodes:
                node = _merge_node(final_nodes[node_name], node)
            if not matches((claim["metadata"].get("labels") or {})):
                continue
            claims.append(claim)
            if node is not None:
                nodes.append(node)
        # Nodes not made by Karpenter (the input's own Nodes): there from the start
        claimed = set(self._node_of_claim.values())
        for name, n in final_nodes.items():
            if name not in claimed and matches(n["metadata"].get("labels") or {}):
                nodes.append(n)
        pods, unknown = self._pods_at(t, {n["metadata"]["name"] for n in nodes})
        events = self.events[:bisect.bisect_right(self.event_times, t)]
        return Snapshot(now=t, nodes=nodes, nodeclaims=claims, pods=pods,
                        nodepools=self._nodepools_at(t), events=events,
                        disruptions=self.disruptions_at(t), cost_history=self.cost_history(t),
                        unknown_requests=unknown)

    def _nodepools_at(self, t: float) -> list[dict]:
        """The NodePools with the status they had at ``t``: their launched NodeClaims and those's capacity."""
        from .. import resources as res

        out = []
        for np in self.objects.get("NodePool", ()):
            name = np["metadata"]["name"]
            mine = [c for c in self.claims if c.get("nodePool") == name and self._paid_at(c, t)]
            total: dict[str, int] = {}
            for c in mine:
                try:
                    itype = c.get("instanceType") or ""
                    total = res.add(total, res.parse_resource_list(
                        self._capacity.get(c["name"]) or self._capacity.get(itype) or self._alloc_by_type.get(itype)))
                except Exception:  # noqa: BLE001 - an unreadable quantity leaves the usage out
                    pass
            status = dict(np.get("status") or {})
            status["nodes"] = len(mine)
            status["resources"] = res.format_resource_list({**total, "nodes": len(mine)})
            out.append({**np, "status": status})
        return out

    def _claim_at(self, c: dict, final: dict | None, t: float, disrupting: str | None) -> tuple[dict, dict | None]:
        name = c["name"]
        labels = dict((final or {}).get("metadata", {}).get("labels") or {})
        for key, value in (("karpenter.sh/nodepool", c.get("nodePool")),
                           ("node.kubernetes.io/instance-type", c.get("instanceType")),
                           ("karpenter.sh/capacity-type", c.get("capacityType")),
                           ("topology.kubernetes.io/zone", c.get("zone")), ("kubernetes.io/arch", c.get("arch"))):
            if value and key not in labels:
                labels[key] = value
        ann = {"karpy.dev/price-per-hour": c["pricePerHour"]} if c.get("pricePerHour") else {}
        if c.get("priceEstimated"):
            ann["karpy.dev/price-estimated"] = "true"
        status = dict((final or {}).get("status") or {})
        if not status.get("allocatable"):
            alloc = self._alloc_by_type.get(c.get("instanceType") or "")
            if alloc:
                status["allocatable"] = alloc
        conds = []
        launched = self._launched.get(name)
        if c.get("launchFailed"):
            conds.append({"type": "Launched", "status": "False", "reason": "LaunchFailed"})
        elif launched is not None and launched <= t:
            conds.append({"type": "Launched", "status": "True"})
        reg = self._registered.get(name)
        if reg is not None and reg <= t:
            conds.append({"type": "Registered", "status": "True"})
            conds.append({"type": "Initialized", "status": "True"})
        if disrupting:
            conds.append({"type": "DisruptionReason", "status": "True", "reason": disrupting})
        status["conditions"] = conds
        node_name = self._node_of_claim.get(name)
        meta: dict[str, Any] = {"name": name, "labels": labels, "annotations": ann,
                                "creationTimestamp": c.get("createdAt")}
        if c.get("launchFailed"):
            meta["deletionTimestamp"] = c.get("deletedAt") or fmt_time(self.end)
        if reg is not None and reg <= t and node_name:
            status["nodeName"] = node_name
        claim = {"kind": "NodeClaim", "metadata": meta, "status": status,
                 "spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}] if disrupting else []}}
        node = None
        if reg is not None and reg <= t and node_name:
            ready = self._ready.get(node_name, reg)
            node = {"kind": "Node",
                    "metadata": {"name": node_name, "labels": labels, "annotations": ann,
                                 "creationTimestamp": fmt_time(reg)},
                    "spec": {"taints": claim["spec"]["taints"]},
                    "status": {"allocatable": status.get("allocatable") or {},
                               "conditions": [{"type": "Ready", "status": "True" if ready <= t else "False",
                                               "lastTransitionTime": fmt_time(ready if ready <= t else reg)}]}}
        return claim, node

    def _pods_at(self, t: float, nodes: set[str]) -> tuple[list[dict], int]:
        out: list[dict] = []
        unknown = 0
        for life in self._pods:
            if life.created is not None and life.created > t:
                continue
            if life.gone_at is not None and life.gone_at <= t:
                continue
            bound = life.node if life.bound_at is not None and life.bound_at <= t else None
            if life.spec is None:
                unknown += 1
            out.append(_pod(life, bound, "Running" if bound else "Pending"))
        # DaemonSet pods of nodes that did not survive: those the final nodes all have
        have = {p["spec"].get("nodeName") for p in out if p["spec"].get("nodeName")}
        final = {p["spec"].get("nodeName") for p in out}
        for n in sorted(nodes - have - final):
            for d in self._daemon_templates:
                out.append(_pod(_PodLife(f"{d.key}@{n}", d.owner, d.spec, d.template, None, 0.0, n, daemon=True),
                                n, "Running"))
        return out, unknown


def _merge_node(final: dict, at_t: dict) -> dict:
    out = dict(final)
    out["metadata"] = {**final["metadata"], "creationTimestamp": at_t["metadata"]["creationTimestamp"]}
    out["metadata"].pop("deletionTimestamp", None)
    out["spec"] = {**(final.get("spec") or {}), "taints": at_t["spec"]["taints"]}
    out["status"] = {**(final.get("status") or {}), "conditions": at_t["status"]["conditions"]}
    return out


def _pod(life: _PodLife, node: str | None, phase: str) -> dict:
    ns, _, name = life.key.partition("/")
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if life.daemon:
        meta["ownerReferences"] = [{"kind": "DaemonSet", "name": (life.owner or "/").split("/", 1)[1],
                                    "controller": True}]
    elif life.owner:
        kind, _, oname = life.owner.partition("/")
        meta["ownerReferences"] = [{"kind": kind, "name": oname, "controller": True}]
    spec = dict(life.spec or {})
    spec["nodeName"] = node
    return {"kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


_HASHED = re.compile(r"^(.*)-[a-z0-9]{5}$")


def _owner_of(obj: dict | None) -> str | None:
    for r in ((obj or {}).get("metadata") or {}).get("ownerReferences") or ():
        if r.get("controller", True):
            return f"{r.get('kind')}/{r.get('name')}"
    return None


def load(path: str) -> Replay:
    """Read a ``karpy simulate -o json`` result; ReplayError naming what is wrong."""
    try:
        text = Path(path).read_bytes() if path != "-" else __import__("sys").stdin.buffer.read()
    except OSError as e:
        raise ReplayError(f"--replay: {path}: {e.strerror or e}") from None
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ReplayError(f"--replay: {path}: not JSON ({e}); write one with `karpy simulate -o json`") from None
    if not isinstance(doc, dict) or doc.get("kind") != "List" or not isinstance(doc.get("items"), list):
        raise ReplayError(f"--replay: {path}: not a `karpy simulate -o json` result (a v1 List)")
    items = [i for i in doc["items"] if isinstance(i, dict)]
    summaries = [i for i in items if i.get("kind") == "SimulationSummary"]
    if not summaries or not isinstance(summaries[-1].get("status"), dict):
        raise ReplayError(f"--replay: {path}: the List has no SimulationSummary: not a `karpy simulate` result")
    status = summaries[-1]["status"]
    start, end = parse_time(status.get("start")), parse_time(status.get("end"))
    if start is None or end is None or end < start:
        raise ReplayError(f"--replay: {path}: SimulationSummary.status.start/end: not RFC 3339 times in order")
    objects: dict[str, list[dict]] = {}
    for i in items:
        if i.get("kind") != "Event" and isinstance(i.get("metadata"), dict) and i["metadata"].get("name"):
            objects.setdefault(str(i.get("kind")), []).append(i)
    events = sorted((i for i in items if i.get("kind") == "Event"), key=_event_time)
    claims = [c for c in status.get("nodeClaims") or () if isinstance(c, dict) and c.get("name")]
    r = Replay(path=path, start=start, end=end, summary=status, objects=objects, events=events,
               event_times=[_event_time(e) for e in events], claims=claims)
    _index(r)
    return r


def _index(r: Replay) -> None:
    for n in r.objects.get("Node", ()):
        alloc = (n.get("status") or {}).get("allocatable")
        itype = (n["metadata"].get("labels") or {}).get("node.kubernetes.io/instance-type")
        if alloc and itype:
            r._alloc_by_type.setdefault(itype, alloc)
    for c in r.objects.get("NodeClaim", ()):
        st = c.get("status") or {}
        if st.get("nodeName"):
            r._node_of_claim[c["metadata"]["name"]] = st["nodeName"]
        if st.get("capacity"):
            r._capacity[c["metadata"]["name"]] = st["capacity"]
            r._capacity.setdefault((c["metadata"].get("labels") or {}).get("node.kubernetes.io/instance-type", ""),
                                   st["capacity"])
        alloc = st.get("allocatable")
        itype = (c["metadata"].get("labels") or {}).get("node.kubernetes.io/instance-type")
        if alloc and itype:
            r._alloc_by_type.setdefault(itype, alloc)
    _catalog_allocatable(r)
    pods: dict[str, _PodLife] = {}
    final_pods = r.objects.get("Pod", ())
    by_owner: dict[str, dict] = {}
    for p in final_pods:
        owner = _owner_of(p)
        key = pod_key(p)
        life = _PodLife(key, owner, p.get("spec") or {}, p, parse_time(p["metadata"].get("creationTimestamp")),
                        daemon=is_daemon(p))
        node = (p.get("spec") or {}).get("nodeName")
        if node:
            life.node = node
        pods[key] = life
        if owner:
            by_owner.setdefault(owner, p.get("spec") or {})
    for e, t in zip(r.events, r.event_times):
        inv = e.get("involvedObject") or {}
        reason = e.get("reason")
        msg = str(e.get("message") or "")
        kind = inv.get("kind")
        if kind == "NodeClaim":
            name = str(inv.get("name"))
            if reason == "Launched":
                r._launched.setdefault(name, t)
            elif reason == "Registered":
                r._registered.setdefault(name, t)
                m = re.search(r"\(node ([^)]+)\)", msg)
                if m:
                    r._node_of_claim.setdefault(name, m.group(1))
            elif reason == "DisruptionTerminating":
                r.marks.append((t, f"{name}: terminating"))
        elif kind == "Node" and reason == "NodeReady":
            r._ready.setdefault(str(inv.get("name")), t)
        elif kind == "Pod":
            key = f"{inv.get('namespace') or 'default'}/{inv.get('name')}"
            life = pods.get(key)
            if life is None:
                ann = (e.get("metadata") or {}).get("annotations") or {}
                owner = ann.get("karpy.dev/owner")
                life = pods[key] = _PodLife(key, owner, None, None, None, daemon=(owner or "").startswith("DaemonSet/"))
            if reason == "Scheduled":
                m = re.search(r" to (\S+)$", msg)
                if m and (life.bound_at is None or life.gone_at is None):
                    life.bound_at, life.node = t, m.group(1)
                if life.created is None:
                    life.created = t
            elif reason in ("Evicted", "Killing", "Preempted"):
                life.gone_at = t if life.gone_at is None else life.gone_at
                owner = ((e.get("metadata") or {}).get("annotations") or {}).get("karpy.dev/owner")
                if owner and not life.owner:
                    life.owner = owner
            elif life.created is None:
                life.created = t
    node_reg = {n: r._registered.get(c, r.start) for c, n in r._node_of_claim.items()}
    for life in pods.values():
        if life.owner is None:
            m = _HASHED.match(life.key.partition("/")[2])
            if m:
                life.owner = next((o for o in by_owner if o.endswith("/" + m.group(1))), None)
        if life.spec is None and life.owner in by_owner:
            life.spec = by_owner[life.owner]
        if life.created is None:
            life.created = r.start
        if life.node and life.bound_at is None:
            life.bound_at = node_reg.get(life.node, life.created)
        if life.daemon and life.template is None:
            continue  # a DaemonSet pod that went with its node: its node is unknown; see _daemon_templates
        r._pods.append(life)
    final_nodes = {n["metadata"]["name"] for n in r.objects.get("Node", ())}
    per_owner: dict[str, set[str]] = {}
    for life in r._pods:
        if life.daemon and life.node:
            per_owner.setdefault(life.owner or "", set()).add(life.node)
    for owner, on in per_owner.items():
        if final_nodes and on >= final_nodes:
            tmpl = next(x for x in r._pods if x.daemon and x.owner == owner)
            r._daemon_templates.append(tmpl)
    for d in r.summary.get("disruptions") or ():
        started, finished = parse_time(d.get("startedAt")), parse_time(d.get("finishedAt"))
        if started is not None:
            r.marks.append((started, f"{d.get('reason')} {d.get('method')}: {', '.join(d.get('candidates') or ())}"))
        if finished is not None:
            r.marks.append((finished, f"{d.get('reason')} {d.get('outcome')}"))
    r.marks.sort()


def _catalog_allocatable(r: Replay) -> None:
    """Allocatable of the instance types no surviving node shows, from karpy's catalog for the NodeClass kind."""
    wanted = {c.get("instanceType") for c in r.claims if c.get("instanceType")} - set(r._alloc_by_type)
    if not wanted:
        return
    from .. import resources as res
    from ..cloudprovider.catalog import get_provider

    kinds = {}
    for np in r.objects.get("NodePool", ()):
        ref = (((np.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
        kinds[np["metadata"]["name"]] = ref.get("kind") or ""
    for c in r.claims:
        itype = c.get("instanceType")
        if itype not in wanted:
            continue
        zone = c.get("zone") or ""
        try:
            provider = get_provider(kinds.get(c.get("nodePool") or "", "") or "kwok")
            region = None
            if provider.name == "azure" and "-" in zone:
                region = zone.rsplit("-", 1)[0]
            elif provider.name == "aws" and zone[-1:].isalpha():
                region = zone[:-1]
            types = {it.name: it for it in provider.instance_types(region, None)}
        except (ValueError, KeyError):
            continue
        it = types.get(itype)
        if it is not None:
            r._alloc_by_type[itype] = res.format_resource_list({k: v for k, v in it.allocatable.items() if v > 0})
            wanted.discard(itype)
