"""karpy's own feature gates (docs/feature-gates.md): off by default, so decisions are upstream's; with one on,
`karpy simulate` also simulates upstream's decisions and shows both costs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from karpy.cli import main

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "feature-gates"


def _run(path: Path, *args: str):
    r = CliRunner().invoke(main, ["simulate", str(path), *args])
    assert r.exit_code == 0, r.output
    return r


def _gated(tmp_path: Path, gate: str, on: bool = True) -> Path:
    d = tmp_path / "example"
    shutil.copytree(EXAMPLE, d, ignore=shutil.ignore_patterns("zone-pinning", "*.md"))
    text = (d / "scenario.yaml").read_text()
    assert f"{gate}: false" in text or gate != "CostRefinement"
    (d / "scenario.yaml").write_text(text.replace("CostRefinement: false", f"{gate}: {str(on).lower()}"))
    return d


def _status(r) -> dict:
    return json.loads(r.stdout)["items"][-1]["status"]


def test_by_default_four_one_cpu_pods_get_one_c_8x_that_stays():
    s = _status(_run(EXAMPLE, "-o", "json"))
    claims = s["nodeClaims"]
    assert [c["instanceType"] for c in claims] == ["c-8x-amd64-linux"]
    assert claims[0]["deletedAt"] is None and s["disruptions"] == []
    assert s["end"] >= "2026-01-01T00:40:00Z"  # it stayed the whole 40 minutes
    assert s["costPerHour"] == "0.2172"
    assert "featureGates" not in s  # nothing to compare: upstream's decisions only


def test_cost_refinement_on_launches_the_cheaper_pair_and_shows_both_costs(tmp_path):
    d = _gated(tmp_path, "CostRefinement")
    s = _status(_run(d, "-o", "json"))
    assert sorted(c["instanceType"] for c in s["nodeClaims"]) == ["c-2x-amd64-linux", "c-4x-amd64-linux"]
    assert s["costPerHour"] == "0.1629"
    assert s["featureGates"] == {"karpy": ["CostRefinement"], "costPerHourUpstream": "0.2172",
                                 "savingPerHour": "0.0543"}
    table = _run(d).stdout
    assert "Cost: $0.1629/hour for 2 node(s), $118.92/month" in table
    assert "Cost with upstream's decisions (karpy gates CostRefinement off): $0.2172/hour" in table


def test_a_gate_left_off_explicitly_is_upstream(tmp_path):
    d = _gated(tmp_path, "CostRefinement", on=False)
    s = _status(_run(d, "-o", "json"))
    assert s["costPerHour"] == "0.2172" and "featureGates" not in s


@pytest.mark.parametrize("gate", ["ZonePinning"])
def test_zone_pinning_reports_both_costs(tmp_path, gate):
    d = tmp_path / "zp"
    shutil.copytree(EXAMPLE / "zone-pinning", d)
    text = (d / "scenario.yaml").read_text()
    assert f"{gate}: false" in text
    (d / "scenario.yaml").write_text(text.replace(f"{gate}: false", f"{gate}: true"))
    s = _status(_run(d, "-o", "json"))
    assert s["featureGates"]["karpy"] == [gate]
    assert float(s["featureGates"]["costPerHourUpstream"]) - float(s["costPerHour"]) == \
        pytest.approx(float(s["featureGates"]["savingPerHour"]), abs=1e-4)
