"""Every region of the AWS and Azure catalogs through ``karpy simulate``: no refusal, the region's
zones, prices marked by where they come from."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from karpy.cli import main
from karpy.cloudprovider import aws, azure
from karpy.cloudprovider.catalog import load_catalog

ZONE = "topology.kubernetes.io/zone"
EC2_REQUIRED = {
    "role": "KarpenterNodeRole",
    "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
    "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
}


def _nodepool(name: str, kind: str, requirements: list[dict]) -> dict:
    group = {"EC2NodeClass": "karpenter.k8s.aws", "AKSNodeClass": "karpenter.azure.com"}[kind]
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "requirements": requirements,
                    "nodeClassRef": {"group": group, "kind": kind, "name": "default"},
                }
            }
        },
    }


def _nodeclass(kind: str, spec: dict | None = None) -> dict:
    version = {"EC2NodeClass": "karpenter.k8s.aws/v1", "AKSNodeClass": "karpenter.azure.com/v1beta1"}[kind]
    default = {"EC2NodeClass": {"amiSelectorTerms": [{"alias": "al2023@latest"}]},
               "AKSNodeClass": {"imageFamily": "Ubuntu"}}[kind]
    spec = dict(spec or default)
    if kind == "EC2NodeClass":
        spec.update(EC2_REQUIRED)
    return {"apiVersion": version, "kind": kind, "metadata": {"name": "default"}, "spec": spec}


def _spread(replicas: int, cpu: str = "1", node_selector: dict | None = None) -> dict:
    """A Deployment whose pods spread over zones (maxSkew 1)."""
    pod = {
        "metadata": {"labels": {"app": "web"}},
        "spec": {
            "containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchLabels": {"app": "web"}}}
            ],
        },
    }
    if node_selector:
        pod["spec"]["nodeSelector"] = node_selector
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": pod},
    }


def simulate(tmp_path, docs: list[dict], *args: str):
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return CliRunner().invoke(main, ["simulate", str(path), "-o", "json", *args])


def summary(result) -> dict:
    assert result.exit_code == 0, f"exit {result.exit_code}: {result.stderr}"
    items = json.loads(result.stdout)["items"]
    return next(i for i in items if i["kind"] == "SimulationSummary")["status"]


def claims(result) -> list[dict]:
    return [c for c in summary(result)["nodeClaims"] if not c["launchFailed"]]


# --------------------------------------------------------------------------
# AWS


def test_the_docs_nodepool_with_zones_us_west_2a_and_b_is_simulated(tmp_path):
    pool = _nodepool("default", "EC2NodeClass", [
        {"key": ZONE, "operator": "In", "values": ["us-west-2a", "us-west-2b"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
    ])
    r = simulate(tmp_path, [pool, _nodeclass("EC2NodeClass"), _spread(4)], "--region", "us-west-2")
    got = claims(r)
    assert got and {c["zone"] for c in got} == {"us-west-2a", "us-west-2b"}
    # us-west-2 has no price table of its own: us-east-1's prices, marked as estimates
    assert {c["priceSource"] for c in got} == {"estimated"} and all(c["priceEstimated"] for c in got)
    assert "are estimates" in r.stderr


def test_eu_west_1_spreads_over_its_three_zones(tmp_path):
    pool = _nodepool("default", "EC2NodeClass", [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}])
    r = simulate(tmp_path, [pool, _nodeclass("EC2NodeClass"), _spread(3)], "--region", "eu-west-1")
    got = claims(r)
    assert {c["zone"] for c in got} == {"eu-west-1a", "eu-west-1b", "eu-west-1c"}
    assert summary(r)["pods"]["pending"] == 0


def test_a_scenario_region_is_used_too(tmp_path):
    pool = _nodepool("default", "EC2NodeClass", [])
    scenario = {"apiVersion": "karpy.dev/v1alpha1", "kind": "Scenario", "metadata": {"name": "s"},
                "spec": {"region": "ap-northeast-1"}}
    got = claims(simulate(tmp_path, [pool, _nodeclass("EC2NodeClass"), _spread(1), scenario]))
    assert got and got[0]["zone"] in {"ap-northeast-1a", "ap-northeast-1c", "ap-northeast-1d"}


def test_us_east_1_has_six_zones_and_its_own_prices():
    m5 = {it.name: it for it in aws.provider.instance_types("us-east-1", None)}["m5.large"]
    assert sorted({o.zone for o in m5.offerings}) == [f"us-east-1{z}" for z in "abcdef"]
    od = [o for o in m5.offerings if o.capacity_type == "on-demand"]
    assert {(o.price, o.price_source) for o in od} == {(0.096, "catalog")}


def test_every_aws_region_offers_types_in_its_listed_zones():
    cat = load_catalog("aws")
    for region in aws.provider.regions:
        types = aws.provider.instance_types(region, None)
        assert len(types) > 100, region
        zones = {o.zone for it in types for o in it.offerings}
        assert zones == set(cat["zones"][region]), region
        estimated_od = cat["price_regions"][region] != region
        for it in types[:50]:
            for o in it.offerings:
                assert o.price > 0
                if o.capacity_type == "on-demand":
                    assert o.price_estimated == estimated_od and o.price_source == ("estimated" if estimated_od else "catalog")


def test_aws_spot_prices_follow_the_spot_advisor_savings_of_each_type():
    types = {it.name: it for it in aws.provider.instance_types("us-east-1", None)}
    savings = {s["name"]: s["spot_savings"].get("us-east-1") for s in load_catalog("aws")["sizes"]}
    ratios = set()
    for name in ("m5.large", "c6a.2xlarge", "m7g.large", "r6i.xlarge"):
        od = next(o.price for o in types[name].offerings if o.capacity_type == "on-demand")
        spot = {o.price for o in types[name].offerings if o.capacity_type == "spot"}
        assert spot == {round(od * (1 - savings[name][0] / 100), 6)}
        ratios.add(round(next(iter(spot)) / od, 2))
    assert len(ratios) > 1  # one ratio per type, not one constant for all


def test_windows_nodes_are_billed_the_windows_license_but_ranked_by_linux_prices():
    win = {it.name: it for it in aws.provider.instance_types("us-east-1", {"spec": {"amiFamily": "Windows2022"}})}
    od = next(o for o in win["c6a.2xlarge"].offerings if o.capacity_type == "on-demand")
    assert od.price == 0.306  # what upstream Karpenter sees (Linux prices)
    assert od.bill == pytest.approx(0.306 + 8 * 0.046) and od.price_estimated and od.price_source == "estimated"


def test_a_windows_nodepool_shows_the_windows_price(tmp_path):
    pool = _nodepool("win", "EC2NodeClass", [
        {"key": "kubernetes.io/os", "operator": "In", "values": ["windows"]},
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c6a.2xlarge"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
    ])
    nodeclass = _nodeclass("EC2NodeClass", {"amiSelectorTerms": [{"alias": "windows2022@latest"}]})
    got = claims(simulate(tmp_path, [pool, nodeclass, _spread(1, node_selector={"kubernetes.io/os": "windows"})]))
    assert [(c["instanceType"], c["pricePerHour"], c["priceSource"]) for c in got] == [
        ("c6a.2xlarge", "0.6740", "estimated")]


def test_an_unknown_region_still_exits_2_naming_the_option(tmp_path):
    r = simulate(tmp_path, [_nodepool("default", "EC2NodeClass", []), _nodeclass("EC2NodeClass"), _spread(1)],
                 "--region", "eu-west-9")
    assert r.exit_code == 2 and "--region" in r.stderr and "eu-west-9" in r.stderr and "Traceback" not in r.stderr


# --------------------------------------------------------------------------
# Azure


def test_westeurope_uses_its_own_prices_and_zones(tmp_path):
    pool = _nodepool("default", "AKSNodeClass", [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["Standard_D4s_v5"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
    ])
    got = claims(simulate(tmp_path, [pool, _nodeclass("AKSNodeClass"), _spread(3)], "--region", "westeurope"))
    assert {c["zone"] for c in got} == {"westeurope-1", "westeurope-2", "westeurope-3"}
    # Karpenter-Azure's price table: Standard_D4s_v5 in westeurope at 0.230000 (eastus: 0.192000)
    assert {(c["pricePerHour"], c["priceSource"]) for c in got} == {("0.2300", "catalog")}


def test_every_azure_region_of_the_price_table_is_offered():
    assert len(azure.provider.regions) == 57
    for region in azure.provider.regions:
        types = azure.provider.instance_types(region, None)
        assert types, region
        assert {o.zone for it in types for o in it.offerings} == set(load_catalog("azure")["zones"][region])


def test_a_region_without_availability_zones_is_regional(tmp_path):
    it = {t.name: t for t in azure.provider.instance_types("westcentralus", None)}["Standard_D4s_v5"]
    assert {o.zone for o in it.offerings} == {"0"}
    assert it.labels["karpenter.azure.com/placement-scope"] == "regional"
    pool = _nodepool("default", "AKSNodeClass", [])
    got = claims(simulate(tmp_path, [pool, _nodeclass("AKSNodeClass"), _spread(1)], "--region", "westcentralus"))
    assert got and got[0]["zone"] == "0"
