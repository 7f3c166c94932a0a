"""`karpy controller` against a real HTTP API: pending pods created through the API become NodeClaims.

Starts ``karpy sandbox --no-karpenter`` (the in-memory API server over HTTPS, as it serves by default on
loopback, with the simulated world, real time) and ``karpy controller --cloud-provider kwok`` as two processes on 127.0.0.1, applies a KWOKNodeClass
and a NodePool (linux, on-demand), then creates N pods through the API, one POST each, in parallel
connections. It reports:

* how long the creates took;
* from the last create, the time until the controller has created N/5 NodeClaims (the first provisioning
  wave: N/5 pods repel each other by hostname anti-affinity), and until its last NodeClaim (pods the
  kube-scheduler stand-in refuses when their zone spread is judged on the nodes that really came up make
  a later, smaller wave: upstream's behaviour with its default gates);
* from the last create, the time until every pod is bound (the sandbox's kube-scheduler binds them as the
  kwok nodes register);
* the controller's peak RSS (``VmHWM``) and the NodeClaims' count.

The pods are bench/scheduling.py's makeDiversePods(N) mix (zone and hostname spread, zone affinity,
hostname anti-affinity), the hardest shape the provisioner meets. Run from the repository root:

    .venv/bin/python bench/controller.py [N]        # default 5000

Nothing here is a unit test: timings are reported, never asserted. Exit status 1 when pods are left
unbound.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import _util  # noqa: F401  (puts the repository root on sys.path)
from scheduling import make_diverse_pods

KARPY = Path(sys.executable).with_name("karpy")

MANIFESTS = """\
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
        - {key: kubernetes.io/os, operator: In, values: [linux]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
  disruption: {consolidateAfter: Never}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    """A tiny JSON client over keep-alive connections, one per thread; HTTPS verified with the kubeconfig's CA."""

    def __init__(self, kubeconfig: Path):
        cluster = json.loads(kubeconfig.read_text())["clusters"][0]["cluster"]
        u = urlparse(cluster["server"])
        self.host, self.port = u.hostname, u.port
        self.ssl = None
        if u.scheme == "https":
            ca = cluster.get("certificate-authority-data")
            self.ssl = ssl.create_default_context(cadata=base64.b64decode(ca).decode() if ca else None)
        self.local = threading.local()

    def _conn(self) -> http.client.HTTPConnection:
        c = getattr(self.local, "conn", None)
        if c is None:
            if self.ssl is not None:
                c = http.client.HTTPSConnection(self.host, self.port, timeout=60, context=self.ssl)
            else:
                c = http.client.HTTPConnection(self.host, self.port, timeout=60)
            self.local.conn = c
        return c

    def request(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(3):
            c = self._conn()
            try:
                c.request(method, path, body=data, headers={"Content-Type": "application/json"})
                r = c.getresponse()
                out = r.read()
                if r.status >= 300:
                    raise RuntimeError(f"{method} {path}: {r.status} {out[:300]!r}")
                return json.loads(out) if out else {}
            except (ConnectionError, http.client.HTTPException):
                self.local.conn = None
                if attempt == 2:
                    raise
        return {}


def vm_hwm_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def main(argv: list[str]) -> int:
    verbose = "-v" in argv
    argv = [a for a in argv if a != "-v"]
    n = int(argv[0]) if argv else 5000
    tmp = Path(tempfile.mkdtemp(prefix="karpy-bench-controller-"))
    (tmp / "start.yaml").write_text(MANIFESTS)
    kubeconfig = tmp / "kubeconfig"
    port = free_port()
    sandbox = subprocess.Popen([str(KARPY), "sandbox", str(tmp / "start.yaml"), "--no-karpenter", "--port", str(port),
                                "--kubeconfig", str(kubeconfig), "--log-level", "error"],
                               stdout=open(tmp / "sandbox.out", "wb"), stderr=open(tmp / "sandbox.err", "wb"))
    controller = None
    try:
        deadline = time.monotonic() + 60
        while not kubeconfig.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        api = Api(kubeconfig)
        controller = subprocess.Popen(
            [str(KARPY), "controller", "--kubeconfig", str(kubeconfig), "--cloud-provider", "kwok",
             "--leader-elect=false", "--metrics-port", str(free_port()), "--health-probe-port", str(free_port()), "--bind-address", "127.0.0.1",
             "--log-level", "error"],
            stdout=open(tmp / "controller.out", "wb"), stderr=open(tmp / "controller.err", "wb"))
        time.sleep(2.0)  # caches sync

        pods = [p.manifest for p in make_diverse_pods(n)]
        for p in pods:
            p.setdefault("metadata", {})["namespace"] = "default"
        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda p: api.request("POST", "/api/v1/namespaces/default/pods", p), pods))
        t_created = time.monotonic()
        print(f"created {n} pods through the API in {t_created - t0:.1f} s", flush=True)

        last_claims, t_last_claim, t_bound, t_wave = -1, None, None, None
        while time.monotonic() - t_created < 600:
            claims = api.request("GET", "/apis/karpenter.sh/v1/nodeclaims")["items"]
            plist = api.request("GET", "/api/v1/namespaces/default/pods")["items"]
            bound = sum(1 for p in plist if (p.get("spec") or {}).get("nodeName"))
            covered = sum(1 for p in plist if (p.get("spec") or {}).get("nodeName")
                          or (p.get("status") or {}).get("nominatedNodeName"))
            now = time.monotonic()
            if len(claims) != last_claims:
                last_claims, t_last_claim = len(claims), now
            if t_wave is None and len(claims) >= n // 5:
                t_wave = now
            if bound == n:
                t_bound = now
                break
            if verbose and int(now - t_created) // 5 != int(now - t_created - 0.5) // 5:
                print(f"  {now - t_created:6.1f} s: {len(claims)} NodeClaims, {covered} pods placed or nominated, "
                      f"{bound} bound", flush=True)
            time.sleep(0.5)
        claims_s = (t_last_claim - t_created) if t_last_claim else float("nan")
        wave_s = (t_wave - t_created) if t_wave else float("nan")
        bound_s = (t_bound - t_created) if t_bound else float("nan")
        rss = vm_hwm_mb(controller.pid)
        print(f"N/5 NodeClaims (the anti-affinity minimum) {wave_s:.1f} s after the last pod; last NodeClaim "
              f"{claims_s:.1f} s; every pod bound after {bound_s:.1f} s; "
              f"{last_claims} NodeClaims (N/5 = {n // 5}); controller peak RSS {rss:.0f} MB", flush=True)
        return 0 if t_bound else 1
    finally:
        for proc in (controller, sandbox):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
