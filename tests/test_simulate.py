"""End-to-end tests of `karpy simulate` (../shared/contract/simulate.md).

Each test hands the simulator manifests a user would write and checks what a
user reads back: which NodeClaims were made, on what, for which pods, when,
at what price, and why pods stay pending. Most scenarios use the kwok catalog
(fast and provider-neutral); the examples/ directories are checked against
upstream Karpenter's own results.

Most runs go through ``karpy.cli.main`` with click's CliRunner (the real
command, in-process); a few run the installed ``karpy`` console script.
KWOK NodePools here set ``consolidateAfter: Never`` so that the placements
being checked are the provisioner's, not a later consolidation's.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
from datetime import datetime, timezone
from decimal import Decimal
from functools import lru_cache
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from karpy.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "simulate"
WORLD = FIXTURES / "kwok-world.yaml"

START = "2026-01-01T00:00:00Z"
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
DECIMAL = re.compile(r"^\d+\.\d+$")
PRICE_ANNOTATION = "karpy.dev/price-per-hour"
WELL_KNOWN_LABELS = (
    "karpenter.sh/nodepool",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/zone",
    "karpenter.sh/capacity-type",
    "kubernetes.io/arch",
    "kubernetes.io/os",
)
PROVIDER_LABEL = {  # one label each provider's nodes must carry
    "karpenter.azure.com": "karpenter.azure.com/sku-family",
    "karpenter.k8s.aws": "karpenter.k8s.aws/instance-family",
    "karpenter.kwok.sh": "karpenter.kwok.sh/instance-family",
}
DISRUPTION_REASONS = {None, "Empty", "Underutilized", "Drifted", "Expired", "Interrupted", "Unhealthy"}
SUMMARY_CLAIM_FIELDS = {
    "name", "nodePool", "instanceType", "capacityType", "zone", "arch", "pricePerHour",
    "createdAt", "deletedAt", "disruptionReason", "launchFailed",
}


def seconds(ts: str, since: str = START) -> float:
    """Seconds from ``since`` to the RFC 3339 time ``ts``."""
    def parse(s: str) -> datetime:
        return datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)

    return (parse(ts) - parse(since)).total_seconds()


# --- manifests ----------------------------------------------------------------------------

KWOK_REF = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}


def kwok_nodeclass(delay: str | None = None, name: str = "default") -> dict:
    obj: dict = {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": name}}
    if delay:
        obj["spec"] = {"nodeRegistrationDelay": delay}
    return obj


def nodepool(name: str = "default", *, arch=("amd64",), capacity=("on-demand",), family=("c",), cpus=None,
             taints=None, startup_taints=None, labels=None, limits=None, weight=None, node_class="default") -> dict:
    reqs = [
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": list(arch)},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": list(capacity)},
    ]
    if family:
        reqs.append({"key": "karpenter.kwok.sh/instance-family", "operator": "In", "values": list(family)})
    if cpus:
        reqs.append({"key": "karpenter.kwok.sh/instance-cpu", "operator": "In", "values": [str(c) for c in cpus]})
    tspec: dict = {"requirements": reqs, "nodeClassRef": dict(KWOK_REF, name=node_class)}
    if taints:
        tspec["taints"] = list(taints)
    if startup_taints:
        tspec["startupTaints"] = list(startup_taints)
    template: dict = {"spec": tspec}
    if labels:
        template["metadata"] = {"labels": dict(labels)}
    spec: dict = {"template": template, "disruption": {"consolidateAfter": "Never"}}
    if limits:
        spec["limits"] = dict(limits)
    if weight is not None:
        spec["weight"] = weight
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def container(cpu=None, memory=None, gpu=None) -> dict:
    c: dict = {"name": "main", "image": "registry.example.com/app:1"}
    requests = {}
    if cpu is not None:
        requests["cpu"] = str(cpu)
    if memory is not None:
        requests["memory"] = memory
    if requests:
        c["resources"] = {"requests": requests}
    if gpu:
        c.setdefault("resources", {})["limits"] = {"nvidia.com/gpu": gpu}
    return c


def pod_spec(cpu=None, memory=None, **spec) -> dict:
    out = {"containers": [container(cpu, memory)]}
    out.update(spec)
    return out


def pod(name: str, cpu=None, memory=None, namespace: str | None = None, annotations=None, labels=None, **spec) -> dict:
    meta: dict = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = dict(annotations)
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec(cpu, memory, **spec)}


def deployment(name: str, replicas: int, cpu=None, memory=None, namespace: str = "default", **spec) -> dict:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec(cpu, memory, **spec)},
        },
    }


def daemonset(name: str, cpu="100m", memory="64Mi", namespace: str = "kube-system", **spec) -> dict:
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec(cpu, memory, **spec)},
        },
    }


def job(name: str, parallelism: int, completions: int | None, run_for: str | None, cpu="1", **spec) -> dict:
    template: dict = {"spec": pod_spec(cpu, None, restartPolicy="Never", **spec)}
    if run_for:
        template["metadata"] = {"annotations": {"karpy.dev/run-for": run_for}}
    jspec: dict = {"parallelism": parallelism, "template": template}
    if completions is not None:
        jspec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"}, "spec": jspec}


def node(name: str, cpu="4", memory="16Gi", zone: str | None = None, arch="amd64", taints=None,
         unschedulable=False, labels=None) -> dict:
    lbls = {"kubernetes.io/os": "linux", "kubernetes.io/arch": arch, "kubernetes.io/hostname": name}
    if zone:
        lbls["topology.kubernetes.io/zone"] = zone
    lbls.update(labels or {})
    spec: dict = {}
    if taints:
        spec["taints"] = list(taints)
    if unschedulable:
        spec["unschedulable"] = True
    capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": lbls}, "spec": spec,
            "status": {"capacity": capacity, "allocatable": dict(capacity)}}


def scenario(steps=(), settings=None, start=None, region=None) -> dict:
    spec: dict = {"steps": list(steps)}
    if settings:
        spec["settings"] = dict(settings)
    if start:
        spec["start"] = start
    if region:
        spec["region"] = region
    return {"apiVersion": "karpy.dev/v1alpha1", "kind": "Scenario", "metadata": {"name": "test"}, "spec": spec}


def kwok(*docs, delay: str | None = None, **pool) -> list[dict]:
    """A KWOKNodeClass, one NodePool ``default`` (options as :func:`nodepool`) and ``docs``."""
    return [kwok_nodeclass(delay), nodepool(**pool), *docs]


def dump(docs) -> str:
    return yaml.safe_dump_all(list(docs), sort_keys=False)


# --- running ------------------------------------------------------------------------------


class Output:
    """The parsed `-o json` result, with the lookups the tests need."""

    def __init__(self, data: dict):
        self.data = data
        self.items: list[dict] = data["items"]

    def of(self, kind: str) -> list[dict]:
        return [i for i in self.items if i["kind"] == kind]

    @property
    def summary(self) -> dict:
        (s,) = self.of("SimulationSummary")
        return s["status"]

    @property
    def summary_claims(self) -> list[dict]:
        return self.summary["nodeClaims"]

    @property
    def live_claims(self) -> list[dict]:
        return [c for c in self.summary_claims if c["deletedAt"] is None]

    @property
    def nodes(self) -> dict[str, dict]:
        return {n["metadata"]["name"]: n for n in self.of("Node")}

    @property
    def nodeclaims(self) -> dict[str, dict]:
        return {c["metadata"]["name"]: c for c in self.of("NodeClaim")}

    @property
    def pods(self) -> dict[str, dict]:
        return {p["metadata"]["name"]: p for p in self.of("Pod")}

    def pods_of(self, prefix: str) -> list[dict]:
        """Pods of a workload (by name prefix), DaemonSet pods excluded."""
        return [p for p in self.of("Pod") if p["metadata"]["name"].startswith(prefix + "-") and not is_daemon(p)]

    def node_of(self, p: dict) -> dict | None:
        return self.nodes.get(p["spec"].get("nodeName") or "")

    def claim_of_node(self, node_name: str) -> dict:
        """The summary entry of the NodeClaim whose node is ``node_name``."""
        (claim,) = [c for c in self.of("NodeClaim") if (c.get("status") or {}).get("nodeName") == node_name]
        (entry,) = [c for c in self.summary_claims if c["name"] == claim["metadata"]["name"]]
        return entry

    def claim_of_pod(self, p: dict) -> dict:
        return self.claim_of_node(p["spec"]["nodeName"])

    def events(self, reason: str | None = None) -> list[dict]:
        return [e for e in self.of("Event") if reason is None or e["reason"] == reason]

    def pending(self) -> dict[str, str]:
        return {p["name"]: p["message"] for p in self.summary["pendingPods"]}


def is_daemon(p: dict) -> bool:
    return any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or ())


def label(obj: dict, key: str) -> str | None:
    return (obj["metadata"].get("labels") or {}).get(key)


def pod_condition(p: dict) -> dict:
    (c,) = [c for c in p["status"]["conditions"] if c["type"] == "PodScheduled"]
    return c


def tolerates(p: dict, taint: dict) -> bool:
    for t in p["spec"].get("tolerations") or ():
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("operator") == "Exists" and not t.get("key"):
            return True
        if t.get("key") != taint["key"]:
            continue
        if t.get("operator") == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def invoke(args, input: str | None = None):
    return CliRunner().invoke(main, ["simulate", *args], input=input)


@pytest.fixture
def run(tmp_path):
    """``run(docs, *args)``: simulate ``docs`` (manifest dicts) and return the parsed JSON Output."""
    counter = iter(range(1000))

    def _run(docs, *args) -> Output:
        path = tmp_path / f"input-{next(counter)}.yaml"
        path.write_text(dump(docs))
        r = invoke([str(path), "-o", "json", *args])
        assert r.exit_code == 0, f"exit {r.exit_code}\nstderr:\n{r.stderr}\nexception: {r.exception!r}"
        return Output(json.loads(r.stdout))

    return _run


@pytest.fixture
def run_raw(tmp_path):
    """``run_raw(text, *args)``: simulate the YAML ``text`` from a file named in.yaml; the click Result."""

    def _run(text: str, *args, name: str = "in.yaml"):
        path = tmp_path / name
        path.write_text(text)
        return invoke([str(path), *args]), path

    return _run


@lru_cache(maxsize=None)
def example(name: str, *args: str) -> Output:
    r = invoke([str(EXAMPLES / name), "-o", "json", *args])
    assert r.exit_code == 0, r.stderr
    return Output(json.loads(r.stdout))


def karpy_command() -> list[str]:
    script = Path(sys.executable).with_name("karpy")
    return [str(script)] if script.exists() else [sys.executable, "-m", "karpy.cli"]


def run_cli(*args: str, stdin: str | None = None, hashseed: str = "0") -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONHASHSEED=hashseed)
    return subprocess.run([*karpy_command(), "simulate", *args], input=stdin, capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)


# =========================================================================================
# The examples
# =========================================================================================


class TestExamples:
    def test_aks_arm64_two_arm64_d_series_nodeclaims(self):
        out = example("aks-multiarch-arm64")
        claims = out.summary_claims
        assert len(claims) == 2, claims
        assert all(c["arch"] == "arm64" and c["nodePool"] == "default-demo" for c in claims)
        assert all(c["instanceType"].startswith("Standard_D") for c in claims)
        assert all(c["capacityType"] == "on-demand" and not c["launchFailed"] and c["deletedAt"] is None for c in claims)
        for nc in out.of("NodeClaim"):
            assert label(nc, "karpenter.azure.com/sku-family") == "D"
            assert label(nc, "kubernetes.io/arch") == "arm64"

    def test_aks_arm64_one_pod_on_2_vcpus_three_on_4_vcpus(self):
        out = example("aks-multiarch-arm64")
        inflate = out.pods_of("inflate")
        assert len(inflate) == 4
        assert all(p["spec"].get("nodeName") for p in inflate), "every inflate pod is bound"
        per_node = collections.Counter(p["spec"]["nodeName"] for p in inflate)
        by_cpu = {label(out.nodes[n], "karpenter.azure.com/sku-cpu"): count for n, count in per_node.items()}
        assert by_cpu == {"2": 1, "4": 3}
        assert out.summary["pods"]["pending"] == 0 and out.summary["pendingPods"] == []

    def test_aks_arm64_nodeclaim_requests_match_upstream_log(self):
        out = example("aks-multiarch-arm64")
        requests = {}
        for nc in out.of("NodeClaim"):
            requests[label(nc, "karpenter.azure.com/sku-cpu")] = nc["spec"]["resources"]["requests"]
        assert requests == {
            "2": {"cpu": "1350m", "memory": "570Mi", "pods": "7"},
            "4": {"cpu": "3350m", "memory": "570Mi", "pods": "9"},
        }

    def test_aks_arm64_daemonset_pods_on_both_nodes_and_counted(self):
        out = example("aks-multiarch-arm64")
        daemons = [p for p in out.of("Pod") if is_daemon(p)]
        assert collections.Counter(p["spec"]["nodeName"] for p in daemons) == {n: 6 for n in out.nodes}
        assert out.summary["pods"] == {"total": 16, "bound": 16, "pending": 0}

    def test_aks_arm64_batch_closes_one_second_after_the_pods(self):
        out = example("aks-multiarch-arm64")
        assert {c["createdAt"] for c in out.summary_claims} == {"2026-01-01T00:00:01Z"}

    def test_aks_amd64_costs_more_than_arm64(self):
        arm, amd = example("aks-multiarch-arm64"), example("aks-multiarch-amd64")
        assert {c["arch"] for c in amd.summary_claims} == {"amd64"}
        assert all(p["spec"].get("nodeName") for p in amd.pods_of("inflate"))
        assert Decimal(amd.summary["costPerHour"]) > Decimal(arm.summary["costPerHour"]) > 0

    def test_eks_graviton_multiarch_on_arm64_legacy_on_amd64(self):
        out = example("eks-graviton")
        color, legacy = out.pods_of("colorapp"), out.pods_of("legacy-amd64")
        assert len(color) == 6 and len(legacy) == 2
        for p in color:
            n = out.node_of(p)
            assert n is not None, p["metadata"]["name"]
            assert (label(n, "kubernetes.io/arch"), label(n, "karpenter.sh/nodepool")) == ("arm64", "graviton")
        for p in legacy:
            n = out.node_of(p)
            assert n is not None, p["metadata"]["name"]
            assert (label(n, "kubernetes.io/arch"), label(n, "karpenter.sh/nodepool")) == ("amd64", "x86")
        assert out.summary["pendingPods"] == []

    def test_gpu_example_web_on_default_inference_on_gpu(self):
        out = example("default-and-gpu-nodepools")
        web, inference = out.pods_of("web"), out.pods_of("inference")
        assert len(web) == 3 and len(inference) == 2
        for p in web:
            assert label(out.node_of(p), "karpenter.sh/nodepool") == "default"
        for p in inference:
            n = out.node_of(p)
            assert label(n, "karpenter.sh/nodepool") == "gpu"
            assert int(n["status"]["allocatable"].get("nvidia.com/gpu", "0")) >= 1
        assert out.summary["pendingPods"] == []

    def test_gpu_example_no_untolerating_pod_on_a_gpu_node(self):
        out = example("default-and-gpu-nodepools")
        gpu_nodes = {name: n for name, n in out.nodes.items() if label(n, "karpenter.sh/nodepool") == "gpu"}
        assert gpu_nodes
        for n in gpu_nodes.values():
            assert {"key": "team", "value": "gpu", "effect": "NoSchedule"} in n["spec"].get("taints", [])
        for p in out.of("Pod"):
            n = gpu_nodes.get(p["spec"].get("nodeName") or "")
            if n is not None:
                for t in n["spec"]["taints"]:
                    assert tolerates(p, t), f'{p["metadata"]["name"]} does not tolerate {t}'

    def test_region_flag_moves_the_catalog(self):
        out = example("aks-multiarch-arm64", "--region", "westeurope")
        assert out.summary_claims and all(c["zone"].startswith("westeurope-") for c in out.summary_claims)
        assert all(label(n, "topology.kubernetes.io/region") == "westeurope" for n in out.nodes.values())

    def test_scenario_region(self, run):
        docs = yaml.safe_load_all((EXAMPLES / "aks-multiarch-arm64" / "nodepool.yaml").read_text())
        docs = [d for d in docs if d] + [pod("p", cpu="1", nodeSelector={"aks-karpenter": "demo"}), scenario(region="westus2")]
        out = run(docs)
        assert [c["zone"][: len("westus2-")] for c in out.summary_claims] == ["westus2-"]


# =========================================================================================
# Output
# =========================================================================================


@pytest.fixture(scope="module")
def world() -> tuple[str, str]:
    """The JSON and YAML output of the kwok fixture scenario."""
    outs = []
    for fmt in ("json", "yaml"):
        r = invoke([str(WORLD), "-o", fmt])
        assert r.exit_code == 0, r.stderr
        outs.append(r.stdout)
    return outs[0], outs[1]


OUTPUT_CASES = ["world"] + sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir())


def output_of(case: str, world) -> Output:
    if case == "world":
        return Output(json.loads(world[0]))
    return example(case)


class TestOutput:
    def test_json_and_yaml_are_the_same_v1_list(self, world):
        from_json = json.loads(world[0])
        from_yaml = yaml.safe_load(world[1])
        assert from_json == from_yaml
        assert from_json["apiVersion"] == "v1" and from_json["kind"] == "List"
        kinds = collections.Counter(i["kind"] for i in from_json["items"])
        for kind in ("NodePool", "NodeClaim", "Node", "Pod", "Event"):
            assert kinds[kind] > 0, kind
        assert kinds["SimulationSummary"] == 1

    def test_items_carry_api_versions(self, world):
        out = Output(json.loads(world[0]))
        expected = {"NodePool": "karpenter.sh/v1", "NodeClaim": "karpenter.sh/v1", "Node": "v1", "Pod": "v1",
                    "Event": "v1", "SimulationSummary": "karpy.dev/v1alpha1"}
        for item in out.items:
            assert item["apiVersion"] == expected[item["kind"]], item["kind"]

    @pytest.mark.parametrize("case", OUTPUT_CASES)
    def test_nodepools_have_status_resources_and_conditions(self, case, world):
        out = output_of(case, world)
        for np in out.of("NodePool"):
            status = np["status"]
            assert "resources" in status and "conditions" in status, np["metadata"]["name"]
            mine = [n for n in out.nodes.values() if label(n, "karpenter.sh/nodepool") == np["metadata"]["name"]]
            if "nodes" in status["resources"]:
                assert int(status["resources"]["nodes"]) == len(mine)

    @pytest.mark.parametrize("case", OUTPUT_CASES)
    def test_summary_shape(self, case, world):
        out = output_of(case, world)
        s = out.summary
        assert RFC3339.match(s["start"]) and RFC3339.match(s["end"])
        assert seconds(s["end"], since=s["start"]) >= 0
        if case == "world":
            assert s["start"] == START, "the default start"
        assert isinstance(s["costPerHour"], str) and DECIMAL.match(s["costPerHour"])
        pods = out.of("Pod")
        bound = [p for p in pods if p["spec"].get("nodeName")]
        assert s["pods"] == {"total": len(pods), "bound": len(bound), "pending": len(pods) - len(bound)}
        assert sorted(p["name"] for p in s["pendingPods"]) == sorted(
            p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName"))
        for p in s["pendingPods"]:
            assert set(p) >= {"namespace", "name", "message"} and p["message"]
        created = []
        for c in s["nodeClaims"]:
            assert set(c) >= SUMMARY_CLAIM_FIELDS, c
            assert RFC3339.match(c["createdAt"])
            assert c["deletedAt"] is None or (RFC3339.match(c["deletedAt"]) and c["deletedAt"] >= c["createdAt"])
            assert c["disruptionReason"] in DISRUPTION_REASONS
            assert isinstance(c["launchFailed"], bool)
            if not c["launchFailed"]:
                assert DECIMAL.match(c["pricePerHour"]) and c["instanceType"] and c["zone"] and c["arch"]
            created.append(c["createdAt"])
        assert created == sorted(created), "nodeClaims are in creation order"
        live = {c["name"] for c in out.live_claims if not c["launchFailed"]}
        assert live == set(out.nodeclaims), "the live NodeClaims are the NodeClaim items"

    @pytest.mark.parametrize("case", OUTPUT_CASES)
    def test_cost_is_the_sum_of_the_nodes(self, case, world):
        out = output_of(case, world)
        prices = [Decimal(c["pricePerHour"]) for c in out.live_claims if not c["launchFailed"]]
        assert abs(Decimal(out.summary["costPerHour"]) - sum(prices, Decimal(0))) <= Decimal("0.0001") * (len(prices) + 1)
        node_prices = [Decimal(n["metadata"]["annotations"][PRICE_ANNOTATION])
                       for n in out.nodes.values() if label(n, "karpenter.sh/nodepool")]
        assert sorted(node_prices) == sorted(prices), "every live NodeClaim has its Node at the end of a settled run"

    @pytest.mark.parametrize("case", OUTPUT_CASES)
    def test_karpenter_nodes_and_nodeclaims_carry_well_known_labels(self, case, world):
        out = output_of(case, world)
        objs = list(out.of("NodeClaim")) + [n for n in out.of("Node") if label(n, "karpenter.sh/nodepool")]
        assert objs or not out.live_claims
        for obj in objs:
            labels = obj["metadata"].get("labels") or {}
            for key in WELL_KNOWN_LABELS:
                assert labels.get(key), f'{obj["kind"]}/{obj["metadata"]["name"]} lacks {key}'
            nodepool_obj = [np for np in out.of("NodePool") if np["metadata"]["name"] == labels["karpenter.sh/nodepool"]][0]
            group = nodepool_obj["spec"]["template"]["spec"]["nodeClassRef"]["group"]
            assert labels.get(PROVIDER_LABEL[group]), f'{obj["kind"]}/{obj["metadata"]["name"]} lacks {PROVIDER_LABEL[group]}'
            price = (obj["metadata"].get("annotations") or {}).get(PRICE_ANNOTATION)
            assert price is not None and DECIMAL.match(price), obj["metadata"]["name"]

    @pytest.mark.parametrize("case", OUTPUT_CASES)
    def test_nodes_agree_with_the_summary(self, case, world):
        out = output_of(case, world)
        for name, n in out.nodes.items():
            if not label(n, "karpenter.sh/nodepool"):
                continue
            c = out.claim_of_node(name)
            assert label(n, "node.kubernetes.io/instance-type") == c["instanceType"]
            assert label(n, "topology.kubernetes.io/zone") == c["zone"]
            assert label(n, "karpenter.sh/capacity-type") == c["capacityType"]
            assert label(n, "kubernetes.io/arch") == c["arch"]
            assert label(n, "karpenter.sh/nodepool") == c["nodePool"]
            assert n["metadata"]["annotations"][PRICE_ANNOTATION] == c["pricePerHour"]

    @pytest.mark.parametrize("case", OUTPUT_CASES)
    def test_events_in_time_order(self, case, world):
        out = output_of(case, world)
        events = out.of("Event")
        assert events
        times = [e["firstTimestamp"] for e in events]
        assert all(RFC3339.match(t) for t in times)
        assert times == sorted(times)
        for e in events:
            assert e["type"] in ("Normal", "Warning") and e["reason"] and e["message"] and e["involvedObject"]["kind"]

    def test_bound_pods_have_node_names_of_existing_nodes(self, world):
        out = Output(json.loads(world[0]))
        for p in out.of("Pod"):
            n = p["spec"].get("nodeName")
            if n:
                assert n in out.nodes
                assert pod_condition(p)["status"] == "True"

    def test_pending_pod_condition_names_the_nodepool(self, run):
        out = run(kwok(pod("huge", cpu="1000")))
        p = out.pods["huge"]
        assert "nodeName" not in p["spec"]
        cond = pod_condition(p)
        assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
        assert '"default"' in cond["message"]
        assert out.pending() == {"huge": cond["message"]}
        assert out.summary["pods"] == {"total": 1, "bound": 0, "pending": 1}

    def test_table_shows_claims_cost_and_pending_reasons(self, run_raw):
        r, path = run_raw(dump(kwok(deployment("web", 2, cpu="1"), pod("huge", cpu="1000"))))
        assert r.exit_code == 0, r.stderr
        table = r.stdout
        data = Output(json.loads(invoke([str(path), "-o", "json"]).stdout))
        for c in data.summary_claims:
            assert c["name"] in table and c["instanceType"] in table and c["pricePerHour"] in table
        assert f'${data.summary["costPerHour"]}' in table
        assert "default/huge" in table and "nodepool" in table

    @pytest.mark.parametrize("fmt", ["json", "yaml", "table"])
    def test_same_input_same_bytes_across_processes(self, fmt):
        a = run_cli(str(WORLD), "-o", fmt, hashseed="1")
        b = run_cli(str(WORLD), "-o", fmt, hashseed="4242")
        assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
        assert a.stdout and a.stdout == b.stdout

    @pytest.mark.parametrize("fmt", ["json", "yaml", "table"])
    def test_same_example_same_bytes_in_process(self, fmt):
        path = str(EXAMPLES / "aks-multiarch-arm64")
        a, b = invoke([path, "-o", fmt]), invoke([path, "-o", fmt])
        assert a.exit_code == b.exit_code == 0
        assert a.stdout == b.stdout

    def test_console_script_runs_the_readme_command(self):
        r = run_cli("examples/aks-multiarch-arm64")
        assert r.returncode == 0, r.stderr
        for c in example("aks-multiarch-arm64").summary_claims:
            assert c["name"] in r.stdout and c["instanceType"] in r.stdout
        assert f'${example("aks-multiarch-arm64").summary["costPerHour"]}' in r.stdout
        assert "Traceback" not in r.stderr

    def test_stdin_dash(self):
        text = "\n---\n".join((EXAMPLES / "aks-multiarch-arm64" / f).read_text()
                              for f in ("daemonsets.yaml", "nodepool.yaml", "workload.yaml"))
        r = run_cli("-", "-o", "json", stdin=text)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == example("aks-multiarch-arm64").data

    def test_directory_reads_yaml_files_in_name_order(self, tmp_path):
        (tmp_path / "b.yml").write_text(dump([pod("second", cpu="100m")]))
        (tmp_path / "a.yaml").write_text(dump(kwok()))
        (tmp_path / "notes.txt").write_text("not yaml: [")
        r = invoke([str(tmp_path), "-o", "json"])
        assert r.exit_code == 0, r.stderr
        assert Output(json.loads(r.stdout)).pods["second"]["spec"].get("nodeName")


# =========================================================================================
# Invalid input
# =========================================================================================

BROKEN_NODEPOOL = """\
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: broken}
spec:
  template:
    spec:
      requirements:
      - {key: kubernetes.io/os, operator: Foo, values: [linux]}
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
"""

UNKNOWN_KIND = """\
apiVersion: v1
kind: Namespace
metadata: {name: ok}
---
apiVersion: v1
kind: LimitRange
metadata: {name: settings, namespace: default}
spec: {limits: [{type: Container, defaultRequest: {cpu: 100m}}]}
"""

BAD_YAML = "apiVersion: v1\nkind: Pod\nmetadata: {name: x\n  spec: [\n"

BAD_SCENARIO_STEP = """\
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: timeline}
spec:
  steps:
  - advance: soon
"""

BAD_APPLIED_MANIFEST = """\
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: timeline}
spec:
  steps:
  - apply:
    - apiVersion: v1
      kind: Pod
      metadata: {name: p}
      spec: {containers: [{name: c, image: x, resources: {requests: {cpu: lots}}}]}
"""

TWO_SCENARIOS = """\
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: one}
---
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: two}
"""


def assert_input_error(result, *fragments: str) -> None:
    """Exit status 2, nothing on stdout, no traceback, and every fragment on stderr.
    ``result`` is a click Result or a subprocess.CompletedProcess."""
    stdout = result.stdout
    code = result.exit_code if hasattr(result, "exit_code") else result.returncode
    assert code == 2, f"exit {code}; stderr: {result.stderr}"
    assert stdout == "", f"nothing on stdout for invalid input, got: {stdout[:200]}"
    assert "Traceback" not in result.stderr
    for f in fragments:
        assert f in result.stderr, f"{f!r} not in {result.stderr!r}"


class TestInvalidInput:
    @pytest.mark.parametrize(
        "text, fragments",
        [
            (BROKEN_NODEPOOL, ("document 1", "NodePool/broken", "spec.template.spec.requirements[0].operator", "Foo")),
            # a kind that changes pods' requests and that karpy does not simulate (a ConfigMap is skipped instead)
            (UNKNOWN_KIND, ("document 1", "LimitRange/settings", "kind")),
            (BAD_YAML, ("document 0", "line")),
            (BAD_SCENARIO_STEP, ("document 0", "Scenario/timeline", "spec.steps[0].advance", "soon")),
            (BAD_APPLIED_MANIFEST, ("document 0", "Scenario/timeline",
                                    "spec.steps[0].apply[0].spec.containers[0].resources.requests.cpu")),
            (TWO_SCENARIOS, ("document 1", "Scenario/two", "Scenario")),
        ],
        ids=["operator", "unknown-kind", "yaml-syntax", "scenario-step", "applied-manifest", "two-scenarios"],
    )
    def test_bad_documents(self, run_raw, text, fragments):
        r, path = run_raw(text, "-o", "json")
        assert_input_error(r, path.name, *fragments)

    def test_every_problem_is_reported(self, run_raw):
        r, path = run_raw(BROKEN_NODEPOOL + "---\n" + UNKNOWN_KIND)
        assert_input_error(r, "NodePool/broken", "LimitRange/settings")

    @pytest.mark.parametrize("until", ["5x", "90", "soon"])
    def test_bad_until(self, until):
        r = invoke([str(EXAMPLES / "aks-multiarch-arm64"), "--until", until])
        assert_input_error(r, "--until")

    def test_negative_until(self):
        r = invoke([str(EXAMPLES / "aks-multiarch-arm64"), "--until", "-5m"])
        assert_input_error(r, "--until")

    @pytest.mark.parametrize("example_name", ["aks-multiarch-arm64", "eks-graviton"])
    def test_unknown_region_for_a_cloud_catalog(self, example_name):
        r = invoke([str(EXAMPLES / example_name), "--region", "nowhere"])
        assert_input_error(r, "--region", "nowhere")

    def test_enormous_request_is_not_an_internal_error(self, run_raw):
        r, _ = run_raw(dump([pod("p", memory="100Ei")]), "-o", "json")
        assert r.exit_code in (0, 2), f"exit {r.exit_code}: {r.stderr[-300:]}"
        assert "Traceback" not in r.stderr

    def test_kwok_accepts_any_region(self, run):
        out = run(kwok(pod("p", cpu="1")), "--region", "westeurope")
        assert out.summary_claims[0]["zone"].startswith("test-zone-")

    def test_unknown_scenario_region_names_file_and_document(self, tmp_path):
        for f in ("daemonsets.yaml", "nodepool.yaml", "workload.yaml"):
            (tmp_path / f).write_text((EXAMPLES / "aks-multiarch-arm64" / f).read_text())
        (tmp_path / "zz-scenario.yaml").write_text(dump([scenario(region="moon-1")]))
        r = invoke([str(tmp_path)])
        assert_input_error(r, "zz-scenario.yaml", "document 0", "Scenario/test", "spec.region", "moon-1")

    def test_errors_in_a_directory_name_the_file(self, tmp_path):
        (tmp_path / "a.yaml").write_text(dump(kwok()))
        (tmp_path / "b.yaml").write_text(BROKEN_NODEPOOL)
        r = invoke([str(tmp_path)])
        assert_input_error(r, "b.yaml", "document 1", "NodePool/broken")

    def test_errors_on_stdin_name_stdin(self):
        r = invoke(["-", "-o", "json"], input=BROKEN_NODEPOOL)
        assert_input_error(r, "stdin", "document 1", "NodePool/broken", "operator")

    def test_missing_file(self, tmp_path):
        r = invoke([str(tmp_path / "nope.yaml")])
        assert_input_error(r, "nope.yaml")

    def test_console_script_exit_status_and_streams(self, tmp_path):
        path = tmp_path / "broken.yaml"
        path.write_text(BROKEN_NODEPOOL)
        r = run_cli(str(path), "-o", "yaml")
        assert_input_error(r, "broken.yaml", "document 1", "NodePool/broken", "spec.template.spec.requirements[0].operator")


# =========================================================================================
# The simulated world
# =========================================================================================


class TestBatching:
    def test_pods_applied_together_make_one_batch(self, run):
        out = run(kwok(deployment("web", 5, cpu="1"), pod("a", cpu="2"), pod("b", cpu="500m")))
        assert len(out.events("ComputedNodeClaims")) == 1
        assert out.summary_claims and {c["createdAt"] for c in out.summary_claims} == {"2026-01-01T00:00:01Z"}
        assert out.summary["pendingPods"] == []

    def test_batch_idle_duration_setting(self, run):
        out = run(kwok(pod("a", cpu="1"), scenario(settings={"batchIdleDuration": "5s"})))
        assert [c["createdAt"] for c in out.summary_claims] == ["2026-01-01T00:00:05Z"]

    def test_each_arrival_restarts_the_idle_timer(self, run):
        steps = [{"apply": [pod("a", cpu="1")]}, {"advance": "3s"}, {"apply": [pod("b", cpu="1")]}]
        out = run(kwok(scenario(steps, settings={"batchIdleDuration": "5s"})))
        assert len(out.events("ComputedNodeClaims")) == 1
        assert {c["createdAt"] for c in out.summary_claims} == {"2026-01-01T00:00:08Z"}

    @staticmethod
    def stream(idle: str, max_: str) -> list[dict]:
        """16 pods, one every 2 s from t=0 to t=30 s, each needing its own 1-vCPU node; nodes register
        only after 5 minutes, so every pod waits for a NodeClaim of its own."""
        steps: list[dict] = []
        for i in range(16):
            steps.append({"apply": [pod(f"p{i:02d}", cpu="900m")]})
            if i < 15:
                steps.append({"advance": "2s"})
        return kwok(scenario(steps, settings={"batchIdleDuration": idle, "batchMaxDuration": max_}),
                    delay="5m", cpus=(1,))

    def batches(self, out: Output) -> dict[str, list[float]]:
        """Batch time -> the arrival times (s) of the pods it provisioned: the pods that arrived since the
        previous batch, one NodeClaim each. (Which of the identical in-flight NodeClaims a pod ends on is
        not the batch's: every batch places all pending pods again, as upstream's does.)"""
        created = collections.Counter(c["createdAt"] for c in out.summary_claims)
        arrivals = sorted(seconds(p["metadata"]["creationTimestamp"]) for p in out.of("Pod"))
        got: dict[str, list[float]] = {}
        for at in sorted(created):
            got[at] = [a for a in arrivals if a < seconds(at) and all(a >= seconds(b) for b in got)]
            assert len(got[at]) == created[at], f"batch at {at} made {created[at]} NodeClaims for {got[at]}"
        return got

    def test_stream_with_short_idle_is_one_batch_per_arrival(self, run):
        out = run(self.stream("1s", "10s"))
        batches = self.batches(out)
        assert len(batches) == 16
        for at, arrivals in batches.items():
            assert arrivals == [seconds(at) - 1]

    def test_batch_max_duration_caps_the_window(self, run):
        out = run(self.stream("3s", "10s"))
        assert out.summary["pods"]["bound"] == 16
        batches = self.batches(out)
        assert min(batches) == "2026-01-01T00:00:10Z", "the first window closes 10 s after it opened"
        assert len(batches) >= 3
        for at, arrivals in batches.items():
            assert seconds(at) - min(arrivals) <= 10, f"batch at {at} held a pod from t={min(arrivals)}"

    def test_without_the_cap_the_stream_is_one_batch(self, run):
        out = run(self.stream("3s", "1m"))
        assert dict((k, len(v)) for k, v in self.batches(out).items()) == {"2026-01-01T00:00:33Z": 16}


class TestRegistration:
    def test_kwok_registration_delay(self, run):
        out = run(kwok(deployment("web", 2, cpu="1"), delay="45s"))
        (c,) = out.summary_claims
        (n,) = out.nodes.values()
        assert seconds(c["createdAt"]) == 1
        assert seconds(n["metadata"]["creationTimestamp"]) == 46
        for p in out.pods_of("web"):
            assert p["spec"]["nodeName"] == n["metadata"]["name"]
            assert p["status"]["startTime"] == n["metadata"]["creationTimestamp"]
        registered = [x for x in out.nodeclaims[c["name"]]["status"]["conditions"] if x["type"] == "Registered"]
        assert registered and registered[0]["lastTransitionTime"] == n["metadata"]["creationTimestamp"]

    def test_each_nodeclass_has_its_own_delay(self, run):
        docs = [kwok_nodeclass("2m", name="slow"), kwok_nodeclass(None, name="fast"),
                nodepool("slowpool", node_class="slow", labels={"speed": "slow"}),
                nodepool("fastpool", node_class="fast", labels={"speed": "fast"}),
                pod("s", cpu="1", nodeSelector={"speed": "slow"}), pod("f", cpu="1", nodeSelector={"speed": "fast"})]
        out = run(docs)
        assert seconds(out.node_of(out.pods["f"])["metadata"]["creationTimestamp"]) == 1
        assert seconds(out.node_of(out.pods["s"])["metadata"]["creationTimestamp"]) == 121
        assert seconds(out.pods["s"]["status"]["startTime"]) == 121

    def test_pods_wait_for_registration(self, run):
        out = run(kwok(deployment("web", 2, cpu="1"), delay="45s"), "--until", "30s")
        (c,) = out.summary_claims
        assert out.nodes == {}
        for p in out.pods_of("web"):
            assert "nodeName" not in p["spec"]
            assert pod_condition(p)["status"] == "False"
            assert p["status"].get("nominatedNodeName") == c["name"]

    def test_provider_default_delay_for_azure(self):
        out = example("aks-multiarch-arm64")
        for name, n in out.nodes.items():
            c = out.claim_of_node(name)
            assert seconds(n["metadata"]["creationTimestamp"]) > seconds(c["createdAt"])
            for p in out.of("Pod"):
                if p["spec"].get("nodeName") == name and not is_daemon(p):
                    assert p["status"]["startTime"] >= n["metadata"]["creationTimestamp"]

    def test_startup_taints_removed_at_ready_nodepool_taints_kept(self, run):
        startup = {"key": "example.com/agent-not-ready", "effect": "NoExecute"}
        taint = {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}
        toleration = {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}
        out = run(kwok(pod("p", cpu="1", tolerations=[toleration]), delay="10s",
                       startup_taints=[startup], taints=[taint]))
        (n,) = out.nodes.values()
        assert n["spec"].get("taints") == [taint]
        assert out.pods["p"]["spec"]["nodeName"] == n["metadata"]["name"]
        (nc,) = out.nodeclaims.values()
        assert nc["spec"]["startupTaints"] == [startup]
        assert any(x["type"] == "Ready" and x["status"] == "True" for x in n["status"]["conditions"])

    def test_aks_cilium_startup_taint_removed(self):
        out = example("aks-multiarch-arm64")
        for n in out.nodes.values():
            assert not any(t["key"] == "node.cilium.io/agent-not-ready" for t in n["spec"].get("taints", []))

    def test_kwok_nodes_have_no_region_label(self, run):
        out = run(kwok(pod("p", cpu="1")))
        (n,) = out.nodes.values()
        assert "topology.kubernetes.io/region" not in n["metadata"]["labels"]


class TestDaemonSets:
    def test_daemonset_pods_on_every_node_they_tolerate(self, run):
        taint = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
        tol = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
        docs = [
            kwok_nodeclass("20s"),
            nodepool("general", startup_taints=[{"key": "example.com/not-ready", "effect": "NoExecute"}]),
            nodepool("dedicated", taints=[taint], labels={"team": "ml"}),
            node("static", cpu="2", memory="8Gi", zone="test-zone-b"),
            daemonset("everywhere", cpu="100m", memory="64Mi", tolerations=[{"operator": "Exists"}]),
            daemonset("picky", cpu="300m", memory="128Mi"),
            daemonset("arm-only", cpu="50m", memory="32Mi", tolerations=[{"operator": "Exists"}],
                      nodeSelector={"kubernetes.io/arch": "arm64"}),
            deployment("web", 2, cpu="1500m"),
            deployment("ml", 1, cpu="1", nodeSelector={"team": "ml"}, tolerations=[tol]),
        ]
        out = run(docs)
        assert out.summary["pendingPods"] == []
        per_node: dict[str, set[str]] = collections.defaultdict(set)
        for p in out.of("Pod"):
            if is_daemon(p):
                per_node[p["spec"]["nodeName"]].add(p["metadata"]["ownerReferences"][0]["name"])
        for name, n in out.nodes.items():
            pool = label(n, "karpenter.sh/nodepool")
            expected = {"everywhere"} if pool == "dedicated" else {"everywhere", "picky"}
            assert per_node[name] == expected, (name, pool)
        assert len(out.nodes) == 3
        ds_pods = sum(len(v) for v in per_node.values())
        assert out.summary["pods"]["total"] == 3 + ds_pods

    def test_nodeclaim_requests_count_only_compatible_daemonsets(self, run):
        taint = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
        tol = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
        docs = [
            kwok_nodeclass(),
            nodepool("general"),
            nodepool("dedicated", taints=[taint], labels={"team": "ml"}),
            daemonset("everywhere", cpu="100m", memory="64Mi", tolerations=[{"operator": "Exists"}]),
            daemonset("picky", cpu="300m", memory="128Mi"),
            pod("web", cpu="1"),
            pod("ml", cpu="1", nodeSelector={"team": "ml"}, tolerations=[tol]),
        ]
        out = run(docs)
        requests = {label(nc, "karpenter.sh/nodepool"): nc["spec"]["resources"]["requests"] for nc in out.of("NodeClaim")}
        assert requests == {
            "general": {"cpu": "1400m", "memory": "192Mi", "pods": "3"},
            "dedicated": {"cpu": "1100m", "memory": "64Mi", "pods": "2"},
        }

    def test_daemonset_applied_later_reaches_existing_nodes(self, run):
        # c-2x nodes hold one 1500m pod each: three nodes exist when the DaemonSet arrives
        out = run(kwok(deployment("web", 3, cpu="1500m"),
                       scenario([{"advance": "2m"}, {"apply": [daemonset("late", cpu="10m")]}]), cpus=(2,)))
        assert len(out.nodes) == 3
        on = collections.Counter(p["spec"]["nodeName"] for p in out.of("Pod") if is_daemon(p))
        assert on == {n: 1 for n in out.nodes}

    def test_daemonset_runs_on_cordoned_node(self, run):
        out = run([node("cordoned", unschedulable=True), daemonset("agent", cpu="100m")])
        assert [p["spec"]["nodeName"] for p in out.of("Pod")] == ["cordoned"]


class TestScenarioSteps:
    def test_unavailable_zone_falls_back_then_available_restores(self, run):
        steps = [
            {"unavailable": {"instanceTypes": ["c-2x-amd64-linux"], "zones": ["test-zone-a"]}},
            {"apply": [pod("a", cpu="1")]},
            {"advance": "5m"},
            {"available": {}},
            {"apply": [pod("b", cpu="1500m")]},
        ]
        out = run(kwok(scenario(steps)))
        first, second = out.summary_claims
        assert (first["instanceType"], first["launchFailed"]) == ("c-2x-amd64-linux", False)
        assert first["zone"] != "test-zone-a"
        ice = [e for e in out.events("InsufficientCapacity") if e["involvedObject"]["name"] == first["name"]]
        assert ice and "c-2x-amd64-linux" in ice[0]["message"] and ice[0]["type"] == "Warning"
        assert (second["instanceType"], second["zone"]) == ("c-2x-amd64-linux", "test-zone-a")
        assert not [e for e in out.events("InsufficientCapacity") if e["involvedObject"]["name"] == second["name"]]

    def test_unavailable_instance_type_falls_back_to_next_cheapest(self, run):
        steps = [{"unavailable": {"instanceTypes": ["c-2x-amd64-linux"]}}, {"apply": [pod("a", cpu="1")]}]
        out = run(kwok(scenario(steps)))
        (c,) = out.summary_claims
        assert c["instanceType"] == "c-4x-amd64-linux" and not c["launchFailed"]
        assert out.pods["a"]["spec"]["nodeName"]
        assert out.events("InsufficientCapacity")

    def test_unavailable_capacity_type_only(self, run):
        steps = [{"unavailable": {"capacityType": "spot"}}, {"apply": [pod("a", cpu="1")]}]
        out = run(kwok(scenario(steps), capacity=("spot", "on-demand")))
        live = [c for c in out.summary_claims if not c["launchFailed"]]
        assert [c["capacityType"] for c in live] == ["on-demand"]
        assert out.pods["a"]["spec"]["nodeName"]

    def test_nothing_available_fails_the_launch_until_available(self, run):
        steps = [{"unavailable": {}}, {"apply": [pod("a", cpu="1")]}, {"advance": "10m"},
                 {"available": {"zones": ["test-zone-d"]}}]
        out = run(kwok(scenario(steps)))
        failed = [c for c in out.summary_claims if c["launchFailed"]]
        live = [c for c in out.summary_claims if not c["launchFailed"]]
        assert failed and all(c["deletedAt"] is not None and c["instanceType"] is None for c in failed)
        assert seconds(failed[0]["createdAt"]) == 1
        (ok,) = live
        assert ok["zone"] == "test-zone-d" and seconds(ok["createdAt"]) >= 600
        assert out.pods["a"]["spec"]["nodeName"]

    def test_pod_stays_pending_while_nothing_is_available(self, run):
        out = run(kwok(scenario([{"unavailable": {}}, {"apply": [pod("a", cpu="1")]}])), "--until", "10m")
        assert "a" in out.pending()
        assert all(c["launchFailed"] for c in out.summary_claims) and out.summary_claims
        assert out.nodes == {} and out.summary["costPerHour"] == "0.0000"

    def test_scale_patch_delete(self, run):
        arm64_reqs = [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "karpenter.kwok.sh/instance-family", "operator": "In", "values": ["c"]},
        ]
        steps = [
            {"apply": [deployment("web", 1, cpu="1500m"), deployment("tmp", 2, cpu="100m"), pod("loner", cpu="100m")]},
            {"advance": "1m"},
            {"delete": {"kind": "Deployment", "name": "tmp"}},
            {"delete": {"kind": "Pod", "name": "loner"}},
            {"patch": {"kind": "NodePool", "name": "default",
                       "merge": {"spec": {"template": {"spec": {"requirements": arm64_reqs}}}}}},
            {"scale": {"kind": "Deployment", "name": "web", "replicas": 3}},
            {"advance": "1m"},
        ]
        out = run(kwok(scenario(steps)))
        assert out.pods_of("tmp") == [] and "loner" not in out.pods
        web = out.pods_of("web")
        assert len(web) == 3 and all(p["spec"].get("nodeName") for p in web)
        claims = out.summary_claims
        assert (claims[0]["arch"], seconds(claims[0]["createdAt"])) == ("amd64", 1)
        # after the patch, new capacity comes from the patched NodePool (the amd64 node may also drift away)
        later = claims[1:]
        assert later and seconds(later[0]["createdAt"]) == 61
        assert {c["arch"] for c in later} == {"arm64"}
        np = out.of("NodePool")[0]
        assert {r["key"]: r["values"] for r in np["spec"]["template"]["spec"]["requirements"]}["kubernetes.io/arch"] == ["arm64"]

    def test_deleting_a_nodepool_removes_its_nodes(self, run):
        docs = [kwok_nodeclass(), nodepool("old", weight=10), nodepool("new", family=("m",)), deployment("web", 2, cpu="1"),
                scenario([{"advance": "5m"}, {"delete": {"kind": "NodePool", "name": "old"}}])]
        out = run(docs)
        old = [c for c in out.summary_claims if c["nodePool"] == "old"]
        assert old and all(c["deletedAt"] is not None and seconds(c["deletedAt"]) >= 300 for c in old)
        assert [np["metadata"]["name"] for np in out.of("NodePool")] == ["new"]
        web = out.pods_of("web")
        assert len(web) == 2 and all(label(out.node_of(p), "karpenter.sh/nodepool") == "new" for p in web)

    def test_scale_down_to_zero(self, run):
        out = run(kwok(deployment("web", 3, cpu="1"),
                       scenario([{"advance": "1m"}, {"scale": {"kind": "Deployment", "name": "web", "replicas": 0}}])))
        assert out.pods_of("web") == [] and out.summary["pods"]["total"] == 0

    def test_statefulset_scale(self, run):
        sts = {
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": "default"},
            "spec": {"replicas": 1, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                     "template": {"metadata": {"labels": {"app": "db"}}, "spec": pod_spec("500m")}},
        }
        out = run(kwok(sts, scenario([{"advance": "1m"}, {"scale": {"kind": "StatefulSet", "name": "db", "replicas": 3}}])))
        assert sorted(p["metadata"]["name"] for p in out.pods_of("db")) == ["db-0", "db-1", "db-2"]
        assert all(p["spec"].get("nodeName") for p in out.pods_of("db"))

    def test_patching_a_deployment_template_rolls_its_pods(self, run):
        patch = {"spec": {"template": {"spec": {"containers": [
            {"name": "main", "image": "registry.example.com/app:2", "resources": {"requests": {"cpu": "3"}}}]}}}}
        out = run(kwok(deployment("web", 2, cpu="500m"),
                       scenario([{"advance": "1m"}, {"patch": {"kind": "Deployment", "name": "web", "merge": patch}}])))
        web = out.pods_of("web")
        assert len(web) == 2
        assert all(p["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "3" for p in web)
        assert all(p["spec"].get("nodeName") for p in web)
        assert len(out.summary_claims) == 2

    def test_invalid_patch_leaves_the_object_unchanged(self, run):
        bad = {"spec": {"template": {"spec": {"requirements": [{"key": "kubernetes.io/arch", "operator": "Foo"}]}}}}
        out = run(kwok(scenario([{"patch": {"kind": "NodePool", "name": "default", "merge": bad}},
                                 {"apply": [pod("a", cpu="1")]}])))
        reqs = out.of("NodePool")[0]["spec"]["template"]["spec"]["requirements"]
        assert all(r["operator"] == "In" for r in reqs)
        assert out.pods["a"]["spec"].get("nodeName")

    def test_scenario_start(self, run):
        out = run(kwok(pod("a", cpu="1"), scenario(start="2026-03-01T12:00:00Z")))
        assert out.summary["start"] == "2026-03-01T12:00:00Z"
        assert [c["createdAt"] for c in out.summary_claims] == ["2026-03-01T12:00:01Z"]

    def test_manifests_outside_the_scenario_apply_before_its_first_step(self, run):
        out = run(kwok(deployment("base", 1, cpu="1"),
                       scenario([{"advance": "5m"}, {"apply": [pod("later", cpu="3")]}])))
        base = out.pods_of("base")[0]
        assert base["metadata"]["creationTimestamp"] == START
        assert out.pods["later"]["metadata"]["creationTimestamp"] == "2026-01-01T00:05:00Z"


class TestJobs:
    def test_job_completes_and_frees_its_node(self, run):
        steps = [{"advance": "15m"}, {"apply": [pod("after", cpu="3")]}]
        out = run(kwok(job("batch", 3, 3, "10m"), scenario(steps)))
        batch = out.pods_of("batch")
        assert len(batch) == 3 and {p["status"]["phase"] for p in batch} == {"Succeeded"}
        completed = out.events("Completed")
        assert completed and completed[0]["involvedObject"]["name"] == "batch"
        assert seconds(completed[0]["firstTimestamp"]) == 601
        (c,) = out.summary_claims  # the finished pods no longer take room: "after" reuses the node
        assert c["instanceType"] == "c-4x-amd64-linux"
        assert out.pods["after"]["spec"]["nodeName"] == batch[0]["spec"]["nodeName"]

    def test_job_runs_completions_in_waves_of_parallelism(self, run):
        out = run(kwok(job("waves", 2, 4, "5m")))
        pods = out.pods_of("waves")
        assert len(pods) == 4 and {p["status"]["phase"] for p in pods} == {"Succeeded"}
        starts = sorted(seconds(p["status"]["startTime"]) for p in pods)
        assert starts[0] < 60 and starts[2] >= 300
        assert len(out.events("Completed")) == 1

    def test_bare_pod_run_for(self, run):
        out = run(kwok(pod("once", cpu="1", annotations={"karpy.dev/run-for": "2m"}), pod("forever", cpu="1")))
        assert out.pods["once"]["status"]["phase"] == "Succeeded"
        assert out.pods["forever"]["status"]["phase"] == "Running"

    def test_job_without_run_for_keeps_running(self, run):
        out = run(kwok(job("endless", 2, 2, None)), "--until", "2h")
        assert {p["status"]["phase"] for p in out.pods_of("endless")} == {"Running"}
        assert not out.events("Completed")


class TestPending:
    def test_nodepool_limits_leave_pods_pending(self, run):
        out = run(kwok(deployment("web", 5, cpu="1500m"), limits={"cpu": "4"}))
        web = out.pods_of("web")
        bound = [p for p in web if p["spec"].get("nodeName")]
        pending = [p for p in web if not p["spec"].get("nodeName")]
        assert len(bound) == 2 and len(pending) == 3
        for p in pending:
            msg = pod_condition(p)["message"]
            assert '"default"' in msg and "limit" in msg
        np = out.of("NodePool")[0]
        assert Decimal(np["status"]["resources"]["cpu"]) <= 4

    def test_unschedulable_everywhere_names_every_nodepool(self, run):
        docs = [
            kwok_nodeclass(),
            nodepool("alpha"),
            nodepool("beta", taints=[{"key": "beta", "effect": "NoSchedule"}]),
            nodepool("gamma", node_class="missing"),
            pod("huge", cpu="1000"),
            pod("lost", cpu="100m", nodeSelector={"team": "nobody"}),
        ]
        out = run(docs)
        assert out.summary_claims == []
        pending = out.pending()
        assert set(pending) == {"huge", "lost"}
        for msg in pending.values():
            for name in ('"alpha"', '"beta"', '"gamma"'):
                assert name in msg, msg
        assert "taint" in pending["huge"]
        assert "team" in pending["lost"]
        warnings = [e for e in out.events("FailedScheduling") if e["involvedObject"]["name"] == "huge"]
        assert warnings and warnings[0]["type"] == "Warning"
        ready = {np["metadata"]["name"]: {c["type"]: c["status"] for c in np["status"]["conditions"]}.get("Ready")
                 for np in out.of("NodePool")}
        assert ready == {"alpha": "True", "beta": "True", "gamma": "False"}

    def test_heavier_nodepool_wins_over_a_cheaper_one(self, run):
        docs = [kwok_nodeclass(), nodepool("cheap", family=("c",)), nodepool("preferred", family=("m",), weight=10),
                pod("p", cpu="1")]
        out = run(docs)
        assert [(c["nodePool"], c["instanceType"]) for c in out.summary_claims] == [("preferred", "m-2x-amd64-linux")]

    def test_no_nodepool_at_all(self, run):
        out = run([pod("p", cpu="1")])
        assert out.pending()["p"]
        assert pod_condition(out.pods["p"])["reason"] == "Unschedulable"


class TestUntil:
    def test_until_bounds_the_run(self, run):
        out = run(kwok(pod("a", cpu="1")), "--until", "30s")
        assert out.summary["end"] == "2026-01-01T00:00:30Z"

    def test_until_bounds_the_steps(self, run):
        steps = [{"apply": [pod("early", cpu="1")]}, {"advance": "2h"}, {"apply": [pod("late", cpu="1")]}]
        out = run(kwok(scenario(steps)), "--until", "30m")
        assert out.summary["end"] == "2026-01-01T00:30:00Z"
        assert "early" in out.pods and "late" not in out.pods

    def test_until_cuts_long_running_pods_short(self, run):
        out = run(kwok(job("long", 1, 1, "3h")), "--until", "1h")
        assert seconds(out.summary["end"]) <= 3600
        assert [p["status"]["phase"] for p in out.pods_of("long")] == ["Running"]
        assert not out.events("Completed")

    def test_end_is_settled_time_or_until(self, run):
        # the pod starts at 00:00:01 and nothing else happens: settled at 00:15:01, or (if a running
        # pod counts as unsettled) cut at --until; anything else is neither
        out = run(kwok(pod("long", cpu="1", annotations={"karpy.dev/run-for": "3h"})), "--until", "1h")
        assert out.summary["end"] in ("2026-01-01T00:15:01Z", "2026-01-01T01:00:00Z")

    def test_default_until_is_one_hour(self, run):
        out = run(kwok(job("long", 1, 1, "3h")))
        assert seconds(out.summary["end"]) <= 3600


class TestExistingNodes:
    def test_pods_use_existing_nodes_first(self, run):
        out = run(kwok(node("static-1", cpu="4", zone="test-zone-b"), deployment("web", 5, cpu="1")))
        on = collections.Counter(p["spec"].get("nodeName") for p in out.pods_of("web"))
        assert on["static-1"] == 4
        (c,) = out.summary_claims
        assert on[c["name"]] == 1 and c["instanceType"] == "c-2x-amd64-linux"
        static = out.nodes["static-1"]
        assert label(static, "karpenter.sh/nodepool") is None
        assert PRICE_ANNOTATION not in (static["metadata"].get("annotations") or {})

    def test_tainted_or_cordoned_nodes_are_not_used(self, run):
        out = run(kwok(node("cordoned", unschedulable=True),
                       node("tainted", taints=[{"key": "special", "effect": "NoSchedule"}]),
                       pod("p", cpu="1")))
        (c,) = out.summary_claims
        assert out.pods["p"]["spec"]["nodeName"] not in ("cordoned", "tainted")

    def test_node_applied_later_takes_pending_pods(self, run):
        steps = [{"advance": "2m"}, {"apply": [node("extra", cpu="4", zone="test-zone-b")]}]
        out = run(kwok(deployment("web", 3, cpu="1500m"), scenario(steps), limits={"cpu": "2"}))
        on = collections.Counter(p["spec"].get("nodeName") for p in out.pods_of("web"))
        assert on["extra"] == 2 and None not in on
        assert len(out.summary_claims) == 1

    def test_high_priority_pod_gets_the_only_node(self, run):
        high = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000}
        out = run([high, node("only", cpu="2"), pod("a-low", cpu="1500m"), pod("b-high", cpu="1500m", priorityClassName="high")])
        assert out.pods["b-high"]["spec"].get("nodeName") == "only"
        assert "a-low" in out.pending()

    def test_priority_class_sets_pod_priority(self, run):
        high = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000}
        out = run(kwok(high, pod("p", cpu="1", priorityClassName="high")))
        assert out.pods["p"]["spec"].get("priority") == 1000


class TestOverheadAndVolumes:
    def test_runtime_class_overhead_raises_requests(self, run):
        rc = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "kata"}, "handler": "kata",
              "overhead": {"podFixed": {"cpu": "500m", "memory": "120Mi"}}}
        plain = run(kwok(pod("p", cpu="1500m")))
        out = run(kwok(rc, pod("p", cpu="1500m", runtimeClassName="kata")))
        assert plain.summary_claims[0]["instanceType"] == "c-2x-amd64-linux"
        assert out.summary_claims[0]["instanceType"] == "c-4x-amd64-linux"
        (nc,) = out.nodeclaims.values()
        assert nc["spec"]["resources"]["requests"] == {"cpu": "2", "memory": "120Mi", "pods": "1"}
        assert out.pods["p"]["spec"]["overhead"] == {"cpu": "500m", "memory": "120Mi"}

    STORAGE = [
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "zonal"},
         "provisioner": "disk.example.com", "volumeBindingMode": "WaitForFirstConsumer"},
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-c"},
         "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "zonal",
                  "csi": {"driver": "disk.example.com", "volumeHandle": "vol-c"},
                  "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                      {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-c"]}]}]}}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "default"},
         "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "zonal", "volumeName": "pv-c",
                  "resources": {"requests": {"storage": "10Gi"}}}},
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "zone-d-only"},
         "provisioner": "disk.example.com", "volumeBindingMode": "WaitForFirstConsumer",
         "allowedTopologies": [{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["test-zone-d"]}]}]},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "scratch", "namespace": "default"},
         "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "zone-d-only",
                  "resources": {"requests": {"storage": "1Gi"}}}},
    ]

    @staticmethod
    def with_claim(name: str, claim: str) -> dict:
        return pod(name, cpu="1", volumes=[{"name": "v", "persistentVolumeClaim": {"claimName": claim}}])

    def test_bound_zonal_pv_pins_the_zone(self, run):
        out = run(kwok(*self.STORAGE, self.with_claim("db", "data")))
        assert label(out.node_of(out.pods["db"]), "topology.kubernetes.io/zone") == "test-zone-c"
        assert out.summary_claims[0]["zone"] == "test-zone-c"

    def test_storage_class_topology_pins_the_zone(self, run):
        out = run(kwok(*self.STORAGE, self.with_claim("worker", "scratch")))
        assert out.summary_claims[0]["zone"] == "test-zone-d"

    def test_pinned_pod_skips_an_existing_node_in_another_zone(self, run):
        out = run(kwok(*self.STORAGE, node("static-b", cpu="8", zone="test-zone-b"),
                       self.with_claim("db", "data"), pod("free", cpu="1")))
        assert out.pods["free"]["spec"]["nodeName"] == "static-b"
        db_node = out.node_of(out.pods["db"])
        assert db_node["metadata"]["name"] != "static-b"
        assert label(db_node, "topology.kubernetes.io/zone") == "test-zone-c"
