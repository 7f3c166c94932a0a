"""The viewer's model as data: what each node row, the summary, the NodePools and the pending pods say for a
given cluster, where eks-node-viewer and aks-node-viewer get it wrong."""

from __future__ import annotations

import pytest

from karpy.viewer.model import Snapshot, build, sort_nodes, to_json
from karpy.viewer.options import OptionError, resolve
from karpy.viewer.prices import PriceBook

from .objects import T0, claim, event, node, nodepool, pod


def frame(nodes=(), claims=(), pods=(), nodepools=(), events=(), resources=("cpu",), prices=None, now=600):
    return build(Snapshot(now=T0 + now, nodes=list(nodes), nodeclaims=list(claims), pods=list(pods),
                          nodepools=list(nodepools), events=list(events)), resources, prices or PriceBook())


def row(f, name):
    return next(n for n in f.nodes if n.name == name)


def test_requests_follow_kubernetes_formula_with_init_sidecar_and_overhead():
    spec = {
        "initContainers": [
            {"name": "setup", "resources": {"requests": {"cpu": "2"}}},  # runs alone, before the others
            {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "250m"}}},  # a sidecar
        ],
        "containers": [{"name": "app", "resources": {"requests": {"cpu": "500m"}}},
                       {"name": "log", "resources": {"limits": {"cpu": "100m"}}}],  # limits default requests
        "overhead": {"cpu": "50m"},
    }
    f = frame([node("n1")], pods=[pod("p", "n1", spec=spec)])
    # max(2 (init), 0.5 + 0.1 + 0.25 (sidecar runs beside)) + 0.05 overhead
    assert to_json(f)["nodes"][0]["resources"]["cpu"] == {"requested": "2050m", "allocatable": "4"}


def test_terminal_and_terminating_pods_request_nothing():
    f = frame([node("n1")], pods=[pod("a", "n1"), pod("done", "n1", phase="Succeeded"),
                                  pod("failed", "n1", phase="Failed"), pod("going", "n1", deleting=True)])
    assert row(f, "n1").requested["cpu"] == 1000
    assert f.pods == {"total": 1, "pending": 0, "running": 1, "bound": 1, "daemonSet": 0}


def test_pods_of_nodes_the_selector_hides_are_not_counted():
    # the source listed only n1 (the selector matched it); n2's pods exist but are not ours
    f = frame([node("n1")], pods=[pod("a", "n1"), pod("b", "n2"), pod("c", "n2"), pod("waiting")])
    j = to_json(f)
    assert j["summary"]["pods"]["total"] == 2  # a on n1, and the pending pod
    assert j["summary"]["pods"]["bound"] == 1 and j["summary"]["pods"]["pending"] == 1
    assert j["summary"]["resources"]["cpu"]["requested"] == "1"


def test_daemonset_pods_count_apart_but_use_capacity():
    f = frame([node("n1")], pods=[pod("a", "n1"), pod("ds", "n1", daemon=True, cpu="100m")],
              resources=("cpu", "pods"))
    n = to_json(f)["nodes"][0]
    assert n["pods"] == 1 and n["daemonSetPods"] == 1
    assert n["resources"]["cpu"]["requested"] == "1100m" and n["resources"]["pods"]["requested"] == "2"
    assert f.pods["total"] == 1 and f.pods["daemonSet"] == 1


@pytest.mark.parametrize("kw, status", [
    ({"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}, "Disrupting"),  # Karpenter v1
    ({"taints": [{"key": "karpenter.sh/disruption", "value": "disrupting", "effect": "NoSchedule"}]}, "Disrupting"),
    ({"unschedulable": True}, "Cordoned"),
    ({"deleting": True, "unschedulable": True}, "Deleting"),
    ({"ready": False}, "NotReady"),
    ({}, "Ready"),
])
def test_node_status(kw, status):
    assert to_json(frame([node("n1", **kw)]))["nodes"][0]["status"] == status


def test_nodeclaim_without_node_is_a_row_and_a_failed_launch_costs_nothing():
    ann = {"karpy.dev/price-per-hour": "0.5000"}
    launching = claim("c1", labels={"karpenter.sh/nodepool": "np"}, annotations=ann,
                      conditions=[{"type": "Launched", "status": "True"}], created=590)
    failed = claim("c2", labels={"karpenter.sh/nodepool": "np"}, annotations=ann, deleting=True,
                   conditions=[{"type": "Launched", "status": "False", "reason": "LaunchFailed"}])
    f = frame(claims=[launching, failed])
    j = to_json(f)
    rows = {n["name"]: n for n in j["nodes"]}
    assert rows["c1"]["lifecycle"] == "Launching" and rows["c1"]["status"] == "NotReady"
    assert rows["c2"]["lifecycle"] == "LaunchFailed" and rows["c2"]["pricePerHour"] is None
    assert j["summary"]["pricePerHour"] == "0.5000" and j["summary"]["unpricedNodes"] == 0


def test_node_and_its_nodeclaim_are_one_row():
    n = node("aks-np-abc", labels={"karpenter.sh/nodepool": "np"})
    c = claim("np-abc", node_name="aks-np-abc", annotations={"karpy.dev/price-per-hour": "0.1240"},
              conditions=[{"type": "Initialized", "status": "True"},
                          {"type": "DisruptionReason", "status": "True", "reason": "Underutilized"}])
    j = to_json(frame([n], [c]))
    assert [(x["name"], x["nodeClaim"], x["pricePerHour"], x["priceSource"]) for x in j["nodes"]] == \
        [("aks-np-abc", "np-abc", "0.1240", "annotation")]
    assert j["nodes"][0]["disruptionReason"] == "Underutilized"


AZ = {"node.kubernetes.io/instance-type": "Standard_D2pls_v6", "topology.kubernetes.io/region": "eastus",
      "topology.kubernetes.io/zone": "eastus-1", "karpenter.sh/capacity-type": "on-demand"}


def test_price_sources_annotation_label_catalog_none():
    nodes = [
        node("ann", labels=AZ, annotations={"karpy.dev/price-per-hour": "0.2000"}),
        node("label", labels={**AZ, "eks-node-viewer/instance-price": "0.3"}),
        node("catalog", labels=AZ, provider_id="azure:///subscriptions/x/vm/catalog"),
        node("unknown", labels={"node.kubernetes.io/instance-type": "my-own-metal"}),
        node("reserved", labels={**AZ, "karpenter.sh/capacity-type": "reserved"}, provider_id="azure:///x"),
    ]
    j = to_json(frame(nodes))
    got = {n["name"]: (n["pricePerHour"], n["priceSource"]) for n in j["nodes"]}
    assert got["ann"] == ("0.2000", "annotation")
    assert got["label"] == ("0.3000", "annotation")
    assert got["catalog"][1] == "catalog" and float(got["catalog"][0]) > 0
    assert got["unknown"] == (None, "none") and got["reserved"] == (None, "none")
    assert j["summary"]["unpricedNodes"] == 2
    assert j["summary"]["priceSources"] == {"annotation": 2, "catalog": 1, "none": 2}


def test_catalog_prices_the_same_offering_karpy_launches():
    """The catalog price of the seed's 2-vCPU arm64 node equals what karpy simulate annotates it with."""
    pb = PriceBook()
    assert pb.price(AZ, {}, "azure:///x").per_hour == pytest.approx(0.062)
    spot = pb.price({**AZ, "karpenter.sh/capacity-type": "spot"}, {}, "azure:///x")
    assert spot.source == "catalog" and 0 < spot.per_hour < 0.062
    aks_spot = pb.price({"node.kubernetes.io/instance-type": "Standard_D2pls_v6", "topology.kubernetes.io/zone":
                         "eastus-1", "kubernetes.azure.com/scalesetpriority": "spot"}, {}, "azure:///x")
    assert aks_spot.per_hour == spot.per_hour  # AKS's own spot node pools are priced as spot


def test_disable_pricing_hides_every_price():
    j = to_json(frame([node("n", annotations={"karpy.dev/price-per-hour": "1"})], prices=PriceBook(disabled=True)))
    assert j["summary"]["pricePerHour"] is None and j["nodes"][0]["pricePerHour"] is None


def test_split_by_capacity_type_and_arch():
    nodes = [node("a", labels={"kubernetes.io/arch": "arm64", "karpenter.sh/capacity-type": "spot"},
                  annotations={"karpy.dev/price-per-hour": "0.1"}),
             node("b", labels={"kubernetes.io/arch": "amd64", "karpenter.sh/capacity-type": "on-demand"},
                  annotations={"karpy.dev/price-per-hour": "0.3"}),
             node("c", labels={"kubernetes.io/arch": "arm64", "karpenter.sh/capacity-type": "on-demand"},
                  annotations={"karpy.dev/price-per-hour": "0.2"})]
    s = to_json(frame(nodes))["summary"]
    assert s["byArch"] == {"amd64": {"nodes": 1, "pricePerHour": "0.3000"},
                           "arm64": {"nodes": 2, "pricePerHour": "0.3000"}}
    assert s["byCapacityType"]["on-demand"] == {"nodes": 2, "pricePerHour": "0.5000"}
    assert s["pricePerHour"] == "0.6000" and s["pricePerMonth"] == "438.00"


def test_budget_left_per_reason():
    pools = [nodepool("np", budgets=[{"nodes": "20%"}, {"nodes": "0", "reasons": ["Drifted"]}], nodes=10)]
    nodes = [node(f"n{i}", labels={"karpenter.sh/nodepool": "np"}) for i in range(9)]
    nodes.append(node("n9", labels={"karpenter.sh/nodepool": "np"},
                      taints=[{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]))
    p = to_json(frame(nodes, nodepools=pools))["nodePools"][0]
    # 20 % of 10 nodes = 2, one already disrupting; Drifted blocked by its 0 budget
    assert p["budgetsLeft"] == {"Underutilized": 1, "Empty": 1, "Drifted": 0}
    assert p["nodes"] == 10


def test_pending_pods_carry_karpenters_reason_and_nomination():
    events = [event("FailedScheduling", "big", "0/3 nodes are available", 5, component="default-scheduler"),
              event("FailedScheduling", "big", 'Failed to schedule pod, incompatible with nodepool "np", '
                    "no instance type has enough resources", 6),
              event("Nominated", "soon", "Pod should schedule on: nodeclaim/np-x", 7)]
    j = to_json(frame(pods=[pod("big", cpu="999"), pod("soon")], events=events))
    assert j["pending"] == [
        {"pod": "default/big", "reason": 'incompatible with nodepool "np", no instance type has enough resources'},
        {"pod": "default/soon", "reason": "waiting for Karpenter or the scheduler", "nominated": "nodeclaim/np-x"}]


def test_sort_by_creation_and_by_label():
    nodes = [node("n-old", created=0, labels={"team": "b10"}), node("n-new", created=100, labels={"team": "b9"}),
             node("n-none", created=50)]
    rows = frame(nodes).nodes
    names = lambda spec: [r.name for r in sort_nodes(rows, spec, T0 + 600)]  # noqa: E731
    assert names("creation") == ["n-old", "n-none", "n-new"]
    assert names("creation=dsc") == ["n-new", "n-none", "n-old"]
    assert names("team") == ["n-new", "n-old", "n-none"]  # natural order: b9 before b10; unlabelled last
    assert names("team=dsc") == ["n-old", "n-new", "n-none"]


def test_options_from_config_files_flags_win(tmp_path):
    (tmp_path / ".aks-node-viewer").write_text("node-selector=from-aks=1\nresources=cpu,memory\nregion=westus2\n")
    (tmp_path / ".karpy-viewer").write_text("# mine\nnode-selector=aks-karpenter=demo\ndisable-pricing=true\n")
    o = resolve({"resources": "pods"}, home=tmp_path)
    assert o.node_selector == "aks-karpenter=demo"  # ~/.karpy-viewer over ~/.aks-node-viewer
    assert o.resources == ["pods"]  # the flag over both
    assert o.disable_pricing is True


@pytest.mark.parametrize("flags, file, message", [
    ({"node_selector": "a in (b"}, "", "--node-selector"),
    ({"style": "#fff,#000"}, "", "three colours"),
    ({"style": "#fff,#000,notacolour"}, "", "not a colour"),
    ({"resources": ","}, "", "at least one resource"),
    ({"node_sort": "creation=up"}, "", "asc or dsc"),
    ({}, "nodeselector=x\n", "unknown key 'nodeselector'"),
    ({}, "disable-pricing=maybe\n", "not a boolean"),
])
def test_bad_options_say_what_is_wrong(tmp_path, flags, file, message):
    if file:
        (tmp_path / ".karpy-viewer").write_text(file)
    with pytest.raises(OptionError, match=message.replace("(", r"\(")):
        resolve(flags, home=tmp_path)
