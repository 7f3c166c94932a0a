"""A moto server (a separate process, real HTTP on 127.0.0.1) seeded as an EKS account, and a fault injector.

What moto lacks is filled client-side, as karpy's users would see it from AWS: EKS AMI parameters in SSM live
under a test root (``/test/aws/service``: moto refuses writes under ``/aws``), AMIs come from a JSON file
(``MOTO_AMIS_PATH``), and :class:`FaultInjector` adds CreateFleet capacity errors, AWS errors on any call and
spot prices through botocore's events.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest

if os.environ.get("CI", "").lower() == "true":  # under CI the suite runs or fails, never skips
    import boto3  # noqa: F401  (the test extra pins it)
boto3 = pytest.importorskip("boto3", reason="boto3 is not installed: pip install -e '.[test]'")

REGION = "us-west-2"
CLUSTER = "c1"
K8S = "1.33"
SSM_ROOT = "/test/aws/service"
ROLE = "KarpenterNodeRole-c1"
ZONES = ("us-west-2a", "us-west-2b", "us-west-2c")
AMIS = [  # (id, name, arch, created)
    ("ami-0a2023x8600000001", "amazon-eks-node-al2023-x86_64-standard-1.33-v20250101", "x86_64", "2025-01-01T00:00:00.000Z"),
    ("ami-0a2023x8600000002", "amazon-eks-node-al2023-x86_64-standard-1.33-v20250601", "x86_64", "2025-06-01T00:00:00.000Z"),
    ("ami-0a2023arm00000001", "amazon-eks-node-al2023-arm64-standard-1.33-v20250101", "arm64", "2025-01-01T00:00:00.000Z"),
    ("ami-0a2023arm00000002", "amazon-eks-node-al2023-arm64-standard-1.33-v20250601", "arm64", "2025-06-01T00:00:00.000Z"),
    ("ami-0b0771eac00000001", "bottlerocket-aws-k8s-1.33-aarch64-v1.40.0", "arm64", "2025-05-01T00:00:00.000Z"),
    ("ami-0b0771eac00000002", "bottlerocket-aws-k8s-1.33-x86_64-v1.40.0", "x86_64", "2025-05-01T00:00:00.000Z"),
    ("ami-0c0570m0000000001", "my-golden-image-2025", "arm64", "2025-03-01T00:00:00.000Z"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MotoServer:
    """``python -m moto.server`` on 127.0.0.1 and a free port; stopped by :meth:`stop`."""

    def __init__(self, workdir):
        amis = workdir / "amis.json"
        amis.write_text(json.dumps([{
            "ami_id": i, "name": n, "description": n, "owner_id": "602401143452", "public": True,
            "virtualization_type": "hvm", "architecture": a, "state": "available", "platform": None,
            "image_type": "machine", "hypervisor": "xen", "root_device_type": "ebs", "root_device_name": "/dev/xvda",
            "sriov": "simple", "creation_date": c} for i, n, a, c in AMIS]))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(workdir / "moto.log", "w")
        self.p = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                  stdout=self.log, stderr=subprocess.STDOUT,
                                  env={**os.environ, "MOTO_AMIS_PATH": str(amis)})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.url + "/moto-api/", timeout=1)
                return
            except Exception:  # noqa: BLE001 - starting
                if self.p.poll() is not None:
                    raise RuntimeError("moto server exited: " + (workdir / "moto.log").read_text())
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("moto server did not start")

    def reset(self) -> None:
        urllib.request.urlopen(urllib.request.Request(self.url + "/moto-api/reset", method="POST"), timeout=10)

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)
        self.log.close()


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory):
    """One moto server for the session (per xdist worker): tests that need a clean account reset it
    (``account`` does, before seeding); moto's instance-type catalog is static, so a reset keeps it."""
    server = MotoServer(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


def aws_environ(url: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null"}


class Account:
    """The seeded account: its VPC, subnets, security groups, role, cluster, queue and AMI parameters."""

    def __init__(self, url: str, cluster: str = CLUSTER, role: str = ROLE):
        self.url = url
        kw = dict(endpoint_url=url, region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing")
        self.ec2 = boto3.client("ec2", **kw)
        self.ssm = boto3.client("ssm", **kw)
        self.iam = boto3.client("iam", **kw)
        self.eks = boto3.client("eks", **kw)
        self.sqs = boto3.client("sqs", **kw)
        vpc = self.ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        self.vpc = vpc
        self.subnets = {}
        for i, z in enumerate(ZONES):
            sid = self.ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i * 16}.0/20", AvailabilityZone=z)["Subnet"]["SubnetId"]
            self.ec2.create_tags(Resources=[sid], Tags=[{"Key": "karpenter.sh/discovery", "Value": cluster},
                                                        {"Key": "Name", "Value": f"private-{z}"}])
            self.subnets[z] = sid
        self.sg = self.ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc)["GroupId"]
        self.ec2.create_tags(Resources=[self.sg], Tags=[{"Key": "karpenter.sh/discovery", "Value": cluster}])
        self.other_sg = self.ec2.create_security_group(GroupName="other", Description="other", VpcId=vpc)["GroupId"]
        trust = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                                    "Principal": {"Service": "ec2.amazonaws.com"}}]})
        self.role_arn = self.iam.create_role(RoleName=role, AssumeRolePolicyDocument=trust)["Role"]["Arn"]
        self.eks.create_cluster(name=cluster, version=K8S, roleArn=self.role_arn,
                                resourcesVpcConfig={"subnetIds": list(self.subnets.values())})
        self.queue_url = self.sqs.create_queue(QueueName=cluster)["QueueUrl"]
        for arch, ami in (("x86_64", "ami-0a2023x8600000002"), ("arm64", "ami-0a2023arm00000002")):
            self.put_param(f"eks/optimized-ami/{K8S}/amazon-linux-2023/{arch}/standard/recommended/image_id", ami)
        for arch, ami in (("x86_64", "ami-0b0771eac00000002"), ("arm64", "ami-0b0771eac00000001")):
            self.put_param(f"bottlerocket/aws-k8s-{K8S}/{arch}/latest/image_id", ami)

    def put_param(self, path: str, value: str) -> None:
        self.ssm.put_parameter(Name=f"{SSM_ROOT}/{path}", Value=value, Type="String", Overwrite=True)

    def instances(self, states=("pending", "running")) -> list[dict]:
        out = []
        for r in self.ec2.describe_instances(Filters=[{"Name": "instance-state-name", "Values": list(states)}])["Reservations"]:
            out.extend(r["Instances"])
        return out


@pytest.fixture
def account(moto_server, monkeypatch):
    moto_server.reset()
    for k, v in aws_environ(moto_server.url).items():
        monkeypatch.setenv(k, v)
    return Account(moto_server.url)


def nodeclass(name: str = "default", uid: str = "1111-2222", **spec: Any) -> dict:
    base = {"role": ROLE, "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}]}
    base.update(spec)
    return {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": name, "uid": uid, "generation": 1}, "spec": base}


class FaultInjector:
    """AWS behaviour moto does not emulate, injected on karpy's own clients through botocore's events.

    * ``fail(operation, code, message)``: the next calls of an operation fail with that AWS error;
    * ``ice(type, zone, capacity_type)``: CreateFleet returns that offering in ``Errors`` with
      InsufficientInstanceCapacity instead of launching it (and launches the cheapest remaining override,
      by Priority, as lowest-price does, where moto takes the first);
    * ``spot_prices``: DescribeSpotPriceHistory answers these (type, zone) -> price records;
    * ``capacity_reservations``: DescribeCapacityReservations (which moto lacks) answers these, filtered by
      id, state and tags as EC2 filters them.
    """

    def __init__(self, *clients: Any):
        self.failures: dict[str, tuple[str, str, int]] = {}
        self.ice_pools: dict[tuple[str, str, str], str] = {}
        self.spot_prices: dict[tuple[str, str], float] | None = None
        self.capacity_reservations: list[dict] | None = None
        self.calls: dict[str, list[dict]] = {}
        self._removed: list[dict] = []
        for c in clients:
            ev = c.meta.events
            ev.register("provide-client-params.*.*", self._record)
            ev.register("before-call.*.*", self._before_call)
            ev.register("before-parameter-build.ec2.CreateFleet", self._fleet_params)
            ev.register("after-call.ec2.CreateFleet", self._fleet_errors)
            ev.register("after-call.ec2.DescribeSpotPriceHistory", self._spot)

    def fail(self, operation: str, code: str, message: str = "injected", times: int = 1_000_000) -> None:
        self.failures[operation] = (code, message, times)

    def ice(self, instance_type: str, zone: str, capacity_type: str = "on-demand",
            code: str = "InsufficientInstanceCapacity") -> None:
        self.ice_pools[(instance_type, zone, capacity_type)] = code

    def _record(self, params: dict, model: Any, **_: Any) -> None:
        self.calls.setdefault(model.name, []).append(json.loads(json.dumps(params, default=str)))

    def _before_call(self, model: Any, params: dict, **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse

        f = self.failures.get(model.name)
        if f is not None:
            code, message, times = f
            if times <= 1:
                del self.failures[model.name]
            else:
                self.failures[model.name] = (code, message, times - 1)
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": code, "Message": message}}, model.name)
        if model.name == "DescribeCapacityReservations" and self.capacity_reservations is not None:
            asked = self.calls[model.name][-1]  # the caller's parameters (``params`` here is the HTTP request)
            return AWSResponse(None, 200, {}, None), {"CapacityReservations": self._reservations(asked)}
        if model.name == "CreateFleet" and self._all_removed:
            self._all_removed = False
            errors, self._removed = self._errors(), []
            return AWSResponse(None, 200, {}, None), {"FleetId": "fleet-injected", "Instances": [], "Errors": errors}
        return None

    _all_removed = False

    def _reservations(self, params: dict) -> list[dict]:
        out = []
        for r in self.capacity_reservations or ():
            tags = {t["Key"]: t["Value"] for t in r.get("Tags") or ()}
            if params.get("CapacityReservationIds") and r["CapacityReservationId"] not in params["CapacityReservationIds"]:
                continue
            ok = True
            for f in params.get("Filters") or ():
                name, values = f["Name"], f["Values"]
                have = {"state": r.get("State"), "owner-id": r.get("OwnerId"),
                        "instance-match-criteria": r.get("InstanceMatchCriteria")}.get(name)
                if name.startswith("tag:"):
                    have = tags.get(name[4:])
                elif name == "tag-key":
                    have = next((k for k in tags if k in values), None)
                ok = ok and have in values
            if ok:
                out.append(r)
        return out

    def _fleet_params(self, params: dict, **_: Any) -> None:
        self._removed = []
        ct = params.get("TargetCapacitySpecification", {}).get("DefaultTargetCapacityType", "on-demand")
        for cfg in params.get("LaunchTemplateConfigs", []):
            keep = []
            for o in cfg.get("Overrides", []):
                key = (o.get("InstanceType"), o.get("AvailabilityZone"), ct)
                if key in self.ice_pools:
                    self._removed.append({**o, "_code": self.ice_pools[key], "_lt": cfg["LaunchTemplateSpecification"],
                                          "_ct": ct})
                else:
                    keep.append(o)
            cfg["Overrides"] = sorted(keep, key=lambda o: o.get("Priority", 0))
        self._all_removed = bool(self._removed) and not any(cfg["Overrides"] for cfg in params.get("LaunchTemplateConfigs", []))

    def _errors(self) -> list[dict]:
        return [{"LaunchTemplateAndOverrides": {"LaunchTemplateSpecification": o["_lt"],
                                                "Overrides": {k: v for k, v in o.items() if not k.startswith("_")}},
                 "Lifecycle": "spot" if o["_ct"] == "spot" else "on-demand",
                 "ErrorCode": o["_code"], "ErrorMessage": "We currently do not have sufficient capacity (injected)"}
                for o in self._removed]

    def _fleet_errors(self, parsed: dict, **_: Any) -> None:
        if self._removed and isinstance(parsed, dict) and "Instances" in parsed:
            parsed.setdefault("Errors", []).extend(self._errors())
            self._removed = []

    def _spot(self, parsed: dict, **_: Any) -> None:
        if self.spot_prices is not None and isinstance(parsed, dict):
            parsed["SpotPriceHistory"] = [
                {"InstanceType": t, "AvailabilityZone": z, "SpotPrice": f"{p:.6f}", "ProductDescription": "Linux/UNIX",
                 "Timestamp": "2026-01-01T00:00:00Z"} for (t, z), p in self.spot_prices.items()]
            parsed.pop("NextToken", None)


@pytest.fixture(scope="session")
def ec2_catalog(moto_server):
    """moto's DescribeInstanceTypes takes seconds over HTTP and never changes (a reset keeps it): loaded once
    per session. Tests of the refresh itself call ``update_types``/``update_offerings`` on their provider."""
    from karpy.cloudprovider.ec2.clients import Clients
    from karpy.cloudprovider.ec2.instancetypes import InstanceTypes

    mp = pytest.MonkeyPatch()
    for k, v in aws_environ(moto_server.url).items():
        mp.setenv(k, v)
    try:
        its = InstanceTypes(Clients(max_attempts=1), REGION)
        its.update_types()
        its.update_offerings()
    finally:
        mp.undo()
    return its.infos, its.zones


def preload(its, catalog) -> None:
    """Give an InstanceTypes the session's loaded types and zones (its prices still come from the account);
    copies, so that no test's changes reach the next one."""
    infos, zones = catalog
    its.infos, its.zones = dict(infos), {name: set(z) for name, z in zones.items()}
    its.refreshed["types"] = its.refreshed["offerings"] = its.now()


@pytest.fixture
def env(account, ec2_catalog):
    """A provider on karpy's own clients (with a fault injector), a Ready NodeClass, and the account."""
    import base64

    from karpy.cloudprovider.ec2.clients import Clients
    from karpy.cloudprovider.ec2.instancetypes import InstanceTypes
    from karpy.cloudprovider.ec2.nodeclass import NodeClassResolver
    from karpy.cloudprovider.ec2.provider import EC2CloudProvider
    from karpy.cloudprovider.ec2.settings import AWSSettings

    c = Clients(max_attempts=1)
    faults = FaultInjector(c.ec2)
    nc = nodeclass()
    nc["status"] = NodeClassResolver(c, CLUSTER, lambda: K8S, SSM_ROOT, lambda: "172.20.0.0/16").resolve(nc).status
    nc["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    its = InstanceTypes(c, REGION)
    preload(its, ec2_catalog)
    its.refreshed["spot"] = its.refreshed["on-demand"] = its.now()
    cluster = {"endpoint": "https://example.eks.amazonaws.com", "ca": base64.b64encode(b"CA").decode(),
               "cidr": "172.20.0.0/16", "dns": "172.20.0.10"}
    p = EC2CloudProvider(c, AWSSettings(CLUSTER), its, lambda kind, name: nc, lambda: cluster)
    return p, nc, faults, account


def claim(name="nc-1", arch="arm64", types=("m7g.large", "c7g.large", "m6g.large"), ct="on-demand"):
    return {"metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "graviton"}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": list(types)},
                                      {"key": "kubernetes.io/arch", "operator": "In", "values": [arch]},
                                      {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [ct]},
                                      {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["graviton"]}]}}
