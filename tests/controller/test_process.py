"""The controller process over HTTP on 127.0.0.1 (a small REST front over the in-memory API server):
provisioning end to end, leader election and takeover, restarts, metrics and health endpoints."""

from __future__ import annotations

import io
import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from controllers.harness import nodeclass, nodepool, pod
from karpy.controller.leader import LEASE_NAME
from karpy.controller.process import ControllerProcess
from karpy.controller.settings import ControllerSettings
from karpy.kube.client import KubeClient, RetryPolicy, load_config

from .apiserver import FakeAPIServer


def settings(**kw) -> ControllerSettings:
    s = ControllerSettings(metrics_port=0, health_probe_port=0, bind_address="127.0.0.1",
                           lease_duration=2.0, renew_deadline=1.5, retry_period=0.2,
                           batch_idle_duration=0.2, batch_max_duration=1.0)
    for k, v in kw.items():
        setattr(s, k, v)
    return s


class Running:
    """A ControllerProcess on its own thread."""

    def __init__(self, kubeconfig: str, identity: str, **kw):
        config, _ = load_config(kubeconfig)
        self.api = KubeClient(config, retry=RetryPolicy(attempts=6, base=0.01, cap=0.1))
        self.out = io.StringIO()
        self.proc = ControllerProcess(settings(**kw), self.api, log_stream=self.out, identity=identity)
        self.proc.start()
        self.code: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.code = self.proc.run()

    def stop(self) -> int | None:
        self.proc.request_stop()
        self.thread.join(10)
        return self.code

    def crash(self) -> None:
        """Stop as a killed process would: no Lease release, nothing written on the way out."""
        self.proc.elector and self.proc.elector.stop()
        self.proc.exit_code = 1  # skips the release
        self.proc.request_stop()
        self.thread.join(10)

    def logs(self) -> list[dict]:
        return [json.loads(line) for line in self.out.getvalue().splitlines() if line.strip()]

    def get(self, port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()


def wait_for(pred, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def cluster(server):
    api = server.api
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}})
    api.create(nodeclass())
    api.create(nodepool())
    return api


def pending(api, name: str, cpu: str = "1") -> None:
    api.create(pod(name, cpu=cpu, unschedulable=True))


def claims(api) -> list[dict]:
    return api.list("NodeClaim")[0]


def test_pending_pods_become_nodeclaims_and_nodes(server, kubeconfig, cluster):
    for i in range(3):  # before the controller starts: one batch, whatever the machine's load
        pending(cluster, f"p{i}")
    c = Running(kubeconfig, "solo")
    try:
        launched = wait_for(lambda: [x for x in claims(cluster) if (x.get("status") or {}).get("providerID")],
                            what="a launched NodeClaim")
        pid = launched[0]["status"]["providerID"]
        node = wait_for(lambda: [n for n in cluster.list("Node")[0] if n["spec"].get("providerID") == pid],
                        what="its Node")[0]
        wait_for(lambda: (cluster.get("Node", node["metadata"]["name"])["metadata"].get("labels") or {})
                 .get("karpenter.sh/registered") == "true", what="registration")
        # the Node's label is written just before the controller logs the registration
        wait_for(lambda: "registered nodeclaim" in [r["message"] for r in c.logs()], what="the registration logged")
        assert len(claims(cluster)) == 1, [r for r in c.logs() if r["message"] == "created nodeclaim"]
        msgs = [r["message"] for r in c.logs()]
        for m in ("found provisionable pod(s)", "computed new nodeclaim(s) to fit pod(s)", "created nodeclaim",
                  "launched nodeclaim", "registered nodeclaim", "successfully acquired lease"):
            assert m in msgs, m
        rec = next(r for r in c.logs() if r["message"] == "created nodeclaim")
        assert rec["level"] == "INFO" and rec["logger"] and rec["controller"] == "provisioner" and rec["NodeClaim"]["name"]
        # endpoints
        assert c.get(c.proc.health.port, "/healthz") == (200, "ok")
        assert c.get(c.proc.health.port, "/readyz")[0] == 200
        status, text = c.get(c.proc.metrics_server.port, "/metrics")
        assert status == 200
        assert 'karpenter_nodeclaims_created_total{min_values_relaxed="false",nodepool="default",reason="provisioned"} 1.0' in text
        assert "karpenter_nodes_allocatable{" in text and 'resource_type="cpu"' in text
        assert 'karpenter_pods_state{' in text and 'name="p0"' in text
        assert "karpenter_scheduler_scheduling_duration_seconds_count" in text
        assert 'controller_runtime_reconcile_total{controller="provisioner"' in text
        errors = [r for r in c.logs() if r["level"] == "ERROR"]
        assert errors == [], errors
        assert c.stop() == 0
        lease = cluster.get("Lease", LEASE_NAME, "kube-system")
        assert not lease["spec"].get("holderIdentity")  # released on a clean stop
    finally:
        c.stop()


def test_one_leader_and_a_standby_that_takes_over(server, kubeconfig, cluster):
    a = Running(kubeconfig, "a")
    wait_for(lambda: a.proc.leading.is_set(), what="a leads")
    b = Running(kubeconfig, "b")
    try:
        wait_for(lambda: b.proc.mgr.synced.is_set(), what="b's caches")
        assert b.get(b.proc.health.port, "/readyz")[0] == 200  # a standby is ready: its caches are synced
        time.sleep(0.5)
        assert not b.proc.leading.is_set()
        pending(cluster, "first")
        wait_for(lambda: len(claims(cluster)) == 1, what="a provisions")
        a.crash()  # killed: the lease is not released; b takes over after it expires
        wait_for(lambda: b.proc.leading.is_set(), timeout=15, what="b takes over")
        assert cluster.get("Lease", LEASE_NAME, "kube-system")["spec"]["holderIdentity"] == "b"
        pending(cluster, "second", cpu="3")
        wait_for(lambda: len(claims(cluster)) == 2, what="b provisions")
        # b recovered a's instances from the cluster: the first NodeClaim is still one instance, not relaunched
        # (the second NodeClaim's instance is launched just after the NodeClaim is created)
        wait_for(lambda: len(b.proc.cloud.instances) == 2, what="b launches the second NodeClaim")
        time.sleep(0.5)
        assert len(b.proc.cloud.instances) == 2
        assert len(claims(cluster)) == 2 and len(cluster.list("Node")[0]) == 2
    finally:
        b.stop()
        a.stop()


def test_sigterm_leader_hands_over_at_once(server, kubeconfig, cluster):
    a = Running(kubeconfig, "a")
    wait_for(lambda: a.proc.leading.is_set(), what="a leads")
    b = Running(kubeconfig, "b", lease_duration=60.0, renew_deadline=40.0)
    try:
        wait_for(lambda: b.proc.mgr.synced.is_set(), what="b's caches")
        assert a.stop() == 0  # releases: b does not wait for the (60 s) lease to expire
        wait_for(lambda: b.proc.leading.is_set(), timeout=5, what="b takes over")
    finally:
        b.stop()


def test_restart_mid_launch_leaves_no_orphan_or_duplicate(server, kubeconfig, cluster):
    """A NodeClaim created but never launched, one launched whose Node never registered, and a Node whose
    NodeClaim is gone: a restarted controller launches the first, registers the second, collects the third."""
    api = cluster
    ref = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
    reqs = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-2x-amd64-linux"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]

    def claim(name):
        return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"},
                             "finalizers": ["karpenter.sh/termination"]},
                "spec": {"nodeClassRef": ref, "requirements": reqs, "resources": {"requests": {"cpu": "1"}}}}

    api.create(claim("unlaunched"))
    api.create(claim("launched"))
    api.patch("NodeClaim", "launched", {"metadata": {"labels": {
        "node.kubernetes.io/instance-type": "c-2x-amd64-linux", "topology.kubernetes.io/zone": "test-zone-a",
        "karpenter.sh/capacity-type": "on-demand", "kubernetes.io/arch": "amd64"}}})
    api.patch("NodeClaim", "launched", {"status": {"providerID": "kwok://launched", "conditions": [
        {"type": "Launched", "status": "True", "reason": "Launched", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
              subresource="status")
    api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "orphan", "labels": {
        "karpenter.sh/nodepool": "default"}}, "spec": {"providerID": "kwok://orphan"}})
    c = Running(kubeconfig, "restarted", leader_elect=False)
    try:
        wait_for(lambda: (api.get("NodeClaim", "unlaunched").get("status") or {}).get("providerID"),
                 what="the unlaunched NodeClaim launched")
        wait_for(lambda: {n["metadata"]["name"] for n in api.list("Node")[0]} == {"unlaunched", "launched"},
                 what="both Nodes registered, the orphan gone")
        assert sorted(x["metadata"]["name"] for x in claims(api)) == ["launched", "unlaunched"]
        assert api.get("NodeClaim", "launched")["status"]["providerID"] == "kwok://launched"
        assert "garbage collecting node with no nodeclaim" in [r["message"] for r in c.logs()]
    finally:
        c.stop()


def test_watch_cut_and_expired_relists_without_losing_or_doubling_nodeclaims(server, kubeconfig, cluster):
    c = Running(kubeconfig, "solo", leader_elect=False)
    try:
        pending(cluster, "p0")
        wait_for(lambda: len(c.proc.mgr.list("NodeClaim")) == 1, what="the first NodeClaim in the cache")
        # the connection drops while NodeClaims change, and the history is gone: resuming answers 410
        server.expire_and_cut("NodeClaim")
        first = claims(cluster)[0]["metadata"]["name"]
        cluster.create({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "extra"},
                        "spec": {"nodeClassRef": {"group": "karpenter.example.com", "kind": "Other", "name": "x"}}})
        wait_for(lambda: sorted(n["metadata"]["name"] for n in c.proc.mgr.list("NodeClaim")) == sorted([first, "extra"]),
                 what="the cache catches up")
        cluster.delete("NodeClaim", "extra")
        informer = c.proc.mgr.informers.by_kind["NodeClaim"]
        assert informer.lists >= 2  # the cut watch resumed from before the floor, was answered 410 and relisted
        server.expire_and_cut("NodeClaim")
        wait_for(lambda: informer.lists >= 3, what="the second relist")
        wait_for(lambda: [n["metadata"]["name"] for n in c.proc.mgr.list("NodeClaim")] == [first],
                 what="the deletion seen after the relist")
        assert len(claims(cluster)) == 1
    finally:
        c.stop()


def test_api_faults_are_retried_through_provisioning(server, kubeconfig, cluster):
    c = Running(kubeconfig, "solo", leader_elect=False)
    try:
        wait_for(lambda: c.proc.mgr.synced.is_set(), what="caches")
        server.fail_next("POST", "/nodeclaims", 503)
        server.fail_next("POST", "/nodeclaims", 429, body={"kind": "Status", "code": 429, "reason": "TooManyRequests"})
        server.fail_next("PATCH", "/nodeclaims/", 500, times=2)
        server.fail_next("PATCH", "/nodeclaims/", 409, body={"kind": "Status", "code": 409, "reason": "Conflict"})
        server.fail_next("POST", "/nodeclaims", None, after=True)
        pending(cluster, "p0")
        wait_for(lambda: [n for n in cluster.list("Node")[0]], what="a Node")
        assert len(claims(cluster)) == 1
        assert c.api.retries >= 4
    finally:
        c.stop()


def test_a_batch_creates_its_nodeclaims_in_parallel(server, kubeconfig, cluster):
    """Upstream's CreateNodeClaims sends a batch's creates at once: with an API server taking 0.5 s per
    NodeClaim create, ten pods that may not share a node get their ten NodeClaims in about one round trip,
    not ten."""
    arrivals: list[float] = []
    handle = server._handle

    def slow(h, method):
        if method == "POST" and "/nodeclaims" in h.path:
            arrivals.append(time.monotonic())
            time.sleep(0.5)
        return handle(h, method)

    server._handle = slow
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "one-per-node"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    for i in range(10):
        cluster.create(pod(f"p{i}", cpu="1", unschedulable=True, labels={"app": "one-per-node"}, affinity=anti))
    c = Running(kubeconfig, "solo")
    try:
        wait_for(lambda: len(claims(cluster)) == 10, timeout=30, what="ten NodeClaims")
        assert len(arrivals) == 10
        assert max(arrivals) - min(arrivals) < 2.5, "the creates were sent one after another"
    finally:
        c.stop()


def test_declared_reservations_are_launched_into_first(server, kubeconfig, cluster, tmp_path):
    """karpy controller --reservations FILE (kwok): a reservation of 2 instances takes the first two
    NodeClaims as capacity type reserved; the third pod's NodeClaim falls back to on-demand."""
    from karpy.controller.settings import _reservations_file

    # three pods that need a node each (3 of the c-2x's 2 CPUs), on a NodePool that allows reserved
    cluster.patch("NodePool", "default", {"spec": {"template": {"spec": {"requirements": [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved", "on-demand"]},
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-2x-amd64-linux"]}]}}}})
    f = tmp_path / "reservations.yaml"
    f.write_text("- {id: cr-1, instanceType: c-2x-amd64-linux, zone: test-zone-a, count: 2, price: 0.01}\n")
    for i in range(3):
        pending(cluster, f"r{i}", cpu="1500m")
    c = Running(kubeconfig, "solo", reservations=_reservations_file("--reservations", str(f)))
    try:
        launched = wait_for(lambda: (lambda xs: xs if len(xs) == 3 else None)(
            [x for x in claims(cluster) if (x.get("status") or {}).get("providerID")]), what="three launched NodeClaims")
        types = sorted(x["metadata"]["labels"]["karpenter.sh/capacity-type"] for x in launched)
        assert types == ["on-demand", "reserved", "reserved"], types
        reserved = [x for x in launched if x["metadata"]["labels"]["karpenter.sh/capacity-type"] == "reserved"]
        assert all(x["metadata"]["labels"]["topology.kubernetes.io/zone"] == "test-zone-a" for x in reserved)
    finally:
        c.stop()
