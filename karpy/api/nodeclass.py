"""NodeClasses: AKSNodeClass (karpenter.azure.com/v1alpha2, v1beta1), EC2NodeClass
(karpenter.k8s.aws/v1) and KWOKNodeClass (karpenter.kwok.sh/v1alpha1).

Each follows its provider's CRD: field types, enums, patterns, bounds,
required fields, defaults and CEL rules (re-expressed as Python predicates).
The two AKSNodeClass versions share one schema, as upstream's do.

Defaults applied:
- AKSNodeClass: ``imageFamily`` Ubuntu, ``osDiskSizeGB`` 128; in ``kubelet``
  (when present) ``cpuManagerPolicy`` none, ``cpuCFSQuota`` true,
  ``cpuCFSQuotaPeriod`` 100ms, ``topologyManagerPolicy`` none,
  ``containerLogMaxSize`` 50Mi, ``containerLogMaxFiles`` 5; ``gpu.mode`` Driver.
- EC2NodeClass: ``metadataOptions`` = ``{httpEndpoint: enabled,
  httpProtocolIPv6: disabled, httpPutResponseHopLimit: 1, httpTokens: required}``.
- A missing ``spec`` of an AKSNodeClass or KWOKNodeClass is taken as ``{}``
  (so its defaults show); an EC2NodeClass needs its selector terms.

EC2NodeClass ``spec.kubelet`` is an open map in the CRD; Karpenter validates it
in its controller. We check the fields that matter to scheduling the way that
validation does (eviction signals and thresholds, reserved resources, the GC
thresholds, non-negative counts, ``registerWithTaints`` owned by Karpenter).
"""

from __future__ import annotations

import re
from typing import Any

from ..resources import INT64_MAX, parse_duration, parse_quantity, quantity_range_error, to_units
from .meta import object_meta
from .schema import (
    Ctx,
    Node,
    arr,
    as_dict,
    attach_cel,
    check_duration_range,
    boolean,
    child,
    int32,
    int64,
    invalid,
    obj,
    opaque_obj,
    string,
    string_map,
)

DURATION = r"^([0-9]+(s|m|h))+$"
SIZE = r"^\d+(E|P|T|G|M|K|Ei|Pi|Ti|Gi|Mi|Ki)$"

# ============================================================================
# AKSNodeClass
# ============================================================================

AKS_IMAGE_FAMILIES = ("Ubuntu", "Ubuntu2204", "Ubuntu2404", "AzureLinux")


def _go_duration_check(v: str, path: str, ctx: Ctx) -> None:
    try:
        parse_duration(v)
    except ValueError:
        ctx.err(path, invalid(v, f'time: invalid duration "{v}"'))


def _gc_rule(k: dict) -> bool:
    hi, lo = k.get("imageGCHighThresholdPercent"), k.get("imageGCLowThresholdPercent")
    return hi is None or lo is None or hi > lo


def _aks_kubelet() -> Node:
    return obj(
        {
            "allowedUnsafeSysctls": arr(string()),
            "containerLogMaxFiles": int32(default=5, minimum=2),
            "containerLogMaxSize": string(default="50Mi", pattern=SIZE),
            "cpuCFSQuota": boolean(default=True),
            "cpuCFSQuotaPeriod": string(default="100ms", checks=[_go_duration_check]),
            "cpuManagerPolicy": string(default="none", enum=("none", "static")),
            "failSwapOn": boolean(),
            "imageGCHighThresholdPercent": int32(minimum=0, maximum=100),
            "imageGCLowThresholdPercent": int32(minimum=0, maximum=100),
            "podPidsLimit": int64(),
            "topologyManagerPolicy": string(default="none", enum=("restricted", "best-effort", "none", "single-numa-node")),
        },
        rules=[(_gc_rule, "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent")],
    )


_SYSCTL_RANGES = {
    "fsAioMaxNr": (65536, 6553500),
    "fsFileMax": (8192, 12000500),
    "fsInotifyMaxUserWatches": (781250, 2097152),
    "fsNrOpen": (8192, 20000500),
    "kernelThreadsMax": (20, 513785),
    "netCoreNetdevMaxBacklog": (1000, 3240000),
    "netCoreOptmemMax": (20480, 4194304),
    "netCoreRmemDefault": (212992, 134217728),
    "netCoreRmemMax": (212992, 134217728),
    "netCoreSomaxconn": (4096, 3240000),
    "netCoreWmemDefault": (212992, 134217728),
    "netCoreWmemMax": (212992, 134217728),
    "netIPv4NeighDefaultGcThresh1": (128, 80000),
    "netIPv4NeighDefaultGcThresh2": (512, 90000),
    "netIPv4NeighDefaultGcThresh3": (1024, 100000),
    "netIPv4TCPFinTimeout": (5, 120),
    "netIPv4TCPKeepaliveIntvl": (10, 90),
    "netIPv4TCPKeepaliveProbes": (1, 15),
    "netIPv4TCPKeepaliveTime": (30, 432000),
    "netIPv4TCPMaxSynBacklog": (128, 3240000),
    "netIPv4TCPMaxTwBuckets": (8000, 1440000),
    "netNetfilterNfConntrackBuckets": (65536, 524288),
    "netNetfilterNfConntrackMax": (131072, 2097152),
    "vmMaxMapCount": (65530, 262144),
    "vmSwappiness": (0, 100),
    "vmVfsCachePressure": (0, 100),
}


def _le(a: str, b: str):
    return lambda s: a not in s or b not in s or s[a] <= s[b]


def _ports(s: dict) -> tuple[int, int]:
    first, last = s["netIPv4IPLocalPortRange"].split(" ")
    return int(first), int(last)


def _sysctls() -> Node:
    props: dict[str, Node] = {k: int32(minimum=lo, maximum=hi) for k, (lo, hi) in _SYSCTL_RANGES.items()}
    props["netIPv4IPLocalPortRange"] = string(pattern=r"^\d+ \d+$")
    props["netIPv4TCPTwReuse"] = boolean()
    return obj(
        props,
        rules=[
            (_le("netCoreRmemDefault", "netCoreRmemMax"), "netCoreRmemDefault must be <= netCoreRmemMax"),
            (_le("netCoreWmemDefault", "netCoreWmemMax"), "netCoreWmemDefault must be <= netCoreWmemMax"),
            (
                _le("netIPv4NeighDefaultGcThresh1", "netIPv4NeighDefaultGcThresh2"),
                "netIPv4NeighDefaultGcThresh1 must be <= netIPv4NeighDefaultGcThresh2",
            ),
            (
                _le("netIPv4NeighDefaultGcThresh2", "netIPv4NeighDefaultGcThresh3"),
                "netIPv4NeighDefaultGcThresh2 must be <= netIPv4NeighDefaultGcThresh3",
            ),
            (
                lambda s: "netIPv4IPLocalPortRange" not in s or 1024 <= _ports(s)[0] <= 60999,
                "netIPv4IPLocalPortRange first port must be in [1024, 60999]",
            ),
            (
                lambda s: "netIPv4IPLocalPortRange" not in s or 32768 <= _ports(s)[1] <= 65535,
                "netIPv4IPLocalPortRange last port must be in [32768, 65535]",
            ),
            (
                lambda s: "netIPv4IPLocalPortRange" not in s or _ports(s)[0] <= _ports(s)[1],
                "netIPv4IPLocalPortRange first port must be <= last port",
            ),
        ],
    )


def _dns_override(vnet: bool) -> Node:
    item = obj(
        {
            "cacheDuration": string(pattern=DURATION, checks=[check_duration_range]),
            "forwardDestination": string(enum=("ClusterCoreDNS", "VnetDNS")),
            "forwardPolicy": string(enum=("Sequential", "RoundRobin", "Random")),
            "maxConcurrent": int32(minimum=0),
            "protocol": string(enum=("PreferUDP", "ForceTCP")),
            "queryLogging": string(enum=("Error", "Log")),
            "serveStale": string(enum=("Verify", "Immediate", "Disable")),
            "serveStaleDuration": string(pattern=DURATION, checks=[check_duration_range]),
            "zone": string(
                max_len=254,
                min_len=1,
                pattern=r"^(\.|[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?)*\.?)$",
            ),
        },
        required=(
            "cacheDuration",
            "forwardDestination",
            "forwardPolicy",
            "maxConcurrent",
            "protocol",
            "queryLogging",
            "serveStale",
            "serveStaleDuration",
            "zone",
        ),
        rules=[
            (
                lambda x: not (x["zone"].endswith("cluster.local") and x["forwardDestination"] == "VnetDNS"),
                "'cluster.local' cannot be forwarded to VnetDNS",
            ),
            (
                lambda x: not (x["serveStale"] == "Verify" and x["protocol"] == "ForceTCP"),
                "serveStale Verify cannot be used with protocol ForceTCP",
            ),
        ],
    )
    rules = [
        (
            lambda lst: all(any(isinstance(x, dict) and x.get("zone") == z for x in lst) for z in (".", "cluster.local")),
            "must contain required zones '.' and 'cluster.local'",
        )
    ]
    if vnet:
        rules += [
            (
                lambda lst: not any(x["zone"] == "." and x["forwardDestination"] == "ClusterCoreDNS" for x in lst),
                "root zone '.' cannot be forwarded to ClusterCoreDNS from vnetDNSOverrides",
            ),
            (
                lambda lst: not any(
                    x["zone"] != "." and not x["zone"].endswith("cluster.local") and x["forwardDestination"] == "ClusterCoreDNS"
                    for x in lst
                ),
                "external domains cannot be forwarded to ClusterCoreDNS from vnetDNSOverrides",
            ),
        ]
    return arr(item, max_items=100, list_type="map", map_keys=("zone",), rules=rules)


def _tl_enabled(spec: dict) -> bool:
    tl = as_dict(as_dict(spec.get("security")).get("trustedLaunch"))
    return tl.get("vtpm") is True or tl.get("secureBoot") is True


def _fips(spec: dict) -> bool:
    return spec.get("fipsMode") == "FIPS"


_AKS_SPEC_RULES = [
    (
        lambda s: not _fips(s) or ("imageFamily" in s and s["imageFamily"] != "Ubuntu2404"),
        "FIPS is not yet supported for Ubuntu2404",
    ),
    (
        lambda s: not _fips(s) or ("imageFamily" in s and (s["imageFamily"] != "Ubuntu2204" or _tl_enabled(s))),
        "TrustedLaunch is required for FIPS support with Ubuntu2204",
    ),
    (
        lambda s: not (_fips(s) and _tl_enabled(s)) or s.get("imageFamily") in (None, "Ubuntu", "Ubuntu2204"),
        "TrustedLaunch with FIPSMode FIPS is only supported for Ubuntu and Ubuntu2204",
    ),
    (
        lambda s: "swapFileSize" not in as_dict(s.get("linuxOSConfig"))
        or as_dict(s.get("kubelet")).get("failSwapOn") is False,
        "kubelet.failSwapOn must be set to false when linuxOSConfig.swapFileSize is specified",
    ),
]

_TAG_KEY_FORBIDDEN = re.compile(r"[<>%&?]")

AKS_SPEC = obj(
    {
        "artifactStreaming": obj({"enabled": boolean()}),
        "fipsMode": string(enum=("FIPS", "Disabled")),
        "gpu": obj({"mode": string(default="Driver", enum=("Driver", "None"))}),
        "imageFamily": string(default="Ubuntu", enum=AKS_IMAGE_FAMILIES),
        "kubelet": _aks_kubelet(),
        "linuxOSConfig": obj(
            {
                "swapFileSize": string(pattern=SIZE),
                "sysctls": _sysctls(),
                "transparentHugePageDefrag": string(enum=("always", "defer", "defer+madvise", "madvise", "never")),
                "transparentHugePageEnabled": string(enum=("always", "madvise", "never")),
            }
        ),
        "localDNS": obj(
            {
                "kubeDNSOverrides": _dns_override(False),
                "mode": string(enum=("Preferred", "Required", "Disabled")),
                "vnetDNSOverrides": _dns_override(True),
            },
            required=("kubeDNSOverrides", "mode", "vnetDNSOverrides"),
        ),
        "maxPods": int32(minimum=10, maximum=250),
        "osDiskSizeGB": int32(default=128, minimum=30, maximum=2048),
        "security": obj(
            {
                "encryptionAtHost": boolean(),
                "trustedLaunch": obj({"secureBoot": boolean(), "vtpm": boolean()}),
            }
        ),
        "tags": string_map(
            rules=[
                (lambda t: all(len(k) <= 512 for k in t), "tags keys must be less than 512 characters"),
                (
                    lambda t: not any(_TAG_KEY_FORBIDDEN.search(k) for k in t),
                    "tags keys must not contain '<', '>', '%', '&', or '?'",
                ),
                (lambda t: not any("\\" in k for k in t), "tags keys must not contain '\\'"),
                (lambda t: all(len(v) <= 256 for v in t.values()), "tags values must be less than 256 characters"),
            ]
        ),
        "vnetSubnetID": string(
            pattern=r"^\/subscriptions\/[^\/]+\/resourceGroups\/[a-zA-Z0-9_\-().]{0,89}[a-zA-Z0-9_\-()]\/providers\/Microsoft\.Network\/virtualNetworks\/[^\/]+\/subnets\/[^\/]+$",
            pattern_flags=re.IGNORECASE,
        ),
    },
    default={},
    rules=_AKS_SPEC_RULES,
)

AKS_NODE_CLASS = obj(
    {"apiVersion": string(), "kind": string(), "metadata": object_meta(), "spec": AKS_SPEC, "status": opaque_obj()},
    description="AKSNodeClass: the Azure-specific configuration of the nodes of the NodePools that reference it.",
)

# ============================================================================
# EC2NodeClass
# ============================================================================

AMI_ALIAS_FAMILIES = ("al2", "al2023", "bottlerocket", "windows2019", "windows2022", "windows2025")
WINDOWS_ALIAS_FAMILIES = ("windows2019", "windows2022", "windows2025")
AMI_FAMILIES = ("AL2", "AL2023", "Bottlerocket", "Custom", "Windows2019", "Windows2022", "Windows2025")
EVICTION_SIGNALS = (
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
)
RESERVED_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pid")
# the resource (and so the unit) an eviction threshold's quantity is in, by signal prefix
_SIGNAL_RESOURCE = {
    "memory.available": "memory",
    "nodefs.available": "ephemeral-storage",
    "imagefs.available": "ephemeral-storage",
}


def _tags_node(max_props: int | None = 20) -> Node:
    return string_map(
        max_props=max_props,
        rules=[(lambda t: all(k != "" and v != "" for k, v in t.items()), "empty tag keys or values aren't supported")],
    )


def _has(x: Any, *keys: str) -> bool:
    return isinstance(x, dict) and any(k in x for k in keys)


def _items(lst: list) -> list[dict]:
    return [x for x in lst if isinstance(x, dict)]


_ALIAS_FORMAT = re.compile(r"^[a-zA-Z0-9]+@.+$")

_AMI_TERM = obj(
    {
        "alias": string(
            max_len=30,
            rules=[
                (lambda a: bool(_ALIAS_FORMAT.search(a)), "'alias' is improperly formatted, must match the format 'family@version'"),
                (
                    lambda a: a.split("@")[0] in AMI_ALIAS_FAMILIES,
                    "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', "
                    "'windows2019', 'windows2022', 'windows2025'",
                ),
                (
                    lambda a: a.split("@")[0] not in WINDOWS_ALIAS_FAMILIES or a.split("@")[1] == "latest",
                    "windows families may only specify version 'latest'",
                ),
            ],
        ),
        "id": string(pattern=r"ami-[0-9a-z]+"),
        "name": string(),
        "owner": string(),
        "ssmParameter": string(),
        "tags": _tags_node(),
    }
)

_AMI_TERMS = arr(
    _AMI_TERM,
    max_items=30,
    min_items=1,
    rules=[
        (
            lambda lst: all(_has(x, "tags", "id", "name", "alias", "ssmParameter") for x in _items(lst)),
            "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
        ),
        (
            lambda lst: not any("id" in x and _has(x, "alias", "tags", "name", "owner") for x in _items(lst)),
            "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
        ),
        (
            lambda lst: not any("alias" in x and _has(x, "id", "tags", "name", "owner") for x in _items(lst)),
            "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
        ),
        (
            lambda lst: not (any("alias" in x for x in _items(lst)) and len(lst) != 1),
            "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
        ),
    ],
)

_VOLUME_SIZE = (
    r"^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G"
    r"|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$"
)

_BLOCK_DEVICE = obj(
    {
        "deviceName": string(),
        "ebs": obj(
            {
                "deleteOnTermination": boolean(),
                "encrypted": boolean(),
                "iops": int64(),
                "kmsKeyID": string(),
                "snapshotID": string(),
                "throughput": int64(),
                "volumeInitializationRate": int32(minimum=100, maximum=300),
                "volumeSize": string(pattern=_VOLUME_SIZE),
                "volumeType": string(enum=("standard", "io1", "io2", "gp2", "sc1", "st1", "gp3")),
            },
            rules=[
                (lambda e: "snapshotID" in e or "volumeSize" in e, "snapshotID or volumeSize must be defined"),
                (
                    lambda e: "volumeInitializationRate" not in e or e.get("snapshotID", "") != "",
                    "snapshotID must be set when volumeInitializationRate is set",
                ),
            ],
        ),
        "rootVolume": boolean(),
    }
)


def _not_all(pred):
    """CEL ``!self.all(x, pred)``, skipped on an empty list (whose emptiness is reported on its own)."""
    return lambda lst: not lst or not all(pred(x) for x in _items(lst))


_CR_TERMS = arr(
    obj(
        {
            "id": string(pattern=r"^cr-[0-9a-z]+$"),
            "instanceMatchCriteria": string(enum=("open", "targeted")),
            "ownerID": string(pattern=r"^[0-9]{12}$"),
            "tags": _tags_node(),
        }
    ),
    max_items=30,
    rules=[
        (
            lambda lst: all(_has(x, "tags", "id", "instanceMatchCriteria") for x in _items(lst)),
            "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
        ),
        (
            _not_all(lambda x: "id" in x and _has(x, "tags", "ownerID", "instanceMatchCriteria")),
            "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term",
        ),
    ],
)


def _nic_rules() -> list:
    def primary(lst: list) -> bool:
        return len(lst) == 0 or any(
            x.get("deviceIndex") == 0 and x.get("networkCardIndex") == 0 and x.get("interfaceType") == "interface"
            for x in _items(lst)
        )

    def unique(lst: list) -> bool:
        xs = _items(lst)
        for x in xs:
            same = [y for y in xs if y.get("networkCardIndex") == x.get("networkCardIndex") and y.get("deviceIndex") == x.get("deviceIndex")]
            if len(same) != 1:
                return False
            if x.get("interfaceType") == "efa-only":
                efa = [
                    y for y in xs if y.get("networkCardIndex") == x.get("networkCardIndex") and y.get("interfaceType") == "efa-only"
                ]
                if len(efa) != 1:
                    return False
        return True

    return [
        (primary, "networkInterfaces must include a primary interface with interfaceType='interface'"),
        (
            unique,
            "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one "
            "efa device per network card",
        ),
    ]


def _alias_family(spec: dict) -> set[str]:
    out = set()
    for x in _items(spec.get("amiSelectorTerms") or []):
        a = x.get("alias")
        if isinstance(a, str):
            m = re.search(r"^[^@]+", a)
            if m:
                out.add(m.group(0))
    return out


def _alias_rule(alias: str, family: str):
    return (
        lambda s: "amiFamily" not in s or alias not in _alias_family(s) or s["amiFamily"] in ("Custom", family),
        f"if set, amiFamily must be '{family}' or 'Custom' when using an {family} alias"
        if family.startswith("AL")
        else f"if set, amiFamily must be '{family}' or 'Custom' when using a {family} alias",
    )


_EC2_SPEC_RULES = [
    (
        lambda s: ("role" in s) != ("instanceProfile" in s),
        "must specify exactly one of ['role', 'instanceProfile']",
    ),
    _alias_rule("al2", "AL2"),
    _alias_rule("al2023", "AL2023"),
    _alias_rule("bottlerocket", "Bottlerocket"),
    _alias_rule("windows2019", "Windows2019"),
    _alias_rule("windows2022", "Windows2022"),
    _alias_rule("windows2025", "Windows2025"),
    (
        lambda s: any("alias" in x for x in _items(s["amiSelectorTerms"])) or "amiFamily" in s,
        "must specify amiFamily if amiSelectorTerms does not contain an alias",
    ),
]


# --- EC2NodeClass kubelet (an open map, validated as Karpenter's controller does) ---


def _string_map(kc: dict, field: str) -> dict[str, str] | None:
    v = kc.get(field)
    if isinstance(v, dict) and all(isinstance(x, str) for x in v.values()):
        return v
    return None


def _int_field(kc: dict, field: str) -> int | None:
    v = kc.get(field)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


_KUBELET_TYPES: dict[str, tuple[type, ...]] = {
    "podsPerCore": (int,),
    "evictionMaxPodGracePeriod": (int,),
    "imageGCHighThresholdPercent": (int,),
    "imageGCLowThresholdPercent": (int,),
    "cpuCFSQuota": (bool,),
    "clusterDNS": (list,),
    "kubeReserved": (dict,),
    "systemReserved": (dict,),
    "evictionHard": (dict,),
    "evictionSoft": (dict,),
    "evictionSoftGracePeriod": (dict,),
    "evictionMinimumReclaim": (dict,),
    "maxPods": (int, str),
}


INT32_MAX = 2**31 - 1


def _check_node_overhead(kc: dict, path: str, ctx: Ctx) -> None:
    """kubeReserved + systemReserved + the hard eviction threshold are one node overhead, which
    Karpenter subtracts from the capacity; each resource's total must fit in an int64 as each
    quantity must (see karpy.resources). Reported at the entry that makes the total too big."""
    totals: dict[str, int] = {}
    for field in ("kubeReserved", "systemReserved", "evictionHard"):
        entries = _string_map(kc, field) or {}
        for key in sorted(entries):
            resource = _SIGNAL_RESOURCE.get(key) if field == "evictionHard" else key
            value = entries[key]
            if resource is None or resource == "pid" or value.endswith("%"):
                continue
            try:
                units = to_units(resource, value)
            except ValueError:
                continue  # not a quantity, or out of range on its own: reported above
            if units < 0:
                continue
            totals[resource] = totals.get(resource, 0) + units
            if totals[resource] > INT64_MAX:
                ctx.err(
                    f"{child(path, field)}[{key}]",
                    invalid(
                        value,
                        f"kubeReserved, systemReserved and evictionHard add up to 2^63 or more for {resource}: "
                        "Kubernetes quantities are 64-bit integers",
                    ),
                )
                return


def _kubelet_type_errors(kc: dict) -> list[tuple[str, str]]:
    """(field, message) for each known kubelet field whose JSON type Karpenter cannot decode."""
    out = []
    for field, types in _KUBELET_TYPES.items():
        if field not in kc:
            continue
        v = kc[field]
        ok = isinstance(v, types) and not (isinstance(v, bool) and bool not in types)
        if field in ("kubeReserved", "systemReserved", "evictionHard", "evictionSoft", "evictionSoftGracePeriod", "evictionMinimumReclaim"):
            ok = ok and all(isinstance(x, str) for x in v.values())
        if not ok:
            want = {
                (int,): "integer",
                (bool,): "boolean",
                (list,): "list of strings",
                (dict,): "map of string to string",
                (int, str): "integer or expression string",
            }[types]
            out.append((field, invalid(v, f"must be of type {want}")))
    return out


def ec2_kubelet_parse_error(kubelet: Any) -> str | None:
    """Why an EC2NodeClass's ``spec.kubelet`` as stored cannot be decoded (upstream's ParseKubeletConfig fails, and
    its instance type provider refuses to resolve types from defaults), or None. ``karpy simulate`` refuses such a
    NodeClass on input; one read from an API server reaches the cloud provider as it is."""
    if kubelet is None:
        return None
    if not isinstance(kubelet, dict):
        return invalid(kubelet, "must be an object")
    errs = _kubelet_type_errors(kubelet)
    return "; ".join(f"{field}: {msg}" for field, msg in errs) or None


def _check_ec2_kubelet(kc: dict, path: str, ctx: Ctx) -> None:
    for field, msg in _kubelet_type_errors(kc):
        ctx.err(child(path, field), msg)
    if "registerWithTaints" in kc:
        ctx.err(
            child(path, "registerWithTaints"),
            "Forbidden: can't be set, Karpenter sets it from the NodeClaim's taints so the node registers "
            "unschedulable until it's ready",
        )
    for field in ("evictionHard", "evictionSoft", "evictionSoftGracePeriod", "evictionMinimumReclaim"):
        signals = _string_map(kc, field)
        if signals is None:
            continue
        for key in sorted(signals):
            p = f"{child(path, field)}[{key}]"
            if key not in EVICTION_SIGNALS:
                ctx.err(p, invalid(key, f"isn't a valid eviction signal, must be one of {', '.join(EVICTION_SIGNALS)}"))
            value = signals[key]
            if field == "evictionSoftGracePeriod":
                try:
                    if parse_duration(value) < 0:
                        ctx.err(p, invalid(value, "can't be a negative duration"))
                except ValueError:
                    ctx.err(p, invalid(value, "must be a duration"))
                continue
            if value.endswith("%"):
                try:
                    pct = float(value[:-1])
                except ValueError:
                    pct = -1.0
                if not 0 <= pct <= 100:
                    ctx.err(p, invalid(value, "must be a percentage or a resource quantity"))
                continue
            try:
                q = parse_quantity(value)
            except ValueError:
                ctx.err(p, invalid(value, "must be a percentage or a resource quantity"))
                continue
            if q < 0:
                ctx.err(p, invalid(value, "can't be a negative resource quantity"))
                continue
            problem = quantity_range_error(_SIGNAL_RESOURCE.get(key, key), q)
            if problem:
                ctx.err(p, invalid(value, problem))
    soft = _string_map(kc, "evictionSoft") or {}
    grace = _string_map(kc, "evictionSoftGracePeriod") or {}
    for s in sorted(soft):
        if s not in grace:
            ctx.err(f"{child(path, 'evictionSoft')}[{s}]", "Required value: has no matching evictionSoftGracePeriod")
    for s in sorted(grace):
        if s not in soft:
            ctx.err(f"{child(path, 'evictionSoftGracePeriod')}[{s}]", "Required value: has no matching evictionSoft")
    for field in ("kubeReserved", "systemReserved"):
        reserved = _string_map(kc, field)
        if reserved is None:
            continue
        for key in sorted(reserved):
            p = f"{child(path, field)}[{key}]"
            if key not in RESERVED_RESOURCES:
                ctx.err(p, invalid(key, f"isn't a reservable resource, must be one of {', '.join(RESERVED_RESOURCES)}"))
            if reserved[key].startswith("-"):
                ctx.err(p, invalid(reserved[key], "can't be a negative resource quantity"))
                continue
            try:
                q = parse_quantity(reserved[key])
            except ValueError:
                continue  # an expression (CEL), which karpy ignores as upstream does with NodeClassCEL off
            problem = quantity_range_error(key, q)
            if problem:
                ctx.err(p, invalid(reserved[key], problem))
    for field in ("imageGCHighThresholdPercent", "imageGCLowThresholdPercent"):
        v = _int_field(kc, field)
        if v is not None and not 0 <= v <= 100:
            ctx.err(child(path, field), invalid(v, "must be between 0 and 100"))
    for field in ("podsPerCore", "evictionMaxPodGracePeriod", "maxPods"):
        v = _int_field(kc, field)
        if v is not None and v < 0:
            ctx.err(child(path, field), invalid(v, "can't be negative"))
        elif v is not None and v > INT32_MAX:
            # the kubelet (and upstream's KubeletConfiguration) hold these in an int32
            ctx.err(child(path, field), invalid(v, f"must be less than or equal to {INT32_MAX}"))
    _check_node_overhead(kc, path, ctx)
    hi, lo = _int_field(kc, "imageGCHighThresholdPercent"), _int_field(kc, "imageGCLowThresholdPercent")
    if hi is not None and lo is not None and hi <= lo:
        ctx.err(
            path,
            invalid(kc, f"imageGCHighThresholdPercent ({hi}) must be greater than imageGCLowThresholdPercent ({lo})"),
        )


EC2_SPEC = obj(
    {
        "amiFamily": string(enum=AMI_FAMILIES),
        "amiSelectorTerms": _AMI_TERMS,
        "associatePublicIPAddress": boolean(),
        "blockDeviceMappings": arr(
            _BLOCK_DEVICE,
            max_items=50,
            rules=[
                (
                    lambda lst: sum(1 for x in _items(lst) if x.get("rootVolume") is True) <= 1,
                    "must have only one blockDeviceMappings with rootVolume",
                )
            ],
        ),
        "capacityReservationSelectorTerms": _CR_TERMS,
        "connectionTracking": obj(
            {
                "tcpEstablishedTimeout": int32(minimum=60, maximum=432000),
                "udpStreamTimeout": int32(minimum=60, maximum=180),
                "udpTimeout": int32(minimum=30, maximum=60),
            },
            rules=[
                (
                    lambda c: _has(c, "tcpEstablishedTimeout", "udpStreamTimeout", "udpTimeout"),
                    "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set",
                )
            ],
        ),
        "context": string(),
        "cpuOptions": obj({"nestedVirtualization": string(enum=("enabled", "disabled"))}),
        "detailedMonitoring": boolean(),
        "instanceProfile": string(rules=[(lambda v: v != "", "instanceProfile cannot be empty")]),
        "instanceStorePolicy": string(enum=("RAID0",)),
        "ipPrefixCount": int32(minimum=0),
        "kubelet": opaque_obj(checks=[_check_ec2_kubelet]),
        "metadataOptions": obj(
            {
                "httpEndpoint": string(default="enabled", enum=("enabled", "disabled")),
                "httpProtocolIPv6": string(default="disabled", enum=("enabled", "disabled")),
                "httpPutResponseHopLimit": int64(default=1, minimum=1, maximum=64),
                "httpTokens": string(default="required", enum=("required", "optional")),
            },
            default={
                "httpEndpoint": "enabled",
                "httpProtocolIPv6": "disabled",
                "httpPutResponseHopLimit": 1,
                "httpTokens": "required",
            },
        ),
        "networkInterfaces": arr(
            obj(
                {
                    "deviceIndex": int32(minimum=0),
                    "interfaceType": string(enum=("interface", "efa-only")),
                    "networkCardIndex": int32(minimum=0),
                },
                required=("deviceIndex", "interfaceType", "networkCardIndex"),
            ),
            max_items=150,
            rules=_nic_rules(),
        ),
        "placementGroupSelector": obj(
            {"id": string(pattern=r"^pg-[0-9a-z]+$"), "name": string(min_len=1)},
            rules=[
                (lambda p: _has(p, "name", "id"), "expected at least one, got none, ['name', 'id']"),
                (lambda p: not ("name" in p and "id" in p), "'name' and 'id' are mutually exclusive"),
            ],
        ),
        "role": string(rules=[(lambda v: v != "", "role cannot be empty")]),
        "securityGroupSelectorTerms": arr(
            obj({"id": string(pattern=r"sg-[0-9a-z]+"), "name": string(), "tags": _tags_node()}),
            max_items=30,
            rules=[
                (lambda lst: len(lst) != 0, "securityGroupSelectorTerms cannot be empty"),
                (lambda lst: all(_has(x, "tags", "id", "name") for x in _items(lst)), "expected at least one, got none, ['tags', 'id', 'name']"),
                (
                    _not_all(lambda x: "id" in x and _has(x, "tags", "name")),
                    "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
                ),
                (
                    _not_all(lambda x: "name" in x and _has(x, "tags", "id")),
                    "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
                ),
            ],
        ),
        "subnetSelectorTerms": arr(
            obj({"id": string(pattern=r"subnet-[0-9a-z]+"), "tags": _tags_node()}),
            max_items=30,
            rules=[
                (lambda lst: len(lst) != 0, "subnetSelectorTerms cannot be empty"),
                (lambda lst: all(_has(x, "tags", "id") for x in _items(lst)), "expected at least one, got none, ['tags', 'id']"),
                (
                    _not_all(lambda x: "id" in x and "tags" in x),
                    "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
                ),
            ],
        ),
        "tags": string_map(
            rules=[
                (lambda t: all(k != "" for k in t), "empty tag keys aren't supported"),
                (lambda t: all(k != "eks:eks-cluster-name" for k in t), "tag contains a restricted tag matching eks:eks-cluster-name"),
                (
                    lambda t: not any(k.startswith("kubernetes.io/cluster") for k in t),
                    "tag contains a restricted tag matching kubernetes.io/cluster/",
                ),
                (lambda t: "karpenter.sh/nodepool" not in t, "tag contains a restricted tag matching karpenter.sh/nodepool"),
                (lambda t: "karpenter.sh/nodeclaim" not in t, "tag contains a restricted tag matching karpenter.sh/nodeclaim"),
                (
                    lambda t: "karpenter.k8s.aws/ec2nodeclass" not in t,
                    "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass",
                ),
            ]
        ),
        "userData": string(),
    },
    required=("amiSelectorTerms", "securityGroupSelectorTerms", "subnetSelectorTerms"),
    rules=_EC2_SPEC_RULES,
)

EC2_NODE_CLASS = obj(
    {"apiVersion": string(), "kind": string(), "metadata": object_meta(), "spec": EC2_SPEC, "status": opaque_obj()},
    required=("spec",),
    description="EC2NodeClass: the AWS-specific configuration of the nodes of the NodePools that reference it.",
)

# ============================================================================
# KWOKNodeClass
# ============================================================================

KWOK_NODE_CLASS = obj(
    {
        "apiVersion": string(),
        "kind": string(),
        "metadata": object_meta(),
        "spec": obj(
            {
                "nodeRegistrationDelay": string(
                    pattern=DURATION,
                    checks=[check_duration_range],
                    description="How long after launch a kwok node registers.",
                )
            },
            default={},
        ),
        "status": opaque_obj(),
    },
    description="KWOKNodeClass: the configuration of kwok's fake nodes.",
)

# ============================================================================
# Upstream's CEL text for the rules above, by message (see schema.attach_cel)
# ============================================================================

_AKS_CEL = {
    "FIPS is not yet supported for Ubuntu2404": (
        "has(self.fipsMode) && self.fipsMode == 'FIPS' ? (has(self.imageFamily) && self.imageFamily != 'Ubuntu2404') : true"
    ),
    "TrustedLaunch is required for FIPS support with Ubuntu2204": (
        "has(self.fipsMode) && self.fipsMode == 'FIPS' ? (has(self.imageFamily) && (self.imageFamily != 'Ubuntu2204' || "
        "(has(self.security) && has(self.security.trustedLaunch) && ((has(self.security.trustedLaunch.vtpm) && "
        "self.security.trustedLaunch.vtpm) || (has(self.security.trustedLaunch.secureBoot) && "
        "self.security.trustedLaunch.secureBoot))))) : true"
    ),
    "TrustedLaunch with FIPSMode FIPS is only supported for Ubuntu and Ubuntu2204": (
        "has(self.fipsMode) && self.fipsMode == 'FIPS' && has(self.security) && has(self.security.trustedLaunch) && "
        "((has(self.security.trustedLaunch.vtpm) && self.security.trustedLaunch.vtpm) || "
        "(has(self.security.trustedLaunch.secureBoot) && self.security.trustedLaunch.secureBoot)) ? "
        "(!has(self.imageFamily) || self.imageFamily == 'Ubuntu' || self.imageFamily == 'Ubuntu2204') : true"
    ),
    "kubelet.failSwapOn must be set to false when linuxOSConfig.swapFileSize is specified": (
        "!has(self.linuxOSConfig) || !has(self.linuxOSConfig.swapFileSize) || "
        "(has(self.kubelet) && has(self.kubelet.failSwapOn) && self.kubelet.failSwapOn == false)"
    ),
    "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent": (
        "has(self.imageGCHighThresholdPercent) && has(self.imageGCLowThresholdPercent) ? "
        "self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent : true"
    ),
    **{
        f"{a} must be <= {b}": f"has(self.{a}) && has(self.{b}) ? self.{a} <= self.{b} : true"
        for a, b in (
            ("netCoreRmemDefault", "netCoreRmemMax"),
            ("netCoreWmemDefault", "netCoreWmemMax"),
            ("netIPv4NeighDefaultGcThresh1", "netIPv4NeighDefaultGcThresh2"),
            ("netIPv4NeighDefaultGcThresh2", "netIPv4NeighDefaultGcThresh3"),
        )
    },
    "netIPv4IPLocalPortRange first port must be in [1024, 60999]": (
        "!has(self.netIPv4IPLocalPortRange) || (int(self.netIPv4IPLocalPortRange.split(' ')[0]) >= 1024 && "
        "int(self.netIPv4IPLocalPortRange.split(' ')[0]) <= 60999)"
    ),
    "netIPv4IPLocalPortRange last port must be in [32768, 65535]": (
        "!has(self.netIPv4IPLocalPortRange) || (int(self.netIPv4IPLocalPortRange.split(' ')[1]) >= 32768 && "
        "int(self.netIPv4IPLocalPortRange.split(' ')[1]) <= 65535)"
    ),
    "netIPv4IPLocalPortRange first port must be <= last port": (
        "!has(self.netIPv4IPLocalPortRange) || "
        "int(self.netIPv4IPLocalPortRange.split(' ')[0]) <= int(self.netIPv4IPLocalPortRange.split(' ')[1])"
    ),
    "must contain required zones '.' and 'cluster.local'": "['.', 'cluster.local'].all(z, self.exists(x, x.zone == z))",
    "'cluster.local' cannot be forwarded to VnetDNS": (
        "!(self.zone.endsWith('cluster.local') && self.forwardDestination == 'VnetDNS')"
    ),
    "serveStale Verify cannot be used with protocol ForceTCP": "!(self.serveStale == 'Verify' && self.protocol == 'ForceTCP')",
    "root zone '.' cannot be forwarded to ClusterCoreDNS from vnetDNSOverrides": (
        "!self.exists(x, x.zone == '.' && x.forwardDestination == 'ClusterCoreDNS')"
    ),
    "external domains cannot be forwarded to ClusterCoreDNS from vnetDNSOverrides": (
        "!self.exists(x, x.zone != '.' && !x.zone.endsWith('cluster.local') && x.forwardDestination == 'ClusterCoreDNS')"
    ),
    "tags keys must be less than 512 characters": "self.all(k, size(k) <= 512)",
    "tags keys must not contain '<', '>', '%', '&', or '?'": "self.all(k, !k.matches('[<>%&?]'))",
    "tags keys must not contain '\\'": "self.all(k, !k.contains('\\\\'))",
    "tags values must be less than 256 characters": "self.all(k, size(self[k]) <= 256)",
}


def _alias_cel(alias: str, family: str) -> str:
    return (
        f"!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == '{alias}') ? "
        f"(self.amiFamily == 'Custom' || self.amiFamily == '{family}') : true)"
    )


_EC2_CEL = {
    "must specify exactly one of ['role', 'instanceProfile']": (
        "(has(self.role) && !has(self.instanceProfile)) || (!has(self.role) && has(self.instanceProfile))"
    ),
    **{msg: _alias_cel(alias, family) for alias, family, msg in (
        (a, f, _alias_rule(a, f)[1])
        for a, f in (
            ("al2", "AL2"),
            ("al2023", "AL2023"),
            ("bottlerocket", "Bottlerocket"),
            ("windows2019", "Windows2019"),
            ("windows2022", "Windows2022"),
            ("windows2025", "Windows2025"),
        )
    )},
    "must specify amiFamily if amiSelectorTerms does not contain an alias": (
        "self.amiSelectorTerms.exists(x, has(x.alias)) ? true : has(self.amiFamily)"
    ),
    "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']": (
        "self.all(x, has(x.tags) || has(x.id) || has(x.name) || has(x.alias) || has(x.ssmParameter))"
    ),
    "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms": (
        "!self.exists(x, has(x.id) && (has(x.alias) || has(x.tags) || has(x.name) || has(x.owner)))"
    ),
    "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms": (
        "!self.exists(x, has(x.alias) && (has(x.id) || has(x.tags) || has(x.name) || has(x.owner)))"
    ),
    "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms": (
        "!(self.exists(x, has(x.alias)) && self.size() != 1)"
    ),
    "'alias' is improperly formatted, must match the format 'family@version'": "self.matches('^[a-zA-Z0-9]+@.+$')",
    "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', "
    "'windows2022', 'windows2025'": (
        "self.split('@')[0] in ['al2','al2023','bottlerocket','windows2019','windows2022','windows2025']"
    ),
    "windows families may only specify version 'latest'": (
        "self.split('@')[0] in ['windows2019','windows2022','windows2025'] ? self.split('@')[1] == 'latest' : true"
    ),
    "empty tag keys or values aren't supported": "self.all(k, k != '' && self[k] != '')",
    "must have only one blockDeviceMappings with rootVolume": (
        "self.filter(x, has(x.rootVolume)?x.rootVolume==true:false).size() <= 1"
    ),
    "snapshotID or volumeSize must be defined": "has(self.snapshotID) || has(self.volumeSize)",
    "snapshotID must be set when volumeInitializationRate is set": (
        "!has(self.volumeInitializationRate) || (has(self.snapshotID) && self.snapshotID != '')"
    ),
    "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']": (
        "self.all(x, has(x.tags) || has(x.id) || has(x.instanceMatchCriteria))"
    ),
    "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term": (
        "!self.all(x, has(x.id) && (has(x.tags) || has(x.ownerID) || has(x.instanceMatchCriteria)))"
    ),
    "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set": (
        "has(self.tcpEstablishedTimeout) || has(self.udpStreamTimeout) || has(self.udpTimeout)"
    ),
    "instanceProfile cannot be empty": "self != ''",
    "role cannot be empty": "self != ''",
    "networkInterfaces must include a primary interface with interfaceType='interface'": (
        "self.size() == 0 || self.exists(x, x.deviceIndex == 0 && x.networkCardIndex == 0 && x.interfaceType == 'interface')"
    ),
    "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one "
    "efa device per network card": (
        "self.all(x, self.filter(y, x.networkCardIndex == y.networkCardIndex && x.deviceIndex == y.deviceIndex).size() == 1 "
        "&& (x.interfaceType != 'efa-only' || "
        "self.filter(y, x.networkCardIndex == y.networkCardIndex && y.interfaceType == 'efa-only').size() == 1))"
    ),
    "expected at least one, got none, ['name', 'id']": "has(self.name) || has(self.id)",
    "'name' and 'id' are mutually exclusive": "!(has(self.name) && has(self.id))",
    "securityGroupSelectorTerms cannot be empty": "self.size() != 0",
    "expected at least one, got none, ['tags', 'id', 'name']": "self.all(x, has(x.tags) || has(x.id) || has(x.name))",
    "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term": (
        "!self.all(x, has(x.id) && (has(x.tags) || has(x.name)))"
    ),
    "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term": (
        "!self.all(x, has(x.name) && (has(x.tags) || has(x.id)))"
    ),
    "subnetSelectorTerms cannot be empty": "self.size() != 0",
    "expected at least one, got none, ['tags', 'id']": "self.all(x, has(x.tags) || has(x.id))",
    "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term": (
        "!self.all(x, has(x.id) && has(x.tags))"
    ),
    "empty tag keys aren't supported": "self.all(k, k != '')",
    "tag contains a restricted tag matching eks:eks-cluster-name": "self.all(k, k !='eks:eks-cluster-name')",
    "tag contains a restricted tag matching kubernetes.io/cluster/": "self.all(k, !k.startsWith('kubernetes.io/cluster') )",
    **{
        f"tag contains a restricted tag matching {t}": f"self.all(k, k != '{t}')"
        for t in ("karpenter.sh/nodepool", "karpenter.sh/nodeclaim", "karpenter.k8s.aws/ec2nodeclass")
    },
}

attach_cel(AKS_NODE_CLASS, _AKS_CEL)
attach_cel(EC2_NODE_CLASS, _EC2_CEL)


def _nodeclass_status() -> Node:
    from .nodepool import conditions

    return obj(
        {"conditions": conditions("The NodeClass's conditions (Ready, ...).")},
        preserve=True,
        description="The observed state of the NodeClass.",
    )


# As the CRDs publish status (see nodepool.NODEPOOL_STATUS). Upstream's KWOKNodeClass
# defaults its status to Ready: kwok has nothing to resolve.
AKS_NODE_CLASS_STATUS = _nodeclass_status()
EC2_NODE_CLASS_STATUS = _nodeclass_status()
KWOK_NODE_CLASS_STATUS = _nodeclass_status()
KWOK_NODE_CLASS_STATUS.default = {
    "conditions": [
        {
            "lastTransitionTime": "2024-01-01T01:01:01Z",
            "message": "",
            "reason": "Ready",
            "status": "True",
            "type": "Ready",
        }
    ]
}

__all__ = [
    "AKS_NODE_CLASS",
    "EC2_NODE_CLASS",
    "KWOK_NODE_CLASS",
    "AKS_NODE_CLASS_STATUS",
    "EC2_NODE_CLASS_STATUS",
    "KWOK_NODE_CLASS_STATUS",
]
