"""``karpy viewer --replay``: a ``karpy simulate -o json`` result played back, and the ``--once`` outputs and errors
of the command line, as a user runs them."""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner

from karpy.cli import main
from karpy.kube.times import parse_time
from karpy.viewer.model import build, to_json
from karpy.viewer.replay import load

from .objects import ROOT


def simulate(tmp_path_factory, example: str) -> str:
    out = tmp_path_factory.mktemp("replay") / f"{example}.json"
    r = CliRunner().invoke(main, ["simulate", str(ROOT / "examples" / example), "-o", "json"])
    assert r.exit_code == 0, r.output
    out.write_text(r.stdout)
    return str(out)


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    return simulate(tmp_path_factory, "aks-multiarch-arm64")


@pytest.fixture(scope="module")
def consolidation(tmp_path_factory):
    return simulate(tmp_path_factory, "consolidation-policies")


def viewer(*args: str):
    return CliRunner().invoke(main, ["viewer", *args], env={"HOME": "/nonexistent"})


def test_seed_replay_at_the_end_is_the_simulation_result(seed):
    r = viewer("--replay", seed, "--once", "-o", "json", "--node-selector", "aks-karpenter=demo", "--resources", "cpu")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    summary = json.loads(open(seed).read())["items"][-1]["status"]
    assert got["time"] == summary["end"]
    assert got["summary"]["pricePerHour"] == summary["costPerHour"]
    assert got["summary"]["nodes"] == 2 and got["summary"]["pods"]["total"] == 4
    assert sorted((n["instanceType"], n["arch"], n["pricePerHour"], n["pods"]) for n in got["nodes"]) == \
        sorted((c["instanceType"], "arm64", c["pricePerHour"], n) for c, n in
               zip(sorted(summary["nodeClaims"], key=lambda c: c["instanceType"]), (1, 3)))


def test_cost_at_every_instant_follows_the_nodeclaims_lives(consolidation):
    rp = load(consolidation)
    status = rp.summary
    assert f"{rp.cost_at(rp.end):.4f}" == status["costPerHour"]
    for d in status["disruptions"]:
        started, finished = parse_time(d["startedAt"]), parse_time(d["finishedAt"])
        assert f"{rp.cost_at(started - 1):.4f}" == d["costPerHourBefore"]
        assert f"{rp.cost_at(finished):.4f}" == d["costPerHourAfter"]


def test_a_disruption_in_flight_shows_its_candidates_disrupting(consolidation):
    rp = load(consolidation)
    d = next(d for d in rp.summary["disruptions"] if d["replacements"])
    r = viewer("--replay", consolidation, "--once", "-o", "json", "--at", d["startedAt"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    status = {n["nodeClaim"]: n["status"] for n in got["nodes"]}
    assert all(status[c] == "Disrupting" for c in d["candidates"])
    assert all(c in status for c in d["replacements"])  # the replacement is launched
    assert [x["candidates"] for x in got["disruptions"]] == [d["candidates"]]
    # the pods moved: the candidate holds none once they are evicted, and the pods line never loses them
    at_start = to_json(build(rp.snapshot(rp.start + 5), ["cpu"], None))
    assert at_start["summary"]["pods"]["total"] == 24
    table = viewer("--replay", consolidation, "--once", "--at", d["startedAt"])
    assert f"Disrupting({d['reason']})" in table.stdout and "Disruptions in progress (1)" in table.stdout


def test_replay_start_shows_the_cluster_before_karpenter_acted(seed):
    got = json.loads(viewer("--replay", seed, "--once", "-o", "json", "--at", "0s").stdout)
    assert got["summary"]["nodes"] == 0 and got["summary"]["pods"]["pending"] == 4


def test_csv_has_a_row_per_node_with_the_resources_asked(seed):
    r = viewer("--replay", seed, "--once", "-o", "csv", "--resources", "cpu,memory", "--extra-labels",
               "kubernetes.io/arch")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(rows) == 2 and {x["kubernetes.io/arch"] for x in rows} == {"arm64"}
    assert all(x["cpu.requested"] and x["memory.allocatable"] and x["priceSource"] == "annotation" for x in rows)


@pytest.mark.parametrize("args, message", [
    (["--replay", "/nonexistent/result.json", "--once"], "--replay: /nonexistent/result.json"),
    (["--replay", "{bad}", "--once"], "not JSON"),
    (["--replay", "{list}", "--once"], "no SimulationSummary"),
    (["--replay", "{seed}", "--once", "--at", "25h"], "outside the simulated time"),
    (["--replay", "{seed}", "--once", "--at", "soon"], "--at"),
    (["--replay", "{seed}", "--speed", "0"], "--speed"),
    (["--replay", "{seed}", "--context", "prod"], "not with --replay"),
    (["--once", "--node-selector", "a in (b", "--replay", "{seed}"], "--node-selector"),
    (["-o", "json"], "only with --once"),
    (["--at", "1m", "--once"], "only with --replay"),
    (["--once", "--kubeconfig", "/nonexistent/kubeconfig"], "--kubeconfig"),
])
def test_bad_input_exits_2_with_a_message_and_no_traceback(seed, tmp_path, args, message):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "list.json").write_text('{"apiVersion": "v1", "kind": "List", "items": []}')
    args = [a.format(seed=seed, bad=tmp_path / "bad.json", list=tmp_path / "list.json") for a in args]
    r = viewer(*args)
    assert r.exit_code == 2, r.output
    assert message in r.stderr and "Traceback" not in r.output
