"""End to end: ``karpy sandbox --no-karpenter`` with the AKS workshop, the fake ARM, ``karpy controller
--cloud-provider azure`` as a process, and a stand-in for the node bootstrap that registers a Node for each VM
once Azure reports it Succeeded (its name, provider ID, labels and taints from the VM's custom data)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from karpy.cloudprovider.arm.bootstrap import parse_custom_data

from .conftest import settings_env

ROOT = Path(__file__).resolve().parents[2]
controller_e2e = pytest.importorskip("controller.test_e2e_sandbox")
Proc, wait_for = controller_e2e.Proc, controller_e2e.wait_for


class BootstrapStandIn:
    """What the AKS node image does with the custom data: a kubelet registering its Node."""

    def __init__(self, fake, api):
        self.fake, self.api = fake, api
        self.stop = threading.Event()
        self.registered: set[str] = set()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(0.2):
            with self.fake.lock:
                vms = [v for v in self.fake.vms.values() if v["properties"]["provisioningState"] == "Succeeded"]
            for vm in vms:
                name = vm["properties"]["osProfile"]["computerName"]
                if name in self.registered:
                    continue
                boot = parse_custom_data(vm["properties"]["osProfile"]["customData"])
                labels = dict(kv.split("=", 1) for kv in boot["KUBELET_NODE_LABELS"].split(",") if kv)
                flags = dict(f.split("=", 1) for f in boot["KUBELET_FLAGS"].split(" "))
                taints = []
                for t in flags.get("--register-with-taints", "").split(","):
                    kv, _, effect = t.rpartition(":")
                    k, _, v = kv.partition("=")
                    taints.append({"key": k, "effect": effect, **({"value": v} if v else {})})
                pid = "azure://" + vm["id"].replace(f"/resourceGroups/{vm['id'].split('/')[4]}/",
                                                    f"/resourceGroups/{vm['id'].split('/')[4].lower()}/")
                try:
                    self.api.create({"apiVersion": "v1", "kind": "Node", "metadata": {
                        "name": name, "labels": {**labels, "kubernetes.io/hostname": name}},
                        "spec": {"providerID": pid, "taints": taints}})
                    self.registered.add(name)
                except Exception:  # noqa: BLE001 - the next turn
                    pass


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
        assert ctrl.stop() == 0
        assert "Traceback" not in ctrl.err_path.read_text()
    finally:
        if stand_in is not None:
            stand_in.stop.set()
        if ctrl is not None:
            ctrl.stop()
        sandbox.stop()
