"""End to end, as the workshop's reader does it: ``karpy sandbox`` running the seed workshop
(examples/aks-multiarch-arm64), and the seed's viewer command with ``karpy viewer`` in place of
``aks-node-viewer``: once as JSON, and on a real terminal (tmux) where it must show the 2 arm64 nodes with their
instance types and prices and the 4 pods, follow a scale-up, and quit on ``q``.

The tmux test is skipped (visibly) where tmux is not installed; the project's CI (.ci/run) does not install it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from sandbox.harness import EXAMPLE, RunningSandbox, wait_for

SEED = ["--node-selector", "aks-karpenter=demo", "--resources", "cpu"]


@pytest.fixture(scope="module")
def workshop(tmp_path_factory):
    box = RunningSandbox(tmp_path_factory.mktemp("viewer-sandbox"), [str(EXAMPLE), "--speed", "100"])
    try:
        wait_for(lambda: (once(box)["summary"]["pods"]["running"] == 4) and once(box), 60, 0.2,
                 "the workshop's 4 pods to run")
        yield box
    finally:
        assert box.stop() == 0, box.log("stderr")


def viewer_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "karpy.cli", "viewer", *args]


def once(box: RunningSandbox, *extra: str) -> dict:
    p = subprocess.run(viewer_cmd(*SEED, "--once", "-o", "json", *extra), env=box.env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_seed_command_once_json_shows_two_arm64_nodes_their_prices_and_four_pods(workshop):
    got = once(workshop)
    claims = {c["metadata"]["name"]: c for c in workshop.get_json("/apis/karpenter.sh/v1/nodeclaims")["items"]}
    assert got["summary"]["nodes"] == 2
    assert got["summary"]["pods"]["total"] == 4 and got["summary"]["pods"]["running"] == 4
    for n in got["nodes"]:
        c = claims[n["nodeClaim"]]
        assert n["arch"] == "arm64" and n["status"] == "Ready"
        assert n["instanceType"] == c["metadata"]["labels"]["node.kubernetes.io/instance-type"]
        assert n["pricePerHour"] == c["metadata"]["annotations"]["karpy.dev/price-per-hour"]
        assert n["priceSource"] == "annotation"
    assert sorted(n["pods"] for n in got["nodes"]) == [1, 3]  # the 2-vCPU node holds one, the 4-vCPU three
    total = sum(float(n["pricePerHour"]) for n in got["nodes"])
    assert got["summary"]["pricePerHour"] == f"{total:.4f}"
    assert got["summary"]["byArch"] == {"arm64": {"nodes": 2, "pricePerHour": f"{total:.4f}"}}
    # requests: 4 x 1 CPU of the workshop plus the DaemonSets' 350m on each node
    assert got["summary"]["resources"]["cpu"]["requested"] == "4700m"


def test_selector_that_matches_nothing_shows_no_nodes_and_no_pods_of_theirs(workshop):
    got = once(workshop, "--node-selector", "aks-karpenter=other")
    assert got["summary"]["nodes"] == 0 and got["summary"]["pods"]["bound"] == 0


def test_unreachable_api_exits_2_without_a_traceback(tmp_path):
    kc = tmp_path / "kubeconfig"
    kc.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "x",
                              "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:1"}}],
                              "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
                              "users": [{"name": "x", "user": {}}]}))
    p = subprocess.run(viewer_cmd("--kubeconfig", str(kc), "--once"), capture_output=True, text=True, timeout=120,
                       env={**os.environ, "HOME": str(tmp_path)})
    assert p.returncode == 2 and "reading the cluster" in p.stderr and "Traceback" not in p.stderr, p.stderr


class Tmux:
    """A tmux server of the test's own (its own socket), stopped at the end."""

    def __init__(self, env: dict[str, str], cwd: str):
        self.socket = f"karpy-viewer-{uuid.uuid4().hex[:8]}"
        self.env = env
        self.cwd = cwd

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args], env=self.env, cwd=self.cwd,
                              capture_output=True, text=True, timeout=30)

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "viewer").stdout

    def stop(self) -> None:
        self.run("kill-server")


def test_seed_command_in_a_real_terminal(workshop):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed: the terminal test needs it (apt-get install tmux)")
    # the terminal's own size, not a COLUMNS/LINES some other test runner left in the environment
    env = {**{k: v for k, v in workshop.env.items() if k not in ("COLUMNS", "LINES")}, "TERM": "xterm-256color"}
    t = Tmux(env, str(workshop.tmp))
    # the screen is drawn on the terminal itself (Textual writes to stderr): nothing is redirected
    cmd = " ".join(viewer_cmd(*SEED)) + f"; echo exited $? > {workshop.tmp}/viewer.rc; sleep 30"
    started = time.monotonic()
    try:
        assert t.run("new-session", "-d", "-s", "viewer", "-x", "160", "-y", "40", cmd).returncode == 0
        try:
            screen = wait_for(lambda: (lambda s: s if "4 pods" in s and "2 nodes" in s else None)(t.screen()), 30,
                              0.1, "the first frame")
        except AssertionError:
            raise AssertionError(f"the terminal shows:\n{t.screen()}") from None
        first_frame = time.monotonic() - started
        rows = [line for line in screen.splitlines() if "Standard_D" in line]
        assert len(rows) == 2, screen
        assert all("arm64" in r and "/$0." in r and "Ready" in r for r in rows), screen
        assert "$0.1860/hour" in screen or "/hour" in screen
        assert "q quit" in screen
        # the screen follows the cluster: scale the workshop to 8 pods
        workshop.kubectl("-n", "workshop", "scale", "deployment", "inflate", "--replicas", "8")
        screen = wait_for(lambda: (lambda s: s if "8 pods (0 pending" in s else None)(t.screen()), 60, 0.2,
                          "8 running pods on the screen")
        t.run("send-keys", "-t", "viewer", "q")
        wait_for(lambda: (workshop.tmp / "viewer.rc").exists(), 15, 0.1, "the viewer to quit on q")
        assert (workshop.tmp / "viewer.rc").read_text().strip() == "exited 0"
        assert "Traceback" not in t.screen()
        print(f"first frame in tmux after {first_frame:.2f}s (python start-up included)")
    finally:
        t.stop()
        workshop.kubectl("-n", "workshop", "scale", "deployment", "inflate", "--replicas", "4", check=False)
