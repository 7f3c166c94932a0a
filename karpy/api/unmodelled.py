"""Kinds karpy does not model: which ones ``karpy simulate`` skips and which ones it refuses.

An application folder (or ``helm template`` / ``kubectl kustomize`` output) holds Services,
ConfigMaps, Ingresses, RBAC and custom resources of other projects beside its workloads. They do
not change which nodes Karpenter launches, so karpy skips them. A kind that does change it (it
creates pods, changes their requests, caps them, or configures Karpenter) and that karpy does not
simulate is refused with one line naming it and why: a simulation without it would be wrong.

``classify(api_version, kind, obj)`` answers for a kind that is not one of karpy's accepted kinds:
``(SKIP, "")``, ``(REFUSE, why)``, or ``(UNKNOWN, group_kinds)`` for a kind Kubernetes itself does not
have in a built-in group (a typo, most likely).
"""

from __future__ import annotations

from typing import Any, Container

from .schema import fmt_value

SKIP = "skip"
REFUSE = "refuse"
UNKNOWN = "unknown"

# The kinds of Kubernetes' built-in API groups (v1.33), by group ("" is the core group).
BUILTIN: dict[str, frozenset[str]] = {
    "": frozenset({"Binding", "ComponentStatus", "ConfigMap", "Endpoints", "Event", "LimitRange", "Namespace", "Node",
                   "PersistentVolume", "PersistentVolumeClaim", "Pod", "PodTemplate", "ReplicationController",
                   "ResourceQuota", "Secret", "Service", "ServiceAccount"}),
    "admissionregistration.k8s.io": frozenset({"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
                                               "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                                               "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}),
    "apiextensions.k8s.io": frozenset({"CustomResourceDefinition"}),
    "apiregistration.k8s.io": frozenset({"APIService"}),
    "apps": frozenset({"ControllerRevision", "DaemonSet", "Deployment", "ReplicaSet", "StatefulSet"}),
    "authentication.k8s.io": frozenset({"TokenReview", "SelfSubjectReview"}),
    "authorization.k8s.io": frozenset({"LocalSubjectAccessReview", "SelfSubjectAccessReview",
                                       "SelfSubjectRulesReview", "SubjectAccessReview"}),
    "autoscaling": frozenset({"HorizontalPodAutoscaler"}),
    "batch": frozenset({"CronJob", "Job"}),
    "certificates.k8s.io": frozenset({"CertificateSigningRequest", "ClusterTrustBundle"}),
    "coordination.k8s.io": frozenset({"Lease", "LeaseCandidate"}),
    "discovery.k8s.io": frozenset({"EndpointSlice"}),
    "events.k8s.io": frozenset({"Event"}),
    "flowcontrol.apiserver.k8s.io": frozenset({"FlowSchema", "PriorityLevelConfiguration"}),
    "networking.k8s.io": frozenset({"Ingress", "IngressClass", "NetworkPolicy", "IPAddress", "ServiceCIDR"}),
    "node.k8s.io": frozenset({"RuntimeClass"}),
    "policy": frozenset({"PodDisruptionBudget", "Eviction"}),
    "rbac.authorization.k8s.io": frozenset({"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}),
    "resource.k8s.io": frozenset({"DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice",
                                  "DeviceTaintRule"}),
    "scheduling.k8s.io": frozenset({"PriorityClass"}),
    "storage.k8s.io": frozenset({"CSIDriver", "CSINode", "CSIStorageCapacity", "StorageClass", "VolumeAttachment",
                                 "VolumeAttributesClass"}),
    "storagemigration.k8s.io": frozenset({"StorageVersionMigration"}),
    "internal.apiserver.k8s.io": frozenset({"StorageVersion"}),
}

# Kinds that change which nodes Karpenter launches, and that karpy does not simulate: (group, kind) -> why.
AFFECTING: dict[tuple[str, str], str] = {
    ("", "ReplicationController"): "it creates pods, which karpy does not simulate for this kind; "
                                   "use a Deployment or ReplicaSet",
    ("", "LimitRange"): "it gives containers default requests and limits, which karpy does not apply",
    ("", "ResourceQuota"): "it caps the pods and requests of a namespace, which karpy does not enforce",
    ("", "Binding"): "it binds a pod to a node, which karpy does not simulate",
    ("batch", "CronJob"): "it creates Jobs on a schedule, which karpy does not simulate; "
                          "simulate one run of it as a Job",
    # resource.k8s.io (DeviceClass, ResourceClaim, ...) is skipped: with upstream's default IgnoreDRARequests a pod
    # that references a ResourceClaim is refused whatever the claim holds (karpy.scheduling.dra)
    ("storage.k8s.io", "CSIStorageCapacity"): "it limits where a StorageClass can provision volumes, "
                                              "which karpy does not simulate",
    ("autoscaling.k8s.io", "VerticalPodAutoscaler"): "it changes its pods' requests, which karpy does not simulate",
    ("keda.sh", "ScaledObject"): "it scales a workload, which karpy does not simulate; "
                                 "set the replicas you expect, or use a HorizontalPodAutoscaler",
    ("keda.sh", "ScaledJob"): "it creates Jobs, which karpy does not simulate",
    ("argoproj.io", "Workflow"): "it creates pods, which karpy does not simulate",
    ("argoproj.io", "CronWorkflow"): "it creates pods on a schedule, which karpy does not simulate",
}

# Groups where every kind configures Karpenter or karpy: a kind there that karpy does not model is refused.
KARPENTER_GROUPS = ("karpenter.sh", "karpenter.k8s.aws", "karpenter.azure.com", "karpenter.kwok.sh", "karpy.dev")

KUSTOMIZE_GROUP = "kustomize.config.k8s.io"


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def _has_pod_template(obj: Any) -> bool:
    """Whether a custom resource carries a pod template (Argo Rollouts, Knative Services, ...): it creates pods."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if not isinstance(spec, dict):
        return False
    for holder in (spec, (spec.get("jobTemplate") or {}).get("spec") if isinstance(spec.get("jobTemplate"), dict)
                   else None):
        tmpl = holder.get("template") if isinstance(holder, dict) else None
        pod = tmpl.get("spec") if isinstance(tmpl, dict) else None
        if isinstance(pod, dict) and isinstance(pod.get("containers"), list):
            return True
    return False


def classify(api_version: str, kind: str, obj: Any) -> tuple[str, str]:
    """What to do with a document of a kind karpy does not model (see the module docstring)."""
    group = group_of(api_version)
    why = AFFECTING.get((group, kind))
    if why is not None:
        return REFUSE, why
    if group in KARPENTER_GROUPS:
        return REFUSE, "it configures Karpenter in a way karpy does not simulate"
    if group == KUSTOMIZE_GROUP:
        return REFUSE, "a kustomization is not a manifest; render it with -k DIR (as kubectl apply -k does)"
    if "/" not in api_version and api_version != "v1":
        return UNKNOWN, ""  # the core group has one version, v1
    known = BUILTIN.get(group)
    if known is not None:
        if kind in known:
            return SKIP, ""
        return UNKNOWN, ", ".join(sorted(known))
    if _has_pod_template(obj):
        return REFUSE, "it creates pods from its pod template, which karpy does not simulate"
    return SKIP, ""


def not_modelled(api_version: Any, kind: Any, obj: Any, modelled: Container[str]) -> tuple[str, str] | None:
    """For a manifest of a kind not in ``modelled``: ``(SKIP, "")``, or ``(REFUSE, message)`` with the message
    for its ``kind`` field. None for a kind in ``modelled``, or a manifest without a kind or apiVersion
    (validated as usual)."""
    if not isinstance(kind, str) or not kind or not isinstance(api_version, str) or not api_version:
        return None
    if kind in modelled:
        return None
    what, why = classify(api_version, kind, obj)
    if what == SKIP:
        return SKIP, ""
    value = fmt_value(f"{api_version} {kind}")
    if what == REFUSE:
        return REFUSE, f"Unsupported value: {value}: {why}"
    if not why:
        return REFUSE, f"Unsupported value: {value}: unknown kind: Kubernetes' core group has one version, v1"
    return REFUSE, f"Unsupported value: {value}: unknown kind: {api_version} has no such kind (its kinds: {why})"


def skipped_summary(kinds: list[str]) -> str:
    """One line for every document skipped: ``skipped 14 documents of 6 kinds that do not affect node provisioning``."""
    distinct = sorted(set(kinds))
    docs = f"{len(kinds)} document{'s' if len(kinds) != 1 else ''}"
    of = f"{len(distinct)} kind{'s' if len(distinct) != 1 else ''}"
    return f"skipped {docs} of {of} that do not affect node provisioning: {', '.join(distinct)}"
