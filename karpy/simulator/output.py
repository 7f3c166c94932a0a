"""What `karpy simulate` prints: the final state as a v1 List, or a table for people."""

from __future__ import annotations

import io
import json
from typing import Any

import yaml

from .. import resources as res
from .sim import PRICE_ANNOTATION, PRICE_ESTIMATED_ANNOTATION, ClaimRec, Simulation, fmt_time


def _gib(b: int) -> str:
    g = b / 2**30
    return f"{g:.0f}Gi" if abs(g - round(g)) < 0.05 else f"{g:.1f}Gi"


def _price(x: float) -> str:
    return f"{x:.4f}"


def _claim_manifest(sim: Simulation, c: ClaimRec) -> dict:
    labels = sim._claim_labels(c)
    if c.node:
        labels["kubernetes.io/hostname"] = c.node
    annotations = dict(sorted({**c.node_annotations, **c.annotations}.items()))
    if c.offering is not None:
        annotations[PRICE_ANNOTATION] = _price(c.offering.price)
        if c.offering.price_estimated:
            annotations[PRICE_ESTIMATED_ANNOTATION] = "true"
    spec_np = (sim.objects.get(("NodePool", "", c.nodepool)) or {}).get("spec") or {}
    tspec = (spec_np.get("template") or {}).get("spec") or {}
    spec: dict[str, Any] = {
        "nodeClassRef": dict(tspec.get("nodeClassRef") or {}),
        "requirements": c.requirements.to_node_selector(),
        "resources": {"requests": res.format_resource_list(c.requests)},
    }
    for k in ("taints", "startupTaints", "expireAfter", "terminationGracePeriod"):
        if tspec.get(k) is not None:
            spec[k] = tspec[k]
    conditions = []
    if c.instance_type is not None:
        conditions.append({"type": "Launched", "status": "True", "lastTransitionTime": fmt_time(c.created)})
    if c.drifted:
        conditions.append({"type": "Drifted", "status": "True", "reason": c.drifted,
                           "lastTransitionTime": fmt_time(c.drifted_since)})
    if c.disruption_reason and c.deleted is None:
        conditions.append({"type": "DisruptionReason", "status": "True", "reason": c.disruption_reason,
                           "message": c.disruption_reason, "lastTransitionTime": fmt_time(c.disruption_started)})
    if c.registered is not None:
        conditions.append({"type": "Registered", "status": "True", "lastTransitionTime": fmt_time(c.registered)})
    if c.initialized is not None:
        conditions.append({"type": "Initialized", "status": "True", "lastTransitionTime": fmt_time(c.initialized)})
        conditions.append({"type": "Ready", "status": "True", "lastTransitionTime": fmt_time(c.initialized)})
    status: dict[str, Any] = {"conditions": conditions}
    if c.instance_type is not None:
        status["capacity"] = res.format_resource_list(c.instance_type.capacity)
        status["allocatable"] = res.format_resource_list(c.instance_type.allocatable)
        status["providerID"] = f"{c.provider}:///{c.name}"
    if c.node:
        status["nodeName"] = c.node
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": c.name,
            "labels": dict(sorted(labels.items())),
            "annotations": annotations,
            "creationTimestamp": fmt_time(c.created),
            "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "name": c.nodepool}],
            "finalizers": ["karpenter.sh/termination"],
        },
        "spec": spec,
        "status": status,
    }


def _node_manifest(sim: Simulation, n) -> dict:
    if n.obj is not None and n.claim is None:
        return n.obj
    c = sim.claims.get(n.claim) if n.claim else None
    annotations = dict(sorted(c.node_annotations.items())) if c is not None else {}
    if c is not None and c.offering is not None:
        annotations[PRICE_ANNOTATION] = _price(c.offering.price)
        if c.offering.price_estimated:
            annotations[PRICE_ESTIMATED_ANNOTATION] = "true"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": n.name,
            "labels": dict(sorted(n.labels.items())),
            "annotations": annotations,
            "creationTimestamp": fmt_time(n.created),
            "finalizers": ["karpenter.sh/termination"],
        },
        "spec": {"taints": [t.to_obj() for t in n.taints]} if n.taints else {},
        "status": {
            "capacity": res.format_resource_list(n.capacity),
            "allocatable": res.format_resource_list(n.allocatable),
            "conditions": [{"type": "Ready", "status": "True" if n.ready else "False"}],
        },
    }


def _pod_manifest(sim: Simulation, p) -> dict:
    obj = json.loads(json.dumps(p.obj, default=str))
    status: dict[str, Any] = {"phase": p.phase}
    if p.node:
        status["conditions"] = [{"type": "PodScheduled", "status": "True"}]
        if p.started is not None:
            status["startTime"] = fmt_time(p.started)
    else:
        status["conditions"] = [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": p.message or "waiting for capacity",
        }]
        if p.nominated:
            status["nominatedNodeName"] = p.nominated
    obj["status"] = status
    return obj


def _nodepool_manifest(sim: Simulation, obj: dict) -> dict:
    from ..disruption.drift import HASH_VERSION, NODEPOOL_HASH, NODEPOOL_HASH_VERSION, nodepool_hash

    out = json.loads(json.dumps(obj, default=str))
    name = obj["metadata"]["name"]
    ann = out.setdefault("metadata", {}).setdefault("annotations", {})
    ann[NODEPOOL_HASH] = nodepool_hash(obj)
    ann[NODEPOOL_HASH_VERSION] = HASH_VERSION
    total: dict[str, int] = {}
    nodes = 0
    for c in sim.claims.values():
        if c.nodepool == name and c.deleted is None and c.instance_type is not None:
            total = res.add(total, c.instance_type.capacity)
            nodes += 1
    resources = res.format_resource_list(total)
    resources["nodes"] = str(nodes)
    nc, _ = sim._nodeclass(obj)
    ready = nc is not None
    out["status"] = {
        "resources": resources,
        "conditions": [
            {"type": "NodeClassReady", "status": "True" if ready else "False",
             **({} if ready else {"reason": "NodeClassNotFound", "message": "NodeClass not found on cluster"})},
            {"type": "Ready", "status": "True" if ready else "False"},
        ],
    }
    return out


def summary(sim: Simulation) -> dict:
    live = [c for c in sim.claims.values() if c.deleted is None and c.offering is not None]
    cost = sum(c.offering.price for c in live)
    pods = list(sim.pods.values())
    bound = [p for p in pods if p.node]
    pending = [p for p in pods if not p.node and p.phase == "Pending"]
    return {
        "apiVersion": "karpy.dev/v1alpha1",
        "kind": "SimulationSummary",
        "metadata": {"name": "simulation"},
        "status": {
            "start": fmt_time(sim.start),
            "end": fmt_time(sim.now),
            "costPerHour": _price(cost),
            "pods": {"total": len(pods), "bound": len(bound), "pending": len(pending)},
            "nodeClaims": [
                {
                    "name": c.name,
                    "nodePool": c.nodepool,
                    "instanceType": c.instance_type.name if c.instance_type else None,
                    "capacityType": c.offering.capacity_type if c.offering else None,
                    "zone": c.offering.zone if c.offering else None,
                    "arch": c.instance_type.labels.get("kubernetes.io/arch") if c.instance_type else None,
                    "pricePerHour": _price(c.offering.price) if c.offering else None,
                    **({"priceEstimated": True} if c.offering is not None and c.offering.price_estimated else {}),
                    "createdAt": fmt_time(c.created),
                    "deletedAt": fmt_time(c.deleted),
                    "disruptionReason": c.disruption_reason,
                    "launchFailed": c.launch_failed,
                }
                for c in sim.claims.values()
            ],
            "pendingPods": [
                {"namespace": p.info.namespace, "name": p.info.name, "message": p.message or "waiting for capacity"}
                for p in sorted(pending, key=lambda p: p.key)
            ],
        },
    }


def _event_manifests(sim: Simulation) -> list[dict]:
    out = []
    for i, e in enumerate(sim.events):
        inv = e["involvedObject"]
        meta = {"name": f"{inv['name']}.{i:06x}"}
        if inv.get("namespace"):
            meta["namespace"] = inv["namespace"]
        out.append({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": meta,
            "involvedObject": inv,
            "reason": e["reason"],
            "message": e["message"],
            "type": e["type"],
            "source": {"component": "karpenter" if inv["kind"] in ("NodeClaim", "Karpenter", "NodePool") or e["reason"] in (
                "Nominated", "FailedScheduling") else "default-scheduler"},
            "firstTimestamp": fmt_time(e["time"]),
            "lastTimestamp": fmt_time(e["time"]),
            "count": 1,
        })
    return out


def result_list(sim: Simulation) -> dict:
    items: list[dict] = []
    for (kind, _, _), obj in sorted(sim.objects.items()):
        if kind == "NodePool":
            items.append(_nodepool_manifest(sim, obj))
    for c in sim.claims.values():
        if c.deleted is None:
            items.append(_claim_manifest(sim, c))
    for n in sorted(sim.nodes.values(), key=lambda n: (n.created, n.name)):
        items.append(_node_manifest(sim, n))
    for p in sorted(sim.pods.values(), key=lambda p: p.key):
        items.append(_pod_manifest(sim, p))
    items.extend(_event_manifests(sim))
    items.append(summary(sim))
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}


def render_json(sim: Simulation) -> str:
    return json.dumps(result_list(sim), indent=2) + "\n"


class _NoAliasDumper(yaml.SafeDumper):
    """Writes repeated values out in full, as kubectl does, instead of YAML anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render_yaml(sim: Simulation) -> str:
    return yaml.dump(result_list(sim), Dumper=_NoAliasDumper, sort_keys=False, default_flow_style=False)


def render_table(sim: Simulation, width: int = 160) -> str:
    from rich.console import Console
    from rich.table import Table

    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=False, color_system=None, highlight=False)
    s = summary(sim)["status"]
    pods_on: dict[str, int] = {}
    for p in sim.pods.values():
        if p.node and not p.daemon and p.phase in ("Pending", "Running"):
            pods_on[p.node] = pods_on.get(p.node, 0) + 1
    t = Table(title=f"NodeClaims ({s['start']} → {s['end']})", title_justify="left")
    for col in ("NAME", "NODEPOOL", "INSTANCE TYPE", "CAPACITY", "ZONE", "ARCH", "CPU", "MEMORY", "$/HOUR", "PODS", "STATE"):
        t.add_column(col, justify="right" if col in ("CPU", "$/HOUR", "PODS") else "left")
    estimated = False
    for c in sim.claims.values():
        it = c.instance_type
        price = "-"
        if c.offering is not None:
            price = _price(c.offering.price) + ("*" if c.offering.price_estimated else "")
            estimated |= c.offering.price_estimated
        state = "launch failed" if c.launch_failed else (
            f"deleted: {c.disruption_reason or 'Deleted'}" if c.deleted is not None else (
                "deleting" if c.deleting_since is not None else ("ready" if c.initialized else "launching")))
        t.add_row(
            c.name, c.nodepool, it.name if it else "-", c.offering.capacity_type if c.offering else "-",
            c.offering.zone if c.offering else "-", it.labels.get("kubernetes.io/arch", "-") if it else "-",
            res.format_units(res.CPU, it.capacity.get(res.CPU, 0)) if it else "-",
            _gib(it.capacity.get(res.MEMORY, 0)) if it else "-",
            price, str(pods_on.get(c.node, 0)) if c.node else "0", state,
        )
    console.print(t)
    console.print(f"Cost: ${s['costPerHour']}/hour for {sum(1 for c in sim.claims.values() if c.deleted is None and c.offering)} node(s)"
                  + ("   (* spot price estimated by the catalog)" if estimated else ""))
    console.print(f"Pods: {s['pods']['total']} total, {s['pods']['bound']} bound, {s['pods']['pending']} pending")
    if s["pendingPods"]:
        # pods pending for the same reason are shown together
        by_reason: dict[str, list[str]] = {}
        for p in s["pendingPods"]:
            by_reason.setdefault(p["message"], []).append(f"{p['namespace']}/{p['name']}")
        pt = Table(title="Pending pods", title_justify="left")
        pt.add_column("PODS", overflow="fold")
        pt.add_column("WHY", overflow="fold")
        for why, names in by_reason.items():
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            pt.add_row(f"{len(names)}: {shown}" if len(names) > 1 else shown, why)
        console.print(pt)
    disruptions = [c for c in sim.claims.values() if c.deleted is not None and not c.launch_failed]
    if disruptions:
        dt = Table(title="Disruptions", title_justify="left")
        for col in ("STARTED", "DELETED", "NODECLAIM", "REASON", "REPLACED BY", "$/HOUR BEFORE", "$/HOUR AFTER"):
            dt.add_column(col, justify="right" if col.startswith("$") else "left")
        for c in sorted(disruptions, key=lambda c: (c.deleted, c.name)):
            dt.add_row(
                fmt_time(c.disruption_started if c.disruption_started is not None else c.deleted), fmt_time(c.deleted), c.name,
                c.disruption_reason or "Deleted", ", ".join(c.replaced_by) or "-",
                _price(c.cost_before) if c.cost_before is not None else "-",
                _price(c.cost_after) if c.cost_after is not None else "-",
            )
        console.print(dt)
    return buf.getvalue()
