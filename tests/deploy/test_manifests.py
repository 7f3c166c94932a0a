"""deploy/: every manifest parses and is complete; the Deployment runs `karpy controller` as the
contract says; kubectl takes the whole tree (against `karpy sandbox`, when kubectl is installed). The image
that the Deployment runs: tests/deploy/test_image.py."""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from karpy.api.kinds import validate_manifest
from karpy.controller.settings import ENV, resolve
from karpy.kube.registry import BY_KIND, is_namespaced

from . import pod_environment

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
NAMESPACE = "kube-system"
SELECTOR = {"app.kubernetes.io/name": "karpenter", "app.kubernetes.io/instance": "karpy"}


def manifest_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))


def all_docs() -> list[tuple[str, dict]]:
    out = []
    for p in manifest_files():
        for d in yaml.safe_load_all(p.read_text()):
            if d is not None:
                out.append((p.relative_to(ROOT).as_posix(), d))
    return out


def one(kind: str) -> dict:
    (d,) = [d for _, d in all_docs() if d["kind"] == kind]
    return d


def container() -> dict:
    (c,) = one("Deployment")["spec"]["template"]["spec"]["containers"]
    return c


def test_every_document_parses_and_names_itself():
    docs = all_docs()
    assert len(docs) >= 15
    seen = set()
    for where, d in docs:
        assert isinstance(d, dict), where
        assert d.get("apiVersion") and d.get("kind"), where
        assert d.get("metadata", {}).get("name"), where
        key = (d["apiVersion"], d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
        assert key not in seen, f"{where}: {key} twice"
        seen.add(key)
        t = BY_KIND.get(d["kind"])
        assert t is not None and t.api_version == d["apiVersion"], f"{where}: {d['apiVersion']} {d['kind']}"
        if is_namespaced(d["kind"]):
            assert d["metadata"].get("namespace") == NAMESPACE, where
        else:
            assert "namespace" not in d["metadata"], where


def test_the_kinds_an_install_needs():
    kinds = sorted(d["kind"] for _, d in all_docs())
    crds = {d["metadata"]["name"] for _, d in all_docs() if d["kind"] == "CustomResourceDefinition"}
    assert kinds.count("CustomResourceDefinition") == len(crds) == len(list((DEPLOY / "crds").glob("*.yaml")))
    assert {"nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "kwoknodeclasses.karpenter.kwok.sh",
            "aksnodeclasses.karpenter.azure.com", "ec2nodeclasses.karpenter.k8s.aws"} <= crds
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment",
                 "Service", "PodDisruptionBudget"):
        assert kind in kinds, kind


def test_deployment_and_pdb_pass_karpys_own_validation():
    for kind in ("Deployment", "PodDisruptionBudget"):
        r = validate_manifest(copy.deepcopy(one(kind)))
        assert r.errors == [], (kind, r.errors)


def test_deployment_runs_the_controller():
    dep = one("Deployment")
    spec = dep["spec"]
    assert spec["replicas"] == 2
    assert spec["selector"]["matchLabels"] == SELECTOR
    pod = spec["template"]
    assert SELECTOR.items() <= pod["metadata"]["labels"].items()
    c = container()
    assert c["image"].startswith("ghcr.io/karpy/karpy:")
    assert c["args"][:1] == ["controller"]
    assert c["args"][1:] == ["--cloud-provider", "kwok"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http-metrics": 8080, "http": 8081}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"] and sc["readOnlyRootFilesystem"] is True


def test_deployment_spreads_and_avoids_karpenters_own_nodes():
    pod = one("Deployment")["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname" and term["labelSelector"]["matchLabels"] == SELECTOR
    (sel,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert sel["matchExpressions"] == [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]
    (tsc,) = pod["topologySpreadConstraints"]
    assert tsc["topologyKey"] == "topology.kubernetes.io/zone" and tsc["labelSelector"]["matchLabels"] == SELECTOR


def _pod_environment() -> dict[str, str]:
    """The container's environment as the kubelet would set it (fieldRefs resolved)."""
    return pod_environment(container(), NAMESPACE)


def test_deployment_settings_are_what_karpy_controller_accepts():
    """The args and environment resolve through karpy controller's own settings without an error,
    to the namespace the RBAC grants the Lease in and the ports the probes and the Service use."""
    env = _pod_environment()
    assert set(env) <= set(ENV.values()), sorted(set(env) - set(ENV.values()))
    assert "CLUSTER_NAME" in env
    args = container()["args"]
    flags = {"cloud_provider": args[args.index("--cloud-provider") + 1]}
    s = resolve(flags, env, service_account_namespace="/nonexistent")
    assert s.namespace == NAMESPACE
    assert s.cloud_provider == "kwok"
    assert (s.metrics_port, s.health_probe_port) == (8080, 8081)
    assert s.leader_elect is True


def test_service_and_pdb_select_the_controller():
    svc = one("Service")
    assert svc["spec"]["selector"] == SELECTOR
    (port,) = svc["spec"]["ports"]
    assert (port["name"], port["port"], port["targetPort"]) == ("http-metrics", 8080, "http-metrics")
    pdb = one("PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == SELECTOR


# --- kubectl against karpy sandbox --------------------------------------------------------------


def _free_kubectl() -> str | None:
    return shutil.which("kubectl")


@pytest.fixture
def sandbox(tmp_path):
    """`karpy sandbox --no-karpenter` on a free loopback port; yields its kubeconfig."""
    try:
        import karpy.sandbox.cli  # noqa: F401
    except ImportError:
        pytest.skip("karpy sandbox is not available")
    kubeconfig = tmp_path / "sandbox.kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "karpy.cli", "sandbox", "--no-karpenter", "--port", "0", "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 30
        server = None
        while time.monotonic() < deadline and proc.poll() is None:
            if kubeconfig.exists():
                try:
                    cluster = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
                    server = cluster["server"]
                    ca = cluster.get("certificate-authority-data")  # HTTPS with the sandbox's own CA
                    ctx = ssl.create_default_context(cadata=base64.b64decode(ca).decode()) if ca else None
                    with urllib.request.urlopen(server + "/readyz", timeout=2, context=ctx) as r:
                        if r.status == 200:
                            break
                except Exception:  # noqa: BLE001 - not up yet
                    pass
            time.sleep(0.1)
        else:
            out = proc.stdout.read() if proc.poll() is not None and proc.stdout else ""
            pytest.fail(f"karpy sandbox did not become ready: {out}")
        yield kubeconfig
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [_free_kubectl() or "kubectl", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _expected_names() -> list[str]:
    out = []
    for _, d in all_docs():
        t = BY_KIND[d["kind"]]
        res = f"{t.singular}.{t.group}" if t.group else t.singular
        out.append(f"{res}/{d['metadata']['name']}")
    return sorted(out)


@pytest.mark.skipif(_free_kubectl() is None, reason="kubectl is not installed")
def test_kubectl_applies_deploy_to_karpy_sandbox(sandbox):
    dry = _kubectl(sandbox, "apply", "--dry-run=client", "-R", "-f", str(DEPLOY), "-o", "name")
    assert dry.returncode == 0, dry.stderr
    assert sorted(dry.stdout.split()) == _expected_names()
    real = _kubectl(sandbox, "apply", "-R", "-f", str(DEPLOY), "-o", "name")
    assert real.returncode == 0, real.stderr
    assert sorted(real.stdout.split()) == _expected_names()
    got = _kubectl(sandbox, "get", "-n", NAMESPACE, "deployment/karpenter", "-o", "json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["spec"]["replicas"] == 2
    # an example NodePool is then admitted, and listed with the CRD's printer columns
    np = _kubectl(sandbox, "apply", "-f", str(ROOT / "examples" / "aks-multiarch-arm64" / "nodepool.yaml"))
    assert np.returncode == 0, np.stderr
    table = _kubectl(sandbox, "get", "nodepools", "-o", "wide")
    assert table.returncode == 0, table.stderr
    assert table.stdout.split("\n")[0].split() == ["NAME", "NODECLASS", "NODES", "READY", "AGE", "WEIGHT", "CPU", "MEMORY"]
