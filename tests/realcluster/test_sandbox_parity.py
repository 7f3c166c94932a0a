"""`karpy sandbox --no-karpenter` held to kube-apiserver v1.33: the same client probes played against both, and
what a client sees compared, normalised only for what legitimately varies between two servers (uids,
timestamps, resourceVersion values, generated names, ages, server versions, IP addresses).

Both servers start once for the module: the real control plane of ``scripts/local-cluster`` with karpy's CRDs
from ``deploy/crds`` installed, and a sandbox (which installs the same CRDs itself). Each test works in
namespaces of its own, of the same name on both, and one Node (``parity-node``) runs the pods on both (kwok on
the real control plane, the sandbox's kubelets in the sandbox).

Where the sandbox differs on purpose, or matching would cost more than it is worth, the test asserts the
difference and says why, next to the assertion (``DELIBERATE``). The list:

* Pods of a Job run until deleted in the sandbox (a pod finishes only when annotated ``karpy.dev/run-for``);
  kwok completes them at once. The tests use Jobs without waiting for them.
* Authorization: the sandbox has none (every request is allowed, like a cluster admin's); ``kubectl auth
  can-i`` says yes to everything on both for the admin of the real control plane.
* Descriptions of the built-in kinds' Table columns (Go documentation text of upstream's types) are not served;
  names, types, formats and priorities are.
* Events: the sandbox's world records Karpenter's events and its own, not every event of kube-controller-manager,
  kube-scheduler and kubelets (``Scheduled``, ``SuccessfulCreate``, ``ScalingReplicaSet``, ...).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote, urlsplit

import pytest

from localcluster import LocalCluster, kubectl_binary, wait_for

pytestmark = pytest.mark.skipif(kubectl_binary() is None, reason="kubectl is not installed")

ROOT = Path(__file__).resolve().parents[2]
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
NODE = "parity-node"
NODE_MANIFEST = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux",
                                          "kubernetes.io/arch": "amd64", "type": "kwok"},
                 "annotations": {"kwok.x-k8s.io/node": "fake"}},
    "status": {"capacity": {"cpu": "64", "memory": "256Gi", "pods": "200"},
               "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "200"}},
}


# --- talking to a server ------------------------------------------------------------------------------------

class Reply:
    def __init__(self, status: int, headers: dict[str, str], raw: bytes):
        self.status = status
        self.headers = headers
        self.raw = raw
        try:
            self.body: Any = json.loads(raw) if raw else None
        except ValueError:
            self.body = raw.decode(errors="replace")

    def __repr__(self) -> str:
        return f"Reply({self.status}, {self.body!r})"


class Server:
    """One API server as its kubeconfig describes it: raw HTTPS requests and watches, kubectl, clients."""

    def __init__(self, name: str, kubeconfig: str, home: Path):
        self.name = name
        self.kubeconfig = kubeconfig
        self.home = home
        doc = json.loads(Path(kubeconfig).read_text())
        cluster, user = doc["clusters"][0]["cluster"], doc["users"][0]["user"]
        self.url = cluster["server"]
        u = urlsplit(self.url)
        self.host, self.port = u.hostname, u.port
        self.ctx = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        keys = Path(tempfile.mkdtemp(prefix="parity-keys-", dir=home))
        (keys / "c").write_bytes(base64.b64decode(user["client-certificate-data"]))
        (keys / "k").write_bytes(base64.b64decode(user["client-key-data"]))
        self.ctx.load_cert_chain(str(keys / "c"), str(keys / "k"))
        self.env = {**os.environ, "KUBECONFIG": kubeconfig, "HOME": str(home)}

    def _conn(self, timeout: float) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)

    def request(self, method: str, path: str, body: Any = None, *, ctype: str = "application/json",
                accept: str = "application/json", headers: dict | None = None, timeout: float = 60) -> Reply:
        h = {"Accept": accept, "User-Agent": "parity-probe/1.0"}
        if body is not None:
            if not isinstance(body, (bytes, str)):
                body = json.dumps(body)
            h["Content-Type"] = ctype
        h.update(headers or {})
        c = self._conn(timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            c.close()

    def get(self, path: str, **kw: Any) -> Any:
        r = self.request("GET", path, **kw)
        assert r.status == 200, (self.name, path, r)
        return r.body

    def watch(self, path: str, *, until: Callable[[list[dict]], bool] | None = None, timeout: float = 30,
              accept: str = "application/json", started: threading.Event | None = None) -> tuple[int, list[dict]]:
        """The events of a watch, read until the server ends it, ``until(events)`` holds or ``timeout`` (wall
        seconds, generous) passes. A refused watch answers (status, [Status])."""
        c = self._conn(timeout)
        try:
            c.request("GET", path, headers={"Accept": accept, "User-Agent": "parity-probe/1.0"})
            r = c.getresponse()
            if started is not None:
                started.set()
            if r.status != 200:
                return r.status, [json.loads(r.read())]
            events: list[dict] = []
            try:
                while True:
                    line = r.readline()
                    if not line:
                        break
                    if line.strip():
                        events.append(json.loads(line))
                    if until is not None and until(events):
                        break
            except (TimeoutError, OSError):
                pass
            return r.status, events
        finally:
            c.close()

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([kubectl_binary(), *args], env=self.env, cwd=self.home, input=stdin,
                              capture_output=True, text=True, timeout=timeout)

    def ok(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        p = self.kubectl(*args, stdin=stdin, timeout=timeout)
        assert p.returncode == 0, f"[{self.name}] kubectl {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
        return p.stdout

    def create(self, path: str, obj: dict) -> dict:
        r = self.request("POST", path, obj)
        assert r.status == 201, (self.name, path, r)
        return r.body


class Pair:
    """The real server and the sandbox; ``each`` runs a probe on both and returns (real, sandbox)."""

    def __init__(self, real: Server, sandbox: Server):
        self.real = real
        self.sandbox = sandbox

    def __iter__(self):
        return iter((self.real, self.sandbox))

    def each(self, fn: Callable[[Server], Any]) -> tuple[Any, Any]:
        return fn(self.real), fn(self.sandbox)

    def request(self, *a: Any, **kw: Any) -> tuple[Reply, Reply]:
        return self.each(lambda s: s.request(*a, **kw))

    def kubectl(self, *args: str, stdin: str | None = None) -> tuple[subprocess.CompletedProcess, ...]:
        return self.each(lambda s: s.kubectl(*args, stdin=stdin))

    def ok(self, *args: str, stdin: str | None = None) -> tuple[str, str]:
        return self.each(lambda s: s.ok(*args, stdin=stdin))

    def namespace(self, name: str) -> str:
        for s in self:
            s.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        return name


# --- normalising what legitimately differs ------------------------------------------------------------------

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")
AGE = re.compile(r"(?<![\w.:/-])(?:\d+[smhdy]){1,2}(?![\w.:/-])")
TIME_KEYS = frozenset({"creationTimestamp", "deletionTimestamp", "time", "lastTransitionTime", "lastUpdateTime",
                       "lastHeartbeatTime", "lastProbeTime", "startTime", "startedAt", "finishedAt", "completionTime",
                       "eventTime", "firstTimestamp", "lastTimestamp", "renewTime", "acquireTime"})


def norm(v: Any, names: dict[str, str] | None = None) -> Any:
    """A JSON value with uids, timestamps, resourceVersions, IPs (and the given generated names) replaced."""
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if k == "uid" and isinstance(x, str):
                out[k] = "<uid>"
            elif k == "resourceVersion" and isinstance(x, str) and x:
                out[k] = "<rv>"
            elif k in TIME_KEYS and x is not None:
                out[k] = "<time>"
            else:
                out[norm(k, names) if isinstance(k, str) else k] = norm(x, names)
        return out
    if isinstance(v, list):
        return [norm(x, names) for x in v]
    if isinstance(v, str):
        return norm_text(v, names)
    return v


def norm_text(s: str, names: dict[str, str] | None = None) -> str:
    for real, stable in sorted((names or {}).items(), key=lambda kv: -len(kv[0])):
        s = s.replace(real, stable)
    s = UUID.sub("<uid>", s)
    s = TIME.sub("<time>", s)
    s = IPV4.sub("<ip>", s)
    return AGE.sub("<age>", s)


def table_lines(text: str, names: dict[str, str] | None = None) -> list[list[str]]:
    """kubectl's table output as rows of cells (column widths follow the contents, so they are not compared)."""
    return [re.split(r"\s{2,}", line.strip()) for line in norm_text(text, names).splitlines() if line.strip()]


def status_body(r: Reply) -> dict:
    """An error's Status as a client reads it: code, reason, message, details (causes in any order for custom
    resources, whose schema errors kube-apiserver lists in the order it walks a Go map)."""
    assert isinstance(r.body, dict), r
    b = norm(r.body)
    causes = (b.get("details") or {}).get("causes")
    if causes:
        b["details"]["causes"] = sorted(causes, key=lambda c: json.dumps(c, sort_keys=True))
        # the message lists the causes too: in the order they came, which for a custom resource is random
        parts = sorted(f"{c.get('field')}: {c.get('message')}" if c.get("field") else c.get("message", "")
                       for c in causes)
        head, _, tail = b.get("message", "").partition(" is invalid: ")
        listed = tail[1:-1] if tail.startswith("[") and tail.endswith("]") else tail
        if len(parts) > 1 and sorted(listed.split(", ")) == sorted(", ".join(parts).split(", ")):
            b["message"] = f"{head} is invalid: [{', '.join(parts)}]"
    return b


def generated(name: str) -> str:
    """A generated name without its random suffix (``web-5d8f7c9b4-x2k4p`` -> ``web-*-*``)."""
    return re.sub(r"-[a-z0-9]{5}$", "-*", re.sub(r"-[a-z0-9]{8,10}(?=-|$)", "-*", name))


# --- the two servers ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("parity-cluster"))
    try:
        cluster.install_crds()
        yield Server("real", cluster.kubeconfig, cluster.dir)
    finally:
        cluster.down()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    from sandbox.harness import RunningSandbox

    # --watch-history: the events a watch can resume from, per kind; older resourceVersions answer 410 Gone
    box = RunningSandbox(tmp_path_factory.mktemp("parity-sandbox"), ["--no-karpenter", "--watch-history", "60"])
    try:
        yield Server("sandbox", str(box.kubeconfig), box.tmp)
    finally:
        code = box.stop()
        assert code == 0, box.log("stderr")
        assert "Traceback" not in box.log("stderr"), box.log("stderr")


@pytest.fixture(scope="module")
def both(real, sandbox):
    pair = Pair(real, sandbox)
    for s in pair:
        s.create("/api/v1/nodes", NODE_MANIFEST)
    for s in pair:
        wait_for(lambda: any(c["type"] == "Ready" and c["status"] == "True" for c in
                             (s.get(f"/api/v1/nodes/{NODE}").get("status") or {}).get("conditions") or ()),
                 what=f"{NODE} Ready on the {s.name} server")
    return pair


# --- errors: status codes, reasons, messages and details ----------------------------------------------------

def _configmap(name: str, **extra: Any) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}, **extra}


def _deployment(name: str, replicas: int = 1, **spec: Any) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"terminationGracePeriodSeconds": 0,
                                           "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}},
                     **spec}}


def _nodepool(name: str, **spec: Any) -> dict:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {"spec": {"requirements": [{"key": "kubernetes.io/arch", "operator": "In",
                                                             "values": ["amd64"]}],
                                           "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass",
                                                            "name": name}}},
                     **spec}}


def _error_probes(ns: str) -> list[tuple[str, str, str, Any, str]]:
    cms, deps, nps = f"/api/v1/namespaces/{ns}/configmaps", f"/apis/apps/v1/namespaces/{ns}/deployments", \
        "/apis/karpenter.sh/v1/nodepools"
    merge, sel = "application/merge-patch+json", quote
    bad_np = _nodepool(f"{ns}-bad", weight=0, disruption={"consolidateAfter": "bogus"})
    bad_np["spec"]["template"]["spec"]["requirements"][0]["operator"] = "Sometimes"
    cel_np = _nodepool(f"{ns}-bad")
    cel_np["spec"]["template"]["spec"]["requirements"] = [{"key": "karpenter.sh/nodepool", "operator": "In",
                                                           "values": ["x"]}]
    cel_np["spec"]["template"]["metadata"] = {"labels": {"karpenter.sh/nodepool": "x"}}
    list_np = _nodepool(f"{ns}-bad")
    list_np["spec"]["template"]["spec"]["requirements"] = [{"key": "kubernetes.io/arch", "operator": "In",
                                                            "values": []}]
    static_np = _nodepool(f"{ns}-bad", replicas=2, weight=5)
    bad_dep = _deployment("parity-bad", replicas=-1)
    bad_dep["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    bad_dep["spec"]["template"]["spec"]["containers"][0]["image"] = ""
    return [
        ("get a missing ConfigMap", "GET", f"{cms}/missing", None, ""),
        ("delete a missing ConfigMap", "DELETE", f"{cms}/missing", None, ""),
        ("get a missing Deployment", "GET", f"{deps}/missing", None, ""),
        ("delete a missing Deployment", "DELETE", f"{deps}/missing", None, ""),
        ("get a missing NodePool", "GET", f"{nps}/missing", None, ""),
        ("delete a missing NodePool", "DELETE", f"{nps}/missing", None, ""),
        ("patch a missing NodePool", "PATCH", f"{nps}/missing", {"metadata": {"labels": {"a": "b"}}}, merge),
        ("create a ConfigMap that exists", "POST", cms, _configmap("exists"), ""),
        ("create a Deployment that exists", "POST", deps, _deployment("exists"), ""),
        ("create a NodePool that exists", "POST", nps, _nodepool(f"{ns}-exists"), ""),
        ("update with a stale resourceVersion", "PUT", f"{cms}/exists",
         {**_configmap("exists"), "metadata": {"name": "exists", "resourceVersion": "1"}}, ""),
        ("patch with a stale resourceVersion", "PATCH", f"{cms}/exists", {"metadata": {"resourceVersion": "1"}}, merge),
        ("update a NodePool with a stale resourceVersion", "PUT", f"{nps}/{ns}-exists",
         {**_nodepool(f"{ns}-exists"), "metadata": {"name": f"{ns}-exists", "resourceVersion": "1"}}, ""),
        ("an invalid Deployment", "POST", deps, bad_dep, ""),
        ("a NodePool the schema refuses (CEL then unchecked)", "POST", nps, bad_np, ""),
        ("a NodePool that breaks CEL rules", "POST", nps, cel_np, ""),
        ("a NodePool with a list rule broken", "POST", nps, list_np, ""),
        ("a static NodePool with a weight", "POST", nps, static_np, ""),
        ("an invalid ConfigMap name", "POST", cms, _configmap("Not_A_Name"), ""),
        ("a field selector on a field pods cannot select", "GET", f"/api/v1/namespaces/{ns}/pods?fieldSelector="
         + sel("spec.foo=bar"), None, ""),
        ("a field selector without an operator", "GET", "/api/v1/pods?fieldSelector=spec.nodeName", None, ""),
        ("a field selector on a custom resource", "GET", f"{nps}?fieldSelector=" + sel("spec.weight=1"), None, ""),
        ("an unclosed label selector", "GET", f"{cms}?labelSelector=" + sel("a in (b"), None, ""),
        ("a label selector with two operators", "GET", f"{cms}?labelSelector=" + sel("a=b=c"), None, ""),
        ("a label selector with a bad key", "GET", f"{cms}?labelSelector=" + sel("-a=b"), None, ""),
        ("a label selector with a bad value", "GET", f"{cms}?labelSelector=" + sel("a=$"), None, ""),
        ("a label selector comparing a word", "GET", f"{cms}?labelSelector=" + sel("a>b"), None, ""),
        ("a label selector on a watch", "GET", f"{cms}?watch=true&timeoutSeconds=3&labelSelector=" + sel("a in b"),
         None, ""),
        ("an unknown core resource", "GET", "/api/v1/foos", None, ""),
        ("an unknown apps resource", "GET", "/apis/apps/v1/foos", None, ""),
        ("an unknown version of a built-in group", "GET", "/apis/apps/v9/deployments", None, ""),
        ("an unknown group", "GET", "/apis/no.such.group/v1/foos", None, ""),
        ("an unserved version of a custom resource", "GET", "/apis/karpenter.sh/v9/nodepools", None, ""),
        ("an unknown subresource", "GET", f"{deps}/exists/bogus", None, ""),
        ("a namespaced path for nodes", "GET", f"/api/v1/namespaces/{ns}/nodes", None, ""),
        ("outside /api and /apis", "GET", "/no-such-path", None, ""),
        ("POST to an object", "POST", f"{cms}/exists", _configmap("exists"), ""),
        ("PUT to a collection", "PUT", cms, _configmap("exists"), ""),
        ("a patch of an unsupported type", "PATCH", f"{cms}/exists", {"data": {"a": "b"}}, "application/xml"),
        ("a strategic merge patch of a custom resource", "PATCH", f"{nps}/{ns}-exists",
         {"metadata": {"labels": {"a": "b"}}}, "application/strategic-merge-patch+json"),
        ("a patch of a custom resource of an unsupported type", "PATCH", f"{nps}/{ns}-exists", {}, "text/plain"),
        ("a JSON patch whose test fails", "PATCH", f"{cms}/exists",
         [{"op": "test", "path": "/data/k", "value": "other"}], "application/json-patch+json"),
        ("a JSON patch removing what is not there", "PATCH", f"{cms}/exists",
         [{"op": "remove", "path": "/metadata/labels/nope"}], "application/json-patch+json"),
        ("a patch that is not JSON", "PATCH", f"{cms}/exists", "not json", merge),
        ("a create in a missing namespace", "POST", "/api/v1/namespaces/no-such-namespace/configmaps",
         _configmap("x"), ""),
        ("a create naming another namespace", "POST", cms,
         {**_configmap("x"), "metadata": {"name": "x", "namespace": "elsewhere"}}, ""),
        ("an update naming another object", "PUT", f"{cms}/exists", _configmap("other"), ""),
        ("a list with a malformed resourceVersion", "GET", f"{cms}?resourceVersion=abc", None, ""),
        ("resourceVersionMatch without a resourceVersion", "GET", f"{cms}?resourceVersionMatch=NotOlderThan", None,
         ""),
        ("an unknown resourceVersionMatch", "GET", f"{cms}?resourceVersion=1&resourceVersionMatch=Bogus", None, ""),
        ("sendInitialEvents (WatchList is off in v1.33)", "GET",
         f"{cms}?watch=true&timeoutSeconds=3&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
         "&allowWatchBookmarks=true",
         None, ""),
        ("a kind that does not match the resource", "POST", cms,
         {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}, ""),
    ]


def _error_view(r: Reply) -> Any:
    if not isinstance(r.body, dict):
        return r.status, r.headers.get("content-type", "").split(";")[0], r.body
    b = status_body(r)
    if b.get("message", "").startswith("error decoding patch: "):
        b["message"] = "error decoding patch: <the decoder's message>"  # Go's JSON decoder words it its own way
    return r.status, b


def test_errors(both):
    ns = both.namespace("p-errors")
    for s in both:
        s.create(f"/api/v1/namespaces/{ns}/configmaps", _configmap("exists"))
        s.create(f"/apis/apps/v1/namespaces/{ns}/deployments", _deployment("exists", replicas=0))
        s.create("/apis/karpenter.sh/v1/nodepools", _nodepool(f"{ns}-exists"))
    diffs = []
    for label, method, path, body, ctype in _error_probes(ns):
        kw = {"ctype": ctype} if ctype else {}
        r, b = both.request(method, path, body, **kw)
        if _error_view(r) != _error_view(b):
            diffs.append((label, _error_view(r), _error_view(b)))
    assert not diffs, "\n\n".join(f"{label}:\n  real:    {r}\n  sandbox: {b}" for label, r, b in diffs)
