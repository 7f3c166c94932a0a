"""The viewer's screen as Rich renderables, and its ``--once`` outputs (table, JSON, CSV).

The screen (top to bottom): a title line; the cluster summary, one line per ``--resources`` entry, the first with
the node count and $/hour and $/month; the pods line; the cost line (split by capacity type and by architecture,
where the prices come from, unpriced nodes, a sparkline of $/hour over time); then the nodes, grouped under their
NodePool (its limits and the disruption budget left per reason) unless grouping is off; then the pending pods with
Karpenter's reason, and the disruptions in progress; last the keys. Every bar carries its number and every state
is a word, so colour is never the only signal.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from .. import resources as res
from ..kube.times import fmt_time
from .model import HOURS_PER_MONTH, Frame, NodeRow, computed_label, human_duration, sort_nodes, to_json
from .options import Options

SPARKS = "▁▂▃▄▅▆▇█"
GREY = "#626262"


@dataclass
class View:
    """What the screen shows besides the frame: paging, grouping, panels, and the replay's state."""

    title: str = ""
    page: int = 0
    per_page: int | None = None  # None: every node (--once)
    grouped: bool = True
    show_pending: bool = True
    show_disruptions: bool = True
    footer: bool = False
    replay: str | None = None  # the replay status line
    keys: str = "←/→ page • g group • p pending • d disruptions • q quit"
    notes: list[str] = field(default_factory=list)


def level_style(pct: float, style: tuple[str, str, str]) -> str:
    """Tight packing is good: over 90 % the good colour, over 60 % the ok colour, else the bad one."""
    good, ok, bad = style
    return good if pct > 90 else ok if pct > 60 else bad


def bar(frac: float | None, width: int, style: tuple[str, str, str], with_pct: bool = True) -> Text:
    if frac is None:
        return Text("[" + " " * width + "]" + ("   n/a" if with_pct else ""), style=GREY)
    pct = frac * 100
    filled = max(0, min(width, round(frac * width)))
    t = Text("[")
    t.append("█" * filled, style=level_style(pct, style))
    t.append("░" * (width - filled), style=GREY)
    t.append("]")
    if with_pct:
        t.append(f" {pct:5.1f}%")
    return t


def human_quantity(resource: str, units: int) -> str:
    """Readable amounts: CPU in cores, bytes in Mi/Gi/Ti, counts as numbers."""
    if resource == res.CPU:
        return f"{units / 1000:.2f}".rstrip("0").rstrip(".") if units % 1000 else str(units // 1000)
    if resource in (res.MEMORY, res.EPHEMERAL) or resource.startswith("hugepages-"):
        for suffix, f in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if units >= f:
                v = units / f
                return f"{v:.1f}{suffix}" if v < 100 else f"{v:.0f}{suffix}"
        return str(units)
    return str(units)


def sparkline(values: list[float], width: int = 24) -> str:
    if not values:
        return ""
    values = values[-width:]
    lo, hi = min(values), max(values)
    if hi - lo < 1e-12:
        return SPARKS[3] * len(values)
    return "".join(SPARKS[min(len(SPARKS) - 1, int((v - lo) / (hi - lo) * (len(SPARKS) - 1) + 0.5))] for v in values)


def cost_samples(history: list[tuple[float, float]], end: float, width: int = 24) -> list[float]:
    """$/hour sampled at ``width`` even steps from the first change to ``end`` (a step function)."""
    if not history:
        return []
    start = history[0][0]
    if end <= start:
        return [history[-1][1]]
    out = []
    i = 0
    for k in range(width):
        t = start + (end - start) * (k + 1) / width
        while i + 1 < len(history) and history[i + 1][0] <= t:
            i += 1
        out.append(history[i][1])
    return out


def money(x: float) -> str:
    return f"${x:,.4f}" if x < 100 else f"${x:,.2f}"


# --- the screen ----------------------------------------------------------------------------------------------------

def summary_lines(frame: Frame, opts: Options) -> list[Text]:
    out = []
    for i, r in enumerate(frame.resources):
        used, alloc = frame.total(r)
        frac = used / alloc if alloc else None
        t = Text()
        t.append(f"{len(frame.nodes)} nodes" if i == 0 else "", style="bold")
        t.pad_right(10 - len(t.plain))
        t.append(f"{r:<18} ")
        t.append(f"{human_quantity(r, used)}/{human_quantity(r, alloc)}".ljust(16))
        t.append_text(bar(frac, 30, opts.style))
        if i == 0 and frame.pricing:
            pph = frame.price_per_hour
            t.append(f"   {money(pph)}/hour | {money(pph * HOURS_PER_MONTH)}/month", style="bold")
            if frame.unpriced:
                t.append(f" (≥: {frame.unpriced} node{'s' if frame.unpriced != 1 else ''} unpriced)", style="yellow")
        out.append(t)
    return out


def pods_line(frame: Frame) -> Text:
    p = frame.pods
    t = Text(f"{p['total']} pods ({p['pending']} pending {p['running']} running {p['bound']} bound)")
    if p.get("daemonSet"):
        t.append(f"  + {p['daemonSet']} DaemonSet pods", style=GREY)
    if frame.unknown_requests:
        t.append(f"  ({frame.unknown_requests} pods' requests unknown in the result)", style="yellow")
    return t


def cost_line(frame: Frame) -> Text | None:
    if not frame.pricing or not frame.nodes:
        return None
    t = Text()
    for attr, label in (("capacity_type", "by capacity"), ("arch", "by arch")):
        parts = [f"{k} {n}×{money(c)}" for k, (n, c) in frame.split(attr).items()]
        t.append(f"{label}: ", style=GREY)
        t.append(" · ".join(parts) + "   ")
    src = frame.price_sources()
    t.append("prices: ", style=GREY)
    t.append(", ".join(f"{k} {v}" for k, v in sorted(src.items())))
    samples = cost_samples(frame.cost_history, frame.time)
    if len(samples) > 1:
        t.append("   $/h ", style=GREY)
        t.append(sparkline(samples), style="cyan")
    return t


def _status(n: NodeRow, now: float) -> Text:
    if n.lifecycle in ("Launching", "Registered") and not n.ready and n.status == "NotReady":
        return Text(f"{n.lifecycle}/{human_duration(now - n.created)}", style="yellow")
    if n.lifecycle == "LaunchFailed":
        return Text("LaunchFailed", style="red")
    if n.status == "Disrupting":
        return Text("Disrupting" + (f"({n.disruption_reason})" if n.disruption_reason else ""), style="magenta")
    if n.status == "Deleting":
        return Text("Deleting" + (f"({n.disruption_reason})" if n.disruption_reason else ""), style="magenta")
    if n.status == "Cordoned":
        return Text("Cordoned", style="yellow")
    if not n.ready:
        return Text(f"NotReady/{human_duration(now - (n.ready_since or n.created))}", style="red")
    return Text("Ready" + (" Drifted" if n.drifted else ""), style="green" if not n.drifted else "yellow")


def node_cells(n: NodeRow, frame: Frame, opts: Options) -> list[list[Text]]:
    """One node's lines: its first resource with every column, then one line per further resource."""
    out: list[list[Text]] = []
    for i, r in enumerate(frame.resources):
        cells = [Text(n.name if i == 0 else ""), Text(r), bar(n.usage(r), 20, opts.style)]
        if i == 0:
            pods = f"({n.pods}/{n.max_pods} pods)" if n.max_pods else f"({n.pods} pods)"
            price = ""
            if frame.pricing:
                price = f"/{money(n.price.per_hour)}" + ("~" if n.price.estimated else "") \
                    if n.price.per_hour is not None else "/$?"
            extra = [Text(n.labels.get(k) or computed_label(n, k, frame.time) or "-") for k in opts.extra_labels]
            cells += [Text(pods + (f" +{n.daemon_pods}ds" if n.daemon_pods else "")),
                      Text((n.instance_type or "-") + price), Text(n.capacity_type or "-"), Text(n.arch or "-"),
                      Text(n.zone or "-"), _status(n, frame.time), *extra]
        out.append(cells)
    return out


def node_table(lines: list[list[Text]], widths: list[int]) -> Table:
    """Node lines in columns of the given widths (the same for every NodePool's block, so they align)."""
    t = Table.grid(padding=(0, 1))
    for w in widths:
        t.add_column(no_wrap=True, min_width=w)
    for cells in lines:
        t.add_row(*cells)
    return t


def nodepool_header(name: str, frame: Frame) -> Text:
    p = next((x for x in frame.nodepools if x.name == name), None)
    t = Text(f"▸ {name}", style="bold cyan")
    if p is None:
        return t
    t.append(f"  {p.nodes} node{'s' if p.nodes != 1 else ''}")
    if frame.pricing:
        t.append(f"  {money(p.price_per_hour)}/h")
    if p.limits:
        lim = ", ".join(f"{k} {human_quantity(k, p.usage[k]) + '/' if k in p.usage else ''}{human_quantity(k, v)}"
                        for k, v in sorted(p.limits.items()))
        t.append(f"  limits {lim}")
    if p.budgets_left:
        t.append("  budget left ", style=GREY)
        t.append(" · ".join(f"{k} {'∞' if v >= 2**31 - 1 else v}" for k, v in p.budgets_left.items()))
    if p.consolidation:
        t.append(f"  {p.consolidation}", style=GREY)
    return t


def screen(frame: Frame, opts: Options, view: View) -> tuple[RenderableType, int]:
    """The whole screen, and how many pages of nodes there are."""
    parts: list[RenderableType] = []
    title = Text(view.title or "karpy viewer", style="bold")
    title.append(f"   {fmt_time(frame.time)}", style=GREY)
    if opts.node_selector:
        title.append(f"   selector {opts.node_selector}", style=GREY)
    parts.append(title)
    if view.replay:
        parts.append(Text(view.replay, style="cyan"))
    parts.extend(summary_lines(frame, opts))
    parts.append(pods_line(frame))
    cl = cost_line(frame)
    if cl is not None:
        parts.append(cl)
    parts.append(Text(""))
    rows = sort_nodes(frame.nodes, opts.node_sort, frame.time)
    if view.grouped:
        order = {p.name: i for i, p in enumerate(frame.nodepools)}
        rows = sorted(rows, key=lambda r: order.get(r.nodepool or "(unmanaged)", len(order)))
    pages = 1
    if view.per_page:
        pages = max(1, -(-len(rows) // view.per_page))
        page = min(view.page, pages - 1)
        rows = rows[page * view.per_page:(page + 1) * view.per_page]
    lines = {n.name: node_cells(n, frame, opts) for n in rows}
    ncols = 9 + len(opts.extra_labels)
    widths = [max((c[i].cell_len for ls in lines.values() for c in ls if i < len(c)), default=0) for i in range(ncols)]
    if not frame.nodes:
        parts.append(Text("Waiting for update or no nodes found...", style=GREY))
    elif view.grouped:
        pools: list[tuple[str, list[NodeRow]]] = []
        for r in rows:
            key = r.nodepool or "(unmanaged)"
            if not pools or pools[-1][0] != key:
                pools.append((key, []))
            pools[-1][1].append(r)
        for name, mine in pools:
            parts.append(nodepool_header(name, frame))
            parts.append(node_table([c for r in mine for c in lines[r.name]], widths))
    else:
        parts.append(node_table([c for r in rows for c in lines[r.name]], widths))
    if view.show_pending and frame.pending:
        parts.append(Text(""))
        parts.append(Text(f"Pending pods ({len(frame.pending)}):", style="bold yellow"))
        by_reason: dict[str, list[str]] = {}
        for p in frame.pending:
            label = p.pod + (f" → {p.nominated}" if p.nominated else "")
            by_reason.setdefault(p.reason, []).append(label)
        for reason, pods in list(by_reason.items())[:8]:
            shown = ", ".join(pods[:3]) + (f" and {len(pods) - 3} more" if len(pods) > 3 else "")
            parts.append(Text(f"  {shown}: {reason}"))
    if view.show_disruptions and frame.disruptions:
        parts.append(Text(""))
        parts.append(Text(f"Disruptions in progress ({len(frame.disruptions)}):", style="bold magenta"))
        for d in frame.disruptions[:8]:
            line = f"  {d.get('reason') or '?'}"
            if d.get("method"):
                line += f" ({d['method']})"
            line += f" {d.get('nodePool') or ''}: {', '.join(d.get('candidates') or ())}"
            if d.get("replacements"):
                line += f" → {', '.join(d['replacements'])}"
            if d.get("budget"):
                line += f"  budget {d['budget'].get('disrupting')}/{d['budget'].get('allowed')}"
            if d.get("costPerHourBefore"):
                line += f"  ${d['costPerHourBefore']}/h → ${d.get('costPerHourAfter') or '?'}/h"
            if d.get("state"):
                line += f"  {d['state']}"
            parts.append(Text(line))
    for note in view.notes:
        parts.append(Text(note, style="yellow"))
    if view.footer:
        dots = "".join("●" if i == min(view.page, pages - 1) else "○" for i in range(pages)) if pages > 1 else ""
        parts.append(Text(""))
        parts.append(Text(f"{dots}  {view.keys}".strip(), style=GREY))
    return Group(*parts), pages


# --- --once --------------------------------------------------------------------------------------------------------

def render_text(frame: Frame, opts: Options, view: View, terminal: bool, width: int | None = None) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width or 160, force_terminal=terminal, color_system="truecolor" if terminal
                      else None, highlight=False, emoji=False, legacy_windows=False)
    console.print(screen(frame, opts, view)[0])
    return "\n".join(line.rstrip() for line in buf.getvalue().split("\n"))


def render_json(frame: Frame) -> str:
    return json.dumps(to_json(frame), indent=2) + "\n"


CSV_COLUMNS = ["name", "nodeClaim", "nodePool", "instanceType", "capacityType", "zone", "arch", "pricePerHour",
               "priceSource", "pods", "maxPods", "status", "age"]


def render_csv(frame: Frame, opts: Options) -> str:
    data = to_json(frame)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    res_cols = [f"{r}.{k}" for r in frame.resources for k in ("requested", "allocatable")]
    w.writerow(CSV_COLUMNS + res_cols + list(opts.extra_labels))
    rows = {n.name: n for n in frame.nodes}
    order = [n.name for n in sort_nodes(frame.nodes, opts.node_sort, frame.time)]
    by_name = {n["name"]: n for n in data["nodes"]}
    for name in order:
        n = by_name[name]
        w.writerow([("" if n[c] is None else n[c]) for c in CSV_COLUMNS]
                   + [n["resources"][r][k] for r in frame.resources for k in ("requested", "allocatable")]
                   + [rows[name].labels.get(k) or computed_label(rows[name], k, frame.time) or ""
                      for k in opts.extra_labels])
    return buf.getvalue()


def replay_line(rp, t: float, playing: bool | None = None, speed: float | None = None) -> str:
    """Where the replay is: the instant, a track with the disruptions marked (◆), playing or paused."""

    span = max(rp.end - rp.start, 1e-9)
    width = 40
    pos = int((t - rp.start) / span * width)
    marks = {min(width, int((m - rp.start) / span * width)) for m, _ in rp.marks}
    track = "".join("●" if i == pos else ("◆" if i in marks else "─") for i in range(width + 1))
    state = "" if playing is None else ("▶ playing" if playing else "⏸ paused")
    line = f"replay {fmt_time(t)} (+{human_duration(t - rp.start)} of {human_duration(rp.end - rp.start)}) {track}"
    if state:
        line += f" {state} ×{speed:g}"
    return line
