"""``karpy compare``: configurations side by side, and each one's differences against the first."""

from __future__ import annotations

import io
from typing import Any

NUMBERS = ("costPerHour", "costPerHourAverage", "nodeClaims", "nodeClaimsLaunched", "podsPending", "disruptions",
           "podsEvicted")
MIXES = ("instanceTypes", "capacityTypes", "architectures", "disruptionsByReason")
# (metric, row label) in the table's order
ROWS = (
    ("costPerHour", "$/hour at the end"),
    ("costPerHourAverage", "$/hour averaged over the run"),
    ("nodeClaims", "NodeClaims at the end"),
    ("nodeClaimsLaunched", "NodeClaims launched"),
    ("instanceTypes", "instance types"),
    ("capacityTypes", "capacity types"),
    ("architectures", "architectures"),
    ("podsPending", "pods pending"),
    ("disruptionsByReason", "disruptions"),
    ("podsEvicted", "pods evicted"),
)
COSTS = ("costPerHour", "costPerHourAverage")


def difference(a: dict, b: dict) -> dict:
    """b against a: numbers subtracted, mixes per key (only the keys that changed)."""
    out: dict[str, Any] = {}
    for k in NUMBERS:
        d = b[k] - a[k]
        out[k] = round(d, 4) if k in COSTS else d
    for k in MIXES:
        keys = sorted(set(a[k]) | set(b[k]))
        out[k] = {x: b[k].get(x, 0) - a[k].get(x, 0) for x in keys if b[k].get(x, 0) != a[k].get(x, 0)}
    return out


def as_data(configs: list[tuple[str, list[str], dict, dict]]) -> dict:
    """The comparison as data (``-o json``): per configuration (name, paths, metrics, status) its metrics
    and samples, then the differences of each against the first."""
    first = configs[0]
    return {
        "apiVersion": "karpy.dev/v1alpha1",
        "kind": "Comparison",
        "configurations": [
            {"name": name, "paths": paths, **m,
             "sampleInterval": status.get("sampleInterval"), "samples": status.get("samples", [])}
            for name, paths, m, status in configs
        ],
        "differences": [{"name": name, "against": first[0], **difference(first[2], m)}
                        for name, _, m, _ in configs[1:]],
    }


def _cell(key: str, value: Any) -> str:
    if key in COSTS:
        return f"{value:.4f}"
    if isinstance(value, dict):
        return "\n".join(f"{k} ×{n}" for k, n in value.items()) if value else "none"
    return str(value)


def _delta(key: str, d: Any, base: Any) -> str:
    if key in COSTS:
        if abs(d) < 5e-5:
            return "(same)"
        pct = f", {d / base * 100:+.1f}%" if base else ""
        return f"({d:+.4f}{pct})"
    if isinstance(d, dict):
        return "(" + ", ".join(f"{n:+d} {k}" for k, n in d.items()) + ")" if d else "(same)"
    return f"({d:+d})" if d else "(same)"


def _money(x: float, places: int = 4) -> str:
    return f"{'-' if x < 0 else '+'}${abs(x):,.{places}f}"


def render_table(data: dict, width: int = 120) -> str:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from ..simulator.output import HOURS_PER_MONTH, TABLE_STYLE

    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=False, color_system=None, highlight=False,
                      markup=False, emoji=False)
    configs = data["configurations"]
    diffs = [None, *data["differences"]]
    t = Table(title=f"Comparison: {len(configs)} configurations (differences against {configs[0]['name']})",
              **{**TABLE_STYLE, "box": box.SIMPLE_HEAD})
    t.add_column("", no_wrap=True)
    for c in configs:
        t.add_column(c["name"], overflow="fold")
    for key, label in ROWS:
        cells = []
        for c, d in zip(configs, diffs):
            text = _cell(key, c[key])
            if d is not None:
                text += "\n" + _delta(key, d[key], configs[0][key]) if isinstance(c[key], dict) else \
                    " " + _delta(key, d[key], configs[0][key])
            cells.append(text)
        t.add_row(label, *cells)
    console.print(t)
    first = configs[0]
    for c, d in zip(configs[1:], data["differences"]):
        per_month = d["costPerHour"] * HOURS_PER_MONTH
        console.print(f"{c['name']} against {first['name']}: {_money(d['costPerHour'])}/hour at the end "
                      f"({_money(per_month, 2)}/month), {_money(d['costPerHourAverage'])}/hour averaged", soft_wrap=True)
    for c in configs:
        if c.get("stoppedEarly"):
            console.print(f"{c['name']}: {c['stoppedEarly']}")
    return buf.getvalue()
