"""Upstream rows whose input reaches ``karpy controller`` through the API server: objects deleted or replaced
under a controller between its cache and its request, NodeClaims whose NodePool or NodeClass is gone, and other
states a real cluster produces that an embedded simulation never does.

Each test drives karpy's shared controllers through the in-memory API (tests/controllers/harness.py), reconciling
one controller at a time as upstream's suites do. Where a test needs the API to answer differently from the cache,
it writes to the API without letting the cache see it, then calls the controller's reconcile directly.
"""

from __future__ import annotations

import pytest

from controllers.harness import (
    FINALIZER, Harness, cond_status, deleting, nodepool, owner_ref, pdb, pod,
)
from karpy.controllers.lifecycle import TERMINATION_TIMESTAMP
from karpy.controllers.termination import MIN_DRAIN_TIME
from karpy.kube.times import fmt_time

TERMINATION = "node.termination"
IT = "c-8x-amd64-linux"
RS_OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": True}


@pytest.fixture
def h() -> Harness:
    return Harness()


def _managed(h: Harness, **np_kw) -> tuple[str, str]:
    """A NodePool and one initialized managed node; (NodeClaim name, Node name)."""
    h.setup(nodepool(**np_kw))
    c, n = h.launch_node(instance_types=[IT])
    return c["metadata"]["name"], n["metadata"]["name"]


def _blocking_pdb(h: Harness, name: str, selector: dict) -> None:
    h.create(pdb(name, selector, max_unavailable=0))
    h.patch("PodDisruptionBudget", name, {"status": {
        "observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1,
        "expectedPods": 1}}, "default", subresource="status")


def _terminate_unseen(h: Harness, node_name: str):
    """Reconcile the termination controller without first delivering pending API changes to its cache."""
    out = h.controller(TERMINATION).reconcile(node_name)
    h.mgr.pump()
    return out


# --- node/termination/suite_test.go ------------------------------------------------------------------------------


def test_a_node_with_duplicate_nodeclaims_is_deleted_without_touching_them(h):
    """It("should delete nodes with duplicate nodeclaims"): two NodeClaims carry the Node's provider ID; neither is
    the single source of truth, so the Node is drained and released on its own and neither NodeClaim is deleted."""
    claim, name = _managed(h)
    dup = h.create_one(h.nodeclaim(name=f"{claim}-2"))
    pid = h.get("NodeClaim", claim)["status"]["providerID"]
    h.patch("NodeClaim", dup["metadata"]["name"], {"status": {"providerID": pid}}, subresource="status")
    h.delete("Node", name)
    h.reconcile(TERMINATION, name)
    h.tick(MIN_DRAIN_TIME)
    for _ in range(3):
        h.reconcile(TERMINATION, name)
    assert h.get("Node", name) is None
    for c in (claim, dup["metadata"]["name"]):
        left = h.get("NodeClaim", c)
        assert left is not None and not deleting(left)


# --- node/termination/terminator/suite_test.go -------------------------------------------------------------------


def _evictions(h: Harness, code: str) -> float:
    return h.karpenter.env.metrics.value("karpenter_pods_eviction_requests_total", {"code": code}) or 0


def _draining_behind_a_pdb(h: Harness) -> str:
    """A managed node being deleted, tainted, whose one pod a PDB holds (one eviction refused); its name."""
    _, name = _managed(h)
    _blocking_pdb(h, "hold", {"app": "hold"})
    h.pod_on(name, name="p", labels={"app": "hold"}, owner=RS_OWNER)
    h.delete("Node", name)
    h.reconcile(TERMINATION, name)
    assert _evictions(h, "429") == 1 and not deleting(h.get("Pod", "p", "default"))
    return name


def test_an_eviction_of_a_pod_already_gone_succeeds_with_no_event(h):
    """It("should succeed with no event when the pod is not found"): the pod was deleted after the cache saw it;
    the Eviction API answers 404, the drain goes on without an error or an Evicted event, and the node is released
    once the cache learns the pod is gone."""
    name = _draining_behind_a_pdb(h)
    h.api.delete("Pod", "p", "default", grace_period_seconds=0)  # the cache still holds the pod
    assert _terminate_unseen(h, name) is not None
    assert _evictions(h, "404") == 1
    assert h.events("Evicted") == [] and h.events("FailedDraining", involved="p") == []
    h.tick(MIN_DRAIN_TIME)
    for _ in range(3):
        h.reconcile(TERMINATION, name)
    assert h.get("Node", name) is None
    assert h.events("Evicted") == []


def test_an_eviction_whose_pod_uid_changed_evicts_nothing(h):
    """It("should succeed with no event when the pod UID conflicts"): the pod was replaced by a new one of the
    same name; the eviction, made with the old pod's UID as precondition, answers 409: no event, and the new pod is
    not evicted on the old pod's account. Once the cache sees the new pod it is drained in its own right."""
    name = _draining_behind_a_pdb(h)
    old = h.get("Pod", "p", "default")
    h.api.delete("Pod", "p", "default", grace_period_seconds=0)
    new = h.api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                        "spec": {"nodeName": name, "containers": [{"name": "main", "image": "registry.example.com/app:1"}]},
                        "status": {"phase": "Running"}})
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    _terminate_unseen(h, name)
    assert _evictions(h, "409") == 1
    cur = h.get("Pod", "p", "default")
    assert cur["metadata"]["uid"] == new["metadata"]["uid"] and not deleting(cur)
    assert h.events("Evicted") == []
    h.reconcile(TERMINATION, name)  # now the cache holds the new pod (no PDB selects it): it is evicted
    assert [e["involvedObject"].get("uid") for e in h.events("Evicted")] == [new["metadata"]["uid"]]


def _drained(h: Harness) -> float:
    return h.karpenter.env.metrics.value("karpenter_pods_drained_total", {"reason": "Forceful Termination"}) or 0


def test_a_force_delete_of_a_pod_already_gone_is_not_an_error(h):
    """It("should clean up the queue entry when the pod is already gone"): past the point where the pod's grace
    period fits before the node's deadline it is to be deleted, but it is already gone (404): no error, not counted
    as drained, nothing retried, and the node is released."""
    claim, name = _managed(h, termination_grace_period="5m")
    _blocking_pdb(h, "hold", {"app": "hold"})
    h.pod_on(name, name="gone", labels={"app": "hold"}, owner=RS_OWNER, terminationGracePeriodSeconds=120)
    h.delete("NodeClaim", claim)
    h.reconcile("nodeclaim.lifecycle", claim)  # stamps the deadline, deletes the Node
    h.reconcile(TERMINATION, name)  # an eviction the PDB refuses
    h.tick(185)  # the pod's 120 s no longer fit: it is to be deleted
    h.api.delete("Pod", "gone", "default", grace_period_seconds=0)  # the cache still holds it
    assert _terminate_unseen(h, name) is not None
    assert len(h.events("Disrupted", involved="gone")) == 1  # upstream announces the delete before making it
    assert _drained(h) == 0
    h.tick(MIN_DRAIN_TIME)
    for _ in range(3):
        h.reconcile(TERMINATION, name)
    assert h.get("Node", name) is None
    assert len(h.events("Disrupted", involved="gone")) == 1


def test_a_force_delete_does_not_delete_a_replacement_pod_of_the_same_name(h):
    """The force-delete carries the pod's UID as a precondition (upstream's Preconditions.UID): a pod replaced by
    one of the same name after the cache saw it is not deleted on the old pod's account."""
    claim, name = _managed(h, termination_grace_period="5m")
    _blocking_pdb(h, "hold", {"app": "hold"})
    h.pod_on(name, name="p", labels={"app": "hold"}, owner=RS_OWNER, terminationGracePeriodSeconds=120)
    h.delete("NodeClaim", claim)
    h.reconcile("nodeclaim.lifecycle", claim)
    h.reconcile(TERMINATION, name)
    h.tick(185)
    h.api.delete("Pod", "p", "default", grace_period_seconds=0)
    new = h.api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                        "spec": {"nodeName": "elsewhere", "containers": [{"name": "main", "image": "r.example.com/a:1"}]},
                        "status": {"phase": "Running"}})
    _terminate_unseen(h, name)
    cur = h.get("Pod", "p", "default")
    assert cur["metadata"]["uid"] == new["metadata"]["uid"] and not deleting(cur)
    assert _drained(h) == 0


def test_a_later_termination_deadline_does_not_loosen_an_earlier_one(h):
    """It("should keep the earlier deadline when Add is called again with a looser one"): the NodeClaim's
    termination timestamp is moved an hour later while its node drains; the earlier deadline stands, so a pod a
    PDB protects is deleted when its 120 s grace period no longer fits before it."""
    claim, name = _managed(h, termination_grace_period="5m")
    _blocking_pdb(h, "hold", {"app": "hold"})
    h.pod_on(name, name="held", labels={"app": "hold"}, owner=RS_OWNER, terminationGracePeriodSeconds=120)
    h.delete("NodeClaim", claim)
    h.reconcile("nodeclaim.lifecycle", claim)
    tight = h.now() + 300
    h.reconcile(TERMINATION, name)  # 120 s fit in 300 s: an eviction, refused by the PDB
    assert not deleting(h.get("Pod", "held", "default"))
    h.patch("NodeClaim", claim, {"metadata": {"annotations": {TERMINATION_TIMESTAMP: fmt_time(h.now() + 3600)}}})
    h.tick(185)  # 115 s before the earlier deadline
    h.reconcile(TERMINATION, name)
    held = h.get("Pod", "held", "default")
    assert held is None or deleting(held)
    msgs = [e["message"] for e in h.events("Disrupted", involved="held")]
    assert len(msgs) == 1 and fmt_time(tight) in msgs[0] and "bypasses the PDB" in msgs[0]
    assert FINALIZER in h.get("Node", name)["metadata"]["finalizers"]


# --- provider drift checks (AWS and Azure cloudprovider suites): the NodeClaim's NodePool or NodeClass is gone ----

DISRUPTION = "nodeclaim.disruption"


def _drift(h: Harness, claim: str) -> str | None:
    """Reconcile the NodeClaim disruption controller (it must not raise); the Drifted condition's reason."""
    h.reconcile(DISRUPTION, claim)
    c = h.get("NodeClaim", claim)
    if cond_status(c, "Drifted") != "True":
        return None
    return next(x["reason"] for x in c["status"]["conditions"] if x["type"] == "Drifted")


def test_a_nodeclaim_whose_nodeclass_is_gone_gets_no_nodeclass_drift(h):
    """It("should not fail if NodeClass does not exist") (AWS; Azure's two provision modes): the drift check of a
    NodeClaim whose NodeClass was deleted is made without error and finds no NodeClass drift. karpy makes the
    check in its shared NodeClaim disruption controller, before and for every cloud provider."""
    claim, _ = _managed(h)
    h.patch("NodeClaim", claim, {"metadata": {"annotations": {"karpy.dev/nodeclass-hash": "stale"}}})
    assert _drift(h, claim) == "NodeClassDrift"  # while the NodeClass is there
    h.patch("NodeClaim", claim, {"status": {"conditions": [
        c for c in h.get("NodeClaim", claim)["status"]["conditions"] if c["type"] != "Drifted"]}},
        subresource="status")
    h.delete("KWOKNodeClass", "default")
    assert h.get("KWOKNodeClass", "default") is None
    assert _drift(h, claim) is None
    assert h.get("NodeClaim", claim) is not None


def test_a_nodeclaim_whose_nodepool_is_gone_is_not_drifted(h):
    """It("should not fail if NodePool does not exist") (AWS; Azure's two provision modes): with the NodeClaim's
    NodePool deleted, the drift check is made without error and the NodeClaim is not drifted, even with a NodePool
    hash that no longer matches."""
    claim, _ = _managed(h)
    h.patch("NodeClaim", claim, {"metadata": {"annotations": {"karpenter.sh/nodepool-hash": "stale"}}})
    assert _drift(h, claim) == "NodePoolDrifted"  # while the NodePool is there
    h.patch("NodeClaim", claim, {"status": {"conditions": [
        c for c in h.get("NodeClaim", claim)["status"]["conditions"] if c["type"] != "Drifted"]}},
        subresource="status")
    h.patch("NodeClaim", claim, {"metadata": {"ownerReferences": None}})  # kept past the NodePool's deletion
    h.delete("NodePool", "default")
    assert h.get("NodePool", "default") is None
    assert _drift(h, claim) is None


def test_a_nodeclaim_without_a_provider_id_is_not_drifted(h):
    """It("should error drift if NodeClaim doesn't have provider id") (AWS; Azure's two provision modes): upstream's
    provider check errors, so no drift decision is made; karpy does not check a NodeClaim that has not launched
    (no provider ID), so it is not marked Drifted either, even with a stale NodePool hash."""
    h.setup(nodepool())
    made = h.create_one(h.nodeclaim(annotations={"karpenter.sh/nodepool-hash": "stale"}))
    name = made["metadata"]["name"]
    assert not (h.get("NodeClaim", name).get("status") or {}).get("providerID")
    assert _drift(h, name) is None


# --- provisioning/scheduling/suite_test.go: what a kubelet or another controller does to a Node -------------------

TRIGGER = "provisioner.trigger.pod"
PROVISIONER = "provisioner"


def _provision(h: Harness, *pods: dict) -> None:
    """ExpectProvisioned: pods pending, the batch window passes, the provisioner runs once."""
    for p in h.create(*pods):
        h.reconcile(TRIGGER, f"{p['metadata']['namespace']}/{p['metadata']['name']}")
    h.tick(h.settings.batch_idle)
    h.reconcile(PROVISIONER)


def test_a_startup_taint_back_on_an_initialized_node_keeps_pods_off_it(h):
    """It("should not assume pod will schedule to a node with startup taints after initialization"): once a node
    is initialized its startup taints were removed; one that comes back (re-applied by the agent that owns it) is
    an ordinary taint, so a pod that does not tolerate it gets a new NodeClaim rather than this node."""
    startup = {"key": "ignore-me", "value": "nothing-to-see-here", "effect": "NoSchedule"}
    claim, name = _managed(h, startup_taints=[startup])
    assert cond_status(h.get("NodeClaim", claim), "Initialized") == "True"
    h.patch("Node", name, {"spec": {"taints": [startup]}})
    _provision(h, pod("second", cpu="1", unschedulable=True))
    assert len(h.nodeclaims()) == 2
    assert name not in [e["message"] for e in h.events("Nominated", involved="second")][0]


GPU = "nvidia.com/gpu"


def _gpu_pod(name: str) -> dict:
    p = pod(name, cpu=None, unschedulable=True)
    p["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "10m", GPU: "1"}}
    return p


def test_extended_resources_a_kubelet_zeroes_before_initialization_count_at_the_nodeclaims_value(h):
    """It("should handle resource zeroing of extended resources by kubelet"): a GPU node registers with its kubelet
    reporting zero GPUs (the device plugin has not registered yet); until the node is initialized karpy counts the
    NodeClaim's GPUs, so a second GPU pod is placed on it and no second node is launched."""
    h.create({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
              "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r",
                       "subnetSelectorTerms": [{"tags": {"k": "v"}}],
                       "securityGroupSelectorTerms": [{"tags": {"k": "v"}}]}})
    np = nodepool(family=None, requirements=[
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g4dn.xlarge"]}])
    np["spec"]["template"]["spec"]["nodeClassRef"] = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                      "name": "default"}
    h.create(np)
    _provision(h, _gpu_pod("first"))
    (claim,) = h.nodeclaims()
    name = claim["metadata"]["name"]
    h.launch(name)
    assert h.get("NodeClaim", name)["status"]["allocatable"][GPU] == "1"
    node = h.register(name)
    # the kubelet's first status: no GPUs yet
    st = dict(node["status"])
    st["capacity"] = {**st["capacity"], GPU: "0"}
    st["allocatable"] = {**st["allocatable"], GPU: "0"}
    h.patch("Node", node["metadata"]["name"], {"status": st}, subresource="status")
    h.delete("Pod", "first", "default")
    assert cond_status(h.get("NodeClaim", name), "Initialized") != "True"
    _provision(h, _gpu_pod("second"))
    assert len(h.nodeclaims()) == 1
    assert node["metadata"]["name"] in [e["message"] for e in h.events("Nominated", involved="second")][0]


# --- provisioning/suite_test.go ----------------------------------------------------------------------------------


def test_daemonset_overhead_is_what_its_pods_ask_not_its_template(h):
    """It("should account for overhead using daemonset pod spec instead of daemonset spec"): the DaemonSet's
    template asks 4 CPUs and 4Gi, its pod (as a LimitRange or a mutating webhook left it) 2 CPUs and 2Gi; the
    overhead a new node must hold is the pod's, so a 1-CPU pod gets a smaller instance type than the template
    would need."""
    h.setup(nodepool(family=("c",)))
    ds = h.create_one({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "default"},
                       "spec": {"selector": {"matchLabels": {"ds": "agent"}},
                                "template": {"metadata": {"labels": {"ds": "agent"}}, "spec": {"containers": [
                                    {"name": "a", "image": "r.example.com/agent:1",
                                     "resources": {"requests": {"cpu": "4", "memory": "4Gi"}}}]}}}})
    ds_pod = pod("agent-x", cpu="2", memory="2Gi", labels={"ds": "agent"}, owner=owner_ref(ds))
    ds_pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["elsewhere"]}]}]}}}
    h.create(ds_pod)
    _provision(h, pod("app", cpu="1", memory="1Gi", unschedulable=True,
                      node_selector={"karpenter.sh/nodepool": "default"}))
    (claim,) = h.nodeclaims()
    launched = h.launch(claim["metadata"]["name"])
    cpus = int(launched["metadata"]["labels"]["karpenter.kwok.sh/instance-cpu"])
    assert cpus == 4  # 2 + 1 CPUs fit a 4-CPU type; the template's 4 + 1 would need 8


def test_a_nodepool_changed_during_scheduling_does_not_change_the_nodeclaims_hash(h, monkeypatch):
    """It("should not use a different NodePool hash on the NodeClaim if the NodePool changes during scheduling"):
    the NodePool gains a template label after the provisioner scheduled against it but before it creates the
    NodeClaim (the change reaches the cache in between, as an informer delivers it); the NodeClaim carries the hash
    of the NodePool it was scheduled with."""
    from karpy.disruption.drift import NODEPOOL_HASH, nodepool_hash

    h.setup(nodepool())
    before = nodepool_hash(h.get("NodePool", "default"))
    prov = h.controller(PROVISIONER)
    real = prov._apply

    def change_then_apply(*args, **kw):
        h.patch("NodePool", "default", {"spec": {"template": {"metadata": {"labels": {"new-label": "new-value"}}}}})
        assert h.cluster.nodepools["default"]["spec"]["template"]["metadata"]["labels"] == {"new-label": "new-value"}
        return real(*args, **kw)

    monkeypatch.setattr(prov, "_apply", change_then_apply)
    _provision(h, pod("p", unschedulable=True))
    (claim,) = h.nodeclaims()
    assert nodepool_hash(h.get("NodePool", "default")) != before
    assert claim["metadata"]["annotations"][NODEPOOL_HASH] == before


# --- disruption/queue_test.go ------------------------------------------------------------------------------------

QUEUE = "disruption.queue"


def test_a_replacement_gone_from_the_api_but_still_in_the_cache_is_waited_on(h):
    """It("should not return an error when the NodeClaim doesn't exist but the NodeCliam is in cluster state"): a
    drift command's replacement is deleted in the API server before the cache hears of it; the queue keeps waiting
    on it (no error, the candidate kept), and rolls the command back once the cache learns it is gone."""
    h.setup(nodepool(consolidate_after="Never"))
    c, n = h.launch_node(instance_types=[IT])
    candidate, node_name = c["metadata"]["name"], n["metadata"]["name"]
    h.pod_on(node_name, cpu="1", owner=RS_OWNER)
    h.patch("NodePool", "default", {"spec": {"template": {"metadata": {"labels": {"rev": "2"}}}}})
    h.reconcile("nodeclaim.disruption", candidate)
    h.clear_queue()
    h.reconcile("disruption")
    (running,) = h.disruption.queue.values()
    (rep,) = [x["metadata"]["name"] for x in h.nodeclaims() if x["metadata"]["name"] != candidate]
    h.launch(rep)  # launched, not initialized
    h.api.patch("NodeClaim", rep, {"metadata": {"finalizers": []}})
    h.api.delete("NodeClaim", rep)
    assert h.get("NodeClaim", rep) is None and h.cluster.by_claim.get(rep) is not None
    assert h.controller(QUEUE).reconcile(running.id) == pytest.approx(10.0)  # still waiting, no error
    assert running.id in h.disruption.queue
    assert not deleting(h.get("NodeClaim", candidate))
    h.reconcile(QUEUE, running.id)  # the cache has caught up: the replacement is gone
    assert running.id not in h.disruption.queue
    assert not deleting(h.get("NodeClaim", candidate))
    assert not any(t.get("key") == "karpenter.sh/disrupted" for t in h.get("Node", node_name)["spec"].get("taints") or ())


# --- nodeclaim/disruption/drift_test.go --------------------------------------------------------------------------


def test_a_nodepool_without_its_hash_annotation_does_not_drift_its_nodeclaims(h):
    """It("should not return drifted if karpenter.sh/nodepool-hash annotation is not present on the NodePool"): the
    NodePool's hash annotations (which karpy's NodePool controller writes) are removed; the NodeClaim, stamped with
    the NodePool's hash at launch, is not drifted."""
    from karpy.disruption.drift import NODEPOOL_HASH, NODEPOOL_HASH_VERSION

    h.setup(nodepool())
    h.reconcile("nodepool.status", "default")  # stamps the NodePool's hash annotations
    assert NODEPOOL_HASH in (h.get("NodePool", "default")["metadata"].get("annotations") or {})
    c, _ = h.launch_node(instance_types=[IT])
    claim = c["metadata"]["name"]
    h.patch("NodePool", "default", {"metadata": {"annotations": {NODEPOOL_HASH: None, NODEPOOL_HASH_VERSION: None}}})
    assert NODEPOOL_HASH not in (h.get("NodePool", "default")["metadata"].get("annotations") or {})
    assert _drift(h, claim) is None
    assert cond_status(h.get("NodeClaim", claim), "Drifted") is None


def test_a_nodeclaim_whose_launch_condition_is_false_loses_its_drifted_condition(h):
    """It("should remove the status condition from the nodeClaim when the nodeClaim launch condition is false"): a
    drifted NodeClaim whose Launched condition turns False (LaunchFailed) is no longer drifted."""
    claim, _ = _managed(h)
    h.patch("NodeClaim", claim, {"metadata": {"annotations": {"karpenter.sh/nodepool-hash": "stale"}}})
    assert _drift(h, claim) == "NodePoolDrifted"
    st = h.get("NodeClaim", claim)["status"]
    conds = [c for c in st["conditions"] if c["type"] != "Launched"]
    conds.append({"type": "Launched", "status": "False", "reason": "LaunchFailed", "message": "LaunchFailed",
                  "lastTransitionTime": fmt_time(h.now())})
    h.patch("NodeClaim", claim, {"status": {**st, "conditions": conds}}, subresource="status")
    assert _drift(h, claim) is None
    assert cond_status(h.get("NodeClaim", claim), "Drifted") is None
