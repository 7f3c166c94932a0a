"""Against moto: the EC2NodeClass finalizer, launch-template and instance-profile garbage collection, the tagging
controller, and what the interruption queue shows on /metrics (rebalance recommendations are only Events)."""

from __future__ import annotations

import io
import json
import time

import pytest

from karpy.cloudprovider.ec2.controllers import (
    InstanceProfileGC,
    InterruptionQueue,
    LaunchTemplateGC,
    NodeClassController,
    TaggingController,
)
from karpy.cloudprovider.ec2.nodeclass import NodeClassResolver
from karpy.cloudprovider.ec2.provider import EC2CloudProvider
from karpy.controller.metrics import Metrics
from karpy.kube.memory import MemoryAPI
from karpy.runtime.clock import SimClock
from karpy.runtime.events import Recorder
from karpy.runtime.log import Logger

from .conftest import CLUSTER, K8S, REGION, SSM_ROOT, claim, nodeclass


class Mgr:
    """What karpy's manager gives these controllers: its cache (here the API itself)."""

    def __init__(self, api):
        self.api = api

    def get(self, kind, name, namespace=""):
        return self.api.try_get(kind, name, namespace)

    def list(self, kind):
        return self.api.list(kind)[0]


@pytest.fixture
def cluster(env):
    p, nc, faults, account = env
    clock = SimClock(1_700_000_000.0)
    api = MemoryAPI(clock)
    log = Logger(clock, level="debug", stream=io.StringIO())
    recorder = Recorder(api, clock)
    resolver = NodeClassResolver(p.c, CLUSTER, lambda: K8S, SSM_ROOT, lambda: "172.20.0.0/16")
    return p, nc, faults, account, api, Mgr(api), resolver, recorder, log


def events(api, reason):
    return [e for e in api.list("Event")[0] if e.get("reason") == reason]


def profiles(account):
    return {p["InstanceProfileName"]: p for p in account.iam.list_instance_profiles()["InstanceProfiles"]}


def launch_templates(account):
    return sorted(lt["LaunchTemplateName"] for lt in account.ec2.describe_launch_templates()["LaunchTemplates"])


def test_finalizer_waits_for_nodeclaims_then_deletes_the_profile_and_launch_templates(cluster):
    p, nc, faults, account, api, mgr, resolver, recorder, log = cluster
    obj = api.create({k: v for k, v in nodeclass().items() if k != "status"})
    ctl = NodeClassController(mgr, api, resolver, SimClock(1_700_000_000.0), recorder, log, p)
    ctl.reconcile("default")
    obj = api.get("EC2NodeClass", "default")
    assert obj["metadata"]["finalizers"] == ["karpenter.k8s.aws/termination"]
    prof = obj["status"]["instanceProfile"]
    assert prof in profiles(account)
    nc["status"] = obj["status"] | {"conditions": [{"type": "Ready", "status": "True"}]}
    nc["metadata"] = obj["metadata"]
    p.create(claim())
    assert len(launch_templates(account)) == 1
    api.create({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "nc-1"},
                "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}})
    api.delete("EC2NodeClass", "default")
    # a NodeClaim still uses it: nothing is deleted, an Event says why
    assert ctl.reconcile("default") == 10.0
    assert api.try_get("EC2NodeClass", "default") is not None and prof in profiles(account)
    assert "nc-1" in events(api, "WaitingOnNodeClaimTermination")[0]["message"]
    api.delete("NodeClaim", "nc-1")
    assert ctl.reconcile("default") is None
    assert api.try_get("EC2NodeClass", "default") is None
    assert prof not in profiles(account) and launch_templates(account) == []


def test_unused_launch_templates_are_collected_and_a_restart_learns_the_existing_ones(cluster):
    p, nc, faults, account, api, mgr, resolver, recorder, log = cluster
    now = [1000.0]
    p.now = lambda: now[0]
    p.create(claim())
    (old,) = launch_templates(account)
    # another cluster's template is never touched
    account.ec2.create_launch_template(LaunchTemplateName="karpenter.k8s.aws/other", LaunchTemplateData={},
                                       TagSpecifications=[{"ResourceType": "launch-template", "Tags": [
                                           {"Key": "eks:eks-cluster-name", "Value": "other"}]}])
    # a restart: a new provider learns the template, keeps it one more minute, then deletes it unless used
    p2 = EC2CloudProvider(p.c, p.settings, p.types, p.lookup, p.cluster, now=lambda: now[0], log=log)
    gc = LaunchTemplateGC(mgr, p2, log)
    gc.reconcile("")
    assert list(p2.lts) == [old]
    now[0] += 30
    gc.reconcile("")
    assert old in launch_templates(account)
    # the NodeClass's AMI changes: launches use a new template, the old one goes after a minute unused
    nc["status"]["amis"] = [{**a, "id": "ami-0c0570m0000000001"} if "arm64" in json.dumps(a) else a
                            for a in nc["status"]["amis"]]
    p2.create(claim("nc-2"))
    new = [n for n in launch_templates(account) if n not in (old, "karpenter.k8s.aws/other")]
    assert len(new) == 1
    now[0] += 40
    gc.reconcile("")
    assert launch_templates(account) == sorted([new[0], "karpenter.k8s.aws/other"])
    now[0] += 61
    gc.reconcile("")
    assert launch_templates(account) == ["karpenter.k8s.aws/other"]
    # a launch after that creates its template again
    p2.create(claim("nc-3"))
    assert len(launch_templates(account)) == 2


def test_instance_profiles_of_nodeclasses_that_are_gone_are_collected(cluster):
    p, nc, faults, account, api, mgr, resolver, recorder, log = cluster
    kept = resolver.resolve(nodeclass("kept", uid="uid-kept")).status["instanceProfile"]
    orphan = resolver.resolve(nodeclass("gone", uid="uid-gone")).status["instanceProfile"]
    account.iam.create_instance_profile(InstanceProfileName="someone-elses")
    api.create({k: v for k, v in nodeclass("kept").items() if k != "status"}, uid="uid-kept")
    InstanceProfileGC(mgr, resolver, log).reconcile("")
    assert set(profiles(account)) == {kept, "someone-elses"}
    assert orphan not in profiles(account)
    assert [r["RoleName"] for r in profiles(account)[kept]["Roles"]] == ["KarpenterNodeRole-c1"]


def test_a_registered_node_gets_its_name_and_nodeclaim_tags_once(cluster):
    p, nc, faults, account, api, mgr, resolver, recorder, log = cluster
    pid = p.create(claim("nc-1"))["status"]["providerID"]
    api.create({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "nc-1"},
                "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}})
    ctl = TaggingController(mgr, api, p, CLUSTER, log, pause=0)
    api.patch("NodeClaim", "nc-1", {"status": {"providerID": pid}}, subresource="status")
    ctl.reconcile("nc-1")  # not registered yet: nothing to tag
    assert "CreateTags" not in faults.calls
    api.patch("NodeClaim", "nc-1", {"status": {"providerID": pid, "nodeName": "ip-10-0-0-7.us-west-2.compute.internal"}},
              subresource="status")
    ctl.reconcile("nc-1")
    (inst,) = account.instances()
    tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
    assert tags["Name"] == "ip-10-0-0-7.us-west-2.compute.internal" and tags["karpenter.sh/nodeclaim"] == "nc-1"
    assert faults.calls["CreateTags"][0]["Tags"] == [{"Key": "Name", "Value": "ip-10-0-0-7.us-west-2.compute.internal"},
                                                     {"Key": "karpenter.sh/nodeclaim", "Value": "nc-1"}]
    ann = api.get("NodeClaim", "nc-1")["metadata"]["annotations"]
    assert ann["karpenter.k8s.aws/tagged"] == "true"
    ctl.reconcile("nc-1")
    assert len(faults.calls["CreateTags"]) == 1


def envelope(dtype, detail, source="aws.ec2"):
    return json.dumps({"version": "0", "id": "1", "detail-type": dtype, "source": source, "account": "1",
                       "time": "2026-01-01T00:00:00Z", "region": REGION, "resources": [], "detail": detail})


def test_interruption_messages_on_metrics_and_rebalance_is_only_an_event(cluster):
    p, nc, faults, account, api, mgr, resolver, recorder, log = cluster
    out = p.create(claim("nc-1", ct="spot", types=("m7g.large",)))
    pid = out["status"]["providerID"]
    iid = pid.rsplit("/", 1)[-1]
    api.create({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": "nc-1", "labels": out["metadata"]["labels"]}, "spec": {}})
    api.patch("NodeClaim", "nc-1", {"status": {"providerID": pid, "nodeName": "node-1"}}, subresource="status")
    api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}, "spec": {"providerID": pid}})
    metrics = Metrics()
    metrics.attach(type("M", (), {"on_reconcile": None})(), log)
    q = InterruptionQueue(p.c, CLUSTER, p, mgr, log, recorder, wait_seconds=0)
    for body in (envelope("EC2 Instance Rebalance Recommendation", {"instance-id": iid}), "not an event"):
        account.sqs.send_message(QueueUrl=account.queue_url, MessageBody=body)
    time.sleep(0.2)
    assert q.poll() == 2
    assert p.interruption_messages() == []  # a recommendation changes nothing
    assert {e["involvedObject"]["kind"] for e in events(api, "SpotRebalanceRecommendation")} == {"NodeClaim", "Node"}
    account.sqs.send_message(QueueUrl=account.queue_url, MessageBody=envelope(
        "EC2 Spot Instance Interruption Warning", {"instance-id": iid, "instance-action": "terminate"}))
    assert q.poll() == 1
    assert [m["kind"] for m in p.interruption_messages()] == ["SpotInterruption"]
    text = metrics.text().decode()
    assert 'karpenter_interruption_received_messages_total{message_type="rebalance_recommendation"} 1.0' in text
    assert 'karpenter_interruption_received_messages_total{message_type="no_op"} 1.0' in text
    assert 'karpenter_interruption_received_messages_total{message_type="spot_interrupted"} 1.0' in text
    assert "karpenter_interruption_deleted_messages_total 3.0" in text
    assert "karpenter_interruption_message_queue_duration_seconds_count 3.0" in text
    assert account.sqs.receive_message(QueueUrl=account.queue_url, WaitTimeSeconds=0).get("Messages") is None
