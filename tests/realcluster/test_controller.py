"""`karpy controller` against the real control plane: kube-apiserver with etcd, the real kube-scheduler binding
pods, kwok running the nodes. The same assertions as the suites on `karpy sandbox` (provisioning, the leader
killed, SIGTERM handover, a restart mid-launch, cut watches and 410 Gone), and what only a real control plane
can do: kube-apiserver restarted mid-run, and etcd restarted mid-run, with no NodeClaim lost or doubled and the
controller recovering without a restart of its own."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request

import pytest

from karpy.controller.leader import LEASE_NAME
from karpy.kube import errors as E
from localcluster import Karpy, wait_for

MANIFESTS = """
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
  disruption: {consolidateAfter: Never}
"""


def deployment(name: str, replicas: int, cpu: str = "1") -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"terminationGracePeriodSeconds": 0,
                                           "containers": [{"name": "c", "image": "pause",
                                                           "resources": {"requests": {"cpu": cpu}}}]}}}}


@pytest.fixture
def cluster(local_cluster):
    local_cluster.install_crds()
    local_cluster.kubectl("apply", "-f", "-", stdin=MANIFESTS)
    return local_cluster


def controller(cluster, tmp_path, name: str, *extra: str, provider: str = "kwok") -> Karpy:
    return Karpy.controller(cluster.kubeconfig, tmp_path, name, "--cloud-provider", provider,
                            "--batch-idle-duration", "200ms", *extra)


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def running(api, app: str) -> list[dict]:
    """Pods of ``app`` bound and Running (kwok runs what the real kube-scheduler bound)."""
    return [p for p in api.list("Pod", "default")[0] if (p["metadata"].get("labels") or {}).get("app") == app
            and p["spec"].get("nodeName") and (p.get("status") or {}).get("phase") == "Running"]


def wait_running(cluster, api, app: str, n: int, karpy: Karpy | None = None, **kw) -> None:
    """Wait for ``n`` pods of ``app`` Running; on a timeout, say where the others are: each one's node, phase and
    conditions, and what kube-scheduler (at -v 4) and the ``karpy`` controller logged of it last."""
    try:
        wait_for(lambda: len(running(api, app)) == n, **kw)
    except AssertionError as e:
        lines = []
        log = cluster.log("kube-scheduler").splitlines()
        done = {p["metadata"]["name"] for p in running(api, app)}
        for p in api.list("Pod", "default")[0]:
            if (p["metadata"].get("labels") or {}).get("app") != app or p["metadata"]["name"] in done:
                continue
            name = p["metadata"]["name"]
            conds = [(c.get("type"), c.get("status"), c.get("reason")) for c in (p.get("status") or {}).get(
                "conditions") or []]
            lines.append(f"{name}: node {p['spec'].get('nodeName')!r}, phase "
                         f"{(p.get('status') or {}).get('phase')!r}, conditions {conds}")
            lines += ["    " + line[:400] for line in [x for x in log if name in x][-12:]]
            if karpy is not None:
                lines += ["    karpy: " + line[:400] for line in karpy.out_path.read_text().splitlines()
                          if name in line][-8:]
        raise AssertionError(f"{e}\n" + "\n".join(lines)) from None


def holder(api) -> str | None:
    try:
        return api.get("Lease", LEASE_NAME, "kube-system")["spec"].get("holderIdentity") or None
    except E.NotFound:
        return None


def consistent(api, *procs: Karpy) -> None:
    """No NodeClaim lost or doubled: every NodeClaim has its one Node, every Node its NodeClaim, and the
    NodeClaims are exactly those the controllers logged creating. A NodeClaim launched a moment ago registers
    its Node a moment later: the check waits for that (30 s at most) before it asserts."""

    def registered() -> bool:
        pids = {c.get("status", {}).get("providerID") for c in api.list("NodeClaim")[0]}
        return pids == {n["spec"].get("providerID") for n in api.list("Node")[0]}

    try:
        wait_for(registered, timeout=30, what="every launched NodeClaim's Node")
    except AssertionError:
        pass  # the assertions below say what differs
    claims = api.list("NodeClaim")[0]
    nodes = api.list("Node")[0]
    by_pid = {c["status"].get("providerID") for c in claims}
    assert len(by_pid) == len(claims), claims
    assert by_pid == {n["spec"].get("providerID") for n in nodes}, (claims, nodes)
    created = [r["NodeClaim"]["name"] for p in procs for r in p.logs() if r.get("message") == "created nodeclaim"]
    assert sorted(created) == sorted(c["metadata"]["name"] for c in claims)
    for p in procs:
        launched = [r["NodeClaim"]["name"] for r in p.logs() if r.get("message") == "launched nodeclaim"]
        assert len(launched) == len(set(launched)), f"a NodeClaim launched twice: {launched}"


def test_pods_get_nodes_and_the_controller_stops_cleanly(cluster, tmp_path):
    api = cluster.api()
    c = controller(cluster, tmp_path, "controller")
    try:
        health, metrics = c.port("health probe"), c.port("metrics")
        wait_for(lambda: http_get(health, "/readyz")[0] == 200, what="readyz")
        api.create(deployment("inflate", 3))
        wait_running(cluster, api, "inflate", 3, what="3 pods running")
        claims, nodes = api.list("NodeClaim")[0], api.list("Node")[0]
        assert len(claims) == 1 and len(nodes) == 1
        assert claims[0]["status"]["providerID"] == nodes[0]["spec"]["providerID"]
        assert {p["spec"]["nodeName"] for p in running(api, "inflate")} == {nodes[0]["metadata"]["name"]}
        _, text = http_get(metrics, "/metrics")
        assert 'karpenter_nodeclaims_created_total{min_values_relaxed="false",nodepool="default",reason="provisioned"} 1.0' in text
        consistent(api, c)
        assert c.stop() == 0
        assert not holder(api)  # released at once on SIGTERM
        msgs = c.messages()
        assert "created nodeclaim" in msgs and "released lease" in msgs
        assert "Traceback" not in c.stderr()
    finally:
        c.stop()


def test_two_controllers_one_leader_killed_the_other_takes_over(cluster, tmp_path):
    api = cluster.api()
    a = controller(cluster, tmp_path, "a")
    b = None
    try:
        first_leader = wait_for(lambda: holder(api), what="a leader")
        b = controller(cluster, tmp_path, "b")
        wait_for(lambda: http_get(b.port("health probe"), "/readyz")[0] == 200, what="b ready")
        api.create(deployment("one", 2))
        wait_running(cluster, api, "one", 2, what="pods of the first deployment running")
        leaders = [p for p in (a, b) if "successfully acquired lease" in p.messages()]
        assert len(leaders) == 1
        killed, other = leaders[0], (b if leaders[0] is a else a)
        killed.stop(signal.SIGKILL)  # no release: the standby waits for the Lease to expire
        wait_for(lambda: holder(api) not in (None, first_leader), timeout=60, what="the standby takes over")
        api.create(deployment("two", 2, cpu="3"))
        wait_running(cluster, api, "two", 2, timeout=60, what="pods of the second deployment running")
        consistent(api, a, b)
        assert other.stop() == 0
    finally:
        a.stop(signal.SIGKILL)
        if b is not None:
            b.stop(signal.SIGKILL)


def test_sigterm_leader_hands_over_at_once(cluster, tmp_path):
    api = cluster.api()
    a = controller(cluster, tmp_path, "a")
    b = None
    try:
        wait_for(lambda: holder(api), what="a leads")
        b = controller(cluster, tmp_path, "b")
        wait_for(lambda: http_get(b.port("health probe"), "/readyz")[0] == 200, what="b ready")
        assert "successfully acquired lease" in a.messages()
        lease = api.get("Lease", LEASE_NAME, "kube-system")  # held by a
        assert a.stop() == 0
        # the Lease was released: b takes it on its next try, not after the 15 s lease duration
        wait_for(lambda: "successfully acquired lease" in b.messages(), timeout=30, what="b takes over")
        taken = api.get("Lease", LEASE_NAME, "kube-system")
        assert taken["spec"]["holderIdentity"] != lease["spec"].get("holderIdentity")
        assert int(taken["spec"].get("leaseTransitions") or 0) >= 1
        api.create(deployment("after", 1))
        wait_running(cluster, api, "after", 1, what="b provisions")
        consistent(api, a, b)
    finally:
        a.stop(signal.SIGKILL)
        if b is not None:
            b.stop()


def test_restart_mid_launch_leaves_no_orphan_or_duplicate(cluster, tmp_path):
    """Killed between launching NodeClaims and their Nodes registering (the simulated AKS provider takes a
    minute), the controller restarts, adopts its instances and registers them: the pods run on exactly the
    NodeClaims first launched, and a Node no NodeClaim claims is collected."""
    api = cluster.api()
    cluster.kubectl("apply", "-f", "-", stdin="""
apiVersion: karpenter.azure.com/v1beta1
kind: AKSNodeClass
metadata: {name: aks}
spec: {imageFamily: Ubuntu2204}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: aks}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.azure.com, kind: AKSNodeClass, name: aks}
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
  disruption: {consolidateAfter: Never}
""")
    cluster.kubectl("delete", "nodepool", "default")
    first = controller(cluster, tmp_path, "first", provider="simulated")
    second = None
    try:
        api.create(deployment("web", 3, cpu="2"))
        launched = wait_for(lambda: [r["NodeClaim"]["name"] for r in first.logs()
                                     if r.get("message") == "launched nodeclaim"], what="NodeClaims launched")
        assert first.stop(signal.SIGKILL) == -signal.SIGKILL
        assert not api.list("Node")[0], "the Nodes registered before the kill: the test ran too slowly"
        claims_before = sorted(c["metadata"]["name"] for c in api.list("NodeClaim")[0])
        assert set(launched) <= set(claims_before)
        # a Node of this provider that no NodeClaim claims (its NodeClaim was deleted while nobody watched)
        api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "orphan", "labels": {
            "karpenter.sh/nodepool": "aks", "kubernetes.io/arch": "amd64"}},
            # cordoned, so that kube-scheduler does not place the deployment's pods on it while kwok keeps it Ready
            "spec": {"unschedulable": True,
                     "providerID": "azure:///subscriptions/0/resourceGroups/r/providers/Microsoft.Compute/"
                                   "virtualMachines/orphan"}})
        second = controller(cluster, tmp_path, "second", "--leader-elect=false", provider="simulated")
        wait_running(cluster, api, "web", 3, timeout=180, interval=1, what="the pods running")
        assert sorted(c["metadata"]["name"] for c in api.list("NodeClaim")[0]) == claims_before
        assert "orphan" not in {n["metadata"]["name"] for n in api.list("Node")[0]}
        assert {p["spec"]["nodeName"] for p in running(api, "web")} <= {
            c["status"].get("nodeName") for c in api.list("NodeClaim")[0]}
        assert "garbage collecting node with no nodeclaim" in second.messages()
        consistent(api, first, second)
        assert second.stop() == 0
    finally:
        first.stop(signal.SIGKILL)
        if second is not None:
            second.stop(signal.SIGKILL)


def test_cut_connections_lose_and_double_no_nodeclaim(cluster, tmp_path):
    from controller.test_e2e_sandbox import CuttingProxy

    api = cluster.api()
    port = int(cluster.server.rsplit(":", 1)[1])
    proxy = CuttingProxy(("127.0.0.1", port))
    doc = json.loads(open(cluster.kubeconfig).read())
    doc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    proxied = tmp_path / "proxied.kubeconfig"
    proxied.write_text(json.dumps(doc))
    c = Karpy.controller(str(proxied), tmp_path, "controller", "--cloud-provider", "kwok", "--leader-elect=false",
                         "--batch-idle-duration", "200ms")
    try:
        wait_for(lambda: http_get(c.port("health probe"), "/readyz")[0] == 200, what="ready")
        api.create(deployment("a", 2))
        for _ in range(5):  # cut every connection (watches and requests) while pods are provisioned
            time.sleep(0.3)
            proxy.cut()
        wait_running(cluster, api, "a", 2, what="pods of a running")
        api.create(deployment("b", 2, cpu="3"))
        proxy.cut()
        wait_running(cluster, api, "b", 2, what="pods of b running")
        consistent(api, c)
        assert "watch connection dropped, resuming" in c.messages() or "informer error, retrying" in c.messages()
        assert c.stop() == 0
    finally:
        c.stop()
        proxy.close()


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_control_plane_restarted_mid_run_loses_and_doubles_nothing(cluster, tmp_path, component):
    """kube-apiserver (or etcd) stops while the controller provisions, and comes back: the controller rides it
    out without a restart of its own, relists where its watches expired (410 Gone: a restarted kube-apiserver's
    watch cache starts at the present), and ends with every pod running, no NodeClaim lost or doubled."""
    api = cluster.api()
    c = controller(cluster, tmp_path, "controller", "--leader-elect=false")
    try:
        wait_for(lambda: http_get(c.port("health probe"), "/readyz")[0] == 200, what="ready")
        api.create(deployment("before", 2))
        wait_running(cluster, api, "before", 2, what="pods running before the restart")
        api.create(deployment("during", 2, cpu="3"))  # provisioned while the component restarts
        cluster.restart(component)
        if component == "etcd":  # kube-apiserver reconnects to etcd on its own
            wait_for(lambda: cluster.request("GET", "/readyz")[0] == 200, timeout=60, what="kube-apiserver ready")
        api.create(deployment("after", 1, cpu="2"))
        for app, n in (("before", 2), ("during", 2), ("after", 1)):
            wait_running(cluster, api, app, n, karpy=c, timeout=120, interval=0.5, what=f"pods of {app} running")
        assert c.p.poll() is None, "the controller exited"
        consistent(api, c)
        if component == "kube-apiserver":
            # its watches were cut, and the restarted server's watch cache no longer holds their versions
            assert "watch expired (410 Gone), relisting" in c.messages()
        # (etcd restarting is hidden from clients: kube-apiserver keeps their watches and reconnects to etcd)
        assert c.stop() == 0
        assert "Traceback" not in c.stderr()
    finally:
        c.stop()
