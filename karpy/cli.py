"""The `karpy` command line."""

from __future__ import annotations

import contextlib
import json
import sys
import traceback

import click

from . import version


def _fail_input(lines: list[str]) -> None:
    for line in lines:
        click.echo(f"error: {line}", err=True)
    sys.exit(2)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version(), prog_name="karpy", message="%(prog)s %(version)s")
def main() -> None:
    """karpy: Karpenter, the Kubernetes node autoprovisioner, in Python."""


@contextlib.contextmanager
def _long_lived_heap():
    """A simulation's heap is mostly long-lived objects (the API server's objects, the cluster state, the
    catalogs) and makes few reference cycles: the objects so far are moved out of the cyclic collector's reach
    (``gc.freeze``) and young collections run every 50,000 allocations instead of 700, so the collector stops
    walking the whole heap again and again. What survives a collection is frozen too (it is as long-lived), so
    no collection walks it again: each one scans only the objects made since the last. Restored afterwards."""
    import gc

    def freeze_survivors(phase: str, info: dict) -> None:
        if phase == "stop":
            gc.freeze()

    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    gc.callbacks.append(freeze_survivors)
    try:
        yield
    finally:
        gc.callbacks.remove(freeze_survivors)
        gc.set_threshold(*before)
        gc.unfreeze()


@main.command()
@click.argument("paths", nargs=-1)
@click.option("-o", "--output", "output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True,
              help="Output format.")
@click.option("--until", "until", default=None,
              help="Simulate to this time after the start (a horizon: expiry, drift and budget windows play out "
                   "even when nothing else happens). Without it: until settled, at most 1h.")
@click.option("-q", "--quiet", "quiet", is_flag=True,
              help="No progress line on standard error (shown only when it is a terminal).")
@click.option("--settle", "settle", is_flag=True,
              help="With --until: stop once the cluster is settled, as without --until.")
@click.option("--region", "region", default=None, help="Region of the cloud catalog (default: per provider).")
@click.option("--prices", "prices", default=None, metavar="FILE",
              help="Your own prices or discounts (CSV or YAML: instanceType, region, capacityType, price or "
                   "discount, optional zone): what the nodes are billed; Karpenter still chooses by public prices.")
@click.option("-k", "--kustomize", "kustomize", multiple=True, metavar="DIR",
              help="Also simulate the kustomization in DIR, rendered as kubectl apply -k renders it.")
@click.option("--from-cluster", "from_cluster", is_flag=True,
              help="Start from a live cluster's state (read through the kubeconfig), PATH... applied on top.")
@click.option("--kubeconfig", "kubeconfig", default=None, help="With --from-cluster: the kubeconfig (default: "
              "$KUBECONFIG, then ~/.kube/config).")
@click.option("--context", "context", default=None, help="With --from-cluster: the kubeconfig context.")
@click.option("--plot", "plot", default=None, metavar="FILE.png|.svg|.html",
              help="Also draw cost and NodeClaims over simulated time, disruptions marked.")
def simulate(paths: tuple[str, ...], output: str, until: str | None, quiet: bool, settle: bool, region: str | None,
             kustomize: tuple[str, ...], from_cluster: bool, kubeconfig: str | None, context: str | None,
             prices: str | None, plot: str | None = None) -> None:
    """Simulate Karpenter on the manifests in PATH... (files, directories, or - for stdin).

    With --from-cluster: what would Karpenter do in this cluster if PATH... were applied?"""
    if not paths and not kustomize and not from_cluster:
        _fail_input(["PATH: at least one manifest file or directory is required (or -k DIR, or --from-cluster)"])
    if (kubeconfig or context) and not from_cluster:
        _fail_input(["--kubeconfig/--context: only with --from-cluster"])
    from .api.loader import load_documents
    from .resources import parse_duration

    horizon = until is not None and not settle
    until = "1h" if until is None else until
    try:
        until_s = parse_duration(until)
    except ValueError as e:
        _fail_input([f"--until: {e}"])
        return
    if until_s < 0:
        _fail_input([f"--until: Invalid value: \"{until}\": must be a non-negative duration"])
    if region is not None and not region.strip():
        _fail_input([f"--region: Invalid value: {json.dumps(region)}: must not be empty"])
    if plot is not None:
        from .compare.plots import check_path
        from .compare.run import InputError

        try:
            check_path(plot)
        except InputError as e:
            _fail_input(e.lines)
    _tune_gc()
    cluster: list[dict] = []
    cluster_now = None
    if from_cluster:
        cluster, cluster_now = _read_cluster(kubeconfig, context)
    try:
        loaded = load_documents(list(paths), kustomizations=kustomize)  # reads "-" from standard input, as bytes
    except Exception:  # the loader reports bad input itself; anything else is ours
        traceback.print_exc()
        sys.exit(1)
    if loaded.errors:
        _fail_input([str(e) for e in loaded.errors])
    for line in loaded.messages():  # skipped documents, kustomization files, what HorizontalPodAutoscalers did
        click.echo(f"note: {line}", err=True)
    from .simulator.inputs import check_regions, check_size

    problems = check_regions(loaded.documents, region) + check_size(loaded.documents)
    if problems:
        _fail_input(problems)
    user_prices = _load_prices(prices) if prices is not None else None
    try:
        from .simulator.output import render_table, render_yaml, write_json
        from .simulator.sim import Simulation

        documents = loaded.documents
        if from_cluster:
            import time

            from .simulator.from_cluster import starting_at

            # the cluster's present: its objects' latest time, or this machine's clock if later
            documents = starting_at(documents, max(cluster_now or 0.0, float(int(time.time()))))
        sim = Simulation(documents, region=region, until=until_s, horizon=horizon)
        del loaded, documents  # the simulation keeps what it needs: the parsed manifests are not held to the end
        sim.cloud.prices = user_prices  # bills the nodes at the user's prices (--prices)
        if cluster:
            from .simulator.from_cluster import seed

            seed(sim, cluster)
        from .simulator.progress import Progress

        progress = Progress() if Progress.wanted(quiet) else None
        sim.on_progress = progress
        try:
            with _long_lived_heap():
                sim.run()
                sim.run_baseline()  # with karpy's own gates on: upstream's decisions too, for the cost side by side
        finally:
            if progress is not None:
                progress.close()
        # JSON is written as it is rendered (below), never held whole: at 100,000 pods it is most of a gigabyte
        text = None if output == "json" else {"table": render_table, "yaml": render_yaml}[output](sim)
        if plot is not None:
            from .compare.plots import plot_runs
            from .simulator.output import summary

            plot_runs([(" ".join(paths) or "simulation", summary(sim)["status"])], plot)
        if sim.stopped:
            click.echo(f"warning: {sim.stopped}", err=True)
        _note_estimated_prices(sim)
        if text is None:
            stdout = click.get_binary_stream("stdout")
            write_json(sim, stdout)
            stdout.flush()
    except Exception as e:  # pragma: no cover - an internal failure, reported as such
        click.echo(f"internal error: {e}", err=True)
        traceback.print_exc()
        sys.exit(1)
    if text is not None:
        click.echo(text, nl=False)
    _exit_without_teardown()


def _exit_without_teardown() -> None:
    """Ends a ``karpy`` process that has written its result: the simulation's heap (millions of small objects)
    goes back to the operating system at once instead of being freed one object at a time (about a tenth of
    the CPU of 20,000 pods). Only in the karpy process itself: under a test runner, a profiler or a tracer
    (cProfile, coverage: they write their results at exit), or with its standard output redirected by a caller
    (click's CliRunner), it returns as usual."""
    if sys.stdout is not sys.__stdout__ or sys.stderr is not sys.__stderr__ or "pytest" in sys.modules or \
            sys.getprofile() is not None or sys.gettrace() is not None:
        return
    import os

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _load_prices(path: str):
    """The user's prices file (--prices), checked against the catalogs' instance types and regions."""
    from .compare.run import InputError, load_prices

    try:
        return load_prices(path)
    except InputError as e:
        _fail_input(e.lines)


def _note_estimated_prices(sim) -> None:
    """One line on stderr when NodeClaims were priced by an estimate rather than a stated price."""
    n = sum(1 for life in sim.history.claims.values() if life.launched and life.price_estimated)
    if n:
        click.echo(f"note: {n} NodeClaim price(s) are estimates (priceSource \"estimated\"; see docs/data-sources.md); "
                   "give your own with --prices FILE", err=True)


def _read_cluster(kubeconfig: str | None, context: str | None) -> tuple[list[dict], float | None]:
    """The live cluster's objects, through the client ``karpy controller`` uses."""
    from .kube import errors as E
    from .kube.client import ConfigError, KubeClient
    from .simulator.from_cluster import read_cluster

    try:
        client = KubeClient.from_kubeconfig(kubeconfig, context)
    except ConfigError as e:
        _fail_input([f"--kubeconfig: {e}"])
        raise  # unreachable
    try:
        objects, notes, latest = read_cluster(client)
    except E.ApiError as e:
        click.echo(f"error: reading the cluster: {e.code} {e.reason}: {e}", err=True)
        sys.exit(1)
    except OSError as e:
        click.echo(f"error: reading the cluster: {e}", err=True)
        sys.exit(1)
    finally:
        client.close()
    for n in notes:
        click.echo(f"note: {n}", err=True)
    return objects, latest


def _tune_gc() -> None:
    """A simulation allocates millions of small objects that live for the whole run: collect the young
    generation less often and keep what was loaded out of the collector's scans (CPython's defaults
    would rescan the whole heap over and over)."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


from .controller.cli import controller as _controller_command  # noqa: E402

main.add_command(_controller_command)


from .sandbox.cli import sandbox as _sandbox  # noqa: E402

main.add_command(_sandbox)


from .viewer.cli import viewer as _viewer  # noqa: E402

main.add_command(_viewer)


from .compare.cli import compare as _compare, sweep as _sweep  # noqa: E402

main.add_command(_compare)
main.add_command(_sweep)

if __name__ == "__main__":  # pragma: no cover
    main()
