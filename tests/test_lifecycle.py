"""Node lifecycle over simulated time: consolidation, budgets, blockers, drift, expiration,
interruption and termination, as a user of `karpy simulate` sees them.

Each test runs the real command (`karpy simulate - -o json`, in-process) on manifests a user
would write plus a Scenario timeline, and reads back only what the contract
(../shared/contract/simulate.md) promises: the SimulationSummary's NodeClaim history
(createdAt, deletedAt, disruptionReason, price), where the pods ended up, and the Events.

From the Events a per-NodeClaim timeline is rebuilt (:class:`Life`): when it was initialized,
when its disruption started (ConsolidationCandidate / DisruptionStarted / DisruptionTerminating
for voluntary disruption, Expired / SpotInterrupted for forceful deletion) and when it was gone.
Budgets are checked on that timeline the way upstream Karpenter counts them: a NodeClaim is
"disrupting" from the start of its disruption until its instance is gone, and every voluntary
start must keep the NodePool's disrupting count within what its budgets allow at that moment.

Expected behaviour is upstream Karpenter v1.14 (/tmp/disruption-spec.md summarises it; the
source is kubernetes-sigs/karpenter pkg/controllers/disruption, node/termination,
nodeclaim/expiration). Tests that show karpy departing from upstream are marked
``xfail(strict=True)`` with the reason.

Most scenarios use the kwok catalog: ``c-<N>x-amd64-linux`` has N vCPU, 2N GiB, N-0.1 vCPU
allocatable, and costs 0.0543 $/h per 2 vCPU on-demand (spot 0.0760 for 4 vCPU).
"""

from __future__ import annotations

import collections
import json
import math
import re
from karpy.controllers.termination import DEFAULT_POD_GRACE, MIN_DRAIN_TIME
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import lru_cache

import pytest
import yaml
from croniter import croniter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_simulate import (
    EXAMPLES,
    Output,
    daemonset,
    example,
    invoke,
    is_daemon,
    kwok_nodeclass,
    label,
    pod,
    pod_spec,
    scenario,
)
from test_simulate import nodepool as _plain_nodepool

DND = "karpenter.sh/do-not-disrupt"
DISRUPTED_TAINT = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
VOLUNTARY = ("Empty", "Underutilized", "Drifted")
VOLUNTARY_START = {"ConsolidationCandidate", "DisruptionStarted", "DisruptionTerminating"}
FORCEFUL_START = {"Expired", "SpotInterrupted", "InstanceTerminating", "TerminatingOnInterruption"}
CONTROL_EVENTS = VOLUNTARY_START | FORCEFUL_START
# blocked pods are deleted their own terminationGracePeriodSeconds (30 s by default) ahead of the node's deadline
POD_GRACE = DEFAULT_POD_GRACE
MINUTE = 60.0
# Generated names are deterministic: the first NodeClaim of NodePool "default" (and, on kwok, its Node)
FIRST = "default-g8dxj"


# =========================================================================================
# Manifests
# =========================================================================================


def nodepool(name: str = "default", *, disruption: dict | None = None, expire: str | None = None,
             tgp: str | None = None, annotations: dict | None = None, **kw) -> dict:
    """A kwok NodePool (options as test_simulate.nodepool) with real disruption settings.

    Unlike test_simulate's, consolidation is on (``consolidateAfter: 0s``) unless ``disruption`` says otherwise.
    """
    np = _plain_nodepool(name, **kw)
    np["spec"]["disruption"] = dict(disruption if disruption is not None else {"consolidateAfter": "0s"})
    tspec = np["spec"]["template"]["spec"]
    if expire:
        tspec["expireAfter"] = expire
    if tgp:
        tspec["terminationGracePeriod"] = tgp
    if annotations:
        np["spec"]["template"].setdefault("metadata", {})["annotations"] = dict(annotations)
    return np


def deployment(name: str, replicas: int, cpu: str, *, annotations: dict | None = None, labels: dict | None = None,
               namespace: str = "default", **spec) -> dict:
    tmeta: dict = {"labels": {"app": name, **(labels or {})}}
    if annotations:
        tmeta["annotations"] = dict(annotations)
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": tmeta, "spec": pod_spec(cpu, None, **spec)}},
    }


def pdb(name: str, app: str, **spec) -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": app}}, **spec}}


def scale(name: str, replicas: int) -> dict:
    return {"scale": {"kind": "Deployment", "namespace": "default", "name": name, "replicas": replicas}}


def patch_nodepool(merge: dict, name: str = "default") -> dict:
    return {"patch": {"kind": "NodePool", "name": name, "merge": merge}}


def advance(d: str) -> dict:
    return {"advance": d}


def template_labels(**labels) -> dict:
    return {"spec": {"template": {"metadata": {"labels": labels}}}}


def kwok_requirements(arch=("amd64",), family=("c",), cpus=None) -> list[dict]:
    reqs = [
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": list(arch)},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        {"key": "karpenter.kwok.sh/instance-family", "operator": "In", "values": list(family)},
    ]
    if cpus:
        reqs.append({"key": "karpenter.kwok.sh/instance-cpu", "operator": "In", "values": [str(c) for c in cpus]})
    return reqs


CRITICAL = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": "system-cluster-critical"}, "value": 2000000000}


# =========================================================================================
# Running and reading the result
# =========================================================================================


def simulate(docs, until: str | None = None) -> "Result":
    """``until`` bounds a run that stops once settled (--settle): these tests follow one sequence of
    events to its end, not a horizon (tests/test_horizon.py covers that)."""
    text = yaml.safe_dump_all(list(docs), sort_keys=False)
    args = ["-", "-o", "json"] + (["--until", until, "--settle"] if until else [])
    r = invoke(args, input=text)
    assert r.exit_code == 0, f"exit {r.exit_code}\nstderr:\n{r.stderr}\nexception: {r.exception!r}"
    return Result(json.loads(r.stdout))


@lru_cache(maxsize=None)
def example_result(name: str, *args: str) -> "Result":
    return Result(example(name, *args).data)


def epoch(ts: str) -> float:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


@dataclass
class Life:
    """One NodeClaim's history, from the summary and the Events (times in epoch seconds)."""

    name: str
    pool: str
    instance_type: str | None
    capacity_type: str | None
    zone: str | None
    price: float
    created: float
    initialized: float | None
    started: float | None  # its disruption or deletion began
    deleted: float | None
    reason: str | None

    def alive_at(self, t: float) -> bool:
        return self.created <= t and (self.deleted is None or self.deleted > t)


class Result(Output):
    def __init__(self, data: dict):
        super().__init__(data)
        self.start = epoch(self.summary["start"])

    def t(self, ts: str) -> float:
        """Seconds since the simulation started."""
        return epoch(ts) - self.start

    def at(self, seconds_: float) -> float:
        """Epoch time of ``seconds_`` after the start."""
        return self.start + seconds_

    @property
    def lives(self) -> dict[str, Life]:
        init: dict[str, float] = {}
        started: dict[str, float] = {}
        for e in self.events():
            inv = e["involvedObject"]
            if inv["kind"] != "NodeClaim":
                continue
            when = epoch(e["firstTimestamp"])
            if e["reason"] == "Initialized":
                init.setdefault(inv["name"], when)
            if e["reason"] in CONTROL_EVENTS:
                started.setdefault(inv["name"], when)
        out = {}
        for c in self.summary_claims:
            if c["launchFailed"]:
                continue
            out[c["name"]] = Life(
                c["name"], c["nodePool"], c["instanceType"], c["capacityType"], c["zone"], float(c["pricePerHour"]),
                epoch(c["createdAt"]), init.get(c["name"]), started.get(c["name"]),
                epoch(c["deletedAt"]) if c["deletedAt"] else None, c["disruptionReason"],
            )
        return out

    def claim(self, name: str) -> dict:
        (c,) = [c for c in self.summary_claims if c["name"] == name]
        return c

    def deleted(self, reason: str | None = None) -> list[Life]:
        return sorted((l for l in self.lives.values() if l.deleted is not None and (reason is None or l.reason == reason)),
                      key=lambda l: (l.deleted, l.name))

    def live(self) -> list[Life]:
        return [l for l in self.lives.values() if l.deleted is None]

    def events_of(self, name: str, reason: str | None = None, kind: str | None = None) -> list[dict]:
        return [e for e in self.events(reason) if e["involvedObject"]["name"] == name
                and (kind is None or e["involvedObject"]["kind"] == kind)]

    def event_times(self, reason: str, kind: str | None = None) -> list[float]:
        return [epoch(e["firstTimestamp"]) for e in self.events(reason)
                if kind is None or e["involvedObject"]["kind"] == kind]

    def first_scheduled(self) -> dict[str, tuple[str, float]]:
        """Pod name -> (node, time) of its first Scheduled event."""
        out: dict[str, tuple[str, float]] = {}
        for e in self.events("Scheduled"):
            m = re.search(r" to (\S+)$", e["message"])
            if m:
                out.setdefault(e["involvedObject"]["name"], (m.group(1), epoch(e["firstTimestamp"])))
        return out

    def scheduled_to(self, node: str) -> list[dict]:
        return [e for e in self.events("Scheduled") if e["message"].endswith(f" to {node}")]

    def bound_pods(self) -> dict[str, str]:
        return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in self.of("Pod") if not is_daemon(p)}

    def cost(self, pool: str | None = None) -> float:
        return sum(l.price for l in self.live() if pool is None or l.pool == pool)


# --- budgets, as upstream counts them ---------------------------------------------------------


def budget_active(budget: dict, t: float) -> bool:
    """A budget without a schedule is always active; otherwise from each cron firing (UTC) for its duration,
    the end excluded (upstream: the next firing after now - duration is not after now)."""
    if not budget.get("schedule"):
        return True
    m = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?", budget["duration"])
    length = int(m.group(1) or 0) * 3600 + int(m.group(2) or 0) * 60
    now = datetime.fromtimestamp(t, tz=timezone.utc)
    fired = croniter(budget["schedule"], now + timedelta(seconds=1)).get_prev(datetime).timestamp()
    return fired <= t < fired + length


def allowed_by(budgets: list[dict], num_nodes: int, reason: str, t: float) -> float:
    """Upstream's allowed disruptions (before subtracting those in progress): min over the active budgets
    that apply to the reason; percentages of the NodePool's nodes round up."""
    allowed = math.inf
    for b in budgets:
        if b.get("reasons") is not None and reason not in b["reasons"]:
            continue
        if not budget_active(b, t):
            continue
        nodes = str(b.get("nodes", "10%"))
        value = math.ceil(int(nodes[:-1]) * num_nodes / 100) if nodes.endswith("%") else int(nodes)
        allowed = min(allowed, value)
    return allowed


def budget_violations(result: Result, budgets_at) -> list[tuple]:
    """Every voluntary disruption start that took its NodePool past its budget.

    ``budgets_at(pool, t)`` gives the budget lists that may have been in force at ``t`` (more than one
    when the NodePool was patched at that very second; the most permissive is used). At a start time ``t``
    the NodePool's disrupting NodeClaims are those whose disruption started at or before ``t`` and that
    were not yet gone (or started at ``t`` itself: an empty node is gone the same second); its node count
    is every initialized NodeClaim not gone before ``t``.
    """
    lives = list(result.lives.values())
    out = []
    for l in lives:
        if l.reason not in VOLUNTARY or l.started is None:
            continue
        t = l.started
        pool = [x for x in lives if x.pool == l.pool]
        disrupting = sorted(x.name for x in pool if x.started is not None and x.started <= t
                            and (x.deleted is None or x.deleted > t or x.started == t))
        num = sum(1 for x in pool if x.initialized is not None and x.initialized <= t and (x.deleted is None or x.deleted >= t))
        allowed = max(allowed_by(b, num, l.reason, t) for b in budgets_at(l.pool, t))
        if len(disrupting) > allowed:
            when = datetime.fromtimestamp(t, tz=timezone.utc).strftime("%H:%M:%S")
            out.append((when, l.pool, l.reason, f"{len(disrupting)} disrupting > {allowed} allowed of {num}", tuple(disrupting)))
    return sorted(set(out))


def max_concurrent(result: Result, pool: str) -> int:
    """The most NodeClaims of ``pool`` under voluntary disruption at one moment."""
    lives = [l for l in result.lives.values() if l.pool == pool and l.reason in VOLUNTARY and l.started is not None]
    best = 0
    for l in lives:
        t = l.started
        best = max(best, sum(1 for x in lives if x.started <= t and (x.deleted is None or x.deleted > t or x.started == t)))
    return best


def static_budgets(pools: dict[str, list[dict]]):
    return lambda pool, t: [pools[pool]]


def replace_commands(result: Result) -> list[tuple[float, list[str], list[str]]]:
    """(time, candidate NodeClaims, replacement NodeClaims) of every consolidation that launched a replacement.

    A command's candidates are the NodeClaims its ConsolidationCandidate event (one message per command)
    went to; its replacements the NodeClaims with a DisruptionLaunching event at the same moment.
    """
    launched = collections.defaultdict(set)
    for e in result.events("DisruptionLaunching"):
        if e["message"].endswith("Underutilized"):
            launched[epoch(e["firstTimestamp"])].add(e["involvedObject"]["name"])
    commands = collections.defaultdict(set)
    for e in result.events("ConsolidationCandidate"):
        if e["involvedObject"]["kind"] == "NodeClaim" and re.search(r"replace \[[^\]]*\] -> \[", e["message"]):
            commands[(epoch(e["firstTimestamp"]), e["message"])].add(e["involvedObject"]["name"])
    return [(when, sorted(cands), sorted(launched.get(when, ()))) for (when, _), cands in sorted(commands.items())]


# =========================================================================================
# Consolidation
# =========================================================================================


class TestConsolidation:
    def test_example_when_empty_only_removes_empty_nodes(self):
        out = example_result("consolidation-policies")
        lives = out.lives
        scale_down = out.at(10 * MINUTE)
        empty_pool = [l for l in lives.values() if l.pool == "when-empty"]
        packed_pool = [l for l in lives.values() if l.pool == "when-underutilized"]
        # the WhenEmpty pool only ever removes nodes that became empty
        assert {l.reason for l in empty_pool if l.deleted} == {"Empty"}
        # the other pool also repacks the quarter that is left onto cheaper capacity
        assert "Underutilized" in {l.reason for l in packed_pool if l.deleted}
        assert out.cost("when-underutilized") < out.cost("when-empty")
        # nothing happens before the scale-down plus consolidateAfter (1m)
        assert all(l.started >= scale_down + MINUTE for l in lives.values() if l.started is not None)
        # every pod runs, each app in its own pool
        pods = out.bound_pods()
        assert len(pods) == 6 and all(pods.values())
        for name, node in pods.items():
            want = "when-empty" if name.startswith("app-a-") else "when-underutilized"
            assert label(out.nodes[node], "karpenter.sh/nodepool") == want

    def test_consolidate_after_counts_from_the_last_pod_event(self):
        # four c-4x nodes, one 3-CPU pod each; one node empties at 5m, another at 7m
        steps = [advance("5m"), scale("web", 3), advance("2m"), scale("web", 2), advance("20m")]
        out = simulate([kwok_nodeclass(), nodepool(cpus=(4,), disruption={"consolidateAfter": "3m"}),
                        deployment("web", 4, "3"), scenario(steps)])
        first, second = out.deleted()
        assert (first.reason, second.reason) == ("Empty", "Empty")
        assert len(out.deleted()) == 2 and len(out.live()) == 2
        # each empty node waits 3m after the pod left it: 5m+3m and 7m+3m
        assert out.at(8 * MINUTE) <= first.deleted < out.at(10 * MINUTE)
        assert out.at(10 * MINUTE) <= second.deleted <= out.at(10 * MINUTE + 30)

    def test_consolidate_after_never_disables_consolidation(self):
        steps = [advance("2m"), scale("web", 0), advance("30m")]
        out = simulate([kwok_nodeclass(), nodepool(cpus=(4,), disruption={"consolidateAfter": "Never"}),
                        deployment("web", 2, "3"), scenario(steps)])
        assert len(out.summary_claims) == 2 and out.deleted() == []
        msgs = {e["message"] for e in out.events("Unconsolidatable")}
        assert 'NodePool "default" has consolidation disabled' in msgs

    def test_replacement_is_cheaper_and_ready_before_the_node_drains(self):
        # six 1-CPU pods on a c-8x; two remain, which a c-4x holds for half the price
        steps = [advance("5m"), scale("web", 2), advance("20m")]
        out = simulate([kwok_nodeclass("30s"), nodepool(), deployment("web", 6, "1"), scenario(steps)])
        (old,) = out.deleted()
        assert old.reason == "Underutilized"
        (cmd,) = replace_commands(out)
        _, cands, (rep_name,) = cmd
        assert cands == [old.name]
        rep = out.lives[rep_name]
        assert rep.price < old.price
        # launched and initialized before the old node drains, which is when it is gone
        terminating = min(epoch(e["firstTimestamp"]) for e in out.events_of(old.name, "DisruptionTerminating"))
        evictions = [epoch(e["firstTimestamp"]) for e in out.events("Evicted")]
        assert rep.created == old.started < rep.initialized <= terminating <= min(evictions)
        assert rep.created < old.deleted
        # the pods never wait for capacity: no FailedScheduling, no other launch, each evicted pod's
        # successor is bound to the replacement the same second
        assert out.events("FailedScheduling") == []
        assert [l.name for l in out.lives.values() if l.created > out.at(5 * MINUTE)] == [rep_name]
        rebinds = [epoch(e["firstTimestamp"]) for e in out.scheduled_to(rep_name)]
        assert sorted(rebinds) == sorted(evictions)
        assert set(out.bound_pods().values()) == {rep_name}

    def test_multi_node_consolidation_merges_several_nodes_into_one(self):
        # three c-4x nodes, each left with one 1.5-CPU pod: one c-8x holds all three for less
        steps = []
        for name in "xyz":
            steps += [{"apply": [deployment(name, 2, "1500m")]}, advance("1m")]
        steps += [advance("3m"), scale("x", 1), scale("y", 1), scale("z", 1), advance("20m")]
        out = simulate([kwok_nodeclass(),
                        nodepool(disruption={"consolidateAfter": "1m", "budgets": [{"nodes": "100%"}]}),
                        scenario(steps)])
        gone = out.deleted()
        assert len(gone) == 3 and {l.reason for l in gone} == {"Underutilized"}
        assert len({l.deleted for l in gone}) == 1 and len({l.started for l in gone}) == 1
        (cmd,) = replace_commands(out)
        _, cands, reps = cmd
        assert sorted(cands) == sorted(l.name for l in gone)
        (rep,) = reps
        assert out.lives[rep].price < sum(l.price for l in gone)
        assert set(out.bound_pods().values()) == {rep}
        messages = {e["message"] for e in out.events("ConsolidationCandidate")}
        assert len(messages) == 1 and messages.pop().count("default-") == 3

    def test_default_budget_of_ten_percent_allows_only_single_node_moves(self):
        # the same three nodes with the default budget (10% of 3 rounds up to 1): one node at a time
        steps = []
        for name in "xyz":
            steps += [{"apply": [deployment(name, 2, "1500m")]}, advance("1m")]
        steps += [advance("3m"), scale("x", 1), scale("y", 1), scale("z", 1), advance("20m")]
        out = simulate([kwok_nodeclass(), nodepool(disruption={"consolidateAfter": "1m"}), scenario(steps)])
        assert out.deleted() and max_concurrent(out, "default") == 1
        assert budget_violations(out, static_budgets({"default": [{"nodes": "10%"}]})) == []
        assert all(len(c) == 1 for _, c, _ in replace_commands(out))

    def test_daemonset_pods_do_not_keep_a_node_from_being_empty(self):
        steps = [advance("2m"), scale("web", 1), advance("10m")]
        out = simulate([kwok_nodeclass(), nodepool(cpus=(4,), disruption={"consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]}),
                        deployment("web", 3, "3"), daemonset("agent", cpu="100m"),
                        daemonset("blanket", cpu="100m", tolerations=[{"operator": "Exists"}]), scenario(steps)])
        assert [l.reason for l in out.deleted()] == ["Empty", "Empty"]
        (left,) = out.live()
        assert set(p["spec"]["nodeName"] for p in out.of("Pod")) == {left.name}

    def test_pod_arriving_during_validation_cancels_an_empty_node_removal(self):
        # at 2m one node empties; the 2m01 pass proposes deleting it, and before the 15 s validation
        # ends (2m16) a pod that only fits there lands on it
        steps = [advance("2m"), scale("web", 1), advance("5s"), {"apply": [pod("late", cpu="3")]}, advance("10m")]
        out = simulate([kwok_nodeclass(), nodepool(cpus=(4,)), deployment("web", 2, "3"), scenario(steps)])
        assert out.deleted() == []
        assert out.bound_pods()["late"] in out.nodes
        assert not out.events("Evicted")

    def test_failed_replacement_launch_leaves_the_node_alone(self):
        # the cheaper sizes turn out to have no capacity: the replacement fails to launch and the
        # candidate keeps running with its pods
        steps = [advance("2m"), {"unavailable": {"instanceTypes": ["c-4x-amd64-linux", "c-2x-amd64-linux"]}},
                 scale("web", 2), advance("10m")]
        out = simulate([kwok_nodeclass(), nodepool(), deployment("web", 6, "1"), scenario(steps)])
        (node,) = [l for l in out.lives.values()]
        assert node.deleted is None and node.instance_type == "c-8x-amd64-linux"
        failed = [c for c in out.summary_claims if c["launchFailed"]]
        assert failed and out.events("DisruptionAbandoned")
        assert not out.events("Evicted")
        assert set(out.bound_pods().values()) == {node.name}
        assert DISRUPTED_TAINT not in (out.nodes[node.name]["spec"].get("taints") or [])

    def test_spot_node_is_not_replaced_by_spot_without_the_feature_gate(self):
        steps = [advance("2m"), scale("web", 1), advance("10m")]
        out = simulate([kwok_nodeclass(), nodepool(capacity=("spot",)), deployment("web", 6, "1"), scenario(steps)])
        assert out.deleted() == [] and len(out.summary_claims) == 1
        msgs = {e["message"] for e in out.events("Unconsolidatable")}
        assert "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node" in msgs

    def test_do_not_disrupt_duration_expires(self):
        # a c-4x left holding one 1-CPU pod guarded for 10 minutes from its start (1m01):
        # a c-2x would do, but only once the guard has run out
        guarded = deployment("guarded", 1, "1", annotations={DND: "10m"})
        steps = [advance("1m"), {"apply": [guarded, pod("filler", cpu="2")]}, advance("2m"),
                 {"delete": {"kind": "Pod", "name": "filler"}}, advance("40m")]
        out = simulate([kwok_nodeclass(), nodepool(), pod("big", cpu="3"), scenario(steps)], until="2h")
        # the guarded pod's first node is the one launched for it and the filler at 1m01
        (g,) = [l for l in out.lives.values() if l.created == out.at(61)]
        assert g.instance_type == "c-4x-amd64-linux"
        assert g.started is None or g.started >= out.at(61 + 10 * MINUTE)
        assert g.deleted is not None and g.deleted <= out.at(61 + 16 * MINUTE)
        assert g.reason == "Underutilized"


# =========================================================================================
# Budgets
# =========================================================================================


class TestBudgets:
    TSHIRT = {
        "karpenter-pool-less-disruption": "5%",
        "karpenter-pool-medium-disruption": "15%",
        "karpenter-pool-high-disruption": "30%",
    }
    WINDOW = {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}

    @pytest.fixture(scope="class")
    def tshirt(self):
        return example_result("tshirt-budgets", "--until", "12h")

    def test_tshirt_budgets_never_exceeded(self, tshirt):
        pools = {name: [{"nodes": pct}, self.WINDOW] for name, pct in self.TSHIRT.items()}
        assert budget_violations(tshirt, static_budgets(pools)) == []

    def test_tshirt_pools_shed_nodes_at_their_own_pace(self, tshirt):
        # 20 nodes each: 5% -> 1 at a time, 15% -> 3, 30% -> 6 (percentages round up)
        assert {p: max_concurrent(tshirt, p) for p in self.TSHIRT} == {
            "karpenter-pool-less-disruption": 1,
            "karpenter-pool-medium-disruption": 3,
            "karpenter-pool-high-disruption": 6,
        }

    def test_tshirt_nothing_disrupted_in_the_working_day_window(self, tshirt):
        opens, closes = epoch("2026-01-05T09:00:00Z"), epoch("2026-01-05T17:00:00Z")
        starts = [l.started for l in tshirt.lives.values() if l.started is not None]
        assert starts and not [t for t in starts if opens <= t < closes]
        assert any(t < opens for t in starts) and any(t > closes for t in starts)
        # in the end each pool keeps one node per remaining pod
        live = collections.Counter(l.pool for l in tshirt.live())
        assert live == {p: 5 for p in self.TSHIRT}
        assert tshirt.summary["pods"]["pending"] == 0

    def test_percentage_budget_rounds_up(self):
        # ten empty nodes, 15%: ceil(1.5) = 2 may go at once (not 1)
        steps = [advance("2m"), scale("web", 0), advance("10m")]
        budgets = [{"nodes": "15%"}]
        out = simulate([kwok_nodeclass(), nodepool(cpus=(4,), disruption={"consolidateAfter": "0s", "budgets": budgets}),
                        deployment("web", 10, "3"), scenario(steps)])
        gone = out.deleted("Empty")
        assert len(gone) == 10
        first = [l for l in gone if l.deleted == gone[0].deleted]
        assert len(first) == 2
        assert budget_violations(out, static_budgets({"default": budgets})) == []

    def test_count_budget_replaces_drifted_nodes_one_at_a_time(self):
        budgets = [{"nodes": "1"}]
        steps = [advance("5m"), patch_nodepool(template_labels(rev="2")), advance("10m")]
        out = simulate([kwok_nodeclass("25s"),
                        nodepool(cpus=(4,), disruption={"consolidateAfter": "Never", "budgets": budgets}),
                        deployment("web", 3, "3"), scenario(steps)])
        drifted = out.deleted("Drifted")
        assert len(drifted) == 3
        assert max_concurrent(out, "default") == 1
        assert budget_violations(out, static_budgets({"default": budgets})) == []
        assert all(label(n, "rev") == "2" for n in out.nodes.values())
        assert out.summary["pods"]["pending"] == 0

    def test_count_budget_holds_while_a_drifted_node_drains(self):
        # replacements initialize 20 s after launch, i.e. on a disruption pass: the previous drifted node
        # has just started draining then and must still count against the budget of 1 (upstream counts a
        # node as disrupting until its instance is terminating, after the drain)
        budgets = [{"nodes": "1"}]
        steps = [advance("5m"), patch_nodepool(template_labels(rev="2")), advance("10m")]
        out = simulate([kwok_nodeclass("20s"),
                        nodepool(cpus=(4,), disruption={"consolidateAfter": "Never", "budgets": budgets}),
                        deployment("web", 3, "3"), scenario(steps)])
        assert len(out.deleted("Drifted")) == 3
        assert budget_violations(out, static_budgets({"default": budgets})) == []

    def test_count_budget_holds_while_a_drain_waits_for_the_grace_period(self):
        # the first drifted node's drain waits 5m on a do-not-disrupt pod (terminationGracePeriod);
        # all that time it is still being disrupted, so the second one waits
        budgets = [{"nodes": "1"}]
        steps = [advance("2m"), patch_nodepool(template_labels(rev="2")), advance("20m")]
        out = simulate([kwok_nodeclass(),
                        nodepool(cpus=(4,), tgp="5m", disruption={"consolidateAfter": "Never", "budgets": budgets}),
                        deployment("web", 2, "3"), pod("guarded", cpu="500m", annotations={DND: "true"}),
                        scenario(steps)])
        assert len(out.deleted("Drifted")) == 2
        assert budget_violations(out, static_budgets({"default": budgets})) == []

    def test_nodes_deleted_by_expiration_count_against_the_budget(self):
        # budget 1: a node expires at 30m01 and drains until 40m01 (a do-not-disrupt pod, 10m grace; the pod
        # is deleted its own 30 s grace period ahead of that); another node empties at 32m but may only go
        # once the expired one is gone
        budgets = [{"nodes": "1"}]
        steps = [advance("29m"), {"apply": [deployment("web", 2, "3")]}, advance("3m"), scale("web", 1), advance("20m")]
        out = simulate([kwok_nodeclass(), nodepool(cpus=(4,), expire="30m", tgp="10m",
                                                   disruption={"consolidateAfter": "0s", "budgets": budgets}),
                        pod("guarded", cpu="3", annotations={DND: "true"}), scenario(steps)], until="2h")
        (expired,) = out.deleted("Expired")
        assert expired.deleted >= out.at(40 * MINUTE + 1 - POD_GRACE)
        empty = out.deleted("Empty")
        assert empty and all(l.started >= expired.deleted for l in empty)
        assert budget_violations(out, static_budgets({"default": budgets})) == []

    def test_example_consolidation_within_the_default_budget(self):
        out = example_result("consolidation-policies")
        pools = {"when-empty": [{"nodes": "10%"}], "when-underutilized": [{"nodes": "10%"}]}
        assert budget_violations(out, static_budgets(pools)) == []

    def test_budget_for_one_reason_leaves_the_others_alone(self):
        # drift is blocked by a zero budget for Drifted; emptiness is not
        budgets = [{"nodes": "100%"}, {"nodes": "0", "reasons": ["Drifted"]}]
        steps = [advance("2m"), patch_nodepool(template_labels(rev="2")), advance("1m"), scale("web", 1), advance("10m")]
        out = simulate([kwok_nodeclass(), nodepool(cpus=(4,), disruption={"consolidateAfter": "0s", "budgets": budgets}),
                        deployment("web", 3, "3"), scenario(steps)])
        assert out.deleted("Drifted") == []
        assert len(out.deleted("Empty")) == 2
        assert len(out.events("Drifted")) == 3
        blocked = [e for e in out.events("DisruptionBlocked") if e["involvedObject"]["kind"] == "NodePool"]
        assert blocked and blocked[0]["message"] == \
            "No allowed disruptions for disruption reason Drifted due to blocking budget"

    def test_patched_budget_takes_effect(self):
        # a zero budget holds the drifted nodes until it is patched open at 10m
        steps = [advance("2m"), patch_nodepool(template_labels(rev="2")), advance("8m"),
                 patch_nodepool({"spec": {"disruption": {"budgets": [{"nodes": "100%"}]}}}), advance("10m")]
        out = simulate([kwok_nodeclass(),
                        nodepool(cpus=(4,), disruption={"consolidateAfter": "Never", "budgets": [{"nodes": "0"}]}),
                        deployment("web", 2, "3"), scenario(steps)])
        drifted = out.deleted("Drifted")
        assert len(drifted) == 2
        assert all(l.started >= out.at(10 * MINUTE) for l in drifted)
        assert len(out.live()) == 2 and all(l.created >= out.at(10 * MINUTE) for l in out.live())

    def test_cron_window_blocks_only_while_open(self):
        # zero budget every hour from :00 for 20m; the node empties at 0h05 and goes after 0h20
        window = {"nodes": "0", "schedule": "@hourly", "duration": "20m"}
        budgets = [{"nodes": "100%"}, window]
        steps = [advance("5m"), scale("web", 1), advance("30m")]
        out = simulate([kwok_nodeclass(), nodepool(cpus=(4,), disruption={"consolidateAfter": "0s", "budgets": budgets}),
                        deployment("web", 2, "3"), scenario(steps)])
        (gone,) = out.deleted("Empty")
        assert out.at(20 * MINUTE) < gone.started <= out.at(21 * MINUTE)
        assert budget_violations(out, static_budgets({"default": budgets})) == []


# =========================================================================================
# Blockers: do-not-disrupt and PodDisruptionBudgets
# =========================================================================================


class TestBlockers:
    def test_example_do_not_disrupt_job_keeps_its_node_until_it_completes(self):
        out = example_result("do-not-disrupt-job")
        # the Job's pod is gone with its node at the end; the Events tell where it ran and when it finished
        ((job_pod, (node, _)),) = [(p, s) for p, s in out.first_scheduled().items() if p.startswith("long-running-batch-job-")]
        (completed,) = out.events("Completed")
        assert out.t(completed["firstTimestamp"]) == 45 * MINUTE + 1
        lives = out.lives
        kept = lives[node]  # kwok nodes are named after their NodeClaims
        others = [l for l in lives.values() if l.name != kept.name]
        # the web tier goes at 10m: its now-empty nodes are removed within a pass and the validation
        assert others and all(l.reason == "Empty" and l.deleted <= out.at(12 * MINUTE) for l in others)
        # the batch pod's node is held until the Job completes (45m after its start at 0m01), then removed
        assert kept.reason == "Empty" and out.at(45 * MINUTE + 1) <= kept.started <= kept.deleted <= out.at(47 * MINUTE)
        msg = f'Pod has "{DND}" annotation (Pod=default/{job_pod})'
        blocked = out.events_of(kept.name, "DisruptionBlocked", kind="NodeClaim")
        assert blocked and {e["message"] for e in blocked} == {msg}
        assert all(epoch(e["firstTimestamp"]) < kept.started for e in blocked)

    def test_do_not_disrupt_pod_blocks_consolidation(self):
        steps = [advance("2m"), scale("web", 0), advance("20m")]
        out = simulate([kwok_nodeclass(), nodepool(cpus=(4,)), deployment("web", 2, "3"),
                        pod("guarded", cpu="100m", annotations={DND: "true"}), scenario(steps)])
        guarded_node = out.bound_pods()["guarded"]
        gone = out.deleted()
        assert [l.reason for l in gone] == ["Empty"]
        assert guarded_node in out.nodes and out.lives[guarded_node].deleted is None
        assert any(e["message"] == f'Pod has "{DND}" annotation (Pod=default/guarded)'
                   for e in out.events_of(guarded_node, "DisruptionBlocked", kind="NodeClaim"))

    def test_do_not_disrupt_node_annotation_blocks_disruption(self):
        steps = [advance("2m"), scale("web", 1), advance("10m")]
        out = simulate([kwok_nodeclass(),
                        nodepool(cpus=(4,), annotations={DND: "true"},
                                 disruption={"consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]}),
                        deployment("web", 3, "3"), scenario(steps)])
        assert out.deleted() == []
        msgs = {e["message"] for e in out.events("DisruptionBlocked")}
        assert f'Disruption is blocked through the "{DND}" annotation' in msgs

    @pytest.mark.parametrize("protected", [True, False])
    def test_pdb_with_no_disruptions_allowed_blocks_consolidation(self, protected):
        # web (2 x 1 CPU) shares a c-8x with pods that go away; a c-2x would do for web
        extra = [pdb("web", "web", minAvailable=2)] if protected else []
        steps = [advance("2m"), scale("other", 0), advance("10m")]
        out = simulate([kwok_nodeclass(), nodepool(), deployment("web", 2, "1"), deployment("other", 6, "1"),
                        *extra, scenario(steps)])
        if protected:
            assert out.deleted() == []
            msgs = {e["message"] for e in out.events("DisruptionBlocked")}
            assert "Pdb prevents pod evictions (PodDisruptionBudget=[default/web])" in msgs
        else:
            assert [l.reason for l in out.deleted()] == ["Underutilized"]
        assert out.summary["pods"]["pending"] == 0

    def test_expiration_drain_waits_for_blockers_until_the_grace_period(self):
        # one node holds a do-not-disrupt pod, the other a pod whose PDB allows nothing; both expire at
        # 30m01 and their drains wait until terminationGracePeriod (10m) forces the pods out
        steps = [advance("45m")]
        out = simulate([kwok_nodeclass(), nodepool(cpus=(4,), expire="30m", tgp="10m",
                                                   disruption={"consolidateAfter": "Never"}),
                        deployment("web", 1, "3"), pdb("web", "web", maxUnavailable=0),
                        pod("guarded", cpu="3", annotations={DND: "true"}), scenario(steps)], until="2h")
        expired = [l for l in out.lives.values() if l.reason == "Expired"]
        assert len(expired) == 2
        for l in expired:
            expiry = l.created + 30 * MINUTE
            assert l.started == expiry
            assert expiry + 10 * MINUTE - POD_GRACE <= l.deleted <= expiry + 10 * MINUTE + 5
            draining = [e for e in out.events_of(l.name, "FailedDraining", kind="Node")]
            assert draining and all(expiry <= epoch(e["firstTimestamp"]) < l.deleted for e in draining)
            (tgp_event,) = out.events_of(l.name, "TerminationGracePeriodExpiring", kind="NodeClaim")
            assert tgp_event["type"] == "Warning"
        forced = {e["involvedObject"]["name"] for e in out.events("Disrupted")}
        assert "guarded" in forced and any(n.startswith("web-") for n in forced)
        assert not [e for e in out.events("Evicted") if e["involvedObject"]["name"] == "guarded"]
        # the Deployment's pod runs again elsewhere
        (web,) = out.pods_of("web")
        assert web["spec"]["nodeName"] and out.lives[web["spec"]["nodeName"]].deleted is None

    def test_no_capacity_launched_for_pods_the_drain_will_not_evict(self):
        steps = [advance("50m")]
        out = simulate([kwok_nodeclass(), nodepool(cpus=(4,), expire="30m", tgp="10m",
                                                   disruption={"consolidateAfter": "Never"}),
                        pod("guarded", cpu="3", annotations={DND: "true"}), scenario(steps)], until="2h")
        first, *launched_for_the_pod = out.summary_claims
        assert first["disruptionReason"] == "Expired" and out.t(first["deletedAt"]) >= 40 * MINUTE - POD_GRACE
        assert launched_for_the_pod == []

    def test_drift_with_grace_period_tolerates_blockers_then_forces_them(self):
        # with terminationGracePeriod set, drift may take a node with a do-not-disrupt pod; its drain
        # waits for the pod until the grace period is over
        steps = [advance("2m"), patch_nodepool(template_labels(rev="2")), advance("20m")]
        out = simulate([kwok_nodeclass(), nodepool(cpus=(4,), tgp="5m", disruption={"consolidateAfter": "Never"}),
                        pod("guarded", cpu="3", annotations={DND: "true"}), scenario(steps)])
        (old,) = out.deleted("Drifted")
        assert old.started == out.at(2 * MINUTE + 1)
        assert old.started + 5 * MINUTE - POD_GRACE <= old.deleted <= old.started + 5 * MINUTE + 5
        assert [e["involvedObject"]["name"] for e in out.events("Disrupted")] == ["guarded"]

    def test_drift_without_grace_period_respects_blockers(self):
        steps = [advance("2m"), patch_nodepool(template_labels(rev="2")), advance("20m")]
        out = simulate([kwok_nodeclass(), nodepool(cpus=(4,), disruption={"consolidateAfter": "Never"}),
                        pod("guarded", cpu="3", annotations={DND: "true"}), scenario(steps)])
        assert out.deleted() == [] and len(out.events("Drifted")) == 1
        assert out.bound_pods()["guarded"] in out.nodes


# =========================================================================================
# Drift
# =========================================================================================


class TestDrift:
    @staticmethod
    def drift(patch: dict, pod_spec_extra: dict | None = None, *, budgets=None, delay=None, replicas=2,
              kind="NodePool", name="default") -> Result:
        """``replicas`` c-4x nodes, one 3-CPU web pod each; ``patch`` is applied to the NodePool (or
        ``kind``/``name``) at 2m and the run goes on for 15m; no consolidation."""
        steps = [advance("2m"), {"patch": {"kind": kind, "name": name, "merge": patch}}, advance("15m")]
        disruption = {"consolidateAfter": "Never", "budgets": budgets or [{"nodes": "100%"}]}
        return simulate([kwok_nodeclass(delay), nodepool(cpus=(4,), disruption=disruption),
                         deployment("web", replicas, "3", **(pod_spec_extra or {})), scenario(steps)])

    def test_template_label_change_replaces_every_node(self):
        out = self.drift(template_labels(team="blue"), budgets=[{"nodes": "1"}], delay="25s", replicas=3)
        old = out.deleted("Drifted")
        assert len(old) == 3 and all(l.created < out.at(MINUTE) for l in old)
        assert {e["message"].rsplit(" ", 1)[-1] for e in out.events("Drifted")} == {"NodePoolDrifted"}
        assert all(label(n, "team") == "blue" for n in out.nodes.values()) and len(out.nodes) == 3
        # replace first: each replacement was up before its drifted node went
        for l in old:
            assert any(r.initialized is not None and r.initialized <= l.deleted and r.created >= l.started
                       for r in out.live())
        assert budget_violations(out, static_budgets({"default": [{"nodes": "1"}]})) == []
        assert out.summary["pods"]["pending"] == 0 and out.events("FailedScheduling") == []

    def test_empty_drifted_nodes_go_first_without_a_replacement(self):
        # three nodes, one emptied at 2m; consolidation is off, so drift handles the empty one too,
        # first (it has nothing to reschedule) and without launching anything for it
        steps = [advance("2m"), scale("web", 2), advance("1m"), patch_nodepool(template_labels(rev="2")), advance("10m")]
        out = simulate([kwok_nodeclass(), nodepool(cpus=(4,), disruption={"consolidateAfter": "Never", "budgets": [{"nodes": "1"}]}),
                        deployment("web", 3, "3"), scenario(steps)])
        drifted = sorted(out.deleted("Drifted"), key=lambda l: l.started)
        assert len(drifted) == 3
        first = drifted[0]
        assert first.deleted - first.started <= MIN_DRAIN_TIME + 1  # nothing to wait for but the minimum drain
        assert not [e for e in out.events("DisruptionLaunching") if epoch(e["firstTimestamp"]) == first.started]
        assert len(out.summary_claims) == 5 and len(out.live()) == 2
        assert out.summary["pods"]["pending"] == 0

    def test_tolerated_taint_change_replaces_nodes(self):
        taint = {"key": "dedicated", "value": "web", "effect": "NoSchedule"}
        out = self.drift({"spec": {"template": {"spec": {"taints": [taint]}}}},
                         {"tolerations": [{"key": "dedicated", "operator": "Exists"}]})
        assert len(out.deleted("Drifted")) == 2
        assert all(taint in (n["spec"].get("taints") or []) for n in out.nodes.values())
        assert out.summary["pods"]["pending"] == 0

    def test_taint_the_pods_do_not_tolerate_blocks_drift(self):
        taint = {"key": "dedicated", "value": "web", "effect": "NoSchedule"}
        out = self.drift({"spec": {"template": {"spec": {"taints": [taint]}}}})
        assert out.deleted() == [] and len(out.events("Drifted")) == 2
        blocked = [e["message"] for e in out.events("DisruptionBlocked")]
        assert blocked and all(m.startswith("Not all pods would schedule") for m in blocked)
        assert out.summary["pods"]["pending"] == 0

    def test_requirement_change_drifts_nodes_off_the_old_architecture(self):
        out = self.drift({"spec": {"template": {"spec": {"requirements": kwok_requirements(arch=("arm64",), cpus=(4,))}}}})
        assert len(out.deleted("Drifted")) == 2
        assert {e["message"].rsplit(" ", 1)[-1] for e in out.events("Drifted")} == {"RequirementsDrifted"}
        assert {l.instance_type for l in out.live()} == {"c-4x-arm64-linux"}

    @pytest.mark.parametrize("reqs", [
        kwok_requirements(arch=("amd64", "arm64"), cpus=(4,)),
        kwok_requirements(family=("c", "m"), cpus=(4, 8)),
        kwok_requirements(family=("c",)),
    ], ids=["more-archs", "more-families-and-sizes", "size-requirement-dropped"])
    def test_requirement_change_that_still_matches_does_not_drift(self, reqs):
        out = self.drift({"spec": {"template": {"spec": {"requirements": reqs}}}})
        assert out.deleted() == [] and out.events("Drifted") == [] and len(out.summary_claims) == 2

    @pytest.mark.parametrize("patch", [
        {"spec": {"disruption": {"budgets": [{"nodes": "50%"}], "consolidationPolicy": "WhenEmpty"}}},
        {"spec": {"limits": {"cpu": "100"}, "weight": 5}},
    ], ids=["disruption", "limits-and-weight"])
    def test_fields_outside_the_template_do_not_drift(self, patch):
        out = self.drift(patch)
        assert out.deleted() == [] and out.events("Drifted") == []

    def test_example_drift_arm64_to_amd64(self):
        out = example_result("drift-arm64-to-amd64")
        arm = [l for l in out.lives.values() if l.instance_type and "pls" in l.instance_type]
        assert arm and all(l.reason == "Drifted" and l.started >= out.at(10 * MINUTE) for l in arm)
        inflate = out.pods_of("inflate")
        assert len(inflate) == 4
        assert {label(out.node_of(p), "kubernetes.io/arch") for p in inflate} == {"amd64"}
        assert out.summary["pods"]["pending"] == 0
        assert budget_violations(out, static_budgets({"default-demo": [{"nodes": "100%"}]})) == []

    def test_aks_image_family_change_drifts_and_tags_do_not(self):
        docs = [d for d in yaml.safe_load_all((EXAMPLES / "drift-arm64-to-amd64" / "nodepool.yaml").read_text()) if d]
        docs[0]["spec"]["disruption"]["consolidateAfter"] = "Never"
        web = deployment("web", 2, "1", nodeSelector={"aks-karpenter": "demo"})

        def run(spec_patch):
            steps = [advance("5m"), {"patch": {"kind": "AKSNodeClass", "name": "default-demo", "merge": {"spec": spec_patch}}},
                     advance("10m")]
            return simulate(docs + [web, scenario(steps)])

        out = run({"imageFamily": "AzureLinux"})
        assert [l.reason for l in out.deleted()] == ["Drifted"]
        assert out.deleted()[0].started >= out.at(5 * MINUTE)
        assert len(out.live()) == 1 and out.summary["pods"]["pending"] == 0
        out = run({"tags": {"team": "blue"}})
        assert out.deleted() == [] and out.events("Drifted") == []

    def test_kwok_nodeclass_change_does_not_drift(self):
        # upstream's kwok provider reports no cloud-provider drift (IsDrifted returns "")
        out = self.drift({"spec": {"nodeRegistrationDelay": "5s"}}, kind="KWOKNodeClass")
        assert out.deleted() == [] and out.events("Drifted") == []

    def test_pods_of_a_node_awaiting_its_replacement_are_not_counted_twice(self):
        out = self.drift(template_labels(rev="2"), delay="1m")
        assert len(out.deleted("Drifted")) == 2
        assert len(out.summary_claims) == 4
        assert set(out.bound_pods().values()) == {l.name for l in out.live()}


# =========================================================================================
# Expiration
# =========================================================================================


class TestExpiration:
    def test_expire_after_deletes_at_the_deadline_regardless_of_budgets(self):
        out = simulate([kwok_nodeclass(), nodepool(cpus=(4,), expire="30m",
                                                   disruption={"consolidateAfter": "Never", "budgets": [{"nodes": "0"}]}),
                        deployment("web", 2, "3"), scenario([advance("45m")])], until="2h")
        expired = out.deleted("Expired")
        assert len(expired) == 2
        for l in expired:
            assert l.started == l.created + 30 * MINUTE
            assert l.created + 30 * MINUTE <= l.deleted <= l.created + 30 * MINUTE + 5
            assert out.events_of(l.name, "Expired", kind="NodeClaim")
        # the pods run again, on capacity launched after the expiry
        new = out.live()
        assert len(new) == 2 and all(n.created >= expired[0].started for n in new)
        web = out.pods_of("web")
        assert len(web) == 2 and {p["spec"]["nodeName"] for p in web} == {n.name for n in new}
        # expiration is not a voluntary disruption: no DisruptionStarted, no budget events
        assert not out.events("DisruptionStarted") and not out.events("ConsolidationCandidate")

    def test_never_expires_with_expire_after_never(self):
        out = simulate([kwok_nodeclass(), nodepool(cpus=(4,), expire="Never", disruption={"consolidateAfter": "Never"}),
                        deployment("web", 1, "3"), scenario([advance("3h")])], until="4h")
        assert out.deleted() == [] and not out.events("Expired")


# =========================================================================================
# Interruption
# =========================================================================================


class TestInterruption:
    SPOT = dict(cpus=(4,), capacity=("spot",), disruption={"consolidateAfter": "Never", "budgets": [{"nodes": "0"}]})

    def test_interrupting_a_named_spot_node(self):
        steps = [advance("5m"), {"interrupt": {"node": FIRST}}, advance("10m")]
        out = simulate([kwok_nodeclass(), nodepool(**self.SPOT), deployment("web", 2, "3"), scenario(steps)])
        assert FIRST in out.lives, "the first NodeClaim's name changed"
        victim = out.lives[FIRST]
        assert victim.reason == "Interrupted"
        assert victim.started == out.at(5 * MINUTE) and victim.deleted <= out.at(5 * MINUTE + 5)
        (warning,) = out.events_of(victim.name, "SpotInterrupted")
        assert warning["type"] == "Warning" and warning["message"] == "Spot interruption warning was triggered"
        assert out.events_of(victim.name, "TerminatingOnInterruption")
        # its pod runs elsewhere, on a node that was not interrupted
        web = out.pods_of("web")
        assert len(web) == 2 and victim.name not in {p["spec"]["nodeName"] for p in web}
        assert all(out.lives[p["spec"]["nodeName"]].deleted is None for p in web)
        # the interrupted offering (type, zone, spot) is not what replaced it
        (rep,) = [l for l in out.lives.values() if l.created > out.at(5 * MINUTE)]
        assert (rep.instance_type, rep.zone) != (victim.instance_type, victim.zone) and rep.capacity_type == "spot"

    def test_interrupting_by_selector_takes_the_first_count_nodes_by_name(self):
        sel = {"matchLabels": {"karpenter.sh/capacity-type": "spot"}}
        steps = [advance("5m"), {"interrupt": {"selector": sel, "count": 1}}, advance("10m")]
        out = simulate([kwok_nodeclass(), nodepool(**self.SPOT), deployment("web", 3, "3"), scenario(steps)])
        first = sorted(l.name for l in out.lives.values() if l.created < out.at(MINUTE))
        (victim,) = out.deleted()
        assert victim.name == first[0] and victim.reason == "Interrupted"
        assert len(out.events("SpotInterrupted")) == 1
        assert len(out.pods_of("web")) == 3 and out.summary["pods"]["pending"] == 0

    def test_interrupted_offering_is_avoided_for_a_while(self):
        steps = [advance("5m"), {"interrupt": {"node": FIRST}}, advance("1m"),
                 {"apply": [deployment("soon", 1, "3")]}, advance("9m"),
                 {"apply": [deployment("later", 1, "3")]}, advance("5m")]
        out = simulate([kwok_nodeclass(), nodepool(**self.SPOT), deployment("web", 1, "3"), scenario(steps)])
        victim = out.lives[FIRST]
        assert victim.zone == "test-zone-a"
        by_pod = {p["metadata"]["name"].split("-")[0]: out.lives[p["spec"]["nodeName"]] for p in out.of("Pod")}
        # right after the interruption neither the replacement nor a new workload goes to that offering
        assert by_pod["web"].zone != "test-zone-a" and by_pod["soon"].zone != "test-zone-a"
        # once it has been forgotten, the cheapest offering (zone a first) is used again
        assert by_pod["later"].zone == "test-zone-a"


# =========================================================================================
# Termination: drain order and the disrupted taint
# =========================================================================================


class TestTermination:
    @pytest.fixture(scope="class")
    def drained(self):
        steps = [advance("2m"), {"interrupt": {"node": FIRST}}, advance("10m")]
        return simulate([CRITICAL, kwok_nodeclass(),
                         nodepool(cpus=(8,), capacity=("spot",), disruption={"consolidateAfter": "Never"}),
                         deployment("web", 2, "1"), pdb("web", "web", minAvailable=1),
                         deployment("crit", 1, "1", priorityClassName="system-cluster-critical"),
                         daemonset("agent", cpu="100m"),
                         daemonset("blanket", cpu="100m", tolerations=[{"operator": "Exists"}]),
                         scenario(steps)])

    def evictions(self, out: Result) -> dict[str, list[float]]:
        groups = collections.defaultdict(list)
        for e in out.events("Evicted"):
            groups[e["involvedObject"]["name"].split("-")[0]].append(epoch(e["firstTimestamp"]))
        return groups

    def test_non_critical_pods_go_first_daemonsets_after_them_critical_last(self, drained):
        ev = self.evictions(drained)
        assert len(ev["web"]) == 2 and len(ev["agent"]) == 1 and len(ev["crit"]) == 1
        assert max(ev["web"]) < min(ev["agent"]) < min(ev["crit"])
        victim = drained.lives[FIRST]
        assert max(ev["crit"]) <= victim.deleted

    def test_pods_tolerating_the_disrupted_taint_are_not_evicted(self, drained):
        assert "blanket" not in self.evictions(drained)

    def test_drain_honours_the_pdb(self, drained):
        # minAvailable 1 of 2: the second web pod is evicted only once the first one's successor runs
        ev = sorted(self.evictions(drained)["web"])
        victim = FIRST
        rebinds = sorted(epoch(e["firstTimestamp"]) for e in drained.events("Scheduled")
                         if e["involvedObject"]["name"].startswith("web-") and not e["message"].endswith(victim)
                         and epoch(e["firstTimestamp"]) >= ev[0])
        assert rebinds and ev[0] < rebinds[0] <= ev[1]
        assert any("violates a PDB" in e["message"] for e in drained.events_of(victim, "FailedDraining"))
        assert all(p["spec"]["nodeName"] != victim for p in drained.of("Pod"))
        assert drained.summary["pods"]["pending"] == 0

    def test_disrupted_taint_keeps_new_pods_off_a_draining_node(self):
        # the node expires at 30m01 and its drain waits on a do-not-disrupt pod until 40m01;
        # a pod arriving at 32m that would fit on it must go elsewhere. The run stops mid-drain.
        steps = [advance("32m"), {"apply": [pod("newcomer", cpu="1")]}, advance("3m")]
        out = simulate([kwok_nodeclass(), nodepool(cpus=(8,), expire="30m", tgp="10m",
                                                   disruption={"consolidateAfter": "Never"}),
                        pod("guarded", cpu="1", annotations={DND: "true"}), scenario(steps)], until="35m")
        draining = out.bound_pods()["guarded"]
        assert out.claim(draining)["deletedAt"] is None and out.claim(draining)["disruptionReason"] == "Expired"
        assert DISRUPTED_TAINT in (out.nodes[draining]["spec"].get("taints") or [])
        assert out.bound_pods()["newcomer"] not in (None, draining)
        assert [e for e in out.scheduled_to(draining) if epoch(e["firstTimestamp"]) > out.at(30 * MINUTE)] == []


# =========================================================================================
# Properties over random small clusters and timelines
# =========================================================================================

ADVANCES = ["20s", "1m", "2m", "5m"]
ADVANCE_SECONDS = {"20s": 20, "40s": 40, "1m": 60, "2m": 120, "5m": 300}
# simplest first (Hypothesis shrinks towards the first): permissive budgets
BUDGET_NODES = ["100%", "1", "2", "50%", "34%", "3", "0"]
WINDOWS = [None, None, ("*/10 * * * *", "5m"), ("@hourly", "20m")]


@st.composite
def budget(draw) -> dict:
    b: dict = {"nodes": draw(st.sampled_from(BUDGET_NODES))}
    if draw(st.integers(0, 3)) == 0:
        b["reasons"] = sorted(draw(st.sets(st.sampled_from(VOLUNTARY), min_size=1)))
    window = draw(st.sampled_from(WINDOWS))
    if window:
        b["schedule"], b["duration"] = window
    return b


budget_lists = st.lists(budget(), min_size=1, max_size=2)


@st.composite
def worlds(draw) -> dict:
    """One or two kwok NodePools of small sizes, workloads that arrive in a few batches (so they spread
    over several nodes), protected pods, and a timeline of scale-downs and -ups, budget patches and
    template changes (drift)."""
    pools = []
    for i in range(draw(st.integers(1, 2))):
        pools.append({
            "name": f"pool-{i}",
            "policy": draw(st.sampled_from(["WhenEmptyOrUnderutilized", "WhenEmpty", "WhenEmptyOrUnderutilized"])),
            "after": draw(st.sampled_from(["0s", "30s", "1m"])),
            "budgets": draw(budget_lists),
            "cpus": draw(st.sampled_from([(2, 4), (2,), (4,), (4, 8)])),
        })
    names = [p["name"] for p in pools]
    workloads = [{"name": f"w{j}", "pool": draw(st.sampled_from(names)), "replicas": draw(st.integers(1, 8)),
                  "cpu": draw(st.sampled_from(["500m", "700m", "1", "1500m"])),
                  "arrives": draw(st.sampled_from(["0s", "20s", "1m"]))}
                 for j in range(draw(st.integers(1, 3)))]
    protected = [{"name": f"keep{j}", "pool": draw(st.sampled_from(names)),
                  "replicas": draw(st.integers(1, 2)), "cpu": draw(st.sampled_from(["250m", "500m", "1"])),
                  "guard": draw(st.sampled_from(["do-not-disrupt", "pdb"]))}
                 for j in range(draw(st.integers(0, 2)))]
    wl = [w["name"] for w in workloads]
    action = st.one_of(
        st.tuples(st.just("scale"), st.sampled_from(wl), st.integers(0, 2)),
        st.tuples(st.just("scale"), st.sampled_from(wl), st.integers(0, 8)),
        st.tuples(st.just("budgets"), st.sampled_from(names), budget_lists),
        st.tuples(st.just("drift"), st.sampled_from(names), st.integers(1, 3)),
        st.tuples(st.just("wait"), st.just(""), st.just(0)),
    )
    timeline = draw(st.lists(st.tuples(action, st.sampled_from(ADVANCES)), min_size=2, max_size=6))
    delay = draw(st.sampled_from([None, "3s", "20s", "25s"]))
    return {"pools": pools, "workloads": workloads, "protected": protected, "timeline": timeline, "delay": delay}


def world_documents(w: dict) -> tuple[list[dict], dict[str, list[tuple[float, list[dict]]]]]:
    """The manifests of a world, and each NodePool's budget history [(from, budgets)]."""
    docs: list[dict] = [kwok_nodeclass(w["delay"])]
    history: dict[str, list[tuple[float, list[dict]]]] = {}
    for p in w["pools"]:
        np = nodepool(p["name"], cpus=p["cpus"], labels={"pool": p["name"]}, disruption={
            "consolidationPolicy": p["policy"], "consolidateAfter": p["after"], "budgets": p["budgets"]})
        docs.append(np)
        history[p["name"]] = [(0.0, p["budgets"])]
    arrivals: dict[str, list[dict]] = collections.defaultdict(list)
    for wl in w["workloads"]:
        arrivals[wl["arrives"]].append(deployment(wl["name"], wl["replicas"], wl["cpu"], nodeSelector={"pool": wl["pool"]}))
    docs.extend(arrivals.pop("0s", []))
    for k in w["protected"]:
        if k["guard"] == "do-not-disrupt":
            docs.append(deployment(k["name"], k["replicas"], k["cpu"], annotations={DND: "true"},
                                   nodeSelector={"pool": k["pool"]}))
        else:
            docs.append(deployment(k["name"], k["replicas"], k["cpu"], nodeSelector={"pool": k["pool"]}))
            docs.append(pdb(k["name"], k["name"], maxUnavailable=0))
    steps: list[dict] = []
    now = 0.0
    for at, wait in (("20s", "20s"), ("1m", "40s")):
        if arrivals.get(at):
            steps += [advance(wait), {"apply": arrivals[at]}]
        else:
            steps.append(advance(wait))
        now += ADVANCE_SECONDS[wait]
    steps.append(advance("2m"))
    now += 120
    for (kind, target, arg), wait in w["timeline"]:
        if kind == "scale":
            steps.append(scale(target, arg))
        elif kind == "budgets":
            steps.append(patch_nodepool({"spec": {"disruption": {"budgets": arg}}}, name=target))
            history[target].append((now, arg))
        elif kind == "drift":
            steps.append(patch_nodepool(template_labels(rev=f"r{arg}"), name=target))
        steps.append(advance(wait))
        now += ADVANCE_SECONDS[wait]
    steps.append(advance("10m"))
    docs.append(scenario(steps))
    return docs, history


def budgets_in_force(result: Result, history):
    def at(pool: str, t: float) -> list[list[dict]]:
        rel = t - result.start
        current = [b for since, b in history[pool] if since <= rel][-1]
        exact = [b for since, b in history[pool] if since == rel]
        before = [b for since, b in history[pool] if since < rel]
        return [current] + exact + (before[-1:] if exact else [])
    return at


class TestProperties:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(worlds())
    def test_random_timelines_keep_budgets_blockers_and_pods(self, w):
        docs, history = world_documents(w)
        out = simulate(docs, until="1h")
        lives = out.lives

        # 1. no NodePool ever has more nodes under voluntary disruption than its budgets allowed
        assert budget_violations(out, budgets_in_force(out, history)) == []
        assert {l.reason for l in lives.values()} <= {None, *VOLUNTARY}

        # 2. a node hosting a do-not-disrupt pod or a pod whose PDB allows nothing is never disrupted:
        #    such pods stay on the node they were first scheduled to, and that node stays
        first = out.first_scheduled()
        protected = [p for p in out.of("Pod") if p["metadata"]["name"].startswith("keep")]
        assert len(protected) == sum(k["replicas"] for k in w["protected"])
        for p in protected:
            name = p["metadata"]["name"]
            node, _ = first[name]
            assert p["spec"].get("nodeName") == node, name
            life = lives[out.claim_of_node(node)["name"]]
            assert life.started is None and life.deleted is None, (name, life)
        assert not [e for e in out.events("Evicted") + out.events("Disrupted")
                    if e["involvedObject"]["name"].startswith("keep")]

        # 3. every pod (each fits some NodePool) is bound at the end, to a node that exists
        assert out.summary["pods"]["pending"] == 0, out.summary["pendingPods"]
        assert all(node in out.nodes for node in out.bound_pods().values())

        # 4. every consolidation replacement is strictly cheaper than what it replaces, and was
        #    launched when the command started
        for when, cands, reps in replace_commands(out):
            assert reps, (when, cands)
            assert sum(lives[r].price for r in reps) < sum(lives[c].price for c in cands)
            assert all(lives[r].created == when == lives[c].started for r in reps for c in cands)
