"""CapacityBuffers (feature gate ``CapacityBuffer``, as upstream v1.14's ``capacitybuffer`` controller and the
provisioner's virtual pods).

* The ``capacitybuffer`` controller resolves each buffer's pod shape (its PodTemplate, or its Deployment,
  ReplicaSet or StatefulSet) and its number of chunks into the status: ``replicas`` (the larger of ``replicas``
  and ``percentage`` of the workload's replicas, capped by what fits in ``limits``; only what fits in
  ``limits`` when neither is set), ``podTemplateRef``/``podTemplateGeneration`` for a PodTemplate, and the
  condition ``ReadyForProvisioning`` (True ``Resolved``, or False ``PodTemplateNotFound``,
  ``ScalableRefNotFound``, ``ResolutionFailed``). It then triggers the provisioner, and looks again every
  30 seconds.
* The provisioner schedules ``status.replicas`` virtual pods per ready buffer with the pending pods
  (:func:`virtual_pods`): they take room on existing nodes or make Karpenter launch new NodeClaims, are never
  nominated or bound, and leave no events. After each pass the buffer's ``Provisioning`` condition says
  whether they all fit existing capacity (True ``FitsExistingCapacity``) or needed new capacity (False
  ``RequiresNewCapacity``), and the nodes that hold virtual pods are remembered: emptiness leaves them alone
  ("has buffer pods"). Consolidation sees the virtual pods as pending pods, so a replacement must hold them too.
"""

from __future__ import annotations

import math
from typing import Any

from ..api.capacitybuffer import KIND, SCALABLE_KINDS
from ..kube.port import DELETED
from ..kube.times import fmt_time
from ..state.cluster import PodEntry
from ..state.pods import pod_key
from .env import Env

GATE = "CapacityBuffer"
RESYNC = 30.0
READY = "ReadyForProvisioning"
PROVISIONING = "Provisioning"
VIRTUAL_ANNOTATION = "karpenter.sh/capacity-buffer-fake-pod"
BUFFER_NAME_LABEL = "karpenter.sh/capacity-buffer-name"
BUFFER_NAMESPACE_LABEL = "karpenter.sh/capacity-buffer-namespace"
VIRTUAL_PRIORITY = -(2**31)


def resolve(get: Any, buffer: dict) -> tuple[dict | None, int | None, str, str, dict]:
    """(pod template, desired chunks, reason, message, status fields) of a buffer; the template is None with
    the reason it could not be resolved. ``get(kind, name, namespace)`` reads the cluster."""
    spec = buffer.get("spec") or {}
    ns = (buffer.get("metadata") or {}).get("namespace") or "default"
    candidates: list[int] = []
    status: dict[str, Any] = {}
    if spec.get("podTemplateRef"):
        name = spec["podTemplateRef"].get("name", "")
        pt = get("PodTemplate", name, ns)
        if pt is None:
            return None, None, "PodTemplateNotFound", f'podtemplates "{name}" not found', {}
        template = pt.get("template") or {}
        status = {"podTemplateRef": {"name": name},
                  "podTemplateGeneration": int((pt.get("metadata") or {}).get("generation") or 1)}
    elif spec.get("scalableRef"):
        ref = spec["scalableRef"]
        if (ref.get("apiGroup") or "apps") != "apps":
            return None, None, "ResolutionFailed", f'unsupported scalableRef API group "{ref.get("apiGroup")}"', {}
        if ref.get("kind") not in SCALABLE_KINDS:
            return None, None, "ResolutionFailed", f'unsupported kind "{ref.get("kind")}"', {}
        w = get(ref["kind"], ref.get("name", ""), ns)
        if w is None:
            return None, None, "ScalableRefNotFound", f'{ref["kind"].lower()}s.apps "{ref.get("name")}" not found', {}
        template = (w.get("spec") or {}).get("template") or {}
        scaled = (w.get("spec") or {}).get("replicas")
        scaled = 1 if scaled is None else int(scaled)
        if spec.get("percentage") is not None and scaled > 0:
            pct = int(spec["percentage"])
            candidates.append(max(math.ceil(scaled * pct / 100), 1 if pct > 0 else 0))
    else:
        return None, None, "ResolutionFailed", "Neither podTemplateRef nor scalableRef is set", {}
    if spec.get("replicas") is not None:
        candidates.append(int(spec["replicas"]))
    desired = max(candidates) if candidates else 0
    by_limits = _limit_replicas(spec.get("limits"), template)
    if by_limits is not None:
        desired = min(desired, by_limits) if candidates else by_limits
    return template, desired, "Resolved", "Pod template resolved successfully", status


def _limit_replicas(limits: Any, template: dict) -> int | None:
    """How many chunks fit in ``limits``: the least of limit / request over the resources both name; None when
    they name none in common."""
    if not limits:
        return None
    from .. import resources as res
    from ..scheduling.pods import compile_pod

    requests = compile_pod({"metadata": {"name": "x"}, "spec": template.get("spec") or {}}).requests
    caps = res.parse_resource_list(limits)
    fits = [caps[k] // v for k, v in requests.items() if k in caps and v > 0]
    return min(fits) if fits else None


def _set_condition(status: dict, ctype: str, value: str, reason: str, message: str, now: float, gen: int) -> None:
    conds = [c for c in status.get("conditions") or () if c.get("type") != ctype]
    old = next((c for c in status.get("conditions") or () if c.get("type") == ctype), None)
    since = old.get("lastTransitionTime") if old is not None and old.get("status") == value else fmt_time(now)
    conds.append({"type": ctype, "status": value, "reason": reason, "message": message,
                  "observedGeneration": gen, "lastTransitionTime": since})
    status["conditions"] = sorted(conds, key=lambda c: c["type"])


def _ready(buffer: dict) -> bool:
    return any(c.get("type") == READY and c.get("status") == "True"
               for c in (buffer.get("status") or {}).get("conditions") or ())


class CapacityBufferController:
    """Upstream's ``capacitybuffer`` controller: each buffer's status, then a provisioning pass."""

    name = "capacitybuffer"
    periodic = True  # resyncs every 30 s; a pass with nothing new changes nothing

    def __init__(self, env: Env, provisioner: Any):
        self.env = env
        self.provisioner = provisioner

    def setup(self, mgr) -> None:
        mgr.watch(KIND, self._on_buffer)
        for kind in ("PodTemplate", *SCALABLE_KINDS):
            mgr.watch(kind, self._on_source)

    def _on_buffer(self, etype: str, obj: dict, old: dict | None) -> None:
        meta = obj["metadata"]
        if etype == DELETED:  # a provisioning pass forgets the room it kept
            self.provisioner.trigger(f"capacitybuffer/{meta.get('namespace') or 'default'}/{meta['name']}/deleted")
            return
        self.env.mgr.enqueue(self, (meta.get("namespace") or "default", meta["name"]))

    def _on_source(self, etype: str, obj: dict, old: dict | None) -> None:
        ns = obj["metadata"].get("namespace") or "default"
        for b in self.env.mgr.list(KIND, ns):
            self.env.mgr.enqueue(self, (ns, b["metadata"]["name"]))

    def reconcile(self, key: tuple[str, str]) -> float | None:
        env = self.env
        ns, name = key
        buffer = env.mgr.get(KIND, name, ns)
        if buffer is None:
            return None
        _, replicas, reason, message, fields = resolve(env.mgr.get, buffer)
        status = dict(buffer.get("status") or {})
        gen = int(buffer["metadata"].get("generation") or 1)
        if replicas is None:
            _set_condition(status, READY, "False", reason, message, env.now(), gen)
        else:
            status.pop("podTemplateRef", None)
            status.pop("podTemplateGeneration", None)
            status.update(fields)
            status["replicas"] = replicas
            _set_condition(status, READY, "True", reason, message, env.now(), gen)
        status["provisioningStrategy"] = (buffer.get("spec") or {}).get("provisioningStrategy")
        if status != (buffer.get("status") or {}):
            env.api.patch("CapacityBuffer", name, {"status": status}, namespace=ns, subresource="status")
        if replicas is not None:
            self.provisioner.trigger(f"capacitybuffer/{ns}/{name}")
        return RESYNC


def virtual_pods(env: Env) -> list[PodEntry]:
    """The virtual pods of every buffer that is ReadyForProvisioning with chunks to keep (upstream's
    ``appendVirtualPods``): its pod spec (from ``spec``, not the status) without a node name or volume
    claims, the lowest priority, ``capacity-buffer-<name>-<i>``."""
    out: list[PodEntry] = []
    for buffer in sorted(env.mgr.list(KIND), key=lambda b: (b["metadata"].get("namespace", ""), b["metadata"]["name"])):
        n = int((buffer.get("status") or {}).get("replicas") or 0)
        if not _ready(buffer) or n <= 0:
            continue
        template, _, _, _, _ = resolve(env.mgr.get, buffer)
        if template is None:
            continue
        meta = buffer["metadata"]
        ns = meta.get("namespace") or "default"
        spec = _sanitized(template.get("spec") or {})
        for i in range(1, n + 1):
            pod = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"capacity-buffer-{meta['name']}-{i}", "namespace": ns,
                             "uid": f"{meta.get('uid') or ns + '/' + meta['name']}-{i}",
                             "labels": {**((template.get("metadata") or {}).get("labels") or {}),
                                        BUFFER_NAME_LABEL: meta["name"], BUFFER_NAMESPACE_LABEL: ns},
                             "annotations": {VIRTUAL_ANNOTATION: "true"},
                             "creationTimestamp": meta.get("creationTimestamp")},
                "spec": spec,
                "status": {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
            }
            out.append(PodEntry(pod, pod_key(pod), env.cluster.compiler.compile(pod)))
    return out


def _sanitized(spec: dict) -> dict:
    """A pod spec a virtual pod can carry: no node name, no volume claims (their PVCs never exist)."""
    spec = dict(spec)
    spec.pop("nodeName", None)
    spec["priority"] = VIRTUAL_PRIORITY
    dropped = {v.get("name") for v in spec.get("volumes") or () if "persistentVolumeClaim" in v or "ephemeral" in v}
    if dropped:
        spec["volumes"] = [v for v in spec["volumes"] if v.get("name") not in dropped]
        for field in ("containers", "initContainers"):
            spec[field] = [dict(c, volumeMounts=[m for m in c.get("volumeMounts") or () if m.get("name") not in dropped])
                           for c in spec.get(field) or ()]
    return spec


def is_virtual(key: str, obj: dict | None = None) -> bool:
    """Whether a pod is one of a CapacityBuffer's virtual pods (upstream's ``IsVirtualPod``)."""
    meta = (obj or {}).get("metadata") or {}
    return (meta.get("annotations") or {}).get(VIRTUAL_ANNOTATION) == "true"


def buffer_key(obj: dict | None) -> str:
    """``namespace/name`` of the buffer a virtual pod stands for; "" for a real pod, or a virtual pod that does
    not say both."""
    if not is_virtual("", obj):
        return ""
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    ns, name = labels.get(BUFFER_NAMESPACE_LABEL), labels.get(BUFFER_NAME_LABEL)
    return f"{ns}/{name}" if ns and name else ""


def classify(existing: dict[str, list], new: list[list], failed: list) -> dict[str, dict[str, int]]:
    """Virtual pods per buffer key of one scheduling pass: how many went to existing capacity, how many needed
    a new NodeClaim, how many did not fit. Real pods are not counted."""
    counts: dict[str, dict[str, int]] = {}
    groups = [(infos, "existing") for infos in existing.values()] + [(infos, "new") for infos in new] + [(failed, "failed")]
    for infos, what in groups:
        for info in infos:
            k = buffer_key(info.obj)
            if k:
                counts.setdefault(k, {"existing": 0, "new": 0, "failed": 0})[what] += 1
    return counts


def buffer_pods_per_node(existing: dict[str, list]) -> dict[str, int]:
    """How many virtual pods a pass placed on each existing node (nodes without any are left out)."""
    out = {target: sum(1 for i in infos if is_virtual(i.key, i.obj)) for target, infos in existing.items()}
    return {target: n for target, n in out.items() if n}


def provisioning_condition(buffer: dict, counts: dict[str, int] | None) -> tuple[str, str, str] | None:
    """(status, reason, message) of a buffer's ``Provisioning`` condition after a pass that placed its virtual
    pods as ``counts`` says (None when the pass placed none of them); None leaves the condition as it is."""
    desired = int((buffer.get("status") or {}).get("replicas") or 0)
    if not _ready(buffer):
        return "False", "NotReadyForProvisioning", "Buffer is not ReadyForProvisioning"
    if desired == 0:
        return "False", "BufferEmpty", "Buffer has zero desired replicas"
    if counts is None:
        return None
    if counts["new"] or counts["failed"]:
        return ("False", "RequiresNewCapacity",
                f"{counts['new']}/{desired} virtual pods required new capacity, {counts['failed']} failed")
    if counts["existing"] == desired:
        return "True", "FitsExistingCapacity", f"All {desired} virtual pods fit on existing capacity"
    return None


def record(env: Env, existing: dict[str, list], new: list[list], failed: list) -> dict[str, int]:
    """After a provisioning pass: each buffer's ``Provisioning`` condition, and the virtual pods per existing
    node (by name). ``existing`` maps a node to the pods placed on it, ``new`` holds each new NodeClaim's pods,
    ``failed`` the virtual pods that did not fit."""
    counts = classify(existing, new, failed)
    for b in env.mgr.list(KIND):
        meta = b["metadata"]
        cond = provisioning_condition(b, counts.get(f"{meta.get('namespace') or 'default'}/{meta['name']}"))
        if cond is None:
            continue
        status = dict(b.get("status") or {})
        _set_condition(status, PROVISIONING, *cond, env.now(), int(meta.get("generation") or 1))
        if status != (b.get("status") or {}):
            env.api.patch("CapacityBuffer", meta["name"], {"status": status}, namespace=meta.get("namespace") or "default",
                          subresource="status")
    return buffer_pods_per_node(existing)
