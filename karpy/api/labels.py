"""Well-known labels and restricted label domains.

Two layers, as upstream has them:

- The NodePool/NodeClaim CRDs restrict keys with CEL rules: the ``karpenter.sh``
  domain (except ``karpenter.sh/capacity-type`` and ``karpenter.sh/nodepool``),
  ``karpenter.sh/nodepool`` in NodePools, ``kubernetes.io/hostname``, and each
  provider's CRD adds an allow-list for its own domains (``PROVIDER_CRD_RULES``).
- Karpenter's runtime validation (NodePool readiness) rejects keys in a
  restricted domain that are not well-known labels (``is_restricted_label``),
  and capacity-type style requirements whose values are all unknown.

The provider tables here are what the providers' CRDs and ``labels.go`` say.
When the cloud provider modules (``karpy.cloudprovider.catalog.get_provider``)
are importable, their ``WELL_KNOWN_LABELS`` and ``LABEL_DOMAIN`` are added to
the runtime tables (they can only widen what is accepted).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .names import label_domain

KARPENTER_GROUP = "karpenter.sh"

LABEL_NODEPOOL = "karpenter.sh/nodepool"
LABEL_CAPACITY_TYPE = "karpenter.sh/capacity-type"
LABEL_INITIALIZED = "karpenter.sh/initialized"
LABEL_REGISTERED = "karpenter.sh/registered"
LABEL_DO_NOT_SYNC_TAINTS = "karpenter.sh/do-not-sync-taints"
ANNOTATION_DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"

LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_ARCH = "kubernetes.io/arch"
LABEL_OS = "kubernetes.io/os"
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_WINDOWS_BUILD = "node.kubernetes.io/windows-build"

CAPACITY_TYPES = ("on-demand", "spot", "reserved")

# Labels every provider knows (karpenter core's WellKnownLabels).
WELL_KNOWN_LABELS: frozenset[str] = frozenset(
    {
        LABEL_NODEPOOL,
        LABEL_ZONE,
        LABEL_REGION,
        LABEL_INSTANCE_TYPE,
        LABEL_ARCH,
        LABEL_OS,
        LABEL_CAPACITY_TYPE,
        LABEL_WINDOWS_BUILD,
    }
)

RESTRICTED_LABEL_DOMAINS: frozenset[str] = frozenset({KARPENTER_GROUP})
RESTRICTED_LABELS: frozenset[str] = frozenset({LABEL_HOSTNAME})

# Keys in the karpenter.sh domain that NodePool/NodeClaim CRDs let through.
KARPENTER_DOMAIN_ALLOWED = (LABEL_CAPACITY_TYPE, LABEL_NODEPOOL)

# Deprecated aliases that Karpenter rewrites to the well-known key.
NORMALIZED_LABELS = {
    "failure-domain.beta.kubernetes.io/zone": LABEL_ZONE,
    "beta.kubernetes.io/arch": LABEL_ARCH,
    "beta.kubernetes.io/os": LABEL_OS,
    "beta.kubernetes.io/instance-type": LABEL_INSTANCE_TYPE,
    "failure-domain.beta.kubernetes.io/region": LABEL_REGION,
    "topology.disk.csi.azure.com/zone": LABEL_ZONE,  # upstream's Azure provider adds it
}

WELL_KNOWN_VALUES: dict[str, frozenset[str]] = {LABEL_CAPACITY_TYPE: frozenset(CAPACITY_TYPES)}


@dataclass(frozen=True)
class DomainRule:
    """A CRD CEL rule: keys whose domain part ends with ``domain`` must be in ``allowed``."""

    domain: str
    allowed: frozenset[str]


@dataclass
class ProviderLabels:
    group: str
    node_class_kind: str
    # CRD (admission) rules on template labels and requirement keys
    crd_domain_rules: tuple[DomainRule, ...] = ()
    crd_restricted_keys: tuple[str, ...] = ()
    # runtime (NodePool readiness) tables
    restricted_domains: frozenset[str] = frozenset()
    well_known_labels: frozenset[str] = frozenset()
    well_known_values: dict[str, frozenset[str]] = field(default_factory=dict)


AZURE_GROUP = "karpenter.azure.com"
AWS_GROUP = "karpenter.k8s.aws"
KWOK_GROUP = "karpenter.kwok.sh"

_AZURE_SKU_LABELS = frozenset(
    f"karpenter.azure.com/{s}"
    for s in (
        "sku-name",
        "sku-family",
        "sku-series",
        "sku-version",
        "sku-cpu",
        "sku-memory",
        "sku-networking-accelerated",
        "sku-storage-premium-capable",
        "sku-storage-ultra-ssd",
        "sku-storage-ephemeralos-maxsize",
        "sku-gpu-name",
        "sku-gpu-manufacturer",
        "sku-gpu-count",
        "placement-scope",
    )
)
_AKS_LABELS_WELL_KNOWN = frozenset(
    f"kubernetes.azure.com/{s}"
    for s in ("sku-cpu", "sku-memory", "cluster", "mode", "scalesetpriority", "priority", "os-sku", "fips_enabled")
)

AZURE = ProviderLabels(
    group=AZURE_GROUP,
    node_class_kind="AKSNodeClass",
    crd_domain_rules=(
        DomainRule("karpenter.azure.com", _AZURE_SKU_LABELS | {"karpenter.azure.com/aksnodeclass"}),
        DomainRule(
            "kubernetes.azure.com",
            frozenset(
                f"kubernetes.azure.com/{s}"
                for s in (
                    "mode",
                    "scalesetpriority",
                    "priority",
                    "fips_enabled",
                    "os-sku",
                    "cluster",
                    "sku-cpu",
                    "sku-memory",
                    "ebpf-dataplane",
                    "ebpf-host-routing",
                    "network-policy",
                    "hostedvm",
                )
            ),
        ),
    ),
    crd_restricted_keys=("agentpool", "storageprofile", "storagetier", "accelerator"),
    restricted_domains=frozenset({AZURE_GROUP}),
    well_known_labels=_AZURE_SKU_LABELS | _AKS_LABELS_WELL_KNOWN,
    well_known_values={
        LABEL_CAPACITY_TYPE: frozenset({"on-demand", "spot"}),
        "karpenter.azure.com/sku-networking-accelerated": frozenset({"true", "false"}),
        "karpenter.azure.com/sku-storage-premium-capable": frozenset({"true", "false"}),
        "karpenter.azure.com/sku-storage-ultra-ssd": frozenset({"true", "false"}),
        "karpenter.azure.com/sku-gpu-manufacturer": frozenset({"nvidia", "amd"}),
        "karpenter.azure.com/placement-scope": frozenset({"zonal", "regional"}),
        "kubernetes.azure.com/mode": frozenset({"system", "user"}),
        "kubernetes.azure.com/scalesetpriority": frozenset({"regular", "spot"}),
        "kubernetes.azure.com/priority": frozenset({"regular", "spot"}),
        "kubernetes.azure.com/os-sku": frozenset({"Ubuntu", "AzureLinux"}),
        "kubernetes.azure.com/fips_enabled": frozenset({"true"}),
    },
)

_AWS_INSTANCE_LABELS = frozenset(
    f"karpenter.k8s.aws/{s}"
    for s in (
        "instance-tenancy",
        "capacity-reservation-type",
        "capacity-reservation-id",
        "capacity-reservation-interruptible",
        "instance-encryption-in-transit-supported",
        "nitro-sandbox",
        "instance-category",
        "instance-hypervisor",
        "instance-family",
        "instance-generation",
        "instance-local-nvme",
        "instance-size",
        "instance-cpu",
        "instance-cpu-manufacturer",
        "instance-cpu-sustained-clock-speed-mhz",
        "instance-memory",
        "instance-ebs-bandwidth",
        "instance-network-bandwidth",
        "instance-gpu-name",
        "instance-gpu-manufacturer",
        "instance-gpu-count",
        "instance-gpu-memory",
        "instance-accelerator-name",
        "instance-accelerator-manufacturer",
        "instance-accelerator-count",
        "instance-capability-flex",
        "placement-group-id",
        "placement-group-partition",
    )
)

AWS = ProviderLabels(
    group=AWS_GROUP,
    node_class_kind="EC2NodeClass",
    crd_domain_rules=(DomainRule("karpenter.k8s.aws", _AWS_INSTANCE_LABELS | {"karpenter.k8s.aws/ec2nodeclass"}),),
    restricted_domains=frozenset({AWS_GROUP}),
    well_known_labels=_AWS_INSTANCE_LABELS | {"topology.k8s.aws/zone-id", LABEL_WINDOWS_BUILD},
    well_known_values={"karpenter.k8s.aws/instance-tenancy": frozenset({"dedicated", "default"})},
)

KWOK = ProviderLabels(
    group=KWOK_GROUP,
    node_class_kind="KWOKNodeClass",
    restricted_domains=frozenset({KWOK_GROUP}),
    well_known_labels=frozenset(
        f"karpenter.kwok.sh/{s}" for s in ("instance-size", "instance-family", "instance-memory", "instance-cpu")
    ),
)

PROVIDERS: dict[str, ProviderLabels] = {p.group: p for p in (AZURE, AWS, KWOK)}

_merged: dict[str, ProviderLabels] = {}


def provider_labels(group: str | None) -> ProviderLabels | None:
    """The label tables of the provider named by a nodeClassRef group (None if unknown).

    Widened with the cloud provider module's WELL_KNOWN_LABELS / LABEL_DOMAIN
    when that module is available.
    """
    if not isinstance(group, str) or group not in PROVIDERS:
        return None
    if group in _merged:
        return _merged[group]
    base = PROVIDERS[group]
    merged = base
    try:  # the provider objects are optional; never let them break validation
        from karpy.cloudprovider.catalog import get_provider  # type: ignore[import-not-found]

        prov = get_provider(group)
        extra_labels = frozenset(str(x) for x in (getattr(prov, "WELL_KNOWN_LABELS", None) or ()))
        domain = getattr(prov, "LABEL_DOMAIN", None)
        extra_domains = frozenset({domain}) if isinstance(domain, str) and domain else frozenset()
        merged = ProviderLabels(
            group=base.group,
            node_class_kind=base.node_class_kind,
            crd_domain_rules=base.crd_domain_rules,
            crd_restricted_keys=base.crd_restricted_keys,
            restricted_domains=base.restricted_domains | extra_domains,
            well_known_labels=base.well_known_labels | extra_labels,
            well_known_values=base.well_known_values,
        )
    except Exception:  # noqa: BLE001 - provider module absent or still being written
        merged = base
    _merged[group] = merged
    return merged


def karpenter_domain_restricted(key: str) -> bool:
    """The karpenter.sh CEL rule: the part before the first '/' ends with karpenter.sh."""
    if key in KARPENTER_DOMAIN_ALLOWED:
        return False
    return key.split("/", 1)[0].endswith(KARPENTER_GROUP)


def crd_domain_violation(key: str, rule: DomainRule) -> bool:
    return key not in rule.allowed and key.split("/", 1)[0].endswith(rule.domain)


def well_known_labels(prov: ProviderLabels | None) -> frozenset[str]:
    return WELL_KNOWN_LABELS | (prov.well_known_labels if prov else frozenset())


def restricted_domains(prov: ProviderLabels | None) -> frozenset[str]:
    return RESTRICTED_LABEL_DOMAINS | (prov.restricted_domains if prov else frozenset())


def is_restricted_label(key: str, prov: ProviderLabels | None) -> str | None:
    """Karpenter's runtime check; returns the problem, or None when the key may be used."""
    wk = well_known_labels(prov)
    if key in wk:
        return None
    domain = label_domain(key)
    domains = restricted_domains(prov)
    for d in domains:
        if domain == d or domain.endswith("." + d):
            break
    else:
        if key not in RESTRICTED_LABELS:
            return None
    return (
        f"using label {key} is not allowed as it might interfere with the internal provisioning logic; "
        f"specify a well known label: [{' '.join(sorted(wk))}], or a custom label that does not use a "
        f"restricted domain: [{' '.join(sorted(domains))}]"
    )


def well_known_values(prov: ProviderLabels | None) -> dict[str, frozenset[str]]:
    out = dict(WELL_KNOWN_VALUES)
    if prov:
        out.update(prov.well_known_values)
    return out
