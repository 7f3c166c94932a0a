"""charts/karpy: `helm lint` passes; `helm template` renders what an install needs; upstream's documented values
(its AWS getting-started commands, its Azure values template) render to a controller whose settings karpy reads
back as set; every settings key reaches karpy; values karpy cannot honour are refused or named."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from karpy.cloudprovider.arm.settings import ENV as AZURE_ENV
from karpy.cloudprovider.arm.settings import FALLBACK_ENV as AZURE_FALLBACK_ENV
from karpy.controller.settings import ENV, ControllerSettings, resolve
from karpy.kube.client import KubeClient
from karpy.kube.errors import NotFound

from . import pod_environment
from .helm import CHART, ROOT, helm, template, template_error
from .test_manifests import sandbox  # noqa: F401 - the fixture: karpy sandbox --no-karpenter

NAMESPACE = "karpenter"
SELECTOR = {"app.kubernetes.io/name": "karpenter", "app.kubernetes.io/instance": "karpenter"}

# Upstream's getting-started (website/content/en/docs/getting-started/getting-started-with-karpenter/scripts/
# step08-apply-helm-chart.sh and migrating-from-cas/scripts/step08-generate-chart.sh), with its variables filled in,
# plus the one line karpy needs: the provider.
CLUSTER = "alice-karpenter-demo"
ROLE = f"arn:aws:iam::111122223333:role/KarpenterControllerRole-{CLUSTER}"
UPSTREAM_AWS = [
    "--set", f"settings.clusterName={CLUSTER}",
    "--set", f"settings.interruptionQueue={CLUSTER}",
    "--set", "settings.enableZonalShift=true",
    "--set", f"serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn={ROLE}",
    "--set", "controller.resources.requests.cpu=1",
    "--set", "controller.resources.requests.memory=1Gi",
    "--set", "controller.resources.limits.cpu=1",
    "--set", "controller.resources.limits.memory=1Gi",
]
AWS = ["--set", "cloudProvider=aws"]

# What upstream's hack/deploy/configure-values.sh fills into its Azure values template.
SUBSCRIPTION = "12345678-1234-1234-1234-123456789012"
SUBNET = (f"/subscriptions/{SUBSCRIPTION}/resourceGroups/MC_rg_demo_eastus/providers/Microsoft.Network/"
          "virtualNetworks/aks-vnet-1/subnets/aks-subnet")
IDENTITY = (f"/subscriptions/{SUBSCRIPTION}/resourceGroups/MC_rg_demo_eastus/providers/"
            "Microsoft.ManagedIdentity/userAssignedIdentities/demo-agentpool")
AZURE_VARIABLES = {
    "CLUSTER_NAME": "demo", "CLUSTER_ENDPOINT": "https://demo-dns-abc123.hcp.eastus.azmk8s.io:443",
    "BOOTSTRAP_TOKEN": "abcdef.0123456789abcdef", "SSH_PUBLIC_KEY": "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 azureuser",
    "NETWORK_PLUGIN": "azure", "NETWORK_PLUGIN_MODE": "overlay", "NETWORK_POLICY": "cilium",
    "NETWORK_DATAPLANE": "cilium", "VNET_SUBNET_ID": SUBNET, "VNET_GUID": "a0b1c2d3-0000-1111-2222-333344445555",
    "NODE_IDENTITIES": IDENTITY, "AZURE_SUBSCRIPTION_ID": SUBSCRIPTION, "AZURE_LOCATION": "eastus",
    "KUBELET_IDENTITY_CLIENT_ID": "99999999-8888-7777-6666-555555555555", "AZURE_RESOURCE_GROUP_MC": "MC_rg_demo_eastus",
    "USE_SIG": "false", "AZURE_SIG_SUBSCRIPTION_ID": "", "AKS_MACHINES_POOL_NAME": "testmpool",
    "AZURE_RESOURCE_GROUP": "rg", "KARPENTER_SERVICE_ACCOUNT_NAME": "karpenter-sa",
    "KARPENTER_USER_ASSIGNED_CLIENT_ID": "44444444-3333-2222-1111-000000000000", "LOG_LEVEL": "debug",
}
# Variables of that template that karpy does not read (see the README's "Install with Helm").
AZURE_IGNORED = {"NETWORK_DATAPLANE", "VNET_GUID", "ENABLE_AZURE_SDK_LOGGING", "USE_SIG", "SIG_ACCESS_TOKEN_SERVER_URL",
                 "SIG_ACCESS_TOKEN_SCOPE", "SIG_SUBSCRIPTION_ID"}


def azure_values(tmp_path: Path) -> Path:
    text = (Path(__file__).parent / "data" / "azure-karpenter-values-template.yaml").read_text()

    def fill(m: re.Match) -> str:
        name, _, default = m.group(1).partition(":-")
        return AZURE_VARIABLES.get(name, default)

    out = tmp_path / "karpenter-values.yaml"
    out.write_text(re.sub(r"\$\{([^}]+)\}", fill, text))
    return out


def kinds(docs: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d)
    return out


def deployment(docs: list[dict]) -> dict:
    (d,) = kinds(docs)["Deployment"]
    return d


def container(docs: list[dict]) -> dict:
    (c,) = deployment(docs)["spec"]["template"]["spec"]["containers"]
    return c


def environment(docs: list[dict], namespace: str = NAMESPACE) -> dict[str, str]:
    return pod_environment(container(docs), namespace)


def settings_of(docs: list[dict], namespace: str = NAMESPACE) -> ControllerSettings:
    """What `karpy controller` resolves in the rendered pod: its args (none but the command) over its env."""
    assert container(docs)["args"] == ["controller"]
    return resolve({}, environment(docs, namespace), service_account_namespace="/nonexistent")


def render(*values: str) -> list[dict]:
    return template(*values, namespace=NAMESPACE)


# --- lint and the shape of an install -------------------------------------------------------------------------


@pytest.mark.parametrize("values", [[], UPSTREAM_AWS + AWS], ids=["defaults", "upstream-aws"])
def test_helm_lint_passes(values):
    p = helm("lint", "--strict", str(CHART), *values)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in p.stdout


def test_the_objects_an_install_creates():
    docs = render()
    k = kinds(docs)
    assert {n: len(v) for n, v in k.items()} == {
        "ServiceAccount": 1, "ClusterRole": 2, "ClusterRoleBinding": 2, "Role": 1, "RoleBinding": 1,
        "Service": 1, "Deployment": 1, "PodDisruptionBudget": 1}
    for d in docs:
        if d["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert d["metadata"]["namespace"] == NAMESPACE, d["kind"]
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "karpy"
    # upstream's names, so an IAM role's trust of system:serviceaccount:NS:karpenter still holds
    assert {d["metadata"]["name"] for d in docs} == {"karpenter", "karpenter-core"}


def test_crds_are_karpys_generated_ones():
    with_crds = render("--include-crds")
    crds = sorted(d["metadata"]["name"] for d in with_crds if d["kind"] == "CustomResourceDefinition")
    assert {"nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "ec2nodeclasses.karpenter.k8s.aws",
            "aksnodeclasses.karpenter.azure.com", "kwoknodeclasses.karpenter.kwok.sh"} <= set(crds)
    chart = {p.name: p.read_text() for p in (CHART / "crds").glob("*.yaml")}
    deploy = {p.name: p.read_text() for p in (ROOT / "deploy" / "crds").glob("*.yaml")}
    assert chart == deploy, "charts/karpy/crds differs from deploy/crds: run python scripts/gen_crds.py"


def test_deployment_is_highly_available_and_locked_down():
    docs = render()
    dep = deployment(docs)
    spec = dep["spec"]
    assert spec["replicas"] == 2 and spec["selector"]["matchLabels"] == SELECTOR
    pod = spec["template"]["spec"]
    assert SELECTOR.items() <= spec["template"]["metadata"]["labels"].items()
    assert pod["serviceAccountName"] == "karpenter"
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = container(docs)
    sc = c["securityContext"]
    assert (sc["runAsNonRoot"], sc["readOnlyRootFilesystem"], sc["allowPrivilegeEscalation"], sc["privileged"]) == \
        (True, True, False, False)
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"http-metrics": 8080, "http": 8081}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    # one controller per node, spread over zones, never on a node a NodePool manages
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term == {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": SELECTOR}}
    (sel,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert sel["matchExpressions"] == [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]
    (tsc,) = pod["topologySpreadConstraints"]
    assert tsc["topologyKey"] == "topology.kubernetes.io/zone" and tsc["labelSelector"]["matchLabels"] == SELECTOR
    # and the pod runs as the image's user
    user = next(line.split()[1] for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("USER "))
    assert user == f"{sc['runAsUser']}:{sc['runAsGroup']}"
    s = settings_of(docs)
    assert (s.namespace, s.leader_elect, s.cloud_provider) == (NAMESPACE, True, "kwok")


def test_service_and_pdb_select_the_controller():
    k = kinds(render("--set", "podDisruptionBudget.maxUnavailable=0", "--set", "controller.metrics.port=9090"))
    (svc,) = k["Service"]
    assert svc["spec"]["selector"] == SELECTOR
    assert svc["spec"]["ports"] == [{"name": "http-metrics", "port": 9090, "targetPort": "http-metrics",
                                     "protocol": "TCP"}]
    (pdb,) = k["PodDisruptionBudget"]
    assert pdb["spec"] == {"maxUnavailable": 0, "selector": {"matchLabels": SELECTOR}}


def test_user_affinity_and_spread_get_the_controllers_selector():
    docs = render(
        "--set-json", 'affinity={"podAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":1,'
                      '"podAffinityTerm":{"topologyKey":"kubernetes.io/hostname"}}]}}',
        "--set-json", 'topologySpreadConstraints=[{"maxSkew":2,"topologyKey":"kubernetes.io/hostname",'
                      '"whenUnsatisfiable":"ScheduleAnyway","labelSelector":{"matchLabels":{"app":"x"}}}]')
    pod = deployment(docs)["spec"]["template"]["spec"]
    (w,) = pod["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert w["podAffinityTerm"]["labelSelector"] == {"matchLabels": SELECTOR}
    (tsc,) = pod["topologySpreadConstraints"]
    assert tsc["labelSelector"] == {"matchLabels": {"app": "x"}}  # a selector of the user's own is kept


def test_rbac_is_deploys_least_privilege_rules():
    """The chart grants exactly deploy/rbac.yaml's rules, which tests/deploy/test_rbac.py derives from the code."""
    deploy = [d for d in yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()) if d]

    def rules(docs: list[dict]) -> dict[tuple[str, str], list]:
        return {(d["kind"], d["metadata"]["name"]): d["rules"] for d in docs if d["kind"] in ("ClusterRole", "Role")}

    copy = (CHART / "files" / "rbac.yaml").read_text()
    assert copy == (ROOT / "deploy" / "rbac.yaml").read_text(), \
        "charts/karpy/files/rbac.yaml differs from deploy/rbac.yaml: run python scripts/gen_crds.py"
    # the kubelet bootstrap token's Role: with cloudProvider azure and the token in controller.env only
    assert rules(render()) == {k: v for k, v in rules(deploy).items() if k != ("Role", "karpenter-bootstrap-token")}
    for b in kinds(render())["ClusterRoleBinding"] + kinds(render())["RoleBinding"]:
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": "karpenter", "namespace": NAMESPACE}]
        assert b["roleRef"]["name"] == b["metadata"]["name"]
    extra = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
    core = next(d for d in render("--set-json", f"additionalClusterRoleRules=[{json.dumps(extra)}]")
                if d["metadata"]["name"] == "karpenter-core" and d["kind"] == "ClusterRole")
    assert core["rules"][-1] == extra


def test_azure_reads_only_its_bootstrap_tokens_secret(tmp_path):
    """cloudProvider azure: get on the Secret of the KUBELET_BOOTSTRAP_TOKEN in controller.env (kube-system/
    bootstrap-token-<id>), bound to the service account, so karpy reports the token's expiry."""
    docs = render("-f", str(azure_values(tmp_path)), "--set", "cloudProvider=azure")
    role = next(d for d in kinds(docs)["Role"] if d["metadata"]["name"].endswith("-bootstrap-token"))
    assert role["metadata"]["namespace"] == "kube-system"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                              "resourceNames": ["bootstrap-token-abcdef"]}]
    binding = next(d for d in kinds(docs)["RoleBinding"] if d["metadata"]["name"] == role["metadata"]["name"])
    assert binding["metadata"]["namespace"] == "kube-system"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    sa = deployment(docs)["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
    # the token through envFrom (a Secret): the chart cannot know its id, and grants nothing
    plain = render("--set", "cloudProvider=azure", "--set", "settings.clusterName=demo")
    assert not [d for d in kinds(plain).get("Role", []) if d["metadata"]["name"].endswith("-bootstrap-token")]


def test_servicemonitor_only_where_prometheus_operator_is_served():
    assert "ServiceMonitor" not in kinds(render("--set", "serviceMonitor.enabled=true"))
    assert "ServiceMonitor" not in kinds(render("--api-versions", "monitoring.coreos.com/v1"))
    (sm,) = kinds(render("--set", "serviceMonitor.enabled=true", "--api-versions", "monitoring.coreos.com/v1",
                         "--set", "serviceMonitor.sampleLimit=5000",
                         "--set", "serviceMonitor.endpointConfig.interval=15s"))["ServiceMonitor"]
    assert sm["spec"]["selector"]["matchLabels"] == SELECTOR
    assert sm["spec"]["sampleLimit"] == 5000
    assert sm["spec"]["endpoints"] == [{"port": "http-metrics", "path": "/metrics", "interval": "15s"}]


def test_image_name_is_a_value():
    assert container(render())["image"] == "ghcr.io/karpy/karpy:0.1.0"
    digest = "sha256:" + "ab" * 32
    c = container(render("--set", "controller.image.repository=registry.example/karpy",
                         "--set", "controller.image.tag=0.2.0", "--set", f"controller.image.digest={digest}",
                         "--set", "imagePullPolicy=Always"))
    assert (c["image"], c["imagePullPolicy"]) == (f"registry.example/karpy:0.2.0@{digest}", "Always")


# --- upstream's documented values -----------------------------------------------------------------------------


def test_upstreams_aws_getting_started_values_configure_karpy():
    docs = render(*UPSTREAM_AWS, *AWS)
    s = settings_of(docs)
    assert (s.cloud_provider, s.cluster_name) == ("aws", CLUSTER)
    assert (s.aws.cluster_name, s.aws.interruption_queue) == (CLUSTER, CLUSTER)
    assert (s.aws.isolated_vpc, s.aws.reserved_enis, s.aws.vm_memory_overhead_percent) == (False, 0, 0.075)
    assert container(docs)["resources"] == {"requests": {"cpu": 1, "memory": "1Gi"},
                                            "limits": {"cpu": 1, "memory": "1Gi"}}
    (sa,) = kinds(docs)["ServiceAccount"]
    assert sa["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": ROLE}  # IRSA
    # zonal shift is karpy's to name, not to drop silently
    ignored = deployment(docs)["metadata"]["annotations"]["karpy.dev/ignored-settings"]
    assert ignored == "settings.enableZonalShift=true: karpy does not follow zonal shifts"


def test_upstreams_aws_values_without_the_provider_are_refused_with_the_fix():
    err = template_error(*UPSTREAM_AWS)
    assert "settings.interruptionQueue: AWS settings, read with cloudProvider aws only" in err
    assert "--set cloudProvider=aws" in err


def test_upstreams_azure_values_template_configures_karpy(tmp_path):
    docs = render("-f", str(azure_values(tmp_path)), "--set", "cloudProvider=azure",
                  "--set", "settings.tags.team=infra", "--set", "settings.tags.env=dev")
    env = environment(docs)
    s = settings_of(docs)
    assert (s.cloud_provider, s.cluster_name, s.log_level) == ("azure", "demo", "debug")
    assert s.leader_elect is False  # DISABLE_LEADER_ELECTION=true, with replicas: 1
    assert deployment(docs)["spec"]["replicas"] == 1
    az = s.azure
    assert (az.subscription_id, az.location, az.node_resource_group, az.vnet_subnet_id) == \
        (SUBSCRIPTION, "eastus", "MC_rg_demo_eastus", SUBNET)
    assert (az.cluster_endpoint, az.kubelet_bootstrap_token, az.ssh_public_key) == \
        (AZURE_VARIABLES["CLUSTER_ENDPOINT"], "abcdef.0123456789abcdef", AZURE_VARIABLES["SSH_PUBLIC_KEY"])
    assert (az.network_plugin, az.network_plugin_mode, az.network_policy) == ("azure", "overlay", "cilium")
    assert (az.node_identities, az.kubelet_identity_client_id) == ([IDENTITY], AZURE_VARIABLES["KUBELET_IDENTITY_CLIENT_ID"])
    assert (az.provision_mode, az.arm_resource_group) == ("aksscriptless", "rg")
    assert az.additional_tags == {"env": "dev", "team": "infra"}
    assert s.feature_gates["StaticCapacity"] is True
    pod = deployment(docs)["spec"]["template"]
    assert pod["metadata"]["labels"]["azure.workload.identity/use"] == "true"
    (sa,) = kinds(docs)["ServiceAccount"]
    assert sa["metadata"]["name"] == "karpenter-sa" == pod["spec"]["serviceAccountName"]
    assert sa["metadata"]["annotations"] == {
        "azure.workload.identity/client-id": AZURE_VARIABLES["KARPENTER_USER_ASSIGNED_CLIENT_ID"]}
    read = set(ENV.values()) | set(AZURE_FALLBACK_ENV.values()) | {"DISABLE_LEADER_ELECTION"}
    assert set(env) - read <= AZURE_IGNORED, sorted(set(env) - read - AZURE_IGNORED)


# --- every settings key reaches karpy -------------------------------------------------------------------------

ON_AWS = ["cloudProvider=aws", "settings.clusterName=c"]
# (--set values, the karpy setting it must change, expected value)
KEYS = [
    (["settings.batchMaxDuration=30s"], "batch_max_duration", 30.0),
    (["settings.batchIdleDuration=500ms"], "batch_idle_duration", 0.5),
    (["settings.minValuesPolicy=BestEffort"], "min_values_policy", "BestEffort"),
    (["settings.clusterName=blue"], "cluster_name", "blue"),
    (["logLevel=debug"], "log_level", "debug"),
    (["controller.metrics.port=9090"], "metrics_port", 9090),
    (["controller.healthProbe.port=9091"], "health_probe_port", 9091),
    (["cloudProvider=simulated"], "cloud_provider", "simulated"),
    *[([f"settings.featureGates.{k}={v}"], f"feature_gates.{k[0].upper() + k[1:]}", v == "true")
      for k, v in [("nodeRepair", "true"), ("nodeOverlay", "true"), ("reservedCapacity", "false"),
                   ("spotToSpotConsolidation", "true"), ("staticCapacity", "true"), ("capacityBuffer", "true"),
                   ("costRefinement", "true"), ("zonePinning", "true")]],
    *[(ON_AWS + [k], a, v) for k, a, v in [
        ("settings.clusterEndpoint=https://ABC.gr7.us-west-2.eks.amazonaws.com", "aws.cluster_endpoint",
         "https://ABC.gr7.us-west-2.eks.amazonaws.com"),
        ("settings.clusterCABundle=LS0tLS1CRUdJTg==", "aws.cluster_ca_bundle", "LS0tLS1CRUdJTg=="),
        ("settings.isolatedVPC=true", "aws.isolated_vpc", True),
        ("settings.vmMemoryOverheadPercent=0.1", "aws.vm_memory_overhead_percent", 0.1),
        ("settings.interruptionQueue=q1", "aws.interruption_queue", "q1"),
        ("settings.reservedENIs=1", "aws.reserved_enis", 1),
    ]],
]


def _get(obj, path: str):
    for part in path.split("."):
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    return obj


def _sets(values: list[str]) -> list[str]:
    return [a for v in values for a in ("--set", v)]


@pytest.mark.parametrize("sets,attr,want", KEYS, ids=[k[1] for k in KEYS])
def test_each_setting_reaches_karpy(sets, attr, want):
    base = ON_AWS if sets[:len(ON_AWS)] == ON_AWS else []
    before = _get(settings_of(render(*_sets(base))), attr)
    assert before != want, f"{attr}: the default already is {want!r}; the test would prove nothing"
    assert _get(settings_of(render(*_sets(sets))), attr) == want


def test_the_release_namespace_holds_the_leader_lease():
    assert settings_of(template(namespace="platform"), "platform").namespace == "platform"


# --- what karpy cannot honour ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sets,message", [
    (["cloudProvider=gcp"], 'cloudProvider: "gcp" is not one of kwok, simulated, aws, azure'),
    (["cloudProvider=aws"], "settings.clusterName is required with cloudProvider aws"),
    (["settings.isolatedVPC=true", "settings.reservedENIs=2"],
     "settings.isolatedVPC, settings.reservedENIs: AWS settings, read with cloudProvider aws only (cloudProvider is kwok)"),
    (["settings.tags.team=x"], "settings.tags: an Azure setting, read with cloudProvider azure only"),
    (["settings.featureGates.nodeRepair=maybe"], "settings.featureGates.nodeRepair: maybe is not true or false"),
])
def test_values_karpy_cannot_honour_are_refused(sets, message):
    assert message in template_error(*_sets(sets))


def test_upstream_settings_karpy_lacks_are_named_on_the_deployment():
    dep = deployment(render("--set", "settings.preferencePolicy=Ignore", "--set", "settings.ignoreDRARequests=false",
                            "--set", "settings.disableClusterStateObservability=true",
                            "--set", "settings.awsFeatureGates.nodeClassCEL=true",
                            "--set-json", 'logOutputPaths=["/var/log/karpenter.log"]',
                            "--set", "additionalAnnotations.owner=platform"))
    notes = dep["metadata"]["annotations"]
    assert notes["owner"] == "platform"
    assert notes["karpy.dev/ignored-settings"].split("; ") == [
        "settings.preferencePolicy=Ignore: karpy always respects preferences",
        "settings.ignoreDRARequests=false: karpy always ignores DRA requests",
        "settings.disableClusterStateObservability=true: karpy always publishes cluster state metrics and events",
        "settings.awsFeatureGates.nodeClassCEL=true: karpy's image lacks the CEL library (karpy[cel]), set AWS_FEATURE_GATES in controller.env on an image that has it",
        "logOutputPaths: karpy writes every log line to standard output",
    ]
    assert "karpy.dev/ignored-settings" not in (deployment(render())["metadata"].get("annotations") or {})


# --- helm install into karpy sandbox ---------------------------------------------------------------------------


def test_helm_install_upgrade_uninstall_on_karpy_sandbox(sandbox):
    """What a user rehearses before a real cluster: install, upgrade, a server-side dry run, uninstall."""
    kc = str(sandbox)

    def run(*args: str) -> str:
        p = helm(*args, kubeconfig=kc)
        assert p.returncode == 0, p.stderr
        return p.stdout

    out = run("install", "karpenter", str(CHART), "--namespace", "kube-system", "--set", "settings.clusterName=sandbox")
    assert "STATUS: deployed" in out
    assert "karpy 0.1.0 runs as Deployment kube-system/karpenter with cloud provider kwok for cluster sandbox." in out
    api = KubeClient.from_kubeconfig(kc)
    (release,), _ = api.list("Secret", "kube-system", label_selector="owner=helm")
    assert (release["type"], release["metadata"]["labels"]["status"]) == ("helm.sh/release.v1", "deployed")
    dep = api.get("Deployment", "karpenter", "kube-system")
    assert dep["spec"]["replicas"] == 2
    assert settings_of([dep], "kube-system").cluster_name == "sandbox"

    # a server-side dry run creates nothing
    out = run("install", "other", str(CHART), "--namespace", "default", "--dry-run=server")
    assert "STATUS: pending-install" in out
    with pytest.raises(NotFound):
        api.get("Deployment", "other-karpenter", "default")

    run("upgrade", "karpenter", str(CHART), "--namespace", "kube-system", "--reuse-values", "--set", "logLevel=debug")
    dep = api.get("Deployment", "karpenter", "kube-system")
    assert settings_of([dep], "kube-system").log_level == "debug"
    run("rollback", "karpenter", "1", "--namespace", "kube-system")
    dep = api.get("Deployment", "karpenter", "kube-system")
    assert settings_of([dep], "kube-system").log_level == "info"
    history = run("history", "karpenter", "--namespace", "kube-system")
    assert "Install complete" in history and "Upgrade complete" in history and "Rollback to 1" in history

    assert "uninstalled" in run("uninstall", "karpenter", "--namespace", "kube-system")
    for kind, name, ns in (("Deployment", "karpenter", "kube-system"), ("ClusterRole", "karpenter-core", ""),
                           ("ServiceAccount", "karpenter", "kube-system")):
        with pytest.raises(NotFound):
            api.get(kind, name, ns)
    assert api.list("Secret", "kube-system", label_selector="owner=helm")[0] == []
    api.close()
