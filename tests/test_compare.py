"""karpy compare: configurations side by side; the simulate result's samples; --plot figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from karpy.cli import main

ROOT = Path(__file__).resolve().parent.parent
ARM = str(ROOT / "examples" / "aks-multiarch-arm64")
AMD = str(ROOT / "examples" / "aks-multiarch-amd64")
POLICIES = str(ROOT / "examples" / "consolidation-policies")


def karpy(*args: str):
    return CliRunner().invoke(main, list(args))


def test_compare_the_workshop_on_arm64_and_amd64_shows_the_price_difference():
    r = karpy("compare", ARM, AMD, "-o", "json", "-q", "--workers", "1")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    arm, amd = data["configurations"]
    assert arm["architectures"] == {"arm64": 2} and amd["architectures"] == {"amd64": 2}
    assert arm["instanceTypes"] == {"Standard_D2pls_v6": 1, "Standard_D4pls_v6": 1}
    assert arm["costPerHour"] == 0.186 and amd["costPerHour"] == 0.2414
    (d,) = data["differences"]
    assert d["against"] == ARM and d["costPerHour"] == 0.0554
    assert d["architectures"] == {"amd64": 2, "arm64": -2}
    assert d["nodeClaims"] == 0 and d["podsPending"] == 0
    # the table says the same to a person, as in the JSON
    t = karpy("compare", ARM, AMD, "-q", "--workers", "1")
    assert t.exit_code == 0
    assert "0.2414 (+0.0554, +29.8%)" in t.stdout
    assert "+$0.0554/hour at the end (+$40.44/month)" in t.stdout


def test_compare_a_base_with_a_patch_file(tmp_path):
    spot = tmp_path / "spot.yaml"
    spot.write_text(yaml.safe_dump({"capacityTypes": ["spot"]}))
    r = karpy("compare", ARM, "--patch", str(spot), "-o", "json", "-q", "--workers", "2")
    assert r.exit_code == 0, r.output
    base, patched = json.loads(r.stdout)["configurations"]
    assert base["capacityTypes"] == {"on-demand": 2}
    assert patched["capacityTypes"] == {"spot": 2} and patched["name"] == f"{ARM} + {spot}"
    assert patched["costPerHour"] < base["costPerHour"]


def test_compare_counts_disruptions_by_reason_and_evictions():
    r = karpy("compare", ARM, POLICIES, "-o", "json", "-q", "--workers", "1")
    assert r.exit_code == 0, r.output
    _, policies = json.loads(r.stdout)["configurations"]
    assert policies["disruptionsByReason"] == {"Empty": 1, "Underutilized": 1}
    assert policies["podsEvicted"] > 0
    assert policies["nodeClaimsLaunched"] > policies["nodeClaims"]


@pytest.mark.parametrize("args, says", [
    (["compare", ARM], "at least two configurations"),
    (["compare", ARM, "/nonexistent/karpy-config"], "/nonexistent/karpy-config"),
    (["compare", ARM, AMD, "--plot", "out.jpg"], "--plot"),
    (["compare", ARM, AMD, "--until", "soon"], "--until"),
])
def test_compare_bad_input_exits_2_naming_it(args, says):
    r = karpy(*args)
    assert r.exit_code == 2, r.output
    assert says in r.stderr and "Traceback" not in r.output


def test_compare_patch_errors_name_the_file_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"consolidationPolicy": "Sometimes"}))
    r = karpy("compare", ARM, "--patch", str(bad))
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert str(bad) in r.stderr and "consolidationPolicy" in r.stderr
    bad.write_text(yaml.safe_dump({"patches": [{"target": {"kind": "NodePool", "name": "nope"}, "merge": {}}]}))
    r = karpy("compare", ARM, "--patch", str(bad))
    assert r.exit_code == 2 and "NodePool/nope is not in the base" in r.stderr


def test_simulate_samples_follow_the_run():
    r = karpy("simulate", POLICIES, "-o", "json", "-q")
    assert r.exit_code == 0
    s = json.loads(r.stdout)["items"][-1]["status"]
    samples = s["samples"]
    assert s["sampleInterval"] == "10s"
    assert samples[0]["time"] == s["start"] and samples[0]["nodeClaims"] == 0
    assert samples[-1]["time"] == s["end"] and samples[-1]["costPerHour"] == s["costPerHour"]
    live = [c for c in s["nodeClaims"] if c["deletedAt"] is None and not c["launchFailed"]]
    assert samples[-1]["nodeClaims"] == len(live)
    assert sum(p["disruptions"] for p in samples) == len(s["disruptions"])
    assert max(p["nodeClaims"] for p in samples) > len(live)  # consolidation removed nodes on the way
    # the average lies between the cheapest and the dearest moment, and below the peak for a run that scaled down
    costs = [float(p["costPerHour"]) for p in samples]
    assert min(costs) < float(s["costPerHourAverage"]) < max(costs)


def test_simulate_samples_stay_few_over_a_long_horizon():
    r = karpy("simulate", ARM, "-o", "json", "-q", "--until", "720h")
    s = json.loads(r.stdout)["items"][-1]["status"]
    assert s["sampleInterval"] == "6h0m0s" and len(s["samples"]) == 121
    # a month at $0.1860/hour after a few seconds at $0: the average is the hourly price to the cent
    assert s["costPerHour"] == "0.1860" and s["costPerHourAverage"] == "0.1860"


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<?xml"), (".html", b"<!DOCTYPE html>")])
def test_plots_are_written(tmp_path, suffix, magic):
    pytest.importorskip("matplotlib")
    out = tmp_path / f"fig{suffix}"
    r = karpy("compare", ARM, AMD, "-q", "--workers", "1", "--plot", str(out))
    assert r.exit_code == 0, r.output
    assert out.read_bytes().startswith(magic)
    if suffix != ".png":
        text = out.read_text()
        assert "<svg" in text
        # one line per configuration (the legend names both)
        assert "aks-multiarch-arm64" in text and "aks-multiarch-amd64" in text


def test_simulate_plot_marks_the_disruptions(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "run.svg"
    r = karpy("simulate", POLICIES, "-q", "--plot", str(out))
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "disruption: Empty" in text and "disruption: Underutilized" in text
