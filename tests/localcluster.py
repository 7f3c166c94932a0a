"""The real control plane under karpy's tests: ``scripts/local-cluster`` on binaries from ``scripts/kube-binaries``.

``LocalCluster`` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and karpy's node
agents on 127.0.0.1 in a directory of the test's, and stops every one of them at the end. Where Go is missing (and
so the binaries cannot be built) the tests that need it skip with the reason; with ``CI=true`` they fail instead.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
CRDS = ROOT / "deploy" / "crds"



def load_script(name: str, module: str):
    """A script of scripts/ (no .py suffix) imported as ``module``."""
    loader = importlib.machinery.SourceFileLoader(module, str(SCRIPTS / name))
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader(module, loader))
    loader.exec_module(mod)
    return mod


lc = load_script("local-cluster", "karpy_local_cluster")

_built = threading.Lock()
_status: dict[tuple[str, ...], tuple[bool, str]] = {}


def unavailable(reason: str) -> None:
    """Skip with the reason; under CI a missing real control plane is a failure."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the real control plane is required under CI=true: {reason}")
    pytest.skip(reason)


def require_binaries(*components: str) -> None:
    """The real components (all, or only ``components`` of scripts/kube-binaries) are built, or built now, once
    per session, if Go is here; else skip or fail."""
    with _built:
        if components not in _status:
            _status[components] = _ensure_binaries(components)
    ok, reason = _status[components]
    if not ok:
        unavailable(reason)


def built_binaries() -> dict[str, str]:
    """NAME -> path of every binary scripts/kube-binaries has built."""
    out = subprocess.run([str(SCRIPTS / "kube-binaries"), "path"], capture_output=True, text=True).stdout
    return {name: path for name, _, path in (line.partition("\t") for line in out.splitlines()) if path}


def _ensure_binaries(components: tuple[str, ...]) -> tuple[bool, str]:
    script = str(SCRIPTS / "kube-binaries")
    if subprocess.run([script, "path", *components], capture_output=True).returncode == 0:
        return True, ""
    if shutil.which("go") is None:
        what = ", ".join(components) or "kube-apiserver, etcd and kwok"
        return False, f"Go is not installed, so scripts/kube-binaries cannot build {what}"
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"karpy-kube-binaries-{os.getpid()}.log"
    sys.stderr.write(f"\nbuilding the real control plane's binaries with scripts/kube-binaries (log: {log}) ...\n")
    with open(log, "wb") as out:
        p = subprocess.run([script, "build", *components], stdout=out, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        pytest.fail(f"scripts/kube-binaries failed ({p.returncode}):\n{tail}")
    return True, ""


def kubectl_binary() -> str | None:
    return os.environ.get("KUBECTL") or shutil.which("kubectl")


class LocalCluster:
    """One control plane in ``dir``; ``api()`` is karpy's own client on its admin kubeconfig."""

    def __init__(self, d: Path):
        require_binaries()
        self.dir = Path(d)
        try:
            lc.up(self.dir)
        except lc.Failure as e:
            pytest.fail(f"scripts/local-cluster up failed: {e}")
        self.state = lc.load(self.dir)
        self.kubeconfig = str(self.dir / "admin.kubeconfig")
        self.server = self.state["server"]
        self.env = {**os.environ, "KUBECONFIG": self.kubeconfig, "HOME": str(self.dir)}
        self._clients: list[Any] = []

    # --- clients ------------------------------------------------------------------------------------------
    def api(self, kubeconfig: str | None = None):
        from karpy.kube.client import KubeClient, RetryPolicy, load_config

        config, _ = load_config(kubeconfig or self.kubeconfig)
        c = KubeClient(config, retry=RetryPolicy(attempts=8, base=0.05, cap=1.0), user_agent="karpy-tests")
        self._clients.append(c)
        return c

    def kubectl(self, *args: str, check: bool = True, stdin: str | None = None, timeout: float = 120,
                kubeconfig: str | None = None) -> subprocess.CompletedProcess:
        binary = kubectl_binary()
        if binary is None:
            unavailable("kubectl is not installed")
        env = dict(self.env, KUBECONFIG=kubeconfig or self.kubeconfig)
        p = subprocess.run([binary, *args], env=env, cwd=self.dir, input=stdin, capture_output=True, text=True,
                           timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return p

    def request(self, method: str, path: str, body: Any = None, *, user: str = "admin") -> tuple[int, Any]:
        """One raw HTTPS request as ``user`` (a client certificate of the cluster's): (status, decoded JSON)."""
        import urllib.error
        import urllib.request

        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        ctx = lc._tls_context(self.dir, user)
        try:
            with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def install_crds(self) -> None:
        self.kubectl("apply", "-f", str(CRDS))
        self.kubectl("wait", "--for", "condition=Established", "--timeout", "60s", "-f", str(CRDS))

    # --- the control plane's processes --------------------------------------------------------------------
    def restart(self, component: str) -> None:
        lc.restart(self.dir, component)
        self.state = lc.load(self.dir)

    def stop_component(self, component: str) -> None:
        state = lc.load(self.dir)
        lc.stop(self.dir, state, component)

    def start_component(self, component: str) -> None:
        state = lc.load(self.dir)
        lc.start(self.dir, state, component)
        lc.ready(self.dir, state, component)

    def log(self, component: str) -> str:
        return (self.dir / "logs" / f"{component}.log").read_text(errors="replace")

    def down(self) -> None:
        for c in self._clients:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        lc.down(self.dir)
        still = [n for n, pid in lc.load(self.dir)["pids"].items() if lc._alive(pid)]
        assert not still, f"processes still running after down: {still}"


def wait_for(pred, timeout: float = 60.0, what: str = "condition", interval: float = 0.2):
    """Poll ``pred`` until it returns something truthy (generous timeouts; nothing asserts on wall-clock time)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = pred()
        except Exception as e:  # noqa: BLE001 - the server may be restarting
            last = e
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def json_of(p: subprocess.CompletedProcess) -> Any:
    return json.loads(p.stdout)


class Karpy:
    """``karpy controller`` (or another karpy command) as a process; its JSON log lines, its stop."""

    def __init__(self, args: list[str], d: Path, name: str, env: dict | None = None):
        import signal  # noqa: F401 - used by stop's callers

        self.out_path = Path(d) / f"{name}.out"
        self.err_path = Path(d) / f"{name}.err"
        self.p = subprocess.Popen([sys.executable, "-m", "karpy.cli", *args], stdout=open(self.out_path, "w"),
                                  stderr=open(self.err_path, "w"),
                                  env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})

    @classmethod
    def controller(cls, kubeconfig: str, d: Path, name: str = "controller", *extra: str) -> "Karpy":
        return cls(["controller", "--kubeconfig", kubeconfig, "--metrics-port", "0", "--health-probe-port", "0",
                    "--bind-address", "127.0.0.1", *extra], d, name)

    def logs(self) -> list[dict]:
        out = []
        for line in self.out_path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def messages(self) -> list[str]:
        return [r.get("message", "") for r in self.logs()]

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def port(self, kind: str) -> int:
        rec = wait_for(lambda: next((r for r in self.logs() if r.get("message") == "starting server"
                                     and r.get("kind") == kind), None), what=f"{kind} port")
        return int(rec["port"])

    def stop(self, sig: int | None = None, timeout: float = 30) -> int:
        import signal

        if self.p.poll() is None:
            self.p.send_signal(sig if sig is not None else signal.SIGTERM)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return self.p.wait(5)


def service_account_kubeconfig(cluster: LocalCluster, namespace: str, name: str, path: Path) -> str:
    """A kubeconfig holding a token of the ServiceAccount ``namespace/name`` (what a pod of it would mount)."""
    token = cluster.kubectl("create", "token", name, "-n", namespace, "--duration", "2h").stdout.strip()
    doc = json.loads((cluster.dir / "admin.kubeconfig").read_text())
    doc["users"] = [{"name": name, "user": {"token": token}}]
    doc["contexts"] = [{"name": "karpy-local", "context": {"cluster": "karpy-local", "user": name,
                                                          "namespace": namespace}}]
    path.write_text(json.dumps(doc, indent=2))
    os.chmod(path, 0o600)
    return str(path)


def audit_events(cluster: LocalCluster, username: str) -> list[dict]:
    """The audited requests of ``username`` (ServiceAccounts only are audited), in order."""
    out = []
    path = cluster.dir / "logs" / "audit.log"
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if (ev.get("user") or {}).get("username") == username and ev.get("stage") == "ResponseComplete":
            out.append(ev)
    return out
