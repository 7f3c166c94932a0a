"""The API resources karpy knows: group, version, kind, plural, scope and short names.

Both the in-memory API server and the HTTP front end (discovery, URL routing)
read this table; so do the clients that build URLs.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    kind: str
    plural: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()  # "status", "scale", "eviction", "binding"
    verbs: tuple[str, ...] = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
    versions: tuple[str, ...] = field(default=())  # every served version (first = storage/preferred)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def served_versions(self) -> tuple[str, ...]:
        return self.versions or (self.version,)


_STATUS = ("status",)
# the verbs of a custom resource, in the order kube-apiserver lists them
_CR_VERBS = ("delete", "deletecollection", "get", "list", "patch", "create", "update", "watch")

TYPES: list[ResourceType] = [
    ResourceType("", "v1", "Pod", "pods", True, ("po",), ("all",), ("status", "eviction", "binding")),
    ResourceType("", "v1", "Node", "nodes", False, ("no",), (), _STATUS),
    ResourceType("", "v1", "Namespace", "namespaces", False, ("ns",), (), _STATUS,
                 verbs=("create", "delete", "get", "list", "patch", "update", "watch")),
    ResourceType("", "v1", "Event", "events", True, ("ev",)),
    ResourceType("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", True, ("pvc",), (), _STATUS),
    ResourceType("", "v1", "PersistentVolume", "persistentvolumes", False, ("pv",), (), _STATUS),
    ResourceType("", "v1", "ConfigMap", "configmaps", True, ("cm",)),
    ResourceType("", "v1", "PodTemplate", "podtemplates", True),
    ResourceType("", "v1", "Secret", "secrets", True),
    ResourceType("", "v1", "ServiceAccount", "serviceaccounts", True, ("sa",)),
    ResourceType("", "v1", "Service", "services", True, ("svc",), ("all",), _STATUS),
    ResourceType("", "v1", "ReplicationController", "replicationcontrollers", True, ("rc",), ("all",),
                 ("status", "scale")),
    ResourceType("apps", "v1", "Deployment", "deployments", True, ("deploy",), ("all",), ("status", "scale")),
    ResourceType("apps", "v1", "ReplicaSet", "replicasets", True, ("rs",), ("all",), ("status", "scale")),
    ResourceType("apps", "v1", "StatefulSet", "statefulsets", True, ("sts",), ("all",), ("status", "scale")),
    ResourceType("apps", "v1", "DaemonSet", "daemonsets", True, ("ds",), ("all",), _STATUS),
    ResourceType("batch", "v1", "Job", "jobs", True, (), ("all",), _STATUS),
    ResourceType("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", True, ("pdb",), (), _STATUS),
    ResourceType("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", False),
    ResourceType("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, ("pc",)),
    ResourceType("storage.k8s.io", "v1", "StorageClass", "storageclasses", False, ("sc",)),
    ResourceType("storage.k8s.io", "v1", "CSINode", "csinodes", False),
    ResourceType("storage.k8s.io", "v1", "VolumeAttachment", "volumeattachments", False, (), (), _STATUS),
    ResourceType("coordination.k8s.io", "v1", "Lease", "leases", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False),
    ResourceType("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False),
    ResourceType("rbac.authorization.k8s.io", "v1", "Role", "roles", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True),
    ResourceType("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False,
                 ("crd", "crds"), ("api-extensions",), _STATUS),
    ResourceType("karpenter.sh", "v1", "NodePool", "nodepools", False, (), ("karpenter",), ("status", "scale"), verbs=_CR_VERBS),
    ResourceType("karpenter.sh", "v1", "NodeClaim", "nodeclaims", False, (), ("karpenter",), _STATUS, verbs=_CR_VERBS),
    ResourceType("karpenter.sh", "v1alpha1", "NodeOverlay", "nodeoverlays", False, ("overlays",), ("karpenter",), _STATUS,
                 verbs=_CR_VERBS),
    ResourceType("autoscaling.x-k8s.io", "v1beta1", "CapacityBuffer", "capacitybuffers", True, ("cb",),
                 ("autoscaling",), _STATUS, verbs=_CR_VERBS),
    ResourceType("karpenter.azure.com", "v1beta1", "AKSNodeClass", "aksnodeclasses", False, ("aksnc", "aksncs"),
                 ("karpenter", "nap"), _STATUS, versions=("v1beta1", "v1alpha2"), verbs=_CR_VERBS),
    ResourceType("karpenter.k8s.aws", "v1", "EC2NodeClass", "ec2nodeclasses", False, ("ec2nc", "ec2ncs"),
                 ("karpenter",), _STATUS, verbs=_CR_VERBS),
    ResourceType("karpenter.kwok.sh", "v1alpha1", "KWOKNodeClass", "kwoknodeclasses", False, ("kwoknc", "kwokncs"),
                 ("karpenter",), _STATUS, verbs=_CR_VERBS),
]

BY_KIND: dict[str, ResourceType] = {t.kind: t for t in TYPES}
BY_GROUP_PLURAL: dict[tuple[str, str], ResourceType] = {(t.group, t.plural): t for t in TYPES}

NODECLASS_KINDS = frozenset({"AKSNodeClass", "EC2NodeClass", "KWOKNodeClass"})
CRD_KINDS = NODECLASS_KINDS | {"NodePool", "NodeClaim", "NodeOverlay", "CapacityBuffer"}
# the kinds whose objects carry metadata.generation (kube-apiserver sets it for these only; custom resources too)
GENERATION_KINDS = CRD_KINDS | {"Pod", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job",
                                "PodDisruptionBudget", "PriorityClass", "CustomResourceDefinition"}


def resource_type(kind: str) -> ResourceType:
    t = BY_KIND.get(kind)
    if t is None:
        raise KeyError(f"unknown kind {kind!r}")
    return t


def is_namespaced(kind: str) -> bool:
    t = BY_KIND.get(kind)
    return t.namespaced if t is not None else True


def object_key(obj: dict) -> tuple[str, str, str]:
    """(kind, namespace, name): namespace "" for cluster-scoped kinds, "default" when a namespaced object names none."""
    kind = obj.get("kind", "")
    meta = obj.get("metadata") or {}
    ns = str(meta.get("namespace") or "default") if is_namespaced(kind) else ""
    return kind, ns, str(meta.get("name", ""))
