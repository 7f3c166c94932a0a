"""End to end: ``karpy sandbox --no-karpenter`` and ``karpy controller --cloud-provider kwok`` as processes."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from karpy.controller.leader import LEASE_NAME
from karpy.kube.client import KubeClient, RetryPolicy, load_config

try:
    from karpy.cli import main as _main

    HAVE_SANDBOX = "sandbox" in _main.commands
except Exception:  # pragma: no cover
    HAVE_SANDBOX = False

pytestmark = pytest.mark.skipif(not HAVE_SANDBOX, reason="karpy sandbox is not available")

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
                                  "spec": {"containers": [{"name": "c", "image": "pause",
                                                           "resources": {"requests": {"cpu": cpu}}}]}}}}


def wait_for(pred, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            v = pred()
        except Exception:  # noqa: BLE001 - the server may be starting
            v = None
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class Proc:
    def __init__(self, args: list[str], tmp, name: str):
        self.out_path = tmp / f"{name}.out"
        self.err_path = tmp / f"{name}.err"
        self.p = subprocess.Popen([sys.executable, "-m", "karpy.cli", *args], stdout=open(self.out_path, "w"),
                                  stderr=open(self.err_path, "w"), env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def logs(self) -> list[dict]:
        out = []
        for line in self.out_path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def port(self, kind: str) -> int:
        rec = wait_for(lambda: next((r for r in self.logs() if r.get("message") == "starting server"
                                     and r.get("kind") == kind), None), what=f"{kind} port")
        return int(rec["port"])

    def stop(self, sig=signal.SIGTERM, timeout=20) -> int:
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return self.p.wait(5)


@pytest.fixture
def sandbox(tmp_path):
    (tmp_path / "m.yaml").write_text(MANIFESTS)
    kc = tmp_path / "sandbox.kubeconfig"
    p = Proc(["sandbox", str(tmp_path / "m.yaml"), "--no-karpenter", "--port", "0", "--kubeconfig", str(kc)],
             tmp_path, "sandbox")
    try:
        wait_for(lambda: kc.exists(), what="the sandbox kubeconfig")
        config, _ = load_config(str(kc))
        assert config.cluster.server.startswith("https://127.0.0.1:")  # HTTPS by default on loopback
        api = KubeClient(config, retry=RetryPolicy(attempts=5, base=0.05, cap=0.5))
        ctx = ssl_context(kc)
        wait_for(lambda: urllib.request.urlopen(config.cluster.server + "/readyz", timeout=2, context=ctx).status == 200,
                 what="the sandbox")
        yield str(kc), api
        api.close()
    finally:
        p.stop()


def ssl_context(kubeconfig) -> ssl.SSLContext:
    """Trusts the CA the sandbox wrote into its kubeconfig (``certificate-authority-data``), and only it."""
    cluster = json.loads(open(kubeconfig).read())["clusters"][0]["cluster"]
    return ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())


def controller(tmp_path, kubeconfig: str, name: str, *extra: str) -> Proc:
    return Proc(["controller", "--kubeconfig", kubeconfig, "--cloud-provider", "kwok", "--metrics-port", "0",
                 "--health-probe-port", "0", "--bind-address", "127.0.0.1", "--batch-idle-duration", "200ms", *extra], tmp_path, name)


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def bound(api, app: str) -> list[dict]:
    return [p for p in api.list("Pod", "default")[0] if (p["metadata"].get("labels") or {}).get("app") == app
            and p["spec"].get("nodeName")]


def test_pods_get_nodes_and_the_controller_stops_cleanly(sandbox, tmp_path):
    kc, api = sandbox
    c = controller(tmp_path, kc, "controller")
    try:
        health, metrics = c.port("health probe"), c.port("metrics")
        wait_for(lambda: http_get(health, "/readyz")[0] == 200, what="readyz")
        api.create(deployment("inflate", 3))
        wait_for(lambda: len(bound(api, "inflate")) == 3, what="3 pods bound")
        claims = api.list("NodeClaim")[0]
        nodes = api.list("Node")[0]
        assert len(claims) == 1 and len(nodes) == 1
        assert claims[0]["status"]["providerID"] == nodes[0]["spec"]["providerID"]
        assert {p["spec"]["nodeName"] for p in bound(api, "inflate")} == {nodes[0]["metadata"]["name"]}
        _, text = http_get(metrics, "/metrics")
        assert 'karpenter_nodeclaims_created_total{min_values_relaxed="false",nodepool="default",reason="provisioned"} 1.0' in text
        assert 'karpenter_pods_state{' in text and 'karpenter_nodepools_usage{nodepool="default",resource_type="cpu"}' in text
        assert c.stop() == 0
        assert not api.get("Lease", LEASE_NAME, "kube-system")["spec"].get("holderIdentity")
        msgs = [r["message"] for r in c.logs()]
        assert "created nodeclaim" in msgs and "released lease" in msgs
        assert "Traceback" not in c.err_path.read_text()
    finally:
        c.stop()


def test_two_controllers_one_leader_killed_the_other_takes_over(sandbox, tmp_path):
    kc, api = sandbox
    a = controller(tmp_path, kc, "a")
    b = None
    try:
        wait_for(lambda: api.get("Lease", LEASE_NAME, "kube-system")["spec"].get("holderIdentity"), what="a leader")
        b = controller(tmp_path, kc, "b")
        wait_for(lambda: http_get(b.port("health probe"), "/readyz")[0] == 200, what="b ready")
        leader = api.get("Lease", LEASE_NAME, "kube-system")["spec"]["holderIdentity"]
        api.create(deployment("one", 2))
        wait_for(lambda: len(bound(api, "one")) == 2, what="pods of the first deployment bound")
        assert sum(r["message"] == "created nodeclaim" for p in (a, b) for r in p.logs()) == 1
        first = [p for p in (a, b) if any(r["message"] == "successfully acquired lease" for r in p.logs())]
        assert len(first) == 1  # exactly one leader
        killed, other = (first[0], b if first[0] is a else a)
        killed.stop(signal.SIGKILL)  # no release: the standby waits for the lease to expire (15 s)
        wait_for(lambda: api.get("Lease", LEASE_NAME, "kube-system")["spec"]["holderIdentity"] not in ("", None, leader),
                 timeout=30, what="the standby takes over")
        api.create(deployment("two", 2, cpu="3"))
        wait_for(lambda: len(bound(api, "two")) == 2, timeout=30, what="pods of the second deployment bound")
        claims = api.list("NodeClaim")[0]
        assert len({c["metadata"]["name"] for c in claims}) == len(claims)
        assert len(claims) == len(api.list("Node")[0])  # no orphan Node, no NodeClaim without its Node
        assert other.stop() == 0
    finally:
        a.stop(signal.SIGKILL)
        if b is not None:
            b.stop(signal.SIGKILL)


def test_the_standby_finishes_a_scale_down_consolidation_after_the_leader_is_killed(sandbox, tmp_path):
    """Issue 7's bar: two controllers, the leader killed, a scale-down consolidated by the one left."""
    kc, api = sandbox
    api.patch("NodePool", "default", {"spec": {"disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized",
                                                              "consolidateAfter": "0s"}}})
    a = controller(tmp_path, kc, "a")
    b = None
    try:
        wait_for(lambda: api.get("Lease", LEASE_NAME, "kube-system")["spec"].get("holderIdentity"), what="a leader")
        b = controller(tmp_path, kc, "b")
        wait_for(lambda: http_get(b.port("health probe"), "/readyz")[0] == 200, what="b ready")
        api.create(deployment("work", 4))
        wait_for(lambda: len(bound(api, "work")) == 4, what="4 pods bound")
        (first,) = api.list("NodeClaim")[0]
        leader = next(p for p in (a, b) if any(r["message"] == "successfully acquired lease" for r in p.logs()))
        other = b if leader is a else a
        leader.stop(signal.SIGKILL)
        api.patch("Deployment", "work", {"spec": {"replicas": 1}}, "default")
        # the standby takes the lease once it expires, then replaces the node with a cheaper one
        wait_for(lambda: not _exists(api, first), timeout=90, what="the first NodeClaim consolidated away")
        wait_for(lambda: len(bound(api, "work")) == 1, timeout=30, what="the remaining pod bound")
        claims = api.list("NodeClaim")[0]
        assert len(claims) == 1 and claims[0]["metadata"]["name"] != first["metadata"]["name"]
        msgs = [r for r in other.logs() if r.get("message") == "disrupting node(s)"]
        assert msgs, "the standby never disrupted"
        assert not any(r.get("message") == "disrupting node(s)" for r in leader.logs())
        assert other.stop() == 0
    finally:
        a.stop(signal.SIGKILL)
        if b is not None:
            b.stop(signal.SIGKILL)


def _exists(api, obj: dict) -> bool:
    from karpy.kube import errors as E

    try:
        api.get("NodeClaim", obj["metadata"]["name"])
        return True
    except E.NotFound:
        return False


class CuttingProxy:
    """A TCP proxy whose connections the test can cut (watches drop, requests fail mid-way)."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            try:
                s = socket.create_connection(self.target)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.conns += [c, s]
            for a, b in ((c, s), (s, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        finally:
            for x in (a, b):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        with self.lock:
            conns, self.conns = self.conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
                c.close()
            except OSError:
                pass

    def close(self) -> None:
        self.closed = True
        self.sock.close()
        self.cut()


def test_cut_connections_lose_and_double_no_nodeclaim(sandbox, tmp_path):
    kc, api = sandbox
    config, _ = load_config(kc)
    host, port = config.cluster.server.rsplit("//", 1)[1].rsplit(":", 1)
    proxy = CuttingProxy((host, int(port)))
    pkc = tmp_path / "proxied.kubeconfig"
    # the proxy passes TLS through: the controller verifies the sandbox's certificate, which names 127.0.0.1
    text = open(kc).read().replace(config.cluster.server, f"https://127.0.0.1:{proxy.port}")
    pkc.write_text(text)
    c = controller(tmp_path, str(pkc), "controller", "--leader-elect=false")
    try:
        wait_for(lambda: http_get(c.port("health probe"), "/readyz")[0] == 200, what="ready")
        api.create(deployment("a", 2))
        for _ in range(5):  # cut every connection (watches and requests) while pods are provisioned
            time.sleep(0.3)
            proxy.cut()
        wait_for(lambda: len(bound(api, "a")) == 2, what="pods of a bound")
        api.create(deployment("b", 2, cpu="3"))
        proxy.cut()
        wait_for(lambda: len(bound(api, "b")) == 2, what="pods of b bound")
        claims = api.list("NodeClaim")[0]
        assert len(claims) == len(api.list("Node")[0])
        created = [r["NodeClaim"]["name"] for r in c.logs() if r["message"] == "created nodeclaim"]
        assert sorted(created) == sorted(x["metadata"]["name"] for x in claims)  # none lost, none doubled
        assert any(r["message"] in ("watch connection dropped, resuming", "informer error, retrying")
                   for r in c.logs())
        assert c.stop() == 0
    finally:
        c.stop()
        proxy.close()
