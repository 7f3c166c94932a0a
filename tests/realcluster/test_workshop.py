"""The AKS multi-architecture workshop on the real control plane, through kubectl, with `karpy controller
--cloud-provider simulated` running on the token of deploy/'s ServiceAccount, so that kube-apiserver's RBAC
authorizes every call it makes.

The workshop's answer: 4 pods of 1 CPU pinned to arm64 land on two arm64 D-series NodeClaims,
`Standard_D4pls_v6` with 3 pods and `Standard_D2pls_v6` with 1, bound by the real kube-scheduler. Moved to amd64,
the NodeClaims drift and are replaced by `Standard_D4als_v6` and `Standard_D2als_v6`. Scaled down to one pod,
the cluster consolidates onto one `Standard_D2als_v6`. Then kube-apiserver's audit log shows that nothing the
controller asked was refused, and that every rule deploy/rbac.yaml grants was used.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from localcluster import Karpy, audit_events, service_account_kubeconfig, wait_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "aks-multiarch-arm64"
SA = "system:serviceaccount:kube-system:karpenter"
POD_DELETE = ("", "pods", "delete")
# grants this run (--cloud-provider simulated, default feature gates) cannot use: the controllers of gates that
# are off by default (NodeOverlay, CapacityBuffer) and the NodeClass controllers of the aws and azure providers
OTHER_RUNS = {
    ("karpenter.sh", "nodeoverlays", "list"), ("karpenter.sh", "nodeoverlays", "watch"),
    ("karpenter.sh", "nodeoverlays/status", "patch"),
    ("autoscaling.x-k8s.io", "capacitybuffers", "list"), ("autoscaling.x-k8s.io", "capacitybuffers", "watch"),
    ("autoscaling.x-k8s.io", "capacitybuffers/status", "patch"),
    ("", "podtemplates", "list"), ("", "podtemplates", "watch"),
    *((("apps", r, v) for r in ("deployments", "replicasets", "statefulsets") for v in ("list", "watch"))),
    ("karpenter.k8s.aws", "ec2nodeclasses", "patch"), ("karpenter.k8s.aws", "ec2nodeclasses/status", "patch"),
    ("karpenter.azure.com", "aksnodeclasses", "patch"), ("karpenter.azure.com", "aksnodeclasses/status", "patch"),
}


def claims(cluster) -> list[dict]:
    items = json.loads(cluster.kubectl("get", "nodeclaims", "-o", "json").stdout)["items"]
    return [c for c in items if (c["metadata"].get("labels") or {}).get("karpenter.sh/nodepool") == "default-demo"]


def ready(obj: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or ())


def inflate_pods(cluster) -> list[dict]:
    return json.loads(cluster.kubectl("get", "pods", "-n", "workshop", "-l", "app=inflate", "-o", "json").stdout)["items"]


def settled(cluster, types: list[str], arch: str, pods: int):
    """The NodeClaims are exactly ``types``, all Ready, with Ready nodes of ``arch``, and ``pods`` inflate pods run
    on them (none pending, none terminating); the placement {instance type: pods} when so, else None."""
    cs = claims(cluster)
    if sorted(c["metadata"]["labels"].get("node.kubernetes.io/instance-type") for c in cs) != sorted(types):
        return None
    if not all(ready(c) and c["status"].get("nodeName") for c in cs):
        return None
    nodes = {n["metadata"]["name"]: n for n in json.loads(cluster.kubectl(
        "get", "nodes", "-l", "aks-karpenter=demo", "-o", "json").stdout)["items"]}
    by_node = {c["status"]["nodeName"]: c["metadata"]["labels"]["node.kubernetes.io/instance-type"] for c in cs}
    if set(nodes) != set(by_node) or not all(ready(n) and n["metadata"]["labels"]["kubernetes.io/arch"] == arch
                                             for n in nodes.values()):
        return None
    ps = inflate_pods(cluster)
    if len(ps) != pods or any(p["metadata"].get("deletionTimestamp") or p["status"].get("phase") != "Running"
                              or p["spec"].get("nodeName") not in by_node for p in ps):
        return None
    placement: dict[str, int] = {}
    for p in ps:
        t = by_node[p["spec"]["nodeName"]]
        placement[t] = placement.get(t, 0) + 1
    return placement


def granted_rules() -> list[tuple[str, set[tuple[str, str, str]]]]:
    """Every rule deploy/rbac.yaml grants karpy's ServiceAccount: (where, its (apiGroup, resource, verb) triples)."""
    out = []
    for d in yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()):
        if d and d["kind"] in ("ClusterRole", "Role"):
            for i, r in enumerate(d["rules"]):
                triples = {(g, res, v) for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]}
                out.append((f"{d['kind']} {d['metadata']['name']} rule {i}: {r['resources']} {r['verbs']}", triples))
    return out


def unused_grants(events: list[dict]) -> list[tuple[str, str, str]]:
    """The grants the audited requests never used. ``get`` is left out: karpy reads single objects only to
    recover a create or update whose answer was lost (deploy/rbac.yaml says so), which a healthy run never does."""
    seen = used(events)
    return sorted({t for _, triples in granted_rules() for t in triples if t[2] != "get"} - seen)


def refused(events: list[dict]) -> list[tuple]:
    return [(e["verb"], e["requestURI"], e["responseStatus"].get("message")) for e in events
            if e.get("responseStatus", {}).get("code") == 403]


def used(events: list[dict]) -> set[tuple[str, str, str]]:
    out = set()
    for ev in events:
        ref = ev.get("objectRef") or {}
        res = ref.get("resource", "")
        if ref.get("subresource"):
            res = f"{res}/{ref['subresource']}"
        out.add((ref.get("apiGroup", ""), res, ev["verb"]))
    return out


def test_workshop_on_the_real_control_plane_with_deploys_service_account(local_cluster, tmp_path):
    cluster = local_cluster
    cluster.install_crds()
    cluster.kubectl("apply", "-f", str(ROOT / "deploy"))
    kubeconfig = service_account_kubeconfig(cluster, "kube-system", "karpenter", tmp_path / "karpenter.kubeconfig")
    karpy = Karpy.controller(kubeconfig, tmp_path, "controller", "--cloud-provider", "simulated",
                             "--namespace", "kube-system")
    try:
        # the workshop, as written
        assert "namespace/workshop created" in cluster.kubectl("create", "namespace", "workshop").stdout
        out = cluster.kubectl("apply", "-f", str(EXAMPLE / "nodepool.yaml")).stdout
        assert "nodepool.karpenter.sh/default-demo created" in out
        cluster.kubectl("apply", "-f", str(EXAMPLE / "daemonsets.yaml"))  # what AKS runs on every node
        assert "deployment.apps/inflate created" in cluster.kubectl("apply", "-f", str(EXAMPLE / "workload.yaml")).stdout

        placement = wait_for(lambda: settled(cluster, ["Standard_D4pls_v6", "Standard_D2pls_v6"], "arm64", 4),
                             timeout=240, interval=1, what="two arm64 NodeClaims running the 4 pods")
        assert placement == {"Standard_D4pls_v6": 3, "Standard_D2pls_v6": 1}
        table = cluster.kubectl("get", "nodeclaims").stdout
        assert table.splitlines()[0].split() == ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"]
        cols = cluster.kubectl("get", "nodes", "-l", "aks-karpenter=demo", "-o",
                               "custom-columns=NAME:.metadata.name,ARCH:.metadata.labels.kubernetes\\.io/arch").stdout
        assert [line.split()[1] for line in cols.strip().splitlines()[1:]] == ["arm64", "arm64"]
        # bound by the real kube-scheduler, run by kwok (a pod IP)
        events = json.loads(cluster.kubectl("get", "events", "-n", "workshop", "--field-selector", "reason=Scheduled",
                                            "-o", "json").stdout)["items"]
        assert {e.get("reportingComponent") for e in events} == {"default-scheduler"}
        assert all(p["status"].get("podIP") for p in inflate_pods(cluster))
        msgs = karpy.messages()
        assert "found provisionable pod(s)" in msgs and "computed new nodeclaim(s) to fit pod(s)" in msgs
        arm64 = {c["metadata"]["name"] for c in claims(cluster)}

        # the workshop moves to amd64: the NodePool allows amd64 only, the deployment asks for it
        patch = {"spec": {"template": {"spec": {"requirements": [
            {"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["D"]},
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "karpenter.azure.com/sku-cpu", "operator": "Lt", "values": ["5"]}]}}}}
        cluster.kubectl("patch", "nodepool", "default-demo", "--type", "merge", "-p", json.dumps(patch))
        cluster.kubectl("patch", "deployment", "inflate", "-n", "workshop", "--type", "merge", "-p", json.dumps(
            {"spec": {"template": {"spec": {"nodeSelector": {"aks-karpenter": "demo", "kubernetes.io/arch": "amd64"}}}}}))
        placement = wait_for(lambda: settled(cluster, ["Standard_D4als_v6", "Standard_D2als_v6"], "amd64", 4),
                             timeout=420, interval=1, what="the NodeClaims replaced by amd64 ones")
        assert placement == {"Standard_D4als_v6": 3, "Standard_D2als_v6": 1}
        assert not arm64 & {c["metadata"]["name"] for c in claims(cluster)}
        drifted = {r["NodeClaim"]["name"] for r in karpy.logs() if r.get("message") == "marking drifted"}
        assert drifted == arm64
        assert any(r.get("message") == "disrupting node(s)" and r.get("reason") == "Drifted" for r in karpy.logs())

        # scale down: consolidation leaves one 2-vCPU node
        cluster.kubectl("scale", "deployment", "inflate", "-n", "workshop", "--replicas=1")
        wait_for(lambda: settled(cluster, ["Standard_D2als_v6"], "amd64", 1), timeout=300, interval=1,
                 what="consolidation onto one Standard_D2als_v6")
        assert any(r.get("message") == "disrupting node(s)" and r.get("reason") in ("Empty", "Underutilized")
                   for r in karpy.logs())
    finally:
        code = karpy.stop()
    assert code == 0, karpy.stderr()
    assert "Traceback" not in karpy.stderr()

    # real RBAC: the controller's token was never refused, and it used every rule deploy/ grants it
    events = audit_events(cluster, SA)
    assert events, "no audited request of the ServiceAccount"
    assert not refused(events), refused(events)
    # every grant is used by this run, but one: deleting a pod, which only termination past its deadline does
    # (the next test); and those only the gated controllers and the other providers' use
    unused = unused_grants(events)
    assert [t for t in unused if t not in OTHER_RUNS] == [POD_DELETE], unused


KWOK = """
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      terminationGracePeriod: 20s
  disruption: {consolidateAfter: Never}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: guarded, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: guarded}}
  template:
    metadata: {labels: {app: guarded}}
    spec:
      terminationGracePeriodSeconds: 5
      containers: [{name: c, image: pause, resources: {requests: {cpu: "1"}}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: guarded, namespace: default}
spec:
  maxUnavailable: 0
  selector: {matchLabels: {app: guarded}}
"""


def test_termination_past_a_pdb_deletes_the_pod_at_the_deadline_with_deploys_service_account(local_cluster, tmp_path):
    """A NodeClaim deleted while a PDB refuses every eviction: the drain waits, then, the pod's grace period
    before the NodePool's terminationGracePeriod runs out, karpy deletes the pod (the one rule the workshop
    does not use), and the node goes."""
    cluster = local_cluster
    cluster.install_crds()
    cluster.kubectl("apply", "-f", str(ROOT / "deploy"))
    kubeconfig = service_account_kubeconfig(cluster, "kube-system", "karpenter", tmp_path / "karpenter.kubeconfig")
    karpy = Karpy.controller(kubeconfig, tmp_path, "controller", "--cloud-provider", "kwok",
                             "--namespace", "kube-system", "--batch-idle-duration", "200ms")
    try:
        cluster.kubectl("apply", "-f", "-", stdin=KWOK)

        def running():
            pods = json.loads(cluster.kubectl("get", "pods", "-l", "app=guarded", "-o", "json").stdout)["items"]
            return [p for p in pods if p["status"].get("phase") == "Running" and p["spec"].get("nodeName")]

        (pod,) = wait_for(running, timeout=120, what="the guarded pod running")
        (claim,) = json.loads(cluster.kubectl("get", "nodeclaims", "-o", "json").stdout)["items"]
        cluster.kubectl("delete", "nodeclaim", claim["metadata"]["name"], "--wait=false")
        # evictions are refused by the PDB (429) until the deadline; then the pod is deleted and the node goes
        name = claim["metadata"]["name"]
        wait_for(lambda: cluster.kubectl("get", "nodeclaim", name, check=False).returncode != 0,
                 timeout=120, interval=0.5, what="the NodeClaim terminated past its PDB")
        assert cluster.kubectl("get", "node", pod["spec"]["nodeName"], check=False).returncode != 0
    finally:
        code = karpy.stop()
    assert code == 0, karpy.stderr()
    events = audit_events(cluster, SA)
    evictions = [e for e in events if (e.get("objectRef") or {}).get("subresource") == "eviction"]
    assert evictions and {e["responseStatus"]["code"] for e in evictions} >= {429}
    assert any(e["verb"] == "delete" and (e.get("objectRef") or {}).get("resource") == "pods"
               and (e.get("objectRef") or {}).get("name") == pod["metadata"]["name"] for e in events)
    assert not refused(events), refused(events)
    assert POD_DELETE not in unused_grants(events)
