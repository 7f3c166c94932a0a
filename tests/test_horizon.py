"""`karpy simulate --until`: a horizon. Time advances to it through expiry, budget windows and
do-not-disrupt durations even when nothing else happens, quickly (quiet stretches are skipped), and
the decisions are those of a loop that fires every periodic pass."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from karpy.api.loader import load_documents
from karpy.cli import main
from karpy.simulator.output import render_json
from karpy.simulator.sim import Simulation

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
START = "2026-01-01T00:00:00Z"

KWOK = """
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  disruption: {consolidateAfter: %(consolidate_after)s}
  template:
    spec:
      expireAfter: %(expire_after)s
      requirements:
      - {key: kubernetes.io/arch, operator: In, values: [amd64]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      - {key: karpenter.kwok.sh/instance-family, operator: In, values: [c]}
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"""


def _ts(s: str | None) -> float:
    assert s is not None
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


def _hours(s: str | None) -> float:
    return (_ts(s) - _ts(START)) / 3600


def _simulate(tmp_path: Path, text: str, *args: str) -> dict:
    f = tmp_path / "in.yaml"
    f.write_text(text)
    r = CliRunner().invoke(main, ["simulate", str(f), "-o", "json", *args])
    assert r.exit_code == 0, r.output
    return next(i for i in json.loads(r.stdout)["items"] if i["kind"] == "SimulationSummary")["status"]


def test_expire_after_fires_before_the_horizon(tmp_path):
    summary = _simulate(tmp_path, KWOK % {"consolidate_after": "Never", "expire_after": "720h"}, "--until", "800h")
    assert _hours(summary["end"]) == 800
    expired = [c for c in summary["nodeClaims"] if c["disruptionReason"] == "Expired"]
    assert expired, summary["nodeClaims"]
    for c in expired:
        assert _ts(c["deletedAt"]) - _ts(c["createdAt"]) >= 720 * 3600
        assert _hours(c["deletedAt"]) < 721
    # the pods moved to replacements launched at expiry, and all are bound at the horizon
    assert any(_hours(c["createdAt"]) >= 720 and c["deletedAt"] is None for c in summary["nodeClaims"])
    assert summary["pods"]["pending"] == 0
    assert {d["reason"] for d in summary["disruptions"]} == {"Expired"}


def test_without_until_the_run_stops_once_settled(tmp_path):
    text = KWOK % {"consolidate_after": "Never", "expire_after": "720h"}
    summary = _simulate(tmp_path, text)
    assert _hours(summary["end"]) < 1
    assert not summary["disruptions"]
    settled = _simulate(tmp_path, text, "--until", "800h", "--settle")
    assert settled["end"] == summary["end"] and not settled["disruptions"]


def _run(paths: list[str], until_h: float, jump: bool) -> dict:
    sim = Simulation(load_documents(paths).documents, until=until_h * 3600, horizon=True)
    sim.jump_quiet = jump
    sim.run()
    return next(i for i in json.loads(render_json(sim))["items"] if i["kind"] == "SimulationSummary")["status"]


@pytest.mark.parametrize("example,until_h", [("tshirt-budgets", 10), ("drift-arm64-to-amd64", 3)])
def test_skipping_quiet_stretches_decides_as_polling_every_period(example, until_h):
    """Budget windows that open and close (tshirt-budgets: no disruption on weekdays 09:00-17:00) and a
    drift after a quiet hour: the same NodeClaims, disruptions and times with and without the skips."""
    skipped = _run([str(EXAMPLES / example)], until_h, jump=True)
    polled = _run([str(EXAMPLES / example)], until_h, jump=False)
    assert skipped == polled
    assert skipped["disruptions"]


def test_do_not_disrupt_duration_runs_out_in_a_quiet_cluster(tmp_path):
    """A pod protected for 48h holds its underutilized node until then; the consolidation follows the
    protection's end, at the same instant whether or not the quiet hours are skipped."""
    text = KWOK % {"consolidate_after": "1m", "expire_after": "Never"} + """
---
apiVersion: v1
kind: Pod
metadata:
  name: guarded
  namespace: default
  annotations: {karpenter.sh/do-not-disrupt: 48h}
spec:
  containers: [{name: c, image: busybox, resources: {requests: {cpu: 100m, memory: 64Mi}}}]
---
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: scale-down}
spec:
  steps:
  - advance: 10m
  - scale: {kind: Deployment, namespace: default, name: web, replicas: 0}
"""
    f = tmp_path / "in.yaml"
    f.write_text(text)
    skipped = _run([str(f)], 60, jump=True)
    polled = _run([str(f)], 60, jump=False)
    assert skipped == polled
    guarded_claims = [d for d in skipped["disruptions"] if d["outcome"] == "succeeded"
                      and _hours(d["startedAt"]) >= 48]
    assert guarded_claims, skipped["disruptions"]
    assert all(_hours(d["startedAt"]) < 48.1 for d in guarded_claims)


def test_a_month_of_quiet_is_skipped_not_polled(tmp_path):
    """800 simulated hours of a settled cluster cost a handful of passes, not one every 10 seconds."""
    docs = load_documents([str(EXAMPLES / "aks-multiarch-arm64")]).documents
    sim = Simulation(docs, until=800 * 3600, horizon=True)
    sim.run()
    assert sim.now - sim.start == 800 * 3600
    assert sim.mgr.reconciles < 5_000  # every 10 s for 800 h would be 288,000 disruption passes alone


def test_scenario_yaml_is_unchanged_by_a_horizon(tmp_path):
    """A Scenario's own steps run at their times; after the last step the horizon carries on."""
    text = KWOK % {"consolidate_after": "Never", "expire_after": "Never"} + yaml.safe_dump(
        {"apiVersion": "karpy.dev/v1alpha1", "kind": "Scenario", "metadata": {"name": "s"},
         "spec": {"steps": [{"advance": "5h"}, {"scale": {"kind": "Deployment", "namespace": "default",
                                                          "name": "web", "replicas": 6}}]}},
        explicit_start=True)
    summary = _simulate(tmp_path, text, "--until", "24h")
    assert _hours(summary["end"]) == 24
    late = [c for c in summary["nodeClaims"] if _hours(c["createdAt"]) >= 5]
    assert late and all(_hours(c["createdAt"]) < 5.01 for c in late)
