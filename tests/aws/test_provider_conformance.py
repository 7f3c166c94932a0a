"""Upstream's EC2 instance-type and cloud-provider rows (aws/karpenter-provider-aws
pkg/providers/instancetype/suite_test.go and pkg/cloudprovider/suite_test.go) played against karpy's AWS provider
(karpy/cloudprovider/ec2) on moto: moto's DescribeInstanceTypes data, CreateFleet and launch templates.

Where upstream provisions a pod, the pod is scheduled by karpy's scheduler over the provider's instance types and
the NodeClaim it computes is launched through the provider's CreateFleet, as karpy's provisioner does."""

from __future__ import annotations

import copy

import pytest

from karpy.cloudprovider import aws as static
from karpy.cloudprovider.ec2.clients import Clients
from karpy.cloudprovider.ec2.instancetypes import InstanceTypes
from karpy.cloudprovider.ec2.nodeclass import HASH_ANNOTATION, HASH_VERSION_ANNOTATION
from karpy.resources import MEMORY, PODS, format_resource_list

from .conftest import REGION, nodeclass, preload

MI = 2**20


def _status(subnet_zones=("us-west-2a", "us-west-2b", "us-west-2c")) -> dict:
    return {"subnets": [{"id": f"subnet-{z}", "zone": z, "zoneID": ""} for z in subnet_zones],
            "amis": [{"id": "ami-a", "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]},
                     {"id": "ami-x", "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}


@pytest.fixture
def catalog_types(moto_server, ec2_catalog, monkeypatch):
    """A factory of InstanceTypes on the module's moto catalog (no AWS call: every refresh counts as done)."""
    from .conftest import aws_environ

    for k, v in aws_environ(moto_server.url).items():
        monkeypatch.setenv(k, v)

    def make(**kw) -> InstanceTypes:
        its = InstanceTypes(Clients(max_attempts=1), REGION, **kw)
        preload(its, ec2_catalog)
        its.refreshed["spot"] = its.refreshed["on-demand"] = its.now()
        return its

    return make


def listed(its: InstanceTypes, **spec) -> dict:
    return {t.name: t for t in its.list({**nodeclass(**spec), "status": _status()})}


# --- Overhead: aws.reservedENIs (RESERVED_ENIS) -----------------------------------------------------------------

@pytest.mark.parametrize("spec,pods,kube_reserved_mib", [
    ({"amiSelectorTerms": [{"alias": "al2@latest"}], "amiFamily": "AL2"}, 24, 640),  # 11 x 35 + 255
    ({"amiSelectorTerms": [{"alias": "al2023@latest"}], "amiFamily": "AL2023"}, 24, 640),
    ({"amiSelectorTerms": [{"alias": "bottlerocket@latest"}], "amiFamily": "Bottlerocket"}, 24, 519),  # 11 x 24 + 255
    ({"amiSelectorTerms": [{"alias": "windows2019@latest"}], "amiFamily": "Windows2019"}, 110, 1465),  # 11 x 110 + 255
    ({"amiSelectorTerms": [{"alias": "windows2022@latest"}], "amiFamily": "Windows2022"}, 110, 1465),
    ({"amiSelectorTerms": [{"alias": "windows2025@latest"}], "amiFamily": "Windows2025"}, 110, 1465),
    ({"amiSelectorTerms": [{"id": "ami-0c0570m0000000001"}], "amiFamily": "Custom"}, 24, 640),
], ids=["al2", "al2023", "bottlerocket", "windows2019", "windows2022", "windows2025", "custom"])
def test_reserved_enis_lower_max_pods_but_not_eni_limited_kube_reserved(catalog_types, spec, pods, kube_reserved_mib):
    """t3.large: 3 ENIs x 12 IPv4 addresses; with one ENI reserved, ENI-limited families get 2 x 11 + 2 = 24 pods
    while their kube-reserved memory still counts every ENI (35 pods); Bottlerocket's counts the 24 it runs;
    Windows runs 110 pods whatever the ENIs."""
    t3 = listed(catalog_types(reserved_enis=1), **spec)["t3.large"]
    assert t3.capacity[PODS] == pods
    # karpy's overhead is kube-reserved + system-reserved (none) + the 100Mi memory eviction threshold
    assert t3.overhead[MEMORY] == (kube_reserved_mib + 100) * MI


def test_reserved_enis_beyond_the_types_enis_leave_no_pods(catalog_types):
    t3 = listed(catalog_types(reserved_enis=1_000_000))["t3.large"]
    assert t3.capacity[PODS] == 0  # max(3 - 1,000,000, 0) ENIs: 0 pods, not the formula's + 2


# --- NitroEnclavesSupported ------------------------------------------------------------------------------------

@pytest.mark.parametrize("support,label", [("supported", "true"), ("unsupported", "false")])
def test_nitro_enclaves_support_becomes_the_nitro_sandbox_label(catalog_types, support, label):
    its = catalog_types()
    its.infos = {"m5.large": {**its.infos["m5.large"], "NitroEnclavesSupport": support}}
    (m5,) = its.list({**nodeclass(), "status": _status()})
    assert m5.labels["karpenter.k8s.aws/nitro-sandbox"] == label


# --- Network Interfaces (spec.networkInterfaces, EFA-only interfaces) ---------------------------------------------

def _available(it) -> int:
    return sum(1 for o in it.offerings if o.available)


def test_a_type_supporting_the_network_interfaces_keeps_its_offerings(catalog_types):
    its = catalog_types()
    before = _available(listed(its)["p5.48xlarge"])
    assert before > 0
    after = listed(its, networkInterfaces=[
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"}])["p5.48xlarge"]
    assert _available(after) == before
    assert after.capacity["vpc.amazonaws.com/efa"] == 1  # the EFA-only interfaces the NodeClass attaches


def test_a_type_not_supporting_the_network_interfaces_has_only_unavailable_offerings(catalog_types):
    its = catalog_types()
    assert _available(listed(its)["m6idn.32xlarge"]) > 0
    nis = [{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
           {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"}]
    nis += [{"networkCardIndex": i, "deviceIndex": 0, "interfaceType": "efa-only"} for i in range(1, 5)]
    m6idn = listed(its, networkInterfaces=nis)["m6idn.32xlarge"]  # 2 network cards, 2 EFAs at most
    assert m6idn.offerings and not any(o.available for o in m6idn.offerings)


def test_max_pods_ignore_efa_only_interfaces_on_other_network_cards(catalog_types):
    m6idn = listed(catalog_types(), networkInterfaces=[
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"}])["m6idn.32xlarge"]
    assert m6idn.capacity[PODS] == 8 * 49 + 2  # 8 ENIs on card 0, 50 IPv4 addresses each


def test_max_pods_lose_the_enis_efa_only_interfaces_take_on_network_card_0(catalog_types):
    m6idn = listed(catalog_types(), networkInterfaces=[
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"}])["m6idn.32xlarge"]
    assert m6idn.capacity[PODS] == 7 * 49 + 2


# --- Metadata Options -------------------------------------------------------------------------------------------

def _launch_template_metadata(faults) -> list[dict]:
    return [c["LaunchTemplateData"]["MetadataOptions"] for c in faults.calls["CreateLaunchTemplate"]]


def test_launch_templates_default_the_metadata_options(env):
    from .conftest import claim

    p, nc, faults, account = env
    p.create(claim())
    opts = _launch_template_metadata(faults)
    assert opts and all(o["HttpEndpoint"] == "enabled" and o["HttpProtocolIpv6"] == "disabled"
                        and o["HttpPutResponseHopLimit"] == 1 and o["HttpTokens"] == "required" for o in opts)


def test_launch_templates_take_the_nodeclass_metadata_options(env):
    from .conftest import claim

    p, nc, faults, account = env
    nc["spec"]["metadataOptions"] = {"httpEndpoint": "disabled", "httpProtocolIPv6": "enabled",
                                     "httpPutResponseHopLimit": 1, "httpTokens": "optional"}
    p.create(claim())
    opts = _launch_template_metadata(faults)
    assert opts and all(o["HttpEndpoint"] == "disabled" and o["HttpProtocolIpv6"] == "enabled"
                        and o["HttpPutResponseHopLimit"] == 1 and o["HttpTokens"] == "optional" for o in opts)


# --- Static drift: the EC2NodeClass hash and its version -----------------------------------------------------------

@pytest.fixture
def launched(env):
    from .conftest import claim

    p, nc, faults, account = env
    out = p.create(claim())
    nodeclaim = {"metadata": {"name": "nc-1", "annotations": {}}, "status": {"providerID": out["status"]["providerID"]}}
    return p, nc, nodeclaim


def _drift(p, nc, nodeclaim, class_ann: dict, claim_ann: dict):
    nc = copy.deepcopy(nc)
    nc["metadata"]["annotations"] = class_ann
    nc["spec"]["tags"] = {"Test Key": "Test Value"}  # a static field changed: karpy's own hash moves too
    nodeclaim = copy.deepcopy(nodeclaim)
    nodeclaim["metadata"]["annotations"] = claim_ann
    return p.is_drifted(nodeclaim, nc)


def test_hashes_of_different_hash_versions_are_not_compared(launched):
    p, nc, nodeclaim = launched
    assert _drift(p, nc, nodeclaim, {HASH_ANNOTATION: "test-hash-111111", HASH_VERSION_ANNOTATION: "test-hash-version-1"},
                  {HASH_ANNOTATION: "test-hash-222222", HASH_VERSION_ANNOTATION: "test-hash-version-2"}) is None
    # the same version: the differing hashes are NodeClassDrift
    assert _drift(p, nc, nodeclaim, {HASH_ANNOTATION: "test-hash-111111", HASH_VERSION_ANNOTATION: "test-hash-version-1"},
                  {HASH_ANNOTATION: "test-hash-222222", HASH_VERSION_ANNOTATION: "test-hash-version-1"}) == "NodeClassDrift"


def test_no_hash_drift_without_a_hash_version_on_the_nodeclass(launched):
    p, nc, nodeclaim = launched
    assert _drift(p, nc, nodeclaim, {HASH_ANNOTATION: "test-hash-111111"},
                  {HASH_ANNOTATION: "test-hash-222222", HASH_VERSION_ANNOTATION: "test-hash-version-2"}) is None


def test_no_hash_drift_without_a_hash_version_on_the_nodeclaim(launched):
    p, nc, nodeclaim = launched
    assert _drift(p, nc, nodeclaim, {HASH_ANNOTATION: "test-hash-111111", HASH_VERSION_ANNOTATION: "test-hash-version-1"},
                  {HASH_ANNOTATION: "test-hash-222222"}) is None


# --- Launch: which types CreateFleet is offered ------------------------------------------------------------------

def provision(p, nc, requirements: list[dict], pod_cpu: str = "1", requests: dict | None = None,
              node_selector: dict | None = None):
    """Schedule one pod with karpy's scheduler over the provider's instance types for a NodePool with
    ``requirements``, launch the NodeClaim it computes through the provider; (NewNodeClaim, launched NodeClaim)."""
    from helpers import nodepool, pod, solve, template

    types = p.get_instance_types({}, nc)
    tpl = template(nodepool("default", requirements=requirements), types,
                   provider_labels=static.AWSProvider.WELL_KNOWN_LABELS)
    results = solve(tpl, [pod(cpu=pod_cpu, requests=requests, node_selector=node_selector)])
    if not results.new_nodeclaims:
        return None, None
    (new,) = results.new_nodeclaims
    reqs = [r for r in new.requirements.to_node_selector() if r["key"] != "kubernetes.io/hostname"]
    if not any(r["key"] == "node.kubernetes.io/instance-type" for r in reqs):
        reqs.append({"key": "node.kubernetes.io/instance-type", "operator": "In",
                     "values": [t.name for t in new.instance_types]})
    claim = {"metadata": {"name": "nc-1", "labels": {"karpenter.sh/nodepool": "default"}},
             "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                      "requirements": reqs, "resources": {"requests": format_resource_list(new.requests)}}}
    return new, p.create(claim)


def _override_types(faults) -> list[str]:
    (req,) = faults.calls["CreateFleet"]
    return [o["InstanceType"] for cfg in req["LaunchTemplateConfigs"] for o in cfg["Overrides"]]


def test_metal_types_stay_in_the_fleet_when_a_requirement_has_min_values(env):
    p, nc, faults, account = env
    new, out = provision(p, nc, [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"], "minValues": 1},
                                 {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]}])
    assert out is not None
    assert any(t.endswith(".metal") for t in _override_types(faults))


def test_metal_types_are_left_out_of_the_fleet_without_min_values(env):
    p, nc, faults, account = env
    new, out = provision(p, nc, [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                                 {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]}])
    assert "m5.metal" in [t.name for t in new.instance_types]
    assert _override_types(faults) and not any(t.endswith(".metal") for t in _override_types(faults))


def test_the_fleet_is_offered_the_60_cheapest_types(env):
    p, nc, faults, account = env
    on_demand = [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]
    new, out = provision(p, nc, on_demand)
    assert out is not None

    def cheapest(t):
        return min((o.price for o in t.offerings if o.available and o.capacity_type == "on-demand"), default=float("inf"))

    ranked = sorted(p.get_instance_types({}, nc), key=lambda t: (cheapest(t), t.name))
    expected = {t.name for t in ranked[:100]}
    offered = set(_override_types(faults))
    assert len(offered) == 60
    assert offered <= expected, sorted(offered - expected)


def test_a_neuroncore_request_launches_inf2(env):
    p, nc, faults, account = env
    # the AL2023 neuron AMI the EC2NodeClass resolves for accelerated types (moto's SSM holds only the standard ones)
    nc["status"]["amis"].append({"id": "ami-0a2023x8600000001", "requirements": [
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "karpenter.k8s.aws/instance-accelerator-count", "operator": "Exists"}]})
    inf2 = next(t for t in p.get_instance_types({}, nc) if t.name == "inf2.xlarge")
    assert inf2.capacity["aws.amazon.com/neuroncore"] == 2  # one Inferentia2 device of 2 cores
    new, out = provision(p, nc, [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["inf2.xlarge"]}],
                         pod_cpu="0.1", requests={"aws.amazon.com/neuroncore": "2"})
    assert out["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "inf2.xlarge"
    assert [i["InstanceType"] for i in account.instances()] == ["inf2.xlarge"]


# --- vpc.amazonaws.com/PrivateIPv4Address (Windows) ----------------------------------------------------------------

def _windows(nc: dict) -> None:
    nc["spec"]["amiSelectorTerms"] = [{"alias": "windows2022@latest"}]
    nc["status"]["amis"] = [{"id": "ami-0a2023x8600000001", "requirements": [
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]


def test_a_private_ipv4_address_request_launches_a_windows_node_on_a_type_the_vpc_controller_knows(env):
    from karpy.cloudprovider.ec2.instancetypes import vpc_ipv4_per_interface

    p, nc, faults, account = env
    _windows(nc)
    new, out = provision(p, nc, [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                         requests={"vpc.amazonaws.com/PrivateIPv4Address": "1"})
    name = out["metadata"]["labels"]["node.kubernetes.io/instance-type"]
    assert out["metadata"]["labels"]["kubernetes.io/os"] == "windows"
    assert vpc_ipv4_per_interface().get(name, 0) > 0
    it = next(t for t in p.get_instance_types({}, nc) if t.name == name)
    assert it.capacity["vpc.amazonaws.com/PrivateIPv4Address"] == vpc_ipv4_per_interface()[name] - 1


def test_a_type_the_vpc_controller_does_not_advertise_gets_no_private_ipv4_address_pod(env):
    p, nc, faults, account = env
    _windows(nc)
    # a type EC2 describes (2 vCPUs, 8 GiB, 3 ENIs x 10 IPv4) that the VPC resource controller's limits lack
    info = {**copy.deepcopy(p.types.infos["m5.large"]), "InstanceType": "test"}
    p.types.infos = {**p.types.infos, "test": info}
    p.types.zones = {**p.types.zones, "test": {"us-west-2a"}}
    p.types.on_demand["test"] = 0.01
    p.types.version += 1
    only_test = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["test"]},
                 {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]
    test = next(t for t in p.get_instance_types({}, nc) if t.name == "test")
    assert test.capacity["vpc.amazonaws.com/PrivateIPv4Address"] == 0
    assert provision(p, nc, only_test, requests={"vpc.amazonaws.com/PrivateIPv4Address": "1"}) == (None, None)
    assert "CreateFleet" not in faults.calls
    # without the request the same pod launches there
    new, out = provision(p, nc, only_test)
    assert out["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "test"


# --- Tenancy -----------------------------------------------------------------------------------------------------

TENANCY = "karpenter.k8s.aws/instance-tenancy"
ON_DEMAND = {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}


def _tenancies(faults) -> set[str]:
    return {c["LaunchTemplateData"]["Placement"]["Tenancy"] for c in faults.calls["CreateLaunchTemplate"]}


@pytest.mark.parametrize("np_tenancy,pod_tenancy,launched", [
    (None, None, "default"),  # no requirement
    (["default", "dedicated"], None, "default"),  # both allowed: default
    (None, "default", "default"),
    (None, "dedicated", "dedicated"),
], ids=["no-requirement", "both-allowed", "pod-requires-default", "pod-requires-dedicated"])
def test_the_tenancy_a_node_launches_with(env, np_tenancy, pod_tenancy, launched):
    p, nc, faults, account = env
    reqs = [ON_DEMAND] + ([{"key": TENANCY, "operator": "In", "values": np_tenancy}] if np_tenancy else [])
    new, out = provision(p, nc, reqs, node_selector={TENANCY: pod_tenancy} if pod_tenancy else None)
    assert out["metadata"]["labels"][TENANCY] == launched
    assert _tenancies(faults) == {launched}


@pytest.mark.parametrize("np_tenancy,pod_tenancy", [("dedicated", "default"), ("default", "dedicated")],
                         ids=["dedicated-np", "default-np"])
def test_a_pod_requiring_the_other_tenancy_than_its_nodepool_is_not_scheduled(env, np_tenancy, pod_tenancy):
    p, nc, faults, account = env
    reqs = [ON_DEMAND, {"key": TENANCY, "operator": "In", "values": [np_tenancy]}]
    assert provision(p, nc, reqs, node_selector={TENANCY: pod_tenancy}) == (None, None)
    assert "CreateFleet" not in faults.calls
    new, out = provision(p, nc, reqs, node_selector={TENANCY: np_tenancy})  # its NodePool's tenancy launches
    assert out["metadata"]["labels"][TENANCY] == np_tenancy


# --- EFA interfaces in the launch template ------------------------------------------------------------------------

M6IDN = [ON_DEMAND, {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m6idn.32xlarge"]}]


def _interfaces(faults) -> list[list[dict]]:
    return [c["LaunchTemplateData"]["NetworkInterfaces"] for c in faults.calls["CreateLaunchTemplate"]]


def test_an_efa_request_attaches_one_efa_interface_per_network_card(env):
    p, nc, faults, account = env
    new, out = provision(p, nc, M6IDN, requests={"vpc.amazonaws.com/efa": "1"})
    assert out["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "m6idn.32xlarge"
    sg = [g["id"] for g in nc["status"]["securityGroups"]]
    assert _interfaces(faults) == [[  # m6idn.32xlarge: 2 EFAs
        {"NetworkCardIndex": 0, "DeviceIndex": 0, "InterfaceType": "efa", "Groups": sg},
        {"NetworkCardIndex": 1, "DeviceIndex": 1, "InterfaceType": "efa", "Groups": sg}]]


def test_without_an_efa_request_the_launch_template_has_one_plain_interface(env):
    p, nc, faults, account = env
    provision(p, nc, M6IDN)
    assert _interfaces(faults) == [[{"DeviceIndex": 0, "Groups": [g["id"] for g in nc["status"]["securityGroups"]]}]]


def test_the_nodeclass_network_interfaces_are_the_launch_templates(env):
    p, nc, faults, account = env
    nc["spec"]["associatePublicIPAddress"] = False
    nc["spec"]["networkInterfaces"] = [{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
                                       {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"}]
    new, out = provision(p, nc, M6IDN, requests={"vpc.amazonaws.com/efa": "1"})
    assert out is not None
    sg = [g["id"] for g in nc["status"]["securityGroups"]]
    assert _interfaces(faults) == [[
        {"NetworkCardIndex": 0, "DeviceIndex": 0, "InterfaceType": "interface", "Groups": sg,
         "AssociatePublicIpAddress": False},
        {"NetworkCardIndex": 1, "DeviceIndex": 0, "InterfaceType": "efa-only", "Groups": sg}]]
