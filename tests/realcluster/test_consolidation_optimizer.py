"""karpy's ConsolidationOptimizer gate on the real control plane: `karpy controller` on kwok, the real
kube-scheduler binding the pods, the real ReplicaSet controller re-creating the ones a re-packing evicts.

The shapes of tests/test_consolidation_optimizer.py (three Deployments of opposite CPU and memory shapes spread
over zones, scaled to about half): upstream's consolidation leaves nodes whose CPU and memory are out of step with
their types, and the re-packing replaces them with fewer. Here it is handed over with kube-scheduler's own scoring,
not the simulator's first fit: each replacement is opened alone, the pods planned on it are evicted through the
Eviction API, and the candidates go only after the last replacement."""

from __future__ import annotations

import json

from localcluster import Karpy, wait_for

from .test_controller import MANIFESTS

# test_controller's KWOKNodeClass and NodePool (amd64, on-demand), consolidating underutilized nodes 10 s after a change
DISRUPTION = {"spec": {"disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "10s",
                                      "budgets": [{"nodes": "100%"}]}}}

SHAPES = {"cpu": ("3500m", "2Gi"), "mem": ("500m", "28Gi"), "mid": ("1500m", "12Gi")}


def deployment(name: str, replicas: int) -> dict:
    cpu, mem = SHAPES[name]
    sel = {"matchLabels": {"app": name}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": sel, "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "app", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": mem}}}],
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                               "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel}]}}}}


def running(api) -> list[dict]:
    return [p for p in api.list("Pod", "default")[0] if p["spec"].get("nodeName")
            and (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def price(claim: dict) -> float:
    return float(claim["metadata"]["annotations"]["karpy.dev/price-per-hour"])


def test_a_repacking_is_handed_over_with_the_real_kube_scheduler(local_cluster, tmp_path):
    cluster = local_cluster
    cluster.install_crds()
    cluster.kubectl("apply", "-f", "-", stdin=MANIFESTS)
    cluster.kubectl("patch", "nodepool", "default", "--type", "merge", "-p", json.dumps(DISRUPTION))
    api = cluster.api()
    karpy = Karpy.controller(cluster.kubeconfig, tmp_path, "controller", "--cloud-provider", "kwok",
                             "--batch-idle-duration", "200ms", "--feature-gates", "ConsolidationOptimizer=true")
    try:
        for name in SHAPES:
            api.create(deployment(name, 12))
        wait_for(lambda: len(running(api)) == 36, timeout=180, interval=1, what="36 pods running")
        for name in SHAPES:
            cluster.kubectl("scale", "deployment", name, "--replicas=7")

        def repacked():
            logs = karpy.logs()
            started = {r["command-id"]: r for r in logs if r.get("message") == "disrupting node(s)"
                       and r.get("method") == "optimizer"}
            done = {r["command-id"] for r in logs if r.get("message") == "command succeeded"}
            return [started[i] for i in started if i in done]

        commands = wait_for(repacked, timeout=300, interval=2, what="a re-packing carried out")
        # the cluster settles: every pod running, no NodeClaim or pod on its way out
        wait_for(lambda: len(running(api)) == 21 and not any(
            c["metadata"].get("deletionTimestamp") for c in api.list("NodeClaim")[0]),
                 timeout=180, interval=1, what="21 pods running and no NodeClaim terminating")
    finally:
        code = karpy.stop()
    assert code == 0, karpy.stderr()
    assert "Traceback" not in karpy.stderr()

    first = commands[0]
    assert first["savings"] > 0 and first["replacements"]
    logs = karpy.logs()
    at = {(r["message"], r["NodeClaim"]["name"]): r["time"] for r in logs if r.get("NodeClaim")}
    # the candidates are gone; the cluster costs less than before the re-packing, by what it planned at least
    claims = {c["metadata"]["name"]: c for c in api.list("NodeClaim")[0]}
    assert not set(first["candidates"]) & set(claims)
    after = sum(price(c) for c in claims.values())
    print(f"re-packing: {len(first['candidates'])} candidates -> {len(first['replacements'])} replacements, "
          f"${first['cost-before']}/h planned -${first['savings']}/h, now ${after:.4f}/h over {len(claims)} NodeClaims")
    assert after < float(first["cost-before"])
    # the pods were moved through the Eviction API, once their replacement was initialized, and the candidates
    # were deleted only after the last eviction
    events = json.loads(cluster.kubectl("get", "events", "-n", "default", "-o", "json").stdout)["items"]
    stamp = lambda e: e.get("eventTime") or e.get("firstTimestamp")  # noqa: E731
    evicted = sorted(stamp(e) for e in events if e["reason"] == "Evicted" and e["involvedObject"]["kind"] == "Pod")
    assert evicted, "no pod was evicted by the hand-over"
    initialized = [at[("initialized nodeclaim", n)] for n in first["replacements"]]
    deleted = [at[("deleted nodeclaim", n)] for n in first["candidates"]]
    assert max(initialized)[:19] <= evicted[0][:19] and evicted[-1][:19] <= min(deleted)[:19]
    # every pod bound by the real kube-scheduler, onto the replacements among others
    scheduled = json.loads(cluster.kubectl("get", "events", "-n", "default", "--field-selector", "reason=Scheduled",
                                           "-o", "json").stdout)["items"]
    assert {e.get("reportingComponent") for e in scheduled} == {"default-scheduler"}
    nodes_of = {c["status"].get("nodeName") for n, c in claims.items() if n in first["replacements"]}
    assert {p["spec"]["nodeName"] for p in running(api)} & nodes_of
