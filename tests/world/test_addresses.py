"""Addresses the kubelet stand-in gives (karpy/simulator/kubelet.py): a Node's InternalIP and Hostname, a
running pod's podIP from its node's pod CIDR, a hostNetwork pod's node address; unique while in use, free
again once their pod or node is gone."""

from __future__ import annotations

import ipaddress
import json
from collections import defaultdict

from click.testing import CliRunner

from karpy.cli import main
from karpy.simulator.kubelet import Addresses

MANIFESTS = """\
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
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 9
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - labelSelector: {matchLabels: {app: web}}
              topologyKey: kubernetes.io/hostname
      containers: [{name: c, image: x, resources: {requests: {cpu: 100m}}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: packed}
spec:
  replicas: 12
  selector: {matchLabels: {app: packed}}
  template:
    metadata: {labels: {app: packed}}
    spec:
      containers: [{name: c, image: x, resources: {requests: {cpu: 100m}}}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      hostNetwork: true
      containers: [{name: c, image: x, resources: {requests: {cpu: 10m}}}]
"""


def _simulate(tmp_path) -> list[dict]:
    (tmp_path / "in.yaml").write_text(MANIFESTS)
    r = CliRunner().invoke(main, ["simulate", str(tmp_path / "in.yaml"), "-o", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["items"]


def test_nodes_and_pods_of_a_simulation_get_unique_addresses(tmp_path):
    items = _simulate(tmp_path)
    nodes = {n["metadata"]["name"]: n for n in items if n["kind"] == "Node"}
    pods = [p for p in items if p["kind"] == "Pod"]
    assert len(nodes) >= 9 and len(pods) >= 21 + len(nodes)

    node_ip = {}
    for name, n in nodes.items():
        addrs = {a["type"]: a["address"] for a in n["status"]["addresses"]}
        assert addrs["Hostname"] == name
        node_ip[name] = ipaddress.ip_address(addrs["InternalIP"])
    assert len(set(node_ip.values())) == len(nodes)

    cidr_of_node: dict[str, set] = defaultdict(set)
    pod_ips = []
    for p in pods:
        st, node = p["status"], p["spec"]["nodeName"]
        assert st["phase"] == "Running"
        assert st["podIPs"] == [{"ip": st["podIP"]}]
        assert ipaddress.ip_address(st["hostIP"]) == node_ip[node]
        ip = ipaddress.ip_address(st["podIP"])
        if p["spec"].get("hostNetwork"):
            assert ip == node_ip[node]  # a hostNetwork pod shares its node's address
            continue
        assert ip not in node_ip.values()
        pod_ips.append(ip)
        cidr_of_node[node].add(ipaddress.ip_network(f"{ip}/24", strict=False))
    assert len(set(pod_ips)) == len(pod_ips)  # no two running pods share an address
    # the pods of a node share its pod CIDR, and no two nodes share one
    assert all(len(c) == 1 for c in cidr_of_node.values())
    cidrs = [next(iter(c)) for c in cidr_of_node.values()]
    assert len(set(cidrs)) == len(cidrs)


def test_a_node_running_more_pods_than_a_slash_24_holds_takes_another():
    a = Addresses()
    ips = [a.pod_ip(f"p{i}", "big") for i in range(600)]
    assert len(set(ips)) == 600 and None not in ips
    assert len({ipaddress.ip_network(f"{ip}/24", strict=False) for ip in ips}) == 3
    assert not any(ip.endswith((".0", ".255")) for ip in ips)
    other = a.pod_ip("q", "small")
    assert other not in ips


def test_addresses_come_back_once_their_pod_or_node_is_gone():
    a = Addresses()
    first = a.pod_ip("p1", "n1")
    assert a.pod_ip("p1", "n1") == first  # the same pod asking again keeps its address
    a.release_pod("p1", "n1")
    assert a.pod_ip("p2", "n1") == first  # given to the next pod of the node

    n1 = a.node_ip("n1")
    assert a.node_ip("n1") == n1 and a.node_ip("n2") != n1
    cidr = ipaddress.ip_network(f"{first}/24", strict=False)
    a.release_node("n1")
    # the node's CIDR and address go to the next node; a late release of a pod of the old node does not
    # hand the new node an address it already gave
    reused = a.pod_ip("p3", "n3")
    assert ipaddress.ip_address(reused) in cidr
    assert a.node_ip("n3") == n1
    a.release_pod("p2", "n1")
    seen = {reused} | {a.pod_ip(f"r{i}", "n3") for i in range(200)}
    assert len(seen) == 201


def test_every_running_pod_of_a_big_cluster_has_its_own_address():
    a = Addresses()
    ips = {a.pod_ip(f"p{n}-{i}", f"n{n}") for n in range(2000) for i in range(5)}
    assert len(ips) == 10000
    assert all(ipaddress.ip_address(ip) in ipaddress.ip_network("10.0.0.0/8") for ip in ips)
