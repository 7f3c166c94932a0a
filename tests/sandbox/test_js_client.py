"""The official JavaScript client, ``@kubernetes/client-node``, against ``karpy sandbox``.

The client is pinned in ``tests/sandbox/js/package.json`` and ``package-lock.json`` and installed with
``npm ci`` into ``tests/sandbox/js/node_modules`` (ignored by git) the first time this runs. It reads the
kubeconfig exactly as the sandbox wrote it, so it verifies the server with the sandbox's CA.

Without ``node``/``npm`` or without the npm registry the tests are skipped, saying why; with
``CI=true`` they fail instead, so CI cannot pass without running them.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess

import pytest

from .harness import ROOT

JS = ROOT / "tests" / "sandbox" / "js"
NETWORK_ERRORS = ("ENOTFOUND", "EAI_AGAIN", "ETIMEDOUT", "ECONNREFUSED", "ECONNRESET", "ENETUNREACH",
                  "EHOSTUNREACH", "network", "socket hang up", "ERR_SOCKET_TIMEOUT")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the JavaScript client test cannot run in CI: {reason}")
    pytest.skip(reason)


def _pinned() -> str:
    return json.loads((JS / "package.json").read_text())["dependencies"]["@kubernetes/client-node"]


def _installed() -> str | None:
    try:
        pkg = JS / "node_modules" / "@kubernetes" / "client-node" / "package.json"
        return json.loads(pkg.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


@pytest.fixture(scope="module")
def node() -> str:
    return installed_client()


def installed_client() -> str:
    """The path of node, once the pinned client is installed in tests/sandbox/js (skips or fails without)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        _unavailable("node and npm are needed to run @kubernetes/client-node (not found on PATH)")
    with open(JS / ".install.lock", "w") as lock:  # test workers may install at once: one does, the other waits
        fcntl.flock(lock, fcntl.LOCK_EX)
        _install(npm)
    return node


def _install(npm: str) -> None:
    if _installed() != _pinned():
        try:
            p = subprocess.run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=JS,
                               capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            _unavailable("npm ci did not finish within 10 minutes (is the npm registry reachable?)")
        if p.returncode != 0:
            out = p.stdout + p.stderr
            if any(e in out for e in NETWORK_ERRORS):
                _unavailable(f"the npm registry cannot be reached: {out.strip()[-600:]}")
            raise AssertionError(f"npm ci failed ({p.returncode}):\n{out}")
        assert _installed() == _pinned()


def _run(node: str, kubeconfig, namespace: str) -> tuple[int, dict]:
    p = subprocess.run([node, str(JS / "client.mjs"), str(kubeconfig), namespace], cwd=JS, capture_output=True,
                       text=True, timeout=120)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no output from the JavaScript client ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return p.returncode, json.loads(lines[-1])


def test_list_create_read_and_watch_through_the_kubeconfig_as_written(bare, node):
    assert bare.url.startswith("https://127.0.0.1:")  # TLS, verified with the kubeconfig's CA
    code, out = _run(node, bare.kubeconfig, "from-js")
    assert code == 0, out
    assert {"default", "kube-system", "preloaded"} <= set(out["namespaces"])
    assert out["configMap"] == {"name": "from-js", "labels": {"client": "javascript"},
                                "data": {"greeting": "hello from node"}}
    assert {"type": "ADDED", "name": "from-js"} in out["watchEvents"]
    # what the JavaScript client wrote, the other clients read
    api = bare.client()
    from kubernetes import client

    cm = client.CoreV1Api(api).read_namespaced_config_map("from-js", "from-js")
    assert cm.data == {"greeting": "hello from node"}
    assert client.CoreV1Api(api).read_namespaced_pod("from-js", "from-js").spec.containers[0].image == "pause"


def test_without_the_ca_the_client_refuses_the_server(bare, node, tmp_path):
    """The kubeconfig's CA is what makes the server trusted: without it the client stops at the handshake."""
    doc = json.loads(bare.kubeconfig.read_text())
    del doc["clusters"][0]["cluster"]["certificate-authority-data"]
    kc = tmp_path / "no-ca.kubeconfig"
    kc.write_text(json.dumps(doc))
    code, out = _run(node, kc, "from-js-untrusted")
    assert code == 1
    assert out["code"] in ("UNABLE_TO_VERIFY_LEAF_SIGNATURE", "SELF_SIGNED_CERT_IN_CHAIN",
                           "DEPTH_ZERO_SELF_SIGNED_CERT", "UNABLE_TO_GET_ISSUER_CERT_LOCALLY"), out
    assert "from-js-untrusted" not in {n["metadata"]["name"] for n in bare.get_json("/api/v1/namespaces")["items"]}
