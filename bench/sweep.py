"""Sweep benchmark: `karpy sweep` of up to 64 variants of the diverse workload, serial, on a process pool of
2 workers, and on a local Ray cluster of 2 CPUs.

The base is bench/e2e.py's ``diverse N`` (upstream's makeDiversePods(N) as bare Pods on the kwok catalog, one
NodePool); the sweep file varies the NodePool over instance families (c, s, m, all), consolidateAfter (30s, 5m,
10m, Never), capacity types (on-demand; spot and on-demand) and architectures (amd64; amd64 and arm64): 64
variants, of which ``--variants K`` keeps the first K. Each mode runs `karpy sweep` in a child process and
reports its wall time and the peak RSS of one worker (os.wait4 for the CLI and its pool's processes; VmHWM of
the Ray workers). The check: every mode writes the same rows.

    .venv/bin/python bench/sweep.py --pods 5000 --variants 64      # the issue's size
    .venv/bin/python bench/sweep.py --pods 1000 --variants 16      # what bench/README.md reports

Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

import _util  # noqa: F401  (puts the repository root on sys.path)
from e2e import diverse_documents

PY = sys.executable
SWEEP = {
    "axes": {
        "families": [["c"], ["s"], ["m"], ["c", "s", "m"]],
        "consolidateAfter": ["30s", "5m", "10m", "Never"],
        "capacityTypes": [["on-demand"], ["spot", "on-demand"]],
        "architectures": [["amd64"], ["amd64", "arm64"]],
    },
}


def sweep_file(path: Path, variants: int) -> None:
    import itertools

    axes = SWEEP["axes"]
    combos = [dict(zip(axes, vs)) for vs in itertools.product(*axes.values())][:variants]
    path.write_text(yaml.safe_dump({"axes": axes, "variants": combos}, sort_keys=False))


def run_measured(args: list[str], watch_group: int | None = None) -> tuple[float, float]:
    """Wall seconds and the largest peak RSS (MiB) of the CLI process and its pool workers; with
    ``watch_group``, of the Ray workers in that process group instead (polled while the sweep runs: Ray ends
    a job's workers when it finishes)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([PY, "-m", "karpy.cli", "sweep", *args, "-q"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    ray_peak = 0.0
    if watch_group is not None:
        while proc.poll() is None:
            ray_peak = max(ray_peak, ray_worker_peak(watch_group))
            time.sleep(0.5)
        code, usage = proc.returncode, None
    else:
        _, status, usage = os.wait4(proc.pid, 0)
        code = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"karpy sweep exited with {code}: {proc.stderr.read().decode()[-2000:]}")
    return seconds, ray_peak if usage is None else usage.ru_maxrss / 1024


def rows(path: Path) -> list[dict]:
    return sorted((json.loads(x) for x in path.read_text().splitlines()), key=lambda r: r["index"])


def start_ray(tmp: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp / "ray.log"
    proc = subprocess.Popen(
        [str(Path(PY).with_name("ray")), "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port",
         str(port), "--num-cpus", "2", "--temp-dir", str(tmp / "ray"), "--include-dashboard=false",
         "--disable-usage-stats"], stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    while b"Ray runtime started" not in log.read_bytes():
        if proc.poll() is not None:
            raise SystemExit("ray start failed:\n" + log.read_text()[-2000:])
        time.sleep(0.5)
    return proc, f"127.0.0.1:{port}"


def ray_worker_peak(group: int) -> float:
    """The largest VmHWM (MiB) of the Ray worker processes in the cluster's process group."""
    peak = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            # Ray's workers may run in sessions of their own: found by Ray's variables in their environment
            if os.getpgid(int(pid)) != group and not Path(f"/proc/{pid}/environ").read_bytes().count(b"RAY_"):
                continue
            if not cmd.startswith(b"ray::") or b"Agent" in cmd:  # the workers, not the node's agents
                continue
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) / 1024)
        except (OSError, ProcessLookupError):
            continue
    return peak


def stop_ray(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--variants", type=int, default=64)
    ap.add_argument("--modes", default="serial,workers2,ray")
    args = ap.parse_args(argv)
    modes = args.modes.split(",")
    with tempfile.TemporaryDirectory(prefix="karpy-sweep-bench-") as t:
        tmp = Path(t)
        base = tmp / "base"
        base.mkdir()
        (base / "workload.yaml").write_text(yaml.safe_dump_all(diverse_documents(args.pods), sort_keys=False))
        vary = tmp / "sweep.yaml"
        sweep_file(vary, args.variants)
        common = [str(base), "--vary", str(vary)]
        results: dict[str, list[dict]] = {}
        for mode in modes:
            out = tmp / mode
            ray_proc = None
            if mode == "serial":
                secs, rss = run_measured([*common, "--out", str(out), "--workers", "1"])
            elif mode == "workers2":
                secs, rss = run_measured([*common, "--out", str(out), "--workers", "2"])
            elif mode == "ray":
                ray_proc, address = start_ray(tmp)
                try:
                    secs, rss = run_measured([*common, "--out", str(out), "--ray", address], ray_proc.pid)
                finally:
                    stop_ray(ray_proc)
            else:
                raise SystemExit(f"unknown mode {mode}")
            results[mode] = rows(out.with_suffix(".jsonl"))
            print(f"{mode:>9}  {args.variants} variants x {args.pods} pods  {secs:7.1f} s  "
                  f"{secs / args.variants:5.2f} s/variant  peak RSS per worker {rss:6.0f} MiB", flush=True)
        first = next(iter(results.values()))
        same = all(r == first for r in results.values())
        cheapest = min((r for r in first if r["podsPending"] == 0), key=lambda r: (r["costPerHour"], r["index"]),
                       default=None)
        print(f"rows identical across modes: {same}; cheapest: "
              f"{cheapest['variant'] if cheapest else '-'} ${cheapest['costPerHour'] if cheapest else 0}/h")
        return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
