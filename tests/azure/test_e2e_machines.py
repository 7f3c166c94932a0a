"""End to end on the AKS Machine API path: ``karpy sandbox --no-karpenter`` with the AKS workshop, the fake ARM,
``karpy controller --cloud-provider azure`` with ``PROVISION_MODE=aksmachineapi`` as a process, and a stand-in for
AKS that registers a Node for each machine once it is Succeeded (named as the machine's VM, with the labels and
initialization taints of the machine PUT and the labels kubelet sets). The workshop's four pods land on two arm64
machines (``Standard_D4pls_v6`` and ``Standard_D2pls_v6``); the Deployment moved to amd64 gets amd64 machines and
the arm64 ones are deleted through ``deleteMachines``; scaled to zero, every machine is deleted."""

from __future__ import annotations

import os
import time

import yaml

from .conftest import settings_env
from .test_e2e import ROOT, BootstrapStandIn, Proc, bound, wait_for


class AKSStandIn(BootstrapStandIn):
    """What AKS and the node's kubelet do for a Succeeded machine: a Node named as its VM, with the provider ID
    Azure's cloud provider writes, the machine's node labels plus kubelet's own, its initialization taints, and
    the NodeClaim's capacity as a kubelet reports it (the VM path's stand-in, polling machines instead)."""

    def __init__(self, fake, api):
        super().__init__(fake, api)
        self.arch = {s["name"]: ("arm64" if {"name": "CpuArchitectureType", "value": "Arm64"} in s["capabilities"]
                                 else "amd64") for s in fake.skus}

    def once(self) -> None:
        with self.fake.lock:
            machines = [m for m in self.fake.machines.values() if m["properties"]["provisioningState"] == "Succeeded"]
        claims = {(c.get("status") or {}).get("providerID", "").lower(): c for c in self.api.list("NodeClaim")[0]}
        for m in machines:
            props = m["properties"]
            vm_id = props["resourceId"]
            name = vm_id.rsplit("/", 1)[-1]
            if name in self.registered:
                continue
            rg = vm_id.split("/")[4]
            pid = "azure://" + vm_id.replace(f"/resourceGroups/{rg}/", f"/resourceGroups/{rg.lower()}/")
            claim = claims.get(pid.lower())
            if claim is None:
                continue
            size = props["hardware"]["vmSize"]
            zone = f"eastus-{m['zones'][0]}" if m.get("zones") else "0"
            labels = {**props["kubernetes"]["nodeLabels"], "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                      "kubernetes.io/arch": self.arch[size], "node.kubernetes.io/instance-type": size,
                      "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": "eastus",
                      "kubernetes.azure.com/agentpool": "machines"}
            taints = []
            for t in props["kubernetes"]["nodeInitializationTaints"]:
                kv, _, effect = t.rpartition(":")
                k, _, v = kv.partition("=")
                taints.append({"key": k, "effect": effect, **({"value": v} if v else {})})
            self.api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                             "spec": {"providerID": pid, "taints": taints},
                             "status": {"capacity": claim["status"]["capacity"],
                                        "allocatable": claim["status"]["allocatable"],
                                        "nodeInfo": {"kubeletVersion": "v" + props["kubernetes"]["orchestratorVersion"],
                                                     "architecture": self.arch[size]},
                                        "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}})
            self.registered[name] = labels


def test_workshop_on_aks_machines(fake, tmp_path):
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
        stand_in = AKSStandIn(fake, api)
        stand_in.thread.start()
        env = {**os.environ, **settings_env(fake, tmp_path), "PROVISION_MODE": "aksmachineapi",
               "AKS_MACHINES_POOL_NAME": "machines"}
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

        def machine_puts():
            return [r for r in fake.calls("PUT", r"/agentPools/machines/machines/[^/]+$")]
        wait_for(lambda: len(machine_puts()) >= 2, timeout=90, what="two machine PUTs")
        time.sleep(2)
        puts = machine_puts()
        assert sorted(r["body"]["properties"]["hardware"]["vmSize"] for r in puts) == \
            ["Standard_D2pls_v6", "Standard_D4pls_v6"]
        for r in puts:
            b, p = r["body"], r["body"]["properties"]
            assert r["path"].startswith("/subscriptions/12345678-1234-1234-1234-123456789012/resourceGroups/rg/"
                                        "providers/Microsoft.ContainerService/managedClusters/workshop/agentPools/")
            assert p["tags"]["karpenter.azure.com_cluster"] == "workshop" and p["tags"]["karpenter.sh_nodepool"] == "default-demo"
            assert p["tags"]["compute.aks.billing"] == "linux"
            assert p["tags"]["karpenter.azure.com_aksmachine_nodeclaim"] == r["path"].rsplit("/", 1)[-1]
            assert p["priority"] == "Regular" and b["zones"][0] in ("1", "2", "3")
            assert "arm64" in p["nodeImageVersion"] and p["nodeImageVersion"].startswith("AKSUbuntu-")
        # no VM or NIC of karpy's own on this path
        assert not fake.calls("PUT", r"/virtualMachines/") and not fake.calls("PUT", r"/networkInterfaces/")
        claims = wait_for(lambda: [c for c in api.list("NodeClaim")[0] if (c.get("status") or {}).get("providerID")],
                          timeout=30, what="launched NodeClaims")
        assert len(claims) == 2
        for c in claims:
            assert c["status"]["providerID"] == (
                "azure:///subscriptions/12345678-1234-1234-1234-123456789012/resourceGroups/mc_rg_cluster_eastus/"
                f"providers/Microsoft.Compute/virtualMachines/aks-machines-{c['metadata']['name']}-12345678-vm")
            assert c["metadata"]["annotations"]["karpenter.azure.com/aks-machine-resource-id"].endswith(
                "/agentPools/machines/machines/" + c["metadata"]["name"])
        # the machines' Nodes join (the stand-in), Karpenter registers and initializes them, the four pods bind
        wait_for(lambda: len(bound(api)) == 4, timeout=90, what="the 4 workshop pods bound")
        used = {p["spec"]["nodeName"] for p in bound(api)}
        assert used == {f"aks-machines-{c['metadata']['name']}-12345678-vm" for c in claims}
        nodes = {n["metadata"]["name"]: n for n in api.list("Node")[0]}
        for name in used:
            assert nodes[name]["metadata"]["labels"]["kubernetes.io/arch"] == "arm64"
            assert nodes[name]["metadata"]["labels"]["karpenter.sh/registered"] == "true"
        assert sorted(sum(1 for p in bound(api) if p["spec"]["nodeName"] == n) for n in used) == [1, 3]
        # the workshop's last step: the Deployment moves to amd64: amd64 machines are created and the arm64
        # machines deleted with deleteMachines
        arm_machines = {c["metadata"]["name"] for c in claims}
        puts_before = len(machine_puts())
        workload = [d for d in yaml.safe_load_all((ROOT / "examples/aks-multiarch-amd64/workload.yaml").read_text())
                    if d and d["kind"] == "Deployment"][0]
        api.patch("Deployment", "inflate", workload, "workshop", patch_type="apply")

        def on_amd64():
            pods, nodes = bound(api), {n["metadata"]["name"]: n for n in api.list("Node")[0]}
            return len(pods) == 4 and all(
                nodes.get(p["spec"]["nodeName"], {}).get("metadata", {}).get("labels", {}).get("kubernetes.io/arch")
                == "amd64" for p in pods)
        wait_for(on_amd64, timeout=120, what="the 4 workshop pods bound to amd64 nodes")
        wait_for(lambda: not arm_machines & set(fake.machines), timeout=120, what="the arm64 machines deleted")
        deleted = {n for r in fake.calls("POST", r"/agentPools/machines/deleteMachines$")
                   for n in r["body"]["machineNames"]}
        assert arm_machines <= deleted
        x64 = {s["name"] for s in fake.skus if {"name": "CpuArchitectureType", "value": "x64"} in s["capabilities"]}
        new_puts = machine_puts()[puts_before:]
        assert new_puts
        for r in new_puts:
            p = r["body"]["properties"]
            assert p["hardware"]["vmSize"] in x64 and "arm64" not in p["nodeImageVersion"]
            assert p["tags"]["karpenter.sh_nodepool"] == "default-demo"
        wait_for(lambda: {c["metadata"]["name"] for c in api.list("NodeClaim")[0]} == set(fake.machines),
                 timeout=60, what="one machine per NodeClaim")
        # scaled to zero: the empty nodes are consolidated away and their machines deleted in AKS
        api.patch("Deployment", "inflate", {"spec": {"replicas": 0}}, "workshop")
        wait_for(lambda: not api.list("NodeClaim")[0] and not api.list("Node")[0], timeout=120,
                 what="the NodeClaims and Nodes gone")
        wait_for(lambda: not fake.machines, timeout=60, what="the machines deleted")
        assert not fake.vms and not fake.nics
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
