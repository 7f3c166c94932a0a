"""The Azure provider's own controllers, and how ``karpy controller --cloud-provider azure`` builds the provider.

:class:`~.nodeclass.NodeClassController` keeps every AKSNodeClass's status, conditions and hash annotations;
:class:`~.interruption.NodeConditionInterruption` turns spot evictions and scheduled terminations into
interruptions; :class:`~.tokencheck.BootstrapTokenCheck` reports the kubelet bootstrap token's expiry.

:class:`GarbageCollector` (upstream's instance and NIC garbage collection): every 2 minutes, VMs of this
cluster that no NodeClaim claims and that are older than 5 minutes are deleted with their Node; every 5
minutes, NICs named ``aks-<name>`` with neither a VM nor a NodeClaim of that name are deleted.
"""

from __future__ import annotations

import base64
import time
from typing import Any

from ...kube.times import parse_time
from .interruption import NodeConditionInterruption
from .nodeclass import NodeClassController
from .provider import GC_GRACE, AzureVMProvider, vm_name
from .tokencheck import BootstrapTokenCheck

VM_GC_PERIOD = 120.0
NIC_GC_PERIOD = 300.0


class GarbageCollector:
    name = "instance.garbagecollection"
    periodic = True

    def __init__(self, mgr: Any, api: Any, provider: AzureVMProvider, log: Any, now: Any = time.time):
        self.mgr, self.api, self.provider, self.log, self.now = mgr, api, provider, log, now
        self.started = False
        self.last_nic_pass = 0.0

    def setup(self, mgr: Any) -> None:
        def kick(etype: str, obj: dict, old: dict | None) -> None:
            if not self.started:
                self.started = True
                mgr.requeue_after(self, "", 10.0)
        mgr.watch("NodeClaim", kick)

    def reconcile(self, key: Any) -> float | None:
        try:
            self.collect()
        except Exception as e:  # noqa: BLE001 - Azure unreachable: the next pass
            self.log.error("failed garbage collecting instances", controller=self.name, error=str(e))
        return VM_GC_PERIOD

    def collect(self) -> list[str]:
        """One pass; the VMs and NICs it deleted."""
        vms = self.provider.list()  # before the NodeClaims: a VM created after this list is not judged
        claims = self.mgr.list("NodeClaim")
        claimed = {(c.get("status") or {}).get("providerID", "").lower() for c in claims}
        names = {c["metadata"]["name"] for c in claims}
        done: list[str] = []
        now = self.now()
        for inst in vms:
            pid = inst["status"]["providerID"]
            created = parse_time(inst["metadata"].get("creationTimestamp"))
            if pid.lower() in claimed or inst["metadata"].get("deletionTimestamp") or created is None \
                    or now - created < GC_GRACE:
                continue
            try:
                self.provider.delete(inst)
            except Exception as e:  # noqa: BLE001 - gone already, or the next pass
                self.log.error("failed garbage collecting instance", controller=self.name, error=str(e))
                continue
            done.append(pid)
            self.log.info("garbage collected cloudprovider instance", controller=self.name, **{"provider-id": pid})
            for node in self.mgr.list("Node"):
                if ((node.get("spec") or {}).get("providerID") or "").lower() == pid.lower():
                    try:
                        self.api.delete("Node", node["metadata"]["name"])
                    except Exception:  # noqa: BLE001 - already gone
                        pass
        if now - self.last_nic_pass >= NIC_GC_PERIOD:
            self.last_nic_pass = now
            alive = {i["status"]["providerID"].rsplit("/", 1)[-1].lower() for i in vms}
            alive |= {vm_name(n).lower() for n in names}
            with self.provider.lock:
                alive |= set(self.provider.pending) | set(self.provider.deleting)
            for nic in self.provider.list_nics():
                if nic.startswith("aks-") and nic not in alive:
                    self.provider._delete_nic(nic)
                    done.append(nic)
                    self.log.info("garbage collected network interface", controller=self.name, nic=nic)
        return done


def server_version(api: Any) -> str:
    """The API server's Kubernetes version, without the ``v`` and build suffixes: ``1.33.2``."""
    v = api._call(api._request("GET", "/version"))  # KubeClient's own request path
    return str((v or {}).get("gitVersion") or "").lstrip("v").split("+")[0].split("-")[0]


def _cluster_facts(api: Any, log: Any) -> dict:
    """The cluster CA (from the controller's own kubeconfig) and the API server's Kubernetes version."""
    facts: dict[str, str] = {"ca": "", "version": ""}
    cluster = getattr(getattr(api, "config", None), "cluster", None)
    if cluster is not None:
        data = getattr(cluster, "certificate_auth_data", None)
        path = getattr(cluster, "certificate_auth", None)
        if data:
            facts["ca"] = data if isinstance(data, str) else base64.b64encode(data).decode()
        elif path:
            try:
                with open(path, "rb") as f:
                    facts["ca"] = base64.b64encode(f.read()).decode()
            except OSError:
                pass
    try:
        facts["version"] = server_version(api)
    except Exception as e:  # noqa: BLE001 - the bootstrap falls back to a supported version
        log.warn("failed reading the API server's version", controller="cloudprovider", error=str(e))
    return facts


def build_azure(settings: Any, api: Any, mgr: Any, clock: Any, recorder: Any, log: Any) -> tuple[AzureVMProvider, list, list]:
    """The provider, its controllers and its background workers."""
    from .clients import ProviderConfigError, check_credential, error_message, make_clients
    from .pricing import PriceRefresher, Prices
    from .quota import QuotaRefresher
    from .skus import InstanceTypes, list_skus_via

    s = settings.azure
    clients = make_clients(s)
    check_credential(clients, s)
    types = InstanceTypes(list_skus_via(clients.compute, s.location), s.location,
                          log=lambda msg, **kv: log.error(msg, controller="instancetype", **kv),
                          prices=Prices(s.location, s.retail_prices_endpoint or None, log=log))
    try:
        types.refresh()
    except Exception as e:  # noqa: BLE001 - no access, wrong subscription: exit 2 naming it
        raise ProviderConfigError(f"cannot list resource SKUs in {s.location} of subscription {s.subscription_id}: "
                                  f"{error_message(e)}") from None
    facts: dict[str, str] = {}

    def cluster() -> dict:
        if not facts:
            facts.update(_cluster_facts(api, log))
        return facts

    def delete_nodeclaim(name: str) -> None:
        try:
            api.delete("NodeClaim", name)
        except Exception:  # noqa: BLE001 - already gone
            pass

    cls = AzureVMProvider
    if s.provision_mode == "aksmachineapi":  # machines of an AKS agent pool (karpy.cloudprovider.arm.machines)
        from .machines import AKSMachineProvider as cls
    provider = cls(clients, s, types, lambda kind, name: mgr.get(kind, name), cluster,
                   delete_nodeclaim=delete_nodeclaim, log=log, recorder=recorder)
    log.info("discovered instance types", controller="cloudprovider", count=len(types.infos), location=s.location,
             **{"provision-mode": s.provision_mode})
    status = NodeClassController(mgr, api, provider, lambda: server_version(api), clock, recorder, log)
    controllers = [GarbageCollector(mgr, api, provider, log), status, NodeConditionInterruption(provider, log),
                   BootstrapTokenCheck(mgr, api, s.kubelet_bootstrap_token, recorder, log)]
    return provider, controllers, [_Closer(provider), PriceRefresher(types), QuotaRefresher(provider.quota)]


class _Closer:
    """A worker whose stop() ends the provider's background polls when the controller stops."""

    def __init__(self, provider: AzureVMProvider):
        self.provider = provider

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self.provider.close()
