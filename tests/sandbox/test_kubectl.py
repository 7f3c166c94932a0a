"""The AKS multi-architecture workshop, driven with the real kubectl against ``karpy sandbox``."""

from __future__ import annotations

import json

import pytest

from .harness import EXAMPLE, kubectl_binary, wait_for

pytestmark = pytest.mark.skipif(kubectl_binary() is None, reason="kubectl is not installed")


def _claims(sandbox, pool: str) -> list[dict]:
    items = json.loads(sandbox.kubectl("get", "nodeclaims", "-o", "json").stdout)["items"]
    return [c for c in items if (c["metadata"].get("labels") or {}).get("karpenter.sh/nodepool") == pool]


def _ready(claim: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in (claim.get("status") or {}).get("conditions") or ())


def test_workshop_arm64(sandbox, tmp_path):
    out = sandbox.kubectl("apply", "-f", str(EXAMPLE)).stdout
    assert "nodepool.karpenter.sh/default-demo created" in out
    assert "aksnodeclass.karpenter.azure.com/default-demo created" in out
    assert "deployment.apps/inflate created" in out

    sandbox.kubectl("wait", "--for=condition=Available", "deployment/inflate", "-n", "workshop", "--timeout=60s")
    sandbox.kubectl("wait", "--for=jsonpath={.status.readyReplicas}=4", "deployment/inflate", "-n", "workshop",
                    "--timeout=60s")
    # the workshop's answer: two arm64 D-series NodeClaims, 2 and 4 vCPUs
    claims = wait_for(lambda: [c for c in _claims(sandbox, "default-demo") if _ready(c)], what="ready NodeClaims")
    assert sorted(c["metadata"]["labels"]["karpenter.azure.com/sku-cpu"] for c in claims) == ["2", "4"]
    table = sandbox.kubectl("get", "nodeclaims").stdout
    assert table.split("\n")[0].split() == ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"]
    assert "Standard_D4pls_v6" in table and "on-demand" in table

    cols = sandbox.kubectl("get", "nodes", "-l", "aks-karpenter=demo", "-o",
                           "custom-columns=NAME:.metadata.name,ARCH:.metadata.labels.kubernetes\\.io/arch").stdout
    lines = cols.strip().split("\n")
    assert lines[0].split() == ["NAME", "ARCH"]
    assert len(lines) == 3 and all(line.split()[1] == "arm64" for line in lines[1:])

    pods = sandbox.kubectl("get", "pods", "-n", "workshop", "-o", "wide").stdout
    assert pods.split("\n")[0].split()[:6] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP"]
    assert pods.count("Running") == 4 and "aks-default-demo-" in pods

    # apply again, unchanged, then with a change (a strategic merge patch)
    # (kubectl calls the Deployment "configured" again, as on a real cluster: the file's `cpu: 1` is not the
    # API server's canonical "1")
    assert "nodepool.karpenter.sh/default-demo unchanged" in \
        sandbox.kubectl("apply", "-f", str(EXAMPLE / "nodepool.yaml")).stdout
    changed = tmp_path / "workload.yaml"
    changed.write_text((EXAMPLE / "workload.yaml").read_text().replace("replicas: 4", "replicas: 5"))
    assert "deployment.apps/inflate configured" in sandbox.kubectl("apply", "-f", str(changed)).stdout
    sandbox.kubectl("wait", "--for=jsonpath={.status.readyReplicas}=5", "deployment/inflate", "-n", "workshop",
                    "--timeout=60s")
    assert "kubectl.kubernetes.io/last-applied-configuration" in sandbox.kubectl(
        "get", "deployment", "inflate", "-n", "workshop", "-o", "yaml").stdout

    # scale down: Karpenter consolidates onto one node
    assert "scaled" in sandbox.kubectl("scale", "deployment", "inflate", "-n", "workshop", "--replicas=1").stdout
    sandbox.kubectl("wait", "--for=jsonpath={.status.replicas}=1", "deployment/inflate", "-n", "workshop",
                    "--timeout=60s")
    def consolidated():
        claims = _claims(sandbox, "default-demo")
        # one pod of 1 CPU (and the DaemonSets) fits the 2-vCPU size: the 4-vCPU node is replaced by one
        if len(claims) == 1 and _ready(claims[0]) and claims[0]["metadata"]["labels"]["karpenter.azure.com/sku-cpu"] == "2":
            return claims
        return None

    (claim,) = wait_for(consolidated, timeout=60, interval=0.3, what="consolidation to one 2-vCPU NodeClaim")
    described = sandbox.kubectl("describe", "nodeclaim", claim["metadata"]["name"]).stdout
    assert "Events:" in described and "Launched" in described
    assert "Node Class Ref" in described
    node = sandbox.kubectl("describe", "node", claim["status"]["nodeName"]).stdout
    assert "inflate-" in node and "Non-terminated Pods" in node

    # the workshop's cleanup
    assert 'deployment.apps "inflate" deleted' in sandbox.kubectl("delete", "deployment", "-n", "workshop", "inflate").stdout
    assert 'nodepool.karpenter.sh "default-demo" deleted' in sandbox.kubectl("delete", "nodepool", "default-demo").stdout
    wait_for(lambda: not _claims(sandbox, "default-demo"), timeout=60, interval=0.3, what="NodeClaims to go")
    assert "aks-default-demo" not in sandbox.kubectl("get", "nodes").stdout


def test_discovery_and_tables(sandbox):
    resources = sandbox.kubectl("api-resources").stdout
    for name in ("nodepools", "nodeclaims", "aksnodeclasses", "ec2nodeclasses", "poddisruptionbudgets", "leases",
                 "customresourcedefinitions", "deployments"):
        assert name in resources
    crds = sandbox.kubectl("get", "crds").stdout
    assert "nodepools.karpenter.sh" in crds and "nodeclaims.karpenter.sh" in crds
    assert sandbox.kubectl("get", "nodes").stdout.split("\n")[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"] \
        or "No resources found" in sandbox.kubectl("get", "nodes").stderr
    assert sandbox.kubectl("get", "ns").stdout.split("\n")[0].split() == ["NAME", "STATUS", "AGE"]
    assert "kube-system" in sandbox.kubectl("get", "namespaces").stdout
    wide = sandbox.kubectl("get", "nodepools", "-o", "wide", "-A").stderr + \
        sandbox.kubectl("get", "nodepools", "-o", "wide").stdout
    assert "No resources found" in wide or "WEIGHT" in wide
    version = sandbox.kubectl("version", "-o", "json").stdout
    assert json.loads(version)["serverVersion"]["major"] == "1"


def test_explain_reads_the_crd_schemas(sandbox):
    out = sandbox.kubectl("explain", "nodepool.spec.disruption").stdout
    assert "KIND:       NodePool" in out and "consolidationPolicy" in out and "budgets" in out
    out = sandbox.kubectl("explain", "kwoknodeclass").stdout
    assert "karpenter.kwok.sh" in out


def test_apply_invalid_nodepool_names_the_field(sandbox, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("""apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: bad}
spec:
  template:
    spec:
      requirements:
      - {key: kubernetes.io/arch, operator: Sometimes, values: [arm64]}
      nodeClassRef: {group: karpenter.azure.com, kind: AKSNodeClass, name: default-demo}
""")
    p = sandbox.kubectl("apply", "-f", str(bad), check=False)
    assert p.returncode != 0
    assert "spec.template.spec.requirements[0].operator" in p.stderr and "Sometimes" in p.stderr
    assert "bad" not in sandbox.kubectl("get", "nodepools").stdout


def test_get_watch_streams_changes(sandbox):
    sandbox.kubectl("apply", "-f", "-", stdin="""apiVersion: v1
kind: Namespace
metadata: {name: watched}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: first, namespace: watched}
data: {a: b}
""")
    # kubectl get -w prints the current objects and then changes, until the request times out
    p = sandbox.kubectl("get", "configmaps", "-n", "watched", "-w", "--request-timeout=2s", check=False)
    assert "first" in p.stdout
    sandbox.kubectl("delete", "namespace", "watched")
    assert "watched" not in sandbox.kubectl("get", "ns").stdout

