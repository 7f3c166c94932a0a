"""Disruption controller rows: what one pass does when its multi-node command fails validation."""

from __future__ import annotations

import pytest

from controllers.harness import Harness, cond, cond_status, deleting, nodepool

DISRUPTION = "disruption"
QUEUE = "disruption.queue"
RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": True}
BIG = "c-16x-amd64-linux"


def _node(h: Harness, pods: int, capacity: str) -> tuple[str, str]:
    c, n = h.launch_node("default", instance_types=[BIG])
    for _ in range(pods):
        h.pod_on(n["metadata"]["name"], cpu="1", owner=RS)
    h.reconcile("nodeclaim.disruption", c["metadata"]["name"])
    return c["metadata"]["name"], n["metadata"]["name"]


@pytest.mark.parametrize("capacity", ["on-demand", "spot"])
def test_a_multi_node_command_invalidated_by_the_wait_goes_on_to_single_node_consolidation(h, capacity):
    h.settings.feature_gates["SpotToSpotConsolidation"] = True
    h.setup(nodepool(consolidate_after="0s", policy="WhenEmptyOrUnderutilized", capacity=(capacity,),
                     budgets=[{"nodes": "100%"}]))
    nodes = [_node(h, 1, capacity) for _ in range(3)]
    h.clear_queue()
    assert h.reconcile(DISRUPTION) == pytest.approx(15.0)
    first = h.disruption.validating
    assert first.method == "multi" and len(first.candidates) == 3
    # during the wait the first two nodes get busier: the three-node command no longer holds
    h.pod_on(nodes[0][1], cpu="1", owner=RS)
    h.pod_on(nodes[1][1], cpu="1", owner=RS)
    h.tick(15)
    wait = h.reconcile(DISRUPTION)
    # the same pass went on to single-node consolidation and waits for its validation
    second = h.disruption.validating
    assert second is not None and second.method == "single" and wait == pytest.approx(15.0)
    assert [c.name for c in second.candidates] == [nodes[2][1]] and second.decision == "delete"
    h.tick(15)
    h.reconcile(DISRUPTION)
    (r,) = list(h.disruption.queue.values())
    h.reconcile(QUEUE, r.id)
    assert deleting(h.get("NodeClaim", nodes[2][0]))
    assert not any(deleting(h.get("NodeClaim", c)) for c, _ in nodes[:2])


# --- the NodeClaim's disruption conditions (upstream pkg/controllers/nodeclaim/disruption/suite_test.go) ---------

NC_DISRUPTION = "nodeclaim.disruption"
IT = "c-4x-amd64-linux"


def test_a_static_nodepools_nodeclaim_drifts_but_never_becomes_consolidatable(h):
    np = nodepool(consolidate_after="30s", policy="WhenEmpty")
    np["spec"]["replicas"] = 1
    h.setup(np)
    c, _ = h.launch_node(instance_types=[IT])
    name = c["metadata"]["name"]
    h.patch("NodePool", "default", {"spec": {"template": {"metadata": {"labels": {"rev": "2"}}}}})
    h.tick(60)  # well past consolidateAfter, and the node is empty
    h.reconcile(NC_DISRUPTION, name)
    got = h.get("NodeClaim", name)
    assert cond_status(got, "Drifted") == "True"
    assert cond(got, "Consolidatable") is None


def test_drifted_and_consolidatable_are_removed_together(h):
    h.setup(nodepool(consolidate_after="0s"))
    c, _ = h.launch_node(instance_types=[IT])
    name = c["metadata"]["name"]
    h.patch("NodePool", "default", {"spec": {"template": {"metadata": {"labels": {"rev": "2"}}}}})
    h.reconcile(NC_DISRUPTION, name)
    got = h.get("NodeClaim", name)
    assert cond_status(got, "Drifted") == "True" and cond_status(got, "Consolidatable") == "True"
    # the NodePool reverts (no longer drifted) and turns consolidation off, in one change
    h.patch("NodePool", "default", {"spec": {"template": {"metadata": {"labels": {"rev": None}}},
                                             "disruption": {"consolidateAfter": "Never"}}})
    assert "rev" not in (h.get("NodePool", "default")["spec"]["template"]["metadata"].get("labels") or {})
    h.reconcile(NC_DISRUPTION, name)
    got = h.get("NodeClaim", name)
    assert cond(got, "Drifted") is None and cond(got, "Consolidatable") is None


# --- a broken NodePool elsewhere does not stop consolidation ------------------------------------------------------

BIG_NODE = "c-16x-amd64-linux"


def _broken_pool(kind: str) -> dict:
    np = nodepool("broken", consolidate_after="0s", policy="WhenEmptyOrUnderutilized")
    if kind == "no-nodeclassref":
        del np["spec"]["template"]["spec"]["nodeClassRef"]
    else:
        np["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "non-existent"
    return np


@pytest.mark.parametrize("kind", ["no-nodeclassref", "missing-nodeclass"])
def test_a_nodepool_that_cannot_launch_does_not_stop_a_delete(h, kind):
    # one instance type, so only a delete can save anything
    h.setup(nodepool(consolidate_after="0s", policy="WhenEmptyOrUnderutilized", budgets=[{"nodes": "100%"}],
                     requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [BIG_NODE]}]))
    h.create(_broken_pool(kind))
    busy = _node(h, 2, "on-demand")
    light = _node(h, 1, "on-demand")
    h.clear_queue()
    assert h.reconcile(DISRUPTION) == pytest.approx(15.0)
    h.tick(15)
    h.reconcile(DISRUPTION)
    (r,) = list(h.disruption.queue.values())
    h.reconcile(QUEUE, r.id)
    assert [c.name for c in r.command.candidates] == [light[1]] and not r.command.replacements
    assert deleting(h.get("NodeClaim", light[0])) and not deleting(h.get("NodeClaim", busy[0]))


# --- the orchestration queue (upstream pkg/controllers/disruption/queue_test.go) ----------------------------------


def test_two_commands_finish_in_the_order_their_replacements_initialize(h):
    from controllers.test_disruption import _drift, _initialize, _new_claims, _node as _busy_node, _pass, _pool

    h.setup(_pool(consolidate_after="Never", budgets=[{"nodes": "100%"}]))
    first = _busy_node(h, pods=1, cpu="10")  # too big to share a node: each drift needs a replacement
    second = _busy_node(h, pods=1, cpu="10")
    _drift(h)
    _pass(h)  # drift takes one node a pass, with no validation wait
    (r1,) = h.disruption.queue.values()
    h.launch(r1.replacements[0])  # no decision while a NodeClaim is not launched yet
    _pass(h)
    running = list(h.disruption.queue.values())
    assert len(running) == 2
    by_candidate = {r.claims[0]: r for r in running}
    assert set(by_candidate) == {first[0], second[0]}
    rep = {claim: by_candidate[claim].replacements[0] for claim, _ in (first, second)}
    assert len(_new_claims(h, first[0], second[0])) == 2
    # nothing initialized: both wait
    for claim, _ in (first, second):
        assert h.reconcile(QUEUE, by_candidate[claim].id) == pytest.approx(10.0)
    # the second command's replacement initializes first: the second command finishes, the first keeps waiting
    _initialize(h, rep[second[0]])
    assert h.reconcile(QUEUE, by_candidate[first[0]].id) == pytest.approx(10.0)
    assert h.reconcile(QUEUE, by_candidate[second[0]].id) is None
    assert deleting(h.get("NodeClaim", second[0])) and not deleting(h.get("NodeClaim", first[0]))
    assert list(h.disruption.queue) == [by_candidate[first[0]].id]
    _initialize(h, rep[first[0]])
    assert h.reconcile(QUEUE, by_candidate[first[0]].id) is None
    assert deleting(h.get("NodeClaim", first[0])) and h.disruption.queue == {}


# --- simulate scheduling (upstream pkg/controllers/disruption/suite_test.go) --------------------------------------

SS = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "ss", "uid": "ss-uid", "controller": True}


@pytest.mark.parametrize("source", ["local", "csi"])
def test_a_node_whose_pod_mounts_a_local_volume_is_replaced(h, source):
    """A local volume's hostname term is left out of the simulation (the pod is placed anew); a network volume
    pinned to the node's hostname keeps the pod, and so the node."""
    from controllers.test_disruption import _initialize, _new_claims, _pass, _pool

    h.setup(_pool())
    claim, node = h.launch_node("default", instance_types=[BIG_NODE])
    claim = claim["metadata"]["name"]
    node = node["metadata"]["name"]
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "local-vol"},
          "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "local-path",
                   **({"local": {"path": "/mnt/disks/vol1"}} if source == "local" else
                      {"csi": {"driver": "disk.example.com", "volumeHandle": "vol1"}}),
                   # this volume exists only on this node
                   "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                       {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": "data", "namespace": "default", "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
           "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-path", "volumeName": "local-vol",
                    "resources": {"requests": {"storage": "1Gi"}}}}
    sc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "local-path"},
          "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"}
    h.create(sc, pv, pvc)
    h.pod_on(node, cpu="1", owner=SS, volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}])
    h.reconcile("nodeclaim.disruption", claim)
    if source == "csi":
        assert _pass(h) == pytest.approx(10.0) and h.disruption.validating is None
        assert any("incompatible volume requirements" in e["message"]
                   for e in h.events("Unconsolidatable", involved=node))
        return
    assert _pass(h) == pytest.approx(15.0)
    h.tick(15)
    _pass(h)
    # the hostname term is left out of the simulation: the pod may move, to a cheaper replacement
    (rep,) = _new_claims(h, claim)
    _initialize(h, rep["metadata"]["name"])
    (r,) = list(h.disruption.queue.values())
    assert h.reconcile(QUEUE, r.id) is None
    assert deleting(h.get("NodeClaim", claim))
    assert [c["metadata"]["name"] for c in h.nodeclaims() if not deleting(c)] == [rep["metadata"]["name"]]


def test_a_zonal_volume_keeps_its_pods_replacement_in_the_zone(h):
    """Upstream's scheduler injects every moved pod's volume topology: a pod whose volume lives in one zone is
    only moved to a replacement in that zone."""
    from controllers.test_disruption import _new_claims, _pass, _pool

    h.setup(_pool())
    claim, node = h.launch_node("default", instance_types=[BIG_NODE])
    claim, node = claim["metadata"]["name"], node["metadata"]["name"]
    zone = h.get("Node", node)["metadata"]["labels"]["topology.kubernetes.io/zone"]
    other = next(z for z in ("test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d") if z != zone)
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "zonal"},
          "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                   "csi": {"driver": "disk.example.com", "volumeHandle": "zonal"},
                   "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                       {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}]}}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": "data", "namespace": "default", "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
           "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": "zonal",
                    "resources": {"requests": {"storage": "1Gi"}}}}
    h.create(pv, pvc)
    h.pod_on(node, cpu="1", owner=SS, volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}])
    h.reconcile("nodeclaim.disruption", claim)
    assert _pass(h) == pytest.approx(15.0)
    h.tick(15)
    _pass(h)
    (rep,) = _new_claims(h, claim)
    zones = [r for r in rep["spec"]["requirements"] if r["key"] == "topology.kubernetes.io/zone"]
    assert zones and all(r["operator"] == "In" and r["values"] == [zone] for r in zones), zones
    assert other != zone
