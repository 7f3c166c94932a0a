"""What `karpy simulate` prints: the final state as a v1 List, or a table for people.

Everything here is read back from the API server's objects and the
simulation's history; nothing is computed afresh.
"""

from __future__ import annotations

import io

from typing import Any

import orjson
import yaml

from .. import resources as res
from ..kube.times import fmt_time, parse_time
from ..state import pods as P
from .history import ClaimLife
from .sim import Simulation

PREFIX = "Failed to schedule pod, "
OUTPUT_KINDS = ("NodePool", "NodeClaim", "Node", "Pod", "PodDisruptionBudget")


def _price(x: float) -> str:
    return f"{x:.4f}"


TABLE_ROWS = 100  # beyond this many NodeClaims (or disruptions) the table groups (or trims) them


def _state(life: ClaimLife) -> str:
    if not life.launched and life.deleted is not None:
        return "launch failed"
    if life.deleted is not None:
        return f"deleted: {life.reason or 'Deleted'}"
    if life.deleting is not None:
        return "deleting"
    return "ready" if life.initialized else "launching"


def _gib(b: int) -> str:
    g = b / 2**30
    return f"{g:.0f}Gi" if abs(g - round(g)) < 0.05 else f"{g:.1f}Gi"


def _events(sim: Simulation) -> list[dict]:
    items, _ = sim.api.list("Event")
    return sorted(items, key=lambda e: int(e["metadata"].get("resourceVersion") or 0))


def pending_reasons(sim: Simulation, events: list[dict] | None = None) -> dict[str, str]:
    """Why Karpenter could not place each pod: its latest FailedScheduling message."""
    out: dict[str, str] = {}
    for e in events if events is not None else _events(sim):
        if e.get("reason") != "FailedScheduling" or (e.get("source") or {}).get("component") != "karpenter":
            continue
        inv = e.get("involvedObject") or {}
        msg = str(e.get("message") or "")
        out[f"{inv.get('namespace') or 'default'}/{inv.get('name')}"] = msg[len(PREFIX):] if msg.startswith(PREFIX) else msg
    return out


def nominations(sim: Simulation, events: list[dict]) -> dict[str, str]:
    """Where Karpenter last nominated each pod (its ``Nominated`` Event), while that node or NodeClaim exists."""
    out: dict[str, str] = {}
    for e in events:
        if e.get("reason") != "Nominated":
            continue
        inv = e.get("involvedObject") or {}
        kind, _, name = str(e.get("message") or "").rsplit(": ", 1)[-1].partition("/")
        if sim.api.try_get("NodeClaim" if kind == "nodeclaim" else "Node", name) is not None:
            out[f"{inv.get('namespace') or 'default'}/{inv.get('name')}"] = name
    return out


def _pod_manifest(p: dict, why: dict[str, str], nominated: dict[str, str]) -> dict:
    if P.node_name(p) or P.phase(p) != "Pending":
        return p
    out = dict(p)
    status = dict(p.get("status") or {})
    conds = [c for c in status.get("conditions") or () if c.get("type") != "PodScheduled"]
    conds.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                  "message": why.get(P.pod_key(p)) or "waiting for capacity"})
    status["conditions"] = conds
    if P.pod_key(p) in nominated:
        status["nominatedNodeName"] = nominated[P.pod_key(p)]
    out["status"] = status
    return out


def _claim_entry(life: ClaimLife) -> dict:
    return {
        "name": life.name,
        "nodePool": life.nodepool,
        "instanceType": life.instance_type,
        "capacityType": life.capacity_type,
        "zone": life.zone,
        "arch": life.arch,
        "pricePerHour": _price(life.price) if life.price is not None else None,
        **({"priceEstimated": True} if life.price_estimated else {}),
        **({"priceSource": life.price_source} if life.price_source else {}),  # catalog | estimated | user
        "createdAt": fmt_time(life.created),
        "deletedAt": fmt_time(life.deleted),
        "disruptionReason": life.reason,
        "launchFailed": not life.launched and life.deleted is not None,
    }


def _disruption_entry(d) -> dict:
    out: dict[str, Any] = {
        "startedAt": fmt_time(d.started),
        "reason": d.reason,
        "method": d.method,
        "nodePool": d.nodepool,
        "candidates": list(d.candidates),
        "replacements": list(d.replacements),
    }
    if d.budget is not None:
        out["budget"] = dict(d.budget)
    out["outcome"] = d.outcome
    if d.message:
        out["message"] = d.message
    out["finishedAt"] = fmt_time(d.finished)
    out["costPerHourBefore"] = _price(d.cost_before)
    out["costPerHourAfter"] = _price(d.cost_after) if d.cost_after is not None else None
    return out


def summary(sim: Simulation, why: dict[str, str] | None = None) -> dict:
    pods, _ = sim.api.list("Pod")
    bound = [p for p in pods if P.node_name(p)]
    pending = [p for p in pods if not P.node_name(p) and P.phase(p) == "Pending"]
    why = why if why is not None else pending_reasons(sim)
    h = sim.history
    return {
        "apiVersion": "karpy.dev/v1alpha1",
        "kind": "SimulationSummary",
        "metadata": {"name": "simulation"},
        "status": {
            "start": fmt_time(sim.start),
            "end": fmt_time(sim.now),
            "costPerHour": _price(h.cost),
            "pods": {"total": len(pods), "bound": len(bound), "pending": len(pending)},
            "nodeClaims": [_claim_entry(life) for life in h.claims.values()],
            "pendingPods": [
                {"namespace": p["metadata"].get("namespace", "default"), "name": p["metadata"]["name"],
                 "message": why.get(P.pod_key(p)) or "waiting for capacity"}
                for p in sorted(pending, key=P.pod_key)
            ],
            "disruptions": [_disruption_entry(d) for d in h.disruptions],
            **({"stoppedEarly": sim.stopped} if getattr(sim, "stopped", None) else {}),
            **(_comparison(sim) if getattr(sim, "baseline", None) is not None else {}),
        },
    }


def _comparison(sim: Simulation) -> dict:
    """karpy's gates against upstream's decisions: the same input simulated with the gates off."""
    base = sim.baseline
    return {"featureGates": {"karpy": sim.karpy_gates, "costPerHourUpstream": _price(base.history.cost),
                             "savingPerHour": _price(base.history.cost - sim.history.cost)}}


def result_list(sim: Simulation) -> dict:
    events = _events(sim)
    why = pending_reasons(sim, events)
    nominated = nominations(sim, events)
    items: list[dict] = []
    for kind in OUTPUT_KINDS:
        objs, _ = sim.api.list(kind)
        if kind == "Pod":
            objs = [_pod_manifest(p, why, nominated) for p in sorted(objs, key=P.pod_key)]
        elif kind == "NodeClaim":
            order = {name: i for i, name in enumerate(sim.history.claims)}
            objs = sorted(objs, key=lambda o: (order.get(o["metadata"]["name"], len(order)), o["metadata"]["name"]))
        elif kind == "Node":
            objs = sorted(objs, key=lambda o: (o["metadata"].get("creationTimestamp") or "", o["metadata"]["name"]))
        else:
            objs = sorted(objs, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        items.extend(objs)
    items.extend(events)
    items.append(summary(sim, why))
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}


def render_json(sim: Simulation) -> str:
    return orjson.dumps(result_list(sim), option=orjson.OPT_INDENT_2).decode() + "\n"


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
    h = sim.history
    pods, _ = sim.api.list("Pod")
    pods_on: dict[str, int] = {}
    for p in pods:
        if P.node_name(p) and not P.is_daemon(p) and P.phase(p) in ("Pending", "Running"):
            pods_on[P.node_name(p)] = pods_on.get(P.node_name(p), 0) + 1
    caps = {}
    for c in sim.api.list("NodeClaim")[0]:
        caps[c["metadata"]["name"]] = res.parse_resource_list((c.get("status") or {}).get("capacity"))
    claims = list(h.claims.values())
    grouped = len(claims) > TABLE_ROWS
    if grouped:
        # thousands of rows help nobody: one row per kind of NodeClaim (every one is in -o yaml/json)
        t = Table(title=f"NodeClaims ({s['start']} → {s['end']}): {len(claims)}, grouped", title_justify="left")
        for col in ("NODEPOOL", "INSTANCE TYPE", "CAPACITY", "ZONE", "ARCH", "STATE", "COUNT", "$/HOUR EACH", "PODS"):
            t.add_column(col, justify="right" if col in ("COUNT", "$/HOUR EACH", "PODS") else "left")
        groups: dict[tuple, list] = {}
        for life in claims:
            groups.setdefault((life.nodepool, life.instance_type or "-", life.capacity_type or "-", life.zone or "-",
                               life.arch or "-", _state(life).split(":")[0]), []).append(life)
        for key in sorted(groups, key=lambda k: (k[5] != "ready", k)):
            lives = groups[key]
            price = lives[0].price
            pods = sum(pods_on.get(x.node or "", 0) for x in lives if x.node)
            t.add_row(*key[:5], key[5], str(len(lives)),
                      (_price(price) + ("*" if lives[0].price_estimated else "")) if price is not None and lives[0].launched else "-",
                      str(pods))
        estimated = any(x.price_estimated and x.launched for x in claims)
    else:
        t = Table(title=f"NodeClaims ({s['start']} → {s['end']})", title_justify="left")
        for col in ("NAME", "NODEPOOL", "INSTANCE TYPE", "CAPACITY", "ZONE", "ARCH", "CPU", "MEMORY", "$/HOUR", "PODS", "STATE"):
            t.add_column(col, justify="right" if col in ("CPU", "$/HOUR", "PODS") else "left")
        estimated = False
        for life in claims:
            price = "-"
            if life.price is not None and life.launched:
                price = _price(life.price) + ("*" if life.price_estimated else "")
                estimated |= life.price_estimated
            cap = caps.get(life.name) or {}
            t.add_row(
                life.name, life.nodepool, life.instance_type or "-", life.capacity_type or "-", life.zone or "-",
                life.arch or "-", res.format_units(res.CPU, cap[res.CPU]) if res.CPU in cap else "-",
                _gib(cap[res.MEMORY]) if res.MEMORY in cap else "-", price,
                str(pods_on.get(life.node or "", 0)) if life.node else "0", _state(life),
            )
    console.print(t)
    live = sum(1 for life in h.claims.values() if life.deleted is None and life.launched)
    console.print(f"Cost: ${s['costPerHour']}/hour for {live} node(s)"
                  + ("   (* estimated price: see docs/data-sources.md, or give yours with --prices)" if estimated else ""))
    if "featureGates" in s:
        fg = s["featureGates"]
        console.print(f"Cost with upstream's decisions (karpy gates {', '.join(fg['karpy'])} off): "
                      f"${fg['costPerHourUpstream']}/hour; karpy's gates save ${fg['savingPerHour']}/hour")
    console.print(f"Pods: {s['pods']['total']} total, {s['pods']['bound']} bound, {s['pods']['pending']} pending")
    if s["pendingPods"]:
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
    if h.disruptions:
        shown = h.disruptions if len(h.disruptions) <= TABLE_ROWS else h.disruptions[-TABLE_ROWS:]
        title = "Disruptions" if shown is h.disruptions else \
            f"Disruptions (the last {len(shown)} of {len(h.disruptions)}; -o yaml lists every one)"
        dt = Table(title=title, title_justify="left")
        for col in ("STARTED", "FINISHED", "REASON", "METHOD", "NODEPOOL", "NODECLAIMS", "REPLACED BY", "BUDGET",
                    "OUTCOME", "$/HOUR BEFORE", "$/HOUR AFTER"):
            dt.add_column(col, justify="right" if col.startswith("$") else "left", overflow="fold")
        for d in shown:
            budget = f"{d.budget['disrupting']}/{d.budget['allowed']}" if d.budget else "-"
            dt.add_row(fmt_time(d.started), fmt_time(d.finished) or "-", d.reason, d.method, d.nodepool,
                       ", ".join(d.candidates), ", ".join(d.replacements) or "-", budget, d.outcome,
                       _price(d.cost_before), _price(d.cost_after) if d.cost_after is not None else "-")
        console.print(dt)
    return buf.getvalue()
