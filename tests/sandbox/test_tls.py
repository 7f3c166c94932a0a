"""HTTPS on loopback by default: a CA made at each start, written into the kubeconfig, that kubectl, the
official Python client and karpy's own client verify; keys in a private directory removed at exit; a
client that connects and never finishes the TLS handshake holds up nobody else; ``--plain-http``."""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import stat
import urllib.error
import urllib.request

import pytest

from karpy.kube.client import KubeClient, load_config

from .harness import RunningSandbox, kubectl_binary, kubeconfig_cluster, wait_for


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    """A sandbox whose temporary files go to a directory of the test's own (TMPDIR), with a handshake
    deadline far longer than any test here: an idle connection it is given stays open throughout."""
    tmp = tmp_path_factory.mktemp("tls")
    (tmp / "tmpdir").mkdir()
    b = RunningSandbox(tmp, ["--no-karpenter", "--speed", "100", "--handshake-timeout", "600"],
                       env={"TMPDIR": str(tmp / "tmpdir")})
    yield b
    assert b.stop() == 0, b.log("stderr")
    assert "Traceback" not in b.log("stderr"), b.log("stderr")


def _host_port(url: str) -> tuple[str, int]:
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    return host.strip("[]"), int(port)


def _namespaces_kubectl(b: RunningSandbox, *extra: str) -> set[str]:
    out = b.kubectl("get", "namespaces", "-o", "json", *extra, "--request-timeout=30s").stdout
    return {n["metadata"]["name"] for n in json.loads(out)["items"]}


def _namespaces_python(kubeconfig) -> set[str]:
    kubernetes = pytest.importorskip("kubernetes")
    api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(kubeconfig)))
    return {n.metadata.name for n in api.list_namespace(_request_timeout=30).items}


def _namespaces_karpy(kubeconfig) -> set[str]:
    config, _ = load_config(str(kubeconfig))
    api = KubeClient(config)
    try:
        return {n["metadata"]["name"] for n in api.list("Namespace")[0]}
    finally:
        api.close()


def test_the_kubeconfig_carries_the_ca_the_server_proves_itself_with(box):
    cluster = kubeconfig_cluster(box.kubeconfig)
    assert cluster["server"].startswith("https://127.0.0.1:")
    assert "insecure-skip-tls-verify" not in cluster
    ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
    assert ca.startswith("-----BEGIN CERTIFICATE-----")
    host, port = _host_port(box.url)
    ctx = ssl.create_default_context(cadata=ca)
    with socket.create_connection((host, port), timeout=10) as raw, ctx.wrap_socket(raw, server_hostname=host) as s:
        sans = {v for _, v in s.getpeercert()["subjectAltName"]}
    assert {"127.0.0.1", "localhost"} <= sans and any(v.rstrip("\n") in ("::1", "0:0:0:0:0:0:0:1") for v in sans)
    # a client that does not hold the CA does not trust the server
    with pytest.raises(urllib.error.URLError) as e:
        urllib.request.urlopen(box.url + "/readyz", timeout=10, context=ssl.create_default_context())
    assert isinstance(e.value.reason, ssl.SSLCertVerificationError)


def test_kubectl_the_python_client_and_karpy_verify_it_through_the_kubeconfig(box, tmp_path):
    want = {"default", "kube-system", "kube-public", "kube-node-lease"}
    if kubectl_binary() is not None:
        assert want <= _namespaces_kubectl(box)
    assert want <= _namespaces_python(box.kubeconfig)
    assert want <= _namespaces_karpy(box.kubeconfig)
    # the certificate names localhost too: the kubeconfig still verifies with the server written so
    local = tmp_path / "localhost.kubeconfig"
    local.write_text(box.kubeconfig.read_text().replace("https://127.0.0.1:", "https://localhost:"))
    assert want <= _namespaces_karpy(local)
    assert want <= _namespaces_python(local)


def test_the_keys_stay_in_a_private_directory_removed_at_exit(tmp_path):
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    b = RunningSandbox(tmp_path, ["--no-karpenter"], env={"TMPDIR": str(tmpdir)})
    try:
        (keys,) = [p for p in tmpdir.iterdir() if p.name.startswith("karpy-sandbox-tls-")]
        assert stat.S_IMODE(keys.stat().st_mode) == 0o700
        files = list(keys.iterdir())
        assert any(p.name.endswith(".key") for p in files)
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files)
        assert stat.S_IMODE(os.stat(b.kubeconfig).st_mode) == 0o600  # it holds the client key
        key = next(p for p in files if p.name.endswith(".key")).read_bytes()
        assert b"PRIVATE KEY" in key
        assert base64.b64encode(key).decode() not in b.kubeconfig.read_text()  # the serving key stays out of it
    finally:
        assert b.stop() == 0, b.log("stderr")
    assert not any(p.name.startswith("karpy-sandbox-tls-") for p in tmpdir.iterdir())


def test_an_idle_connection_holds_up_nobody_else(box):
    """A client that opens a TCP connection and sends nothing (or half a TLS hello) while others work."""
    host, port = _host_port(box.url)
    idle = socket.create_connection((host, port), timeout=10)
    half = socket.create_connection((host, port), timeout=10)
    half.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # the first bytes of a ClientHello
    try:
        with box.urlopen("/readyz", timeout=30) as r:
            assert r.status == 200 and r.read() == b"ok"
        if kubectl_binary() is not None:
            assert "kube-system" in _namespaces_kubectl(box)
        assert "kube-system" in _namespaces_python(box.kubeconfig)
        assert "kube-system" in _namespaces_karpy(box.kubeconfig)
        # and the idle connections were still open all along: nothing was served by waiting them out
        for s in (idle, half):
            s.setblocking(False)
            with pytest.raises(BlockingIOError):
                s.recv(1)
    finally:
        idle.close()
        half.close()


def test_a_handshake_that_never_finishes_is_dropped_and_the_ca_is_new_at_each_start(box, tmp_path):
    b = RunningSandbox(tmp_path, ["--no-karpenter", "--handshake-timeout", "1"])
    try:
        assert kubeconfig_cluster(b.kubeconfig)["certificate-authority-data"] != \
            kubeconfig_cluster(box.kubeconfig)["certificate-authority-data"]
        host, port = _host_port(b.url)
        idle = socket.create_connection((host, port), timeout=60)
        plain = socket.create_connection((host, port), timeout=60)
        plain.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")  # plain HTTP on the HTTPS port
        try:
            assert idle.recv(1) == b""  # closed by the server once the deadline passed
            assert b"200" not in plain.recv(4096)  # no answer but the end of the connection or a TLS alert
        finally:
            idle.close()
            plain.close()
        with b.urlopen("/readyz") as r:
            assert r.status == 200
    finally:
        assert b.stop() == 0, b.log("stderr")
    assert "Traceback" not in b.log("stderr"), b.log("stderr")


def test_plain_http_on_loopback(tmp_path):
    b = RunningSandbox(tmp_path, ["--no-karpenter", "--plain-http"])
    try:
        cluster = kubeconfig_cluster(b.kubeconfig)
        assert cluster["server"].startswith("http://127.0.0.1:") and "certificate-authority-data" not in cluster
        assert not (json.loads(b.kubeconfig.read_text())["users"][0]["user"])  # no credentials
        with b.urlopen("/readyz") as r:
            assert r.status == 200
        if kubectl_binary() is not None:
            assert "kube-system" in _namespaces_kubectl(b)
        assert "kube-system" in _namespaces_python(b.kubeconfig)
        assert "kube-system" in _namespaces_karpy(b.kubeconfig)
    finally:
        assert b.stop() == 0, b.log("stderr")


def _ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback")
def test_ipv6_loopback(tmp_path):
    b = RunningSandbox(tmp_path, ["--no-karpenter", "--address", "::1"])
    try:
        assert b.url.startswith("https://[::1]:")
        wait_for(lambda: "kube-system" in _namespaces_karpy(b.kubeconfig), 30, 0.2, "namespaces over IPv6")
        assert "kube-system" in _namespaces_python(b.kubeconfig)
        if kubectl_binary() is not None:
            assert "kube-system" in _namespaces_kubectl(b)
    finally:
        assert b.stop() == 0, b.log("stderr")
