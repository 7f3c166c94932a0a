"""scripts/local-cluster as a user runs it: `up` returns with a ready control plane and an admin kubeconfig,
kubectl works against it (protobuf bodies, the real kube-scheduler, kwok running pods), `down` stops every
process it started, and a missing binary is a clear error."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from localcluster import kubectl_binary, lc, require_binaries, unavailable, wait_for

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "scripts" / "local-cluster")


def test_up_kubectl_down(tmp_path):
    require_binaries()
    if kubectl_binary() is None:
        unavailable("kubectl is not installed")
    d = tmp_path / "kc"
    up = subprocess.run([SCRIPT, "up", str(d)], capture_output=True, text=True, timeout=300)
    pids = {}
    try:
        assert up.returncode == 0, up.stderr
        assert f"kubeconfig {d / 'admin.kubeconfig'}" in up.stdout
        state = json.loads((d / "cluster.json").read_text())
        pids = state["pids"]
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok",
                             "node-agents"}
        env = {**os.environ, "KUBECONFIG": str(d / "admin.kubeconfig"), "HOME": str(tmp_path)}

        def k(*args, **kw):
            return subprocess.run([kubectl_binary(), *args], env=env, capture_output=True, text=True, timeout=240,
                                  **kw)

        version = json.loads(k("version", "-o", "json").stdout)
        assert version["serverVersion"]["gitVersion"] == "v1.33.13"
        assert "namespace/demo created" in k("create", "namespace", "demo").stdout  # protobuf body
        # a Node kwok runs, and a pod the real kube-scheduler binds to it
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "fake-1", "labels": {"kubernetes.io/os": "linux"}},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                           "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}
        assert k("create", "-f", "-", input=json.dumps(node)).returncode == 0
        assert k("create", "deployment", "web", "-n", "demo", "--image=pause", "--replicas=2").returncode == 0
        k("wait", "--for=condition=Available", "deployment/web", "-n", "demo", "--timeout=120s")

        def running():
            pods = json.loads(k("get", "pods", "-n", "demo", "-o", "json").stdout)["items"]
            return [p for p in pods if p["status"].get("phase") == "Running" and p["status"].get("podIP")
                    and p["spec"].get("nodeName") == "fake-1"]

        assert len(wait_for(running, timeout=120, what="2 pods running on the kwok node")) == 2
        status = subprocess.run([SCRIPT, "status", str(d)], capture_output=True, text=True)
        assert status.returncode == 0 and status.stdout.count("running") == 6
    finally:
        down = subprocess.run([SCRIPT, "down", str(d)], capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert not [n for n, pid in pids.items() if lc._alive(pid)]
    assert subprocess.run([SCRIPT, "status", str(d)], capture_output=True, text=True).returncode == 1


def test_a_missing_binary_is_a_clear_error(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    p = subprocess.run([SCRIPT, "up", str(tmp_path / "kc")], capture_output=True, text=True,
                       env={**os.environ, "KARPY_KUBE_BIN_DIR": str(empty)}, timeout=60)
    assert p.returncode == 1
    assert "missing binaries etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok" in p.stderr
    assert "scripts/kube-binaries" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "kc" / "cluster.json").exists()


def test_bad_usage_exits_2():
    p = subprocess.run([SCRIPT, "sideways", "/tmp/x"], capture_output=True, text=True)
    assert p.returncode == 2 and "usage: scripts/local-cluster" in p.stderr
