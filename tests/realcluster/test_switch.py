"""Switching a cluster from upstream Karpenter to karpy in place, and back, on the real control plane.

Upstream Karpenter v1.14.1's kwok build (``karpenter-kwok``, built by scripts/kube-binaries with its CRDs) runs a
KWOKNodeClass NodePool and a Deployment; it is stopped (here a process, in a cluster a Deployment scaled to 0),
and ``karpy controller --cloud-provider kwok`` starts against the same API server and upstream's CRDs, as
README "Switching from Karpenter" does with ``helm upgrade``. karpy must adopt every NodeClaim and Node as they
are: none created, deleted, drained or marked Drifted (karpy hashes NodePools under its own version and
re-stamps the NodeClaims upstream hashed), and then provision a scale-up as usual. Back again, upstream adopts
karpy's NodeClaims the same way."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from localcluster import Karpy, built_binaries, load_script, require_binaries, wait_for

from .test_controller import deployment, running

HASH_VERSION = "karpenter.sh/nodepool-hash-version"
QUIET = 25.0  # seconds watched after a switch: longer than two rounds of either controller's disruption loop

MANIFESTS = """
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: karpenter.kwok.sh/instance-cpu, operator: Lt, values: ["5"]}
      expireAfter: Never
  disruption: {consolidateAfter: Never}
"""


class Upstream:
    """Upstream Karpenter's kwok build as a process, on karpy's KWOK catalog (as scripts/differential runs it)."""

    def __init__(self, cluster, d: Path, name: str):
        binary = built_binaries()["karpenter-kwok"]
        types = d / "instance-types.json"
        if not types.exists():
            load_script("differential", "karpy_differential_switch").upstream_instance_types(types)
        lc = load_script("local-cluster", "karpy_local_cluster_switch")
        env = {**os.environ, "KUBECONFIG": cluster.kubeconfig, "SYSTEM_NAMESPACE": "kube-system",
               "LEADER_ELECTION_NAMESPACE": "kube-system", "INSTANCE_TYPES_FILE_PATH": str(types),
               "METRICS_PORT": str(lc.free_port()), "HEALTH_PROBE_PORT": str(lc.free_port()), "LOG_LEVEL": "info",
               "BATCH_IDLE_DURATION": "200ms"}
        self.log_path = d / f"{name}.log"
        with open(self.log_path, "wb") as log:
            self.p = subprocess.Popen([binary], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=d,
                                      start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return self.p.wait(5)


def is_true(obj: dict, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or ())


def fleet(api) -> dict:
    """NodeClaims and Nodes by name, with their uids: what a switch must leave as it is."""
    return {"nodeclaims": {c["metadata"]["name"]: c["metadata"]["uid"] for c in api.list("NodeClaim")[0]},
            "nodes": {n["metadata"]["name"]: n["metadata"]["uid"] for n in api.list("Node")[0]}}


def settled(api, pods: int) -> dict | None:
    """Every pod running and every NodeClaim initialized, with its Node: the fleet then."""
    claims = api.list("NodeClaim")[0]
    if len(running(api, "web")) != pods or not claims or not all(is_true(c, "Initialized") for c in claims):
        return None
    return fleet(api)


def disturbances(api) -> list[str]:
    """What a user would see as karpy (or upstream) disrupting a node: Drifted, deleting, tainted for disruption."""
    out = []
    for c in api.list("NodeClaim")[0]:
        name = c["metadata"]["name"]
        if c["metadata"].get("deletionTimestamp"):
            out.append(f"NodeClaim {name} deleting")
        for cond in (c.get("status") or {}).get("conditions") or ():
            if cond.get("type") in ("Drifted", "Disrupted") and cond.get("status") == "True":
                out.append(f"NodeClaim {name} {cond['type']} ({cond.get('reason')})")
    for n in api.list("Node")[0]:
        name = n["metadata"]["name"]
        if n["metadata"].get("deletionTimestamp"):
            out.append(f"Node {name} deleting")
        if n["spec"].get("unschedulable"):
            out.append(f"Node {name} cordoned")
        for t in n["spec"].get("taints") or ():
            if t.get("key") == "karpenter.sh/disrupted":
                out.append(f"Node {name} tainted karpenter.sh/disrupted")
    return out


def hash_version(api) -> str | None:
    return (api.get("NodePool", "default")["metadata"].get("annotations") or {}).get(HASH_VERSION)


def claims_stamped(api, version: str) -> bool:
    return all((c["metadata"].get("annotations") or {}).get(HASH_VERSION) == version
               for c in api.list("NodeClaim")[0])


def stays_the_same(api, before: dict, who: str) -> None:
    """For QUIET seconds, the fleet is ``before`` and nothing in it is disrupted."""
    deadline = time.monotonic() + QUIET
    while time.monotonic() < deadline:
        seen = disturbances(api)
        assert not seen, f"{who} disrupted nodes it adopted: {seen}"
        assert fleet(api) == before, f"{who} changed the fleet it adopted:\n{before}\n{fleet(api)}"
        time.sleep(1.0)


@pytest.fixture
def upstream_built():
    require_binaries("karpenter")  # upstream's kwok build, before a control plane is started for nothing


@pytest.fixture
def cluster(upstream_built, local_cluster):
    crds = str(Path(built_binaries()["karpenter-kwok"]).parent / "crds")
    local_cluster.kubectl("apply", "-f", crds)  # upstream's CRDs: the ones a cluster running it has
    local_cluster.kubectl("wait", "--for", "condition=Established", "--timeout", "60s", "-f", crds)
    local_cluster.kubectl("apply", "-f", "-", stdin=MANIFESTS)
    return local_cluster


def test_switch_from_upstream_karpenter_and_back_replaces_nothing(cluster, tmp_path):
    api = cluster.api()
    upstream = Upstream(cluster, tmp_path, "upstream")
    karpy = back = None
    try:
        api.create(deployment("web", 4, cpu="1500m"))
        before = wait_for(lambda: settled(api, 4), timeout=180, interval=1, what="upstream's fleet settled")
        assert len(before["nodeclaims"]) >= 2 and len(before["nodes"]) == len(before["nodeclaims"])
        assert hash_version(api) == "v3" and claims_stamped(api, "v3")  # upstream's hash version
        upstream.stop()  # as `kubectl scale deployment karpenter --replicas 0` would: SIGTERM

        # karpy over upstream's CRDs and objects, on the same leader Lease
        karpy = Karpy.controller(cluster.kubeconfig, tmp_path, "karpy", "--cloud-provider", "kwok",
                                 "--namespace", "kube-system", "--batch-idle-duration", "200ms")
        wait_for(lambda: "successfully acquired lease" in karpy.messages(), timeout=60, what="karpy leads")
        wait_for(lambda: hash_version(api) == "karpy-v1" and claims_stamped(api, "karpy-v1"), timeout=60,
                 what="karpy re-stamps the NodePool and upstream's NodeClaims")
        stays_the_same(api, before, "karpy")
        assert "created nodeclaim" not in karpy.messages()
        assert len(running(api, "web")) == 4

        # a scale-up provisions as usual, beside the adopted nodes
        api.patch("Deployment", "web", {"spec": {"replicas": 6}}, namespace="default")
        grown = wait_for(lambda: settled(api, 6), timeout=120, interval=1, what="karpy provisions the scale-up")
        assert set(before["nodeclaims"].items()) < set(grown["nodeclaims"].items())
        created = [r["NodeClaim"]["name"] for r in karpy.logs() if r.get("message") == "created nodeclaim"]
        assert created and set(created) == set(grown["nodeclaims"]) - set(before["nodeclaims"])
        assert not disturbances(api)
        assert karpy.stop() == 0
        assert "Traceback" not in karpy.stderr()

        # and back: upstream adopts karpy's NodeClaims too
        back = Upstream(cluster, tmp_path, "upstream-again")
        wait_for(lambda: hash_version(api) == "v3" and claims_stamped(api, "v3"), timeout=90,
                 what="upstream re-stamps the NodePool and karpy's NodeClaims")
        stays_the_same(api, grown, "upstream Karpenter")
        assert len(running(api, "web")) == 6
    finally:
        upstream.stop()
        if karpy is not None:
            karpy.stop()
        if back is not None:
            back.stop()
