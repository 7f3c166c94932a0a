"""deploy/ on a real kube-apiserver: the CRDs and manifests are accepted, and every known-bad manifest of the
CRD tests is refused by the real server's schema and CEL validation at the field karpy's own validation names."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]

_spec = importlib.util.spec_from_file_location("karpy_crd_tests", ROOT / "tests" / "api" / "test_crds.py")
crd_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(crd_tests)

NAMES = {"NodePool": "nodepools.karpenter.sh", "NodeClaim": "nodeclaims.karpenter.sh",
         "AKSNodeClass": "aksnodeclasses.karpenter.azure.com", "EC2NodeClass": "ec2nodeclasses.karpenter.k8s.aws",
         "KWOKNodeClass": "kwoknodeclasses.karpenter.kwok.sh"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from localcluster import LocalCluster

    c = LocalCluster(tmp_path_factory.mktemp("deploy-cluster"))
    try:
        c.install_crds()
        yield c
    finally:
        c.down()


def test_kubectl_applies_crds_then_deploy(cluster):
    out = cluster.kubectl("apply", "-f", str(ROOT / "deploy"), "-o", "name").stdout.split()
    assert "deployment.apps/karpenter" in out and "serviceaccount/karpenter" in out
    assert "clusterrole.rbac.authorization.k8s.io/karpenter-core" in out
    dep = json.loads(cluster.kubectl("get", "-n", "kube-system", "deployment/karpenter", "-o", "json").stdout)
    assert dep["spec"]["replicas"] == 2
    # applying again changes nothing (kubectl resends label selectors, so it may still say "configured")
    cluster.kubectl("apply", "-f", str(ROOT / "deploy"))
    again = json.loads(cluster.kubectl("get", "-n", "kube-system", "deployment/karpenter", "-o", "json").stdout)
    assert again["metadata"]["generation"] == dep["metadata"]["generation"]
    crds = json.loads(cluster.kubectl("get", "crds", "-o", "json").stdout)["items"]
    for crd in crds:
        established = [c for c in crd["status"]["conditions"] if c["type"] == "Established"]
        assert established and established[0]["status"] == "True", crd["metadata"]["name"]
    # the CRDs' printer columns are served by the real server
    cluster.kubectl("apply", "-f", str(ROOT / "examples" / "aks-multiarch-arm64" / "nodepool.yaml"))
    header = cluster.kubectl("get", "nodepools").stdout.splitlines()[0].split()
    assert header[:2] == ["NAME", "NODECLASS"], header


def _dry_run_create(cluster, manifest: dict) -> tuple[int, dict]:
    """A server-side dry-run create: the real server validates (schema, CEL) and stores nothing."""
    group, version = manifest["apiVersion"].split("/")
    plural = NAMES[manifest["kind"]].split(".")[0]
    return cluster.request("POST", f"/apis/{group}/{version}/{plural}?dryRun=All&fieldValidation=Strict", manifest)


def _cases():
    out = [("schema", k, f, v, None) for k, f, v in crd_tests.SCHEMA_BAD]
    out += [("cel", k, f, v, m) for k, f, v, _, m in crd_tests.CEL_BAD]
    return out


def test_base_manifests_are_accepted(cluster):
    for kind, base in crd_tests.BASES.items():
        code, body = _dry_run_create(cluster, base)
        assert code == 201, (kind, body)


@pytest.mark.parametrize("how,kind,field,value,message", _cases(),
                         ids=[f"{c[0]}:{c[1]}:{c[2]}" for c in _cases()])
def test_known_bad_is_refused_by_the_real_server_at_the_field_karpy_names(cluster, how, kind, field, value, message):
    bad = crd_tests._set(crd_tests.BASES[kind], field, value)
    karpy_paths = [p for p, _ in crd_tests.karpy_errors(bad)]
    code, status = _dry_run_create(cluster, bad)
    assert code != 201, f"kube-apiserver accepted {kind} with {field}={value!r}"
    # a field the schema does not know is refused by strict field validation (400), the rest is 422 Invalid
    assert code in (400, 422), (code, status)
    message_text = status.get("message", "")
    if code == 422:
        assert status["reason"] == "Invalid", status
        fields = [c.get("field", "") for c in (status.get("details") or {}).get("causes") or []]
    else:
        assert status["reason"] == "BadRequest", status
        fields = re.findall(r'unknown field "([^"]+)"', message_text)
    assert fields, status

    def near(p: str) -> bool:
        base = re.sub(r"\[\d+\]", "", p)
        f = re.sub(r"\[\d+\]", "", field)
        return base == f or base.startswith(f + ".") or base.startswith(f + "[") or f.startswith(base + ".")

    assert any(near(p) for p in fields), (field, fields, message_text)
    assert any(near(p) for p in karpy_paths), (field, karpy_paths)
    if message is not None:
        assert message in message_text, message_text
