"""The ``karpy compare`` and ``karpy sweep`` commands."""

from __future__ import annotations

import functools
import json
import sys
import traceback
from typing import Any, Callable

import click

from .run import InputError, Options


def _fail(lines: list[str]) -> None:
    for line in lines:
        click.echo(f"error: {line}", err=True)
    sys.exit(2)


def _simulation_options(f: Callable) -> Callable:
    """The flags of ``karpy simulate`` that every configuration is simulated with."""
    for opt in reversed((
        click.option("--until", "until", default=None,
                     help="Simulate each configuration to this time after its start (a horizon), as karpy "
                          "simulate --until. Without it: until settled, at most 1h."),
        click.option("--settle", "settle", is_flag=True, help="With --until: stop once settled."),
        click.option("--region", "region", default=None, help="Region of the cloud catalog (default: per provider)."),
        click.option("--prices", "prices", default=None, metavar="FILE", help="Your own prices (as karpy simulate)."),
        click.option("--workers", "workers", type=click.IntRange(min=1), default=None,
                     help="Simulations run at once on this machine (default: its cores)."),
        click.option("--plot", "plot", default=None, metavar="FILE.png|.svg|.html", help="Also draw a figure."),
        click.option("-q", "--quiet", "quiet", is_flag=True, help="No progress on standard error."),
    )):
        f = opt(f)
    return f


def _options(until: str | None, settle: bool, region: str | None, prices: str | None) -> Options:
    from ..resources import parse_duration
    from .run import load_prices

    horizon = until is not None and not settle
    text = "1h" if until is None else until
    try:
        seconds = parse_duration(text)
    except ValueError as e:
        raise InputError([f"--until: {e}"]) from None
    if seconds < 0:
        raise InputError([f"--until: Invalid value: \"{text}\": must be a non-negative duration"])
    if region is not None and not region.strip():
        raise InputError([f"--region: Invalid value: {json.dumps(region)}: must not be empty"])
    return Options(until=seconds, horizon=horizon, region=region,
                   prices=load_prices(prices) if prices is not None else None)


def _guarded(f: Callable) -> Callable:
    """Bad input exits 2 with its lines; anything else is an internal error (1), with its traceback."""
    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            f(*args, **kwargs)
        except InputError as e:
            _fail(e.lines)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except Exception as e:  # pragma: no cover - an internal failure, reported as such
            click.echo(f"internal error: {e}", err=True)
            traceback.print_exc()
            sys.exit(1)
    return wrapper


class _Bar:
    """A progress bar on standard error while variants run, when it is a terminal."""

    def __init__(self, total: int, label: str, quiet: bool):
        self.progress = None
        if not quiet and sys.stderr.isatty() and total > 0:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                     TextColumn("{task.description}"), console=Console(stderr=True), transient=True)
            self.task = self.progress.add_task("", total=total)
            self.progress.start()

    def advance(self, what: str) -> None:
        if self.progress is not None:
            self.progress.update(self.task, advance=1, description=what)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def _load(paths: list[str], region: str | None) -> list[dict]:
    from .run import load

    docs, notes = load(paths, region)
    for line in notes:
        click.echo(f"note: {line}", err=True)
    return docs


@click.command()
@click.argument("configs", nargs=-1)
@click.option("--patch", "patches", multiple=True, metavar="FILE",
              help="A variant of the first configuration: knobs and patches (see docs/compare.md); repeatable.")
@click.option("-o", "--output", "output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@_simulation_options
@_guarded
def compare(configs: tuple[str, ...], patches: tuple[str, ...], output: str, until: str | None, settle: bool,
            region: str | None, prices: str | None, workers: int | None, plot: str | None, quiet: bool) -> None:
    """Simulate configurations and show them side by side, with the differences against the first.

    Each CONFIG is a path set as karpy simulate takes it (files and directories; several joined by commas);
    each --patch FILE is the first configuration changed by FILE's knobs and patches."""
    from . import compare as C
    from .run import metrics
    from .sweep import default_workers, execute
    from .variants import apply, read_file

    if len(configs) + len(patches) < 2 or not configs:
        raise InputError(["CONFIG: at least two configurations: CONFIG CONFIG..., or CONFIG --patch FILE..."])
    if plot is not None:
        from .plots import check_path

        check_path(plot)
    opts = _options(until, settle, region, prices)
    runs: list[tuple[str, list[str], list[dict]]] = []
    for c in configs:
        paths = [p for p in c.split(",") if p]
        runs.append((c, paths, _load(paths, region)))
    for p in patches:
        changed = apply(runs[0][2], read_file(p), None, p)
        runs.append((f"{runs[0][0]} + {p}", [*runs[0][1], p],
                     [changed.get(i, d) for i, d in enumerate(runs[0][2])]
                     + [changed[i] for i in sorted(changed) if i >= len(runs[0][2])]))
    jobs = [(i, dict(enumerate(docs))) for i, (_, _, docs) in enumerate(runs)]
    bar = _Bar(len(jobs), "simulating", quiet)
    statuses: dict[int, dict] = {}
    try:
        for i, status in execute([], jobs, opts, workers=workers or default_workers(), full=True):
            statuses[i] = status
            bar.advance(runs[i][0])
    finally:
        bar.close()
    table = [(name, paths, metrics(statuses[i]), statuses[i]) for i, (name, paths, _) in enumerate(runs)]
    data = C.as_data(table)
    if plot is not None:
        from .plots import plot_runs

        plot_runs([(name, status) for name, _, _, status in table], plot)
    if output == "json":
        click.echo(json.dumps(data, indent=2))
    else:
        from ..simulator.output import table_width

        click.echo(C.render_table(data, table_width()), nl=False)


@click.command()
@click.argument("base", nargs=-1)
@click.option("--vary", "vary", required=True, metavar="FILE", help="The sweep file: axes and their values.")
@click.option("--out", "out", default="sweep", show_default=True, metavar="PREFIX",
              help="Rows go to PREFIX.jsonl (streamed, resumable) and PREFIX.csv.")
@click.option("--ray", "ray_address", default=None, envvar="RAY_ADDRESS", metavar="ADDRESS",
              help="Run the variants as tasks on this Ray cluster (host:port or ray://host:port; or RAY_ADDRESS).")
@click.option("--cost", "cost", type=click.Choice(["end", "average"]), default="end", show_default=True,
              help="The cost the Pareto front weighs: per hour at the end, or averaged over the run.")
@click.option("-o", "--output", "output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@_simulation_options
@_guarded
def sweep(base: tuple[str, ...], vary: str, out: str, ray_address: str | None, cost: str, output: str,
          until: str | None, settle: bool, region: str | None, prices: str | None, workers: int | None,
          plot: str | None, quiet: bool) -> None:
    """Simulate every variant of the manifests in BASE... that the sweep file names, and find the Pareto front
    of cost against disruption (pods evicted)."""
    from . import sweep as S
    from .variants import sweep_variants

    if not base:
        raise InputError(["BASE: at least one manifest file or directory is required"])
    if plot is not None:
        from .plots import check_path

        check_path(plot)
    opts = _options(until, settle, region, prices)
    docs = _load(list(base), region)
    variants = sweep_variants(vary, docs)
    cost_key = "costPerHour" if cost == "end" else "costPerHourAverage"
    bar = _Bar(len(variants), "variants", quiet)
    try:
        rows, skipped = S.run(docs, variants, opts, out, S.digest(docs), workers=workers or S.default_workers(),
                              ray_address=ray_address, on_row=lambda row, n, total: bar.advance(row["variant"]))
    finally:
        bar.close()
    if skipped:
        click.echo(f"note: {skipped} of {len(variants)} variant(s) were already in {out}.jsonl", err=True)
    front = S.pareto(rows, cost_key)
    axes = list(variants[0].values) if variants else []
    S.write_csv(out + ".csv", rows, axes, front)
    if plot is not None:
        from .plots import plot_sweep

        plot_sweep(rows, front, plot, cost_key)
    result = {"apiVersion": "karpy.dev/v1alpha1", "kind": "SweepResult", "variants": len(rows),
              "rows": f"{out}.jsonl", "csv": f"{out}.csv", "cost": cost_key, "disruption": "podsEvicted",
              "cheapest": front[0]["variant"] if front else None, "pareto": [r["variant"] for r in front]}
    if output == "json":
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(_sweep_table(rows, front, cost_key), nl=False)


def _sweep_table(rows: list[dict], front: list[dict], cost_key: str) -> str:
    import io

    from rich import box
    from rich.console import Console
    from rich.table import Table

    from ..simulator.output import TABLE_STYLE, table_width
    from .sweep import flat

    buf = io.StringIO()
    console = Console(file=buf, width=table_width(), force_terminal=False, color_system=None, highlight=False,
                      markup=False, emoji=False)
    on_front = {r["key"] for r in front}
    axes = list(rows[0]["values"]) if rows else []
    t = Table(title=f"Sweep: {len(rows)} variants (* on the Pareto front of cost against pods evicted)",
              **{**TABLE_STYLE, "box": box.SIMPLE_HEAD})
    for col in ("", " / ".join(axes) or "VARIANT", "$/HOUR END", "$/HOUR AVG", "NODECLAIMS", "PENDING", "DISRUPTIONS", "EVICTED"):
        t.add_column(col, justify="right" if col.startswith("$") or col.isupper() and col != "VARIANT" else "left",
                     overflow="fold")
    for r in rows:
        t.add_row("*" if r["key"] in on_front else "", " / ".join(flat(v) for v in r["values"].values()), f"{r['costPerHour']:.4f}",
                  f"{r['costPerHourAverage']:.4f}", str(r["nodeClaims"]), str(r["podsPending"]),
                  str(r["disruptions"]), str(r["podsEvicted"]))
    console.print(t)
    if front:
        c = front[0]
        console.print(f"Cheapest ({'at the end' if cost_key == 'costPerHour' else 'averaged'}, fewest pods pending): "
                      f"{c['variant']}: ${c[cost_key]:.4f}/hour, {c['podsEvicted']} pod(s) evicted")
    return buf.getvalue()
