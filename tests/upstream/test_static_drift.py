"""Drift of static NodePools (``spec.replicas``), simulated end to end: budgets, ``limits.nodes``, scaling and
several NodePools. karpy starts at most one static drift command per 10-second disruption pass; each replaces one
drifted node by a NodeClaim from the NodePool's current template."""

from __future__ import annotations

from datetime import datetime

from test_static_capacity import NODECLASS, alive, nodepool, scenario, simulate


def drift_steps(*pools: str, advance: str = "30m", replicas: dict[str, int] | None = None) -> str:
    """Patch each NodePool's template labels (drifting every node), optionally its replicas, then wait."""
    out = ""
    for p in pools:
        rep = f", replicas: {replicas[p]}" if replicas and p in replicas else ""
        out += f"""  - patch:
      kind: NodePool
      name: {p}
      merge: {{spec: {{template: {{metadata: {{labels: {{team: blue}}}}}}{rep}}}}}
"""
    return out + f"  - advance: {advance}\n"


def budget(nodes: str) -> str:
    return f'  disruption: {{budgets: [{{nodes: "{nodes}"}}]}}\n'


def t(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def most_at_once(disruptions: list[dict]) -> int:
    """The most drift commands of the list in flight at the same moment."""
    edges = sorted([(t(d["startedAt"]), 1) for d in disruptions] + [(t(d["finishedAt"]), -1) for d in disruptions])
    cur = best = 0
    for _, step in edges:
        cur += step
        best = max(best, cur)
    return best


def drifts(summary: dict, pool: str) -> list[dict]:
    return [d for d in summary["disruptions"] if d["nodePool"] == pool and d["reason"] == "Drifted"]


def test_a_percentage_budget_bounds_static_drift(tmp_path):
    summary, _ = simulate(tmp_path, NODECLASS, nodepool(4, extra=budget("50%")), scenario(drift_steps("static")))
    ds = drifts(summary, "static")
    assert len(ds) == 4 and all(d["outcome"] == "succeeded" for d in ds)
    assert all(d["budget"]["allowed"] == 2 for d in ds)  # 50 % of 4 nodes
    assert most_at_once(ds) <= 2
    assert len(alive(summary)) == 4


def test_each_static_nodepool_keeps_to_its_own_budget(tmp_path):
    docs = [NODECLASS, nodepool(3, extra=budget("1"), name="one"), nodepool(3, extra=budget("2"), name="two")]
    summary, _ = simulate(tmp_path, *docs, scenario(drift_steps("one", "two")))
    for pool, allowed in (("one", 1), ("two", 2)):
        ds = drifts(summary, pool)
        assert len(ds) == 3 and most_at_once(ds) <= allowed
        assert {d["budget"]["allowed"] for d in ds} == {allowed}
        assert len(alive(summary, pool)) == 3


def test_drift_proceeds_when_the_node_limit_leaves_room(tmp_path):
    summary, _ = simulate(tmp_path, NODECLASS, nodepool(3, extra="  limits: {nodes: 5}\n"),
                          scenario(drift_steps("static")))
    assert len(drifts(summary, "static")) == 3
    assert len(alive(summary)) == 3


def test_one_node_of_room_under_the_limit_drifts_one_node_at_a_time_until_all_are_replaced(tmp_path):
    summary, _ = simulate(tmp_path, NODECLASS, nodepool(3, extra="  limits: {nodes: 4}\n"),
                          scenario(drift_steps("static")))
    ds = drifts(summary, "static")
    assert len(ds) == 3 and most_at_once(ds) == 1
    for before, after in zip(ds, ds[1:]):
        assert t(after["startedAt"]) >= t(before["finishedAt"])
    assert len(alive(summary)) == 3
    # never more NodeClaims at once than the limit
    claims = summary["nodeClaims"]
    moments = sorted({t(c["createdAt"]) for c in claims})
    for m in moments:
        live = [c for c in claims if t(c["createdAt"]) <= m and (c["deletedAt"] is None or t(c["deletedAt"]) > m)]
        assert len(live) <= 4


def test_an_overscaled_nodepool_scales_down_before_it_drifts(tmp_path):
    summary, _ = simulate(tmp_path, NODECLASS, nodepool(3), scenario(drift_steps("static", replicas={"static": 2})))
    ds = drifts(summary, "static")
    removed = [c for c in summary["nodeClaims"] if c["deletedAt"] is not None and c["disruptionReason"] != "Drifted"]
    assert len(removed) == 1  # the scale-down
    assert len(ds) == 2 and all(t(d["startedAt"]) >= t(removed[0]["deletedAt"]) for d in ds)
    assert len(alive(summary)) == 2


def test_two_static_nodepools_drift_independently_each_from_its_own_template(tmp_path):
    docs = [NODECLASS, nodepool(2, name="small"), nodepool(2, name="large", instance_type="c-4x-amd64-linux")]
    summary, _ = simulate(tmp_path, *docs, scenario(drift_steps("small", "large")))
    assert len(drifts(summary, "small")) == 2 and len(drifts(summary, "large")) == 2
    assert {c["instanceType"] for c in alive(summary, "small")} == {"c-2x-amd64-linux"}
    assert {c["instanceType"] for c in alive(summary, "large")} == {"c-4x-amd64-linux"}
    assert len(alive(summary, "small")) == 2 and len(alive(summary, "large")) == 2
