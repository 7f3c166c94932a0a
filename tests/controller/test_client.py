"""KubeClient over HTTP on 127.0.0.1: the port's semantics, Status errors, retries, watches."""

from __future__ import annotations

import pytest

from karpy.kube import errors as E
from karpy.kube.client import ConfigError, RetryPolicy, load_config

NC = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"generateName": "default-"},
      "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}


def pod(name):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}


def test_crud_with_dicts_and_kinds(client, server):
    created = client.create(NC)
    name = created["metadata"]["name"]
    assert name.startswith("default-") and created["kind"] == "NodeClaim"
    items, rv = client.list("NodeClaim")
    assert [o["metadata"]["name"] for o in items] == [name] and items[0]["kind"] == "NodeClaim" and rv
    got = client.get("NodeClaim", name)
    patched = client.patch("NodeClaim", name, {"metadata": {"labels": {"a": "b"}}})
    assert patched["metadata"]["labels"] == {"a": "b"}
    st = client.patch("NodeClaim", name, {"status": {"providerID": "kwok://x"}}, subresource="status")
    assert st["status"]["providerID"] == "kwok://x"
    with pytest.raises(E.Conflict):
        client.update({**got, "spec": {"x": 1}})  # stale resourceVersion
    client.create(pod("p"))
    client.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}})
    client.bind("p", "default", "n")
    assert client.get("Pod", "p", "default")["spec"]["nodeName"] == "n"
    client.delete("NodeClaim", name)
    with pytest.raises(E.NotFound) as e:
        client.get("NodeClaim", name)
    assert e.value.code == 404 and name in e.value.message


def test_already_exists_is_returned_as_is(client, server):
    client.create(pod("dup"))
    with pytest.raises(E.AlreadyExists):
        client.create(pod("dup"))


def test_5xx_429_and_dropped_connections_are_retried(client, server):
    client.create(pod("p"))
    server.fail_next("GET", "/pods/p", 503)
    server.fail_next("GET", "/pods/p", 429, body={"kind": "Status", "code": 429, "reason": "TooManyRequests",
                                                  "details": {"retryAfterSeconds": 0}})
    server.fail_next("GET", "/pods/p", None)
    assert client.get("Pod", "p", "default")["metadata"]["name"] == "p"
    assert client.retries == 3


def test_retries_give_up_with_the_servers_error(client, server):
    server.fail_next("GET", "/pods/q", 500, times=10)
    with pytest.raises(E.InternalError):
        client.get("Pod", "q", "default")
    assert client.retries == client.retry.attempts - 1


def test_eviction_429_is_the_pdbs_answer_and_not_retried(client, server):
    client.create(pod("e"))
    server.fail_next("POST", "/pods/e/eviction", 429, body={
        "kind": "Status", "code": 429, "reason": "TooManyRequests",
        "message": "Cannot evict pod as it would violate the pod's disruption budget."})
    with pytest.raises(E.TooManyRequests) as e:
        client.evict("e", "default")
    assert "disruption budget" in e.value.message and client.retries == 0
    client.evict("e", "default")
    with pytest.raises(E.NotFound):
        client.get("Pod", "e", "default")


def test_conflict_is_retried_only_for_patches_without_a_precondition(client, server):
    obj = client.create(pod("c"))
    server.fail_next("PATCH", "/pods/c", 409, body={"kind": "Status", "code": 409, "reason": "Conflict"})
    client.patch("Pod", "c", {"metadata": {"labels": {"a": "1"}}}, "default")
    assert client.retries == 1
    with pytest.raises(E.Conflict):
        client.patch("Pod", "c", {"metadata": {"labels": {"a": "2"},
                                               "resourceVersion": obj["metadata"]["resourceVersion"]}}, "default")
    assert client.retries == 1


def test_a_create_whose_answer_was_lost_makes_no_second_object(client, server):
    server.fail_next("POST", "/nodeclaims", None, after=True)  # created, but the answer never arrives
    created = client.create(NC)
    items, _ = client.list("NodeClaim")
    assert [o["metadata"]["name"] for o in items] == [created["metadata"]["name"]]
    server.fail_next("POST", "/nodeclaims", 503, after=True)
    client.create(NC)
    assert len(client.list("NodeClaim")[0]) == 2


def test_watch_streams_and_answers_gone_when_too_old(client, server):
    _, rv = client.list("Pod")
    w = client.watch("Pod", rv)
    client.create(pod("w"))
    ev = w.next(5)
    assert ev.type == "ADDED" and ev.object["metadata"]["name"] == "w" and ev.object["kind"] == "Pod"
    server.cut_watches()
    assert w.next(5) is None and w.done
    server.expire("Pod")
    with pytest.raises(E.Gone):
        client.watch("Pod", ev.object["metadata"]["resourceVersion"])


def test_kubeconfig_and_context(tmp_path, server):
    path = server.kubeconfig(str(tmp_path / "kc"))
    config, _ = load_config(path, "test")
    assert config.cluster.server == server.url
    with pytest.raises(ConfigError, match="nope"):
        load_config(path, "nope")
    with pytest.raises(ConfigError):
        load_config(str(tmp_path / "missing"))


def test_kubeconfig_variable_and_in_cluster(tmp_path, server, monkeypatch):
    path = server.kubeconfig(str(tmp_path / "kc"))
    monkeypatch.setenv("KUBECONFIG", path)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    config, in_cluster = load_config()
    assert config.cluster.server == server.url and not in_cluster
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("tok")
    (sa / "namespace").write_text("karpenter")
    (sa / "ca.crt").write_text("")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    config, in_cluster = load_config(service_account=str(sa))
    assert in_cluster and config.cluster.server == "https://10.0.0.1:443" and config.namespace == "karpenter"


def test_retry_backoff_is_deterministic():
    p = RetryPolicy(attempts=8, base=0.05, cap=1.0)
    assert [p.delay(n) for n in range(6)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0]
    assert p.delay(0, retry_after=0.5) == 0.5 and p.delay(0, retry_after=30) == 1.0
