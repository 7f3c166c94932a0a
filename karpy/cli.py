"""The `karpy` command line."""

from __future__ import annotations

import json
import sys
import traceback

import click

from . import __version__


def _fail_input(lines: list[str]) -> None:
    for line in lines:
        click.echo(f"error: {line}", err=True)
    sys.exit(2)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="karpy")
def main() -> None:
    """karpy: Karpenter, the Kubernetes node autoprovisioner, in Python."""


@main.command()
@click.argument("paths", nargs=-1)
@click.option("-o", "--output", "output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True,
              help="Output format.")
@click.option("--until", "until", default="1h", show_default=True, help="Longest simulated time to run.")
@click.option("--region", "region", default=None, help="Region of the cloud catalog (default: per provider).")
@click.option("--from-cluster", "from_cluster", is_flag=True,
              help="Start from a live cluster's state (read through the kubeconfig), PATH... applied on top.")
@click.option("--kubeconfig", "kubeconfig", default=None, help="With --from-cluster: the kubeconfig (default: "
              "$KUBECONFIG, then ~/.kube/config).")
@click.option("--context", "context", default=None, help="With --from-cluster: the kubeconfig context.")
def simulate(paths: tuple[str, ...], output: str, until: str, region: str | None, from_cluster: bool,
             kubeconfig: str | None, context: str | None) -> None:
    """Simulate Karpenter on the manifests in PATH... (files, directories, or - for stdin).

    With --from-cluster: what would Karpenter do in this cluster if PATH... were applied?"""
    if not paths and not from_cluster:
        _fail_input(["PATH: at least one manifest file or directory is required (or --from-cluster)"])
    if (kubeconfig or context) and not from_cluster:
        _fail_input(["--kubeconfig/--context: only with --from-cluster"])
    from .api.loader import load_documents
    from .resources import parse_duration

    try:
        until_s = parse_duration(until)
    except ValueError as e:
        _fail_input([f"--until: {e}"])
        return
    if until_s < 0:
        _fail_input([f"--until: Invalid value: \"{until}\": must be a non-negative duration"])
    if region is not None and not region.strip():
        _fail_input([f"--region: Invalid value: {json.dumps(region)}: must not be empty"])
    _tune_gc()
    cluster: list[dict] = []
    if from_cluster:
        cluster = _read_cluster(kubeconfig, context)
    try:
        loaded = load_documents(list(paths))  # reads "-" from standard input, as bytes
    except Exception:  # the loader reports bad input itself; anything else is ours
        traceback.print_exc()
        sys.exit(1)
    if loaded.errors:
        _fail_input([str(e) for e in loaded.errors])
    problems = _check_regions(loaded.documents, region) + _check_size(loaded.documents)
    if problems:
        _fail_input(problems)
    try:
        from .simulator.output import render_json, render_table, render_yaml
        from .simulator.sim import Simulation

        sim = Simulation(loaded.documents, region=region, until=until_s)
        if cluster:
            from .simulator.from_cluster import seed

            seed(sim, cluster)
        sim.run()
        sim.run_baseline()  # with karpy's own gates on: upstream's decisions too, for the cost side by side
        text = {"table": render_table, "json": render_json, "yaml": render_yaml}[output](sim)
        if sim.stopped:
            click.echo(f"warning: {sim.stopped}", err=True)
    except Exception as e:  # pragma: no cover - an internal failure, reported as such
        click.echo(f"internal error: {e}", err=True)
        traceback.print_exc()
        sys.exit(1)
    click.echo(text, nl=False)


def _read_cluster(kubeconfig: str | None, context: str | None) -> list[dict]:
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
        objects, notes = read_cluster(client)
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
    return objects


def _tune_gc() -> None:
    """A simulation allocates millions of small objects that live for the whole run: collect the young
    generation less often and keep what was loaded out of the collector's scans (CPython's defaults
    would rescan the whole heap over and over)."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


# The most pods one simulation holds. A pod costs about 25 KiB of memory end to end (100,000 pods peak at
# 2.5 GiB), so 500,000 pods need about 12 GiB: more than a laptop has to spare, and minutes of running.
# Past it karpy refuses at once rather than swapping for an hour.
MAX_PODS = 500_000
WORKLOAD_KINDS = ("Deployment", "ReplicaSet", "StatefulSet")


def _check_size(documents) -> list[str]:
    """Refuse inputs that ask for more pods than one simulation holds, naming the field that goes past."""
    from .errors import FieldError

    wanted: dict[tuple, int] = {}
    total = 0

    def ask(key: tuple, n: int, d, field: str) -> str | None:
        nonlocal total
        before = wanted.get(key, 0)
        if n <= before:
            return None
        wanted[key] = n
        total += n - before
        if total <= MAX_PODS:
            return None
        return str(FieldError(d.file, d.index, d.kind, d.name, field,
                              f"Invalid value: {n}: the input asks for {total} pods in all; one simulation holds at "
                              f"most {MAX_PODS} (about 25 KiB of memory each)"))

    def count(obj: dict, d, prefix: str) -> str | None:
        kind = obj.get("kind")
        meta = obj.get("metadata") or {}
        key = (kind, meta.get("namespace") or "default", meta.get("name") or meta.get("generateName") or id(obj))
        spec = obj.get("spec") or {}
        if kind == "Pod":
            return ask(key, 1, d, prefix + "metadata.name")
        if kind in WORKLOAD_KINDS:
            n = spec.get("replicas", 1)
            return ask(key, n if isinstance(n, int) else 1, d, prefix + "spec.replicas")
        if kind == "Job":
            n = spec.get("parallelism", 1)
            return ask(key, n if isinstance(n, int) else 1, d, prefix + "spec.parallelism")
        return None

    for d in documents:
        if d.kind == "Scenario":
            continue
        problem = count(d.obj, d, "")
        if problem:
            return [problem]
    for d in documents:
        if d.kind != "Scenario":
            continue
        for i, step in enumerate(((d.obj.get("spec") or {}).get("steps")) or ()):
            if not isinstance(step, dict):
                continue
            for j, obj in enumerate(step.get("apply") or ()):
                if isinstance(obj, dict):
                    problem = count(obj, d, f"spec.steps[{i}].apply[{j}].")
                    if problem:
                        return [problem]
            sc = step.get("scale")
            if isinstance(sc, dict) and sc.get("kind") in WORKLOAD_KINDS and isinstance(sc.get("replicas"), int):
                key = (sc["kind"], sc.get("namespace") or "default", sc.get("name"))
                problem = ask(key, sc["replicas"], d, f"spec.steps[{i}].scale.replicas")
                if problem:
                    return [problem]
    return []


def _check_regions(documents, region: str | None) -> list[str]:
    """Every provider a NodePool uses must know the region asked for."""
    from .cloudprovider.catalog import get_provider

    scenario_region = None
    scenario_doc = None
    for d in documents:
        if d.kind == "Scenario":
            scenario_region = ((d.obj.get("spec") or {}).get("region"))
            scenario_doc = d
    wanted = region or scenario_region
    if not wanted:
        return []
    out = []
    seen = set()
    for d in documents:
        if d.kind != "NodePool":
            continue
        ref = (((d.obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
        try:
            provider = get_provider(ref.get("group") or ref.get("kind") or "")
        except ValueError:
            continue
        if provider.name in seen or provider.name == "kwok":
            continue
        seen.add(provider.name)
        if wanted not in provider.regions:
            msg = (f"Unsupported value: \"{wanted}\": the {provider.name} catalog has prices for "
                   + ", ".join(f'"{r}"' for r in provider.regions))
            if region or scenario_doc is None:
                out.append(f"--region: {msg}")
            else:
                from .errors import FieldError

                d = scenario_doc
                out.append(str(FieldError(d.file, d.index, d.kind, d.name, "spec.region", msg)))
    return out


from .controller.cli import controller as _controller_command  # noqa: E402

main.add_command(_controller_command)


from .sandbox.cli import sandbox as _sandbox  # noqa: E402

main.add_command(_sandbox)

if __name__ == "__main__":  # pragma: no cover
    main()
