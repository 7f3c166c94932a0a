"""``karpy simulate --prices FILE``: the user's own prices and discounts bill the nodes; bad files exit 2."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from karpy.cli import main
from karpy.cloudprovider.user_prices import PriceFileError, load_user_prices

NODECLASS = {
    "apiVersion": "karpenter.k8s.aws/v1",
    "kind": "EC2NodeClass",
    "metadata": {"name": "default"},
    "spec": {
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "role": "KarpenterNodeRole",
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
    },
}


def _nodepool(types: list[str], capacity: str = "on-demand") -> dict:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity]},
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]},
                    ],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                }
            }
        },
    }


def _pod(cpu: str = "500m") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}]},
    }


@pytest.fixture
def simulate(tmp_path):
    """``simulate(prices_text, name, docs=...)``: the CliRunner result of a run with that prices file."""

    def _run(prices: str | None, name: str = "prices.csv", docs: list[dict] | None = None, *args: str):
        manifest = tmp_path / "in.yaml"
        manifest.write_text(yaml.safe_dump_all(docs or [_nodepool(["m5.large"]), NODECLASS, _pod()]))
        extra = []
        if prices is not None:
            (tmp_path / name).write_text(prices)
            extra = ["--prices", str(tmp_path / name)]
        return CliRunner().invoke(main, ["simulate", str(manifest), "-o", "json", *extra, *args])

    return _run


def _summary(result) -> dict:
    assert result.exit_code == 0, f"exit {result.exit_code}: {result.stderr}"
    items = json.loads(result.stdout)["items"]
    return next(i for i in items if i["kind"] == "SimulationSummary")["status"]


def _claim(result) -> dict:
    (claim,) = [c for c in _summary(result)["nodeClaims"] if not c["launchFailed"]]
    return claim


# --------------------------------------------------------------------------
# prices that apply


def test_without_a_file_the_catalog_price_is_shown_with_its_source(simulate):
    c = _claim(simulate(None))
    assert (c["instanceType"], c["pricePerHour"], c["priceSource"]) == ("m5.large", "0.0960", "catalog")


def test_a_negotiated_price_from_csv_bills_the_node(simulate):
    r = simulate("instanceType,region,capacityType,price\nm5.large,us-east-1,on-demand,0.0672\n")
    c = _claim(r)
    assert (c["pricePerHour"], c["priceSource"]) == ("0.0672", "user")
    assert "priceEstimated" not in c
    assert _summary(r)["costPerHour"] == "0.0672"
    claim = next(i for i in json.loads(r.stdout)["items"] if i["kind"] == "NodeClaim")
    assert claim["metadata"]["annotations"]["karpy.dev/price-source"] == "user"


def test_a_percentage_discount_from_yaml_applies_to_every_type(simulate):
    r = simulate("prices:\n- {instanceType: '*', region: '*', capacityType: on-demand, discount: 25%}\n", "p.yaml")
    assert _claim(r)["pricePerHour"] == "0.0720"  # 0.096 less 25 %


def test_the_most_specific_row_wins(simulate):
    text = ("instanceType,region,capacityType,price,zone,discount\n"
            "*,*,*,,,50\n"
            "m5.large,us-east-1,on-demand,0.05,us-east-1a,\n"
            "m5.large,us-east-1,on-demand,0.07,,\n")
    assert _claim(simulate(text))["pricePerHour"] == "0.0500"


def test_a_row_for_another_capacity_type_or_region_does_not_apply(simulate):
    text = "instanceType,region,capacityType,price\nm5.large,us-east-1,spot,0.01\nm5.large,eu-west-1,on-demand,0.02\n"
    c = _claim(simulate(text))
    assert (c["pricePerHour"], c["priceSource"]) == ("0.0960", "catalog")


def test_karpenter_still_chooses_by_public_prices(simulate):
    """A savings plan changes the bill, not which instance upstream Karpenter launches."""
    docs = [_nodepool(["m5.large", "m5.xlarge"]), NODECLASS, _pod()]
    plain = _claim(simulate(None, docs=docs))
    priced = _claim(simulate("instanceType,region,capacityType,price\nm5.large,us-east-1,on-demand,9.5\n", docs=docs))
    assert plain["instanceType"] == priced["instanceType"] == "m5.large"
    assert priced["pricePerHour"] == "9.5000"


def test_user_prices_replace_estimates_and_silence_the_note(simulate):
    docs = [_nodepool(["m5.large"], capacity="spot"), NODECLASS, _pod()]
    estimated = simulate(None, docs=docs)
    assert _claim(estimated)["priceSource"] == "estimated" and "are estimates" in estimated.stderr
    mine = simulate("instanceType,region,capacityType,price\nm5.large,*,spot,0.031\n", docs=docs)
    assert (_claim(mine)["pricePerHour"], _claim(mine)["priceSource"]) == ("0.0310", "user")
    assert "are estimates" not in mine.stderr


def test_a_discount_applies_to_the_billed_windows_price(tmp_path):
    from karpy.cloudprovider import aws

    win = {it.name: it for it in aws.provider.instance_types("us-east-1", {"spec": {"amiFamily": "Windows2022"}})}
    od = next(o for o in win["c6a.2xlarge"].offerings if o.capacity_type == "on-demand")
    p = tmp_path / "p.csv"
    p.write_text("instanceType,region,capacityType,discount\nc6a.2xlarge,us-east-1,on-demand,10%\n")
    rules = load_user_prices(p)
    assert rules.apply("c6a.2xlarge", "eu-west-1", od) is od  # no row for that region: unchanged
    billed = rules.apply("c6a.2xlarge", "us-east-1", od)
    assert billed.bill == round(od.bill * 0.9, 6) and billed.price == od.price == 0.306
    assert billed.price_source == "user" and not billed.price_estimated


# --------------------------------------------------------------------------
# bad files


BAD = [
    ("prices.csv", "instanceType,region,capacityType,price\nm5.large,us-east-1,on-demand,cheap\n",
     "line 2: price: Invalid value"),
    ("prices.csv", "instanceType,region,capacityType,price\nm5.large,us-east-1,ondemand,0.1\n",
     'line 2: capacityType: Unsupported value: "ondemand"'),
    ("prices.csv", "instanceType,region,price\nm5.large,us-east-1,0.1\n",
     "line 1: capacityType: Required value"),
    ("prices.csv", "instanceType,region,capacityType,price\n\nm5.lrage,us-east-1,on-demand,0.1\n",
     'line 3: instanceType: Unsupported value: "m5.lrage"'),
    ("prices.csv", "instanceType,region,capacityType,price\nm5.large,us-east-9,on-demand,0.1\n",
     'line 2: region: Unsupported value: "us-east-9"'),
    ("prices.csv", "instanceType,region,capacityType,price,discount\nm5.large,us-east-1,on-demand,0.1,10\n",
     "line 2: price: Required value: exactly one of price"),
    ("prices.csv", "instanceType,region,capacityType,discount\nm5.large,us-east-1,on-demand,120%\n",
     "line 2: discount: Invalid value"),
    ("prices.csv", "instanceType,region,capacityType,price\nm5.large,us-east-1,on-demand,-1\n",
     "line 2: price: Invalid value"),
    ("prices.csv", "instanceType,region,capacityType,price,cost\nm5.large,us-east-1,on-demand,0.1,2\n",
     "line 1: cost: Unsupported field"),
    ("prices.csv", "instanceType,region,capacityType,price\nm5.large,us-east-1,on-demand,0.1\n"
                   "m5.large,us-east-1,on-demand,0.2\n", "line 3: Duplicate value: the same instanceType, region, "
                                                        "capacityType and zone as line 2"),
    ("prices.csv", "instanceType,region,capacityType,price\nm5.large,us-east-1\n", "line 2: Invalid value: 2 columns"),
    ("prices.csv", "instanceType,region,capacityType,price\n", "Required value: no prices in the file"),
    ("prices.yaml", "- instanceType: m5.large\n  region: us-east-1\n  capacityType: on-demand\n  price: [1]\n",
     "line 1: price: Invalid value"),
    ("prices.yaml", "- {instanceType: m5.large, region: us-east-1, capacityType: on-demand, price: 0.1}\n"
                    "- {instanceType: m5.large, region: us-east-1, price: 0.1}\n", "line 2: capacityType: Required value"),
    ("prices.yaml", "prices: [{instanceType: m5.large\n", "not valid YAML"),
    ("prices.yaml", "just a string\n", "line 1: Invalid value: expected a list of prices"),
]


@pytest.mark.parametrize("name,text,message", BAD, ids=[f"{i}-{n}" for i, (n, _, _) in enumerate(BAD)])
def test_a_bad_prices_file_exits_2_naming_file_line_and_field(simulate, name, text, message):
    r = simulate(text, name)
    assert r.exit_code == 2, r.stdout
    assert "--prices: " in r.stderr and name in r.stderr and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_a_missing_prices_file_exits_2(simulate, tmp_path):
    r = simulate(None, "unused", None, "--prices", str(tmp_path / "nope.csv"))
    assert r.exit_code == 2 and "nope.csv: cannot read" in r.stderr


def test_yaml_entries_report_their_own_line(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("# my rates\nprices:\n  - instanceType: m5.large\n    region: us-east-1\n    capacityType: on-demand\n"
                 "    price: 0.05\n  - instanceType: m5.xlarge\n    region: us-east-1\n    capacityType: spot\n"
                 "    discount: lots\n")
    with pytest.raises(PriceFileError, match=r"p.yaml: line 7: discount: Invalid value: 'lots'"):
        load_user_prices(p)

