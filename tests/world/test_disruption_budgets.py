"""PodDisruptionBudget status as Kubernetes' disruption controller computes it (karpy/simulator/disruption_budgets.py),
and the drains that read it, from the world controller up to `karpy simulate`.

Reference: kubernetes pkg/controller/disruption/disruption.go (getExpectedPodCount, getExpectedScale,
countHealthyPods, updatePdbStatus, failSafe).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
import yaml
from click.testing import CliRunner

from controllers.harness import Harness, nodepool
from karpy.cli import main
from karpy.kube.memory import MemoryAPI
from karpy.runtime.clock import SimClock
from karpy.runtime.manager import Manager
from karpy.simulator.disruption_budgets import DisruptionBudgets

T0 = 1767225600.0


class PdbWorld:
    """A manager running only the disruption controller stand-in; tests create workloads and pods by hand."""

    def __init__(self) -> None:
        self.clock = SimClock(T0)
        self.api = MemoryAPI(self.clock)
        self.mgr = Manager(self.api, self.clock)
        self.mgr.add(DisruptionBudgets(self.mgr, self.api, self.clock))
        self.mgr.start()
        self._n = 0

    def workload(self, kind: str, name: str, replicas: int, owner: dict | None = None) -> dict:
        meta: dict = {"name": name, "namespace": "default"}
        if owner is not None:
            meta["ownerReferences"] = [ref(owner)]
        obj = self.api.create({"apiVersion": "apps/v1", "kind": kind, "metadata": meta,
                               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}}})
        self.mgr.drain()
        return obj

    def deployment(self, name: str, replicas: int) -> tuple[dict, dict]:
        d = self.workload("Deployment", name, replicas)
        rs = self.workload("ReplicaSet", f"{name}-abc", replicas, owner=d)
        return d, rs

    def pods(self, n: int, labels: dict, owner: dict | None = None, ready: bool = True) -> list[str]:
        names = []
        for _ in range(n):
            self._n += 1
            name = f"p{self._n}"
            meta: dict = {"name": name, "namespace": "default", "labels": dict(labels)}
            if owner is not None:
                meta["ownerReferences"] = [ref(owner)]
            self.api.create({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                             "spec": {"containers": [{"name": "c", "image": "i"}]}})
            self.api.bind(name, "default", "node-1")
            self.set_ready(name, ready)
            names.append(name)
        self.mgr.drain()
        return names

    def set_ready(self, name: str, ready: bool) -> None:
        self.api.patch("Pod", name, {"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True" if ready else "False"}]}}, "default", subresource="status")
        self.mgr.drain()

    def pdb(self, name: str, selector: dict, **spec) -> None:
        s = {"selector": {"matchLabels": dict(selector)}}
        s.update({("minAvailable" if k == "min_available" else "maxUnavailable"): v for k, v in spec.items()})
        self.api.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                         "metadata": {"name": name, "namespace": "default"}, "spec": s})
        self.mgr.drain()

    def advance(self, seconds: float) -> None:
        """Move the clock on, firing the timers due by then (requeued reconciles)."""
        end = self.clock.now() + seconds
        while (nt := self.clock.next_time()) is not None and nt <= end:
            batch = self.clock.pop_next_batch()
            self.clock.set(nt)
            for t in batch:
                t.fn()
            self.mgr.drain()
        self.clock.set(end)
        self.mgr.drain()

    def status(self, name: str) -> dict:
        self.mgr.drain()
        return self.api.get("PodDisruptionBudget", name, "default").get("status") or {}

    def counts(self, name: str) -> tuple[int, int, int, int]:
        st = self.status(name)
        return st["expectedPods"], st["desiredHealthy"], st["currentHealthy"], st["disruptionsAllowed"]


def ref(obj: dict) -> dict:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True}


@pytest.fixture
def w() -> PdbWorld:
    return PdbWorld()


def test_max_unavailable_counts_the_deployments_scale(w):
    """getExpectedScale: pods of a ReplicaSet a Deployment owns count as the Deployment's replicas."""
    _, rs = w.deployment("web", 8)
    w.pods(8, {"app": "web"}, rs)
    w.pdb("web", {"app": "web"}, max_unavailable=1)
    assert w.counts("web") == (8, 7, 8, 1)
    st = w.status("web")
    (c,) = st["conditions"]
    assert (c["type"], c["status"], c["reason"]) == ("DisruptionAllowed", "True", "SufficientPods")
    assert st["observedGeneration"] == 1


def test_evicted_pods_do_not_shrink_expected_pods(w):
    """A Deployment of 8 whose pods are evicted keeps expectedPods 8: the budget is against the scale."""
    _, rs = w.deployment("web", 8)
    names = w.pods(8, {"app": "web"}, rs)
    w.pdb("web", {"app": "web"}, max_unavailable=1)
    w.api.evict(names[0], "default")
    assert w.counts("web") == (8, 7, 7, 0)
    with pytest.raises(Exception):
        w.api.evict(names[1], "default")
    (c,) = w.status("web")["conditions"]
    assert (c["status"], c["reason"]) == ("False", "InsufficientPods")


def test_a_rollout_with_two_replicasets_counts_the_deployment_once(w):
    d, rs1 = w.deployment("web", 4)
    rs2 = w.workload("ReplicaSet", "web-def", 2, owner=d)
    w.pods(2, {"app": "web"}, rs1)
    w.pods(2, {"app": "web"}, rs2)
    w.pdb("web", {"app": "web"}, max_unavailable=1)
    assert w.counts("web") == (4, 3, 4, 1)


def test_integer_min_available_uses_the_pod_count(w):
    """minAvailable as an integer: expectedPods is the number of pods the selector matches."""
    _, rs = w.deployment("web", 8)
    w.pods(6, {"app": "web"}, rs)
    w.pdb("web", {"app": "web"}, min_available=4)
    assert w.counts("web") == (6, 4, 6, 2)


@pytest.mark.parametrize("replicas,percent,desired", [(8, "50%", 4), (5, "50%", 3), (3, "10%", 1), (10, "100%", 10)])
def test_percentage_min_available_rounds_up_against_the_scale(w, replicas, percent, desired):
    _, rs = w.deployment("web", replicas)
    w.pods(replicas, {"app": "web"}, rs)
    w.pdb("web", {"app": "web"}, min_available=percent)
    assert w.counts("web") == (replicas, desired, replicas, replicas - desired)


@pytest.mark.parametrize("value,desired", [(0, 7), (2, 5), ("25%", 5), ("10%", 6), ("100%", 0)])
def test_max_unavailable_as_int_and_percent(w, value, desired):
    """maxUnavailable percentages round up (GetScaledValueFromIntOrPercent(..., true)): 25% of 7 is 2."""
    _, rs = w.deployment("web", 7)
    w.pods(7, {"app": "web"}, rs)
    w.pdb("web", {"app": "web"}, max_unavailable=value)
    assert w.counts("web") == (7, desired, 7, 7 - desired)


def test_statefulset_scale(w):
    sts = w.workload("StatefulSet", "db", 3)
    w.pods(3, {"app": "db"}, sts)
    w.pdb("db", {"app": "db"}, max_unavailable=1)
    assert w.counts("db") == (3, 2, 3, 1)


def test_scaling_the_owner_updates_the_budget(w):
    d, rs = w.deployment("web", 4)
    w.pods(4, {"app": "web"}, rs)
    w.pdb("web", {"app": "web"}, max_unavailable=1)
    assert w.counts("web")[0] == 4
    w.api.scale("Deployment", "web", "default", 6)
    assert w.counts("web") == (6, 5, 4, 0)


def test_several_pdbs_over_one_pod_each_count_it(w):
    _, rs = w.deployment("web", 4)
    w.pods(4, {"app": "web", "tier": "fe"}, rs)
    w.pdb("by-app", {"app": "web"}, max_unavailable=1)
    w.pdb("by-tier", {"tier": "fe"}, min_available=2)
    assert w.counts("by-app") == (4, 3, 4, 1)
    assert w.counts("by-tier") == (4, 2, 4, 2)


def test_pods_matching_no_pdb_do_not_count(w):
    _, rs = w.deployment("web", 4)
    w.pods(4, {"app": "web"}, rs)
    w.pods(3, {"app": "other"}, rs)
    w.pdb("web", {"app": "web"}, min_available=1)
    assert w.counts("web")[0] == 4
    w.pdb("nothing", {"app": "nobody"}, max_unavailable=1)
    assert w.counts("nothing") == (0, 0, 0, 0)


def test_unready_pods_are_not_healthy(w):
    """countHealthyPods: only Ready pods count."""
    _, rs = w.deployment("web", 4)
    names = w.pods(4, {"app": "web"}, rs)
    w.pdb("web", {"app": "web"}, max_unavailable=1)
    w.set_ready(names[0], False)
    assert w.counts("web") == (4, 3, 3, 0)
    w.set_ready(names[0], True)
    assert w.counts("web") == (4, 3, 4, 1)


def test_a_bare_pod_is_unmanaged_healthy_but_not_expected(w):
    """getExpectedScale (Kubernetes 1.26+): a pod with no controller is "unmanaged" -- skipped from expectedPods
    (with an UnmanagedPods warning), still counted by countHealthyPods; the sync does not fail."""
    _, rs = w.deployment("web", 2)
    w.pods(2, {"app": "web"}, rs)
    w.pods(1, {"app": "web"})
    w.pdb("web", {"app": "web"}, max_unavailable=1)
    st = w.status("web")
    assert w.counts("web") == (2, 1, 3, 2)
    (c,) = st["conditions"]
    assert (c["type"], c["status"], c["reason"]) == ("DisruptionAllowed", "True", "SufficientPods")


def test_only_bare_pods_under_a_percentage_expect_nothing_and_allow_nothing(w):
    """updatePdbStatus: with expectedPods 0 no disruption is allowed, however many pods are healthy."""
    w.pods(3, {"app": "solo"})
    w.pdb("solo", {"app": "solo"}, max_unavailable="50%")
    assert w.counts("solo") == (0, 0, 3, 0)


def test_a_pod_whose_controller_has_no_scale_fails_the_sync(w):
    """failSafe: a pod controlled by something without a scale (here a Job) makes the expected count
    unknowable; DisruptionAllowed=False/SyncFailed, 0 allowed."""
    job = w.api.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "batch", "namespace": "default"},
                        "spec": {"parallelism": 2, "template": {"spec": {"restartPolicy": "Never", "containers": []}}}})
    w.pods(2, {"app": "web"}, job)
    w.pdb("web", {"app": "web"}, max_unavailable=1)
    st = w.status("web")
    assert st["disruptionsAllowed"] == 0
    (c,) = st["conditions"]
    assert (c["type"], c["status"], c["reason"]) == ("DisruptionAllowed", "False", "SyncFailed")
    assert c["message"].startswith("found no controllers for pod")


def test_a_bare_pod_under_integer_min_available_is_fine(w):
    w.pods(3, {"app": "solo"})
    w.pdb("solo", {"app": "solo"}, min_available=2)
    assert w.counts("solo") == (3, 2, 3, 1)


def test_a_deleted_pod_counts_in_expected_pods_while_it_would_be_terminating(w):
    """Kubernetes lists an evicted pod (terminating) for its grace period, so getExpectedScale still counts its
    controller. karpy deletes pods at once: without keeping the controller for that long, a Deployment whose
    every pod was just evicted dropped out of expectedPods and the PDB allowed evictions Kubernetes refuses
    (found by tests/test_safety.py: 1 + 7 pods of two Deployments under maxUnavailable 2 lost 4)."""
    _, one = w.deployment("one", 1)
    _, many = w.deployment("many", 3)
    (solo,) = w.pods(1, {"tier": "front"}, one)
    w.pods(3, {"tier": "front"}, many)
    w.pdb("front", {"tier": "front"}, max_unavailable=1)
    assert w.counts("front") == (4, 3, 4, 1)
    w.api.delete("Pod", solo, "default")  # evicted; its ReplicaSet has not made a new one yet
    assert w.counts("front") == (4, 3, 3, 0)
    w.advance(29)
    assert w.counts("front") == (4, 3, 3, 0)
    w.advance(2)  # its grace period (30 s) is over: only controllers of listed pods count
    assert w.counts("front") == (3, 2, 3, 1)


def test_observed_generation_follows_spec_changes(w):
    _, rs = w.deployment("web", 4)
    w.pods(4, {"app": "web"}, rs)
    w.pdb("web", {"app": "web"}, max_unavailable=1)
    w.api.patch("PodDisruptionBudget", "web", {"spec": {"maxUnavailable": 2}}, "default")
    assert w.api.get("PodDisruptionBudget", "web", "default")["metadata"]["generation"] == 2
    st = w.status("web")
    assert st["observedGeneration"] == 2 and st["disruptionsAllowed"] == 2


# --- drains through the world controllers ---------------------------------------------------------------


def _deployment(name: str, replicas: int, cpu: str = "1") -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "app:1",
                                                           "resources": {"requests": {"cpu": cpu}}}]}}}}


def _pdb(name: str, **spec) -> dict:
    s: dict = {"selector": {"matchLabels": {"app": name}}}
    s.update({("minAvailable" if k == "min_available" else "maxUnavailable"): v for k, v in spec.items()})
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "default"},
            "spec": s}


def test_a_drained_deployment_keeps_its_expected_pods_throughout():
    """Harness + world: while Karpenter drains a drifted node, the PDB's expectedPods stays at the Deployment's 8
    and no more than one pod is ever unavailable."""
    h = Harness(world=True)
    h.setup(nodepool())
    h.create(_deployment("web", 8), _pdb("web", max_unavailable=1))
    h.run_for(60)
    assert h.get("PodDisruptionBudget", "web", "default")["status"]["currentHealthy"] == 8
    h.patch("NodePool", "default", {"spec": {"template": {"metadata": {"labels": {"rev": "2"}}}}})
    seen = []
    for _ in range(120):
        h.run_for(1)
        st = h.get("PodDisruptionBudget", "web", "default")["status"]
        seen.append((st["expectedPods"], st["currentHealthy"]))
    assert {e for e, _ in seen} == {8}
    assert min(c for _, c in seen) >= 7
    assert len(h.events("Evicted")) == 8


# --- end to end through `karpy simulate` -------------------------------------------------------------

KWOK = [
    {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": "default"}},
]


def _nodepool(family: str = "c", expire_after: str | None = None) -> dict:
    np = nodepool(family=(family,))
    if expire_after:
        np["spec"]["template"]["spec"]["expireAfter"] = expire_after
    return np


def _simulate(tmp_path, docs: list[dict], *args: str) -> list[dict]:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    r = CliRunner().invoke(main, ["simulate", str(path), "-o", "json", *args])
    assert r.exit_code == 0, (r.stderr, r.exception)
    return json.loads(r.stdout)["items"]


def _t(ts: str) -> float:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


def _max_unavailable(items: list[dict], app: str, since: float) -> tuple[int, int]:
    """The most pods of ``app`` evicted and not yet replaced at any point, walking the Events in the order the
    API server recorded them: +1 per Evicted, -1 per Scheduled pod created after ``since`` (a replacement); and
    the number of evictions. Replacement pods' creation times must not precede the evictions they answer."""
    events = sorted((i for i in items if i["kind"] == "Event"), key=lambda e: int(e["metadata"]["resourceVersion"]))
    created = {p["metadata"]["name"]: _t(p["metadata"]["creationTimestamp"]) for p in items if p["kind"] == "Pod"}
    out = worst = evictions = 0
    eviction_times: list[float] = []
    for e in events:
        name = e["involvedObject"].get("name", "")
        if not name.startswith(app + "-"):
            continue
        if e["reason"] == "Evicted":
            out += 1
            evictions += 1
            eviction_times.append(_t(e["firstTimestamp"]))
        elif e["reason"] == "Scheduled" and created.get(name, 0) >= since:
            out -= 1
            assert eviction_times and created[name] >= eviction_times[0]
        worst = max(worst, out)
    return worst, evictions


def test_simulate_drift_respects_max_unavailable_one(tmp_path):
    """A Deployment of 8 under maxUnavailable: 1 on a node whose NodePool requirement changes (drift): the drain
    never has more than one pod evicted and not yet replaced; every pod ends up running on the new family."""
    scenario = {"apiVersion": "karpy.dev/v1alpha1", "kind": "Scenario", "metadata": {"name": "drift"},
                "spec": {"steps": [
                    {"advance": "5m"},
                    {"patch": {"kind": "NodePool", "name": "default", "merge": {"spec": {"template": {"spec": {
                        "requirements": _nodepool("m")["spec"]["template"]["spec"]["requirements"]}}}}}},
                    {"advance": "30m"}]}}
    items = _simulate(tmp_path, KWOK + [_nodepool("c"), _deployment("web", 8), _pdb("web", max_unavailable=1), scenario])
    worst, evictions = _max_unavailable(items, "web", since=T0 + 300)
    assert evictions == 8
    assert worst == 1
    ev = sorted(_t(e["firstTimestamp"]) for e in items if e["kind"] == "Event" and e["reason"] == "Evicted")
    ready = sorted(_t(c["lastTransitionTime"]) for p in items if p["kind"] == "Pod"
                   for c in p["status"]["conditions"] if c["type"] == "Ready")
    # the k-th eviction comes no earlier than the (k-1)-th replacement was Ready
    assert all(ev[k] >= ready[k - 1] for k in range(1, len(ev)))
    pods = [p for p in items if p["kind"] == "Pod"]
    nodes = {n["metadata"]["name"]: n for n in items if n["kind"] == "Node"}
    assert len(pods) == 8
    assert {nodes[p["spec"]["nodeName"]]["metadata"]["labels"]["karpenter.kwok.sh/instance-family"] for p in pods} == {"m"}
    (pdb,) = [i for i in items if i["kind"] == "PodDisruptionBudget"]
    assert pdb["status"]["expectedPods"] == 8


def test_simulate_expiry_respects_min_available_half(tmp_path):
    """minAvailable: 50% of 8 with expireAfter: the expired node never leaves fewer than 4 pods available."""
    items = _simulate(tmp_path, KWOK + [_nodepool("c", expire_after="10m"), _deployment("web", 8),
                                        _pdb("web", min_available="50%")], "--until", "20m")
    worst, evictions = _max_unavailable(items, "web", since=T0 + 600)
    assert evictions == 8
    assert worst == 4
    assert any(e["reason"] == "Expired" for e in items if e["kind"] == "Event")
    (pdb,) = [i for i in items if i["kind"] == "PodDisruptionBudget"]
    assert (pdb["status"]["expectedPods"], pdb["status"]["desiredHealthy"]) == (8, 4)
