"""Settings of ``karpy controller --cloud-provider aws``, with upstream's names.

Each is a flag and an environment variable (the flag wins): ``CLUSTER_NAME`` (required), ``CLUSTER_ENDPOINT``
(else ``eks:DescribeCluster``), ``CLUSTER_CA_BUNDLE`` (else the kubeconfig's CA, else DescribeCluster's),
``INTERRUPTION_QUEUE`` (an SQS queue name; empty: no interruption handling), ``ISOLATED_VPC`` (static prices,
no Pricing API), ``VM_MEMORY_OVERHEAD_PERCENT`` (0.075), ``RESERVED_ENIS`` (0) and ``AWS_FEATURE_GATES``
(``NodeClassCEL=false``: CEL expressions in EC2NodeClass kubelet fields; unknown gates ignored, as upstream;
``--feature-gates NodeClassCEL=true`` turns it on too). The region and the
credentials come from boto3's chain (``AWS_REGION``, ``AWS_DEFAULT_REGION``, the profile, IRSA's web identity,
EKS Pod Identity, the instance metadata), and botocore honours ``AWS_ENDPOINT_URL``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping


@dataclass
class AWSSettings:
    cluster_name: str
    cluster_endpoint: str = ""
    cluster_ca_bundle: str = ""
    interruption_queue: str = ""
    isolated_vpc: bool = False
    vm_memory_overhead_percent: float = 0.075
    reserved_enis: int = 0
    node_class_cel: bool = False  # AWS_FEATURE_GATES NodeClassCEL


def resolve_aws(cluster_name: str, picked: Mapping[str, tuple[str | None, str]],
                error: Callable[[str], Exception] = ValueError) -> AWSSettings:
    """``picked``: setting -> (value or None, the flag or variable it came from)."""
    if not cluster_name:
        raise error("--cluster-name (CLUSTER_NAME) is required with --cloud-provider aws")
    s = AWSSettings(cluster_name)
    v, name = picked.get("cluster_endpoint", (None, ""))
    if v is not None:
        if not v.startswith(("https://", "http://")):
            raise error(f'{name}: invalid value "{v}": must be a URL (https://...)')
        s.cluster_endpoint = v
    v, _ = picked.get("cluster_ca_bundle", (None, ""))
    if v is not None:
        s.cluster_ca_bundle = v
    v, _ = picked.get("interruption_queue", (None, ""))
    if v is not None:
        s.interruption_queue = v
    v, name = picked.get("isolated_vpc", (None, ""))
    if v is not None:
        low = v.strip().lower()
        if low not in ("true", "false", "1", "0"):
            raise error(f'{name}: invalid value "{v}": must be true or false')
        s.isolated_vpc = low in ("true", "1")
    v, name = picked.get("vm_memory_overhead_percent", (None, ""))
    if v is not None:
        try:
            f = float(v)
        except ValueError:
            f = -1.0
        if not 0 <= f < 1:
            raise error(f'{name}: invalid value "{v}": must be a fraction between 0 and 1 (0.075 is 7.5 %)')
        s.vm_memory_overhead_percent = f
    v, name = picked.get("reserved_enis", (None, ""))
    if v is not None:
        try:
            n = int(v)
        except ValueError:
            n = -1
        if n < 0:
            raise error(f'{name}: invalid value "{v}": must be a whole number of ENIs, 0 or more')
        s.reserved_enis = n
    v, name = picked.get("aws_feature_gates", (None, ""))
    if v is not None:
        for part in v.split(","):
            key, sep, value = part.strip().partition("=")
            if not part.strip():
                continue
            low = value.strip().lower()
            if not sep or low not in ("true", "false"):
                raise error(f'{name}: invalid value "{part.strip()}": expected NAME=true|false')
            if key.strip() == "NodeClassCEL":  # the only AWS gate; others are ignored, as upstream
                s.node_class_cel = low == "true"
        if s.node_class_cel:
            from ..kubelet_cel import missing

            if missing():
                raise error(f"{name}: {missing()}")
    return s
