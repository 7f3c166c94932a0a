"""``karpy viewer``: the command line (the contract is ``shared/contract/viewer.md``)."""

from __future__ import annotations

import shutil
import sys

import click

from ..resources import parse_duration


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--kubeconfig", default=None, help="The kubeconfig (default: $KUBECONFIG, then ~/.kube/config).")
@click.option("--context", default=None, help="The kubeconfig context.")
@click.option("--node-selector", "node_selector", default=None,
              help="Only nodes (and NodeClaims) with these labels, e.g. aks-karpenter=demo; only their pods count.")
@click.option("--resources", default=None, help="Resources to show, comma-separated: cpu, memory, pods, "
              "ephemeral-storage, extended resources such as nvidia.com/gpu (default cpu).")
@click.option("--extra-labels", "extra_labels", default=None,
              help="Node labels shown as trailing columns, comma-separated (also eks-node-viewer/node-age, "
              "eks-node-viewer/node-cpu-usage).")
@click.option("--node-sort", "node_sort", default=None,
              help="creation (oldest first; creation=dsc newest first) or a label, KEY[=asc|dsc].")
@click.option("--style", default=None, help="Colours GOOD,OK,BAD (default #04B575,#FFFF00,#FF0000).")
@click.option("--disable-pricing", "disable_pricing", is_flag=True, default=None, help="Show no prices.")
@click.option("--replay", default=None, metavar="RESULT.json", help="Replay a `karpy simulate -o json` result.")
@click.option("--at", "at", default=None, help="With --replay: the instant to show, RFC 3339 or a duration from "
              "the start (11m41s); default the end (--once) or the start.")
@click.option("--speed", default=None, type=float, help="With --replay: simulated seconds per real second "
              "(default 30).")
@click.option("--once", is_flag=True, help="Print one frame and exit.")
@click.option("-o", "--output", "output", type=click.Choice(["table", "json", "csv"]), default=None,
              help="With --once: table (default), json or csv.")
def viewer(kubeconfig, context, node_selector, resources, extra_labels, node_sort, style, disable_pricing, replay,
           at, speed, once, output) -> None:
    """Nodes, their use and their price, and Karpenter's decisions, live or replayed.

    q quits, ←/→ (PgUp/PgDn) page, g groups by NodePool, p and d show or hide the pending pods and the
    disruptions; replaying, space pauses, . and , step, + and - change the speed, ] and [ jump to the next and
    previous disruption."""
    from .model import build
    from .options import OptionError, resolve
    from .prices import PriceBook
    from .render import View, render_csv, render_json, render_text, replay_line

    if output is not None and not once:
        _fail("-o/--output: only with --once")
    if replay is None and (at is not None or speed is not None):
        _fail("--at/--speed: only with --replay")
    if replay is not None and (kubeconfig or context):
        _fail("--kubeconfig/--context: not with --replay (the result is the cluster)")
    if speed is not None and not speed > 0:
        _fail(f"--speed: {speed}: must be a positive number")
    try:
        opts = resolve({"kubeconfig": kubeconfig, "context": context, "node_selector": node_selector,
                        "resources": resources, "extra_labels": extra_labels, "node_sort": node_sort,
                        "style": style, "disable_pricing": disable_pricing})
    except OptionError as e:
        _fail(str(e))
        return
    if replay is not None:
        opts.kubeconfig = opts.context = None  # a config file's cluster does not apply to a replay
    prices = PriceBook(disabled=opts.disable_pricing)
    interactive = not once
    if interactive and not (sys.stdout.isatty() and sys.stdin.isatty()):
        click.echo("note: not a terminal: printing one frame (--once)", err=True)
        interactive, once = False, True

    if replay is not None:
        from .replay import ReplayError, load

        try:
            rp = load(replay)
        except ReplayError as e:
            _fail(str(e))
            return
        t = rp.end if once else rp.start
        if at is not None:
            t = _instant(at, rp.start, rp.end)
        if interactive:
            from .app import run_replay

            run_replay(rp, opts, prices, t, speed or 30.0)
            return
        frame = build(rp.snapshot(t, opts.node_selector), opts.resources, prices)
        view = View(title=f"karpy viewer — replay {replay}", replay=replay_line(rp, t))
    else:
        from .live import LiveSource, SourceError

        try:
            src = LiveSource(opts.kubeconfig, opts.context, opts.node_selector)
        except SourceError as e:
            _fail(str(e))
            return
        try:
            if interactive:
                from .app import run_live

                try:
                    src.start()
                except SourceError as e:
                    _fail(str(e))
                run_live(src, opts, prices)
                return
            try:
                snap = src.read()
            except SourceError as e:
                _fail(str(e))
                return
        finally:
            if not interactive:
                src.close()
        frame = build(snap, opts.resources, prices)
        view = View(title=f"karpy viewer — {src.context or src.server}")
        if src.missing:
            view.notes.append(f"note: no {' or '.join(sorted(src.missing))} API: Karpenter's CRDs are not installed")
    fmt = output or "table"
    if fmt == "json":
        text = render_json(frame)
    elif fmt == "csv":
        text = render_csv(frame, opts)
    else:
        terminal = sys.stdout.isatty()
        width = shutil.get_terminal_size()[0] if terminal else 200
        text = render_text(frame, opts, view, terminal, width)
    click.echo(text, nl=False)


def _instant(value: str, start: float, end: float) -> float:
    from ..kube.times import parse_time

    t = parse_time(value) if "T" in value else None
    if t is None:
        try:
            t = start + parse_duration(value)
        except ValueError:
            _fail(f"--at: {value!r}: an RFC 3339 time (2026-01-01T00:11:41Z) or a duration from the start (11m41s)")
            raise  # unreachable
    if t < start or t > end:
        from ..kube.times import fmt_time

        _fail(f"--at: {value!r} is outside the simulated time {fmt_time(start)} to {fmt_time(end)}")
    return t
