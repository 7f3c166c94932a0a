"""karpy sweep: the cross product of a sweep file's axes over the workshop, rows in JSON Lines and CSV, the
Pareto front, resuming, and bad sweep files."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from karpy.cli import main
from karpy.compare.sweep import pareto

ROOT = Path(__file__).resolve().parent.parent
ARM = str(ROOT / "examples" / "aks-multiarch-arm64")
SWEEP = {"axes": {"capacityTypes": [["on-demand"], ["spot"]],
                  "architectures": [["amd64"], ["arm64"], ["amd64", "arm64"]],
                  "consolidationPolicy": ["WhenEmpty", "WhenEmptyOrUnderutilized"]}}


def karpy(*args: str):
    return CliRunner().invoke(main, list(args))


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def sweep_file(tmp_path):
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump(SWEEP))
    return p


def test_sweep_cross_product_cheapest_confirmed_by_simulate(tmp_path, sweep_file):
    out = tmp_path / "out"
    r = karpy("sweep", ARM, "--vary", str(sweep_file), "--out", str(out), "--workers", "2", "-q", "-o", "json")
    assert r.exit_code == 0, r.output
    result = json.loads(r.stdout)
    rows = rows_of(out.with_suffix(".jsonl"))
    assert len(rows) == 12 and len({r["key"] for r in rows}) == 12
    assert sorted(r["index"] for r in rows) == list(range(12))
    amd = [r for r in rows if r["values"]["architectures"] == ["amd64"]]
    assert all(r["podsPending"] == 4 and r["nodeClaims"] == 0 for r in amd)  # the pods ask for arm64
    cheapest = min((r for r in rows if r["podsPending"] == 0), key=lambda r: (r["costPerHour"], r["index"]))
    assert result["cheapest"] == cheapest["variant"]
    assert cheapest["values"]["capacityTypes"] == ["spot"] and cheapest["capacityTypes"] == {"spot": 2}
    # the same variant written by hand and simulated: the same cost
    manual = tmp_path / "manual"
    shutil.copytree(ARM, manual)
    docs = list(yaml.safe_load_all((manual / "nodepool.yaml").read_text()))
    reqs = docs[0]["spec"]["template"]["spec"]["requirements"]
    for req in reqs:
        if req["key"] == "karpenter.sh/capacity-type":
            req["values"] = ["spot"]
        if req["key"] == "kubernetes.io/arch":
            req["values"] = cheapest["values"]["architectures"]
    docs[0]["spec"]["disruption"]["consolidationPolicy"] = cheapest["values"]["consolidationPolicy"]
    (manual / "nodepool.yaml").write_text(yaml.safe_dump_all(docs))
    s = karpy("simulate", str(manual), "-o", "json", "-q")
    status = json.loads(s.stdout)["items"][-1]["status"]
    assert float(status["costPerHour"]) == cheapest["costPerHour"]
    # the CSV: one row per variant in the sweep's order, the front marked
    with open(out.with_suffix(".csv")) as f:
        table = list(csv.DictReader(f))
    assert [int(t["index"]) for t in table] == list(range(12))
    assert {t["variant"] for t in table if t["pareto"] == "true"} == set(result["pareto"])
    assert cheapest["variant"] in result["pareto"]


def test_serial_and_parallel_give_the_same_rows(tmp_path, sweep_file):
    for workers in ("1", "2"):
        r = karpy("sweep", ARM, "--vary", str(sweep_file), "--out", str(tmp_path / f"w{workers}"),
                  "--workers", workers, "-q")
        assert r.exit_code == 0, r.output
    one = sorted(rows_of(tmp_path / "w1.jsonl"), key=lambda r: r["index"])
    two = sorted(rows_of(tmp_path / "w2.jsonl"), key=lambda r: r["index"])
    assert one == two


def test_an_interrupted_sweep_resumes(tmp_path, sweep_file):
    out = tmp_path / "out"
    assert karpy("sweep", ARM, "--vary", str(sweep_file), "--out", str(out), "--workers", "1", "-q").exit_code == 0
    full = out.with_suffix(".jsonl").read_text().splitlines(keepends=True)
    # killed while writing the 6th row: five rows and half a line
    out.with_suffix(".jsonl").write_text("".join(full[:5]) + full[5][:40])
    r = karpy("sweep", ARM, "--vary", str(sweep_file), "--out", str(out), "--workers", "2", "-q")
    assert r.exit_code == 0, r.output
    assert "5 of 12 variant(s) were already in" in r.stderr
    again = rows_of(out.with_suffix(".jsonl"))
    assert len(again) == 12
    assert sorted(again, key=lambda r: r["index"]) == sorted((json.loads(x) for x in full), key=lambda r: r["index"])
    # run once more: nothing to do
    r = karpy("sweep", ARM, "--vary", str(sweep_file), "--out", str(out), "-q")
    assert "12 of 12" in r.stderr and len(rows_of(out.with_suffix(".jsonl"))) == 12


def test_rows_of_another_sweep_are_not_mixed_in(tmp_path, sweep_file):
    out = tmp_path / "out"
    assert karpy("sweep", ARM, "--vary", str(sweep_file), "--out", str(out), "--workers", "1", "-q").exit_code == 0
    r = karpy("sweep", ARM, "--vary", str(sweep_file), "--out", str(out), "--until", "2h", "-q")
    assert r.exit_code == 2 and "of another sweep" in r.stderr and "Traceback" not in r.output


def test_listed_variants_and_patch_axes(tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "nodePools": ["default-demo"],
        "axes": {
            "capacityTypes": [["on-demand"], ["spot"]],
            "limits": [
                {"name": "one-cpu", "patches": [{"target": {"kind": "NodePool", "name": "default-demo"},
                                                  "jsonPatch": [{"op": "replace", "path": "/spec/limits/cpu",
                                                                 "value": "1"}]}]},
                {"name": "wide", "patches": [{"target": {"kind": "NodePool", "name": "default-demo"},
                                               "merge": {"spec": {"limits": {"cpu": "1000"}}}}]},
            ],
        },
        "variants": [{"capacityTypes": ["spot"], "limits": "one-cpu"}, {"capacityTypes": ["spot"], "limits": "wide"}],
    }))
    out = tmp_path / "out"
    r = karpy("sweep", ARM, "--vary", str(sweep), "--out", str(out), "--workers", "1", "-q")
    assert r.exit_code == 0, r.output
    rows = sorted(rows_of(out.with_suffix(".jsonl")), key=lambda r: r["index"])
    assert [r["variant"] for r in rows] == ["capacityTypes=spot,limits=one-cpu", "capacityTypes=spot,limits=wide"]
    assert rows[0]["podsPending"] > 0 and rows[1]["podsPending"] == 0  # a 1-CPU limit cannot hold 4 CPUs of pods


@pytest.mark.parametrize("sweep, says", [
    ({"axes": {"colour": ["red"]}}, "axes.colour[0]"),
    ({"axes": {"consolidationPolicy": ["Sometimes"]}}, "consolidationPolicy"),
    ({"axes": {"capacityTypes": [["spot"]]}, "nodePools": ["missing"]}, "no NodePool to change"),
    ({"axes": {"capacityTypes": [["spot"]]}, "variants": [{"architectures": ["arm64"]}]}, "variants[0]"),
    ({"axes": []}, "axes"),
    ({"axes": {"families": [["D"]]}, "extra": 1}, "extra"),
])
def test_bad_sweep_files_exit_2_naming_the_file_and_field(tmp_path, sweep, says):
    f = tmp_path / "sweep.yaml"
    f.write_text(yaml.safe_dump(sweep))
    r = karpy("sweep", ARM, "--vary", str(f), "--out", str(tmp_path / "out"), "-q")
    assert r.exit_code == 2, r.output
    assert str(f) in r.stderr and says in r.stderr and "Traceback" not in r.output
    assert not (tmp_path / "out.jsonl").exists()  # nothing ran


def test_pareto_front_of_cost_against_evictions():
    def row(i, cost, evicted, pending=0):
        return {"index": i, "key": str(i), "costPerHour": cost, "podsEvicted": evicted, "podsPending": pending}

    rows = [row(0, 1.0, 0), row(1, 0.5, 3), row(2, 0.8, 3), row(3, 0.6, 1), row(4, 0.1, 0, pending=2),
            row(5, 0.5, 3)]
    assert [r["index"] for r in pareto(rows)] == [1, 5, 3, 0]  # 2 is beaten by 3; 4 leaves pods pending


def test_sweep_plot_highlights_the_front(tmp_path, sweep_file):
    pytest.importorskip("matplotlib")
    fig = tmp_path / "sweep.svg"
    r = karpy("sweep", ARM, "--vary", str(sweep_file), "--out", str(tmp_path / "out"), "--workers", "1", "-q",
              "--plot", str(fig))
    assert r.exit_code == 0, r.output
    text = fig.read_text()
    assert "Pareto front" in text and "capacityTypes=spot" in text
