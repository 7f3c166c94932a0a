"""karpy sweep --ray: the same rows through a local Ray cluster (started here on 127.0.0.1 with 2 CPUs, stopped
after) as on this machine's process pool."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

ray = pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parent.parent
ARM = str(ROOT / "examples" / "aks-multiarch-arm64")
KARPY = [sys.executable, "-m", "karpy.cli"]
SWEEP = {"axes": {"capacityTypes": [["on-demand"], ["spot"]],
                  "architectures": [["arm64"], ["amd64", "arm64"]],
                  "consolidationPolicy": ["WhenEmpty", "WhenEmptyOrUnderutilized"]}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_address(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ray")
    # Ray's socket paths under its temp dir must stay within 107 bytes: a short directory of its own, removed after
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    port = _free_port()
    ray_bin = Path(sys.executable).with_name("ray")
    # --block keeps `ray start` in the foreground: stopping its process group stops this cluster and nothing else
    proc = subprocess.Popen(
        [str(ray_bin), "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", str(port),
         "--num-cpus", "2", "--temp-dir", str(ray_tmp), "--include-dashboard=false", "--disable-usage-stats",
         "--object-store-memory", str(100 * 2**20)],
        stdout=open(tmp / "ray.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # waiting for Ray to come up, not a measurement
        while b"Ray runtime started" not in (tmp / "ray.log").read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("ray start failed:\n" + (tmp / "ray.log").read_text()[-3000:])
            time.sleep(0.5)
        yield address
    finally:
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait)
            except subprocess.TimeoutExpired:
                pass
        try:  # what the cluster started in its process group, if anything outlived `ray start`
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _sweep(tmp_path: Path, out: str, *extra: str) -> list[dict]:
    vary = tmp_path / "sweep.yaml"
    vary.write_text(yaml.safe_dump(SWEEP))
    r = subprocess.run([*KARPY, "sweep", ARM, "--vary", str(vary), "--out", str(tmp_path / out), "-q", "-o", "json",
                        *extra], capture_output=True, text=True, cwd=ROOT, timeout=600,
                       env={**os.environ, "RAY_ADDRESS": ""})
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (tmp_path / f"{out}.jsonl").read_text().splitlines()]
    return sorted(rows, key=lambda row: row["index"]) + [json.loads(r.stdout)]


def test_ray_gives_the_rows_of_the_local_run(tmp_path, ray_address):
    local = _sweep(tmp_path, "local", "--workers", "2")
    remote = _sweep(tmp_path, "ray", "--ray", ray_address)
    assert len(remote) == 9
    assert remote == [{**x, "rows": x["rows"].replace("local", "ray"), "csv": x["csv"].replace("local", "ray")}
                      if x.get("kind") == "SweepResult" else x for x in local]
    cheapest = next(x for x in remote[:-1] if x["variant"] == remote[-1]["cheapest"])
    assert cheapest["values"]["capacityTypes"] == ["spot"] and cheapest["podsPending"] == 0


def test_an_unreachable_ray_cluster_exits_2(tmp_path):
    vary = tmp_path / "sweep.yaml"
    vary.write_text(yaml.safe_dump(SWEEP))
    r = subprocess.run([*KARPY, "sweep", ARM, "--vary", str(vary), "--out", str(tmp_path / "o"), "-q",
                        "--ray", f"127.0.0.1:{_free_port()}"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 2, r.stderr
    assert "--ray: cannot connect" in r.stderr and "Traceback" not in r.stderr
