"""``karpy controller``: the click command (registered by :mod:`karpy.cli`)."""

from __future__ import annotations

import signal
import sys
import threading

import click

from ..cloudprovider.arm.settings import OPTIONS as AZURE_OPTIONS
from .settings import SettingsError, resolve


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def _azure_options(f):
    """The settings of --cloud-provider azure (karpy.cloudprovider.arm.settings.OPTIONS) as flags."""
    for key, (_, help_text) in reversed(AZURE_OPTIONS.items()):
        f = click.option("--" + key.replace("_", "-"), key, default=None, help=help_text)(f)
    return f


@click.command("controller", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--kubeconfig", default=None, help="Path to a kubeconfig ($KUBECONFIG, ~/.kube/config; in a pod: the service account).")
@click.option("--context", default=None, help="The kubeconfig context to use.")
@click.option("--namespace", default=None, help="Namespace of the leader election Lease [default: kube-system, or the pod's].")
@click.option("--cloud-provider", "cloud_provider", default=None, help="kwok, simulated, aws or azure [CLOUD_PROVIDER; default: kwok].")
@click.option("--metrics-port", "metrics_port", default=None, help="Port of /metrics [METRICS_PORT; default: 8080].")
@click.option("--health-probe-port", "health_probe_port", default=None,
              help="Port of /healthz and /readyz [HEALTH_PROBE_PORT; default: 8081].")
@click.option("--leader-elect", "leader_elect", default=None, is_flag=False, flag_value="true",
              help="Elect a leader on a Lease before reconciling: true|false [LEADER_ELECT, or DISABLE_LEADER_ELECTION=true; default: true].")
@click.option("--feature-gates", "feature_gates", default=None, help="K=true|false,... [FEATURE_GATES].")
@click.option("--batch-idle-duration", "batch_idle_duration", default=None,
              help="Provisioning batch idle time [BATCH_IDLE_DURATION; default: 1s].")
@click.option("--batch-max-duration", "batch_max_duration", default=None,
              help="Longest provisioning batch [BATCH_MAX_DURATION; default: 10s].")
@click.option("--log-level", "log_level", default=None, help="debug, info, warn or error [LOG_LEVEL; default: info].")
@click.option("--cluster-name", "cluster_name", default=None, help="Cluster name [CLUSTER_NAME].")
@click.option("--min-values-policy", "min_values_policy", default=None, help="Strict or BestEffort [MIN_VALUES_POLICY].")
@click.option("--bind-address", "bind_address", default=None,
              help="Address of the metrics and health endpoints [BIND_ADDRESS; default: 0.0.0.0].")
@click.option("--reservations", "reservations", default=None, metavar="FILE",
              help="kwok/simulated: the cloud's capacity reservations, a YAML list of {id, instanceType, zone, count, "
                   "price?} [KARPY_RESERVATIONS_FILE].")
@click.option("--cluster-endpoint", "cluster_endpoint", default=None,
              help="aws: the API server URL nodes join [CLUSTER_ENDPOINT; default: from eks:DescribeCluster].")
@click.option("--cluster-ca-bundle", "cluster_ca_bundle", default=None,
              help="aws: the cluster CA, base64 [CLUSTER_CA_BUNDLE; default: the kubeconfig's, else DescribeCluster's].")
@click.option("--interruption-queue", "interruption_queue", default=None,
              help="aws: SQS queue name of interruption events [INTERRUPTION_QUEUE; default: none].")
@click.option("--isolated-vpc", "isolated_vpc", default=None, is_flag=False, flag_value="true",
              help="aws: no Pricing API, static prices only [ISOLATED_VPC; default: false].")
@click.option("--vm-memory-overhead-percent", "vm_memory_overhead_percent", default=None,
              help="aws: memory the hypervisor takes [VM_MEMORY_OVERHEAD_PERCENT; default: 0.075].")
@click.option("--reserved-enis", "reserved_enis", default=None,
              help="aws: ENIs not used for pods [RESERVED_ENIS; default: 0].")
@click.option("--aws-feature-gates", "aws_feature_gates", default=None,
              help="aws: NodeClassCEL=true|false [AWS_FEATURE_GATES; default: NodeClassCEL=false].")
@_azure_options
def controller(**flags: object) -> None:
    """Run Karpenter's controllers against a Kubernetes API server."""
    try:
        settings = resolve(flags)
    except SettingsError as e:
        _fail(str(e))
        return
    from ..kube.client import ConfigError, KubeClient, load_config

    try:
        config, _ = load_config(settings.kubeconfig, settings.context)
        api = KubeClient(config)
    except ConfigError as e:
        _fail(f"--kubeconfig: {e}")
        return
    from .process import ControllerProcess

    from ..cloudprovider.arm.clients import ProviderConfigError as AzureConfigError
    from ..cloudprovider.ec2.clients import ProviderConfigError

    try:
        proc = ControllerProcess(settings, api)
        proc.start()
    except (ProviderConfigError, AzureConfigError) as e:  # aws/azure without a region, credentials or access
        api.close()
        _fail(str(e))
        return
    except OSError as e:  # a port in use
        api.close()
        _fail(str(e))
        return

    def on_signal(signum: int, frame: object) -> None:
        proc.request_stop()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    code = proc.run()
    sys.exit(code)
