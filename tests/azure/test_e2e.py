"""End to end: ``karpy sandbox --no-karpenter`` with the AKS workshop, the fake ARM, ``karpy controller
--cloud-provider azure`` as a process, and a stand-in for the node bootstrap that registers a Node for each VM
once Azure reports it Succeeded (its name, provider ID, labels and taints from the VM's custom data, and the
capacity a kubelet reports: a Node without it takes no pod). The AKSNodeClass turns Ready with its images;
the workshop's four pods bind to the two arm64 nodes; a termination Azure schedules for one VM replaces its
NodeClaim; the Deployment moved to amd64 gets new amd64 VMs and the arm64 VMs and NICs deleted;
scaled to zero, the nodes are consolidated away and their VMs and NICs deleted."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
import yaml

from karpy.cloudprovider.arm.bootstrap import parse_custom_data

from .conftest import settings_env

ROOT = Path(__file__).resolve().parents[2]
controller_e2e = pytest.importorskip("controller.test_e2e_sandbox")
Proc, wait_for = controller_e2e.Proc, controller_e2e.wait_for


class BootstrapStandIn:
    """What the AKS node image and its kubelet do with a VM's custom data: once Azure reports the VM Succeeded,
    register its Node (named as the VM's computer name, the provider ID Azure's cloud provider writes, the
    labels and taints of the custom data, NotReady at first); capacity and allocatable are the NodeClaim's,
    as the kubelet would report them, with the custom data's ``--max-pods``."""

    def __init__(self, fake, api):
        self.fake, self.api = fake, api
        self.stop = threading.Event()
        self.registered: dict[str, dict] = {}  # node name -> the custom data's variables
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(0.2):
            try:
                self.once()
            except Exception:  # noqa: BLE001 - the sandbox is busy: the next turn
                pass

    def once(self) -> None:
        with self.fake.lock:
            vms = [v for v in self.fake.vms.values() if v["properties"]["provisioningState"] == "Succeeded"]
        claims = {(c.get("status") or {}).get("providerID", "").lower(): c for c in self.api.list("NodeClaim")[0]}
        for vm in vms:
            name = vm["properties"]["osProfile"]["computerName"]
            if name in self.registered:
                continue
            rg = vm["id"].split("/")[4]
            pid = "azure://" + vm["id"].replace(f"/resourceGroups/{rg}/", f"/resourceGroups/{rg.lower()}/")
            claim = claims.get(pid.lower())
            if claim is None:
                continue
            boot = parse_custom_data(vm["properties"]["osProfile"]["customData"])
            labels = dict(kv.split("=", 1) for kv in boot["KUBELET_NODE_LABELS"].split(",") if kv)
            flags = dict(f.split("=", 1) for f in boot["KUBELET_FLAGS"].split(" "))
            taints = []
            for t in filter(None, flags.get("--register-with-taints", "").split(",")):
                kv, _, effect = t.rpartition(":")
                k, _, v = kv.partition("=")
                taints.append({"key": k, "effect": effect, **({"value": v} if v else {})})
            capacity = {**claim["status"]["capacity"], "pods": flags["--max-pods"]}
            allocatable = {**claim["status"]["allocatable"], "pods": flags["--max-pods"]}
            self.api.create({"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": name, "labels": {**labels, "kubernetes.io/hostname": name}},
                "spec": {"providerID": pid, "taints": taints},
                "status": {"capacity": capacity, "allocatable": allocatable,
                           "nodeInfo": {"kubeletVersion": "v" + boot["KUBERNETES_VERSION"], "architecture": labels["kubernetes.io/arch"]},
                           "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}})
            self.registered[name] = boot


def bound(api) -> list[dict]:
    return [p for p in api.list("Pod", "workshop")[0] if p["spec"].get("nodeName")]


def test_workshop_on_the_fake_arm(fake, tmp_path):
    kc = tmp_path / "sandbox.kubeconfig"
    sandbox = Proc(["sandbox", str(ROOT / "examples/aks-multiarch-arm64"), "--no-karpenter", "--port", "0",
                    "--kubeconfig", str(kc)], tmp_path, "sandbox")
    ctrl = None
    stand_in = None
    try:
        wait_for(lambda: kc.exists(), timeout=60, what="the sandbox kubeconfig")
        from karpy.kube.client import KubeClient, RetryPolicy, load_config

        config, _ = load_config(str(kc))
        api = KubeClient(config, retry=RetryPolicy(attempts=5, base=0.05, cap=0.5))
        wait_for(lambda: api.list("NodePool")[0], timeout=60, what="the sandbox")
        # the kubelet bootstrap token the settings name (conftest.TOKEN) expires in 5 hours
        expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 5 * 3600))
        api.create({"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token", "metadata": {
            "name": "bootstrap-token-abcdef", "namespace": "kube-system"}, "stringData": {
            "token-id": "abcdef", "token-secret": "0123456789abcdef", "expiration": expires,
            "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true"}})
        stand_in = BootstrapStandIn(fake, api)
        stand_in.thread.start()
        env = {**os.environ, **settings_env(fake, tmp_path)}
        old = os.environ.copy()
        os.environ.clear()
        os.environ.update(env)
        try:
            ctrl = Proc(["controller", "--kubeconfig", str(kc), "--cloud-provider", "azure", "--metrics-port", "0",
                         "--health-probe-port", "0", "--bind-address", "127.0.0.1", "--batch-idle-duration", "200ms",
                         "--leader-elect=false"], tmp_path, "controller")
        finally:
            os.environ.clear()
            os.environ.update(old)

        def vm_puts():
            return [r["body"] for r in fake.calls("PUT", r"/virtualMachines/[^/]+$")]
        wait_for(lambda: len(vm_puts()) >= 2, timeout=90, what="two VM PUTs")
        time.sleep(2)
        puts = vm_puts()
        assert sorted(b["properties"]["hardwareProfile"]["vmSize"] for b in puts) == ["Standard_D2pls_v6", "Standard_D4pls_v6"]
        for b in puts:
            assert b["tags"]["karpenter.azure.com_cluster"] == "workshop" and b["tags"]["karpenter.sh_nodepool"] == "default-demo"
            assert b["tags"]["compute.aks.billing"] == "linux" and b["properties"]["priority"] == "Regular"
            assert b["zones"][0] in ("1", "2", "3") and "arm64" in b["properties"]["storageProfile"]["imageReference"]["communityGalleryImageId"]
        claims = wait_for(lambda: [c for c in api.list("NodeClaim")[0] if (c.get("status") or {}).get("providerID")],
                          timeout=30, what="launched NodeClaims")
        assert len(claims) == 2
        for c in claims:
            assert c["status"]["providerID"].startswith(
                "azure:///subscriptions/12345678-1234-1234-1234-123456789012/resourceGroups/mc_rg_cluster_eastus/"
                "providers/Microsoft.Compute/virtualMachines/aks-default-demo-")
        nc = api.get("AKSNodeClass", "default-demo")
        ready = {c["type"]: c["status"] for c in nc["status"]["conditions"]}
        assert ready["Ready"] == "True" and ready["ImagesReady"] == "True" and ready["SubnetsReady"] == "True"
        assert nc["status"]["kubernetesVersion"] == api._call(api._request("GET", "/version"))["gitVersion"].lstrip("v").split("-")[0]
        assert [i["id"].split("/")[4] for i in nc["status"]["images"]] == \
            ["2204gen2containerd", "2204containerd", "2204gen2arm64containerd"]
        assert nc["metadata"]["annotations"]["karpenter.azure.com/aksnodeclass-hash-version"] == "karpy-v1"
        # the token's coming expiry is reported on the AKSNodeClass, and prices come from the Retail Prices API
        expiring = wait_for(lambda: [e for e in api.list("Event", "default")[0]
                                     if e["reason"] == "BootstrapTokenExpiring"], timeout=30, what="the token's Event")
        assert expiring[0]["type"] == "Warning" and expiring[0]["involvedObject"]["name"] == "default-demo"
        assert expires in expiring[0]["message"]
        assert fake.calls("GET", r"^/api/retail/prices$")
        assert fake.calls("GET", r"/providers/Microsoft\.Compute/locations/eastus/usages$")  # the families' quota
        wait_for(lambda: any(r.get("message") == "updated pricing" for r in ctrl.logs()), timeout=30,
                 what="prices read from the Retail Prices API")
        # the Nodes join (the stand-in), Karpenter registers and initializes them, the four pods bind
        wait_for(lambda: len(bound(api)) == 4, timeout=90, what="the 4 workshop pods bound")
        nodes = {n["metadata"]["name"]: n for n in api.list("Node")[0]}
        used = {p["spec"]["nodeName"] for p in bound(api)}
        assert used == {"aks-" + c["metadata"]["name"] for c in claims}
        for name in used:
            n = nodes[name]
            assert n["metadata"]["labels"]["kubernetes.io/arch"] == "arm64"
            assert n["metadata"]["labels"]["karpenter.sh/registered"] == "true"
            assert not [t for t in n["spec"].get("taints") or () if t["key"] in
                        ("karpenter.sh/unregistered", "node.cilium.io/agent-not-ready")]
        for c in api.list("NodeClaim")[0]:
            assert not [x for x in c["status"].get("conditions") or () if x["type"] == "Drifted"]
        per_node = sorted(sum(1 for p in bound(api) if p["spec"]["nodeName"] == n) for n in used)
        assert per_node == [1, 3]
        # Azure schedules the termination of the VM holding one pod (node-problem-detector's condition): its
        # NodeClaim is replaced before the VM goes, and the pod binds to a new node
        lone = next(n for n in used if sum(1 for p in bound(api) if p["spec"]["nodeName"] == n) == 1)
        node = api.get("Node", lone)
        api.patch("Node", lone, {"status": {"conditions": [*node["status"]["conditions"], {
            "type": "VMEventScheduled", "status": "True", "reason": "VMEventScheduled",
            "message": "Terminate Scheduled: Tue, 01 Dec 2026 00:00:00 GMT. EventId: 602d9444-d2cd-49c7-8624-8643e7171297"}]}},
            subresource="status")

        def replaced():
            names = {"aks-" + c["metadata"]["name"] for c in api.list("NodeClaim")[0]}
            pods = bound(api)
            return lone not in names and len(pods) == 4 and all(p["spec"]["nodeName"] != lone for p in pods)
        wait_for(replaced, timeout=90, what="the terminating VM's NodeClaim replaced and its pod bound elsewhere")
        wait_for(lambda: lone not in fake.vms, timeout=30, what="the terminating VM deleted")
        assert any(r.get("message") == "vm interruption noticed" and r.get("kind") == "ScheduledTermination"
                   for r in ctrl.logs())
        # the workshop's last step: the Deployment moves to amd64 (examples/aks-multiarch-amd64/workload.yaml,
        # applied as kubectl apply would): new amd64 VMs are created, the emptied arm64 ones and their NICs deleted
        arm_vms = {"aks-" + c["metadata"]["name"] for c in api.list("NodeClaim")[0]}
        with fake.lock:
            arm_nics = {k for k, n in fake.nics.items() if n.get("_vm") in arm_vms}
        assert len(arm_vms) == 2 and len(arm_nics) == 2
        puts_before = len(vm_puts())
        workload = [d for d in yaml.safe_load_all((ROOT / "examples/aks-multiarch-amd64/workload.yaml").read_text())
                    if d and d["kind"] == "Deployment"][0]
        api.patch("Deployment", "inflate", workload, "workshop", patch_type="apply")

        def on_amd64():
            pods, nodes = bound(api), {n["metadata"]["name"]: n for n in api.list("Node")[0]}
            return len(pods) == 4 and all(
                nodes.get(p["spec"]["nodeName"], {}).get("metadata", {}).get("labels", {}).get("kubernetes.io/arch")
                == "amd64" for p in pods)
        wait_for(on_amd64, timeout=120, what="the 4 workshop pods bound to amd64 nodes")
        wait_for(lambda: not arm_vms & set(fake.vms) and not arm_nics & set(fake.nics), timeout=120,
                 what="the arm64 VMs and their NICs deleted")
        assert arm_vms <= {r["path"].rsplit("/", 1)[-1] for r in fake.calls("DELETE", r"/virtualMachines/[^/]+$")}
        x64 = {s["name"] for s in fake.skus if {"name": "CpuArchitectureType", "value": "x64"} in s["capabilities"]}
        new_puts = vm_puts()[puts_before:]
        assert new_puts
        for b in new_puts:
            assert b["properties"]["hardwareProfile"]["vmSize"] in x64
            assert b["properties"]["storageProfile"]["imageReference"]["communityGalleryImageId"].split("/")[4] in (
                "2204gen2containerd", "2204containerd")
            assert b["tags"]["karpenter.sh_nodepool"] == "default-demo"
        claims = wait_for(lambda: [c for c in api.list("NodeClaim")[0] if "aks-" + c["metadata"]["name"] not in arm_vms]
                          if not arm_vms & {"aks-" + c["metadata"]["name"] for c in api.list("NodeClaim")[0]} else None,
                          timeout=60, what="the arm64 NodeClaims gone")
        wait_for(lambda: {"aks-" + c["metadata"]["name"] for c in api.list("NodeClaim")[0]} == set(fake.vms),
                 timeout=30, what="one VM per NodeClaim")
        vms = [c["status"]["providerID"].rsplit("/", 1)[-1] for c in claims]
        # scaled to zero: the empty nodes are consolidated away, their VMs and NICs deleted in Azure
        api.patch("Deployment", "inflate", {"spec": {"replicas": 0}}, "workshop")
        wait_for(lambda: not api.list("NodeClaim")[0] and not api.list("Node")[0], timeout=120,
                 what="the NodeClaims and Nodes gone")
        wait_for(lambda: not fake.vms and not fake.nics, timeout=60, what="the VMs and NICs deleted")
        deleted = {r["path"].rsplit("/", 1)[-1] for r in fake.calls("DELETE", r"/virtualMachines/[^/]+$")}
        assert set(vms) <= deleted
        assert ctrl.stop() == 0
        assert "Traceback" not in ctrl.err_path.read_text()
    except BaseException:
        if ctrl is not None:
            print(ctrl.out_path.read_text()[-6000:], ctrl.err_path.read_text()[-3000:])
        raise
    finally:
        if stand_in is not None:
            stand_in.stop.set()
        if ctrl is not None:
            ctrl.stop()
        sandbox.stop()
