"""End to end: ``karpy sandbox --no-karpenter`` + a moto server + ``karpy controller --cloud-provider aws``
with examples/eks-graviton. moto runs no kubelet: the test stands in for the node bootstrap and creates the
Node of each running instance (providerID ``aws:///ZONE/i-...``), which the sandbox's kubelets then run."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from karpy.kube import errors as E
from karpy.kube.client import KubeClient, RetryPolicy, load_config
from tests.controller.test_e2e_sandbox import Proc, ssl_context, wait_for

from .conftest import K8S, SSM_ROOT, Account, aws_environ

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "eks-graviton"
GRAVITON = ("c6g", "c7g", "c8g", "m6g", "m7g", "m8g", "r6g", "r7g", "r8g")


class NodeBootstrap:
    """Creates the Node of every running instance a NodeClaim names (what the AMI's bootstrap does)."""

    def __init__(self, api, account: Account):
        self.api, self.account = api, account
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.once()
            except Exception:  # noqa: BLE001 - the API or moto is busy: next round
                pass
            self.stop.wait(0.5)

    def once(self) -> None:
        running = {i["InstanceId"]: i for i in self.account.instances(("running",))}
        nodes = {(n.get("spec") or {}).get("providerID") for n in self.api.list("Node")[0]}
        for claim in self.api.list("NodeClaim")[0]:
            st = claim.get("status") or {}
            pid = st.get("providerID") or ""
            inst = running.get(pid.rsplit("/", 1)[-1])
            if not pid or pid in nodes or inst is None:
                continue
            name = inst.get("PrivateDnsName") or inst["InstanceId"]
            labels = {**(claim["metadata"].get("labels") or {}), "kubernetes.io/hostname": name}
            self.api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                             "spec": {"providerID": pid, "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]},
                             "status": {"capacity": st.get("capacity"), "allocatable": st.get("allocatable"),
                                        "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}})


@pytest.fixture
def stack(moto_server, tmp_path):
    moto_server.reset()
    account = Account(moto_server.url, cluster="demo", role="KarpenterNodeRole-demo")
    kc = tmp_path / "sandbox.kubeconfig"
    sandbox = Proc(["sandbox", str(EXAMPLE / "nodepool.yaml"), "--no-karpenter", "--port", "0", "--kubeconfig", str(kc)],
                   tmp_path, "sandbox")
    procs = [sandbox]
    boot = None
    try:
        wait_for(lambda: kc.exists(), what="the sandbox kubeconfig")
        config, _ = load_config(str(kc))
        api = KubeClient(config, retry=RetryPolicy(attempts=5, base=0.05, cap=0.5))
        import urllib.request

        wait_for(lambda: urllib.request.urlopen(config.cluster.server + "/readyz", timeout=2,
                                                context=ssl_context(kc)).status == 200, what="the sandbox")
        env_extra = {**aws_environ(moto_server.url), "KARPY_AWS_SSM_ROOT": SSM_ROOT, "KARPY_AWS_SQS_WAIT": "1"}
        saved = {k: os.environ.get(k) for k in env_extra}
        os.environ.update(env_extra)
        try:
            ctl = Proc(["controller", "--kubeconfig", str(kc), "--cloud-provider", "aws", "--cluster-name", "demo",
                        "--interruption-queue", "demo", "--metrics-port", "0", "--health-probe-port", "0",
                        "--bind-address", "127.0.0.1", "--batch-idle-duration", "200ms", "--leader-elect", "false"],
                       tmp_path, "controller")
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        procs.append(ctl)
        boot = NodeBootstrap(api, account)
        yield api, account, ctl
    finally:
        if boot is not None:
            boot.stop.set()
            boot.t.join(5)
        for p in reversed(procs):
            p.stop()


def apply_workload(api) -> None:
    import yaml

    for doc in yaml.safe_load_all((EXAMPLE / "workload.yaml").read_text()):
        if doc and doc["kind"] == "Deployment" and doc["metadata"]["name"] == "colorapp":
            api.create(doc)


def pods_bound(api, app: str) -> int:
    return sum(1 for p in api.list("Pod", "default")[0]
               if (p["metadata"].get("labels") or {}).get("app") == app and p["spec"].get("nodeName"))


def test_graviton_instances_launch_join_scale_to_zero_and_spot_interruption(stack):
    api, account, ctl = stack
    try:
        wait_for(lambda: any(c.get("type") == "Ready" and c.get("status") == "True"
                             for c in (api.get("EC2NodeClass", "default").get("status") or {}).get("conditions") or ()),
                 timeout=60, what="the EC2NodeClass Ready")
        nc = api.get("EC2NodeClass", "default")
        assert nc["metadata"]["annotations"]["karpenter.k8s.aws/ec2nodeclass-hash-version"] == "karpy-v1"
        apply_workload(api)
        wait_for(lambda: pods_bound(api, "color") == 6, timeout=120, what="6 colorapp pods bound")
        # once each Node registered, karpy's tagging controller names its instance after it and its NodeClaim
        wait_for(lambda: all({"Name", "karpenter.sh/nodeclaim"} <= {t["Key"] for t in i["Tags"]}
                             for i in account.instances())
                 and all((c["metadata"].get("annotations") or {}).get("karpenter.k8s.aws/tagged") == "true"
                         for c in api.list("NodeClaim")[0]), timeout=60, what="the instances tagged with their Node")
        instances = account.instances()
        assert instances and all(i["InstanceType"].split(".")[0] in GRAVITON for i in instances)
        claims = api.list("NodeClaim")[0]
        by_pid = {c["status"]["providerID"]: c for c in claims}
        for i in instances:
            tags = {t["Key"]: t["Value"] for t in i["Tags"]}
            assert tags["karpenter.sh/nodepool"] == "graviton" and tags["eks:eks-cluster-name"] == "demo"
            assert tags["kubernetes.io/cluster/demo"] == "owned" and tags["karpenter.k8s.aws/ec2nodeclass"] == "default"
            c = by_pid[f"aws:///{i['Placement']['AvailabilityZone']}/{i['InstanceId']}"]
            assert tags["karpenter.sh/nodeclaim"] == c["metadata"]["name"] and tags["Name"] == c["status"]["nodeName"]
            assert c["metadata"]["annotations"]["karpenter.k8s.aws/tagged"] == "true"
        assert {c["status"]["providerID"] for c in claims} == \
            {f"aws:///{i['Placement']['AvailabilityZone']}/{i['InstanceId']}" for i in instances}
        # a spot interruption warning for one instance: its NodeClaim is replaced before the instance goes
        victim = claims[0]
        iid = victim["status"]["providerID"].rsplit("/", 1)[-1]
        account.sqs.send_message(QueueUrl=account.queue_url, MessageBody=json.dumps({
            "version": "0", "id": "1", "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2",
            "account": "123456789012", "time": "2026-01-01T00:00:00Z", "region": "us-west-2", "resources": [],
            "detail": {"instance-id": iid, "instance-action": "terminate"}}))

        def replaced():
            names = {c["metadata"]["name"] for c in api.list("NodeClaim")[0]}
            return victim["metadata"]["name"] not in names and pods_bound(api, "color") == 6
        wait_for(replaced, timeout=120, what="the interrupted NodeClaim replaced and its pods bound elsewhere")
        assert iid not in {i["InstanceId"] for i in account.instances()}
        assert account.sqs.receive_message(QueueUrl=account.queue_url, WaitTimeSeconds=0).get("Messages") is None
        # scale to zero: every instance terminated
        api.patch("Deployment", "colorapp", {"spec": {"replicas": 0}}, "default")
        wait_for(lambda: not account.instances(), timeout=240, what="every instance terminated")
        # the EC2NodeClass deleted: its finalizer deletes the instance profile and launch templates karpy made
        assert account.iam.list_instance_profiles()["InstanceProfiles"]
        api.delete("EC2NodeClass", "default")

        def nodeclass_gone():
            try:
                api.get("EC2NodeClass", "default")
                return False
            except E.NotFound:
                return True
        wait_for(nodeclass_gone, timeout=120, what="the EC2NodeClass deleted")
        assert account.iam.list_instance_profiles()["InstanceProfiles"] == []
        assert account.ec2.describe_launch_templates()["LaunchTemplates"] == []
        assert ctl.stop() == 0
        assert "Traceback" not in ctl.err_path.read_text()
    except BaseException:
        print(ctl.out_path.read_text()[-6000:], ctl.err_path.read_text()[-3000:])
        raise
