"""karpy's ConsolidationOptimizer gate (docs/feature-gates.md, karpy/disruption/optimizer.py): off by default
(upstream's decisions); on, a model of the whole cluster proposes which nodes to replace, the scheduling
simulation confirms, the disruption queue carries it out within budgets, PDBs and do-not-disrupt."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from karpy.cli import main
from karpy.controller.settings import SettingsError, parse_feature_gates
from karpy.disruption import highs, optimizer

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "feature-gates" / "consolidation-optimizer"
GATE = "ConsolidationOptimizer"

pytestmark = pytest.mark.skipif(highs.missing() is not None, reason="the optional solver (karpy[optimizer]) is not installed")


def _copy(tmp_path: Path, on: bool) -> Path:
    d = tmp_path / "example"
    shutil.copytree(EXAMPLE, d, ignore=shutil.ignore_patterns("*.md"))
    text = (d / "scenario.yaml").read_text()
    assert f"{GATE}: false" in text
    (d / "scenario.yaml").write_text(text.replace(f"{GATE}: false", f"{GATE}: {str(on).lower()}"))
    return d


def _status(d: Path) -> dict:
    r = CliRunner().invoke(main, ["simulate", str(d), "-o", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["items"][-1]["status"]


def _patch_manifests(d: Path, old: str, new: str) -> None:
    text = (d / "manifests.yaml").read_text()
    assert old in text
    (d / "manifests.yaml").write_text(text.replace(old, new))


def test_off_by_default_the_half_used_c_8x_stays():
    s = _status(EXAMPLE)
    assert [c["instanceType"] for c in s["nodeClaims"]] == ["c-8x-amd64-linux"]
    assert s["disruptions"] == [] and s["costPerHour"] == "0.2172"
    assert "featureGates" not in s


def test_on_the_c_8x_is_replaced_by_a_cheaper_pair_queue_first_and_both_costs_shown(tmp_path):
    s = _status(_copy(tmp_path, True))
    assert s["pods"]["bound"] == s["pods"]["total"] == 4
    live = sorted(c["instanceType"] for c in s["nodeClaims"] if c["deletedAt"] is None)
    assert live == ["c-2x-amd64-linux", "c-4x-amd64-linux"]
    assert s["costPerHour"] == "0.1629"
    assert s["featureGates"] == {"karpy": [GATE], "costPerHourUpstream": "0.2172", "savingPerHour": "0.0543"}
    [d] = s["disruptions"]
    assert d["method"] == "optimizer" and d["outcome"] == "succeeded" and len(d["candidates"]) == 1
    claims = {c["name"]: c for c in s["nodeClaims"]}
    gone = claims[d["candidates"][0]]
    for name in d["replacements"]:  # the replacements were up before the candidate was deleted
        assert claims[name]["createdAt"] < gone["deletedAt"]


def test_the_same_input_gives_the_same_decisions(tmp_path):
    a = _status(_copy(tmp_path / "a", True))["disruptions"]
    b = _status(_copy(tmp_path / "b", True))["disruptions"]
    strip = [{k: v for k, v in d.items() if k not in ("candidates", "replacements")} for d in a]
    assert strip == [{k: v for k, v in d.items() if k not in ("candidates", "replacements")} for d in b]
    assert [len(d["replacements"]) for d in a] == [len(d["replacements"]) for d in b] == [2]


def test_a_zero_budget_blocks_it(tmp_path):
    d = _copy(tmp_path, True)
    _patch_manifests(d, "    consolidateAfter: 1m\n", "    consolidateAfter: 1m\n    budgets: [{nodes: \"0\"}]\n")
    s = _status(d)
    assert s["disruptions"] == [] and s["costPerHour"] == "0.2172"


def test_a_do_not_disrupt_pod_blocks_it(tmp_path):
    d = _copy(tmp_path, True)
    _patch_manifests(d, "    metadata: {labels: {app: app}}\n",
                     "    metadata: {labels: {app: app}, annotations: {karpenter.sh/do-not-disrupt: \"true\"}}\n")
    s = _status(d)
    assert s["disruptions"] == [] and s["costPerHour"] == "0.2172"


def test_a_blocking_pdb_blocks_it(tmp_path):
    d = _copy(tmp_path, True)
    (d / "pdb.yaml").write_text("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: app, namespace: default}\n"
                                "spec: {maxUnavailable: 0, selector: {matchLabels: {app: app}}}\n")
    s = _status(d)
    assert s["disruptions"] == [] and s["costPerHour"] == "0.2172"


def test_the_model_keeps_within_the_budget_and_removes_the_most_wasteful():
    # one type: 4 CPU for $1; three candidates of $1 each holding 1, 1 and 3.9 CPU
    demand = np.array([[1.0], [1.0], [3.9]])
    price = np.array([1.0, 1.0, 1.0])
    alloc, tprice = np.array([[4.0]]), np.array([1.0])
    plan = highs.solve(demand, price, np.zeros(3, dtype=int), np.array([3.0]), alloc, tprice)
    assert plan.remove.tolist() == [True, True, False]  # two nearly empty nodes into one new node
    assert plan.launch.tolist() == [1] and plan.objective == pytest.approx(1.0 - 2 * (1 - highs.DISRUPTION_COST))
    assert plan.waste[0] > plan.waste[2]
    one = highs.solve(demand, price, np.zeros(3, dtype=int), np.array([1.0]), alloc, tprice,
                      free=alloc - demand, free_elsewhere=np.zeros(1))
    assert one.remove.sum() <= 1  # the budget allows one node


def test_under_a_tight_budget_the_part_of_the_repacking_that_saves_most_goes_first():
    # a re-packing of four $1 nodes (two classes of pods) into new nodes; the NodePool's budget allows two
    need = np.array([[2, 0], [0, 2], [1, 1], [2, 0]], dtype=float)  # pods of each class on each node removed
    room = np.array([[2, 1], [1, 2], [4, 0]], dtype=float)  # pods of each class each new node has room for
    cost = np.concatenate([-(1 - highs.DISRUPTION_COST) * np.ones(4), [0.6, 0.6, 0.5]])
    take = highs.select(need, room, np.zeros(4, dtype=int), np.array([2.0]), cost)
    removed, new = np.flatnonzero(take[:4]).tolist(), np.flatnonzero(take[4:]).tolist()
    # both nodes holding only the first class go into the one new node with room for four of it ($2 -> $0.50);
    # every other pair needs two new nodes
    assert removed == [0, 3] and new == [2]
    # a budget of one node: the cheapest new node that holds one node's pods ($1 -> $0.50)
    take = highs.select(need, room, np.zeros(4, dtype=int), np.array([1.0]), cost)
    assert take[:4].sum() == 1 and np.flatnonzero(take[4:]).tolist() == [2]
    # no budget left, or no part that saves: nothing
    assert highs.select(need, room, np.zeros(4, dtype=int), np.array([0.0]), cost) is None
    assert highs.select(need, room, np.zeros(4, dtype=int), np.array([4.0]),
                        np.concatenate([cost[:4], [2.0, 2.0, 2.0]])) is None


def _wide_status(tmp_path: Path, replicas: int, budget: str, monkeypatch) -> dict:
    """bench/e2e.py's wide shapes (upstream's wide-deployments test), gate on, with a NodePool budget, 75 minutes."""
    import yaml

    monkeypatch.syspath_prepend(str(EXAMPLE.parents[2] / "bench"))
    import e2e

    monkeypatch.setitem(e2e.GATES, GATE, True)
    monkeypatch.setattr(e2e, "BUDGET", [budget])
    d = tmp_path / f"wide-{len(list(tmp_path.iterdir()))}"
    d.mkdir()
    (d / "workload.yaml").write_text(yaml.safe_dump_all(e2e.wide_documents(replicas), sort_keys=False))
    r = CliRunner().invoke(main, ["simulate", str(d), "-o", "json", "--until", "75m"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["items"][-1]["status"]


def test_under_a_tight_budget_the_repacking_goes_a_part_at_a_time_and_ends_cheaper(tmp_path, monkeypatch):
    # 30 Deployments of 8 replicas on about 40 nodes, scaled to half; the NodePool lets 20 % of its nodes go at once
    parts = []
    take = optimizer._next_part

    def next_part(*args):
        found = take(*args)
        if found is not None:
            parts.append((len(found.candidates), args[3]))
        return found
    monkeypatch.setattr(optimizer, "_next_part", next_part)
    s = _wide_status(tmp_path, 8, "20%", monkeypatch)
    assert s["pods"]["bound"] == s["pods"]["total"] == 120
    assert parts and all(n <= sum(budgets.values()) for n, budgets in parts)  # each part within the budget
    # the same run with the model of the whole cluster choosing which nodes to re-pack (what the gate did before)
    monkeypatch.setattr(optimizer, "_next_part", lambda *args: None)
    repack = optimizer._repack
    monkeypatch.setattr(optimizer, "_repack", lambda snapshot, chosen, memo, budgets=None, kind="":
                        None if budgets else repack(snapshot, chosen, memo, budgets, kind))
    model = _wide_status(tmp_path, 8, "20%", monkeypatch)
    assert model["pods"]["bound"] == 120
    upstream = float(s["featureGates"]["costPerHourUpstream"])
    assert float(s["costPerHour"]) < float(model["costPerHour"]) < upstream


def test_without_the_solver_the_gate_is_refused_with_a_clear_message(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "highspy", None)  # import highspy now raises ImportError
    assert "pip install 'karpy[optimizer]'" in highs.missing()
    with pytest.raises(SettingsError, match="ConsolidationOptimizer needs the HiGHS solver"):
        parse_feature_gates("--feature-gates", f"{GATE}=true")
    assert parse_feature_gates("--feature-gates", f"{GATE}=false")[GATE] is False
    r = CliRunner().invoke(main, ["simulate", str(_copy(tmp_path, True))])
    assert r.exit_code == 2
    assert "featureGates.ConsolidationOptimizer" in r.output and "karpy[optimizer]" in r.output


def _shapes(tmp_path: Path, on: bool, budget: str = "100%") -> Path:
    """Three Deployments of different shapes, spread over zones, scaled to about half after ten minutes: upstream's
    consolidation leaves nodes whose CPU and memory are out of step with their types; the re-packing fills
    nodes with the shapes together."""
    def deployment(name: str, cpu: str, mem: str) -> dict:
        sel = {"matchLabels": {"app": name}}
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
                "spec": {"replicas": 24, "selector": sel, "template": {"metadata": {"labels": {"app": name}}, "spec": {
                    "containers": [{"name": "app", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": mem}}}],
                    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                                   "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel}]}}}}
    import yaml
    docs = [
        {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": "default"}},
        {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"}, "spec": {
            "template": {"spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                                  "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                                                   {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "30s",
                           "budgets": [{"nodes": budget}]}}},
        deployment("cpu", "3500m", "2Gi"), deployment("mem", "500m", "28Gi"), deployment("mid", "1500m", "12Gi"),
        {"apiVersion": "karpy.dev/v1alpha1", "kind": "Scenario", "metadata": {"name": "shapes"}, "spec": {
            "settings": {"featureGates": {GATE: on}},
            "steps": [{"advance": "10m"},
                      {"scale": {"kind": "Deployment", "namespace": "default", "name": "cpu", "replicas": 13}},
                      {"scale": {"kind": "Deployment", "namespace": "default", "name": "mem", "replicas": 13}},
                      {"scale": {"kind": "Deployment", "namespace": "default", "name": "mid", "replicas": 13}}]}},
    ]
    d = tmp_path / f"shapes-{on}-{budget.replace('%', 'pc')}"
    d.mkdir()
    (d / "workload.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return d


def _run(d: Path) -> dict:
    r = CliRunner().invoke(main, ["simulate", str(d), "-o", "json", "--until", "40m"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_on_a_repacking_of_opposite_shapes_ends_cheaper_and_the_pods_land_where_planned(tmp_path):
    out = _run(_shapes(tmp_path, True))
    s = out["items"][-1]["status"]
    assert s["pods"]["bound"] == s["pods"]["total"] == 39
    gates = s["featureGates"]
    assert float(s["costPerHour"]) < 0.8 * float(gates["costPerHourUpstream"])
    repacks = [d for d in s["disruptions"] if d["method"] == "optimizer" and d["outcome"] == "succeeded"]
    assert repacks
    last = repacks[-1]
    claims = {i["metadata"]["name"]: i for i in out["items"] if i["kind"] == "NodeClaim"}
    nodes_of = {c["status"].get("nodeName") for n, c in claims.items() if n in last["replacements"]}
    pods = [i for i in out["items"] if i["kind"] == "Pod"]
    # every replacement the plan launched holds pods (they were placed where planned, none stayed empty)
    held = {p["spec"].get("nodeName") for p in pods}
    alive = [n for n in nodes_of if n]
    assert alive and all(n in held for n in alive)


def test_off_the_same_shapes_get_upstreams_decisions(tmp_path):
    s = _run(_shapes(tmp_path, False))["items"][-1]["status"]
    assert s["pods"]["bound"] == 39 and "featureGates" not in s
    assert all(d["method"] != "optimizer" for d in s["disruptions"])


def test_a_repacking_is_handed_over_one_replacement_at_a_time_and_saves_what_it_planned(tmp_path):
    # the replacements are filled to the brim: drained all at once, the re-created pods of the first workloads
    # would take the room planned for the last ones, which would then get NodeClaims of their own
    out = _run(_shapes(tmp_path, True))
    s = out["items"][-1]["status"]
    assert s["pods"]["bound"] == s["pods"]["total"] == 39
    claims = {c["name"]: c for c in s["nodeClaims"]}
    repacks = [d for d in s["disruptions"] if d["method"] == "optimizer"]
    assert repacks and all(d["outcome"] == "succeeded" for d in repacks)
    for d in repacks:
        planned = sum(float(claims[n]["pricePerHour"]) for n in d["candidates"]) \
            - sum(float(claims[n]["pricePerHour"]) for n in d["replacements"])
        saved = float(d["costPerHourBefore"]) - float(d["costPerHourAfter"])
        assert saved == pytest.approx(planned, abs=0.002), d
    # after the first minute every NodeClaim is a disruption's replacement: no pod was left for the provisioner
    replacements = {n for d in s["disruptions"] for n in d["replacements"]}
    assert [c["name"] for c in s["nodeClaims"] if c["createdAt"] > "2026-01-01T00:00:30Z" and c["name"] not in replacements] == []
    # the pods planned on a replacement were evicted only once it was initialized, and its candidates went last
    events = [i for i in out["items"] if i["kind"] == "Event"]
    at = lambda e: e.get("lastTimestamp") or e.get("eventTime")  # noqa: E731
    first = repacks[0]
    evicted = sorted(at(e) for e in events if e["reason"] == "Evicted" and first["startedAt"] <= at(e) <= first["finishedAt"])
    ready = max(at(e) for e in events if e["reason"] == "Initialized" and e["involvedObject"]["name"] in first["replacements"])
    gone = min(claims[n]["deletedAt"] for n in first["candidates"])
    assert evicted and ready <= evicted[0] and evicted[-1] <= gone
