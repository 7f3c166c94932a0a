"""What `karpy simulate` reads (docs/inputs.md): whole application folders, `helm template` and `kubectl kustomize`
streams, `-k DIR`, and HorizontalPodAutoscalers."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from karpy.api import load_text
from karpy.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "simulate"
CLUSTER = str(FIXTURES / "kwok-nodepool.yaml")
WEBAPP = str(FIXTURES / "webapp")
HAS_KUSTOMIZE = bool(shutil.which("kubectl") or shutil.which("kustomize"))
SKIPPED_WEBAPP = ("note: skipped 8 documents of 8 kinds that do not affect node provisioning: ConfigMap, Ingress, "
                  "NetworkPolicy, Role, RoleBinding, Secret, ServiceAccount, ServiceMonitor")


def simulate(*args: str, input: str | None = None):
    return CliRunner().invoke(main, ["simulate", *args], input=input)


def result(r) -> tuple[list[dict], dict]:
    """The pods and the SimulationSummary status of a `-o json` run."""
    assert r.exit_code == 0, r.stderr
    items = json.loads(r.stdout)["items"]
    return [i for i in items if i["kind"] == "Pod"], items[-1]["status"]


def dump(*docs) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


def deployment(name: str, replicas: int | None = 1, namespace: str = "default") -> dict:
    spec: dict = {"selector": {"matchLabels": {"app": name}},
                  "template": {"metadata": {"labels": {"app": name}},
                               "spec": {"containers": [{"name": "c", "image": "i",
                                                        "resources": {"requests": {"cpu": "500m"}}}]}}}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": spec}


def hpa(name: str, target: str, lo: int | None = None, hi: int = 10, version: str = "autoscaling/v2",
        kind: str = "Deployment") -> dict:
    spec: dict = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target}, "maxReplicas": hi}
    if lo is not None:
        spec["minReplicas"] = lo
    return {"apiVersion": version, "kind": "HorizontalPodAutoscaler", "metadata": {"name": name}, "spec": spec}


def scenario(*steps: dict) -> dict:
    return {"apiVersion": "karpy.dev/v1alpha1", "kind": "Scenario", "metadata": {"name": "s"},
            "spec": {"steps": list(steps)}}


def replicas(r, name: str) -> int:
    (d,) = [d for d in r.documents if d.kind == "Deployment" and d.name == name]
    return d.obj["spec"]["replicas"]


# --- application folders: kinds that do not affect node provisioning are skipped ---------------------------------

def test_an_application_folder_runs_with_its_services_configmaps_rbac_and_hpa():
    r = simulate(CLUSTER, WEBAPP, "-o", "json")
    pods, status = result(r)
    # the HPA's minReplicas (3) is what runs, not the Deployment's replicas (1)
    assert len(pods) == 3 and status["pods"] == {"total": 3, "bound": 3, "pending": 0}
    assert r.stderr.splitlines() == [
        f"note: {WEBAPP}/kustomization.yaml: skipped: a kustomization is not a manifest (karpy simulate -k {WEBAPP} "
        "renders the directory as kubectl apply -k does)",
        "note: HorizontalPodAutoscaler shop/web sets Deployment shop/web to 3 replicas (from 1; minReplicas 3, "
        "maxReplicas 10)",
        SKIPPED_WEBAPP,
    ]


def test_helm_template_output_on_standard_input():
    """What `helm template ... | karpy simulate -` hands over: "# Source:" comments, empty and null documents,
    a List, and kinds that do not affect node provisioning."""
    cluster = Path(CLUSTER).read_text()
    web = deployment("web", 2)
    stream = (
        "---\n# Source: web/templates/serviceaccount.yaml\n"
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: web}\n"
        "---\n# Source: web/templates/disabled.yaml\n"
        "---\n~\n---\nnull\n"
        "---\n# Source: web/templates/all.yaml\n"
        + yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web"}, "data": {"port": "80"}},
            web, None,
            {"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "web"}}]})
        + "---\n" + cluster + "\n---\n"
    )
    r = simulate("-", "-o", "json", input=stream)
    pods, status = result(r)
    assert status["pods"] == {"total": 2, "bound": 2, "pending": 0}
    assert r.stderr == ("note: skipped 3 documents of 3 kinds that do not affect node provisioning: Certificate, "
                        "ConfigMap, ServiceAccount\n")


def test_kinds_that_affect_provisioning_and_are_not_simulated_are_named_one_line_each():
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
            "spec": {"schedule": "0 0 * * *", "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}}}
    limits = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "defaults"}}
    rollout = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "web"},
               "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"}}
    typo = {"apiVersion": "apps/v1", "kind": "Deploymnet", "metadata": {"name": "web"}}
    r = simulate("-", input=Path(CLUSTER).read_text() + "\n---\n" + dump(cron, limits, rollout, quota, typo))
    assert r.exit_code == 2 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert lines == [
        'error: <stdin>: document 2 (CronJob/nightly): kind: Unsupported value: "batch/v1 CronJob": it creates Jobs '
        "on a schedule, which karpy does not simulate; simulate one run of it as a Job",
        'error: <stdin>: document 3 (LimitRange/defaults): kind: Unsupported value: "v1 LimitRange": it gives '
        "containers default requests and limits, which karpy does not apply",
        'error: <stdin>: document 4 (Rollout/web): kind: Unsupported value: "argoproj.io/v1alpha1 Rollout": it '
        "creates pods from its pod template, which karpy does not simulate",
        'error: <stdin>: document 5 (ResourceQuota/q): kind: Unsupported value: "v1 ResourceQuota": it caps the '
        "pods and requests of a namespace, which karpy does not enforce",
        'error: <stdin>: document 6 (Deploymnet/web): kind: Unsupported value: "apps/v1 Deploymnet": unknown kind: '
        "apps/v1 has no such kind (its kinds: ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet)",
    ]


def test_a_kustomization_named_as_a_file_is_refused_with_the_way_to_render_it():
    r = simulate(CLUSTER, f"{WEBAPP}/kustomization.yaml")
    assert r.exit_code == 2
    assert r.stderr == (f"error: {WEBAPP}/kustomization.yaml: a kustomization is not a manifest: karpy simulate "
                        f"-k {WEBAPP} renders it as kubectl apply -k does\n")


# --- -k DIR --------------------------------------------------------------------------------------------------------

@pytest.mark.skipif(not HAS_KUSTOMIZE, reason="needs kubectl or kustomize on PATH")
def test_k_renders_the_kustomization_as_kubectl_apply_k_does():
    r = simulate(CLUSTER, "-k", WEBAPP, "-o", "json")
    pods, status = result(r)
    # namePrefix reaches the Deployment and the HPA's scaleTargetRef alike: 3 pods of prod-web
    assert status["pods"]["bound"] == 3
    assert sorted({p["metadata"]["name"].rsplit("-", 2)[0] for p in pods}) == ["prod-web"]
    assert r.stderr.splitlines() == [
        "note: HorizontalPodAutoscaler shop/prod-web sets Deployment shop/prod-web to 3 replicas (from 1; "
        "minReplicas 3, maxReplicas 10)",
        SKIPPED_WEBAPP,
    ]


@pytest.mark.skipif(not HAS_KUSTOMIZE, reason="needs kubectl or kustomize on PATH")
def test_k_on_a_directory_that_does_not_render_exits_2_naming_it(tmp_path):
    r = simulate("-k", str(tmp_path))
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"error: -k {tmp_path}: ") and " failed: " in r.stderr
    assert "kustomization" in r.stderr  # the tool's own words: no kustomization file found


def test_k_without_kubectl_or_kustomize_exits_2_saying_so(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    r = simulate("-k", WEBAPP)
    assert r.exit_code == 2
    assert r.stderr == (f"error: -k {WEBAPP}: rendering a kustomization needs kubectl (kubectl kustomize) or "
                        "kustomize on PATH, and neither is there\n")


# --- HorizontalPodAutoscalers --------------------------------------------------------------------------------------

def test_an_hpa_keeps_its_target_within_min_and_max_and_leaves_zero_alone():
    r = load_text(dump(
        deployment("low", 1), deployment("high", 40), deployment("off", 0), deployment("unset", None),
        deployment("inside", 5),
        hpa("low", "low", lo=4), hpa("high", "high", lo=2, hi=8, version="autoscaling/v1"), hpa("off", "off", lo=3),
        hpa("unset", "unset"), hpa("inside", "inside", lo=2, hi=9)))
    assert r.errors == []
    assert [replicas(r, n) for n in ("low", "high", "off", "unset", "inside")] == [4, 8, 0, 1, 5]
    assert [d.name for d in r.autoscalers] == ["low", "high", "off", "unset", "inside"]
    assert all(d.kind != "HorizontalPodAutoscaler" for d in r.documents)  # applied, not simulated as an object


@pytest.mark.parametrize("spec, field, message", [
    ({"scaleTargetRef": {"kind": "Deployment", "name": "web"}}, "spec.maxReplicas", "Required value"),
    ({"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "minReplicas": 5, "maxReplicas": 2},
     "spec.maxReplicas", "Invalid value: 2: must be greater than or equal to `minReplicas`"),
    ({"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "minReplicas": 0, "maxReplicas": 2},
     "spec.minReplicas", "Invalid value: 0: must be greater than or equal to 1"),
    ({"scaleTargetRef": {"kind": "Deployment"}, "maxReplicas": 2}, "spec.scaleTargetRef.name", "Required value"),
    ({"maxReplicas": 2}, "spec.scaleTargetRef", "Required value"),
])
def test_an_invalid_hpa_is_refused_naming_the_field(spec, field, message):
    doc = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"}, "spec": spec}
    errors = [str(e) for e in load_text(dump(deployment("web"), doc), "hpa.yaml").errors]
    assert f"hpa.yaml: document 1 (HorizontalPodAutoscaler/web): {field}: {message}" in errors, errors


def test_an_hpa_of_a_removed_api_version_and_two_hpas_on_one_target_are_refused():
    old = hpa("web", "web", version="autoscaling/v2beta2")
    errors = [str(e) for e in load_text(dump(deployment("web"), old, hpa("a", "web"), hpa("b", "web")), "h.yaml").errors]
    assert errors == [
        'h.yaml: document 1 (HorizontalPodAutoscaler/web): apiVersion: Unsupported value: "autoscaling/v2beta2": '
        'supported values: "autoscaling/v2", "autoscaling/v1" (for kind HorizontalPodAutoscaler)',
        "h.yaml: document 3 (HorizontalPodAutoscaler/b): spec.scaleTargetRef: Forbidden: HorizontalPodAutoscaler "
        "default/a already scales Deployment default/web; with two, the HPA controller scales it with neither",
    ]


def test_a_scenario_step_says_what_the_hpa_chooses_under_load():
    r = load_text(dump(
        deployment("web", 1), hpa("web", "web", lo=2, hi=6),
        scenario({"advance": "5m"},
                 {"scale": {"kind": "HorizontalPodAutoscaler", "name": "web", "replicas": 4}},
                 {"scale": {"kind": "HorizontalPodAutoscaler", "name": "web", "replicas": 50}},
                 {"scale": {"kind": "Deployment", "name": "web", "replicas": 1}},  # the HPA puts it back
                 {"apply": [deployment("web", 2)]},
                 {"scale": {"kind": "Deployment", "name": "web", "replicas": 0}})))  # 0: the HPA lets it be
    assert r.errors == []
    assert replicas(r, "web") == 2
    steps = r.scenario.obj["spec"]["steps"]
    target = {"kind": "Deployment", "namespace": "default", "name": "web"}
    assert steps[1:4] == [{"scale": {**target, "replicas": 4}}, {"scale": {**target, "replicas": 6}},
                          {"scale": {**target, "replicas": 6}}]
    assert steps[4]["apply"][0]["spec"]["replicas"] == 6 and steps[5] == {"scale": {**target, "replicas": 0}}


def test_load_on_an_hpa_runs_its_pods():
    r = simulate("-", "-o", "json", input=Path(CLUSTER).read_text() + "\n---\n" + dump(
        deployment("web", 1), hpa("web", "web", lo=2, hi=5),
        scenario({"advance": "2m"}, {"scale": {"kind": "HorizontalPodAutoscaler", "name": "web", "replicas": 9}},
                 {"advance": "2m"})))
    pods, status = result(r)
    assert status["pods"] == {"total": 5, "bound": 5, "pending": 0}  # 9 asked, at most maxReplicas


def test_a_scale_step_on_an_hpa_that_is_not_there_names_the_field():
    r = load_text(dump(deployment("web"), scenario(
        {"scale": {"kind": "HorizontalPodAutoscaler", "name": "nope", "replicas": 3}},
        {"scale": {"kind": "HorizontalPodAutoscaler", "apiVersion": "autoscaling/v2beta1", "name": "web",
                   "replicas": 3}})), "s.yaml")
    assert [str(e) for e in r.errors] == [
        's.yaml: document 1 (Scenario/s): spec.steps[1].scale.apiVersion: Unsupported value: "autoscaling/v2beta1": '
        'supported values: "autoscaling/v2", "autoscaling/v1" (for kind HorizontalPodAutoscaler)',
    ]
    r = load_text(dump(deployment("web"), scenario(
        {"scale": {"kind": "HorizontalPodAutoscaler", "name": "nope", "replicas": 3}})), "s.yaml")
    assert [str(e) for e in r.errors] == [
        "s.yaml: document 1 (Scenario/s): spec.steps[0].scale.name: Not found: no HorizontalPodAutoscaler "
        "default/nope that scales a Deployment, StatefulSet or ReplicaSet in the input",
    ]


def test_the_docs_describe_what_karpy_reads():
    text = (Path(__file__).parent.parent / "docs" / "inputs.md").read_text()
    for needed in ("-k DIR", "kubectl kustomize", "HorizontalPodAutoscaler", "skipped", "64 MiB", "200", "500,000"):
        assert needed in text, needed
    assert os.path.basename(WEBAPP) in text


def test_a_scenario_apply_step_skips_and_refuses_kinds_as_the_top_level_does():
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web"}, "data": {"port": "80"}}
    r = simulate("-", "-o", "json", input=Path(CLUSTER).read_text() + "\n---\n" + dump(
        scenario({"apply": [config, deployment("web", 2)]}, {"apply": [dict(config, metadata={"name": "b"})]},
                 {"advance": "2m"})))
    pods, status = result(r)
    assert status["pods"]["bound"] == 2
    assert r.stderr == "note: skipped 2 documents of 1 kind that do not affect node provisioning: ConfigMap\n"
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"}}
    errors = [str(e) for e in load_text(dump(scenario({"apply": [cron, hpa("web", "web")]})), "s.yaml").errors]
    assert errors == [
        's.yaml: document 0 (Scenario/s): spec.steps[0].apply[0].kind: Unsupported value: "batch/v1 CronJob": it '
        "creates Jobs on a schedule, which karpy does not simulate; simulate one run of it as a Job",
        "s.yaml: document 0 (Scenario/s): spec.steps[0].apply[1].kind: Forbidden: a HorizontalPodAutoscaler is given "
        "beside the other manifests; a Scenario step scales it (docs/inputs.md)",
    ]
