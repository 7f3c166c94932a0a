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
@click.argument("paths", nargs=-1, required=True)
@click.option("-o", "--output", "output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True,
              help="Output format.")
@click.option("--until", "until", default="1h", show_default=True, help="Longest simulated time to run.")
@click.option("--region", "region", default=None, help="Region of the cloud catalog (default: per provider).")
def simulate(paths: tuple[str, ...], output: str, until: str, region: str | None) -> None:
    """Simulate Karpenter on the manifests in PATH... (files, directories, or - for stdin)."""
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
    try:
        loaded = load_documents(list(paths))  # reads "-" from standard input, as bytes
    except Exception:  # the loader reports bad input itself; anything else is ours
        traceback.print_exc()
        sys.exit(1)
    if loaded.errors:
        _fail_input([str(e) for e in loaded.errors])
    problems = _check_regions(loaded.documents, region)
    if problems:
        _fail_input(problems)
    try:
        from .simulator.output import render_json, render_table, render_yaml
        from .simulator.sim import Simulation

        sim = Simulation(loaded.documents, region=region, until=until_s)
        sim.run()
        text = {"table": render_table, "json": render_json, "yaml": render_yaml}[output](sim)
    except Exception as e:  # pragma: no cover - an internal failure, reported as such
        click.echo(f"internal error: {e}", err=True)
        traceback.print_exc()
        sys.exit(1)
    click.echo(text, nl=False)


def _tune_gc() -> None:
    """A simulation allocates millions of small objects that live for the whole run: collect the young
    generation less often and keep what was loaded out of the collector's scans (CPython's defaults
    would rescan the whole heap over and over)."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


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


if __name__ == "__main__":  # pragma: no cover
    main()
