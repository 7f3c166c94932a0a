"""Karpenter's logs through ``kubectl logs`` in karpy sandbox: its Deployment and Pod in namespace karpenter,
the seed workshop's command against examples/aks-multiarch-arm64, follow, the options and their errors as
kube-apiserver answers them; and the log lines' shape (karpy.runtime.log)."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error

import pytest

from karpy.runtime.clock import SimClock
from karpy.runtime.log import LogBuffer, Logger, go_duration, iso_millis, pretty_slice
from karpy.sandbox.logs import rfc3339_nano

from .harness import EXAMPLE, RunningSandbox, kubectl_binary, wait_for

SEED = ["logs", "-n", "karpenter", "-l", "app.kubernetes.io/name=karpenter", "--all-containers", "--since=3m",
        "--tail=-1"]
KEYS = ["level", "time", "logger", "message", "commit", "controller", "namespace", "name", "reconcileID"]


@pytest.fixture(scope="module")
def arm64(tmp_path_factory):
    box = RunningSandbox(tmp_path_factory.mktemp("logs"), [str(EXAMPLE), "--speed", "10"])
    yield box
    code = box.stop()
    assert code == 0, box.log("stderr")
    assert "Traceback" not in box.log("stderr"), box.log("stderr")


def _records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _seed_lines(box: RunningSandbox) -> list[dict]:
    def created() -> list[dict]:
        recs = _records(box.kubectl(*SEED).stdout)
        return recs if sum(r["message"] == "created nodeclaim" for r in recs) >= 2 else []

    return wait_for(created, 60, 0.5, "two created nodeclaim lines")


def _pod(box: RunningSandbox) -> str:
    return box.kubectl("get", "pods", "-n", "karpenter", "-l", "app.kubernetes.io/name=karpenter", "-o",
                       "jsonpath={.items[0].metadata.name}").stdout


def test_the_seed_command_prints_the_provisioners_decisions_as_upstream_writes_them(arm64):
    recs = _seed_lines(arm64)
    found = next(r for r in recs if r["message"] == "found provisionable pod(s)")
    computed = next(r for r in recs if r["message"] == "computed new nodeclaim(s) to fit pod(s)")
    created = [r for r in recs if r["message"] == "created nodeclaim"]
    # the seed's keys, in the seed's order, then the record's own
    assert list(found) == KEYS + ["Pods", "duration"]
    assert list(computed) == KEYS + ["nodeclaims", "pods"]
    assert list(created[0]) == KEYS + ["NodePool", "NodeClaim", "requests", "instance-types"]
    assert found["level"] == "INFO" and found["logger"] == "controller" and found["controller"] == "provisioner"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", found["time"])
    assert found["namespace"] == "" and found["name"] == ""
    # one reconcile: the same reconcileID on its three kinds of lines
    assert found["reconcileID"] == computed["reconcileID"] == created[0]["reconcileID"]
    assert re.fullmatch(r"[0-9a-f-]{36}", found["reconcileID"])
    assert re.fullmatch(r"[0-9.]+(ns|µs|ms|s)", found["duration"])
    assert sorted(found["Pods"].split(", ")) == sorted(
        arm64.kubectl("get", "pods", "-n", "workshop", "-o",
                      "jsonpath={range .items[*]}workshop/{.metadata.name}{\"\\n\"}{end}").stdout.split())
    assert (computed["nodeclaims"], computed["pods"]) == (2, 4)
    # the instance types by name, the first five, then how many more: the workshop's own lines
    by_cpu = {c["requests"]["cpu"]: c for c in created}
    assert by_cpu["1350m"]["instance-types"] == ("Standard_D2pds_v5, Standard_D2pds_v6, Standard_D2plds_v5, "
                                                 "Standard_D2plds_v6, Standard_D2pls_v5 and 11 other(s)")
    assert by_cpu["3350m"]["instance-types"] == ("Standard_D4pds_v5, Standard_D4pds_v6, Standard_D4plds_v5, "
                                                 "Standard_D4plds_v6, Standard_D4pls_v5 and 3 other(s)")
    assert by_cpu["1350m"]["requests"] == {"cpu": "1350m", "memory": "570Mi", "pods": "7"}
    assert by_cpu["1350m"]["NodePool"] == {"name": "default-demo"}
    claims = set(arm64.kubectl("get", "nodeclaims", "-o", "name").stdout.split())
    assert {f"nodeclaim.karpenter.sh/{c['NodeClaim']['name']}" for c in created} <= claims
    assert "reason" not in created[0]


def test_karpenter_is_a_deployment_and_a_running_pod_that_no_simulated_node_holds(arm64):
    _seed_lines(arm64)
    dep = json.loads(arm64.kubectl("get", "deployment", "karpenter", "-n", "karpenter", "-o", "json").stdout)
    assert dep["status"].get("readyReplicas") == 1
    pods = json.loads(arm64.kubectl("get", "pods", "-n", "karpenter", "-l", "app.kubernetes.io/name=karpenter",
                                    "-o", "json").stdout)["items"]
    assert len(pods) == 1
    pod = pods[0]
    assert pod["status"]["phase"] == "Running"
    assert pod["spec"]["nodeName"] == "karpy-sandbox-control-plane"
    nodes = arm64.kubectl("get", "nodes", "-o", "name").stdout.split()
    assert "node/karpy-sandbox-control-plane" not in nodes
    # Karpenter made room for the workshop's four pods only: two NodeClaims, nothing for its own pod
    assert len(arm64.kubectl("get", "nodeclaims", "-o", "name").stdout.split()) == 2
    # and kubectl reaches it through its Deployment too
    out = arm64.kubectl("logs", "-n", "karpenter", "deployment/karpenter", "--tail=1").stdout
    assert len(_records(out)) == 1


def test_follow_prints_lines_written_after_it_started_and_stops_with_kubectl(arm64):
    binary = kubectl_binary()
    if binary is None:
        pytest.skip("kubectl is not installed")
    before = {r["NodeClaim"]["name"] for r in _seed_lines(arm64) if r["message"] == "created nodeclaim"}
    proc = subprocess.Popen([binary, *SEED, "-f"], env=arm64.env, cwd=arm64.tmp, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)  # kubectl has listed the pod and is following its log
        arm64.kubectl("scale", "deployment", "inflate", "-n", "workshop", "--replicas=8")
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            lines.append(line)
            rec = json.loads(line)
            if rec["message"] == "created nodeclaim" and rec["NodeClaim"]["name"] not in before:
                break
        assert proc.poll() is None  # still following
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    recs = _records("".join(lines))
    # what was there when it started (--since=3m), then the decision the scale-up brought
    assert {r["NodeClaim"]["name"] for r in recs if r["message"] == "created nodeclaim"} - before
    assert [r["message"] for r in recs].count("found provisionable pod(s)") >= 2


def test_tail_timestamps_limit_bytes_since_and_container(arm64):
    recs = _seed_lines(arm64)
    pod = _pod(arm64)
    last = arm64.kubectl("logs", "-n", "karpenter", pod, "--tail=1", "--timestamps").stdout
    assert last.count("\n") == 1
    stamp, _, line = last.partition(" ")
    rec = json.loads(line)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z", stamp)
    assert stamp[:23] == rec["time"][:23] or stamp[:19] == rec["time"][:19]
    assert arm64.kubectl("logs", "-n", "karpenter", pod, "--limit-bytes=10").stdout == '{"level":"'
    assert arm64.kubectl("logs", "-n", "karpenter", pod, "-c", "controller", "--tail=0").stdout == ""
    # --since-time: the lines written from that second on, exactly (the sandbox's clock, as the lines' time)
    every = wait_for(lambda: (lambda rs: rs if len({r["time"][:19] for r in rs}) >= 2 else None)(
        _records(arm64.kubectl("logs", "-n", "karpenter", pod, "-c", "controller").stdout)),
        60, 0.5, "lines of two seconds (the nodes registered)")
    assert len(every) >= len(recs)
    seconds = sorted({r["time"][:19] for r in every})
    cut = seconds[1]
    since = _records(arm64.kubectl("logs", "-n", "karpenter", pod, f"--since-time={cut}Z").stdout)
    kept = [r for r in every if r["time"][:19] >= cut]
    assert since[:len(kept)] == kept and all(r["time"][:19] >= cut for r in since)  # (and what came since)
    assert arm64.kubectl("logs", "-n", "karpenter", pod, "--since=1h").stdout.count("\n") >= len(every)
    wrong = arm64.kubectl("logs", "-n", "karpenter", pod, "-c", "nope", check=False)
    assert wrong.returncode != 0 and "container nope is not valid for pod" in wrong.stderr
    # the workloads' simulated containers write nothing
    assert arm64.kubectl("logs", "-n", "workshop", "deployment/inflate").stdout == ""


def _status(box: RunningSandbox, path: str) -> tuple[int, dict]:
    try:
        with box.urlopen(path) as r:
            return r.status, {}
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.parametrize("query, code, message", [
    ("container=nope", 400, "container nope is not valid for pod {pod}"),
    ("tailLines=-1", 422, 'PodLogOptions "{pod}" is invalid: tailLines: Invalid value: -1: must be greater than or '
                          'equal to 0'),
    ("limitBytes=0&sinceSeconds=0", 422, 'PodLogOptions "{pod}" is invalid: [limitBytes: Invalid value: 0: must be '
                                         'greater than 0, sinceSeconds: Invalid value: 0: must be greater than 0]'),
    ("sinceSeconds=5&sinceTime=2025-01-01T00:00:00Z", 422,
     'PodLogOptions "{pod}" is invalid: : Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified'),
    ("tailLines=ten", 400, 'strconv.ParseInt: parsing "ten": invalid syntax'),
    ("previous=true", 400, 'previous terminated container "controller" in pod "{pod}" not found'),
])
def test_bad_options_answer_kube_apiservers_status(arm64, query, code, message):
    pod = _pod(arm64)
    got, status = _status(arm64, f"/api/v1/namespaces/karpenter/pods/{pod}/log?{query}")
    assert got == code
    assert status["kind"] == "Status" and status["code"] == code
    assert status["reason"] == ("BadRequest" if code == 400 else "Invalid")
    assert status["message"] == message.format(pod=pod)
    if code == 422:
        assert status["details"]["kind"] == "PodLogOptions" and status["details"]["causes"]


def test_log_of_a_missing_pod_is_404_and_other_verbs_405(arm64):
    got, status = _status(arm64, "/api/v1/namespaces/karpenter/pods/absent/log")
    assert (got, status["reason"], status["message"]) == (404, "NotFound", 'pods "absent" not found')
    discovery = arm64.get_json("/api/v1")["resources"]
    assert {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]} in discovery


def test_no_karpenter_no_karpenter_pod(bare):
    assert bare.kubectl("get", "pods", "-n", "karpenter", "-o", "name").stdout == ""


def test_karpenter_namespace_is_configurable_and_checked(tmp_path):
    box = RunningSandbox(tmp_path, ["--karpenter-namespace", "kube-system", "--speed", "10"])
    try:
        out = box.kubectl("get", "deploy", "-n", "kube-system", "-l", "app.kubernetes.io/name=karpenter", "-o",
                          "name").stdout
        assert out.split() == ["deployment.apps/karpenter"]
        wait_for(lambda: box.kubectl("logs", "-n", "kube-system", "deploy/karpenter", check=False).returncode == 0,
                 what="the pod's log")
    finally:
        assert box.stop() == 0
    from karpy.cli import main

    from click.testing import CliRunner
    res = CliRunner().invoke(main, ["sandbox", "--karpenter-namespace", "Not_A_Label"])
    assert res.exit_code == 2 and "--karpenter-namespace: Invalid value" in res.output


# --- the lines and the buffer, without a server -----------------------------------------------------
def test_lines_are_compact_json_with_upstreams_keys_in_order():
    clock = SimClock(1746003958.5281)
    buf = LogBuffer()
    heard: list[dict] = []
    log = Logger(clock, buffer=buf)
    log.listeners.append(heard.append)
    with log.reconcile("provisioner"):
        log.info("created nodeclaim", controller="provisioner", unlogged={"reason": "provisioning"},
                 NodePool={"name": "default"})
        log.info("other", controller="disruption")
    log.info("outside", controller="provisioner")
    lines, nxt = buf.lines()
    assert nxt == 3
    first = lines[0][2].decode()
    assert first.startswith('{"level":"INFO","time":"2025-04-30T09:05:58.528Z","logger":"controller",'
                            '"message":"created nodeclaim","commit":')
    rec = json.loads(first)
    assert list(rec) == KEYS + ["NodePool"] and "reason" not in rec
    assert heard[0]["reason"] == "provisioning"  # the listeners (karpy controller's metrics) still read it
    assert "reconcileID" not in json.loads(lines[1][2]) and "reconcileID" not in json.loads(lines[2][2])


def test_buffer_is_bounded_in_bytes_and_followers_resume_by_sequence():
    buf = LogBuffer(max_bytes=100)
    for i in range(50):
        buf.append(float(i), b"x" * 9 + b"\n")
    lines, nxt = buf.lines()
    assert nxt == 50 and sum(len(e[2]) for e in lines) <= 100 and lines[-1][0] == 49 and len(lines) == 10
    assert buf.after(nxt, 0.01) == ([], 50)
    buf.append(50.0, b"y\n")
    got, nxt = buf.after(50, 0.01)
    assert [e[2] for e in got] == [b"y\n"] and nxt == 51


def test_formats():
    assert go_duration(0.017375028) == "17.375028ms"
    assert go_duration(1.5) == "1.5s" and go_duration(123.5) == "2m3.5s" and go_duration(0) == "0s"
    assert go_duration(0.0000015) == "1.5µs" and go_duration(3600) == "1h0m0s"
    assert iso_millis(1746003958.5281) == "2025-04-30T09:05:58.528Z"
    assert rfc3339_nano(1746003958.5) == "2025-04-30T09:05:58.5Z" and rfc3339_nano(1746003958.0) == "2025-04-30T09:05:58Z"
    assert pretty_slice(list("abcdefg"), 5) == "a, b, c, d, e and 2 other(s)" and pretty_slice(["a"], 5) == "a"
