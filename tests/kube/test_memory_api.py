"""The in-memory Kubernetes API server (karpy/kube/memory.py) against the API server's semantics.

Each test names the Kubernetes behaviour it checks: object metadata, optimistic concurrency, the status
subresource, finalizers, owner-reference garbage collection, selectors, watches (resume and 410 Gone),
patches, and the binding and eviction subresources with PodDisruptionBudgets.
"""

from __future__ import annotations

import re

import pytest

import karpy.kube.memory as memory
from karpy.kube import errors as E
from karpy.kube.memory import MemoryAPI
from karpy.kube.port import ADDED, DELETED, JSON_PATCH, MERGE_PATCH, MODIFIED, STRATEGIC_MERGE_PATCH
from karpy.kube.times import fmt_time
from karpy.runtime.clock import SimClock

T0 = 1767225600.0  # 2026-01-01T00:00:00Z


@pytest.fixture
def clock() -> SimClock:
    return SimClock(T0)


@pytest.fixture
def api(clock) -> MemoryAPI:
    return MemoryAPI(clock)


def cm(name: str, data: dict | None = None, ns: str = "default", **meta) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns, **meta},
            "data": dict(data or {"k": "v"})}


def pod(name: str, labels: dict | None = None, ns: str = "default", node: str | None = None, **meta) -> dict:
    spec: dict = {"containers": [{"name": "main", "image": "img:1"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": dict(labels or {}),
                                                            **meta}, "spec": spec}


def nodepool(name: str = "np") -> dict:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {"spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.kwok.sh",
                                                                              "kind": "KWOKNodeClass", "name": "d"}}}}}


def rv(obj: dict) -> int:
    return int(obj["metadata"]["resourceVersion"])


# --- metadata -----------------------------------------------------------------------------------


def test_create_sets_server_fields(api, clock):
    """uid, resourceVersion, creationTimestamp (from the clock), generation 1 for the kinds that have one, namespace
    defaulted."""
    clock.set(T0 + 42)
    obj = api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {}})
    m = obj["metadata"]
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-8[0-9a-f]{3}-[0-9a-f]{12}", m["uid"])
    assert m["namespace"] == "default"
    assert m["creationTimestamp"] == fmt_time(T0 + 42)
    assert "generation" not in m  # kube-apiserver gives ConfigMaps none (Pods, workloads, CRs have one)
    assert rv(obj) == int(api.resource_version)


def test_generation_only_for_the_kinds_that_have_one(api):
    pod = api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}})
    assert pod["metadata"]["generation"] == 1
    assert api.create(nodepool())["metadata"]["generation"] == 1
    lease = api.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
                        "spec": {"holderIdentity": "a"}})
    assert "generation" not in api.patch("Lease", "l", {"spec": {"holderIdentity": "b"}}, "default")["metadata"]
    _ = lease


def test_resource_version_is_one_counter_for_every_kind(api):
    """resourceVersions increase across kinds (etcd's revision); every write gets a new one."""
    a = api.create(cm("a"))
    b = api.create(nodepool())
    c = api.patch("ConfigMap", "a", {"data": {"k": "w"}}, "default")
    assert rv(a) < rv(b) < rv(c)


def test_uids_differ_for_a_recreated_name(api):
    a = api.create(cm("a"))
    api.delete("ConfigMap", "a", "default")
    b = api.create(cm("a"))
    assert a["metadata"]["uid"] != b["metadata"]["uid"]


def test_generation_moves_with_spec_not_metadata_or_status(api):
    """metadata.generation: bumped by spec changes only."""
    np = api.create(nodepool())
    assert np["metadata"]["generation"] == 1
    np = api.patch("NodePool", "np", {"metadata": {"labels": {"a": "b"}}})
    assert np["metadata"]["generation"] == 1
    np = api.patch("NodePool", "np", {"status": {"nodes": 3}}, subresource="status")
    assert np["metadata"]["generation"] == 1
    np = api.patch("NodePool", "np", {"spec": {"weight": 5}})
    assert np["metadata"]["generation"] == 2


def test_a_no_op_write_keeps_the_resource_version(api):
    """The API server does not write (nor emit a watch event for) an unchanged object."""
    a = api.create(cm("a"))
    w = api.watch("ConfigMap", resource_version=a["metadata"]["resourceVersion"])
    b = api.patch("ConfigMap", "a", {"data": {"k": "v"}}, "default")
    assert rv(b) == rv(a)
    assert w.poll() == []


def test_already_exists(api):
    api.create(cm("a"))
    with pytest.raises(E.AlreadyExists) as ei:
        api.create(cm("a"))
    assert ei.value.code == 409 and ei.value.reason == "AlreadyExists"
    assert str(ei.value) == 'configmaps "a" already exists'


def test_not_found(api):
    with pytest.raises(E.NotFound) as ei:
        api.get("NodePool", "nope")
    assert ei.value.code == 404
    assert str(ei.value) == 'nodepools.karpenter.sh "nope" not found'
    # details.kind is the resource without its group, as kube-apiserver says it
    assert ei.value.status()["details"] == {"name": "nope", "group": "karpenter.sh", "kind": "nodepools"}
    with pytest.raises(E.NotFound):
        api.delete("ConfigMap", "nope", "default")
    with pytest.raises(E.NotFound):
        api.patch("ConfigMap", "nope", {"data": {}}, "default")


def test_generate_name(api):
    """metadata.generateName: the prefix and 5 random characters, unique; a missing name is 422."""
    names = {api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "web-"}})
             ["metadata"]["name"] for _ in range(50)}
    assert len(names) == 50
    assert all(re.fullmatch(r"web-[bcdfghjklmnpqrstvwxz2456789]{5}", n) for n in names)
    with pytest.raises(E.Invalid) as ei:
        api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})
    assert ei.value.code == 422


def test_namespaces_are_separate(api):
    api.create(cm("a", {"k": "1"}, ns="one"))
    api.create(cm("a", {"k": "2"}, ns="two"))
    assert api.get("ConfigMap", "a", "one")["data"] == {"k": "1"}
    assert api.get("ConfigMap", "a", "two")["data"] == {"k": "2"}
    assert len(api.list("ConfigMap", namespace="one")[0]) == 1
    assert len(api.list("ConfigMap")[0]) == 2


# --- optimistic concurrency -----------------------------------------------------------------------


def test_update_with_a_stale_resource_version_conflicts(api):
    a = api.create(cm("a"))
    api.patch("ConfigMap", "a", {"data": {"k": "w"}}, "default")
    stale = {**a, "data": {"k": "x"}}
    with pytest.raises(E.Conflict) as ei:
        api.update(stale)
    assert ei.value.code == 409
    assert "the object has been modified; please apply your changes to the latest version and try again" in str(ei.value)
    assert api.get("ConfigMap", "a", "default")["data"] == {"k": "w"}


def test_patch_carrying_a_stale_resource_version_conflicts(api):
    a = api.create(cm("a"))
    api.patch("ConfigMap", "a", {"data": {"k": "w"}}, "default")
    with pytest.raises(E.Conflict):
        api.patch("ConfigMap", "a", {"metadata": {"resourceVersion": a["metadata"]["resourceVersion"]},
                                     "data": {"k": "x"}}, "default")
    cur = api.get("ConfigMap", "a", "default")
    ok = api.patch("ConfigMap", "a", {"metadata": {"resourceVersion": cur["metadata"]["resourceVersion"]},
                                      "data": {"k": "x"}}, "default")
    assert ok["data"] == {"k": "x"}


def test_update_without_a_resource_version_is_unconditional(api):
    api.create(cm("a"))
    api.patch("ConfigMap", "a", {"data": {"k": "w"}}, "default")
    out = api.update({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"},
                      "data": {"k": "z"}})
    assert out["data"] == {"k": "z"}


def test_update_keeps_immutable_metadata(api):
    """uid and creationTimestamp come from the stored object, whatever the client sends."""
    a = api.create(cm("a"))
    out = api.update({**a, "metadata": {**a["metadata"], "uid": "forged", "creationTimestamp": "2000-01-01T00:00:00Z"},
                      "data": {"k": "2"}})
    assert out["metadata"]["uid"] == a["metadata"]["uid"]
    assert out["metadata"]["creationTimestamp"] == a["metadata"]["creationTimestamp"]


# --- the status subresource -----------------------------------------------------------------------


def test_writes_to_the_main_resource_keep_the_stored_status(api):
    api.create(nodepool())
    api.patch("NodePool", "np", {"status": {"nodes": 2}}, subresource="status")
    cur = api.get("NodePool", "np")
    out = api.update({**cur, "spec": {**cur["spec"], "weight": 1}, "status": {"nodes": 99}})
    assert out["status"] == {"nodes": 2}
    assert out["spec"]["weight"] == 1
    out = api.patch("NodePool", "np", {"status": {"nodes": 50}})
    assert out["status"] == {"nodes": 2}


def test_writes_to_status_change_only_status(api):
    api.create(nodepool())
    out = api.patch("NodePool", "np", {"spec": {"weight": 9}, "metadata": {"labels": {"x": "y"}},
                                       "status": {"nodes": 1}}, subresource="status")
    assert out["status"] == {"nodes": 1}
    assert "weight" not in out["spec"]
    assert "labels" not in out["metadata"]


def test_status_is_a_plain_field_for_kinds_without_the_subresource(api):
    out = api.create({**cm("a"), "status": {"x": 1}})
    assert out["status"] == {"x": 1}


# --- finalizers and deletion -----------------------------------------------------------------------


def test_delete_without_finalizers_removes_at_once(api):
    api.create(cm("a"))
    w = api.watch("ConfigMap", resource_version=api.resource_version)
    api.delete("ConfigMap", "a", "default")
    assert api.try_get("ConfigMap", "a", "default") is None
    (ev,) = w.poll()
    # as kube-apiserver sends it: the last state at a new resourceVersion, with no deletionTimestamp (only a
    # pod, whose deletion is always graceful, has one)
    assert ev.type == DELETED and "deletionTimestamp" not in ev.object["metadata"]


def test_finalizers_hold_a_deleted_object_until_removed(api, clock):
    api.create(cm("a", finalizers=["example.com/hold", "example.com/other"]))
    clock.set(T0 + 5)
    marked = api.delete("ConfigMap", "a", "default")
    assert marked["metadata"]["deletionTimestamp"] == fmt_time(T0 + 5)
    assert api.get("ConfigMap", "a", "default")["metadata"]["deletionTimestamp"] == fmt_time(T0 + 5)
    # a second delete changes nothing
    clock.set(T0 + 9)
    again = api.delete("ConfigMap", "a", "default")
    assert again["metadata"]["deletionTimestamp"] == fmt_time(T0 + 5)
    api.patch("ConfigMap", "a", {"metadata": {"finalizers": ["example.com/other"]}}, "default")
    assert api.try_get("ConfigMap", "a", "default") is not None
    api.patch("ConfigMap", "a", {"metadata": {"finalizers": []}}, "default")
    assert api.try_get("ConfigMap", "a", "default") is None


def test_deletion_timestamp_cannot_be_set_or_cleared_by_a_write(api):
    a = api.create(cm("a", finalizers=["example.com/hold"]))
    out = api.patch("ConfigMap", "a", {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}, "default")
    assert "deletionTimestamp" not in out["metadata"]
    api.delete("ConfigMap", "a", "default")
    out = api.patch("ConfigMap", "a", {"metadata": {"deletionTimestamp": None, "labels": {"x": "y"}}}, "default")
    assert out["metadata"]["deletionTimestamp"]
    _ = a


def test_marking_for_deletion_bumps_the_generation(api):
    """k8s.io/apiserver registry/generic/registry/store.go markAsDeleting: generation + 1 when the
    deletionTimestamp is first set."""
    a = api.create(nodepool())
    api.patch("NodePool", "np", {"metadata": {"finalizers": ["example.com/hold"]}})
    out = api.delete("NodePool", "np")
    assert out["metadata"]["generation"] == a["metadata"]["generation"] + 1


def test_delete_preconditions(api):
    a = api.create(cm("a"))
    with pytest.raises(E.Conflict):
        api.delete("ConfigMap", "a", "default", preconditions={"uid": "other"})
    cur = api.patch("ConfigMap", "a", {"data": {"k": "2"}}, "default")
    with pytest.raises(E.Conflict):
        api.delete("ConfigMap", "a", "default", preconditions={"resourceVersion": a["metadata"]["resourceVersion"]})
    api.delete("ConfigMap", "a", "default", preconditions={"uid": a["metadata"]["uid"],
                                                           "resourceVersion": cur["metadata"]["resourceVersion"]})
    assert api.try_get("ConfigMap", "a", "default") is None


# --- owner references and garbage collection -----------------------------------------------------------


def _owned(api: MemoryAPI, name: str, *owners: dict) -> dict:
    refs = [{"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"],
             "uid": o["metadata"]["uid"]} for o in owners]
    return api.create(cm(name, ownerReferences=refs))


def test_background_gc_deletes_dependents_with_the_owner(api):
    owner = api.create(cm("owner"))
    _owned(api, "child", owner)
    grandchild_owner = api.get("ConfigMap", "child", "default")
    _owned(api, "grandchild", grandchild_owner)
    api.delete("ConfigMap", "owner", "default")
    assert api.try_get("ConfigMap", "child", "default") is None
    assert api.try_get("ConfigMap", "grandchild", "default") is None


def test_gc_waits_for_an_owner_held_by_finalizers(api):
    owner = api.create(cm("owner", finalizers=["example.com/hold"]))
    _owned(api, "child", owner)
    api.delete("ConfigMap", "owner", "default")
    assert api.try_get("ConfigMap", "child", "default") is not None
    api.patch("ConfigMap", "owner", {"metadata": {"finalizers": []}}, "default")
    assert api.try_get("ConfigMap", "child", "default") is None


def test_gc_keeps_a_dependent_another_owner_still_holds(api):
    a = api.create(cm("a"))
    b = api.create(cm("b"))
    _owned(api, "child", a, b)
    api.delete("ConfigMap", "a", "default")
    assert api.try_get("ConfigMap", "child", "default") is not None
    api.delete("ConfigMap", "b", "default")
    assert api.try_get("ConfigMap", "child", "default") is None


def test_orphan_propagation_strips_the_owner_reference(api):
    owner = api.create(cm("owner"))
    other = api.create(cm("other"))
    _owned(api, "child", owner, other)
    _owned(api, "only", owner)
    api.delete("ConfigMap", "owner", "default", propagation="Orphan")
    child = api.get("ConfigMap", "child", "default")
    assert [r["name"] for r in child["metadata"]["ownerReferences"]] == ["other"]
    assert "ownerReferences" not in api.get("ConfigMap", "only", "default")["metadata"]


def test_gc_across_kinds(api):
    """A NodeClaim's Node (owner reference to the NodeClaim) goes with it."""
    claim = api.create({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "c"}, "spec": {}})
    api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "ownerReferences": [
        {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "c", "uid": claim["metadata"]["uid"]}]}})
    api.delete("NodeClaim", "c")
    assert api.try_get("Node", "n") is None


# --- list and watch ---------------------------------------------------------------------------------


@pytest.fixture
def labelled(api):
    for name, labels in [("a", {"app": "web", "tier": "fe"}), ("b", {"app": "web", "tier": "be"}),
                         ("c", {"app": "db"}), ("d", {})]:
        api.create(pod(name, labels))
    return api


@pytest.mark.parametrize("selector,names", [
    ("app=web", "ab"), ("app==web", "ab"), ("app!=web", "cd"), ("tier in (fe,be)", "ab"), ("tier notin (fe)", "bcd"),
    ("tier", "ab"), ("!tier", "cd"), ("app=web,tier=be", "b"), ("", "abcd"),
])
def test_label_selectors_in_list(labelled, selector, names):
    items, _ = labelled.list("Pod", label_selector=selector)
    assert "".join(sorted(i["metadata"]["name"] for i in items)) == names


def test_a_malformed_label_selector_is_a_bad_request(api):
    with pytest.raises(E.BadRequest):
        api.list("Pod", label_selector="app in web")


def test_field_selectors_in_list(api):
    api.create(pod("bound", node="n1"))
    api.create(pod("pending"))
    api.create(pod("other", node="n2"))
    names = lambda fs: sorted(i["metadata"]["name"] for i in api.list("Pod", field_selector=fs)[0])  # noqa: E731
    assert names("spec.nodeName=n1") == ["bound"]
    assert names("spec.nodeName=") == ["pending"]
    assert names("spec.nodeName!=") == ["bound", "other"]
    assert names("metadata.name=other,spec.nodeName=n2") == ["other"]
    assert names("status.phase=Pending") == ["bound", "other", "pending"]


def test_list_returns_the_store_resource_version(api):
    api.create(cm("a"))
    items, version = api.list("ConfigMap")
    assert version == api.resource_version


def test_watch_sees_every_change_in_order(api):
    w = api.watch("ConfigMap")
    api.create(cm("a"))
    api.patch("ConfigMap", "a", {"data": {"k": "2"}}, "default")
    api.delete("ConfigMap", "a", "default")
    evs = w.poll()
    assert [e.type for e in evs] == [ADDED, MODIFIED, DELETED]
    assert [rv(e.object) for e in evs] == sorted(rv(e.object) for e in evs)


def test_watch_with_a_label_selector_sees_objects_enter_and_leave(api):
    """An object that starts matching is ADDED to the watch, one that stops matching is DELETED from it."""
    api.create(pod("p", {"app": "x"}))
    w = api.watch("Pod", resource_version=api.resource_version, label_selector="app=web")
    api.patch("Pod", "p", {"metadata": {"labels": {"app": "web"}}}, "default")
    api.patch("Pod", "p", {"metadata": {"labels": {"app": "web", "v": "2"}}}, "default")
    api.patch("Pod", "p", {"metadata": {"labels": {"app": "db"}}}, "default")
    api.create(pod("q", {"app": "db"}))
    assert [e.type for e in w.poll()] == [ADDED, MODIFIED, DELETED]


def test_watch_with_a_field_selector_follows_the_binding(api):
    """kubelet's watch (spec.nodeName=<node>) sees a pod appear when it is bound."""
    api.create(pod("p"))
    w = api.watch("Pod", resource_version=api.resource_version, field_selector="spec.nodeName=n1")
    api.bind("p", "default", "n1")
    (ev,) = w.poll()
    assert ev.type == ADDED and ev.object["spec"]["nodeName"] == "n1"


def test_watch_from_zero_starts_with_the_current_objects(api):
    api.create(cm("a"))
    api.create(cm("b"))
    w = api.watch("ConfigMap", resource_version="0")
    assert sorted((e.type, e.object["metadata"]["name"]) for e in w.poll()) == [(ADDED, "a"), (ADDED, "b")]


def test_watch_resumes_from_a_resource_version(api):
    a = api.create(cm("a"))
    api.create(cm("b"))
    api.patch("ConfigMap", "a", {"data": {"k": "2"}}, "default")
    w = api.watch("ConfigMap", resource_version=a["metadata"]["resourceVersion"])
    assert [(e.type, e.object["metadata"]["name"]) for e in w.poll()] == [(ADDED, "b"), (MODIFIED, "a")]


def test_watch_from_a_resource_version_too_old_is_410_gone(api):
    api.history_limit = 3  # watch events kept per kind
    first = api.create(cm("a"))
    for i in range(5):
        api.patch("ConfigMap", "a", {"data": {"k": str(i)}}, "default")
    with pytest.raises(E.Gone) as ei:
        api.watch("ConfigMap", resource_version=first["metadata"]["resourceVersion"])
    assert ei.value.code == 410 and ei.value.reason == "Expired"
    assert str(ei.value).startswith("too old resource version: ")
    # recent enough still resumes
    recent = api.list("ConfigMap")[1]
    w = api.watch("ConfigMap", resource_version=str(int(recent) - 1))
    assert len(w.poll()) == 1


def test_a_stopped_watch_gets_nothing_more(api):
    w = api.watch("ConfigMap")
    w.stop()
    api.create(cm("a"))
    assert w.poll() == []
    assert w.next(timeout=0) is None


# --- patches --------------------------------------------------------------------------------------


def test_json_merge_patch(api):
    api.create(cm("a", {"a": "1", "b": "2"}, labels={"x": "1", "y": "2"}))
    out = api.patch("ConfigMap", "a", {"data": {"a": None, "c": "3"}, "metadata": {"labels": {"y": None}}},
                    "default", patch_type=MERGE_PATCH)
    assert out["data"] == {"b": "2", "c": "3"}
    assert out["metadata"]["labels"] == {"x": "1"}


def test_merge_patch_replaces_lists(api):
    api.create(cm("a", finalizers=["one", "two"]))
    out = api.patch("ConfigMap", "a", {"metadata": {"finalizers": ["three"]}}, "default")
    assert out["metadata"]["finalizers"] == ["three"]


def test_json_patch(api):
    api.create(pod("p", {"a": "1"}))
    out = api.patch("Pod", "p", [
        {"op": "add", "path": "/metadata/labels/b~1c", "value": "2"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "9"},
        {"op": "add", "path": "/spec/containers/-", "value": {"name": "side", "image": "s:1"}},
        {"op": "copy", "from": "/metadata/labels/a", "path": "/metadata/labels/copied"},
        {"op": "test", "path": "/metadata/labels/a", "value": "9"},
    ], "default", patch_type=JSON_PATCH)
    assert out["metadata"]["labels"] == {"a": "9", "b/c": "2", "copied": "9"}
    assert [c["name"] for c in out["spec"]["containers"]] == ["main", "side"]
    out = api.patch("Pod", "p", [{"op": "remove", "path": "/spec/containers/0"}], "default", patch_type=JSON_PATCH)
    assert [c["name"] for c in out["spec"]["containers"]] == ["side"]


def test_json_patch_failures_change_nothing(api):
    api.create(pod("p", {"a": "1"}))
    before = api.get("Pod", "p", "default")
    with pytest.raises(E.Invalid):
        api.patch("Pod", "p", [{"op": "add", "path": "/metadata/labels/b", "value": "2"},
                               {"op": "test", "path": "/metadata/labels/a", "value": "nope"}], "default",
                  patch_type=JSON_PATCH)
    with pytest.raises(E.Invalid):
        api.patch("Pod", "p", [{"op": "remove", "path": "/metadata/labels/missing"}], "default", patch_type=JSON_PATCH)
    assert api.get("Pod", "p", "default") is before


def test_strategic_merge_patch_merges_containers_by_name(api):
    api.create(pod("p"))
    out = api.patch("Pod", "p", {"spec": {"containers": [
        {"name": "main", "image": "img:2"}, {"name": "side", "image": "s:1"}]}}, "default",
        patch_type=STRATEGIC_MERGE_PATCH)
    assert [(c["name"], c["image"]) for c in out["spec"]["containers"]] == [("main", "img:2"), ("side", "s:1")]
    out = api.patch("Pod", "p", {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}, "default",
                    patch_type=STRATEGIC_MERGE_PATCH)
    assert [c["name"] for c in out["spec"]["containers"]] == ["main"]


def test_strategic_merge_patch_unions_finalizers(api):
    api.create(cm("a", finalizers=["one"]))
    out = api.patch("ConfigMap", "a", {"metadata": {"finalizers": ["two", "one"]}}, "default",
                    patch_type=STRATEGIC_MERGE_PATCH)
    assert out["metadata"]["finalizers"] == ["one", "two"]
    out = api.patch("ConfigMap", "a", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["one"]}}, "default",
                    patch_type=STRATEGIC_MERGE_PATCH)
    assert out["metadata"]["finalizers"] == ["two"]


def test_strategic_merge_patch_delete_directive_and_null(api):
    api.create(cm("a", {"a": "1", "b": "2"}, labels={"x": "1"}))
    out = api.patch("ConfigMap", "a", {"metadata": {"labels": {"$patch": "delete"}}, "data": {"a": None}}, "default",
                    patch_type=STRATEGIC_MERGE_PATCH)
    assert "labels" not in out["metadata"]
    assert out["data"] == {"b": "2"}


def test_strategic_merge_patch_replaces_lists_without_a_merge_key(api):
    """tolerations have no patch strategy: the list is replaced."""
    p = pod("p")
    p["spec"]["tolerations"] = [{"key": "a", "operator": "Exists"}]
    api.create(p)
    out = api.patch("Pod", "p", {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}, "default",
                    patch_type=STRATEGIC_MERGE_PATCH)
    assert out["spec"]["tolerations"] == [{"key": "b", "operator": "Exists"}]


def test_strategic_merge_patch_of_a_custom_resource_is_a_merge_patch(api):
    api.create({**nodepool(), "metadata": {"name": "np", "finalizers": ["one"]}})
    out = api.patch("NodePool", "np", {"metadata": {"finalizers": ["two"]}}, patch_type=STRATEGIC_MERGE_PATCH)
    assert out["metadata"]["finalizers"] == ["two"]


# --- binding ------------------------------------------------------------------------------------


def test_binding_assigns_the_node_and_sets_pod_scheduled(api, clock):
    api.create(pod("p"))
    clock.set(T0 + 3)
    api.bind("p", "default", "n1")
    p = api.get("Pod", "p", "default")
    assert p["spec"]["nodeName"] == "n1"
    (c,) = [c for c in p["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert c["status"] == "True" and c["lastTransitionTime"] == fmt_time(T0 + 3)


def test_binding_an_assigned_pod_conflicts(api):
    api.create(pod("p"))
    api.bind("p", "default", "n1")
    with pytest.raises(E.Conflict) as ei:
        api.bind("p", "default", "n2")
    assert str(ei.value) == 'pod p is already assigned to node "n1"'
    with pytest.raises(E.NotFound):
        api.bind("nope", "default", "n1")


def test_a_bound_pod_cannot_move_by_update(api):
    api.create(pod("p"))
    api.bind("p", "default", "n1")
    with pytest.raises(E.Invalid):
        api.patch("Pod", "p", {"spec": {"nodeName": "n2"}}, "default")


def test_a_pod_being_deleted_cannot_be_bound(api):
    """pkg/registry/core/pod/storage BindingREST.assignPod: a pod with a deletionTimestamp is not bound."""
    api.create(pod("p", finalizers=["example.com/hold"]))
    api.delete("Pod", "p", "default")
    with pytest.raises(E.ApiError):
        api.bind("p", "default", "n1")


def test_pods_are_admitted_pending_with_priority(api):
    api.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"},
                "value": 1000})
    p = pod("p")
    p["spec"]["priorityClassName"] = "high"
    out = api.create(p)
    assert out["status"]["phase"] == "Pending"
    assert out["spec"]["priority"] == 1000


# --- eviction -----------------------------------------------------------------------------------


def running(api: MemoryAPI, name: str, labels: dict, ready: bool = True, ns: str = "default") -> dict:
    api.create(pod(name, labels, ns=ns))
    api.bind(name, ns, "n1")
    return api.patch("Pod", name, {"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}}, ns, subresource="status")


def budget(api: MemoryAPI, name: str, selector: dict | None, *, allowed: int, healthy: int, desired: int,
           policy: str | None = None, observed: int | None = None, ns: str = "default") -> dict:
    spec: dict = {"maxUnavailable": 1}
    if selector is not None:
        spec["selector"] = {"matchLabels": selector}
    if policy:
        spec["unhealthyPodEvictionPolicy"] = policy
    api.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": ns},
                "spec": spec})
    return api.patch("PodDisruptionBudget", name, {"status": {
        "observedGeneration": 1 if observed is None else observed, "disruptionsAllowed": allowed,
        "currentHealthy": healthy, "desiredHealthy": desired, "expectedPods": healthy}}, ns, subresource="status")


def test_eviction_without_a_pdb_deletes_the_pod(api):
    running(api, "p", {"app": "web"})
    api.evict("p", "default")
    assert api.try_get("Pod", "p", "default") is None
    assert len(api.evicted_uids) == 1


def test_eviction_with_a_pdb_allowing_it_decrements_the_budget(api, clock):
    running(api, "p", {"app": "web"})
    budget(api, "web", {"app": "web"}, allowed=1, healthy=2, desired=1)
    clock.set(T0 + 7)
    api.evict("p", "default")
    assert api.try_get("Pod", "p", "default") is None
    st = api.get("PodDisruptionBudget", "web", "default")["status"]
    assert st["disruptionsAllowed"] == 0
    assert st["disruptedPods"] == {"p": fmt_time(T0 + 7)}


def test_eviction_blocked_by_a_pdb_is_429_with_the_kubernetes_message(api):
    running(api, "p", {"app": "web"})
    budget(api, "web", {"app": "web"}, allowed=0, healthy=2, desired=2)
    with pytest.raises(E.TooManyRequests) as ei:
        api.evict("p", "default")
    e = ei.value
    assert e.code == 429 and e.reason == "TooManyRequests"
    assert str(e) == "Cannot evict pod as it would violate the pod's disruption budget."
    assert e.causes == [{"reason": "DisruptionBudget",
                         "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]
    assert e.status()["details"]["causes"] == e.causes
    assert api.try_get("Pod", "p", "default") is not None


def test_eviction_under_two_pdbs_is_500(api):
    running(api, "p", {"app": "web"})
    budget(api, "one", {"app": "web"}, allowed=5, healthy=5, desired=0)
    budget(api, "two", {}, allowed=5, healthy=5, desired=0)  # an empty selector selects every pod
    with pytest.raises(E.InternalError) as ei:
        api.evict("p", "default")
    assert ei.value.code == 500
    assert str(ei.value) == "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."


def test_pdbs_of_other_namespaces_and_nil_selectors_do_not_apply(api):
    running(api, "p", {"app": "web"})
    budget(api, "elsewhere", {"app": "web"}, allowed=0, healthy=1, desired=1, ns="other")
    budget(api, "nil", None, allowed=0, healthy=1, desired=1)
    api.evict("p", "default")
    assert api.try_get("Pod", "p", "default") is None


def test_pods_not_running_ignore_pdbs(api):
    """canIgnorePDB: Pending, Succeeded, Failed pods and pods being deleted are deleted regardless."""
    api.create(pod("pending", {"app": "web"}))
    budget(api, "web", {"app": "web"}, allowed=0, healthy=1, desired=1)
    api.evict("pending", "default")
    assert api.try_get("Pod", "pending", "default") is None
    running(api, "done", {"app": "web"})
    api.patch("Pod", "done", {"status": {"phase": "Succeeded"}}, "default", subresource="status")
    api.evict("done", "default")
    assert api.try_get("Pod", "done", "default") is None


def test_eviction_uid_precondition(api):
    running(api, "p", {"app": "web"})
    with pytest.raises(E.Conflict):
        api.evict("p", "default", uid="another-pod")
    assert api.try_get("Pod", "p", "default") is not None


def test_eviction_waits_for_the_pdb_status_to_catch_up(api):
    """observedGeneration < generation: 'The disruption budget X is still being processed by the server.'"""
    running(api, "p", {"app": "web"})
    budget(api, "web", {"app": "web"}, allowed=3, healthy=4, desired=1)
    api.patch("PodDisruptionBudget", "web", {"spec": {"maxUnavailable": 2}}, "default")
    assert api.get("PodDisruptionBudget", "web", "default")["metadata"]["generation"] == 2
    with pytest.raises(E.TooManyRequests) as ei:
        api.evict("p", "default")
    assert ei.value.causes == [{"reason": "DisruptionBudget",
                                "message": "The disruption budget web is still being processed by the server."}]
    api.patch("PodDisruptionBudget", "web", {"status": {"observedGeneration": 2}}, "default", subresource="status")
    api.evict("p", "default")
    assert api.try_get("Pod", "p", "default") is None


def test_unhealthy_pods_with_if_healthy_budget(api):
    """IfHealthyBudget (the default): an unready pod may go while the application is healthy enough
    (currentHealthy >= desiredHealthy), without using up the budget; not otherwise."""
    running(api, "sick", {"app": "web"}, ready=False)
    budget(api, "web", {"app": "web"}, allowed=0, healthy=2, desired=2)
    api.evict("sick", "default")
    assert api.try_get("Pod", "sick", "default") is None
    assert api.get("PodDisruptionBudget", "web", "default")["status"]["disruptionsAllowed"] == 0
    running(api, "sick2", {"app": "web"}, ready=False)
    api.patch("PodDisruptionBudget", "web", {"status": {"currentHealthy": 1}}, "default", subresource="status")
    with pytest.raises(E.TooManyRequests):
        api.evict("sick2", "default")


def test_unhealthy_pods_with_always_allow(api):
    running(api, "sick", {"app": "web"}, ready=False)
    budget(api, "web", {"app": "web"}, allowed=0, healthy=0, desired=2, policy="AlwaysAllow")
    api.evict("sick", "default")
    assert api.try_get("Pod", "sick", "default") is None


def test_unhealthy_pod_shortcut_needs_a_positive_desired_healthy(api):
    """pkg/registry/core/pod/storage/eviction.go: `CurrentHealthy >= DesiredHealthy && DesiredHealthy > 0`."""
    running(api, "sick", {"app": "web"}, ready=False)
    budget(api, "web", {"app": "web"}, allowed=0, healthy=0, desired=0)
    with pytest.raises(E.TooManyRequests):
        api.evict("sick", "default")


def test_always_allow_ignores_a_lagging_pdb_status(api):
    """eviction.go: the AlwaysAllow branch returns before checkAndDecrement's observedGeneration check."""
    running(api, "sick", {"app": "web"}, ready=False)
    budget(api, "web", {"app": "web"}, allowed=0, healthy=0, desired=1, policy="AlwaysAllow", observed=0)
    api.evict("sick", "default")
    assert api.try_get("Pod", "sick", "default") is None
