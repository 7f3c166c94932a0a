"""``karpy sandbox`` flags: off loopback only with TLS and a token, ``--plain-http`` on loopback only, a
certificate of the user's with a bearer token, bad input."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request

import pytest
from click.testing import CliRunner

from karpy.cli import main

from .harness import RunningSandbox, kubectl_binary


@pytest.mark.parametrize("address", ["0.0.0.0", "192.0.2.10", "::"])
def test_off_loopback_without_tls_is_refused(address, tmp_path):
    r = CliRunner().invoke(main, ["sandbox", "--address", address, "--kubeconfig", str(tmp_path / "kc")])
    assert r.exit_code == 2
    assert "--tls-cert" in r.output and "--token-file" in r.output
    assert not (tmp_path / "kc").exists()


@pytest.mark.parametrize("address", ["0.0.0.0", "192.0.2.10", "::"])
def test_plain_http_off_loopback_is_refused(address, tmp_path):
    r = CliRunner().invoke(main, ["sandbox", "--plain-http", "--address", address, "--kubeconfig",
                                  str(tmp_path / "kc")])
    assert r.exit_code == 2
    assert "--plain-http" in r.output and "loopback only" in r.output and address in r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "kc").exists()


@pytest.mark.parametrize("args, message", [
    (["--speed", "0"], "--speed"),
    (["--plain-http", "--tls-cert", "c.pem", "--tls-key", "k.pem"], "--plain-http"),
    (["--handshake-timeout", "0"], "--handshake-timeout"),
    (["--region", ""], "--region"),
    (["--tls-cert", "x.pem"], "--tls-key"),
])
def test_bad_flags_exit_2(args, message, tmp_path):
    r = CliRunner().invoke(main, ["sandbox", *args, "--kubeconfig", str(tmp_path / "kc")])
    assert r.exit_code == 2 and message in r.output


def test_invalid_manifest_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: x}\nspec: {weight: -1}\n")
    r = CliRunner().invoke(main, ["sandbox", str(bad), "--kubeconfig", str(tmp_path / "kc")])
    assert r.exit_code == 2 and "bad.yaml" in r.output


def test_more_pods_than_a_simulation_holds_exits_2(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 2147483647\n"
                   "  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n"
                   "    spec: {containers: [{name: c, image: x}]}\n")
    r = CliRunner().invoke(main, ["sandbox", str(big), "--port", "0", "--kubeconfig", str(tmp_path / "kc")])
    assert r.exit_code == 2 and "spec.replicas: Invalid value: 2147483647" in r.output
    assert not (tmp_path / "kc").exists()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_tls_and_token(tmp_path):
    cert, key, token = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "token"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=karpy-sandbox", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    token.write_text("s3cret\n")
    box = RunningSandbox(tmp_path, ["--no-karpenter", "--tls-cert", str(cert), "--tls-key", str(key),
                                    "--token-file", str(token)])
    try:
        assert box.url.startswith("https://127.0.0.1:")
        ctx = ssl.create_default_context(cafile=str(cert))
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(box.url + "/api/v1/namespaces", context=ctx, timeout=10)
        assert e.value.code == 401
        req = urllib.request.Request(box.url + "/api/v1/namespaces", headers={"Authorization": "Bearer s3cret"})
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            assert "kube-system" in {n["metadata"]["name"] for n in json.loads(r.read())["items"]}
        if kubectl_binary() is not None:
            assert "kube-system" in box.kubectl("get", "namespaces").stdout
    finally:
        assert box.stop() == 0
