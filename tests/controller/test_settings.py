"""karpy controller settings: flags over upstream's environment variables over defaults; bad input exits 2."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from karpy.cli import main
from karpy.controller.settings import SettingsError, resolve

NONE = {"kubeconfig": None, "context": None, "namespace": None, "cloud_provider": None, "metrics_port": None,
        "health_probe_port": None, "leader_elect": None, "feature_gates": None, "batch_idle_duration": None,
        "batch_max_duration": None, "log_level": None, "cluster_name": None, "min_values_policy": None, "bind_address": None}


def flags(**kw):
    return {**NONE, **kw}


def test_defaults_are_upstreams(tmp_path):
    s = resolve(flags(), {}, service_account_namespace=str(tmp_path / "none"))
    assert (s.namespace, s.cloud_provider, s.metrics_port, s.health_probe_port, s.leader_elect) == \
        ("kube-system", "kwok", 8080, 8081, True)
    assert (s.batch_idle_duration, s.batch_max_duration, s.log_level) == (1.0, 10.0, "info")
    assert (s.lease_duration, s.renew_deadline, s.retry_period) == (15.0, 10.0, 2.0)
    assert s.feature_gates["SpotToSpotConsolidation"] is False


def test_environment_variables_are_read(tmp_path):
    env = {"METRICS_PORT": "9000", "HEALTH_PROBE_PORT": "9001", "LEADER_ELECT": "false",
           "FEATURE_GATES": "SpotToSpotConsolidation=true", "BATCH_IDLE_DURATION": "2s",
           "BATCH_MAX_DURATION": "1m", "LOG_LEVEL": "debug", "CLUSTER_NAME": "prod", "KUBECONFIG": "/a:/b"}
    s = resolve(flags(), env, service_account_namespace=str(tmp_path / "none"))
    assert (s.metrics_port, s.health_probe_port, s.leader_elect) == (9000, 9001, False)
    assert s.feature_gates["SpotToSpotConsolidation"] is True
    assert (s.batch_idle_duration, s.batch_max_duration, s.log_level, s.cluster_name) == (2.0, 60.0, "debug", "prod")
    assert s.kubeconfig == "/a"


def test_the_endpoints_bind_all_addresses_unless_told(tmp_path):
    none = str(tmp_path / "none")
    assert resolve(flags(), {}, service_account_namespace=none).bind_address == "0.0.0.0"
    assert resolve(flags(), {"BIND_ADDRESS": "127.0.0.1"}, service_account_namespace=none).bind_address == "127.0.0.1"
    assert resolve(flags(bind_address="::1"), {"BIND_ADDRESS": "127.0.0.1"},
                   service_account_namespace=none).bind_address == "::1"


def test_a_flag_wins_over_its_variable(tmp_path):
    env = {"METRICS_PORT": "9000", "LEADER_ELECT": "false", "BATCH_IDLE_DURATION": "2s", "LOG_LEVEL": "debug",
           "FEATURE_GATES": "SpotToSpotConsolidation=true"}
    s = resolve(flags(metrics_port="7000", leader_elect="true", batch_idle_duration="500ms", log_level="error",
                      feature_gates="SpotToSpotConsolidation=false"), env,
                service_account_namespace=str(tmp_path / "none"))
    assert (s.metrics_port, s.leader_elect, s.batch_idle_duration, s.log_level) == (7000, True, 0.5, "error")
    assert s.feature_gates["SpotToSpotConsolidation"] is False


def test_namespace_in_a_pod_is_the_service_accounts(tmp_path):
    f = tmp_path / "namespace"
    f.write_text("karpenter\n")
    assert resolve(flags(), {}, service_account_namespace=str(f)).namespace == "karpenter"
    assert resolve(flags(namespace="other"), {}, service_account_namespace=str(f)).namespace == "other"


@pytest.mark.parametrize("kw, env, needle", [
    ({"metrics_port": "http"}, {}, "--metrics-port"),
    ({}, {"HEALTH_PROBE_PORT": "70000"}, "HEALTH_PROBE_PORT"),
    ({"leader_elect": "maybe"}, {}, "--leader-elect"),
    ({}, {"FEATURE_GATES": "NoSuchGate=true"}, "unrecognized feature gate"),
    ({"feature_gates": "SpotToSpotConsolidation"}, {}, "KEY=true|false"),
    ({"batch_idle_duration": "soon"}, {}, "--batch-idle-duration"),
    ({}, {"BATCH_MAX_DURATION": "-1s"}, "BATCH_MAX_DURATION"),
    ({"log_level": "loud"}, {}, "--log-level"),
    ({"cloud_provider": "gcp"}, {}, "--cloud-provider"),
    ({"metrics_port": "9000", "health_probe_port": "9000"}, {}, "must differ"),
])
def test_invalid_settings_name_the_flag_or_variable(kw, env, needle, tmp_path):
    with pytest.raises(SettingsError, match=needle.replace("|", r"\|")):
        resolve(flags(**kw), env, service_account_namespace=str(tmp_path / "none"))


@pytest.mark.parametrize("args", [
    ["controller", "--log-level", "loud"],
    ["controller", "--leader-elect=sometimes"],
    ["controller", "--batch-max-duration", "forever"],
    ["controller", "--kubeconfig", "/nonexistent/kubeconfig"],
])
def test_bad_flags_exit_2_with_a_message_and_no_traceback(args):
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    assert "error:" in r.output and "Traceback" not in r.output


def test_bad_configuration_exits_2_from_the_command_line(tmp_path):
    bad = tmp_path / "kubeconfig"
    bad.write_text("clusters: [oops\n")
    p = subprocess.run([sys.executable, "-m", "karpy.cli", "controller", "--kubeconfig", str(bad)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "error: --kubeconfig" in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run([sys.executable, "-m", "karpy.cli", "controller"], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LOG_LEVEL": "verbose"})
    assert p.returncode == 2 and "LOG_LEVEL" in p.stderr and "Traceback" not in p.stderr


def test_reservations_file_is_read_and_checked(tmp_path):
    none = str(tmp_path / "none")
    good = tmp_path / "r.yaml"
    good.write_text("reservations:\n- {id: cr-1, instanceType: c-2x-amd64-linux, zone: test-zone-a, count: 2}\n")
    s = resolve(flags(reservations=str(good)), {}, service_account_namespace=none)
    assert s.reservations == [{"id": "cr-1", "instanceType": "c-2x-amd64-linux", "zone": "test-zone-a", "count": 2}]
    assert resolve(flags(), {"KARPY_RESERVATIONS_FILE": str(good)}, service_account_namespace=none).reservations
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {id: cr-1, instanceType: x, zone: z, count: -1}\n- {id: cr-1, instanceType: x, zone: z, count: 1}\n")
    with pytest.raises(SettingsError) as e:
        resolve(flags(reservations=str(bad)), {}, service_account_namespace=none)
    assert "--reservations" in str(e.value) and "reservations[0].count" in str(e.value) and "duplicate" in str(e.value)
    with pytest.raises(SettingsError, match="No such file or directory"):
        resolve(flags(reservations=str(tmp_path / "missing.yaml")), {}, service_account_namespace=none)
    with pytest.raises(SettingsError, match="only with --cloud-provider kwok or simulated"):
        resolve(flags(reservations=str(good), cloud_provider="aws"), {}, service_account_namespace=none)
