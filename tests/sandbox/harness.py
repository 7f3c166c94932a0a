"""Sandboxes started as the user starts them (``karpy sandbox ... --port 0``), on 127.0.0.1, stopped with SIGTERM.

``sandbox``: with Karpenter, at 100x real time. ``bare``: ``--no-karpenter``,
with a manifest applied at start. Each test leaves objects of its own names
and namespaces, so the tests of one module share a sandbox.

A sandbox serves HTTPS on loopback with a CA of its own, which it writes into
the kubeconfig; every request here verifies the server with that CA
(:func:`kubeconfig_ssl_context`), as kubectl and the clients do.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "aks-multiarch-arm64"
START_TIMEOUT = 30.0


def kubectl_binary() -> str | None:
    return os.environ.get("KUBECTL") or shutil.which("kubectl")


def wait_for(fn: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1, what: str = "condition") -> Any:
    """Poll ``fn`` until it returns something truthy (generous timeouts: no test asserts on wall-clock time)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def kubeconfig_cluster(path: Path | str) -> dict:
    """The ``cluster`` entry of a sandbox's kubeconfig (server URL, CA)."""
    return json.loads(Path(path).read_text())["clusters"][0]["cluster"]


def kubeconfig_ssl_context(path: Path | str) -> ssl.SSLContext | None:
    """A client context that trusts the kubeconfig's ``certificate-authority-data`` (None for plain HTTP)."""
    cluster = kubeconfig_cluster(path)
    if not cluster["server"].startswith("https:"):
        return None
    ca = cluster.get("certificate-authority-data")
    if ca is None:
        return ssl.create_default_context()
    return ssl.create_default_context(cadata=base64.b64decode(ca).decode())


class RunningSandbox:
    def __init__(self, tmp: Path, args: list[str], env: dict[str, str] | None = None):
        self.tmp = tmp
        self.kubeconfig = tmp / "kubeconfig"
        self.stdout = open(tmp / "stdout.log", "wb")
        self.stderr = open(tmp / "stderr.log", "wb")
        cmd = [sys.executable, "-m", "karpy.cli", "sandbox", *args, "--port", "0", "--kubeconfig", str(self.kubeconfig)]
        self.proc = subprocess.Popen(cmd, cwd=tmp, stdout=self.stdout, stderr=self.stderr,
                                     env={**os.environ, **(env or {})})
        self.ssl_context: ssl.SSLContext | None = None
        try:
            wait_for(self._ready, START_TIMEOUT, 0.05, "the sandbox to serve")
        except AssertionError:
            self.stop()
            raise AssertionError(f"sandbox did not start: {self.log('stderr')}")
        self.url = kubeconfig_cluster(self.kubeconfig)["server"]
        self.env = {**os.environ, "HOME": str(tmp), "KUBECONFIG": str(self.kubeconfig)}

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"sandbox exited with {self.proc.returncode}: {self.log('stderr')}")
        if not self.kubeconfig.exists():
            return False
        url = kubeconfig_cluster(self.kubeconfig)["server"]
        self.ssl_context = kubeconfig_ssl_context(self.kubeconfig)
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2, context=self.ssl_context) as r:
                return r.status == 200
        except OSError:
            return False

    def urlopen(self, req: urllib.request.Request | str, timeout: float = 10):
        """``urllib.request.urlopen`` against the sandbox, verifying it with the kubeconfig's CA."""
        if isinstance(req, str) and req.startswith("/"):
            req = self.url + req
        return urllib.request.urlopen(req, timeout=timeout, context=self.ssl_context)

    def log(self, which: str) -> str:
        f = getattr(self, which)
        if not f.closed:
            f.flush()
        return (self.tmp / f"{which}.log").read_text(errors="replace")[-4000:]

    def kubectl(self, *args: str, check: bool = True, stdin: str | None = None, timeout: float = 90) -> subprocess.CompletedProcess:
        binary = kubectl_binary()
        if binary is None:
            pytest.skip("kubectl is not installed")
        p = subprocess.run([binary, *args], env=self.env, cwd=self.tmp, input=stdin, capture_output=True, text=True,
                           timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return p

    def get_json(self, path: str) -> Any:
        with self.urlopen(self.url + path) as r:
            return json.loads(r.read())

    def client(self):
        kubernetes = pytest.importorskip("kubernetes")
        return kubernetes.config.new_client_from_config(str(self.kubeconfig))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stdout.close()
        self.stderr.close()
        return self.proc.returncode
