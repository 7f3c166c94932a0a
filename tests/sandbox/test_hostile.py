"""karpy sandbox against a hostile or careless client: each attack of issue 24 replayed against a running sandbox
(HTTPS on 127.0.0.1, with a token), with the bound it must keep -- the sandbox's memory (RSS) and a /readyz
asked for on a fresh connection all along, answered within about a second.

The sandbox runs with short deadlines (``--read-timeout 3 --write-timeout 3``) so that the tests wait seconds,
not kube-apiserver's minutes, and with room for two writes in flight."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from .harness import RunningSandbox, wait_for

TOKEN = "hostile-test-token"
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    (tmp / "token").write_text(TOKEN)
    b = RunningSandbox(tmp, ["--no-karpenter", "--speed", "1", "--token-file", str(tmp / "token"),
                             "--read-timeout", "3", "--write-timeout", "3", "--max-mutating-requests-inflight", "2"])
    yield b
    assert b.stop() == 0, b.log("stderr")
    assert "Traceback" not in b.log("stderr"), b.log("stderr")


def rss(b: RunningSandbox) -> int:
    for line in Path(f"/proc/{b.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def call(b: RunningSandbox, method: str, path: str, body=None, ctype: str = "application/json",
         token: str | None = TOKEN, timeout: float = 20) -> tuple[int, dict, dict]:
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    headers = {"Content-Type": ctype, "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(b.url + path, data=data, method=method, headers=headers)
    try:
        with b.urlopen(req, timeout=timeout) as r:
            raw, code, hdrs = r.read(), r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        raw, code, hdrs = e.read(), e.code, dict(e.headers)
    try:
        out = json.loads(raw.split(b"\n")[0]) if raw else {}
    except ValueError:
        out = {"text": raw.decode(errors="replace")}
    return code, out, hdrs


class Readyz:
    """/readyz on a fresh connection every 0.2 s in the background; the slowest answer is what counts."""

    def __init__(self, b: RunningSandbox):
        self.b = b
        self.worst = 0.0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            try:
                with self.b.urlopen(self.b.url + "/readyz", timeout=5) as r:
                    if r.status != 200:
                        self.failures.append(str(r.status))
            except OSError as e:
                self.failures.append(repr(e))
            self.worst = max(self.worst, time.monotonic() - t)
            self._stop.wait(0.2)

    def __enter__(self) -> "Readyz":
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join(10)
        assert not self.failures, self.failures
        assert self.worst < 1.5, f"/readyz took {self.worst:.2f} s during the attack"


def raw_conn(b: RunningSandbox, tls: bool = True, rcvbuf: int | None = None) -> socket.socket:
    host, port = urllib.parse.urlsplit(b.url).hostname, urllib.parse.urlsplit(b.url).port
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # before connecting: the window stays small
    s.settimeout(10)
    s.connect((host, port))
    if tls:
        s = b.ssl_context.wrap_socket(s, server_hostname=host)
    return s


def read_answer(s: socket.socket, timeout: float = 10) -> bytes:
    s.settimeout(timeout)
    out = b""
    while b"\r\n\r\n" not in out:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    return out


def closed_by_server(s: socket.socket, within: float) -> bool:
    s.settimeout(within)
    try:
        while True:
            if not s.recv(65536):
                return True
    except (TimeoutError, socket.timeout):
        return False
    except (OSError, ssl.SSLError):
        return True


# --- 1. connections that say nothing ------------------------------------------------------------------------------
def test_idle_and_slow_connections_stall_nobody_and_are_dropped(box):
    with Readyz(box):
        idle = [raw_conn(box, tls=False) for _ in range(20)]  # TCP only: no TLS handshake ever starts
        slow = raw_conn(box)  # TLS, then headers one byte at a time
        slow.sendall(b"GET /api HTTP/1.1\r\n")
        for _ in range(3):
            slow.sendall(b"X")
            time.sleep(0.5)
        assert call(box, "GET", "/api/v1/namespaces/default")[0] == 200
        # the handshake deadline is 10 s; the headers' 3 s here
        assert closed_by_server(slow, within=6)
        assert all(closed_by_server(s, within=15) for s in idle)
    for s in idle + [slow]:
        s.close()


# --- 2. authentication before the body, bodies capped ------------------------------------------------------------
def test_unauthenticated_upload_is_refused_from_its_headers(box):
    before = rss(box)
    with Readyz(box):
        s = raw_conn(box)
        s.sendall(b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 209715200\r\n\r\n" + b"x" * 65536)
        head = read_answer(s)
        assert head.startswith(b"HTTP/1.1 401"), head[:200]
        s.close()
        # the scheme is read in any case, as kube-apiserver reads it
        code, _, _ = call(box, "GET", "/api/v1/namespaces", token=None)
        assert code == 401
        req = urllib.request.Request(box.url + "/api/v1/namespaces", headers={"Authorization": f"bearer {TOKEN}"})
        with box.urlopen(req) as r:
            assert r.status == 200
    assert rss(box) - before < 20 * MiB


def test_bodies_past_3_mib_are_a_413_without_being_read(box):
    before = rss(box)
    s = raw_conn(box)
    s.sendall(b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
              TOKEN.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: 52428800\r\n\r\n")
    head = read_answer(s)
    assert head.startswith(b"HTTP/1.1 413"), head[:200]
    assert b"Request entity too large: limit is 3145728" in head + s.recv(4096)
    s.close()
    # a chunked upload that never ends: cut at the cap
    s = raw_conn(box)
    s.sendall(b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
              TOKEN.encode() + b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n%s\r\n" % (256 * 1024, b"y" * 256 * 1024)
    try:
        for _ in range(40):  # 10 MiB offered
            s.sendall(chunk)
    except OSError:
        pass  # the server stopped reading at the cap
    assert read_answer(s).startswith(b"HTTP/1.1 413")
    s.close()
    # an object within the body cap but past what a ConfigMap holds
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "too-big"}, "data": {"a": "z" * (2 * MiB)}}
    code, out, _ = call(box, "POST", "/api/v1/namespaces/default/configmaps", cm)
    assert (code, out["reason"]) == (422, "Invalid") and "Too long" in out["message"]
    assert call(box, "GET", "/api/v1/namespaces/default/configmaps/too-big")[0] == 404
    assert rss(box) - before < 60 * MiB


def test_writes_past_max_in_flight_are_a_429(box):
    held = []
    for _ in range(2):  # two writes whose bodies never come: in flight until their deadline
        s = raw_conn(box)
        s.sendall(b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                  TOKEN.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
        held.append(s)
    time.sleep(0.3)
    code, out, headers = call(box, "POST", "/api/v1/namespaces/default/configmaps",
                              {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "third"}})
    assert (code, headers.get("Retry-After")) == (429, "1"), out
    assert "Too many requests, please try again later." in out.get("text", "")
    assert call(box, "GET", "/api/v1/namespaces/default/configmaps")[0] == 200  # reads have their own share
    for s in held:
        s.close()
    wait_for(lambda: call(box, "POST", "/api/v1/namespaces/default/configmaps",
                          {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "third"}})[0] == 201,
             10, 0.2, "the writes in flight to end")


# --- 3. patches ------------------------------------------------------------------------------------------------------
def test_a_small_json_patch_cannot_grow_an_object(box):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "patched"}, "data": {"a": "x" * 1000}}
    assert call(box, "POST", "/api/v1/namespaces/default/configmaps", cm)[0] == 201
    before = rss(box)
    doubling = [{"op": "copy", "from": "/data", "path": f"/data/d{i}"} for i in range(36)]  # 2^36 KB asked
    assert len(json.dumps(doubling)) < 2048
    with Readyz(box):
        code, out, _ = call(box, "PATCH", "/api/v1/namespaces/default/configmaps/patched", doubling,
                            ctype="application/json-patch+json")
        assert (code, out["reason"]) == (422, "Invalid"), out
        many = [{"op": "remove", "path": "/data/zz"}] * 10001
        code, out, _ = call(box, "PATCH", "/api/v1/namespaces/default/configmaps/patched", many,
                            ctype="application/json-patch+json")
        assert (code, out["message"]) == (413, "Request entity too large: The allowed maximum operations in a JSON "
                                               "patch is 10000, got 10001")
    assert rss(box) - before < 50 * MiB
    _, out, _ = call(box, "GET", "/api/v1/namespaces/default/configmaps/patched")
    assert list(out["data"]) == ["a"]


# --- 4. YAML ---------------------------------------------------------------------------------------------------------
BOMB = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: laughs}\n" + "".join(
    f"{c}: &{c} [" + ",".join([f"*{p}"] * 9 if p else ['"lol"'] * 9) + "]\n"
    for p, c in zip([None, *"abcdefgh"], "abcdefghi"))


def test_a_yaml_alias_bomb_is_refused_at_once(box):
    assert len(BOMB) < 1000
    before = rss(box)
    with Readyz(box):
        t = time.monotonic()
        code, out, _ = call(box, "PATCH", "/api/v1/namespaces/default/configmaps/laughs?fieldManager=x", BOMB.encode(),
                            ctype="application/apply-patch+yaml")
        assert time.monotonic() - t < 2
        assert (code, out["reason"]) == (400, "BadRequest") and "error decoding YAML" in out["message"], out
        deep = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep}\ndata: " + "[" * 100000
        code, out, _ = call(box, "PATCH", "/api/v1/namespaces/default/configmaps/deep?fieldManager=x", deep.encode(),
                            ctype="application/apply-patch+yaml")
        assert code == 400 and "max depth" in out["message"], out
    assert rss(box) - before < 30 * MiB


# --- 5. replicas ------------------------------------------------------------------------------------------------------
def _deployment(name: str, replicas: int) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "i"}]}}}}


def test_scale_is_held_to_int32_and_to_the_sandbox_pod_cap(box):
    assert call(box, "POST", "/apis/apps/v1/namespaces/default/deployments", _deployment("scaled", 0))[0] == 201
    path = "/apis/apps/v1/namespaces/default/deployments/scaled/scale"
    with Readyz(box):
        for n in (2**31, 10**12):
            code, out, _ = call(box, "PATCH", path, {"spec": {"replicas": n}}, ctype="application/merge-patch+json")
            assert code == 400 and "of type int32" in out["message"], out
        code, out, _ = call(box, "PATCH", path, {"spec": {"replicas": 600000}}, ctype="application/merge-patch+json")
        assert code == 422 and out["details"]["causes"][0]["field"] == "spec.replicas", out
        # a few thousand pods come in bursts: requests are served in between
        assert call(box, "PATCH", path, {"spec": {"replicas": 2000}}, ctype="application/merge-patch+json")[0] == 200
        t = time.monotonic()
        assert call(box, "GET", "/api/v1/namespaces/default/configmaps")[0] == 200
        assert time.monotonic() - t < 3
        wait_for(lambda: len(call(box, "GET", "/api/v1/namespaces/default/pods?labelSelector=app%3Dscaled")[1]
                             .get("items", ())) == 2000, 120, 1.0, "2000 pods")
    assert call(box, "PATCH", path, {"spec": {"replicas": 0}}, ctype="application/merge-patch+json")[0] == 200


# --- 6. nesting --------------------------------------------------------------------------------------------------------
def test_an_object_nested_300_deep_is_refused_and_everything_stays_readable(box):
    spec: dict = {}
    cur = spec
    for _ in range(300):
        cur["a"] = {}
        cur = cur["a"]
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "deep"}, "spec": spec}
    code, out, _ = call(box, "POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases", _dumps_deep(lease))
    assert code == 400 and "deeper than" in out["message"], out
    assert call(box, "GET", "/apis/coordination.k8s.io/v1/leases")[0] == 200


def _dumps_deep(obj) -> bytes:
    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 5000))
    try:
        return json.dumps(obj).encode()
    finally:
        sys.setrecursionlimit(limit)


# --- 7. selectors -------------------------------------------------------------------------------------------------------
def test_long_selectors_are_answered_at_once(box):
    with Readyz(box):
        for q in ("fieldSelector=metadata.name%3Da" + "%20" * 20000 + "b", "fieldSelector=" + "%20" * 20000,
                  "labelSelector=a" + "%20" * 20000 + "%3Db", "fieldSelector=x%3D" + "%5C%2C" * 10000):
            t = time.monotonic()
            code, _, _ = call(box, "GET", "/api/v1/pods?" + q)
            assert code in (200, 400) and time.monotonic() - t < 1.5


# --- 8. watchers that stop reading -------------------------------------------------------------------------------------
def test_watchers_that_stop_reading_are_closed_and_memory_is_bounded(box):
    before = rss(box)
    watchers = []
    for _ in range(10):
        s = raw_conn(box, rcvbuf=4096)
        s.sendall(b"GET /api/v1/namespaces/default/configmaps?watch=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                  TOKEN.encode() + b"\r\n\r\n")
        watchers.append(s)  # and never read
    with Readyz(box):
        for i in range(40):  # 40 MiB of writes
            cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "churn"}, "data": {"a": str(i % 10) * (MiB - 100)}}
            method, path = ("POST", "/api/v1/namespaces/default/configmaps") if i == 0 else \
                ("PUT", "/api/v1/namespaces/default/configmaps/churn")
            assert call(box, method, path, cm)[0] in (200, 201)
    peak = rss(box) - before
    assert peak < 250 * MiB, f"grew {peak / MiB:.0f} MiB"
    time.sleep(4)  # past the write deadline: every watcher that stopped reading is gone
    assert all(closed_by_server(s, within=10) for s in watchers)
    for s in watchers:
        s.close()
    assert call(box, "DELETE", "/api/v1/namespaces/default/configmaps/churn")[0] == 200
    # a watch that reads still works
    with box.urlopen(urllib.request.Request(box.url + "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1",
                                            headers={"Authorization": f"Bearer {TOKEN}"})) as r:
        assert r.status == 200


# --- 9. dry runs -----------------------------------------------------------------------------------------------------------
def test_dry_run_other_than_all_is_refused_and_writes_nothing(box):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dry"}}
    code, out, _ = call(box, "POST", "/api/v1/namespaces/default/configmaps?dryRun=true", cm)
    assert (code, out["message"]) == (422, 'CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: '
                                           '[]string{"true"}: supported values: "All"')
    assert call(box, "GET", "/api/v1/namespaces/default/configmaps/dry")[0] == 404
    assert call(box, "POST", "/api/v1/namespaces/default/configmaps?dryRun=All", cm)[0] == 201
    assert call(box, "GET", "/api/v1/namespaces/default/configmaps/dry")[0] == 404
    assert call(box, "POST", "/api/v1/namespaces/default/configmaps", cm)[0] == 201
    code, out, _ = call(box, "DELETE", "/api/v1/namespaces/default/configmaps/dry",
                        {"apiVersion": "v1", "kind": "DeleteOptions", "dryRun": ["yes"]})
    assert code == 422 and out["message"].startswith('DeleteOptions.meta.k8s.io "" is invalid: dryRun'), out
    assert call(box, "GET", "/api/v1/namespaces/default/configmaps/dry")[0] == 200


# --- 10. names -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path,kind,api_version,name,code", [
    ("/api/v1/namespaces/default/events", "Event", "v1", "../a/b", 400),
    ("/api/v1/namespaces/default/events", "Event", "v1", "..", 400),
    ("/api/v1/namespaces/default/configmaps", "ConfigMap", "v1", "x" * 1_000_000, 422),
    ("/api/v1/namespaces/default/configmaps", "ConfigMap", "v1", "a\nb", 422),
    ("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "CustomResourceDefinition",
     "apiextensions.k8s.io/v1", "a/b", 422),
])
def test_names_that_could_not_be_addressed_are_refused(box, path, kind, api_version, name, code):
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name},
           "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"}}
    got, out, _ = call(box, "POST", path, obj)
    assert got == code, out
    assert call(box, "GET", path)[0] == 200


def test_unknown_fields_of_built_in_kinds_are_dropped(box):
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "pruned"},
             "spec": {"holderIdentity": "me", "bogus": "x" * 1000}, "junk": {"a": 1}}
    code, out, headers = call(box, "POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases", lease)
    assert code == 201 and "junk" not in out and "bogus" not in out["spec"], out
    assert "unknown field" in headers.get("Warning", "")
    code, out, _ = call(box, "POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases?fieldValidation=Strict",
                        dict(lease, metadata={"name": "strict"}))
    assert code == 400 and "strict decoding error" in out["message"]
