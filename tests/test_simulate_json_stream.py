"""`karpy simulate -o json` writes its result as it renders it (karpy.simulator.output.write_json): the same bytes
as the result rendered whole, however the items fall into chunks."""

from __future__ import annotations

import io
import json
from pathlib import Path

from click.testing import CliRunner

from karpy.api.loader import load_documents
from karpy.cli import main
from karpy.simulator.output import render_json_bytes, write_json
from karpy.simulator.sim import Simulation

ROOT = Path(__file__).resolve().parents[1]


def _sim(example: str) -> Simulation:
    loaded = load_documents([str(ROOT / "examples" / example)])
    assert not loaded.errors
    sim = Simulation(loaded.documents, until=3600.0)
    sim.run()
    return sim


def test_written_json_is_the_rendered_json_byte_for_byte():
    sim = _sim("consolidation-policies")
    whole = render_json_bytes(sim)
    assert len(json.loads(whole)["items"]) > 10
    for chunk in (1, 3, 1000):
        out = io.BytesIO()
        write_json(sim, out, chunk=chunk)
        assert out.getvalue() == whole


def test_cli_json_output_is_the_rendered_result():
    example = ROOT / "examples" / "aks-multiarch-arm64"
    r = CliRunner().invoke(main, ["simulate", str(example), "-o", "json", "-q"])
    assert r.exit_code == 0, r.output
    items = json.loads(r.stdout_bytes)["items"]
    summary = next(i for i in items if i["kind"] == "SimulationSummary")["status"]
    assert summary["pods"]["pending"] == 0 and summary["pods"]["bound"] == summary["pods"]["total"] > 0
    assert r.stdout_bytes == render_json_bytes(_sim("aks-multiarch-arm64"))
