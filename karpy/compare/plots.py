"""The figures of ``--plot FILE``: PNG, SVG, or an HTML page holding the SVG. Drawn with matplotlib
(the ``plot`` extra: ``pip install 'karpy[plot]'``), without pyplot's global state.

* runs (``simulate``, ``compare``): cost per hour and NodeClaims over simulated time, one line per
  configuration, from the result's ``samples``, with every disruption marked where it started;
* sweeps: cost against disruption, one point per variant, the Pareto front drawn and named.
"""

from __future__ import annotations

import html
import io
from typing import Any

from ..kube.times import parse_time
from .run import InputError

FORMATS = (".png", ".svg", ".html")
LINES = ("-", "--", "-.", ":")  # configurations that draw the same line stay told apart
MARKERS = {"Empty": "v", "Underutilized": "D", "Drifted": "s", "Expired": "X", "Interrupted": "P", "Unhealthy": "*"}


def check_path(path: str) -> None:
    """Before anything runs: the format is known and matplotlib is there."""
    if not path.lower().endswith(FORMATS):
        raise InputError([f"--plot: Invalid value: {path!r}: the file name must end in .png, .svg or .html"])
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError(["--plot: matplotlib is not installed: pip install 'karpy[plot]'"]) from None


def _figure(rows: int):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.2 * rows), layout="constrained")
    return fig, fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]


def _scale(window: float) -> tuple[float, str]:
    return (3600.0, "hours") if window > 3 * 3600 else (60.0, "minutes")


def plot_runs(runs: list[tuple[str, dict]], path: str) -> None:
    """Cost and NodeClaims over simulated time: (name, SimulationSummary status) per configuration."""
    from matplotlib.ticker import MaxNLocator

    fig, (cost_ax, nodes_ax) = _figure(2)
    window = max((parse_time(s["end"]) or 0) - (parse_time(s["start"]) or 0) for _, s in runs)
    unit, unit_name = _scale(window)
    marked: set[str] = set()
    for n, (name, s) in enumerate(runs):
        start = parse_time(s["start"]) or 0.0
        xs = [((parse_time(p["time"]) or 0.0) - start) / unit for p in s["samples"]]
        color = f"C{n % 10}"
        style = dict(where="post", color=color, label=name, linestyle=LINES[n % len(LINES)], linewidth=1.8)
        cost_ax.step(xs, [float(p["costPerHour"]) for p in s["samples"]], **style)
        nodes_ax.step(xs, [p["nodeClaims"] for p in s["samples"]], **style)
        for d in s["disruptions"]:
            x = ((parse_time(d["startedAt"]) or 0.0) - start) / unit
            reason = d["reason"]
            cost_ax.plot([x], [float(d["costPerHourBefore"])], linestyle="none", marker=MARKERS.get(reason, "o"),
                         markerfacecolor="none", markeredgecolor=color, markersize=8,
                         label=None if reason in marked else f"disruption: {reason}")
            marked.add(reason)
    cost_ax.set_ylabel("$ per hour")
    cost_ax.set_title("Cost and NodeClaims over simulated time (markers: disruptions where they started)")
    nodes_ax.set_ylabel("NodeClaims")
    nodes_ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    nodes_ax.set_xlabel(f"simulated {unit_name} since the start")
    for ax in (cost_ax, nodes_ax):
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    cost_ax.legend(loc="best", fontsize="small")
    save(fig, path)


def plot_sweep(rows: list[dict], front: list[dict], path: str, cost: str = "costPerHour",
               disruption: str = "podsEvicted") -> None:
    """Cost against disruption per variant; the Pareto front highlighted, its variants named."""
    fig, (ax,) = _figure(1)
    fig.set_size_inches(10, 6)
    keys = {r["key"] for r in front}
    fewest = min((r["podsPending"] for r in rows), default=0)
    rest = [r for r in rows if r["key"] not in keys and r["podsPending"] == fewest]
    pending = [r for r in rows if r["podsPending"] > fewest]
    ax.scatter([r[disruption] for r in rest], [r[cost] for r in rest], color="C0", alpha=0.6, label="variant")
    if pending:
        ax.scatter([r[disruption] for r in pending], [r[cost] for r in pending], color="C7", marker="x",
                   label=f"variant leaving more than {fewest} pod(s) pending")
    ax.plot([r[disruption] for r in front], [r[cost] for r in front], color="C3", marker="o", markersize=9,
            linewidth=2, label="Pareto front")
    for r in front:
        ax.annotate(r["variant"], (r[disruption], r[cost]), textcoords="offset points", xytext=(6, 6),
                    fontsize="x-small", color="C3")
    ax.set_xlabel({"podsEvicted": "pods evicted", "disruptions": "disruptions"}.get(disruption, disruption))
    ax.set_ylabel({"costPerHour": "$ per hour at the end",
                   "costPerHourAverage": "$ per hour averaged over the run"}.get(cost, cost))
    ax.set_title(f"{len(rows)} variants: cost against disruption")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    save(fig, path)


def save(fig: Any, path: str) -> None:
    if path.lower().endswith(".html"):
        buf = io.StringIO()
        fig.savefig(buf, format="svg")
        svg = buf.getvalue()
        svg = svg[svg.find("<svg"):]
        with open(path, "w") as f:
            f.write(f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(path)}</title></head>"
                    f"<body>\n{svg}\n</body></html>\n")
    else:
        fig.savefig(path, dpi=110)
