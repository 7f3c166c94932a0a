"""helm for the chart's tests: the binary scripts/kube-binaries builds from helm.sh/helm/v3 (built here on first
use when Go is installed; without Go the tests skip with the reason, and fail under CI=true)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from localcluster import built_binaries, require_binaries

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "karpy"


def helm_binary() -> str:
    require_binaries("helm")
    return built_binaries()["helm"]


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
