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
    .venv/bin/python bench/controller.py N --cluster real                       # karpy on a real control plane
    .venv/bin/python bench/controller.py N --cluster real --karpenter upstream  # upstream Karpenter there
    .venv/bin/python bench/controller.py N --cluster real --feature-gates ZonePinning=true

With ``--cluster real`` the pods go to a real control plane (scripts/local-cluster: etcd, kube-apiserver,
kube-controller-manager, the real kube-scheduler binding pods, kwok running the nodes), driven by ``karpy
controller`` or by upstream Karpenter's kwok build (scripts/kube-binaries), as scripts/differential starts them,
so that the same run shows whether a tail is karpy's or the real scheduler's with either Karpenter. The binaries
must be built (scripts/kube-binaries build). It also reports the 90 % and 99 % marks and, by kind, the pods still
unbound at the 90 % mark.

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
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

from _util import load_script  # (puts the repository root on sys.path)
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

    @classmethod
    def to(cls, host: str, port: int, context: ssl.SSLContext) -> "Api":
        """A client of ``https://host:port`` with ``context`` (a client certificate's, for a real cluster)."""
        api = cls.__new__(cls)
        api.host, api.port, api.ssl, api.local = host, port, context, threading.local()
        return api

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


def sandbox_world(tmp: Path, gates: str, log_level: str = "error") -> tuple[Api, subprocess.Popen, list]:
    """``karpy sandbox --no-karpenter`` and ``karpy controller`` against it; (client, controller, processes)."""
    (tmp / "start.yaml").write_text(MANIFESTS)
    kubeconfig = tmp / "kubeconfig"
    port = free_port()
    procs: list = []
    procs.append(subprocess.Popen(
        [str(KARPY), "sandbox", str(tmp / "start.yaml"), "--no-karpenter", "--port", str(port),
         "--kubeconfig", str(kubeconfig), "--log-level", "error"],
        stdout=open(tmp / "sandbox.out", "wb"), stderr=open(tmp / "sandbox.err", "wb")))
    deadline = time.monotonic() + 60
    while not kubeconfig.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    api = Api(kubeconfig)
    controller = subprocess.Popen(
        [str(KARPY), "controller", "--kubeconfig", str(kubeconfig), "--cloud-provider", "kwok",
         "--leader-elect=false", "--metrics-port", str(free_port()), "--health-probe-port", str(free_port()),
         "--bind-address", "127.0.0.1", "--log-level", log_level, *(["--feature-gates", gates] if gates else [])],
        stdout=open(tmp / "controller.out", "wb"), stderr=open(tmp / "controller.err", "wb"))
    procs.insert(0, controller)
    time.sleep(2.0)  # caches sync
    return api, controller, procs


def real_world(tmp: Path, karpenter: str, gates: str):
    """A real control plane (scripts/local-cluster: etcd, kube-apiserver, kube-controller-manager, the real
    kube-scheduler, kwok) driven by ``karpy controller`` or upstream Karpenter's kwok build, as
    scripts/differential starts them; (client, controller process, the player to stop)."""
    os.environ["KARPY_DIFF_NO_REEXEC"] = "1"
    diff = load_script("differential", "karpy_differential")
    if gates and karpenter == "karpy":
        os.environ["FEATURE_GATES"] = gates
    player = diff.Player(karpenter, tmp / karpenter)
    player.up()
    player.apply(list(yaml_docs(MANIFESTS)))
    u = urlparse(player.server)
    api = Api.to(u.hostname, u.port, player.ctx)
    return api, player.proc, player


def yaml_docs(text: str):
    import yaml

    return [d for d in yaml.safe_load_all(text) if d]


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("n", nargs="?", type=int, default=5000, help="pods (default 5000)")
    ap.add_argument("-v", action="store_true", help="print progress every 5 s")
    ap.add_argument("--cluster", choices=("sandbox", "real"), default="sandbox",
                    help="karpy sandbox (default) or a real control plane from scripts/local-cluster")
    ap.add_argument("--karpenter", choices=("karpy", "upstream"), default="karpy",
                    help="with --cluster real: karpy controller (default) or upstream Karpenter's kwok build")
    ap.add_argument("--feature-gates", default="", help="karpy controller's --feature-gates, e.g. ZonePinning=true")
    ap.add_argument("--timeout", type=float, default=600, help="seconds to wait for every pod to be bound")
    ap.add_argument("--controller-log-level", default="error",
                    help="on the sandbox: karpy controller's --log-level (its log is left in the run's directory)")
    args = ap.parse_args(argv)
    if args.karpenter == "upstream" and args.cluster != "real":
        ap.error("--karpenter upstream needs --cluster real")
    n, verbose = args.n, args.v
    tmp = Path(tempfile.mkdtemp(prefix="karpy-bench-controller-"))
    controller, stop = None, []
    try:
        if args.cluster == "sandbox":
            api, controller, stop = sandbox_world(tmp, args.feature_gates, args.controller_log_level)
        else:
            api, controller, player = real_world(tmp, args.karpenter, args.feature_gates)
            stop = [player]
        print(f"{args.karpenter} on the {'real control plane' if args.cluster == 'real' else 'sandbox'}"
              f"{', ' + args.feature_gates if args.feature_gates else ''}: {tmp}", flush=True)

        bench_pods = make_diverse_pods(n)
        kind_of = {p.manifest["metadata"]["name"]: p.kind for p in bench_pods}
        pods = [p.manifest for p in bench_pods]
        for p in pods:
            p.setdefault("metadata", {})["namespace"] = "default"
        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda p: api.request("POST", "/api/v1/namespaces/default/pods", p), pods))
        t_created = time.monotonic()
        print(f"created {n} pods through the API in {t_created - t0:.1f} s", flush=True)

        last_claims, t_last_claim, t_bound, t_wave = -1, None, None, None
        marks = {0.9: None, 0.99: None}
        left_at_90: Counter = Counter()
        unbound_path = "/api/v1/namespaces/default/pods?fieldSelector=spec.nodeName%3D"
        while time.monotonic() - t_created < args.timeout:
            claims = api.request("GET", "/apis/karpenter.sh/v1/nodeclaims")["items"]
            seen = time.monotonic()  # NodeClaim times are taken before the pod list
            if len(claims) != last_claims:
                last_claims, t_last_claim = len(claims), seen
            if t_wave is None and len(claims) >= n // 5:
                t_wave = seen
            if t_wave is None and seen - t_created < 60:
                # the first wave is timed on NodeClaims alone: listing thousands of pods beside it would
                # delay the observation and load the server the controller is writing to
                time.sleep(0.1)
                continue
            unbound = api.request("GET", unbound_path)["items"]
            bound = n - len(unbound)
            now = time.monotonic()
            for frac in marks:
                if marks[frac] is None and bound >= frac * n:
                    marks[frac] = now - t_created
                    if frac == 0.9:
                        left_at_90 = Counter(kind_of.get(p["metadata"]["name"], "?") for p in unbound)
            if bound == n:
                t_bound = now
                break
            if verbose and int(now - t_created) // 5 != int(now - t_created - 0.5) // 5:
                nominated = sum(1 for p in unbound if (p.get("status") or {}).get("nominatedNodeName"))
                print(f"  {now - t_created:6.1f} s: {len(claims)} NodeClaims, {bound} bound, "
                      f"{nominated} more nominated", flush=True)
            time.sleep(0.5 if args.cluster == "sandbox" else 1.0)
        claims_s = (t_last_claim - t_created) if t_last_claim else float("nan")
        wave_s = (t_wave - t_created) if t_wave else float("nan")
        bound_s = (t_bound - t_created) if t_bound else float("nan")
        rss = vm_hwm_mb(controller.pid)
        pct = ", ".join(f"{int(f * 100)} % bound after {m:.1f} s" if m is not None else f"{int(f * 100)} % never"
                        for f, m in marks.items())
        print(f"N/5 NodeClaims (the anti-affinity minimum) {wave_s:.1f} s after the last pod; last NodeClaim "
              f"{claims_s:.1f} s; {pct}; every pod bound after {bound_s:.1f} s; "
              f"{last_claims} NodeClaims (N/5 = {n // 5}); controller peak RSS {rss:.0f} MB", flush=True)
        if left_at_90:
            print("unbound at the 90 % mark: " + ", ".join(f"{c} {k}" for k, c in left_at_90.most_common()), flush=True)
        if t_bound is None:
            print(f"{len(unbound)} pods left unbound", flush=True)
        return 0 if t_bound else 1
    finally:
        for proc in stop:
            if hasattr(proc, "down"):
                proc.down()
            elif proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
