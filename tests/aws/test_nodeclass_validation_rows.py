"""What upstream's EC2NodeClass validation (aws/karpenter-provider-aws pkg/controllers/nodeclass/validation.go) and
AMI drift (pkg/cloudprovider/drift.go) do, played against karpy's AWS provider on moto over HTTP: a ``spec.kubelet``
that cannot be decoded, or that holds a CEL expression while the gate NodeClassCEL is off, leaves the EC2NodeClass
not Ready and nothing launches from it; an EC2NodeClass whose status lists no AMIs gives no drift decision."""

from __future__ import annotations

import copy
import io

import pytest

from karpy.cloudprovider.ec2.controllers import NodeClassController
from karpy.cloudprovider.ec2.nodeclass import NodeClassResolver
from karpy.cloudprovider.provider import NodeClassNotReadyError
from karpy.kube.memory import MemoryAPI
from karpy.runtime.clock import SimClock
from karpy.runtime.events import Recorder
from karpy.runtime.log import Logger

from .conftest import CLUSTER, K8S, SSM_ROOT, claim, nodeclass


class Mgr:
    """The manager's cache these controllers read (here the API itself)."""

    def __init__(self, api):
        self.api = api

    def get(self, kind, name, namespace=""):
        return self.api.try_get(kind, name, namespace)

    def list(self, kind):
        return self.api.list(kind)[0]


def reconciled(env, kubelet: dict | None, gates: dict | None = None) -> dict:
    """The EC2NodeClass (spec.kubelet ``kubelet``) as the NodeClass controller left it on the API server; the
    provider of ``env`` then reads that object (status and conditions included)."""
    p, nc, _, _ = env
    p.gates = dict(gates or {})
    clock = SimClock(1_700_000_000.0)
    api = MemoryAPI(clock)
    spec = {} if kubelet is None else {"kubelet": kubelet}
    api.create(nodeclass(**spec))
    resolver = NodeClassResolver(p.c, CLUSTER, lambda: K8S, SSM_ROOT, lambda: "172.20.0.0/16")
    ctl = NodeClassController(Mgr(api), api, resolver, clock, Recorder(api, clock),
                              Logger(clock, level="debug", stream=io.StringIO()), p)
    ctl.reconcile("default")
    obj = api.get("EC2NodeClass", "default")
    nc.clear()
    nc.update(copy.deepcopy(obj))
    return obj


def conditions(obj: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c.get("reason", "")) for c in obj["status"]["conditions"]}


def test_a_kubelet_expression_with_the_gate_off_leaves_the_nodeclass_not_ready_and_launches_nothing(env):
    """validation.go: parsedKubelet.HasExpressions() with NodeClassCEL off sets ValidationSucceeded False,
    reason KubeletExpressionsDisabled, and the NodeClass goes NotReady rather than launching with the AMI family's
    defaults."""
    p, _, _, account = env
    for kubelet in ({"maxPods": "min(110, vcpus * 8)"}, {"kubeReserved": {"cpu": "100m", "memory": "max_pods * 11"}},
                    {"systemReserved": {"memory": "vcpus * 64"}}):
        obj = reconciled(env, kubelet)
        cond = next(c for c in obj["status"]["conditions"] if c["type"] == "ValidationSucceeded")
        assert (cond["status"], cond["reason"]) == ("False", "KubeletExpressionsDisabled"), kubelet
        assert "NodeClassCEL" in cond["message"]
        assert conditions(obj)["Ready"][0] == "False"
        # the rest of the NodeClass resolved: only the kubelet expression keeps it from being Ready
        assert {t: s for t, (s, _) in conditions(obj).items() if t not in ("Ready", "ValidationSucceeded")} == {
            "AMIsReady": "True", "SubnetsReady": "True", "SecurityGroupsReady": "True",
            "InstanceProfileReady": "True", "CapacityReservationsReady": "True"}
        with pytest.raises(NodeClassNotReadyError, match="ValidationSucceeded=False"):
            p.create(claim())
        assert account.instances() == []


def test_with_the_gate_on_or_without_an_expression_the_same_nodeclass_is_ready_and_launches(env):
    p, _, _, account = env
    obj = reconciled(env, {"maxPods": 29, "kubeReserved": {"cpu": "100m", "memory": "200Mi"}})
    assert conditions(obj)["ValidationSucceeded"] == ("True", "ValidationSucceeded")
    assert conditions(obj)["Ready"][0] == "True"
    pytest.importorskip("cel_expr_python", reason="the NodeClassCEL gate needs cel-expr-python: pip install 'karpy[cel]'")
    obj = reconciled(env, {"maxPods": "min(110, vcpus * 8)"}, gates={"NodeClassCEL": True})
    assert conditions(obj)["ValidationSucceeded"] == ("True", "ValidationSucceeded")
    assert conditions(obj)["Ready"][0] == "True"
    p.create(claim())
    assert len(account.instances()) == 1


@pytest.mark.parametrize("gates", [{}, {"NodeClassCEL": True}], ids=["gate-off", "gate-on"])
@pytest.mark.parametrize("kubelet, field", [({"clusterDNS": "10.0.0.10"}, "clusterDNS"),
                                            ({"kubeReserved": ["cpu=1"]}, "kubeReserved"),
                                            ({"maxPods": "vcpus * 8", "cpuCFSQuota": "yes"}, "cpuCFSQuota")])
def test_an_undecodable_kubelet_configuration_sets_invalid_kubelet_configuration(env, kubelet, field, gates):
    """validation.go: a spec.kubelet ValidateKubeletConfig / ParseKubeletConfig refuses sets ValidationSucceeded
    False with reason InvalidKubeletConfiguration (before, and whatever, the gate); the message names the field;
    the NodeClass is not Ready and nothing launches from it."""
    p, _, _, account = env
    obj = reconciled(env, kubelet, gates)
    cond = next(c for c in obj["status"]["conditions"] if c["type"] == "ValidationSucceeded")
    assert (cond["status"], cond["reason"]) == ("False", "InvalidKubeletConfiguration")
    assert cond["message"].startswith("parsing spec.kubelet, ") and f"{field}: " in cond["message"]
    assert conditions(obj)["Ready"][0] == "False"
    with pytest.raises(NodeClassNotReadyError):
        p.create(claim())
    assert account.instances() == []


def test_a_nodeclass_with_no_amis_in_its_status_gives_no_drift_decision(env):
    """drift.go isAMIDrifted: no AMIs in the EC2NodeClass's status is an error ("no amis exist given
    constraints"), returned before security groups and subnets are looked at: the NodeClaim is not marked drifted,
    even with its instance's subnet gone from the status. With the AMIs back, the same subnet change is
    SubnetDrift."""
    p, nc, _, account = env
    out = p.create(claim())
    (inst,) = account.instances()
    nodeclaim = {"metadata": {"name": "nc-1", "annotations": dict(out["metadata"].get("annotations") or {}),
                              "labels": {"node.kubernetes.io/instance-type": inst["InstanceType"]}},
                 "status": {"providerID": out["status"]["providerID"], "imageID": out["status"]["imageID"]}}
    moved = copy.deepcopy(nc)
    moved["status"]["subnets"] = [s for s in nc["status"]["subnets"] if s["id"] != inst["SubnetId"]]
    assert p.is_drifted(nodeclaim, moved) == "SubnetDrift"
    moved["status"]["amis"] = []
    assert p.is_drifted(nodeclaim, moved) is None
