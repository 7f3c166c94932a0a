"""``karpy controller`` settings: flags, then upstream's environment variables, then defaults.

A flag wins over the environment variable of the same meaning. Every problem
is a :class:`SettingsError` naming the flag (or variable) and the value; the
command turns it into exit status 2 with that message.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..cloudprovider.arm.settings import ENV as AZURE_ENV
from ..cloudprovider import kubelet_cel
from ..controllers.env import DEFAULT_FEATURE_GATES
from ..disruption import highs
from ..resources import parse_duration
from ..runtime.log import LEVELS

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
CLOUD_PROVIDERS = ("kwok", "simulated", "aws", "azure")

# flag name -> upstream's environment variable
ENV = {
    "kubeconfig": "KUBECONFIG",
    "namespace": "SYSTEM_NAMESPACE",
    "cloud_provider": "CLOUD_PROVIDER",
    "metrics_port": "METRICS_PORT",
    "health_probe_port": "HEALTH_PROBE_PORT",
    "leader_elect": "LEADER_ELECT",
    "feature_gates": "FEATURE_GATES",
    "batch_idle_duration": "BATCH_IDLE_DURATION",
    "batch_max_duration": "BATCH_MAX_DURATION",
    "log_level": "LOG_LEVEL",
    "cluster_name": "CLUSTER_NAME",
    "min_values_policy": "MIN_VALUES_POLICY",
    "bind_address": "BIND_ADDRESS",  # karpy's: the address of both endpoints (contract default 0.0.0.0)
    # karpy's: capacity reservations of the kwok and simulated clouds (upstream's kwok build reads them from its
    # instance-types file); the Scenario's `reservations` form, a YAML list
    "reservations": "KARPY_RESERVATIONS_FILE",
    # --cloud-provider aws (upstream's AWS settings; see karpy.cloudprovider.ec2.settings)
    "cluster_endpoint": "CLUSTER_ENDPOINT",
    "cluster_ca_bundle": "CLUSTER_CA_BUNDLE",
    "interruption_queue": "INTERRUPTION_QUEUE",
    "isolated_vpc": "ISOLATED_VPC",
    "vm_memory_overhead_percent": "VM_MEMORY_OVERHEAD_PERCENT",
    "reserved_enis": "RESERVED_ENIS",
    "aws_feature_gates": "AWS_FEATURE_GATES",
    # --cloud-provider azure (upstream's AKS settings; see karpy.cloudprovider.arm.settings)
    **AZURE_ENV,
}

FLAG = {k: "--" + k.replace("_", "-") for k in ENV}


class SettingsError(ValueError):
    pass


@dataclass
class ControllerSettings:
    kubeconfig: str | None = None
    context: str | None = None
    namespace: str = "kube-system"
    cloud_provider: str = "kwok"
    metrics_port: int = 8080
    health_probe_port: int = 8081
    leader_elect: bool = True
    feature_gates: dict[str, bool] = field(default_factory=lambda: dict(DEFAULT_FEATURE_GATES))
    batch_idle_duration: float = 1.0
    batch_max_duration: float = 10.0
    log_level: str = "info"
    cluster_name: str = ""
    min_values_policy: str = "Strict"
    bind_address: str = "0.0.0.0"
    reservations: list | None = None  # capacity reservations for the kwok/simulated clouds (--reservations FILE)
    aws: Any = None  # karpy.cloudprovider.ec2.settings.AWSSettings with --cloud-provider aws
    azure: Any = None  # karpy.cloudprovider.arm.settings.AzureSettings with --cloud-provider azure
    # leader election timings (controller-runtime's defaults)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


def _bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "1", "t", "yes"):
        return True
    if v in ("false", "0", "f", "no"):
        return False
    raise SettingsError(f'{name}: invalid value "{value}": must be true or false')


def _port(name: str, value: str) -> int:
    try:
        p = int(value)
    except ValueError:
        raise SettingsError(f'{name}: invalid value "{value}": must be a port number') from None
    if not 0 <= p <= 65535:
        raise SettingsError(f'{name}: invalid value "{value}": must be between 0 and 65535')
    return p


def _duration(name: str, value: str) -> float:
    try:
        d = parse_duration(value)
    except ValueError as e:
        raise SettingsError(f"{name}: {e}") from None
    if d <= 0:
        raise SettingsError(f'{name}: invalid value "{value}": must be a positive duration')
    return d


def _reservations_file(name: str, path: str) -> list:
    """Capacity reservations from a YAML file: a list of {id, instanceType, zone, count, price?} (or a mapping
    with that list under ``reservations``), checked as a Scenario's ``reservations`` are."""
    from ..api.scenario import validate_reservations
    from ..kube.yamlsafe import YAMLLimitError, load

    try:
        with open(path, "rb") as f:
            data = load(f.read(1 << 20))
    except OSError as e:
        raise SettingsError(f"{name}: {path}: {e.strerror or e}") from None
    except (YAMLLimitError, ValueError) as e:
        raise SettingsError(f"{name}: {path}: invalid YAML: {e}") from None
    except Exception as e:  # a YAML syntax error
        raise SettingsError(f"{name}: {path}: invalid YAML: {str(e).splitlines()[0] if str(e) else e}") from None
    if isinstance(data, dict) and set(data) == {"reservations"}:
        data = data["reservations"]
    if data is None:
        data = []
    errors = validate_reservations(data)
    if errors:
        raise SettingsError(f"{name}: {path}: " + "; ".join(f"{f}: {m}" for f, m in errors))
    return list(data)


def parse_feature_gates(name: str, value: str) -> dict[str, bool]:
    gates = dict(DEFAULT_FEATURE_GATES)
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        k, sep, v = part.partition("=")
        k = k.strip()
        if not sep:
            raise SettingsError(f'{name}: invalid value "{part}": expected KEY=true|false')
        if k not in DEFAULT_FEATURE_GATES:
            known = ", ".join(sorted(DEFAULT_FEATURE_GATES))
            raise SettingsError(f'{name}: unrecognized feature gate "{k}" (known: {known})')
        gates[k] = _bool(f"{name} {k}", v)
    if gates.get(highs.GATE) and highs.missing():
        raise SettingsError(f"{name}: {highs.missing()}")
    if gates.get(kubelet_cel.GATE) and kubelet_cel.missing():
        raise SettingsError(f"{name}: {kubelet_cel.missing()}")
    return gates


def resolve(flags: Mapping[str, object], environ: Mapping[str, str] | None = None,
            service_account_namespace: str = SERVICE_ACCOUNT_NAMESPACE) -> ControllerSettings:
    """The settings from ``flags`` (None = not given) over ``environ`` over the defaults."""
    env = os.environ if environ is None else environ
    s = ControllerSettings()

    def pick(key: str) -> tuple[str | None, str]:
        v = flags.get(key)
        if v is not None:
            return str(v), FLAG[key]
        var = ENV.get(key)
        if var and env.get(var) not in (None, ""):
            return str(env[var]), var
        if key == "network_plugin_mode" and var in env:  # as upstream: set but empty is Azure CNI on the node subnet
            return "", var
        return None, FLAG.get(key, key)

    v, _ = pick("kubeconfig")
    s.kubeconfig = v.split(os.pathsep)[0] if v else None
    if flags.get("context"):
        s.context = str(flags["context"])
    v, name = pick("namespace")
    if v is not None:
        s.namespace = v
    else:
        try:
            ns = Path(service_account_namespace).read_text().strip()
            if ns:
                s.namespace = ns
        except OSError:
            pass
    v, name = pick("cloud_provider")
    if v is not None:
        if v not in CLOUD_PROVIDERS:
            raise SettingsError(f'{name}: unsupported value "{v}": must be one of {", ".join(CLOUD_PROVIDERS)}')
        s.cloud_provider = v
    for key in ("metrics_port", "health_probe_port"):
        v, name = pick(key)
        if v is not None:
            setattr(s, key, _port(name, v))
    v, name = pick("leader_elect")
    if v is not None:
        s.leader_elect = _bool(name, v)
    elif env.get("DISABLE_LEADER_ELECTION"):  # upstream's variable now; LEADER_ELECT is its older one
        s.leader_elect = not _bool("DISABLE_LEADER_ELECTION", env["DISABLE_LEADER_ELECTION"])
    v, name = pick("feature_gates")
    if v is not None:
        s.feature_gates = parse_feature_gates(name, v)
    for key in ("batch_idle_duration", "batch_max_duration"):
        v, name = pick(key)
        if v is not None:
            setattr(s, key, _duration(name, v))
    v, name = pick("log_level")
    if v is not None:
        if v.lower() not in LEVELS:
            raise SettingsError(f'{name}: invalid value "{v}": must be one of debug, info, warn, error')
        s.log_level = v.lower()
    v, name = pick("bind_address")
    if v is not None:
        if not v.strip():
            raise SettingsError(f'{name}: invalid value "{v}": must be an address')
        s.bind_address = v.strip()
    v, name = pick("cluster_name")
    if v is not None:
        s.cluster_name = v
    v, name = pick("reservations")
    if v is not None:
        if s.cloud_provider not in ("kwok", "simulated"):
            raise SettingsError(f"{name}: only with --cloud-provider kwok or simulated (a cloud's own reservations "
                                "are selected by its NodeClass)")
        s.reservations = _reservations_file(name, v)
    v, name = pick("min_values_policy")
    if v is not None:
        if v not in ("Strict", "BestEffort"):
            raise SettingsError(f'{name}: invalid value "{v}": must be Strict or BestEffort')
        s.min_values_policy = v
    if s.cloud_provider == "aws":
        from ..cloudprovider.ec2.settings import resolve_aws

        s.aws = resolve_aws(s.cluster_name, {k: pick(k) for k in (
            "cluster_endpoint", "cluster_ca_bundle", "interruption_queue", "isolated_vpc",
            "vm_memory_overhead_percent", "reserved_enis", "aws_feature_gates")}, SettingsError)
    if s.cloud_provider == "azure":
        from ..cloudprovider.arm.settings import resolve_azure

        s.azure = resolve_azure(s.cluster_name, {k: pick(k) for k in (*AZURE_ENV, "cluster_endpoint")}, env,
                                SettingsError, pick("vm_memory_overhead_percent"))
    if s.metrics_port and s.metrics_port == s.health_probe_port:
        raise SettingsError(f"--metrics-port and --health-probe-port must differ (both {s.metrics_port})")
    return s
