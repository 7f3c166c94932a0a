"""What a person reads from `karpy simulate` (-o table): it fits the width it is given, shows text as
written (no markup), tells NodeClaims apart, counts pods the same way everywhere, and says why pods
are pending and why nodes were not disrupted."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from karpy.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")

KWOK_CLASS = """
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
"""


def _run(tmp_path: Path, text: str, *args: str) -> str:
    f = tmp_path / "in.yaml"
    f.write_text(text)
    r = CliRunner().invoke(main, ["simulate", str(f), *args])
    assert r.exit_code == 0, r.output
    return r.stdout


def _summary(tmp_path: Path, text: str, *args: str) -> dict:
    out = json.loads(_run(tmp_path, text, "-o", "json", *args))
    return next(i for i in out["items"] if i["kind"] == "SimulationSummary")["status"]


def test_a_pipe_gets_120_columns_and_every_line_fits():
    r = CliRunner().invoke(main, ["simulate", str(EXAMPLES / "tshirt-budgets")])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert max(len(x) for x in lines) <= 120
    assert max(len(x) for x in lines) > 100  # the width is used, not a narrow default


def test_nodeclaim_names_are_never_cut_to_the_same_text():
    """41 NodeClaims of one long-named NodePool: every name appears whole."""
    r = CliRunner().invoke(main, ["simulate", str(EXAMPLES / "tshirt-budgets"), "-o", "json"])
    names = [c["name"] for c in next(i for i in json.loads(r.stdout)["items"]
                                     if i["kind"] == "SimulationSummary")["status"]["nodeClaims"]]
    assert len(names) > 20
    table = CliRunner().invoke(main, ["simulate", str(EXAMPLES / "tshirt-budgets")]).stdout
    first_rows = table.split("Cost:")[0]
    for name in names:
        assert name in first_rows


def test_timestamps_are_never_split_across_lines():
    table = CliRunner().invoke(main, ["simulate", str(EXAMPLES / "tshirt-budgets")]).stdout
    assert "Disruptions" in table
    # every cell that starts a timestamp holds all of it
    for line in table.splitlines():
        for m in re.finditer(r"20\d\d-[\d-]*T?[\d:]*Z?", line):
            assert TIMESTAMP.fullmatch(m.group()), line


def test_brackets_in_messages_are_shown_as_written(tmp_path):
    """The commonest pending reason quotes requirements as `In [amd64]`; it must reach the reader."""
    text = KWOK_CLASS + """
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: arm}
spec:
  template:
    spec:
      requirements:
      - {key: kubernetes.io/arch, operator: In, values: [arm64]}
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
---
apiVersion: v1
kind: Pod
metadata: {name: x86-only}
spec:
  nodeSelector: {kubernetes.io/arch: amd64}
  containers: [{name: c, image: x, resources: {requests: {cpu: "1"}}}]
"""
    summary = _summary(tmp_path, text)
    (msg,) = [p["message"] for p in summary["pendingPods"]]
    assert "[" in msg
    table = _run(tmp_path, text)
    flat = " ".join(x.strip() for x in table.splitlines())
    for part in re.findall(r"\[[^\]]*\]", msg):
        assert part.split()[0] in flat  # the bracketed text is printed, not swallowed as markup


def test_pod_counts_agree_between_the_summary_line_and_the_pods_column():
    table = CliRunner().invoke(main, ["simulate", str(EXAMPLES / "aks-multiarch-arm64")]).stdout
    summary = re.search(r"Pods: (\d+) total, (\d+) bound, (\d+) pending \((\d+) workload: (\d+) bound; "
                        r"(\d+) DaemonSet: (\d+) bound", table)
    assert summary, table
    total, bound, pending, workload, workload_bound, daemon, daemon_bound = map(int, summary.groups())
    assert total == workload + daemon and bound == workload_bound + daemon_bound
    rows = [re.split(r"\s{2,}", x.strip()) for x in table.splitlines() if x.startswith("default-demo-")]
    pods_column = sum(int(r[9]) for r in rows)
    assert pods_column == workload_bound == 4


def test_the_cost_line_adds_up_the_live_nodeclaims(tmp_path):
    table = CliRunner().invoke(main, ["simulate", str(EXAMPLES / "aks-multiarch-arm64")]).stdout
    rows = [re.split(r"\s{2,}", x.strip()) for x in table.splitlines() if x.startswith("default-demo-")]
    prices = [Decimal(r[8]) for r in rows if r[10] == "ready"]
    assert len(prices) == 2
    cost = Decimal(re.search(r"Cost: \$([\d.]+)/hour", table).group(1))
    assert abs(sum(prices) - cost) < Decimal("0.01")


def test_limits_are_blamed_only_when_they_exclude_the_types(tmp_path):
    """Zones the catalog does not have, with limits far from reached: the pod is pending because no
    instance type is available, not because of the limits. With the limit reached, the message names
    the resource and what is left of it."""
    pool = KWOK_CLASS + """
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  limits: {cpu: "%s"}
  template:
    spec:
      requirements:
      - {key: topology.kubernetes.io/zone, operator: In, values: [%s]}
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
---
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers: [{name: c, image: x, resources: {requests: {cpu: "%s"}}}]
"""
    (p,) = _summary(tmp_path, pool % ("1000", "elsewhere-1", "1"))["pendingPods"]
    # upstream's words for a NodePool whose requirements leave no instance type (NoCompatibleInstanceTypes)
    assert "exceed limits" not in p["message"]
    assert "nodepool requirements filtered out all available instance types" in p["message"]
    (p,) = _summary(tmp_path, pool % ("500m", "test-zone-a", "100m"))["pendingPods"]
    assert "all available instance types exceed limits for nodepool (cpu remaining 500m)" in p["message"]


def test_a_missing_nodeclass_is_named(tmp_path):
    text = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      requirements: [{key: kubernetes.io/os, operator: In, values: [linux]}]
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: does-not-exist}
---
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers: [{name: c, image: x, resources: {requests: {cpu: "1"}}}]
"""
    (p,) = _summary(tmp_path, text)["pendingPods"]
    assert 'nodepool "general", nodeclass not found (KWOKNodeClass "does-not-exist")' in p["message"]


def test_a_pdb_blocked_consolidation_is_explained_in_the_table(tmp_path):
    """Two half-empty nodes would consolidate into one, but a PodDisruptionBudget allows no eviction:
    the table says which node was not disrupted, since when, and that the PDB is why."""
    text = KWOK_CLASS + """
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 1m}
  template:
    spec:
      requirements:
      - {key: karpenter.kwok.sh/instance-family, operator: In, values: [c]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      - {key: kubernetes.io/arch, operator: In, values: [amd64]}
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 8
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: x, resources: {requests: {cpu: "1"}}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  maxUnavailable: 0
  selector: {matchLabels: {app: web}}
---
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: shrink}
spec:
  steps:
  - advance: 5m
  - scale: {kind: Deployment, namespace: default, name: web, replicas: 3}
  - advance: 30m
"""
    summary = _summary(tmp_path, text)
    assert not [d for d in summary["disruptions"] if d["outcome"] == "succeeded"]
    table = _run(tmp_path, text)
    assert "Not disrupted, and why" in table
    section = table.split("Not disrupted, and why")[1]
    flat = " ".join(x.strip() for x in section.splitlines())
    assert "pdb" in flat.lower() and "default/web" in flat
    live = [c["name"] for c in summary["nodeClaims"] if c["deletedAt"] is None]
    assert any(name in section for name in live)
    assert TIMESTAMP.search(section)


@pytest.mark.parametrize("width", [80, 200])
def test_the_table_takes_the_width_it_is_given(width):
    from karpy.api.loader import load_documents
    from karpy.simulator.output import render_table
    from karpy.simulator.sim import Simulation

    sim = Simulation(load_documents([str(EXAMPLES / "aks-multiarch-arm64")]).documents)
    sim.run()
    text = render_table(sim, width=width)
    assert max(len(x) for x in text.splitlines()) <= width
    for row in (x for x in text.splitlines() if "default-demo-" in x):
        assert re.search(r"default-demo-\w{5}", row)
