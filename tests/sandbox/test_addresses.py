"""Pods the sandbox's kubelets run have an IP, nodes created through the API get addresses: what
``kubectl get pods -o wide`` and ``kubectl get nodes -o wide`` show, and what clients that need a pod's
address (port-forwarding tools, Endpoints writers, dashboards) read."""

from __future__ import annotations

import ipaddress
import json

import pytest

from .harness import kubectl_binary, wait_for

client = pytest.importorskip("kubernetes").client


def _node(name: str) -> dict:
    # tainted: the kube-scheduler stand-in places no pod of the other tests sharing this sandbox here (the
    # pods below name their node and need no scheduling)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                  "kubernetes.io/arch": "amd64"}},
            "spec": {"taints": [{"key": "karpy.dev/test-addresses", "effect": "NoSchedule"}]},
            "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                       "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}}


@pytest.fixture
def v1(bare):
    api = client.CoreV1Api(bare.client())
    yield api
    for n in api.list_node().items:
        if n.metadata.name.startswith("addr-"):
            api.delete_node(n.metadata.name)


def _pod(name: str, node: str, host_network: bool = False) -> dict:
    spec: dict = {"nodeName": node, "containers": [{"name": "c", "image": "pause"}]}
    if host_network:
        spec["hostNetwork"] = True
    return {"metadata": {"name": name}, "spec": spec}


def test_running_pods_have_unique_ips_and_nodes_have_addresses(bare, v1):
    v1.create_namespace({"metadata": {"name": "addressed"}})
    for n in ("addr-a", "addr-b"):
        v1.create_node(_node(n))
    pods = [(f"a{i}", "addr-a") for i in range(3)] + [(f"b{i}", "addr-b") for i in range(3)]
    for name, node in pods:
        v1.create_namespaced_pod("addressed", _pod(name, node))
    v1.create_namespaced_pod("addressed", _pod("host", "addr-a", host_network=True))

    def running():
        got = {p.metadata.name: p for p in v1.list_namespaced_pod("addressed").items}
        return got if len(got) == 7 and all(p.status.phase == "Running" and p.status.pod_ip
                                            for p in got.values()) else None

    got = wait_for(running, what="7 running pods with an IP")
    internal = {}
    for n in ("addr-a", "addr-b"):
        addrs = {a.type: a.address for a in v1.read_node(n).status.addresses}
        assert addrs["Hostname"] == n
        internal[n] = ipaddress.ip_address(addrs["InternalIP"])
    assert internal["addr-a"] != internal["addr-b"]

    ips = {name: ipaddress.ip_address(got[name].status.pod_ip) for name, _ in pods}
    assert len(set(ips.values())) == len(pods)
    assert not set(ips.values()) & set(internal.values())
    for name, node in pods:
        st = got[name].status
        assert [x.ip for x in st.pod_ips] == [st.pod_ip]
        assert ipaddress.ip_address(st.host_ip) == internal[node]
    # a node's pods share its pod CIDR
    net = {n: {ipaddress.ip_network(f"{ips[p]}/24", strict=False) for p, node in pods if node == n}
           for n in ("addr-a", "addr-b")}
    assert len(net["addr-a"]) == 1 and len(net["addr-b"]) == 1 and net["addr-a"] != net["addr-b"]
    # a hostNetwork pod has its node's address
    assert ipaddress.ip_address(got["host"].status.pod_ip) == internal["addr-a"]

    if kubectl_binary() is not None:
        wide = bare.kubectl("get", "pods", "-n", "addressed", "-o", "wide").stdout
        row = next(line.split() for line in wide.splitlines() if line.startswith("a0 "))
        assert str(ips["a0"]) in row and "addr-a" in row
        nodes = bare.kubectl("get", "nodes", "addr-b", "-o", "wide").stdout
        assert str(internal["addr-b"]) in nodes


def test_an_address_is_free_again_once_its_pod_is_gone(bare, v1):
    v1.create_namespace({"metadata": {"name": "readdressed"}})
    v1.create_node(_node("addr-c"))
    v1.create_namespaced_pod("readdressed", _pod("first", "addr-c"))
    first = wait_for(lambda: v1.read_namespaced_pod("first", "readdressed").status.pod_ip, what="the first pod's IP")
    v1.delete_namespaced_pod("first", "readdressed", grace_period_seconds=0)
    wait_for(lambda: "first" not in {p.metadata.name for p in v1.list_namespaced_pod("readdressed").items},
             what="the first pod to go")
    v1.create_namespaced_pod("readdressed", _pod("second", "addr-c"))
    second = wait_for(lambda: v1.read_namespaced_pod("second", "readdressed").status.pod_ip,
                      what="the second pod's IP")
    assert second == first  # the node's only pod so far took the address back
    raw = json.loads(bare.kubectl("get", "pod", "second", "-n", "readdressed", "-o", "json").stdout) \
        if kubectl_binary() is not None else None
    if raw is not None:
        assert raw["status"]["podIPs"] == [{"ip": second}]
