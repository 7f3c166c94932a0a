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
from .samples import average_cost, samples
from .sim import Simulation

PREFIX = "Failed to schedule pod, "
OUTPUT_KINDS = ("NodePool", "NodeOverlay", "CapacityBuffer", "NodeClaim", "Node", "Pod", "PodDisruptionBudget")


def _price(x: float) -> str:
    return f"{x:.4f}"


HOURS_PER_MONTH = 730  # as the node viewers and cloud price pages count a month
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
            "costPerHourAverage": _price(average_cost(h.costs, sim.start, sim.now)),  # over start..end
            "pods": {"total": len(pods), "bound": len(bound), "pending": len(pending)},
            "nodeClaims": [_claim_entry(life) for life in h.claims.values()],
            "pendingPods": [
                {"namespace": p["metadata"].get("namespace", "default"), "name": p["metadata"]["name"],
                 "message": why.get(P.pod_key(p)) or "waiting for capacity"}
                for p in sorted(pending, key=P.pod_key)
            ],
            "disruptions": [_disruption_entry(d) for d in h.disruptions],
            **_samples(sim),
            **({"stoppedEarly": sim.stopped} if getattr(sim, "stopped", None) else {}),
            **(_comparison(sim) if getattr(sim, "baseline", None) is not None else {}),
            **(_from_cluster(sim) if getattr(sim, "seeded", None) else {}),
        },
    }


def _samples(sim: Simulation) -> dict:
    """The run at a fixed interval (karpy/simulator/samples.py): what --plot and the viewer's replay read."""
    step, points = samples(sim.history, sim.start, sim.now)
    return {"sampleInterval": res.format_duration(step), "samples": points}


def _from_cluster(sim: Simulation) -> dict:
    """--from-cluster: the change against the cluster's present."""
    from .from_cluster import delta

    d = delta(sim)
    if d is None:
        return {}
    return {"fromCluster": {**d, "costPerHourBefore": _price(d["costPerHourBefore"]),
                            "costPerHourAfter": _price(d["costPerHourAfter"])}}


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
    return render_json_bytes(sim).decode()


def render_json_bytes(sim: Simulation) -> bytes:
    """The JSON result as UTF-8, to be written as it is: a large result is not held a second time as text (and a
    third as the text encoded again), which at 100,000 pods is gigabytes."""
    return orjson.dumps(result_list(sim), option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)


def write_json(sim: Simulation, out: Any, chunk: int = 1000) -> None:
    """Write the JSON result to the binary stream ``out``, byte for byte what :func:`render_json_bytes` makes,
    a thousand items at a time: the whole text (about 7 KiB a pod) is never held at once."""
    doc = result_list(sim)
    items = doc["items"]
    head = orjson.dumps({k: v for k, v in doc.items() if k != "items"}, option=orjson.OPT_INDENT_2)
    if list(doc)[-1] != "items" or not items or not head.endswith(b"\n}"):  # not the shape written below
        out.write(render_json_bytes(sim))
        return
    # the items sit two levels deep: each written on its own, every line indented by four more spaces
    out.write(head[:-2] + b',\n  "items": [\n')
    for i in range(0, len(items), chunk):
        part = [b"    " + orjson.dumps(item, option=orjson.OPT_INDENT_2).replace(b"\n", b"\n    ")
                for item in items[i:i + chunk]]
        out.write(b",\n".join(part) + (b",\n" if i + chunk < len(items) else b"\n"))
    out.write(b"  ]\n}\n")


class _NoAliasDumper(yaml.SafeDumper):
    """Writes repeated values out in full, as kubectl does, instead of YAML anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render_yaml(sim: Simulation) -> str:
    return yaml.dump(result_list(sim), Dumper=_NoAliasDumper, sort_keys=False, default_flow_style=False)


BLOCKING_REASONS = ("Unconsolidatable", "DisruptionBlocked")
# kubectl's look: no vertical rules, two spaces between columns, a rule under the header
TABLE_STYLE = dict(title_justify="left", show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True)


def not_disrupted(sim: Simulation, events: list[dict]) -> list[tuple[str, str, str, float]]:
    """Why the nodes and NodePools that exist at the end were not disrupted: per object, the latest
    Unconsolidatable or DisruptionBlocked message Karpenter published about it, and since when it has
    said so without a break. Rows are (kind, name, message, since)."""
    latest: dict[tuple[str, str], tuple[str, float]] = {}
    for e in events:
        if e.get("reason") not in BLOCKING_REASONS or (e.get("source") or {}).get("component") != "karpenter":
            continue
        inv = e.get("involvedObject") or {}
        key = (inv.get("kind") or "", inv.get("name") or "")
        if key[0] not in ("Node", "NodePool"):
            continue
        msg = str(e.get("message") or "")
        t = parse_time(e.get("lastTimestamp")) or 0.0
        prev = latest.get(key)
        latest[key] = (msg, prev[1] if prev is not None and prev[0] == msg else t)
    out = []
    for (kind, name), (msg, since) in sorted(latest.items()):
        obj = sim.api.try_get(kind, name)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            continue
        out.append((kind, name, msg, since))
    return out


def table_width() -> int:
    """The terminal's width when standard output is one, else 120 (a pipe, a file, CI logs)."""
    import shutil
    import sys

    if sys.stdout.isatty():
        return max(80, shutil.get_terminal_size((120, 24)).columns)
    return 120


def render_table(sim: Simulation, width: int | None = None) -> str:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    buf = io.StringIO()
    # text from manifests and messages (e.g. "In [amd64]") is never read as Rich markup or emoji codes
    console = Console(file=buf, width=width or table_width(), force_terminal=False, color_system=None,
                      highlight=False, markup=False, emoji=False)
    style = {**TABLE_STYLE, "box": box.SIMPLE_HEAD}
    events = _events(sim)
    s = summary(sim, pending_reasons(sim, events))["status"]
    h = sim.history
    pods, _ = sim.api.list("Pod")
    pods_on: dict[str, int] = {}
    workload = daemon = workload_bound = daemon_bound = 0
    for p in pods:
        is_daemon = P.is_daemon(p)
        bound = bool(P.node_name(p))
        if is_daemon:
            daemon += 1
            daemon_bound += bound
        else:
            workload += 1
            workload_bound += bound
        if bound and not is_daemon and P.phase(p) in ("Pending", "Running"):
            pods_on[P.node_name(p)] = pods_on.get(P.node_name(p), 0) + 1
    caps = {}
    for c in sim.api.list("NodeClaim")[0]:
        caps[c["metadata"]["name"]] = res.parse_resource_list((c.get("status") or {}).get("capacity"))
    claims = list(h.claims.values())
    grouped = len(claims) > TABLE_ROWS
    if grouped:
        # thousands of rows help nobody: one row per kind of NodeClaim (every one is in -o yaml/json)
        t = Table(title=f"NodeClaims ({s['start']} → {s['end']}): {len(claims)}, grouped", **style)
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
        t = Table(title=f"NodeClaims ({s['start']} → {s['end']})", **style)
        for col in ("NAME", "NODEPOOL", "INSTANCE TYPE", "CAPACITY", "ZONE", "ARCH", "CPU", "MEMORY", "$/HOUR", "PODS", "STATE"):
            # names are never cut to a common prefix: two NodeClaims must read differently
            t.add_column(col, justify="right" if col in ("CPU", "$/HOUR", "PODS") else "left",
                         no_wrap=col in ("NAME", "INSTANCE TYPE", "$/HOUR"),
                         overflow="fold")
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
    console.print(f"Cost: ${s['costPerHour']}/hour for {live} node(s), ${float(s['costPerHour']) * HOURS_PER_MONTH:,.2f}/month"
                  + ("   (* estimated price: see docs/data-sources.md, or give yours with --prices)" if estimated else ""))
    if "featureGates" in s:
        fg = s["featureGates"]
        console.print(f"Cost with upstream's decisions (karpy gates {', '.join(fg['karpy'])} off): "
                      f"${fg['costPerHourUpstream']}/hour; karpy's gates save ${fg['savingPerHour']}/hour")
    if "fromCluster" in s:
        fc = s["fromCluster"]
        console.print(f"Against the cluster now: {len(fc['nodeClaimsAdded'])} NodeClaim(s) added, "
                      f"{len(fc['nodeClaimsRemoved'])} removed; ${fc['costPerHourBefore']}/hour → "
                      f"${fc['costPerHourAfter']}/hour")
    console.print(f"Pods: {s['pods']['total']} total, {s['pods']['bound']} bound, {s['pods']['pending']} pending"
                  + (f" ({workload} workload: {workload_bound} bound; {daemon} DaemonSet: {daemon_bound} bound; "
                     "the PODS column counts workload pods)" if daemon else ""))
    if s["pendingPods"]:
        by_reason: dict[str, list[str]] = {}
        for p in s["pendingPods"]:
            by_reason.setdefault(p["message"], []).append(f"{p['namespace']}/{p['name']}")
        console.print()
        pt = Table(title="Pending pods", **style)
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
        console.print()
        dt = Table(title=title, **style)
        dt.add_column("STARTED", no_wrap=True)
        dt.add_column("DISRUPTION")
        for d in shown:
            # one wrapping cell: whole NodeClaim names, whatever the width
            budget = f", budget {d.budget['disrupting']} disrupting of {d.budget['allowed']} allowed" if d.budget else ""
            took = f" in {res.format_duration(d.finished - d.started)}" if d.finished is not None else ""
            cost = f"${_price(d.cost_before)}" + (f" → ${_price(d.cost_after)}" if d.cost_after is not None else "")
            lines = [f"{d.reason} ({d.method}) in nodepool {d.nodepool}{budget}: {d.outcome}{took}, {cost}/hour"]
            if d.message:
                lines.append(d.message)
            lines.append("removes " + " ".join(d.candidates))
            if d.replacements:
                lines.append("launches " + " ".join(d.replacements))
            dt.add_row(fmt_time(d.started), "\n".join(lines))
        console.print(dt)
    blocked = not_disrupted(sim, events)
    if blocked:
        console.print()
        bt = Table(title="Not disrupted, and why (Karpenter's latest Unconsolidatable or DisruptionBlocked event)",
                   **style)
        bt.add_column("NODECLAIMS / NODEPOOLS", overflow="fold")
        bt.add_column("SINCE", no_wrap=True)
        bt.add_column("WHY", overflow="fold")
        claim_of = {life.node: life.name for life in h.claims.values() if life.node}
        by_why: dict[tuple[str, str], tuple[list[str], float]] = {}
        for kind, name, msg, since in blocked:
            label = f"nodepool/{name}" if kind == "NodePool" else (claim_of.get(name) or name)
            names, first = by_why.get((kind, msg), ([], since))
            names.append(label)
            by_why[(kind, msg)] = (names, min(first, since))
        for (kind, msg), (names, since) in sorted(by_why.items(), key=lambda kv: (kv[0][0] != "NodePool", kv[1][1])):
            shown = " ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            bt.add_row(f"{len(names)}: {shown}" if len(names) > 1 else shown, fmt_time(since), msg)
        console.print(bt)
    return buf.getvalue()
