"""helm for the chart's tests: the binary scripts/kube-binaries builds from helm.sh/helm/v3 (built here on first
use when Go is installed; without Go the tests skip with the reason, and fail under CI=true)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from localcluster import SCRIPTS, unavailable

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "karpy"

_lock = threading.Lock()
_found: tuple[str, str] | None = None  # (path, reason it is missing)


def _locate() -> tuple[str, str]:
    script = str(SCRIPTS / "kube-binaries")
    for attempt in range(2):
        out = subprocess.run([script, "path"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            name, _, path = line.partition("\t")
            if name == "helm" and path:
                return path, ""
        if attempt or shutil.which("go") is None:
            break
        p = subprocess.run([script, "build", "helm"], capture_output=True, text=True)
        if p.returncode != 0:
            pytest.fail(f"scripts/kube-binaries build helm failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return "", "Go is not installed, so scripts/kube-binaries cannot build helm"


def helm_binary() -> str:
    global _found
    with _lock:
        if _found is None:
            _found = _locate()
    path, reason = _found
    if not path:
        unavailable(reason)
    return path


def helm(*args: str, kubeconfig: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    env["KUBECONFIG"] = kubeconfig or os.devnull
    return subprocess.run([helm_binary(), *args], capture_output=True, text=True, timeout=timeout, env=env)


def template(*values: str, namespace: str = "kube-system", release: str = "karpenter") -> list[dict]:
    """`helm template` of charts/karpy with ``values`` (helm's own arguments: --set K=V, -f FILE, ...)."""
    p = helm("template", release, str(CHART), "--namespace", namespace, *values)
    assert p.returncode == 0, p.stderr
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def template_error(*values: str) -> str:
    """The message of a `helm template` that must fail."""
    p = helm("template", "karpenter", str(CHART), *values)
    assert p.returncode != 0, "rendered, expected a refusal"
    assert "Traceback" not in p.stderr and "panic" not in p.stderr
    return p.stderr
