"""Upstream behaviours that need objects of a real cluster (docs/conformance.md rows once n/a for the simulated world).

``karpy controller`` runs karpy's controllers against a real API server, where NodeClaims of another Karpenter,
NodeClaims that lost a label, Services, VolumeAttachments, CSINodes, nodes tainted by the node lifecycle controller
and pods deleted with a grace period all arise. Each test creates such objects through the in-memory API the
controllers read (tests/controllers/harness.py), runs one controller, and asserts what upstream's It body asserts.
"""

from __future__ import annotations

import pytest

from controllers.harness import Harness, cond, deleting, nodepool, pod

DISRUPTION = "nodeclaim.disruption"
EXPIRATION = "nodeclaim.expiration"
IT = "c-4x-amd64-linux"
UNMANAGED_REF = {"group": "karpenter.test.sh", "kind": "UnmanagedNodeClass", "name": "default"}
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


@pytest.fixture
def h() -> Harness:
    return Harness()


def _unmanaged_claim(h: Harness, **np_kw) -> str:
    """A launched, initialized NodeClaim of the ``default`` NodePool whose nodeClassRef names a NodeClass kind this
    Karpenter's cloud provider does not support (another Karpenter's NodeClaim)."""
    m = h.nodeclaim(instance_types=[IT], labels={INSTANCE_TYPE_LABEL: IT})
    m["spec"]["nodeClassRef"] = dict(UNMANAGED_REF)
    name = h.create_one(m)["metadata"]["name"]
    t = "2026-01-01T00:00:00Z"
    h.patch("NodeClaim", name, {"status": {"providerID": "test://other/1", "conditions": [
        {"type": t_, "status": "True", "reason": t_, "lastTransitionTime": t}
        for t_ in ("Launched", "Registered", "Initialized")]}}, subresource="status")
    return name


# --- NodeClaims not managed by this Karpenter ------------------------------------------------------------


def test_drift_is_not_marked_on_a_nodeclaim_of_another_karpenter(h):
    """nodeclaim/disruption/drift_test.go Entry("should ignore drift for NodeClaims not managed by this instance of
    Karpenter"): the NodePool's template changed, so its own NodeClaim drifts, the unmanaged one does not."""
    h.setup(nodepool(labels={"team": "a"}))
    own, _ = h.launch_node(instance_types=[IT])
    other = _unmanaged_claim(h)
    h.patch("NodePool", "default", {"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}})
    for name in (own["metadata"]["name"], other):
        h.reconcile(DISRUPTION, name)
    assert cond(h.get("NodeClaim", own["metadata"]["name"]), "Drifted")["status"] == "True"
    assert cond(h.get("NodeClaim", other), "Drifted") is None


def test_consolidatable_is_not_marked_on_a_nodeclaim_of_another_karpenter(h):
    """nodeclaim/disruption/consolidation_test.go It("should ignore NodeClaims not managed by this instance of
    Karpenter"): consolidateAfter passes after the last pod event and the condition stays unknown (absent)."""
    h.setup(nodepool(consolidate_after="30s"))
    other = _unmanaged_claim(h)
    h.patch("NodeClaim", other, {"status": {"lastPodEventTime": "2026-01-01T00:00:00Z"}}, subresource="status")
    h.reconcile(DISRUPTION, other)
    assert cond(h.get("NodeClaim", other), "Consolidatable") is None
    h.tick(60)
    h.reconcile(DISRUPTION, other)
    assert cond(h.get("NodeClaim", other), "Consolidatable") is None
    own, _ = h.launch_node(instance_types=[IT])  # the same NodePool's own NodeClaim does turn consolidatable
    h.tick(60)
    h.reconcile(DISRUPTION, own["metadata"]["name"])
    assert cond(h.get("NodeClaim", own["metadata"]["name"]), "Consolidatable")["status"] == "True"


def test_an_expired_nodeclaim_of_another_karpenter_is_kept(h):
    """nodeclaim/expiration/suite_test.go Entry("should ignore expired NodeClaims that are not managed by this
    Karpenter instance"): expireAfter 30s, 60 s later the managed NodeClaim is deleted, the unmanaged one kept."""
    h.setup(nodepool(expire_after="30s"))
    own, _ = h.launch_node(instance_types=[IT])
    other = _unmanaged_claim(h)
    assert h.get("NodeClaim", other)["spec"]["expireAfter"] == "30s"
    h.tick(60)
    h.reconcile(EXPIRATION, own["metadata"]["name"])
    h.reconcile(EXPIRATION, other)
    assert deleting(h.get("NodeClaim", own["metadata"]["name"]))
    assert not deleting(h.get("NodeClaim", other))
    assert h.events("Expired", involved=other) == []


# --- a NodeClaim without its instance-type label ----------------------------------------------------------


def test_a_nodeclaim_without_the_instance_type_label_drifts_once_an_hour_old(h):
    """nodeclaim/disruption/drift_test.go It("should detect stale instance type drift if the instance type label
    doesn't exist"): two hours after creation the NodeClaim is Drifted (InstanceTypeNotFound); within its first hour
    the instance type is not checked, as upstream."""
    h.setup()
    c, _ = h.launch_node(instance_types=[IT])
    name = c["metadata"]["name"]
    h.patch("NodeClaim", name, {"metadata": {"labels": {INSTANCE_TYPE_LABEL: None}}})
    assert INSTANCE_TYPE_LABEL not in h.get("NodeClaim", name)["metadata"]["labels"]
    h.reconcile(DISRUPTION, name)
    assert cond(h.get("NodeClaim", name), "Drifted") is None
    h.tick(2 * 3600)
    h.reconcile(DISRUPTION, name)
    drifted = cond(h.get("NodeClaim", name), "Drifted")
    assert drifted["status"] == "True" and drifted["reason"] == "InstanceTypeNotFound"


# --- pods deleted with a grace period, and pods whose kubelet never finishes them --------------------------

TERMINATION = "node.termination"
HOLD = "example.com/hold"  # a finalizer that keeps a deleted pod terminating, as a real kubelet would while it stops
RS_OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": True}


def _deleting_node(h: Harness, **np_kw) -> tuple[str, str]:
    """A NodeClaim and its Node, the NodeClaim deleted (the lifecycle controller stamped its deadline and deleted the
    Node): (claim name, node name)."""
    h.setup(nodepool(**np_kw))
    c, n = h.launch_node(instance_types=[IT])
    return c["metadata"]["name"], n["metadata"]["name"]


def _held_pod_on(h: Harness, node: str, name: str, **kw) -> dict:
    """A running pod on ``node`` that a finalizer keeps while it terminates."""
    m = pod(name=name, owner=RS_OWNER, **kw)
    m["metadata"]["finalizers"] = [HOLD]
    return h.bind(h.create_one(m), node)


def _start_termination(h: Harness, claim: str) -> None:
    h.delete("NodeClaim", claim)
    h.reconcile("nodeclaim.lifecycle", claim)


def test_a_pod_stuck_terminating_past_its_grace_period_does_not_hold_the_node(h):
    """node/termination/suite_test.go It("should bypass pods which are stuck terminating past their grace period"):
    the evicted pod stays terminating (its kubelet never finishes it); the node waits, then a minute past the pod's
    deletionTimestamp it no longer does and is deleted."""
    claim, node = _deleting_node(h)
    _held_pod_on(h, node, "stuck")
    _start_termination(h, claim)
    from karpy.controllers.termination import MIN_DRAIN_TIME
    assert h.reconcile(TERMINATION, node) is not None  # evicts the pod, which stays terminating
    p = h.get("Pod", "stuck", "default")
    assert p["metadata"].get("deletionTimestamp")
    h.tick(2 * MIN_DRAIN_TIME)
    assert h.reconcile(TERMINATION, node) is not None
    assert h.get("Node", node) is not None  # still waiting on the pod within its grace period
    h.tick(90)
    for _ in range(3):
        h.reconcile(TERMINATION, node)
    assert h.get("Node", node) is None
    assert h.get("Pod", "stuck", "default") is not None  # left to whoever holds it


def test_a_terminating_pod_past_the_nodes_deadline_is_deleted_again_with_the_time_left(h):
    """node/termination/suite_test.go It("should update deletion timestamp for terminating pods when it is after node
    deletion timestamp"): terminationGracePeriod 300 s; a do-not-disrupt pod already terminating with a 6000 s grace
    period gets, 90 s into the node's termination, a new delete with the ~210 s left."""
    from karpy.kube.times import parse_time

    claim, node = _deleting_node(h, termination_grace_period="300s")
    _held_pod_on(h, node, "slow", annotations={"karpenter.sh/do-not-disrupt": "true"},
                 terminationGracePeriodSeconds=6000)
    t0 = h.now()
    h.delete("Pod", "slow", "default")
    before = h.get("Pod", "slow", "default")["metadata"]
    assert before["deletionGracePeriodSeconds"] == 6000
    _start_termination(h, claim)
    h.tick(90)
    h.reconcile(TERMINATION, node)
    after = h.get("Pod", "slow", "default")["metadata"]
    assert h.get("Node", node) is not None
    assert after["deletionGracePeriodSeconds"] == pytest.approx(210, abs=15)
    assert parse_time(after["deletionTimestamp"]) == pytest.approx(t0 + 300, abs=15)


def test_a_pod_deleted_past_the_nodes_deadline_gets_a_one_second_grace_period(h):
    """node/termination/terminator/suite_test.go It("should clamp gracePeriodSeconds to >= 1 when nodeTerminationTime
    is in the past"): the node's deadline an hour ago; the pod is deleted with 1 s of grace (not 0, which would remove
    it from etcd at once), said in the Disrupted event, and is terminating."""
    from karpy.controllers.lifecycle import TERMINATION_TIMESTAMP
    from karpy.kube.times import fmt_time

    claim, node = _deleting_node(h, termination_grace_period="300s")
    _held_pod_on(h, node, "late", terminationGracePeriodSeconds=120)
    _start_termination(h, claim)
    h.patch("NodeClaim", claim, {"metadata": {"annotations": {TERMINATION_TIMESTAMP: fmt_time(h.now() - 3600)}}})
    h.reconcile(TERMINATION, node)
    (ev,) = h.events("Disrupted", involved="late")
    assert "granted 1 seconds of grace-period" in ev["message"]
    p = h.get("Pod", "late", "default")
    assert p["metadata"].get("deletionTimestamp") and p["metadata"]["deletionGracePeriodSeconds"] == 1


# --- VolumeAttachments hold a terminating node until the attach-detach controller deletes them --------------


def _attachment(node: str, pv: str) -> dict:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": f"va-{pv}"},
            "spec": {"attacher": "csi.example.com", "nodeName": node, "source": {"persistentVolumeName": pv}}}


def _volumes_detached(h: Harness, claim: str) -> tuple[str, str] | None:
    c = cond(h.get("NodeClaim", claim), "VolumesDetached")
    return None if c is None else (c["status"], c["reason"])


def _drain_done(h: Harness, claim: str, node: str) -> None:
    from karpy.controllers.termination import MIN_DRAIN_TIME

    _start_termination(h, claim)
    assert h.reconcile(TERMINATION, node) is not None  # taint, start the drain
    h.tick(2 * MIN_DRAIN_TIME)
    assert h.reconcile(TERMINATION, node) is not None  # drained; volume detachment awaited


def _finish(h: Harness, node: str) -> None:
    for _ in range(3):  # instance termination initiated, then found gone
        h.reconcile(TERMINATION, node)


def test_a_terminating_node_waits_for_its_volume_attachments(h):
    """node/termination/suite_test.go It("should wait for volume attachments"): VolumesDetached is Unknown
    (AwaitingVolumeDetachment) and the node stays while the VolumeAttachment exists; once it is deleted the condition is
    True and the node goes."""
    claim, node = _deleting_node(h)
    h.create(_attachment(node, "foo"))
    _drain_done(h, claim, node)
    assert h.get("Node", node) is not None
    assert _volumes_detached(h, claim) == ("Unknown", "AwaitingVolumeDetachment")
    assert cond(h.get("NodeClaim", claim), "Drained")["status"] == "True"
    (ev,) = h.events("AwaitingVolumeDetachment", involved=node)
    assert ev["message"] == "Awaiting deletion of bound volumeattachments (va-foo)"
    h.tick(30)
    h.reconcile(TERMINATION, node)
    assert h.get("Node", node) is not None
    h.delete("VolumeAttachment", "va-foo")
    h.reconcile(TERMINATION, node)
    assert _volumes_detached(h, claim)[0] == "True"
    _finish(h, node)
    assert h.get("Node", node) is None


def test_only_attachments_of_drained_pods_hold_the_node(h):
    """node/termination/suite_test.go It("should only wait for volume attachments associated with drainable pods"):
    the attachment of a volume whose pod tolerates the disrupted taint (so is not drained) is not waited on."""
    claim, node = _deleting_node(h)
    h.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "pvc-bar", "namespace": "default"},
              "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "bar",
                       "resources": {"requests": {"storage": "1Gi"}}}})
    h.create(_attachment(node, "foo"), _attachment(node, "bar"))
    h.pod_on(node, name="stays", owner=RS_OWNER,
             tolerations=[{"key": "karpenter.sh/disrupted", "operator": "Exists"}],
             volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "pvc-bar"}}])
    _drain_done(h, claim, node)
    assert h.get("Node", node) is not None
    assert _volumes_detached(h, claim) == ("Unknown", "AwaitingVolumeDetachment")
    (ev,) = h.events("AwaitingVolumeDetachment", involved=node)
    assert ev["message"] == "Awaiting deletion of bound volumeattachments (va-foo)"
    h.delete("VolumeAttachment", "va-foo")
    h.reconcile(TERMINATION, node)
    assert _volumes_detached(h, claim)[0] == "True"
    _finish(h, node)
    assert h.get("Node", node) is None
    assert h.get("VolumeAttachment", "va-bar") is not None


def test_volume_attachments_are_waited_on_until_the_termination_grace_period_ends(h):
    """node/termination/suite_test.go It("should wait for volume attachments until the nodeclaim's termination grace
    period expires"): terminationGracePeriod 1m; while it runs the node waits (Unknown); five minutes later the
    condition is False (TerminationGracePeriodElapsed) and the node goes with the attachment still there."""
    claim, node = _deleting_node(h, termination_grace_period="1m")
    h.create(_attachment(node, "foo"))
    _drain_done(h, claim, node)
    assert h.get("Node", node) is not None
    assert _volumes_detached(h, claim) == ("Unknown", "AwaitingVolumeDetachment")
    h.tick(5 * 60)
    h.reconcile(TERMINATION, node)
    assert _volumes_detached(h, claim) == ("False", "TerminationGracePeriodElapsed")
    _finish(h, node)
    assert h.get("Node", node) is None
    assert h.get("VolumeAttachment", "va-foo") is not None


# --- default topology spread: selectors deduced from Services -----------------------------------------------

ZONE_DEFAULT = {"topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "maxSkew": 1}


def _api():
    from karpy.kube.memory import MemoryAPI
    from karpy.runtime.clock import SimClock

    return MemoryAPI(SimClock(0.0))


def _service(api, selector, name=None, namespace="default") -> dict:
    spec: dict = {"ports": [{"port": 80}]}
    if selector is not None:
        spec["selector"] = dict(selector)
    return api.create({"apiVersion": "v1", "kind": "Service",
                       "metadata": {"name": name or f"svc-{len(api.list('Service')[0])}", "namespace": namespace},
                       "spec": spec})


def _owner(api, kind: str, name: str, selector) -> dict:
    api_version = "v1" if kind == "ReplicationController" else "apps/v1"
    labels = dict(selector)
    if kind != "ReplicationController":
        selector = {"matchLabels": dict(selector)}
    obj = api.create({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": "default"},
                      "spec": {"replicas": 1, "selector": selector,
                               "template": {"metadata": {"labels": labels},
                                            "spec": {"containers": [{"name": "c", "image": "app:1"}]}}}})
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": obj["metadata"]["uid"], "controller": True}


def _deduce(api, labels: dict, *owners: dict):
    """The selector the default zone constraint carries on the pod as karpy's schedulers compile it (the injector
    as ``karpy simulate`` and the sandbox wire it, reading the API): (matchLabels, sorted expressions), or None
    when the pod is not defaulted."""
    from karpy.simulator.sim import default_spread_from_api
    from karpy.state.pods import PodCompiler

    c = PodCompiler()
    c.default_spread = default_spread_from_api([ZONE_DEFAULT], api)
    p = {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "p", "namespace": "default", "uid": "p-uid", "labels": dict(labels),
                      "ownerReferences": list(owners)},
         "spec": {"containers": [{"name": "c", "image": "app:1", "resources": {"requests": {"cpu": "100m"}}}]}}
    info = c.compile(p)
    if not info.spread:
        return None
    (sc,) = info.spread
    return dict(sc.selector.match_labels), sorted((k, op, tuple(v)) for k, op, v in sc.selector.expressions)


def _selects(api, labels: dict, pod_labels: dict, *owners: dict) -> bool:
    from karpy.simulator.sim import default_spread_from_api
    from karpy.state.pods import PodCompiler

    c = PodCompiler()
    c.default_spread = default_spread_from_api([ZONE_DEFAULT], api)
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q", "namespace": "default", "uid": "q-uid",
                                                        "labels": dict(labels), "ownerReferences": list(owners)},
         "spec": {"containers": [{"name": "c", "image": "app:1"}]}}
    (sc,) = c.compile(p).spread
    return sc.selector.matches(pod_labels)


def test_a_matching_service_gives_its_selector():
    """defaultconstraints_test.go It("should deduce a selector from a matching service"): equality labels only."""
    api = _api()
    _service(api, {"app": "web"})
    assert _deduce(api, {"app": "web", "extra": "ignored"}) == ({"app": "web"}, [])


def test_every_matching_services_selector_is_merged():
    """defaultconstraints_test.go It("should merge the selectors of every matching service")."""
    api = _api()
    _service(api, {"app": "web"})
    _service(api, {"tier": "frontend"})
    assert _deduce(api, {"app": "web", "tier": "frontend"}) == ({"app": "web", "tier": "frontend"}, [])


def test_a_service_that_does_not_match_gives_nothing():
    """defaultconstraints_test.go It("should not deduce a selector from a non-matching service")."""
    api = _api()
    _service(api, {"app": "other"})
    assert _deduce(api, {"app": "web"}) is None


def test_a_service_without_a_selector_is_skipped():
    """defaultconstraints_test.go It("should skip a service with a nil selector")."""
    api = _api()
    _service(api, None)
    assert _deduce(api, {"app": "web"}) is None


def test_a_service_with_an_empty_selector_contributes_nothing():
    """defaultconstraints_test.go It("should contribute nothing for a service with an empty selector")."""
    api = _api()
    _service(api, {})
    assert _deduce(api, {"app": "web"}) is None


def test_a_matching_service_of_another_namespace_is_ignored():
    """defaultconstraints_test.go It("should ignore a matching service in another namespace")."""
    api = _api()
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    _service(api, {"app": "web"}, namespace="other")
    assert _deduce(api, {"app": "web"}) is None


def test_a_service_selector_is_combined_with_the_owners():
    """defaultconstraints_test.go It("should combine a service selector with the owner's"): the Service gives
    matchLabels, the ReplicaSet matchExpressions."""
    api = _api()
    rs = _owner(api, "ReplicaSet", "web", {"app": "web", "pod-template-hash": "abc123"})
    _service(api, {"tier": "frontend"})
    assert _deduce(api, {"app": "web", "pod-template-hash": "abc123", "tier": "frontend"}, rs) == (
        {"tier": "frontend"}, [("app", "In", ("web",)), ("pod-template-hash", "In", ("abc123",))])


def test_a_replication_controllers_selector_overwrites_a_conflicting_service_label():
    """defaultconstraints_test.go It("should let a ReplicationController's selector overwrite a conflicting service
    label"): labels merged, the controller's value wins, so the selector still selects its pods."""
    api = _api()
    rc = _owner(api, "ReplicationController", "legacy", {"app": "legacy"})
    _service(api, {"app": "web"})
    assert _deduce(api, {"app": "web"}, rc) == ({"app": "legacy"}, [])


def test_a_replicasets_conflicting_selector_is_anded_and_selects_nothing():
    """defaultconstraints_test.go It("should AND a ReplicaSet's conflicting selector, selecting nothing")."""
    api = _api()
    rs = _owner(api, "ReplicaSet", "rs", {"app": "other"})
    _service(api, {"app": "web"})
    assert _deduce(api, {"app": "web"}, rs) == ({"app": "web"}, [("app", "In", ("other",))])
    assert not _selects(api, {"app": "web"}, {"app": "web"}, rs)
    assert not _selects(api, {"app": "web"}, {"app": "other"}, rs)


def _pods_per_zone(h: Harness) -> list[int]:
    out: dict[str, int] = {}
    for c in h.nodeclaims():
        zone = ",".join(next(r["values"] for r in c["spec"]["requirements"] if r["key"] == "topology.kubernetes.io/zone"))
        out[zone] = out.get(zone, 0) + int(c["spec"]["resources"]["requests"]["pods"])
    return sorted(out.values())


@pytest.mark.parametrize("with_service", [True, False])
def test_a_service_gives_a_job_pod_the_default_spread(h, with_service):
    """topology_test.go It("should deduce a selector from a matching service for a pod with no supported owner"): four
    pods of a Job (an owner kube-scheduler deduces nothing from) that a Service selects spread 1/1/2 over three zones;
    without the Service they get no default and share one NodeClaim."""
    from karpy.simulator.sim import default_spread_from_api

    h.cluster.compiler.default_spread = default_spread_from_api([ZONE_DEFAULT], h.api)
    h.setup(nodepool(zones=("test-zone-a", "test-zone-b", "test-zone-c")))
    if with_service:
        _service(h.api, {"app": "batch"})
    job = {"apiVersion": "batch/v1", "kind": "Job", "name": "test-job", "uid": "test-job-uid", "controller": True}
    made = h.create(*(pod(f"job-{i}", cpu="1", labels={"app": "batch"}, owner=job, unschedulable=True)
                      for i in range(4)))
    for p in made:
        h.reconcile("provisioner.trigger.pod", f"default/{p['metadata']['name']}")
    h.tick(h.settings.batch_idle)
    h.reconcile("provisioner")
    assert _pods_per_zone(h) == ([1, 1, 2] if with_service else [4])
    assert len(h.nodeclaims()) == (3 if with_service else 1)


# --- nodes tainted by the node lifecycle controller while they start --------------------------------------


def _provision(h: Harness, name: str, cpu: str = "1") -> None:
    (p,) = h.create(pod(name, cpu=cpu, unschedulable=True))
    h.reconcile("provisioner.trigger.pod", f"default/{name}")
    h.tick(h.settings.batch_idle)
    h.reconcile("provisioner")


def _nominated(h: Harness, name: str) -> str | None:
    evs = h.events("Nominated", involved=name)
    return evs[-1]["message"].rsplit("/", 1)[-1] if evs else None


def _registered_node(h: Harness, first_pod: str) -> tuple[str, str]:
    """Provision a NodeClaim for ``first_pod``, launch and register it (its Node NotReady, not initialized), then
    delete the pod so that the node is empty: (claim name, node name)."""
    h.setup()
    _provision(h, first_pod)
    (c,) = h.nodeclaims()
    name = c["metadata"]["name"]
    h.launch(name)
    n = h.register(name)
    h.reconcile("nodeclaim.lifecycle", name)
    h.delete("Pod", first_pod, "default")
    return name, n["metadata"]["name"]


def _set_taints(h: Harness, node: str, taints: list[dict]) -> None:
    h.patch("Node", node, {"spec": {"taints": taints}})


def test_an_uninitialized_node_with_the_not_ready_no_execute_taint_takes_pods(h):
    """suite_test.go It("should assume pod will schedule to a node with ephemeral taint
    node.kubernetes.io/not-ready:NoExecute when the node is uninitialized"): the second pod (no toleration) is
    nominated to the tainted, uninitialized node; once the node is initialized the taint counts and a third pod gets
    a NodeClaim of its own."""
    claim, node = _registered_node(h, "first")
    _set_taints(h, node, [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}])
    _provision(h, "second")
    assert _nominated(h, "second") == node
    assert len(h.nodeclaims()) == 1
    h.delete("Pod", "second", "default")
    conds = [c for c in h.get("NodeClaim", claim)["status"]["conditions"] if c["type"] != "Initialized"]
    conds.append({"type": "Initialized", "status": "True", "reason": "Initialized",
                  "lastTransitionTime": "2026-01-01T00:00:00Z"})
    h.patch("NodeClaim", claim, {"status": {"conditions": conds}}, subresource="status")
    _provision(h, "third")
    assert _nominated(h, "third") != node
    assert len(h.nodeclaims()) == 2


def test_a_node_tainted_not_ready_unreachable_and_uninitialized_by_its_cloud_is_in_flight(h):
    """suite_test.go It("should consider a tainted NotReady node as in-flight even if initialized"): a registered node
    whose NodeClaim has not initialized, labelled karpenter.sh/initialized and carrying the not-ready, unreachable and
    external-cloud-provider NoSchedule taints, takes the next pod rather than a new NodeClaim."""
    claim, node = _registered_node(h, "first")
    h.patch("Node", node, {"metadata": {"labels": {"karpenter.sh/initialized": "true"}}})
    _set_taints(h, node, [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                          {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
                          {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true",
                           "effect": "NoSchedule"}])
    _provision(h, "second")
    assert _nominated(h, "second") == node
    assert len(h.nodeclaims()) == 1


# --- a node that gains a label Karpenter did not put there ------------------------------------------------


def _daemonset(name: str, requests: dict, node_selector: dict | None = None) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "ds:1", "resources": {"requests": dict(requests)}}]}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"ds": name}},
                     "template": {"metadata": {"labels": {"ds": name}}, "spec": spec}}}


def test_an_unexpected_daemonset_pod_on_a_node_is_counted_once(h):
    """suite_test.go It("should handle unexpected daemonset pods binding to the node"): the node gains a label that
    makes a DaemonSet's pod (1 CPU, 2Gi) bind there; the node's DaemonSet requests go from 0 to 1 CPU and what is
    free from 15.9 to 14.9 CPU (never more, as a negative remaining DaemonSet overhead would give), so a 15.5-CPU pod
    gets a new NodeClaim."""
    from karpy import resources as res

    h.setup()
    ds1, _ = h.create(_daemonset("ds1", {"cpu": "1", "memory": "1Gi"}, {"my-node-label": "value"}),
                      _daemonset("ds2", {"cpu": "1m"}))
    c, n = h.launch_node(instance_types=["c-16x-amd64-linux"])
    node = n["metadata"]["name"]
    h.pod_on(node, name="initial", cpu="8")
    h.patch("Node", node, {"metadata": {"labels": {"my-node-label": "value"}}})  # set by someone else
    h.delete("Pod", "initial", "default")
    sn = h.cluster.by_node[node]

    def free_cpu() -> float:
        return (sn.allocatable().get("cpu", 0) - sn.requested.get("cpu", 0)) / 1000

    assert sn.daemon_requested.get("cpu", 0) == 0 and free_cpu() == pytest.approx(15.9)
    ds_pod = pod("ds1-pod", cpu="1", memory="2Gi", node_selector={"my-node-label": "value"},
                 owner={"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds1", "uid": ds1["metadata"]["uid"],
                        "controller": True, "blockOwnerDeletion": True})
    h.bind(h.create_one(ds_pod), node)
    assert sn.daemon_requested.get("cpu", 0) == res.parse_resource_list({"cpu": "1"})["cpu"] and free_cpu() == pytest.approx(14.9)
    _provision(h, "big", cpu="15.5")
    assert _nominated(h, "big") != node
    assert len(h.nodeclaims()) == 2


# --- CSINode volume limits --------------------------------------------------------------------------------

CSI = "fake.csi.provider"
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"


def _storage_class(name: str, provisioner: str, default: bool = False) -> dict:
    meta: dict = {"name": name}
    if default:
        meta["annotations"] = {DEFAULT_CLASS: "true"}
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": meta, "provisioner": provisioner,
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [
                {"key": "topology.kubernetes.io/zone", "values": ["test-zone-a"]}]}]}


def _pvc(name: str, storage_class: str | None) -> dict:
    spec: dict = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "default"},
            "spec": spec}


def _volume_pod(name: str, *, ephemeral_class: str | None = None, claim: str | None = None) -> dict:
    """A pending pod with a generic ephemeral volume (its template naming ``ephemeral_class`` if given) or the
    claim ``claim``."""
    if claim is not None:
        vol = {"name": "data", "persistentVolumeClaim": {"claimName": claim}}
    else:
        tspec: dict = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
        if ephemeral_class is not None:
            tspec["storageClassName"] = ephemeral_class
        vol = {"name": "tmp-ephemeral", "ephemeral": {"volumeClaimTemplate": {"spec": tspec}}}
    return pod(name, cpu="100m", unschedulable=True, volumes=[vol])


def _provision_pod(h: Harness, obj: dict) -> None:
    h.create(obj)
    h.reconcile("provisioner.trigger.pod", f"default/{obj['metadata']['name']}")
    h.tick(h.settings.batch_idle)
    h.reconcile("provisioner")


def _running_node_for(h: Harness, pod_name: str) -> str:
    """The one NodeClaim provisioned so far, launched, registered, Ready and initialized, with the pod bound to its
    Node: the Node's name."""
    (c,) = h.nodeclaims()
    name = c["metadata"]["name"]
    h.launch(name)
    node = h.register(name)["metadata"]["name"]
    h.reconcile("nodeclaim.lifecycle", name)
    h.make_ready(node)
    h.reconcile("nodeclaim.lifecycle", name)
    h.bind(h.get("Pod", pod_name, "default"), node)
    return node


def _csinode(node: str, **counts: int) -> dict:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": node},
            "spec": {"drivers": [{"name": d, "nodeID": "fake-node-id", "allocatable": {"count": c}}
                                 for d, c in counts.items()]}}


def _second_pod_lands(h: Harness, node: str, obj: dict, *pvcs: dict) -> bool:
    """Whether the second pod is nominated to ``node`` (else a new NodeClaim is opened for it)."""
    if pvcs:
        h.create(*pvcs)
    _provision_pod(h, obj)
    on_node = _nominated(h, obj["metadata"]["name"]) == node
    assert len(h.nodeclaims()) == (1 if on_node else 2)
    return on_node


@pytest.mark.parametrize("with_csinode", [True, False])
def test_a_csi_volume_limit_of_one_sends_an_ephemeral_volume_pod_to_a_new_node(h, with_csinode):
    """suite_test.go It("should launch nodes for pods with ephemeral volume using the specified storage class name"):
    the node's CSINode lets the StorageClass's driver attach one volume, which the first pod's ephemeral volume takes,
    so the second pod's goes to a new NodeClaim; another default StorageClass (limit 10) is not the one used.
    Without the CSINode the second pod shares the node."""
    h.setup()
    h.create(_storage_class("my-storage-class", CSI),
             _storage_class("default-storage-class", "other-provider", default=True))
    h.create(_pvc("first-tmp-ephemeral", "my-storage-class"))
    _provision_pod(h, _volume_pod("first", ephemeral_class="my-storage-class"))
    node = _running_node_for(h, "first")
    if with_csinode:
        h.create(_csinode(node, **{CSI: 1, "other-provider": 10}))
    lands = _second_pod_lands(h, node, _volume_pod("second", ephemeral_class="my-storage-class"),
                              _pvc("second-tmp-ephemeral", "my-storage-class"))
    assert lands is not with_csinode


def test_a_csi_volume_limit_counts_an_ephemeral_volume_of_the_default_storage_class(h):
    """suite_test.go It("should launch nodes for pods with ephemeral volume using a default storage class"): the
    volume templates name no StorageClass; their claims carry the default one, as kube-apiserver's DefaultStorageClass
    admission stores them (karpy reads the claim as stored), and its driver's limit of one sends the second pod to a
    new NodeClaim."""
    h.setup()
    h.create(_storage_class("default-storage-class", CSI, default=True))
    h.create(_pvc("first-tmp-ephemeral", "default-storage-class"))
    _provision_pod(h, _volume_pod("first"))
    node = _running_node_for(h, "first")
    h.create(_csinode(node, **{CSI: 1}))
    assert not _second_pod_lands(h, node, _volume_pod("second"), _pvc("second-tmp-ephemeral", "default-storage-class"))


def test_an_in_tree_ebs_claim_counts_against_the_ebs_csi_drivers_limit(h):
    """suite_test.go Context("CSIMigration") It("should launch nodes for pods with non-dynamic PVC using a migrated
    PVC/PV"): the StorageClass's provisioner is the in-tree kubernetes.io/aws-ebs; its claims count against the
    ebs.csi.aws.com limit of the node's CSINode (one), so a second pod with its own claim gets a new NodeClaim."""
    h.setup()
    h.create(_storage_class("in-tree-storage-class", "kubernetes.io/aws-ebs", default=True), _pvc("pvc-1", "in-tree-storage-class"))
    _provision_pod(h, _volume_pod("first", claim="pvc-1"))
    node = _running_node_for(h, "first")
    h.create(_csinode(node, **{"ebs.csi.aws.com": 1}),
             {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "my-volume"},
              "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                       "awsElasticBlockStore": {"volumeID": "vol-0123456789abcdef0"}}})
    assert not _second_pod_lands(h, node, _volume_pod("second", claim="pvc-2"), _pvc("pvc-2", "in-tree-storage-class"))


def test_an_in_tree_ebs_ephemeral_volume_counts_against_the_ebs_csi_drivers_limit(h):
    """suite_test.go Context("CSIMigration") It("should launch nodes for pods with ephemeral volume using a migrated
    PVC/PV"): the same with generic ephemeral volumes naming the in-tree StorageClass."""
    h.setup()
    h.create(_storage_class("in-tree-storage-class", "kubernetes.io/aws-ebs", default=True))
    h.create(_pvc("first-tmp-ephemeral", "in-tree-storage-class"))
    _provision_pod(h, _volume_pod("first", ephemeral_class="in-tree-storage-class"))
    node = _running_node_for(h, "first")
    h.create(_csinode(node, **{"ebs.csi.aws.com": 1}))
    assert not _second_pod_lands(h, node, _volume_pod("second", ephemeral_class="in-tree-storage-class"),
                                 _pvc("second-tmp-ephemeral", "in-tree-storage-class"))


def test_a_replication_controllers_selector_is_deduced_as_labels():
    """defaultconstraints_test.go It("should deduce a ReplicationController's selector"): merged into matchLabels,
    not ANDed as requirements as a ReplicaSet's are."""
    api = _api()
    rc = _owner(api, "ReplicationController", "legacy", {"app": "legacy"})
    assert _deduce(api, {"app": "legacy"}, rc) == ({"app": "legacy"}, [])


def test_a_nodeclaim_of_a_nodeclass_kind_the_provider_does_not_launch_is_not_expired(h):
    """The managed check is the cloud provider's (upstream's GetSupportedNodeClasses): with the provider launching
    EC2NodeClasses only, an expired KWOKNodeClass NodeClaim is another Karpenter's and is kept; once the provider
    launches KWOKNodeClasses again it is expired."""
    h.setup(nodepool(expire_after="30s"))
    c, _ = h.launch_node(instance_types=[IT])
    name = c["metadata"]["name"]
    h.tick(60)
    h.provider.kinds = ("EC2NodeClass",)
    h.reconcile(EXPIRATION, name)
    assert not deleting(h.get("NodeClaim", name))
    h.provider.kinds = None
    h.reconcile(EXPIRATION, name)
    assert deleting(h.get("NodeClaim", name))
