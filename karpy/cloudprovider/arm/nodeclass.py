"""AKSNodeClass status and hash, as upstream's nodeclass controllers report them.

:class:`NodeClassController` (upstream's ``nodeclass.status`` reconcilers and ``nodeclass.hash``), for every
AKSNodeClass, every 5 minutes and on every change:

* ``status.kubernetesVersion`` from the API server's ``/version``: set on first sight, raised on an upgrade
  (which also sets ``ImagesReady=False``, reason ``KubernetesUpgrade``, so that the images move to the newest
  versions at once), never lowered (``KubernetesVersionReady``);
* ``status.images``: one per image definition of the ``imageFamily`` (Ubuntu resolves to Ubuntu2404 from
  Kubernetes 1.34, AzureLinux to AzureLinux3 from 1.32), the newest community gallery version of each, with
  the requirements an instance type must meet (``kubernetes.io/arch`` and
  ``karpenter.azure.com/sku-hyperv-generation``). Versions follow the newest, as upstream's do when there is no
  node OS maintenance window: the ConfigMap ``upcoming-maintenance-window`` that AKS writes for its managed node
  autoprovisioning is not read (a self-hosted cluster has none, and karpy's roles grant no ConfigMap read).
  ``ImagesReady=False`` with ``ImagesNotFound``,
  ``SIGRequiredForFIPS`` (FIPS needs the AKS shared image gallery, which self-hosted karpy cannot read), or the
  ARM error code when the gallery cannot be read (``AuthorizationFailed`` for a missing role);
* ``SubnetsReady`` from a GET of the subnet (``SubnetIDInvalid``, ``SubnetNotFound``, ``SubnetUnknownError``),
  ``ValidationSucceeded`` and ``LocalDNSReady`` (``status.localDNSState`` from ``spec.localDNS.mode``);
* ``Ready``: True when every condition above is, else False with reason ``UnhealthyDependents``;
* the annotations ``karpenter.azure.com/aksnodeclass-hash`` and ``-hash-version`` (``karpy-v1``). When the
  hash version changes (a NodeClass last stamped by upstream's Karpenter), the NodeClaims of that NodeClass
  are stamped with the new version and, unless already Drifted, the new hash: switching to karpy drifts none.

A condition that turns False is reported as a Warning Event on the AKSNodeClass and an error log line.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from ...controllers.lifecycle import set_condition
from ...disruption.drift import nodeclass_hash
from ...kube import errors as E
from ...runtime.events import ref
from .clients import error_code, error_message, is_not_found
from .provider import NODECLASS_HASH_ANNOTATION, image_definitions

HASH_VERSION_ANNOTATION = "karpenter.azure.com/aksnodeclass-hash-version"
HASH_VERSION = "karpy-v1"
LABEL_HYPERV = "karpenter.azure.com/sku-hyperv-generation"
CONDITIONS = ("ImagesReady", "KubernetesVersionReady", "SubnetsReady", "ValidationSucceeded", "LocalDNSReady")
REQUEUE = 300.0
_SUBNET = re.compile(r"(?i)^/subscriptions/([^/]+)/resourceGroups/([^/]+)/providers/Microsoft\.Network/"
                     r"virtualNetworks/([^/]+)/subnets/([^/]+)$")


def hash_annotations(nc: dict) -> dict[str, str]:
    return {NODECLASS_HASH_ANNOTATION: nodeclass_hash(nc), HASH_VERSION_ANNOTATION: HASH_VERSION}


def _semver(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v.lstrip("v"))[:3])


def family_images(family: str, k8s_minor: int) -> list[tuple[str, str, str, str]]:
    """(gallery, definition, arch, hyper-v generation "1"/"2") in upstream's priority order."""
    gallery, defs = image_definitions(family, k8s_minor)
    return [(gallery, defs[(arch, gen)], arch, gen[1:]) for arch, gen in
            (("amd64", "V2"), ("amd64", "V1"), ("arm64", "V2")) if (arch, gen) in defs]


def image_requirements(arch: str, gen: str) -> list[dict]:
    """Sorted as upstream sorts them: by key length, then key."""
    return [{"key": "kubernetes.io/arch", "operator": "In", "values": [arch]},
            {"key": LABEL_HYPERV, "operator": "In", "values": [gen]}]


class NodeClassController:
    name = "nodeclass.status"
    periodic = True

    def __init__(self, mgr: Any, api: Any, provider: Any, server_version: Callable[[], str], clock: Any,
                 recorder: Any, log: Any):
        self.mgr, self.api, self.provider, self.server_version = mgr, api, provider, server_version
        self.clock, self.recorder, self.log = clock, recorder, log

    def setup(self, mgr: Any) -> None:
        mgr.watch("AKSNodeClass", lambda etype, obj, old: mgr.enqueue(self, obj["metadata"]["name"]))

    # --- one NodeClass ----------------------------------------------------------------------------
    def reconcile(self, name: str) -> float | None:
        nc = self.mgr.get("AKSNodeClass", name)
        if nc is None or nc["metadata"].get("deletionTimestamp"):
            return None
        self._hash(nc)
        old = nc.get("status") or {}
        status = {k: v for k, v in old.items()}
        status["conditions"] = [dict(c) for c in old.get("conditions") or ()]
        now = self.clock.now()
        results: dict[str, tuple[str, str, str]] = {}
        results["KubernetesVersionReady"] = self._kubernetes_version(status, now)
        results["ImagesReady"] = self._images(nc, status, now)
        results["SubnetsReady"] = self._subnet(nc)
        results["ValidationSucceeded"] = ("True", "ValidationSucceeded", "")
        mode = (((nc.get("spec") or {}).get("localDNS") or {}).get("mode") or "Disabled")
        status["localDNSState"] = "Enabled" if mode == "Required" else "Disabled"
        results["LocalDNSReady"] = ("True", "LocalDNSReady", "")
        gen = nc["metadata"].get("generation")
        for ctype in CONDITIONS:
            value, reason, message = results[ctype]
            set_condition(status, ctype, value, now, reason=reason, message=message)
        bad = [t for t in CONDITIONS if results[t][0] != "True"]
        set_condition(status, "Ready", "False" if bad else "True", now,
                      reason="UnhealthyDependents" if bad else "Ready",
                      message=", ".join(f"{t}={results[t][0]} ({results[t][1]})" for t in bad))
        if gen is not None:
            for c in status["conditions"]:
                c["observedGeneration"] = gen
        before = {c["type"]: (c.get("status"), c.get("reason")) for c in old.get("conditions") or ()}
        for t in bad:
            if before.get(t) != ("False", results[t][1]):
                self.recorder.publish(ref(nc), results[t][1], f"{t}: {results[t][2]}", "Warning", dedupe=300.0)
                self.log.error("nodeclass not ready", controller=self.name, AKSNodeClass={"name": name},
                               condition=t, reason=results[t][1], error=results[t][2])
        if status != old:
            self.api.patch("AKSNodeClass", name, {"status": status}, subresource="status")
            if not bad and (before.get("Ready") or ("",))[0] != "True":
                self.log.info("nodeclass ready", controller=self.name, AKSNodeClass={"name": name},
                              kubernetesVersion=status.get("kubernetesVersion"),
                              images=[i["id"] for i in status.get("images") or ()])
        return REQUEUE

    # --- hash -------------------------------------------------------------------------------------
    def _hash(self, nc: dict) -> None:
        name = nc["metadata"]["name"]
        have = nc["metadata"].get("annotations") or {}
        want = hash_annotations(nc)
        if have.get(HASH_VERSION_ANNOTATION) != HASH_VERSION:
            for claim in self.mgr.list("NodeClaim"):
                ref_ = (claim.get("spec") or {}).get("nodeClassRef") or {}
                ann = claim["metadata"].get("annotations") or {}
                if ref_.get("name") != name or (ref_.get("kind") or "AKSNodeClass") != "AKSNodeClass" \
                        or ann.get(HASH_VERSION_ANNOTATION) == HASH_VERSION:
                    continue
                stamp = {HASH_VERSION_ANNOTATION: HASH_VERSION}
                if not any(c.get("type") == "Drifted" for c in (claim.get("status") or {}).get("conditions") or ()):
                    stamp[NODECLASS_HASH_ANNOTATION] = want[NODECLASS_HASH_ANNOTATION]
                try:
                    self.api.patch("NodeClaim", claim["metadata"]["name"], {"metadata": {"annotations": stamp}})
                except E.NotFound:
                    pass  # deleted meanwhile
        if any(have.get(k) != v for k, v in want.items()):
            self.api.patch("AKSNodeClass", name, {"metadata": {"annotations": want}})

    # --- Kubernetes version -----------------------------------------------------------------------
    def _kubernetes_version(self, status: dict, now: float) -> tuple[str, str, str]:
        current = status.get("kubernetesVersion") or ""
        try:
            goal = self.server_version()
        except Exception as e:  # noqa: BLE001 - keep what is known; say why
            if current:
                return "True", "KubernetesVersionReady", ""
            return "False", "KubernetesVersionUnknown", f"getting kubernetes version, {e}"
        if not goal:
            return ("True", "KubernetesVersionReady", "") if current else \
                ("False", "KubernetesVersionUnknown", "the API server reported no version")
        ready = any(c.get("type") == "KubernetesVersionReady" and c.get("status") == "True"
                    for c in status.get("conditions") or ())
        if ready and current:
            if _semver(goal) > _semver(current):
                set_condition(status, "ImagesReady", "False", now, reason="KubernetesUpgrade",
                              message="Performing kubernetes upgrade, need to get latest images")
                self.log.info("kubernetes upgrade detected", controller=self.name, currentKubernetesVersion=current,
                              discoveredKubernetesVersion=goal)
            elif _semver(goal) < _semver(current):
                goal = current  # never downgraded
        status["kubernetesVersion"] = goal
        return "True", "KubernetesVersionReady", ""

    # --- images -----------------------------------------------------------------------------------
    def _images(self, nc: dict, status: dict, now: float) -> tuple[str, str, str]:
        spec = nc.get("spec") or {}
        if spec.get("fipsMode") == "FIPS":
            status.pop("images", None)
            return ("False", "SIGRequiredForFIPS", "FIPS images require UseSIG to be enabled, but UseSIG is false "
                    "(the AKS shared image gallery is only readable by AKS managed node autoprovisioning)")
        version = status.get("kubernetesVersion") or ""
        minor = _semver(version)[1] if len(_semver(version)) > 1 else self.provider._k8s_minor()
        goal = []
        fresh = not any(c.get("type") == "ImagesReady" and c.get("status") == "True"  # new, or an upgrade
                        for c in status.get("conditions") or ())
        try:
            for gallery, definition, arch, gen in family_images(spec.get("imageFamily") or "Ubuntu", minor):
                try:
                    ident = self.provider._latest_image(gallery, definition, fresh=fresh)
                except Exception as e:  # noqa: BLE001
                    if is_not_found(e) or getattr(e, "reason", "") == "ImageNotFound":
                        continue  # a definition the gallery does not have (yet): the others still serve
                    raise
                goal.append({"id": ident, "requirements": image_requirements(arch, gen)})
        except Exception as e:  # noqa: BLE001 - Azure refused or is unreachable: keep the images known
            code = error_code(e) or type(e).__name__
            if status.get("images"):
                self.log.error("failed refreshing images", controller=self.name,
                               AKSNodeClass={"name": nc["metadata"]["name"]}, code=code, error=error_message(e))
                return "True", "ImagesReady", ""
            return "False", code, f"getting node images, {error_message(e)}"
        if not goal:
            status.pop("images", None)
            return "False", "ImagesNotFound", "ImageSelectors did not match any Images"
        status["images"] = goal
        return "True", "ImagesReady", ""

    # --- subnet -----------------------------------------------------------------------------------
    def _subnet(self, nc: dict) -> tuple[str, str, str]:
        subnet = ((nc.get("spec") or {}).get("vnetSubnetID")) or self.provider.s.vnet_subnet_id
        m = _SUBNET.match(subnet or "")
        if m is None:
            return "False", "SubnetIDInvalid", f"Failed to parse vnetSubnetID {subnet!r}"
        try:
            self.provider.c.network.subnets.get(m.group(2), m.group(3), m.group(4))
        except Exception as e:  # noqa: BLE001
            if is_not_found(e):
                return "False", "SubnetNotFound", f"Subnet {subnet} does not exist"
            return "False", "SubnetUnknownError", f"Failed to get subnet {subnet}: {error_code(e)}: {error_message(e)}"
        return "True", "SubnetsReady", ""

